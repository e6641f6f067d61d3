"""Ray, JobSet, LeaderWorkerSet and Grove workloads (spec 10.3; issue 6): the embedded controllers make the
objects and pods KubeRay, the JobSet controller and the LeaderWorkerSet controller would make, and the
pod-grouper groups them (Grove: from a cluster snapshot with its PodGang).

Every fixture in ``tests/fixtures/workloads`` is a manifest as users write it; each test looks at the
PodGroup it yields (name, minMember, subgroups, queue, priority, preemptibility), the pods created (names,
labels, owners, subgroup labels), and a scheduling cycle on clusters big and too small for the gang.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from kaisched.cluster.workloads import CONTROLLERS
from kaisched.cluster.workloads.base import Emit
from kaisched.k8s.objects import ObjectError, ParsedObjects, Pod, PodGroup, SubGroup, TopologyConstraint, Workload
from kaisched.k8s.parse import parse_objects
from kaisched.podgrouper.registry import GROUPERS

from .builders import binds, node, priority_class, queue, status
from .workload_helpers import PG_ANNOTATION, SUBGROUP, fixture, prepared, run, workload

Obj = dict[str, Any]
NS = "ml"
QUEUE = "team-a"
RACK = "example.com/rack"
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


# ------------------------------------------------------------------------------------------- helpers










def pg_name(name: str, ns: str = NS) -> str:
    """The default PodGroup name of a workload given without a uid (the parser's uid is ``<ns>/<name>``)."""
    return f"pg-{name}-{ns}-{name}"


def pod_groups(out: ParsedObjects) -> dict[str, PodGroup]:
    return {pg.meta.name: pg for pg in out.pod_groups}


def only_pod_group(out: ParsedObjects) -> PodGroup:
    assert len(out.pod_groups) == 1, [pg.meta.name for pg in out.pod_groups]
    return out.pod_groups[0]


def pods(out: ParsedObjects) -> dict[str, Pod]:
    return {p.meta.name: p for p in out.pods}


def leaves(out: ParsedObjects) -> dict[str, str]:
    """pod name -> its subgroup label."""
    return {p.meta.name: p.meta.labels.get(SUBGROUP, "") for p in out.pods}


def owner(p: Pod | Workload) -> tuple[str, str]:
    (ref,) = p.meta.owner_references
    return ref.kind, ref.name


def controller_objects(doc: Obj) -> tuple[list[Obj], list[ObjectError]]:
    """What a workload's embedded controller creates (as dicts), and its errors."""
    parsed = parse_objects([doc])
    (w,) = parsed.workloads
    emit = Emit(w)
    CONTROLLERS[(w.group, w.kind)](w, emit)
    return emit.objects, emit.errors


def created_pods(doc: Obj) -> dict[str, Obj]:
    objects, errors = controller_objects(doc)
    assert not errors, errors
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}


def gpu_nodes(n: int, gpus: int = 8) -> list[Obj]:
    return [node(f"n{i}", gpus) for i in range(n)]


def cluster(n: int = 2, gpus: int = 8) -> list[Obj]:
    return [*gpu_nodes(n, gpus), queue(QUEUE)]


def field_errors(out: ParsedObjects | Any) -> dict[str, str]:
    return {e.field: e.message for e in out.errors}


