"""Victim scenarios proved to fail without simulating them (``SHORTCUTS.prove_failures`` in kaisched.actions.solver).

On a busy cluster most scenarios a preemptor P's search simulates fail the same way: victims evicted on a node
are ordered *before* P when the simulation places P and its victims again in job order (their queue, at the
level where its path and P's part, wins the queue order), so they take their room back before P is tried, and P
finds nothing. :class:`ScenarioProof` recognises these scenarios from amounts alone, exactly: it says a
scenario fails only when its simulation is bound to fail, so skipping it leaves every decision as it was (the
property tests compare with simulating every scenario).

A scenario of the first partial job (no recorded victims: every victim on one node ``n``) fails when some task of
P fits on no node of the simulation when P's turn comes. What each victim job V does before that:

1. **Bound to pop before P** (the set S). Let ``(A', B')`` be the children of the lowest common ancestor of P's
   queue and V's queue on P's side and on V's (the two top-level queues when there is none). The simulation's
   job queue compares, at each tree node, proportion's key of the queue with the job a pop through it would
   return; every part of the key (over-used, not starved, zero-share penalty, dominant shares) is non-decreasing
   in the queue's allocation and in that job's request (``QueueOrder.bound_key``). Before P pops only victims
   are placed again. While ``B'`` has a job j to pop it holds at most what it holds now less j's evicted pods (at
   least its smallest), and with j at most what it holds now — provided its victim jobs cannot come back with
   more than they had (no pending pod, whole GPUs). ``A'`` holds at least what it holds now less the scenario's
   victims below it, and its job is P or one of those victims not bound to pop after P (asking at least its
   smallest pod). When ``B'``'s largest key is below ``A'``'s smallest, ``B'`` wins every pop while it has jobs.
2. **Placed again when it pops**, for the jobs of S: its pods ask whole GPUs and no shared device, DRA claim, host
   port or pod affinity, no pod of the session constrains placement by labels, the queue capacity check passes
   for its pods even on top of what its queue holds now, the pre-predicates and node predicates admit them on
   ``n`` — and ``n`` has room for each: only victims from ``n`` come back before P.
3. **P then**: a feasible node other than ``n`` has no more room at P's turn than now (victims only arrive
   there), so the task must not fit one of them now; ``n`` has at most its idle and releasing GPUs, plus the GPU
   devices of the victims not in S, plus those of S that went elsewhere (at most what the other feasible nodes
   have free): the task asks more whole GPUs than that, or ``n`` is closed to it.

A proof for all of a node's victims holds for every subset of them (fewer victims below ``B'`` hold and ask less,
fewer below ``A'`` leave it more, fewer victims leave P less room), so each node is judged once per partial job
(:meth:`ScenarioProof.node_fails`) and a scenario is looked up by its node; when every node is judged so,
only the scenario without victims is left to simulate (:meth:`ScenarioProof.fails_everywhere`). Anything else
(recorded victims, warm simulations, consolidation's moves, fractional or DRA preemptors, a queue order without
``bound_key``, amounts that are not exact floats — ``exact_accounting``) is simulated as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from kaisched.actions.placement import predicate_codes
from kaisched.actions.victims import quota_sum
from kaisched.framework.session import Session
from kaisched.model.gpu import GpuKind
from kaisched.model.job import PodGroupInfo
from kaisched.model.resources import GPU
from kaisched.model.status import ACTIVE_ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
Vec3 = list[float]
BoundKey = Callable[[str, Vec3, Vec3], tuple[object, ...]]


def _whole_ask(t: TaskInfo) -> bool:
    """A pod of P the proof reasons about: whole GPUs (at least one), no shared device, no DRA claim."""
    g = float(t.req[GPU])
    return not t.gpu.shared and not t.claims and g >= 1 and g == int(g)


def _smallest(jobs: list[tuple[PodGroupInfo, list[TaskInfo]]]) -> Vec3:
    """Per resource, the least any of the jobs' pods asks."""
    vectors = [t.quota_vector() for _, tasks in jobs for t in tasks]
    return [min(v[r] for v in vectors) for r in range(3)]


