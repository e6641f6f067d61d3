"""The allocate action through ``kaisched.schedule`` (spec 4.4-4.8, 5.4-5.6, 6): gangs, elastic jobs,
job/queue order, node placement, queue capacity checks, pipelining, pending reasons, bad inputs and
determinism."""

from __future__ import annotations

import copy
import random

import pytest

import kaisched
from tests.unit.builders import (
    NOW,
    binds,
    flatten,
    job,
    node,
    pipelined,
    pod,
    pod_group,
    priority_class,
    queue,
    queue_status,
    status,
    tiers,
)

SPREAD = {"tiers": tiers(nodeplacement={"gpu": "spread", "cpu": "spread"})}


def run(*parts, config=None):
    return kaisched.schedule(flatten(*parts), config=config, now=NOW)


def running(name: str, node_name: str, gpus: int = 0, cpu: object = 1, *, ns: str = "default", queue: str = "q",
            memory: object = "1Gi", priority_class: str = "train", deleting: bool = False) -> list[dict]:
    """A one-pod PodGroup whose pod already runs on ``node_name``."""
    return [pod_group(name, ns, queue, 1, priority_class),
            pod(f"{name}-0", ns, name, gpus, cpu, memory, node=node_name, deleting=deleting)]


# ------------------------------------------------------------------------------------------- gangs
def test_gang_that_only_partly_fits_is_not_bound_at_all():
    result = run(node("n1", 8), node("n2", 8), queue("q"), job("gang", 3, gpus=6))
    assert result.binds == []
    assert result.pipelined == []
    st = status(result, "gang")
    assert st.status == "Pending"
    assert st.reason == "PodSchedulingErrors"
    assert st.message.startswith(
        "Resources were found for 2 pods while 3 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to: no nodes with enough resources were found"
    )
    assert "2 node(s) didn't have enough resources: GPUs" in st.message
    # nothing was accounted to the queue either
    assert queue_status(result, "q").allocated["gpu"] == 0


def test_gang_that_fits_is_bound_whole_and_gets_last_start():
    result = run(node("n1", 8), node("n2", 8), queue("q"), job("gang", 2, gpus=8))
    assert binds(result) == {"default/gang-0": "n1", "default/gang-1": "n2"}
    st = status(result, "gang")
    assert (st.status, st.reason, st.message) == ("Allocated", None, None)
    assert st.last_start == "2025-01-01T12:00:00Z"
    assert queue_status(result, "q").allocated["gpu"] == 16


def test_elastic_job_grows_beyond_min_as_far_as_room_allows():
    result = run(node("n1", 4), node("n2", 4), queue("q"), job("el", 5, min_member=2, gpus=2))
    assert sorted(binds(result)) == [f"default/el-{i}" for i in range(4)]
    assert sorted(binds(result).values()) == ["n1", "n1", "n2", "n2"]
    st = status(result, "el")
    assert st.status == "Allocated"
    # the fifth pod is still pending and explained per pod (the gang part is satisfied)
    assert st.reason == "PodSchedulingErrors"
    assert st.message.startswith("Resources were not found for pod default/el-4 due to:")
    assert "2 node(s) didn't have enough resources: GPUs" in st.message


def test_elastic_job_below_min_binds_nothing():
    result = run(node("n1", 4), queue("q"), job("el", 5, min_member=3, gpus=2))
    assert result.binds == []
    assert status(result, "el").status == "Pending"
    assert "Resources were found for 2 pods while 3 are required" in status(result, "el").message


def test_running_gang_grows_one_pod_at_a_time():
    objs = flatten(node("n1", 8), queue("q"), pod_group("el", "default", "q", 1),
                   pod("el-0", group="el", gpus=2, node="n1"),
                   pod("el-1", group="el", gpus=2), pod("el-2", group="el", gpus=2))
    result = kaisched.schedule(objs, now=NOW)
    assert binds(result) == {"default/el-1": "n1", "default/el-2": "n1"}
    st = status(result, "el")
    assert st.status == "Allocated"
    assert st.last_start is None  # the job had already started: no new start time


# ------------------------------------------------------------------------------------------ order
def test_higher_priority_job_first_within_a_queue():
    result = run(
        node("n1", 8), queue("q"), priority_class("high", 90),
        job("older-low", 1, gpus=8, created="2025-01-01T00:00:00Z"),
        job("newer-high", 1, gpus=8, priority_class="high", created="2025-01-01T06:00:00Z"),
    )
    assert binds(result) == {"default/newer-high-0": "n1"}
    assert status(result, "older-low").status == "Pending"


