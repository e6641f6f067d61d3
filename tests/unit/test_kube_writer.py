"""The cycle's writes to the API server: operations (exact requests) and the ClusterWriter (concurrency,
coalescing, retries, failure reports), against a recording fake of the Api seam."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kaisched.framework.result import CycleResult, Eviction, Placement, PodGroupStatus, QueueStatus
from kaisched.kube.api import ApiError, Response
from kaisched.kube.operations import (
    Bind,
    Event,
    Evict,
    ObjectRef,
    OperationPlanner,
    PlannerOptions,
    PodCondition,
    PodGroupAnnotations,
    PodGroupStatusPatch,
    PodMetadataPatch,
    QueueStatusPatch,
    format_quantity,
    pod_replaced,
    pods_by_group,
    policy_v1_missing,
    queue_status_patch,
)
from kaisched.kube.writer import ClusterWriter, Failure, WriterClosed

# ------------------------------------------------------------------------------------------ test doubles
STATUS_SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
MERGE = "application/merge-patch+json"
JSON_CT = "application/json"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any
    content_type: str


Fault = ApiError | Callable[[], None]


class RecordingApi:
    """Records every request. ``fail(method, path, *faults)`` queues faults for the next matching requests:
    an ApiError is raised; a callable is called first (to block until a test releases it, or to raise)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._faults: dict[tuple[str, str], list[Fault]] = {}
        self._lock = threading.Lock()

    def fail(self, method: str, path: str, *faults: Fault) -> None:
        with self._lock:
            self._faults.setdefault((method, path), []).extend(faults)

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> Response:
        with self._lock:
            self.calls.append(Call(method, path, body, content_type))
            queue = self._faults.get((method, path))
            fault = queue.pop(0) if queue else None
        if isinstance(fault, ApiError):
            raise fault
        if fault is not None:
            fault()
        if path.endswith("/binding") or path.endswith("/eviction"):
            return Response(201, dict(STATUS_SUCCESS))  # the server answers a Status, never a Binding
        return Response(200, body)

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[Any]:
        raise NotImplementedError("the writer never watches")

    def find(self, method: str, path: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method and c.path == path]

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            out = [c.body for c in self.calls if c.method == "POST" and c.path.endswith("/events")]
        return [e for e in out if reason is None or e["reason"] == reason]


class Gate:
    """A fault that blocks the request until released (and says when it started)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(10), "test never released the gate"


def pod(key: str, uid: str = "", *, node: str = "", phase: str = "Pending", labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, conditions: list[dict[str, Any]] | None = None,
        deleting: bool = False, created: str = "2026-01-01T00:00:00Z", gates: bool = False,
        scheduler: str = "kai-scheduler", owner: dict[str, Any] | None = None,
        containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ns, name = key.split("/")
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "creationTimestamp": created,
                            "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"schedulerName": scheduler,
                            "containers": containers or [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = [{"name": "wait"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase, "conditions": list(conditions or [])}}


def pod_group(key: str, uid: str = "", *, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None, status: dict[str, Any] | None = None,
              spec: dict[str, Any] | None = None) -> dict[str, Any]:
    ns, name = key.split("/")
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": {"minMember": 1, "queue": "q", **(spec or {})}, "status": dict(status or {})}


def queue(name: str, uid: str = "", *, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "uid": uid or f"uid-{name}"}, "spec": {"resources": {}},
            "status": dict(status or {})}


class Cache:
    """A tiny object cache with the ``lookup(kind, key)`` signature."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        self.objects[(obj["kind"], key)] = obj

    def get(self, kind: str, key: str) -> dict[str, Any]:
        return self.objects[(kind, key)]

    def delete(self, kind: str, key: str) -> None:
        self.objects.pop((kind, key), None)

    def lookup(self, kind: str, key: str) -> dict[str, Any] | None:
        return self.objects.get((kind, key))


NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
NOW_S = "2026-01-01T00:05:00Z"


@pytest.fixture
def api() -> RecordingApi:
    return RecordingApi()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def failures() -> list[Failure]:
    return []


@pytest.fixture
def writer(api: RecordingApi, sleeps: list[float], failures: list[Failure]) -> Iterator[ClusterWriter]:
    w = ClusterWriter(api, workers=4, sleep=sleeps.append, now=lambda: NOW, on_failure=failures.append)
    yield w
    w.close(timeout=5)


def run(writer: ClusterWriter, ops: list[Any]) -> None:
    writer.submit(ops)
    assert writer.drain(5), "writer did not drain"


def err(status: int, reason: str = "", message: str = "", body: Any = None) -> ApiError:
    return ApiError(status, reason, message, body)


def pending_group(name: str = "ns/pg1", reason: str = "PodSchedulingErrors",
                  message: str = "no nodes with enough resources were found: 2 node(s) didn't have enough "
                                 "resources: GPUs.", status: str = "Pending", **kw: Any) -> PodGroupStatus:
    return PodGroupStatus(name, "team-a", status, reason, message, **kw)


