"""Convergence of the eviction actions (issue 23): random clusters run for many cycles with the embedded
cluster's transitions (a bind runs at once, an eviction deletes the pod and its controller recreates it
Pending at once, nothing new arrives) reach a fixed point, no pod is evicted twice for the same preemptor
over the run, and every cycle's account of its decisions holds (``CycleResult.decision_errors``). Every cycle also
runs on the incremental path (a snapshot model kept from cycle to cycle and updated with what changed, issue 28) and
must decide exactly as the rebuilt one. With the
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

from kaisched.cluster.incremental import IncrementalState
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


class IncrementalTally:
    """Cycles run on the incremental path by this module's runs, and how many an update of the kept model answered."""

    cycles = 0
    updates = 0


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


def run_cycles(cluster: Cluster, *, cycles: int = CYCLES, params: dict[str, Any] | None = None,
               claims: bool = True) -> Run:
    """Cycles 1 s apart on the embedded cluster, each applied before the next; stops ``QUIET_AFTER`` cycles
    after the first quiet one. Every cycle passes ``decision_errors`` against the pods running when it starts.
    ``claims=False``: without the nomination claims (nominatednode's ``claims: "false"``, KAI's behaviour)."""
    raw: dict[str, Any] = cluster.config()
    if params:
        raw["params"] = params
    if not claims:
        for tier in raw["tiers"]:
            for plugin in tier["plugins"]:
                if plugin["name"] == "nominatednode":
                    plugin["arguments"] = {"claims": "false"}
    cfg: SchedulerConfig = resolve_config(raw)
    store = EmbeddedCluster(prepare(parse_objects(cluster.objects()), cfg, NOW))
    run = Run()
    state = IncrementalState()  # the incremental path beside the rebuilds (issue 28): every cycle decides alike
    for i in range(cycles):
        now = NOW + timedelta(seconds=i)
        active = {key for key, p in store.pods.items() if p.node_name and p.phase not in ("Succeeded", "Failed")}
        parsed = store.parsed()
        result = run_prepared_cycle(parsed, cfg, now)
        updates = state.updates
        incremental = run_prepared_cycle(parsed, cfg, now, state=state)
        IncrementalTally.cycles += 1
        IncrementalTally.updates += state.updates - updates
        assert incremental.to_dict() == result.to_dict(), (
            f"cycle {i}: the incremental path decided otherwise\n{incremental.to_dict()}\n{result.to_dict()}")
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
# pipelined onto n1; without nomination claims (KAI keeps no pipelined placement across cycles) the next cycle's
# allocate gives the freed GPUs to g6 (another queue) and to g1-1 itself, and preempt evicts g1-1 again for g3 a
# cycle later: it settles (cycle 4 is quiet), but one pod is evicted twice for the same preemptor. With the claims
# (kaisched.plugins.nominated_pods) g3-0 and g1-1 are bound where they were pipelined.
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


def test_a_preemptor_keeps_what_its_victims_freed() -> None:
    """g3 (q0) preempts g1-2 and moves g1-1 (cycle 0): both are pipelined and nominated (g3-0 to n1, g1-1 to n3). In
    cycle 1 their claims hide those GPUs from g6 (queue q1) and from each other (g1-1 is of a lower priority than g3,
    and tries its own node first), so both are bound where they were pipelined, and the cluster is quiet from cycle 2
    on: nobody is evicted twice."""
    run = run_cycles(PIPELINE_GIVEN_AWAY)
    check_converges(PIPELINE_GIVEN_AWAY, run)
    assert [(n.pod, n.node) for n in run.results[0].nominations] == [("ns1/g3-0", "n1"), ("ns1/g1-1", "n3")]
    assert sorted((b.pod, b.node) for b in run.results[1].binds) == [("ns1/g1-1", "n3"), ("ns1/g3-0", "n1")]
    assert run.quiet_at == 2, run.history()
    assert all(not p.nominated_node_name for p in run.pods.values())
    # without the claims (nominatednode's ``claims: "false"``) and the victim memory (KAI's behaviour), g1-1 is
    # evicted twice for g3
    kai = run_cycles(PIPELINE_GIVEN_AWAY, claims=False, params={"victim-memory": "0s"})
    pairs = Counter((e.pod, e.preemptor) for r in kai.results for e in r.evictions)
    assert pairs[("ns1/g1-1", "ns1/g3")] == 2, kai.history()