def test_older_job_first_among_equal_priorities():
    result = run(
        node("n1", 8), queue("q"),
        job("b-newer", 1, gpus=8, created="2025-01-01T06:00:00Z"),
        job("a-older", 1, gpus=8, created="2025-01-01T00:00:00Z"),
        job("c-oldest", 1, gpus=8, created="2024-12-31T00:00:00Z"),
    )
    assert binds(result) == {"default/c-oldest-0": "n1"}


def test_unknown_priority_class_counts_as_50():
    # 'mystery' is not a PriorityClass: priority 50, below 'high' (60) but above 'low' (40)
    result = run(node("n1", 8), queue("q"), priority_class("low", 40), priority_class("high", 60),
                 job("a", 1, gpus=8, priority_class="low"), job("b", 1, gpus=8, priority_class="mystery"))
    assert binds(result) == {"default/b-0": "n1"}
    result = run(node("n1", 8), queue("q"), priority_class("low", 40), priority_class("high", 60),
                 job("a", 1, gpus=8, priority_class="high"), job("b", 1, gpus=8, priority_class="mystery"))
    assert binds(result) == {"default/a-0": "n1"}


def test_starved_queue_before_a_higher_priority_queue():
    # qa has the higher queue priority but its job would take it over quota; qb's job is within quota
    result = run(
        node("n1", 10),
        queue("qa", gpu=0, priority=200), queue("qb", gpu=5),
        job("a", 1, queue="qa", gpus=6), job("b", 1, queue="qb", gpus=5),
    )
    assert binds(result) == {"default/b-0": "n1"}
    assert status(result, "a").status == "Pending"


def test_higher_queue_priority_first_among_starved_queues():
    # both jobs are within quota; without priorities qa would win (equal shares, older name)
    result = run(
        node("n1", 10),
        queue("qa", gpu=6), queue("qb", gpu=6, priority=200),
        job("a", 1, queue="qa", gpus=6), job("b", 1, queue="qb", gpus=6),
    )
    assert binds(result) == {"default/b-0": "n1"}
    result = run(
        node("n1", 10),
        queue("qa", gpu=6), queue("qb", gpu=6),
        job("a", 1, queue="qa", gpus=6), job("b", 1, queue="qb", gpus=6),
    )
    assert binds(result) == {"default/a-0": "n1"}


def test_queues_take_turns_by_dominant_share():
    # two equal queues, one 4-GPU node and four 1-GPU jobs each: each queue gets 2
    objs = [node("n1", 4), queue("qa", gpu=0), queue("qb", gpu=0)]
    for q in ("qa", "qb"):
        for i in range(4):
            objs += job(f"{q}-{i}", 1, queue=q, gpus=1, created=f"2025-01-01T0{i}:00:00Z")
    result = run(objs)
    bound = sorted(binds(result))
    assert bound == ["default/qa-0-0", "default/qa-1-0", "default/qb-0-0", "default/qb-1-0"]
    assert queue_status(result, "qa").allocated["gpu"] == 2
    assert queue_status(result, "qb").allocated["gpu"] == 2


# ------------------------------------------------------------------------------------ placement
def _packing_cluster():
    return flatten(
        node("n1", 8), node("n2", 8), node("n3", 8), queue("q"),
        running("r1", "n1", gpus=6), running("r3", "n3", gpus=4),
    )


def test_binpack_puts_gpu_pod_on_fullest_node_that_fits():
    result = run(_packing_cluster(), job("small", 1, gpus=2))
    assert binds(result) == {"default/small-0": "n1"}
    result = run(_packing_cluster(), job("mid", 1, gpus=3))
    assert binds(result) == {"default/mid-0": "n3"}


def test_spread_puts_gpu_pod_on_emptiest_node():
    result = run(_packing_cluster(), job("small", 1, gpus=2), config=SPREAD)
    assert binds(result) == {"default/small-0": "n2"}


def test_spread_spreads_a_gang_over_nodes():
    result = run(node("n1", 8), node("n2", 8), node("n3", 8), queue("q"), job("g", 3, gpus=1), config=SPREAD)
    assert sorted(binds(result).values()) == ["n1", "n2", "n3"]
    result = run(node("n1", 8), node("n2", 8), node("n3", 8), queue("q"), job("g", 3, gpus=1))
    assert sorted(binds(result).values()) == ["n1", "n1", "n1"]


