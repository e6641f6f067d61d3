"""PodGroups (jobs) and their pod sets in the snapshot model (spec 4.4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kaisched.k8s.objects import PodGroup, TopologyConstraint
from kaisched.model.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo


@dataclass(slots=True, eq=False, init=False)
class PodSetInfo:
    """A leaf of the PodGroup's subgroup tree (the ``default`` one when there are no subgroups)."""

    name: str
    min_available: int
    tasks: list[TaskInfo]
    constraint: TopologyConstraint | None  # its own topology constraint (spec 9.2)

    # (the hot model classes write their __init__ out: a compiled core keeps a generated one interpreted)
    def __init__(self, name: str, min_available: int, tasks: list[TaskInfo] | None = None,
                 constraint: TopologyConstraint | None = None) -> None:
        self.name = name
        self.min_available = min_available
        self.tasks = [] if tasks is None else tasks
        self.constraint = constraint

    def count(self, statuses: frozenset[TaskStatus]) -> int:
        return sum(1 for t in self.tasks if t.status in statuses)

    @property
    def active_allocated(self) -> int:
        return self.count(ACTIVE_ALLOCATED)

    @property
    def active_used(self) -> int:
        return self.count(ACTIVE_USED)

    def pending_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.status is TaskStatus.PENDING]


@dataclass(slots=True, eq=False, init=False)
class SubGroupSet:
    """A non-leaf of the subgroup tree (the root is the PodGroup itself, named ""): its constraint applies
    to everything below it; every child is required (spec 9.5)."""

    name: str
    constraint: TopologyConstraint | None
    children: list[SubGroupSet]
    pod_sets: list[str]  # leaves directly below, by name

    def __init__(self, name: str, constraint: TopologyConstraint | None = None,
                 children: list[SubGroupSet] | None = None, pod_sets: list[str] | None = None) -> None:
        self.name = name
        self.constraint = constraint
        self.children = [] if children is None else children
        self.pod_sets = [] if pod_sets is None else pod_sets

    def all_pod_sets(self) -> list[str]:
        return [*self.pod_sets, *(n for c in self.children for n in c.all_pod_sets())]

    def has_constraint(self, pod_sets: dict[str, PodSetInfo]) -> bool:
        return self.constraint is not None or any(pod_sets[n].constraint is not None for n in self.pod_sets) or any(
            c.has_constraint(pod_sets) for c in self.children)


#: PodGroupInfo's status summary: (version, pending, ready, may be a victim, stale, allocated)
StatusSummary = tuple[int, bool, bool, bool, bool, bool]


@dataclass(frozen=True, slots=True, init=False)
class NodeReason:
    """One row of a fit error's histogram: why ``count`` nodes could not take the pod (``text``: KAI's fit-error
    text, e.g. "node(s) didn't have enough resources: GPUs"), a few of those nodes by name, and whether the nodes
    lacked free resources (``resources``: room could be made there) rather than failing a predicate."""

    text: str
    count: int
    nodes: tuple[str, ...]
    resources: bool

    def __init__(self, text: str, count: int, nodes: tuple[str, ...] = (), resources: bool = False) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "resources", resources)


@dataclass(frozen=True, slots=True, init=False)
class FitDetail:
    """The structure behind a pending reason's message (for explanations; never read by a decision): the pod that
    found no node, the nodes of the cluster, the histogram of per-node reasons, the gang's progress (``placed`` of
    ``required`` pods of the pod set found room; -1: not a gang), the pods whose termination the job waits for, and
    whether the pod is larger than any node (``too_big``)."""

    pod: str
    nodes: int
    reasons: tuple[NodeReason, ...]
    placed: int
    required: int
    victims: tuple[str, ...]
    too_big: bool

    def __init__(self, pod: str = "", nodes: int = 0, reasons: tuple[NodeReason, ...] = (), placed: int = -1,
                 required: int = -1, victims: tuple[str, ...] = (), too_big: bool = False) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "reasons", reasons)
        object.__setattr__(self, "placed", placed)
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "victims", victims)
        object.__setattr__(self, "too_big", too_big)


@dataclass(slots=True, eq=False, init=False)
class FitError:
    """Why (part of) a job could not be placed: KAI's job fit error (``reason``, ``message``), with kaisched's
    reason code (``code``: one of :data:`kaisched.framework.result.REASON_CODES`, "" when the reason alone
    says it) and the structure behind the message (``detail``)."""

    reason: str
    message: str
    code: str
    detail: FitDetail | None

    def __init__(self, reason: str, message: str, code: str = "", detail: FitDetail | None = None) -> None:
        self.reason = reason
        self.message = message
        self.code = code
        self.detail = detail


