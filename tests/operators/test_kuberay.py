"""The real KubeRay operator (v1.5.0) creating Ray clusters, ``kaisched run`` gang-scheduling them.

KubeRay runs as the Ray documentation's KAI guide installs it, with ``--batch-scheduler=kai-scheduler``: the
user's RayCluster carries only the ``kai.scheduler/queue`` label, and KubeRay stamps ``schedulerName:
kai-scheduler`` and that label on the pods. The pod-grouper gives the cluster one PodGroup (spec 10.3):
``pg-<cluster>-<uid>``, minMember ``1 + Σ (minReplicas > 0 ? minReplicas : replicas) × numOfHosts``, subgroups
``headgroup`` and one per worker group.
"""

from __future__ import annotations

import collections
import re

import pytest

from tests.kube.contract_helpers import JSON, QUEUE_LABEL, WAIT_S, node_of, wait_until
from tests.operators.cluster import RAY, OperatorCluster, raycluster, rayjob, rayservice
from tests.operators.expect import assert_pod_group
from tests.operators.operators import OperatorProcess

pytestmark = pytest.mark.operators

RAYCLUSTERS = f"{RAY}/rayclusters"
RAYJOBS = f"{RAY}/rayjobs"
RAYSERVICES = f"{RAY}/rayservices"
CLUSTER_LABEL = "ray.io/cluster"
GROUP_LABEL = "ray.io/group"
NODE_TYPE_LABEL = "ray.io/node-type"
CYCLES_UNBOUND = 15


def test_a_raycluster_with_two_worker_groups_is_one_gang_and_grows_when_scaled_up(cluster: OperatorCluster) -> None:
    cluster.add_nodes(1, gpus=2)  # the gang needs 3 GPUs (head none, workers one each)
    q = cluster.queues(16, {"a": 16})
    # group small: 1 replica, minReplicas 1; group large: 2 replicas, no minimum (its replicas count)
    manifest = raycluster("ray", q["a"], {"small": (1, 1, 5), "large": (2, 0, 4)})
    made = cluster.create(RAYCLUSTERS, manifest)
    sched = cluster.kaisched()

    pods = cluster.wait_pods(4, "RayCluster ray", {CLUSTER_LABEL: "ray"})
    groups = collections.Counter(p["metadata"]["labels"][GROUP_LABEL] for p in pods.values())
    assert groups == {"headgroup": 1, "small": 1, "large": 2}
    for name, pod in pods.items():
        meta, spec = pod["metadata"], pod["spec"]
        owner = next(r for r in meta["ownerReferences"] if r.get("controller"))
        assert (owner["kind"], owner["name"], owner["uid"]) == ("RayCluster", "ray", made["metadata"]["uid"])
        assert spec["schedulerName"] == "kai-scheduler", name  # set by KubeRay's kai-scheduler integration
        assert meta["labels"][QUEUE_LABEL] == q["a"], name  # copied from the RayCluster by KubeRay
        kind = meta["labels"][NODE_TYPE_LABEL]
        assert name.startswith("ray-head-" if kind == "head" else f"ray-{meta['labels'][GROUP_LABEL]}-worker-")

    group_name = f"pg-ray-{made['metadata']['uid']}"
    group = cluster.wait_pod_group(group_name)
    assert_pod_group(group, made, min_member=4, queue=q["a"], priority="train",
                     sub_groups={"headgroup": 1, "small": 1, "large": 2})

    cluster.wait_more_cycles(sched, CYCLES_UNBOUND)
    assert not any(node_of(p) for p in cluster.live_pods({CLUSTER_LABEL: "ray"}).values()), cluster.describe()

    cluster.add_nodes(1, gpus=8)
    cluster.wait_all_bound(4, "RayCluster ray", {CLUSTER_LABEL: "ray"})

    def ready() -> JSON | None:
        status = (cluster.get(RAYCLUSTERS, "ray") or {}).get("status") or {}
        return status if status.get("state") == "ready" else None

    wait_until(ready, WAIT_S, "RayCluster ray ready (all its pods running)", describe=cluster.describe)

    # scaled up by editing the CR, both groups to 3 replicas: the new pods join the same PodGroup, which the
    # pod-grouper updates as KAI's does: small keeps its minReplicas (1), large counts its replicas (now 3)
    cluster.patch(RAYCLUSTERS, "ray", {"spec": {"workerGroupSpecs": [
        {**g, "replicas": 3} for g in manifest["spec"]["workerGroupSpecs"]]}})
    placed = cluster.wait_all_bound(7, "RayCluster ray scaled up", {CLUSTER_LABEL: "ray"})
    pods = cluster.live_pods({CLUSTER_LABEL: "ray"})
    assert collections.Counter(p["metadata"]["labels"][GROUP_LABEL] for p in pods.values()) == {
        "headgroup": 1, "small": 3, "large": 3}
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in pods.values()} == {group_name}
    assert len(set(placed.values())) <= 2
    assert list(cluster.pod_groups()) == [group_name], "scaling up makes no second PodGroup"

    def updated() -> JSON | None:
        group = cluster.kube.pod_group(cluster.ns, group_name) or {}
        return group if group.get("spec", {}).get("minMember") == 5 else None

    group = wait_until(updated, WAIT_S, f"PodGroup {group_name}: minMember 1 + 1 + 3", describe=cluster.describe)
    assert_pod_group(group, made, min_member=5, queue=q["a"], priority="train",
                     sub_groups={"headgroup": 1, "small": 1, "large": 3})


