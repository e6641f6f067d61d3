"""The scale work (issue 9) changes no decision: on random eviction clusters,

* the eviction solvers' shortcuts — consolidation's moves-only pruning (the packing relaxation, stopping a
  simulation once a victim is left evicted), chunk sequences shared between solvers, scenario walks replayed —
  decide exactly as the plain search;
* warm simulations (evictions kept from one simulation to the next, the filter's jump from per-entry
  increments) and the reclaim validator's by-totals check decide exactly as simulating every scenario from
  scratch and checking chunk by chunk (also on the ReclaimLargeJobs shape, where they are used hundreds of
  times);
* all of them together decide as the plain search with every shortcut off;
* a cycle answered by the cycle memo is exactly the full cycle at that time (min-runtime boundaries and
  stale-gang grace periods included).

The examples that fresh seeds found (issue 23; ``make fuzz`` searches with fresh seeds) are explicit ``@example``s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import kaisched
from kaisched.actions import solver
from kaisched.actions.evicting import ConsolidationAction, EvictingAction
from kaisched.actions.victims import ChunkSequence, VictimQueue
from kaisched.actions.warm import WarmEvictions
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.scenario import Scenario, VictimJob
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.job import PodGroupInfo
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.proportion.reclaim import ReclaimRules
from tests.property.test_eviction_invariants import (
    ACTION_CONFIGS,
    SETTINGS,
    Cluster,
    GroupSpec,
    NodeSpec,
    PodSpec,
    QueueSpec,
    _cluster,
    _q,
    eviction_clusters,
    schedule,
)
from tests.unit.builders import NOW, Obj, job, node, pod, pod_group, queue


@contextmanager
def shortcut_off(name: str) -> Iterator[None]:
    """One of the victim search's shortcuts (``solver.SHORTCUTS``) off, restored after (set, not patched: the
    compiled core's instance cannot have an attribute deleted, as ``mock.patch`` does)."""
    before = getattr(solver.SHORTCUTS, name)
    setattr(solver.SHORTCUTS, name, False)
    try:
        yield
    finally:
        setattr(solver.SHORTCUTS, name, before)


def decide_alike(cluster: Cluster, actions: str | None, plain: Callable[[], AbstractContextManager[None]]) -> None:
    """The cluster is scheduled exactly alike with the shortcuts and inside ``plain()`` (without them)."""
    fast = schedule(cluster, actions)
    with plain():
        slow = schedule(cluster, actions)
    assert fast.to_dict() == slow.to_dict()

def _own_sequence(self: EvictingAction, ssn: Session, victims: list[PodGroupInfo]) -> ChunkSequence:
    return ChunkSequence(VictimQueue(ssn, victims), self.max_victim_jobs(ssn))


@contextmanager
def plain_consolidation_search() -> Iterator[None]:
    """The solvers without what the scale work added: consolidation without its moves-only pruning (the
    validator alone rejects what stays evicted), every solver with its own victim queue and chunks (nothing
    shared between solvers) and its own walk through the scenarios (nothing replayed)."""
    with mock.patch.object(ConsolidationAction, "moves_only", False), \
            mock.patch.object(solver.MovePacking, "could_pack", lambda self, tasks, evict: True), \
            mock.patch.object(EvictingAction, "chunk_sequence", _own_sequence), \
            mock.patch.object(ChunkSequence, "walk", lambda self, key, make: make()):
        yield


@contextmanager
def simulations_from_scratch() -> Iterator[None]:
    """Every simulation evicts all of its victims from the state the solver started from (nothing kept in
    place between simulations, the filter's jump vectorised from scratch), and the reclaim validator walks
    every chunk."""
    with shortcut_off("warm_simulations"), mock.patch.object(ReclaimRules, "by_totals", False), \
            mock.patch.object(ReclaimRules, "by_queue", False):
        yield


# Issue 23, seed 127430387176860869514932970793300065659 (shrunk): g5 (1 + 2 GPUs) reclaims. At k = 2 the first
# scenario (g4-0 on n3) fails and leaves its eviction in place; the next chunk is popped after rolling it back, and
# the chunk sequence then pops ahead and returned chunk 2 (g2, 3 pods) for chunk 1 (g3, whose pod on n2 makes room):
# warm simulations evicted g2's gang where simulating from scratch evicts g3's.
WARM_POP_AHEAD = _cluster({"n0": 7, "n1": 2, "n2": 6, "n3": 5}, [_q("q0", gpu=0, weight=0), _q("q1", gpu=2)], [
    ("g0", "q0", 1, "train", [(2, "n0")]),
    ("g1", "q0", 1, "train", [(1, "n0")]),
    ("g2", "q0", 3, "train", [(2, "n0"), (2, "n0"), (2, "n1")]),
    ("g3", "q0", 2, "train", [(4, "n2"), (4, "n3")]),
    ("g4", "q0", 1, "train", [(1, "n3")]),
    ("g5", "q1", 2, "train", [(1, None), (2, None)]),
])


