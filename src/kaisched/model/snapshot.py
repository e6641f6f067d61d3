"""Build the session's snapshot model from parsed Kubernetes objects (spec 4.3).

Cross-object validation lives here: queue parents and cycles, PodGroups naming unknown queues, pods
naming unknown PodGroups. Every problem becomes an :class:`ObjectError`; the rest of the cluster is
still modelled. A PodGroup that cannot be scheduled at all gets ``blocked`` with KAI's reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter

import numpy as np

from kaisched.k8s import constants as C
from kaisched.k8s.objects import (
    Node,
    ObjectError,
    ObjectMeta,
    ParsedObjects,
    Pod,
    PodGroup,
    Queue,
    QueueResource,
    QueueResources,
    SubGroup,
    Topology,
    TopologyConstraint,
)
from kaisched.model.dra_snapshot import CLAIM_INVALID, CLAIM_QUEUE, DraSnapshot, PodClaims
from kaisched.model.gpu import (
    NO_GPU,
    GpuKind,
    GpuRequest,
    GpuRequestError,
    gpu_groups_of,
    legacy_mig_annotation,
)
from kaisched.model.gpu_sharing import PRIVATE_PREFIX
from kaisched.model.job import FitError, PodGroupInfo, PodSetInfo, SubGroupSet
from kaisched.model.node import NodeTable, forget_static_nodes
from kaisched.model.pod_facts import PodFacts, forget_all, pod_facts, retain, stale_allowance
from kaisched.model.queue import QueueInfo, QueueTree
from kaisched.model.resources import CPU, GPU, GPU_RESOURCE_NAMES, MEMORY, PODS, ResourceIndex, Vector
from kaisched.model.segments import apply_segments
from kaisched.model.status import ACTIVE_USED, TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.model.usage import UsageTable
from kaisched.model.victim_memory import VICTIMS_ANNOTATION, VictimMemoryError, parse_victims

INVALID_GPU_REQUEST = "InvalidGPURequest"
LEGACY_MIG = "LegacyMIGRequest"


@dataclass(slots=True)
class SnapshotOptions:
    full_hierarchy_fairness: bool = True
    scheduler_name: str = C.SCHEDULER_NAME
    # make the ResourceClaims of pods' templated claims (the embedded cluster's resourceclaim controller); in
    # Kubernetes mode the cluster's controller makes them and a pod waits for its claim
    make_template_claims: bool = True


@dataclass(slots=True, eq=False)
class Snapshot:
    now: datetime
    resources: ResourceIndex
    nodes: NodeTable
    queues: QueueTree
    jobs: dict[str, PodGroupInfo]  # "<ns>/<name>" -> job, sorted by key
    tasks: dict[str, TaskInfo]  # uid -> every modelled pod (incl. other schedulers' pods)
    total: Vector  # [gpu, cpu, memory] capacity that KAI divides between queues (spec 5.2)
    min_node_gpu_memory: float
    errors: list[ObjectError] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    dra: DraSnapshot | None = None  # DRA devices and claims (None: the input has none)
    # the pods of this scheduler's jobs with a ``status.nominatedNodeName``, in (namespace, name) order
    nominated: list[TaskInfo] = field(default_factory=list)
    # each queue's normalised historical usage (time-based fair share, spec 5.7), given by the caller; None: none
    usage: UsageTable | None = None


def _ts(value: datetime | None, default: datetime) -> datetime:
    return value if value is not None else default


def _parse_annotation_time(meta: ObjectMeta, key: str, kind: str, errors: list[ObjectError]) -> datetime | None:
    raw = meta.annotations.get(key)
    if not raw:
        return None
    try:
        ts = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        errors.append(
            ObjectError(_ref(kind, meta), f"metadata.annotations.{key}", f"invalid RFC3339 timestamp {raw!r}")
        )
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _parse_victims(meta: ObjectMeta, errors: list[ObjectError]) -> dict[str, datetime]:
    """The PodGroup's remembered victims (none when the annotation is missing or malformed: an input error)."""
    raw = meta.annotations.get(VICTIMS_ANNOTATION)
    if not raw:
        return {}
    try:
        return parse_victims(raw)
    except VictimMemoryError as e:
        errors.append(ObjectError(_ref("PodGroup", meta), f"metadata.annotations.{VICTIMS_ANNOTATION}", str(e)))
        return {}


def _ref(kind: str, meta: ObjectMeta) -> str:
    return f"{kind} {meta.namespace}/{meta.name}" if meta.namespace else f"{kind} {meta.name}"


