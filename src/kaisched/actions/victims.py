"""Victim enumeration (spec 4.4 "tasks to evict", 4.5 "victim ordering").

Victim jobs are taken in the inverted order of the allocate queue: the worst queue first (compared with
the victims already taken from it, and its next candidate, subtracted from its allocation), and inside a
leaf queue the lowest-priority, newest job first. Each pop yields one *chunk*: one surplus task of an
elastic job (the pod that would be scheduled last), or all remaining active tasks of a job at or below
its minimum (gangs are evicted whole). A job that still has active tasks after a chunk is pushed back.

A queue's victim key depends on the session's state, what was taken from the queue's subtree and its next
candidate. A solver pops victims between simulations, each rolled back to the state the solver started
from, so each tree node remembers its next job and key until a pop changes that node (the popped leaf and
its ancestors): a pop recomputes one path, not the whole tree. The jobs of the pool every solver of an
action picks from are sorted once per leaf queue (:class:`VictimOrder`, rebuilt when a statement commits);
a solver's queue walks those lists, skipping the jobs that are not its victims, instead of ordering its
victims again.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import total_ordering
from typing import Final, Generic, TypeVar, cast

from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo, PodSetInfo
from kaisched.model.status import ACTIVE_ALLOCATED
from kaisched.model.task import TaskInfo


@total_ordering
class _Reversed:
    """Wraps a sort key so that larger keys come first."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[object, ...]) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.key == other.key

    def __lt__(self, other: _Reversed) -> bool:
        return other.key < self.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(slots=True, eq=False)
class Chunk:
    job: PodGroupInfo
    tasks: list[TaskInfo]


#: a tree node's next job and key must be computed again
_STALE: Final = object()


@dataclass(slots=True, eq=False)
class _Node:
    name: str
    parent: str | None  # by name, not by reference: no reference cycles, freed as soon as dropped
    children: list[_Node] = field(default_factory=list)
    stream: list[tuple[int, PodGroupInfo]] = field(default_factory=list)  # leaf: the pool's jobs, best first
    pos: int = 0  # leaf: where the next victim is looked for in ``stream``
    heap: list[tuple[_Reversed, int, PodGroupInfo]] = field(default_factory=list)  # leaf: jobs pushed back
    removed: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # taken from this subtree so far
    # (next victim job, this node's victim key for it), None when the subtree has none, or _STALE
    best: tuple[PodGroupInfo, tuple[object, ...]] | object | None = _STALE
    # a sibling's subtree (or another root's) has victims too: its key decides between them (else a lone
    # candidate wins without a key)
    compared: bool = False


def quota_sum(tasks: list[TaskInfo]) -> list[float]:
    """The tasks' queue resources (GPUs, millicores, bytes) summed."""
    out = [0.0, 0.0, 0.0]
    for t in tasks:
        g, c, m = t.quota_vector()
        out[0] += g
        out[1] += c
        out[2] += m
    return out


class VictimOrder:
    """The jobs of a victim pool per leaf queue, best victim (largest job-order key) first, each with its
    position in the pool (its place among equals). Valid while the session's state is the one it was built
    on: an action builds one per committed statement and every solver in between starts from that state."""

    __slots__ = ("leaves", "size")

    def __init__(self, ssn: Session, pool: list[PodGroupInfo]) -> None:
        order_key = ssn.cached_job_order_key
        leaves: dict[str, list[tuple[int, PodGroupInfo]]] = {}
        for seq, job in enumerate(pool):
            leaves.setdefault(job.queue, []).append((seq, job))
        for jobs in leaves.values():
            jobs.sort(key=lambda e: order_key(e[1]), reverse=True)  # stable: equal keys keep pool order
        self.leaves = leaves
        self.size = len(pool)