@SETTINGS
@example(cluster=WARM_POP_AHEAD, actions=None)
@given(eviction_clusters(), ACTION_CONFIGS)
def test_warm_simulations_decide_as_simulating_from_scratch(cluster: Cluster, actions: str | None) -> None:
    decide_alike(cluster, actions, simulations_from_scratch)


@st.composite
def wide_reclaims(draw: st.DrawFn) -> list[Obj]:
    """6-14 nodes full of an over-quota queue's work (single pods, gangs spread over two nodes, elastic jobs,
    2-GPU pods, some GPUs left free) and pending jobs of several multi-GPU pods in an under-quota queue: many
    k per solver, recorded victims, broken gangs, scenarios that fail and jumps over hopeless chunks."""
    size = draw(st.sampled_from([4, 8]))
    n_nodes = draw(st.integers(6, 14))
    over = draw(st.sampled_from([0, 0, size, 3 * size]))  # a quota: some scenarios take too much of it
    objs: list[Obj] = [queue("over", gpu=over, gpu_weight=0), queue("under", gpu=size * n_nodes, gpu_weight=1)]
    free = []
    for i in range(n_nodes):
        objs.append(node(f"n{i:02d}", size))
        free.append(size - draw(st.integers(0, 1)) if draw(st.integers(0, 3)) == 0 else size)
    j = 0

    def created() -> str:
        return f"2025-01-01T{draw(st.integers(0, 11)):02d}:{draw(st.integers(0, 59)):02d}:00Z"

    for i in range(n_nodes):
        while free[i] > 0:
            kind = draw(st.sampled_from(["single", "single", "gang", "elastic", "double"]))
            name = f"v{j}"
            j += 1
            if kind == "gang" and i + 1 < n_nodes and free[i + 1] > 0:
                objs += [pod_group(name, queue="over", min_member=2, created=created()),
                         pod(f"{name}-0", group=name, gpus=1, node=f"n{i:02d}"),
                         pod(f"{name}-1", group=name, gpus=1, node=f"n{i + 1:02d}")]
                free[i] -= 1
                free[i + 1] -= 1
            elif kind == "elastic" and free[i] >= 3:
                objs.append(pod_group(name, queue="over", min_member=1, created=created()))
                objs += [pod(f"{name}-{k}", group=name, gpus=1, node=f"n{i:02d}") for k in range(3)]
                free[i] -= 3
            elif kind == "double" and free[i] >= 2:
                objs += [pod_group(name, queue="over", created=created()),
                         pod(f"{name}-0", group=name, gpus=2, node=f"n{i:02d}")]
                free[i] -= 2
            else:
                objs += [pod_group(name, queue="over", created=created()),
                         pod(f"{name}-0", group=name, gpus=1, node=f"n{i:02d}")]
                free[i] -= 1
    for p in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= size]))
        objs += job(f"p{p}", draw(st.integers(2, 6)), queue="under", gpus=gpus, created=created(),
                    min_member=draw(st.sampled_from([None, 1])))
    return objs


def _wide_pop_ahead() -> list[Obj]:
    """Issue 23, seed 1643765125508955420329391600961267373 (shrunk): two gangs of two 4-GPU pods reclaim from 7
    nodes of 1-GPU pods (and one 2-GPU pod). Chunks popped after rolling warm evictions back came out of order
    (the pop-ahead of :data:`WARM_POP_AHEAD`): warm simulations evicted 9 pods where simulating from scratch
    evicts 18."""
    objs = [queue("over", gpu=12, gpu_weight=0), queue("under", gpu=28, gpu_weight=1)]
    objs += [node(f"n{i:02d}", 4) for i in range(7)]
    victims = [("v0", 1, [(1, 0)]), ("v1", 2, [(1, 0), (1, 1)]), ("v2", 2, [(1, 0), (1, 1)]), ("v3", 1, [(1, 0)]),
               ("v4", 1, [(1, 1)]), ("v5", 2, [(1, 1), (1, 2)]), ("v6", 1, [(1, 2)]), ("v7", 1, [(1, 2)]),
               ("v8", 1, [(1, 2)]), ("v9", 2, [(1, 3), (1, 4)]), ("v10", 1, [(1, 3)]), ("v11", 1, [(1, 3)]),
               ("v12", 1, [(1, 3)]), ("v16", 1, [(1, 6)]), ("v17", 1, [(1, 6)]), ("v18", 1, [(2, 6)])]
    for name, min_member, pods in victims:
        objs.append(pod_group(name, queue="over", min_member=min_member, created="2025-01-01T00:00:00Z"))
        objs += [pod(f"{name}-{k}", group=name, gpus=gpus, node=f"n{n:02d}") for k, (gpus, n) in enumerate(pods)]
    for p in ("p0", "p1"):
        objs += job(p, 2, queue="under", gpus=4, created="2025-01-01T00:00:00Z")
    return objs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(objs=_wide_pop_ahead(), actions="reclaim")
