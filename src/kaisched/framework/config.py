"""Scheduler configuration in KAI's format (spec 4.1), plus KAI's command-line parameters.

```yaml
actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
tiers:
- plugins:
  - name: proportion
    arguments: {kValue: "1.0"}
queueDepthPerAction: {allocate: 100}
params:                       # KAI scheduler flags by their flag names
  max-consolidation-preemptees: 16
  default-staleness-grace-period: 60s
```
Omitted parts take KAI's built-in defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

DEFAULT_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


class ConfigError(ValueError):
    """A scheduler configuration that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class PluginOption:
    name: str
    arguments: Mapping[str, str] = field(default_factory=dict)


DEFAULT_PLUGINS: tuple[PluginOption, ...] = (
    PluginOption("predicates"),
    PluginOption("proportion"),
    PluginOption("priority"),
    PluginOption("elastic"),
    PluginOption("kubeflow"),
    PluginOption("ray"),
    PluginOption("nodeavailability"),
    PluginOption("gpusharingorder"),
    PluginOption("gpupack"),
    PluginOption("resourcetype"),
    PluginOption("subgrouporder"),
    PluginOption("taskorder"),
    PluginOption("nominatednode"),
    PluginOption("dynamicresources"),
    PluginOption("nodeplacement", {"cpu": "binpack", "gpu": "binpack"}),
    PluginOption("minruntime"),
    PluginOption("topology"),
    PluginOption("snapshot"),
)


def _parse_duration(value: object, name: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ConfigError(f"params.{name}: expected a duration like '60s', got {value!r}")
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        from kaisched.k8s.quantity import parse_duration

        try:
            return parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"params.{name}: {exc}") from None
    raise ConfigError(f"params.{name}: expected a duration like '60s', got {value!r}")


def _parse_bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"params.{name}: expected true or false, got {value!r}")


