"""Batched placement: pods alike are placed from one fit and one ranking over the nodes, kept up to date node by node.

When one scorer ranks the nodes alone for a task (every other scorer is neutral for it: ``Session.ranked_node``)
and that scorer orders the nodes by an amount of one resource row (``Session.node_rank_row``: binpack, the fewest
available GPUs or CPU first, the smaller node index among equals), the node placement takes is the first of the
fitting nodes in the order (amount, index). One more scorer may score the task, when it gives a bonus larger than the
ranker's whole range on the nodes where a condition of the node holds (``Session.node_scorers_tier``: gpusharingorder's
+1000 where a shared device has room for a fraction): the order is then (condition first, amount, index).

Which nodes fit, their amounts and conditions change only where the accounting changed
(``NodeTable.changes_since``), so for each task shape (``placement.failure_key``'s number: everything the fit depends
on besides the cluster state) this module keeps, once computed over all nodes:

* ``fit0``: the nodes every static predicate passes (fixed for the session: they depend on the node and the pod's
  spec only);
* a heap of (tier, amount, node) over the nodes that fit, and per node its current (tier, amount) (None: it does
  not fit);

and before each answer recomputes the nodes changed since (a placement changes one node; whoever placed there:
another shape, a rollback, an eviction). Entries of the heap whose node changed are stale and skipped; the top of
the heap is then exactly the first node of the order among the fitting nodes — the node one-at-a-time placement
picks from a fresh fit (docs/performance.md, "Batched placement", has the argument). A task is answered here only
when nothing else can tell its nodes apart: no DRA claims, and every predicate that may change within a session
(host ports, pod affinity, the queue capacity of gpu-memory tasks, nomination claims) answers None for it now;
otherwise placement falls back to evaluating every node for it.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from kaisched.framework.plugin import NodeTier, Predicate
from kaisched.framework.session import Session
from kaisched.model.resources import Vector
from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Rank = tuple[int, float]  # (0 where the tier's condition holds, else 1; the ranked amount)


class BatchSwitch:
    """Whether allocate places tasks alike from the kept ranking (tests and benchmarks turn it off to compare with
    one full evaluation per task; a module-level instance, :data:`BATCHING`, as compiled code reads it at run time)."""

    def __init__(self) -> None:
        self.enabled = True


BATCHING = BatchSwitch()


class one_at_a_time:  # (named as it is used: ``with one_at_a_time():``)
    """Batched placement off inside the block (every task placed from a fresh evaluation of every node), as it was
    before after it."""

    __slots__ = ("before",)

    def __init__(self) -> None:
        self.before = BATCHING.enabled

    def __enter__(self) -> None:
        self.before = BATCHING.enabled
        BATCHING.enabled = False

    def __exit__(self, *exc: object) -> None:
        BATCHING.enabled = self.before

#: past this share of the nodes changed since a shape's ranking was brought up to date (at least REBUILD_LEAST
#: changes), it is computed afresh
REBUILD_SHARE = 8
REBUILD_LEAST = 32
#: up to this many changed nodes are brought up to date one by one, more with one vectorised fit over them
SCALAR_UPDATES = 16


class _Ranking:
    """One task shape's fitting nodes in rank order (see the module doc)."""

    __slots__ = ("fit0", "floors", "heap", "passes", "rank", "row", "rows", "tier", "version")

    def __init__(self, fit0: BoolArray, row: int, tier: NodeTier | None, req: Vector) -> None:
        self.fit0 = fit0
        self.passes: list[bool] = fit0.tolist()  # (the same, read node by node)
        self.row = row
        self.tier = tier
        # the rows the task asks for and the least each must have (NodeTable.fits: the request less the tolerance)
        asked = np.flatnonzero(req > 0)
        self.rows: list[int] = asked.tolist()
        self.floors: list[float] = (req[asked] - 1e-9).tolist()
        self.version = -1
        self.heap: list[tuple[int, float, int]] = []
        self.rank: list[Rank | None] = []


