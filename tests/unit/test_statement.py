"""Statements (spec 4.6): operations apply at once, roll back exactly, and only commits are decisions."""

from __future__ import annotations

import numpy as np

import kaisched
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.status import TaskStatus
from tests.unit.builders import NOW, flatten, job, node, open_session, pod, pod_group, priority_class, queue, status


def cluster() -> Session:
    return open_session(
        node("a", 4), node("b", 4), queue("q", gpu=2),
        pod_group("run", min_member=1), pod("run-0", group="run", gpus=2, node="a", phase="Running"),
        job("pend", 2, gpus=1),
    )


def queue_allocated(ssn: Session, name: str) -> list[float]:
    return next(q.allocated for q in ssn.queue_reporter.report() if q.name == name).copy()  # type: ignore[union-attr]


def state(ssn: Session) -> tuple[object, ...]:
    tasks = {t.uid: (t.status, t.node) for t in ssn.snapshot.tasks.values()}
    return (ssn.nodes.idle.copy(), ssn.nodes.releasing.copy(), tasks, queue_allocated(ssn, "q"))


def same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2] and a[3] == b[3])


def task(ssn: Session, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in ssn.snapshot.tasks.values() if t.name == name)


def test_operations_apply_immediately_to_nodes_and_queues() -> None:
    ssn = cluster()
    stmt = Statement(ssn)
    a, b = ssn.nodes.by_name["a"], ssn.nodes.by_name["b"]
    gpu = 0
    assert ssn.nodes.idle[gpu, a] == 2 and queue_allocated(ssn, "q")["gpu"] == 2
    stmt.allocate(task(ssn, "pend-0"), b)
    assert task(ssn, "pend-0").status is TaskStatus.ALLOCATED
    assert ssn.nodes.idle[gpu, b] == 3 and queue_allocated(ssn, "q")["gpu"] == 3
    stmt.evict(task(ssn, "run-0"), action="test", preemptor="default/pend", message="m")
    assert task(ssn, "run-0").status is TaskStatus.RELEASING
    assert ssn.nodes.releasing[gpu, a] == 2 and ssn.nodes.idle[gpu, a] == 2
    assert queue_allocated(ssn, "q")["gpu"] == 1
    stmt.pipeline(task(ssn, "pend-1"), a)  # onto the releasing GPUs
    assert task(ssn, "pend-1").status is TaskStatus.PIPELINED
    assert ssn.nodes.releasing[gpu, a] == 1 and queue_allocated(ssn, "q")["gpu"] == 2


def test_rollback_to_checkpoint_restores_exactly() -> None:
    ssn = cluster()
    stmt = Statement(ssn)
    before = state(ssn)
    stmt.allocate(task(ssn, "pend-0"), ssn.nodes.by_name["b"])
    middle = state(ssn)
    cp = stmt.checkpoint()
    stmt.evict(task(ssn, "run-0"), action="test", preemptor="", message="")
    stmt.pipeline(task(ssn, "pend-1"), ssn.nodes.by_name["a"])
    stmt.rollback(cp)
    assert same(state(ssn), middle)
    stmt.discard()
    assert same(state(ssn), before)
    assert ssn.binds == [] and ssn.pipelined == [] and ssn.evictions == []


def test_commit_turns_operations_into_decisions_in_order() -> None:
    ssn = cluster()
    stmt = Statement(ssn)
    stmt.allocate(task(ssn, "pend-0"), ssn.nodes.by_name["b"])
    stmt.evict(task(ssn, "run-0"), action="reclaim", preemptor="default/pend", message="why")
    stmt.pipeline(task(ssn, "pend-1"), ssn.nodes.by_name["a"])
    stmt.commit()
    assert task(ssn, "pend-0").status is TaskStatus.BINDING
    assert [t.name for t in ssn.binds] == ["pend-0"]
    assert [t.name for t in ssn.pipelined] == ["pend-1"]
    assert [(e.pod, e.action, e.preemptor, e.message) for e in ssn.evictions] == [
        ("default/run-0", "reclaim", "default/pend", "why")
    ]
    assert stmt.operations == ()
    result = ssn.close().to_dict()
    assert result["binds"] == [{"pod": "default/pend-0", "node": "b", "gpuGroups": []}]
    assert result["evictions"][0]["message"] == "why"


