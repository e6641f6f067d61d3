"""The real Kubeflow Training Operator (v1.8.1) creating the pods, ``kaisched run`` gang-scheduling them.

Each test submits a user's manifest (:mod:`tests.operators.cluster`) to the session's API server, where the
operator makes the pods (names, labels, owner references, init containers, Services of its own), kaisched's
pod-grouper makes the PodGroup KAI's would (spec 10.3: ``pg-<job>-<uid>``, minMember = Σ replicas or
``elasticPolicy.minReplicas``, the queue label of the job, priority ``train``) and the scheduler places the gang.
"""

from __future__ import annotations

import collections

import pytest

from kaisched.kube.client import KubeClient
from kaisched.kube.operations import Bind, ObjectRef
from kaisched.kube.writer import ClusterWriter
from tests.kube.contract_helpers import JSON, WAIT_S, gpus_of, node_of, wait_until
from tests.operators.cluster import KUBEFLOW, OperatorCluster, mpijob, pytorchjob
from tests.operators.expect import assert_pod_group

pytestmark = pytest.mark.operators

PYTORCHJOBS = f"{KUBEFLOW}/pytorchjobs"
MPIJOBS = f"{KUBEFLOW}/mpijobs"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
OPERATOR_NAME = "training.kubeflow.org/operator-name"
#: cycles the scheduler runs while a gang that does not fit must stay unbound
CYCLES_UNBOUND = 15


def test_a_pytorchjob_of_one_master_and_three_workers_is_one_gang_of_four(cluster: OperatorCluster) -> None:
    cluster.add_nodes(1, gpus=3)  # room for 3 of the 4 one-GPU pods
    q = cluster.queues(16, {"a": 16})
    job = cluster.create(PYTORCHJOBS, pytorchjob("mnist", q["a"], workers=3))
    sched = cluster.kaisched()

    pods = cluster.wait_pods(4, "PyTorchJob mnist", {JOB_NAME: "mnist"})
    assert sorted(pods) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    for name, pod in pods.items():
        meta = pod["metadata"]
        owner = next(r for r in meta["ownerReferences"] if r.get("controller"))
        assert (owner["kind"], owner["name"], owner["uid"]) == ("PyTorchJob", "mnist", job["metadata"]["uid"])
        role, index = name.split("-")[1:]
        assert meta["labels"][REPLICA_TYPE] == role and meta["labels"][REPLICA_INDEX] == index
        assert meta["labels"][OPERATOR_NAME] == "pytorchjob-controller"
        assert (meta["labels"].get(JOB_ROLE) == "master") == (role == "master")
        assert pod["spec"]["schedulerName"] == "kai-scheduler"

    group_name = f"pg-mnist-{job['metadata']['uid']}"
    group = cluster.wait_pod_group(group_name)
    assert_pod_group(group, job, min_member=4, queue=q["a"], priority="train",
                     sub_groups={"master": 1, "worker": 3})
    annotated = wait_until(
        lambda: all(p["metadata"].get("annotations", {}).get("pod-group-name") == group_name
                    for p in cluster.live_pods({JOB_NAME: "mnist"}).values()),
        WAIT_S, "every pod annotated with its PodGroup", describe=cluster.describe)
    assert annotated

    # only 3 of the 4 fit: the scheduler keeps cycling and binds none of them
    cluster.wait_more_cycles(sched, CYCLES_UNBOUND)
    assert not any(node_of(p) for p in cluster.live_pods({JOB_NAME: "mnist"}).values()), cluster.describe()

    cluster.add_nodes(1, gpus=1)  # now 4 GPUs: the gang fits whole
    placed = cluster.wait_all_bound(4, "PyTorchJob mnist", {JOB_NAME: "mnist"})
    assert collections.Counter(placed.values()) == {cluster.nodes[0]: 3, cluster.nodes[1]: 1}, placed
    assert len(cluster.pod_groups()) == 1, "one PodGroup for the whole job"

    # the operator sees its pods run (the fake kubelet's Running) and says so in the job's status
    def running() -> JSON | None:
        status = (cluster.get(PYTORCHJOBS, "mnist") or {}).get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
        workers = (status.get("replicaStatuses") or {}).get("Worker") or {}
        return status if conditions.get("Running") == "True" and workers.get("active") == 3 else None

    status = wait_until(running, WAIT_S, "PyTorchJob mnist Running with 3 active workers", describe=cluster.describe)
    assert status["replicaStatuses"]["Master"].get("active") == 1


