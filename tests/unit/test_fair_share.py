"""Fair-share division (spec 5.3, 5.7): kaisched.plugins.proportion.division."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaisched.model.resources import CPU, GPU, MEMORY, Vector, queue_vector
from kaisched.plugins.proportion.division import (
    QueueShareInput,
    compute_fair_shares,
    divide_resource,
)

UNL = -1.0


def vec(x: float | Sequence[float]) -> Vector:
    if isinstance(x, int | float):
        return queue_vector(x, x, x)
    return queue_vector(*x)


def queue(
    name: str,
    *,
    parent: str | None = None,
    priority: int = 100,
    order: int | None = None,
    deserved: float | Sequence[float] = 0.0,
    max_allowed: float | Sequence[float] = UNL,
    weight: float | Sequence[float] = 1.0,
    request: float | Sequence[float] = 0.0,
    usage: float | Sequence[float] = 0.0,
) -> QueueShareInput:
    return QueueShareInput(
        name=name,
        parent=parent,
        priority=priority,
        order_key=(0 if order is None else order, name),
        deserved=vec(deserved),
        max_allowed=vec(max_allowed),
        over_quota_weight=vec(weight),
        request=vec(request),
        usage=vec(usage),
    )


def gpu_shares(queues: Sequence[QueueShareInput], total: float, k_value: float = 1.0) -> dict[str, float]:
    result = compute_fair_shares(queues, vec(total), k_value)
    return {name: float(v[GPU]) for name, v in result.items()}


def divide(
    amount: float,
    *,
    deserved: Sequence[float],
    requests: Sequence[float],
    weights: Sequence[float] | None = None,
    max_allowed: Sequence[float] | None = None,
    usages: Sequence[float] | None = None,
    priorities: Sequence[int] | None = None,
    order: Sequence[int] | None = None,
    k_value: float = 0.0,
) -> list[float]:
    n = len(deserved)
    shares = divide_resource(
        amount,
        deserved,
        [UNL] * n if max_allowed is None else max_allowed,
        [1.0] * n if weights is None else weights,
        requests,
        [0.0] * n if usages is None else usages,
        [100] * n if priorities is None else priorities,
        list(range(n)) if order is None else order,
        k_value,
    )
    assert isinstance(shares, np.ndarray)
    assert shares.dtype == np.float64
    return [float(x) for x in shares]


# --- the spec's worked example -------------------------------------------------------------------------


def test_spec_example_70_30() -> None:
    queues = [
        queue("q1", order=1, deserved=10, weight=3, request=100),
        queue("q2", order=2, deserved=10, weight=1, request=100),
    ]
    assert gpu_shares(queues, 100) == {"q1": 70.0, "q2": 30.0}


def test_divide_resource_matches_spec_example() -> None:
    assert divide(100, deserved=[10, 10], weights=[3, 1], requests=[100, 100]) == [70.0, 30.0]


# --- phase 1: deserved ---------------------------------------------------------------------------------


def test_request_below_deserved_gets_request_and_lends_the_rest() -> None:
    # q1 deserves half but only asks for 10; its unused quota goes to q2
    queues = [
        queue("q1", order=1, deserved=50, request=10),
        queue("q2", order=2, deserved=50, request=100),
    ]
    assert gpu_shares(queues, 100) == {"q1": 10.0, "q2": 90.0}


def test_single_queue_within_quota() -> None:
    assert divide(2, deserved=[3], weights=[0], requests=[2]) == [2.0]
    assert divide(3, deserved=[3], weights=[0], requests=[2]) == [2.0]
    assert divide(3, deserved=[3], weights=[0], requests=[2], max_allowed=[2]) == [2.0]
    assert divide(7, deserved=[3], weights=[0], requests=[5]) == [3.0]
    assert divide(2, deserved=[1.5], weights=[0], requests=[5]) == [1.5]  # fractional quota
    assert divide(2, deserved=[0], weights=[0], requests=[2]) == [0.0]


def test_deserved_unlimited_means_the_whole_amount() -> None:
    assert divide(10, deserved=[UNL], weights=[0], requests=[7]) == [7.0]
    assert divide(10, deserved=[UNL], weights=[0], requests=[70]) == [10.0]
    # an unlimited-quota queue takes everything it asks for in phase 1, even beside another queue
    assert divide(10, deserved=[UNL, 4], weights=[0, 1], requests=[8, 8]) == [8.0, 4.0]


def test_oversubscribed_deserved_is_not_scaled_down() -> None:
    queues = [queue(f"q{i}", order=i, deserved=5000, request=6000) for i in range(3)]
    result = compute_fair_shares(queues, vec(10000))
    for v in result.values():
        assert v.tolist() == [5000.0, 5000.0, 5000.0]
    assert sum(float(v[CPU]) for v in result.values()) == 15000.0  # more than the 10000 divided
    # the same with a single queue: deserved above the amount is given in full
    assert divide(1, deserved=[3], requests=[2]) == [2.0]


def test_children_of_a_zero_share_parent_still_get_their_deserved() -> None:
    queues = [
        queue("p", deserved=0, weight=0, request=5),
        queue("c", parent="p", deserved=3, request=5),
    ]
    assert gpu_shares(queues, 100) == {"p": 0.0, "c": 3.0}


# --- phase 2: over-quota -------------------------------------------------------------------------------


def test_over_quota_proportional_to_weights() -> None:
    # 2+2 deserved, 4 left split 1:3
    assert divide(8, deserved=[2, 2], weights=[1, 3], requests=[6, 6]) == [3.0, 5.0]
    # 250+150 deserved, 600 left split 1:2
    assert divide(1000, deserved=[250, 150], weights=[1, 2], requests=[5000, 5000]) == [450.0, 550.0]
    # no deserved at all: 9999 split 6:2:1 in whole units
    shares = divide(9999, deserved=[0, 0, 0], weights=[6, 2, 1], requests=[10000] * 3)
    assert shares == [6666.0, 2222.0, 1111.0]


def test_over_quota_never_exceeds_request() -> None:
    assert divide(15, deserved=[2, 2], weights=[2, 2], requests=[6, 6]) == [6.0, 6.0]
    assert divide(12, deserved=[2, 2], weights=[2, 2], requests=[6, 6]) == [6.0, 6.0]


def test_repeated_rounds_redistribute_what_a_satisfied_queue_left() -> None:
    # round 1: 33.3 each -> q1 takes its 10, q2/q3 take 33; round 2: the 24 left split 12/12
    assert divide(100, deserved=[0, 0, 0], requests=[10, 50, 100]) == [10.0, 45.0, 45.0]


def test_fractional_requests_are_met_exactly() -> None:
    requests = [32.54999999999996, 9.5, 1.65]
    shares = divide(45, deserved=[12, 7, 2], weights=[12, 7, 2], max_allowed=[UNL, UNL, 2], requests=requests)
    assert shares == requests


def test_max_allowed_caps_the_share_and_the_surplus_goes_to_others() -> None:
    # q1 capped at 5; what it cannot take stays with q2 (up to q2's request)
    assert divide(12, deserved=[2, 2], weights=[2, 2], max_allowed=[5, UNL], requests=[6, 6]) == [5.0, 6.0]
    queues = [
        queue("q1", order=1, deserved=2, max_allowed=5, request=50),
        queue("q2", order=2, deserved=2, request=50),
    ]
    assert gpu_shares(queues, 20) == {"q1": 5.0, "q2": 15.0}


def test_max_allowed_below_deserved_caps_phase_one() -> None:
    assert divide(10, deserved=[8, 0], max_allowed=[3, UNL], requests=[10, 10]) == [3.0, 7.0]


def test_zero_weight_gets_no_over_quota() -> None:
    queues = [
        queue("q1", order=1, deserved=10, weight=0, request=100),
        queue("q2", order=2, deserved=10, weight=1, request=100),
    ]
    assert gpu_shares(queues, 100) == {"q1": 10.0, "q2": 90.0}
    # nobody with a weight: the remainder stays undivided
    assert divide(10, deserved=[3], weights=[0], requests=[5]) == [3.0]
    # a queue with weight 0 and no quota gets nothing, the other one gets what it asks for
    assert divide(10000, deserved=[5000, 0], weights=[5000, 0], requests=[10000, 5000]) == [10000.0, 0.0]


def test_queue_priority_takes_over_quota_first() -> None:
    # priority does not affect deserved ...
    assert divide(4, deserved=[2, 2], weights=[2, 2], requests=[6, 6], priorities=[1, 2]) == [2.0, 2.0]
    # ... but the higher priority queue takes all the over-quota it can, whatever the weights
    assert divide(6, deserved=[2, 2], weights=[2, 2], requests=[6, 6], priorities=[1, 2]) == [2.0, 4.0]
    assert divide(6, deserved=[2, 2], weights=[100, 1], requests=[6, 6], priorities=[1, 2]) == [2.0, 4.0]


def test_lower_priority_group_gets_what_higher_groups_cannot_use() -> None:
    queues = [
        queue("high-a", order=1, priority=200, deserved=0, request=10),
        queue("high-b", order=2, priority=200, deserved=0, request=20),
        queue("low-a", order=3, priority=100, deserved=0, weight=1, request=100),
        queue("low-b", order=4, priority=100, deserved=0, weight=3, request=100),
    ]
    # the high group takes 30; 70 left split 1:3 -> 17.5/52.5 -> 17/52 + leftover unit to the older
    assert gpu_shares(queues, 100) == {"high-a": 10.0, "high-b": 20.0, "low-a": 18.0, "low-b": 52.0}


# --- phase 3: fractional leftovers ---------------------------------------------------------------------


def test_leftover_unit_goes_to_the_older_queue_on_ties() -> None:
    # 10 over 3 equal queues: 3.33 each -> 3/3/3 in whole units, the last unit to the oldest queue
    assert divide(10, deserved=[0, 0, 0], requests=[100] * 3) == [4.0, 3.0, 3.0]
    assert divide(10, deserved=[0, 0, 0], requests=[100] * 3, order=[2, 0, 1]) == [3.0, 4.0, 3.0]
    # two equal queues: 2+2 deserved, 0.5/0.5 over-quota -> the unit goes to the older one
    assert divide(5, deserved=[2, 2], weights=[2, 2], requests=[3, 3]) == [3.0, 2.0]
    assert divide(5, deserved=[2, 2], weights=[2, 2], requests=[3, 3], order=[1, 0]) == [2.0, 3.0]


def test_leftover_unit_goes_to_the_largest_fraction_first() -> None:
    # 7 over-quota split 1:4 -> 1.4 / 5.6 -> 1 / 5, leftover 0.4 / 0.6; the unit goes to q2
    assert divide(11, deserved=[2, 2], weights=[1, 4], requests=[10, 10]) == [3.0, 8.0]
    # 11 split evenly: 5.5 / 5.5 -> creation order decides
    assert divide(11, deserved=[2, 2], weights=[2, 2], requests=[6, 6]) == [6.0, 5.0]


def test_leftover_less_than_one_unit_is_given_as_is() -> None:
    # 0.5 over-quota for one queue: fair 0.5 < remaining request -> 0 whole units, then the 0.5 itself
    assert divide(3.5, deserved=[3], weights=[1], requests=[5]) == [3.5]


def test_rounding_remainder_stays_with_the_higher_priority_group() -> None:
    # high-1/high-2 split 3 as 1.5/1.5 -> 1/1 + one leftover unit; the low queue gets none of it
    shares = divide(6, deserved=[1, 1, 1], requests=[5, 5, 5], priorities=[2, 2, 1])
    assert shares == [3.0, 2.0, 1.0]
    # with two leftover-holding queues of the top group, the remainder is split between them
    shares = divide(5, deserved=[2, 2, 1], weights=[2, 2, 2], requests=[5, 5, 0], priorities=[2, 2, 1])
    assert shares == [3.0, 2.0, 0.0]


# --- time-based fair share (kValue, usage) -------------------------------------------------------------


def test_historical_usage_shifts_the_over_quota_split() -> None:
    # equal weights, nW = 0.5; U = 0.24 -> shareWeight 0.76 vs 1.0 (k = 1)
    queues = [
        queue("used", order=1, request=100, usage=0.24),
        queue("fresh", order=2, request=100, usage=0.0),
    ]
    # 100 * 0.76/1.76 = 43.18 -> 43, 100 * 1/1.76 = 56.82 -> 56, larger leftover takes the last unit
    assert gpu_shares(queues, 100, k_value=1.0) == {"used": 43.0, "fresh": 57.0}
    assert gpu_shares(queues, 10, k_value=1.0) == {"used": 4.0, "fresh": 6.0}
    # k = 0, or a negative k (treated as 0), ignores usage
    assert gpu_shares(queues, 100, k_value=0.0) == {"used": 50.0, "fresh": 50.0}
    assert gpu_shares(queues, 100, k_value=-3.0) == {"used": 50.0, "fresh": 50.0}
    # a larger k amplifies the effect: shareWeights 0.5 + 2*0.26 = 1.02 and 0.5 + 2*0.5 = 1.5
    shares = gpu_shares(queues, 100, k_value=2.0)
    assert shares == {"used": 40.0, "fresh": 60.0}


def test_heavy_usage_floors_share_weight_at_zero_until_others_are_satisfied() -> None:
    # U = 1 -> shareWeight max(0, 0.5 + (0.5 - 1)) = 0 in round 1; q2 is satisfied with 30, q1 then
    # is alone (nW = 1, shareWeight 1) and gets the rest in round 2
    assert divide(100, deserved=[0, 0], requests=[100, 30], usages=[1.0, 0.0], k_value=1.0) == [70.0, 30.0]
    # while the other queue wants everything, the heavy user gets no over-quota at all
    assert divide(100, deserved=[5, 0], requests=[100, 100], usages=[1.0, 0.0], k_value=1.0) == [5.0, 95.0]


# --- hierarchy -----------------------------------------------------------------------------------------


def test_three_level_tree_children_divide_the_parent_share() -> None:
    queues = [
        queue("a", order=1, deserved=60, request=120),
        queue("b", order=2, deserved=40, request=30),
        queue("a1", parent="a", order=3, deserved=20, weight=1, request=60),
        queue("a2", parent="a", order=4, deserved=20, weight=3, request=60),
        queue("a2x", parent="a2", order=5, deserved=0, request=30),
        queue("a2y", parent="a2", order=6, deserved=0, request=30),
    ]
    # top: 60/30 deserved, b is satisfied, a takes the remaining 10 -> 70/30
    # a's children divide 70: 20/20 + 30 split 1:3 = 7.5/22.5 -> 7/22 + unit to the older a1 -> 28/42
    # a2's children divide 42 evenly
    expected = {"a": 70.0, "b": 30.0, "a1": 28.0, "a2": 42.0, "a2x": 21.0, "a2y": 21.0}
    assert gpu_shares(queues, 100) == expected


def test_sibling_priorities_are_local_to_their_parent() -> None:
    queues = [
        queue("a", order=1, priority=100, deserved=0, request=100),
        queue("b", order=2, priority=100, deserved=0, request=100),
        queue("a1", parent="a", order=3, priority=50, request=100),
        queue("a2", parent="a", order=4, priority=500, request=100),
        queue("b1", parent="b", order=5, priority=1, request=100),
    ]
    result = gpu_shares(queues, 100)
    assert result == {"a": 50.0, "b": 50.0, "a1": 0.0, "a2": 50.0, "b1": 50.0}


def test_single_top_queue_with_negative_weight() -> None:
    # KAI's test harness wraps everything in an implicit parent with weight -1
    for deserved in (UNL, 0.0, 5.0):
        queues = [
            queue("root", deserved=deserved, weight=-1, request=70),
            queue("t1", parent="root", deserved=10, weight=1, request=40),
            queue("t2", parent="root", deserved=10, weight=1, request=30),
        ]
        assert gpu_shares(queues, 100) == {"root": 70.0, "t1": 40.0, "t2": 30.0}


def test_negative_weights_never_give_negative_shares() -> None:
    for weights in ([-1, 1], [-1, 2], [-2, 1], [-1, -1], [-3, 0]):
        shares = divide(10, deserved=[0, 0], weights=weights, requests=[7, 7], k_value=1.0)
        assert all(s >= 0 for s in shares)
        assert all(s <= 7 for s in shares)
        assert sum(shares) <= 10


# --- resources are independent -------------------------------------------------------------------------


def test_cpu_and_memory_are_divided_independently_of_gpu() -> None:
    gib = 1024.0**3
    queues = [
        queue(
            "q1",
            order=1,
            deserved=(10, 1000, 10 * gib),
            weight=(3, 1, 1),
            request=(100, 2000, 100 * gib),
        ),
        queue(
            "q2",
            order=2,
            deserved=(10, 1000, 50 * gib),
            weight=(1, 1, 1),
            request=(100, 8000, 20 * gib),
        ),
    ]
    result = compute_fair_shares(queues, queue_vector(100, 8000, 100 * gib))
    # GPU: the spec example
    assert result["q1"][GPU] == 70.0
    assert result["q2"][GPU] == 30.0
    # CPU: 1000/1000 deserved, 6000 split 1:1 -> q1 satisfied at 2000, q2 gets the rest
    assert result["q1"][CPU] == 2000.0
    assert result["q2"][CPU] == 6000.0
    # memory: q2 only asks 20 GiB (below its quota), q1 takes the rest
    assert result["q1"][MEMORY] == 80 * gib
    assert result["q2"][MEMORY] == 20 * gib


def test_memory_bytes_are_divided_in_whole_bytes() -> None:
    total = 1_000_000_000_001.0
    shares = divide(total, deserved=[0, 0, 0], requests=[total] * 3)
    # 333333333333.67 each -> whole bytes, the two leftover bytes go to the two oldest queues
    assert shares == [333_333_333_334.0, 333_333_333_334.0, 333_333_333_333.0]
    assert sum(shares) == total
    assert all(s == math.floor(s) for s in shares)


# --- determinism -----------------------------------------------------------------------------------------


def _tree() -> list[QueueShareInput]:
    return [
        queue("a", order=3, deserved=(10, 4000, 1e9), weight=2, request=(60, 9000, 9e9)),
        queue("b", order=1, deserved=(5, 2000, 2e9), weight=1, request=(60, 9000, 9e9), usage=0.1),
        queue("c", order=2, priority=50, deserved=(0, 0, 0), weight=1, request=(60, 9000, 9e9)),
        queue("a1", parent="a", order=4, deserved=1, request=(30, 4000, 4e9)),
        queue("a2", parent="a", order=4, deserved=1, request=(30, 5000, 5e9)),  # order tie -> by name
        queue("b1", parent="b", order=5, deserved=2, max_allowed=(20, -1, -1), request=(60, 9000, 9e9)),
    ]


def test_same_input_same_output() -> None:
    first = compute_fair_shares(_tree(), queue_vector(97, 13_001, 10e9))
    second = compute_fair_shares(_tree(), queue_vector(97, 13_001, 10e9))
    assert first.keys() == second.keys()
    for name in first:
        assert first[name].tolist() == second[name].tolist()


def test_input_order_does_not_matter() -> None:
    expected = compute_fair_shares(_tree(), queue_vector(97, 13_001, 10e9))
    for perm in itertools.islice(itertools.permutations(_tree()), 0, None, 37):
        got = compute_fair_shares(list(perm), queue_vector(97, 13_001, 10e9))
        for name, v in expected.items():
            assert got[name].tolist() == v.tolist()


def test_divide_resource_input_order_does_not_matter() -> None:
    amount = 23.0
    deserved = [1.0, 0.0, 2.0, 0.0]
    weights = [1.0, 2.0, 1.0, 3.0]
    requests = [9.0, 8.5, 30.0, 30.0]
    usages = [0.1, 0.0, 0.3, 0.05]
    priorities = [100, 100, 50, 100]
    base = divide(
        amount,
        deserved=deserved,
        weights=weights,
        requests=requests,
        usages=usages,
        priorities=priorities,
        k_value=1.0,
    )
    for perm in itertools.permutations(range(4)):
        p = list(perm)
        shares = divide(
            amount,
            deserved=[deserved[i] for i in p],
            weights=[weights[i] for i in p],
            requests=[requests[i] for i in p],
            usages=[usages[i] for i in p],
            priorities=[priorities[i] for i in p],
            order=p,  # each queue keeps its own order key
            k_value=1.0,
        )
        assert [shares[p.index(i)] for i in range(4)] == base


# --- input validation --------------------------------------------------------------------------------


def test_unknown_parent_duplicate_and_cycle_are_rejected() -> None:
    with pytest.raises(ValueError, match="parent queue nope does not exist"):
        compute_fair_shares([queue("a", parent="nope")], vec(10))
    with pytest.raises(ValueError, match="duplicate"):
        compute_fair_shares([queue("a"), queue("a")], vec(10))
    with pytest.raises(ValueError, match="cycle"):
        compute_fair_shares([queue("a", parent="b"), queue("b", parent="a")], vec(10))
    with pytest.raises(ValueError, match="same length"):
        divide_resource(1, [0], [UNL], [1], [1], [0], [100, 100], [0], 1.0)


def test_empty_input() -> None:
    assert compute_fair_shares([], vec(10)) == {}
    assert divide_resource(10, [], [], [], [], [], [], [], 1.0).tolist() == []


# --- speed -----------------------------------------------------------------------------------------------


def test_200_queue_tree_is_fast() -> None:
    rng = random.Random(7)
    queues: list[QueueShareInput] = []
    for d in range(5):
        queues.append(queue(f"d{d}", order=d, deserved=rng.choice([UNL, 0, 50]), request=1000))
        for p in range(8):
            pname = f"d{d}-p{p}"
            queues.append(
                queue(
                    pname,
                    parent=f"d{d}",
                    order=p,
                    deserved=rng.randint(0, 20),
                    weight=rng.randint(0, 3),
                    request=rng.randint(0, 200),
                    usage=rng.random() / 5,
                )
            )
            for leaf in range(4):
                queues.append(
                    queue(
                        f"{pname}-l{leaf}",
                        parent=pname,
                        order=leaf,
                        deserved=rng.randint(0, 5),
                        weight=rng.randint(1, 3),
                        request=rng.uniform(0, 60),
                        max_allowed=rng.choice([UNL, 30]),
                    )
                )
    assert len(queues) == 205
    total = queue_vector(500, 2_000_000, 8e12)
    compute_fair_shares(queues, total)  # warm-up
    start = time.perf_counter()
    runs = 5
    for _ in range(runs):
        result = compute_fair_shares(queues, total)
    elapsed = (time.perf_counter() - start) / runs
    assert len(result) == 205
    assert elapsed < 0.05, f"{elapsed * 1000:.1f} ms per computation"


# --- properties --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One randomly drawn sibling group for divide_resource."""

    amount: float
    deserved: list[float]
    max_allowed: list[float]
    weights: list[float]
    requests: list[float]
    usages: list[float]
    priorities: list[int]
    order: list[int]
    k_value: float

    def requestable(self) -> list[float]:
        return [r if m == UNL else min(m, r) for r, m in zip(self.requests, self.max_allowed, strict=True)]


