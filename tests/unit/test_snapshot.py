"""Snapshot building details: flattened queue trees."""

from __future__ import annotations

import kaisched
from tests.unit.builders import NOW, flatten, job, node, queue, status


def test_flattened_hierarchy_drops_top_level_queues_with_a_reason() -> None:
    objs = flatten(node("a", 4), queue("top"), queue("dept"), queue("leaf", parent="dept"),
                   job("x", 1, gpus=1, queue="top"), job("y", 1, gpus=1, queue="leaf"))
    result = kaisched.schedule(objs, config={"params": {"full-hierarchy-fairness": False}}, now=NOW)
    assert [q.name for q in result.queues] == ["default", "leaf"]
    assert next(q for q in result.queues if q.name == "leaf").parent == "default"
    x = status(result, "x")
    assert (x.status, x.reason) == ("Pending", "QueueDoesNotExist")
    assert "full-hierarchy-fairness=false" in x.message
    assert status(result, "y").status == "Allocated"


def test_a_finished_cycle_leaves_no_task_alive() -> None:
    """The per-node objects are cached between cycles (their static part); the tasks a cycle put on them are
    let go when its session is discarded, so finished cycles do not pile up in memory."""
    import gc

    from kaisched.model.task import TaskInfo

    objs = flatten(node("n1", gpus=8), queue("q"), [job(f"run{i}", 1, gpus=1, node="n1") for i in range(3)],
                   job("pending", 1, gpus=1))
    for _ in range(3):  # fresh objects each time: a new cache entry per cycle
        result = kaisched.schedule(objs, now=NOW)
        assert len(result.binds) == 1
        del result
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, TaskInfo)]
