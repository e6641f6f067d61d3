"""``kaisched run``'s loop (KubeScheduler) against the fake API server: binds, grouping, GPU sharing, reclaim,
conflicts, malformed objects, API-server restarts, and a restart of the scheduler itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kaisched.framework.config import SchedulerConfig
from kaisched.kube.client import KubeClient
from kaisched.kube.runner import KubeScheduler, RunOptions
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer

NS = "team"


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def queue(name: str, gpu_quota: float, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                          "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod(name: str, q: str, gpus: float = 1, *, group: str | None = None, node_name: str = "",
        phase: str = "Pending", fraction: str | None = None, priority_class: str | None = None) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if group:
        annotations["pod-group-name"] = group
    if fraction:
        annotations["gpu-fraction"] = fraction
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus and not fraction:
        resources["requests"]["nvidia.com/gpu"] = str(int(gpus))
        resources["limits"] = {"nvidia.com/gpu": str(int(gpus))}
    labels = {"kai.scheduler/queue": q}
    if priority_class:
        labels["priorityClassName"] = priority_class
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
            "spec": spec, "status": {"phase": phase}}


def pod_group(name: str, q: str, min_member: int, priority_class: str = "train") -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"queue": q, "minMember": min_member, "priorityClassName": priority_class}}


@pytest.fixture
def make_scheduler(server: FakeApiServer) -> Iterator[Any]:
    made: list[tuple[KubeScheduler, KubeClient]] = []

    def make(**options: Any) -> KubeScheduler:
        api = KubeClient.from_url(server.url, timeout=5.0, trust_env=False)
        options.setdefault("listen_port", None)
        options.setdefault("schedule_period", 0.05)
        sched = KubeScheduler(api, SchedulerConfig(), RunOptions(**options))
        made.append((sched, api))
        sched.start()
        assert sched.wait_synced(10.0)
        return sched

    yield make
    for sched, api in made:
        sched.close()
        api.close()


def get_pod(server: FakeApiServer, name: str) -> dict[str, Any]:
    obj = server.get_object("v1", "Pod", name, NS)
    assert obj is not None, name
    return obj


def events(server: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in server.list_objects("v1", "Event") if e.get("reason") == reason]


def cycle(sched: KubeScheduler) -> None:
    """One cycle on caches that have caught up with the API, and its writes finished."""
    sched.run_cycle()
    assert sched.writer is not None and sched.writer.drain(10.0)


def settle(sched: KubeScheduler, server: FakeApiServer) -> None:
    """Wait until the pod informer has seen every change the server has."""
    assert wait_until(lambda: sched.informers["Pod"].resource_version is not None and int(
        sched.informers["Pod"].resource_version or 0) >= int(server.resource_version), timeout=5.0)


def base_cluster(server: FakeApiServer, nodes: int = 2) -> None:
    for i in range(nodes):
        server.seed(node(f"node-{i}"))
    server.seed(queue("root", 16))
    server.seed(queue("team-a", 8, "root"))
    server.seed(queue("team-b", 8, "root"))


def test_a_gang_is_bound_with_events_and_status(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server)
    server.seed(pod_group("gang", "team-a", 4))
    for i in range(4):
        server.seed(pod(f"gang-{i}", "team-a", 2, group="gang"))
    sched = make_scheduler()
    cycle(sched)
    nodes = {get_pod(server, f"gang-{i}")["spec"].get("nodeName") for i in range(4)}
    assert nodes <= {"node-0", "node-1"} and "" not in nodes and None not in nodes
    assert len(server.requests_matching("POST", r"/pods/gang-\d/binding")) == 4
    scheduled = events(server, "Scheduled")
    assert {e["involvedObject"]["name"] for e in scheduled} == {f"gang-{i}" for i in range(4)}
    assert all(e["source"]["component"] == "kai-scheduler" for e in scheduled)
    # the next cycle neither binds again nor repeats the events
    settle(sched, server)
    cycle(sched)
    assert len(server.requests_matching("POST", r"/binding")) == 4
    assert len(events(server, "Scheduled")) == 4


def test_a_gang_too_big_stays_pending_and_says_why(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.seed(pod_group("big", "team-a", 3))
    for i in range(3):
        server.seed(pod(f"big-{i}", "team-a", 4, group="big"))
    sched = make_scheduler()
    cycle(sched)
    assert not server.requests_matching("POST", r"/binding")
    pg = server.get_object("scheduling.run.ai/v2alpha2", "PodGroup", "big", NS)
    assert pg is not None
    conditions = pg.get("status", {}).get("schedulingConditions", [])
    assert conditions and conditions[0]["type"] == "UnschedulableOnNodePool"  # KAI's condition type
    assert events(server, "Unschedulable")
    cond = {c["type"]: c for c in get_pod(server, "big-0").get("status", {}).get("conditions", [])}
    assert cond["PodScheduled"]["status"] == "False"


def test_pods_without_a_podgroup_get_one_created_and_are_scheduled(server: FakeApiServer,
                                                                   make_scheduler: Any) -> None:
    base_cluster(server)
    server.seed(pod("solo", "team-b", 1))
    sched = make_scheduler()
    cycle(sched)
    assert get_pod(server, "solo")["spec"].get("nodeName")
    groups = server.list_objects("scheduling.run.ai/v2alpha2", "PodGroup", NS)
    assert len(groups) == 1 and groups[0]["metadata"]["name"].startswith("pg-solo-")
    assert groups[0]["spec"]["queue"] == "team-b"
    annotated = get_pod(server, "solo")["metadata"]["annotations"]
    assert annotated["pod-group-name"] == groups[0]["metadata"]["name"]


def test_a_fractional_pod_is_labelled_with_its_gpu_group_before_the_bind(server: FakeApiServer,
                                                                         make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.seed(pod_group("frac", "team-a", 1))
    server.seed(pod("frac-0", "team-a", 0, group="frac", fraction="0.5"))
    sched = make_scheduler()
    cycle(sched)
    obj = get_pod(server, "frac-0")
    assert obj["spec"].get("nodeName") == "node-0"
    assert obj["metadata"]["labels"].get("runai-gpu-group")
    # the label patch came before the binding
    paths = [(r.method, r.path) for r in server.requests if "frac-0" in r.path]
    patch = next(i for i, (m, p) in enumerate(paths) if m == "PATCH" and p.endswith("/pods/frac-0"))
    bind = next(i for i, (m, p) in enumerate(paths) if m == "POST" and p.endswith("/binding"))
    assert patch < bind


def test_reclaim_evicts_the_over_quota_queue_and_binds_after_the_kubelet_deletes(server: FakeApiServer,
                                                                                make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.seed(queue("root", 8))
    server.seed(queue("team-a", 4, "root"))
    server.seed(queue("team-b", 4, "root"))
    for i in range(8):  # team-b runs on all 8 GPUs, 4 over its quota
        server.seed(pod_group(f"b-{i}", "team-b", 1))
        server.seed(pod(f"b-{i}", "team-b", 1, group=f"b-{i}", node_name="node-0", phase="Running"))
    server.seed(pod_group("a", "team-a", 1))
    server.seed(pod("a-0", "team-a", 2, group="a"))
    sched = make_scheduler()
    cycle(sched)
    evictions = server.requests_matching("POST", r"/eviction")
    assert len(evictions) == 2
    evicted = [p["metadata"]["name"] for p in server.list_objects("v1", "Pod", NS) if
               p["metadata"].get("deletionTimestamp")]
    assert len(evicted) == 2 and all(n.startswith("b-") for n in evicted)
    assert len(events(server, "Evict")) == 2
    assert not get_pod(server, "a-0")["spec"].get("nodeName")  # pipelined: waits for the GPUs
    # nothing is evicted twice while the pods terminate
    settle(sched, server)
    cycle(sched)
    assert len(server.requests_matching("POST", r"/eviction")) == 2
    for name in evicted:  # the kubelet finishes them
        server.delete_object("v1", "Pod", name, NS)
    settle(sched, server)
    cycle(sched)
    assert get_pod(server, "a-0")["spec"].get("nodeName") == "node-0"


def test_a_bind_conflict_is_reported_not_retried_and_the_pod_is_free_again(server: FakeApiServer,
                                                                           make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.seed(pod_group("c", "team-a", 1))
    server.seed(pod("c-0", "team-a", 1, group="c"))
    sched = make_scheduler()
    server.fail_next("POST", r"/pods/c-0/binding", 409, reason="Conflict", message="pod c-0 is already bound")
    cycle(sched)
    assert len(server.requests_matching("POST", r"/pods/c-0/binding")) == 1
    assert events(server, "FailedBinding")
    assert sched.writer is not None and "team/c-0" not in sched.writer.in_flight_binds()
    settle(sched, server)
    cycle(sched)  # the pod is still unbound in the API: scheduled again
    assert get_pod(server, "c-0")["spec"].get("nodeName") == "node-0"


def test_a_malformed_podgroup_is_reported_on_the_object_and_the_rest_is_scheduled(server: FakeApiServer,
                                                                                  make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    bad = pod_group("bad", "team-a", 1)
    bad["spec"]["minMember"] = "lots"
    server.seed(bad)
    server.seed(pod("bad-0", "team-a", 1, group="bad"))
    server.seed(pod_group("good", "team-a", 1))
    server.seed(pod("good-0", "team-a", 1, group="good"))
    sched = make_scheduler()
    cycle(sched)
    assert get_pod(server, "good-0")["spec"].get("nodeName") == "node-0"
    warnings = [e for e in events(server, "InvalidObject") if e["involvedObject"]["kind"] == "PodGroup"]
    assert len(warnings) == 1 and "minMember" in warnings[0]["message"]
    assert not get_pod(server, "bad-0")["spec"].get("nodeName")
    settle(sched, server)
    cycle(sched)  # reported once, not every cycle
    assert len([e for e in events(server, "InvalidObject") if e["involvedObject"]["kind"] == "PodGroup"]) == 1


def test_a_queue_deleted_while_its_jobs_run(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.seed(pod_group("r", "team-a", 1))
    server.seed(pod("r-0", "team-a", 1, group="r", node_name="node-0", phase="Running"))
    server.seed(pod_group("p", "team-a", 1))
    server.seed(pod("p-0", "team-a", 1, group="p"))
    sched = make_scheduler()
    server.delete_object("scheduling.run.ai/v2", "Queue", "team-a")
    assert wait_until(lambda: sched.lookup("Queue", "team-a") is None)
    cycle(sched)
    assert not get_pod(server, "p-0")["spec"].get("nodeName")  # nothing new is placed for a missing queue
    assert get_pod(server, "r-0")["spec"]["nodeName"] == "node-0"  # running work is left alone
    pg = server.get_object("scheduling.run.ai/v2alpha2", "PodGroup", "p", NS)
    assert pg is not None
    conditions = pg.get("status", {}).get("schedulingConditions", [])
    assert any("Queue 'team-a' does not exist" in c.get("message", "") for c in conditions), conditions


def test_the_api_server_restarting_and_watches_expiring(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    sched = make_scheduler()
    server.stop()
    server.start()  # a restart: old resourceVersions are gone (410 on resume)
    server.seed(pod_group("late", "team-a", 1))
    server.seed(pod("late-0", "team-a", 1, group="late"))
    assert wait_until(lambda: sched.lookup("Pod", "team/late-0") is not None and sched.lookup(
        "PodGroup", "team/late") is not None, timeout=10.0)
    server.expire_watches()
    server.seed(pod_group("later", "team-a", 1))
    server.seed(pod("later-0", "team-a", 1, group="later"))
    assert wait_until(lambda: sched.lookup("Pod", "team/later-0") is not None and sched.lookup(
        "PodGroup", "team/later") is not None, timeout=10.0)
    assert sched.informers["Pod"].relists >= 1
    cycle(sched)
    assert get_pod(server, "late-0")["spec"].get("nodeName") == "node-0"
    assert get_pod(server, "later-0")["spec"].get("nodeName") == "node-0"


def test_a_restarted_scheduler_never_binds_twice(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    for i in range(3):
        server.seed(pod_group(f"j{i}", "team-a", 1))
        server.seed(pod(f"j{i}-0", "team-a", 2, group=f"j{i}"))
    first = make_scheduler()
    cycle(first)
    first.close()
    assert len(server.requests_matching("POST", r"/binding")) == 3
    server.seed(pod_group("j3", "team-a", 1))
    server.seed(pod("j3-0", "team-a", 2, group="j3"))
    second = make_scheduler()
    cycle(second)
    binds = server.requests_matching("POST", r"/binding")
    assert len(binds) == 4 and binds[-1].path.endswith("/pods/j3-0/binding")


def test_run_loops_until_stopped_and_leads_with_a_lease(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server, nodes=1)
    server.create_namespace = None  # the fake does not require namespaces
    server.seed(pod_group("l", "team-a", 1))
    server.seed(pod("l-0", "team-a", 1, group="l"))
    sched = make_scheduler(leader_elect=True, lease_namespace="kai-scheduler", identity="one", lease_duration=2.0,
                           renew_deadline=1.5, retry_period=0.2, max_cycles=3)
    assert sched.run() == 0
    assert sched.cycles == 3
    lease = server.get_object("coordination.k8s.io/v1", "Lease", "kai-scheduler", "kai-scheduler")
    assert lease is not None and lease["spec"]["holderIdentity"] == "one"
    assert get_pod(server, "l-0")["spec"].get("nodeName") == "node-0"


def test_an_unchanged_cluster_is_not_scheduled_again(server: FakeApiServer, make_scheduler: Any) -> None:
    """Once the scheduler's own status writes are back in its caches, a cycle where nothing changed is answered
    by the cycle memo (same decisions, no new writes); a change runs the next cycle in full."""
    base_cluster(server, nodes=1)
    server.seed(pod_group("big", "team-a", 3))
    for i in range(3):
        server.seed(pod(f"big-{i}", "team-a", 4, group="big"))
    sched = make_scheduler()
    cycle(sched)  # full: writes the PodGroup's conditions, the pods' PodScheduled, events
    settle(sched, server)
    cycle(sched)  # full: its own writes changed the objects
    writes = sum(len(server.requests_matching(m)) for m in ("PUT", "PATCH", "POST"))
    assert writes > 0
    settle(sched, server)
    hits = sched.memo.hits
    for _ in range(3):
        cycle(sched)
    assert sched.memo.hits == hits + 3
    assert sum(len(server.requests_matching(m)) for m in ("PUT", "PATCH", "POST")) == writes  # nothing new to say
    server.seed(pod("solo", "team-b", 1, group=None))  # a change: the next cycle runs and binds it
    settle(sched, server)
    cycle(sched)
    assert sched.memo.hits == hits + 3
    assert get_pod(server, "solo")["spec"].get("nodeName") == "node-0"


def test_pods_that_arrive_between_cycles_get_their_pod_groups_before_the_next_cycle(
        server: FakeApiServer, make_scheduler: Any) -> None:
    """KAI's pod-grouper creates a pod's PodGroup as the pod arrives: kaisched run's passes between cycles do."""
    base_cluster(server)
    server.seed(pod("user-made", "team-a", 1, group="mine"))  # names a PodGroup of its own: never the grouper's
    sched = make_scheduler()
    assert sched.group_arrivals() == 0  # (no pod without a PodGroup)
    server.seed(pod("early", "team-b", 1))
    settle(sched, server)
    assert sched.group_arrivals() == 1
    assert sched.writer is not None and sched.writer.drain(10.0)
    groups = server.list_objects("scheduling.run.ai/v2alpha2", "PodGroup", NS)
    assert [g["metadata"]["name"][:9] for g in groups] == ["pg-early-"] and groups[0]["spec"]["queue"] == "team-b"
    assert not get_pod(server, "early")["spec"].get("nodeName")  # grouped, not scheduled: that is the cycle's
    settle(sched, server)
    assert sched.group_arrivals() == 0  # taken once: a pending pod is not grouped again by every pass
    server.seed(pod("late", "team-b", 1))
    settle(sched, server)
    assert sched.group_arrivals() == 1
    assert sched.writer.drain(10.0)
    cycle(sched)  # the cycle binds both, creating no PodGroup again, and annotates them with the bind
    creations = server.count("POST", r"/podgroups$")
    assert creations == 2 and get_pod(server, "early")["spec"].get("nodeName")
    for name in ("early", "late"):
        assert get_pod(server, name)["metadata"]["annotations"]["pod-group-name"].startswith(f"pg-{name}-")


def test_the_passes_between_cycles_run_while_kaisched_run_waits(server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(server)
    sched = make_scheduler(schedule_period=30.0, group_period=0.05)
    runner = threading.Thread(target=sched.run, daemon=True)
    runner.start()
    try:
        assert wait_until(lambda: sched.cycles == 1, timeout=10)
        server.seed(pod("between", "team-a", 1))
        # long before the next cycle (30 s away) its PodGroup exists
        assert wait_until(lambda: len(server.list_objects("scheduling.run.ai/v2alpha2", "PodGroup", NS)) == 1,
                          timeout=5)
        assert sched.cycles == 1
    finally:
        sched.stop()
        runner.join(10)
    assert not runner.is_alive()