def test_registered() -> None:
    for key in [("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService"),
                ("jobset.x-k8s.io", "JobSet"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")]:
        assert key in GROUPERS and key in CONTROLLERS
    for key in [("grove.io", "PodCliqueSet"), ("grove.io", "PodGangSet")]:
        assert key in GROUPERS


# =============================================================================================== Ray
def test_raycluster_pod_group() -> None:
    pg = only_pod_group(prepared(workload("raycluster.yaml")))
    assert pg.meta.name == pg_name("raycluster-kuberay")
    assert pg.meta.namespace == NS
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, 3, "train", "")
    # gpu-group counts its minReplicas (1), cpu-group its replicas (1)
    assert pg.sub_groups == (SubGroup("headgroup", 1), SubGroup("gpu-group", 1), SubGroup("cpu-group", 1))
    (ref,) = pg.meta.owner_references
    assert (ref.kind, ref.name) == ("RayCluster", "raycluster-kuberay")


def test_raycluster_pods() -> None:
    out = prepared(workload("raycluster.yaml"))
    by_name = pods(out)
    assert len(by_name) == 4
    heads = [n for n in by_name if re.fullmatch(f"raycluster-kuberay-head-{SUFFIX}", n)]
    gpu = [n for n in by_name if re.fullmatch(f"raycluster-kuberay-gpu-group-worker-{SUFFIX}", n)]
    cpu = [n for n in by_name if re.fullmatch(f"raycluster-kuberay-cpu-group-worker-{SUFFIX}", n)]
    assert (len(heads), len(gpu), len(cpu)) == (1, 2, 1)
    head = by_name[heads[0]]
    assert head.meta.labels["ray.io/node-type"] == "head"
    assert head.meta.labels["ray.io/group"] == "headgroup"
    assert head.meta.labels["ray.io/cluster"] == "raycluster-kuberay"
    assert head.meta.labels["ray.io/is-ray-node"] == "yes"
    assert by_name[gpu[0]].meta.labels["ray.io/node-type"] == "worker"
    assert by_name[gpu[0]].meta.labels["ray.io/identifier"] == "raycluster-kuberay-worker"
    for p in by_name.values():
        assert owner(p) == ("RayCluster", "raycluster-kuberay")
        assert p.meta.annotations[PG_ANNOTATION] == pg_name("raycluster-kuberay")
        assert p.scheduler_name == "kai-scheduler"
    assert leaves(out) == {
        heads[0]: "headgroup", gpu[0]: "gpu-group", gpu[1]: "gpu-group", cpu[0]: "cpu-group"}


def test_raycluster_pods_get_what_kuberay_adds() -> None:
    """As KubeRay v1.5.0 (tests/operators/test_embedded.py compares with the real one): the metrics port, the
    head's ``ray.io/ft-enabled`` annotation, the workers' ``wait-gcs-ready`` init container."""
    doc = workload("raycluster.yaml")
    made = created_pods(doc)
    head = next(p for n, p in made.items() if "-head-" in n)
    workers = [p for n, p in made.items() if "-worker-" in n]
    assert head["metadata"]["annotations"] == {"ray.io/ft-enabled": "false"}
    assert "initContainers" not in head["spec"]
    assert {"name": "metrics", "containerPort": 8080} in head["spec"]["containers"][0]["ports"]
    for worker in workers:
        (init,) = worker["spec"]["initContainers"]
        assert (init["name"], init["image"]) == ("wait-gcs-ready", worker["spec"]["containers"][0]["image"])
        assert init["resources"]["requests"] == {"cpu": "200m", "memory": "256Mi"}
        assert worker["spec"]["containers"][0]["ports"][-1] == {"name": "metrics", "containerPort": 8080}
    doc["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    head = next(p for n, p in created_pods(doc).items() if "-head-" in n)
    assert head["metadata"]["annotations"] == {"ray.io/ft-enabled": "true"}


def test_raycluster_schedules_and_gangs() -> None:
    result = run(cluster(2), workload("raycluster.yaml"))
    assert len(binds(result)) == 4
    assert status(result, f"{NS}/{pg_name('raycluster-kuberay')}").status in ("Running", "Allocated")
    # one GPU: gpu-group's minReplicas (1) is met, its second worker waits (elastic above the minimum)
    elastic = run(node("n0", 1), queue(QUEUE), workload("raycluster.yaml"))
    assert len(binds(elastic)) == 3
    # no GPU: the gang (head + 1 gpu worker + 1 cpu worker) cannot start, so nothing runs
    small = run(node("n0", 0), queue(QUEUE), workload("raycluster.yaml"))
    assert binds(small) == {}
    assert status(small, f"{NS}/{pg_name('raycluster-kuberay')}").status == "Pending"


def test_raycluster_autoscaler_sidecar() -> None:
    doc = workload("raycluster.yaml")
    doc["spec"]["enableInTreeAutoscaling"] = True
    head = next(p for n, p in pods(prepared(doc)).items() if "-head-" in n)
    assert [c.name for c in head.containers] == ["ray-head", "autoscaler"]
    assert head.requests["cpu"] == pytest.approx(2500)  # millicores: 2 + 0.5


def test_rayjob_creates_its_cluster() -> None:
    out = prepared(workload("rayjob.yaml"))
    clusters = [w for w in out.workloads if w.kind == "RayCluster"]
    assert len(clusters) == 1
    rc = clusters[0]
    assert re.fullmatch(f"rayjob-sample-{SUFFIX}", rc.meta.name)  # KubeRay v1.5.0: <rayjob>-<5 characters>
    assert owner(rc) == ("RayJob", "rayjob-sample")
    assert rc.api_version == "ray.io/v1"
    assert rc.meta.labels["ray.io/originated-from-cr-name"] == "rayjob-sample"
    assert rc.meta.labels["ray.io/originated-from-crd"] == "RayJob"
    assert rc.meta.labels["kai.scheduler/queue"] == QUEUE
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("rayjob-sample")
    (ref,) = pg.meta.owner_references
    assert (ref.kind, ref.name) == ("RayJob", "rayjob-sample")
    assert (pg.queue, pg.min_member, pg.priority_class_name) == (QUEUE, 3, "train")
    assert pg.sub_groups == (SubGroup("headgroup", 1), SubGroup("small-group", 2))
    by_name = pods(out)
    assert len(by_name) == 3
    for p in by_name.values():
        assert owner(p) == ("RayCluster", rc.meta.name)
        assert p.meta.labels["ray.io/cluster"] == rc.meta.name
    assert sorted(leaves(out).values()) == ["headgroup", "small-group", "small-group"]


def test_rayjob_cluster_named_by_status() -> None:
    doc = workload("rayjob.yaml")
    doc["status"] = {"rayClusterName": "rayjob-sample-raycluster-x7k2p", "jobDeploymentStatus": "Initializing"}
    out = prepared(doc)
    (rc,) = [w for w in out.workloads if w.kind == "RayCluster"]
    assert rc.meta.name == "rayjob-sample-raycluster-x7k2p"
    assert all(n.startswith("rayjob-sample-raycluster-x7k2p-") for n in pods(out))
    assert only_pod_group(out).min_member == 3


def test_rayjob_snapshot_uses_the_cluster_its_status_names() -> None:
    """A RayJob with its RayCluster and pods (a cluster snapshot): nothing is created, and the PodGroup is
    sized from the RayCluster the status names, not from the RayJob's embedded spec."""
    job = workload("rayjob.yaml")
    job["metadata"]["uid"] = "job-uid"
    job["status"] = {"rayClusterName": "rayjob-sample-raycluster-abcde"}
    spec = copy.deepcopy(job["spec"]["rayClusterSpec"])
    spec["workerGroupSpecs"][0]["replicas"] = 3
    spec["workerGroupSpecs"][0]["minReplicas"] = 3
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
          "metadata": {"name": "rayjob-sample-raycluster-abcde", "namespace": NS, "uid": "rc-uid",
                       "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rayjob-sample",
                                            "uid": "job-uid", "controller": True}]},
          "spec": spec}
    head = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rayjob-sample-raycluster-abcde-head-q8x2z", "namespace": NS,
                         "labels": {"ray.io/group": "headgroup", "ray.io/node-type": "head"},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                              "name": "rayjob-sample-raycluster-abcde", "uid": "rc-uid",
                                              "controller": True}]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "ray-head", "image": "ray"}]}}
    out = prepared(job, rc, head)
    assert [p.meta.name for p in out.pods] == ["rayjob-sample-raycluster-abcde-head-q8x2z"]
    pg = only_pod_group(out)
    assert pg.meta.name == "pg-rayjob-sample-job-uid"
    assert pg.min_member == 4
    assert leaves(out) == {"rayjob-sample-raycluster-abcde-head-q8x2z": "headgroup"}