# ------------------------------------------------------------------------------------------- queues
def _queue_vectors(res: QueueResources) -> tuple[Vector, Vector, Vector]:
    def mem(v: float) -> float:
        return -1.0 if v == -1 else v * C.QUEUE_MEMORY_UNIT_BYTES

    deserved = np.array([res.gpu.quota, res.cpu.quota, mem(res.memory.quota)], dtype=np.float64)
    limit = np.array([res.gpu.limit, res.cpu.limit, mem(res.memory.limit)], dtype=np.float64)
    weight = np.array(
        [res.gpu.over_quota_weight, res.cpu.over_quota_weight, res.memory.over_quota_weight], dtype=np.float64
    )
    return deserved, limit, weight


def _default_queues(now: datetime) -> list[Queue]:
    """KAI's Helm chart installs ``default-parent-queue`` -> ``default-queue``."""
    unlimited = QueueResource(quota=0, over_quota_weight=1, limit=-1)
    res = QueueResources(gpu=unlimited, cpu=unlimited, memory=unlimited)
    parent = Queue(meta=ObjectMeta(name=C.DEFAULT_PARENT_QUEUE_NAME, uid=C.DEFAULT_PARENT_QUEUE_NAME,
                                   creation_timestamp=now), resources=res)
    leaf = Queue(meta=ObjectMeta(name=C.DEFAULT_QUEUE_NAME, uid=C.DEFAULT_QUEUE_NAME, creation_timestamp=now),
                 resources=res, parent_queue=C.DEFAULT_PARENT_QUEUE_NAME)
    return [parent, leaf]


def build_queue_tree(
    queues: Iterable[Queue], now: datetime, errors: list[ObjectError], *, full_hierarchy_fairness: bool = True
) -> tuple[QueueTree, dict[str, str]]:
    """Queue tree plus, for every dropped queue, the reason (name -> message)."""
    by_name: dict[str, Queue] = {}
    for q in queues:
        by_name.setdefault(q.meta.name, q)
    dropped: dict[str, str] = {}

    # parents that do not exist, and cycles: drop the queue and its whole subtree (KAI's orphans)
    def chain_problem(name: str) -> str | None:
        seen: list[str] = []
        cur = name
        while True:
            q = by_name[cur]
            if not q.parent_queue:
                return None
            if q.parent_queue == name or q.parent_queue in seen:
                return "cycle"
            if q.parent_queue not in by_name:
                return cur
            seen.append(cur)
            cur = q.parent_queue

    for name in sorted(by_name):
        problem = chain_problem(name)
        if problem is None:
            continue
        q = by_name[name]
        if problem == "cycle":
            msg = f"queue '{name}' is part of a cycle in the queue tree (parentQueue '{q.parent_queue}')"
            errors.append(ObjectError(_ref("Queue", q.meta), "spec.parentQueue", msg))
            dropped[name] = f"Queue '{name}' is part of a cycle in the queue tree"
        elif problem == name:
            invalid = next((f"{e.field}: {e.message}" for e in errors if e.object == f"Queue {q.parent_queue}"), "")
            if invalid:  # (left out by the parser)
                msg = f"parent queue '{q.parent_queue}' is invalid ({invalid}); the queue and its subtree are ignored"
                dropped[name] = f"Parent queue '{q.parent_queue}' of queue '{name}' is invalid: {invalid}"
            else:
                msg = f"parent queue '{q.parent_queue}' does not exist; the queue and its subtree are ignored"
                dropped[name] = f"Parent queue '{q.parent_queue}' of queue '{name}' does not exist"
            errors.append(ObjectError(_ref("Queue", q.meta), "spec.parentQueue", msg))
        else:
            dropped[name] = f"Queue '{name}' is below the orphan queue '{problem}'"
    kept = [q for n, q in sorted(by_name.items()) if n not in dropped]

    infos: dict[str, QueueInfo] = {}
    for q in kept:
        deserved, limit, weight = _queue_vectors(q.resources)
        infos[q.meta.name] = QueueInfo(
            name=q.meta.name,
            parent=q.parent_queue or None,
            priority=q.priority,
            creation=_ts(q.meta.creation_timestamp, now),
            uid=q.meta.uid or q.meta.name,
            deserved=deserved,
            limit=limit,
            over_quota_weight=weight,
            display_name=q.display_name,
            preempt_min_runtime=q.preempt_min_runtime,
            reclaim_min_runtime=q.reclaim_min_runtime,
        )
    if not full_hierarchy_fairness:
        for name, qi in infos.items():
            if qi.parent is None and name != "default":
                dropped[name] = (f"Queue '{name}' is a top-level queue, which is not scheduled with "
                                 "full-hierarchy-fairness=false (its children are)")
        infos = _flatten(infos, now)
    ordered = sorted(infos.values(), key=QueueInfo.order_key)
    roots: list[str] = []
    for qi in ordered:
        if qi.parent is None:
            roots.append(qi.name)
        else:
            infos[qi.parent].children.append(qi.name)
    return QueueTree(queues=infos, roots=roots), dropped