# ---------------------------------------------------------------------------------------------- binds
def test_bind_of_a_whole_gpu_pod_is_one_binding_post_answered_by_a_status(api, writer, failures):
    cache = Cache(pod("ns/p1", "u1"), pod_group("ns/pg1", labels={"kai.scheduler/node-pool": "pool-a"}))
    ops = OperationPlanner().plan(CycleResult(binds=[Placement("ns/p1", "node-1")]), cache.lookup, NOW,
                                  {"ns/pg1": ["ns/p1"]})
    assert [type(op) for op in ops] == [Bind]
    assert [(type(e), e.reason) for e in ops[0].then] == [(Event, "Scheduled")]  # recorded once bound
    run(writer, ops)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1", "namespace": "ns", "uid": "u1"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}  # the uid: a precondition
    assert api.calls[0] == Call("POST", "/api/v1/namespaces/ns/pods/p1/binding", binding, JSON_CT)
    assert len(api.find("POST", "/api/v1/namespaces/ns/pods/p1/binding")) == 1
    (event,) = api.events("Scheduled")
    assert event["message"] == "Successfully assigned pod ns/p1 to node node-1 at node-pool pool-a"
    assert event["type"] == "Normal"
    assert failures == [] and writer.failures == 0 and writer.completed == 2


def test_bind_of_a_fractional_pod_labels_and_annotates_it_before_the_binding(api, writer):
    cache = Cache(pod("ns/p2", "u2"))
    ops = OperationPlanner().plan(CycleResult(binds=[Placement("ns/p2", "node-1", ("gpu-group-a",))]),
                                  cache.lookup, NOW)
    run(writer, [op for op in ops if isinstance(op, Bind)])
    assert [(c.method, c.path) for c in api.calls] == [
        ("PATCH", "/api/v1/namespaces/ns/pods/p2"), ("POST", "/api/v1/namespaces/ns/pods/p2/binding"),
        ("POST", "/api/v1/namespaces/ns/events")]
    assert api.calls[0].body == {"metadata": {"labels": {"runai-gpu-group": "gpu-group-a"},
                                              "annotations": {"received-resource-type": "Fraction"}, "uid": "u2"}}
    assert api.calls[0].content_type == MERGE
    assert api.calls[1].body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-1"}


def test_multi_device_fraction_gets_one_label_per_gpu_group_and_existing_metadata_is_not_rewritten():
    cache = Cache(pod("ns/p3", labels={"runai-gpu-group/g1": "g1"}))
    (bind,) = [op for op in OperationPlanner().plan(
        CycleResult(binds=[Placement("ns/p3", "n", ("g1", "g2"))]), cache.lookup, NOW) if isinstance(op, Bind)]
    assert bind.requests()[0].body == {"metadata": {"labels": {"runai-gpu-group/g2": "g2"},
                                                    "annotations": {"received-resource-type": "Fraction"},
                                                    "uid": "uid-p3"}}


def test_mig_pod_is_annotated_mig_instance_and_shard_label_is_added():
    mig = [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]
    cache = Cache(pod("ns/p4", containers=mig))
    planner = OperationPlanner(PlannerOptions(node_pool="pool-b"))
    (bind,) = [op for op in planner.plan(CycleResult(binds=[Placement("ns/p4", "n")]), cache.lookup, NOW)
               if isinstance(op, Bind)]
    assert bind.requests()[0].body == {"metadata": {"labels": {"kai.scheduler/node-pool": "pool-b"},
                                                    "annotations": {"received-resource-type": "MigInstance"},
                                                    "uid": "uid-p4"}}


def test_bind_retried_after_429_then_succeeds(api, writer, sleeps, failures):
    bind_path = "/api/v1/namespaces/ns/pods/p1/binding"
    api.fail("POST", bind_path, err(429, "TooManyRequests", "slow down"))
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert len(api.find("POST", bind_path)) == 2
    assert sleeps == [0.5]
    assert failures == [] and writer.in_flight_binds() == {"ns/p1": "node-1"}


def test_bind_gives_up_after_repeated_500_and_reports_it_like_kai(api, writer, sleeps, failures):
    bind_path = "/api/v1/namespaces/ns/pods/p1/binding"
    api.fail("POST", bind_path, *[err(500, "InternalError", "boom")] * 5)
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert len(api.find("POST", bind_path)) == 5
    assert sleeps == [0.5, 1.0, 2.0, 4.0]
    (failure,) = failures
    assert failure.attempts == 5 and failure.error.status == 500 and failure.step == 0
    message = "Failed to bind pod ns/p1 to node node-1. 500 InternalError: boom"
    (event,) = api.events("FailedBinding")
    assert event["type"] == "Warning" and event["message"] == message
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "ns",
                                       "uid": "u1"}
    (status,) = api.find("PATCH", "/api/v1/namespaces/ns/pods/p1/status")
    assert status.content_type == "application/strategic-merge-patch+json"
    assert status.body == {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "BindingError", "message": message,
        "lastProbeTime": None, "lastTransitionTime": NOW_S}]}}
    assert writer.in_flight_binds() == {}  # the next cycle may place the pod again


def test_bind_conflict_is_reported_not_retried(api, writer, sleeps, failures):
    bind_path = "/api/v1/namespaces/ns/pods/p1/binding"
    api.fail("POST", bind_path, err(409, "Conflict", 'pod p1 is already assigned to node "node-9"'))
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert len(api.find("POST", bind_path)) == 1 and sleeps == []
    assert [f.error.status for f in failures] == [409]
    assert len(api.events("FailedBinding")) == 1
    assert api.find("PATCH", "/api/v1/namespaces/ns/pods/p1/status") == []  # bound elsewhere: no condition
    assert writer.in_flight_binds() == {}


def test_bind_conflict_naming_our_node_is_a_lost_answer_of_our_own_bind(api, writer, failures):
    bind_path = "/api/v1/namespaces/ns/pods/p1/binding"
    api.fail("POST", bind_path, err(0, "ConnectionError", "reset"),
             err(409, "Conflict", 'pod p1 is already assigned to node "node-1"'))
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert failures == [] and writer.in_flight_binds() == {"ns/p1": "node-1"}


