"""Contract tests of the explanations against a real kube-apiserver (1.35) + etcd (issue 24, items 1-4).

* ``kaisched explain``, ``get queues``, ``get jobs`` and ``schedule`` with ``--kubeconfig``: one read-only cycle on the
  live cluster; the answers are those of the cycle (a gang that does not fit, a pod that would be bound) and nothing
  is written (no pod bound, no PodGroup made, no event, no resourceVersion changed). An unknown namespace or pod is
  a clear error (exit 1).
* Kubernetes mode (``kaisched run``): the tiered reason is in the PodGroup's ``schedulingConditions`` (KAI's shape:
  ``reasons[].reason``/``message`` as KAI's, ``queueDetails`` for a queue's limit) and in its ``Unschedulable``
  event, and the condition is cleared once the job is scheduled.
* The dashboard (item 5): ``kaisched dashboard --kubeconfig`` serves ``/api/dashboard`` and ``/api/explain`` from
  the live cluster (the queue rows, the pending gang with its reason, the decision it would make), follows the
  cluster as it changes and writes nothing; ``kaisched run`` serves the same on its HTTP port, from its own cycles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner, Result

from kaisched.cli import cli
from tests.kube.apiserver import KubeApiServer, free_port
from tests.kube.contract_helpers import (
    GPU,
    JSON,
    KAISCHED_ARGV,
    QUEUES,
    WAIT_S,
    ContractCluster,
    KaischedProcess,
    Kube,
    create_node,
    module_apiserver,
    node,
    pod,
    pod_group,
    pod_groups_path,
    pods_path,
    wait_until,
)

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/explain"


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """This module's own API server with KAI's CRDs (the cycle reads every node and queue of the server)."""
    yield from module_apiserver()


class DashboardProcess(KaischedProcess):
    """``kaisched dashboard --kubeconfig KUBECONFIG ARGS...`` as a child process."""

    @property
    def argv(self) -> list[str]:
        return [*KAISCHED_ARGV, "dashboard", "--kubeconfig", self.kubeconfig, *self.args]


class Cluster(ContractCluster):
    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)

    def add_node(self, gpus: int = 8) -> str:
        name = f"n{self.id}-{len(self.nodes)}"
        create_node(self.kube, node(name, gpus, labels=self.labels))
        self.nodes.append(name)
        return name

    def gang(self, name: str, queue_name: str, size: int, gpus: int) -> list[str]:
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, size))
        pods = [f"{name}-{i}" for i in range(size)]
        for p in pods:
            self.kube.create(pods_path(self.ns), pod(self.ns, p, queue_name, gpus, group=name))
        return pods

    def kaisched_cli(self, *args: str) -> Result:
        """A kaisched command in this process on the server's kubeconfig (``--kubeconfig`` last)."""
        return CliRunner().invoke(cli, [*args, "--kubeconfig", str(self.server.kubeconfig_path)],
                                  env={"COLUMNS": "120"})

    def delete_own(self) -> None:
        for kind in ("deployments", "replicasets"):
            self.kube.delete_collection(f"/apis/apps/v1/namespaces/{self.ns}/{kind}")

    def dashboard(self, port: int) -> DashboardProcess:
        """``kaisched dashboard --kubeconfig`` on ``port``, a read-only cycle every half second."""
        proc = DashboardProcess(self.server.kubeconfig_path, self.tmp_path / f"dashboard-{len(self.processes)}.log",
                                ["--port", str(port), "--interval", "0.5"], name="dashboard")
        self.processes.append(proc)
        proc.start()
        return proc

    def group_condition(self, name: str) -> JSON | None:
        group = self.kube.pod_group(self.ns, name) or {}
        conditions = (group.get("status") or {}).get("schedulingConditions") or []
        return conditions[-1] if conditions else None

    def written_state(self) -> tuple[dict[str, str], list[str], list[str], dict[str, Any]]:
        """What a write would change: the namespace's pods (resourceVersion), PodGroups and events, the queues'
        status."""
        pods = {n: p["metadata"]["resourceVersion"] for n, p in self.pods().items()}
        groups = sorted(self.kube.pod_groups(self.ns))
        events = sorted(e["metadata"]["name"] for e in self.kube.events(self.ns))
        queues = {q["metadata"]["name"]: q.get("status") for q in self.kube.items(QUEUES)}
        return pods, groups, events, queues


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str,
            tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_explain_get_and_schedule_read_the_live_cluster_and_write_nothing(cluster: Cluster) -> None:
    cluster.add_node(8)
    q = cluster.queues(8, {"a": 8, "b": 0})
    # a gang of 4 x 4 GPUs on one 8-GPU node: room for 2 of its 4 pods; solo (2 GPUs, queue b, no PodGroup: the
    # pod-grouper groups it in memory) fits. Queue a (under its quota) comes first.
    cluster.gang("gang", q["a"], 4, gpus=4)
    cluster.kube.create(pods_path(cluster.ns), pod(cluster.ns, "solo", q["b"], 2))
    before = cluster.written_state()

    exp = _json(cluster.kaisched_cli("explain", "gang-1", "-n", cluster.ns, "-o", "json"))
    assert (exp["job"], exp["status"], exp["code"]) == (f"{cluster.ns}/gang", "Pending", "below-min-member")
    assert exp["gang"] == {"placed": 2, "required": 4}
    assert exp["message"].startswith("Resources were found for 2 pods while 4 are required for gang scheduling.")
    assert exp["nodes"]["summary"] == "0/1 nodes are available: 1 node(s) didn't have enough resources: GPUs."
    assert exp["nodes"]["reasons"][0]["nodes"] == cluster.nodes
    assert exp["queue"] == q["a"] and exp["queueShare"]["deserved"] == {"gpu": 8.0}
    text = cluster.kaisched_cli("explain", "gang", "-n", cluster.ns)
    assert text.exit_code == 0 and "Tier:      below minMember (below-min-member)" in text.output
    solo = _json(cluster.kaisched_cli("explain", "solo", "-n", cluster.ns, "-o", "json"))
    assert (solo["status"], solo["tier"], solo["code"]) == ("Allocated", "allocated", None)

    rows = {r["name"]: r for r in _json(cluster.kaisched_cli("get", "queues", "-o", "json"))}
    assert rows[q["a"]]["parent"] == f"p-{cluster.id}" and rows[q["a"]]["depth"] == 1
    assert (rows[q["a"]]["requested"], rows[q["a"]]["pendingJobs"]) == (16.0, 1)
    assert rows[q["b"]]["allocated"] == 2.0  # solo, as the cycle would bind it
    jobs = {r["name"]: r for r in _json(cluster.kaisched_cli("get", "jobs", "-n", cluster.ns, "-o", "json"))}
    assert (jobs[f"{cluster.ns}/gang"]["state"], jobs[f"{cluster.ns}/gang"]["code"]) == ("Pending", "below-min-member")
    assert jobs[f"{cluster.ns}/gang"]["gpus"] == 16.0 and jobs[f"{cluster.ns}/gang"]["pods"] == 4
    (solo_job,) = [r for r in jobs.values() if r["name"].startswith(f"{cluster.ns}/pg-solo-")]
    assert (solo_job["queue"], solo_job["state"]) == (q["b"], "Allocated")
    table = cluster.kaisched_cli("get", "jobs", "-n", cluster.ns)
    assert table.exit_code == 0 and "below-min-member" in table.output
    assert max(len(line) for line in table.output.splitlines()) <= 120

    decided = _json(cluster.kaisched_cli("schedule", "-o", "json"))
    assert [b["pod"] for b in decided["binds"]] == [f"{cluster.ns}/solo"]
    assert [b["node"] for b in decided["binds"]] == cluster.nodes
    codes = {g["name"]: g["code"] for g in decided["podGroups"]}
    assert codes[f"{cluster.ns}/gang"] == "below-min-member"
    dry = cluster.kaisched_cli("schedule")
    assert dry.exit_code == 0 and "a dry run of one cycle on https://" in dry.stderr

    # nothing written: no pod bound or changed, no PodGroup made for solo, no event, the queues' status as it was
    assert cluster.written_state() == before
    assert all(not p["spec"].get("nodeName") for p in cluster.pods().values())


