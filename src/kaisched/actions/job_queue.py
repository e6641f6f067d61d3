"""Jobs ordered across the queue tree (spec 4.5).

Popping descends from the root; at each level the child queue whose best pending job wins the queue
order (proportion's comparator, spec 5.4) is chosen. Queue-order keys are cached per queue node and
recomputed only for nodes marked dirty (the path of the last popped/pushed job), so the cost of a pop
is proportional to the depth of the tree times the number of siblings, not to the number of jobs.
"""

from __future__ import annotations

import heapq
import itertools

from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo


class _QueueNode:
    __slots__ = ("children", "dirty", "heap", "key", "name", "parent")

    def __init__(self, name: str, parent: str | None) -> None:
        self.name = name
        self.parent = parent  # by name, not by reference: no reference cycles, freed as soon as dropped
        self.children: list[_QueueNode] = []
        self.heap: list[tuple[tuple[object, ...], int, PodGroupInfo]] = []  # leaf only
        self.key: tuple[object, ...] | None = None
        self.dirty = True


class JobsQueue:
    def __init__(self, ssn: Session, jobs: list[PodGroupInfo], depth: int | None = None) -> None:
        self.ssn = ssn
        self._seq = itertools.count()
        tree = ssn.queues
        self._nodes: dict[str, _QueueNode] = {}
        self._roots: list[_QueueNode] = []
        # only the queues of these jobs and their ancestors (a queue without jobs never wins a pop; the
        # solver builds a queue of a few victims' jobs for every simulation)
        needed: set[str] = set()
        for job in jobs:
            if job.queue not in needed and job.queue in tree.queues:
                needed.update(tree.ancestors(job.queue))
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
        by_leaf: dict[str, list[PodGroupInfo]] = {}
        for job in jobs:
            by_leaf.setdefault(job.queue, []).append(job)
        for leaf_jobs in by_leaf.values():
            leaf_jobs.sort(key=ssn.cached_job_order_key)
            if depth is not None:
                leaf_jobs = leaf_jobs[:depth]  # the best `depth` jobs of each queue (see compatibility.md)
            for job in leaf_jobs:
                self.push(job)

    def push(self, job: PodGroupInfo) -> None:
        node = self._nodes[job.queue]
        heapq.heappush(node.heap, (self.ssn.cached_job_order_key(job), next(self._seq), job))
        self._mark_dirty(node)

    def _mark_dirty(self, node: _QueueNode | None) -> None:
        while node is not None:
            node.dirty = True
            node = self._nodes[node.parent] if node.parent is not None else None

    def _best_job(self, node: _QueueNode) -> PodGroupInfo | None:
        """The job a pop through this node would return (without removing it)."""
        while node.children:
            child = self._best_child(node.children)
            if child is None:
                return None
            node = child
        return node.heap[0][2] if node.heap else None

    def _node_key(self, node: _QueueNode) -> tuple[object, ...] | None:
        if node.dirty:
            job = self._best_job(node)
            order = self.ssn.queue_order
            if job is None:
                node.key = None
            elif order is None:
                node.key = ()
            else:
                node.key = order.key(node.name, job)
            node.dirty = False
        return node.key

    def _best_child(self, nodes: list[_QueueNode]) -> _QueueNode | None:
        best: _QueueNode | None = None
        best_key: tuple[object, ...] | None = None
        for node in nodes:
            key = self._node_key(node)
            if key is None:
                continue
            if best is None or best_key is None:
                best, best_key = node, key
                continue
            if key < best_key:
                best, best_key = node, key
        return best

    def pop(self) -> PodGroupInfo | None:
        best = self._best_child(self._roots)
        if best is None:
            return None
        node = best
        while node.children:
            child = self._best_child(node.children)
            if child is None:  # cannot happen: a non-None key means a job below
                return None
            node = child
        _, _, job = heapq.heappop(node.heap)
        self._mark_dirty(node)
        return job

    def __bool__(self) -> bool:
        return any(self._node_key(r) is not None for r in self._roots)
