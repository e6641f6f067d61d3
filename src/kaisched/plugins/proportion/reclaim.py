"""The proportion plugin's reclaim rules (spec 5.5): when a job of queue A may take resources from queue B.

Four hooks, all registered by :class:`~kaisched.plugins.proportion.plugin.ProportionPlugin`:

* :meth:`ReclaimRules.can_reclaim` — the gate ``CanReclaimResources(P)``, on the live queue state;
* :meth:`ReclaimRules.on_job_solution_start` — copies every queue's ``allocated`` and
  ``allocated_non_preemptible`` once per reclaim attempt, before any victim is virtually evicted (state
  committed by earlier jobs of the action is in it);
* :meth:`ReclaimRules.validate` — the reclaim scenario validator (spec 5.5 steps 1-5) on that copy, then
  the loop guard (below). The fair shares and deserved quotas are static within a session and read live;
* :meth:`ReclaimRules.loop_filter` — the loop guard as a victim filter (victims it would refuse in any
  scenario are no candidates).

Interpretation choices (where the spec leaves room, and how they relate to KAI's code):

* **Elastic and core chunks.** For every victim job the victim tasks are grouped per pod set in the
  order they were taken. A pod set that had ``n`` active-allocated tasks when the reclaim attempt
  started (:meth:`on_job_solution_start`) and has ``minAvailable = m`` has ``max(0, n - m)`` surplus
  tasks: the first that many of its victim tasks are *elastic* (each leaves the pod set at or above its
  minimum) and form one chunk each; all other victim tasks of the job (every pod set) form one combined
  *core* chunk. Chunks of a job are elastic first, then core; jobs come in the scenario's order. KAI's
  code (``splitVictimTasks``) instead calls the first ``m`` victim tasks of a pod set core and the
  rest elastic whatever the job keeps; both agree when a job loses all its pods or one pod, and differ
  when a job loses between 2 and ``m`` surplus pods (KAI: one combined chunk, here one chunk each,
  which checks the strategies after each pod).
  The statuses "at solution start" are remembered by a deallocate handler that records each task's
  status before its first change after :meth:`on_job_solution_start`; untouched tasks keep it.
* **Moved victims.** With ``allow_consolidating_reclaim`` a victim task that is active-allocated after
  the simulation (re-placed elsewhere, ``Pipelined``, or put back) contributes nothing; the chunk split
  is made first and the moved tasks are then left out of their chunk (an empty chunk disappears), as in
  KAI's ``getResources``.
* **Reclaims allocate would undo** (kaisched's loop guard, docs/evictions.md). Nothing keeps a pipelined
  placement to the next cycle: there the reclaimer's job is pending again and the resources its victims
  free are idle, and allocate hands them to the queue it orders first (spec 5.4). A scenario is refused when
  that queue is the one the scenario takes from: for every leveled pair (A', B') of a queue that really
  loses pods (moved victims do not count), B' holding its allocation less what it loses, with the first in
  job order of its next jobs (its head pending job, or a victim job pending again, asking for its evicted
  pods; one pod of a job that keeps its minimum), is ordered before A' with the reclaimer's head pending
  job (the reclaimer when it is the head). Heads are read once per session when reclaim starts (the jobs
  allocate left pending, in job order); the allocations are those of the reclaim attempt's start. Without
  the guard such a reclaim is undone by the next cycle's allocate and done again, forever.
* **Leveled queues.** The two root-first ancestor paths are walked together and the first pair that
  differs is taken (``A'``, ``B'``: the children of the lowest common ancestor, or the two top-level
  queues); if one path is a prefix of the other, the pair at the last common depth (KAI's
  ``getLeveledQueues``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from kaisched.framework.scenario import Scenario, VictimJob, common_prefix
from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo, PodSetInfo
from kaisched.model.status import ACTIVE_ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.proportion.plugin import (
    EPS,
    UNLIMITED,
    QueueAttributes,
    Vec3,
    _le,
    job_request,
    queue_order_key,
)

_NO_LIMIT: Vec3 = [UNLIMITED, UNLIMITED, UNLIMITED]


@dataclass(slots=True)
class _LoopGroup:
    """One victim queue's pool ordered by the loop guard's key of B' (see ``ReclaimRules.select_victims``)."""

    stamp: tuple[tuple[float, ...], tuple[float, ...]]  # (the victim queue's, B''s) allocations it was made at
    keys: list[tuple[object, ...]]  # ascending
    jobs: list[PodGroupInfo]  # in key order
    always: list[PodGroupInfo]  # jobs with no active pod: always candidates


