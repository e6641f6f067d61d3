"""Fair-share resource division (spec section 5.3, KAI's ``resource_division`` package).

Pure functions, no session state: :func:`divide_resource` divides one resource among one sibling group,
:func:`compute_fair_shares` applies it top-down over the whole queue forest, GPU, CPU and memory
separately.

Per sibling group and resource:

1. **Deserved.** Every queue gets ``min(D, requestable)`` where ``D`` is its deserved quota (the whole
   amount being divided when unlimited). Quotas are never scaled down, so when the group is
   oversubscribed the shares may add up to more than the amount.
2. **Over-quota**, one priority group at a time from the highest priority down: repeated rounds hand the
   amount left at the start of the round out in proportion to
   ``shareWeight = max(0, nW + k·(nW − U))`` with ``nW = weight / Σ weights of unsatisfied queues``; a
   queue whose remaining request fits into its slice takes just that, the others take whole units
   (``floor``) and remember the fraction they left. Another round runs only if somebody left part of
   its slice unused.
3. **Leftovers**, right after the priority group's rounds (as KAI does, so a lower priority group never
   gets the rounding remainder while a higher one still wants it): queues that left a fraction get one
   unit each (``min(1, remaining)``), largest fraction first, then older queue.

Where KAI iterates a Go map (random order), the queues are visited in ``order_key`` order. Comparisons
use a small tolerance (1e-9, or 1e-12 of the amount for large amounts such as memory bytes) so that
floating-point noise never decides between "fits" and "whole units", leftover fractions equal to 9
digits count as ties (then the older queue wins), and the amount remaining never goes negative. Rounds
are bounded, so odd inputs (negative weights, NaN usage) cannot loop; shares are never negative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kaisched.model.resources import EPSILON, QUEUE_RESOURCES, Vector

__all__ = ["UNLIMITED", "QueueShareInput", "compute_fair_shares", "divide_resource"]

UNLIMITED = -1.0
"""Deserved / max-allowed value meaning "no quota" / "no limit" (any negative value is read so)."""

_RELATIVE_TOLERANCE = 1e-12  # of the amount divided: keeps comparisons meaningful for memory bytes
_LEFTOVER_DIGITS = 9  # leftovers equal to this many digits tie and fall back to the queue order

FloatSeq = Sequence[float] | npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class QueueShareInput:
    """One queue's inputs to the fair-share division (all vectors are ``[gpu, cpu, memory]``)."""

    name: str
    parent: str | None  # None for top-level queues
    priority: int  # queue priority (default 100); higher priority groups get over-quota first
    order_key: tuple[Any, ...]  # deterministic tie-breaker (creation time, then name); smaller = older
    deserved: Vector  # -1 = unlimited (the whole amount being divided)
    max_allowed: Vector  # -1 = unlimited
    over_quota_weight: Vector
    request: Vector  # allocated + pending requests of the queue and all its descendants
    usage: Vector  # normalized historical usage (zeros when disabled)


def divide_resource(
    amount: float,
    deserved: FloatSeq,
    max_allowed: FloatSeq,
    weights: FloatSeq,
    requests: FloatSeq,
    usages: FloatSeq,
    priorities: Sequence[int],
    order: Sequence[Any],
    k_value: float,
) -> Vector:
    """Divide ``amount`` of one resource among one sibling group; returns the fair share of each queue.

    All sequences are indexed by queue. ``order`` holds each queue's sort key (smaller = visited first
    and preferred on leftover ties, e.g. ``(creation_time, name)``). ``deserved`` / ``max_allowed``
    equal to -1 mean unlimited. ``k_value`` ≤ 0 disables the historical-usage term.
    """
    n = len(deserved)
    if not (len(max_allowed) == len(weights) == len(requests) == len(usages) == len(priorities) == n):
        raise ValueError("divide_resource: all per-queue sequences must have the same length")
    if len(order) != n:
        raise ValueError("divide_resource: all per-queue sequences must have the same length")
    visit = sorted(range(n), key=lambda i: (order[i], i))
    shares, _ = _divide(
        float(amount),
        [float(x) for x in deserved],
        [float(x) for x in max_allowed],
        [float(x) for x in weights],
        [float(x) for x in requests],
        [float(x) for x in usages],
        [int(p) for p in priorities],
        visit,
        float(k_value),
    )
    return np.array(shares, dtype=np.float64)


def compute_fair_shares(
    queues: Sequence[QueueShareInput], total: Vector, k_value: float = 1.0
) -> dict[str, Vector]:
    """Fair share ``[gpu, cpu, memory]`` of every queue, keyed by queue name.

    The top-level queues divide ``total``; the children of each queue divide that queue's fair share,
    recursively. The queues must form a forest: a duplicate name, an unknown parent or a cycle raises
    :class:`ValueError`.
    """
    by_name: dict[str, QueueShareInput] = {}
    for q in queues:
        if q.name in by_name:
            raise ValueError(f"Queue {q.name}: duplicate queue name")
        by_name[q.name] = q
    children: dict[str | None, list[QueueShareInput]] = {}
    for q in queues:
        if q.parent is not None and q.parent not in by_name:
            raise ValueError(f"Queue {q.name}: parent queue {q.parent} does not exist")
        children.setdefault(q.parent, []).append(q)

    k = float(k_value)
    result: dict[str, Vector] = {}
    pending: list[tuple[str | None, list[float]]] = [(None, [float(x) for x in total[:QUEUE_RESOURCES]])]
    while pending:
        parent, amounts = pending.pop()
        siblings = children.get(parent)
        if not siblings:
            continue
        siblings = sorted(siblings, key=lambda q: (q.order_key, q.name))
        visit = list(range(len(siblings)))
        priorities = [q.priority for q in siblings]
        deserved = [q.deserved.tolist() for q in siblings]
        max_allowed = [q.max_allowed.tolist() for q in siblings]
        weights = [q.over_quota_weight.tolist() for q in siblings]
        requests = [q.request.tolist() for q in siblings]
        usages = [q.usage.tolist() for q in siblings]
        per_resource: list[list[float]] = []
        for r in range(QUEUE_RESOURCES):
            shares, _ = _divide(
                amounts[r],
                [v[r] for v in deserved],
                [v[r] for v in max_allowed],
                [v[r] for v in weights],
                [v[r] for v in requests],
                [v[r] for v in usages],
                priorities,
                visit,
                k,
            )
            per_resource.append(shares)
        for j, q in enumerate(siblings):
            vec = [per_resource[r][j] for r in range(QUEUE_RESOURCES)]
            result[q.name] = np.array(vec, dtype=np.float64)
            pending.append((q.name, vec))

    if len(result) != len(by_name):
        stuck = sorted(set(by_name) - set(result))
        raise ValueError(f"Queues {', '.join(stuck)}: parent chain forms a cycle")
    return result


