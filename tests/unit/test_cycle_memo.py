"""The cycle memo (kaisched.cluster.memo): a cycle over exactly the objects of the previous one is answered
without running — and the answer is exactly what a full cycle at that time would decide and report."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kaisched.cluster.memo import CycleMemo, creation_order_fixed
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.session import rfc3339
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects
from tests.unit.builders import NOW, flatten, node, pod, pod_group, queue

LAST_START = "kai.scheduler/last-start-timestamp"
STALE = "kai.scheduler/stale-podgroup-timestamp"
S = timedelta(seconds=1)
M = timedelta(minutes=1)
Obj = dict[str, Any]


def prepared(objs: list[Obj], cfg: SchedulerConfig) -> ParsedObjects:
    return prepare(parse_objects(objs), cfg, NOW)


def created(ago: timedelta) -> str:
    return str(rfc3339(NOW - ago))


def busy_cluster() -> list[Obj]:
    """Two queues over their share of 2 nodes x 4 GPUs, pending gangs and single pods of both, a stale gang."""
    objs: list[Obj] = [node("n1", gpus=4), node("n2", gpus=4), queue("qa", gpu=4, created=created(M)),
                       queue("qb", gpu=4, created=created(M))]
    for i in range(6):
        q = "qa" if i % 2 else "qb"
        pg = pod_group(f"run-{i}", queue=q, created=created(10 * M - i * S))
        pg["metadata"]["annotations"] = {LAST_START: created(5 * M)}
        objs += [pg, pod(f"run-{i}-0", group=f"run-{i}", gpus=1, node="n1" if i < 4 else "n2",
                         created=created(10 * M))]
    for i in range(5):
        q = "qa" if i % 2 else "qb"
        objs.append(pod_group(f"job-{i}", queue=q, min_member=2 if i == 0 else 1, created=created(M - i * S)))
        objs += [pod(f"job-{i}-{k}", group=f"job-{i}", gpus=1 + i % 2, created=created(M))
                 for k in range(2 if i == 0 else 1)]
    stale = pod_group("stale", queue="qa", min_member=2, created=created(20 * M))
    objs += [stale, pod("stale-0", group="stale", gpus=1, node="n2", created=created(20 * M))]
    return objs


CONFIG = {"params": {"default-staleness-grace-period": "120s"}}


def test_a_cycle_on_the_same_objects_is_answered_exactly_as_a_full_cycle_would_decide() -> None:
    cfg = resolve_config(CONFIG)
    objs = prepared(busy_cluster(), cfg)
    memo = CycleMemo()
    first = run_prepared_cycle(objs, cfg, NOW, memo)
    assert first.binds  # binds stamp lastStart; the stale gang is stamped stale
    assert next(g for g in first.pod_groups if g.name == "default/stale").stale_since == rfc3339(NOW)
    assert memo.holds
    for later in (S, 30 * S):
        answered = run_prepared_cycle(objs.relisted(), cfg, NOW + later, memo)
        fresh = run_prepared_cycle(objs.relisted(), cfg, NOW + later)
        assert answered.to_dict() == fresh.to_dict()
    assert memo.hits == 2
    # the stamps are the answering cycle's own time, not the recorded one
    stamped = {g.name: g for g in answered.pod_groups}
    assert stamped["default/stale"].stale_since == rfc3339(NOW + 30 * S)
    started = [g for g in answered.pod_groups if g.last_start == rfc3339(NOW + 30 * S)]
    assert started and all(g.status in ("Allocated", "Pipelined", "Running") for g in started)


def test_anything_changed_runs_the_cycle_in_full() -> None:
    cfg = resolve_config(CONFIG)
    objs = prepared(busy_cluster(), cfg)
    memo = CycleMemo()
    run_prepared_cycle(objs, cfg, NOW, memo)
    changed_pod = objs.relisted()
    changed_pod.pods[0] = replace(changed_pod.pods[0])  # an equal but new object: the API server sent it again
    assert memo.lookup(changed_pod, cfg, NOW + S) is None
    fewer = objs.relisted()
    fewer.pods.pop()
    assert memo.lookup(fewer, cfg, NOW + S) is None
    assert memo.lookup(objs.relisted(), resolve_config({"actions": "allocate"}), NOW + S) is None
    assert memo.lookup(objs.relisted(), cfg, NOW - S) is None  # the clock went back
    assert memo.lookup(objs.relisted(), cfg, NOW + S) is not None
    assert memo.misses == 1 + 4 and memo.hits == 1  # the first cycle asked too


def min_runtime_cluster(started_ago: timedelta) -> list[Obj]:
    """A low-priority job protected by the queue's preempt min-runtime (5 min), a high-priority job waiting."""
    q = queue("q", created=created(M))
    q["spec"]["preemptMinRuntime"] = "5m"
    low = pod_group("low", queue="q", created=created(10 * M))
    low["metadata"]["annotations"] = {LAST_START: created(started_ago)}
    high = pod_group("high", queue="q", priority_class="build", created=created(M))
    return [node("n1", gpus=1), q, low, pod("low-0", group="low", gpus=1, node="n1", created=created(10 * M)),
            high, pod("high-0", group="high", gpus=1, created=created(M))]