def _add(a: Vec3, b: Vec3) -> Vec3:
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]


def _involved(vectors: list[Vec3]) -> set[int]:
    """Resource indices (0 gpu, 1 cpu, 2 memory) that some vector uses (> 0)."""
    return {r for v in vectors for r in range(3) if v[r] > 0}


#: by-totals validation: amounts are multiples of 1/_GRID below _BOUND (memory: whole bytes below _MEMORY_BOUND);
#: the sum or difference of two of them is then an exact float
_GRID = 1024.0
_BOUND = 2.0**42
_MEMORY_BOUND = 2.0**52


def _exact(v: Vec3) -> bool:
    """``v`` is an amount by-totals validation sums exactly (and not negative)."""
    return (0.0 <= v[0] < _BOUND and (v[0] * _GRID).is_integer() and 0.0 <= v[1] < _BOUND
            and (v[1] * _GRID).is_integer() and 0.0 <= v[2] < _MEMORY_BOUND and v[2].is_integer())


class _Inexact(Exception):
    """An amount by-totals validation cannot sum exactly."""


class _Totals:
    """The by-totals validator's memo for one reclaim attempt: the victim jobs of the last scenario it summed
    and, per victim leaf queue, its running totals after each of its victim jobs with chunks."""

    __slots__ = ("leaves", "victims")

    def __init__(self) -> None:
        self.victims: list[VictimJob] = []
        # leaf queue -> [(index of the victim job, chunks so far, involved resource bits so far, its last chunk)]
        self.leaves: dict[str, list[tuple[int, Vec3, int, Vec3]]] = {}

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` victim jobs."""
        if n >= len(self.victims):
            return
        del self.victims[n:]
        for name in list(self.leaves):
            entries = self.leaves[name]
            while entries and entries[-1][0] >= n:
                entries.pop()
            if not entries:
                del self.leaves[name]

    def add(self, victim: VictimJob, totals: tuple[Vec3, int, Vec3] | None) -> None:
        index = len(self.victims)
        self.victims.append(victim)
        if totals is None:
            return
        total, bits, last = totals
        entries = self.leaves.setdefault(victim.job.queue, [])
        if entries:
            _, before, before_bits, _ = entries[-1]
            total = _add(before, total)
            if not _exact(total):
                raise _Inexact
            bits |= before_bits
        entries.append((index, total, bits, last))


def saturation_ratio(allocated: float, fair_share: float) -> float:
    """``allocated / fair_share``; infinite for a zero fair share with something allocated, 0 for a zero
    or unlimited fair share otherwise."""
    if fair_share == 0:
        return float("inf") if allocated > 0 else 0.0
    if fair_share == UNLIMITED:
        return 0.0
    return allocated / fair_share


def humanize(value: float, unit: float) -> str:
    """KAI's ``HumanizeResource``: ``Unlimited`` for -1, else ``value / unit`` with at most 3 decimals
    (truncated, as go-humanize's ``FtoaWithDigits``) and no trailing zeros."""
    if value == UNLIMITED:
        return "Unlimited"
    text = f"{value / unit:.6f}"
    dot = text.index(".")
    text = text[: dot + 4]
    return text.rstrip("0").rstrip(".")


def resources_text(v: Vec3) -> str:
    """KAI's ``ResourceRequirements.String()``: ``GPU: 4, CPU: 8 (cores), memory: 32 (GB)``."""
    return f"GPU: {humanize(v[0], 1)}, CPU: {humanize(v[1], 1000)} (cores), memory: {humanize(v[2], 1e9)} (GB)"


class ReclaimRules:
    """Spec 5.5 for one session, on the proportion plugin's queue attributes (see the module doc)."""

    def __init__(self, queues: dict[str, QueueAttributes], total: Vec3, saturation_multiplier: float,
                 ssn: Session) -> None:
        self.queues = queues
        self.total = total
        self.saturation_multiplier = saturation_multiplier
        self.ssn = ssn
        self.allow_consolidating_reclaim = ssn.params.allow_consolidating_reclaim
        # allocatable share with -1 kept as "unlimited" (MaintainFairShare compares against it)
        self._allocatable = {name: q.allocatable_share(_NO_LIMIT) for name, q in queues.items()}
        # the copy taken at solution start: queue -> allocated / allocated non-preemptible
        self._allocated: dict[str, Vec3] | None = None
        self._non_preemptible: dict[str, Vec3] = {}
        # task uid -> status at solution start, for tasks changed since then
        self._start_status: dict[str, TaskStatus] = {}
        self._tracking = False
        self._active_at_start: dict[tuple[str, str], int] = {}  # (job uid, pod set) -> count
        self._totals = _Totals()  # the by-totals validator's memo for the current reclaim attempt
        self._exact_start = False  # the copy taken at solution start is exact for by-totals validation
        # the loop guard's head jobs: leaf queue -> (job order key, job, request of its next tasks), read at
        # the first reclaim attempt (see the module doc)
        self._heads: dict[str, tuple[tuple[object, ...], PodGroupInfo, Vec3]] | None = None
        # the loop filter's queue-order keys, until the next commit: (victim uid, B') and (reclaimer uid, A')
        self._filter_commits = -1
        self._victim_keys: dict[tuple[str, str], tuple[object, ...]] = {}
        self._reclaimer_keys: dict[tuple[str, str], tuple[object, ...]] = {}
        # the victim selector's groups: (victim leaf, B') -> the leaf's pool sorted by key (see select_victims)
        self._loop_groups: dict[tuple[str, str], _LoopGroup] = {}

    # ---- gate ------------------------------------------------------------------------------------
    def can_reclaim(self, job: PodGroupInfo) -> bool:
        """``CanReclaimResources(P)``: the leaf queue stays within its fair share with P's next tasks, and a
        non-preemptible P stays within the leaf's deserved quota."""
        leaf = self.queues.get(job.queue)
        if leaf is None:
            return False
        req = job_request(self.ssn.tasks_to_allocate(job))
        if not _le(_add(leaf.allocated, req), leaf.fair_share):
            return False
        return job.preemptible or _le(_add(leaf.allocated_non_preemptible, req), leaf.deserved)

    # ---- solution start --------------------------------------------------------------------------
    def on_job_solution_start(self, job: PodGroupInfo) -> None:
        if self._heads is None:  # (before any simulation: every job as allocate left it)
            self._heads = self._next_heads()
        self._allocated = {name: q.allocated.copy() for name, q in self.queues.items()}
        self._non_preemptible = {name: q.allocated_non_preemptible.copy() for name, q in self.queues.items()}
        self._start_status = {}
        self._active_at_start = {}
        self._totals = _Totals()
        self._exact_start = all(_exact(v) for v in self._allocated.values())
        if not self._tracking:  # registered lazily: the allocate action never pays for it
            self.ssn.deallocate_handlers.append(self._remember_status)
            self._tracking = True

    def _remember_status(self, task: TaskInfo) -> None:
        # deallocate handlers run before the task's status changes
        if task.uid not in self._start_status:
            self._start_status[task.uid] = task.status

    def active_at_start(self, job: PodGroupInfo, ps: PodSetInfo) -> int:
        """Active-allocated tasks of the pod set when the current reclaim attempt started."""
        key = (job.uid, ps.name)
        count = self._active_at_start.get(key)
        if count is None:
            start = self._start_status
            count = sum(1 for t in ps.tasks if start.get(t.uid, t.status) in ACTIVE_ALLOCATED)
            self._active_at_start[key] = count
        return count

    # ---- validator -------------------------------------------------------------------------------
    def victim_chunks(self, victim: VictimJob) -> list[Vec3]:
        """Step 1 for one victim job: its elastic chunks (one task each), then its core chunk."""
        job = victim.job
        per_pod_set: dict[str, list[TaskInfo]] = {}
        for t in victim.tasks:
            per_pod_set.setdefault(t.pod_set, []).append(t)
        elastic: list[TaskInfo] = []
        core: list[TaskInfo] = []
        for name, tasks in per_pod_set.items():
            ps = job.pod_sets.get(name)
            surplus = 0 if ps is None else max(0, self.active_at_start(job, ps) - ps.min_available)
            elastic.extend(tasks[:surplus])
            core.extend(tasks[surplus:])
        skip_moved = self.allow_consolidating_reclaim
        chunks: list[Vec3] = [
            job_request([t]) for t in elastic if not (skip_moved and t.status in ACTIVE_ALLOCATED)
        ]
        core_tasks = [t for t in core if not (skip_moved and t.status in ACTIVE_ALLOCATED)]
        if core_tasks:
            chunks.append(job_request(core_tasks))
        return chunks

    def leveled(self, a: QueueAttributes, b: QueueAttributes) -> tuple[QueueAttributes, QueueAttributes]:
        """``(A', B')``: the first differing pair on the two root-first paths (see the module doc)."""
        pa, pb = a.path[::-1], b.path[::-1]
        la, lb = pa[0], pb[0]
        for i in range(min(len(pa), len(pb))):
            la, lb = pa[i], pb[i]
            if la is not lb:
                break
        return la, lb

    #: validate by per-queue totals when the amounts allow it (see :meth:`_validate_by_totals`); tests compare it
    #: with the chunk-by-chunk walk
    by_totals = True

    def validate(self, scenario: Scenario) -> bool:
        """The reclaim scenario validator, spec 5.5 steps 1-5."""
        allocated = self._allocated
        assert allocated is not None, "proportion: reclaim validator called before on_job_solution_start"
        reclaimer = self.queues.get(scenario.preemptor.queue)
        if reclaimer is None:
            return False
        req = job_request(scenario.preemptor_tasks)
        verdict: bool | None = None
        if self.by_totals and self._exact_start:
            verdict = self._validate_by_totals(scenario, reclaimer, req, allocated)
        if verdict is None:
            verdict = self._validate_chunk_by_chunk(scenario, reclaimer, req, allocated)
        return verdict and not self.allocate_would_undo(scenario, reclaimer, req, allocated)

    # ---- loop guard ----------------------------------------------------------------------------------
    def _next_heads(self) -> dict[str, tuple[tuple[object, ...], PodGroupInfo, Vec3]]:
        """Per leaf queue, the first in job order of the jobs allocate left pending (ready, in a known queue),
        with the request of its next tasks: what allocate orders the queue by in the next cycle."""
        ssn = self.ssn
        jobs = ssn.jobs_with_pending if ssn.jobs_with_pending is not None else list(ssn.jobs.values())
        heads: dict[str, tuple[tuple[object, ...], PodGroupInfo, Vec3]] = {}
        for job in jobs:
            if job.blocked is not None or job.queue not in self.queues or not job.has_pending() \
                    or not job.is_ready():
                continue
            tasks = ssn.tasks_to_allocate(job)
            if not tasks:
                continue
            key = ssn.cached_job_order_key(job)
            known = heads.get(job.queue)
            if known is None or key < known[0]:
                heads[job.queue] = (key, job, job_request(tasks))
        return heads

    def _pending_again(self, victim: VictimJob, evicted: list[TaskInfo]) -> Vec3:
        """What a victim job asks for in the next cycle: one evicted pod (the first in task order) when the
        job keeps its minimum, else all its evicted pods."""
        if victim.job.is_allocated_gang_satisfied():
            return job_request([min(evicted, key=self.ssn.task_order_key)])
        return job_request(evicted)

    def loop_filter(self, preemptor: PodGroupInfo, victim: PodGroupInfo) -> bool:
        """The loop guard as a reclaim victim filter, so that the search does not try scenarios the validator
        would refuse: False (no candidate) when the victim's queue, having lost the victim job's first chunk
        (one pod of a job above its minimum, else all its active pods) and with the first in job order of its
        head and that job as its next job (ordered as the validator sees it: with that chunk evicted), would
        already be ordered before the reclaimer's queue with its head (losing more only orders it earlier).
        Remembered per victim job and per reclaimer until a statement commits. (The reference for
        :meth:`select_victims`, which answers the same for a whole victim queue at once.)"""
        reclaimer = self.queues.get(preemptor.queue)
        leaf = self.queues.get(victim.queue)
        if reclaimer is None or leaf is None:
            return True
        if self._filter_commits != self.ssn.commits:
            self._filter_commits = self.ssn.commits
            self._victim_keys = {}
            self._reclaimer_keys = {}
        a_lvl, b_lvl = self.leveled(reclaimer, leaf)
        a_key = self._reclaimer_key(preemptor, reclaimer, a_lvl)
        b_key = self._victim_keys.get((victim.uid, b_lvl.name))
        if b_key is None:
            b_key = self._victim_key(victim, leaf, b_lvl)
            if b_key is None:
                return True
            self._victim_keys[(victim.uid, b_lvl.name)] = b_key
        return not b_key < a_key

    #: select a queue's victims by its sorted keys (:meth:`select_victims`); tests compare it with the filter
    by_queue = True

    def select_victims(self, preemptor: PodGroupInfo, queue_name: str, pool: list[PodGroupInfo]
                       ) -> list[PodGroupInfo]:
        """:meth:`loop_filter` for every job of one victim queue's pool at once (a reclaim victim selector): the
        pool's jobs sorted by their queue-order keys once, kept while the victim queue's and B''s allocations
        stay as they are (a job whose state changes changes its queue's allocation, or leaves the pool: the
        caller drops jobs gone from it), and the reclaimer's key looked up among them. Same answers."""
        if not self.by_queue:
            return [v for v in pool if self.loop_filter(preemptor, v)]
        reclaimer = self.queues.get(preemptor.queue)
        leaf = self.queues.get(queue_name)
        if reclaimer is None or leaf is None:
            return pool
        if self._filter_commits != self.ssn.commits:
            self._filter_commits = self.ssn.commits
            self._victim_keys = {}
            self._reclaimer_keys = {}
        a_lvl, b_lvl = self.leveled(reclaimer, leaf)
        stamp = (tuple(leaf.allocated), tuple(b_lvl.allocated))
        group = self._loop_groups.get((leaf.name, b_lvl.name))
        if group is None or group.stamp != stamp:
            group = self._loop_groups[(leaf.name, b_lvl.name)] = self._loop_group(pool, leaf, b_lvl, stamp)
        if not group.keys:
            return group.always
        a_key = self._reclaimer_key(preemptor, reclaimer, a_lvl)
        passing = group.jobs[bisect.bisect_left(group.keys, a_key):]  # not b_key < a_key
        return group.always + passing if group.always else passing

    def _loop_group(self, pool: list[PodGroupInfo], leaf: QueueAttributes, b_lvl: QueueAttributes,
                    stamp: tuple[tuple[float, ...], tuple[float, ...]]) -> _LoopGroup:
        always: list[PodGroupInfo] = []
        keyed: list[tuple[tuple[object, ...], PodGroupInfo]] = []
        for victim in pool:
            key = self._victim_key(victim, leaf, b_lvl)
            if key is None:
                always.append(victim)
            else:
                keyed.append((key, victim))
        keyed.sort(key=lambda e: e[0])  # (stable: equal keys keep pool order; the caller sorts by it anyway)
        return _LoopGroup(stamp, [k for k, _ in keyed], [v for _, v in keyed], always)

    def _reclaimer_key(self, preemptor: PodGroupInfo, reclaimer: QueueAttributes, a_lvl: QueueAttributes
                       ) -> tuple[object, ...]:
        """A' ordered with the reclaimer's head (or the reclaimer) as its next job, until the next commit."""
        a_key = self._reclaimer_keys.get((preemptor.uid, a_lvl.name))
        if a_key is None:
            heads = self._heads
            if heads is None:
                heads = self._heads = self._next_heads()
            head = heads.get(reclaimer.name)
            req = job_request(self.ssn.tasks_to_allocate(preemptor)) if head is None or head[1] is preemptor \
                else head[2]
            a_used = a_lvl.allocated
            a_key = self._reclaimer_keys[(preemptor.uid, a_lvl.name)] = queue_order_key(
                a_lvl, a_used, _add(a_used, req), a_used)
        return a_key

    def _victim_key(self, victim: PodGroupInfo, leaf: QueueAttributes, b_lvl: QueueAttributes
                    ) -> tuple[object, ...] | None:
        """B' ordered once it lost the victim's first chunk, with the first in job order of the victim queue's
        head and the victim as its next job; None when the victim has no active pod (always a candidate)."""
        ssn = self.ssn
        active = [t for t in victim.tasks if t.is_settled_active]
        if not active:
            return None
        if any(ps.active_allocated > ps.min_available for ps in victim.pod_sets.values()):
            first = [min(active, key=ssn.task_order_key)]
        else:
            first = active
        taken = job_request(first)
        nexts = [(self._key_without(victim, first), taken)]
        heads = self._heads
        if heads is None:
            heads = self._heads = self._next_heads()
        head = heads.get(leaf.name)
        if head is not None:
            nexts.append((head[0], head[2]))
        b_alloc = b_lvl.allocated
        b_used = [b_alloc[0] - taken[0], b_alloc[1] - taken[1], b_alloc[2] - taken[2]]
        b_req = min(nexts, key=lambda e: e[0])[1]
        return queue_order_key(b_lvl, b_used, _add(b_used, b_req), b_used)

    def _key_without(self, job: PodGroupInfo, evicted: list[TaskInfo]) -> tuple[object, ...]:
        """The job order key ``job`` has once ``evicted`` (some of its active tasks) are evicted: the key the
        validator reads of a victim job (a job below its minimum goes first, spec 4.5). The tasks' statuses are
        set to Releasing for the time of the call and restored; nothing else reads them meanwhile."""
        before = [t.status for t in evicted]
        for t in evicted:
            t.status = TaskStatus.RELEASING
        try:
            return self.ssn.job_order_key(job)
        finally:
            for t, status in zip(evicted, before, strict=True):
                t.status = status

    def allocate_would_undo(self, scenario: Scenario, reclaimer: QueueAttributes, req: Vec3,
                            allocated: dict[str, Vec3]) -> bool:
        """The loop guard (module doc): after this reclaim, allocate would order a queue it takes from before
        the reclaimer's queue, and hand the freed resources back in the next cycle."""
        heads = self._heads
        if heads is None:
            heads = self._heads = self._next_heads()
        # B' -> [A', B', what B' really loses, (job order key, request) of its next job]
        losing: dict[str, tuple[QueueAttributes, QueueAttributes, Vec3, list[tuple[tuple[object, ...], Vec3]]]] = {}
        for victim in scenario.victims.values():
            evicted = [t for t in victim.tasks if t.status is TaskStatus.RELEASING]
            leaf = self.queues.get(victim.job.queue)
            if not evicted or leaf is None:
                continue
            a_lvl, b_lvl = self.leveled(reclaimer, leaf)
            entry = losing.get(b_lvl.name)
            if entry is None:
                entry = losing[b_lvl.name] = (a_lvl, b_lvl, [0.0, 0.0, 0.0], [])
            taken = job_request(evicted)
            for r in range(3):
                entry[2][r] += taken[r]
            head = heads.get(leaf.name)
            if head is not None:
                entry[3].append((head[0], head[2]))
            entry[3].append((self.ssn.cached_job_order_key(victim.job), self._pending_again(victim, evicted)))
        if not losing:
            return False
        head = heads.get(reclaimer.name)
        reclaimer_req = req if head is None or head[1] is scenario.preemptor else head[2]
        for a_lvl, b_lvl, taken, nexts in losing.values():
            a_used = allocated[a_lvl.name]
            a_key = queue_order_key(a_lvl, a_used, _add(a_used, reclaimer_req), a_used)
            b_alloc = allocated[b_lvl.name]
            b_used = [b_alloc[0] - taken[0], b_alloc[1] - taken[1], b_alloc[2] - taken[2]]
            b_req = min(nexts, key=lambda e: e[0])[1]
            if queue_order_key(b_lvl, b_used, _add(b_used, b_req), b_used) < a_key:
                return True
        return False

    def _validate_chunk_by_chunk(self, scenario: Scenario, reclaimer: QueueAttributes, req: Vec3,
                                 allocated: dict[str, Vec3]) -> bool:
        """Steps 1-5 as the spec words them: every chunk checked against what is left of its victim queue."""
        # 1. victim chunks per victim leaf queue
        chunks_by_queue: dict[str, list[Vec3]] = {}
        for victim in scenario.victims.values():
            chunks = self.victim_chunks(victim)
            if chunks:
                chunks_by_queue.setdefault(victim.job.queue, []).extend(chunks)

        # 2-3. strategies per chunk, subtracting it from the victim queue and its ancestors
        remaining: dict[str, Vec3] = {}
        involved: dict[str, set[int]] = {}
        for queue_name, chunks in chunks_by_queue.items():
            victim_leaf = self.queues.get(queue_name)
            if victim_leaf is None:
                return False
            a_lvl, b_lvl = self.leveled(reclaimer, victim_leaf)
            leaf_involved = involved[queue_name] = _involved(chunks)
            if b_lvl.name not in remaining:
                remaining[b_lvl.name] = allocated[b_lvl.name].copy()
            b_remaining = remaining[b_lvl.name]  # updated in place below
            reclaimer_within_deserved = _le(_add(allocated[a_lvl.name], req), a_lvl.deserved)
            for chunk in chunks:
                if not self._strategy_allows(b_lvl, b_remaining, reclaimer_within_deserved):
                    return False
                for q in victim_leaf.path:
                    _take(remaining, allocated, q.name, chunk)
                    involved.setdefault(q.name, set()).update(leaf_involved)
        return self._saturation_allows(scenario, reclaimer, req, allocated, remaining, involved)

    def _strategy_allows(self, b_lvl: QueueAttributes, b_remaining: Vec3, reclaimer_within_deserved: bool) -> bool:
        """Step 2 for one chunk: MaintainFairShare or GuaranteeDeserved holds with what ``b_lvl`` has left."""
        maintain_fair_share = not _le(b_remaining, self._allocatable[b_lvl.name])
        guarantee_deserved = reclaimer_within_deserved and not _le(b_remaining, b_lvl.deserved)
        return maintain_fair_share or guarantee_deserved

    def _saturation_allows(self, scenario: Scenario, reclaimer: QueueAttributes, req: Vec3,
                           allocated: dict[str, Vec3], remaining: dict[str, Vec3], involved: dict[str, set[int]]
                           ) -> bool:
        """Steps 4-5: saturation against the queues taken from, and non-preemptible quota, at every level of A."""
        reclaimer_involved = _involved([req])
        multiplier = self.saturation_multiplier
        preemptible = scenario.preemptor.preemptible
        for x in reclaimer.path:
            x_alloc = _add(remaining.get(x.name, allocated[x.name]), req)
            for s_name, s_alloc in remaining.items():
                s = self.queues[s_name]
                if s is x or s.parent != x.parent:
                    continue
                for r in involved.get(s_name, set()) | reclaimer_involved:
                    x_fair, s_fair = x.fair_share[r], s.fair_share[r]
                    if x_fair == UNLIMITED and s_fair == UNLIMITED:
                        continue
                    x_ratio = saturation_ratio(x_alloc[r], x_fair)
                    s_ratio = saturation_ratio(s_alloc[r], s_fair)
                    if x_ratio > 1 + EPS and s_fair > 0 and x_ratio * multiplier >= s_ratio - EPS:
                        return False
            if not preemptible and not _le(_add(self._non_preemptible[x.name], req), x.deserved):
                return False
        return True

    def _validate_by_totals(self, scenario: Scenario, reclaimer: QueueAttributes, req: Vec3,
                            allocated: dict[str, Vec3]) -> bool | None:
        """Steps 1-5 from each victim queue's total, without walking its chunks; None when the amounts do not
        allow it (then the chunk-by-chunk walk decides).

        What a victim queue has left only shrinks chunk after chunk (amounts are not negative), and each
        strategy holds less the less it has left, so every chunk passes exactly when the last one does: the
        one check needed per leveled queue B is against B's allocation less all its chunks but the last (of
        its last victim leaf). With amounts (allocations, chunks, running totals) that are multiples of 1/1024
        below 2**42 (memory: whole bytes below 2**52) every sum is exact, so the totals are the very floats the
        walk reaches; what B has left must not end below zero (-1 stands for "unlimited"). A scenario whose
        first victim jobs are those of one summed before (``Scenario.shared_prefix``) reuses their totals."""
        memo = self._totals
        victims = list(scenario.victims.values())
        kept = common_prefix(memo.victims, victims[:scenario.shared_prefix])
        memo.truncate(kept)
        try:
            for victim in victims[kept:]:
                memo.add(victim, self._job_totals(victim))
        except _Inexact:
            memo.truncate(kept)
            return None
        remaining: dict[str, Vec3] = {}
        involved: dict[str, int] = {}  # resource bits
        last_chunk: dict[str, tuple[QueueAttributes, QueueAttributes, Vec3]] = {}  # B -> (A', B', last chunk)
        for name, entries in sorted(memo.leaves.items(), key=lambda e: e[1][0][0]):  # in order of appearance
            victim_leaf = self.queues.get(name)
            if victim_leaf is None:
                return False
            a_lvl, b_lvl = self.leveled(reclaimer, victim_leaf)
            _, total, bits, last = entries[-1]
            for q in victim_leaf.path:
                _take(remaining, allocated, q.name, total)
                involved[q.name] = involved.get(q.name, 0) | bits
            last_chunk[b_lvl.name] = (a_lvl, b_lvl, last)
        for a_lvl, b_lvl, last in last_chunk.values():
            left = remaining[b_lvl.name]
            if left[0] < 0 or left[1] < 0 or left[2] < 0:
                return None
            before_last = _add(left, last)
            within_deserved = _le(_add(allocated[a_lvl.name], req), a_lvl.deserved)
            if not self._strategy_allows(b_lvl, before_last, within_deserved):
                return False
        sets = {name: {r for r in range(3) if bits >> r & 1} for name, bits in involved.items()}
        return self._saturation_allows(scenario, reclaimer, req, allocated, remaining, sets)

    def _job_totals(self, victim: VictimJob) -> tuple[Vec3, int, Vec3] | None:
        """One victim job's chunks summed: (total, involved resource bits, its last chunk); None without chunks.
        Raises :class:`_Inexact` for an amount the totals cannot hold exactly."""
        chunks = self.victim_chunks(victim)
        if not chunks:
            return None
        total = [0.0, 0.0, 0.0]
        bits = 0
        for chunk in chunks:
            if not _exact(chunk):
                raise _Inexact
            for r in range(3):
                if chunk[r] > 0:
                    bits |= 1 << r
                total[r] += chunk[r]
        if not _exact(total):  # (amounts are not negative: every partial sum is below the total)
            raise _Inexact
        return total, bits, chunks[-1]

    # ---- eviction message ----------------------------------------------------------------------------
    def reclaim_message(self, victim_task: TaskInfo, victim_job: PodGroupInfo, preemptor: PodGroupInfo) -> str:
        """KAI's reclaim eviction message (``GetReclaimMessage`` + ``GetReclaimQueueDetailsMessage``), three
        lines: ``Pod <ns>/<pod> was preempted by workload <ns>/<job>.``, then for the victim's queue and
        then the reclaimer's queue
        ``<queue> uses <R> with a quota of <R>, fair-share of <R> and queue priority of <p>.`` where the
        angle brackets are literal and each ``R`` is KAI's ``ResourceRequirements.String()``, e.g.
        ``team-a uses <GPU: 4, CPU: 8 (cores), memory: 32 (GB)> with a quota of <GPU: 2, CPU: Unlimited
        (cores), memory: Unlimited (GB)>, fair-share of <...> and queue priority of <100>.``

        Resources: GPUs, CPU cores (millicores / 1000) and memory in GB (bytes / 10^9), each with at most 3
        decimals (truncated) and no trailing zeros, ``Unlimited`` for -1. The queues are the two leaves when
        they share a parent, else the leveled queues (A', B'); KAI takes the two leaves' parents, the same
        pair in two-level trees. Queue names are display names when set. Values are the live ones: call it
        when the eviction is decided.
        """
        head = f"Pod {victim_task.namespace}/{victim_task.name} was preempted by workload {preemptor.key}."
        victim_q = self.queues.get(victim_job.queue)
        reclaimer_q = self.queues.get(preemptor.queue)
        if victim_q is None or reclaimer_q is None:
            return head
        if victim_q.parent != reclaimer_q.parent:
            reclaimer_q, victim_q = self.leveled(reclaimer_q, victim_q)
        return "\n".join((head, self._queue_details(victim_q), self._queue_details(reclaimer_q)))

    @staticmethod
    def _queue_details(q: QueueAttributes) -> str:
        return (f"{q.label} uses <{resources_text(q.allocated)}> with a quota of <{resources_text(q.deserved)}>, "
                f"fair-share of <{resources_text(q.fair_share)}> and queue priority of <{q.priority}>.")


def _take(remaining: dict[str, Vec3], allocated: dict[str, Vec3], queue: str, amount: Vec3) -> None:
    """What ``queue`` has left (from its allocation, the first time) less ``amount``."""
    rem = remaining.get(queue)
    if rem is None:
        rem = remaining[queue] = allocated[queue].copy()
    rem[0] -= amount[0]
    rem[1] -= amount[1]
    rem[2] -= amount[2]
