"""The ``proportion`` plugin: fair share, queue order, queue capacity checks and queue accounting
(spec 5.1-5.6).

Queue vectors here are plain ``[gpu, cpu millicores, memory bytes]`` lists: they are tiny and touched
on every virtual allocation, where Python floats beat NumPy scalars.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key

import numpy as np
import numpy.typing as npt

from kaisched.framework.config import ConfigError
from kaisched.framework.plugin import Plugin
from kaisched.framework.result import QueueStatus
from kaisched.framework.session import Session
from kaisched.model.gpu import GpuKind
from kaisched.model.job import FitError, PodGroupInfo
from kaisched.model.resources import QUEUE_RESOURCE_NAMES, Vector
from kaisched.model.status import ACTIVE_ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.model.usage import UsageTable
from kaisched.plugins.proportion.division import QueueShareInput, compute_fair_shares

IntArray = npt.NDArray[np.int32]

UNLIMITED = -1.0
ZERO_SHARE_PENALTY = 1000.0
EPS = 1e-9
Vec3 = list[float]
Request = tuple[float, float, float]  # a job's (GPUs, millicores, bytes), immutable


#: most queue-order keys (job and victim queues) remembered per session
ORDER_KEY_MEMO_SIZE = 500_000


@dataclass(slots=True, eq=False)
class QueueAttributes:
    name: str
    parent: str | None
    priority: int
    order_key: tuple[object, ...]
    label: str
    deserved: Vec3
    limit: Vec3
    weight: Vec3
    path: list[QueueAttributes] = field(default_factory=list)  # self and ancestors, leaf first
    allocated: Vec3 = field(default_factory=lambda: [0.0, 0.0, 0.0])
    allocated_non_preemptible: Vec3 = field(default_factory=lambda: [0.0, 0.0, 0.0])
    request: Vec3 = field(default_factory=lambda: [0.0, 0.0, 0.0])
    fair_share: Vec3 = field(default_factory=lambda: [0.0, 0.0, 0.0])
    alloc_share: Vec3 = field(default_factory=lambda: [0.0, 0.0, 0.0])  # cached allocatable_share(total)
    sibling_rank: int = 0  # static queue-order tie-break among siblings (spec 5.4 steps 7-8)
    # ProportionPlugin.key() of this queue with a job, by the job's request; emptied whenever the queue's
    # allocation changes (the only other amount the key depends on). (By value: a compiled core passes a
    # tuple[float, float, float] unboxed and boxes it anew where an object is needed, so its identity means
    # nothing — docs/performance.md.)
    job_keys: dict[Request, tuple[object, ...]] = field(default_factory=dict)

    def allocatable_share(self, total: Vec3) -> Vec3:
        out: Vec3 = []
        for r in range(3):
            d, lim, fs = self.deserved[r], self.limit[r], self.fair_share[r]
            if d == UNLIMITED:
                a = lim
            else:
                a = max(d, fs)
                if lim != UNLIMITED:
                    a = min(a, lim)
            out.append(total[r] if a == UNLIMITED else a)
        return out

    def dominant_share(self, amount: Vec3) -> float:
        """DRF share of ``amount`` against the allocatable share (spec 5.1); a zero share is penalised.
        (The three resources written out: the job queue asks after every pop.)"""
        s0, s1, s2 = self.alloc_share
        share = max(0.0, amount[0] * ZERO_SHARE_PENALTY if s0 == 0 else amount[0] / s0)
        share = max(share, amount[1] * ZERO_SHARE_PENALTY if s1 == 0 else amount[1] / s1)
        return max(share, amount[2] * ZERO_SHARE_PENALTY if s2 == 0 else amount[2] / s2)


def _vec(v: Vector) -> Vec3:
    return [float(v[0]), float(v[1]), float(v[2])]


def _le(a: Vec3, b: Vec3) -> bool:
    """a <= b in all resources, -1 meaning infinity on either side. (The three resources written out: every
    queue-order key asks.)"""
    return _le1(a[0], b[0]) and _le1(a[1], b[1]) and _le1(a[2], b[2])


def _le1(x: float, y: float) -> bool:
    return y == UNLIMITED or (x != UNLIMITED and not x > y + EPS)  # (not <=: alike for NaN too)


def job_request(tasks: list[TaskInfo]) -> Vec3:
    """Queue resources of ``tasks``: accepted GPUs of placed tasks, requested GPUs of the others."""
    out = [0.0, 0.0, 0.0]
    for t in tasks:
        g, c, m = t.quota_vector()
        out[0] += g
        out[1] += c
        out[2] += m
    return out


def capacity_request(tasks: list[TaskInfo]) -> Vec3:
    """Resources of the job-level capacity check (spec 5.6): gpu-memory requests count 0 GPUs there, DRA GPUs
    count as whole ones."""
    out = job_request(tasks)
    out[0] = sum(t.gpu.capacity_gpus + t.claim_gpus for t in tasks)
    return out


def _fmt(r: int, amount: float) -> str:
    if r == 0:
        return f"{amount:g} GPUs"
    if r == 1:
        return f"{amount / 1000:g} CPU cores"
    return f"{amount / 1e9:g} GB of memory"


def queue_order_key(q: QueueAttributes, used: Vec3, with_job: Vec3, without_job: Vec3) -> tuple[object, ...]:
    """The allocate queue order's key of ``q`` (spec 5.4; the smallest goes first): over-utilised (``used``
    above the fair share in every resource), not starved (``with_job`` within deserved), queue priority,
    zero-share penalty, dominant share with and without the job, then the static sibling rank."""
    fair = q.fair_share
    over_utilized = fair[0] < used[0] - EPS and fair[1] < used[1] - EPS and fair[2] < used[2] - EPS
    starved = _le(with_job, q.deserved)
    share = q.alloc_share
    penalty = (share[0] == 0 and with_job[0] > 0) or (share[1] == 0 and with_job[1] > 0) or (
        share[2] == 0 and with_job[2] > 0)
    return (
        1 if over_utilized else 0,
        0 if starved else 1,
        -q.priority,
        1 if penalty else 0,
        round(q.dominant_share(with_job), 12),
        round(q.dominant_share(without_job), 12),
        q.sibling_rank,
    )


class ProportionPlugin(Plugin):
    name = "proportion"

    def __init__(self, arguments: Mapping[str, str]) -> None:
        super().__init__(arguments)
        raw = arguments.get("kValue", "1.0")
        try:
            self.k_value = max(float(raw), 0.0)
        except ValueError:
            raise ConfigError(f"plugin proportion: argument kValue: expected a number, got {raw!r}") from None
        raw_mult = arguments.get("relcaimerSaturationMultiplier",
                                 arguments.get("reclaimerSaturationMultiplier", "1.0"))
        try:
            mult = float(raw_mult)
        except ValueError:
            raise ConfigError(
                f"plugin proportion: argument relcaimerSaturationMultiplier: expected a number, got {raw_mult!r}"
            ) from None
        self.saturation_multiplier = mult if mult >= 1.0 else 1.0
        self.usage: UsageTable | None = None

    # ---- session open ----------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        tree = ssn.queues
        self.total: Vec3 = _vec(ssn.snapshot.total)
        self.queues: dict[str, QueueAttributes] = {}
        self._job_requests: dict[str, tuple[int, Request]] = {}
        self._order_keys: dict[tuple[object, ...], tuple[object, ...]] = {}
        for name in tree.depth_first():
            q = tree.queues[name]
            self.queues[name] = QueueAttributes(
                name=name, parent=q.parent, priority=q.priority, order_key=q.order_key(), label=q.label,
                deserved=_vec(q.deserved), limit=_vec(q.limit), weight=_vec(q.over_quota_weight),
            )
        for attrs in self.queues.values():
            cur: QueueAttributes | None = attrs
            while cur is not None:
                attrs.path.append(cur)
                cur = self.queues[cur.parent] if cur.parent is not None else None
        # queues with no limit on the way to the root: a preemptible job there passes the capacity check
        self._unlimited = {a.name for a in self.queues.values()
                           if all(lim == UNLIMITED for q in a.path for lim in q.limit)}
        for job in ssn.jobs.values():
            leaf = self.queues.get(job.queue)
            if leaf is None:
                continue
            for task in job.tasks:
                if task.status in ACTIVE_ALLOCATED:
                    self._add(leaf, job, task, 1.0)
                    self._add_request(leaf, task)
                elif task.status is TaskStatus.PENDING:
                    self._add_request(leaf, task)
        self._compute_fair_shares()
        ssn.set_queue_order(self)
        ssn.set_job_capacity_check(self.job_capacity_check)
        ssn.task_node_capacity_check = self.task_node_capacity
        ssn.set_queue_reporter(self)
        ssn.allocate_handlers.append(self.on_allocate)
        ssn.deallocate_handlers.append(self.on_deallocate)
        # reclaim rules (spec 5.5); imported here because reclaim.py builds on this module
        from kaisched.plugins.proportion.reclaim import ReclaimRules

        self.reclaim = ReclaimRules(self.queues, self.total, self.saturation_multiplier, ssn)
        ssn.set_can_reclaim_resources(self.reclaim.can_reclaim)
        ssn.reclaim_scenario_validators.append(self.reclaim.validate)
        ssn.reclaim_victim_selectors.append(self.reclaim.select_victims)  # (the loop guard's loop_filter, by queue)
        ssn.job_solution_start_handlers.append(self.reclaim.on_job_solution_start)

    def _compute_fair_shares(self) -> None:
        # time-based fair share: each queue's historical usage (spec 5.7), an input of the cycle (None: weight only)
        usage = self.usage = self.ssn.snapshot.usage
        inputs = [
            QueueShareInput(
                name=a.name, parent=a.parent, priority=a.priority, order_key=a.order_key,
                deserved=np.array(a.deserved), max_allowed=np.array(a.limit), over_quota_weight=np.array(a.weight),
                request=np.array(a.request), usage=np.array(usage.of(a.name)) if usage is not None else np.zeros(3),
            )
            for a in self.queues.values()
        ]
        shares = compute_fair_shares(inputs, np.array(self.total), self.k_value)
        for name, share in shares.items():
            self.queues[name].fair_share = _vec(share)
        for attrs in self.queues.values():
            attrs.alloc_share = attrs.allocatable_share(self.total)
        siblings: dict[str | None, list[str]] = {}
        for attrs in self.queues.values():
            siblings.setdefault(attrs.parent, []).append(attrs.name)
        for names in siblings.values():
            for rank, name in enumerate(sorted(names, key=cmp_to_key(self.tie_break))):
                self.queues[name].sibling_rank = rank

    # ---- accounting -------------------------------------------------------------------------------
    @staticmethod
    def _add(leaf: QueueAttributes, job: PodGroupInfo, task: TaskInfo, sign: float) -> None:
        g, c, m = task.quota_vector()
        g, c, m = sign * g, sign * c, sign * m
        for q in leaf.path:
            a = q.allocated
            a[0] += g
            a[1] += c
            a[2] += m
            q.job_keys.clear()
            if not job.preemptible:
                n = q.allocated_non_preemptible
                n[0] += g
                n[1] += c
                n[2] += m

    @staticmethod
    def _add_request(leaf: QueueAttributes, task: TaskInfo) -> None:
        g, c, m = task.quota_vector()
        for q in leaf.path:
            q.request[0] += g
            q.request[1] += c
            q.request[2] += m

    def on_allocate(self, task: TaskInfo) -> None:
        job = task.job
        if job is None or task.status not in ACTIVE_ALLOCATED:
            return
        leaf = self.queues.get(job.queue)
        if leaf is not None:
            self._add(leaf, job, task, 1.0)

    def on_deallocate(self, task: TaskInfo) -> None:
        job = task.job
        if job is None or task.status not in ACTIVE_ALLOCATED:
            return
        leaf = self.queues.get(job.queue)
        if leaf is not None:
            self._add(leaf, job, task, -1.0)

    # ---- queue order (spec 5.4) ---------------------------------------------------------------------
    def job_request(self, job: PodGroupInfo) -> Request:
        """Resources of the job's next allocation attempt, cached until the job changes."""
        cached = self._job_requests.get(job.uid)
        if cached is not None and cached[0] == job.version:
            return cached[1]
        g, c, m = job_request(self.ssn.tasks_to_allocate(job))
        extra = (g, c, m)
        self._job_requests[job.uid] = (job.version, extra)
        return extra

    def key(self, queue: str, job: PodGroupInfo) -> tuple[object, ...]:
        """Spec 5.4 steps 1-6 as a sort key; steps 7-8 are the static ``sibling_rank``. Remembered by the
        amounts it depends on: per queue while its allocation stays as it is, by the job's request."""
        q = self.queues[queue]
        extra = self.job_request(job)
        keys = q.job_keys
        key = keys.get(extra)
        if key is None:
            if len(keys) >= ORDER_KEY_MEMO_SIZE:
                keys.clear()
            allocated = q.allocated
            with_job = [allocated[0] + extra[0], allocated[1] + extra[1], allocated[2] + extra[2]]
            # (not through _remembered_order_key: amounts new to this memo are nearly always new to that one)
            key = keys[extra] = self._order_key(q, allocated, with_job, allocated)
        return key

    def bound_key(self, queue: str, removed: Vec3, request: Vec3) -> tuple[object, ...]:
        """:meth:`key` for the queue holding ``removed`` less, with a job asking ``request``. Every part of the
        key is non-decreasing in both (over-used, not starved, the zero-share penalty, the dominant shares)."""
        q = self.queues[queue]
        a = q.allocated
        used = [a[0] - removed[0], a[1] - removed[1], a[2] - removed[2]]
        with_job = [used[0] + request[0], used[1] + request[1], used[2] + request[2]]
        return self._order_key(q, used, with_job, used)

    def victim_key(self, queue: str, removed: Vec3, candidate: Vec3) -> tuple[object, ...]:
        """Victim queue order (spec 4.5): the criteria of :meth:`key` for a queue that *holds* its next
        victim candidate: "with the job" is the allocation less the victims already taken from it,
        "without" also less the candidate. The caller takes the LARGEST key first (the worst queue).
        (KAI's wording, "victims plus the next candidate are subtracted", is read this way because it is
        the reading under which KAI's reclaim scenarios take from a zero-share queue first.)"""
        q = self.queues[queue]
        held = [q.allocated[r] - removed[r] for r in range(3)]
        without = [held[r] - candidate[r] for r in range(3)]
        return self._remembered_order_key(q, held, held, without)

    def _remembered_order_key(self, q: QueueAttributes, used: Vec3, with_job: Vec3, without_job: Vec3
                              ) -> tuple[object, ...]:
        """:meth:`_order_key`, remembered for the session: it depends only on these amounts (a queue's fair
        share, deserved quota and priority are fixed for the session), and the job and victim queues ask for
        the same ones over and over (after every pop, in every simulation of a solver)."""
        memo = (q.name, *used, *with_job, *without_job)
        keys = self._order_keys
        key = keys.get(memo)
        if key is None:
            if len(keys) >= ORDER_KEY_MEMO_SIZE:
                keys.clear()
            key = keys[memo] = self._order_key(q, used, with_job, without_job)
        return key

    @staticmethod
    def _order_key(q: QueueAttributes, used: Vec3, with_job: Vec3, without_job: Vec3) -> tuple[object, ...]:
        return queue_order_key(q, used, with_job, without_job)

    def tie_break(self, a: str, b: str) -> int:
        qa, qb = self.queues[a], self.queues[b]
        sa, sb = qa.alloc_share, qb.alloc_share
        if all(x <= y for x, y in zip(sa, sb, strict=True)) and any(x < y for x, y in zip(sa, sb, strict=True)):
            return -1
        if all(y <= x for x, y in zip(sa, sb, strict=True)) and any(y < x for x, y in zip(sa, sb, strict=True)):
            return 1
        if qa.order_key < qb.order_key:
            return -1
        if qb.order_key < qa.order_key:
            return 1
        return 0

    # ---- capacity (spec 5.6) --------------------------------------------------------------------------
    def job_capacity_check(self, job: PodGroupInfo, tasks: list[TaskInfo]) -> FitError | None:
        leaf = self.queues.get(job.queue)
        if leaf is None or (job.preemptible and leaf.name in self._unlimited):
            return None
        requested = capacity_request(tasks)
        for q in leaf.path:
            for r in range(3):
                lim = q.limit[r]
                if lim != UNLIMITED and requested[r] > 0 and q.allocated[r] + requested[r] > lim + EPS:
                    what = ("GPUs", "CPU cores", "memory")[r]
                    return FitError(
                        "OverLimit",
                        f"{q.label} quota has reached the allowable limit of {what}. Limit is {_fmt(r, lim)}, "
                        f"currently {_fmt(r, q.allocated[r])} allocated and workload requested "
                        f"{_fmt(r, requested[r])}",
                    )
        if not job.preemptible:
            for q in leaf.path:
                for r in range(3):
                    d = q.deserved[r]
                    if d != UNLIMITED and q.allocated_non_preemptible[r] + requested[r] > d + EPS:
                        return FitError(
                            "NonPreemptibleOverQuota",
                            f"Non-preemptible workload is over quota. Workload requested {_fmt(r, requested[r])}, "
                            f"but {q.label} quota is {_fmt(r, d)}, while "
                            f"{_fmt(r, q.allocated_non_preemptible[r])} are already allocated for non-preemptible "
                            "pods. Use a preemptible workload to go over quota.",
                        )
        return None

    def task_node_capacity(self, task: TaskInfo) -> IntArray | None:
        """Per-node capacity check of a gpu-memory task (spec 5.6, 8.2): its GPUs depend on the node's
        GPU memory, so limits and the non-preemptible quota are checked per node."""
        job = task.job
        if task.gpu.kind is not GpuKind.MEMORY or job is None:
            return None
        leaf = self.queues.get(job.queue)
        if leaf is None:
            return None
        nodes = self.ssn.nodes
        gpus = task.gpu.count * np.ceil(task.gpu.memory_mib / nodes.shared.mem * 100 - 1e-9) / 100
        codes: IntArray = np.zeros(len(nodes), dtype=np.int32)
        for q in leaf.path:
            lim = q.limit[0]
            if lim != UNLIMITED:
                over = (codes == 0) & (q.allocated[0] + gpus > lim + EPS)
                if over.any():
                    codes[over] = self.ssn.reason_code(
                        f"{q.label} quota has reached the allowable limit of GPUs (limit {lim:g} GPUs, "
                        f"{q.allocated[0]:g} allocated)")
            d = q.deserved[0]
            if not job.preemptible and d != UNLIMITED:
                over = (codes == 0) & (q.allocated_non_preemptible[0] + gpus > d + EPS)
                if over.any():
                    codes[over] = self.ssn.reason_code(
                        f"Non-preemptible workload is over quota of {q.label} ({d:g} GPUs)")
        return codes if codes.any() else None

    # ---- report -----------------------------------------------------------------------------------------
    def report(self) -> list[QueueStatus]:
        def d(v: Vec3) -> dict[str, float]:
            return {n: round(x, 6) for n, x in zip(QUEUE_RESOURCE_NAMES, v, strict=True)}

        return [
            QueueStatus(name=a.name, parent=a.parent, deserved=d(a.deserved), fair_share=d(a.fair_share),
                        allocated=d(a.allocated), request=d(a.request), limit=d(a.limit), priority=a.priority,
                        usage=d(list(self.usage.of(a.name))) if self.usage is not None else {})
            for a in self.queues.values()
        ]