def test_cpu_binpack_and_spread():
    base = flatten(node("c1", 0, cpu=32), node("c2", 0, cpu=32), queue("q"), running("busy", "c2", cpu=16))
    assert binds(run(base, job("w", 1, cpu=4))) == {"default/w-0": "c2"}
    assert binds(run(base, job("w", 1, cpu=4), config=SPREAD)) == {"default/w-0": "c1"}


def test_cpu_only_pod_prefers_node_without_gpus():
    # a-gpu is fuller (binpack would pick it) and sorts first, yet the CPU-only pod goes to the CPU node
    result = run(node("a-gpu", 8, cpu=64), node("b-cpu", 0, cpu=64), queue("q"), running("r", "a-gpu", cpu=8),
                 job("cpu-job", 1, cpu=2))
    assert binds(result) == {"default/cpu-job-0": "b-cpu"}


def test_gpu_pod_never_goes_to_node_without_gpus():
    result = run(node("a-cpu", 0), node("b-gpu", 8), queue("q"), job("g", 1, gpus=1))
    assert binds(result) == {"default/g-0": "b-gpu"}


def test_node_tie_goes_to_smaller_name():
    result = run(node("n-c", 8), node("n-b", 8), node("n-a", 8), queue("q"), job("j", 1, gpus=1))
    assert binds(result) == {"default/j-0": "n-a"}
    result = run(node("n-c", 8), node("n-b", 8), node("n-a", 8), queue("q"), job("j", 1, gpus=1), config=SPREAD)
    assert binds(result) == {"default/j-0": "n-a"}


# --------------------------------------------------------------------------------- queue capacity
def test_queue_limit_blocks_job_with_over_limit_reason():
    result = run(node("n1", 8), queue("team-a", gpu=2, gpu_limit=4), job("big", 1, queue="team-a", gpus=6))
    assert result.binds == []
    st = status(result, "big")
    assert st.status == "Pending"
    assert st.reason == "OverLimit"
    assert st.message == (
        "team-a quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 0 GPUs allocated "
        "and workload requested 6 GPUs"
    )


def test_queue_limit_counts_running_work():
    result = run(node("n1", 8), queue("q", gpu_limit=4), running("r", "n1", gpus=3), job("j", 1, gpus=2))
    assert result.binds == []
    st = status(result, "j")
    assert st.reason == "OverLimit"
    assert "currently 3 GPUs allocated and workload requested 2 GPUs" in st.message
    # exactly at the limit is allowed
    result = run(node("n1", 8), queue("q", gpu_limit=4), running("r", "n1", gpus=3), job("j", 1, gpus=1))
    assert binds(result) == {"default/j-0": "n1"}


def test_queue_limit_stops_elastic_growth_exactly_at_the_limit():
    result = run(node("n1", 8), queue("q", gpu_limit=3), job("el", 5, min_member=1, gpus=1))
    assert len(result.binds) == 3
    st = status(result, "el")
    assert st.status == "Allocated"
    assert st.reason == "OverLimit"
    assert queue_status(result, "q").allocated["gpu"] == 3


def test_zero_limit_rejects_any_request_of_that_resource():
    result = run(node("n1", 8), queue("q", gpu_limit=0), job("g", 1, gpus=1), job("c", 1, gpus=0))
    assert binds(result) == {"default/c-0": "n1"}  # CPU-only work is not limited by a GPU limit
    assert status(result, "g").reason == "OverLimit"


def test_cpu_limit_message_in_cores():
    result = run(node("n1", 8), queue("q", cpu_limit=2000), job("c", 1, cpu=3))
    st = status(result, "c")
    assert st.reason == "OverLimit"
    assert "allowable limit of CPU cores. Limit is 2 CPU cores" in st.message


def test_queue_limit_uses_display_name():
    result = run(node("n1", 8), queue("q", gpu_limit=1, display_name="Team Q"), job("j", 1, gpus=2))
    assert status(result, "j").message.startswith("Team Q quota has reached the allowable limit of GPUs")


def test_parent_queue_limit_applies_to_children():
    base = flatten(
        node("n1", 8),
        queue("dept", gpu_limit=4), queue("a", "dept"), queue("b", "dept"),
        running("ra", "n1", gpus=2, queue="a"),
    )
    result = run(base, job("jb", 1, queue="b", gpus=4))
    assert result.binds == []
    st = status(result, "jb")
    assert st.reason == "OverLimit"
    assert st.message.startswith("dept quota has reached the allowable limit of GPUs. Limit is 4 GPUs, "
                                 "currently 2 GPUs allocated and workload requested 4 GPUs")
    result = run(base, job("jb", 1, queue="b", gpus=2))
    assert binds(result) == {"default/jb-0": "n1"}


