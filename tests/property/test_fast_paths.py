"""The scale work (issue 9) changes no decision: on random eviction clusters,

* the eviction solvers' shortcuts — consolidation's moves-only pruning (the packing relaxation, stopping a
  simulation once a victim is left evicted), chunk sequences shared between solvers, scenario walks replayed —
  decide exactly as the plain search;
* a cycle answered by the cycle memo is exactly the full cycle at that time (min-runtime boundaries and
  stale-gang grace periods included).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from hypothesis import given

from kaisched.actions import solver
from kaisched.actions.evicting import ConsolidationAction, EvictingAction
from kaisched.actions.victims import ChunkSequence, VictimQueue
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.job import PodGroupInfo
from tests.property.test_eviction_invariants import ACTION_CONFIGS, NOW, SETTINGS, Cluster, eviction_clusters, schedule


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


@SETTINGS
@given(eviction_clusters(), ACTION_CONFIGS)
def test_moves_only_pruning_decides_as_the_plain_search(cluster: Cluster, actions: str | None) -> None:
    pruned = schedule(cluster, actions)
    with plain_consolidation_search():
        plain = schedule(cluster, actions)
    assert pruned.to_dict() == plain.to_dict()


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


@pytest.mark.parametrize("nodes", [30, 60])
def test_moves_only_pruning_decides_as_the_plain_search_on_a_busy_cluster(nodes: int) -> None:
    """The scale benchmark's cluster (consolidation runs hundreds of simulations there), two cycles deep."""
    from benchmarks.scale import ScaleSize, apply_result, scale_cluster

    cfg = resolve_config(None)
    objs = prepare(parse_objects(scale_cluster(ScaleSize(nodes, 3, 3, nodes * 10)).objects), cfg, NOW)
    first = run_prepared_cycle(objs, cfg, NOW)
    with plain_consolidation_search():
        assert run_prepared_cycle(objs, cfg, NOW).to_dict() == first.to_dict()
    again = apply_result(objs, first, NOW)
    second = run_prepared_cycle(again, cfg, NOW + timedelta(seconds=1))
    with plain_consolidation_search():
        assert run_prepared_cycle(again, cfg, NOW + timedelta(seconds=1)).to_dict() == second.to_dict()