def test_a_rayjob_gets_a_cluster_that_is_gang_scheduled_then_deleted_when_the_job_ends(
    cluster: OperatorCluster, kuberay_without_batch_scheduler: OperatorProcess,
) -> None:
    """KubeRay's KAI plugin refuses RayJobs, so this KubeRay runs without it and the job's pod templates name
    the scheduler (the queue comes from the RayJob's label: the pod-grouper reads it on the top owner). The job
    is submitted over HTTP (``submissionMode: HTTPMode``) to the fake Ray dashboard, which ends it when told."""
    cluster.add_nodes(1, gpus=8)
    q = cluster.queues(16, {"a": 16})
    manifest = rayjob("sample", q["a"], {"workers": (2, 2, 2)}, scheduler_name="kai-scheduler")
    manifest["spec"]["submissionMode"] = "HTTPMode"
    job = cluster.create(RAYJOBS, manifest)
    cluster.kaisched()

    def cluster_name() -> str | None:
        status = (cluster.get(RAYJOBS, "sample") or {}).get("status") or {}
        return status.get("rayClusterName") or None

    name = wait_until(cluster_name, WAIT_S, "RayJob sample: status.rayClusterName", describe=cluster.describe)
    assert name.startswith("sample-")
    ray_cluster = wait_until(lambda: cluster.get(RAYCLUSTERS, name), WAIT_S, f"RayCluster {name}")
    owner = next(r for r in ray_cluster["metadata"]["ownerReferences"] if r.get("controller"))
    assert (owner["kind"], owner["uid"]) == ("RayJob", job["metadata"]["uid"])

    placed = cluster.wait_all_bound(3, f"RayCluster {name}", {CLUSTER_LABEL: name})
    assert len(placed) == 3
    # the PodGroup is the RayJob's (the top owner), not its cluster's
    group_name = f"pg-sample-{job['metadata']['uid']}"
    assert_pod_group(cluster.wait_pod_group(group_name), job, min_member=3, queue=q["a"], priority="train",
                     sub_groups={"headgroup": 1, "workers": 2})
    pods = cluster.live_pods({CLUSTER_LABEL: name})
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in pods.values()} == {group_name}

    # once its cluster is ready KubeRay submits the job to the cluster's dashboard; Ray runs it, then it ends
    def submitted() -> str | None:
        job_id = ((cluster.get(RAYJOBS, "sample") or {}).get("status") or {}).get("jobId")
        return str(job_id) if job_id and dashboard.status(str(job_id)) == "RUNNING" else None

    dashboard = cluster.stack.ray_dashboard
    job_id = wait_until(submitted, WAIT_S, "RayJob sample submitted to its Ray cluster", describe=cluster.describe)
    assert any(r.startswith(f"POST {name}-head-svc.{cluster.ns}.svc.cluster.local:8265/api/jobs")
               for r in dashboard.requests), dashboard.requests[-5:]
    assert cluster.get(RAYCLUSTERS, name) is not None, "the cluster runs while the job does"
    dashboard.finish(job_id)

    # KubeRay sees it SUCCEEDED, marks the RayJob Complete and deletes the cluster (shutdownAfterJobFinishes,
    # ttlSecondsAfterFinished 0); its pods go with it
    def ended() -> JSON | None:
        status = (cluster.get(RAYJOBS, "sample") or {}).get("status") or {}
        return status if status.get("jobDeploymentStatus") in ("Complete", "Failed") else None

    status = wait_until(ended, WAIT_S, "RayJob sample ended", describe=cluster.describe)
    assert (status["jobDeploymentStatus"], status.get("jobStatus")) == ("Complete", "SUCCEEDED"), status
    wait_until(lambda: cluster.get(RAYCLUSTERS, name) is None, WAIT_S, f"RayCluster {name} deleted",
               describe=cluster.describe)
    wait_until(lambda: not cluster.live_pods({CLUSTER_LABEL: name}), WAIT_S, f"the pods of {name} deleted",
               describe=cluster.describe)
    assert all(not node_of(p) for p in cluster.live_pods().values())


def test_a_rayservice_cluster_is_gang_scheduled_under_the_rayservice_podgroup(cluster: OperatorCluster) -> None:
    """KubeRay makes the RayService's pending RayCluster (no Ray Serve answers here, so it is never promoted);
    the PodGroup is the RayService's, sized from that cluster (spec 10.3)."""
    cluster.add_nodes(1, gpus=8)
    q = cluster.queues(16, {"a": 16})
    service = cluster.create(RAYSERVICES, rayservice("serve", q["a"], {"workers": (2, 1, 4)}))
    cluster.kaisched()

    def pending_cluster() -> str | None:
        status = (cluster.get(RAYSERVICES, "serve") or {}).get("status") or {}
        named = (status.get("pendingServiceStatus") or {}).get("rayClusterName") or \
            (status.get("activeServiceStatus") or {}).get("rayClusterName")
        return str(named) if named else None

    name = wait_until(pending_cluster, WAIT_S, "RayService serve: its cluster's name", describe=cluster.describe)
    assert re.fullmatch(r"serve-[bcdfghjklmnpqrstvwxz2456789]{5}", name), name
    placed = cluster.wait_all_bound(3, f"RayCluster {name}", {CLUSTER_LABEL: name})
    assert len(placed) == 3
    group_name = f"pg-serve-{service['metadata']['uid']}"
    # minReplicas 1 of the 2 workers: KAI's minMember is 1 + 1
    assert_pod_group(cluster.wait_pod_group(group_name), service, min_member=2, queue=q["a"], priority="train",
                     sub_groups={"headgroup": 1, "workers": 1})
    pods = cluster.live_pods({CLUSTER_LABEL: name})
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in pods.values()} == {group_name}
