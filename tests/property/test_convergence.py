"""Convergence of the eviction actions (issue 23): random clusters run for many cycles with the embedded
cluster's transitions (a bind runs at once, an eviction deletes the pod and its controller recreates it
Pending at once, nothing new arrives) reach a fixed point, no pod is evicted twice for the same preemptor
over the run, and every cycle's account of its decisions holds (``CycleResult.decision_errors``). With the
eviction storm guard (``params.max-evicted-gpus-ratio``) every cycle evicts at most that many GPUs per GPU
its preemptors are given.

The two loops KAI's order of actions allows (docs/evictions.md, "Reclaims allocate would undo") have
examples of their own: each reaches its fixed point within a few cycles.
"""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s.parse import parse_objects
from tests.property.test_eviction_invariants import (
    BIND_RECLAIM_LIVELOCK,
    HEAD_JOB_LIVELOCK,
    MOVED_THEN_RECLAIMED,
    PREEMPTOR_BECOMES_VICTIM,
    SETTINGS,
    Cluster,
    GroupSpec,
    NodeSpec,
    PodSpec,
    QueueSpec,
    eviction_clusters,
)
from tests.unit.builders import NOW

#: cycles a random cluster may take to settle (it has at most ~13 jobs; a job is placed or given up within
#: a few cycles), and quiet cycles that must follow the first one
CYCLES = 16
QUIET_AFTER = 2


@dataclass
class Run:
    """What a run of cycles did."""

    results: list[CycleResult] = field(default_factory=list)
    quiet_at: int | None = None  # the first quiet cycle (no binds, pipelines nor evictions)
    pods: dict[str, Any] = field(default_factory=dict)  # pod key -> its Pod object at the end

    def history(self) -> str:
        return "\n".join(
            f"cycle {i}: binds={[(b.pod, b.node) for b in r.binds]} pipelined={[(p.pod, p.node) for p in r.pipelined]} "
            f"evictions={[(e.pod, e.action, e.preemptor) for e in r.evictions]}"
            for i, r in enumerate(self.results))


def _quiet(result: CycleResult) -> bool:
    return not (result.binds or result.pipelined or result.evictions)


def run_cycles(cluster: Cluster, *, cycles: int = CYCLES, params: dict[str, Any] | None = None) -> Run:
    """Cycles 1 s apart on the embedded cluster, each applied before the next; stops ``QUIET_AFTER`` cycles
    after the first quiet one. Every cycle passes ``decision_errors`` against the pods running when it starts."""
    raw: dict[str, Any] = cluster.config()
    if params:
        raw["params"] = params
    cfg: SchedulerConfig = resolve_config(raw)
    store = EmbeddedCluster(prepare(parse_objects(cluster.objects()), cfg, NOW))
    run = Run()
    for i in range(cycles):
        now = NOW + timedelta(seconds=i)
        active = {key for key, p in store.pods.items() if p.node_name and p.phase not in ("Succeeded", "Failed")}
        result = run_prepared_cycle(store.parsed(), cfg, now)
        errors = result.decision_errors(active)
        assert not errors, f"cycle {i}: " + "; ".join(errors) + "\n" + run.history()
        run.results.append(result)
        if run.quiet_at is None and _quiet(result):
            run.quiet_at = i
        store.apply(result, now)
        if run.quiet_at is not None and i >= run.quiet_at + QUIET_AFTER:
            break
    run.pods = dict(store.pods)
    return run


def check_converges(cluster: Cluster, run: Run) -> None:
    assert run.quiet_at is not None, f"no fixed point within {CYCLES} cycles:\n" + run.history()
    for i, r in enumerate(run.results[run.quiet_at:], start=run.quiet_at):
        assert _quiet(r), f"cycle {i} acts after the quiet cycle {run.quiet_at}:\n" + run.history()
    pairs = Counter((e.pod, e.preemptor) for r in run.results for e in r.evictions if e.preemptor)
    twice = sorted(pair for pair, n in pairs.items() if n > 1)
    assert not twice, f"evicted twice for the same preemptor: {twice}\n" + run.history()


def gpus_of(cluster: Cluster) -> dict[str, int]:
    return {g.pod_key(p): p.gpus for g in cluster.groups for p in g.pods}


def evicted_and_gained(cluster: Cluster, result: CycleResult) -> tuple[int, int]:
    """GPUs the cycle's reclaims and preemptions take for good (moved pods keep theirs) and GPUs of the pods
    it pipelines that are not moved victims (what its preemptors are given; allocate's pipelines count too)."""
    gpus = gpus_of(cluster)
    moved = {p.pod for p in result.pipelined} & {e.pod for e in result.evictions}
    evicted = sum(gpus[e.pod] for e in result.evictions
                  if e.action in ("reclaim", "preempt") and e.pod not in moved)
    gained = sum(gpus[p.pod] for p in result.pipelined if p.pod not in moved)
    return evicted, gained