def test_convert_allocated_to_pipelined_moves_the_whole_job() -> None:
    ssn = cluster()
    stmt = Statement(ssn)
    stmt.allocate(task(ssn, "pend-0"), ssn.nodes.by_name["b"])
    stmt.allocate(task(ssn, "pend-1"), ssn.nodes.by_name["b"])
    idle_before = ssn.nodes.idle.copy()
    stmt.convert_allocated_to_pipelined("default/pend")
    assert {task(ssn, n).status for n in ("pend-0", "pend-1")} == {TaskStatus.PIPELINED}
    # pipelined tasks consume releasing, not idle
    assert ssn.nodes.idle[0, ssn.nodes.by_name["b"]] == idle_before[0, ssn.nodes.by_name["b"]] + 2
    stmt.commit()
    assert ssn.binds == [] and len(ssn.pipelined) == 2


def test_priority_from_global_default_priority_class_and_fallback_50() -> None:
    objs = flatten(
        node("a", 1), queue("q"), priority_class("everyday", 80, global_default=True),
        job("older-default", 1, gpus=1, priority_class=None, created="2024-01-01T00:00:00Z"),
        job("newer-high", 1, gpus=1, priority_class="inference", created="2024-06-01T00:00:00Z"),
        job("unknown-class", 1, gpus=1, priority_class="no-such-class", created="2024-02-01T00:00:00Z"),
    )
    result = kaisched.schedule(objs, now=NOW)
    # inference (125) beats the global default (80) although it is newer
    assert [b.pod for b in result.binds] == ["default/newer-high-0"]
    assert status(result, "older-default").status == "Pending"
    # without a globalDefault class an unknown class falls back to 50 (and is preemptible)
    ssn = open_session(node("a", 1), queue("q"), job("x", 1, gpus=1, priority_class="no-such-class"))
    j = next(iter(ssn.jobs.values()))
    assert (j.priority, j.preemptible) == (50, True)


def test_committing_allocations_binds_them_in_place() -> None:
    """Allocated and Binding are accounted alike: a commit turns allocations into binds without touching
    the nodes (their accounting and version stay, so fits remembered for them stay valid) or the queues."""
    shared_pod = pod("shared-0", group="shared")
    shared_pod["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    ssn = open_session(node("a", 4), queue("q", gpu=4), job("whole", 2, gpus=1),
                       pod_group("shared", min_member=1), shared_pod)
    stmt = Statement(ssn)
    a = ssn.nodes.by_name["a"]
    stmt.allocate(task(ssn, "whole-0"), a)
    stmt.allocate(task(ssn, "whole-1"), a)
    shared = task(ssn, "shared-0")
    choice = ssn.nodes.choose_gpus(shared, a, ssn.gpu_order_fns, pipeline_only=False)
    assert choice is not None
    stmt.allocate(shared, a, choice.groups)
    before, version = state(ssn), ssn.nodes.version
    groups = {name: (g.allocated, g.n_active) for name, g in ssn.nodes.shared.groups[a].items()}
    stmt.commit()
    assert [t.name for t in ssn.binds] == ["whole-0", "whole-1", "shared-0"]
    assert all(task(ssn, n).status is TaskStatus.BINDING for n in ("whole-0", "whole-1", "shared-0"))
    after = state(ssn)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1]) and before[3] == after[3]
    assert ssn.nodes.version == version
    assert {name: (g.allocated, g.n_active) for name, g in ssn.nodes.shared.groups[a].items()} == groups