def test_an_mpijob_launcher_and_workers_are_one_gang(cluster: OperatorCluster) -> None:
    cluster.add_nodes(1, gpus=1)  # one of the two one-GPU workers fits
    q = cluster.queues(16, {"a": 16})
    job = cluster.create(MPIJOBS, mpijob("horovod", q["a"], workers=2))
    sched = cluster.kaisched()

    pods = cluster.wait_pods(3, "MPIJob horovod", {JOB_NAME: "horovod"})
    assert sorted(pods) == ["horovod-launcher", "horovod-worker-0", "horovod-worker-1"]
    launcher = pods["horovod-launcher"]
    assert launcher["metadata"]["labels"][REPLICA_TYPE] == "launcher"
    assert launcher["metadata"]["labels"].get(JOB_ROLE) == "master"
    assert [c["name"] for c in launcher["spec"].get("initContainers") or ()] == ["kubectl-delivery"]
    assert gpus_of(launcher) == 0 and all(gpus_of(pods[f"horovod-worker-{i}"]) == 1 for i in range(2))

    group_name = f"pg-horovod-{job['metadata']['uid']}"
    group = cluster.wait_pod_group(group_name)
    assert_pod_group(group, job, min_member=3, queue=q["a"], priority="train")

    cluster.wait_more_cycles(sched, CYCLES_UNBOUND)
    assert not any(node_of(p) for p in cluster.live_pods({JOB_NAME: "horovod"}).values()), cluster.describe()

    cluster.add_nodes(1, gpus=1)
    placed = cluster.wait_all_bound(3, "MPIJob horovod", {JOB_NAME: "horovod"})
    workers = {node for name, node in placed.items() if "worker" in name}
    assert workers == set(cluster.nodes), "one worker on each one-GPU node"


def test_reclaim_evicts_a_whole_gang_which_the_operator_recreates_and_is_scheduled_when_quota_frees(
    cluster: OperatorCluster,
) -> None:
    cluster.add_nodes(1, gpus=8)
    q = cluster.queues(8, {"a": 4, "b": 4})
    big = cluster.create(PYTORCHJOBS, pytorchjob("big", q["a"], workers=7))  # 8 GPUs: 4 over a's quota
    sched = cluster.kaisched()
    first = cluster.wait_all_bound(8, "PyTorchJob big", {JOB_NAME: "big"})
    uids_before = {n: p["metadata"]["uid"] for n, p in cluster.live_pods({JOB_NAME: "big"}).items()}
    assert len(first) == 8

    small = cluster.create(PYTORCHJOBS, pytorchjob("small", q["b"], workers=3))  # 4 GPUs, b's quota
    cluster.wait_all_bound(4, "PyTorchJob small", {JOB_NAME: "small"})

    # the whole gang of big was evicted (minMember 8: no part of it may keep running) ...
    evicted = {e["involvedObject"]["name"] for e in cluster.events("Evict")}
    big_group = f"pg-big-{big['metadata']['uid']}"
    assert big_group in evicted, cluster.describe()
    # ... and the operator recreated its 8 pods (same names, new uids), which wait: only 4 GPUs are free
    def recreated() -> dict[str, JSON] | None:
        pods = cluster.live_pods({JOB_NAME: "big"})
        fresh = {n: p for n, p in pods.items() if p["metadata"]["uid"] != uids_before.get(n)}
        return fresh if len(fresh) == 8 else None

    fresh = wait_until(recreated, WAIT_S, "the operator recreates big's 8 pods", describe=cluster.describe)
    assert sorted(fresh) == sorted(uids_before)
    cluster.wait_more_cycles(sched, CYCLES_UNBOUND)
    big_pods = cluster.live_pods({JOB_NAME: "big"})
    assert not any(node_of(p) for p in big_pods.values()), "a gang of 8 does not fit in 4 free GPUs"
    used = sum(gpus_of(p) for p in cluster.live_pods().values() if node_of(p))
    assert used == 4
    assert_pod_group(cluster.wait_pod_group(big_group), big, min_member=8, queue=q["a"], priority="train",
                     sub_groups={"master": 1, "worker": 7})
    small_group = f"pg-small-{small['metadata']['uid']}"
    assert_pod_group(cluster.wait_pod_group(small_group), small, min_member=4, queue=q["b"], priority="train",
                     sub_groups={"master": 1, "worker": 3})

    # quota frees: small is deleted (its pods go with it), big is scheduled again, whole
    cluster.kube.delete(f"{KUBEFLOW}/namespaces/{cluster.ns}/pytorchjobs/small")
    cluster.wait_all_bound(8, "PyTorchJob big, again", {JOB_NAME: "big"})
    assert sum(gpus_of(p) for p in cluster.live_pods().values() if node_of(p)) == 8
    assert not [r for r in sched.records() if r.get("event") == "write failed"], cluster.describe()


