"""Warm victim simulations (``SHORTCUTS.warm_simulations``, see :mod:`kaisched.actions.solver`).

Incremental solving simulates the first k tasks of a preemptor for k = 1, 2, ...; the k-th simulation evicts
the (k-1)-th solution's victims and then some. :class:`WarmEvictions` keeps a simulation's evictions in the
statement for the next one, which rolls back only to the last eviction both share; :class:`RecordedVictims`
keeps what the scenario filters read of the recorded victims as they grow. Both are used only where
:func:`exact_accounting` holds: every amount a multiple of 1/1024 far below float limits, so sums are exact and
the state reached does not depend on the order of evictions and undos.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import numpy.typing as npt

from kaisched.actions.placement import claims_key
from kaisched.framework.scenario import Scenario, common_prefix
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.gpu import GpuKind, GpuRequest
from kaisched.model.job import PodGroupInfo
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
HeapEntry = tuple[tuple[object, ...], int, PodGroupInfo]  # a JobsQueue leaf's entry
Shape = tuple[bytes, GpuRequest, tuple[object, ...]]  # what a victim's fit depends on (placement.claims_key)


class RecordedVictims:
    """The recorded victims of the current k and what the filters read of them (uids, nodes, GPU devices,
    entries), extended in place when the next k's recorded victims start with them, as they usually do (a
    solution adds to the last one's victims)."""

    __slots__ = ("devices", "entries", "ids", "missing", "nodes", "tasks")

    def __init__(self) -> None:
        self.tasks: list[TaskInfo] = []
        self.ids: set[str] = set()
        self.nodes: list[int] = []
        self.devices: list[float] = []
        self.entries: list[int] = []  # each task's entry (VictimSolver._entries), -1 while not materialised
        self.missing: list[int] = []  # the tasks whose entry is not known yet

    def update(self, recorded: list[TaskInfo]) -> RecordedVictims:
        kept = common_prefix(self.tasks, recorded)
        if kept < len(self.tasks):  # (a new set: its ids must not keep the old ones)
            self.tasks, self.ids, self.nodes, self.devices, self.entries, self.missing = [], set(), [], [], [], []
            kept = 0
        for t in recorded[kept:]:
            self.missing.append(len(self.tasks))
            self.tasks.append(t)
            self.ids.add(t.uid)
            self.nodes.append(t.node)
            self.devices.append(t.devices)
            self.entries.append(-1)
        return self

    def placed_nodes(self) -> IntArray:
        nodes = np.array(self.nodes, dtype=np.int64)
        return nodes[nodes >= 0]

    def placed_devices(self) -> FloatArray:
        return np.array(self.devices, dtype=np.float64)[np.array(self.nodes, dtype=np.int64) >= 0]

    def entry_mask(self, index: dict[str, int], n: int) -> BoolArray:
        """Over the ``n`` materialised entries (``index``: uid -> entry), those of recorded tasks."""
        if self.missing:
            still: list[int] = []
            for i in self.missing:
                e = self.entries[i] = index.get(self.tasks[i].uid, -1)
                if e < 0:
                    still.append(i)
            self.missing = still
        entries = np.array(self.entries, dtype=np.int64)
        out = np.zeros(n, dtype=np.bool_)
        out[entries[entries >= 0]] = True
        return out


