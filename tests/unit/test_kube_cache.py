"""kaisched.kube.cache: parse once per resourceVersion, the in-flight overlay, owners read on demand."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects
from kaisched.kube.api import ApiError, Response
from kaisched.kube.cache import OwnerCache, ParseCache, overlay, owner_path


def pod(name: str, rv: str, *, node: str = "", owner: dict[str, Any] | None = None,
        cpu: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv,
                            "labels": {"app": "x"}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def test_an_unchanged_object_is_the_same_parsed_object_and_a_changed_one_is_reparsed() -> None:
    cache = ParseCache()
    first = ParsedObjects()
    cache.parse("Pod", [("ns/a", pod("a", "1")), ("ns/b", pod("b", "1"))], first)
    second = ParsedObjects()
    cache.parse("Pod", [("ns/a", pod("a", "1")), ("ns/b", pod("b", "2", cpu="2"))], second)
    assert second.pods[0] is first.pods[0]
    assert second.pods[1] is not first.pods[1]
    assert second.pods[1].requests["cpu"] == 2000
    assert second.pods[1] == parse_objects([pod("b", "2", cpu="2")]).pods[0]


def test_errors_are_reported_every_time_and_deleted_objects_are_forgotten() -> None:
    cache = ParseCache()
    bad = pod("bad", "5")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    for _ in range(2):
        out = ParsedObjects()
        cache.parse("Pod", [("ns/bad", bad), ("ns/ok", pod("ok", "1"))], out)
        assert [p.meta.name for p in out.pods] == ["ok"]
        assert len(out.errors) == 1 and out.errors[0].object == "Pod ns/bad"
    assert len(cache) == 2
    cache.parse("Pod", [("ns/ok", pod("ok", "1"))], ParsedObjects())
    assert len(cache) == 1


def test_overlay_shows_in_flight_binds_and_evictions() -> None:
    pods = [("ns/a", pod("a", "1")), ("ns/b", pod("b", "1", node="n1")), ("ns/c", pod("c", "1"))]
    out = dict(overlay(pods, {"ns/a": ("n2", ("g1",)), "ns/c": ("n3", ("g1", "g2"))}, ["ns/b"],
                       "2026-01-01T00:00:00Z"))
    assert out["ns/a"]["spec"]["nodeName"] == "n2"
    assert out["ns/a"]["metadata"]["labels"] == {"app": "x", "runai-gpu-group": "g1"}
    assert out["ns/c"]["metadata"]["labels"]["runai-gpu-group/g2"] == "g2"
    assert out["ns/b"]["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"
    assert out["ns/a"]["metadata"]["resourceVersion"] != "1"  # never served from the parse cache as unbound
    assert "nodeName" not in pods[0][1]["spec"]  # the cached dicts are not mutated
    assert overlay(pods, {}, [], "x")[1][1] is pods[1][1]


class OwnersApi:
    def __init__(self, objects: Mapping[str, dict[str, Any]], fail: int = 404) -> None:
        self.objects = objects
        self.fail = fail
        self.calls: list[str] = []

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        self.calls.append(path)
        if path in self.objects:
            return Response(200, self.objects[path])
        raise ApiError(self.fail, "NotFound", path)

    def stream(self, path: str, **kwargs: Any) -> Iterator[Any]:
        raise NotImplementedError


def test_owner_chains_are_read_once_and_cached() -> None:
    rs_path = "/apis/apps/v1/namespaces/ns/replicasets/web-1"
    dep_path = "/apis/apps/v1/namespaces/ns/deployments/web"
    api = OwnersApi({
        rs_path: {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": "web-1", "namespace": "ns", "uid": "rs",
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                    "uid": "dep", "controller": True}]}},
        dep_path: {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns",
                                                                              "uid": "dep"}},
    })
    now = [0.0]
    owners = OwnerCache(api, clock=lambda: now[0])
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}
    pods = parse_objects([pod("a", "1", owner=ref), pod("b", "1", owner=ref)]).pods
    found = owners.owners_of(pods)
    assert sorted(o["kind"] for o in found) == ["Deployment", "ReplicaSet"]
    assert api.calls == [rs_path, dep_path]
    owners.owners_of(pods)
    assert len(api.calls) == 2  # cached
    now[0] = 61.0
    owners.owners_of(pods)
    assert len(api.calls) == 4  # refreshed after the TTL


def test_a_new_pod_reads_its_owner_chain_afresh() -> None:
    """A RayCluster scaled up: its new pods come with a changed spec, which the cached copy does not show."""
    cluster_path = "/apis/ray.io/v1/namespaces/ns/rayclusters/rc"
    api = OwnersApi({cluster_path: {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                    "metadata": {"name": "rc", "namespace": "ns", "uid": "rc"}}})
    owners = OwnerCache(api, clock=lambda: 0.0)
    ref = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "rc", "controller": True}
    first = parse_objects([pod("a", "1", owner=ref)]).pods
    owners.owners_of(first)
    owners.owners_of(first)  # the same pod again: cached
    assert api.calls == [cluster_path]
    both = parse_objects([pod("a", "1", owner=ref), pod("b", "1", owner=ref)]).pods
    owners.owners_of(both)  # b is new: read afresh, once for both pods
    assert api.calls == [cluster_path, cluster_path]
    owners.owners_of(both)
    assert len(api.calls) == 2


def test_missing_or_unknown_owners_are_not_fatal() -> None:
    api = OwnersApi({}, fail=403)
    owners = OwnerCache(api, clock=lambda: 0.0)
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": "j"},
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "w"}]
    pods = parse_objects([pod("a", "1", owner=refs[0]), pod("b", "1", owner=refs[1])]).pods
    assert owners.owners_of(pods) == []
    assert api.calls == ["/apis/batch/v1/namespaces/ns/jobs/gone"]  # an unknown kind is never fetched
    owners.owners_of(pods)
    assert len(api.calls) == 1  # remembered as missing


def test_owner_paths() -> None:
    assert owner_path("kubeflow.org/v1", "PyTorchJob", "ns", "x") == "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/x"
    assert owner_path("v1", "Pod", "ns", "x") == "/api/v1/namespaces/ns/pods/x"
    assert owner_path("", "Job", "ns", "x") is None
