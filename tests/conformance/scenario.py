"""Typed model of the KAI conformance scenarios (``shared/conformance/kai/*.yaml``).

The YAML leaves out whatever the Go source left out; :func:`load_scenarios` applies every default of
the corpus README, section 4, so the rest of the harness never looks at a raw dict. A scenario is
immutable; the integration harness produces the next round's state with :meth:`Scenario.with_tasks`.

Units follow the corpus: node and pod CPU in millicores, node and pod memory in bytes, queue CPU in
millicores, queue memory in MB (10**6 bytes), GPUs in devices (fractions for shared GPUs).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

ENV_DIR = "KAISCHED_CONFORMANCE_DIR"

# ------------------------------------------------------------------------------------------------
# Constants of the KAI test harness

ALL_ACTIONS: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")

# KAI's defaultSchedulerConf plugin list (one tier), in order.
DEFAULT_PLUGINS: tuple[Mapping[str, Any], ...] = (
    {"name": "predicates"},
    {"name": "proportion"},
    {"name": "priority"},
    {"name": "elastic"},
    {"name": "kubeflow"},
    {"name": "ray"},
    {"name": "nodeavailability"},
    {"name": "gpusharingorder"},
    {"name": "gpupack"},
    {"name": "resourcetype"},
    {"name": "subgrouporder"},
    {"name": "taskorder"},
    {"name": "nominatednode"},
    {"name": "dynamicresources"},
    {"name": "nodeplacement", "arguments": {"cpu": "binpack", "gpu": "binpack"}},
    {"name": "minruntime"},
    {"name": "topology"},
    {"name": "snapshot"},
)

# KAI pod_status groups (README section 2).
ACTIVE_USED = frozenset({"Allocated", "Pipelined", "Binding", "Bound", "Running", "Releasing"})
ACTIVE_ALLOCATED = ACTIVE_USED - {"Releasing"}
ALLOCATED = frozenset({"Allocated", "Bound", "Binding", "Running"})

DEFAULT_NODE_CPU_MILLIS = 20_000_000
DEFAULT_NODE_MEMORY_BYTES = 20_000_000_000
NODE_CPU_CAPACITY_MILLIS = 30_000_000
NODE_MEMORY_CAPACITY_BYTES = 30_000_000_000
DEFAULT_GPU_MEMORY_MIB = 100
DEFAULT_NODE_PODS = 110

DEFAULT_TASK_CPU_MILLIS = 1000
DEFAULT_TASK_MEMORY_BYTES = 1_000_000_000

DEFAULT_QUEUE_PRIORITY = 100
DEFAULT_ROUNDS_UNTIL_MATCH = 2
DEFAULT_ROUNDS_AFTER_MATCH = 5

ROOT_SUBGROUP = "<root>"
DEFAULT_POD_SET = "default"

_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")


# ------------------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpus: int = 0
    cpu_millis: int = DEFAULT_NODE_CPU_MILLIS
    memory_bytes: int = DEFAULT_NODE_MEMORY_BYTES
    gpu_memory_mib: int = DEFAULT_GPU_MEMORY_MIB
    mig_strategy: str = ""  # "" | single | mixed
    mig_instances: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def allocatable_gpus(self) -> int:
        """`nvidia.com/gpu` allocatable: 0 on a MIG-mixed node (the label still says `gpus`)."""
        return 0 if self.mig_strategy == "mixed" else self.gpus

    @property
    def gpu_devices(self) -> float:
        """GPU devices as KAI counts them for idle/releasing sums (MIG instance = g GPUs)."""
        return self.allocatable_gpus + sum(mig_gpus(p) * n for p, n in self.mig_instances.items())


@dataclass(frozen=True, slots=True)
class QueueDef:
    """A queue or a department (a top-level queue of the two-level hierarchy)."""

    name: str
    parent: str | None
    department: bool = False
    implicit: bool = False  # the harness' implicit `default` department
    priority: int = DEFAULT_QUEUE_PRIORITY
    deserved_gpus: float = 0
    limit_gpus: float = -1
    over_quota_weight: float = 0
    deserved_cpu_millis: float = -1
    limit_cpu_millis: float = -1
    deserved_memory_mb: float = -1
    limit_memory_mb: float = -1


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    topology: str
    required_level: str = ""
    preferred_level: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodSet:
    """A leaf of the job's subgroup tree."""

    name: str
    min_available: int
    topology_constraint: TopologyConstraint | None = None
    implicit: bool = False