def test_rayjob_on_an_existing_cluster_or_suspended_creates_nothing() -> None:
    selector = workload("rayjob.yaml")
    del selector["spec"]["rayClusterSpec"]
    selector["spec"]["clusterSelector"] = {"ray.io/cluster": "shared-cluster"}
    suspended = workload("rayjob.yaml")
    suspended["spec"]["suspend"] = True
    for doc in (selector, suspended):
        objects, errors = controller_objects(doc)
        assert (objects, errors) == ([], [])


def test_suspended_ray_cluster_has_no_pods() -> None:
    doc = workload("raycluster.yaml")
    doc["spec"]["suspend"] = True
    assert prepared(doc).pods == []
    job = workload("rayjob.yaml")
    job["spec"]["rayClusterSpec"]["suspend"] = True
    out = prepared(job)
    assert out.pods == [] and [w.kind for w in out.workloads] == ["RayJob", "RayCluster"]


def test_rayjob_without_cluster_spec_is_an_error() -> None:
    doc = workload("rayjob.yaml")
    del doc["spec"]["rayClusterSpec"]
    out = prepared(doc)
    assert "spec.rayClusterSpec" in field_errors(out)
    assert out.pods == [] and out.pod_groups == []


def test_rayservice_is_inference_by_its_ray_priority_label() -> None:
    out = prepared(workload("rayservice.yaml"))
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("rayservice-sample")
    assert (pg.queue, pg.min_member, pg.priority_class_name) == (QUEUE, 2, "inference")
    assert pg.sub_groups == (SubGroup("headgroup", 1), SubGroup("small-group", 1))
    (rc,) = [w for w in out.workloads if w.kind == "RayCluster"]
    assert re.fullmatch(f"rayservice-sample-{SUFFIX}", rc.meta.name)
    assert owner(rc) == ("RayService", "rayservice-sample")
    assert rc.meta.labels["ray.io/originated-from-crd"] == "RayService"
    result = run(cluster(1), workload("rayservice.yaml"))
    assert len(binds(result)) == 2


def test_rayservice_active_cluster_name() -> None:
    doc = workload("rayservice.yaml")
    doc["status"] = {"activeServiceStatus": {"rayClusterName": "rayservice-sample-raycluster-m4n5p"}}
    out = prepared(doc)
    (rc,) = [w for w in out.workloads if w.kind == "RayCluster"]
    assert rc.meta.name == "rayservice-sample-raycluster-m4n5p"
    assert only_pod_group(out).min_member == 2


def test_ray_priority_label_must_name_an_existing_class() -> None:
    doc = workload("rayservice.yaml")
    doc["metadata"]["labels"]["ray.io/priority-class-name"] = "no-such-class"
    assert only_pod_group(prepared(doc)).priority_class_name == "train"
    doc["metadata"]["labels"]["ray.io/priority-class-name"] = "ray-serving"
    assert only_pod_group(prepared(doc, priority_class("ray-serving", 200))).priority_class_name == "ray-serving"
    # the Ray label wins over the generic priorityClassName label
    doc["metadata"]["labels"]["priorityClassName"] = "build"
    assert only_pod_group(prepared(doc, priority_class("ray-serving", 200))).priority_class_name == "ray-serving"


def test_ray_generic_priority_label_and_preemptibility() -> None:
    doc = workload("raycluster.yaml")
    doc["metadata"]["labels"]["priorityClassName"] = "no-such-class"
    assert only_pod_group(prepared(doc)).priority_class_name == "train"
    doc["metadata"]["labels"]["priorityClassName"] = "build"
    doc["metadata"]["labels"]["kai.scheduler/preemptibility"] = "preemptible"
    pg = only_pod_group(prepared(doc))
    assert (pg.priority_class_name, pg.preemptibility) == ("build", "preemptible")


def test_ray_v1alpha1() -> None:
    doc = workload("raycluster.yaml")
    doc["apiVersion"] = "ray.io/v1alpha1"
    out = prepared(doc)
    assert only_pod_group(out).min_member == 3
    assert len(out.pods) == 4