# ------------------------------------------------------------------------------------------ properties
@SETTINGS
@example(cluster=HEAD_JOB_LIVELOCK)
@example(cluster=BIND_RECLAIM_LIVELOCK)
@example(cluster=MOVED_THEN_RECLAIMED)
@example(cluster=PREEMPTOR_BECOMES_VICTIM)
@given(eviction_clusters(boundaries=False))
def test_every_run_reaches_a_fixed_point(cluster: Cluster) -> None:
    check_converges(cluster, run_cycles(cluster))


@SETTINGS
@given(eviction_clusters(boundaries=False), st.sampled_from([1.0, 1.5, 2.0, 4.0]))
def test_the_storm_guard_bounds_every_cycle(cluster: Cluster, ratio: float) -> None:
    """With ``max-evicted-gpus-ratio`` every cycle evicts at most ``ratio`` GPUs per GPU it gives its
    preemptors, and the run still reaches a fixed point."""
    run = run_cycles(cluster, params={"max-evicted-gpus-ratio": ratio})
    check_converges(cluster, run)
    for i, r in enumerate(run.results):
        evicted, gained = evicted_and_gained(cluster, r)
        assert evicted <= ratio * gained, f"cycle {i}: {evicted} GPUs evicted for {gained}\n" + run.history()


# ------------------------------------------------------------------------------------------ the loops
def test_head_job_livelock_reaches_a_fixed_point() -> None:
    """q1's head job (a gang of 3 on a 1-GPU cluster) never fits, so allocate orders q1 (priority 50) behind
    q0 (priority 100) and gives the GPU to q0; reclaiming it for q1's small job would be undone by the next
    allocate, so reclaim refuses: a runs, the cluster is quiet from the second cycle on."""
    run = run_cycles(HEAD_JOB_LIVELOCK)
    check_converges(HEAD_JOB_LIVELOCK, run)
    assert run.quiet_at is not None and run.quiet_at <= 1, run.history()
    assert [(b.pod, b.node) for b in run.results[0].binds] == [("ns/a-0", "n0")]
    assert all(not r.evictions for r in run.results), run.history()
    assert run.pods["ns/a-0"].node_name == "n0"
    assert not run.pods["ns/small-0"].node_name


def test_bind_reclaim_livelock_reaches_a_fixed_point() -> None:
    """Allocate binds g2 (q1, 3 GPUs); reclaiming it for g3 (q0, 1 GPU) would leave q1, with g2 pending
    again, ordered before q0 (whose head is g0), and allocate would bind g2 again: refused, quiet at once."""
    run = run_cycles(BIND_RECLAIM_LIVELOCK)
    check_converges(BIND_RECLAIM_LIVELOCK, run)
    assert run.quiet_at is not None and run.quiet_at <= 1, run.history()
    assert all(not r.evictions for r in run.results), run.history()
    assert run.pods["ns/g2-0"].node_name == "n0"


def test_kai_consolidation_and_reclaim_0_reaches_kais_state_two_rounds_later() -> None:
    """KAI's scenario integration_consolidation_and_reclaim#0 (KAI's harness: rounds applied one after the
    other, then a match and 5 fixed-point rounds). KAI's first round reclaims pending_job0's just-pipelined pod
    for pending_job1; kaisched takes no pod the cycle placed (docs/compatibility.md): round 2 binds what round 1
    pipelined, round 3 reclaims node1 for pending_job1, round 4 binds it. KAI's expected state is then reached
    and kept: after 4 rounds instead of 2."""
    import dataclasses

    from kaisched import ACTIONS, schedule
    from tests.conformance.harness import HarnessError, plan, run_scenario
    from tests.conformance.scenario import load_scenarios

    kai = next(s for s in load_scenarios() if s.id == "integration_consolidation_and_reclaim#0")
    outcomes: dict[int, bool] = {}
    for rounds in (2, 3, 4):
        s = dataclasses.replace(kai, rounds_until_match=rounds)
        actions, skip = plan(s, ACTIONS)
        assert skip is None
        try:
            run_scenario(s, schedule, actions)
        except HarnessError:
            outcomes[rounds] = False
        else:
            outcomes[rounds] = True
    assert outcomes == {2: False, 3: False, 4: True}


@pytest.mark.slow
def test_the_busy_cluster_evicts_each_pod_once() -> None:
    """Issue 23's busy cluster (benchmarks.busy_cluster at 1,000 nodes: 100 queues, half the GPUs running, single
    pods and gangs): reclaim for bench/job-006663 moved bench/run-001893-0, and reclaim for bench/job-005408 then
    evicted it again. Now each pod is evicted at most once, and only pods that ran (about 12 s)."""
    from benchmarks import allocate as alloc
    from benchmarks.busy_cluster import BusySize, busy_cluster

    cluster = busy_cluster(BusySize(1000))
    cfg = resolve_config(None)
    parsed = prepare(parse_objects(cluster.objects), cfg, alloc.NOW)
    running = {f"{p.meta.namespace}/{p.meta.name}" for p in parsed.pods if p.node_name}
    result = run_prepared_cycle(parsed, cfg, alloc.NOW)
    assert result.evictions
    assert result.decision_errors(running) == []
    assert [e.pod for e in result.evictions].count("bench/run-001893-0") <= 1


