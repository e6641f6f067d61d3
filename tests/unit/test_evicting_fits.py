"""The eviction actions' "fits without victims" (``EvictingAction.fits_without_victims``): remembered per task
shape until a statement commits, and shared by the queues — but never across the job-level capacity check,
which reads the job's queue and preemptibility; and never taken while a node is over-committed, where KAI's solver
evicts victims that cannot go back."""

from __future__ import annotations

import pytest

from kaisched import schedule
from kaisched.actions.evicting import ReclaimAction
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.snapshot import build_snapshot
from kaisched.plugins.registry import build_plugins
from tests.unit.builders import NOW, flatten, job, node, pipelined, pod, pod_group, queue


def open_session() -> Session:
    """Two free GPUs; queue 'capped' (limit 1 GPU) already runs one, queue 'open' has no limit; each has a
    pending one-GPU job of the same shape."""
    cfg = resolve_config(None)
    objs = flatten(
        node("n1", 4), queue("capped", gpu=1, gpu_limit=1), queue("open", gpu=1),
        pod_group("running", queue="capped"), pod("running-0", group="running", gpus=1, node="n1"),
        job("c", 1, queue="capped", gpus=1), job("o", 1, queue="open", gpus=1),
    )
    ssn = Session(build_snapshot(parse_objects(objs), NOW), cfg, build_plugins(cfg.plugins))
    ssn.open()
    return ssn


@pytest.mark.parametrize("first", ["default/c", "default/o"])
def test_a_job_over_its_queues_limit_does_not_decide_for_the_same_shape_in_another_queue(first: str) -> None:
    ssn = open_session()
    action = ReclaimAction()
    action._preemptible = [j for j in ssn.jobs.values() if j.preemptible]
    order = [first, *(k for k in ("default/c", "default/o") if k != first)]
    answers = {key: action.fits_without_victims(ssn, ssn.jobs[key]) for key in order}
    assert answers == {"default/c": False, "default/o": True}


def over_committed(gpus_on_n1: int) -> list[dict[str, object]]:
    """Node n1 (``gpus_on_n1`` GPUs) runs two one-GPU pods of queue 'a' (which deserves nothing): with one GPU its
    input is over-committed. n2 has a free GPU; queue 'b' has a pending one-GPU job."""
    return flatten(
        node("n1", gpus_on_n1), node("n2", 1), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=2),
        pod_group("a1", queue="a", created="2026-01-01T00:00:00Z"), pod("a1-0", group="a1", gpus=1, node="n1"),
        pod_group("a2", queue="a", created="2026-01-01T00:01:00Z"), pod("a2-0", group="a2", gpus=1, node="n1"),
        job("p", 1, queue="b", gpus=1),
    )


@pytest.mark.parametrize(("gpus_on_n1", "shortcut"), [(2, True), (1, False)])
def test_no_shortcut_while_a_node_is_over_committed(gpus_on_n1: int, shortcut: bool) -> None:
    cfg = resolve_config(None)
    ssn = Session(build_snapshot(parse_objects(over_committed(gpus_on_n1)), NOW), cfg, build_plugins(cfg.plugins))
    ssn.open()
    action = ReclaimAction()
    action._preemptible = [j for j in ssn.jobs.values() if j.preemptible]
    assert action.fits_without_victims(ssn, ssn.jobs["default/p"]) is shortcut


def test_reclaim_on_its_own_evicts_a_victim_that_cannot_go_back_to_its_over_committed_node() -> None:
    """KAI's solver (spec 4.9): the pending job fits on n2 anyway, but the first victim (a2, the newer) is evicted
    from n1 in the simulation and cannot be put back there (n1's idle GPUs stay below zero), so it stays evicted;
    the job is pipelined onto n2. Without the over-commitment nothing is evicted (the job is left to allocate)."""
    result = schedule(over_committed(1), {"actions": "reclaim"}, NOW)
    assert [e.pod for e in result.evictions] == ["default/a2-0"]
    assert pipelined(result) == {"default/p-0": "n2"}
    result = schedule(over_committed(2), {"actions": "reclaim"}, NOW)
    assert list(result.evictions) == []
    assert pipelined(result) == {}