@given(wide_reclaims(), st.sampled_from(["reclaim", None]))
def test_warm_simulations_decide_as_simulating_from_scratch_on_wide_reclaims(objs: list[Obj], actions: str | None
                                                                             ) -> None:
    config = {"actions": actions} if actions else None
    warm = kaisched.schedule(objs, config=config, now=NOW)
    with simulations_from_scratch():
        cold = kaisched.schedule(objs, config=config, now=NOW)
    assert warm.to_dict() == cold.to_dict()


@SETTINGS
@given(eviction_clusters(), ACTION_CONFIGS)
def test_validating_before_placing_decides_as_simulating(cluster: Cluster, actions: str | None) -> None:
    """Scenarios refused on their evictions alone where no victim can be placed again (settled_victims)."""
    decide_alike(cluster, actions, lambda: shortcut_off("validate_first"))


@SETTINGS
@given(eviction_clusters(), ACTION_CONFIGS)
def test_the_loop_guard_selects_a_queues_victims_as_its_filter_does(cluster: Cluster, actions: str | None) -> None:
    decide_alike(cluster, actions, lambda: mock.patch.object(ReclaimRules, "by_queue", False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_reclaims(), st.sampled_from(["reclaim", None]))
def test_validating_before_placing_decides_as_simulating_on_wide_reclaims(objs: list[Obj], actions: str | None
                                                                          ) -> None:
    config = {"actions": actions} if actions else None
    fast = kaisched.schedule(objs, config=config, now=NOW)
    with shortcut_off("validate_first"):
        slow = kaisched.schedule(objs, config=config, now=NOW)
    assert fast.to_dict() == slow.to_dict()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_reclaims())
def test_a_victim_job_shared_between_scenarios_is_validated_unchanged(objs: list[Obj]) -> None:
    """What lets a validator reuse its sums (``Scenario.shared_prefix``): a VictimJob object validated again
    holds the same tasks in the same statuses (a job placed again or grown gets a new object)."""
    seen: dict[int, tuple[VictimJob, tuple[tuple[int, TaskStatus], ...]]] = {}
    validate = ReclaimRules.validate

    def checking(self: ReclaimRules, scenario: Scenario) -> bool:
        for victim in scenario.victims.values():
            now = tuple((id(t), t.status) for t in victim.tasks)
            known = seen.setdefault(id(victim), (victim, now))
            assert known[0] is not victim or known[1] == now, f"{victim.job.key} changed since validated"
        return validate(self, scenario)

    with mock.patch.object(ReclaimRules, "validate", checking):
        kaisched.schedule(objs, config={"actions": "reclaim"}, now=NOW)