def test_parent_limit_is_shared_by_siblings_in_one_cycle():
    result = run(
        node("n1", 8),
        queue("dept", gpu_limit=4), queue("a", "dept"), queue("b", "dept"),
        job("ja", 1, queue="a", gpus=3), job("jb", 1, queue="b", gpus=3),
    )
    assert len(result.binds) == 1
    assert queue_status(result, "dept").allocated["gpu"] == 3
    pending = [g for g in result.pod_groups if g.status == "Pending"]
    assert [g.reason for g in pending] == ["OverLimit"]


def test_non_preemptible_job_over_quota_is_not_allocated():
    # inference (125) is non-preemptible by default, train (50) preemptible
    result = run(
        node("n1", 16), queue("q", gpu=4),
        job("np", 1, gpus=6, priority_class="inference"), job("p", 1, gpus=6, priority_class="train"),
    )
    assert binds(result) == {"default/p-0": "n1"}
    st = status(result, "np")
    assert st.status == "Pending"
    assert st.reason == "NonPreemptibleOverQuota"
    assert st.message == (
        "Non-preemptible workload is over quota. Workload requested 6 GPUs, but q quota is 4 GPUs, while "
        "0 GPUs are already allocated for non-preemptible pods. Use a preemptible workload to go over quota."
    )


def test_non_preemptible_job_within_quota_is_allocated():
    result = run(node("n1", 16), queue("q", gpu=4), job("np", 2, gpus=2, priority_class="inference"))
    assert len(result.binds) == 2
    assert status(result, "np").status == "Allocated"


def test_non_preemptible_quota_counts_only_non_preemptible_work():
    # 3 GPUs of preemptible work run already; the non-preemptible job still has its full quota of 4
    base = flatten(node("n1", 16), queue("q", gpu=4), running("p", "n1", gpus=3))
    assert len(run(base, job("np", 1, gpus=4, priority_class="inference")).binds) == 1
    base = flatten(node("n1", 16), queue("q", gpu=4), running("p", "n1", gpus=3, priority_class="inference"))
    result = run(base, job("np", 1, gpus=2, priority_class="inference"))
    assert result.binds == []
    assert "while 3 GPUs are already allocated for non-preemptible pods" in status(result, "np").message


def test_preemptibility_field_overrides_priority():
    result = run(
        node("n1", 16), queue("q", gpu=2),
        job("inf-pre", 1, gpus=4, priority_class="inference", preemptibility="preemptible"),
        job("train-np", 1, gpus=4, priority_class="train", preemptibility="non-preemptible"),
    )
    assert binds(result) == {"default/inf-pre-0": "n1"}
    assert status(result, "train-np").reason == "NonPreemptibleOverQuota"


def test_non_preemptible_quota_checked_at_parent_level():
    result = run(
        node("n1", 16), queue("dept", gpu=2), queue("leaf", "dept", gpu=-1),
        job("np", 1, queue="leaf", gpus=4, priority_class="build"),
    )
    assert result.binds == []
    st = status(result, "np")
    assert st.reason == "NonPreemptibleOverQuota"
    assert "but dept quota is 2 GPUs" in st.message


def test_allocate_may_go_beyond_fair_share_when_resources_are_idle():
    result = run(node("n1", 8), queue("qa", gpu=1), queue("qb", gpu=7), job("a", 1, queue="qa", gpus=8))
    assert binds(result) == {"default/a-0": "n1"}


# -------------------------------------------------------------------------- other schedulers' pods
def test_pods_of_other_schedulers_consume_capacity_and_are_never_bound():
    result = run(
        node("n1", 8), node("n2", 8), queue("q"),
        pod("foreign-running", "kube-system", gpus=6, node="n1", scheduler="default-scheduler"),
        pod("foreign-pending", "kube-system", gpus=1, scheduler="default-scheduler"),
        job("small", 1, gpus=2), job("big", 1, gpus=4),
    )
    assert binds(result) == {"default/small-0": "n1", "default/big-0": "n2"}
    assert "kube-system/foreign-pending" not in {p.pod for p in result.pipelined}
    assert result.errors == []
    # the capacity KAI divides between queues excludes the foreign pod
    assert queue_status(result, "q").fair_share["gpu"] <= 10