class WarmEvictions:
    """The evictions a solver keeps in place from one simulation to the next (``SHORTCUTS.warm_simulations``).

    Statement operation ``base + i`` evicts ``tasks[i]``; after a simulation the statement is rolled back to
    those evictions (:meth:`settle`) before the solver reads anything. Kept alongside, in eviction order: the
    victims' jobs (first eviction order: the scenario's order), each job's evicted positions, the jobs as
    JobsQueue leaf heaps under their job-order keys as they stood at the start (a job's key depends only on
    the job, and a job is keyed before its first eviction), the evicted tasks per shape, and the jobs the
    evictions leave below their minimum with pods to take (the broken gangs the simulation evicts whole).
    """

    __slots__ = ("base", "broken", "dirty", "first", "heaps", "index", "jobs", "kept_jobs", "keys", "last", "nodes",
                 "positions", "seq", "shape_of", "shapes", "ssn", "stmt", "tasks", "uids")

    def __init__(self, ssn: Session, stmt: Statement, base: int) -> None:
        self.ssn = ssn
        self.stmt = stmt
        self.base = base
        self.tasks: list[TaskInfo] = []
        self.uids: list[str] = []
        self.nodes: list[int] = []
        self.jobs: list[PodGroupInfo] = []
        self.first: list[int] = []  # per job: its first eviction's position
        self.index: dict[str, int] = {}  # job key -> its index in ``jobs``
        self.positions: dict[str, list[int]] = {}  # job key -> positions of its evicted tasks
        self.keys: dict[str, tuple[object, ...]] = {}  # job uid -> its job-order key at the start
        self.heaps: dict[str, list[HeapEntry]] = {}  # leaf queue -> its jobs' entries, sorted
        self.seq = itertools.count()
        self.shapes: dict[Shape, list[int]] = {}  # shape -> positions of its tasks
        self.shape_of: dict[str, Shape] = {}
        self.broken: set[str] = set()
        self.kept_jobs = 0  # jobs kept by the last truncation
        self.last: Scenario | None = None  # the last simulation's scenario
        self.dirty: set[str] = set()  # jobs whose victims or statuses that simulation changed after evicting

    def settle(self) -> None:
        """Roll back what the last simulation did after its evictions."""
        self.stmt.rollback(self.base + len(self.tasks))

    def cool(self) -> None:
        """Roll back to the solver's start."""
        self._truncate(0)

    def evict(self, evict: list[TaskInfo], action: str, preemptor: str) -> tuple[int, set[str]]:
        """Make ``evict`` the evictions in place, keeping the leading ones already there; returns how many were
        kept and the keys of the jobs whose evicted tasks changed."""
        kept = common_prefix(self.tasks, evict)
        changed = self._truncate(kept)
        self.kept_jobs = len(self.jobs)
        fresh = evict[kept:]
        for t in fresh:  # keyed before their first eviction, as they stand at the start
            job = t.job
            if job is not None and job.uid not in self.keys:
                self.keys[job.uid] = self.ssn.cached_job_order_key(job)
        stmt = self.stmt
        for t in fresh:
            stmt.evict(t, action=action, preemptor=preemptor, message="")  # messages: see VictimSolver.run()
            self._push(t, changed)
        for key in changed:
            self._check_broken(key)
        return kept, changed

    def _push(self, t: TaskInfo, changed: set[str]) -> None:
        position = len(self.tasks)
        self.tasks.append(t)
        self.uids.append(t.uid)
        self.nodes.append(t.node)
        shape = self.shape_of.get(t.uid)
        if shape is None:
            shape = self.shape_of[t.uid] = (t.req.tobytes(), t.gpu, claims_key(t))
        self.shapes.setdefault(shape, []).append(position)
        job = t.job
        if job is None:
            return
        key = job.key
        changed.add(key)
        positions = self.positions.get(key)
        if positions is not None:
            positions.append(position)
            return
        self.positions[key] = [position]
        self.index[key] = len(self.jobs)
        self.jobs.append(job)
        self.first.append(position)
        bisect.insort(self.heaps.setdefault(job.queue, []), (self.keys[job.uid], next(self.seq), job))

    def _truncate(self, n: int) -> set[str]:
        """Roll back to the first ``n`` evictions."""
        self.stmt.rollback(self.base + n)
        changed: set[str] = set()
        for position in range(len(self.tasks) - 1, n - 1, -1):
            t = self.tasks[position]
            shape = self.shape_of[t.uid]
            same = self.shapes[shape]
            same.pop()
            if not same:
                del self.shapes[shape]
            job = t.job
            if job is None:
                continue
            key = job.key
            changed.add(key)
            positions = self.positions[key]
            positions.pop()
            if positions:
                continue
            del self.positions[key]
            del self.index[key]
            assert self.jobs[-1] is job, "jobs leave in the reverse order of their first eviction"
            self.jobs.pop()
            self.first.pop()
            self.broken.discard(key)
            heap = self.heaps[job.queue]
            del heap[bisect.bisect_left(heap, (self.keys[job.uid],))]
        del self.tasks[n:]
        del self.uids[n:]
        del self.nodes[n:]
        return changed

    def _check_broken(self, key: str) -> None:
        """Is the job left below its minimum with pods to take (by the evictions alone)?"""
        i = self.index.get(key)
        if i is None:
            self.broken.discard(key)
            return
        job = self.jobs[i]
        if not job.is_allocated_gang_satisfied() and any(t.is_settled_active for t in job.tasks):
            self.broken.add(key)
        else:
            self.broken.discard(key)

    def scenario(self, action: str, preemptor: PodGroupInfo, tasks: list[TaskInfo], kept: int, changed: set[str]
                 ) -> Scenario:
        """The simulation's scenario before it places anything: its victim jobs in first eviction order, the
        leading ones unchanged since the last scenario taken from it (the same objects, ``shared_prefix``)."""
        shared = 0
        last = self.last
        if last is not None:
            shared = self.kept_jobs  # (their first evictions are kept)
            for key in changed | self.dirty:
                i = self.index.get(key)
                if i is not None and i < shared:
                    shared = i
        scenario = Scenario(action, preemptor, tasks)
        if shared:
            assert last is not None
            scenario.victims = dict(itertools.islice(last.victims.items(), shared))
            scenario.shared_prefix = shared
        for job in self.jobs[shared:]:
            scenario.add_victims(job, [self.tasks[i] for i in self.positions[job.key]])
        return scenario

    def remember(self, scenario: Scenario, dirty: set[str]) -> None:
        """The simulation's scenario, and the jobs it changed after its evictions (placed again, grown)."""
        self.last = scenario
        self.dirty = dirty

    def any_fits(self, ssn: Session, mask: BoolArray) -> bool:
        """VictimSolver._any_victim_fits over the evicted tasks by shape (a task's fit depends on its shape)."""
        nodes = ssn.nodes
        tasks = self.tasks
        for positions in self.shapes.values():
            t = next((tasks[i] for i in positions if tasks[i].status is TaskStatus.RELEASING), None)
            if t is not None and bool((nodes.fits_task(t, with_releasing=True) & mask).any()):
                return True
        return False


