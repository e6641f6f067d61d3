"""docs/migrating-from-kai.md on a real kube-apiserver: ``kaisched run`` takes over the state KAI left behind
(KAI's CRDs, a BindRequest its binder never carried out, pods bound with ``runai-gpu-group`` labels, a reservation
pod in ``kai-resource-reservation``, a GPU env ConfigMap), adopts the running pods without double-booking or
evicting any, leaves KAI's objects alone, serves ``/get-snapshot`` (which ``kaisched replay`` reads back as a
settled state), and the runbook's clean-up step deletes the BindRequests."""

from __future__ import annotations

import json
import socket
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from tests.kube.apiserver import KubeApiServer
from tests.kube.contract_helpers import (
    ContractCluster,
    Kube,
    create_node,
    install_crds,
    module_apiserver,
    node,
    pod,
    pod_group,
    pod_groups_path,
    pods_path,
    wait_until,
)
from tests.kube.fake_kubelet import FakeKubelet

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/kai-migration"
RESERVATION_NS = "kai-resource-reservation"
BIND_REQUESTS = "bindrequests.scheduling.run.ai"
#: KAI's BindRequest CRD as far as this test needs it (kaisched ships no BindRequest CRD; KAI's stays installed)
BIND_REQUEST_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": BIND_REQUESTS},
    "spec": {"group": "scheduling.run.ai", "scope": "Namespaced",
             "names": {"plural": "bindrequests", "singular": "bindrequest", "kind": "BindRequest",
                       "listKind": "BindRequestList"},
             "versions": [{"name": "v1alpha2", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def _kai_crd(plural: str, kind: str, group: str, version: str, namespaced: bool) -> dict[str, Any]:
    """A CRD of KAI's that kaisched does not ship, as far as these tests need it (any fields kept)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced" if namespaced else "Cluster",
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                 "versions": [{"name": version, "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _kai_crds(kube: Kube) -> None:
    install_crds(kube)
    with tempfile.TemporaryDirectory() as tmp:
        crds = [BIND_REQUEST_CRD, _kai_crd("schedulingshards", "SchedulingShard", "kai.scheduler", "v1", False),
                _kai_crd("configs", "Config", "kai.scheduler", "v1", False)]
        (Path(tmp) / "kai.yaml").write_text(yaml.safe_dump_all(crds))
        install_crds(kube, Path(tmp))
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": RESERVATION_NS}}, ok=(201, 409))


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """This module's own API server with KAI's CRDs, BindRequest's included."""
    yield from module_apiserver(_kai_crds)


class Cluster(ContractCluster):
    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)

    def add_node(self) -> str:
        name = f"n{self.id}-{len(self.nodes)}"
        create_node(self.kube, node(name, 8, labels=self.labels))
        self.nodes.append(name)
        return name

    def bound_pod(self, name: str, queue_name: str, node_name: str, gpus: int = 0, fraction: str | None = None,
                  gpu_group: str | None = None) -> None:
        """A pod KAI's binder bound (spec.nodeName set), in a PodGroup of its own."""
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, 1))
        manifest = pod(self.ns, name, queue_name, gpus, group=name, fraction=fraction)
        manifest["spec"]["nodeName"] = node_name
        if gpu_group:
            manifest["metadata"]["labels"]["runai-gpu-group"] = gpu_group
            manifest["metadata"]["annotations"]["runai/shared-gpu-configmap"] = f"{name}-shared-gpu"
        self.kube.create(pods_path(self.ns), manifest)

    def pending_pod(self, name: str, queue_name: str, gpus: int = 0, fraction: str | None = None) -> None:
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, 1))
        self.kube.create(pods_path(self.ns), pod(self.ns, f"{name}-0", queue_name, gpus, group=name,
                                                 fraction=fraction))

    def delete_own(self) -> None:
        self.kube.delete_collection(f"/api/v1/namespaces/{RESERVATION_NS}/pods", grace_seconds=0)
        self.kube.delete_collection(f"/apis/scheduling.run.ai/v1alpha2/namespaces/{self.ns}/bindrequests")
        self.kube.delete_collection(f"/api/v1/namespaces/{self.ns}/configmaps",
                                    label_selector=f"{self.label}={self.id}")


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str,
            tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kaisched_takes_over_what_kai_left_without_double_booking(cluster: Cluster,
                                                                  fake_kubelet: FakeKubelet) -> None:
    kube = cluster.kube
    n0, n1 = cluster.add_node(), cluster.add_node()
    q = cluster.queues(16, {"a": 16})["a"]
    # node n0 as KAI left it: seven whole GPUs in use, the eighth shared by two half-GPU pods (GPU group g-1) and
    # held for the device plugin by the binder's reservation pod; their GPU env ConfigMaps
    cluster.bound_pod("whole", q, n0, gpus=7)
    for name in ("half-a", "half-b"):
        cluster.bound_pod(name, q, n0, fraction="0.5", gpu_group="g-1")
        kube.create(f"/api/v1/namespaces/{cluster.ns}/configmaps",
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"{name}-shared-gpu", "labels": cluster.labels},
                     "data": {"NVIDIA_VISIBLE_DEVICES": "GPU-7"}})
    kube.create(f"/api/v1/namespaces/{RESERVATION_NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"gpu-reservation-{n0}", "labels": {"app": "kai-resource-reservation",
                                                                 "runai-gpu-group": "g-1", **cluster.labels}},
        "spec": {"nodeName": n0, "containers": [{"name": "reservation", "image": "kai-resource-reservation",
                                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    # a pod KAI's scheduler placed on n0 whose BindRequest its binder never carried out
    cluster.pending_pod("late", q, gpus=1)
    kube.create(f"/apis/scheduling.run.ai/v1alpha2/namespaces/{cluster.ns}/bindrequests", {
        "apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
        "metadata": {"name": "late-0-abcde", "labels": cluster.labels},
        "spec": {"podName": "late-0", "selectedNode": n0, "receivedResourceType": "Regular"}})
    wait_until(lambda: all((p.get("status") or {}).get("phase") == "Running"
                           for p in cluster.pods().values() if p["spec"].get("nodeName")), 30.0, "KAI's pods running")
    running_before = {name: p["metadata"]["uid"] for name, p in cluster.pods().items() if p["spec"].get("nodeName")}

    port = _free_port()
    cluster.kaisched("--plugin-server-address", f"127.0.0.1:{port}")
    cluster.pending_pod("new-half", q, fraction="0.5")
    cluster.pending_pod("new-whole", q, gpus=1)
    placed = cluster.wait_bound(["late-0", "new-half-0", "new-whole-0"])
    # n0 has no GPU left: everything new goes to n1, the fractional pod onto a GPU group of its own
    assert placed == {"late-0": n1, "new-half-0": n1, "new-whole-0": n1}
    pods = cluster.pods()
    assert pods["new-half-0"]["metadata"]["labels"]["runai-gpu-group"] != "g-1"
    # nothing KAI placed was evicted or moved, KAI's objects are as they were
    assert {name: pods[name]["metadata"]["uid"] for name in running_before} == running_before
    assert all(pods[name]["spec"]["nodeName"] == n0 for name in running_before)
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
    assert kube.get(f"/api/v1/namespaces/{RESERVATION_NS}/pods/gpu-reservation-{n0}") is not None
    assert kube.get(f"/api/v1/namespaces/{cluster.ns}/configmaps/half-a-shared-gpu") is not None
    requests = f"/apis/scheduling.run.ai/v1alpha2/namespaces/{cluster.ns}/bindrequests"
    assert [b["metadata"]["name"] for b in kube.items(requests)] == ["late-0-abcde"]

    # /get-snapshot on the plugin port: kaisched's state in KAI's format, which kaisched replay reads as settled
    snapshot = cluster.tmp_path / "snapshot.zip"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/get-snapshot", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/zip"
        snapshot.write_bytes(answer.read())
    replayed = CliRunner().invoke(cli, ["replay", str(snapshot), "-o", "json", "-q"])
    assert replayed.exit_code in (0, 1), replayed.output  # 1: objects of other tests' namespaces may be invalid
    result: dict[str, Any] = json.loads(replayed.stdout)
    ours = [d for kind in ("binds", "pipelined", "evictions") for d in result[kind]
            if d["pod"].startswith(f"{cluster.ns}/")]
    assert ours == [], "a settled cluster: the replay decides nothing more for this test's pods"

    # the runbook's clean-up: the BindRequests go, the CRD stays
    kube.delete_collection(requests)
    wait_until(lambda: kube.items(requests) == [], 10.0, "BindRequests deleted")
    assert kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{BIND_REQUESTS}") is not None


def test_kais_shard_settings_carry_over(cluster: Cluster) -> None:
    """The runbook's settings step on a real server: kaisched from-kai reads KAI's SchedulingShard and Config (GETs),
    and kaisched run without --config schedules with the shard's placement (spread: two pods on two nodes)."""
    kube = cluster.kube
    shard = f"shard-{cluster.id}"
    shards = "/apis/kai.scheduler/v1/schedulingshards"
    kube.create(shards, {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
                         "metadata": {"name": shard, "labels": cluster.labels},
                         "spec": {"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "kValue": 2,
                                  "args": {"detailed-fit-errors": "true"}}})
    try:
        made = CliRunner().invoke(cli, ["from-kai", "--kubeconfig", str(cluster.server.kubeconfig_path),
                                        "--shard", shard, "-o", "config"])
        assert made.exit_code == 0, made.output
        config = yaml.safe_load(made.stdout)
        assert "consolidation" not in config["actions"] and config["params"] == {"detailed-fit-errors": "true"}
        n0, n1 = cluster.add_node(), cluster.add_node()
        q = cluster.queues(16, {"a": 16})["a"]
        for name in ("one", "two"):
            cluster.pending_pod(name, q, gpus=1)
        proc = cluster.kaisched("--shard", shard)
        placed = cluster.wait_bound(["one-0", "two-0"])
        assert set(placed.values()) == {n0, n1}  # spread, from the shard (binpack would fill one node)
        proc.wait_for_log(lambda r: r.get("event") == "configuration from KAI's SchedulingShard", 10.0,
                          "the shard's configuration taken")
    finally:
        kube.delete(f"{shards}/{shard}")
