"""The CRDs of ``deploy/crds/`` on a real kube-apiserver (1.35): what their CEL rules refuse and what
``kubectl get`` shows.

* Topology (kai.scheduler/v1alpha1): the server refuses repeated level nodeLabels, ``kubernetes.io/hostname``
  anywhere but last, and any change of ``spec.levels``, each with the rule's own message
  (``x-kubernetes-validations`` in the CRD); a valid Topology is accepted and its labels may still change.
* Queue and PodGroup: the server's Table conversion (what ``kubectl get`` asks for with
  ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) has the CRDs' printer columns with the objects'
  values, the Queue's allocated GPUs from a status written as kaisched writes it.

The unit twin of these checks is ``tests/unit/test_deploy.py`` (schema, rules and columns read from the files).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import httpx2
import pytest
import yaml

from kaisched.kube.operations import resource_list
from tests.kube.apiserver import KubeApiServer
from tests.kube.contract_helpers import CRD_DIR, GPU, JSON, PODGROUPS, QUEUES, Kube, install_crds, pod_group, queue

pytestmark = pytest.mark.kube

TOPOLOGIES = "/apis/kai.scheduler/v1alpha1/topologies"
MERGE = {"Content-Type": "application/merge-patch+json"}
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def level_rules() -> dict[str, str]:
    """The CEL rules on Topology.spec.levels as the CRD file has them: rule text -> message."""
    crd = yaml.safe_load((CRD_DIR / "kai.scheduler_topologies.yaml").read_text())
    levels = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["levels"]
    return {rule["rule"]: rule["message"] for rule in levels["x-kubernetes-validations"]}


def message_of(fragment: str) -> str:
    """The message of the one level rule whose text contains ``fragment``."""
    [message] = [m for rule, m in level_rules().items() if fragment in rule]
    return message


IMMUTABLE = "oldSelf"
UNIQUE = "exists_one"
HOSTNAME_LAST = "size(self) - 1"


def topology(name: str, *labels: str) -> JSON:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


@pytest.fixture(scope="module")
def kube(kube_apiserver: KubeApiServer) -> Iterator[Kube]:
    """A client on the session's server with deploy/crds installed (each CRD Established and served)."""
    with kube_apiserver.http_client() as client:
        kube = Kube(client)
        install_crds(kube)
        yield kube


def refused(answer: httpx2.Response, name: str, message: str) -> None:
    """A 422 Invalid for Topology ``name`` whose one cause is ``spec.levels`` with ``message`` (the rule's)."""
    assert answer.status_code == 422, answer.text
    status = answer.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422), status
    assert status["message"] == f'Topology.kai.scheduler "{name}" is invalid: spec.levels: Invalid value: {message}'
    assert status["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": f"Invalid value: {message}", "field": "spec.levels"}]


# ============================================================================================ Topology


def test_the_topology_crd_carries_the_three_rules(kube: Kube) -> None:
    served = kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/topologies.kai.scheduler")
    assert served is not None
    levels = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["levels"]
    # the server kept the rules (a server without CEL support drops x-kubernetes-validations silently)
    assert {r["rule"]: r["message"] for r in levels["x-kubernetes-validations"]} == level_rules()
    assert all(message_of(fragment) for fragment in (IMMUTABLE, UNIQUE, HOSTNAME_LAST))