# Found with fresh seeds (not by the derandomized examples): preempt moves g1-1 and evicts g1-2 for g3, which is
# pipelined onto n1; the next cycle's allocate gives the freed GPUs to g6 (another queue) and to g1-1 itself (a
# pipelined placement is not kept across cycles, as in KAI), and preempt evicts g1-1 again for g3 two cycles later.
# It settles (cycle 4 is quiet), but one pod is evicted twice for the same preemptor.
PIPELINE_GIVEN_AWAY = Cluster(nodes=[NodeSpec(name='n0', gpus=2, cpu=64, memory=512),
    NodeSpec(name='n1', gpus=2, cpu=64, memory=512),
    NodeSpec(name='n2', gpus=2, cpu=64, memory=512),
    NodeSpec(name='n3', gpus=2, cpu=64, memory=512)],
    queues=[QueueSpec(name='d0',
    parent=None,
    gpu=-1,
    gpu_limit=-1,
    gpu_weight=1,
    priority=100,
    preempt_min_runtime=None,
    reclaim_min_runtime=None),
    QueueSpec(name='d1',
    parent=None,
    gpu=-1,
    gpu_limit=-1,
    gpu_weight=1,
    priority=100,
    preempt_min_runtime=None,
    reclaim_min_runtime=None),
    QueueSpec(name='q0',
    parent='d0',
    gpu=0,
    gpu_limit=-1,
    gpu_weight=0,
    priority=100,
    preempt_min_runtime=None,
    reclaim_min_runtime=None),
    QueueSpec(name='q1',
    parent='d1',
    gpu=2,
    gpu_limit=-1,
    gpu_weight=0,
    priority=100,
    preempt_min_runtime=None,
    reclaim_min_runtime=None),
    QueueSpec(name='q2',
    parent='d0',
    gpu=2,
    gpu_limit=-1,
    gpu_weight=0,
    priority=100,
    preempt_min_runtime=None,
    reclaim_min_runtime=None)],
    groups=[GroupSpec(name='g0',
    ns='ns0',
    queue='q0',
    min_member=1,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g0-0',
    gpus=1,
    cpu=1,
    memory=1,
    node='n0',
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g1',
    ns='ns1',
    queue='q0',
    min_member=3,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g1-0',
    gpus=1,
    cpu=1,
    memory=1,
    node='n0',
    deleting=False,
    absent=0),
    PodSpec(name='g1-1',
    gpus=1,
    cpu=1,
    memory=1,
    node='n1',
    deleting=False,
    absent=0),
    PodSpec(name='g1-2',
    gpus=1,
    cpu=1,
    memory=1,
    node='n1',
    deleting=False,
    absent=0),
    PodSpec(name='g1-3',
    gpus=1,
    cpu=1,
    memory=1,
    node='n2',
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g2',
    ns='ns0',
    queue='q0',
    min_member=2,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 2, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g2-0',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0),
    PodSpec(name='g2-1',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g3',
    ns='ns1',
    queue='q0',
    min_member=1,
    priority_class='build-preemptible',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 3, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g3-0',
    gpus=2,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g4',
    ns='ns0',
    queue='q1',
    min_member=2,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 4, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g4-0',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0),
    PodSpec(name='g4-1',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g5',
    ns='ns1',
    queue='q0',
    min_member=2,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 5, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g5-0',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0),
    PodSpec(name='g5-1',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None),
    GroupSpec(name='g6',
    ns='ns0',
    queue='q1',
    min_member=2,
    priority_class='train',
    preemptibility=None,
    created=datetime.datetime(2025, 1, 1, 11, 0, 6, tzinfo=datetime.UTC),
    pods=[PodSpec(name='g6-0',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0),
    PodSpec(name='g6-1',
    gpus=1,
    cpu=1,
    memory=1,
    node=None,
    deleting=False,
    absent=0)],
    last_start=None,
    stale_since=None)],
    default_preempt='0s',
    default_reclaim='0s',
    resolve_method='lca')


@pytest.mark.xfail(strict=True, reason="a preemptor's pipelined placement is not kept across cycles (as in KAI): "
                   "allocate can give the GPUs its victims freed to others, and it evicts again")
def test_a_preemptor_keeps_what_its_victims_freed() -> None:
    check_converges(PIPELINE_GIVEN_AWAY, run_cycles(PIPELINE_GIVEN_AWAY))
