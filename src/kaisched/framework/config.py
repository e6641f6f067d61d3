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
scenarioSearchBudgets:        # KAI v0.17's wall-clock bounds of the victim search (docs/evictions.md)
  maxActionSearchDuration: {default: 5m}
  maxJobSearchDuration: 4m
```
Omitted parts take KAI's built-in defaults, except ``scenarioSearchBudgets``: without the block the victim
search has no budget at all (KAI fills in its defaults; docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kaisched.k8s.loader import InputLimits, InputReadError, read_text_reasoned

if TYPE_CHECKING:
    from kaisched.framework.usage_config import UsageDBConfig

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


def _parse_nonnegative_duration(value: object, name: str) -> timedelta:
    duration = _parse_duration(value, name)
    if duration < timedelta(0):
        raise ConfigError(f"params.{name}: expected a duration of 0 or more, got {value!r}")
    return duration


def _parse_duration(value: object, name: str) -> timedelta:  # (a negative grace period: KAI never evicts)
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


def _parse_ratio(value: object, name: str) -> float:
    """A non-negative finite number (0: off), as a number or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"params.{name}: expected a number >= 0 (0 turns it off), got {value!r}")
    try:
        ratio = float(value)
    except ValueError:
        raise ConfigError(f"params.{name}: expected a number >= 0 (0 turns it off), got {value!r}") from None
    if not ratio >= 0 or ratio == float("inf"):
        raise ConfigError(f"params.{name}: expected a number >= 0 (0 turns it off), got {value!r}")
    return ratio


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
    # kaisched's eviction storm guard (docs/evictions.md): a reclaim or preempt scenario may evict at most this
    # many GPUs per GPU its preemptor gains; 0 turns it off
    max_evicted_gpus_ratio: float = 0.0
    # kaisched's memory of the pods evicted for a job (model/victim_memory.py, docs/evictions.md): a pod evicted for a
    # job is not evicted again for it for this long while the job waits; 0 turns it off (KAI's behaviour)
    victim_memory: timedelta = timedelta(minutes=10)

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
            "max-evicted-gpus-ratio": ("max_evicted_gpus_ratio", _parse_ratio),
            "victim-memory": ("victim_memory", _parse_nonnegative_duration),
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


BUDGETS = "scenarioSearchBudgets"
BUDGET_DEFAULT = "default"
#: the keys of ``maxActionSearchDuration`` (besides ``default``, the eviction actions)
BUDGET_ACTIONS = ("reclaim", "preempt", "consolidation")
#: KAI's scenario generators, the keys of ``maxGeneratorSearchDuration`` besides ``default``. kaisched has one
#: generator, the by-node search (the recorded victims plus one node's victims): KAI's NodeLocalGreedy shape.
#: ``MultiNodeGang`` is accepted and validated, and bounds nothing.
NODE_LOCAL_GREEDY = "NodeLocalGreedy"
MULTI_NODE_GANG = "MultiNodeGang"
BUDGET_GENERATORS = (NODE_LOCAL_GREEDY, MULTI_NODE_GANG)
# KAI v0.17's defaults (pkg/common/constants): what applies to a field the block leaves out
DEFAULT_ACTION_BUDGET = timedelta(minutes=5)
DEFAULT_JOB_BUDGET = timedelta(minutes=4)
DEFAULT_MIN_JOB_BUDGET = timedelta(0)
DEFAULT_GENERATOR_BUDGET = timedelta(minutes=2)
DEFAULT_GENERATOR_BUDGETS = {NODE_LOCAL_GREEDY: timedelta(seconds=30), MULTI_NODE_GANG: timedelta(minutes=2)}


def go_duration(value: timedelta) -> str:
    """A duration as Go's ``time.Duration.String`` writes it (``5m0s``, ``30s``, ``250ms``, ``0s``), to the
    microsecond."""
    us = value // timedelta(microseconds=1)
    if us == 0:
        return "0s"
    sign = "-" if us < 0 else ""
    us = abs(us)

    def fraction(whole: int, part: int, digits: int) -> str:
        return f"{whole}.{part:0{digits}d}".rstrip("0") if part else str(whole)

    if us < 1000:
        return f"{sign}{us}µs"
    if us < 1_000_000:
        return f"{sign}{fraction(us // 1000, us % 1000, 3)}ms"
    hours, rest = divmod(us, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{fraction(rest // 1_000_000, rest % 1_000_000, 6)}s"


def _budget_duration(value: object, where: str) -> timedelta:
    """A non-negative Go duration string (``metav1.Duration``), or a ConfigError naming ``where``."""
    if isinstance(value, timedelta):
        parsed = value
    elif isinstance(value, str):
        from kaisched.k8s.quantity import parse_duration

        try:
            parsed = parse_duration(value)
        except ValueError:
            raise ConfigError(f"{where}: must be a valid Go duration like '5m', '30s' or '250ms', got {value!r}"
                              ) from None
    else:
        raise ConfigError(f"{where}: must be a valid Go duration like '5m', '30s' or '250ms' (a string), "
                          f"got {value!r}")
    if parsed < timedelta(0):
        raise ConfigError(f"{where}: must be non-negative, got {value!r}")
    return parsed


def _budget_map(raw: object, name: str, known: tuple[str, ...], what: str) -> dict[str, timedelta]:
    where = f"{BUDGETS}.{name}"
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of {what} name to duration")
    out: dict[str, timedelta] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown {what} {str(key)!r} (known: {', '.join(known)})")
        out[str(key)] = _budget_duration(value, f'{where}["{key}"]')
    return out


def _seconds(value: timedelta) -> float:
    return value.total_seconds()


@dataclass(frozen=True, slots=True)
class SearchBudgets:
    """KAI v0.17's ``scenarioSearchBudgets``: wall-clock bounds of the eviction actions' victim search
    (actions/common/solvers/search_budget.go), as configured. A field the block leaves out (None, or a key
    missing from a map) takes KAI's default; for the max budgets 0 means unlimited, for the min 0 disables
    it. The effective limits, in seconds, come from the methods. (A configuration without the block has
    no budgets at all: ``SchedulerConfig.search_budgets`` is None.)"""

    max_action: Mapping[str, timedelta] = field(default_factory=dict)  # default | reclaim | preempt | consolidation
    max_job: timedelta | None = None
    min_job: timedelta | None = None
    max_generator: Mapping[str, timedelta] = field(default_factory=dict)  # default | NodeLocalGreedy | MultiNodeGang

    def action_limit(self, action: str) -> float:
        """The action's own key, else ``default``, else 5 minutes (0: unlimited)."""
        value = self.max_action.get(action)
        if value is None:
            value = self.max_action.get(BUDGET_DEFAULT, DEFAULT_ACTION_BUDGET)
        return _seconds(value)

    def job_limit(self) -> float:
        """Per pending job (0: unlimited)."""
        return _seconds(DEFAULT_JOB_BUDGET if self.max_job is None else self.max_job)

    def min_job_limit(self) -> float:
        """The best-effort floor per job (0: disabled)."""
        return _seconds(DEFAULT_MIN_JOB_BUDGET if self.min_job is None else self.min_job)

    def generator_limit(self, generator: str) -> float:
        """A known generator's own key, else the configured ``default``, else its own default (30 s for
        NodeLocalGreedy, 2 minutes for MultiNodeGang); any other name: ``default``, else 2 minutes."""
        value = self.max_generator.get(generator)
        if value is None:
            value = self.max_generator.get(BUDGET_DEFAULT)
        if value is None:
            value = DEFAULT_GENERATOR_BUDGETS.get(generator, DEFAULT_GENERATOR_BUDGET)
        return _seconds(value)

    def generator_limits(self) -> dict[str, float]:
        """The limit of ``default`` and of every known generator (KAI's configured-budget gauges)."""
        return {name: self.generator_limit(name) for name in (BUDGET_DEFAULT, *BUDGET_GENERATORS)}

    @classmethod
    def kai_defaults(cls) -> SearchBudgets:
        """The block KAI's operator renders when a SchedulingShard sets none (v0.17)."""
        return cls(max_action={BUDGET_DEFAULT: DEFAULT_ACTION_BUDGET}, max_job=DEFAULT_JOB_BUDGET,
                   min_job=DEFAULT_MIN_JOB_BUDGET,
                   max_generator={BUDGET_DEFAULT: DEFAULT_GENERATOR_BUDGET, **DEFAULT_GENERATOR_BUDGETS})

    @classmethod
    def from_mapping(cls, raw: object) -> SearchBudgets:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{BUDGETS}: expected a mapping with maxActionSearchDuration, maxJobSearchDuration, "
                              "minJobSearchDuration and maxGeneratorSearchDuration")
        known = ("maxActionSearchDuration", "maxJobSearchDuration", "minJobSearchDuration",
                 "maxGeneratorSearchDuration")
        for key in raw:
            if key not in known:
                raise ConfigError(f"{BUDGETS}.{key}: unknown field (known: {', '.join(known)})")
        max_action = _budget_map(raw.get("maxActionSearchDuration"), "maxActionSearchDuration",
                                 (BUDGET_DEFAULT, *BUDGET_ACTIONS), "action")
        max_generator = _budget_map(raw.get("maxGeneratorSearchDuration"), "maxGeneratorSearchDuration",
                                    (BUDGET_DEFAULT, *BUDGET_GENERATORS), "generator")
        max_job: timedelta | None = None
        min_job: timedelta | None = None
        if raw.get("maxJobSearchDuration") is not None:
            max_job = _budget_duration(raw["maxJobSearchDuration"], f"{BUDGETS}.maxJobSearchDuration")
        if raw.get("minJobSearchDuration") is not None:
            min_job = _budget_duration(raw["minJobSearchDuration"], f"{BUDGETS}.minJobSearchDuration")
        budgets = cls(max_action=max_action, max_job=max_job, min_job=min_job, max_generator=max_generator)
        high, low = budgets.job_limit(), budgets.min_job_limit()
        if high and low >= high:
            which = "" if max_job is not None else " (KAI's default maxJobSearchDuration)"
            low_text, high_text = go_duration(timedelta(seconds=low)), go_duration(timedelta(seconds=high))
            raise ConfigError(
                f"{BUDGETS}: minJobSearchDuration must be less than maxJobSearchDuration: {low_text} is not less "
                f"than {high_text}{which}; a maxJobSearchDuration of 0s sets no per-job limit")
        return budgets

    def to_mapping(self) -> dict[str, Any]:
        """The block in KAI's format, as configured (Go duration strings; fields left out stay out)."""
        out: dict[str, Any] = {}
        if self.max_action:
            out["maxActionSearchDuration"] = {k: go_duration(v) for k, v in self.max_action.items()}
        if self.max_job is not None:
            out["maxJobSearchDuration"] = go_duration(self.max_job)
        if self.min_job is not None:
            out["minJobSearchDuration"] = go_duration(self.min_job)
        if self.max_generator:
            out["maxGeneratorSearchDuration"] = {k: go_duration(v) for k, v in self.max_generator.items()}
        return out


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    actions_explicit: bool = False  # False: KAI's default list (only the actions this version has run)
    tiers: tuple[tuple[PluginOption, ...], ...] = (DEFAULT_PLUGINS,)
    queue_depth_per_action: Mapping[str, int] = field(default_factory=dict)
    params: SchedulerParams = field(default_factory=SchedulerParams)
    #: ``scenarioSearchBudgets``; None (no block): the victim search is unbounded, decisions never depend on timing
    search_budgets: SearchBudgets | None = None
    #: ``usageDBConfig`` (time-based fair share, kaisched.framework.usage_config); None: weight-only division
    usage_db: UsageDBConfig | None = None

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
        known = {"actions", "tiers", "queueDepthPerAction", "params", "usageDBConfig", BUDGETS}
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
        budgets = SearchBudgets.from_mapping(raw[BUDGETS]) if raw.get(BUDGETS) is not None else None
        usage_db = None
        if raw.get("usageDBConfig") is not None:
            from kaisched.framework.usage_config import UsageDBConfig

            usage_db = UsageDBConfig.from_mapping(raw["usageDBConfig"])
        return cls(actions=actions, actions_explicit=explicit, tiers=tiers, queue_depth_per_action=depth, params=params,
                   search_budgets=budgets, usage_db=usage_db)

    @classmethod
    def load(cls, path: str | Path, limits: InputLimits | None = None) -> SchedulerConfig:
        """The configuration of a file (empty: the defaults), read within ``limits`` (default
        :meth:`InputLimits.from_env`: ``KAISCHED_MAX_INPUT_BYTES``, ``KAISCHED_INPUT_TIMEOUT``); a file that
        cannot be read, is over the limits (``/dev/zero``, a FIFO nobody writes to) or is not valid YAML is a
        :class:`ConfigError` naming it."""
        try:
            text = read_text_reasoned(path, limits, source=str(path))
        except InputReadError as exc:
            raise ConfigError(str(exc)) from None
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
