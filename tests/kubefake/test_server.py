"""The fake API server speaks the real server's wire format and semantics (tested through KubeClient)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kaisched.kube import resources as R
from kaisched.kube.api import ApiError
from kaisched.kube.client import KubeClient
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer, Resource


def pod(name: str, ns: str = "ns", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": "kai-scheduler", **spec}}


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def create(c: KubeClient, obj: dict[str, Any]) -> dict[str, Any]:
    kind = R.kind_for(obj["kind"])
    body = c.request("POST", kind.create_path(obj["metadata"].get("namespace")), body=obj).body
    assert isinstance(body, dict)
    return body


def error_of(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as exc:
        fn(*args, **kwargs)
    return exc.value


def binding(name: str, node_name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "annotations": annotations or {}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}


# -- CRUD ---------------------------------------------------------------------------------------------


def test_create_sets_uid_timestamp_and_increasing_resource_versions(client: KubeClient) -> None:
    a = create(client, pod("a"))
    b = create(client, pod("b"))
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a["metadata"]["creationTimestamp"].endswith("Z")
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert a["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert a["spec"]["priority"] == 0 and a["spec"]["terminationGracePeriodSeconds"] == 30
    assert a["spec"]["preemptionPolicy"] == "PreemptLowerPriority" and a["spec"]["enableServiceLinks"] is True
    got = client.request("GET", R.POD.object_path("a", "ns")).body
    assert got == a and got["kind"] == "Pod" and got["apiVersion"] == "v1"


def test_defaults_scheduler_name_and_rejects_pods_without_containers(client: KubeClient) -> None:
    p = pod("a")
    del p["spec"]["schedulerName"]
    assert create(client, p)["spec"]["schedulerName"] == "default-scheduler"
    bad = pod("b")
    bad["spec"]["containers"] = []
    err = error_of(create, client, bad)
    assert (err.status, err.reason) == (422, "Invalid")
    assert "spec.containers" in err.message


def test_errors_are_status_objects(client: KubeClient) -> None:
    err = error_of(client.request, "GET", R.POD.object_path("nope", "ns"))
    assert (err.status, err.reason, err.message) == (404, "NotFound", 'pods "nope" not found')
    assert err.body["details"] == {"name": "nope", "kind": "pods"}
    err = error_of(client.request, "GET", R.PODGROUP.object_path("pg", "ns"))
    assert err.message == 'podgroups.scheduling.run.ai "pg" not found'
    assert err.body["details"]["group"] == "scheduling.run.ai"
    create(client, pod("a"))
    err = error_of(create, client, pod("a"))
    assert (err.status, err.reason, err.message) == (409, "AlreadyExists", 'pods "a" already exists')
    err = error_of(client.request, "GET", "/apis/nothing.example/v1/things")
    assert err.status == 404
    err = error_of(client.request, "POST", R.POD.create_path("other"), body=pod("x", ns="ns"))
    assert err.status == 400 and "namespace" in err.message


def test_nodes_keep_status_on_create_crds_lose_it(client: KubeClient) -> None:
    n = create(client, node("n1", gpus=4))
    assert n["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    q = create(client, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
                        "spec": {"resources": {}}, "status": {"allocated": {"gpu": 3}}})
    assert "status" not in q
    assert q["metadata"]["generation"] == 1


def test_update_conflicts_on_a_stale_resource_version_and_no_op_keeps_it(client: KubeClient) -> None:
    a = create(client, pod("a", labels={"x": "1"}))
    a["metadata"]["labels"]["x"] = "2"
    updated = client.request("PUT", R.POD.object_path("a", "ns"), body=a).body
    assert updated["metadata"]["labels"]["x"] == "2"
    assert updated["metadata"]["resourceVersion"] != a["metadata"]["resourceVersion"]
    err = error_of(client.request, "PUT", R.POD.object_path("a", "ns"), body=a)  # a's RV is stale now
    assert (err.status, err.reason) == (409, "Conflict")
    assert "the object has been modified" in err.message
    same = client.request("PUT", R.POD.object_path("a", "ns"), body=updated).body
    assert same["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


def test_status_subresource_changes_only_status(client: KubeClient) -> None:
    a = create(client, pod("a"))
    a["status"] = {"phase": "Running"}
    a["metadata"]["labels"] = {"sneaky": "yes"}
    out = client.request("PUT", R.POD.subresource_path("status", "a", "ns"), body=a).body
    assert out["status"] == {"phase": "Running"}
    assert out["metadata"]["labels"] == {}
    out["status"] = {"phase": "Failed"}
    out2 = client.request("PUT", R.POD.object_path("a", "ns"), body=out).body
    assert out2["status"] == {"phase": "Running"}  # the main resource never writes status


def test_pod_spec_is_immutable_except_images(client: KubeClient) -> None:
    create(client, pod("a"))
    err = error_of(client.request, "PATCH", R.POD.object_path("a", "ns"), body={"spec": {"nodeName": "n1"}},
                   content_type="application/merge-patch+json")
    assert (err.status, err.reason) == (422, "Invalid")
    assert "pod updates may not change fields" in err.message
    out = client.request("PATCH", R.POD.object_path("a", "ns"),
                         body={"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}},
                         content_type="application/strategic-merge-patch+json").body
    assert out["spec"]["containers"][0]["image"] == "busybox:2"


def test_patches_merge_strategic_and_json(client: KubeClient) -> None:
    create(client, pod("a", labels={"keep": "1", "drop": "1"}))
    path = R.POD.object_path("a", "ns")
    out = client.request("PATCH", path, body={"metadata": {"labels": {"drop": None, "runai-gpu-group": "g"}}},
                         content_type="application/merge-patch+json").body
    assert out["metadata"]["labels"] == {"keep": "1", "runai-gpu-group": "g"}
    status = R.POD.subresource_path("status", "a", "ns")
    client.request("PATCH", status, body={"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
                   content_type="application/strategic-merge-patch+json")
    out = client.request("PATCH", status, body={"status": {"conditions": [{"type": "PodScheduled",
                                                                           "status": "False"}]}},
                         content_type="application/strategic-merge-patch+json").body
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodScheduled"]  # merged by type
    out = client.request("PATCH", status, body={"status": {"conditions": [{"type": "X", "status": "True"}]}},
                         content_type="application/merge-patch+json").body
    assert [c["type"] for c in out["status"]["conditions"]] == ["X"]  # a merge patch replaces lists
    out = client.request("PATCH", path, body=[{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
                                              {"op": "test", "path": "/metadata/labels/keep", "value": "1"}],
                         content_type="application/json-patch+json").body
    assert out["metadata"]["annotations"] == {"a": "b"}
    err = error_of(client.request, "PATCH", path, body=[{"op": "test", "path": "/metadata/name", "value": "x"}],
                   content_type="application/json-patch+json")
    assert err.status == 422


def test_strategic_merge_patch_is_refused_for_custom_resources(client: KubeClient) -> None:
    create(client, {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                    "metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 1}})
    err = error_of(client.request, "PATCH", R.PODGROUP.subresource_path("status", "pg", "ns"),
                   body={"status": {"phase": "Running"}}, content_type="application/strategic-merge-patch+json")
    assert (err.status, err.reason) == (415, "UnsupportedMediaType")
    out = client.request("PATCH", R.PODGROUP.subresource_path("status", "pg", "ns"),
                         body={"status": {"schedulingConditions": [{"type": "Unschedulable"}]}},
                         content_type="application/merge-patch+json").body
    assert out["status"]["schedulingConditions"] == [{"type": "Unschedulable"}]
    assert out["metadata"]["generation"] == 1  # status writes do not bump the generation
    out = client.request("PATCH", R.PODGROUP.object_path("pg", "ns"), body={"spec": {"minMember": 2}},
                         content_type="application/merge-patch+json").body
    assert out["metadata"]["generation"] == 2


def test_patch_with_a_stale_resource_version_conflicts(client: KubeClient) -> None:
    a = create(client, pod("a"))
    client.request("PATCH", R.POD.object_path("a", "ns"), body={"metadata": {"labels": {"v": "1"}}},
                   content_type="application/merge-patch+json")
    err = error_of(client.request, "PATCH", R.POD.object_path("a", "ns"),
                   body={"metadata": {"resourceVersion": a["metadata"]["resourceVersion"], "labels": {"v": "2"}}},
                   content_type="application/merge-patch+json")
    assert err.status == 409


# -- deletion -----------------------------------------------------------------------------------------


def test_unbound_pods_go_at_once_bound_pods_terminate_gracefully(server: FakeApiServer, client: KubeClient) -> None:
    create(client, pod("pending"))
    gone = client.request("DELETE", R.POD.object_path("pending", "ns")).body
    assert gone["metadata"]["name"] == "pending"
    assert server.get_object("v1", "Pod", "pending", "ns") is None

    create(client, pod("running"))
    client.request("POST", R.POD.subresource_path("binding", "running", "ns"), body=binding("running", "n1"))
    terminating = client.request("DELETE", R.POD.object_path("running", "ns")).body
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert server.get_object("v1", "Pod", "running", "ns") is not None
    client.request("DELETE", R.POD.object_path("running", "ns"), params={"gracePeriodSeconds": "0"})
    assert server.get_object("v1", "Pod", "running", "ns") is None


def test_finalizers_hold_deletion_until_removed(server: FakeApiServer, client: KubeClient) -> None:
    create(client, {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "ns", "finalizers": ["x/y"]}})
    held = client.request("DELETE", R.CONFIGMAP.object_path("cm", "ns")).body
    assert held["metadata"]["deletionTimestamp"]
    client.request("PATCH", R.CONFIGMAP.object_path("cm", "ns"), body={"metadata": {"finalizers": None}},
                   content_type="application/merge-patch+json")
    assert server.get_object("v1", "ConfigMap", "cm", "ns") is None


def test_delete_preconditions(client: KubeClient) -> None:
    create(client, pod("a"))
    err = error_of(client.request, "DELETE", R.POD.object_path("a", "ns"),
                   body={"preconditions": {"uid": "not-the-uid"}})
    assert err.status == 409 and "Precondition failed" in err.message


# -- binding and eviction ----------------------------------------------------------------------------


def test_binding_answers_a_status_and_sets_node_condition_and_annotations(client: KubeClient) -> None:
    create(client, pod("a"))
    resp = client.request("POST", R.POD.subresource_path("binding", "a", "ns"),
                          body=binding("a", "n1", {"runai/gpu-fraction": "0.5"}))
    assert resp.status == 201
    assert resp.body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    got = client.request("GET", R.POD.object_path("a", "ns")).body
    assert got["spec"]["nodeName"] == "n1"
    assert got["metadata"]["annotations"] == {"runai/gpu-fraction": "0.5"}
    assert [(c["type"], c["status"]) for c in got["status"]["conditions"]] == [("PodScheduled", "True")]
    err = error_of(client.request, "POST", R.POD.subresource_path("binding", "a", "ns"), body=binding("a", "n2"))
    assert (err.status, err.reason) == (409, "Conflict")
    assert err.message == 'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n1"'
    err = error_of(client.request, "POST", R.POD.subresource_path("binding", "gone", "ns"),
                   body=binding("gone", "n1"))
    assert err.status == 404
    err = error_of(client.request, "POST", R.POD.subresource_path("binding", "a", "ns"),
                   body={"metadata": {"name": "a"}, "target": {}})
    assert err.status == 422


def eviction(name: str, ns: str, version: str, grace: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    if grace is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": grace}
    return body


def test_eviction_v1_and_v1beta1_and_the_1_20_switch(server: FakeApiServer, client: KubeClient) -> None:
    for name in ("a", "b", "c"):
        create(client, pod(name))
        client.request("POST", R.POD.subresource_path("binding", name, "ns"), body=binding(name, "n1"))
    path = R.POD.subresource_path("eviction", "a", "ns")
    resp = client.request("POST", path, body=eviction("a", "ns", "policy/v1"))
    assert resp.status == 201 and resp.body["status"] == "Success"
    assert server.get_object("v1", "Pod", "a", "ns")["metadata"]["deletionTimestamp"]

    server.eviction_v1 = False  # as kube-apiserver 1.20.2 answers (measured): a 400, not a 404
    err = error_of(client.request, "POST", R.POD.subresource_path("eviction", "b", "ns"),
                   body=eviction("b", "ns", "policy/v1"))
    assert (err.status, err.reason) == (400, "BadRequest")
    assert 'no kind "Eviction" is registered for version "policy/v1"' in err.message
    assert server.get_object("v1", "Pod", "b", "ns") is not None
    resp = client.request("POST", R.POD.subresource_path("eviction", "b", "ns"),
                          body=eviction("b", "ns", "policy/v1beta1", grace=0))
    assert resp.status == 201
    assert server.get_object("v1", "Pod", "b", "ns") is None
    err = error_of(client.request, "POST", R.POD.subresource_path("eviction", "zz", "ns"),
                   body=eviction("zz", "ns", "policy/v1beta1"))
    assert (err.status, err.message) == (404, 'pods "zz" not found')


def test_priority_admission(client: KubeClient) -> None:
    classes = client.request("GET", R.PRIORITY_CLASS.list_path()).body["items"]
    assert {c["metadata"]["name"] for c in classes} == {"system-node-critical", "system-cluster-critical"}
    err = error_of(create, client, pod("a", priorityClassName="train"))
    assert (err.status, err.reason) == (403, "Forbidden")
    assert "no PriorityClass with name train was found" in err.message
    create(client, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "train"},
                    "value": 50})
    assert create(client, pod("a", priorityClassName="train"))["spec"]["priority"] == 50


# -- lists and selectors -----------------------------------------------------------------------------


def test_paged_list_is_a_consistent_snapshot(server: FakeApiServer, client: KubeClient) -> None:
    for i in range(5):
        create(client, pod(f"p{i}"))
    first = client.request("GET", R.POD.list_path(), params={"limit": "2"}).body
    assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1"]
    assert first["metadata"]["remainingItemCount"] == 3
    assert "kind" not in first["items"][0] and "apiVersion" not in first["items"][0]  # like the real server
    rv = first["metadata"]["resourceVersion"]
    create(client, pod("p2a"))  # written after the list began: not in this list
    client.request("DELETE", R.POD.object_path("p4", "ns"))
    names = [p["metadata"]["name"] for p in first["items"]]
    token = first["metadata"]["continue"]
    while token:
        page = client.request("GET", R.POD.list_path(), params={"limit": "2", "continue": token}).body
        assert page["metadata"]["resourceVersion"] == rv
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["p0", "p1", "p2", "p3", "p4"]

    again = client.request("GET", R.POD.list_path(), params={"limit": "2"}).body
    server.compact()  # compacting at the list's own resourceVersion keeps its continue token valid
    assert client.request("GET", R.POD.list_path(), params={"limit": "2", "continue": again["metadata"]["continue"]})
    create(client, pod("late"))
    server.compact()  # now the list's resourceVersion is older than the compaction point
    err = error_of(client.request, "GET", R.POD.list_path(),
                   params={"limit": "2", "continue": again["metadata"]["continue"]})
    assert (err.status, err.reason) == (410, "Expired")


def test_custom_resource_list_items_keep_kind(client: KubeClient) -> None:
    create(client, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}, "spec": {}})
    body = client.request("GET", R.QUEUE.list_path()).body
    assert body["kind"] == "QueueList" and body["apiVersion"] == "scheduling.run.ai/v2"
    assert body["items"][0]["kind"] == "Queue"


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=a", ["p1", "p2"]),
    ("app==a", ["p1", "p2"]),
    ("app!=a", ["p3", "p4"]),
    ("app in (a, b)", ["p1", "p2", "p3"]),
    ("app notin (a)", ["p3", "p4"]),
    ("tier", ["p2"]),
    ("!tier", ["p1", "p3", "p4"]),
    ("app=a,tier=web", ["p2"]),
    ("app in (a),!tier", ["p1"]),
])
def test_label_selectors(client: KubeClient, selector: str, expected: list[str]) -> None:
    create(client, pod("p1", labels={"app": "a"}))
    create(client, pod("p2", labels={"app": "a", "tier": "web"}))
    create(client, pod("p3", labels={"app": "b"}))
    create(client, pod("p4"))
    items = client.request("GET", R.POD.list_path(), params={"labelSelector": selector}).body["items"]
    assert [p["metadata"]["name"] for p in items] == expected


def test_field_selectors_and_bad_selectors(client: KubeClient) -> None:
    create(client, pod("p1"))
    create(client, pod("p2"))
    create(client, pod("p3", ns="other"))
    client.request("POST", R.POD.subresource_path("binding", "p2", "ns"), body=binding("p2", "n1"))

    def names(**params: str) -> list[str]:
        return [p["metadata"]["name"] for p in client.request("GET", R.POD.list_path(), params=params).body["items"]]

    assert names(fieldSelector="spec.nodeName=") == ["p1", "p3"]
    assert names(fieldSelector="spec.nodeName=n1") == ["p2"]
    assert names(fieldSelector="spec.nodeName!=") == ["p2"]
    assert names(fieldSelector="metadata.name=p3") == ["p3"]
    assert names(fieldSelector="metadata.namespace=ns,status.phase=Pending") == ["p1", "p2"]
    items = client.request("GET", R.POD.list_path("other")).body["items"]
    assert [p["metadata"]["name"] for p in items] == ["p3"]
    err = error_of(client.request, "GET", R.POD.list_path(), params={"fieldSelector": "spec.priority=1"})
    assert (err.status, err.message) == (400, "field label not supported: spec.priority")
    err = error_of(client.request, "GET", R.POD.list_path(), params={"labelSelector": "app in a"})
    assert err.status == 400


# -- watch ----------------------------------------------------------------------------------------------


class Watch:
    """Collect a watch stream in a thread."""

    def __init__(self, client: KubeClient, path: str, **params: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: ApiError | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, path, params), daemon=True)
        self._thread.start()

    def _run(self, client: KubeClient, path: str, params: dict[str, str]) -> None:
        try:
            for event in client.stream(path, params=params, timeout=10):
                self.events.append(event)
        except ApiError as err:
            self.error = err
        finally:
            self.done.set()

    def types(self) -> list[tuple[str, str]]:
        return [(e["type"], e["object"].get("metadata", {}).get("name", "")) for e in self.events]


def test_watch_from_a_resource_version_streams_changes(server: FakeApiServer, client: KubeClient) -> None:
    create(client, pod("old"))
    rv = client.request("GET", R.POD.list_path()).body["metadata"]["resourceVersion"]
    w = Watch(client, R.POD.list_path(), resourceVersion=rv, timeoutSeconds="1")
    assert server.wait_for_watches(1)
    create(client, pod("a"))
    client.request("PATCH", R.POD.object_path("a", "ns"), body={"metadata": {"labels": {"x": "1"}}},
                   content_type="application/merge-patch+json")
    client.request("DELETE", R.POD.object_path("a", "ns"))
    create(client, node("n1"))  # another resource: not in this watch
    assert wait_until(lambda: len(w.events) >= 3)
    assert w.types()[:3] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in w.events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert w.events[0]["object"]["kind"] == "Pod"  # watch objects carry kind/apiVersion
    assert w.done.wait(5) and w.error is None  # timeoutSeconds ends the stream cleanly


def test_watch_without_a_resource_version_starts_with_the_current_state(client: KubeClient) -> None:
    create(client, pod("a"))
    create(client, pod("b"))
    w = Watch(client, R.POD.list_path(), timeoutSeconds="1")
    assert w.done.wait(5)
    assert w.types() == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_with_a_selector_translates_changes(server: FakeApiServer, client: KubeClient) -> None:
    rv = str(server.resource_version)
    w = Watch(client, R.POD.list_path(), resourceVersion=rv, labelSelector="app=x", timeoutSeconds="2")
    assert server.wait_for_watches(1)
    create(client, pod("a"))
    path = R.POD.object_path("a", "ns")
    for value in ("x", "x", "y"):
        client.request("PATCH", path, body={"metadata": {"labels": {"app": value, "v": str(time.monotonic())}}},
                       content_type="application/merge-patch+json")
    assert wait_until(lambda: len(w.events) >= 3)
    assert w.types() == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_bookmarks_only_when_asked(server: FakeApiServer, client: KubeClient) -> None:
    rv = str(server.resource_version)
    with_marks = Watch(client, R.POD.list_path(), resourceVersion=rv, allowWatchBookmarks="true",
                       timeoutSeconds="1")
    without = Watch(client, R.POD.list_path(), resourceVersion=rv, timeoutSeconds="1")
    assert server.wait_for_watches(2)
    create(client, node("n1"))  # advances the resourceVersion without a pod event
    server.bookmark_now()
    assert with_marks.done.wait(5) and without.done.wait(5)
    marks = [e for e in with_marks.events if e["type"] == "BOOKMARK"]
    assert marks and int(marks[-1]["object"]["metadata"]["resourceVersion"]) == server.resource_version
    assert marks[0]["object"]["kind"] == "Pod"
    assert without.events == []


def test_watch_from_a_compacted_version_gets_an_in_stream_410(server: FakeApiServer, client: KubeClient) -> None:
    create(client, pod("a"))
    create(client, pod("b"))
    server.compact()
    w = Watch(client, R.POD.list_path(), resourceVersion="1")
    assert w.done.wait(5)
    assert w.error is None
    assert len(w.events) == 1
    event = w.events[0]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith("too old resource version: 1")


def test_expire_watches_ends_open_watches_with_410(server: FakeApiServer, client: KubeClient) -> None:
    w = Watch(client, R.NODE.list_path(), resourceVersion=str(server.resource_version))
    assert server.wait_for_watches(1)
    server.expire_watches()
    assert w.done.wait(5)
    assert [e["type"] for e in w.events] == ["ERROR"] and w.events[0]["object"]["code"] == 410


def test_history_limit_compacts_old_versions() -> None:
    with FakeApiServer(history_limit=3) as srv:
        c = KubeClient.from_url(srv.url, trust_env=False)
        first_rv = srv.resource_version
        for i in range(5):
            create(c, node(f"n{i}"))
        w = Watch(c, R.NODE.list_path(), resourceVersion=str(first_rv))
        assert w.done.wait(5)
        assert w.events[0]["type"] == "ERROR"
        c.close()


# -- fault injection, restarts, the request log -------------------------------------------------------


def test_fail_next_injects_status_errors(server: FakeApiServer, client: KubeClient) -> None:
    server.fail_next("GET", r"^/api/v1/nodes$", 429, times=2)
    server.fail_next("POST", r"/pods$", 500)
    for _ in range(2):
        err = error_of(client.request, "GET", R.NODE.list_path())
        assert (err.status, err.reason) == (429, "TooManyRequests")
        assert err.body["details"]["retryAfterSeconds"] == 1
    assert client.request("GET", R.NODE.list_path()).status == 200
    err = error_of(create, client, pod("a"))
    assert (err.status, err.reason) == (500, "InternalError") and err.retryable
    create(client, pod("a"))
    server.fail_next("*", r"labelSelector=app=x", 503)
    assert client.request("GET", R.POD.list_path(), params={"labelSelector": "app=y"}).status == 200
    assert error_of(client.request, "GET", R.POD.list_path(), params={"labelSelector": "app=x"}).status == 503


def test_request_log(server: FakeApiServer, client: KubeClient) -> None:
    server.clear_requests()
    create(client, pod("a"))
    client.request("GET", R.POD.list_path(), params={"limit": "10"})
    error_of(client.request, "GET", R.POD.object_path("b", "ns"))
    log = server.requests
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", "/api/v1/namespaces/ns/pods", 201),
        ("GET", "/api/v1/pods", 200),
        ("GET", "/api/v1/namespaces/ns/pods/b", 404),
    ]
    assert log[0].body["metadata"]["name"] == "a"
    assert log[1].query == {"limit": "10"}
    assert server.count("GET", r"pods\?limit=10") == 1


def test_restart_on_the_same_port_keeps_the_objects(server: FakeApiServer, client: KubeClient) -> None:
    create(client, pod("a"))
    port = server.port
    server.stop()
    err = error_of(client.request, "GET", R.POD.list_path())
    assert err.status == 0 and err.retryable
    server.start()
    assert server.port == port
    items = client.request("GET", R.POD.list_path()).body["items"]
    assert [p["metadata"]["name"] for p in items] == ["a"]


def test_restart_rebuilds_the_watch_cache_but_keeps_continue_tokens(server: FakeApiServer,
                                                                    client: KubeClient) -> None:
    create(client, pod("a"))
    create(client, pod("b"))
    page = client.request("GET", R.POD.list_path(), params={"limit": "1"}).body
    old_rv = page["metadata"]["resourceVersion"]
    create(client, pod("c"))
    server.stop()
    server.start()
    w = Watch(client, R.POD.list_path(), resourceVersion=old_rv)
    assert w.done.wait(5)
    assert [e["type"] for e in w.events] == ["ERROR"]
    assert w.events[0]["object"]["message"] == f"too old resource version: {old_rv} ({server.resource_version})"
    rest = client.request("GET", R.POD.list_path(), params={"limit": "5", "continue": page["metadata"]["continue"]})
    assert [p["metadata"]["name"] for p in rest.body["items"]] == ["b"]
    now = Watch(client, R.POD.list_path(), resourceVersion=str(server.resource_version), timeoutSeconds="1")
    assert now.done.wait(5) and now.events == []


def test_drop_connections_cuts_watches(server: FakeApiServer, client: KubeClient) -> None:
    w = Watch(client, R.POD.list_path(), resourceVersion=str(server.resource_version))
    assert server.wait_for_watches(1)
    server.drop_connections()
    assert w.done.wait(5)
    assert w.error is not None and w.error.status == 0
    assert client.request("GET", R.POD.list_path()).status == 200


def test_bearer_token_is_required_when_configured(tmp_path: Any) -> None:
    with FakeApiServer(token="t0k") as srv:
        anonymous = KubeClient.from_url(srv.url, trust_env=False)
        err = error_of(anonymous.request, "GET", R.NODE.list_path())
        assert (err.status, err.reason) == (401, "Unauthorized")
        authed = KubeClient.from_kubeconfig(srv.kubeconfig(tmp_path / "kc"))
        assert authed.request("GET", R.NODE.list_path()).status == 200
        anonymous.close()
        authed.close()


def test_client_serves_16_requests_concurrently(server: FakeApiServer, client: KubeClient) -> None:
    gate = server.pause("GET", r"^/api/v1/nodes$", timeout=10)
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(client.request("GET", R.NODE.list_path()).status))
               for _ in range(16)]
    for t in threads:
        t.start()
    try:
        assert gate.wait_for(16, timeout=5), f"only {gate.waiting} requests in flight at once"
    finally:
        gate.release()
        for t in threads:
            t.join(5)
    assert results == [200] * 16


def test_seed_and_direct_access(server: FakeApiServer, client: KubeClient) -> None:
    stored = server.seed({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r", "namespace": "ns"},
                          "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}})
    assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"] == str(server.resource_version)
    got = client.request("GET", R.POD.object_path("r", "ns")).body
    assert got["status"] == {"phase": "Running"}
    assert [p["metadata"]["name"] for p in server.list_objects("v1", "Pod")] == ["r"]
    assert server.delete_object("v1", "Pod", "r", "ns")
    assert not server.delete_object("v1", "Pod", "r", "ns")
    server.register(Resource("kubeflow.org", ("v1",), "pytorchjobs", "PyTorchJob", crd=True, status=True))
    create_path = "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs"
    out = client.request("POST", create_path, body={"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                    "metadata": {"name": "j"}, "spec": {}}).body
    assert out["metadata"]["namespace"] == "ns"
    with pytest.raises(KeyError, match="does not serve"):
        server.get_object("v9", "Nope", "x")