class VictimQueue:
    def __init__(self, ssn: Session, jobs: list[PodGroupInfo], order: VictimOrder | None = None) -> None:
        """``jobs``: the victims, in the order of ``order``'s pool (a sub-list of it) when one is given."""
        self.ssn = ssn
        if order is None:
            order = VictimOrder(ssn, jobs)
        self._members = {id(j) for j in jobs}
        self._seq = itertools.count(order.size)  # jobs pushed back come after every job of the pool
        self._taken: dict[str, set[str]] = {}  # job key -> uids already yielded
        self._nodes: dict[str, _Node] = {}
        self._roots: list[_Node] = []
        tree = ssn.queues
        for name in tree.depth_first():
            q = tree.queues[name]
            parent = self._nodes[q.parent] if q.parent is not None else None
            node = _Node(name, q.parent if parent is not None else None)
            self._nodes[name] = node
            (parent.children if parent is not None else self._roots).append(node)
        self._chunks: dict[str, tuple[int, int, list[TaskInfo], bool]] = {}  # job key -> (version, taken, chunk, whole)
        for name, stream in order.leaves.items():
            leaf = self._nodes.get(name)
            if leaf is not None:
                leaf.stream = stream
        self._mark_compared(self._roots)

    def _mark_compared(self, nodes: list[_Node]) -> bool:
        """Flag the nodes whose victim keys can decide between siblings (their subtrees and a sibling's may
        hold victims: a pool's job in a leaf's stream); returns whether any of ``nodes`` may hold victims."""
        holding = [node for node in nodes if self._mark_compared(node.children) or node.stream]
        for node in holding:
            node.compared = len(holding) > 1
        return bool(holding)

    def _next_in_stream(self, leaf: _Node) -> tuple[int, PodGroupInfo] | None:
        """The leaf's next job of the pool that is a victim here."""
        stream, i, members = leaf.stream, leaf.pos, self._members
        while i < len(stream) and id(stream[i][1]) not in members:
            i += 1
        leaf.pos = i
        return stream[i] if i < len(stream) else None

    def _top(self, leaf: _Node, take: bool = False) -> PodGroupInfo | None:
        """The leaf's best victim job: the next of the pool's or the best pushed back (removed if ``take``)."""
        head = self._next_in_stream(leaf)
        if leaf.heap and (head is None or (leaf.heap[0][0], leaf.heap[0][1])
                          < (_Reversed(self.ssn.cached_job_order_key(head[1])), head[0])):
            return heapq.heappop(leaf.heap)[2] if take else leaf.heap[0][2]
        if head is None:
            return None
        if take:
            leaf.pos += 1
        return head[1]

    def _push(self, job: PodGroupInfo) -> None:
        """Queue a victim job, ordered as the job made of its not-yet-taken tasks (KAI pushes back the
        remainder of a partially taken job as a new job)."""
        node = self._nodes[job.queue]
        heapq.heappush(node.heap, (_Reversed(self.ssn.job_order_key(self._view(job))), next(self._seq), job))

    def _view(self, job: PodGroupInfo) -> PodGroupInfo:
        taken = self._taken.get(job.key)
        if not taken:
            return job
        pod_sets = {
            name: PodSetInfo(ps.name, ps.min_available, [t for t in ps.tasks if t.uid not in taken])
            for name, ps in job.pod_sets.items()
        }
        return replace(job, pod_sets=pod_sets)

    # ---- chunks (spec 4.4) ------------------------------------------------------------------------
    def _remaining(self, job: PodGroupInfo) -> dict[str, list[TaskInfo]]:
        """Per pod set, the pods that may still be taken (settled, not taken yet)."""
        taken = self._taken.get(job.key, set())
        return {
            name: [t for t in ps.tasks if t.is_settled_active and t.uid not in taken]
            for name, ps in job.pod_sets.items()
        }

    def _active_left(self, job: PodGroupInfo) -> dict[str, int]:
        """Per pod set, the active pods the job keeps after what was taken (placed-this-cycle ones too)."""
        taken = self._taken.get(job.key, set())
        return {
            name: sum(1 for t in ps.tasks if t.status in ACTIVE_ALLOCATED and t.uid not in taken)
            for name, ps in job.pod_sets.items()
        }

    def chunk_of(self, job: PodGroupInfo) -> list[TaskInfo]:
        """The next chunk of ``job`` (cached until the job or what was taken from it changes)."""
        taken = len(self._taken.get(job.key, ()))
        cached = self._chunks.get(job.key)
        if cached is not None and cached[0] == job.version and cached[1] == taken:
            return cached[2]
        chunk, whole = self._compute_chunk(job)
        self._chunks[job.key] = (job.version, taken, chunk, whole)
        return chunk

    def _compute_chunk(self, job: PodGroupInfo) -> tuple[list[TaskInfo], bool]:
        """The next chunk, and whether it is all the job has left to take."""
        remaining = self._remaining(job)
        left = self._active_left(job)
        surplus = [ps for ps in job.pod_sets.values()
                   if left[ps.name] > ps.min_available and remaining[ps.name]]
        if surplus:
            order = self.ssn.pod_set_order(job)
            ps = next(p for p in reversed(order) if p in surplus)
            return [max(remaining[ps.name], key=self.ssn.task_order_key)], False
        chunk = [t for ts in remaining.values() for t in ts]
        if len(chunk) > 1:
            chunk.sort(key=self.ssn.task_order_key)
        return chunk, True

    # ---- queue choice -------------------------------------------------------------------------------
    def _best(self, node: _Node) -> tuple[PodGroupInfo, tuple[object, ...]] | None:
        """The subtree's next victim job and the node's victim key for it (cached until a pop changes it).
        The key only when siblings may compete with it (``compared``); else () (it is never compared)."""
        if node.best is not _STALE:
            return cast("tuple[PodGroupInfo, tuple[object, ...]] | None", node.best)
        job = self._best_job(node)
        best: tuple[PodGroupInfo, tuple[object, ...]] | None = None
        if job is not None:
            order = self.ssn.queue_order
            key: tuple[object, ...] = ()
            if order is not None and node.compared:
                key = order.victim_key(node.name, node.removed, quota_sum(self.chunk_of(job)))
            best = (job, key)
        node.best = best
        return best

    def _best_job(self, node: _Node) -> PodGroupInfo | None:
        if not node.children:
            return self._top(node)
        child = self._worst_child(node.children)
        if child is None:
            return None
        best = self._best(child)
        return best[0] if best is not None else None

    def _worst_child(self, nodes: list[_Node]) -> _Node | None:
        """The node with the largest key; the first of equals."""
        best: _Node | None = None
        best_key: tuple[object, ...] = ()
        for node in nodes:
            mine = self._best(node)
            if mine is None:
                continue
            if best is None or mine[1] > best_key:
                best, best_key = node, mine[1]
        return best

    def _changed(self, leaf: _Node) -> None:
        """``leaf``'s heap or the amounts taken below its ancestors changed: forget their next jobs."""
        cur: _Node | None = leaf
        while cur is not None:
            cur.best = _STALE
            cur = self._nodes[cur.parent] if cur.parent is not None else None

    def pop(self) -> Chunk | None:
        node = self._worst_child(self._roots)
        if node is None:
            return None
        while node.children:
            child = self._worst_child(node.children)
            if child is None:
                return None
            node = child
        job = self._top(node, take=True)
        if job is None:
            return None
        self._changed(node)
        tasks = self.chunk_of(job)
        if not tasks:
            return self.pop()
        self._taken.setdefault(job.key, set()).update(t.uid for t in tasks)
        amount = quota_sum(tasks)
        cur: _Node | None = node
        while cur is not None:
            for r in range(3):
                cur.removed[r] += amount[r]
            cur = self._nodes[cur.parent] if cur.parent is not None else None
        if not self._chunks[job.key][3] and any(self._remaining(job).values()):  # (a whole chunk leaves none)
            self._push(job)
        return Chunk(job, tasks)

    def __iter__(self) -> Iterator[Chunk]:
        while (chunk := self.pop()) is not None:
            yield chunk


