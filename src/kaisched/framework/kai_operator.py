"""The scheduler configuration KAI's operator renders from a ``SchedulingShard`` (``kai.scheduler/v1``) and the
``kai-config`` ``Config`` (kai-spec 1.8, 2.5, 2.6): what ``kaisched run`` takes when it is given no ``--config`` and
the cluster still has KAI's objects (KAI's chart keeps its ``default`` shard on uninstall).

The operator's rules, as KAI applies them (``SchedulingShardSpec.SetDefaultsWhereNeeded``):

* ``placementStrategy.gpu`` / ``.cpu``: ``binpack`` by default; the ``nodeplacement`` plugin's ``gpu``/``cpu``
  arguments. GPU binpack enables ``gpupack`` and ``gpusharingorder``, GPU spread ``gpuspread``; either one
  ``spread`` disables the ``consolidation`` action.
* ``kValue`` -> ``proportion``'s ``kValue``; ``minRuntime.preemptMinRuntime`` / ``.reclaimMinRuntime`` ->
  ``minruntime``'s ``defaultPreemptMinRuntime`` / ``defaultReclaimMinRuntime``.
* ``plugins`` / ``actions``: ``{enabled, priority, arguments}`` merged over the defaults (arguments replace the
  default ones wholesale; a new name is enabled with priority 0); one tier, plugins by priority (highest first,
  then by name); actions likewise.
* ``queueDepthPerAction``, ``usageDBConfig`` and ``scenarioSearchBudgets`` are copied (KAI v0.17's default budgets
  when the shard sets none); ``args`` are scheduler flags.
* ``Config.spec.global.schedulerName`` is the scheduler name; ``spec.podGrouper.defaultPrioritiesConfigMapName`` /
  ``Namespace`` name the pod-grouper's defaults ConfigMap.

Nothing is dropped silently: what kaisched does not take is in :attr:`ShardConfig.notes`; what it cannot use is a
:class:`ConfigError` naming the object and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kaisched.framework.config import ConfigError, SchedulerConfig, SchedulerParams, SearchBudgets
from kaisched.k8s.kai_snapshot import mapping_at as expect_mapping

BINPACK: Final = "binpack"
SPREAD: Final = "spread"
#: KAI's default plugins and their priorities (higher runs first)
PLUGIN_PRIORITIES: Final[Mapping[str, int]] = {
    "predicates": 1900, "proportion": 1800, "priority": 1700, "nodeavailability": 1600, "resourcetype": 1500,
    "podaffinity": 1400, "elastic": 1300, "kubeflow": 1200, "ray": 1100, "subgrouporder": 1000, "taskorder": 900,
    "nominatednode": 800, "dynamicresources": 700, "minruntime": 600, "topology": 500, "snapshot": 400,
    "sg-nodelocalgreedy": 360, "sg-multinodegang": 350,  # KAI v0.16+: the eviction search's scenario generators
    "gpupack": 300, "gpuspread": 300, "nodeplacement": 200, "gpusharingorder": 100,
}
ACTION_PRIORITIES: Final[Mapping[str, int]] = {
    "allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200, "stalegangeviction": 100,
}
#: flags of KAI's scheduler that are options of ``kaisched run`` (not scheduler params)
RUN_FLAGS: Final = frozenset({"schedule-period", "leader-elect", "listen-address", "lease-name", "lease-namespace",
                              "leader-elect-lease-duration", "leader-elect-renew-deadline",
                              "leader-elect-retry-period"})
SHARD_FIELDS: Final = ("args", "placementStrategy", "partitionLabelValue", "queueDepthPerAction", "minRuntime",
                       "kValue", "usageDBConfig", "plugins", "actions", "scenarioSearchBudgets")


@dataclass(slots=True)
class ShardConfig:
    """The configuration of one shard in KAI's scheduler-config format (:meth:`SchedulerConfig.from_mapping`), and
    what kaisched did not take of the shard and the Config, as sentences."""

    mapping: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def config(self) -> SchedulerConfig:
        return SchedulerConfig.from_mapping(self.mapping)


def _name(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{kind} {name}" if isinstance(name, str) and name else kind


def mapping_at(value: object, where: str) -> Mapping[str, Any]:
    """``value`` when it is a mapping ({} for None), else a ConfigError naming ``where``."""
    return expect_mapping(value, where, ConfigError)


def _strategy(placement: Mapping[str, Any], key: str, where: str) -> str:
    value = placement.get(key) or BINPACK
    if value not in (BINPACK, SPREAD):
        raise ConfigError(f"{where}.placementStrategy.{key}: expected binpack or spread, got {value!r}")
    return str(value)


def _overrides(raw: Mapping[str, Any], where: str, with_arguments: bool) -> dict[str, tuple[bool | None, int | None,
                                                                                             dict[str, str] | None]]:
    out: dict[str, tuple[bool | None, int | None, dict[str, str] | None]] = {}
    for name, value in raw.items():
        item = mapping_at(value, f"{where}.{name}")
        enabled, priority, arguments = item.get("enabled"), item.get("priority"), item.get("arguments")
        if enabled is not None and not isinstance(enabled, bool):
            raise ConfigError(f"{where}.{name}.enabled: expected true or false, got {enabled!r}")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise ConfigError(f"{where}.{name}.priority: expected an integer, got {priority!r}")
        args: dict[str, str] | None = None
        if with_arguments and arguments is not None:
            args = {str(k): str(v) for k, v in mapping_at(arguments, f"{where}.{name}.arguments").items()}
        out[str(name)] = (enabled, priority, args)
    return out


def _ordered(entries: Mapping[str, tuple[bool, int]]) -> list[str]:
    """Enabled names by priority, highest first, then by name (the operator's order)."""
    return [n for n, (on, _) in sorted(entries.items(), key=lambda kv: (-kv[1][1], kv[0])) if on]


def shard_config(shard: Mapping[str, Any], kai_config: Mapping[str, Any] | None = None) -> ShardConfig:
    """The scheduler configuration KAI's operator renders for ``shard`` (a SchedulingShard object), with the
    scheduler name and pod-grouper defaults of ``kai_config`` (the ``kai-config`` Config object) when given."""
    where = f"{_name(shard, 'SchedulingShard')}: spec"
    spec = mapping_at(shard.get("spec"), where)
    notes: list[str] = []
    for key in spec:
        if key not in SHARD_FIELDS:
            notes.append(f"{where}.{key}: not a SchedulingShard field kaisched knows; ignored")
    partition = spec.get("partitionLabelValue") or ""
    if partition:
        raise ConfigError(f"{where}.partitionLabelValue: {partition!r}: kaisched run schedules the whole cluster as "
                          "one shard (no node pools); run it for the default shard (partitionLabelValue empty)")
    placement = mapping_at(spec.get("placementStrategy"), f"{where}.placementStrategy")
    gpu, cpu = _strategy(placement, "gpu", where), _strategy(placement, "cpu", where)

    plugins: dict[str, tuple[bool, int]] = {n: (True, p) for n, p in PLUGIN_PRIORITIES.items()}
    plugins["gpusharingorder"] = (gpu == BINPACK, plugins["gpusharingorder"][1])
    plugins["gpupack"] = (gpu == BINPACK, plugins["gpupack"][1])
    plugins["gpuspread"] = (gpu == SPREAD, plugins["gpuspread"][1])
    arguments: dict[str, dict[str, str]] = {"nodeplacement": {"gpu": gpu, "cpu": cpu}}
    k_value = spec.get("kValue")
    if k_value is not None:
        if isinstance(k_value, bool) or not isinstance(k_value, int | float):
            raise ConfigError(f"{where}.kValue: expected a number, got {k_value!r}")
        arguments["proportion"] = {"kValue": format(float(k_value), "g")}
    min_runtime = mapping_at(spec.get("minRuntime"), f"{where}.minRuntime")
    for key, argument in (("preemptMinRuntime", "defaultPreemptMinRuntime"),
                          ("reclaimMinRuntime", "defaultReclaimMinRuntime")):
        if min_runtime.get(key) is not None:
            arguments.setdefault("minruntime", {})[argument] = str(min_runtime[key])
    for name, (enabled, priority, args) in _overrides(mapping_at(spec.get("plugins"), f"{where}.plugins"),
                                                      f"{where}.plugins", True).items():
        on, prio = plugins.get(name, (True, 0))
        plugins[name] = (on if enabled is None else enabled, prio if priority is None else priority)
        if args is not None:
            arguments[name] = args

    actions: dict[str, tuple[bool, int]] = {n: (True, p) for n, p in ACTION_PRIORITIES.items()}
    actions["consolidation"] = (gpu != SPREAD and cpu != SPREAD, actions["consolidation"][1])
    for name, (enabled, priority, _) in _overrides(mapping_at(spec.get("actions"), f"{where}.actions"),
                                                   f"{where}.actions", False).items():
        on, prio = actions.get(name, (True, 0))
        actions[name] = (on if enabled is None else enabled, prio if priority is None else priority)

    mapping: dict[str, Any] = {
        "actions": ", ".join(_ordered(actions)),
        "tiers": [{"plugins": [{"name": n, **({"arguments": arguments[n]} if arguments.get(n) else {})}
                               for n in _ordered(plugins)]}],
    }
    if spec.get("queueDepthPerAction") is not None:
        mapping["queueDepthPerAction"] = dict(mapping_at(spec["queueDepthPerAction"], f"{where}.queueDepthPerAction"))
    if spec.get("usageDBConfig") is not None:
        mapping["usageDBConfig"] = dict(mapping_at(spec["usageDBConfig"], f"{where}.usageDBConfig"))
    budgets = spec.get("scenarioSearchBudgets")
    mapping["scenarioSearchBudgets"] = (dict(mapping_at(budgets, f"{where}.scenarioSearchBudgets")) if budgets
                                        else SearchBudgets.kai_defaults().to_mapping())
    params: dict[str, Any] = {}
    for key, value in mapping_at(spec.get("args"), f"{where}.args").items():
        key = str(key)
        if key in RUN_FLAGS:
            notes.append(f"{where}.args.{key}: an option of kaisched run (--{key}); give it there, not applied")
            continue
        try:
            SchedulerParams.from_mapping({key: value})
        except ConfigError as exc:
            if "unknown scheduler parameter" in str(exc):
                notes.append(f"{where}.args.{key}: a KAI scheduler flag kaisched does not implement; ignored")
                continue
            raise ConfigError(f"{where}.args.{key}: {str(exc).split(': ', 1)[-1]}") from None
        params[key] = value
    if kai_config is not None:
        params.update(_config_params(kai_config, notes))
    if params:
        mapping["params"] = params
    try:
        SchedulerConfig.from_mapping(mapping)
    except ConfigError as exc:
        raise ConfigError(f"{_name(shard, 'SchedulingShard')}: {exc}") from None
    return ShardConfig(mapping, notes)


def _config_params(kai_config: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    where = f"{_name(kai_config, 'Config')}: spec"
    spec = mapping_at(kai_config.get("spec"), where)
    glob = mapping_at(spec.get("global"), f"{where}.global")
    params: dict[str, Any] = {}
    name = glob.get("schedulerName")
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.global.schedulerName: expected a non-empty string, got {name!r}")
        params["scheduler-name"] = name
    grouper = mapping_at(spec.get("podGrouper"), f"{where}.podGrouper")
    for key, param in (("defaultPrioritiesConfigMapName", "default-priorities-configmap-name"),
                       ("defaultPrioritiesConfigMapNamespace", "default-priorities-configmap-namespace")):
        value = grouper.get(key)
        if value:
            params[param] = str(value)
    for key, default in (("queueLabelKey", "kai.scheduler/queue"), ("nodePoolLabelKey", "kai.scheduler/node-pool")):
        value = glob.get(key)
        if value and value != default:
            notes.append(f"{where}.global.{key}: {value!r} is not supported (kaisched uses {default})")
    return params