# Found with fresh seeds once the claims were in (every pod evicted twice for one preemptor in some 15,000 fresh
# clusters, about one cluster in 2,000, is of this shape; this one shrunk): g3 is elastic (minMember 1, two pods of
# 2 GPUs). KAI grows it one pod per cycle: cycle 0, consolidation moves g1-3 (n1 -> n2) to pipeline g3-0 onto n1;
# cycle 2, preempt takes all of g1 (a gang of two, lower priority) for g3-1, g1-3 included: moved, then evicted for
# good, for the same preemptor. kaisched sees that the move is of a pod g3 may preempt, and places g3's whole growth
# at once instead (docs/evictions.md, "Elastic jobs grow at once"): preempt takes g1 once, for both of g3's pods.
ELASTIC_GROWTH_TAKES_ITS_MOVED_VICTIM = Cluster(
    nodes=[NodeSpec(name="n1", gpus=2, cpu=64, memory=512), NodeSpec(name="n2", gpus=2, cpu=64, memory=512)],
    queues=[QueueSpec(name="q2", parent=None, gpu=0, gpu_limit=-1, gpu_weight=1, priority=100,
                      preempt_min_runtime=None, reclaim_min_runtime=None)],
    groups=[GroupSpec(name="g1", ns="ns1", queue="q2", min_member=2, priority_class="train", preemptibility=None,
                      created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC),
                      pods=[PodSpec(name="g1-2", gpus=1, cpu=1, memory=1, node="n2", deleting=False, absent=0),
                            PodSpec(name="g1-3", gpus=1, cpu=1, memory=1, node="n1", deleting=False, absent=0)]),
            GroupSpec(name="g3", ns="ns1", queue="q2", min_member=1, priority_class="build",
                      preemptibility="preemptible",
                      created=datetime.datetime(2025, 1, 1, 11, 0, 3, tzinfo=datetime.UTC),
                      pods=[PodSpec(name="g3-0", gpus=2, cpu=1, memory=1, node=None, deleting=False, absent=0),
                            PodSpec(name="g3-1", gpus=2, cpu=1, memory=1, node=None, deleting=False, absent=0)])])


def test_an_elastic_preemptor_grows_at_once_rather_than_take_a_pod_it_moved() -> None:
    run = run_cycles(ELASTIC_GROWTH_TAKES_ITS_MOVED_VICTIM)
    check_converges(ELASTIC_GROWTH_TAKES_ITS_MOVED_VICTIM, run)
    assert run.quiet_at == 2, run.history()
    assert sorted((e.pod, e.action) for e in run.results[0].evictions) == [("ns1/g1-2", "preempt"),
                                                                            ("ns1/g1-3", "preempt")]
    assert sorted((p.pod, p.node) for p in run.results[0].pipelined) == [("ns1/g3-0", "n1"), ("ns1/g3-1", "n2")]
    assert {k for k, p in run.pods.items() if p.node_name} == {"ns1/g3-0", "ns1/g3-1"}


def test_without_preempt_consolidation_grows_an_elastic_job_one_pod_per_cycle_as_kai() -> None:
    """Nothing could take the moved pod later: the move stands (KAI's decision), and g3 grows no further."""
    cluster = ELASTIC_GROWTH_TAKES_ITS_MOVED_VICTIM
    cfg = resolve_config(cluster.config(actions="allocate, consolidation, reclaim"))
    store = EmbeddedCluster(prepare(parse_objects(cluster.objects()), cfg, NOW))
    result = run_prepared_cycle(store.parsed(), cfg, NOW)
    assert [(e.pod, e.action) for e in result.evictions] == [("ns1/g1-3", "consolidation")]
    assert sorted((p.pod, p.node) for p in result.pipelined) == [("ns1/g1-3", "n2"), ("ns1/g3-0", "n1")]