@st.composite
def sibling_groups(draw: st.DrawFn) -> Group:
    n = draw(st.integers(1, 7))
    quantity = st.one_of(st.integers(0, 40).map(float), st.floats(0, 40))
    return Group(
        amount=draw(st.one_of(st.integers(0, 100).map(float), st.floats(0, 100))),
        deserved=draw(st.lists(st.one_of(st.just(UNL), quantity), min_size=n, max_size=n)),
        max_allowed=draw(st.lists(st.one_of(st.just(UNL), quantity), min_size=n, max_size=n)),
        weights=draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.0]), min_size=n, max_size=n)),
        requests=draw(st.lists(quantity, min_size=n, max_size=n)),
        usages=draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)),
        priorities=draw(st.lists(st.sampled_from([50, 100, 200]), min_size=n, max_size=n)),
        order=draw(st.permutations(list(range(n)))),
        k_value=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
    )


@settings(max_examples=400, deadline=None)
@given(sibling_groups())
def test_division_invariants(g: Group) -> None:
    shares = divide_resource(
        g.amount, g.deserved, g.max_allowed, g.weights, g.requests, g.usages, g.priorities, g.order, g.k_value
    ).tolist()
    eps = 1e-6
    requestable = g.requestable()
    phase1 = [min(g.amount if d == UNL else d, rq) for d, rq in zip(g.deserved, requestable, strict=True)]
    for s, rq, p1, w in zip(shares, requestable, phase1, g.weights, strict=True):
        assert s >= 0.0
        assert s >= p1 - eps  # over-quota is never negative
        assert s < rq + 1.0  # only the phase-3 unit may overshoot, by less than one unit
        if w == 0.0:
            assert s <= p1 + eps  # weight 0: never anything beyond min(deserved, requestable)
    over_quota = sum(shares) - sum(phase1)
    assert over_quota <= max(0.0, g.amount - sum(phase1)) + eps
    if sum(phase1) <= g.amount:
        assert sum(shares) <= g.amount + eps


