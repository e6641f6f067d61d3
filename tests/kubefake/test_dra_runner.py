"""DRA in Kubernetes mode (KubeScheduler) against the fake API server: the resource.k8s.io version discovered,
the claim writes before a binding and their order, conflicts and vanished claims, the rollback of a refused
bind, the reservations of pods that are gone, and claims shown reserved while their write is in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kaisched.framework.config import SchedulerConfig
from kaisched.kube.api import Api, ApiError, Response
from kaisched.kube.claims import ClaimStatusWriter, discover_dra_version, stale_reservations
from kaisched.kube.client import KubeClient
from kaisched.kube.operations import DRA_FINALIZER, ClaimRelease, ObjectRef, ReleaseClaim
from kaisched.kube.runner import KubeScheduler, RunOptions
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer, Resource
from tests.kubefake.test_runner import queue

NS = "team"
DRIVER = "gpu.nvidia.com"
CLASS = "gpu.nvidia.com"
GROUP = "resource.k8s.io"


def dra_resources(version: str) -> list[Resource]:
    return [Resource(GROUP, (version,), "deviceclasses", "DeviceClass", namespaced=False),
            Resource(GROUP, (version,), "resourceslices", "ResourceSlice", namespaced=False),
            Resource(GROUP, (version,), "resourceclaims", "ResourceClaim", status=True),
            Resource(GROUP, (version,), "resourceclaimtemplates", "ResourceClaimTemplate")]


class Discovery:
    """An Api that answers ``GET /apis/resource.k8s.io`` (the fake server has no discovery) and passes the rest."""

    def __init__(self, api: Api, versions: tuple[str, ...]) -> None:
        self.api = api
        self.versions = versions
        self.asked = 0

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        if method == "GET" and path == f"/apis/{GROUP}":
            self.asked += 1
            if not self.versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return Response(200, {"kind": "APIGroup", "name": GROUP, "versions": [
                {"groupVersion": f"{GROUP}/{v}", "version": v} for v in self.versions]})
        return self.api.request(method, path, **kwargs)

    def stream(self, path: str, **kwargs: Any) -> Iterator[Any]:
        return self.api.stream(path, **kwargs)


# ----------------------------------------------------------------------------------------- objects
def node(name: str) -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": resources, "capacity": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def device_class(version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{version}", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                     "config": [{"opaque": {"driver": DRIVER, "parameters": {"mode": "exclusive"}}}]}}


def resource_slice(node_name: str, gpus: int, version: str = "v1") -> dict[str, Any]:
    def device(i: int) -> dict[str, Any]:
        body = {"attributes": {"index": {"int": i}, "productName": {"string": "H100"}},
                "capacity": {"memory": {"value": "80Gi"}}}
        return {"name": f"gpu-{i}", **({"basic": body} if version == "v1beta1" else body)}
    return {"apiVersion": f"{GROUP}/{version}", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "nodeName": node_name, "devices": [device(i) for i in range(gpus)]}}


def claim_spec(count: int, version: str = "v1") -> dict[str, Any]:
    exact = {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count}
    request = {"name": "gpu", **exact} if version == "v1beta1" else {"name": "gpu", "exactly": exact}
    return {"devices": {"requests": [request],
                        "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"x": 1}}}]}}


def claim(name: str, q: str, count: int = 1, version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{version}", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": q}},
            "spec": claim_spec(count, version)}


def template(name: str, count: int = 1) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": claim_spec(count)}}


def pod(name: str, q: str, *, claim_name: str | None = None, template_name: str | None = None,
        node_name: str = "", phase: str = "Pending") -> dict[str, Any]:
    entry: dict[str, str] = {"name": "gpu"}
    if claim_name:
        entry["resourceClaimName"] = claim_name
    if template_name:
        entry["resourceClaimTemplateName"] = template_name
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler", "resourceClaims": [entry],
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": q}},
            "spec": spec, "status": {"phase": phase}}


def base_cluster(server: FakeApiServer, gpus: int = 2, nodes: int = 1, version: str = "v1") -> None:
    for i in range(nodes):
        server.seed(node(f"node-{i}"))
        server.seed(resource_slice(f"node-{i}", gpus, version))
    server.seed(device_class(version))
    server.seed(queue("root", 16))
    server.seed(queue("team-a", 8, "root"))
    server.seed(queue("team-b", 8, "root"))


def allocated_claim(name: str, holders: list[tuple[str, str]], device: str = "gpu-0") -> dict[str, Any]:
    obj = claim(name, "team-a")
    obj["metadata"]["finalizers"] = [DRA_FINALIZER]
    obj["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0",
                                                "device": device}]}},
        "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in holders]}
    return obj


# ----------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def dra_server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer(bookmark_interval=0.2)
    for res in dra_resources("v1"):
        srv.register(res)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def make_scheduler() -> Iterator[Any]:
    made: list[tuple[KubeScheduler, KubeClient]] = []

    def make(server: FakeApiServer, versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1"),
             **options: Any) -> KubeScheduler:
        client = KubeClient.from_url(server.url, timeout=5.0, trust_env=False)
        options.setdefault("listen_port", None)
        options.setdefault("schedule_period", 0.05)
        sched = KubeScheduler(Discovery(client, versions), SchedulerConfig(), RunOptions(**options))
        made.append((sched, client))
        sched.start()
        assert sched.wait_synced(10.0)
        return sched

    yield make
    for sched, client in made:
        sched.close()
        client.close()


def caught_up(sched: KubeScheduler, server: FakeApiServer) -> None:
    """Every informer has seen every change the server has."""
    def ok() -> bool:
        for informer in sched.informers.values():
            rv = informer.resource_version
            if rv is None or int(rv) < server.resource_version:
                return False
        return True
    server.bookmark_now()
    assert wait_until(ok, timeout=5.0)


def cycle(sched: KubeScheduler, server: FakeApiServer) -> None:
    caught_up(sched, server)
    sched.run_cycle()
    assert sched.writer is not None and sched.writer.drain(10.0)


def get(server: FakeApiServer, kind: str, name: str, version: str = "v1") -> dict[str, Any]:
    api_version = "v1" if kind == "Pod" else f"{GROUP}/{version}"
    obj: dict[str, Any] | None = server.get_object(api_version, kind, name, NS)
    assert obj is not None, f"{kind} {name}"
    return obj


def events(server: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in server.list_objects("v1", "Event") if e.get("reason") == reason]


def writes(server: FakeApiServer) -> list[str]:
    """The writes of claims and bindings, in order: ``PATCH claim[/status]`` and ``POST <pod>/binding``."""
    out = []
    for r in server.requests:
        if r.method == "PATCH" and "/resourceclaims/" in r.path:
            out.append(f"PATCH {r.path.split('/resourceclaims/')[1]} {r.status}")
        elif r.method == "POST" and r.path.endswith("/binding"):
            out.append(f"POST {r.path.split('/pods/')[1]} {r.status}")
    return out


def devices_of(obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


# ----------------------------------------------------------------------------------------- discovery
def test_discovery_prefers_v1_then_v1beta2_then_v1beta1(dra_server: FakeApiServer) -> None:
    client = KubeClient.from_url(dra_server.url, timeout=5.0, trust_env=False)
    try:
        assert discover_dra_version(Discovery(client, ("v1beta1", "v1", "v1beta2"))) == "v1"
        assert discover_dra_version(Discovery(client, ("v1beta1", "v1beta2"))) == "v1beta2"
        assert discover_dra_version(Discovery(client, ("v1beta1",))) == "v1beta1"
        assert discover_dra_version(Discovery(client, ("v1alpha3",))) is None
        assert discover_dra_version(Discovery(client, ())) is None  # 404: no resource.k8s.io at all
        assert discover_dra_version(client) is None  # the fake server has no discovery: a 404
    finally:
        client.close()


def test_dra_informers_are_started_once_in_the_served_version(dra_server: FakeApiServer,
                                                              make_scheduler: Any) -> None:
    base_cluster(dra_server)
    sched = make_scheduler(dra_server)
    assert sched.dra_version == "v1"
    assert isinstance(sched.api, Discovery) and sched.api.asked == 1
    assert {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"} <= set(sched.informers)
    assert sched.informers["ResourceClaim"].kind.list_path() == "/apis/resource.k8s.io/v1/resourceclaims"
    watched = {r.path for r in dra_server.requests_matching("GET", "resource.k8s.io")}
    assert "/apis/resource.k8s.io/v1/resourceslices" in watched


def test_no_dra_informers_when_the_server_serves_no_resource_group(server: FakeApiServer,
                                                                   make_scheduler: Any) -> None:
    sched = make_scheduler(server, versions=())
    assert sched.dra_version is None
    assert "ResourceClaim" not in sched.informers
    assert not server.requests_matching("GET", "resource.k8s.io")


# ----------------------------------------------------------------------------------------- binds
def test_a_claim_is_allocated_and_reserved_before_the_pod_is_bound(dra_server: FakeApiServer,
                                                                   make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=2)
    dra_server.seed(claim("c1", "team-a", count=2))
    p = dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)

    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    # the finalizer (main resource), then allocation + reservation (status), then the binding
    assert writes(dra_server) == ["PATCH c1 200", "PATCH c1/status 200", "POST p1/binding 201"]
    c1 = get(dra_server, "ResourceClaim", "c1")
    assert DRA_FINALIZER in c1["metadata"]["finalizers"]
    allocation = c1["status"]["allocation"]
    assert allocation["devices"]["results"] == [
        {"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"},
        {"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-1"}]
    assert allocation["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-0"]}]}]}
    # the DeviceClass's configuration, then the claim's, as kube-scheduler's allocator writes them
    assert allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"mode": "exclusive"}}},
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"x": 1}}}]
    assert c1["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": p["metadata"]["uid"]}]

    # the next cycles leave it alone (the claim is allocated and reserved; the pod is bound)
    before = len(writes(dra_server))
    cycle(sched, dra_server)
    cycle(sched, dra_server)
    assert len(writes(dra_server)) == before


def test_a_templated_claim_waits_for_the_resourceclaim_controller(dra_server: FakeApiServer,
                                                                  make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(template("one-gpu"))
    p = dra_server.seed(pod("p1", "team-a", template_name="one-gpu"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)
    cycle(sched, dra_server)
    assert not get(dra_server, "Pod", "p1")["spec"].get("nodeName")
    assert not dra_server.requests_matching("POST", "resourceclaims")  # kaisched never makes claims
    assert dra_server.list_objects(f"{GROUP}/v1", "ResourceClaim") == []

    # the test plays the resourceclaim controller: the claim, owned by the pod, and the pod's claim status
    made = template("one-gpu")["spec"]
    dra_server.seed({"apiVersion": f"{GROUP}/v1", "kind": "ResourceClaim",
                     "metadata": {"name": "p1-gpu-abcde", "namespace": NS,
                                  "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                                  "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p1",
                                                       "uid": p["metadata"]["uid"], "controller": True}]},
                     "spec": made["spec"]})
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p1-gpu-abcde"}]
    dra_server.seed(p)
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    made_claim = get(dra_server, "ResourceClaim", "p1-gpu-abcde")
    assert devices_of(made_claim) == [(DRIVER, "node-0", "gpu-0")]
    assert [e["uid"] for e in made_claim["status"]["reservedFor"]] == [p["metadata"]["uid"]]


def test_a_shared_claim_is_allocated_once_and_reserved_for_both_pods(dra_server: FakeApiServer,
                                                                     make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1, nodes=2)
    dra_server.seed(claim("shared", "team-a"))
    pods = [dra_server.seed(pod(f"p{i}", "team-a", claim_name="shared")) for i in range(2)]
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)
    nodes = {get(dra_server, "Pod", f"p{i}")["spec"].get("nodeName") for i in range(2)}
    shared = get(dra_server, "ResourceClaim", "shared")
    assert len(devices_of(shared)) == 1
    (_, home, _), = devices_of(shared)
    assert nodes == {home}
    assert sorted(e["uid"] for e in shared["status"]["reservedFor"]) == sorted(p["metadata"]["uid"] for p in pods)
    allocations = [w for w in writes(dra_server) if w.startswith("PATCH shared/status")]
    assert len(allocations) >= 2  # one per pod (the second adds its reservation to the first's allocation)


def test_a_conflict_twice_leaves_the_pod_pending_until_the_next_cycle(dra_server: FakeApiServer,
                                                                      make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    dra_server.fail_next("PATCH", r"resourceclaims/c1/status", 409, times=2)
    cycle(sched, dra_server)
    assert not get(dra_server, "Pod", "p1")["spec"].get("nodeName")
    assert not dra_server.requests_matching("POST", "binding")
    assert dra_server.requests_matching("GET", r"resourceclaims/c1$")  # read again after the first 409
    failed = events(dra_server, "FailedBinding")
    assert failed and "ResourceClaim team/c1" in failed[0]["message"]
    condition = next(c for c in get(dra_server, "Pod", "p1")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["reason"] == "BindingError"

    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    assert devices_of(get(dra_server, "ResourceClaim", "c1")) == [(DRIVER, "node-0", "gpu-0")]


def test_one_conflict_is_resolved_by_reading_the_claim_again(dra_server: FakeApiServer,
                                                             make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    dra_server.fail_next("PATCH", r"resourceclaims/c1/status", 409)
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"


def test_a_claim_deleted_before_its_write_fails_the_bind(dra_server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    gate = dra_server.pause("PATCH", r"resourceclaims/c1$")  # the finalizer write, the claim's first
    caught_up(sched, dra_server)
    sched.run_cycle()
    assert gate.wait_for(1, 5.0)
    dra_server.delete_object(f"{GROUP}/v1", "ResourceClaim", "c1", NS)
    gate.release()
    assert sched.writer is not None and sched.writer.drain(10.0)
    assert not get(dra_server, "Pod", "p1")["spec"].get("nodeName")
    assert not dra_server.requests_matching("POST", "binding")
    assert any("ResourceClaim team/c1" in e["message"] for e in events(dra_server, "FailedBinding"))
    # the next cycle sees the claim gone: the pod waits for it, nothing is written
    cycle(sched, dra_server)
    assert not dra_server.requests_matching("POST", "binding")


def test_a_refused_binding_rolls_the_reservation_back(dra_server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    dra_server.fail_next("POST", r"pods/p1/binding", 403)
    cycle(sched, dra_server)
    assert sched.writer is not None and sched.writer.drain(10.0)
    c1 = get(dra_server, "ResourceClaim", "c1")
    assert not (c1.get("status") or {}).get("reservedFor")
    assert not (c1.get("status") or {}).get("allocation")  # nobody else held it: deallocated
    assert DRA_FINALIZER not in (c1["metadata"].get("finalizers") or ())
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"


def test_a_pod_whose_claims_the_cycle_did_not_allocate_is_not_bound(dra_server: FakeApiServer,
                                                                    make_scheduler: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """(A cycle result that lists the bind without the claim: the planner refuses to bind.)"""
    base_cluster(dra_server, gpus=1)
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    caught_up(sched, dra_server)
    from kaisched.kube.metrics import timed_cycle

    def without_claims(*args: Any, **kwargs: Any) -> Any:
        result, timings = timed_cycle(*args, **kwargs)
        result.claims = []
        return result, timings

    monkeypatch.setattr("kaisched.kube.runner.timed_cycle", without_claims)
    sched.run_cycle()
    assert sched.writer is not None and sched.writer.drain(10.0)
    assert not dra_server.requests_matching("POST", "binding")
    assert any("allocated no devices for its ResourceClaim team/c1" in e["message"]
               for e in events(dra_server, "FailedBinding"))


def test_a_claim_left_reserved_by_an_earlier_failed_bind_is_kept(dra_server: FakeApiServer,
                                                                 make_scheduler: Any) -> None:
    """The claim is allocated (gpu-1) and reserved for the pending pod itself (a bind that failed after its claim
    was written, with its rollback lost): the cycle keeps that allocation, nothing is written but the binding."""
    base_cluster(dra_server, gpus=2)
    p1 = dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    dra_server.seed(allocated_claim("c1", [("p1", p1["metadata"]["uid"])], device="gpu-1"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    c1 = get(dra_server, "ResourceClaim", "c1")
    assert devices_of(c1) == [(DRIVER, "node-0", "gpu-1")]
    assert [e["uid"] for e in c1["status"]["reservedFor"]] == [p1["metadata"]["uid"]]
    assert writes(dra_server) == ["POST p1/binding 201"]


def test_over_commit_is_refused(dra_server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=2)
    for i in range(3):
        dra_server.seed(claim(f"c{i}", "team-a"))
        dra_server.seed(pod(f"p{i}", "team-a", claim_name=f"c{i}"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)
    cycle(sched, dra_server)
    bound = [i for i in range(3) if get(dra_server, "Pod", f"p{i}")["spec"].get("nodeName")]
    assert len(bound) == 2
    allocated = [d for i in range(3) for d in devices_of(get(dra_server, "ResourceClaim", f"c{i}"))]
    assert sorted(allocated) == [(DRIVER, "node-0", "gpu-0"), (DRIVER, "node-0", "gpu-1")]
    (left,) = set(range(3)) - set(bound)
    assert not devices_of(get(dra_server, "ResourceClaim", f"c{left}"))


# ----------------------------------------------------------------------------------------- the overlay
def no_device_twice(server: FakeApiServer) -> list[tuple[str, str, str]]:
    """Every device allocated, once per claim holding it (asserts that none is in two claims)."""
    held = [d for c in server.list_objects(f"{GROUP}/v1", "ResourceClaim") for d in devices_of(c)]
    assert len(held) == len(set(held)), held
    return sorted(held)


def test_a_claim_whose_write_is_in_flight_is_shown_reserved_to_the_next_cycle(dra_server: FakeApiServer,
                                                                              make_scheduler: Any) -> None:
    """p1's claim gets gpu-1 (gpu-0 is a running pod's) and its write is held; meanwhile that pod finishes, so
    gpu-0 is free in the next cycle. Shown reserved, p1's claim keeps gpu-1 in that cycle (otherwise the cycle
    would give its gpu-1 to p2's claim too: the first free device)."""
    base_cluster(dra_server, gpus=2)
    running = dra_server.seed(pod("r", "team-a", claim_name="c0", node_name="node-0", phase="Running"))
    dra_server.seed(allocated_claim("c0", [("r", running["metadata"]["uid"])]))
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(claim("c2", "team-a"))
    p1 = dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    gate = dra_server.pause("PATCH", r"resourceclaims/c1/status")
    caught_up(sched, dra_server)
    first = sched.run_cycle()
    assert [d.device for c in first.claims for d in c.devices] == ["gpu-1"]
    assert gate.wait_for(1, 5.0)
    assert sched.writer is not None and sched.writer.claims.in_flight() == {"team/c1": (p1["metadata"]["uid"],)}
    running["status"]["phase"] = "Succeeded"
    dra_server.seed(running)
    dra_server.seed(pod("p2", "team-a", claim_name="c2"))
    caught_up(sched, dra_server)
    second = sched.run_cycle()
    assert [(c.claim, d.device) for c in second.claims for d in c.devices] == [("team/c2", "gpu-0")]
    gate.release()
    assert sched.writer.drain(10.0)
    for _ in range(3):
        cycle(sched, dra_server)
        no_device_twice(dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    assert get(dra_server, "Pod", "p2")["spec"].get("nodeName") == "node-0"
    assert devices_of(get(dra_server, "ResourceClaim", "c1")) == [(DRIVER, "node-0", "gpu-1")]
    assert devices_of(get(dra_server, "ResourceClaim", "c2")) == [(DRIVER, "node-0", "gpu-0")]
    assert not devices_of(get(dra_server, "ResourceClaim", "c0"))  # the finished pod's claim: deallocated
    assert sched.writer.claims.in_flight() == {}


def test_a_device_is_not_given_to_a_new_claim_before_its_old_claim_is_deallocated(
        dra_server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    done = dra_server.seed(pod("done", "team-a", claim_name="c0", node_name="node-0", phase="Succeeded"))
    dra_server.seed(allocated_claim("c0", [("done", done["metadata"]["uid"])]))
    dra_server.seed(claim("c1", "team-a"))
    dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)  # the cycle counts gpu-0 free (its pod is done), the API still has it in c0
    assert not get(dra_server, "Pod", "p1")["spec"].get("nodeName")
    assert any("still allocated to ResourceClaim team/c0" in e["message"] for e in events(dra_server, "FailedBinding"))
    assert not devices_of(get(dra_server, "ResourceClaim", "c0"))  # released and deallocated meanwhile
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p1")["spec"].get("nodeName") == "node-0"
    assert no_device_twice(dra_server) == [(DRIVER, "node-0", "gpu-0")]


# ----------------------------------------------------------------------------------------- pods gone
def test_the_reservation_of_a_deleted_pod_is_removed_and_the_claim_deallocated(dra_server: FakeApiServer,
                                                                               make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    dra_server.seed(allocated_claim("c1", [("gone", "uid-gone")]))
    dra_server.seed(claim("c2", "team-a"))
    dra_server.seed(pod("p2", "team-a", claim_name="c2"))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)  # the device is c1's as long as the reservation stands: p2 waits
    assert dra_server.requests_matching("GET", r"pods/gone$")  # confirmed gone (not in the cache) with a GET
    c1 = get(dra_server, "ResourceClaim", "c1")
    assert not (c1.get("status") or {}).get("reservedFor")
    assert not (c1.get("status") or {}).get("allocation")
    assert DRA_FINALIZER not in (c1["metadata"].get("finalizers") or ())
    cycle(sched, dra_server)
    assert get(dra_server, "Pod", "p2")["spec"].get("nodeName") == "node-0"
    assert devices_of(get(dra_server, "ResourceClaim", "c2")) == [(DRIVER, "node-0", "gpu-0")]


def test_only_the_gone_pods_reservations_are_removed(dra_server: FakeApiServer, make_scheduler: Any) -> None:
    base_cluster(dra_server, gpus=1)
    running = dra_server.seed(pod("run", "team-a", claim_name="c1", node_name="node-0", phase="Running"))
    done = dra_server.seed(pod("done", "team-a", claim_name="c1", node_name="node-0", phase="Succeeded"))
    dra_server.seed(allocated_claim("c1", [("run", running["metadata"]["uid"]), ("done", done["metadata"]["uid"])]))
    sched = make_scheduler(dra_server)
    cycle(sched, dra_server)
    c1 = get(dra_server, "ResourceClaim", "c1")
    assert [e["name"] for e in c1["status"]["reservedFor"]] == ["run"]
    assert devices_of(c1) == [(DRIVER, "node-0", "gpu-0")]  # still in use: allocated
    assert DRA_FINALIZER in c1["metadata"]["finalizers"]
    assert not dra_server.requests_matching("GET", r"/pods/")  # both pods were in the cache: no GET


def test_a_reservation_of_a_pod_the_cache_does_not_hold_yet_is_kept(dra_server: FakeApiServer) -> None:
    live = dra_server.seed(pod("live", "team-a"))
    dra_server.seed(allocated_claim("c1", [("live", live["metadata"]["uid"])]))
    c1 = get(dra_server, "ResourceClaim", "c1")
    ops = stale_reservations([("team/c1", c1)], [])  # a cache without the pod
    assert len(ops) == 1 and isinstance(ops[0], ReleaseClaim)
    assert ops[0].release.unconfirmed == {live["metadata"]["uid"]}
    client = KubeClient.from_url(dra_server.url, timeout=5.0, trust_env=False)
    try:
        writer = ClaimStatusWriter(client)
        writer.run(ops[0].release)
        assert writer.writes == 0  # the GET found the pod: nothing to remove
        assert get(dra_server, "ResourceClaim", "c1")["status"]["reservedFor"][0]["name"] == "live"
        ref = ObjectRef.of(c1, f"{GROUP}/v1", "ResourceClaim")
        writer.run(ClaimRelease(ref, (ObjectRef.pod("team/live", "another-uid"),), frozenset({"another-uid"})))
        assert writer.writes == 0  # not an entry of the claim
    finally:
        client.close()


def test_concurrent_reservations_of_one_claim_are_serialised(dra_server: FakeApiServer) -> None:
    """Many pods of one shared claim reserved from several threads: every reservation lands, no conflict."""
    base_cluster(dra_server, gpus=1)
    obj = dra_server.seed(allocated_claim("c1", []))
    pods = [dra_server.seed(pod(f"p{i}", "team-a", claim_name="c1")) for i in range(8)]
    from kaisched.kube.operations import ClaimReservation
    client = KubeClient.from_url(dra_server.url, timeout=5.0, trust_env=False)
    try:
        writer = ClaimStatusWriter(client, lambda kind, key: obj)  # a cache that never catches up
        ref = ObjectRef.of(obj, f"{GROUP}/v1", "ResourceClaim")
        errors: list[Exception] = []

        def reserve(p: dict[str, Any]) -> None:
            try:
                writer.run(ClaimReservation(ref, ObjectRef.pod(f"{NS}/{p['metadata']['name']}", p["metadata"]["uid"]),
                                            None, ((DRIVER, "node-0", "gpu-0"),)))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=reserve, args=(p,)) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert errors == []
        reserved = get(dra_server, "ResourceClaim", "c1")["status"]["reservedFor"]
        assert sorted(e["uid"] for e in reserved) == sorted(p["metadata"]["uid"] for p in pods)
        assert not dra_server.requests_matching("PATCH", r"resourceclaims/c1/status$") or all(
            r.status == 200 for r in dra_server.requests_matching("PATCH", r"resourceclaims/c1/status$"))
    finally:
        client.close()