def test_ray_hosts_autoscaling_bounds_and_suspended_groups() -> None:
    doc = workload("raycluster.yaml")
    groups = doc["spec"]["workerGroupSpecs"]
    groups[0].update(replicas=2, minReplicas=1, numOfHosts=2)  # 4 pods, minMember 1 × 2
    groups[1].update(replicas=9, maxReplicas=2)  # clamped to 2 pods; minMember counts replicas (9)
    groups.append({"groupName": "paused", "replicas": 3, "suspend": True,
                   "template": copy.deepcopy(groups[1]["template"])})
    out = prepared(doc)
    pg = only_pod_group(out)
    assert pg.sub_groups == (SubGroup("headgroup", 1), SubGroup("gpu-group", 2), SubGroup("cpu-group", 9))
    assert pg.min_member == 12
    counts: dict[str, int] = {}
    for leaf in leaves(out).values():
        counts[leaf] = counts.get(leaf, 0) + 1
    assert counts == {"headgroup": 1, "gpu-group": 4, "cpu-group": 2}


def test_ray_replicas_below_min_is_a_grouping_error() -> None:
    """KubeRay runs minReplicas pods; KAI's grouper rejects replicas < minReplicas, naming the field."""
    doc = workload("raycluster.yaml")
    doc["spec"]["workerGroupSpecs"][0].update(replicas=1, minReplicas=3)
    out = prepared(doc)
    assert out.pod_groups == []
    errors = field_errors(out)
    assert "spec.workerGroupSpecs[0].replicas" in errors
    assert "minReplicas" in errors["spec.workerGroupSpecs[0].replicas"]


def test_ray_topology_from_templates() -> None:
    doc = workload("raycluster.yaml")
    doc["metadata"]["annotations"] = {"kai.scheduler/topology": "dc",
                                      "kai.scheduler/topology-preferred-placement": RACK}
    doc["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {"annotations": {
        "kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": RACK}}
    # a topology name alone is no constraint
    doc["spec"]["headGroupSpec"]["template"]["metadata"] = {"annotations": {"kai.scheduler/topology": "dc"}}
    pg = only_pod_group(prepared(doc))
    assert pg.topology_constraint == TopologyConstraint("dc", "", RACK)
    assert pg.sub_groups[0] == SubGroup("headgroup", 1)
    assert pg.sub_groups[1] == SubGroup("gpu-group", 1, None, TopologyConstraint("dc", RACK, ""))
    # a placement level without the topology name is an error
    del doc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]["kai.scheduler/topology"]
    out = prepared(doc)
    assert "spec.workerGroupSpecs[0].template.metadata.annotations" in field_errors(out)


def test_ray_negative_replicas_is_a_field_error() -> None:
    doc = workload("raycluster.yaml")
    doc["spec"]["workerGroupSpecs"][1]["replicas"] = -1
    out = prepared(doc)
    assert out.pods == [] and out.pod_groups == []
    errors = field_errors(out)
    assert "spec.workerGroupSpecs[1].replicas" in errors
    assert "-1" in errors["spec.workerGroupSpecs[1].replicas"]
    job = workload("rayjob.yaml")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["numOfHosts"] = 0
    out = prepared(job)
    assert "spec.rayClusterSpec.workerGroupSpecs[0].numOfHosts" in field_errors(out)
    assert [w.kind for w in out.workloads] == ["RayJob"]  # no RayCluster made either


def test_ray_unknown_queue() -> None:
    doc = workload("raycluster.yaml")
    doc["metadata"]["labels"]["kai.scheduler/queue"] = "no-such-queue"
    result = run(cluster(2), doc)
    pg = status(result, f"{NS}/{pg_name('raycluster-kuberay')}")
    assert (pg.queue, pg.status, pg.reason) == ("no-such-queue", "Pending", "QueueDoesNotExist")
    assert binds(result) == {}


# ============================================================================================ JobSet
JOBSET_LABELS = ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name",
                 "jobset.sigs.k8s.io/job-index")


def test_jobset_in_order_pod_groups() -> None:
    """No startupPolicy: KAI's pod-grouper reads InOrder, one PodGroup per replicated job."""
    out = prepared(workload("jobset.yaml"))
    groups = pod_groups(out)
    driver, workers = f"{pg_name('pytorch')}-driver", f"{pg_name('pytorch')}-workers"
    assert set(groups) == {driver, workers}
    for name, size in ((driver, 1), (workers, 4)):
        pg = groups[name]
        assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, size, "train", "")
        assert pg.sub_groups == ()
        (ref,) = pg.meta.owner_references
        assert (ref.kind, ref.name) == ("JobSet", "pytorch")
    by_pg: dict[str, list[str]] = {}
    for p in out.pods:
        by_pg.setdefault(p.meta.annotations[PG_ANNOTATION], []).append(p.meta.name)
    assert len(by_pg[driver]) == 1 and len(by_pg[workers]) == 4