# Found with fresh seeds after elastic jobs grew at once (make fuzz, seed 4200112381366468617): g3 is elastic and
# reclaims for one more pod per cycle. Cycle 0: reclaim evicts g0 and g2-1 for g3-2 (g3's whole growth does not pass
# the reclaim rules at once); cycle 1: allocate binds g2-1 again elsewhere (its controller recreated it); cycle 2:
# reclaim evicts g2-1 again, for g3-3. No move is involved, so "grow at once" is not tried (trying it whenever an
# elastic job's next pod evicts anything changes KAI's single-cycle decision in unit_preempt_elastic#6 and still
# leaves the case where the whole growth cannot be reclaimed at once). Fixing it needs memory across cycles of which
# pods were evicted for which job, or a reclaim search that answers for the job's later pods too.
ELASTIC_RECLAIM_TAKES_A_REBOUND_VICTIM = Cluster(nodes=[NodeSpec(name='n0', gpus=2, cpu=64, memory=512),
      NodeSpec(name='n1', gpus=5, cpu=64, memory=512),
      NodeSpec(name='n2', gpus=6, cpu=64, memory=512),
      NodeSpec(name='n3', gpus=7, cpu=64, memory=512),
      NodeSpec(name='n4', gpus=5, cpu=64, memory=512)],
     queues=[QueueSpec(name='q0',
       parent=None,
       gpu=0,
       gpu_limit=-1,
       gpu_weight=0,
       priority=100,
       preempt_min_runtime=None,
       reclaim_min_runtime=None),
      QueueSpec(name='q1',
       parent=None,
       gpu=2,
       gpu_limit=-1,
       gpu_weight=1,
       priority=100,
       preempt_min_runtime=None,
       reclaim_min_runtime=None),
      QueueSpec(name='q2',
       parent=None,
       gpu=0,
       gpu_limit=-1,
       gpu_weight=0,
       priority=100,
       preempt_min_runtime=None,
       reclaim_min_runtime=None)],
     groups=[GroupSpec(name='g0',
       ns='ns0',
       queue='q0',
       min_member=2,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g0-0',
         gpus=2,
         cpu=1,
         memory=1,
         node='n0',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g0-1',
         gpus=2,
         cpu=1,
         memory=1,
         node='n2',
         deleting=False,
         absent=0,
         nominated='')],
       last_start=datetime.datetime(2025, 1, 1, 11, 30, tzinfo=datetime.UTC),
       stale_since=None),
      GroupSpec(name='g1',
       ns='ns1',
       queue='q0',
       min_member=4,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g1-0',
         gpus=2,
         cpu=1,
         memory=1,
         node='n3',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g1-1',
         gpus=2,
         cpu=1,
         memory=1,
         node='n1',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g1-2',
         gpus=2,
         cpu=1,
         memory=1,
         node='n1',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g1-3',
         gpus=2,
         cpu=1,
         memory=1,
         node='n2',
         deleting=False,
         absent=0,
         nominated='')],
       last_start=datetime.datetime(2025, 1, 1, 11, 59, 55, tzinfo=datetime.UTC),
       stale_since=None),
      GroupSpec(name='g2',
       ns='ns0',
       queue='q2',
       min_member=2,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 2, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g2-0',
         gpus=2,
         cpu=1,
         memory=1,
         node='n4',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g2-1',
         gpus=2,
         cpu=1,
         memory=1,
         node='n2',
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g2-2',
         gpus=2,
         cpu=1,
         memory=1,
         node='n4',
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None),
      GroupSpec(name='g3',
       ns='ns1',
       queue='q1',
       min_member=1,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 3, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g3-0',
         gpus=1,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g3-1',
         gpus=1,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g3-2',
         gpus=4,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated=''),
        PodSpec(name='g3-3',
         gpus=4,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None),
      GroupSpec(name='g4',
       ns='ns0',
       queue='q1',
       min_member=1,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 4, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g4-0',
         gpus=3,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None),
      GroupSpec(name='g5',
       ns='ns1',
       queue='q0',
       min_member=1,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 5, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g5-0',
         gpus=1,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None),
      GroupSpec(name='g6',
       ns='ns0',
       queue='q0',
       min_member=1,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 6, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g6-0',
         gpus=1,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None),
      GroupSpec(name='g7',
       ns='ns1',
       queue='q1',
       min_member=1,
       priority_class='train',
       preemptibility=None,
       created=datetime.datetime(2025, 1, 1, 11, 0, 7, tzinfo=datetime.UTC),
       pods=[PodSpec(name='g7-0',
         gpus=1,
         cpu=1,
         memory=1,
         node=None,
         deleting=False,
         absent=0,
         nominated='')],
       last_start=None,
       stale_since=None)],
     default_preempt='0s',
     default_reclaim='1m',
     resolve_method='lca',
     claims=True)


def test_an_elastic_reclaimer_never_evicts_a_rebound_victim_twice() -> None:
    """g3 (elastic, q1) grows one pod per cycle. Cycle 0: reclaim evicts g0 (a gang: both pods, one on n0) and g2-1
    for g3-2; cycle 1 allocate binds g2-1 again on the room g0-0 left on n0. Cycle 2: g3-3's reclaim would evict the
    whole g2 (below its minimum without g2-0 and g2-2), g2-1 again: the victim memory on g3's PodGroup
    (``kaisched.io/victims``) keeps g2 out of g3's victims, and the run is quiet from cycle 2."""
    run = run_cycles(ELASTIC_RECLAIM_TAKES_A_REBOUND_VICTIM)
    check_converges(ELASTIC_RECLAIM_TAKES_A_REBOUND_VICTIM, run)
    assert [(e.pod, e.preemptor) for e in run.results[0].evictions if e.pod == "ns0/g2-1"] == [("ns0/g2-1", "ns1/g3")]
    assert run.quiet_at == 2