def test_node_full_of_foreign_pods_does_not_take_our_pod():
    result = run(node("n1", 8), queue("q"),
                 pod("foreign", "kube-system", gpus=6, node="n1", scheduler="default-scheduler"),
                 job("j", 1, gpus=4))
    assert result.binds == []
    assert "1 node(s) didn't have enough resources: GPUs" in status(result, "j").message


def test_pods_for_another_scheduler_name_in_config():
    objs = flatten(node("n1", 8), queue("q"), job("j", 1, gpus=1, scheduler="my-sched"))
    assert kaisched.schedule(objs, now=NOW).binds == []
    result = kaisched.schedule(objs, config={"params": {"scheduler-name": "my-sched"}}, now=NOW)
    assert binds(result) == {"default/j-0": "n1"}


# --------------------------------------------------------------------------------------- pipelining
def test_job_waiting_for_releasing_resources_is_pipelined_not_bound():
    result = run(node("n1", 8), queue("q"), running("old", "n1", gpus=8, deleting=True), job("new", 1, gpus=4))
    assert result.binds == []
    assert pipelined(result) == {"default/new-0": "n1"}
    st = status(result, "new")
    assert st.status == "Pipelined"
    assert st.last_start is None


def test_idle_node_is_preferred_over_pipelining():
    result = run(node("n1", 8), node("n2", 8), queue("q"), running("old", "n1", gpus=8, deleting=True),
                 job("new", 1, gpus=4))
    assert binds(result) == {"default/new-0": "n2"}
    assert result.pipelined == []


def test_gang_with_one_pod_pipelined_is_wholly_pipelined():
    result = run(node("n1", 8), node("n2", 8), queue("q"), running("old", "n2", gpus=8, deleting=True),
                 job("gang", 2, gpus=8))
    assert result.binds == []
    assert pipelined(result) == {"default/gang-0": "n1", "default/gang-1": "n2"}
    assert status(result, "gang").status == "Pipelined"


def test_releasing_resources_do_not_count_for_binding():
    # 4 GPUs releasing + 4 idle: an 8-GPU pod can only be pipelined
    result = run(node("n1", 8), queue("q"), running("old", "n1", gpus=4, deleting=True), job("new", 1, gpus=8))
    assert result.binds == []
    assert pipelined(result) == {"default/new-0": "n1"}


# ------------------------------------------------------------------------------------ pending reasons
def test_not_ready_job_waits_for_its_pods():
    objs = flatten(node("n1", 8), queue("q"), pod_group("pg", "default", "q", 3),
                   pod("pg-0", group="pg", gpus=1), pod("pg-1", group="pg", gpus=1))
    result = kaisched.schedule(objs, now=NOW)
    assert result.binds == []
    st = status(result, "pg")
    assert st.status == "Pending"
    assert st.reason == "NotReady"
    assert "Waiting for 3 pods, currently 2 exist" in st.message


def test_pod_group_without_pods_is_not_ready():
    result = run(node("n1", 8), queue("q"), pod_group("empty", "default", "q", 1))
    st = status(result, "empty")
    assert st.status == "Pending"
    assert st.reason == "NotReady"


def test_pod_group_of_missing_queue():
    result = run(node("n1", 8), queue("q"), job("lost", 1, queue="nope", gpus=1), job("ok", 1, gpus=1))
    assert binds(result) == {"default/ok-0": "n1"}
    st = status(result, "lost")
    assert st.status == "Pending"
    assert st.reason == "QueueDoesNotExist"
    assert "'nope'" in st.message


def test_pod_group_in_non_leaf_queue_is_not_scheduled():
    result = run(node("n1", 8), queue("dept"), queue("leaf", "dept"), job("j", 1, queue="dept", gpus=1))
    assert result.binds == []
    st = status(result, "j")
    assert st.status == "Pending"
    assert st.reason  # KAI: jobs only run in leaf queues
    assert "dept" in st.message and "leaf" in st.message
    assert any(e.object == "PodGroup default/j" and e.field == "spec.queue" for e in result.errors)


def test_job_in_queue_below_an_orphan_queue():
    result = run(node("n1", 8), queue("orphan", "ghost"), queue("child", "orphan"),
                 job("j", 1, queue="child", gpus=1))
    assert result.binds == []
    st = status(result, "j")
    assert st.reason == "QueueDoesNotExist"
    assert "orphan" in st.message