def test_an_elastic_pytorchjob_grows_and_shrinks_within_min_and_max(cluster: OperatorCluster) -> None:
    cluster.add_nodes(1, gpus=8)
    q = cluster.queues(8, {"a": 8})
    job = cluster.create(PYTORCHJOBS, pytorchjob("elastic", q["a"], workers=2, master=False, elastic=(2, 4)))
    cluster.kaisched()
    cluster.wait_all_bound(2, "elastic PyTorchJob", {JOB_NAME: "elastic"})
    group_name = f"pg-elastic-{job['metadata']['uid']}"
    assert_pod_group(cluster.wait_pod_group(group_name), job, min_member=2, queue=q["a"], priority="train",
                     sub_groups={"worker": 2})

    # grows to its maximum (as the HPA the operator made for it would, through the replicas)
    cluster.patch(PYTORCHJOBS, "elastic", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}})
    placed = cluster.wait_all_bound(4, "elastic PyTorchJob grown to 4", {JOB_NAME: "elastic"})
    assert sorted(placed) == [f"elastic-worker-{i}" for i in range(4)]
    pods = cluster.live_pods({JOB_NAME: "elastic"})
    assert {p["metadata"]["annotations"].get("pod-group-name") for p in pods.values()} == {group_name}
    assert sum(gpus_of(p) for p in pods.values()) == 4

    # shrinks back to its minimum: the operator deletes the highest indices, the rest keep running
    cluster.patch(PYTORCHJOBS, "elastic", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})
    placed = cluster.wait_all_bound(2, "elastic PyTorchJob shrunk to 2", {JOB_NAME: "elastic"})
    assert sorted(placed) == ["elastic-worker-0", "elastic-worker-1"]
    group = cluster.wait_pod_group(group_name)
    assert group["spec"]["minMember"] == 2
    assert all(gpus_of(p) == 1 for p in cluster.live_pods({JOB_NAME: "elastic"}).values())