def _flatten(infos: dict[str, QueueInfo], now: datetime) -> dict[str, QueueInfo]:
    """--full-hierarchy-fairness=false: every queue with a parent goes under a synthetic ``default``."""
    unlimited = np.array([-1.0, -1.0, -1.0])
    out = {
        "default": QueueInfo(name="default", parent=None, priority=C.DEFAULT_QUEUE_PRIORITY, creation=now,
                             uid="default", deserved=unlimited.copy(), limit=unlimited.copy(),
                             over_quota_weight=np.ones(3))
    }
    for name, qi in infos.items():
        if qi.parent is None or name == "default":
            continue
        qi.parent = "default"
        qi.children = []
        out[name] = qi
    return out


# ------------------------------------------------------------------------------------------- pods
def task_status(pod: Pod) -> TaskStatus:
    phase = pod.phase
    if pod.meta.deletion_timestamp is not None and phase in ("Running", "Pending"):
        return TaskStatus.RELEASING
    if phase == "Running":
        return TaskStatus.RUNNING
    if phase == "Pending":
        if pod.node_name:
            return TaskStatus.BOUND
        if pod.scheduling_gates:
            return TaskStatus.GATED
        return TaskStatus.PENDING
    if phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if phase == "Failed":
        return TaskStatus.FAILED
    return TaskStatus.UNKNOWN


def _root_constraint(pg: PodGroup) -> TopologyConstraint | None:
    c = pg.topology_constraint
    if c is not None and c.topology:
        return c
    ann = pg.meta.annotations
    topology = ann.get(C.TOPOLOGY_ANNOTATION, "")
    if not topology:
        return None
    return TopologyConstraint(topology=topology,
                              required_level=ann.get(C.TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, ""),
                              preferred_level=ann.get(C.TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, ""))


@dataclass(slots=True, eq=False, init=False)
class _PodGroupFacts:
    pod_group: PodGroup
    root_constraint: TopologyConstraint | None
    last_start: datetime | None
    stale_since: datetime | None
    victims: dict[str, datetime]  # the pods evicted for the job, when (model/victim_memory.py)
    errors: list[ObjectError]

    # (written out: a compiled core keeps a generated __init__ interpreted, see docs/performance.md)
    def __init__(self, pod_group: PodGroup, root_constraint: TopologyConstraint | None, last_start: datetime | None,
                 stale_since: datetime | None, victims: dict[str, datetime], errors: list[ObjectError]) -> None:
        self.pod_group = pod_group
        self.root_constraint = root_constraint
        self.last_start = last_start
        self.stale_since = stale_since
        self.victims = victims
        self.errors = errors


_PG_FACTS: dict[int, _PodGroupFacts] = {}  # by PodGroup object identity, for the latest snapshot's PodGroups


def _pod_group_facts(pg: PodGroup) -> _PodGroupFacts:
    """What a PodGroup object says that does not depend on the rest of the cluster (computed once per object)."""
    f = _PG_FACTS.get(id(pg))
    if f is not None and f.pod_group is pg:
        return f
    errors: list[ObjectError] = []
    meta = pg.meta
    f = _PodGroupFacts(pg, _root_constraint(pg),
                       _parse_annotation_time(meta, C.LAST_START_TIMESTAMP_ANNOTATION, "PodGroup", errors),
                       _parse_annotation_time(meta, C.STALE_PODGROUP_TIMESTAMP_ANNOTATION, "PodGroup", errors),
                       _parse_victims(meta, errors), errors)
    _PG_FACTS[id(pg)] = f
    return f


def forget_cached_facts() -> None:
    """Forget the facts kept for the latest snapshot's pods, PodGroups and nodes: the next cycle's objects are
    all new (a one-shot cycle parses them again), so the old ones only take memory while they are parsed."""
    forget_all()
    _PG_FACTS.clear()
    forget_static_nodes()


def retain_pod_groups(pod_groups: list[PodGroup]) -> None:
    """Forget the facts of PodGroups gone, when there are enough of them (see :func:`pod_facts.retain`)."""
    if len(_PG_FACTS) <= stale_allowance(len(pod_groups)):
        return
    kept = {id(pg): f for pg in pod_groups if (f := _PG_FACTS.get(id(pg))) is not None and f.pod_group is pg}
    _PG_FACTS.clear()
    _PG_FACTS.update(kept)