# -------------------------------------------------------------------------------------- bad inputs
def _errors(result) -> dict[tuple[str, str], str]:
    return {(e.object, e.field): e.message for e in result.errors}


def test_bad_inputs_are_reported_and_the_rest_is_scheduled():
    bad_quantity = job("badq", 1, gpus=1)
    bad_quantity[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    result = run(
        node("n1", 8), queue("q"),
        queue("neg", gpu=-5),
        queue("c1", "c2"), queue("c2", "c1"),
        queue("orphan", "ghost"),
        job("lost", 1, queue="nowhere", gpus=1),
        pod("stray", group="no-such-group", gpus=1),
        bad_quantity,
        job("good", 2, gpus=2),
    )
    assert binds(result) == {"default/good-0": "n1", "default/good-1": "n1"}
    errors = _errors(result)
    assert ("Queue neg", "spec.resources.gpu.quota") in errors
    assert "-5" in errors["Queue neg", "spec.resources.gpu.quota"]
    assert ("Queue c1", "spec.parentQueue") in errors
    assert ("Queue c2", "spec.parentQueue") in errors
    assert "cycle" in errors["Queue c1", "spec.parentQueue"]
    assert "ghost" in errors["Queue orphan", "spec.parentQueue"]
    assert "nowhere" in errors["PodGroup default/lost", "spec.queue"]
    assert "no-such-group" in errors["Pod default/stray", "metadata.annotations.pod-group-name"]
    assert any(obj == "Pod default/badq-0" and "cpu" in fld for obj, fld in errors)
    assert status(result, "lost").reason == "QueueDoesNotExist"
    assert all(b.pod != "default/stray" for b in result.binds)


def test_malformed_quantity_names_the_field():
    bad = pod("p", group="g", gpus=1)
    bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "12XB"
    result = run(node("n1", 8), queue("q"), pod_group("g", "default", "q", 1), bad)
    assert result.binds == []
    [(obj, fld)] = [(e.object, e.field) for e in result.errors]
    assert obj == "Pod default/p"
    assert fld == "spec.containers[0].resources.requests.memory"


def test_non_mapping_documents_are_errors_not_exceptions():
    result = kaisched.schedule([node("n1", 8), "not an object", queue("q"), *job("j", 1, gpus=1)], now=NOW)
    assert binds(result) == {"default/j-0": "n1"}
    assert len(result.errors) == 1


def test_input_objects_are_not_mutated():
    objs = flatten(
        node("n1", 8, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]), node("n2", 8),
        queue("dept", gpu_limit=10), queue("q", "dept", gpu=4),
        running("r", "n2", gpus=2), running("old", "n1", gpus=8, deleting=True),
        job("g", 2, gpus=4), job("np", 1, gpus=1, priority_class="inference"),
        job("lost", 1, queue="nope"), pod("stray", group="x"),
        {"kind": "List", "apiVersion": "v1", "items": [node("n3", 2)]},
    )
    before = copy.deepcopy(objs)
    kaisched.schedule(objs, now=NOW)
    assert objs == before


# ------------------------------------------------------------------------------------ determinism
def _busy_cluster():
    objs = [node(f"n{i}", 8 if i % 3 else 4, cpu=32) for i in range(6)]
    objs += [queue("dept", gpu=20), queue("a", "dept", gpu=8), queue("b", "dept", gpu=8, gpu_limit=14),
             queue("c", gpu=4, priority=150)]
    objs += running("ra", "n1", gpus=3, queue="a") + running("rb", "n2", gpus=5, queue="b")
    for i in range(12):
        q = ("a", "b", "c")[i % 3]
        pc = ("train", "build", "inference")[i % 3]
        objs += job(f"j{i:02d}", 1 + i % 3, queue=q, gpus=1 + i % 4, min_member=1 + (i % 2),
                    priority_class=pc, created=f"2025-01-01T0{i % 5}:00:00Z")
    return objs


def test_same_input_gives_identical_output():
    objs = _busy_cluster()
    first = kaisched.schedule(objs, now=NOW).to_dict()
    second = kaisched.schedule(copy.deepcopy(objs), now=NOW).to_dict()
    assert first == second
    assert first["binds"]  # the cluster does schedule something


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_object_order_does_not_change_decisions(seed):
    objs = _busy_cluster()
    expected = kaisched.schedule(objs, now=NOW)
    shuffled = list(objs)
    random.Random(seed).shuffle(shuffled)
    got = kaisched.schedule(shuffled, now=NOW)
    assert binds(got) == binds(expected)
    assert pipelined(got) == pipelined(expected)
    assert {g.name: (g.status, g.reason, g.message) for g in got.pod_groups} == {
        g.name: (g.status, g.reason, g.message) for g in expected.pod_groups
    }