@dataclass(frozen=True, slots=True)
class SubGroupSet:
    """A non-leaf of the job's subgroup tree; the root is named ``<root>``."""

    name: str
    topology_constraint: TopologyConstraint | None = None
    pod_sets: tuple[PodSet, ...] = ()
    sub_groups: tuple[SubGroupSet, ...] = ()

    def iter_pod_sets(self) -> Iterator[PodSet]:
        yield from self.pod_sets
        for child in self.sub_groups:
            yield from child.iter_pod_sets()

    @property
    def is_plain(self) -> bool:
        """True when the tree is just one implicit `default` pod set (no real subgroups)."""
        return not self.sub_groups and len(self.pod_sets) == 1 and self.pod_sets[0].implicit


@dataclass(frozen=True, slots=True)
class Task:
    id: str  # pod name and UID: <job>-<index>
    index: int
    status: str  # KAI pod status: Pending, Running, Releasing, Binding, Pipelined, Failed, ...
    node: str = ""
    gpu_groups: tuple[str, ...] = ()
    name: str = ""  # the source's (ignored) task name
    subgroup: str = ""
    required_gpus: int | None = None
    node_affinity: tuple[str, ...] = ()
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_affinity_topology_key: str = ""
    pod_anti_affinity_topology_key: str = ""
    mig_instances: Mapping[str, int] = field(default_factory=dict)
    task_priority: int | None = None
    legacy_mig: bool = False
    resource_claims: tuple[str, ...] = ()
    resource_claim_templates: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    queue: str
    tasks: tuple[Task, ...]
    namespace: str = ""
    priority: int = 0
    priority_class: str | None = None
    preemptibility: str = ""  # explicit PodGroup preemptibility, "" = derived from priority
    preemptible: bool = True
    min_available: int = 0
    subgroups: SubGroupSet | None = None
    gpus_per_task: float = 0
    gpu_memory_mib_per_task: int | None = None
    cpu_millis_per_task: int = DEFAULT_TASK_CPU_MILLIS
    memory_bytes_per_task: int = DEFAULT_TASK_MEMORY_BYTES
    best_effort: bool = False
    age_minutes: int = 0
    delete_job_in_test: bool = False
    stale_for_seconds: float | None = None

    @property
    def k8s_namespace(self) -> str:
        return self.namespace or "default"

    @property
    def key(self) -> str:
        """``<namespace>/<name>`` as the result names PodGroups."""
        return f"{self.k8s_namespace}/{self.name}"

    def pod_key(self, task: Task) -> str:
        return f"{self.k8s_namespace}/{task.id}"

    @property
    def is_fractional(self) -> bool:
        return 0 < self.gpus_per_task != int(self.gpus_per_task)

    @property
    def is_gpu_memory(self) -> bool:
        return bool(self.gpu_memory_mib_per_task)

    # -- per-task requests (README 3.1: a property of the input) ---------------------------------

    def whole_gpus(self, task: Task) -> int:
        """The `nvidia.com/gpu` container request of the task (0 when none)."""
        if self.best_effort:
            return 0
        if task.required_gpus is not None:
            return task.required_gpus
        if self.is_fractional:
            return 0
        return int(self.gpus_per_task)

    def gpus_required(self, task: Task) -> float:
        """KAI's ResReq.GPUs(): whole count, or the fraction; gpu-memory/MIG/DRA requests count 0."""
        if self.best_effort:
            return 0.0
        if task.required_gpus is None and self.is_fractional:
            return float(self.gpus_per_task)
        return float(self.whole_gpus(task))

    def gpus_accepted(self, task: Task, node: Node | None) -> float:
        """GPUs given to a placed task (KAI's AcceptedResource.GPUs()); 0 for unplaced tasks."""
        if node is None or self.best_effort:
            return 0.0
        if self.is_gpu_memory and task.required_gpus is None:
            assert self.gpu_memory_mib_per_task is not None
            return math.ceil(self.gpu_memory_mib_per_task / node.gpu_memory_mib * 100) / 100
        return self.gpus_required(task)

    def milli_cpu(self, task: Task) -> int:
        return 0 if self.best_effort else self.cpu_millis_per_task

    def memory(self, task: Task) -> int:
        return 0 if self.best_effort else self.memory_bytes_per_task

    def gpu_devices_held(self, task: Task) -> float:
        """Whole GPU devices a non-shared placed task holds (MIG instance = g GPUs)."""
        if self.best_effort:
            return 0.0
        mig = sum(mig_gpus(p) * n for p, n in task.mig_instances.items()) if not task.legacy_mig else 0
        return self.whole_gpus(task) + mig

    def is_shared_gpu(self, task: Task) -> bool:
        """Fractional or gpu-memory request (a share of one GPU, tracked by GPU group)."""
        return not self.best_effort and task.required_gpus is None and (self.is_fractional or self.is_gpu_memory)


