"""Jobs ordered across the queue tree (spec 4.5).

Popping descends from the root; at each level the child queue whose best pending job wins the queue
order (proportion's comparator, spec 5.4) is chosen (the first of equals). Each queue node remembers its
best child, the job a pop through it returns and its queue-order key; only the nodes marked dirty (the path
of the last popped/pushed job) are computed again, so the cost of a pop is proportional to the depth of the
tree times the number of siblings, not to the number of jobs. A leaf keeps its jobs as a sorted run read
from the front, and the jobs pushed later in a heap: popping the smaller of the two heads gives the order a
single heap would (entries are unique: job-order keys end with the job's uid), without sifting the run.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from operator import itemgetter

from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo

Entry = tuple[tuple[object, ...], int, PodGroupInfo]  # (job-order key, sequence number, job)


class _QueueNode:
    __slots__ = ("best", "children", "dirty", "heap", "job", "key", "name", "next", "parent", "run")

    def __init__(self, name: str, parent: str | None) -> None:
        self.name = name
        self.parent = parent  # by name, not by reference: no reference cycles, freed as soon as dropped
        self.children: list[_QueueNode] = []
        self.run: list[Entry] = []  # leaf only: entries sorted, popped from ``next`` on
        self.next = 0
        self.heap: list[Entry] = []  # leaf only: entries pushed later
        self.key: tuple[object, ...] | None = None  # queue-order key for ``job``; None: no job below
        self.best: _QueueNode | None = None  # the child a pop goes through (inner nodes)
        self.job: PodGroupInfo | None = None  # the job a pop through this node returns
        self.dirty = True


class JobsQueue:
    def __init__(self, ssn: Session, jobs: list[PodGroupInfo], depth: int | None = None,
                 leaf_heaps: Mapping[str, list[Entry]] | None = None) -> None:
        """``leaf_heaps``: more jobs, per leaf queue a list of (job-order key, sequence number, job) sorted by
        key, keys unique, copied as that leaf's sorted run before ``jobs`` are pushed: a caller that keeps such
        lists up to date (the victim solver, simulation after simulation) saves ordering every job again. Keys
        are unique (they end with the job's uid), so the pop order does not depend on how the entries were
        stored."""
        self.ssn = ssn
        self._seq = itertools.count()
        tree = ssn.queues
        self._nodes: dict[str, _QueueNode] = {}
        self._roots: list[_QueueNode] = []
        self._top: _QueueNode | None = None  # the root a pop goes through
        self._top_dirty = True
        # only the queues of these jobs and their ancestors (a queue without jobs never wins a pop; the
        # solver builds a queue of a few victims' jobs for every simulation)
        needed: set[str] = set()
        for job in jobs:
            if job.queue not in needed and job.queue in tree.queues:
                needed.update(tree.ancestors(job.queue))
        ready = {leaf: entries for leaf, entries in (leaf_heaps or {}).items() if entries}
        for leaf in ready:
            if leaf not in needed and leaf in tree.queues:
                needed.update(tree.ancestors(leaf))
        for name in tree.depth_first():
            if name not in needed:
                continue
            q = tree.queues[name]
            parent = self._nodes[q.parent] if q.parent is not None else None
            node = _QueueNode(name, q.parent if parent is not None else None)
            self._nodes[name] = node
            if parent is None:
                self._roots.append(node)
            else:
                parent.children.append(node)
        for leaf, entries in ready.items():
            node = self._nodes[leaf]
            node.run = list(entries)
            self._mark_dirty(node)
        by_leaf: dict[str, list[PodGroupInfo]] = {}
        for job in jobs:
            by_leaf.setdefault(job.queue, []).append(job)
        key = ssn.cached_job_order_key
        for leaf_jobs in by_leaf.values():
            keyed = sorted([(key(job), job) for job in leaf_jobs], key=itemgetter(0))
            if depth is not None:
                keyed = keyed[:depth]  # the best `depth` jobs of each queue (see compatibility.md)
            node = self._nodes[leaf_jobs[0].queue]
            if node.run:  # (a leaf of ``leaf_heaps``)
                for k, job in keyed:
                    heapq.heappush(node.heap, (k, next(self._seq), job))
            else:
                node.run = [(k, next(self._seq), job) for k, job in keyed]
            self._mark_dirty(node)

    def push(self, job: PodGroupInfo) -> None:
        node = self._nodes[job.queue]
        heapq.heappush(node.heap, (self.ssn.cached_job_order_key(job), next(self._seq), job))
        self._mark_dirty(node)

    def _mark_dirty(self, node: _QueueNode | None) -> None:
        while node is not None:
            node.dirty = True
            node = self._nodes[node.parent] if node.parent is not None else None
        self._top_dirty = True

    def _best_of(self, nodes: list[_QueueNode]) -> _QueueNode | None:
        """The node with the smallest key (the first of equals), refreshing dirty ones."""
        best: _QueueNode | None = None
        best_key: tuple[object, ...] | None = None
        for node in nodes:
            if node.dirty:
                self._refresh(node)
            key = node.key
            if key is not None and (best_key is None or key < best_key):
                best, best_key = node, key
        return best

    def _refresh(self, node: _QueueNode) -> None:
        if node.children:
            node.best = self._best_of(node.children)
            node.job = node.best.job if node.best is not None else None
        else:
            head = _head(node)
            node.job = head[2] if head is not None else None
        order = self.ssn.queue_order
        job = node.job
        node.key = None if job is None else (() if order is None else order.key(node.name, job))
        node.dirty = False

    def pop(self) -> PodGroupInfo | None:
        if self._top_dirty:
            self._top = self._best_of(self._roots)
            self._top_dirty = False
        node = self._top
        if node is None:
            return None
        while node.children:
            child = node.best
            if child is None:  # cannot happen: a non-None key means a job below
                return None
            node = child
        run, heap = node.run, node.heap
        if heap and (node.next >= len(run) or heap[0] < run[node.next]):
            job = heapq.heappop(heap)[2]
        else:
            job = run[node.next][2]
            node.next += 1
        self._mark_dirty(node)
        return job

    def __bool__(self) -> bool:
        if self._top_dirty:
            self._top = self._best_of(self._roots)
            self._top_dirty = False
        return self._top is not None


def _head(leaf: _QueueNode) -> Entry | None:
    """The smallest entry of a leaf: the head of its sorted run or of its heap of later pushes."""
    run, heap = leaf.run, leaf.heap
    first = run[leaf.next] if leaf.next < len(run) else None
    if heap and (first is None or heap[0] < first):
        return heap[0]
    return first