def test_jobset_jobs_and_pods() -> None:
    out = prepared(workload("jobset.yaml"))
    jobs = {w.meta.name: w for w in out.workloads if w.kind == "Job"}
    assert set(jobs) == {"pytorch-driver-0", "pytorch-workers-0", "pytorch-workers-1"}
    for job in jobs.values():
        assert owner(job) == ("JobSet", "pytorch")
        assert job.spec["completionMode"] == "Indexed"
        assert job.meta.labels["jobset.sigs.k8s.io/jobset-name"] == "pytorch"
    assert jobs["pytorch-workers-1"].meta.labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert jobs["pytorch-workers-1"].meta.labels["jobset.sigs.k8s.io/job-global-index"] == "2"
    names = sorted(p.meta.name for p in out.pods)
    patterns = ["pytorch-driver-0-0", "pytorch-workers-0-0", "pytorch-workers-0-1", "pytorch-workers-1-0",
                "pytorch-workers-1-1"]
    assert [re.fullmatch(f"{pat}-{SUFFIX}", n) is not None for pat, n in zip(patterns, names, strict=True)] == \
        [True] * 5
    for p in out.pods:
        job = p.meta.name.rsplit("-", 2)[0]
        assert owner(p) == ("Job", job)
        labels = p.meta.labels
        assert [labels[k] for k in JOBSET_LABELS] == ["pytorch", job.split("-")[1], job.rsplit("-", 1)[1]]
        assert labels["batch.kubernetes.io/job-completion-index"] == p.meta.name.rsplit("-", 2)[1]
        assert labels["job-name"] == job
        assert SUBGROUP not in labels
    raw = created_pods(workload("jobset.yaml"))
    worker = next(o for n, o in raw.items() if n.startswith("pytorch-workers-1-1-"))
    assert worker["spec"]["hostname"] == "pytorch-workers-1-1"
    assert worker["spec"]["subdomain"] == "pytorch"
    assert worker["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"


def test_jobset_any_order_single_pod_group() -> None:
    out = prepared(workload("jobset-any-order.yaml"))
    pg = only_pod_group(out)
    assert pg.meta.name == pg_name("multislice")
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == \
        (QUEUE, 4, "train", "non-preemptible")
    assert len(out.pods) == 4
    assert {p.meta.annotations[PG_ANNOTATION] for p in out.pods} == {pg.meta.name}


def test_jobset_schedules_and_gangs() -> None:
    result = run(cluster(2), workload("jobset-any-order.yaml"))  # 4 pods × 4 GPUs on 2 × 8 GPUs
    assert len(binds(result)) == 4
    small = run(cluster(1), workload("jobset-any-order.yaml"))  # 8 GPUs for a 16-GPU gang
    assert binds(small) == {}
    assert status(small, f"{NS}/{pg_name('multislice')}").status == "Pending"
    # InOrder: each replicated job is its own gang; the workers' (8 GPUs) fits one node, the driver too
    result = run(cluster(1), workload("jobset.yaml"))
    assert len(binds(result)) == 5


def test_jobset_explicit_in_order_creates_replicated_jobs_one_after_another() -> None:
    doc = workload("jobset.yaml")
    doc["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    out = prepared(doc)
    assert {w.meta.name for w in out.workloads if w.kind == "Job"} == {"pytorch-driver-0"}
    assert set(pod_groups(out)) == {f"{pg_name('pytorch')}-driver"}
    doc["status"] = {"replicatedJobsStatus": [{"name": "driver", "ready": 1, "succeeded": 0, "failed": 0,
                                               "active": 1, "suspended": 0}]}
    out = prepared(doc)
    assert len([w for w in out.workloads if w.kind == "Job"]) == 3


def test_jobset_completions_cap_parallelism_and_suspend() -> None:
    doc = workload("jobset-any-order.yaml")
    doc["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=3, completions=2)
    out = prepared(doc)
    assert only_pod_group(out).min_member == 4
    assert len(out.pods) == 4
    doc["spec"]["suspend"] = True
    out = prepared(doc)
    assert out.pods == []
    assert all(w.spec.get("suspend") is True for w in out.workloads if w.kind == "Job")


def test_jobset_zero_parallelism_or_replicas_make_no_pods() -> None:
    doc = workload("jobset-any-order.yaml")
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 0
    assert prepared(doc).pods == []
    doc = workload("jobset.yaml")
    doc["spec"]["replicatedJobs"][1]["replicas"] = 0
    out = prepared(doc)
    assert [p.meta.annotations[PG_ANNOTATION] for p in out.pods] == [f"{pg_name('pytorch')}-driver"]


def test_jobset_negative_replicas_is_a_field_error() -> None:
    doc = workload("jobset.yaml")
    doc["spec"]["replicatedJobs"][1]["replicas"] = -2
    out = prepared(doc)
    assert out.pods == [] and out.pod_groups == []
    assert "spec.replicatedJobs[1].replicas" in field_errors(out)
    empty = workload("jobset.yaml")
    empty["spec"]["replicatedJobs"] = []
    assert "spec.replicatedJobs" in field_errors(prepared(empty))


def test_jobset_grouper_rejects_negative_replicas_in_a_snapshot() -> None:
    """Pods already there (a snapshot): the grouper itself names the bad field."""
    js = workload("jobset-any-order.yaml")
    js["metadata"]["uid"] = "js-uid"
    js["spec"]["replicatedJobs"][0]["replicas"] = -1
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "multislice-slice-0-0-abcde", "namespace": NS,
                      "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "slice"},
                      "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                           "name": "multislice", "uid": "js-uid", "controller": True}]},
         "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}}
    out = prepared(js, p)
    assert out.pod_groups == []
    assert any(e.field == "spec.replicatedJobs[0].replicas" and e.object == f"JobSet {NS}/multislice"
               for e in out.errors)


def test_jobset_priority_and_unknown_queue() -> None:
    doc = workload("jobset-any-order.yaml")
    doc["metadata"]["labels"]["priorityClassName"] = "no-such-class"
    assert only_pod_group(prepared(doc)).priority_class_name == "train"
    doc["metadata"]["labels"]["kai.scheduler/queue"] = "nowhere"
    result = run(cluster(2), doc)
    pg = status(result, f"{NS}/{pg_name('multislice')}")
    assert (pg.status, pg.reason) == ("Pending", "QueueDoesNotExist")


# =================================================================================== LeaderWorkerSet
LWS = "leaderworkerset.sigs.k8s.io/"


def test_lws_pod_group_per_replica_group() -> None:
    out = prepared(workload("leaderworkerset.yaml"))
    groups = pod_groups(out)
    assert set(groups) == {f"{pg_name('vllm')}-group-0", f"{pg_name('vllm')}-group-1"}
    for pg in groups.values():
        assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, 2, "train", "")
        assert pg.sub_groups == (SubGroup("leader", 1), SubGroup("workers", 1))
        (ref,) = pg.meta.owner_references
        assert (ref.kind, ref.name) == ("LeaderWorkerSet", "vllm")
    assert leaves(out) == {"vllm-0": "leader", "vllm-0-1": "workers", "vllm-1": "leader", "vllm-1-1": "workers"}
    assert {p.meta.name: p.meta.annotations[PG_ANNOTATION] for p in out.pods} == {
        "vllm-0": f"{pg_name('vllm')}-group-0", "vllm-0-1": f"{pg_name('vllm')}-group-0",
        "vllm-1": f"{pg_name('vllm')}-group-1", "vllm-1-1": f"{pg_name('vllm')}-group-1"}


def test_lws_pods_and_statefulsets() -> None:
    out = prepared(workload("leaderworkerset.yaml"))
    sets = {w.meta.name: w for w in out.workloads if w.kind == "StatefulSet"}
    assert set(sets) == {"vllm", "vllm-0", "vllm-1"}
    assert sets["vllm"].spec["replicas"] == 2
    assert sets["vllm-0"].spec["replicas"] == 1
    assert sets["vllm-0"].spec["ordinals"] == {"start": 1}
    by_name = pods(out)
    leader, worker = by_name["vllm-1"], by_name["vllm-1-1"]
    assert owner(leader) == ("StatefulSet", "vllm")
    assert owner(worker) == ("StatefulSet", "vllm-1")
    assert leader.meta.labels["role"] == "leader"  # the leader template
    for p, index in ((leader, "0"), (worker, "1")):
        assert p.meta.labels[LWS + "name"] == "vllm"
        assert p.meta.labels[LWS + "group-index"] == "1"
        assert p.meta.labels[LWS + "worker-index"] == index
        assert p.meta.annotations[LWS + "size"] == "2"
    assert leader.meta.labels[LWS + "group-key"] == worker.meta.labels[LWS + "group-key"]
    assert worker.meta.annotations[LWS + "leader-name"] == "vllm-1"
    assert leader.containers[0].name == "vllm-leader" and worker.containers[0].name == "vllm-worker"
    raw = created_pods(workload("leaderworkerset.yaml"))
    assert (raw["vllm-1-1"]["spec"]["hostname"], raw["vllm-1-1"]["spec"]["subdomain"]) == ("vllm-1-1", "vllm")


def test_lws_schedules_and_gangs() -> None:
    result = run(cluster(2), workload("leaderworkerset.yaml"))  # 4 pods × 4 GPUs
    assert len(binds(result)) == 4
    small = run(node("n0", 6), queue(QUEUE), workload("leaderworkerset.yaml"))  # one pod fits, no group does
    assert binds(small) == {}
    assert status(small, f"{NS}/{pg_name('vllm')}-group-0").status == "Pending"


def test_lws_segments() -> None:
    out = prepared(workload("leaderworkerset-segments.yaml"))
    pg = only_pod_group(out)
    assert pg.meta.name == f"{pg_name('sglang')}-group-0"
    rack = TopologyConstraint("gpu-topology", RACK, "")
    # size 5, sub-groups of 2: the leader is an extra member of the first segment
    assert pg.sub_groups == (SubGroup("segment-0", 3, None, rack), SubGroup("segment-1", 2, None, rack),
                             SubGroup("leader", 1, "segment-0"), SubGroup("workers", 2, "segment-0"))
    assert leaves(out) == {"sglang-0": "leader", "sglang-0-1": "workers", "sglang-0-2": "workers",
                           "sglang-0-3": "segment-1", "sglang-0-4": "segment-1"}
    labels = pods(out)["sglang-0-3"].meta.labels
    assert (labels[LWS + "subgroup-index"], pods(out)["sglang-0"].meta.labels[LWS + "subgroup-index"]) == ("1", "0")


def test_lws_segments_schedule_rack_by_rack() -> None:
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "gpu-topology"},
                "spec": {"levels": [{"nodeLabel": RACK}]}}
    nodes = [node("a1", 4, labels={RACK: "a"}), node("a2", 4, labels={RACK: "a"}),
             node("b1", 4, labels={RACK: "b"})]
    result = run(nodes, topology, queue(QUEUE), workload("leaderworkerset-segments.yaml"))
    placed = binds(result)
    assert len(placed) == 5
    rack_of = {"a1": "a", "a2": "a", "b1": "b"}
    first = {rack_of[placed[f"{NS}/{p}"]] for p in ("sglang-0", "sglang-0-1", "sglang-0-2")}
    second = {rack_of[placed[f"{NS}/{p}"]] for p in ("sglang-0-3", "sglang-0-4")}
    assert len(first) == 1 and len(second) == 1


