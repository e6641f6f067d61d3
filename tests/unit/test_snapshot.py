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
