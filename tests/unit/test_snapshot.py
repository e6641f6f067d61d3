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


def test_pod_facts_stay_bounded_by_the_latest_pods_and_are_kept_for_unchanged_ones() -> None:
    """Facts are kept per Pod object between snapshots; the stale ones are dropped once the cache holds more
    than the allowance of the latest snapshot's pods (not every cycle), never the facts of a current pod."""
    from datetime import timedelta

    from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
    from kaisched.k8s.parse import parse_objects
    from kaisched.model import pod_facts

    config = resolve_config(None)
    pod_facts.forget_all()
    kept = prepare(parse_objects(flatten(node("n1", gpus=8), queue("q"),
                                         [job(f"keep{i}", 1, gpus=1) for i in range(20)])), config, NOW)
    run_prepared_cycle(kept, config, NOW)
    facts_of_kept = {id(p): pod_facts.pod_facts(p) for p in kept.pods}
    for cycle in range(30):  # every cycle: the same 20 pods and 10 new ones (the old new ones are gone)
        fresh = prepare(parse_objects(flatten(node("n2", gpus=8), queue("q2"),
                                              [job(f"new{cycle}-{i}", 1, gpus=1, queue="q2") for i in range(10)])),
                        config, NOW)
        parsed = kept.__class__(nodes=kept.nodes + fresh.nodes, pods=kept.pods + fresh.pods,
                                queues=kept.queues + fresh.queues, pod_groups=kept.pod_groups + fresh.pod_groups)
        run_prepared_cycle(parsed, config, NOW + timedelta(seconds=cycle))
        assert len(pod_facts._CACHE) <= pod_facts.stale_allowance(len(parsed.pods)) + len(fresh.pods)
        assert all(pod_facts.pod_facts(p) is facts_of_kept[id(p)] for p in kept.pods)
    pod_facts.forget_all()