def _parse_int(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"params.{name}: expected an integer, got {value!r}")
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError(f"params.{name}: expected an integer, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    """KAI scheduler flags (cmd/scheduler/app/options) with KAI's defaults."""

    max_consolidation_preemptees: int = 16
    allow_consolidating_reclaim: bool = True
    default_staleness_grace_period: timedelta = timedelta(seconds=60)
    full_hierarchy_fairness: bool = True
    use_scheduling_signatures: bool = True
    detailed_fit_errors: bool = False
    scheduler_name: str = "kai-scheduler"
    update_pod_eviction_condition: bool = False
    restrict_node_scheduling: bool = False
    # the pod-grouper's optional per-kind defaults (a ConfigMap whose "types" key lists them, spec 10.3)
    default_priorities_configmap_name: str = ""
    default_priorities_configmap_namespace: str = ""

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> SchedulerParams:
        p = cls()
        kinds = {
            "max-consolidation-preemptees": ("max_consolidation_preemptees", _parse_int),
            "allow-consolidating-reclaim": ("allow_consolidating_reclaim", _parse_bool),
            "default-staleness-grace-period": ("default_staleness_grace_period", _parse_duration),
            "full-hierarchy-fairness": ("full_hierarchy_fairness", _parse_bool),
            "use-scheduling-signatures": ("use_scheduling_signatures", _parse_bool),
            "detailed-fit-errors": ("detailed_fit_errors", _parse_bool),
            "update-pod-eviction-condition": ("update_pod_eviction_condition", _parse_bool),
            "restrict-node-scheduling": ("restrict_node_scheduling", _parse_bool),
        }
        updates: dict[str, Any] = {}
        strings = {"scheduler-name": "scheduler_name",
                   "default-priorities-configmap-name": "default_priorities_configmap_name",
                   "default-priorities-configmap-namespace": "default_priorities_configmap_namespace"}
        for key, value in raw.items():
            if key in strings:
                if not isinstance(value, str) or (key == "scheduler-name" and not value):
                    raise ConfigError(f"params.{key}: expected a non-empty string")
                updates[strings[key]] = value
                continue
            entry = kinds.get(str(key))
            if entry is None:
                known = ", ".join(sorted([*kinds, *strings]))
                raise ConfigError(f"params.{key}: unknown scheduler parameter (known: {known})")
            attr, conv = entry
            updates[attr] = conv(value, str(key))
        return replace(p, **updates)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    actions_explicit: bool = False  # False: KAI's default list (only the actions this version has run)
    tiers: tuple[tuple[PluginOption, ...], ...] = (DEFAULT_PLUGINS,)
    queue_depth_per_action: Mapping[str, int] = field(default_factory=dict)
    params: SchedulerParams = field(default_factory=SchedulerParams)

    @property
    def plugins(self) -> tuple[PluginOption, ...]:
        return tuple(p for tier in self.tiers for p in tier)

    def plugin(self, name: str) -> PluginOption | None:
        return next((p for p in self.plugins if p.name == name), None)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> SchedulerConfig:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError("scheduler config: expected a mapping with actions/tiers/params")
        known = {"actions", "tiers", "queueDepthPerAction", "params", "usageDBConfig"}
        for key in raw:
            if key not in known:
                raise ConfigError(f"{key}: unknown configuration field (known: {', '.join(sorted(known))})")
        actions: tuple[str, ...] = DEFAULT_ACTIONS
        explicit = raw.get("actions") not in (None, "", [])  # empty: KAI's default list
        if explicit:
            value = raw["actions"]
            if isinstance(value, str):
                actions = tuple(a.strip() for a in value.split(",") if a.strip())
            elif isinstance(value, list) and all(isinstance(a, str) for a in value):
                actions = tuple(a.strip() for a in value)
            else:
                raise ConfigError("actions: expected a comma separated string of action names")
        tiers: tuple[tuple[PluginOption, ...], ...] = (DEFAULT_PLUGINS,)
        if raw.get("tiers"):  # missing or empty: KAI's default plugins (ResolveConfigurationFromFile)
            tiers = _parse_tiers(raw["tiers"])
        depth: dict[str, int] = {}
        if raw.get("queueDepthPerAction") is not None:
            q = raw["queueDepthPerAction"]
            if not isinstance(q, Mapping):
                raise ConfigError("queueDepthPerAction: expected a mapping of action name to depth")
            for k, v in q.items():
                n = _parse_int(v, f"queueDepthPerAction.{k}").__int__()
                if n < 0:
                    raise ConfigError(f"queueDepthPerAction.{k}: must be >= 0")
                depth[str(k)] = n
        params = SchedulerParams.from_mapping(raw.get("params") or {})
        return cls(actions=actions, actions_explicit=explicit, tiers=tiers, queue_depth_per_action=depth, params=params)

    @classmethod
    def load(cls, path: str | Path) -> SchedulerConfig:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read scheduler config: {exc.strerror}") from None
        try:
            raw = yaml.load(text, Loader=yaml.CSafeLoader)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
        if raw is None:
            return cls()
        return cls.from_mapping(raw)


def _parse_tiers(value: object) -> tuple[tuple[PluginOption, ...], ...]:
    if not isinstance(value, list):
        raise ConfigError("tiers: expected a list of {plugins: [...]}")
    tiers: list[tuple[PluginOption, ...]] = []
    for i, tier in enumerate(value):
        if not isinstance(tier, Mapping) or not isinstance(tier.get("plugins", []), list):
            raise ConfigError(f"tiers[{i}]: expected a mapping with a 'plugins' list")
        plugins: list[PluginOption] = []
        for j, p in enumerate(tier.get("plugins") or []):
            if not isinstance(p, Mapping) or not isinstance(p.get("name"), str) or not p["name"]:
                raise ConfigError(f"tiers[{i}].plugins[{j}]: expected a mapping with a 'name'")
            args = p.get("arguments") or {}
            if not isinstance(args, Mapping):
                raise ConfigError(f"tiers[{i}].plugins[{j}].arguments: expected a mapping")
            plugins.append(PluginOption(p["name"], {str(k): str(v) for k, v in args.items()}))
        tiers.append(tuple(plugins))
    return tuple(tiers)