def test_bind_of_a_deleted_pod_is_reported_without_events(api, writer, failures):
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", err(404, "NotFound", "pods \"p1\" not found"))
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert [f.error.status for f in failures] == [404]
    assert [c.path for c in api.calls] == ["/api/v1/namespaces/ns/pods/p1/binding"]


def test_failed_fractional_bind_rolls_back_its_gpu_group_label(api, writer):
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", err(422, "Invalid", "node gone"))
    bind = Bind(ObjectRef.pod("ns/p1", "u1"), "node-1", ("g1",), {"runai-gpu-group": "g1"},
                {"received-resource-type": "Fraction"})
    run(writer, [bind])
    patches = api.find("PATCH", "/api/v1/namespaces/ns/pods/p1")
    assert [p.body for p in patches] == [
        {"metadata": {"labels": {"runai-gpu-group": "g1"}, "annotations": {"received-resource-type": "Fraction"},
                      "uid": "u1"}},
        {"metadata": {"labels": {"runai-gpu-group": None}}}]


@pytest.mark.parametrize("refusal", [
    err(409, "Conflict", 'Operation cannot be fulfilled on pods "p1": StorageError: invalid object, Code: 4, Key: '
        "/registry/pods/ns/p1, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: "
        "u1, UID in object meta: u9"),
])
def test_a_bind_refused_because_the_pod_was_made_anew_reports_nothing_and_is_not_in_flight(api, writer, failures,
                                                                                          refusal):
    """A controller (the Training Operator, for one) deleted the pod and made another under its name since the
    snapshot: the API server refuses the Binding that names the old uid; the new pod gets no FailedBinding."""
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", refusal)
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")])
    assert pod_replaced(refusal)
    assert api.events("FailedBinding") == [] and api.find("PATCH", "/api/v1/namespaces/ns/pods/p1/status") == []
    assert writer.in_flight_binds() == {} and [f.error.status for f in failures] == [409]
    assert not pod_replaced(err(409, "Conflict", 'pod p1 is already assigned to node "node-2"'))
    assert pod_replaced(err(422, "Invalid", 'Pod "p1" is invalid: metadata.uid: Invalid value: "u1": field is '
                            "immutable"))


def test_a_second_bind_of_a_pod_in_flight_is_dropped_until_the_cache_shows_it_bound(api, writer):
    bind = Bind(ObjectRef.pod("ns/p1", "u1"), "node-1")
    run(writer, [bind, bind])
    run(writer, [Bind(ObjectRef.pod("ns/p1", "u1"), "node-2")])
    assert len(api.find("POST", "/api/v1/namespaces/ns/pods/p1/binding")) == 1
    assert writer.in_flight_binds() == {"ns/p1": "node-1"}
    cache = Cache(pod("ns/p1", "u1"))
    writer.settle(cache.lookup)  # the informer has not caught up yet
    assert writer.in_flight_binds() == {"ns/p1": "node-1"}
    cache.put(pod("ns/p1", "u1", node="node-1"))
    writer.settle(cache.lookup)
    assert writer.in_flight_binds() == {}
    run(writer, [bind])  # a new bind is accepted again (here a test of the contract, not a real need)
    assert len(api.find("POST", "/api/v1/namespaces/ns/pods/p1/binding")) == 2


def test_in_flight_placements_carry_gpu_groups_and_settle_expires_after_timeout(api):
    clock = [100.0]
    w = ClusterWriter(api, workers=1, sleep=lambda s: None, clock=lambda: clock[0], settle_timeout=30.0)
    try:
        run(w, [Bind(ObjectRef.pod("ns/p1"), "node-1", ("g1",), {"runai-gpu-group": "g1"})])
        assert w.in_flight_placements() == {"ns/p1": Placement("ns/p1", "node-1", ("g1",))}
        cache = Cache(pod("ns/p1"))
        clock[0] = 129.0
        w.settle(cache.lookup)
        assert "ns/p1" in w.in_flight_binds()
        clock[0] = 131.0
        w.settle(cache.lookup)
        assert w.in_flight_binds() == {}
    finally:
        w.close()


def test_a_pod_recreated_under_the_same_name_settles_the_old_pods_eviction_and_bind(api):
    """The Training Operator recreates an evicted replica's pod under the same name within milliseconds: between
    two cycles the cache may never show the old pod terminating. The new pod (another uid) is neither
    terminating nor bound."""
    clock = [100.0]
    w = ClusterWriter(api, workers=1, sleep=lambda s: None, clock=lambda: clock[0], settle_timeout=60.0)
    try:
        run(w, [Evict(ObjectRef.pod("ns/job-worker-0", "old-0"), "reclaim", "ns/p", "m"),
                Bind(ObjectRef.pod("ns/job-worker-1", "old-1"), "node-1")])
        assert w.in_flight_evictions() == {"ns/job-worker-0"}
        assert w.in_flight_binds() == {"ns/job-worker-1": "node-1"}
        same = Cache(pod("ns/job-worker-0", "old-0"), pod("ns/job-worker-1", "old-1"))
        w.settle(same.lookup)  # the cache still shows the very pods written: still in flight
        assert w.in_flight_evictions() == {"ns/job-worker-0"} and "ns/job-worker-1" in w.in_flight_binds()
        recreated = Cache(pod("ns/job-worker-0", "new-0"), pod("ns/job-worker-1", "new-1"))
        w.settle(recreated.lookup)
        assert w.in_flight_evictions() == set() and w.in_flight_binds() == {}
    finally:
        w.close()