@pytest.mark.interpreted
@pytest.mark.parametrize("nodes", [20, 60])
def test_warm_simulations_decide_as_simulating_from_scratch_on_reclaim_large_jobs(nodes: int) -> None:
    """The benchmark's shape: one job of nodes/10 8-GPU pods reclaims 8 x nodes/10 1-GPU jobs, k by k; the
    warm path must be the one taken there (and simulate from kept evictions)."""
    from benchmarks import allocate as alloc
    from benchmarks.actions import reclaim_large_jobs_cluster

    cluster = reclaim_large_jobs_cluster(nodes)
    kept: list[int] = []
    evict = WarmEvictions.evict

    def counted(self: WarmEvictions, tasks: list[TaskInfo], action: str, preemptor: str
                ) -> tuple[int, set[str]]:
        result = evict(self, tasks, action, preemptor)
        kept.append(result[0])
        return result

    with mock.patch.object(WarmEvictions, "evict", counted):
        warm = kaisched.schedule(cluster.objects, cluster.config, alloc.NOW)
    # one simulation per k, each keeping the k - 1 nodes' evictions of the last one
    assert kept == [8 * k for k in range(nodes // 10)]
    with simulations_from_scratch():
        cold = kaisched.schedule(cluster.objects, cluster.config, alloc.NOW)
    assert len(warm.evictions) == 8 * (nodes // 10)
    assert warm.to_dict() == cold.to_dict()


def _shared_walks_pop_ahead() -> Cluster:
    """Issue 23, a fresh seed of the moves-only test (shrunk): reclaim for g8 and g10 (queue q3, 4-GPU pods)
    with warm simulations on both sides (the plain search turns moves-only pruning off, not warm simulations).
    Chunks popped after rolling warm evictions back came out of order (:data:`WARM_POP_AHEAD`), and a chunk
    sequence shared between solvers pops at other times than one per solver: the two searches evicted
    differently."""
    start = NOW - timedelta(hours=1)

    def group(j: int, queue_name: str, min_member: int, pods: list[tuple[int, int, str | None]],
              priority_class: str = "train") -> GroupSpec:
        specs = [PodSpec(f"g{j}-{k}", gpus, node=where) for k, gpus, where in pods]
        return GroupSpec(f"g{j}", f"ns{j % 2}", queue_name, min_member, priority_class, None,
                         start + timedelta(seconds=j), specs)

    return Cluster(
        [NodeSpec("n0", 6), NodeSpec("n1", 2), NodeSpec("n2", 2), NodeSpec("n3", 3)],
        [QueueSpec("q0", None, 2, -1, 1, 100), QueueSpec("q1", None, -1, -1, 1, 100),
         QueueSpec("q3", None, -1, -1, 1, 200)],
        [group(0, "q0", 3, [(0, 3, "n0"), (1, 1, "n0"), (2, 1, "n2")]),
         group(1, "q0", 1, [(0, 1, "n3")], "inference"),
         group(2, "q1", 2, [(1, 4, None), (2, 2, "n0"), (3, 2, "n3")]),
         group(3, "q0", 1, [(0, 1, "n2")]),
         group(6, "q3", 1, [(0, 2, None)]),
         group(8, "q3", 2, [(0, 4, None), (1, 4, None)]),
         group(10, "q3", 2, [(0, 1, None), (1, 4, None)])])


@SETTINGS
@example(cluster=_shared_walks_pop_ahead(), actions="allocate, reclaim")
@given(eviction_clusters(), ACTION_CONFIGS)
def test_moves_only_pruning_decides_as_the_plain_search(cluster: Cluster, actions: str | None) -> None:
    decide_alike(cluster, actions, plain_consolidation_search)


@contextmanager
def the_plain_search() -> Iterator[None]:
    """Every shortcut off at once (the reference): every scenario the filters let through simulated from scratch
    by its own solver, the reclaim validator walking every chunk, consolidation without its pruning."""
    with plain_consolidation_search(), simulations_from_scratch(), shortcut_off("prove_failures"), \
            shortcut_off("validate_first"):
        yield


@SETTINGS
@example(cluster=WARM_POP_AHEAD, actions=None)
@given(eviction_clusters(), ACTION_CONFIGS)
def test_the_fast_search_decides_as_the_plain_search(cluster: Cluster, actions: str | None) -> None:
    """All the shortcuts together (each test above turns one kind off) decide as none of them."""
    decide_alike(cluster, actions, the_plain_search)


@SETTINGS
@given(eviction_clusters(), ACTION_CONFIGS)
def test_a_memo_answer_is_the_full_cycle(cluster: Cluster, actions: str | None) -> None:
    cfg = resolve_config(cluster.config(actions))
    objs = prepare(parse_objects(cluster.objects()), cfg, NOW)
    memo = CycleMemo()
    run_prepared_cycle(objs, cfg, NOW, memo)
    # 30 s: inside every protection and grace period the generator draws; 61 s and 2 h: past some of them
    for later in (timedelta(seconds=30), timedelta(seconds=61), timedelta(hours=2)):
        answered = run_prepared_cycle(objs.relisted(), cfg, NOW + later, memo)
        assert answered.to_dict() == run_prepared_cycle(objs.relisted(), cfg, NOW + later).to_dict()


def busy_cluster_decides_alike(nodes: int, *plain: Callable[[], AbstractContextManager[None]]) -> None:
    """The scale benchmark's cluster, two cycles deep (the first cycle's binds and evictions applied), is
    scheduled exactly alike with the shortcuts and inside each of ``plain``."""
    from benchmarks.scale import ScaleSize, apply_result, scale_cluster

    cfg = resolve_config(None)
    objs = prepare(parse_objects(scale_cluster(ScaleSize(nodes, 3, 3, nodes * 10)).objects), cfg, NOW)
    first = run_prepared_cycle(objs, cfg, NOW)
    again = apply_result(objs, first, NOW)
    second = run_prepared_cycle(again, cfg, NOW + timedelta(seconds=1))
    assert first.binds and first.pod_groups
    for context in plain:
        with context():
            assert run_prepared_cycle(objs, cfg, NOW).to_dict() == first.to_dict()
            assert run_prepared_cycle(again, cfg, NOW + timedelta(seconds=1)).to_dict() == second.to_dict()


@pytest.mark.parametrize("nodes", [30, 60])
def test_moves_only_pruning_decides_as_the_plain_search_on_a_busy_cluster(nodes: int) -> None:
    """Consolidation runs hundreds of simulations there."""
    busy_cluster_decides_alike(nodes, plain_consolidation_search, simulations_from_scratch)