def test_a_valid_topology_is_accepted_and_its_labels_can_change(kube: Kube) -> None:
    name = unique("topo")
    created = kube.create(TOPOLOGIES, topology(name, ZONE, RACK, HOSTNAME))
    assert [level["nodeLabel"] for level in created["spec"]["levels"]] == [ZONE, RACK, HOSTNAME]
    assert kube.create(TOPOLOGIES, topology(unique("topo"), ZONE, RACK))["spec"]["levels"][-1]["nodeLabel"] == RACK
    # the immutability rule covers spec.levels only: metadata still changes
    body = json.dumps({"metadata": {"labels": {"team": "a"}}}).encode()
    answer = kube.client.patch(f"{TOPOLOGIES}/{name}", content=body, headers=MERGE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata"]["labels"] == {"team": "a"}
    # ... and writing the same levels again is no change
    same = {**answer.json(), "spec": {"levels": [{"nodeLabel": label} for label in (ZONE, RACK, HOSTNAME)]}}
    assert kube.client.put(f"{TOPOLOGIES}/{name}", json=same).status_code == 200


@pytest.mark.parametrize("labels", [(RACK, RACK), (ZONE, RACK, ZONE), (ZONE, HOSTNAME, HOSTNAME)])
def test_a_topology_whose_levels_repeat_is_refused(kube: Kube, labels: tuple[str, ...]) -> None:
    name = unique("topo")
    refused(kube.client.post(TOPOLOGIES, json=topology(name, *labels)), name, message_of(UNIQUE))
    assert kube.get(f"{TOPOLOGIES}/{name}") is None


@pytest.mark.parametrize("labels", [(HOSTNAME, RACK), (ZONE, HOSTNAME, RACK)])
def test_hostname_anywhere_but_the_last_level_is_refused(kube: Kube, labels: tuple[str, ...]) -> None:
    name = unique("topo")
    refused(kube.client.post(TOPOLOGIES, json=topology(name, *labels)), name, message_of(HOSTNAME_LAST))


def test_changing_the_levels_is_refused(kube: Kube) -> None:
    name = unique("topo")
    created = kube.create(TOPOLOGIES, topology(name, ZONE, HOSTNAME))
    changes = [[ZONE, RACK, HOSTNAME], [HOSTNAME], [RACK, HOSTNAME]]
    for labels in changes:
        replaced = {**created, "spec": {"levels": [{"nodeLabel": label} for label in labels]}}
        refused(kube.client.put(f"{TOPOLOGIES}/{name}", json=replaced), name, message_of(IMMUTABLE))
        body = json.dumps({"spec": replaced["spec"]}).encode()
        answer = kube.client.patch(f"{TOPOLOGIES}/{name}", content=body, headers=MERGE)
        refused(answer, name, message_of(IMMUTABLE))
    got = kube.get(f"{TOPOLOGIES}/{name}")
    assert got is not None and [level["nodeLabel"] for level in got["spec"]["levels"]] == [ZONE, HOSTNAME]
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# ======================================================================================= printer columns


def table(kube: Kube, path: str) -> tuple[list[str], list[JSON]]:
    """Column names and rows of ``kubectl get`` on ``path``."""
    columns, rows = kube.table(path)
    return [col["name"] for col in columns], rows


def wide_columns(kube: Kube, path: str) -> set[str]:
    """The columns kubectl shows only with ``-o wide`` (priority > 0)."""
    columns, _ = kube.table(path)
    return {col["name"] for col in columns if col.get("priority", 0) > 0}


AGE = re.compile(r"^\d+s$")  # a fresh object: "0s", "3s"


def test_queue_table_shows_parent_gpu_quota_limit_allocated_priority_and_age(kube: Kube) -> None:
    parent, leaf = unique("dept"), unique("team")
    kube.create(QUEUES, queue(parent, 8))
    body = queue(leaf, 2.5, parent=parent)
    body["spec"]["resources"]["gpu"]["limit"] = 6
    body["spec"]["priority"] = 150
    body["spec"]["displayName"] = "Team A"
    kube.create(QUEUES, body)
    # the status as kaisched's writer sends it (kaisched.kube.operations.resource_list)
    status = {"status": {"allocated": resource_list({"gpu": 1.5, "cpu": 4000, "memory": 2e9})}}
    answer = kube.client.patch(f"{QUEUES}/{leaf}/status", content=json.dumps(status).encode(), headers=MERGE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["allocated"][GPU] == "1500m"
    children = {"status": {"childQueues": [leaf]}}
    answer = kube.client.patch(f"{QUEUES}/{parent}/status", content=json.dumps(children).encode(), headers=MERGE)
    assert answer.status_code == 200, answer.text

    names, [row] = table(kube, f"{QUEUES}/{leaf}")
    assert names == ["Name", "Parent", "GPU Quota", "GPU Limit", "GPU Allocated", "Priority", "Age", "Children",
                     "DisplayName"]
    assert wide_columns(kube, f"{QUEUES}/{leaf}") == {"Children", "DisplayName"}
    assert {k: v for k, v in row.items() if k != "Age"} == {
        "Name": leaf, "Parent": parent, "GPU Quota": 2.5, "GPU Limit": 6, "GPU Allocated": "1500m",
        "Priority": 150, "Children": None, "DisplayName": "Team A"}
    assert AGE.match(row["Age"]), row

    # the parent: no parent, unlimited GPUs, nothing allocated yet, KAI's default priority left unset
    _, [top] = table(kube, f"{QUEUES}/{parent}")
    assert {k: v for k, v in top.items() if k != "Age"} == {
        "Name": parent, "Parent": None, "GPU Quota": 8, "GPU Limit": -1, "GPU Allocated": None, "Priority": None,
        "Children": f'["{leaf}"]', "DisplayName": None}

    # a list (kubectl get queues) has a row per queue with the same columns
    _, rows = table(kube, QUEUES)
    assert {leaf, parent} <= {r["Name"] for r in rows}


def test_pod_group_table_shows_queue_phase_min_member_and_age(kube: Kube, kube_namespace: str) -> None:
    path = f"{PODGROUPS}/namespaces/{kube_namespace}/podgroups"
    kube.create(path, pod_group(kube_namespace, "gang", "team-a", 4))
    kube.create(path, pod_group(kube_namespace, "solo", "team-b", 1))
    phase = json.dumps({"status": {"phase": "Running"}}).encode()  # written by KAI's PodGroup controller
    answer = kube.client.patch(f"{path}/gang/status", content=phase, headers=MERGE)
    assert answer.status_code == 200, answer.text

    names, rows = table(kube, path)
    assert names == ["Name", "Queue", "Phase", "MinMember", "Age"]
    assert wide_columns(kube, path) == set()
    by_name = {r["Name"]: r for r in rows}
    assert {k: v for k, v in by_name["gang"].items() if k != "Age"} == {
        "Name": "gang", "Queue": "team-a", "Phase": "Running", "MinMember": 4}
    assert {k: v for k, v in by_name["solo"].items() if k != "Age"} == {
        "Name": "solo", "Queue": "team-b", "Phase": None, "MinMember": 1}
    assert all(AGE.match(r["Age"]) for r in rows), rows