_GRID = 1024.0


def exact_accounting(ssn: Session) -> bool:
    """Every resource amount the session adds up (pods' requests and queue GPUs, nodes' idle and releasing
    resources) is a whole number, or a multiple of 1/1024, so small that any sum of them is an exact float;
    no pod asks for GPU memory (its GPUs depend on the node). Then the accounting after any sequence of
    evictions and undos is the same floats whatever their order (warm simulations rely on it). Once per
    session."""
    known = ssn.exact_accounting
    if known is None:
        known = ssn.exact_accounting = _exact(ssn)
    return known


def _exact(ssn: Session) -> bool:
    tasks = list(ssn.snapshot.tasks.values())
    if any(t.gpu.kind is GpuKind.MEMORY for t in tasks):
        return False
    nodes = ssn.nodes
    rows = len(nodes.idle)
    reqs = np.array([t.req for t in tasks], dtype=np.float64).reshape(len(tasks), rows)
    quotas = np.array([(t.request_gpus, t.accepted_gpus) for t in tasks], dtype=np.float64).reshape(-1)
    for r in range(rows):
        node_values = np.concatenate((nodes.idle[r], nodes.releasing[r], nodes.allocatable[r]))
        values = np.concatenate((reqs[:, r], node_values))
        # an accumulator holds its start value plus some of the pods' amounts, each at most twice (a moved
        # pod: its own place and the one it still holds)
        bound = 2 * float(np.abs(reqs[:, r]).sum()) + float(np.abs(node_values).max(initial=0.0))
        if not _on_grid(values, bound):
            return False
    return _on_grid(quotas, 2 * float(np.abs(quotas).sum()))


def _on_grid(values: FloatArray, bound: float) -> bool:
    """Multiples of one power of two ``unit`` (at least 1/1024: whole numbers, binary fractions of a GPU, bytes
    of memory that are multiples of a MiB...) whose sums stay below ``bound`` < 2**53 units: every sum and
    difference of them is then a multiple of ``unit`` of magnitude below 2**53 units, an exact float. The unit
    is the largest power of two dividing every value (memory in bytes is usually a multiple of 2**20 or more,
    so a cluster's total memory in bytes, above 2**53, still sums exactly)."""
    scaled = values * _GRID  # exact: a power of two
    if not bool(np.all(scaled == np.floor(scaled))):
        return False
    magnitudes = np.abs(scaled)
    if magnitudes.size == 0 or float(magnitudes.max()) == 0.0:
        return True
    if float(magnitudes.max()) >= 2.0**62:
        return False
    mask = int(np.bitwise_or.reduce(magnitudes.astype(np.int64)))
    unit = float(mask & -mask) / _GRID  # the lowest bit any value has: every value is a multiple of it
    return bound / unit < 2.0**53