def test_lws_leader_excluded_segments() -> None:
    doc = workload("leaderworkerset-segments.yaml")
    doc["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupPolicyType"] = "LeaderExcluded"
    out = prepared(doc)
    pg = only_pod_group(out)
    rack = TopologyConstraint("gpu-topology", RACK, "")
    assert pg.sub_groups == (SubGroup("leader", 1), SubGroup("segment-0", 2, None, rack),
                             SubGroup("segment-1", 2, None, rack))
    assert leaves(out) == {"sglang-0": "leader", "sglang-0-1": "segment-0", "sglang-0-2": "segment-0",
                           "sglang-0-3": "segment-1", "sglang-0-4": "segment-1"}
    assert LWS + "subgroup-index" not in pods(out)["sglang-0"].meta.labels
    # LeaderExcluded needs the workers to split evenly
    doc["spec"]["leaderWorkerTemplate"]["size"] = 4
    out = prepared(doc)
    assert out.pod_groups == []
    assert "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize" in field_errors(out)


def test_lws_single_segment_and_segment_size_annotation() -> None:
    doc = workload("leaderworkerset.yaml")
    doc["spec"]["replicas"] = 1
    doc["spec"]["leaderWorkerTemplate"]["size"] = 3
    doc["metadata"]["annotations"] = {"kai.scheduler/segment-size": "2"}
    pg = only_pod_group(prepared(doc))
    # one segment of the leader and its two workers
    assert pg.sub_groups == (SubGroup("segment-0", 3), SubGroup("leader", 1, "segment-0"),
                             SubGroup("workers", 2, "segment-0"))
    doc["metadata"]["annotations"] = {"kai.scheduler/segment-size": "1"}
    assert "metadata.annotations.kai.scheduler/segment-size" in field_errors(prepared(doc))