# ----------------------------------------------------------------------------------------- v1beta1
def test_a_v1beta1_server_is_read_and_written_in_v1beta1(make_scheduler: Any) -> None:
    srv = FakeApiServer(bookmark_interval=0.2)
    for res in dra_resources("v1beta1"):
        srv.register(res)
    srv.start()
    try:
        base_cluster(srv, gpus=1, version="v1beta1")
        srv.seed(claim("c1", "team-a", version="v1beta1"))
        srv.seed(pod("p1", "team-a", claim_name="c1"))
        sched = make_scheduler(srv, versions=("v1beta1",))
        assert sched.dra_version == "v1beta1"
        cycle(sched, srv)
        assert get(srv, "Pod", "p1")["spec"].get("nodeName") == "node-0"
        c1 = get(srv, "ResourceClaim", "c1", version="v1beta1")
        assert devices_of(c1) == [(DRIVER, "node-0", "gpu-0")]
        assert all("/resource.k8s.io/v1beta1/" in r.path for r in srv.requests_matching("PATCH", "resourceclaims"))
    finally:
        srv.stop()


def test_a_reservation_replaces_a_stale_allocation_only_when_no_other_pod_holds_it(dra_server: FakeApiServer) -> None:
    """(The claim writer's own rule, whatever the cycle decides: an allocation reserved by nobody but this pod may
    be replaced, cleared first since an allocation is immutable; one another pod holds never is.)"""
    from kaisched.kube.operations import ClaimReservation
    p1 = dra_server.seed(pod("p1", "team-a", claim_name="c1"))
    other = dra_server.seed(pod("other", "team-a", claim_name="c2"))
    dra_server.seed(allocated_claim("c1", [("p1", p1["metadata"]["uid"])], device="gpu-1"))
    dra_server.seed(allocated_claim("c2", [("other", other["metadata"]["uid"])], device="gpu-1"))
    new = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}]}}
    client = KubeClient.from_url(dra_server.url, timeout=5.0, trust_env=False)
    try:
        writer = ClaimStatusWriter(client)
        for name, holder in (("c1", p1), ("c2", p1)):
            obj = get(dra_server, "ResourceClaim", name)
            step = ClaimReservation(ObjectRef.of(obj, f"{GROUP}/v1", "ResourceClaim"),
                                    ObjectRef.pod(f"{NS}/p1", holder["metadata"]["uid"]), new,
                                    ((DRIVER, "node-0", "gpu-0"),))
            if name == "c1":
                writer.run(step)
            else:
                with pytest.raises(ApiError, match="allocated to other devices") as refused:
                    writer.run(step)
                assert refused.value.status == 409
        c1 = get(dra_server, "ResourceClaim", "c1")
        assert devices_of(c1) == [(DRIVER, "node-0", "gpu-0")]
        assert [e["name"] for e in c1["status"]["reservedFor"]] == ["p1"]
        assert devices_of(get(dra_server, "ResourceClaim", "c2")) == [(DRIVER, "node-0", "gpu-1")]
        assert [r.status for r in dra_server.requests_matching("PATCH", r"resourceclaims/c1/status$")] == [200, 200]
    finally:
        client.close()