def _divide(
    amount: float,
    deserved: list[float],
    max_allowed: list[float],
    weights: list[float],
    requests: list[float],
    usages: list[float],
    priorities: list[int],
    visit: list[int],
    k_value: float,
) -> tuple[list[float], float]:
    """Core of :func:`divide_resource` on plain floats; returns (shares, amount left undivided).

    ``visit`` is the deterministic visiting order (indices into the per-queue lists).
    """
    n = len(deserved)
    tol = max(EPSILON, abs(amount) * _RELATIVE_TOLERANCE)
    requestable = [
        max(0.0, requests[i] if max_allowed[i] < 0 else min(max_allowed[i], requests[i])) for i in range(n)
    ]

    # Phase 1: deserved quotas (never scaled down)
    shares = [0.0] * n
    remaining = amount
    for i in range(n):
        d = amount if deserved[i] < 0 else deserved[i]
        give = max(0.0, min(d, requestable[i]))
        shares[i] = give
        remaining -= give
    if remaining <= tol:
        return shares, 0.0

    # Phase 2 + 3: over-quota, one priority group at a time (highest first)
    k = k_value if k_value > 0 else 0.0
    rank = [0] * n
    for pos, i in enumerate(visit):
        rank[i] = pos
    groups: dict[int, list[int]] = {}
    for i in visit:
        groups.setdefault(priorities[i], []).append(i)
    for priority in sorted(groups, reverse=True):
        if remaining <= tol:
            break
        group = groups[priority]
        leftovers: dict[int, float] = {}
        remaining = _divide_over_quota(
            remaining, group, shares, requestable, weights, usages, k, tol, leftovers
        )
        if remaining <= tol or not leftovers:
            continue
        remaining = _divide_leftovers(remaining, leftovers, shares, rank, tol)
    return shares, (remaining if remaining > tol else 0.0)


def _divide_over_quota(
    remaining: float,
    group: list[int],
    shares: list[float],
    requestable: list[float],
    weights: list[float],
    usages: list[float],
    k: float,
    tol: float,
    leftovers: dict[int, float],
) -> float:
    """Phase 2 for one priority group: rounds of weighted whole-unit over-quota; returns what is left."""
    active = [i for i in group if requestable[i] - shares[i] > tol]
    # every round that asks for another one satisfies at least one queue, so this bound is never hit
    for _ in range(len(group) + 2):
        if not active or remaining <= tol:
            break
        total_weight = 0.0
        for i in active:
            total_weight += weights[i]
        if abs(total_weight) <= EPSILON:
            break
        share_weights: list[float] = []
        share_weight_sum = 0.0
        for i in active:
            nw = weights[i] / total_weight
            sw = nw + k * (nw - usages[i])
            if sw < 0.0 or sw != sw:  # negative or NaN
                sw = 0.0
            share_weights.append(sw)
            share_weight_sum += sw
        if share_weight_sum <= 0.0:
            break

        round_amount = remaining
        another_round = False
        still_active: list[int] = []
        for pos, i in enumerate(active):
            if remaining <= tol:
                remaining = 0.0
                still_active.extend(active[pos:])
                break
            if weights[i] == 0.0:
                still_active.append(i)
                continue
            wanted = requestable[i] - shares[i]
            fair = round_amount * share_weights[pos] / share_weight_sum
            if wanted <= fair + tol:
                # the queue's remaining request fits into its slice: it is satisfied
                leftovers.pop(i, None)
                if wanted <= remaining:
                    shares[i] = requestable[i]
                    remaining -= wanted
                else:  # only floating-point noise can get here
                    shares[i] += remaining
                    remaining = 0.0
                    if requestable[i] - shares[i] > tol:
                        still_active.append(i)
                if wanted < fair - tol and wanted > 0.0:
                    another_round = True
            else:
                whole = math.floor(fair + tol)
                leftover = fair - whole
                if leftover > tol:
                    leftovers[i] = leftover
                give = min(float(whole), remaining)
                if give > 0.0:
                    shares[i] += give
                    remaining -= give
                still_active.append(i)
        if remaining < 0.0:
            remaining = 0.0
        active = still_active
        if not another_round:
            break
    return remaining


def _divide_leftovers(
    remaining: float, leftovers: dict[int, float], shares: list[float], rank: list[int], tol: float
) -> float:
    """Phase 3 for one priority group: one unit each, largest recorded fraction first, then older queue."""
    ordered = sorted(leftovers.items(), key=lambda kv: (-round(kv[1], _LEFTOVER_DIGITS), rank[kv[0]]))
    for i, _ in ordered:
        if remaining <= tol:
            return 0.0
        give = min(1.0, remaining)
        shares[i] += give
        remaining -= give
    return remaining