def test_forget_before_the_bind_finished_takes_effect_when_it_finishes(api, writer):
    gate = Gate()
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", gate)
    writer.submit([Bind(ObjectRef.pod("ns/p1"), "node-1")])
    assert gate.started.wait(5)
    writer.forget("ns/p1")
    assert writer.in_flight_binds() == {"ns/p1": "node-1"}  # still running: still in flight
    gate.release.set()
    assert writer.drain(5)
    assert writer.in_flight_binds() == {}
    writer.forget("ns/unknown")  # forgetting a pod the writer never saw is harmless


def test_submit_never_blocks_on_a_slow_api_server(api, writer):
    gate = Gate()
    api.fail("POST", "/api/v1/namespaces/ns/pods/p0/binding", gate)
    start = time.monotonic()
    writer.submit([Bind(ObjectRef.pod("ns/p0"), "n")])
    writer.submit([Bind(ObjectRef.pod(f"ns/p{i}"), "n") for i in range(1, 20)])
    assert time.monotonic() - start < 1.0
    assert gate.started.wait(5)
    assert not writer.drain(0.05)  # one request hangs; the others went through meanwhile
    assert len(writer.in_flight_binds()) == 20
    gate.release.set()
    assert writer.drain(5)
    assert len([c for c in api.calls if c.path.endswith("/binding")]) == 20


def test_unexpected_client_exception_is_retried_like_a_lost_connection(api, writer, sleeps, failures):
    def explode() -> None:
        raise RuntimeError("transport broke")

    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", explode)
    run(writer, [Bind(ObjectRef.pod("ns/p1"), "node-1")])
    assert sleeps == [0.5] and failures == []


# ------------------------------------------------------------------------------------------ evictions
def test_eviction_posts_a_policy_v1_eviction_and_records_kai_evict_event(api, writer):
    cache = Cache(pod("ns/v1", "uv1", node="n", phase="Running", annotations={"pod-group-name": "victim"}),
                  pod("ns/v2", "uv2", node="n", phase="Running", annotations={"pod-group-name": "victim"}),
                  pod_group("ns/victim", "uvictim"))
    result = CycleResult(evictions=[Eviction("ns/v1", "reclaim", "ns/hungry", "Reclaimed by ns/hungry"),
                                    Eviction("ns/v2", "reclaim", "ns/hungry", "Reclaimed by ns/hungry (2)")])
    ops = OperationPlanner().plan(result, cache.lookup, NOW)
    assert [type(op) for op in ops] == [Evict, Evict]
    run(writer, ops)
    (call,) = api.find("POST", "/api/v1/namespaces/ns/pods/v1/eviction")
    assert call.body == {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "v1", "namespace": "ns"}}
    events = sorted(api.events("Evict"), key=lambda e: e["message"])  # lanes run concurrently
    assert [e["message"] for e in events] == ["Reclaimed by ns/hungry", "Reclaimed by ns/hungry (2)"]
    assert events[0]["metadata"]["annotations"] == {
        "num-evicted-pods": "2", "evictor-action-type": "reclaim", "evictor-pod-group-name": "hungry",
        "evictor-pod-group-namespace": "ns"}
    assert events[0]["involvedObject"]["kind"] == "PodGroup" and events[0]["type"] == "Normal"
    assert writer.in_flight_evictions() == {"ns/v1", "ns/v2"}
    cache.put(pod("ns/v1", "uv1", node="n", phase="Running", deleting=True))
    cache.delete("Pod", "ns/v2")
    writer.settle(cache.lookup)
    assert writer.in_flight_evictions() == set()


@pytest.mark.parametrize("refusal", [
    err(400, "BadRequest", 'Eviction in version "v1" cannot be handled as a Eviction: no kind "Eviction" is '
        'registered for version "policy/v1" in scheme "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"'),
    err(404, "NotFound", "the server could not find the requested resource"),
])
def test_eviction_falls_back_to_policy_v1beta1_on_an_old_server(api, writer, failures, refusal):
    path = "/api/v1/namespaces/ns/pods/v1/eviction"
    api.fail("POST", path, refusal)
    run(writer, [Evict(ObjectRef.pod("ns/v1"), "preempt", "ns/p", "m")])
    assert [c.body["apiVersion"] for c in api.find("POST", path)] == ["policy/v1", "policy/v1beta1"]
    assert failures == []
    assert policy_v1_missing(refusal)


def test_eviction_of_a_pod_already_gone_is_done(api, writer, failures):
    path = "/api/v1/namespaces/ns/pods/v1/eviction"
    api.fail("POST", path, err(404, "NotFound", 'pods "v1" not found', {"kind": "Status", "details":
                                                                       {"name": "v1", "kind": "pods"}}))
    run(writer, [Evict(ObjectRef.pod("ns/v1"), "preempt", "ns/p", "m")])
    assert len(api.find("POST", path)) == 1 and failures == []


def test_eviction_blocked_by_a_disruption_budget_is_retried_then_reported(api, writer, failures, sleeps):
    path = "/api/v1/namespaces/ns/pods/v1/eviction"
    api.fail("POST", path, *[err(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                 "disruption budget.")] * 5)
    run(writer, [Evict(ObjectRef.pod("ns/v1", "u"), "reclaim", "ns/p", "m")])
    assert len(api.find("POST", path)) == 5 and len(sleeps) == 4
    assert [f.error.status for f in failures] == [429]
    (event,) = api.events("EvictionFailed")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "v1"
    assert writer.in_flight_evictions() == set()