@dataclass(frozen=True, slots=True)
class Expectation:
    status: str
    node: str = ""
    gpus_required: float = 0
    gpus_accepted: float = 0
    milli_cpu_required: float = 0
    memory_required: float = 0
    error_message: str | None = None
    last_start_older_than_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class NodeExpectation:
    releasing_gpus: float
    idle_gpus: float


@dataclass(frozen=True, slots=True)
class Expected:
    jobs: Mapping[str, Expectation] = field(default_factory=dict)
    tasks: Mapping[str, Expectation] = field(default_factory=dict)
    nodes: Mapping[str, NodeExpectation] = field(default_factory=dict)
    binds: int = 0
    evictions: int = 0
    pipelined: int = 0


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    name: str
    source: str
    file: str
    tags: tuple[str, ...]
    harness: str  # unit | integration
    actions: tuple[str, ...]
    nodes: tuple[Node, ...]
    queues: tuple[QueueDef, ...]  # departments first, then queues, each in list order
    jobs: tuple[Job, ...]
    expected: Expected
    rounds_until_match: int = DEFAULT_ROUNDS_UNTIL_MATCH
    rounds_after_match: int = DEFAULT_ROUNDS_AFTER_MATCH
    predicates_plugin: bool = True
    scheduler_config: Mapping[str, Any] | None = None
    staleness_grace_period_seconds: float = 0
    bind_always_fails: bool = False
    dead_expectation_keys: frozenset[str] = frozenset()
    topologies: tuple[Topology, ...] = ()
    dra: Mapping[str, Any] | None = None
    note: str = ""

    # -- lookup -------------------------------------------------------------------------------

    def node(self, name: str) -> Node | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def job(self, name: str) -> Job | None:
        for j in self.jobs:
            if j.name == name:
                return j
        return None

    def iter_tasks(self) -> Iterator[tuple[Job, Task]]:
        for j in self.jobs:
            for t in j.tasks:
                yield j, t

    def with_tasks(self, updates: Mapping[str, Task]) -> Scenario:
        """A copy with the tasks named in ``updates`` (by task id) replaced."""
        jobs = tuple(replace(j, tasks=tuple(updates.get(t.id, t) for t in j.tasks)) for j in self.jobs)
        return replace(self, jobs=jobs)

    # -- harness ------------------------------------------------------------------------------

    @property
    def is_unit(self) -> bool:
        return self.harness == "unit"

    def plugins(self) -> list[dict[str, Any]]:
        """The plugin list of the scenario's single tier."""
        if self.scheduler_config is not None:
            plugins = [dict(p) for tier in self.scheduler_config.get("tiers", []) for p in tier["plugins"]]
        else:
            plugins = [dict(p) for p in DEFAULT_PLUGINS]
        if not self.predicates_plugin:
            plugins = [p for p in plugins if p["name"] != "predicates"]
        return plugins

    def config(self, actions: Sequence[str]) -> dict[str, Any]:
        """The KAI scheduler config dict passed to ``kaisched.schedule``.

        ``tiers`` is left out (KAI's built-in default) unless the scenario replaces the plugin list
        or runs without the predicates plugin.
        """
        cfg: dict[str, Any] = {
            "actions": ", ".join(actions),
            "params": {
                "max-consolidation-preemptees": -1,
                "allow-consolidating-reclaim": True,
                "default-staleness-grace-period": f"{self.staleness_grace_period_seconds:g}s",
                "full-hierarchy-fairness": True,
            },
        }
        if self.scheduler_config is not None or not self.predicates_plugin:
            cfg["tiers"] = [{"plugins": self.plugins()}]
        return cfg