def test_result_to_dict_shape():
    data = run(node("n1", 8), queue("q"), job("j", 1, gpus=1)).to_dict()
    assert list(data) == ["binds", "pipelined", "evictions", "podGroups", "queues", "errors", "nodes", "claims",
                          "scenarioSearch", "nominations"]
    assert data["claims"] == []  # (no DRA claim in this cluster)
    assert data["binds"] == [{"pod": "default/j-0", "node": "n1", "gpuGroups": []}]
    assert data["podGroups"][0]["name"] == "default/j"
    assert data["podGroups"][0]["status"] == "Allocated"


# ------------------------------------------------------------------------------ more ordering rules
def test_jobs_below_their_minimum_go_before_growing_elastic_jobs():
    # 'a' is older, gets its first pod, then waits behind 'b' (below its minimum) for its next one
    result = run(node("n1", 2), queue("q"),
                 job("a", 3, min_member=1, gpus=1, created="2025-01-01T00:00:00Z"),
                 job("b", 1, gpus=1, created="2025-01-01T01:00:00Z"))
    assert binds(result) == {"default/a-0": "n1", "default/b-0": "n1"}
    assert status(result, "a").status == "Allocated"
    assert status(result, "b").status == "Allocated"


def test_task_priority_label_orders_pods_within_a_job():
    objs = flatten(node("n1", 1), queue("q"), pod_group("e", "default", "q", 1),
                   pod("e-0", group="e", gpus=1),
                   pod("e-1", group="e", gpus=1, labels={"kai.scheduler/task-priority": "5"}),
                   pod("e-2", group="e", gpus=1, labels={"kai.scheduler/task-priority": "9"}))
    assert binds(kaisched.schedule(objs, now=NOW)) == {"default/e-2": "n1"}


def test_kubeflow_master_goes_first():
    objs = flatten(node("n1", 1), queue("q"), pod_group("e", "default", "q", 1),
                   pod("e-0", group="e", gpus=1),
                   pod("e-1", group="e", gpus=1, labels={"training.kubeflow.org/job-role": "master"}))
    assert binds(kaisched.schedule(objs, now=NOW)) == {"default/e-1": "n1"}


def test_nominated_node_wins_over_binpacking():
    nominated = pod("p", group="p", gpus=1)
    nominated["status"]["nominatedNodeName"] = "n2"
    result = run(node("n1", 8), node("n2", 8), queue("q"), running("r", "n1", gpus=4),
                 pod_group("p", "default", "q", 1), nominated)
    assert binds(result) == {"default/p": "n2"}


def test_queue_order_compares_siblings_at_every_level():
    # leaf 'a' has the highest priority, but its department loses to dept-b at the top level
    result = run(
        node("n1", 8),
        queue("dept-a", priority=100), queue("a", "dept-a", priority=300),
        queue("dept-b", priority=200), queue("b", "dept-b", priority=100),
        job("ja", 1, queue="a", gpus=8, created="2025-01-01T00:00:00Z"),
        job("jb", 1, queue="b", gpus=8, created="2025-01-01T01:00:00Z"),
    )
    assert binds(result) == {"default/jb-0": "n1"}


# --------------------------------------------------------------------------------- pod statuses
def test_bound_but_not_running_pods_hold_their_resources():
    result = run(node("n1", 8), queue("q"), pod_group("b", "default", "q", 1),
                 pod("b-0", group="b", gpus=6, node="n1", phase="Pending"), job("j", 1, gpus=4))
    assert result.binds == []
    assert status(result, "b").status == "Running"
    assert status(result, "j").reason == "PodSchedulingErrors"


def test_finished_pods_free_their_resources():
    result = run(node("n1", 8), queue("q"), pod_group("done", "default", "q", 1),
                 pod("done-0", group="done", gpus=8, node="n1", phase="Succeeded"), job("j", 1, gpus=8))
    assert binds(result) == {"default/j-0": "n1"}
    assert result.pod_group("default/done") is None  # a finished PodGroup gets no status