# --------------------------------------------------------------------------- pending jobs and statuses
def test_unschedulable_job_writes_pod_condition_events_and_scheduling_condition(api, writer):
    cache = Cache(pod("ns/p1", "u1", annotations={"pod-group-name": "pg1"}), pod_group("ns/pg1", "upg1"))
    status = pending_group()
    ops = OperationPlanner().plan(CycleResult(pod_groups=[status]), cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [type(op) for op in ops] == [PodCondition, PodGroupStatusPatch, Event, Event]
    run(writer, ops)
    message = status.message
    (cond,) = api.find("PATCH", "/api/v1/namespaces/ns/pods/p1/status")
    assert cond.body == {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": None, "lastTransitionTime": NOW_S}]}}
    (pg,) = api.find("PATCH", "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg1/status")
    assert pg.content_type == MERGE
    assert pg.body == {"status": {"schedulingConditions": [{
        "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable", "message": message,
        "reasons": [{"reason": "PodSchedulingErrors", "message": message}], "transitionID": "1",
        "lastTransitionTime": NOW_S, "status": "True"}]}}
    pod_event, group_event = sorted(api.events(), key=lambda e: e["type"], reverse=True)
    assert re.fullmatch(r"p1\.[0-9a-f]+", pod_event["metadata"]["name"])
    assert pod_event == {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": pod_event["metadata"]["name"], "namespace": "ns"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "ns", "uid": "u1"},
        "reason": "Unschedulable", "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": NOW_S, "lastTimestamp": NOW_S, "source": {"component": "kai-scheduler"},
        "reportingComponent": "kai-scheduler"}
    assert api.find("POST", "/api/v1/namespaces/ns/events")
    assert (group_event["reason"], group_event["type"]) == ("Unschedulable", "Normal")
    assert group_event["involvedObject"] == {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                             "name": "pg1", "namespace": "ns", "uid": "upg1"}


def test_unchanged_pending_reason_is_not_rewritten_and_events_are_deduplicated():
    planner = OperationPlanner()
    cache = Cache(pod("ns/p1", "u1"), pod_group("ns/pg1"))
    result = CycleResult(pod_groups=[pending_group()])
    first = planner.plan(result, cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    # the informer shows our writes
    cond = next(op for op in first if isinstance(op, PodCondition))
    cache.get("Pod", "ns/p1")["status"]["conditions"] = [dict(cond.condition)]
    status = next(op for op in first if isinstance(op, PodGroupStatusPatch))
    cache.get("PodGroup", "ns/pg1")["status"] = dict(status.status)
    assert planner.plan(result, cache.lookup, NOW + timedelta(seconds=1), {"ns/pg1": ["ns/p1"]}) == []
    # the reason goes away for a cycle and comes back: the Event object's count is bumped
    assert planner.plan(CycleResult(), cache.lookup, NOW + timedelta(seconds=2)) == []
    later = NOW + timedelta(seconds=3)
    third = planner.plan(result, cache.lookup, later, {"ns/pg1": ["ns/p1"]})
    events = [op for op in third if isinstance(op, Event)]
    first_events = [op for op in first if isinstance(op, Event)]
    assert [(e.event_name, e.count) for e in events] == [(e.event_name, 2) for e in first_events]
    (req,) = events[0].requests()
    assert (req.method, req.path, req.content_type) == ("PATCH", f"/api/v1/namespaces/ns/events/{events[0].event_name}",
                                                        MERGE)
    assert req.body == {"count": 2, "lastTimestamp": "2026-01-01T00:05:03Z"}


def test_bumped_event_expired_by_the_server_is_created_again(api, writer):
    first = datetime(2026, 1, 1, tzinfo=UTC)
    ev = Event(ObjectRef.pod("ns/p1", "u1"), "Warning", "Unschedulable", "m", "p1.abc", first, NOW, 3)
    api.fail("PATCH", "/api/v1/namespaces/ns/events/p1.abc", err(404, "NotFound", "events \"p1.abc\" not found"))
    run(writer, [ev])
    (create,) = api.find("POST", "/api/v1/namespaces/ns/events")
    assert create.body["metadata"]["name"] == "p1.abc" and create.body["count"] == 3
    assert create.body["firstTimestamp"] == "2026-01-01T00:00:00Z"


def test_message_changes_rewrite_the_condition_with_the_next_transition_id():
    old = {"type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable", "message": "old",
           "transitionID": "7", "status": "True"}
    other_pool = dict(old, nodePool="pool-x", transitionID="6")
    cache = Cache(pod("ns/p1"), pod_group("ns/pg1", status={"schedulingConditions": [other_pool, old]}))
    ops = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(message="new")]), cache.lookup, NOW,
                                  {"ns/pg1": ["ns/p1"]})
    (patch,) = [op for op in ops if isinstance(op, PodGroupStatusPatch)]
    conditions = patch.status["schedulingConditions"]
    assert [c["nodePool"] for c in conditions] == ["pool-x", "default"]
    assert conditions[-1]["message"] == "new" and conditions[-1]["transitionID"] == "8"


def test_job_with_allocated_pods_gets_events_but_no_scheduling_condition():
    cache = Cache(pod("ns/p1", node="n", phase="Running"), pod("ns/p2"), pod_group("ns/pg1"))
    ops = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(status="Running")]), cache.lookup, NOW,
                                  {"ns/pg1": ["ns/p1", "ns/p2"]})
    assert not [op for op in ops if isinstance(op, PodGroupStatusPatch)]
    conditions = [op for op in ops if isinstance(op, PodCondition)]
    assert [c.pod.name for c in conditions] == ["p2"]
    assert sorted(e.reason for e in ops if isinstance(e, Event)) == ["Unschedulable", "Unschedulable"]


