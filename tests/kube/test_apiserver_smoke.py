"""What the real kube-apiserver (1.35, ``KUBE_VERSION``) does on the calls kaisched's Kubernetes mode relies on.

These pin the server's behaviour, not ours: if one fails, the assumption in ``kaisched.kube`` it names is wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.kube.apiserver import (
    DRA_VERSIONS,
    KUBE_VERSION,
    SCRIPT,
    ApiServerError,
    KubeApiServer,
    apiserver_binary,
    cache_dir,
)
from tests.kube.fake_kubelet import FakeKubelet

pytestmark = pytest.mark.kube

GPU = "nvidia.com/gpu"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_manifest(name: str, gpus: int = 8) -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100", "kubernetes.io/hostname": name}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod_manifest(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": "team-a"}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {GPU: str(gpus)}, "requests": {"cpu": "1"}},
                }
            ],
        },
    }


def create(client: httpx2.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    assert answer.status_code == 201, f"POST {path}: {answer.status_code} {answer.text}"
    created: dict[str, Any] = answer.json()
    return created


def bind(client: httpx2.Client, namespace: str, pod: str, node: str) -> httpx2.Response:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return client.post(f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", json=binding)


def test_server_is_the_scripts_version_and_the_kubeconfig_works_with_lightkube(kube_apiserver: KubeApiServer) -> None:
    from lightkube import Client, KubeConfig
    from lightkube.resources.core_v1 import Namespace

    with kube_apiserver.http_client() as client:
        version = client.get("/version").json()
    assert version["gitVersion"] == f"v{KUBE_VERSION}"
    assert (version["major"], version["minor"]) == tuple(KUBE_VERSION.split(".")[:2])
    # the harness finds the binary where the script puts it: one version names both
    assert cache_dir().name == f"kube-apiserver-{KUBE_VERSION}"
    if not os.environ.get("KAISCHED_KUBE_APISERVER"):
        path = subprocess.run(["bash", str(SCRIPT), "path"], capture_output=True, text=True, check=True).stdout
        assert Path(path.strip()) == kube_apiserver.binary
    config = KubeConfig.from_file(kube_apiserver.kubeconfig_path)
    with Client(config=config) as lk:
        names = {ns.metadata.name for ns in lk.list(Namespace) if ns.metadata is not None}
    assert {"default", "kube-system"} <= names


def test_node_status_is_kept_at_create_and_changed_only_through_the_status_subresource(
    kube_http: httpx2.Client,
) -> None:
    name = unique("gpu-node")
    created = create(kube_http, "/api/v1/nodes", node_manifest(name, gpus=8))
    assert created["status"]["allocatable"][GPU] == "8"
    assert created["status"]["capacity"][GPU] == "8"

    # A patch of the main resource silently drops status changes ...
    merge = {"Content-Type": "application/merge-patch+json"}
    body = json.dumps({"status": {"allocatable": {GPU: "4"}}}).encode()
    answer = kube_http.patch(f"/api/v1/nodes/{name}", content=body, headers=merge)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["allocatable"][GPU] == "8"
    # ... the status subresource changes them.
    answer = kube_http.patch(f"/api/v1/nodes/{name}/status", content=body, headers=merge)
    assert answer.status_code == 200, answer.text
    assert kube_http.get(f"/api/v1/nodes/{name}").json()["status"]["allocatable"][GPU] == "4"


def test_binding_answers_a_status_and_the_fake_kubelet_runs_the_pod(
    kube_http: httpx2.Client, kube_namespace: str, fake_kubelet: FakeKubelet
) -> None:
    node = unique("gpu-node")
    create(kube_http, "/api/v1/nodes", node_manifest(node))
    create(kube_http, f"/api/v1/namespaces/{kube_namespace}/pods", pod_manifest("worker-0"))

    answer = bind(kube_http, kube_namespace, "worker-0", node)
    assert answer.status_code == 201, answer.text
    status = answer.json()
    assert status["kind"] == "Status"  # not a Binding: decoding it as one fails (ecosystem.md 1.4)
    assert status["status"] == "Success"
    assert "target" not in status

    fake_kubelet.wait_running(kube_namespace, "worker-0")
    pod = kube_http.get(f"/api/v1/namespaces/{kube_namespace}/pods/worker-0").json()
    assert pod["spec"]["nodeName"] == node
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["startTime"]
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"

    # Binding a bound pod: 409; binding a pod that is gone: 404. kaisched reports these, never retries.
    again = bind(kube_http, kube_namespace, "worker-0", node)
    assert again.status_code == 409, again.text
    assert again.json()["reason"] == "Conflict"
    missing = bind(kube_http, kube_namespace, "no-such-pod", node)
    assert missing.status_code == 404, missing.text
    assert missing.json()["reason"] == "NotFound"


def test_eviction_is_policy_v1_and_the_pod_stays_terminating_until_the_kubelet_reaps_it(
    kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str
) -> None:
    node = unique("gpu-node")
    create(kube_http, "/api/v1/nodes", node_manifest(node))
    for name in ("victim", "old-client"):
        create(kube_http, f"/api/v1/namespaces/{kube_namespace}/pods", pod_manifest(name))
        assert bind(kube_http, kube_namespace, name, node).status_code == 201
    pods = f"/api/v1/namespaces/{kube_namespace}/pods"

    def eviction(name: str, api_version: str = "policy/v1") -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": "Eviction", "metadata": {"name": name, "namespace": kube_namespace}}

    # Discovery names the Eviction version the server takes: policy/v1 (since 1.22), the one kaisched sends.
    resources = {r["name"]: r for r in kube_http.get("/api/v1").json()["resources"]}
    assert (resources["pods/eviction"]["group"], resources["pods/eviction"]["version"]) == ("policy", "v1")

    with FakeKubelet.for_server(kube_apiserver, namespace=kube_namespace, reap_deleted=False) as kubelet:
        kubelet.wait_running(kube_namespace, "victim")
        v1 = kube_http.post(f"{pods}/victim/eviction", json=eviction("victim"))
        assert v1.status_code == 201, v1.text
        assert (v1.json()["kind"], v1.json()["status"]) == ("Status", "Success")
        # kaisched's fallback body (for servers without policy/v1) is still taken, though deprecated
        v1beta1 = kube_http.post(f"{pods}/old-client/eviction", json=eviction("old-client", "policy/v1beta1"))
        assert v1beta1.status_code == 201, v1beta1.text
        # No kubelet confirms the stop: the pods stay, Terminating, with a deletionTimestamp.
        time.sleep(0.5)
        for name in ("victim", "old-client"):
            pod = kube_http.get(f"{pods}/{name}").json()
            assert pod["metadata"]["deletionTimestamp"]
            assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
        # Evicting a pod that is gone: 404 NotFound (kaisched takes it as done).
        gone = kube_http.post(f"{pods}/no-such-pod/eviction", json=eviction("no-such-pod"))
        assert gone.status_code == 404, gone.text
        assert gone.json()["reason"] == "NotFound"

    with FakeKubelet.for_server(kube_apiserver, namespace=kube_namespace) as reaper:
        reaper.wait_deleted(kube_namespace, "victim")
        reaper.wait_deleted(kube_namespace, "old-client")
    assert kube_http.get(f"{pods}/victim").status_code == 404


def test_dra_is_served_in_v1_and_both_betas(kube_http: httpx2.Client) -> None:
    """resource.k8s.io/v1 is served by default (GA in 1.34); v1beta1 and v1beta2 by ``--runtime-config``.
    An object written in any of them reads back through v1."""
    group = kube_http.get("/apis/resource.k8s.io").json()
    assert {f"resource.k8s.io/{v['version']}" for v in group["versions"]} == set(DRA_VERSIONS)
    assert group["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"
    device = {"attributes": {"model": {"string": "H100"}}, "capacity": {"memory": {"value": "80Gi"}}}
    for version in DRA_VERSIONS:
        served = {r["name"] for r in kube_http.get(f"/apis/{version}").json()["resources"]}
        assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served, version
        name = unique(version.split("/")[1])
        selector = {"cel": {"expression": "device.attributes['gpu.example.com'].model == 'H100'"}}
        create(kube_http, f"/apis/{version}/deviceclasses", {
            "apiVersion": version, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [selector]}})
        # v1beta1 nests a device's attributes and capacity under `basic`; v1beta2 and v1 do not
        listed = {"name": "gpu-0", "basic": device} if version.endswith("v1beta1") else {"name": "gpu-0", **device}
        create(kube_http, f"/apis/{version}/resourceslices", {
            "apiVersion": version, "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "nodeName": "gpu-node-0",
                     "pool": {"name": "gpu-node-0", "generation": 1, "resourceSliceCount": 1}, "devices": [listed]}})
        through_v1 = kube_http.get(f"/apis/resource.k8s.io/v1/deviceclasses/{name}").json()
        assert through_v1["spec"]["selectors"] == [selector]
        slice_v1 = kube_http.get(f"/apis/resource.k8s.io/v1/resourceslices/{name}").json()
        assert slice_v1["spec"]["devices"] == [{"name": "gpu-0", **device}], version


def watch_events(client: httpx2.Client, path: str, rv: str, seconds: int = 2) -> tuple[int, list[dict[str, Any]]]:
    params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": str(seconds)}
    with client.stream("GET", path, params=params) as answer:
        return answer.status_code, [json.loads(line) for line in answer.iter_lines() if line.strip()]


def test_watch_from_the_current_resource_version_reports_new_objects(kube_http: httpx2.Client) -> None:
    current = kube_http.get("/api/v1/namespaces", params={"limit": "1"}).json()["metadata"]["resourceVersion"]
    name = unique("ns")
    create(kube_http, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    params = {"watch": "1", "resourceVersion": current, "allowWatchBookmarks": "true", "timeoutSeconds": "5"}
    with kube_http.stream("GET", "/api/v1/namespaces", params=params) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            event = json.loads(line)
            assert event["type"] != "ERROR", event
            if event["object"]["metadata"]["name"] == name:
                assert event["type"] == "ADDED"
                break
        else:
            pytest.fail(f"watch from resourceVersion {current} did not report namespace {name}")


def test_lease_create_renew_and_409_on_a_stale_resource_version(
    kube_http: httpx2.Client, kube_namespace: str
) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{kube_namespace}/leases"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kaisched-leader"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }
    created = create(kube_http, path, lease)
    again = kube_http.post(path, json=lease)
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"

    renewed = {**created, "spec": {**created["spec"], "renewTime": "2026-01-01T00:00:02.000000Z"}}
    answer = kube_http.put(f"{path}/kaisched-leader", json=renewed)
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]

    # A second candidate still holding the first resourceVersion loses: 409 Conflict, the lease is unchanged.
    stolen = {**created, "spec": {**created["spec"], "holderIdentity": "b"}}
    stale = kube_http.put(f"{path}/kaisched-leader", json=stolen)
    assert stale.status_code == 409, stale.text
    assert stale.json()["reason"] == "Conflict"
    assert kube_http.get(f"{path}/kaisched-leader").json()["spec"]["holderIdentity"] == "a"


def test_after_an_apiserver_restart_old_resource_versions_get_410_and_the_fake_kubelet_recovers(
    kube_apiserver: KubeApiServer, kube_namespace: str, fake_kubelet: FakeKubelet
) -> None:
    url = kube_apiserver.url
    pods = f"/api/v1/namespaces/{kube_namespace}/pods"
    fake_kubelet.wait_synced()
    with kube_apiserver.http_client() as client:
        old_rv = client.get(pods).json()["metadata"]["resourceVersion"]
        node = unique("gpu-node")
        create(client, "/api/v1/nodes", node_manifest(node))  # etcd's revision moves past old_rv
    assert fake_kubelet.relists == 1

    started = time.monotonic()
    kube_apiserver.restart_apiserver()  # SIGKILL mid-watch, then start on the same port and etcd
    assert time.monotonic() - started < 30
    assert kube_apiserver.url == url

    with kube_apiserver.http_client() as client:
        assert client.get(f"/api/v1/nodes/{node}").status_code == 200  # the data lives in etcd
        # The new server's watch cache starts at the current revision: resuming a watch from before the
        # restart gives 410 Expired, inside a 200 stream, as an ERROR event.
        status_code, events = watch_events(client, pods, old_rv)
        assert status_code == 200
        assert [e["type"] for e in events] == ["ERROR"], events
        assert events[0]["object"]["kind"] == "Status"
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["reason"] == "Expired"
        assert "too old resource version" in events[0]["object"]["message"]

        create(client, pods, pod_manifest("after-restart"))
        assert bind(client, kube_namespace, "after-restart", node).status_code == 201
    fake_kubelet.wait_running(kube_namespace, "after-restart", timeout=30)
    assert fake_kubelet.errors, "the fake kubelet should have seen the connection drop"
    assert fake_kubelet.relists >= 2, "the fake kubelet should have relisted after its watch expired"


def test_fake_kubelet_finish_ends_a_running_pod(
    kube_http: httpx2.Client, kube_namespace: str, fake_kubelet: FakeKubelet
) -> None:
    node = unique("gpu-node")
    create(kube_http, "/api/v1/nodes", node_manifest(node))
    create(kube_http, f"/api/v1/namespaces/{kube_namespace}/pods", pod_manifest("job-0"))
    assert bind(kube_http, kube_namespace, "job-0", node).status_code == 201
    fake_kubelet.wait_running(kube_namespace, "job-0")

    fake_kubelet.finish(kube_namespace, "job-0")
    pod = kube_http.get(f"/api/v1/namespaces/{kube_namespace}/pods/job-0").json()
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    with pytest.raises(ValueError, match="job-0: phase must be Succeeded or Failed"):
        fake_kubelet.finish(kube_namespace, "job-0", phase="Running")


def test_a_start_failure_raises_with_the_log_tail_and_leaves_nothing_running(kube_apiserver: KubeApiServer) -> None:
    server = KubeApiServer(extra_args=["--no-such-flag"], startup_timeout=20)
    with pytest.raises(ApiServerError, match=r"kube-apiserver exited with code \d+ during start-up") as info:
        server.start()
    assert "unknown flag: --no-such-flag" in str(info.value)
    assert not server.workdir.exists()
    assert not server.running


def test_without_the_binary_the_harness_says_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KAISCHED_KUBE_CACHE", str(tmp_path))
    monkeypatch.delenv("KAISCHED_KUBE_APISERVER", raising=False)
    assert apiserver_binary() is None
    with pytest.raises(ApiServerError, match="make kube-apiserver"):
        KubeApiServer()


def test_custom_resources_with_a_status_subresource_round_trip(
    kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str
) -> None:
    group, plural = "smoke.kaisched.test", "widgets"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": plural, "singular": "widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    answer = kube_http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert answer.status_code in (201, 409), answer.text
    path = f"/apis/{group}/v1/namespaces/{kube_namespace}/{plural}"
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {"resources": {"gpu": {"quota": 2, "limit": -1}, "cpu": {"quota": 8}}, "tags": ["x", "y"]},
    }
    deadline = time.monotonic() + 15
    while (answer := kube_http.post(path, json=widget)).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.2)  # the new resource is served a moment after the CRD is created
    assert answer.status_code == 201, answer.text
    merge = {"Content-Type": "application/merge-patch+json"}
    status = json.dumps({"status": {"phase": "Ready", "allocated": {"gpu": 1}}}).encode()
    patched = kube_http.patch(f"{path}/w/status", content=status, headers=merge)
    assert patched.status_code == 200, patched.text
    got = kube_http.get(f"{path}/w").json()
    assert got["spec"]["resources"]["gpu"] == {"quota": 2, "limit": -1}
    assert got["status"] == {"phase": "Ready", "allocated": {"gpu": 1}}
    assert [item["metadata"]["name"] for item in kube_http.get(path).json()["items"]] == ["w"]
    assert kube_apiserver.running
    assert kube_http.get("/readyz").status_code == 200