def test_the_answer_expires_when_a_min_runtime_protection_ends() -> None:
    cfg = resolve_config(None)
    objs = prepared(min_runtime_cluster(started_ago=2 * M), cfg)  # protected until NOW + 3 min
    memo = CycleMemo()
    assert not run_prepared_cycle(objs, cfg, NOW, memo).evictions
    before = run_prepared_cycle(objs.relisted(), cfg, NOW + 3 * M - S, memo)
    assert memo.hits == 1 and not before.evictions
    after = run_prepared_cycle(objs.relisted(), cfg, NOW + 3 * M, memo)
    assert memo.hits == 1  # not answered: the protection ended
    assert [e.pod for e in after.evictions] == ["default/low-0"]
    assert after.to_dict() == run_prepared_cycle(objs.relisted(), cfg, NOW + 3 * M).to_dict()


def test_the_answer_expires_with_a_stale_gangs_grace_period() -> None:
    cfg = resolve_config({"params": {"default-staleness-grace-period": "60s"}})
    gang = pod_group("gang", queue="q", min_member=2, created=created(M))
    gang["metadata"]["annotations"] = {STALE: created(30 * S)}  # stale for 30 s: evicted at NOW + 30 s
    objs = prepared([node("n1", gpus=2), queue("q", created=created(M)), gang,
                     pod("gang-0", group="gang", gpus=1, node="n1", created=created(M))], cfg)
    memo = CycleMemo()
    assert not run_prepared_cycle(objs, cfg, NOW, memo).evictions
    assert not run_prepared_cycle(objs.relisted(), cfg, NOW + 29 * S, memo).evictions
    assert memo.hits == 1
    evicted = run_prepared_cycle(objs.relisted(), cfg, NOW + 30 * S, memo)
    assert memo.hits == 1 and [e.pod for e in evicted.evictions] == ["default/gang-0"]


@pytest.mark.parametrize(("pod_created", "fixed"), [
    (None, True),  # no creation time given at all: every object sorts as created at the cycle's time
    (timedelta(seconds=-5), False),  # one is created after the cycle's time: a later clock may reorder them
    (timedelta(0), False),  # ... or at it
])
def test_objects_without_a_creation_time_are_answered_only_while_their_order_cannot_change(
        pod_created: timedelta | None, fixed: bool) -> None:
    cfg = resolve_config(None)
    objs: list[Obj] = [node("n1", gpus=1), queue("q", created=created(M)),
                       pod_group("a", queue="q"), pod("a-0", group="a", gpus=1)]
    if pod_created is not None:
        objs += [pod_group("b", queue="q"), pod("b-0", group="b", gpus=1, created=created(pod_created))]
    parsed = prepared(flatten(objs), cfg)
    assert creation_order_fixed(parsed, NOW) is fixed
    memo = CycleMemo()
    run_prepared_cycle(parsed, cfg, NOW, memo)
    assert memo.holds is fixed


def test_a_steady_scale_cluster_is_answered_as_decided() -> None:
    """The benchmark's steady shape at smoke size: cycle 2's objects, scheduled again, decide what cycle 2 did."""
    from benchmarks.scale import SMOKE_SIZE, SteadyState, _outcome_key, scale_cluster

    steady = SteadyState.start(scale_cluster(SMOKE_SIZE).objects)
    try:
        assert steady.answered
        at = steady.now + S
        answered = run_prepared_cycle(steady.next_objects(), steady.config, at, steady.memo)
        fresh = run_prepared_cycle(steady.next_objects(), steady.config, at)
    finally:
        steady.close()
    assert steady.memo.hits == 1
    assert answered.to_dict() == fresh.to_dict()
    assert _outcome_key(answered) == _outcome_key(steady.previous)