@settings(max_examples=200, deadline=None)
@given(sibling_groups())
def test_division_hands_out_everything_while_requests_are_unmet(g: Group) -> None:
    # every queue has a weight, no limits, no usage: the amount is handed out until every request is met
    n = len(g.deserved)
    shares = divide_resource(
        g.amount, g.deserved, [UNL] * n, [1.0] * n, g.requests, [0.0] * n, g.priorities, g.order, 1.0
    ).tolist()
    unmet = sum(max(0.0, r - s) for r, s in zip(g.requests, shares, strict=True))
    if unmet > 1e-6:
        assert sum(shares) >= g.amount - 1e-6


@settings(max_examples=150, deadline=None)
@given(sibling_groups(), st.lists(st.sampled_from([-3.0, -1.0, 0.0, 1.0, 2.0]), min_size=7, max_size=7))
def test_negative_weights_are_safe(g: Group, raw_weights: list[float]) -> None:
    n = len(g.deserved)
    shares = divide_resource(
        g.amount,
        g.deserved,
        g.max_allowed,
        raw_weights[:n],
        g.requests,
        g.usages,
        g.priorities,
        g.order,
        g.k_value,
    ).tolist()
    for s, rq in zip(shares, g.requestable(), strict=True):
        assert s >= 0.0
        assert s < rq + 1.0


