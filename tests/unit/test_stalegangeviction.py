"""The stalegangeviction action (spec 4.4 stale definition, 4.13): the stale timestamp, the grace period
and the eviction of every active-allocated pod of a job that stays below its gang minimum."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import kaisched
from kaisched.actions.registry import ACTIONS
from kaisched.actions.stalegangeviction import StaleGangEvictionAction
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.session import Session, rfc3339
from kaisched.k8s.parse import parse_objects
from kaisched.model.snapshot import build_snapshot
from kaisched.model.status import TaskStatus
from kaisched.plugins.registry import build_plugins
from tests.unit.builders import NOW, flatten, node, pod, pod_group, queue, status

STALE = "kai.scheduler/stale-podgroup-timestamp"
SUBGROUP = "kai.scheduler/subgroup-name"


def config(grace: str = "60s", actions: str = "stalegangeviction") -> dict[str, Any]:
    return {"actions": actions, "params": {"default-staleness-grace-period": grace}}


def run(*parts: object, grace: str = "60s") -> kaisched.CycleResult:
    return kaisched.schedule(flatten(*parts), config=config(grace), now=NOW)  # type: ignore[arg-type]


def gang(name: str, states: list[str], *, min_member: int | None = None, stale_for: float | None = None,
         node_name: str = "n1") -> list[dict[str, Any]]:
    """A PodGroup with one pod per entry of ``states``: Running, Pending, Releasing, Failed or Succeeded."""
    pg = pod_group(name, min_member=len(states) if min_member is None else min_member)
    if stale_for is not None:
        pg["metadata"]["annotations"] = {STALE: rfc3339(NOW - timedelta(seconds=stale_for))}
    out = [pg]
    for i, state in enumerate(states):
        if state == "Pending":
            out.append(pod(f"{name}-{i}", group=name))
        elif state == "Releasing":
            out.append(pod(f"{name}-{i}", group=name, node=node_name, deleting=True))
        else:
            out.append(pod(f"{name}-{i}", group=name, node=node_name, phase=state))
    return out


def cluster() -> list[dict[str, Any]]:
    return [node("n1", 8), queue("q")]


def evicted(result: kaisched.CycleResult) -> list[str]:
    return [e.pod for e in result.evictions]


def message(minimum: int, pod_name: str) -> str:
    return f"Workload doesn't meet the minimum required number of pods ({minimum}), evicting remaining pod: " \
           f"default/{pod_name}"


# ------------------------------------------------------------------------------------------ registry
def test_action_is_registered_and_runs_by_default() -> None:
    assert ACTIONS["stalegangeviction"] is StaleGangEvictionAction
    assert "stalegangeviction" in kaisched.ACTIONS
    # KAI's default action list now includes it, after allocate: a long-stale gang whose missing pod
    # does not fit (the node has 1 CPU) is evicted without naming the action
    objs = flatten(node("n1", 8, cpu=1), queue("q"), gang("j", ["Running", "Pending"], stale_for=120))
    result = kaisched.schedule(objs, now=NOW)
    assert result.binds == []
    assert evicted(result) == ["default/j-0"]
    # when allocate completes the gang first, the job is no longer stale
    healed = kaisched.schedule(flatten(cluster(), gang("j", ["Running", "Pending"], stale_for=120)), now=NOW)
    assert [b.pod for b in healed.binds] == ["default/j-1"]
    assert healed.evictions == []
    assert status(healed, "j").stale_since is None


# ------------------------------------------------------------------------------------- grace period
def test_zero_grace_evicts_a_newly_stale_gang_at_once() -> None:
    result = run(cluster(), gang("j", ["Running", "Running", "Pending"]), grace="0s")
    assert evicted(result) == ["default/j-0", "default/j-1"]
    for e in result.evictions:
        assert e.action == "stalegangeviction"
        assert e.preemptor == ""
        assert e.message == message(3, e.pod.split("/")[1])
    assert result.to_dict()["evictions"][0]["preemptor"] is None
    assert status(result, "j").stale_since == rfc3339(NOW)


def test_grace_not_elapsed_records_the_stale_time_without_evicting() -> None:
    result = run(cluster(), gang("j", ["Running", "Pending"]))
    assert result.evictions == []
    assert status(result, "j").stale_since == "2025-01-01T12:00:00Z"
    assert result.to_dict()["podGroups"][0]["staleSinceTimestamp"] == "2025-01-01T12:00:00Z"


def test_grace_not_elapsed_since_an_earlier_stale_time_keeps_it() -> None:
    result = run(cluster(), gang("j", ["Running", "Pending"], stale_for=59))
    assert result.evictions == []
    assert status(result, "j").stale_since == rfc3339(NOW - timedelta(seconds=59))


@pytest.mark.parametrize("stale_for", [60, 61, 3600])
def test_grace_elapsed_evicts_every_active_allocated_pod(stale_for: int) -> None:
    result = run(cluster(), gang("j", ["Running", "Running", "Pending", "Failed"], stale_for=stale_for))
    assert evicted(result) == ["default/j-0", "default/j-1"]
    assert [e.message for e in result.evictions] == [message(4, "j-0"), message(4, "j-1")]
    assert status(result, "j").stale_since == rfc3339(NOW - timedelta(seconds=stale_for))  # kept


def test_negative_grace_never_evicts() -> None:
    result = run(cluster(), gang("j", ["Running", "Pending"], stale_for=10 * 24 * 3600), grace="-1s")
    assert result.evictions == []
    assert status(result, "j").stale_since == rfc3339(NOW - timedelta(days=10))
    fresh = run(cluster(), gang("j", ["Running", "Pending"]), grace="-1s")
    assert fresh.evictions == []
    assert status(fresh, "j").stale_since == rfc3339(NOW)


def test_only_stale_jobs_are_evicted() -> None:
    result = run(cluster(), gang("stale", ["Running", "Pending"], stale_for=120),
                 gang("ok", ["Running", "Running"]), gang("elastic", ["Running", "Pending"], min_member=1))
    assert evicted(result) == ["default/stale-0"]
    assert status(result, "ok").stale_since is None
    assert status(result, "elastic").stale_since is None


# --------------------------------------------------------------------------------- stale definition
def test_a_job_that_is_not_stale_loses_its_stale_time() -> None:
    result = run(cluster(), gang("j", ["Running", "Running"], stale_for=120))
    assert result.evictions == []
    assert status(result, "j").stale_since is None


def test_a_job_with_a_succeeded_pod_is_not_stale() -> None:
    result = run(cluster(), gang("j", ["Running", "Succeeded", "Pending"], stale_for=120), grace="0s")
    assert result.evictions == []
    assert status(result, "j").stale_since is None


def test_a_job_without_active_pods_is_not_stale() -> None:
    result = run(cluster(), gang("j", ["Pending", "Pending"], stale_for=120), grace="0s")
    assert result.evictions == []
    assert status(result, "j").stale_since is None
    failed = run(cluster(), gang("f", ["Failed", "Pending"]), grace="0s")
    assert failed.evictions == []
    assert status(failed, "f").stale_since is None


def test_releasing_pods_count_as_active_used() -> None:
    # 1 running + 1 releasing = 2 active-used pods: the gang of 2 is satisfied, not stale
    result = run(cluster(), gang("j", ["Running", "Releasing"], stale_for=120), grace="0s")
    assert result.evictions == []
    assert status(result, "j").stale_since is None
    # a job whose only active pod is releasing is stale, but has nothing active-allocated to evict
    only = run(cluster(), gang("r", ["Releasing", "Pending"]), grace="0s")
    assert only.evictions == []
    assert status(only, "r").stale_since == rfc3339(NOW)


def test_releasing_pods_are_not_evicted_again() -> None:
    result = run(cluster(), gang("j", ["Running", "Releasing", "Pending"], stale_for=120))
    assert evicted(result) == ["default/j-0"]


# ------------------------------------------------------------------------------------------ sub-groups
def subgroup_job(pods: dict[str, list[str]], mins: dict[str, int], *, stale_for: float | None = None
                 ) -> list[dict[str, Any]]:
    pg = pod_group("sg", min_member=sum(mins.values()))
    pg["spec"]["subGroups"] = [{"name": n, "minMember": m} for n, m in mins.items()]
    if stale_for is not None:
        pg["metadata"]["annotations"] = {STALE: rfc3339(NOW - timedelta(seconds=stale_for))}
    out = [pg]
    for sg, states in pods.items():
        for i, state in enumerate(states):
            name = f"sg-{sg}{i}"
            labels = {SUBGROUP: sg}
            if state == "Pending":
                out.append(pod(name, group="sg", labels=labels))
            else:
                out.append(pod(name, group="sg", labels=labels, node="n1", phase=state))
    return out


def test_a_sub_group_below_its_minimum_makes_the_job_stale_and_the_message_names_it() -> None:
    objs = subgroup_job({"a": ["Running", "Running", "Running"], "b": ["Failed"]}, {"a": 2, "b": 1}, stale_for=61)
    result = run(cluster(), objs)
    assert evicted(result) == ["default/sg-a0", "default/sg-a1", "default/sg-a2"]
    assert result.evictions[0].message == (
        "Workload doesn't meet the minimum required number of pods (2) in sub-group a, evicting remaining pod: "
        "default/sg-a0"
    )


def test_sub_groups_all_at_their_minimum_are_not_stale() -> None:
    objs = subgroup_job({"a": ["Running", "Running"], "b": ["Running", "Pending"]}, {"a": 2, "b": 1}, stale_for=61)
    result = run(cluster(), objs)
    assert result.evictions == []
    assert status(result, "sg").stale_since is None


# ------------------------------------------------------------------------------------- in the session
def open_session(*objs: object, grace: str = "60s") -> Session:
    cfg = resolve_config(config(grace))
    snap = build_snapshot(parse_objects(flatten(*objs)), NOW)  # type: ignore[arg-type]
    ssn = Session(snap, cfg, build_plugins(cfg.plugins))
    ssn.open()
    return ssn


def test_evicted_pods_are_releasing_in_the_session_and_free_nothing_yet() -> None:
    ssn = open_session(node("n1", 8), queue("q"), gang("j", ["Running", "Pending"], stale_for=61),
                       pod_group("other", min_member=1), pod("other-0", group="other", node="n1"))
    job = ssn.jobs["default/j"]
    n1 = ssn.nodes.by_name["n1"]
    releasing_before = ssn.nodes.releasing[:, n1].copy()
    StaleGangEvictionAction().execute(ssn)
    assert [t.status for t in job.tasks] == [TaskStatus.RELEASING, TaskStatus.PENDING]
    assert ssn.jobs["default/other"].tasks[0].status is TaskStatus.RUNNING
    assert (ssn.nodes.releasing[:, n1] > releasing_before).any()  # the pod's resources are being released
    assert [e.pod for e in ssn.evictions] == ["default/j-0"]
    result = ssn.close()
    assert status(result, "j").stale_since == rfc3339(NOW - timedelta(seconds=61))


def test_stale_time_is_set_on_the_job_model() -> None:
    ssn = open_session(node("n1", 8), queue("q"), gang("j", ["Running", "Pending"]),
                       gang("ok", ["Running"], stale_for=5))
    ok, stale = ssn.jobs["default/ok"], ssn.jobs["default/j"]
    assert (ok.stale_since, stale.stale_since) == (NOW - timedelta(seconds=5), None)
    StaleGangEvictionAction().execute(ssn)
    assert (ok.stale_since, stale.stale_since) == (None, NOW)
    assert ssn.evictions == []