def test_lws_leader_ready_creates_leaders_first() -> None:
    doc = workload("leaderworkerset.yaml")
    doc["spec"]["startupPolicy"] = "LeaderReady"
    out = prepared(doc)
    assert sorted(p.meta.name for p in out.pods) == ["vllm-0", "vllm-1"]
    for pg in pod_groups(out).values():
        assert pg.min_member == 1
        assert pg.sub_groups == (SubGroup("leader", 1),)
    result = run(node("n0", 8), queue(QUEUE), doc)
    assert len(binds(result)) == 2


def test_lws_leader_ready_with_a_running_leader() -> None:
    """A snapshot: the leader runs, its worker is pending -> the group's gang is the whole size."""
    lws = workload("leaderworkerset.yaml")
    lws["metadata"]["uid"] = "lws-uid"
    lws["spec"]["replicas"] = 1
    lws["spec"]["startupPolicy"] = "LeaderReady"
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "vllm-0", "namespace": NS, "uid": "sts-uid",
                        "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                             "name": "vllm", "uid": "lws-uid", "controller": True}]},
           "spec": {"replicas": 1}}
    worker = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "vllm-0-1", "namespace": NS,
                           "labels": {LWS + "group-index": "0", LWS + "worker-index": "1", LWS + "name": "vllm"},
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-0",
                                                "uid": "sts-uid", "controller": True}]},
              "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "w", "image": "x"}]}}
    pg = only_pod_group(prepared(lws, sts, worker))
    assert pg.meta.name == "pg-vllm-lws-uid-group-0"
    assert pg.min_member == 2
    assert pg.sub_groups == (SubGroup("leader", 1), SubGroup("workers", 1))


def test_lws_size_one_is_leaders_only() -> None:
    doc = workload("leaderworkerset.yaml")
    doc["spec"]["leaderWorkerTemplate"]["size"] = 1
    out = prepared(doc)
    assert sorted(p.meta.name for p in out.pods) == ["vllm-0", "vllm-1"]
    for pg in pod_groups(out).values():
        assert (pg.min_member, pg.sub_groups) == (1, (SubGroup("leader", 1),))


def test_lws_bad_size_is_a_field_error() -> None:
    for size in (0, -3, "two"):
        doc = workload("leaderworkerset.yaml")
        doc["spec"]["leaderWorkerTemplate"]["size"] = size
        out = prepared(doc)
        assert out.pods == [] and out.pod_groups == []
        assert "spec.leaderWorkerTemplate.size" in field_errors(out)
    doc = workload("leaderworkerset.yaml")
    doc["spec"]["replicas"] = -1
    assert "spec.replicas" in field_errors(prepared(doc))


def test_lws_grouper_rejects_bad_size_in_a_snapshot() -> None:
    lws = workload("leaderworkerset.yaml")
    lws["metadata"]["uid"] = "lws-uid"
    lws["spec"]["leaderWorkerTemplate"]["size"] = 0
    leader = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "vllm-0", "namespace": NS,
                           "labels": {LWS + "group-index": "0", LWS + "worker-index": "0"},
                           "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                                "name": "vllm", "uid": "lws-uid", "controller": True}]},
              "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "l", "image": "x"}]}}
    out = prepared(lws, leader)
    assert out.pod_groups == []
    assert any(e.field == "spec.leaderWorkerTemplate.size" and e.object == f"LeaderWorkerSet {NS}/vllm"
               for e in out.errors)