def test_unknown_namespace_and_pod_on_a_live_cluster(cluster: Cluster) -> None:
    cluster.add_node(8)
    q = cluster.queues(8, {"a": 8})
    cluster.gang("gang", q["a"], 1, gpus=1)
    missing = cluster.kaisched_cli("explain", "gang", "-n", f"{cluster.ns}-missing")
    assert missing.exit_code == 1
    assert f"namespace '{cluster.ns}-missing' not found on the API server https://" in missing.output
    nope = cluster.kaisched_cli("explain", "nope", "-n", cluster.ns)
    assert nope.exit_code == 1 and f"no pod or PodGroup 'nope' in namespace '{cluster.ns}'" in nope.output
    jobs = cluster.kaisched_cli("get", "jobs", "-n", f"{cluster.ns}-missing")
    assert jobs.exit_code == 1 and "not found" in jobs.output
    for result in (missing, nope, jobs):
        assert "Traceback" not in result.output


def test_kubernetes_mode_writes_the_tiered_reason_then_clears_it(cluster: Cluster) -> None:
    cluster.add_node(8)
    q = cluster.queues(16, {"a": 16, "b": 0})
    members = cluster.gang("gang", q["a"], 4, gpus=4)  # 16 GPUs on one 8-GPU node: room for 2 of 4
    # a queue with a GPU limit of 1 under the same parent, and a 2-GPU job in it: over its limit
    limited = f"lim-{cluster.id}"
    cluster.kube.create(QUEUES, {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": limited, "labels": cluster.labels},
        "spec": {"parentQueue": f"p-{cluster.id}", "resources": {
            "gpu": {"quota": 0, "limit": 1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
    cluster.gang("capped", limited, 1, gpus=2)
    sched = cluster.kaisched()

    condition = wait_until(lambda: cluster.group_condition("gang"), WAIT_S, "PodGroup gang: a scheduling condition",
                           describe=cluster.describe)
    assert condition["type"] == "UnschedulableOnNodePool" and condition["status"] == "True"
    (reason,) = condition["reasons"]
    assert reason["reason"] == "PodSchedulingErrors"
    assert reason["message"].startswith("Resources were found for 2 pods while 4 are required for gang scheduling.")
    assert condition["message"] == f"Below minMember: {reason['message']}"

    def group_event() -> JSON | None:
        return next((e for e in cluster.events("Unschedulable", "gang") if e["involvedObject"]["kind"] == "PodGroup"),
                    None)

    event = wait_until(group_event, WAIT_S, "PodGroup gang: an Unschedulable event", describe=cluster.describe)
    assert event["message"] == condition["message"] and event["type"] == "Normal"

    capped = wait_until(lambda: cluster.group_condition("capped"), WAIT_S, "PodGroup capped: a scheduling condition",
                        describe=cluster.describe)
    (over,) = capped["reasons"]
    assert over["reason"] == "OverLimit" and capped["message"] == f"Over its queue's limit: {over['message']}"
    details = over["details"]["queueDetails"]  # kept by the CRD's schema
    assert details["name"] == limited and details["queueResourceLimits"][GPU] == "1"
    assert details["queueAllocatedResources"][GPU] == "0" and details["queueDeservedResources"][GPU] == "0"

    cluster.add_node(8)  # now 16 GPUs: the gang fits, is bound, and its condition goes
    cluster.wait_bound(members)
    cleared = wait_until(lambda: cluster.kube.pod_group(cluster.ns, "gang") if cluster.group_condition("gang") is None
                         else None, WAIT_S, "PodGroup gang: its condition cleared", describe=cluster.describe)
    assert not (cleared.get("status") or {}).get("schedulingConditions")
    assert cluster.group_condition("capped") is not None  # still over its limit
    assert sched.running


def _get(port: int, target: str) -> httpx2.Response | None:
    """A GET on the dashboard's port (None while nothing listens yet)."""
    try:
        return httpx2.get(f"http://127.0.0.1:{port}{target}", timeout=5.0)
    except httpx2.TransportError:
        return None


def _document(port: int, ready: Callable[[Any], bool]) -> Any:
    """``/api/dashboard`` once it answers and ``ready`` holds for its document (None until then)."""
    response = _get(port, "/api/dashboard")
    if response is None or response.status_code != 200:
        return None
    doc = response.json()
    return doc if ready(doc) else None


def _deployment_with_pods(cluster: Cluster, name: str, queue_name: str, pods: int, gpus: int) -> None:
    """A Deployment, its ReplicaSet and its pods, as their controllers would make them (none runs here), with no
    PodGroup: Kubernetes mode groups the pods by their top owner, read from the API (a Deployment: one PodGroup per
    pod, priority inference), where the ReplicaSet alone would make one PodGroup of both."""
    labels = {"app": name}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    deployment = cluster.kube.create(f"/apis/apps/v1/namespaces/{cluster.ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {"replicas": pods, "selector": {"matchLabels": labels}, "template": template}})
    replica_set = cluster.kube.create(f"/apis/apps/v1/namespaces/{cluster.ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": f"{name}-rs", "namespace": cluster.ns, "labels": labels, "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": deployment["metadata"]["uid"],
                "controller": True}]},
        "spec": {"replicas": pods, "selector": {"matchLabels": labels}, "template": template}})
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs",
             "uid": replica_set["metadata"]["uid"], "controller": True}
    for i in range(pods):
        manifest = pod(cluster.ns, f"{name}-{i}", queue_name, gpus, labels=labels)
        manifest["metadata"]["ownerReferences"] = [owner]
        cluster.kube.create(pods_path(cluster.ns), manifest)


def test_the_dashboard_serves_a_live_cluster_read_only(cluster: Cluster) -> None:
    cluster.add_node(8)
    q = cluster.queues(8, {"a": 8, "b": 0, "c": 0})
    cluster.gang("gang", q["a"], 4, gpus=4)  # 16 GPUs on one 8-GPU node: room for 2 of its 4 pods
    cluster.kube.create(pods_path(cluster.ns), pod(cluster.ns, "solo", q["b"], 2))
    _deployment_with_pods(cluster, "web", q["c"], 2, gpus=16)  # two pods, each larger than any node
    before = cluster.written_state()
    live_jobs = {r["name"]: r for r in _json(cluster.kaisched_cli("get", "jobs", "-n", cluster.ns, "-o", "json"))}
    port = free_port()
    board = cluster.dashboard(port)
    gang_key = f"{cluster.ns}/gang"

    def pending(doc: Any) -> dict[str, Any]:
        return {r["name"]: r for r in doc["pending"]}

    doc = wait_until(lambda: _document(port, lambda d: gang_key in pending(d)), WAIT_S,
                     "the dashboard's document with the gang pending", describe=cluster.describe)
    assert doc["source"] == str(cluster.server.kubeconfig_path)
    rows = {r["name"]: r for r in doc["queues"]}
    a, b = rows[q["a"]], rows[q["b"]]
    assert (a["parent"], a["depth"], a["deserved"], a["requested"], a["allocated"], a["pendingJobs"]) == (
        f"p-{cluster.id}", 1, 8.0, 16.0, 0.0, 1)
    assert (b["deserved"], b["requested"], b["allocated"], b["pendingJobs"]) == (0.0, 2.0, 2.0, 0)  # solo, as bound
    gang = pending(doc)[gang_key]
    assert (gang["queue"], gang["state"], gang["code"], gang["gpus"], gang["pods"]) == (
        q["a"], "Pending", "below-min-member", 16.0, 4)
    assert gang["message"].startswith("Resources were found for 2 pods while 4 are required for gang scheduling.")
    binds = [d for d in doc["decisions"] if d["kind"] == "bind"]
    assert [(d["pod"], d["node"]) for d in binds] == [(f"{cluster.ns}/solo", cluster.nodes[0])]
    # the Deployment's pods are grouped as Kubernetes mode (and get jobs --kubeconfig) groups them: one job each,
    # found through the ReplicaSet's owner
    web = sorted((r for r in doc["pending"] if r["queue"] == q["c"]), key=lambda r: r["name"])
    assert len(web) == 2 and all(r["name"].startswith(f"{cluster.ns}/pg-web-{i}-") for i, r in enumerate(web))
    for row in web:
        live = live_jobs[row["name"]]
        # (inference is non-preemptible, and queue c's quota is 0)
        assert (row["pods"], row["gpus"], row["code"]) == (1, 16.0, "non-preemptible-over-quota") == (
            live["pods"], live["gpus"], live["code"])
        assert (row["priority"], row["preemptible"]) == (live["priority"], live["preemptible"]) == (125, False)
    assert sorted(pending(doc)) == sorted(r["name"] for r in live_jobs.values() if r["state"] == "Pending")

    response = _get(port, f"/api/explain?job={gang_key}")
    assert response is not None and response.status_code == 200
    exp = response.json()
    assert (exp["job"], exp["status"], exp["code"], exp["gang"]) == (
        gang_key, "Pending", "below-min-member", {"placed": 2, "required": 4})
    assert exp["nodes"]["summary"] == "0/1 nodes are available: 1 node(s) didn't have enough resources: GPUs."
    by_pod = _get(port, f"/api/explain?job={cluster.ns}/gang-3")  # a pod opens its job's explanation
    assert by_pod is not None and by_pod.json()["job"] == gang_key
    missing = _get(port, f"/api/explain?job={cluster.ns}/nope")
    assert missing is not None and missing.status_code == 404 and "nope" in missing.text
    page = _get(port, "/")
    assert page is not None and page.status_code == 200 and "<html" in page.text.lower()

    assert cluster.written_state() == before  # read-only: nothing bound, no PodGroup, no event, queues untouched

    # it follows the cluster: with a second node and solo gone, the gang fits, and a later cycle's document says so
    # (with solo still there the cycle places solo first, and the gang finds room for 3 pods of 4)
    cluster.add_node(8)
    cluster.kube.delete(f"{pods_path(cluster.ns)}/solo", grace_seconds=0)
    doc = wait_until(lambda: _document(port, lambda d: gang_key not in pending(d)), WAIT_S,
                     "the dashboard's document without the gang pending", describe=cluster.describe)
    rows = {r["name"]: r for r in doc["queues"]}
    assert (rows[q["a"]]["allocated"], rows[q["a"]]["pendingJobs"], rows[q["b"]]["allocated"]) == (16.0, 0, 0.0)
    assert sorted(pending(doc)) == [r["name"] for r in web] and doc["summary"]["binds"] == 4
    assert all(not p["spec"].get("nodeName") for p in cluster.pods().values())  # still nothing bound
    assert not cluster.kube.pod_groups(cluster.ns).keys() - {"gang"} and not cluster.kube.events(cluster.ns)
    board.terminate()
    assert board.exit_code == 0


def test_kaisched_run_serves_the_dashboard_on_its_port(cluster: Cluster) -> None:
    cluster.add_node(8)
    q = cluster.queues(8, {"a": 8, "b": 0})
    cluster.gang("gang", q["a"], 4, gpus=4)
    cluster.kube.create(pods_path(cluster.ns), pod(cluster.ns, "solo", q["b"], 2))
    port = free_port()
    sched = cluster.kaisched(listen=f"127.0.0.1:{port}")
    cluster.wait_bound(["solo"])
    gang_key = f"{cluster.ns}/gang"

    def ready(doc: Any) -> bool:
        return (any(r["name"] == gang_key for r in doc["pending"])
                and any(d["kind"] == "bind" and d["pod"] == f"{cluster.ns}/solo" for d in doc["decisions"]))

    doc = wait_until(lambda: _document(port, ready), WAIT_S, "kaisched run's dashboard document",
                     describe=cluster.describe)
    assert doc["source"] == "kaisched run"
    rows = {r["name"]: r for r in doc["queues"]}
    assert (rows[q["a"]]["deserved"], rows[q["a"]]["requested"], rows[q["a"]]["pendingJobs"]) == (8.0, 16.0, 1)
    assert rows[q["b"]]["allocated"] == 2.0
    (gang,) = [r for r in doc["pending"] if r["name"] == gang_key]
    assert (gang["code"], gang["queue"]) == ("below-min-member", q["a"])
    assert gang["message"].startswith("Resources were found for 2 pods while 4 are required for gang scheduling.")
    (bind,) = [d for d in doc["decisions"] if d["kind"] == "bind" and d["pod"] == f"{cluster.ns}/solo"]
    assert bind["node"] == cluster.nodes[0]
    response = _get(port, f"/api/explain?job={gang_key}")
    assert response is not None and response.status_code == 200
    exp = response.json()
    assert (exp["code"], exp["gang"], exp["queue"]) == ("below-min-member", {"placed": 2, "required": 4}, q["a"])
    # `kaisched explain --scheduler`: the running scheduler's own explanation, no cycle of the client's
    asked = CliRunner().invoke(cli, ["explain", "gang", "-n", cluster.ns, "--scheduler", f"http://127.0.0.1:{port}",
                                     "-o", "json"])
    assert asked.exit_code == 0, asked.output
    told = json.loads(asked.output)
    assert (told["code"], told["gang"], told["queue"]) == ("below-min-member", {"placed": 2, "required": 4}, q["a"])
    assert told["cycle"].endswith("Z")
    text = CliRunner().invoke(cli, ["explain", "gang-0", "-n", cluster.ns, "--scheduler", f"http://127.0.0.1:{port}"])
    assert text.exit_code == 0 and "(below-min-member)" in text.output, text.output
    assert _get(port, "/metrics") is not None  # (the same port as the metrics)
    assert sched.running