def test_without_the_victim_memory_an_elastic_reclaimer_evicts_a_rebound_victim_again_as_kai() -> None:
    run = run_cycles(ELASTIC_RECLAIM_TAKES_A_REBOUND_VICTIM, params={"victim-memory": "0s"})
    twice = Counter((e.pod, e.preemptor) for r in run.results for e in r.evictions)
    assert twice[("ns0/g2-1", "ns1/g3")] == 2, run.history()


# Found with fresh seeds (shrunk): without the claims KAI's order of actions livelocks. Reclaim takes g2 (q0, under d0)
# for g6 (q1, under d1), and the next cycle's allocate, ordering d0 first, binds g2 again on the freed GPUs; reclaim
# then takes g1 (q2, under d0) for g6, allocate gives those back to g1, and so on for ever (the loop guard,
# docs/evictions.md "Reclaims allocate would undo", lets both reclaims through). With the claims g6's room is kept:
# g2's and g1's pods are of other queues, and g6 is bound in cycle 1.
RECLAIM_HANDED_BACK = Cluster(
    nodes=[NodeSpec(name="n0", gpus=4, cpu=64, memory=512), NodeSpec(name="n1", gpus=1, cpu=64, memory=512)],
    queues=[
        QueueSpec(name="d0", parent=None, gpu=3, gpu_limit=-1, gpu_weight=2, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="d1", parent=None, gpu=12, gpu_limit=-1, gpu_weight=2, priority=50,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q0", parent="d0", gpu=1, gpu_limit=-1, gpu_weight=0, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q1", parent="d1", gpu=4, gpu_limit=-1, gpu_weight=2, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q2", parent="d0", gpu=0, gpu_limit=-1, gpu_weight=1, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
    ],
    groups=[
        GroupSpec(name="g0", ns="ns0", queue="q1", min_member=4, priority_class="build-preemptible",
                  preemptibility="non-preemptible",
                  created=datetime.datetime(2025, 1, 1, 11, 0, 0, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g0-0", gpus=1, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                      PodSpec(name="g0-1", gpus=1, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                      PodSpec(name="g0-2", gpus=1, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                      PodSpec(name="g0-3", gpus=2, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g1", ns="ns1", queue="q2", min_member=1, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g1-1", gpus=2, cpu=1, memory=1, node="n0", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g2", ns="ns0", queue="q0", min_member=2, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 2, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g2-1", gpus=1, cpu=1, memory=1, node="n0", deleting=False, absent=0),
                      PodSpec(name="g2-2", gpus=1, cpu=1, memory=1, node="n0", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g4", ns="ns0", queue="q1", min_member=2, priority_class="train",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 4, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g4-1", gpus=4, cpu=1, memory=1, node=None, deleting=False, absent=0),
                      PodSpec(name="g4-2", gpus=4, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
        GroupSpec(name="g6", ns="ns0", queue="q1", min_member=1, priority_class="train",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 6, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g6-0", gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
        GroupSpec(name="g8", ns="ns0", queue="q1", min_member=1, priority_class="build-preemptible",
                  preemptibility="non-preemptible",
                  created=datetime.datetime(2025, 1, 1, 11, 0, 8, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g8-0", gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
    ],
    default_preempt="0s", default_reclaim="0s", resolve_method="lca")


# Found with fresh seeds (shrunk) while a higher-priority pod of a nominee's queue could always take its claim: reclaim
# pipelines g7-0 (q1) onto n0, moving g2-0 and g3-0; in the next cycle g9 (q1, build, a priority above g7's) took n0,
# and g7 reclaimed g2-0 and g3-0 a second time. g9 could not have preempted g7 once bound (the default preempt
# min-runtime, 1h, protects a job that just started), so it may not take its claim either: all four are bound where
# they were pipelined (g9 later reclaims g3, whose pods no cycle took for g9 before).
OUTRANKED_WHILE_PROTECTED = Cluster(
    nodes=[NodeSpec(name="n0", gpus=2, cpu=64, memory=512),
           NodeSpec(name="n1", gpus=5, cpu=64, memory=512),
           NodeSpec(name="n2", gpus=8, cpu=64, memory=512),
           NodeSpec(name="n3", gpus=2, cpu=64, memory=512)],
    queues=[
        QueueSpec(name="d0", parent=None, gpu=8, gpu_limit=-1, gpu_weight=2, priority=200,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="d1", parent=None, gpu=8, gpu_limit=-1, gpu_weight=1, priority=50,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q0", parent="d0", gpu=0, gpu_limit=-1, gpu_weight=2, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q1", parent="d1", gpu=8, gpu_limit=-1, gpu_weight=1, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
        QueueSpec(name="q3", parent="d1", gpu=0, gpu_limit=-1, gpu_weight=2, priority=100,
                  preempt_min_runtime=None, reclaim_min_runtime=None),
    ],
    groups=[
        GroupSpec(name="g0", ns="ns0", queue="q3", min_member=1, priority_class="train",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 0, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g0-0", gpus=4, cpu=1, memory=1, node="n2", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g1", ns="ns1", queue="q0", min_member=4, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g1-0", gpus=1, cpu=1, memory=1, node="n3", deleting=False, absent=0),
                      PodSpec(name="g1-1", gpus=1, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                      PodSpec(name="g1-2", gpus=3, cpu=1, memory=1, node="n1", deleting=False, absent=0),
                      PodSpec(name="g1-3", gpus=3, cpu=1, memory=1, node="n2", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g2", ns="ns0", queue="q3", min_member=2, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 2, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g2-0", gpus=1, cpu=1, memory=1, node="n0", deleting=False, absent=0),
                      PodSpec(name="g2-1", gpus=1, cpu=1, memory=1, node="n2", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g3", ns="ns1", queue="q3", min_member=2, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 3, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g3-0", gpus=1, cpu=1, memory=1, node="n0", deleting=False, absent=0),
                      PodSpec(name="g3-1", gpus=1, cpu=1, memory=1, node="n3", deleting=False, absent=0),
                  ]),
        GroupSpec(name="g6", ns="ns0", queue="q1", min_member=1, priority_class="inference",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 6, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g6-0", gpus=3, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
        GroupSpec(name="g7", ns="ns1", queue="q1", min_member=1, priority_class="build-preemptible",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 7, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g7-0", gpus=2, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
        GroupSpec(name="g9", ns="ns1", queue="q1", min_member=2, priority_class="build",
                  preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 9, tzinfo=datetime.UTC),
                  pods=[
                      PodSpec(name="g9-0", gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0),
                      PodSpec(name="g9-1", gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0),
                  ]),
    ],
    default_preempt="1h", default_reclaim="0s", resolve_method="lca")


FOUND = {"PIPELINE_GIVEN_AWAY": PIPELINE_GIVEN_AWAY, "RECLAIM_HANDED_BACK": RECLAIM_HANDED_BACK,
         "OUTRANKED_WHILE_PROTECTED": OUTRANKED_WHILE_PROTECTED}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_the_clusters_found_reach_a_fixed_point_evicting_each_pod_once_per_preemptor(name: str) -> None:
    check_converges(FOUND[name], run_cycles(FOUND[name]))


def test_without_claims_reclaim_and_allocate_hand_the_gpus_back_and_forth() -> None:
    kai = run_cycles(RECLAIM_HANDED_BACK, claims=False, params={"victim-memory": "0s"})
    assert kai.quiet_at is None, kai.history()
    run = run_cycles(RECLAIM_HANDED_BACK)
    assert [(b.pod, b.node) for b in run.results[1].binds] == [("ns0/g6-0", "n0")], run.history()
    assert run.quiet_at == 2, run.history()


def test_a_nominee_protected_once_bound_keeps_its_claim_from_a_higher_priority_pod_of_its_queue() -> None:
    run = run_cycles(OUTRANKED_WHILE_PROTECTED)
    assert sorted((p.pod, p.node) for p in run.results[0].pipelined) == sorted(
        (b.pod, b.node) for b in run.results[1].binds), run.history()
    assert ("ns1/g7-0", "n0") in [(b.pod, b.node) for b in run.results[1].binds]


def test_the_incremental_path_was_updates_not_rebuilds() -> None:
    """Not vacuous: the cycles this module ran on the incremental path were, mostly, updates of the kept model (a
    full build answers only where an update may not: kaisched.model.kept's docstring)."""
    if IncrementalTally.cycles < 100:
        pytest.skip("judged over the whole module (run it, not a selection)")
    tally = IncrementalTally
    assert tally.updates >= 0.5 * tally.cycles, (tally.updates, tally.cycles)