_facts_order = attrgetter("order")


def is_reservation_pod(pod: Pod) -> bool:
    """KAI's GPU reservation pods: the shared device they hold is modelled by its GPU group."""
    return pod.meta.namespace in (C.RESERVATION_NAMESPACE, C.LEGACY_RESERVATION_NAMESPACE) or (
        pod.meta.labels.get("app") == C.RESERVATION_APP_LABEL_VALUE)


# --------------------------------------------------------------------------------------- builder
_NodeFacts = tuple[frozenset[str], list[float], list[bool], float]
_BASE_RESOURCE_NAMES = frozenset({"cpu", "memory", "pods", *GPU_RESOURCE_NAMES})  # not extended resources
_NODE_FACTS: list[tuple[list[Node], _NodeFacts]] = []  # the last node lists seen (the simulator reuses one)


def _node_facts(nodes: list[Node]) -> _NodeFacts:
    """Extended resources the nodes offer, MiB per GPU and whether it is known, the smallest real GPU memory
    (computed once per list of Node objects)."""
    for seen, facts in _NODE_FACTS:
        if seen is nodes:
            return facts
    extra = frozenset(name for node in nodes for name in node.allocatable if name not in _BASE_RESOURCE_NAMES)
    memory_labels = [SnapshotBuilder._gpu_memory(n.meta.labels) for n in nodes]
    gpu_memory = [m for m, _ in memory_labels]
    real = [g for g in gpu_memory if g > C.DEFAULT_GPU_MEMORY_MIB]
    facts = (extra, gpu_memory, [known for _, known in memory_labels],
             float(min(real)) if real else float(C.DEFAULT_GPU_MEMORY_MIB))
    _NODE_FACTS.insert(0, (nodes, facts))
    del _NODE_FACTS[4:]
    return facts


def job_priorities(parsed: ParsedObjects) -> tuple[dict[str, int], int]:
    """The priority of each priority class by name (the built-in ones included) and a job's default priority
    (the global default class's, else KAI's)."""
    priorities = dict(C.BUILTIN_PRIORITY_CLASSES)
    global_default: int | None = None
    for pc in parsed.priority_classes:
        priorities[pc.meta.name] = pc.value
        if pc.global_default and global_default is None:
            global_default = pc.value
    return priorities, global_default if global_default is not None else C.DEFAULT_JOB_PRIORITY


