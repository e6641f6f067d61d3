"""The cyclic collector around a cycle (kaisched.cluster.schedule.no_cyclic_gc)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

import kaisched
from kaisched.cluster import schedule
from kaisched.cluster.schedule import freeze_long_lived, no_cyclic_gc, unfreeze_long_lived


class Thing:
    """A tracked object that can be weakly referenced."""

    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def clean_gc() -> Iterator[None]:
    gc.collect()
    assert gc.get_freeze_count() == 0
    assert schedule._frozen_holders == 0  # every freeze_long_lived of earlier tests was undone
    yield
    gc.unfreeze()
    gc.enable()


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_survivors_go_to_the_oldest_generation_unscanned(clean_gc: None) -> None:
    with no_cyclic_gc():
        assert not gc.isenabled()
        kept = [Thing() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # nothing left frozen
    assert gc.get_count()[0] < 100  # the youngest generation does not hold the cycle's objects
    assert _in_generation(kept[0], 2) and not _in_generation(kept[0], 0)


def test_cyclic_garbage_of_a_cycle_is_still_collected(clean_gc: None) -> None:
    with no_cyclic_gc():
        a, b = Thing(), Thing()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
    assert ref() is not None  # a cycle: reference counting cannot free it
    gc.collect()
    assert ref() is None


def test_a_callers_long_lived_objects_stay_frozen(clean_gc: None) -> None:
    long_lived = [Thing() for _ in range(100)]
    freeze_long_lived()
    try:
        frozen = gc.get_freeze_count()
        with no_cyclic_gc():
            new = Thing()
        assert gc.get_freeze_count() == frozen  # the simulator's and Kubernetes mode's freeze is untouched
        assert gc.isenabled()
        assert _in_generation(new, 0)  # the collector's usual way: not promoted
    finally:
        unfreeze_long_lived()
    assert gc.get_freeze_count() == 0
    assert long_lived


def test_objects_frozen_by_other_means_go_to_the_oldest_generation(clean_gc: None) -> None:
    kept = Thing()
    gc.freeze()
    with no_cyclic_gc():
        pass
    assert gc.get_freeze_count() == 0
    assert _in_generation(kept, 2)


def test_a_disabled_collector_stays_disabled(clean_gc: None) -> None:
    gc.disable()
    with no_cyclic_gc():
        pass
    assert not gc.isenabled()


def test_schedule_leaves_the_collector_as_it_found_it(clean_gc: None) -> None:
    result = kaisched.schedule([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "namespace": "default", "labels": {"kai.scheduler/queue": "q"}},
         "spec": {"schedulerName": "kai-scheduler", "containers": [
             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
    ])
    assert [b.pod for b in result.binds] == ["default/p"]
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.mark.interpreted
def test_a_discarded_session_is_freed_by_reference_counting(clean_gc: None) -> None:
    """Session.discard names every reference back to the session (plugins, their hooks, the eviction state)
    and from tasks to jobs: with the collector off, dropping the session frees it, its plugins, jobs and tasks."""
    from kaisched.actions.registry import build_actions
    from kaisched.framework.session import Session
    from kaisched.k8s.parse import parse_objects
    from kaisched.model.snapshot import build_snapshot
    from kaisched.plugins.registry import build_plugins
    from tests.unit.builders import NOW, flatten, job, node, pod, pod_group, queue

    cfg = schedule.resolve_config(None)  # the five actions, every default plugin
    objs = flatten(
        node("n1", 4), node("n2", 4), queue("a", gpu=4), queue("b", gpu=4),
        pod_group("running", queue="a"), *(pod(f"running-{i}", group="running", gpus=1, node="n1") for i in range(4)),
        job("wide", 2, queue="b", gpus=4), job("small", 1, queue="a", gpus=1),
    )
    with no_cyclic_gc():
        ssn = Session(build_snapshot(parse_objects(objs), NOW), cfg, build_plugins(cfg.plugins))
        ssn.open()
        for action in build_actions(cfg):
            action.execute(ssn)
        result = ssn.close()
        assert result.binds or result.pipelined or result.evictions  # the actions did something
        refs = [weakref.ref(o) for o in (ssn, *ssn.plugins)]
        ssn.discard()
        del ssn
        assert [r() for r in refs] == [None] * len(refs)
    # nor is anything of it left to the collector: no job or task (they cannot be weakly referenced)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not left & {"Session", "PodGroupInfo", "PodSetInfo", "TaskInfo", "NodeTable"}
