"""The eviction actions' "fits without victims" (``EvictingAction.fits_without_victims``): remembered per task
shape until a statement commits, and shared by the queues — but never across the job-level capacity check,
which reads the job's queue and preemptibility."""

from __future__ import annotations

import pytest

from kaisched.actions.evicting import ReclaimAction
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.snapshot import build_snapshot
from kaisched.plugins.registry import build_plugins
from tests.unit.builders import NOW, flatten, job, node, pod, pod_group, queue


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