# ------------------------------------------------------------------------------------------------
# Helpers


def mig_gpus(profile: str) -> int:
    """GPUs one MIG instance counts as: g of ``nvidia.com/mig-<g>g.<m>gb``."""
    m = _MIG_RE.match(profile)
    if not m:
        raise ValueError(f"not a MIG resource name: {profile!r}")
    return int(m.group(1))


def conformance_dir() -> Path:
    """The scenario folder: $KAISCHED_CONFORMANCE_DIR, else <repo>/../shared/conformance/kai, else the
    workplace's /work/shared/conformance/kai (a clone made elsewhere, e.g. in /tmp)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    beside = Path(__file__).resolve().parents[3] / "shared" / "conformance" / "kai"
    workplace = Path("/work/shared/conformance/kai")
    return beside if beside.is_dir() or not workplace.is_dir() else workplace


def scenario_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def load_scenarios(directory: Path | None = None) -> list[Scenario]:
    """Every scenario of every ``*.yaml`` file in the folder, in file then list order."""
    directory = directory if directory is not None else conformance_dir()
    out: list[Scenario] = []
    for path in scenario_files(directory):
        out.extend(load_file(path))
    return out


def load_file(path: Path) -> list[Scenario]:
    with path.open(encoding="utf-8") as f:
        raw = yaml.load(f, Loader=yaml.CSafeLoader)
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of scenarios")
    return [parse_scenario(s, path.stem) for s in raw]


# ------------------------------------------------------------------------------------------------
# Parsing with defaults (README section 4)


def _num(v: Any) -> float:
    """YAML numbers as int when integral (keeps manifests free of `2.0`)."""
    if isinstance(v, bool):
        raise TypeError(f"expected a number, got {v!r}")
    f = float(v)
    return int(f) if f == int(f) else f


def _unlimited(v: Any) -> float:
    """A GPU limit: omitted, 0 and -1 all mean unlimited (-1)."""
    if v is None:
        return -1
    n = _num(v)
    return -1 if n in (0, -1) else n


def _opt(d: Mapping[str, Any], key: str, default: float) -> float:
    v = d.get(key)
    return default if v is None else _num(v)


def _constraint(d: Mapping[str, Any] | None) -> TopologyConstraint | None:
    if not d:
        return None
    return TopologyConstraint(
        topology=d["topology"],
        required_level=d.get("required_level") or "",
        preferred_level=d.get("preferred_level") or "",
    )


def _subgroups(d: Mapping[str, Any]) -> SubGroupSet:
    return SubGroupSet(
        name=d["name"],
        topology_constraint=_constraint(d.get("topology_constraint")),
        pod_sets=tuple(
            PodSet(
                name=p["name"],
                min_available=int(p["min_available"]),
                topology_constraint=_constraint(p.get("topology_constraint")),
                implicit=bool(p.get("implicit", False)),
            )
            for p in d.get("pod_sets") or []
        ),
        sub_groups=tuple(_subgroups(c) for c in d.get("sub_groups") or []),
    )


def _node(d: Mapping[str, Any]) -> Node:
    return Node(
        name=d["name"],
        gpus=int(d.get("gpus") or 0),
        cpu_millis=int(d.get("cpu_millis") or DEFAULT_NODE_CPU_MILLIS),
        memory_bytes=int(d.get("memory_bytes") or DEFAULT_NODE_MEMORY_BYTES),
        gpu_memory_mib=int(d.get("gpu_memory_mib") or DEFAULT_GPU_MEMORY_MIB),
        mig_strategy=d.get("mig_strategy") or "",
        mig_instances={k: int(v) for k, v in (d.get("mig_instances") or {}).items()},
        labels={k: str(v) for k, v in (d.get("labels") or {}).items()},
    )


def _department(d: Mapping[str, Any]) -> QueueDef:
    deserved = _opt(d, "deserved_gpus", 0)
    return QueueDef(
        name=d["name"],
        parent=d.get("parent") or None,
        department=True,
        implicit=bool(d.get("implicit", False)),
        deserved_gpus=deserved,
        limit_gpus=_unlimited(d.get("limit_gpus")),
        # derived by the harness (= deserved GPUs) and written in the YAML; use the YAML value
        over_quota_weight=_opt(d, "over_quota_weight", deserved),
        limit_cpu_millis=_opt(d, "limit_cpu_millis", -1),
        limit_memory_mb=_opt(d, "limit_memory_mb", -1),
    )


def _queue(d: Mapping[str, Any]) -> QueueDef:
    return QueueDef(
        name=d["name"],
        parent=d.get("parent") or None,
        priority=int(d.get("priority", DEFAULT_QUEUE_PRIORITY)),
        deserved_gpus=_opt(d, "deserved_gpus", 0),
        limit_gpus=_unlimited(d.get("limit_gpus")),
        over_quota_weight=_opt(d, "over_quota_weight", 0),
        deserved_cpu_millis=_opt(d, "deserved_cpu_millis", -1),
        limit_cpu_millis=_opt(d, "limit_cpu_millis", -1),
        deserved_memory_mb=_opt(d, "deserved_memory_mb", -1),
        limit_memory_mb=_opt(d, "limit_memory_mb", -1),
    )


def _task(d: Mapping[str, Any], job_name: str, index: int) -> Task:
    tid = d.get("id") or f"{job_name}-{index}"
    if tid != f"{job_name}-{index}":
        raise ValueError(f"task id {tid!r} is not {job_name}-{index}")
    req = d.get("required_gpus")
    prio = d.get("task_priority")
    return Task(
        id=tid,
        index=index,
        status=d["state"],
        node=d.get("node") or "",
        gpu_groups=tuple(str(g) for g in d.get("gpu_groups") or ()),
        name=d.get("name") or "",
        subgroup=d.get("subgroup") or "",
        required_gpus=None if req is None else int(req),
        node_affinity=tuple(d.get("node_affinity") or ()),
        pod_labels={k: str(v) for k, v in (d.get("pod_labels") or {}).items()},
        pod_affinity_topology_key=d.get("pod_affinity_topology_key") or "",
        pod_anti_affinity_topology_key=d.get("pod_anti_affinity_topology_key") or "",
        mig_instances={k: int(v) for k, v in (d.get("mig_instances") or {}).items()},
        task_priority=None if prio is None else int(prio),
        legacy_mig=bool(d.get("legacy_mig", False)),
        resource_claims=tuple(d.get("resource_claims") or ()),
        resource_claim_templates=dict(d.get("resource_claim_templates") or {}),
    )


def _job(d: Mapping[str, Any]) -> Job:
    name = d["name"]
    tasks = tuple(_task(t, name, i) for i, t in enumerate(d.get("tasks") or []))
    priority = int(d.get("priority") or 0)
    preemptibility = d.get("preemptibility") or ""
    derived_preemptible = preemptibility == "preemptible" if preemptibility else priority < 100
    gpu_mem = d.get("gpu_memory_mib_per_task")
    stale = d.get("stale_for_seconds")
    return Job(
        name=name,
        queue=d["queue"],
        tasks=tasks,
        namespace=d.get("namespace") or "",
        priority=priority,
        priority_class=d.get("priority_class"),
        preemptibility=preemptibility,
        preemptible=bool(d.get("preemptible", derived_preemptible)),
        min_available=int(d["min_available"]) if d.get("min_available") is not None else len(tasks),
        subgroups=_subgroups(d["subgroups"]) if d.get("subgroups") else None,
        gpus_per_task=_num(d.get("gpus_per_task") or 0),
        gpu_memory_mib_per_task=int(gpu_mem) if gpu_mem else None,
        cpu_millis_per_task=int(d.get("cpu_millis_per_task") or DEFAULT_TASK_CPU_MILLIS),
        memory_bytes_per_task=int(d.get("memory_bytes_per_task") or DEFAULT_TASK_MEMORY_BYTES),
        best_effort=bool(d.get("best_effort", False)),
        age_minutes=int(d.get("age_minutes") or 0),
        delete_job_in_test=bool(d.get("delete_job_in_test", False)),
        stale_for_seconds=None if stale is None else float(stale),
    )


def _expectation(d: Mapping[str, Any]) -> Expectation:
    older = d.get("last_start_older_than_seconds")
    return Expectation(
        status=d["status"],
        node=d.get("node") or "",
        gpus_required=_opt(d, "gpus_required", 0),
        gpus_accepted=_opt(d, "gpus_accepted", 0),
        milli_cpu_required=_opt(d, "milli_cpu_required", 0),
        memory_required=_opt(d, "memory_required", 0),
        error_message=d.get("error_message"),
        last_start_older_than_seconds=None if older is None else float(older),
    )


def _expected(d: Mapping[str, Any]) -> Expected:
    return Expected(
        jobs={k: _expectation(v) for k, v in (d.get("jobs") or {}).items()},
        tasks={k: _expectation(v) for k, v in (d.get("tasks") or {}).items()},
        nodes={
            k: NodeExpectation(releasing_gpus=_num(v["releasing_gpus"]), idle_gpus=_num(v["idle_gpus"]))
            for k, v in (d.get("nodes") or {}).items()
        },
        binds=int(d.get("binds") or 0),
        evictions=int(d.get("evictions") or 0),
        pipelined=int(d.get("pipelined") or 0),
    )


def parse_scenario(d: Mapping[str, Any], file_stem: str = "") -> Scenario:
    overrides = d.get("session_overrides") or {}
    grace = overrides.get("global_default_staleness_grace_period_seconds", 0)
    queues = tuple(_department(q) for q in d.get("departments") or []) + tuple(_queue(q) for q in d.get("queues") or [])
    return Scenario(
        id=d["id"],
        name=d["name"],
        source=d.get("source", ""),
        file=file_stem,
        tags=tuple(d.get("tags") or ()),
        harness=d["harness"],
        actions=tuple(d["actions"]),
        nodes=tuple(_node(n) for n in d.get("nodes") or []),
        queues=queues,
        jobs=tuple(_job(j) for j in d.get("jobs") or []),
        expected=_expected(d.get("expected") or {}),
        rounds_until_match=int(d.get("rounds_until_match") or DEFAULT_ROUNDS_UNTIL_MATCH),
        rounds_after_match=int(d.get("rounds_after_match") or DEFAULT_ROUNDS_AFTER_MATCH),
        predicates_plugin=bool(d.get("predicates_plugin", True)),
        scheduler_config=d.get("scheduler_config"),
        staleness_grace_period_seconds=float(grace),
        bind_always_fails=bool(d.get("bind_always_fails", False)),
        dead_expectation_keys=frozenset(d.get("dead_expectation_keys") or ()),
        topologies=tuple(Topology(name=t["name"], levels=tuple(t["levels"])) for t in d.get("topologies") or []),
        dra=d.get("dra"),
        note=d.get("note") or "",
    )
