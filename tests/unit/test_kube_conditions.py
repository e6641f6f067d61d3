"""Kubernetes mode's explanations (issue 24, item 4): the tiered reason in the PodGroup's schedulingConditions and
events, KAI's reasons[] kept beside it, queueDetails for queue-share reasons, a pipelined job's condition naming its
victims, and the condition cleared in the cycle that schedules the job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kaisched.framework.result import CycleResult, Placement, PodGroupStatus, QueueStatus
from kaisched.kube.operations import Event, OperationPlanner, PodCondition, PodGroupStatusPatch
from tests.unit.test_kube_writer import NOW, Cache, pending_group, pod, pod_group

GROUP = {"ns/pg1": ["ns/p1"]}


def _patch(ops: Sequence[object]) -> dict[str, Any]:
    (patch,) = [op for op in ops if isinstance(op, PodGroupStatusPatch)]
    conditions = patch.status["schedulingConditions"]
    assert isinstance(conditions, list)
    condition: dict[str, Any] = conditions[-1]
    return condition


def test_the_condition_and_group_event_carry_the_tier_and_kai_reasons_stay() -> None:
    message = "Resources were not found for pod ns/p1 due to: no nodes with enough resources were found."
    status = pending_group(message=message, code="fits-nowhere")
    ops = OperationPlanner().plan(CycleResult(pod_groups=[status]), Cache(pod("ns/p1"), pod_group("ns/pg1")).lookup,
                                  NOW, GROUP)
    condition = _patch(ops)
    assert condition["message"] == f"Fits nowhere: {message}"
    assert condition["reasons"] == [{"reason": "PodSchedulingErrors", "message": message}]
    events = {(e.involved.kind, e.reason): e.message for e in ops if isinstance(e, Event)}
    assert events[("PodGroup", "Unschedulable")] == f"Fits nowhere: {message}"
    assert events[("Pod", "Unschedulable")] == message  # the pod's own fit error, as KAI writes it
    (pod_condition,) = [op for op in ops if isinstance(op, PodCondition)]
    assert pod_condition.condition["message"] == message


def test_queue_share_reasons_carry_kai_queue_details() -> None:
    queue = QueueStatus("team-a", "dept", {"gpu": 0.0, "cpu": -1.0, "memory": -1.0},
                        {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}, {"gpu": 1.0, "cpu": 2000.0, "memory": 2.0**30},
                        {"gpu": 3.0, "cpu": 2000.0, "memory": 2.0**30}, {"gpu": 1.0, "cpu": -1.0, "memory": -1.0}, 100)
    status = pending_group(reason="OverLimit", message="team-a quota has reached the allowable limit of GPUs.",
                           code="over-limit")
    ops = OperationPlanner().plan(CycleResult(pod_groups=[status], queues=[queue]),
                                  Cache(pod("ns/p1"), pod_group("ns/pg1")).lookup, NOW, GROUP)
    condition = _patch(ops)
    assert condition["message"] == "Over its queue's limit: team-a quota has reached the allowable limit of GPUs."
    reasons: list[dict[str, Any]] = condition["reasons"]
    (reason,) = reasons
    assert reason["details"] == {"queueDetails": {
        "name": "team-a",
        "queueDeservedResources": {"cpu": "-1", "memory": "-1", "nvidia.com/gpu": "0"},
        "queueAllocatedResources": {"cpu": "2", "memory": "1073741824", "nvidia.com/gpu": "1"},
        "queueRequestedResources": {"cpu": "2", "memory": "1073741824", "nvidia.com/gpu": "3"},
        "queueResourceLimits": {"cpu": "-1", "memory": "-1", "nvidia.com/gpu": "1"}}}


def test_a_pipelined_job_condition_names_its_victims() -> None:
    message = "Pipelined by reclaim: waiting for 1 evicted pod(s) to release their resources (ns/v1)"
    status = PodGroupStatus("ns/pg1", "team-a", "Pipelined", "WaitingForVictims", message,
                            code="waiting-for-victims")
    result = CycleResult(pipelined=[Placement("ns/p1", "n1")], pod_groups=[status])
    ops = OperationPlanner().plan(result, Cache(pod("ns/p1"), pod_group("ns/pg1")).lookup, NOW, GROUP)
    condition = _patch(ops)
    assert condition["message"] == f"Waiting for victims to terminate: {message}"
    assert not [op for op in ops if isinstance(op, PodCondition)]  # the pod is placed: not unschedulable


def test_the_condition_is_cleared_in_the_cycle_that_binds_the_job_and_kept_while_unchanged() -> None:
    old = {"type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable",
           "message": "Fits nowhere: m", "transitionID": "3", "status": "True"}
    cache = Cache(pod("ns/p1"), pod_group("ns/pg1", status={"schedulingConditions": [old]}))
    unchanged = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(message="m", code="fits-nowhere")]),
                                        cache.lookup, NOW, GROUP)
    assert not [op for op in unchanged if isinstance(op, PodGroupStatusPatch)]
    allocated = PodGroupStatus("ns/pg1", "team-a", "Allocated", None, None)
    ops = OperationPlanner().plan(CycleResult(binds=[Placement("ns/p1", "n1")], pod_groups=[allocated]),
                                  cache.lookup, NOW, GROUP)
    assert [op.status for op in ops if isinstance(op, PodGroupStatusPatch)] == [{"schedulingConditions": None}]