class RankedPlacements:
    """The rankings of a session's task shapes (``Session.placement_index``)."""

    __slots__ = ("answered", "dynamic", "rankings", "static")

    def __init__(self, ssn: Session) -> None:
        self.answered = 0  # tasks given a node from a kept ranking
        static = ssn.static_predicates
        self.static: list[Predicate] = list(static)
        self.dynamic: list[Predicate] = [p for p in ssn.predicates if p not in static]
        self.rankings: dict[tuple[int, int, int], _Ranking] = {}

    def first_node(self, ssn: Session, task: TaskInfo, fit_id: int, row: int, tier_at: int) -> int | None:
        """The node one-at-a-time placement picks for ``task`` (of shape ``fit_id``, ranked by resource ``row``, and
        first by the tier of scorer ``tier_at`` when not -1): its index, -1 when no node fits; None when this task
        must be evaluated in full (a dynamic predicate has something to say about it)."""
        for predicate in self.dynamic:
            if predicate(task) is not None:
                return None
        key = (fit_id, row, tier_at)
        ranking = self.rankings.get(key)
        nodes = ssn.nodes
        if ranking is None:
            fit0: BoolArray | None = None
            for predicate in self.static:
                codes = predicate(task)
                if codes is not None:
                    passes = codes == 0
                    fit0 = passes if fit0 is None else fit0 & passes
            ranking = self.rankings[key] = _Ranking(
                fit0 if fit0 is not None else np.ones(len(nodes), np.bool_), row,
                ssn.node_scorers_tier[tier_at] if tier_at >= 0 else None, task.req)
            self._rebuild(ssn, task, ranking)
        elif ranking.version != nodes.version:
            changes = nodes.changes_since(ranking.version, max(len(nodes) // REBUILD_SHARE, REBUILD_LEAST))
            if changes is None:
                self._rebuild(ssn, task, ranking)
            else:
                self._update(ssn, task, ranking, sorted(set(changes)))
        heap, rank = ranking.heap, ranking.rank
        while heap:
            first, value, j = heap[0]
            current = rank[j]
            if current is not None and current[0] == first and current[1] == value:
                self.answered += 1
                return j
            heapq.heappop(heap)
        return -1

    @staticmethod
    def _tiers(task: TaskInfo, ranking: _Ranking, at: IntArray) -> list[int]:
        """Per node of ``at``: 0 where the tier's condition holds (or there is no tier), else 1."""
        tier = ranking.tier
        holds = tier(task, at) if tier is not None else None
        if holds is None:
            return [0] * len(at)
        out: list[int] = (~holds).astype(np.int64).tolist()
        return out

    @staticmethod
    def _rebuild(ssn: Session, task: TaskInfo, ranking: _Ranking) -> None:
        nodes = ssn.nodes
        fit = nodes.fits_task(task, with_releasing=True) & ranking.fit0
        r = ranking.row
        at = np.flatnonzero(fit)
        values = nodes.idle[r].take(at) + nodes.releasing[r].take(at)
        tiers = np.array(RankedPlacements._tiers(task, ranking, at), dtype=np.int64)
        order = np.lexsort((at, values, tiers))  # (tier, amount, node)
        ts, vs, js = tiers[order].tolist(), values[order].tolist(), at[order].tolist()
        rank: list[Rank | None] = [None] * len(nodes)
        for j, t, v in zip(js, ts, vs, strict=True):
            rank[j] = (t, v)
        ranking.rank = rank
        ranking.heap = list(zip(ts, vs, js, strict=True))  # (a sorted list is a heap)
        ranking.version = nodes.version

    @staticmethod
    def _update(ssn: Session, task: TaskInfo, ranking: _Ranking, changed: list[int]) -> None:
        """Bring the nodes ``changed`` up to date: their fit (``NodeTable.fits_task_at`` on them; a few nodes of a task
        without shared devices one by one, with the same comparisons as ``NodeTable.fits_at``), their tier and their
        amount."""
        nodes = ssn.nodes
        r = ranking.row
        idle, releasing = nodes.idle, nodes.releasing
        fit0 = ranking.fit0
        fitting: list[int] = []
        gone: list[int] = []
        if task.gpu.shared or len(changed) > SCALAR_UPDATES:
            at = np.array(changed, dtype=np.int64)
            ok = (nodes.fits_task_at(task, at, with_releasing=True) & fit0.take(at)).tolist()
            for j, f in zip(changed, ok, strict=True):
                (fitting if f else gone).append(j)
        else:
            rows, floors, passes = ranking.rows, ranking.floors, ranking.passes
            with_releasing = nodes.any_releasing
            for j in changed:
                fits = passes[j]
                if fits:
                    have: list[float] = idle[:, j].tolist()
                    if with_releasing:
                        more: list[float] = releasing[:, j].tolist()
                        have = [a + b for a, b in zip(have, more, strict=True)]
                    for row, floor in zip(rows, floors, strict=True):
                        if not have[row] >= floor:
                            fits = False
                            break
                (fitting if fits else gone).append(j)
        rank, heap = ranking.rank, ranking.heap
        for j in gone:
            rank[j] = None
        if fitting:
            tiers = RankedPlacements._tiers(task, ranking, np.array(fitting, dtype=np.int64)) \
                if ranking.tier is not None else [0] * len(fitting)
            for j, t in zip(fitting, tiers, strict=True):
                v = float(idle[r, j] + releasing[r, j])
                current = rank[j]
                if current is None or current[0] != t or current[1] != v:
                    rank[j] = (t, v)
                    heapq.heappush(heap, (t, v, j))
        ranking.version = nodes.version


def batched_node(ssn: Session, task: TaskInfo, fit_id: int) -> int | None:
    """The node one-at-a-time placement would give ``task``, from the shape's kept ranking: its index, -1 when it
    fits nowhere; None when the task is not answered this way (see the module doc)."""
    if not BATCHING.enabled or (task.claims and ssn.nodes.dra is not None):
        return None
    row_of = ssn.node_rank_row
    ranking = ssn.node_ranker
    if row_of is None or ranking is None:
        return None
    at = ranking[0]
    tier_at = -1
    tiers = ssn.node_scorers_tier
    for i, neutral in enumerate(ssn.node_scorers_neutral):
        if i != at and (neutral is None or not neutral(task)):
            if tier_at >= 0 or tiers[i] is None:
                return None  # a second scorer, or one that is no tier: scored in full
            tier_at = i
    row = row_of(task)
    if row is None:
        return None
    index = ssn.placement_index
    if not isinstance(index, RankedPlacements):
        index = ssn.placement_index = RankedPlacements(ssn)
    return index.first_node(ssn, task, fit_id, row, tier_at)