class ScenarioProof:
    """Proofs for one partial job of one solver (see the module doc); built only when it can prove anything."""

    __slots__ = (
        "_bound_key",
        "_by_node",
        "_feasible_free",
        "_free_gpus",
        "_job_bounded",
        "_job_ok",
        "_key_cache",
        "_node_verdicts",
        "_p_queue",
        "_p_request",
        "_paths",
        "_task_fits",
        "_task_ok",
        "_whole_tasks",
        "feasible",
        "proved",
        "ssn",
        "tasks",
    )

    def __init__(self, ssn: Session, preemptor: PodGroupInfo, tasks: list[TaskInfo], feasible: BoolArray,
                 allowed: list[BoolArray], bound_key: BoundKey, victims: list[PodGroupInfo]) -> None:
        """``victims``: the solver's victim jobs (every scenario evicts some of their placed, settled pods)."""
        self.ssn = ssn
        self.tasks = tasks
        self.feasible = feasible
        self._bound_key = bound_key
        self._p_queue = preemptor.queue
        self._p_request = quota_sum(ssn.tasks_to_allocate(preemptor))  # (what the job queue's key asks of P)
        nodes = ssn.nodes
        self._free_gpus = nodes.idle[GPU] + nodes.releasing[GPU]
        # per task of P: the feasible nodes where it fits now (None: a task this proof cannot reason about)
        self._feasible_free = float(self._free_gpus[feasible].sum())
        # per task of P: its GPUs, the feasible nodes where it fits now and how many, the nodes its static
        # predicates allow (None: a task this proof cannot reason about)
        self._task_fits: list[tuple[float, BoolArray, int, BoolArray] | None] = []
        for t, ok in zip(tasks, allowed, strict=True):
            if not _whole_ask(t):
                self._task_fits.append(None)
                continue
            fits = nodes.fits_task(t, with_releasing=True) & ok & feasible
            self._task_fits.append((float(t.req[GPU]), fits, int(np.count_nonzero(fits)), ok))
        self._paths: dict[str, list[str]] = {}
        self._task_ok: dict[str, bool] = {}
        self._job_ok: dict[str, bool] = {}
        self._job_bounded: dict[str, bool] = {}
        self._whole_tasks: dict[str, bool] = {}
        self._key_cache: dict[tuple[object, ...], tuple[object, ...]] = {}
        self.proved = 0
        # node -> its victims' pods per job; node -> whether every scenario on it fails
        self._by_node: dict[int, dict[str, tuple[PodGroupInfo, list[TaskInfo]]]] = {}
        for job in victims:
            for t in job.tasks:
                if t.node >= 0 and t.is_settled_active:
                    entry = self._by_node.setdefault(t.node, {}).get(job.uid)
                    if entry is None:
                        self._by_node[t.node][job.uid] = (job, [t])
                    else:
                        entry[1].append(t)
        self._node_verdicts: dict[int, bool] = {}

    @staticmethod
    def applies(ssn: Session, tasks: list[TaskInfo]) -> bool:
        """Some task of P is one the proof reasons about, and nothing in the session constrains placement by
        labels (a victim's way back could depend on the pods around it)."""
        if ssn.labels_constrain_placement:
            return False
        return any(_whole_ask(t) for t in tasks)

    # ---- 1. the order ----------------------------------------------------------------------------------
    def _path(self, queue: str) -> list[str]:
        """Root first."""
        path = self._paths.get(queue)
        if path is None:
            path = self._paths[queue] = self.ssn.queues.ancestors(queue)[::-1]
        return path

    def _leveled(self, victim_queue: str) -> tuple[str, str] | None:
        pa, pb = self._path(self._p_queue), self._path(victim_queue)
        for a, b in zip(pa, pb, strict=False):
            if a != b:
                return a, b
        return None  # one path holds the other (the victim in P's queue or above it)

    def _key(self, queue: str, removed: Vec3, request: Vec3) -> tuple[object, ...]:
        memo = (queue, *removed, *request)
        key = self._key_cache.get(memo)
        if key is None:
            key = self._key_cache[memo] = self._bound_key(queue, removed, request)
        return key

    def _first(self, by_job: dict[str, tuple[PodGroupInfo, list[TaskInfo]]]) -> set[str]:
        """The victim jobs bound to pop before P (uids): their ``B'`` outranks P's ``A'`` in every state."""
        zero = [0.0, 0.0, 0.0]
        # (a victim whose queue the session does not know has no place in the order: never bound to pop first,
        # which only leaves its scenarios to the simulation)
        known = self.ssn.queues.queues
        entries = [entry for entry in by_job.values() if entry[0].queue in known]
        pairs: dict[str, tuple[str, str]] = {}
        for job, _ in entries:
            pair = self._leveled(job.queue)
            if pair is not None:
                pairs[job.uid] = pair
        below: dict[str, list[tuple[PodGroupInfo, list[TaskInfo]]]] = {}  # A' or B' -> the victim jobs below it
        for entry in entries:
            for q in self._path(entry[0].queue):
                below.setdefault(q, []).append(entry)
        out: set[str] = set()
        for uid, (a, b) in pairs.items():
            under_b = below[b]
            if not all(self._bounded(job, tasks) for job, tasks in under_b):
                continue  # (a job that may come back with more than it had bounds nothing)
            # B' while it has a job j to pop: it holds at most what it holds now less j's pods still evicted (at
            # least its smallest), and with j at most what it holds now
            smallest = _smallest(under_b)
            high = self._key(b, smallest, smallest)
            under_a = below.get(a)
            if under_a:  # A' holds at least what it holds now less its victims; its job is P or one of them
                rivals = [(j, ts) for j, ts in under_a if not self._after_p(j, below)]
                least = self._p_request
                if rivals:
                    floor = _smallest(rivals) if all(self._bounded(j, ts) for j, ts in rivals) else zero
                    least = [min(x, y) for x, y in zip(floor, least, strict=True)]
                low = self._key(a, quota_sum([t for _, tasks in under_a for t in tasks]), least)
            else:
                low = self._key(a, zero, self._p_request)
            if high < low:
                out.add(uid)
        return out

    def _after_p(self, job: PodGroupInfo, below: dict[str, list[tuple[PodGroupInfo, list[TaskInfo]]]]) -> bool:
        """The victim job is bound to pop after P: at the children ``(A'', B'')`` of their lowest common ancestor,
        ``A''`` holds only P among the scenario's jobs (its key is then known) and is below ``B''``'s smallest."""
        pair = self._leveled(job.queue)
        if pair is None:
            return False
        a, b = pair
        if a in below:
            return False
        zero = [0.0, 0.0, 0.0]
        under_b = below[b]
        floor = _smallest(under_b) if all(self._bounded(j, ts) for j, ts in under_b) else zero
        low_b = self._key(b, quota_sum([t for _, tasks in under_b for t in tasks]), floor)
        return self._key(a, zero, self._p_request) < low_b

    # ---- 2. the way back -------------------------------------------------------------------------------
    def _comes_back(self, t: TaskInfo, node: int) -> bool:
        known = self._task_ok.get(t.uid)
        if known is None:
            known = self._task_ok[t.uid] = self._task_comes_back(t, node)
        return known

    def _task_comes_back(self, t: TaskInfo, node: int) -> bool:
        if (not self._whole(t) or t.claims or t.host_ports or t.pod.affinity is not None
                or t.status not in ACTIVE_ALLOCATED):
            return False
        ssn = self.ssn
        if any(pre(t) is not None for pre in ssn.pre_predicates):
            return False
        codes = predicate_codes(ssn, t)
        return codes is None or int(codes[node]) == 0

    def _bounded(self, job: PodGroupInfo, tasks: list[TaskInfo]) -> bool:
        """Placed again, the job holds at most what it holds now and asks at most its evicted pods: no pending pod,
        and its evicted pods count for their queue what they ask (whole GPUs, no shared device)."""
        known = self._job_bounded.get(job.uid)
        if known is None:
            known = self._job_bounded[job.uid] = not any(t.status is TaskStatus.PENDING for t in job.tasks)
        return known and all(self._whole(t) for t in tasks)

    def _whole(self, t: TaskInfo) -> bool:
        known = self._whole_tasks.get(t.uid)
        if known is None:
            g = float(t.req[GPU])
            known = self._whole_tasks[t.uid] = (not t.gpu.shared and t.gpu.kind is not GpuKind.MEMORY and g == int(g)
                                                and t.request_gpus == t.accepted_gpus)
        return known

    def _job_comes_back(self, job: PodGroupInfo) -> bool:
        """The queue capacity check passes for the job's pods even on top of what its queue holds now."""
        known = self._job_ok.get(job.uid)
        if known is None:
            check = self.ssn.job_capacity_check
            known = check is None or check(job, [t for t in job.tasks if t.status in ACTIVE_ALLOCATED]) is None
            self._job_ok[job.uid] = known
        return known

    # ---- 3. P --------------------------------------------------------------------------------------------
    def _p_fails(self, node: int, back_gpus: float, other_gpus: float) -> bool:
        """Some task of P fits on no node of the simulation's mask when P's turn comes (see the module doc):
        ``back_gpus`` are those of the victims bound to come back before P, ``other_gpus`` the other victims'."""
        free = self._free_gpus
        others = self._feasible_free - (float(free[node]) if self.feasible[node] else 0.0)
        room = float(free[node]) + other_gpus + min(back_gpus, others)
        for entry in self._task_fits:
            if entry is None:
                continue
            g, fits, count, allowed = entry
            if count - (1 if fits[node] else 0) > 0:
                continue  # it fits on another feasible node now
            if bool(allowed[node]) and g <= room + 1e-9:
                continue  # ``node`` may have room for it
            return True
        return False

    # ---- entry ---------------------------------------------------------------------------------------
    def fails(self, evict: list[TaskInfo]) -> bool:
        """The simulation of ``evict`` (victims of one node, no recorded ones) is bound to fail."""
        if not evict:
            return False
        node = evict[0].node
        if node < 0 or any(t.node != node for t in evict):
            return False
        if self.node_fails(node):
            self.proved += 1
            return True
        by_job: dict[str, tuple[PodGroupInfo, list[TaskInfo]]] = {}
        for t in evict:
            job = t.job
            if job is None:
                return False
            entry = by_job.get(job.uid)
            if entry is None:
                by_job[job.uid] = (job, [t])
            else:
                entry[1].append(t)
        if not self._node_fails(node, by_job):
            return False
        self.proved += 1
        return True

    def fails_everywhere(self) -> bool:
        """Every scenario with one node's victims is bound to fail (:meth:`node_fails` for every node)."""
        return all(self.node_fails(node) for node in sorted(self._by_node))

    def node_fails(self, node: int) -> bool:
        """Every scenario with victims of ``node`` only is bound to fail: each is a subset of the node's victims,
        and the proof for all of them holds for every subset (fewer victims below ``B'`` ask less and hold less;
        fewer below ``A'`` leave it more, or P's request; fewer victims leave P less room). Once per node."""
        known = self._node_verdicts.get(node)
        if known is None:
            by_job = self._by_node.get(node)
            known = self._node_verdicts[node] = by_job is not None and self._node_fails(node, by_job)
        return known

    def _node_fails(self, node: int, by_job: dict[str, tuple[PodGroupInfo, list[TaskInfo]]]) -> bool:
        # (the GPU devices a victim frees at most: whole ones, or each shared device it is on)
        total = float(sum(t.devices for _, tasks in by_job.values() for t in tasks))
        if not self._p_fails(node, total, 0.0):
            return False  # P has room even with every victim back
        back = [tasks for uid in self._first(by_job) for job, tasks in (by_job[uid],)
                if self._job_comes_back(job) and all(self._comes_back(t, node) for t in tasks)]
        back_gpus = float(sum(t.devices for tasks in back for t in tasks))
        return self._p_fails(node, back_gpus, total - back_gpus)