class SnapshotBuilder:
    def __init__(self, parsed: ParsedObjects, now: datetime, options: SnapshotOptions) -> None:
        self.gpu_error: GpuRequestError | None = None
        self.min_gpu_memory = float(C.DEFAULT_GPU_MEMORY_MIB)
        self.parsed = parsed
        self.now = now
        self.options = options
        self.errors: list[ObjectError] = list(parsed.errors)
        self.segmented: set[str] = set()  # jobs with a pod asking for segments (segments.apply_segments)
        self.dra: DraSnapshot | None = None
        self._with_gpus: dict[tuple[int, float], Vector] = {}  # (id of a request vector, DRA GPUs) -> vector
        self._queue_errors: dict[str, str] | None = None  # Queue name -> its first input error (_invalid_queue)

    def build(self) -> Snapshot:
        parsed, now = self.parsed, self.now
        node_extra, gpu_memory, synced, min_gpu_memory = _node_facts(parsed.nodes)
        extra = set(node_extra)
        retain(parsed.pods)  # first: the facts of pods gone are dropped before new ones are made
        ungrouped: list[Pod] = []  # our pods without a PodGroup (KAI's default grouper gives them one each)
        all_facts: list[PodFacts] = []
        claim_pods: list[tuple[str, Pod]] = []
        for pod in parsed.pods:
            facts = pod_facts(pod)
            all_facts.append(facts)
            if pod.resource_claims:
                claim_pods.append((facts.uid, pod))
            if facts.extended:
                extra.update(facts.extended)
            if facts.group_name is None and self._is_ours(pod):
                ungrouped.append(pod)
        resources = ResourceIndex(extra)
        self.vector_names = tuple(resources.names)
        nodes = NodeTable(parsed.nodes, resources, gpu_memory, synced)
        if claim_pods or parsed.resource_slices or parsed.resource_claims:
            self._dra(parsed, nodes, claim_pods, all_facts)

        queue_objs = list(parsed.queues)
        pg_queue_names = {pg.queue for pg in parsed.pod_groups}
        if ungrouped:
            pg_queue_names.update(self._queue_of_pod(p) for p in ungrouped)
        if C.DEFAULT_QUEUE_NAME in pg_queue_names and not any(
            q.meta.name in (C.DEFAULT_QUEUE_NAME, C.DEFAULT_PARENT_QUEUE_NAME) for q in queue_objs
        ):
            queue_objs.extend(_default_queues(now))
        tree, dropped = build_queue_tree(queue_objs, now, self.errors,
                                         full_hierarchy_fairness=self.options.full_hierarchy_fairness)

        priorities, default_priority = job_priorities(parsed)

        jobs: dict[str, PodGroupInfo] = {}
        retain_pod_groups(parsed.pod_groups)
        for pg in parsed.pod_groups:
            info = self._job(pg, tree, dropped, priorities, default_priority)
            jobs.setdefault(info.key, info)
        for pod in ungrouped:
            pg = self._default_pod_group(pod)
            info = self._job(pg, tree, dropped, priorities, default_priority)
            jobs.setdefault(info.key, info)

        tasks: dict[str, TaskInfo] = {}
        nominated: list[TaskInfo] = []
        other_usage = np.zeros(3)
        self.min_gpu_memory = min_gpu_memory
        all_facts.sort(key=_facts_order)  # by (namespace, name)
        for facts in all_facts:
            pod = facts.pod
            if is_reservation_pod(pod):
                continue
            task = self._task(pod, facts, resources, nodes, jobs)
            if task is None:
                continue
            tasks[task.uid] = task
            if pod.nominated_node_name and task.job is not None:
                nominated.append(task)
            if task.status in ACTIVE_USED and task.node >= 0:
                nodes.add_task(task, task.node)
                if task.job is None and not self._is_ours(pod) and nodes.schedulable[task.node]:
                    other_usage += task.quota_vector()
        pod_slots = int(nodes.allocatable[PODS].sum())  # (every node: a cordoned one may come back)
        for job in jobs.values():
            if job.key in self.segmented:  # (a pod of the job asks for segments)
                apply_segments(job, self.errors)
            if job.blocked is None:
                check_min_members(job, pod_slots)
            for ps in job.pod_sets.values():
                if len(ps.tasks) > 1:
                    ps.tasks.sort(key=lambda t: (t.creation, t.uid))  # plugins order them when it matters
        total = nodes.allocatable[:3, nodes.schedulable].sum(axis=1) - other_usage
        total[GPU] = nodes.gpu_capacity[nodes.schedulable].sum() - other_usage[GPU]
        total = np.maximum(total, 0.0)
        ordered_jobs = {k: jobs[k] for k in sorted(jobs)}
        return Snapshot(now=now, resources=resources, nodes=nodes, queues=tree, jobs=ordered_jobs, tasks=tasks,
                        total=total, min_node_gpu_memory=min_gpu_memory, errors=self.errors,
                        topologies=list(parsed.topologies), dra=self.dra, nominated=nominated)

    def _dra(self, parsed: ParsedObjects, nodes: NodeTable, claim_pods: list[tuple[str, Pod]],
             all_facts: list[PodFacts]) -> None:
        """The DRA devices and claims (spec 7.7): resolved for every pod that names one, accounted in ``nodes``."""
        dra = self.dra = DraSnapshot(parsed.resource_slices, parsed.device_classes, parsed.resource_claims,
                                     parsed.resource_claim_templates, nodes.infos, nodes.by_name,
                                     make_template_claims=self.options.make_template_claims)
        dra.resolve(claim_pods)
        statuses = {f.uid: task_status(f.pod) for f in all_facts}
        nodes.use_dra(dra.state(statuses))

    def _claims(self, task: TaskInfo, job: PodGroupInfo | None) -> None:
        """The task's DRA claims; their GPUs (exact-count requests of GPU device classes, of a claim no other pod
        shares) count in its GPU row and for its queue, as whole GPUs (spec 7.1)."""
        assert self.dra is not None
        found = self.dra.by_pod.get(task.uid, PodClaims())
        task.claims = found.claims
        gpus = sum(info.gpus for info in found.claims if not info.shared)
        if gpus:
            key = (id(task.req), gpus)
            req = self._with_gpus.get(key)
            if req is None:
                req = task.req.copy()
                req[GPU] += gpus
                req.flags.writeable = False
                self._with_gpus[key] = req
            task.req = req
            task.claim_gpus = gpus
            task.devices += gpus
            task.request_gpus += gpus
            task.accepted_gpus += gpus
        if job is None or task.status in ACTIVE_USED:
            return
        if found.problem:
            job.blocked = FitError(found.reason, f"Pod {task.key}: {found.problem}")
            return
        for info in found.claims:
            if info.error:
                job.blocked = FitError(CLAIM_INVALID, f"Pod {task.key}: ResourceClaim {info.key} can never be "
                                       f"allocated: {info.error}")
                return
            if not info.from_template and info.gpus and info.claim.meta.labels.get(C.QUEUE_LABEL) != job.queue:
                job.blocked = FitError(CLAIM_QUEUE, (
                    f"Pod {task.key} uses the shared GPU ResourceClaim {info.key}, which must carry the label "
                    f"{C.QUEUE_LABEL}={job.queue} (a claim named by pods, not made from a template, may be shared "
                    "by pods of its queue only)"))
                return

    # ---- helpers ------------------------------------------------------------------------------
    def _is_ours(self, pod: Pod) -> bool:
        return pod.scheduler_name == self.options.scheduler_name

    @staticmethod
    def _gpu_memory(labels: dict[str, str] | object) -> tuple[float, bool]:
        """MiB per GPU from the node's ``nvidia.com/gpu.memory`` label (spec 7.2), and whether it is known."""
        default = float(C.DEFAULT_GPU_MEMORY_MIB)
        raw = labels.get(C.GPU_MEMORY_NODE_LABEL) if isinstance(labels, dict) else None
        if raw is None:
            return default, False
        try:
            value = float(raw)
        except ValueError:
            return default, False
        if value >= 1024 * 1024:  # bytes
            value = value / (1024 * 1024)
        floored = float(int(value) // 100 * 100)
        return (floored, True) if floored > 0 else (default, False)

    @staticmethod
    def _queue_of_pod(pod: Pod) -> str:
        labels = pod.meta.labels
        return labels.get(C.QUEUE_LABEL) or labels.get(C.LEGACY_QUEUE_LABEL) or labels.get(
            C.PROJECT_LABEL) or C.DEFAULT_QUEUE_NAME

    def _default_pod_group(self, pod: Pod) -> PodGroup:
        """KAI's default pod-grouper for a bare pod: one PodGroup per pod, minMember 1."""
        labels = pod.meta.labels
        pc = labels.get(C.PRIORITY_CLASS_LABEL) or pod.priority_class_name or C.TRAIN_PRIORITY_CLASS
        preemptibility = labels.get(C.PREEMPTIBILITY_LABEL, "")
        if preemptibility not in C.PREEMPTIBILITY_VALUES:
            preemptibility = ""
        meta = ObjectMeta(name=f"pg-{pod.meta.name}-{pod.meta.uid}".replace("/", "-"),
                          namespace=pod.meta.namespace, uid=f"pg-{pod.meta.uid}",
                          creation_timestamp=pod.meta.creation_timestamp)
        return PodGroup(meta=meta, queue=self._queue_of_pod(pod), min_member=1, priority_class_name=pc,
                        preemptibility=preemptibility)

    def _job(self, pg: PodGroup, tree: QueueTree, dropped: dict[str, str], priorities: dict[str, int],
             default_priority: int) -> PodGroupInfo:
        meta = pg.meta
        priority = priorities.get(pg.priority_class_name, default_priority) if pg.priority_class_name else \
            default_priority
        if pg.preemptibility:
            preemptible = pg.preemptibility == C.PREEMPTIBLE
        else:
            preemptible = priority < C.NON_PREEMPTIBLE_PRIORITY_THRESHOLD
        facts = _pod_group_facts(pg)
        if facts.errors:
            self.errors.extend(facts.errors)
        pod_sets: dict[str, PodSetInfo] = {}
        root = self._sub_group_tree(pg, pod_sets, facts.root_constraint)
        info = PodGroupInfo(
            name=meta.name, namespace=meta.namespace, uid=meta.uid or f"{meta.namespace}/{meta.name}",
            queue=pg.queue, priority=priority, preemptible=preemptible,
            creation=_ts(meta.creation_timestamp, self.now), pod_group=pg, pod_sets=pod_sets,
            last_start=facts.last_start, stale_since=facts.stale_since, victims=facts.victims, root=root,
            has_topology=root.has_constraint(pod_sets) if pg.sub_groups else root.constraint is not None,
        )
        queue = tree.queues.get(pg.queue)
        if queue is not None and queue.is_leaf and pg.queue not in dropped:  # (most jobs)
            return info
        ref = _ref("PodGroup", meta)
        if not pg.queue:
            info.blocked = FitError("QueueDoesNotExist", "PodGroup does not name a queue (spec.queue is empty)")
            self.errors.append(ObjectError(ref, "spec.queue", "must name a queue"))
        elif pg.queue in dropped:
            info.blocked = FitError("QueueDoesNotExist", f"Queue '{pg.queue}' does not exist. {dropped[pg.queue]}")
        elif queue is None and (invalid := self._invalid_queue(pg.queue)):
            info.blocked = FitError("InvalidQueue", f"Queue '{pg.queue}' is invalid, so it is not scheduled: {invalid}")
            self.errors.append(ObjectError(ref, "spec.queue", f"queue '{pg.queue}' is invalid ({invalid}); the "
                                           "PodGroup is not scheduled until the Queue is fixed"))
        elif queue is None:
            info.blocked = FitError("QueueDoesNotExist", f"Queue '{pg.queue}' does not exist")
            self.errors.append(ObjectError(ref, "spec.queue", f"queue '{pg.queue}' does not exist"))
        else:
            info.blocked = FitError(
                "QueueIsNotLeaf", f"Queue '{pg.queue}' is not a leaf queue; workloads must be submitted to leaf queues"
            )
            self.errors.append(ObjectError(ref, "spec.queue", f"queue '{pg.queue}' is not a leaf queue"))
        return info

    def _invalid_queue(self, name: str) -> str:
        """The first input error of the Queue ``name`` (left out by the parser), "" when it has none."""
        if self._queue_errors is None:
            self._queue_errors = {}
            for e in self.parsed.errors:
                if e.object.startswith("Queue "):
                    self._queue_errors.setdefault(e.object[6:], f"{e.field}: {e.message}" if e.field else e.message)
        return self._queue_errors.get(name, "")

    @staticmethod
    def _sub_group_tree(pg: PodGroup, pod_sets: dict[str, PodSetInfo],
                        root_constraint: TopologyConstraint | None) -> SubGroupSet:
        """The subgroup tree (spec 2.2, 9.5): subgroups named as a parent are sets (their minMember is
        ignored, every child is required), the others are pod sets with ``max(minMember, 1)``; the root
        is the PodGroup with its topology constraint (``spec.topologyConstraint``, else the top owner's
        ``kai.scheduler/topology*`` annotations copied onto the PodGroup). The pod sets go to ``pod_sets``."""
        if not pg.sub_groups:
            pod_sets["default"] = PodSetInfo("default", max(pg.min_member, 1))
            return SubGroupSet("", root_constraint, [], ["default"])
        root = SubGroupSet("", root_constraint)
        children: dict[str | None, list[SubGroup]] = {}
        for sg in pg.sub_groups:
            children.setdefault(sg.parent.lower() if sg.parent else None, []).append(sg)

        def build(node: SubGroupSet, key: str | None, seen: frozenset[str]) -> None:
            for sg in children.get(key, []):
                if sg.name in seen:
                    continue  # a cycle (reported by the parser)
                constraint = sg.topology_constraint if sg.topology_constraint and sg.topology_constraint.topology \
                    else None
                if sg.name in children:
                    child = SubGroupSet(sg.name, constraint)
                    node.children.append(child)
                    build(child, sg.name, seen | {sg.name})
                else:
                    pod_sets[sg.name] = PodSetInfo(sg.name, max(sg.min_member, 1), constraint=constraint)
                    node.pod_sets.append(sg.name)

        build(root, None, frozenset())
        return root

    def _task(self, pod: Pod, facts: PodFacts, resources: ResourceIndex, nodes: NodeTable,
              jobs: dict[str, PodGroupInfo]) -> TaskInfo | None:
        meta = pod.meta
        status = task_status(pod)
        node = nodes.by_name.get(pod.node_name, -1) if pod.node_name else -1
        ours = pod.scheduler_name == self.options.scheduler_name
        gpu = self._gpu_request(facts, resources, ours)
        task = TaskInfo(
            uid=facts.uid, name=meta.name, namespace=meta.namespace, pod=pod,
            status=status, req=facts.task_vector(resources, self.vector_names, gpu),
            creation=_ts(meta.creation_timestamp, self.now), node=node, node_name=pod.node_name,
            task_priority=facts.task_priority, host_ports=facts.host_ports, signature=facts.signature,
            labels=meta.labels, initial_status=status,
        )
        if status in ACTIVE_USED and pod.node_name and node < 0:
            self.errors.append(ObjectError(_ref("Pod", meta), "spec.nodeName",
                                           f"node '{pod.node_name}' does not exist; the pod is not accounted"))
        self._gpu(task, facts, gpu, ours)
        if pod.resource_claims and self.dra is not None and not ours:
            self._claims(task, None)
        if not ours:
            return task if status in ACTIVE_USED else None
        pg_name = facts.group_name
        if pg_name is None:
            pg_name = self._default_pod_group(pod).meta.name
        job = jobs.get(f"{meta.namespace}/{pg_name}")
        if job is None:
            self.errors.append(ObjectError(_ref("Pod", meta), f"metadata.annotations.{C.POD_GROUP_NAME_ANNOTATION}",
                                           f"PodGroup '{meta.namespace}/{pg_name}' does not exist; "
                                           "the pod is not scheduled"))
            return task if status in ACTIVE_USED else None
        if job.pod_group is not None and job.pod_group.sub_groups:
            sg = meta.labels.get(C.SUBGROUP_NAME_LABEL, "")
            if sg not in job.pod_sets:
                self.errors.append(ObjectError(
                    _ref("Pod", meta), f"metadata.labels.{C.SUBGROUP_NAME_LABEL}",
                    f"names no leaf sub-group of PodGroup '{job.key}'; the pod is not scheduled"))
                return task if status in ACTIVE_USED else None
            task.pod_set = sg
        if self.gpu_error is not None and status not in ACTIVE_USED:
            job.blocked = FitError(INVALID_GPU_REQUEST, f"Pod {task.key} has an invalid GPU request: "
                                   f"{self.gpu_error.field}: {self.gpu_error.message}")
        elif task.legacy_mig and status not in ACTIVE_USED:
            job.blocked = FitError(LEGACY_MIG, f"Pod {task.key} requests MIG by annotation "
                                   f"({legacy_mig_annotation(pod)}), which is not supported; request the MIG "
                                   "profile as a container resource instead")
        if pod.resource_claims and self.dra is not None:
            self._claims(task, job)
        task.job = job
        job.pod_sets[task.pod_set].tasks.append(task)
        if C.SEGMENT_SIZE_ANNOTATION in meta.annotations:
            self.segmented.add(job.key)
        return task

    def _gpu_request(self, facts: PodFacts, resources: ResourceIndex, ours: bool) -> GpuRequest:
        """The pod's GPU request (spec 7.1): parsed from our pods; another scheduler's pod holds the whole GPUs
        its request vector counts."""
        if not ours:
            whole = float(facts.request_vector(resources, self.vector_names)[GPU])
            return GpuRequest(GpuKind.WHOLE, int(whole)) if whole else NO_GPU
        return facts.gpu[0]

    def _gpu(self, task: TaskInfo, facts: PodFacts, gpu: GpuRequest, ours: bool) -> None:
        """The task's GPU request (``gpu``, its vector already counts it) and, when it runs on shared devices,
        its GPU groups."""
        self.gpu_error = None
        pod = facts.pod
        task.gpu = gpu
        if ours:
            err = facts.gpu[1]
            if err is not None:
                self.gpu_error = err
                self.errors.append(ObjectError(_ref("Pod", pod.meta), err.field, err.message))
            task.legacy_mig = facts.legacy_mig
        # whole devices the vector counts (none for shared ones), plus each shared device
        if gpu.shared or gpu.kind is GpuKind.WHOLE:
            task.devices = float(gpu.count)
        else:
            task.devices = float(task.req[GPU])
        task.request_gpus = gpu.requested_gpus(self.min_gpu_memory)
        task.accepted_gpus = task.request_gpus
        if gpu.shared and task.status in ACTIVE_USED and task.node >= 0:
            groups = list(gpu_groups_of(task.labels))[: gpu.count]
            while len(groups) < gpu.count:  # a running shared pod without a group has devices of its own
                groups.append(f"{PRIVATE_PREFIX}{task.uid}:{len(groups)}")
            task.gpu_groups = tuple(groups)


MIN_MEMBER_TOO_LARGE = "MinMemberTooLarge"


def check_min_members(job: PodGroupInfo, pod_slots: int) -> None:
    """Block a job whose gang minimum is more pods than the cluster's nodes hold together (their allocatable
    ``pods``): it could never run, however many pods it gets (KAI would only say NotReady)."""
    need = 0
    for ps in job.pod_sets.values():
        need += ps.min_available
    if need > pod_slots and need > 1:  # (a single pod that fits nowhere: the fit errors say why)
        what = f"minMember {need:,}" if len(job.pod_sets) == 1 else f"the minMember of its sub-groups ({need:,} pods)"
        job.blocked = FitError(MIN_MEMBER_TOO_LARGE, f"PodGroup {job.key} can never run: {what} is more pods than "
                               f"the cluster's nodes hold together ({pod_slots:,}, their allocatable pods); lower "
                               "minMember or add nodes")


def build_snapshot(parsed: ParsedObjects, now: datetime, options: SnapshotOptions | None = None) -> Snapshot:
    return SnapshotBuilder(parsed, now, options or SnapshotOptions()).build()


__all__ = ["CPU", "GPU", "MEMORY", "Snapshot", "SnapshotOptions", "build_queue_tree", "build_snapshot"]