def test_pods_in_flight_are_not_explained_as_pending():
    cache = Cache(pod("ns/p1"), pod("ns/p2"), pod_group("ns/pg1"))
    ops = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(status="Running")]), cache.lookup, NOW,
                                  {"ns/pg1": ["ns/p1", "ns/p2"]}, settling={"ns/p1"})
    assert [c.pod.name for c in ops if isinstance(c, PodCondition)] == ["p2"]


def test_mark_unschedulable_false_and_scheduling_backoff_prefix():
    cache = Cache(pod("ns/p1"), pod_group("ns/pg1", labels={"kai.scheduler/node-pool": "pool-a"},
                                          spec={"markUnschedulable": False, "schedulingBackoff": 1}))
    ops = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(message="full")]), cache.lookup, NOW,
                                  {"ns/pg1": ["ns/p1"]})
    assert not [op for op in ops if isinstance(op, PodCondition)]
    assert {e.message for e in ops if isinstance(e, Event)} == {"Node-Pool 'pool-a': full"}
    (patch,) = [op for op in ops if isinstance(op, PodGroupStatusPatch)]
    assert patch.status["schedulingConditions"][0]["nodePool"] == "pool-a"


def test_not_ready_job_gets_a_not_ready_event_and_its_condition():
    cache = Cache(pod("ns/p1"), pod_group("ns/pg1"))
    message = "Job is not ready for scheduling. Waiting for 2 pods, currently 1 exist, 0 are gated"
    ops = OperationPlanner().plan(CycleResult(pod_groups=[pending_group(reason="NotReady", message=message)]),
                                  cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [(type(op), op.reason, op.type, op.message) for op in ops if isinstance(op, Event)] == [
        (Event, "NotReady", "Normal", message)]
    # no pod condition (the pods are not unschedulable: the gang is incomplete), the PodGroup's condition says why
    (patch,) = [op for op in ops if isinstance(op, PodGroupStatusPatch)]
    assert patch.status["schedulingConditions"][0]["message"] == message
    assert len(ops) == 2


def test_scheduling_conditions_are_cleared_once_nothing_is_pending():
    cond = {"type": "UnschedulableOnNodePool", "nodePool": "default", "message": "m", "transitionID": "1"}
    cache = Cache(pod("ns/p1", node="n", phase="Running"), pod_group("ns/pg1", status={"schedulingConditions": [cond]}))
    running = PodGroupStatus("ns/pg1", "q", "Running", None, None)
    ops = OperationPlanner().plan(CycleResult(pod_groups=[running]), cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [op.requests()[0].body for op in ops] == [{"status": {"schedulingConditions": None}}]
    # cleared as soon as the job is scheduled: in the cycle that binds it (KAI leaves the condition)
    cache2 = Cache(pod("ns/p1"), pod_group("ns/pg1", status={"schedulingConditions": [cond]}))
    allocated = PodGroupStatus("ns/pg1", "q", "Allocated", None, None)
    ops2 = OperationPlanner().plan(CycleResult(binds=[Placement("ns/p1", "n")], pod_groups=[allocated]),
                                   cache2.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [op.status for op in ops2 if isinstance(op, PodGroupStatusPatch)] == [{"schedulingConditions": None}]


def test_pod_group_timestamps_and_stale_job_event():
    cache = Cache(pod("ns/p1", node="n", phase="Running"), pod("ns/p2", phase="Succeeded"),
                  pod_group("ns/pg1", spec={"minMember": 2},
                            annotations={"kai.scheduler/last-start-timestamp": "2026-01-01T00:01:00Z"}))
    status = PodGroupStatus("ns/pg1", "q", "Pending", None, None, last_start="2026-01-01T00:01:00.250000Z",
                            stale_since="2026-01-01T00:04:00+00:00")
    ops = OperationPlanner().plan(CycleResult(pod_groups=[status]), cache.lookup, NOW, {"ns/pg1": ["ns/p1", "ns/p2"]})
    (ann,) = [op for op in ops if isinstance(op, PodGroupAnnotations)]
    assert ann.requests()[0].path == "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg1"
    assert ann.requests()[0].body == {"metadata": {"annotations": {
        "kai.scheduler/stale-podgroup-timestamp": "2026-01-01T00:04:00Z"}}}
    (stale,) = [op for op in ops if isinstance(op, Event)]
    assert (stale.reason, stale.message) == ("StaleJob", "Job is stale. 1 pods are active, minMember is 2")
    # no longer stale: the annotation is removed
    cache.get("PodGroup", "ns/pg1")["metadata"]["annotations"]["kai.scheduler/stale-podgroup-timestamp"] = "x"
    fresh = PodGroupStatus("ns/pg1", "q", "Running", None, None, last_start="2026-01-01T00:01:00Z")
    ops = OperationPlanner().plan(CycleResult(pod_groups=[fresh]), cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [op.annotations for op in ops if isinstance(op, PodGroupAnnotations)] == [
        {"kai.scheduler/stale-podgroup-timestamp": None}]


def test_stale_message_names_unsatisfied_subgroups():
    spec = {"subGroups": [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}]}
    cache = Cache(pod("ns/l", node="n", phase="Running", labels={"kai.scheduler/subgroup-name": "leader"}),
                  pod("ns/w", node="n", phase="Running", labels={"kai.scheduler/subgroup-name": "workers"}),
                  pod_group("ns/pg1", spec=spec))
    status = PodGroupStatus("ns/pg1", "q", "Pending", None, None, stale_since=NOW_S)
    ops = OperationPlanner().plan(CycleResult(pod_groups=[status]), cache.lookup, NOW, {"ns/pg1": ["ns/l", "ns/w"]})
    (stale,) = [op for op in ops if isinstance(op, Event)]
    assert stale.message == ("Job is stale. 2 pods are active, minMember is 4, subGroup workers minMember is 3 "
                             "and 1 pods are active")


def test_pipelined_pod_gets_a_pipelined_event():
    cache = Cache(pod("ns/p1"), pod_group("ns/pg1"))
    status = PodGroupStatus("ns/pg1", "q", "Pipelined", "WaitingForReleasingResources",
                            "Pipelined: waiting for terminating pods to release resources on n1")
    ops = OperationPlanner().plan(CycleResult(pipelined=[Placement("ns/p1", "n1")], pod_groups=[status]),
                                  cache.lookup, NOW, {"ns/pg1": ["ns/p1"]})
    assert [(e.reason, e.message) for e in ops if isinstance(e, Event)] == [("Pipelined", status.message)]


def test_pods_by_group_indexes_grouped_pods():
    from kaisched.k8s.objects import ObjectMeta, ParsedObjects, Pod
    parsed = ParsedObjects(pods=[Pod(ObjectMeta("a", "ns", annotations={"pod-group-name": "g"})),
                                 Pod(ObjectMeta("b", "ns", annotations={"pod-group-name": "g"})),
                                 Pod(ObjectMeta("c", "ns"))])
    assert pods_by_group(parsed) == {"ns/g": ["ns/a", "ns/b"]}


# --------------------------------------------------------------------------------------------- queues
def test_queue_status_patch_in_kai_units_and_only_when_it_changed(api, writer):
    leaf = QueueStatus("team-a", "dept", deserved={}, fair_share={},
                       allocated={"gpu": 1.5, "cpu": 2500.0, "memory": 4e9},
                       request={"gpu": 3.0, "cpu": 4000.0, "memory": 8e9}, limit={}, priority=100)
    dept = QueueStatus("dept", None, {}, {}, allocated={"gpu": 1.5, "cpu": 2500.0, "memory": 4e9},
                       request={"gpu": 3.0, "cpu": 4000.0, "memory": 8e9}, limit={}, priority=100)
    synthetic = QueueStatus("default", None, {}, {}, {}, {}, {}, 100)
    cache = Cache(queue("team-a"), queue("dept"))
    ops = OperationPlanner().plan(CycleResult(queues=[leaf, dept, synthetic]), cache.lookup, NOW)
    assert [type(op) for op in ops] == [QueueStatusPatch, QueueStatusPatch]
    run(writer, ops)
    (call,) = api.find("PATCH", "/apis/scheduling.run.ai/v2/queues/team-a/status")
    assert call.content_type == MERGE
    assert call.body == {"status": {
        "allocated": {"cpu": "2500m", "memory": "4000000000", "nvidia.com/gpu": "1500m"},
        "requested": {"cpu": "4", "memory": "8000000000", "nvidia.com/gpu": "3"}}}
    (parent,) = api.find("PATCH", "/apis/scheduling.run.ai/v2/queues/dept/status")
    assert parent.body["status"]["childQueues"] == ["team-a"]
    # the server canonicalises quantities differently: still equal, nothing to write
    cache.put(queue("team-a", status={"allocated": {"cpu": "2.5", "memory": "4G", "nvidia.com/gpu": "1.5"},
                                      "requested": {"cpu": "4000m", "memory": "8e9", "nvidia.com/gpu": "3"}}))
    assert OperationPlanner().plan(CycleResult(queues=[leaf]), cache.lookup, NOW) == []


def test_format_quantity():
    assert format_quantity("cpu", 1000.0) == "1"
    assert format_quantity("cpu", 250.0) == "250m"
    assert format_quantity("memory", 1.5e9) == "1500000000"
    assert format_quantity("gpu", 0.25) == "250m"
    assert format_quantity("gpu", 2.0) == "2"


# -------------------------------------------------------------------------------- writer: coalescing
def _status_op(message: str) -> PodGroupStatusPatch:
    return PodGroupStatusPatch(ObjectRef.pod_group("ns/pg1"), {"schedulingConditions": [{"message": message}]})


def test_later_status_write_supersedes_a_queued_one_on_the_same_object(api, writer):
    path = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg1/status"
    gate = Gate()
    api.fail("PATCH", path, gate)
    writer.submit([_status_op("v1")])
    assert gate.started.wait(5)
    writer.submit([_status_op("v2")])
    writer.submit([_status_op("v3")])
    assert writer.pending() == 2
    gate.release.set()
    assert writer.drain(5)
    assert [c.body["status"]["schedulingConditions"][0]["message"] for c in api.find("PATCH", path)] == ["v1", "v3"]


def test_identical_write_just_done_is_not_repeated(api, writer):
    path = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg1/status"
    run(writer, [_status_op("v1")])
    run(writer, [_status_op("v1")])
    assert len(api.find("PATCH", path)) == 1
    run(writer, [_status_op("v2")])
    assert len(api.find("PATCH", path)) == 2


def test_a_bind_drops_the_pods_queued_condition_write(api, writer):
    status_path = "/api/v1/namespaces/ns/pods/p1/status"
    gate = Gate()
    api.fail("PATCH", "/api/v1/namespaces/ns/pods/p1", gate)
    writer.submit([PodMetadataPatch(ObjectRef.pod("ns/p1"), annotations={"pod-group-name": "g"})])
    assert gate.started.wait(5)  # the pod's lane is busy: what follows queues behind
    cond = PodCondition(ObjectRef.pod("ns/p1"), {"type": "PodScheduled", "status": "False"})
    writer.submit([cond])
    assert writer.pending() == 2
    writer.submit([Bind(ObjectRef.pod("ns/p1"), "n")])  # KAI drops pending pod status updates at PreBind
    writer.submit([Bind(ObjectRef.pod("ns/p1"), "n")])  # and a second bind is dropped
    assert writer.pending() == 2
    gate.release.set()
    assert writer.drain(5)
    assert api.find("PATCH", status_path) == []
    assert [c.path for c in api.calls] == ["/api/v1/namespaces/ns/pods/p1", "/api/v1/namespaces/ns/pods/p1/binding"]
    writer.submit([cond])  # a condition planned after the bind is written
    assert writer.drain(5)
    assert api.find("PATCH", status_path) == [Call("PATCH", status_path, {"status": {"conditions": [dict(
        cond.condition)]}}, "application/strategic-merge-patch+json")]


def test_failed_status_write_reports_a_warning_event(api, writer, failures):
    path = "/apis/scheduling.run.ai/v2/queues/q1/status"
    api.fail("PATCH", path, err(422, "Invalid", "status.allocated: bad"))
    run(writer, [QueueStatusPatch(ObjectRef.queue("q1", "uq"), {"allocated": {}})])
    assert [f.error.status for f in failures] == [422]
    (event,) = api.events("StatusUpdateFailed")
    assert event["metadata"]["namespace"] == "default"  # a cluster-scoped object's events
    assert event["involvedObject"] == {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "name": "q1",
                                       "uid": "uq"}


def test_failed_event_is_only_logged(api, writer, failures):
    api.fail("POST", "/api/v1/namespaces/ns/events", *[err(503, "Unavailable", "x")] * 5)
    ev = Event(ObjectRef.pod("ns/p1"), "Normal", "Scheduled", "m", "p1.1", NOW, NOW)
    run(writer, [ev])
    assert len(api.calls) == 5 and len(failures) == 1


# -------------------------------------------------------------------------------- writer: lifecycle
def test_close_drops_queued_operations_and_refuses_new_ones(api, sleeps):
    w = ClusterWriter(api, workers=1, sleep=sleeps.append)
    gate = Gate()
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", gate)
    w.submit([Bind(ObjectRef.pod("ns/p1"), "n"), Bind(ObjectRef.pod("ns/p2"), "n")])
    assert gate.started.wait(5)
    threading.Timer(0.1, gate.release.set).start()
    assert w.close(timeout=5)
    assert [c.path for c in api.calls] == ["/api/v1/namespaces/ns/pods/p1/binding"]
    assert "ns/p2" not in w.in_flight_binds()
    with pytest.raises(WriterClosed):
        w.submit([Bind(ObjectRef.pod("ns/p3"), "n")])


def test_close_interrupts_a_backoff_wait(api):
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", err(503, "Unavailable", "x"))
    w = ClusterWriter(api, workers=1, backoff_base=60.0)
    w.submit([Bind(ObjectRef.pod("ns/p1"), "n")])
    deadline = time.monotonic() + 5
    while not api.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    assert w.close(timeout=5)
    assert time.monotonic() - start < 2.0


def test_writer_rejects_bad_settings(api):
    with pytest.raises(ValueError, match="workers"):
        ClusterWriter(api, workers=0)
    with pytest.raises(ValueError, match="max_attempts"):
        ClusterWriter(api, max_attempts=0)


def test_queue_status_includes_allocated_non_preemptible_when_the_cycle_reports_it():
    @dataclass(frozen=True)
    class QueueStatusWithNonPreemptible:  # what a cycle result with the field looks like
        name: str
        parent: str | None
        allocated: dict[str, float]
        request: dict[str, float]
        allocated_non_preemptible: dict[str, float]

    q = QueueStatusWithNonPreemptible("q", None, {"gpu": 2.0}, {"gpu": 3.0}, {"gpu": 1.0})
    patch = queue_status_patch(q, [], {"allocated": {"nvidia.com/gpu": "2"}})  # type: ignore[arg-type]
    assert patch == {"requested": {"nvidia.com/gpu": "3"}, "allocatedNonPreemptible": {"nvidia.com/gpu": "1"}}


def test_scheduled_and_evict_events_are_recorded_only_when_the_write_succeeded(api, writer):
    cache = Cache(pod("ns/p1", "u1"), pod("ns/v", "uv", node="n", phase="Running",
                                          annotations={"pod-group-name": "victim"}), pod_group("ns/victim"))
    api.fail("POST", "/api/v1/namespaces/ns/pods/p1/binding", err(409, "Conflict", "already bound elsewhere"))
    api.fail("POST", "/api/v1/namespaces/ns/pods/v/eviction", err(403, "Forbidden", "no"))
    result = CycleResult(binds=[Placement("ns/p1", "n")], evictions=[Eviction("ns/v", "preempt", "ns/x", "m")])
    run(writer, OperationPlanner().plan(result, cache.lookup, NOW))
    assert sorted(e["reason"] for e in api.events()) == ["EvictionFailed", "FailedBinding"]