@dataclass(slots=True, eq=False, init=False)
class PodGroupInfo:
    name: str
    namespace: str
    uid: str
    queue: str
    priority: int
    preemptible: bool
    creation: datetime
    pod_group: PodGroup | None
    pod_sets: dict[str, PodSetInfo]
    last_start: datetime | None
    stale_since: datetime | None
    victims: dict[str, datetime]  # pods evicted for this job in earlier cycles, when (model/victim_memory.py)
    # set by the snapshot builder when the job cannot be scheduled at all (unknown queue, ...)
    blocked: FitError | None
    fit_errors: list[FitError]
    pipelined_reason: FitError | None  # why the job waits although it has been placed
    version: int  # bumped on every change of one of its tasks within the session (cache key)
    root: SubGroupSet  # the subgroup tree (spec 9.5)
    has_topology: bool  # some (sub)group of it has a topology constraint
    # (version, has_pending(), is_ready(), may_be_victim(), is_stale(), has_allocated()), read off the tasks in one
    # pass (see _summary): every status change bumps the version; not copied by ``replace`` (a view of the job
    # with other pod sets starts afresh)
    _status_summary: StatusSummary = field(init=False, repr=False)
    key: str = field(init=False, repr=False)  # "<namespace>/<name>" (set once: asked millions of times)

    def __init__(self, name: str, namespace: str, uid: str, queue: str, priority: int, preemptible: bool,
                 creation: datetime, pod_group: PodGroup | None, pod_sets: dict[str, PodSetInfo] | None = None,
                 last_start: datetime | None = None, stale_since: datetime | None = None,
                 victims: dict[str, datetime] | None = None, blocked: FitError | None = None,
                 fit_errors: list[FitError] | None = None,
                 pipelined_reason: FitError | None = None, version: int = 0, root: SubGroupSet | None = None,
                 has_topology: bool = False) -> None:
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.queue = queue
        self.priority = priority
        self.preemptible = preemptible
        self.creation = creation
        self.pod_group = pod_group
        self.pod_sets = {} if pod_sets is None else pod_sets
        self.last_start = last_start
        self.stale_since = stale_since
        self.victims = {} if victims is None else victims
        self.blocked = blocked
        self.fit_errors = [] if fit_errors is None else fit_errors
        self.pipelined_reason = pipelined_reason
        self.version = version
        self.root = SubGroupSet("") if root is None else root
        self.has_topology = has_topology
        self._status_summary = (-1, False, False, False, False, False)
        self.key = f"{namespace}/{name}"

    @property
    def tasks(self) -> list[TaskInfo]:
        return [t for ps in self.pod_sets.values() for t in ps.tasks]

    # ---- gang state (spec 4.4) -------------------------------------------------------------------
    def is_ready(self) -> bool:
        """Enough alive, non-gated pods to satisfy every pod set's minimum."""
        return self._summary()[2]

    def is_gang_satisfied(self) -> bool:
        return all(ps.active_used >= ps.min_available for ps in self.pod_sets.values())

    def is_allocated_gang_satisfied(self) -> bool:
        return all(ps.active_allocated >= ps.min_available for ps in self.pod_sets.values())

    def is_elastic(self) -> bool:
        return any(ps.min_available < len(ps.tasks) for ps in self.pod_sets.values())

    def is_stale(self) -> bool:
        """Some pod holds resources but a pod set has fewer than its minimum, and none has succeeded."""
        return self._summary()[4]

    def has_pending(self) -> bool:
        return self._summary()[1]

    def may_be_victim(self) -> bool:
        """The job has active pods that may be evicted (``TaskInfo.is_settled_active``), and none of its pods
        was placed in this cycle: a job whose bind is in flight, a preemptor pipelined onto its victims' place
        and a victim job an earlier decision moved are left alone rather than cut below their minimum, undone
        at once or evicted twice (one eviction per pod per cycle)."""
        return self._summary()[3]

    def _summary(self) -> StatusSummary:
        """What every action asks of every job, from its tasks' statuses: (version, has a pending pod, ready,
        may be a victim, stale, has an allocated pod); computed once per version."""
        known = self._status_summary
        if known[0] == self.version:
            return known
        pending = binding = settled = succeeded = used_any = short = allocated = placed = False
        ready = True
        for ps in self.pod_sets.values():
            alive = used = 0
            for t in ps.tasks:
                status = t.status
                if status is TaskStatus.PENDING:
                    pending = True
                elif status is TaskStatus.BINDING:
                    binding = True
                elif status is TaskStatus.SUCCEEDED:
                    succeeded = True
                if status in ALIVE and status is not TaskStatus.GATED:
                    alive += 1
                if status in ACTIVE_USED:
                    used += 1
                if t.placed_in_cycle:
                    placed = True
                elif t.is_settled_active:
                    settled = True
                if status in ALLOCATED:
                    allocated = True
            if alive < ps.min_available:
                ready = False
            used_any = used_any or used > 0
            short = short or used < ps.min_available
        known = self._status_summary = (self.version, pending, ready, settled and not binding and not placed,
                                        used_any and short and not succeeded, allocated)
        return known

    def has_allocated(self) -> bool:
        return self._summary()[5]

    def elastic_rank(self) -> int:
        """Elastic job order: below min first (0), exactly at min (1), above min (2)."""
        rank = 1
        for ps in self.pod_sets.values():
            a = ps.active_allocated
            if a < ps.min_available:
                return 0
            if a > ps.min_available:
                rank = 2
        return rank

    def should_pipeline(self) -> bool:
        """Some pod set has a pipelined task and fewer than minAvailable non-pipelined allocated tasks."""
        for ps in self.pod_sets.values():
            has_pipelined = any(t.status is TaskStatus.PIPELINED for t in ps.tasks)
            if not has_pipelined:
                continue
            non_pipelined = sum(
                1 for t in ps.tasks if t.status in ACTIVE_ALLOCATED and t.status is not TaskStatus.PIPELINED
            )
            if non_pipelined < ps.min_available:
                return True
        return False