def test_a_pod_the_operator_deleted_or_made_anew_since_the_snapshot_is_never_bound(cluster: OperatorCluster) -> None:
    """A cycle plans binds on a snapshot; before they are written, the operator may delete a pod (an elastic
    job shrinking) or make it anew under the same name (a replica whose pod was deleted). kaisched's writer
    binds with the planned pod's uid, so the API server binds neither the deleted pod nor its successor."""
    [node] = cluster.add_nodes(1, gpus=8)
    q = cluster.queues(8, {"a": 8})
    cluster.create(PYTORCHJOBS, pytorchjob("race", q["a"], workers=4, master=False, elastic=(1, 4)))
    pods = cluster.wait_pods(4, "PyTorchJob race", {JOB_NAME: "race"})  # no scheduler runs: all pending
    snapshot = {name: pod["metadata"]["uid"] for name, pod in pods.items()}

    # the operator makes worker-0 anew (its pod was deleted) and deletes worker-3 (the job shrinks to 3)
    cluster.kube.delete(f"/api/v1/namespaces/{cluster.ns}/pods/race-worker-0", grace_seconds=0)
    cluster.patch(PYTORCHJOBS, "race", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})

    def settled() -> dict[str, JSON] | None:
        now = cluster.live_pods({JOB_NAME: "race"})
        anew = now.get("race-worker-0", {}).get("metadata", {}).get("uid") not in (None, snapshot["race-worker-0"])
        return now if anew and sorted(now) == ["race-worker-0", "race-worker-1", "race-worker-2"] else None

    wait_until(settled, WAIT_S, "worker-0 made anew and worker-3 deleted by the operator", describe=cluster.describe)

    # the binds the stale cycle planned, written by kaisched's writer
    with KubeClient.from_kubeconfig(cluster.server.kubeconfig_path) as api:
        writer = ClusterWriter(api, workers=2, max_attempts=1)
        try:
            writer.submit([Bind(ObjectRef.pod(f"{cluster.ns}/{name}", uid), node) for name, uid in snapshot.items()])
            assert writer.drain(WAIT_S)
            assert writer.in_flight_binds() == {"/".join((cluster.ns, "race-worker-1")): node,
                                                "/".join((cluster.ns, "race-worker-2")): node}
        finally:
            writer.close()
    now = cluster.live_pods({JOB_NAME: "race"})
    assert {name: node_of(pod) for name, pod in now.items()} == {
        "race-worker-0": "", "race-worker-1": node, "race-worker-2": node}, "only the planned pods are bound"
    assert not [e for e in cluster.events("FailedBinding") if e["involvedObject"]["name"] == "race-worker-0"]


def test_a_waiting_gang_runs_once_the_job_before_it_completes(cluster: OperatorCluster) -> None:
    """The kubelet ends the first job's pods (Succeeded): the operator marks the job Succeeded, and the GPUs its
    finished pods held go to the next gang."""
    cluster.add_nodes(1, gpus=4)
    q = cluster.queues(8, {"a": 8})
    cluster.create(PYTORCHJOBS, pytorchjob("first", q["a"], workers=3))
    sched = cluster.kaisched()
    cluster.wait_all_bound(4, "PyTorchJob first", {JOB_NAME: "first"})
    cluster.create(PYTORCHJOBS, pytorchjob("second", q["a"], workers=3))
    cluster.wait_pods(4, "PyTorchJob second", {JOB_NAME: "second"})
    cluster.wait_more_cycles(sched, CYCLES_UNBOUND)
    assert not any(node_of(p) for p in cluster.live_pods({JOB_NAME: "second"}).values()), "4 GPUs are in use"

    for name in sorted(cluster.live_pods({JOB_NAME: "first"})):
        cluster.stack.kubelet.wait_running(cluster.ns, name)
        cluster.stack.kubelet.finish(cluster.ns, name)

    def succeeded() -> JSON | None:
        status = (cluster.get(PYTORCHJOBS, "first") or {}).get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
        return status if conditions.get("Succeeded") == "True" else None

    wait_until(succeeded, WAIT_S, "PyTorchJob first Succeeded", describe=cluster.describe)
    cluster.wait_all_bound(4, "PyTorchJob second, once first is done", {JOB_NAME: "second"})
    phases = {p["status"].get("phase") for p in cluster.live_pods({JOB_NAME: "first"}).values()}
    assert phases <= {"Succeeded"}, phases  # finished pods stay (cleanPodPolicy) but hold no GPU