class ChunkSequence:
    """A victim queue's chunks in pop order, materialised as asked for, up to ``max_victim_jobs`` distinct
    jobs (negative: no limit). Solvers that start from the same state with the same victims (an action's
    preemptors between two committed statements; consolidation's victims are the same for everyone) share
    one: the sequence depends only on that state and those victims."""

    __slots__ = ("_jobs", "_walks", "before_pop", "chunks", "exhausted", "max_victim_jobs", "queue")

    def __init__(self, queue: VictimQueue, max_victim_jobs: int = -1) -> None:
        self.queue = queue
        self.max_victim_jobs = max_victim_jobs
        self.chunks: list[Chunk] = []
        self.exhausted = False
        self._jobs: set[str] = set()
        self._walks: dict[object, _Replay[list[TaskInfo]]] = {}
        # set by a solver that keeps evictions in place between its simulations: called before popping (pops
        # read the session); True when it had to roll them back, and then the sequence pops ahead (doubling)
        self.before_pop: Callable[[], bool] | None = None

    def walk(self, key: object, make: Callable[[], Iterator[list[TaskInfo]]]) -> Iterator[list[TaskInfo]]:
        """The scenarios ``make()`` yields for ``key``, computed once and replayed to every later solver with
        the same key (as far as the earlier ones went, then further)."""
        replay = self._walks.get(key)
        if replay is None:
            replay = self._walks[key] = _Replay(make())
        return iter(replay)

    def get(self, i: int) -> Chunk | None:
        """Chunk ``i``, popping up to it; None past the end. When popping needed a roll-back (``before_pop``), it
        pops ahead too (up to twice the chunks it had), so that the next chunks cost no further roll-back."""
        target = i
        if len(self.chunks) <= i and not self.exhausted and self.before_pop is not None and self.before_pop():
            target = max(i, 2 * len(self.chunks))
        while len(self.chunks) <= target and not self.exhausted:
            chunk = self.queue.pop()
            if chunk is None:
                self.exhausted = True
                break
            if self.max_victim_jobs >= 0 and chunk.job.key not in self._jobs \
                    and len(self._jobs) + 1 > self.max_victim_jobs:
                self.exhausted = True
                break
            self._jobs.add(chunk.job.key)
            self.chunks.append(chunk)
        return self.chunks[i] if i < len(self.chunks) else None


T = TypeVar("T")


class _Replay(Generic[T]):
    """An iterator's items, kept as they are pulled, so that it can be iterated again from the start."""

    __slots__ = ("_done", "_items", "_source")

    def __init__(self, source: Iterator[T]) -> None:
        self._source = source
        self._items: list[T] = []
        self._done = False

    def __iter__(self) -> Iterator[T]:
        i = 0
        while True:
            if i < len(self._items):
                yield self._items[i]
                i += 1
                continue
            if self._done:
                return
            try:
                item = next(self._source)
            except StopIteration:
                self._done = True
                return
            self._items.append(item)
