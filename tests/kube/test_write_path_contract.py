"""The write path (issue 28) on the real kube-apiserver: the cluster writer creates each pod's PodGroup before its
binding, the pod-grouper's annotation rides on the Binding (the server writes it onto the pod as it binds it: no
pod patch), and the client's error carries a real server's Retry-After."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kaisched.kube.api import Response
from kaisched.kube.client import KubeClient
from kaisched.kube.operations import Bind, CreatePodGroup, ObjectRef, PodMetadataPatch, fold_grouping
from kaisched.kube.writer import ClusterWriter
from tests.kube.apiserver import KubeApiServer
from tests.kube.contract_helpers import Kube, create_node, module_apiserver, node, pod, pod_groups_path, pods_path

PODS = 24


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """This module's own API server, with KAI's CRDs installed (overrides the session fixture here)."""
    yield from module_apiserver()


class Counting:
    """The Api seam, counting each (method, kind of path) the writer sends; a PodGroup creation takes 0.2 s longer
    (a busy server), so that a bind not made to wait for it would reach the server first."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.sent: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        kind = "binding" if path.endswith("/binding") else "podgroups" if "/podgroups" in path else \
            "pods" if "/pods/" in path else path
        with self._lock:
            self.sent.append((method, kind))
        if kind == "podgroups":
            time.sleep(0.2)
        return self.api.request(method, path, **kwargs)

    def stream(self, path: str, **kwargs: Any) -> Iterator[Any]:
        return self.api.stream(path, **kwargs)


def _rv(obj: Mapping[str, Any]) -> int:
    # opaque to clients in general; on this tier (etcd 3) the global revision at which the object was last written
    return int(obj["metadata"]["resourceVersion"])


def test_podgroups_are_created_before_their_binds_and_the_annotation_rides_on_the_binding(
        kube_apiserver: KubeApiServer, kube_http: Any, kube_namespace: str) -> None:
    kube = Kube(kube_http)
    ns = kube_namespace
    create_node(kube, node(f"wp-{ns}", gpus=PODS))
    uids = {}
    for i in range(PODS):
        made = kube.create(pods_path(ns), pod(ns, f"p{i}", "q", 1))
        uids[f"p{i}"] = made["metadata"]["uid"]
    client = KubeClient.from_kubeconfig(kube_apiserver.kubeconfig_path)
    api = Counting(client)
    writer = ClusterWriter(api, workers=4, max_workers=8)
    try:
        creations = []
        grouping = []
        binds = []
        for i in range(PODS):
            ref = ObjectRef.pod(f"{ns}/p{i}", uids[f"p{i}"])
            group = f"pg-p{i}"
            creations.append(CreatePodGroup({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                             "metadata": {"name": group, "namespace": ns},
                                             "spec": {"minMember": 1, "queue": "q"}}, for_pod=ref))
            grouping.append(PodMetadataPatch(ref, annotations={"pod-group-name": group}))
            binds.append(Bind(ref, f"wp-{ns}", pod_group=ObjectRef.pod_group(f"{ns}/{group}").lane))
        # as kaisched run submits them: the creations at the cycle's start, the binds (with the grouping) at its end
        writer.submit(creations)
        writer.submit(fold_grouping(grouping, binds))
        assert writer.drain(60), writer.stats()
        assert writer.failures == 0, writer.stats()
    finally:
        writer.close()
        client.close()
    pods = kube.pods(ns)
    groups = {g["metadata"]["name"]: g for g in kube.items(pod_groups_path(ns))}
    for i in range(PODS):
        p = pods[f"p{i}"]
        assert p["spec"]["nodeName"] == f"wp-{ns}"
        assert p["metadata"]["annotations"]["pod-group-name"] == f"pg-p{i}"  # written by the binding itself
        assert _rv(groups[f"pg-p{i}"]) < _rv(p)  # the PodGroup existed before the pod was bound
    assert sorted(set(api.sent)) == [("POST", "binding"), ("POST", "podgroups")]  # no pod patch
    assert api.sent.count(("POST", "binding")) == PODS and api.sent.count(("POST", "podgroups")) == PODS