def test_gated_pods_make_the_job_not_ready():
    gated = job("gt", 2, gpus=1)
    gated[2]["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    result = run(node("n1", 8), queue("q"), gated)
    assert result.binds == []
    st = status(result, "gt")
    assert st.reason == "NotReady"
    assert st.message == "Job is not ready for scheduling. Waiting for 2 pods, currently 2 exist, 1 are gated"


def test_bare_pod_goes_to_the_default_queue():
    result = run(node("n1", 8), pod("bare", gpus=1))
    assert binds(result) == {"default/bare": "n1"}
    [group] = result.pod_groups
    assert group.queue == "default-queue"
    assert group.status == "Allocated"
    assert {q.name: q.parent for q in result.queues} == {"default-parent-queue": None,
                                                        "default-queue": "default-parent-queue"}


def test_init_containers_and_overhead_count_in_the_request():
    p = pod("p", group="p", gpus=1, cpu=1)
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "30"}}}]
    p["spec"]["overhead"] = {"cpu": "2"}
    result = run(node("a", 8, cpu=16), node("b", 8, cpu=32), queue("q"), pod_group("p", "default", "q", 1), p)
    assert binds(result) == {"default/p": "b"}  # needs max(1, 30) + 2 = 32 cores
    assert queue_status(result, "q").allocated["cpu"] == 32000


def test_limits_only_gpu_request_counts():
    p = pod("p", group="p", gpus=0)
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "4"}
    result = run(node("a", 2), node("b", 4), queue("q"), pod_group("p", "default", "q", 1), p)
    assert binds(result) == {"default/p": "b"}


# ----------------------------------------------------------------------------------------- subgroups
def _subgroup_job(mins: dict[str, int], pods: dict[str, int], gpus: int) -> list[dict]:
    pg = pod_group("sg", "default", "q", 1)
    pg["spec"]["subGroups"] = [{"name": n, "minMember": m} for n, m in mins.items()]
    out = [pg]
    for sg, n in pods.items():
        out += [pod(f"sg-{sg}{i}", group="sg", gpus=gpus, labels={"kai.scheduler/subgroup-name": sg})
                for i in range(n)]
    return out


def test_every_sub_group_must_reach_its_minimum():
    objs = _subgroup_job({"a": 2, "b": 1}, {"a": 2, "b": 1}, gpus=2)
    assert run(node("n1", 4), queue("q"), objs).binds == []
    assert len(run(node("n1", 6), queue("q"), objs).binds) == 3


def test_sub_group_gang_message():
    result = run(node("n1", 4), queue("q"), _subgroup_job({"a": 2, "b": 1}, {"a": 2, "b": 1}, gpus=2))
    st = status(result, "sg")
    assert st.reason == "PodSchedulingErrors"
    assert "while sub-group b requires 1 pods for gang scheduling" in st.message


# ------------------------------------------------------------------------------- suspected bugs
def test_gang_message_counts_pods_found_in_this_attempt():
    # minMember 3: one pod already runs, one more fits, the third does not
    result = run(node("n1", 8), node("n2", 4), queue("q"), pod_group("g", "default", "q", 3),
                 pod("g-0", group="g", gpus=4, node="n2"), pod("g-1", group="g", gpus=8),
                 pod("g-2", group="g", gpus=8))
    assert result.binds == []
    assert status(result, "g").message.startswith(
        "Resources were found for 1 pods while 3 are required for gang scheduling.")


def test_sub_groups_of_one_pod_each_get_the_per_pod_message():
    result = run(node("n1", 2), queue("q"), _subgroup_job({"a": 1, "b": 1}, {"a": 1, "b": 1}, gpus=2))
    assert result.binds == []
    assert status(result, "sg").message.startswith("Resources were not found for pod default/sg-b0 due to:")


def test_terminating_pod_group_is_not_explained_as_not_ready():
    result = run(node("n1", 8), queue("q"), running("old", "n1", gpus=8, deleting=True))
    assert status(result, "old").reason is None


def test_queue_memory_is_in_megabytes():
    # limit 2000 MB = 2e9 bytes: 1900M and 2G fit, 2Gi (2.147e9 bytes) does not
    for memory, fits in (("1900M", True), ("2G", True), ("2Gi", False)):
        result = run(node("n1", 8), queue("q", memory_limit=2000), job("j", 1, memory=memory))
        assert bool(result.binds) is fits, memory
    result = run(node("n1", 8), queue("q", memory_limit=2000), job("j", 1, memory="2Gi"))
    assert status(result, "j").message.startswith("q quota has reached the allowable limit of memory. Limit is 2 GB")