def test_lws_priority_preemptibility_and_unknown_queue() -> None:
    doc = workload("leaderworkerset.yaml")
    doc["metadata"]["labels"].update({"priorityClassName": "inference", "kai.scheduler/preemptibility": "bogus"})
    pg = next(iter(pod_groups(prepared(doc)).values()))
    assert (pg.priority_class_name, pg.preemptibility) == ("inference", "")
    doc["metadata"]["labels"]["priorityClassName"] = "missing"
    assert next(iter(pod_groups(prepared(doc)).values())).priority_class_name == "train"
    doc["metadata"]["labels"]["kai.scheduler/queue"] = "nowhere"
    result = run(cluster(2), doc)
    pg_status = status(result, f"{NS}/{pg_name('vllm')}-group-0")
    assert (pg_status.status, pg_status.reason) == ("Pending", "QueueDoesNotExist")


# ============================================================================================= Grove
GANG = "pg-disagg-0-9b3e1f7a-7a6c-4c1e-8d5f-2e0b6f4a9c31"


def grove(**gang_spec: Any) -> list[Obj]:
    docs = fixture("grove-podcliqueset.yaml")
    gang = next(d for d in docs if d["kind"] == "PodGang")
    gang["spec"].update(gang_spec)
    return docs


def test_grove_pod_group_from_the_podgang() -> None:
    out = prepared(grove())
    assert not out.errors, out.errors
    pg = only_pod_group(out)
    assert pg.meta.name == GANG
    (ref,) = pg.meta.owner_references
    assert (ref.kind, ref.name) == ("PodGang", "disagg-0")
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == (QUEUE, 3, "train", "")
    assert pg.sub_groups == (SubGroup("disagg-0-router", 1), SubGroup("disagg-0-worker", 2))
    assert leaves(out) == {"disagg-0-router-7xqzk": "disagg-0-router", "disagg-0-worker-b4m2t": "disagg-0-worker",
                           "disagg-0-worker-q9d8n": "disagg-0-worker"}
    assert {p.meta.annotations[PG_ANNOTATION] for p in out.pods} == {GANG}


def test_grove_schedules_and_gangs() -> None:
    result = run(cluster(1), grove())
    assert len(binds(result)) == 3
    small = run(node("n0", 2), queue(QUEUE), grove())  # one worker's GPUs: the gang cannot start
    assert binds(small) == {}
    assert status(small, f"{NS}/{GANG}").status == "Pending"


def test_grove_priority_topology_and_parents() -> None:
    docs = grove(priorityClassName="inference",
                 topologyConstraint={"packConstraint": {"preferred": RACK}},
                 topologyConstraintGroupConfigs=[{"name": "serving", "podGroupNames": ["disagg-0-worker"],
                                                  "topologyConstraint": {"packConstraint": {"required": RACK}}}])
    gang = next(d for d in docs if d["kind"] == "PodGang")
    gang["metadata"]["annotations"] = {"grove.io/topology-name": "dc"}
    gang["spec"]["podgroups"][0]["topologyConstraint"] = {"packConstraint": {"required": "kubernetes.io/hostname"}}
    pg = only_pod_group(prepared(docs))
    assert pg.priority_class_name == "inference"
    assert pg.topology_constraint == TopologyConstraint("dc", "", RACK)
    assert pg.sub_groups == (
        SubGroup("serving", 0, None, TopologyConstraint("dc", RACK, "")),
        SubGroup("disagg-0-router", 1, None, TopologyConstraint("dc", "kubernetes.io/hostname", "")),
        SubGroup("disagg-0-worker", 2, "serving"),
    )
    # the priorityClassName label beats spec.priorityClassName; a class that does not exist counts for none
    gang["metadata"]["labels"]["priorityClassName"] = "build"
    assert only_pod_group(prepared(docs)).priority_class_name == "build"
    gang["metadata"]["labels"]["priorityClassName"] = "missing"
    gang["spec"]["priorityClassName"] = "also-missing"
    assert only_pod_group(prepared(docs)).priority_class_name == "train"


def test_grove_bad_input() -> None:
    docs = grove()
    for d in docs:
        if d["kind"] == "Pod" and d["metadata"]["name"] == "disagg-0-router-7xqzk":
            del d["metadata"]["labels"]["grove.io/podgang"]
    out = prepared(docs)
    assert any(e.field.endswith("metadata.labels.grove.io/podgang") and "not found" in e.message for e in out.errors)
    docs = grove()
    next(d for d in docs if d["kind"] == "PodGang")["spec"]["podgroups"][1]["minReplicas"] = 0
    out = prepared(docs)
    assert out.pod_groups == []
    assert "spec.podgroups[1].minReplicas" in field_errors(out)
    # a PodGang that is not in the input
    docs = [d for d in grove() if d["kind"] != "PodGang"]
    out = prepared(docs)
    assert out.pod_groups == []
    assert any("PodGang ml/disagg-0" in e.message for e in out.errors)


def test_grove_unknown_queue() -> None:
    docs = grove()
    for d in docs:
        if d["kind"] == "Pod":
            d["metadata"]["labels"]["kai.scheduler/queue"] = "nowhere"
    result = run(cluster(1), docs)
    pg = status(result, f"{NS}/{GANG}")
    assert (pg.queue, pg.status, pg.reason) == ("nowhere", "Pending", "QueueDoesNotExist")
