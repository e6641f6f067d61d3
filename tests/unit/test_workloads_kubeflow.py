"""Kubeflow workloads (spec 10.3; issue 6): the embedded controllers make the pods the Training Operator, the
MPI Operator, the Notebook controller and Kubeflow Trainer would make, and the pod-grouper groups them.

Every fixture in ``tests/fixtures/workloads`` is a manifest as users write it; each test looks at the
PodGroup it yields (name, minMember, subgroups, queue, priority, preemptibility), the pods created (names,
labels, owners, subgroup labels), and a scheduling cycle on clusters big and too small for the gang.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kaisched.cluster.workloads import CONTROLLERS
from kaisched.cluster.workloads.base import Emit
from kaisched.k8s.objects import ParsedObjects, Pod, PodGroup, SubGroup, TopologyConstraint, Workload
from kaisched.podgrouper.registry import GROUPERS

from .builders import binds, node, priority_class, queue, status
from .workload_helpers import PG_ANNOTATION, SUBGROUP, prepared, run, workload

Obj = dict[str, Any]
NS = "team-a"
QUEUE = "team-a"
TYPE = "training.kubeflow.org/replica-type"
INDEX = "training.kubeflow.org/replica-index"
ROLE = "training.kubeflow.org/job-role"
JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR = "training.kubeflow.org/operator-name"
RACK = "example.com/rack"
SPINE = "example.com/spine"


# ------------------------------------------------------------------------------------------- helpers










def pg_name(job: str, ns: str = NS) -> str:
    """The default PodGroup name of a workload given without a uid (the parser's uid is ``<ns>/<name>``)."""
    return f"pg-{job}-{ns}-{job}"


def only_pod_group(out: ParsedObjects) -> PodGroup:
    assert len(out.pod_groups) == 1, [pg.meta.name for pg in out.pod_groups]
    return out.pod_groups[0]


def pods(out: ParsedObjects) -> dict[str, Pod]:
    return {p.meta.name: p for p in out.pods}


def errors(out: ParsedObjects | Any) -> list[str]:
    return [str(e) for e in out.errors]


def cluster(gpus: int = 8, n: int = 2, cpu: object = 64) -> list[Obj]:
    """Nodes report ephemeral storage, as a kubelet does (an MPIJob launcher's init container asks for 5Gi)."""
    return [queue(QUEUE), *(node(f"n{i}", gpus, cpu, extra={"ephemeral-storage": "100Gi"}) for i in range(1, n + 1))]


def owner(p: Pod) -> tuple[str, str]:
    (ref,) = p.meta.owner_references
    assert ref.controller
    return ref.kind, ref.name


# --------------------------------------------------------------------------------------- TFJob
def test_tfjob_one_gang_of_all_replicas_with_training_operator_pods() -> None:
    out = prepared(workload("tfjob.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.meta.namespace) == (pg_name("dist-mnist"), NS)
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, 3, "train", "")
    assert pg.sub_groups == ()
    created = pods(out)
    assert sorted(created) == ["dist-mnist-ps-0", "dist-mnist-worker-0", "dist-mnist-worker-1"]
    ps = created["dist-mnist-ps-0"]
    assert {k: v for k, v in ps.meta.labels.items() if k.startswith("training.kubeflow.org/")} == {
        OPERATOR: "tfjob-controller", JOB_NAME: "dist-mnist", TYPE: "ps", INDEX: "0"}
    # without Chief/Master, worker 0 has the master role
    assert created["dist-mnist-worker-0"].meta.labels[ROLE] == "master"
    assert ROLE not in created["dist-mnist-worker-1"].meta.labels
    for p in created.values():
        assert owner(p) == ("TFJob", "dist-mnist")
        assert p.meta.annotations[PG_ANNOTATION] == pg.meta.name
        assert SUBGROUP not in p.meta.labels
        assert p.scheduler_name == "kai-scheduler"
    assert created["dist-mnist-worker-1"].requests["nvidia.com/gpu"] == 1


def test_tfjob_chief_has_the_master_role() -> None:
    job = workload("tfjob.yaml")
    job["spec"]["tfReplicaSpecs"]["Chief"] = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["PS"])
    out = prepared(job)
    created = pods(out)
    assert created["dist-mnist-chief-0"].meta.labels[ROLE] == "master"
    assert ROLE not in created["dist-mnist-worker-0"].meta.labels
    assert only_pod_group(out).min_member == 4


def test_tfjob_with_two_chiefs_is_rejected() -> None:
    job = workload("tfjob.yaml")
    job["spec"]["tfReplicaSpecs"]["Chief"] = {**copy.deepcopy(job["spec"]["tfReplicaSpecs"]["PS"]), "replicas": 2}
    out = prepared(job)
    assert out.pods == [] and out.pod_groups == []
    assert any("spec.tfReplicaSpecs.Chief.replicas" in e and "at most 1" in e for e in errors(out)), errors(out)


# ---------------------------------------------------------------------------------------- PyTorchJob
def test_pytorchjob_master_and_worker_subgroups() -> None:
    out = prepared(workload("pytorchjob.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("pytorch-simple")
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, 4, "train", "")
    assert pg.sub_groups == (SubGroup("master", 1), SubGroup("worker", 3))
    created = pods(out)
    assert sorted(created) == ["pytorch-simple-master-0", *(f"pytorch-simple-worker-{i}" for i in range(3))]
    master = created["pytorch-simple-master-0"]
    assert master.meta.labels[SUBGROUP] == "master"
    assert {k: v for k, v in master.meta.labels.items() if k.startswith("training.kubeflow.org/")} == {
        OPERATOR: "pytorchjob-controller", JOB_NAME: "pytorch-simple", TYPE: "master", INDEX: "0", ROLE: "master"}
    for i in range(3):
        worker = created[f"pytorch-simple-worker-{i}"]
        assert worker.meta.labels[SUBGROUP] == "worker"
        assert (worker.meta.labels[TYPE], worker.meta.labels[INDEX]) == ("worker", str(i))
        assert ROLE not in worker.meta.labels
        assert owner(worker) == ("PyTorchJob", "pytorch-simple")


def test_pytorchjob_min_available_overrides_the_sum_and_the_worker_subgroup_gets_the_rest() -> None:
    job = workload("pytorchjob.yaml")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    pg = only_pod_group(prepared(job))
    assert pg.min_member == 2
    assert pg.sub_groups == (SubGroup("master", 1), SubGroup("worker", 1))


def test_elastic_pytorchjob_gangs_min_replicas() -> None:
    out = prepared(workload("pytorchjob-elastic.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("elastic-imagenet")
    assert (pg.min_member, pg.priority_class_name) == (2, "train")
    assert pg.sub_groups == (SubGroup("worker", 2),)
    assert sorted(pods(out)) == [f"elastic-imagenet-worker-{i}" for i in range(4)]
    assert {p.meta.labels[SUBGROUP] for p in out.pods} == {"worker"}


def test_elastic_min_replicas_is_overridden_by_min_available() -> None:
    job = workload("pytorchjob-elastic.yaml")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 3}}
    assert only_pod_group(prepared(job)).min_member == 3


def test_elastic_pytorchjob_starts_with_what_fits_above_its_minimum() -> None:
    result = run(cluster(gpus=3, n=1), workload("pytorchjob-elastic.yaml"))
    assert len(binds(result)) == 3
    result = run(cluster(gpus=1, n=1), workload("pytorchjob-elastic.yaml"))
    assert binds(result) == {}
    assert status(result, f"{NS}/{pg_name('elastic-imagenet')}").status == "Pending"


def test_pytorchjob_master_must_have_one_replica() -> None:
    job = workload("pytorchjob.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    out = prepared(job)
    assert out.pods == []
    assert any("spec.pytorchReplicaSpecs.Master.replicas" in e and "exactly 1" in e for e in errors(out))


def test_pytorchjob_with_zero_workers_is_not_grouped() -> None:
    """KAI's grouper does not allow 0 pods of a replica type (unless minAvailable is set): the master pod the
    controller made is left out with an error naming the field."""
    job = workload("pytorchjob.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    out = prepared(job)
    assert [p.meta.name for p in out.pods] == ["pytorch-simple-master-0"]
    assert out.pod_groups == []
    assert any("PyTorchJob team-a/pytorch-simple: spec.pytorchReplicaSpecs.Worker.replicas: must be > 0" in e
               for e in errors(out)), errors(out)


# ------------------------------------------------------------------------------------------ segments
def topology(name: str = "cluster-topology") -> Obj:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": SPINE}, {"nodeLabel": RACK}]}}


def test_pytorchjob_segments_make_worker_a_parent_of_segment_subgroups() -> None:
    out = prepared(workload("pytorchjob-segments.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("llm-pretrain")
    assert pg.min_member == 11
    assert pg.topology_constraint == TopologyConstraint("cluster-topology", SPINE, "")
    seg = TopologyConstraint("cluster-topology", RACK, "")
    assert pg.sub_groups == (
        SubGroup("master", 1), SubGroup("worker", 10),
        SubGroup("worker-0", 4, "worker", seg), SubGroup("worker-1", 4, "worker", seg),
        SubGroup("worker-2", 2, "worker", seg))
    created = pods(out)
    assert created["llm-pretrain-master-0"].meta.labels[SUBGROUP] == "master"
    assert {i: created[f"llm-pretrain-worker-{i}"].meta.labels[SUBGROUP] for i in range(10)} == {
        i: f"worker-{i // 4}" for i in range(10)}
    # the worker template's annotations reach the pods
    assert created["llm-pretrain-worker-9"].meta.annotations["kai.scheduler/segment-size"] == "4"


RACKS = {"n1": ("r1", "s1"), "n2": ("r1", "s1"), "n3": ("r2", "s1"), "n4": ("r2", "s1"),
         "n5": ("r3", "s2"), "n6": ("r3", "s2"), "n7": ("r4", "s2"), "n8": ("r4", "s2")}


def rack_nodes(gpus: int = 4) -> list[Obj]:
    return [node(n, gpus, labels={RACK: r, SPINE: s}) for n, (r, s) in RACKS.items()]


def test_pytorchjob_segments_are_placed_one_rack_each_within_one_spine() -> None:
    result = run(queue(QUEUE), topology(), rack_nodes(), workload("pytorchjob-segments.yaml"))
    assert errors(result) == []
    placed = binds(result)
    assert len(placed) == 11
    spines = {RACKS[n][1] for n in placed.values()}
    assert len(spines) == 1
    for k, members in enumerate((range(0, 4), range(4, 8), range(8, 10))):
        racks = {RACKS[placed[f"{NS}/llm-pretrain-worker-{i}"]][0] for i in members}
        assert len(racks) == 1, (k, racks)


def test_pytorchjob_segments_that_no_rack_holds_keep_the_job_pending() -> None:
    # 3 GPUs per rack (one node each): a segment of 4 workers fits no rack
    nodes = [node(f"n{i}", 3, labels={RACK: f"r{i}", SPINE: "s1"}) for i in range(1, 6)]
    result = run(queue(QUEUE), topology(), nodes, workload("pytorchjob-segments.yaml"))
    assert binds(result) == {}
    assert status(result, f"{NS}/{pg_name('llm-pretrain')}").status == "Pending"


def test_segment_size_on_the_pod_and_an_invalid_segment_size() -> None:
    job = workload("pytorchjob.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"kai.scheduler/segment-size": "2"}}
    pg = only_pod_group(prepared(job))
    assert [(s.name, s.min_member, s.parent) for s in pg.sub_groups] == [
        ("master", 1, None), ("worker", 3, None), ("worker-0", 2, "worker"), ("worker-1", 1, "worker")]
    assert all(s.topology_constraint is None for s in pg.sub_groups)  # no topology named anywhere
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][
        "kai.scheduler/segment-size"] = "zero"
    out = prepared(job)
    assert out.pod_groups == []
    assert any("kai.scheduler/segment-size" in e and "positive integer" in e for e in errors(out)), errors(out)


# ---------------------------------------------------------------------------------- XGBoost and JAX
def test_xgboostjob_gang_and_master_role() -> None:
    out = prepared(workload("xgboostjob.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.queue, pg.min_member, pg.priority_class_name) == (
        pg_name("xgboost-dist-iris"), QUEUE, 3, "train")
    created = pods(out)
    assert sorted(created) == ["xgboost-dist-iris-master-0", "xgboost-dist-iris-worker-0",
                               "xgboost-dist-iris-worker-1"]
    assert created["xgboost-dist-iris-master-0"].meta.labels[ROLE] == "master"
    assert created["xgboost-dist-iris-worker-0"].meta.labels[OPERATOR] == "xgboostjob-controller"


def test_xgboostjob_without_master_is_rejected() -> None:
    job = workload("xgboostjob.yaml")
    del job["spec"]["xgbReplicaSpecs"]["Master"]
    out = prepared(job)
    assert out.pods == []
    assert "XGBoostJob team-a/xgboost-dist-iris: spec.xgbReplicaSpecs.Master: the job needs a Master replica " \
           "spec" in errors(out)


def test_jaxjob_gang_of_workers_with_worker_0_as_master() -> None:
    out = prepared(workload("jaxjob.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.min_member, pg.priority_class_name, pg.sub_groups) == (
        pg_name("jax-dist-mnist"), 4, "train", ())
    created = pods(out)
    assert sorted(created) == [f"jax-dist-mnist-worker-{i}" for i in range(4)]
    assert created["jax-dist-mnist-worker-0"].meta.labels[ROLE] == "master"
    assert ROLE not in created["jax-dist-mnist-worker-3"].meta.labels


def test_jaxjob_without_worker_is_rejected() -> None:
    job = workload("jaxjob.yaml")
    job["spec"]["jaxReplicaSpecs"]["Master"] = job["spec"]["jaxReplicaSpecs"].pop("Worker")
    out = prepared(job)
    assert out.pods == []
    assert any("spec.jaxReplicaSpecs.Master: unknown replica type" in e for e in errors(out)), errors(out)
    assert any("spec.jaxReplicaSpecs.Worker: the job needs a Worker replica spec" in e for e in errors(out))


# -------------------------------------------------------------------------------------------- MPIJob
def test_mpijob_v1_launcher_pod_owned_by_the_job() -> None:
    out = prepared(workload("mpijob-v1.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.queue, pg.min_member, pg.priority_class_name) == (
        pg_name("tensorflow-benchmarks"), QUEUE, 3, "train")
    created = pods(out)
    assert sorted(created) == ["tensorflow-benchmarks-launcher", "tensorflow-benchmarks-worker-0",
                               "tensorflow-benchmarks-worker-1"]
    launcher = created["tensorflow-benchmarks-launcher"]
    assert owner(launcher) == ("MPIJob", "tensorflow-benchmarks")
    assert {k: v for k, v in launcher.meta.labels.items() if k.startswith("training.kubeflow.org/")} == {
        OPERATOR: "mpijob-controller", JOB_NAME: "tensorflow-benchmarks", TYPE: "launcher", ROLE: "master"}
    assert created["tensorflow-benchmarks-worker-1"].meta.labels[INDEX] == "1"


def made_pods(doc: Obj) -> dict[str, Obj]:
    """The pods (as dicts) a workload's embedded controller makes."""
    w = prepared(doc).workloads[0]
    emit = Emit(w)
    CONTROLLERS[(w.group, w.kind)](w, emit)
    assert emit.errors == []
    return {o["metadata"]["name"]: o for o in emit.objects if o["kind"] == "Pod"}


def test_pytorchjob_pods_get_what_the_training_operator_adds() -> None:
    """As Training Operator v1.8.1 (tests/operators/test_embedded.py compares with the real one): a worker of a
    job with a Master waits for it in ``init-pytorch`` (50m CPU asked); the default port; ``OnFailure``."""
    doc = workload("pytorchjob.yaml")
    del doc["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"]
    made = made_pods(doc)
    worker, master = made["pytorch-simple-worker-0"]["spec"], made["pytorch-simple-master-0"]["spec"]
    (init,) = worker["initContainers"]
    assert (init["name"], init["image"], init["resources"]["requests"]) == (
        "init-pytorch", "alpine:3.10", {"cpu": "50m", "memory": "10Mi"})
    assert "nslookup pytorch-simple-master-0" in init["command"][-1]
    assert "initContainers" not in master
    assert worker["restartPolicy"] == "OnFailure"  # the kind's default
    assert worker["containers"][0]["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    worker_pod = pods(prepared(doc))["pytorch-simple-worker-0"]
    assert worker_pod.requests["cpu"] == pytest.approx(50)  # millicores: the init container's
    # without a Master no worker waits
    del doc["spec"]["pytorchReplicaSpecs"]["Master"]
    assert "initContainers" not in made_pods(doc)["pytorch-simple-worker-0"]["spec"]


def test_mpijob_v1_launcher_gets_the_kubectl_delivery_init_container_and_its_service_account() -> None:
    made = made_pods(workload("mpijob-v1.yaml"))
    launcher = made["tensorflow-benchmarks-launcher"]["spec"]
    (init,) = launcher["initContainers"]
    assert (init["name"], init["resources"]["requests"]) == (
        "kubectl-delivery", {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"})
    assert launcher["serviceAccountName"] == "tensorflow-benchmarks-launcher"
    assert {p["spec"]["restartPolicy"] for p in made.values()} == {"Never"}
    # a launcher on nodes without ephemeral storage does not fit (as on a real cluster)
    result = run(queue(QUEUE), node("n1", 8, 64), workload("mpijob-v1.yaml"))
    assert binds(result) == {}


def test_mpijob_v2beta1_launcher_is_a_batch_job() -> None:
    out = prepared(workload("mpijob-v2beta1.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.queue, pg.min_member, pg.priority_class_name) == (
        pg_name("mpi-hello-world"), QUEUE, 3, "train")
    created = pods(out)
    (launcher_name,) = [n for n in created if n.startswith("mpi-hello-world-launcher-")]
    assert len(launcher_name) == len("mpi-hello-world-launcher-") + 5
    assert sorted(created) == sorted([launcher_name, "mpi-hello-world-worker-0", "mpi-hello-world-worker-1"])
    launcher = created[launcher_name]
    assert owner(launcher) == ("Job", "mpi-hello-world-launcher")
    assert launcher.meta.labels[ROLE] == "launcher"
    assert launcher.meta.labels["batch.kubernetes.io/job-name"] == "mpi-hello-world-launcher"
    (job,) = [w for w in out.workloads if w.kind == "Job"]
    assert [(r.kind, r.name) for r in job.meta.owner_references] == [("MPIJob", "mpi-hello-world")]
    worker = created["mpi-hello-world-worker-1"]
    assert owner(worker) == ("MPIJob", "mpi-hello-world")
    assert {k: v for k, v in worker.meta.labels.items() if k.startswith("training.kubeflow.org/")} == {
        OPERATOR: "mpi-operator", JOB_NAME: "mpi-hello-world", ROLE: "worker", INDEX: "1"}
    # the launcher's PodGroup is the MPIJob's
    assert {p.meta.annotations[PG_ANNOTATION] for p in out.pods} == {pg.meta.name}


def test_mpijob_waiting_for_workers_gangs_the_workers_only() -> None:
    job = workload("mpijob-v2beta1.yaml")
    job["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    out = prepared(job)
    assert errors(out) == []
    assert sorted(pods(out)) == ["mpi-hello-world-worker-0", "mpi-hello-world-worker-1"]
    assert only_pod_group(out).min_member == 2
    # once the launcher pod exists (a snapshot of the running cluster), it counts again
    snapshot = [job, *_as_input(prepared(workload("mpijob-v2beta1.yaml")))]
    out = prepared(snapshot)
    assert only_pod_group(out).min_member == 3


def _as_input(out: ParsedObjects) -> list[Obj]:
    """The pods and intermediate objects of ``out`` as Kubernetes dicts (a cluster snapshot)."""
    docs: list[Obj] = []
    for w in out.workloads:
        if w.meta.owner_references:
            docs.append({"apiVersion": w.api_version, "kind": w.kind, "metadata": _meta(w.meta), "spec": dict(w.spec)})
    for p in out.pods:
        meta = _meta(p.meta)
        meta["annotations"] = {k: v for k, v in p.meta.annotations.items() if k != PG_ANNOTATION}
        meta["labels"] = {k: v for k, v in p.meta.labels.items() if k != SUBGROUP}
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                     "spec": {"schedulerName": p.scheduler_name, "containers": [{"name": "c", "image": "i"}]},
                     "status": {"phase": "Pending"}})
    return docs


def _meta(meta: Any) -> Obj:
    return {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid, "labels": dict(meta.labels),
            "annotations": dict(meta.annotations),
            "ownerReferences": [{"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid,
                                 "controller": r.controller} for r in meta.owner_references]}


def test_mpijob_without_launcher_is_rejected() -> None:
    job = workload("mpijob-v2beta1.yaml")
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]
    out = prepared(job)
    assert out.pods == []
    assert "MPIJob team-a/mpi-hello-world: spec.mpiReplicaSpecs.Launcher: the job needs a Launcher replica spec" \
        in errors(out)


def test_mpijob_without_workers_is_not_grouped() -> None:
    """The MPI Operator defaults Worker replicas to 0 and runs the launcher; KAI's grouper wants workers."""
    job = workload("mpijob-v1.yaml")
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    out = prepared(job)
    assert [p.meta.name for p in out.pods] == ["tensorflow-benchmarks-launcher"]
    assert out.pod_groups == []
    assert any("spec.mpiReplicaSpecs.Worker.replicas: must be > 0 (got 0)" in e for e in errors(out)), errors(out)


# ------------------------------------------------------------------------------------------ Notebook
def test_notebook_statefulset_pod_in_a_build_podgroup() -> None:
    out = prepared(workload("notebook.yaml"))
    assert errors(out) == []
    pg = only_pod_group(out)
    assert (pg.meta.name, pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (
        pg_name("my-notebook"), QUEUE, 1, "build", "")
    (sts,) = [w for w in out.workloads if w.kind == "StatefulSet"]
    assert sts.meta.name == "my-notebook"
    assert [(r.kind, r.name) for r in sts.meta.owner_references] == [("Notebook", "my-notebook")]
    (p,) = out.pods
    assert p.meta.name == "my-notebook-0"
    assert owner(p) == ("StatefulSet", "my-notebook")
    assert {k: p.meta.labels[k] for k in ("statefulset", "notebook-name", "app", "kai.scheduler/queue",
                                            "statefulset.kubernetes.io/pod-name")} == {
        "statefulset": "my-notebook", "notebook-name": "my-notebook", "app": "my-notebook",
        "kai.scheduler/queue": QUEUE, "statefulset.kubernetes.io/pod-name": "my-notebook-0"}
    assert p.meta.annotations[PG_ANNOTATION] == pg.meta.name
    assert p.requests["nvidia.com/gpu"] == 1


def test_stopped_notebook_has_no_pod() -> None:
    nb = workload("notebook.yaml")
    nb["metadata"]["annotations"]["kubeflow-resource-stopped"] = "2025-01-01T00:00:00Z"
    out = prepared(nb)
    assert errors(out) == [] and out.pods == [] and out.pod_groups == []


def test_notebook_without_containers_is_rejected() -> None:
    nb = workload("notebook.yaml")
    nb["spec"]["template"]["spec"]["containers"] = []
    out = prepared(nb)
    assert out.pods == []
    assert any("Notebook team-a/my-notebook: spec.template.spec.containers" in e for e in errors(out))


# ------------------------------------------------------------------------------------------ TrainJob
def test_trainjob_makes_a_jobset_with_a_node_job_of_num_nodes_pods() -> None:
    out = prepared(workload("trainjob.yaml"))
    (jobset,) = [w for w in out.workloads if w.kind == "JobSet"]
    assert (jobset.api_version, jobset.meta.name, jobset.meta.namespace) == (
        "jobset.x-k8s.io/v1alpha2", "pytorch-mnist", NS)
    assert [(r.kind, r.name, r.controller) for r in jobset.meta.owner_references] == [
        ("TrainJob", "pytorch-mnist", True)]
    (rjob,) = jobset.spec["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("node", 1)
    job_spec = rjob["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"], job_spec["completionMode"]) == (2, 2, "Indexed")
    assert rjob["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod_spec = job_spec["template"]["spec"]
    assert pod_spec["schedulerName"] == "kai-scheduler"
    (container,) = pod_spec["containers"]
    assert (container["name"], container["image"]) == ("node", "docker.io/kubeflow/pytorch-mnist:latest")
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}


JOBSET_SIDE = ("jobset.x-k8s.io", "JobSet")


def test_trainjob_pods_are_grouped_by_the_jobset_grouper() -> None:
    if JOBSET_SIDE not in CONTROLLERS or JOBSET_SIDE not in GROUPERS:
        pytest.skip("the JobSet controller/grouper (another family's) is not registered yet: only the JobSet "
                    "the TrainJob controller makes is checked (previous test)")
    out = prepared(workload("trainjob.yaml"))
    assert errors(out) == []
    assert len(out.pods) == 2
    (pg,) = out.pod_groups
    assert pg.min_member == 2
    assert pg.priority_class_name == "train"
    assert {p.meta.annotations[PG_ANNOTATION] for p in out.pods} == {pg.meta.name}
    assert pg.meta.name.startswith("pg-pytorch-mnist-")  # named after the JobSet, not the TrainJob
    result = run(cluster(), workload("trainjob.yaml"))
    assert len(binds(result)) == 2


def test_trainjob_queue_label_chooses_the_queue() -> None:
    if JOBSET_SIDE not in CONTROLLERS or JOBSET_SIDE not in GROUPERS:
        pytest.skip("the JobSet controller/grouper is not registered yet")
    (pg,) = prepared(workload("trainjob.yaml")).pod_groups
    assert pg.queue == QUEUE


def test_trainjob_bad_input() -> None:
    tj = workload("trainjob.yaml")
    tj["spec"]["trainer"]["numNodes"] = -1
    del tj["spec"]["runtimeRef"]
    out = prepared(tj)
    assert [w.kind for w in out.workloads] == ["TrainJob"]
    assert "TrainJob team-a/pytorch-mnist: spec.trainer.numNodes: must be >= 0, got -1" in errors(out)
    assert any("spec.runtimeRef.name" in e for e in errors(out))


def test_trainjob_overrides_reach_the_node_pod_template() -> None:
    tj = workload("trainjob.yaml")
    tj["spec"]["podTemplateOverrides"] = [{
        "targetJobs": [{"name": "node"}],
        "metadata": {"labels": {"team": "vision"}},
        "spec": {"nodeSelector": {"gpu-type": "h100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}}]
    tj["spec"]["labels"] = {"kai.scheduler/queue": QUEUE}
    out = prepared(tj)
    (jobset,) = [w for w in out.workloads if w.kind == "JobSet"]
    template = jobset.spec["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"] == {"labels": {"team": "vision"}}
    assert template["spec"]["nodeSelector"] == {"gpu-type": "h100"}
    assert jobset.meta.labels == {"kai.scheduler/queue": QUEUE}


# --------------------------------------------------------------------------- every fixture, end to end
GANGS = {  # fixture -> (pods, PodGroup name, small cluster (gpus, cpu) on which the gang cannot start)
    "tfjob.yaml": (3, pg_name("dist-mnist"), (1, 2)),
    "pytorchjob.yaml": (4, pg_name("pytorch-simple"), (1, 64)),
    "pytorchjob-elastic.yaml": (4, pg_name("elastic-imagenet"), (1, 64)),
    "xgboostjob.yaml": (3, pg_name("xgboost-dist-iris"), (0, 2)),
    "jaxjob.yaml": (4, pg_name("jax-dist-mnist"), (1, 64)),
    "mpijob-v1.yaml": (3, pg_name("tensorflow-benchmarks"), (1, 64)),
    "mpijob-v2beta1.yaml": (3, pg_name("mpi-hello-world"), (1, 64)),
    "notebook.yaml": (1, pg_name("my-notebook"), (0, 64)),
}


@pytest.mark.parametrize("name", sorted(GANGS))
def test_fixture_is_scheduled_on_a_big_cluster_and_waits_on_a_small_one(name: str) -> None:
    n, pg, (gpus, cpu) = GANGS[name]
    result = run(cluster(), workload(name))
    assert errors(result) == []
    assert len(binds(result)) == n
    assert all(p.startswith(f"{NS}/") for p in binds(result))
    assert status(result, f"{NS}/{pg}").queue == QUEUE
    result = run(cluster(gpus=gpus, n=1, cpu=cpu), workload(name))
    assert binds(result) == {}
    assert status(result, f"{NS}/{pg}").status == "Pending"


@pytest.mark.parametrize("name", sorted(GANGS))
def test_unknown_queue_keeps_the_podgroup_pending(name: str) -> None:
    job = workload(name)
    job["metadata"]["labels"]["kai.scheduler/queue"] = "no-such-queue"
    result = run(cluster(), job)
    assert binds(result) == {}
    found = status(result, f"{NS}/{GANGS[name][1]}")
    assert (found.status, found.reason, found.queue) == ("Pending", "QueueDoesNotExist", "no-such-queue")


@pytest.mark.parametrize(("name", "default"), [("pytorchjob.yaml", "train"), ("notebook.yaml", "build"),
                                               ("mpijob-v2beta1.yaml", "train")])
def test_priority_class_label_naming_a_missing_class_falls_back_to_the_kind_default(name: str,
                                                                                     default: str) -> None:
    job = workload(name)
    job["metadata"]["labels"]["priorityClassName"] = "does-not-exist"
    out = prepared(job)
    assert only_pod_group(out).priority_class_name == default
    out = prepared(job, priority_class("does-not-exist", 500))
    assert only_pod_group(out).priority_class_name == "does-not-exist"


def test_preemptibility_label_is_honoured() -> None:
    job = workload("jaxjob.yaml")
    job["metadata"]["labels"]["kai.scheduler/preemptibility"] = "non-preemptible"
    assert only_pod_group(prepared(job)).preemptibility == "non-preemptible"


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("name", "spec_field", "rtype"), [
    ("tfjob.yaml", "tfReplicaSpecs", "Worker"), ("pytorchjob.yaml", "pytorchReplicaSpecs", "Worker"),
    ("xgboostjob.yaml", "xgbReplicaSpecs", "Worker"), ("jaxjob.yaml", "jaxReplicaSpecs", "Worker"),
    ("mpijob-v1.yaml", "mpiReplicaSpecs", "Worker"), ("mpijob-v2beta1.yaml", "mpiReplicaSpecs", "Worker"),
])
def test_negative_or_non_integer_replicas_are_field_errors(name: str, spec_field: str, rtype: str) -> None:
    for bad, message in ((-2, "must be >= 0, got -2"), ("three", "must be a non-negative integer, got 'three'"),
                         (1.5, "must be a non-negative integer, got 1.5")):
        job = workload(name)
        job["spec"][spec_field][rtype]["replicas"] = bad
        out = prepared(cluster(), job)
        assert out.pods == [] and out.pod_groups == []
        kind, job_name = job["kind"], job["metadata"]["name"]
        assert f"{kind} {NS}/{job_name}: spec.{spec_field}.{rtype}.replicas: {message}" in errors(out)


@pytest.mark.parametrize(("name", "spec_field"), [
    ("tfjob.yaml", "tfReplicaSpecs"), ("pytorchjob.yaml", "pytorchReplicaSpecs"), ("jaxjob.yaml", "jaxReplicaSpecs"),
    ("xgboostjob.yaml", "xgbReplicaSpecs"), ("mpijob-v2beta1.yaml", "mpiReplicaSpecs"),
])
def test_a_job_without_replica_specs_is_rejected(name: str, spec_field: str) -> None:
    for empty in (None, {}):
        job = workload(name)
        if empty is None:
            del job["spec"][spec_field]
        else:
            job["spec"][spec_field] = empty
        result = run(cluster(), job)
        assert result.binds == []
        assert any(f"spec.{spec_field}: the job has no replica specs" in e for e in errors(result)), errors(result)


def test_suspended_job_gets_no_pods() -> None:
    job = workload("pytorchjob.yaml")
    job["spec"]["runPolicy"] = {"suspend": True}
    out = prepared(job)
    assert errors(out) == [] and out.pods == []


def test_pods_already_in_the_input_are_not_created_again() -> None:
    """A snapshot of a running cluster holds the job's pods: the controller leaves them alone and the
    grouper groups them."""
    first = prepared(workload("pytorchjob.yaml"))
    again = prepared(workload("pytorchjob.yaml"), _as_input(first))
    assert sorted(pods(again)) == sorted(pods(first))
    assert only_pod_group(again).min_member == 4


def test_pods_of_a_job_not_in_the_input_are_reported() -> None:
    """Pods whose PyTorchJob is not given: the grouper cannot read the replica specs."""
    orphans = _as_input(prepared(workload("pytorchjob.yaml")))
    out = prepared(orphans)
    assert out.pod_groups == []
    assert any("PyTorchJob team-a/pytorch-simple: spec.pytorchReplicaSpecs" in e for e in errors(out)), errors(out)


def test_worker_without_replica_index_cannot_be_segmented() -> None:
    job = workload("pytorchjob-segments.yaml")
    docs = _as_input(prepared(job))
    for d in docs:
        d["metadata"]["labels"].pop(INDEX, None)
    out = prepared(job, docs)
    assert any("has no replica index label" in e for e in errors(out)), errors(out)


def test_template_metadata_that_is_not_a_mapping_is_a_field_error() -> None:
    job = workload("pytorchjob.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": ["team-a"]}
    out = prepared(job)
    assert out.pods == []
    assert "PyTorchJob team-a/pytorch-simple: spec.pytorchReplicaSpecs.Worker.template.metadata.labels: must be " \
           "a mapping of strings" in errors(out)


def test_mpijob_snapshot_with_min_available_but_no_replica_specs_is_an_error_not_a_crash() -> None:
    job = workload("mpijob-v2beta1.yaml")
    running = _as_input(prepared(copy.deepcopy(job)))
    job["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 3}
    del job["spec"]["mpiReplicaSpecs"]
    out = prepared(job, [d for d in running if "launcher" not in d["metadata"]["name"]])
    assert out.pod_groups == []
    assert any("spec.mpiReplicaSpecs" in e for e in errors(out)), errors(out)


def test_trainjob_hands_its_jobset_to_the_jobset_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JobSet the TrainJob controller makes is expanded into Jobs and pods in the same pass by whatever
    controller is registered for JobSets (a stand-in here)."""
    def stand_in(w: Workload, emit: Emit) -> None:
        for rjob in w.spec["replicatedJobs"]:
            job = emit.child("batch/v1", "Job", f"{w.meta.name}-{rjob['name']}-0", rjob["template"]["spec"])
            for i in range(rjob["template"]["spec"]["parallelism"]):
                emit.pod(f"{job.name}-{i}-abcde", rjob["template"]["spec"]["template"], parent=job)

    monkeypatch.setitem(CONTROLLERS, JOBSET_SIDE, stand_in)
    monkeypatch.delitem(GROUPERS, JOBSET_SIDE, raising=False)  # the stand-in's pods lack the JobSet labels
    out = prepared(workload("trainjob.yaml"))
    assert errors(out) == []
    assert sorted(p.meta.name for p in out.pods) == ["pytorch-mnist-node-0-0-abcde", "pytorch-mnist-node-0-1-abcde"]
    assert {owner(p) for p in out.pods} == {("Job", "pytorch-mnist-node-0")}
    (job,) = [w for w in out.workloads if w.kind == "Job"]
    assert [(r.kind, r.name) for r in job.meta.owner_references] == [("JobSet", "pytorch-mnist")]
    assert all(p.scheduler_name == "kai-scheduler" for p in out.pods)
    assert len({p.meta.annotations[PG_ANNOTATION] for p in out.pods}) >= 1
