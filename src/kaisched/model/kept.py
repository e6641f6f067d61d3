"""A snapshot kept from cycle to cycle and brought up to date object by object (issue 28, the incremental state).

A full build (:func:`kaisched.model.snapshot.build_snapshot`) models every pod, PodGroup and node again each cycle.
:class:`KeptSnapshot` models them once and then, for the next cycle's objects, only what changed: the objects are
compared by identity (the simulator and Kubernetes mode keep an unchanged object's identity from cycle to cycle,
and objects are immutable), so a pod or PodGroup that is not the same object as before was added, replaced or
removed. For each of those it

* takes the old pod's task off its node's accounting and out of its job, and models the new one
  (:meth:`SnapshotBuilder._task`, the full build's own code) onto its node and into its job;
* models a new or replaced PodGroup's job (:meth:`SnapshotBuilder._job`) and hands it the tasks of the job it
  replaces; drops a removed PodGroup's job.

What stays the same between cycles is the *model before the session*: the kept nodes' accounting (idle and
releasing resources, shared devices, tasks per node), each task's status, node and devices, each job's facts. A
session changes tasks and jobs as it decides, so every cycle starts by putting them back as they were modelled
(:meth:`KeptSnapshot.session_snapshot`) and gives the session a copy of the nodes (:meth:`NodeTable.copy`).

Where an input could make a full build answer differently from an update — an input error, a queue, node,
priority class, topology or DRA object changed, a pod of another scheduler or a reservation pod changed, an object
without a creation time (created at the clock of the cycle that reads it), segments, pods without a PodGroup —
:meth:`KeptSnapshot.update` says no and the caller builds in full (and keeps that build when it may be kept). The
differential test (``tests/unit/test_kept_snapshot.py``) compares every cycle of random event sequences with a
full rebuild, result for result.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from kaisched.k8s import constants as C
from kaisched.k8s.objects import KubeObject, ParsedObjects, Pod, PodGroup
from kaisched.model.job import FitError, PodGroupInfo
from kaisched.model.pod_facts import pod_facts, retain
from kaisched.model.resources import PODS
from kaisched.model.snapshot import (
    Snapshot,
    SnapshotBuilder,
    SnapshotOptions,
    check_min_members,
    is_reservation_pod,
    job_priorities,
    retain_pod_groups,
)
from kaisched.model.status import ACTIVE_USED
from kaisched.model.task import TaskInfo

_Obj = TypeVar("_Obj", Pod, PodGroup)
#: what a task is reset to before each session: (task, its job, node, shared devices, GPUs accepted there)
_TaskBase = tuple[TaskInfo, PodGroupInfo | None, int, tuple[str, ...], float]
#: what a job is reset to: (job, last start, stale since, blocked, victims)
_JobBase = tuple[PodGroupInfo, datetime | None, datetime | None, FitError | None, dict[str, datetime]]


def _diff(kept: dict[int, _Obj], objs: list[_Obj]) -> tuple[list[_Obj], list[_Obj]]:
    """The objects of ``kept`` (by identity) not in ``objs``, and those of ``objs`` not in ``kept``."""
    now = dict(zip(map(id, objs), objs, strict=True))
    return [kept[i] for i in kept.keys() - now.keys()], [now[i] for i in now.keys() - kept.keys()]


class KeptSnapshot:
    """A snapshot model kept between cycles (module docstring); make one with :meth:`build`."""

    __slots__ = ("_builder", "_jobs_base", "_latest_queue", "_order", "_pod_groups", "_pods", "_static", "_task_of",
                 "_tasks_base", "_untimed", "nodes", "options", "pod_slots", "snapshot", "updates")

    def __init__(self, snapshot: Snapshot, builder: SnapshotBuilder, parsed: ParsedObjects,
                 options: SnapshotOptions, untimed: tuple[str, ...] = ()) -> None:
        self.snapshot = snapshot
        builder.parsed = ParsedObjects(errors=parsed.errors)  # (its updates read the input errors only)
        # the queues without a creation time (a full build creates them at its clock), and the latest one given
        self._untimed = untimed
        timed = [q.creation for q in snapshot.queues.queues.values() if q.name not in untimed]
        self._latest_queue: datetime | None = max(timed) if timed else None
        self._builder = builder
        self.options = options
        self.nodes = snapshot.nodes
        self.nodes.own_nodes()
        self.pod_slots = int(self.nodes.allocatable[PODS].sum())
        self._static = _static(parsed)
        self._pods: dict[int, Pod] = {id(p): p for p in parsed.pods}  # kept alive: the identities stay theirs
        self._pod_groups: dict[int, PodGroup] = {id(pg): pg for pg in parsed.pod_groups}
        self._task_of: dict[int, TaskInfo] = {}  # id of a pod -> its task (pods without one are not listed)
        self._order: dict[str, str] = {}  # uid of a task -> its pod's "<namespace>\0<name>" (the tasks' order)
        by_uid = snapshot.tasks
        for p in parsed.pods:
            facts = pod_facts(p)
            task = by_uid.get(facts.uid)
            if task is not None and task.pod is p:
                self._task_of[id(p)] = task
                self._order[task.uid] = facts.order
        self._tasks_base: dict[str, _TaskBase] = {
            t.uid: (t, t.job, t.node, t.gpu_groups, t.accepted_gpus) for t in snapshot.tasks.values()}
        self._jobs_base: dict[str, _JobBase] = {
            j.key: (j, j.last_start, j.stale_since, j.blocked, j.victims) for j in snapshot.jobs.values()}
        self.updates = 0  # cycles answered by an update (not a full build)

    # ---- making one --------------------------------------------------------------------------------
    @classmethod
    def build(cls, parsed: ParsedObjects, now: datetime, options: SnapshotOptions) -> tuple[Snapshot,
                                                                                             KeptSnapshot | None]:
        """A full build of ``parsed`` and, when later cycles may be answered by updating it, the kept model
        (the snapshot returned is then the first session's, see :meth:`session_snapshot`)."""
        builder = SnapshotBuilder(parsed, now, options)
        snapshot = builder.build()
        untimed = _untimed_queues(parsed, snapshot, now)
        if untimed is None or not _keepable(parsed, snapshot, builder, now, options):
            return snapshot, None
        kept = cls(snapshot, builder, parsed, options, untimed)
        return kept.session_snapshot(now), kept

    # ---- one cycle -------------------------------------------------------------------------------------
    def session_snapshot(self, now: datetime) -> Snapshot:
        """The model as it was built, for a new session at ``now``: every task and job as modelled (whatever the
        last session did to them), the nodes a copy the session may change."""
        self._reset()
        return self._session_snapshot(now)

    def _session_snapshot(self, now: datetime) -> Snapshot:
        s = self.snapshot
        for name in self._untimed:  # (created at the cycle's clock, as a full build makes them)
            s.queues.queues[name].creation = now
        return Snapshot(now=now, resources=s.resources, nodes=self.nodes.copy(), queues=s.queues, jobs=s.jobs,
                        tasks=s.tasks, total=s.total, min_node_gpu_memory=s.min_node_gpu_memory, errors=[],
                        topologies=s.topologies, dra=None, nominated=list(s.nominated))

    def _reset(self) -> None:
        """Every task and job back as modelled (a session changes their statuses, nodes, errors)."""
        for task, job, node, groups, accepted in self._tasks_base.values():
            task.status = task.initial_status
            task.job = job
            task.node = node
            task.gpu_groups = groups
            task.accepted_gpus = accepted
            task.placed_in_cycle = False
            task.fit_id = -1
        for job, last_start, stale_since, blocked, victims in self._jobs_base.values():
            job.last_start = last_start
            job.stale_since = stale_since
            job.blocked = blocked
            job.victims = victims
            job.fit_errors = []
            job.pipelined_reason = None
            job.version += 1  # (what was read off its tasks is read again)

    def update(self, parsed: ParsedObjects, now: datetime, options: SnapshotOptions) -> Snapshot | None:
        """The snapshot of ``parsed`` at ``now`` made by applying what changed since the last cycle to the kept
        model; None when a full build must answer (module docstring: the model is then no longer valid)."""
        if (options != self.options or parsed.errors or parsed.workloads or parsed.device_classes
                or parsed.resource_slices or parsed.resource_claims or parsed.resource_claim_templates
                or not self._same_static(parsed)
                or (self._untimed and self._latest_queue is not None and now <= self._latest_queue)):
            return None
        self._reset()  # tasks and jobs back as modelled: as the kept nodes account them
        if not self._apply(parsed):
            return None
        self.updates += 1
        return self._session_snapshot(now)  # (every task and job as modelled: reset above, or new)

    # ---- applying changes --------------------------------------------------------------------------
    def _same_static(self, parsed: ParsedObjects) -> bool:
        """The nodes, queues, priority classes and topologies are those of the model: the same objects, or equal
        ones (an object written again with what the model does not read, such as a status: kept from now on)."""
        static = _static(parsed)
        for kept, now in zip(self._static, static, strict=True):
            if len(kept) != len(now) or not all(a is b or a == b for a, b in zip(kept, now, strict=True)):
                return False
        self._static = static
        return True

    def _equal_pods(self, removed: list[Pod], added: list[Pod]) -> tuple[list[Pod], list[Pod]]:
        """Take the added pods equal to a removed one of the same name as that one (the task stays, with the new
        object); the pods truly removed and added."""
        if not removed or not added:
            return removed, added
        by_key = {(p.meta.namespace, p.meta.name): p for p in removed}
        fresh: list[Pod] = []
        for pod in added:
            old = by_key.get((pod.meta.namespace, pod.meta.name))
            if old is None or old != pod:
                fresh.append(pod)
                continue
            del by_key[(old.meta.namespace, old.meta.name)]
            del self._pods[id(old)]
            self._pods[id(pod)] = pod
            task = self._task_of.pop(id(old), None)
            if task is not None:
                task.pod = pod
                self._task_of[id(pod)] = task
        return list(by_key.values()), fresh

    def _equal_groups(self, removed: list[PodGroup], added: list[PodGroup]) -> tuple[list[PodGroup], list[PodGroup]]:
        """:meth:`_equal_pods` for PodGroups (the job stays, with the new object)."""
        if not removed or not added:
            return removed, added
        by_key = {(g.meta.namespace, g.meta.name): g for g in removed}
        fresh: list[PodGroup] = []
        jobs = self.snapshot.jobs
        for pg in added:
            key = (pg.meta.namespace, pg.meta.name)
            old = by_key.get(key)
            job = jobs.get(f"{key[0]}/{key[1]}")
            if old is None or old != pg or job is None or job.pod_group is not old:
                fresh.append(pg)
                continue
            del by_key[key]
            del self._pod_groups[id(old)]
            self._pod_groups[id(pg)] = pg
            job.pod_group = pg
        return list(by_key.values()), fresh

    def _apply(self, parsed: ParsedObjects) -> bool:
        removed_pods, added_pods = self._equal_pods(*_diff(self._pods, parsed.pods))
        removed_groups, added_groups = self._equal_groups(*_diff(self._pod_groups, parsed.pod_groups))
        if not (removed_pods or added_pods or removed_groups or added_groups):
            return True
        order = self._order
        added_pods.sort(key=lambda p: pod_facts(p).order)  # (the order they are modelled in does not matter: fixed)
        added_groups.sort(key=lambda g: (g.meta.namespace, g.meta.name))
        builder = self._builder
        if any(not _simple_pod(p, builder) for p in (*removed_pods, *added_pods)):
            return False
        if any(g.meta.creation_timestamp is None for g in added_groups):
            return False
        snapshot = self.snapshot
        jobs, tasks = snapshot.jobs, snapshot.tasks
        # pods gone (or replaced): off their nodes and out of their jobs
        for pod in removed_pods:
            del self._pods[id(pod)]
            task = self._task_of.pop(id(pod), None)
            if task is None:
                continue
            del tasks[task.uid]
            del self._tasks_base[task.uid]
            del order[task.uid]
            if task.status in ACTIVE_USED and task.node >= 0:
                self.nodes.remove_task(task, task.node)
            if task.job is not None:
                task.job.pod_sets[task.pod_set].tasks.remove(task)
        # PodGroups gone or replaced
        replaced: dict[str, PodGroupInfo] = {}
        for pg in removed_groups:
            del self._pod_groups[id(pg)]
            key = f"{pg.meta.namespace}/{pg.meta.name}"
            job = jobs.get(key)
            if job is None or job.pod_group is not pg:
                return False  # (a duplicate of another PodGroup: the full build says which one counts)
            del jobs[key]
            del self._jobs_base[key]
            replaced[key] = job
        priorities, default_priority = job_priorities(parsed)
        errors = len(builder.errors)
        for pg in added_groups:
            self._pod_groups[id(pg)] = pg
            info = builder._job(pg, snapshot.queues, {}, priorities, default_priority)
            if len(builder.errors) != errors or info.key in jobs:
                return False
            old = replaced.pop(info.key, None)
            if old is not None:
                if old.pod_sets.keys() != info.pod_sets.keys():
                    return False  # (other sub-groups: the pods may belong elsewhere)
                for name, ps in old.pod_sets.items():
                    info.pod_sets[name].tasks = ps.tasks
                    for t in ps.tasks:
                        self._tasks_base[t.uid] = (t, info, *self._tasks_base[t.uid][2:])
                        t.job = info
            if info.blocked is None:
                check_min_members(info, self.pod_slots)
            jobs[info.key] = info
            self._jobs_base[info.key] = (info, info.last_start, info.stale_since, info.blocked, info.victims)
        if any(job.tasks for job in replaced.values()):
            return False  # a PodGroup removed while its pods stay (they become input errors)
        # new pods: modelled as the full build models them
        touched: set[tuple[str, str]] = set()
        nodes_added: set[int] = set()
        for pod in added_pods:
            self._pods[id(pod)] = pod
            facts = pod_facts(pod)
            if facts.uid in tasks:
                return False  # (two pods with one uid)
            task = builder._task(pod, facts, snapshot.resources, self.nodes, jobs)
            if len(builder.errors) != errors:
                return False
            if task is None:
                continue
            self._task_of[id(pod)] = task
            tasks[task.uid] = task
            order[task.uid] = facts.order
            if task.status in ACTIVE_USED and task.node >= 0:
                self.nodes.add_task(task, task.node)
                nodes_added.add(task.node)
            self._tasks_base[task.uid] = (task, task.job, task.node, task.gpu_groups, task.accepted_gpus)
            if task.job is not None:
                touched.add((task.job.key, task.pod_set))
        for key, name in touched:
            ps = jobs[key].pod_sets[name]
            if len(ps.tasks) > 1:
                ps.tasks.sort(key=_task_order)
        for j in nodes_added:  # a node's tasks in (namespace, name) order too
            on_node = self.nodes.infos[j].tasks
            self.nodes.infos[j].tasks = {uid: on_node[uid] for uid in sorted(on_node, key=order.__getitem__)}
        if added_pods:  # in (namespace, name) order, as the full build lists them
            ordered = [tasks[uid] for uid in sorted(tasks, key=order.__getitem__)]
            tasks.clear()
            tasks.update((t.uid, t) for t in ordered)
        if snapshot.nominated or any(p.nominated_node_name for p in added_pods):
            snapshot.nominated = [t for t in tasks.values() if t.pod.nominated_node_name and t.job is not None]
        if added_groups:
            ordered_jobs = sorted(jobs.items())
            jobs.clear()
            jobs.update(ordered_jobs)
        retain(parsed.pods)
        retain_pod_groups(parsed.pod_groups)
        return True


def _task_order(t: TaskInfo) -> tuple[datetime, str]:
    return t.creation, t.uid


def _static(parsed: ParsedObjects) -> tuple[list[KubeObject], ...]:
    """The objects an update never applies (a change of one needs a full build)."""
    return list(parsed.nodes), list(parsed.queues), list(parsed.priority_classes), list(parsed.topologies)


def _simple_pod(pod: Pod, builder: SnapshotBuilder) -> bool:
    """A pod an update can add or remove: this scheduler's, in a PodGroup, with a creation time, no DRA claims,
    no segments and no extended resource the model does not know; not a reservation pod."""
    if pod.scheduler_name != builder.options.scheduler_name or is_reservation_pod(pod):
        return False
    meta = pod.meta
    if meta.creation_timestamp is None or pod.resource_claims or C.SEGMENT_SIZE_ANNOTATION in meta.annotations:
        return False
    facts = pod_facts(pod)
    return facts.group_name is not None and all(name in builder.vector_names for name in facts.extended)


def _untimed_queues(parsed: ParsedObjects, snapshot: Snapshot, now: datetime) -> tuple[str, ...] | None:
    """The queues a full build at ``now`` created at its clock (Queues without a creation time, KAI's default
    queues), when a later clock orders them alike (every other queue was created before ``now``); None otherwise."""
    given = {q.meta.name for q in parsed.queues if q.meta.creation_timestamp is not None}
    untimed = tuple(sorted(name for name in snapshot.queues.queues if name not in given))
    if untimed and any(q.creation >= now for name, q in snapshot.queues.queues.items() if name in given):
        return None
    return untimed


def _keepable(parsed: ParsedObjects, snapshot: Snapshot, builder: SnapshotBuilder, now: datetime,
              options: SnapshotOptions) -> bool:
    """A full build that later cycles may update (module docstring)."""
    if (snapshot.errors or snapshot.dra is not None or builder.segmented or not options.full_hierarchy_fairness
            or parsed.workloads or parsed.device_classes or parsed.resource_slices or parsed.resource_claims
            or parsed.resource_claim_templates):
        return False
    for objs in (parsed.pods, parsed.pod_groups):
        for o in objs:
            if o.meta.creation_timestamp is None:
                return False
    return all(facts.group_name is not None for facts in map(pod_facts, parsed.pods)
               if facts.pod.scheduler_name == options.scheduler_name)