@st.composite
def forests(draw: st.DrawFn) -> list[QueueShareInput]:
    n = draw(st.integers(1, 12))
    queues: list[QueueShareInput] = []
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i > 0 else None
        queues.append(
            queue(
                f"q{i}",
                parent=None if parent is None else f"q{parent}",
                priority=draw(st.sampled_from([50, 100])),
                order=draw(st.integers(0, 3)),
                deserved=draw(st.sampled_from([UNL, 0.0, 1.0, 5.0, 20.0])),
                max_allowed=draw(st.sampled_from([UNL, 3.0, 30.0])),
                weight=draw(st.sampled_from([0.0, 1.0, 2.0])),
                request=draw(st.floats(0, 50)),
                usage=draw(st.floats(0, 0.5)),
            )
        )
    return queues


@settings(max_examples=150, deadline=None)
@given(forests(), st.randoms(use_true_random=False))
def test_forest_shares_are_sane_and_order_independent(
    queues: list[QueueShareInput], rnd: random.Random
) -> None:
    total = queue_vector(40, 40, 40)
    result = compute_fair_shares(queues, total)
    assert set(result) == {q.name for q in queues}
    for q in queues:
        v = result[q.name]
        assert v.shape == (3,)
        assert np.all(v >= 0.0)
        requestable = (
            float(q.request[GPU])
            if q.max_allowed[GPU] == UNL
            else min(float(q.max_allowed[GPU]), float(q.request[GPU]))
        )
        assert float(v[GPU]) < requestable + 1.0
    shuffled = list(queues)
    rnd.shuffle(shuffled)
    again = compute_fair_shares(shuffled, total)
    for name, v in result.items():
        assert again[name].tolist() == v.tolist()
