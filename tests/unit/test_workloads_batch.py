"""Batch and single-pod workloads (spec 10.3; issue 6): bare Pods (and Spark's), Jobs, CronJobs, Deployments,
ReplicaSets, StatefulSets, Argo Workflows, Knative Services, Tekton PipelineRuns and TaskRuns, KubeVirt
VirtualMachineInstances and VirtualMachines, Seldon SeldonDeployments.

Every fixture in ``tests/fixtures/workloads`` is a manifest as users write it; each test looks at the
PodGroup it yields (name, minMember, queue, priority, preemptibility, owner), the objects and pods the
embedded controller creates (names, labels, owners, requests), and a scheduling cycle.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from kaisched.cluster.schedule import prepare, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster
from kaisched.cluster.workloads import CONTROLLERS
from kaisched.cluster.workloads import batch as ctl
from kaisched.cluster.workloads.base import Emit
from kaisched.framework.config import SchedulerConfig
from kaisched.k8s.constants import WORKLOAD_KINDS
from kaisched.k8s.objects import ParsedObjects, Pod, PodGroup, Workload
from kaisched.k8s.parse import parse_objects
from kaisched.podgrouper import batch as grp
from kaisched.podgrouper.base import GroupContext, GroupRequest, Owner, PodGroupPlan
from kaisched.podgrouper.registry import GROUPERS

from .builders import NOW, binds, node, priority_class, queue, status
from .workload_helpers import PG_ANNOTATION, fixture, flat, prepared, run, workload

Obj = dict[str, Any]
NS = "ml"
QUEUE = "team-a"
QUEUE_LABEL = "kai.scheduler/queue"
PRIORITY_LABEL = "priorityClassName"
A10 = "nvidia.com/GA102GL_A10"


# ------------------------------------------------------------------------------------------- helpers










def cluster(gpus: int = 8, n: int = 2, *, extra: dict[str, object] | None = None) -> list[Obj]:
    return [queue(QUEUE), *(node(f"n{i}", gpus, extra=extra) for i in range(1, n + 1))]


def pods(out: ParsedObjects) -> dict[str, Pod]:
    return {p.meta.name: p for p in out.pods}


def groups(out: ParsedObjects) -> dict[str, PodGroup]:
    return {pg.meta.name: pg for pg in out.pod_groups}


def only_pod_group(out: ParsedObjects) -> PodGroup:
    assert len(out.pod_groups) == 1, [pg.meta.name for pg in out.pod_groups]
    return out.pod_groups[0]


def objects(out: ParsedObjects, kind: str) -> dict[str, Workload]:
    return {w.meta.name: w for w in out.workloads if w.kind == kind}


def errors(out: ParsedObjects | Any) -> list[str]:
    return [str(e) for e in out.errors]


def owner(obj: Pod | Workload | PodGroup) -> tuple[str, str]:
    (ref,) = obj.meta.owner_references
    assert ref.controller
    return ref.kind, ref.name


def default_pg(name: str, ns: str = NS) -> str:
    """The default PodGroup name of a workload given without a uid (the parser's uid is ``<ns>/<name>``)."""
    return f"pg-{name}-{ns}-{name}"


def per_pod_pg(p: Pod, uid: str | None = None) -> str:
    return f"pg-{p.meta.name}-{uid or p.meta.uid}"


def summary(pg: PodGroup) -> tuple[str, int, str, str, tuple[Any, ...]]:
    return pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility, pg.sub_groups


def controller_output(doc: Obj) -> tuple[list[Obj], list[str]]:
    """What the kind's embedded controller creates for one manifest (dicts), and its errors."""
    parsed = parse_objects([doc])
    assert not parsed.errors, parsed.errors
    (w,) = parsed.workloads
    emit = Emit(w)
    CONTROLLERS[(w.group, w.kind)](w, emit)
    return emit.objects, [str(e) for e in emit.errors]


def requests_of(p: Pod) -> dict[str, float]:
    return p.requests


GIB = float(1 << 30)
MIB = float(1 << 20)


# ------------------------------------------------------------------------------------------- registry
def test_every_kind_of_the_family_has_its_controller_grouper_and_workload_kind() -> None:
    for group, kind in [("batch", "Job"), ("batch", "CronJob"), ("apps", "Deployment"), ("apps", "ReplicaSet"),
                        ("apps", "StatefulSet"), ("argoproj.io", "Workflow"), ("serving.knative.dev", "Service"),
                        ("tekton.dev", "TaskRun"), ("tekton.dev", "PipelineRun"),
                        ("kubevirt.io", "VirtualMachineInstance"), ("kubevirt.io", "VirtualMachine"),
                        ("machinelearning.seldon.io", "SeldonDeployment")]:
        assert (group, kind) in CONTROLLERS
        assert any(v.startswith(f"{group}/") for v in WORKLOAD_KINDS[kind]), kind
    for key in [("", "Pod"), ("batch", "Job"), ("batch", "CronJob"), ("apps", "Deployment"),
                ("serving.knative.dev", "Service")]:
        assert key in GROUPERS
    # default grouper for these (spec 10.3)
    for key in [("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("tekton.dev", "PipelineRun"),
                ("tekton.dev", "TaskRun"), ("kubevirt.io", "VirtualMachineInstance"),
                ("machinelearning.seldon.io", "SeldonDeployment")]:
        assert key not in GROUPERS


# ------------------------------------------------------------------------------------------- bare Pod
def test_bare_pod_gets_the_default_podgroup() -> None:
    out = prepared(workload("pod.yaml"))
    assert not errors(out)
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("gpu-pod")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert owner(pg) == ("Pod", "gpu-pod")
    assert pods(out)["gpu-pod"].meta.annotations[PG_ANNOTATION] == pg.meta.name


def test_bare_pod_binds() -> None:
    result = run(cluster(), workload("pod.yaml"))
    assert set(binds(result)) == {f"{NS}/gpu-pod"}
    assert status(result, f"{NS}/{default_pg('gpu-pod')}").queue == QUEUE


def test_spark_driver_and_executors_share_the_podgroup_named_by_their_app_selector() -> None:
    out = prepared(fixture("spark-pods.yaml"))
    assert not errors(out)
    selector = "spark-9f2c4e6a1b7d4c3e8a5f0b1d2c3e4f5a"
    pg = only_pod_group(out)
    assert pg.meta.name == selector
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert {n: p.meta.annotations[PG_ANNOTATION] for n, p in pods(out).items()} == {
        "spark-pi-driver": selector, "spark-pi-3c1a2b8f0e-exec-1": selector, "spark-pi-3c1a2b8f0e-exec-2": selector}


def test_spark_pods_are_scheduled_together_in_one_group() -> None:
    result = run(cluster(), fixture("spark-pods.yaml"))
    assert len(binds(result)) == 3
    assert status(result, f"{NS}/spark-9f2c4e6a1b7d4c3e8a5f0b1d2c3e4f5a").status == "Allocated"


def test_a_pod_with_only_one_spark_label_is_not_a_spark_pod() -> None:
    doc = fixture("spark-pods.yaml")[0]
    del doc["metadata"]["labels"]["spark-app-name"]
    pg = only_pod_group(prepared(doc))
    assert pg.meta.name == "pg-spark-pi-driver-6d1b5a0e-4c4b-4d7e-9a43-1f0c5e6b2a11"


def test_spark_pod_with_an_empty_selector_is_reported() -> None:
    doc = fixture("spark-pods.yaml")[0]
    doc["metadata"]["labels"]["spark-app-selector"] = ""
    out = prepared(doc)
    assert out.pod_groups == []
    assert any("spark-app-selector" in e for e in errors(out))


# ------------------------------------------------------------------------------------------- Job
def test_job_pods_each_get_their_own_podgroup_named_after_pod_and_job() -> None:
    out = prepared(workload("job.yaml"))
    assert not errors(out)
    by_name = pods(out)
    assert len(by_name) == 2
    for name, p in by_name.items():
        assert name.startswith("batch-job-") and len(name) == len("batch-job-") + 5
        assert owner(p) == ("Job", "batch-job")
        assert p.meta.labels["batch.kubernetes.io/job-name"] == "batch-job"
        assert p.meta.labels["job-name"] == "batch-job"
        assert p.meta.labels["batch.kubernetes.io/controller-uid"] == f"{NS}/batch-job"
        assert p.meta.labels["controller-uid"] == f"{NS}/batch-job"
        assert p.scheduler_name == "kai-scheduler"
        assert requests_of(p)["nvidia.com/gpu"] == 1
        assert p.meta.annotations[PG_ANNOTATION] == f"pg-{name}-{NS}-batch-job"
    assert set(groups(out)) == {f"pg-{n}-{NS}-batch-job" for n in by_name}
    for pg in out.pod_groups:
        assert summary(pg) == (QUEUE, 1, "train", "", ())
        assert owner(pg) == ("Job", "batch-job")


def test_job_pods_are_scheduled_one_by_one() -> None:
    result = run(cluster(), workload("job.yaml"))
    assert len(binds(result)) == 2
    small = run(cluster(gpus=1, n=1), workload("job.yaml"))
    assert len(binds(small)) == 1  # batch scheduling: each pod is its own group of one


def test_indexed_job_pods_carry_their_index() -> None:
    out = prepared(workload("job-indexed.yaml"))
    assert not errors(out)
    by_index = {p.meta.labels["batch.kubernetes.io/job-completion-index"]: p for p in out.pods}
    assert sorted(by_index) == ["0", "1", "2"]  # parallelism 3 of 4 completions
    for index, p in by_index.items():
        assert p.meta.name.startswith(f"shard-eval-{index}-")
        assert p.meta.annotations["batch.kubernetes.io/job-completion-index"] == index
        assert p.meta.labels["app"] == "shard-eval"
    assert len(out.pod_groups) == 3


def test_indexed_job_hostname_is_job_and_index() -> None:
    objs, errs = controller_output(workload("job-indexed.yaml"))
    assert not errs
    assert [o["spec"]["hostname"] for o in objs] == ["shard-eval-0", "shard-eval-1", "shard-eval-2"]


@pytest.mark.parametrize(("spec", "status", "expected"), [
    ({"parallelism": 5, "completions": 2}, {}, 2),
    ({"parallelism": 5, "completions": 3}, {"succeeded": 2}, 1),
    ({}, {}, 1),
    ({"parallelism": 0}, {}, 0),
    ({"parallelism": 2, "suspend": True}, {}, 0),
    ({"parallelism": 2}, {"conditions": [{"type": "Complete", "status": "True"}]}, 0),
])
def test_job_pod_count(spec: Obj, status: Obj, expected: int) -> None:
    job = workload("job.yaml")
    job["spec"] = {**{k: v for k, v in job["spec"].items() if k not in ("parallelism", "completions")}, **spec}
    job["status"] = status
    objs, errs = controller_output(job)
    assert not errs
    assert len(objs) == expected


def test_indexed_job_skips_completed_indexes() -> None:
    job = workload("job-indexed.yaml")
    job["status"] = {"completedIndexes": "0,2"}
    objs, _ = controller_output(job)
    assert [o["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for o in objs] == ["1", "3"]


def test_job_with_manual_selector_gets_no_controller_labels() -> None:
    job = workload("job.yaml")
    job["spec"]["manualSelector"] = True
    objs, _ = controller_output(job)
    assert "job-name" not in objs[0].get("metadata", {}).get("labels", {})


@pytest.mark.parametrize(("change", "field"), [
    ({"parallelism": -1}, "spec.parallelism"),
    ({"completions": -2}, "spec.completions"),
    ({"parallelism": "two"}, "spec.parallelism"),
    ({"completionMode": "Indexed", "completions": None}, "spec.completions"),
    ({"template": None}, "spec.template"),
])
def test_bad_job_is_reported_and_creates_no_pods(change: Obj, field: str) -> None:
    job = workload("job.yaml")
    for k, v in change.items():
        if v is None:
            job["spec"].pop(k, None)
        else:
            job["spec"][k] = v
    out = prepared(job)
    assert out.pods == []
    assert any(e.startswith(f"Job {NS}/batch-job: {field}:") for e in errors(out)), errors(out)


# ------------------------------------------------------------------------------------------- CronJob
def test_cronjob_creates_the_job_of_one_schedule_and_groups_by_that_job() -> None:
    out = prepared(workload("cronjob.yaml"))
    assert not errors(out)
    (job,) = objects(out, "Job").values()
    assert owner(job) == ("CronJob", "nightly-eval")
    scheduled = datetime.fromisoformat(job.meta.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"])
    assert (scheduled.hour, scheduled.minute) == (2, 30)
    assert job.meta.name == f"nightly-eval-{int(scheduled.timestamp()) // 60}"
    assert job.meta.labels == {QUEUE_LABEL: QUEUE}  # the jobTemplate's labels
    (p,) = out.pods
    assert owner(p) == ("Job", job.meta.name)
    assert p.meta.labels["job-name"] == job.meta.name
    assert requests_of(p)["nvidia.com/gpu"] == 2
    pg = only_pod_group(out)
    assert pg.meta.name == f"pg-{job.meta.name}-{job.meta.uid}"
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert owner(pg) == ("Job", job.meta.name)
    assert run(cluster(), workload("cronjob.yaml")).binds


def test_cronjob_queue_comes_from_the_job_not_from_the_cronjob() -> None:
    cj = workload("cronjob.yaml")
    del cj["spec"]["jobTemplate"]["metadata"]
    pg = only_pod_group(prepared(cj))
    assert pg.queue == "default-queue"  # KAI groups by the Job: the CronJob's own labels are not copied to it


def test_cronjob_pod_without_a_job_owner_is_reported() -> None:
    cj = workload("cronjob.yaml")
    cj["metadata"]["uid"] = "cj-uid"
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "stray", "namespace": NS, "ownerReferences": [
             {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly-eval", "uid": "cj-uid",
              "controller": True}]},
         "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}
    out = prepared(cj, p)
    assert out.pod_groups == []
    assert any("no owner reference of type 'Job'" in e for e in errors(out))


def test_suspended_cronjob_creates_nothing() -> None:
    cj = workload("cronjob.yaml")
    cj["spec"]["suspend"] = True
    objs, errs = controller_output(cj)
    assert (objs, errs) == ([], [])


@pytest.mark.parametrize(("change", "field"), [
    ({"schedule": "61 * * * *"}, "spec.schedule"),
    ({"schedule": "* * *"}, "spec.schedule"),
    ({"schedule": "0 0 30 2 *"}, "spec.schedule"),  # never fires
    ({"schedule": None}, "spec.schedule"),
    ({"timeZone": "Mars/Olympus_Mons"}, "spec.timeZone"),
    ({"jobTemplate": None}, "spec.jobTemplate.spec"),
])
def test_bad_cronjob_is_reported(change: Obj, field: str) -> None:
    cj = workload("cronjob.yaml")
    for k, v in change.items():
        if v is None:
            del cj["spec"][k]
        else:
            cj["spec"][k] = v
    _, errs = controller_output(cj)
    assert any(e.startswith(f"CronJob {NS}/nightly-eval: {field}:") for e in errs), errs


def test_cronjob_job_pods_are_validated_like_a_job() -> None:
    cj = workload("cronjob.yaml")
    cj["spec"]["jobTemplate"]["spec"]["parallelism"] = -3
    out = prepared(cj)
    assert out.pods == []
    assert any("spec.jobTemplate.spec.parallelism" in e for e in errors(out))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("schedule", "now", "expected"), [
    ("30 2 * * *", "2025-01-01T12:00:00", "2025-01-01T02:30:00"),
    ("30 2 * * *", "2025-01-01T02:30:00", "2025-01-01T02:30:00"),
    ("30 2 * * *", "2025-01-01T02:29:59", "2024-12-31T02:30:00"),
    ("*/15 * * * *", "2025-01-01T12:07:00", "2025-01-01T12:00:00"),
    ("@hourly", "2025-01-01T12:59:00", "2025-01-01T12:00:00"),
    ("0 9 * * MON-FRI", "2025-01-05T12:00:00", "2025-01-03T09:00:00"),  # a Sunday: last Friday
    ("0 0 1,15 * *", "2025-01-10T00:00:00", "2025-01-01T00:00:00"),
    ("0 0 13 * 5", "2025-01-11T00:00:00", "2025-01-10T00:00:00"),  # day-of-month OR day-of-week
    ("0 0 29 2 *", "2025-01-01T00:00:00", "2024-02-29T00:00:00"),
    ("0 12 * JAN,feb *", "2025-03-10T00:00:00", "2025-02-28T12:00:00"),
    ("5-10/5 3 * * *", "2025-01-01T04:00:00", "2025-01-01T03:10:00"),
])
def test_cron_schedule_latest_time(schedule: str, now: str, expected: str) -> None:
    assert ctl.Cron.parse(schedule).last_at_or_before(at(now)) == at(expected)


def test_cron_schedule_in_a_time_zone() -> None:
    cron = ctl.Cron.parse("0 9 * * *", "Europe/Berlin")
    assert cron.last_at_or_before(at("2025-01-01T12:00:00")) == at("2025-01-01T08:00:00")
    assert ctl.Cron.parse("CRON_TZ=Asia/Tokyo 0 9 * * *").next_after(at("2025-01-01T00:00:00")) == \
        at("2025-01-02T00:00:00")


def test_cron_schedule_time_used_for_the_job() -> None:
    cj = parse_objects([workload("cronjob.yaml")]).workloads[0]
    cron = ctl.Cron.parse("30 2 * * *")
    # with the cycle's clock: the latest schedule up to now ...
    assert ctl.scheduled_time(cron, cj, NOW) == at("2025-01-01T02:30:00")
    # ... unless the CronJob was created after it: its first schedule
    created = parse_objects([{**workload("cronjob.yaml"), "metadata": {
        **workload("cronjob.yaml")["metadata"], "creationTimestamp": "2025-01-01T05:00:00Z"}}]).workloads[0]
    assert ctl.scheduled_time(cron, created, NOW) == at("2025-01-02T02:30:00")
    # without a clock: the last schedule time, else the first after the creation
    assert ctl.scheduled_time(cron, created, None) == at("2025-01-02T02:30:00")
    last = parse_objects([{**workload("cronjob.yaml"), "status": {
        "lastScheduleTime": "2024-12-24T02:30:00Z"}}]).workloads[0]
    assert ctl.scheduled_time(cron, last, None) == at("2024-12-24T02:30:00")


# ------------------------------------------------------------------------------------------- Deployment
def test_deployment_replicaset_and_pods_with_one_podgroup_per_pod() -> None:
    out = prepared(workload("deployment.yaml"))
    assert not errors(out)
    (rs,) = objects(out, "ReplicaSet").values()
    assert owner(rs) == ("Deployment", "llm-server")
    h = rs.meta.labels["pod-template-hash"]
    assert rs.meta.name == f"llm-server-{h}" and len(h) == 10
    assert len(out.pods) == 2
    for p in out.pods:
        assert p.meta.name.startswith(f"llm-server-{h}-")
        assert owner(p) == ("ReplicaSet", rs.meta.name)
        assert p.meta.labels == {"app": "llm-server", "pod-template-hash": h}
        pg = groups(out)[per_pod_pg(p)]
        assert p.meta.annotations[PG_ANNOTATION] == pg.meta.name
        assert summary(pg) == (QUEUE, 1, "inference", "", ())
        assert owner(pg) == ("Pod", p.meta.name)


def test_deployment_replicas_bind_and_the_rest_wait_on_a_small_cluster() -> None:
    result = run(cluster(), workload("deployment.yaml"))
    assert len(binds(result)) == 2
    small = run(cluster(gpus=1, n=1), workload("deployment.yaml"))
    assert len(binds(small)) == 1


def test_deployment_with_zero_replicas_has_a_replicaset_and_no_pods() -> None:
    d = workload("deployment.yaml")
    d["spec"]["replicas"] = 0
    out = prepared(d)
    assert (len(objects(out, "ReplicaSet")), out.pods, errors(out)) == (1, [], [])


@pytest.mark.parametrize(("value", "message"), [(-1, "must be >= 0, got -1"),
                                                ("2", "must be a non-negative integer, got '2'")])
def test_deployment_with_bad_replicas_is_reported(value: object, message: str) -> None:
    d = workload("deployment.yaml")
    d["spec"]["replicas"] = value
    out = prepared(d)
    assert out.pods == []
    assert f"Deployment {NS}/llm-server: spec.replicas: {message}" in errors(out)


def test_deployment_without_a_template_is_reported() -> None:
    d = workload("deployment.yaml")
    del d["spec"]["template"]
    assert any("spec.template" in e for e in errors(prepared(d)))


# ------------------------------------------------------------------------------- ReplicaSet, StatefulSet
def test_replicaset_pods_in_one_default_podgroup() -> None:
    out = prepared(workload("replicaset.yaml"))
    assert not errors(out)
    assert len(out.pods) == 2
    assert all(owner(p) == ("ReplicaSet", "notebook-workers") and p.meta.name.startswith("notebook-workers-")
               for p in out.pods)
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("notebook-workers")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert len(binds(run(cluster(), workload("replicaset.yaml")))) == 2


def test_statefulset_pods_by_ordinal_in_one_default_podgroup() -> None:
    out = prepared(workload("statefulset.yaml"))
    assert not errors(out)
    assert sorted(pods(out)) == ["embedder-0", "embedder-1", "embedder-2"]
    for i in range(3):
        p = pods(out)[f"embedder-{i}"]
        assert owner(p) == ("StatefulSet", "embedder")
        assert p.meta.labels["statefulset.kubernetes.io/pod-name"] == f"embedder-{i}"
        assert p.meta.labels["apps.kubernetes.io/pod-index"] == str(i)
        assert p.meta.labels["controller-revision-hash"].startswith("embedder-")
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("embedder")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    objs, _ = controller_output(workload("statefulset.yaml"))
    assert [(o["spec"]["hostname"], o["spec"]["subdomain"]) for o in objs] == [
        (f"embedder-{i}", "embedder") for i in range(3)]
    assert len(binds(run(cluster(), workload("statefulset.yaml")))) == 3


def test_statefulset_ordinals_start() -> None:
    sts = workload("statefulset.yaml")
    sts["spec"]["ordinals"] = {"start": 5}
    sts["spec"]["replicas"] = 2
    assert sorted(pods(prepared(sts))) == ["embedder-5", "embedder-6"]


@pytest.mark.parametrize(("kind_file", "field"), [("statefulset.yaml", "spec.replicas"),
                                                  ("replicaset.yaml", "spec.replicas")])
def test_negative_replicas_are_reported(kind_file: str, field: str) -> None:
    doc = workload(kind_file)
    doc["spec"]["replicas"] = -3
    out = prepared(doc)
    assert out.pods == []
    assert any(f": {field}: must be >= 0, got -3" in e for e in errors(out))


# ------------------------------------------------------------------------------------------- Argo
def test_argo_pod_names_follow_argo() -> None:
    assert ctl.fnv32a("hello") == 1335831723  # Argo's createFNVHash test vector
    assert ctl.argo_pod_name("wf", "wf", "main") == "wf"
    assert ctl.argo_pod_name("wf", "wf[0].a", "echo") == f"wf-echo-{ctl.fnv32a('wf[0].a')}"


class Embedded:
    """The embedded cluster run cycle by cycle, as ``kaisched run`` does: every cycle runs the controllers on the
    store's objects (an Argo Workflow creates the pods that are due), keeps what they created, schedules and
    applies the result."""

    def __init__(self, *objs: Obj | list[Obj]) -> None:
        self.config = SchedulerConfig.from_mapping(None)
        parsed = parse_objects(flat(objs))
        assert not parsed.errors, parsed.errors
        self.store = EmbeddedCluster(prepare(parsed, self.config, NOW))

    def cycle(self) -> set[str]:
        """One cycle; the names of the pods it bound."""
        prepared = prepare(self.store.parsed(), self.config, NOW)
        assert not prepared.errors, errors(prepared)
        self.store.add(prepared)
        result = run_prepared_cycle(prepared, self.config, NOW)
        self.store.apply(result, NOW)
        return {b.pod.split("/", 1)[1] for b in result.binds}

    def finish(self, *names: str, phase: str = "Succeeded") -> None:
        for name in names:
            self.store.finish(f"{NS}/{name}", phase)

    def pods(self) -> set[str]:
        return {p.meta.name for p in self.store.pods.values()}


def argo_pod(workflow: str, template: str, node_name: str) -> str:
    return f"{workflow}-{template}-{ctl.fnv32a(node_name)}"


def test_argo_steps_workflow_makes_one_pod_per_step_each_its_own_podgroup() -> None:
    """Argo runs step groups in order: a group's pods are created once every step of the group before it
    succeeded; the steps of a group (a withItems fan-out) together."""
    run_ = Embedded(cluster(), workload("argo-workflow.yaml"))
    prep = argo_pod("fine-tune", "prepare-data", "fine-tune[0].prepare")
    trains = {argo_pod("fine-tune", "train", f"fine-tune[1].train({i}:lr-{lr})")
              for i, lr in ((0, "1e-4"), (1, "3e-4"))}
    evaluate = argo_pod("fine-tune", "evaluate", "fine-tune[2].evaluate")
    assert run_.pods() == {prep}
    assert run_.cycle() == {prep}
    assert run_.cycle() == set() and run_.pods() == {prep}  # nothing more while it runs
    run_.finish(prep)
    assert run_.cycle() == trains
    run_.finish(min(trains))
    assert run_.cycle() == set() and evaluate not in run_.pods()  # the other train step still runs
    run_.finish(max(trains))
    assert run_.cycle() == {evaluate}
    out = run_.store.parsed()
    nodes = {"fine-tune[0].prepare": "prepare-data", "fine-tune[1].train(0:lr-1e-4)": "train",
             "fine-tune[1].train(1:lr-3e-4)": "train", "fine-tune[2].evaluate": "evaluate"}
    expected = {argo_pod("fine-tune", t, n): n for n, t in nodes.items()}
    assert {p.meta.name: p.meta.annotations["workflows.argoproj.io/node-name"] for p in out.pods} == expected
    for p in out.pods:
        assert owner(p) == ("Workflow", "fine-tune")
        assert p.meta.labels["workflows.argoproj.io/workflow"] == "fine-tune"
        assert p.scheduler_name == "kai-scheduler"
        assert [c.name for c in p.containers] == ["main", "wait"]
        pg = groups(out)[per_pod_pg(p)]
        assert summary(pg) == (QUEUE, 1, "train", "", ())
        assert owner(pg) == ("Pod", p.meta.name)
        assert pg.meta.labels[QUEUE_LABEL] == QUEUE  # the Workflow's labels are propagated
    gpus = sorted(requests_of(p).get("nvidia.com/gpu", 0) for p in out.pods)
    assert gpus == [0, 1, 2, 2]


def test_argo_failed_step_stops_the_steps_after_it_unless_it_may_fail() -> None:
    wf = workload("argo-workflow.yaml")
    prep = argo_pod("fine-tune", "prepare-data", "fine-tune[0].prepare")
    run_ = Embedded(cluster(), copy.deepcopy(wf))
    run_.cycle()
    run_.finish(prep, phase="Failed")
    assert run_.cycle() == set() and run_.pods() == {prep}
    wf["spec"]["templates"][0]["steps"][0][0]["continueOn"] = {"failed": True}
    run_ = Embedded(cluster(), wf)
    run_.cycle()
    run_.finish(prep, phase="Failed")
    assert len(run_.cycle()) == 2  # the train steps


def test_argo_dag_task_pods_are_created_once_the_tasks_they_depend_on_finished() -> None:
    """Argo's DAG: a task's pod is created once every task of its ``dependencies`` succeeded (the diamond:
    A, then B and C together, then D once both finished)."""
    name = {t: argo_pod("dag-diamond", "echo", f"dag-diamond.{t}") for t in "ABCD"}
    assert {p.meta.name for p in prepared(workload("argo-workflow-dag.yaml")).pods} == {name["A"]}
    run_ = Embedded(cluster(), workload("argo-workflow-dag.yaml"))
    assert run_.cycle() == {name["A"]}
    assert run_.cycle() == set()  # B and C wait for A, which runs
    run_.finish(name["A"])
    assert run_.cycle() == {name["B"], name["C"]}
    run_.finish(name["B"])
    assert run_.cycle() == set() and name["D"] not in run_.pods()  # D waits for C too
    run_.finish(name["C"])
    assert run_.cycle() == {name["D"]}
    assert run_.pods() == set(name.values())


def test_argo_pods_named_otherwise_are_recognised_by_their_workflow_node() -> None:
    """A snapshot of a running workflow whose pods carry other names (Argo's POD_NAMES=v1): each is known by its
    node-name annotation, so its step is not created twice, and the steps after it follow."""
    done = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "fine-tune-3177859793", "namespace": NS,
                         "annotations": {"workflows.argoproj.io/node-name": "fine-tune[0].prepare"},
                         "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                              "name": "fine-tune", "uid": "wf-uid", "controller": True}]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "python:3.12"}]},
            "status": {"phase": "Succeeded"}}
    out = prepared(workload("argo-workflow.yaml"), done)
    assert not errors(out)
    assert sorted(p.meta.name for p in out.pods) == sorted(
        ["fine-tune-3177859793", *(argo_pod("fine-tune", "train", f"fine-tune[1].train({i}:lr-{lr})")
                                   for i, lr in ((0, "1e-4"), (1, "3e-4")))])


def dag(*tasks: Obj) -> Obj:
    wf = workload("argo-workflow-dag.yaml")
    wf["spec"]["templates"][0]["dag"]["tasks"] = [{"template": "echo", **t} for t in tasks]
    return wf


def test_argo_dag_depends_expressions_and_failed_dependencies() -> None:
    """``depends``: ``A.Failed`` runs only after A failed; a bare name (or ``dependencies``) needs it to have
    succeeded, else the task is omitted, and so are the tasks after it."""
    wf = dag({"name": "A"}, {"name": "on-failure", "depends": "A.Failed"}, {"name": "next", "depends": "A"},
             {"name": "after", "dependencies": ["next"]}, {"name": "either", "depends": "(A.Succeeded || on-failure)"})
    name = {t: argo_pod("dag-diamond", "echo", f"dag-diamond.{t}") for t in ("A", "on-failure", "next", "after",
                                                                          "either")}
    run_ = Embedded(cluster(), copy.deepcopy(wf))
    assert run_.cycle() == {name["A"]}
    run_.finish(name["A"], phase="Failed")
    assert run_.cycle() == {name["on-failure"]}
    run_.finish(name["on-failure"])
    assert run_.cycle() == {name["either"]}
    run_ = Embedded(cluster(), wf)
    run_.cycle()
    run_.finish(name["A"])
    assert run_.cycle() == {name["next"], name["either"]}  # on-failure is omitted
    run_.finish(name["next"])
    assert run_.cycle() == {name["after"]}


@pytest.mark.parametrize(("tasks", "message"), [
    ([{"name": "A", "dependencies": ["B"]}, {"name": "B", "dependencies": ["A"]}],
     "the dependencies form a cycle through task 'A'"),
    ([{"name": "A", "dependencies": ["nope"]}], "names no task of the DAG: nope"),
    ([{"name": "A"}, {"name": "B", "depends": "A &&"}], "cannot be read: a task name is missing"),
])
def test_bad_argo_dag_dependencies_are_reported(tasks: list[Obj], message: str) -> None:
    out = prepared(dag(*tasks))
    assert out.pods == []
    assert any(e.startswith(f"Workflow {NS}/dag-diamond: spec.entrypoint") and message in e for e in errors(out)), \
        errors(out)


def test_argo_single_container_workflow_pod_is_named_after_the_workflow() -> None:
    wf = workload("argo-workflow.yaml")
    wf["spec"]["entrypoint"] = "train"
    (p,) = prepared(wf).pods
    assert p.meta.name == "fine-tune"


def test_argo_queue_label_on_the_workflow_only() -> None:
    wf = workload("argo-workflow.yaml")
    del wf["spec"]["podMetadata"]
    out = prepared(wf)
    assert {pg.queue for pg in out.pod_groups} == {QUEUE}


@pytest.mark.parametrize(("change", "field"), [
    ({"entrypoint": None}, "spec.entrypoint"),
    ({"entrypoint": "nope"}, "spec.entrypoint"),
    ({"workflowTemplateRef": {"name": "shared"}}, "spec.workflowTemplateRef"),
])
def test_bad_argo_workflow_is_reported(change: Obj, field: str) -> None:
    wf = workload("argo-workflow.yaml")
    for k, v in change.items():
        if v is None:
            del wf["spec"][k]
        else:
            wf["spec"][k] = v
    out = prepared(wf)
    assert out.pods == []
    assert any(e.startswith(f"Workflow {NS}/fine-tune: {field}:") for e in errors(out)), errors(out)


def test_argo_step_loops_and_references_that_cannot_be_expanded() -> None:
    wf = workload("argo-workflow.yaml")
    step = wf["spec"]["templates"][0]["steps"][1][0]
    del step["withItems"]
    step["withParam"] = "{{steps.prepare.outputs.result}}"
    _, errs = controller_output(wf)
    assert any("spec.entrypoint.steps[1][0].withParam" in e for e in errs)
    wf = workload("argo-workflow.yaml")
    wf["spec"]["templates"][0]["steps"][0][0] = {"name": "x", "templateRef": {"name": "lib", "template": "y"}}
    _, errs = controller_output(wf)
    assert any("steps[0][0].templateRef" in e for e in errs)


def test_argo_recursive_workflow_is_reported_not_expanded_forever() -> None:
    wf = workload("argo-workflow.yaml")
    wf["spec"]["templates"][0]["steps"].append([{"name": "again", "template": "pipeline"}])
    _, errs = controller_output(wf)
    assert any("nest deeper than" in e for e in errs)


def test_argo_with_sequence_expands() -> None:
    wf = workload("argo-workflow.yaml")
    step = wf["spec"]["templates"][0]["steps"][1][0]
    del step["withItems"]
    step["withSequence"] = {"count": "3"}
    objs, errs = controller_output(wf)
    assert not errs
    assert [o["metadata"]["name"] for o in objs] == [argo_pod("fine-tune", "prepare-data", "fine-tune[0].prepare")]
    (w,) = parse_objects([wf]).workloads
    emit = Emit(w)
    ctl.workflow_controller(w, emit, {argo_pod("fine-tune", "prepare-data", "fine-tune[0].prepare"): "Succeeded"})
    assert not emit.errors
    assert [o["metadata"]["name"] for o in emit.objects] == \
        [argo_pod("fine-tune", "train", f"fine-tune[1].train({i}:{i})") for i in range(3)]


# ------------------------------------------------------------------------------------------- Knative
def test_knative_service_objects_and_pods() -> None:
    out = prepared(workload("knative-service.yaml"))
    assert not errors(out)
    (config,) = objects(out, "Configuration").values()
    (revision,) = objects(out, "Revision").values()
    (deployment,) = objects(out, "Deployment").values()
    (rs,) = objects(out, "ReplicaSet").values()
    assert owner(config) == ("Service", "sentiment")
    assert (revision.meta.name, owner(revision)) == ("sentiment-00001", ("Configuration", "sentiment"))
    assert revision.meta.annotations["autoscaling.knative.dev/min-scale"] == "2"
    assert revision.meta.labels[QUEUE_LABEL] == QUEUE
    assert (deployment.meta.name, owner(deployment)) == ("sentiment-00001-deployment", ("Revision", "sentiment-00001"))
    assert owner(rs) == ("Deployment", "sentiment-00001-deployment")
    assert len(out.pods) == 2
    for p in out.pods:
        assert p.meta.name.startswith(f"{rs.meta.name}-")
        assert owner(p) == ("ReplicaSet", rs.meta.name)
        assert p.meta.labels["serving.knative.dev/revision"] == "sentiment-00001"
        assert p.meta.labels["serving.knative.dev/service"] == "sentiment"
        assert p.meta.labels["serving.knative.dev/revisionUID"] == revision.meta.uid
        assert [c.name for c in p.containers] == ["user-container", "queue-proxy"]
        assert requests_of(p)["cpu"] == 2025  # the user container and queue-proxy's 25m
    pg = only_pod_group(out)
    assert pg.meta.name == f"pg-sentiment-00001-{revision.meta.uid}"
    assert summary(pg) == (QUEUE, 2, "inference", "", ())
    assert owner(pg) == ("Revision", "sentiment-00001")


def test_knative_revision_is_a_gang_of_min_scale() -> None:
    result = run(cluster(gpus=1, n=2), workload("knative-service.yaml"))
    assert len(binds(result)) == 2
    small = run(cluster(gpus=1, n=1), workload("knative-service.yaml"))
    assert binds(small) == {}
    (pg,) = small.pod_groups
    assert pg.status == "Pending"


@pytest.mark.parametrize(("annotations", "replicas", "min_member"), [
    ({}, 1, 1),
    ({"autoscaling.knative.dev/min-scale": "3"}, 3, 3),
    ({"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/initial-scale": "3"}, 3, 1),
    ({"autoscaling.knative.dev/min-scale": "0"}, 1, 0),
])
def test_knative_replicas_and_min_member(annotations: dict[str, str], replicas: int, min_member: int) -> None:
    svc = workload("knative-service.yaml")
    svc["spec"]["template"]["metadata"]["annotations"] = annotations
    out = prepared(svc)
    assert len(out.pods) == replicas
    assert only_pod_group(out).min_member == min_member


@pytest.mark.parametrize("value", ["-1", "two"])
def test_knative_bad_min_scale_is_reported(value: str) -> None:
    svc = workload("knative-service.yaml")
    svc["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = value
    out = prepared(svc)
    assert out.pods == []
    assert any("spec.template.metadata.annotations[autoscaling.knative.dev/min-scale]" in e for e in errors(out))


@pytest.mark.parametrize(("value", "expected"), [("4", 4), ("x", 1), ("-2", 1), ("", 1), (None, 1)])
def test_knative_grouper_min_scale_fallback(value: str | None, expected: int) -> None:
    meta: Obj = {"name": "r", "namespace": NS}
    if value is not None:
        meta["annotations"] = {"autoscaling.knative.dev/min-scale": value}
    (w,) = parse_objects([{"apiVersion": "serving.knative.dev/v1", "kind": "Revision", "metadata": meta}]).workloads
    assert grp.min_scale(Owner.of_workload(w)) == expected


def test_knative_template_name_names_the_revision() -> None:
    svc = workload("knative-service.yaml")
    svc["spec"]["template"]["metadata"]["name"] = "sentiment-v2"
    out = prepared(svc)
    assert set(objects(out, "Revision")) == {"sentiment-v2"}
    assert only_pod_group(out).meta.name.startswith("pg-sentiment-v2-")


def _knative_snapshot(per_pod: bool) -> list[Obj]:
    """The Service with everything its controllers made, its pods already grouped (as in a running cluster)."""
    svc = workload("knative-service.yaml")
    objs, errs = controller_output(svc)
    assert not errs
    for o in objs:
        if o["kind"] == "Pod":
            meta = o["metadata"]
            meta["annotations"][PG_ANNOTATION] = f"pg-{meta['name']}-{meta['uid']}" if per_pod else "pg-any"
    return [svc, *objs]


def test_knative_revision_grouped_per_pod_before_keeps_its_per_pod_podgroups() -> None:
    out = prepared(_knative_snapshot(per_pod=True))
    assert len(out.pod_groups) == 2
    for p in out.pods:
        pg = groups(out)[p.meta.annotations[PG_ANNOTATION]]
        assert pg.meta.name == per_pod_pg(p)
        assert (pg.min_member, pg.priority_class_name, owner(pg)) == (1, "inference", ("Pod", p.meta.name))
    gang = prepared(_knative_snapshot(per_pod=False))
    assert only_pod_group(gang).min_member == 2


def test_knative_non_gang_mode_groups_per_pod() -> None:
    out = prepared(workload("knative-service.yaml"))
    objs = {w.meta.uid: w for w in out.workloads}
    p = out.pods[0]
    chain: list[Owner] = []
    refs = p.meta.owner_references
    while refs:
        w = objs[refs[0].uid]
        chain.append(Owner.of_workload(w))
        refs = w.meta.owner_references
    plan = grp.group_knative_service(GroupRequest(p, tuple(chain), GroupContext(frozenset({"inference"}))),
                                     gang=False)
    assert isinstance(plan, PodGroupPlan)
    assert (plan.name, plan.min_member, plan.priority_class_name) == (per_pod_pg(p), 1, "inference")


def test_knative_pod_without_revision_label_is_reported() -> None:
    svc = workload("knative-service.yaml")
    svc["metadata"]["uid"] = "svc-uid"
    stray = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "stray", "namespace": NS, "ownerReferences": [
                 {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "sentiment", "uid": "svc-uid",
                  "controller": True}]},
             "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}}
    out = prepared(svc, stray)
    assert any("revisionName not found" in e for e in errors(out))
    assert "stray" in pods(out)


def test_knative_service_without_containers_is_reported() -> None:
    svc = workload("knative-service.yaml")
    svc["spec"]["template"]["spec"]["containers"] = []
    assert any("spec.template.spec.containers" in e for e in errors(prepared(svc)))


# ------------------------------------------------------------------------------------------- Tekton
def test_tekton_taskrun_pod_has_one_container_per_step() -> None:
    out = prepared(workload("tekton-taskrun.yaml"))
    assert not errors(out)
    (p,) = out.pods
    assert p.meta.name == "build-model-image-pod"
    assert owner(p) == ("TaskRun", "build-model-image")
    assert [c.name for c in p.containers] == ["step-fetch-weights", "step-quantize"]
    assert p.meta.labels["tekton.dev/taskRun"] == "build-model-image"
    assert p.meta.labels[QUEUE_LABEL] == QUEUE  # the TaskRun's labels are propagated
    assert p.scheduler_name == "kai-scheduler"
    assert requests_of(p) == {"cpu": 2500, "memory": 9 * GIB, "nvidia.com/gpu": 1}
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("build-model-image")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert binds(run(cluster(), workload("tekton-taskrun.yaml")))


def test_tekton_task_level_compute_resources_replace_the_steps() -> None:
    tr = workload("tekton-taskrun.yaml")
    tr["spec"]["computeResources"] = {"requests": {"cpu": "3", "memory": "4Gi"}}
    (p,) = prepared(tr).pods
    assert requests_of(p) == {"cpu": 3000, "memory": 4 * GIB}


def test_tekton_pipelinerun_one_taskrun_and_pod_per_task_in_one_podgroup() -> None:
    out = prepared(workload("tekton-pipelinerun.yaml"))
    assert not errors(out)
    taskruns = objects(out, "TaskRun")
    assert set(taskruns) == {"train-and-test-train", "train-and-test-test"}
    for name, tr in taskruns.items():
        assert owner(tr) == ("PipelineRun", "train-and-test")
        assert tr.meta.labels["tekton.dev/pipelineTask"] == name.rpartition("-")[2]
        assert tr.spec["serviceAccountName"] == "pipeline-runner"
    assert set(pods(out)) == {"train-and-test-train-pod", "train-and-test-test-pod"}
    for p in out.pods:
        assert owner(p)[0] == "TaskRun"
        assert p.meta.labels["tekton.dev/pipelineRun"] == "train-and-test"
        assert p.scheduler_name == "kai-scheduler"
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("train-and-test")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert owner(pg) == ("PipelineRun", "train-and-test")
    assert len(binds(run(cluster(), workload("tekton-pipelinerun.yaml")))) == 2


def test_tekton_task_run_specs_override_a_task() -> None:
    pr = workload("tekton-pipelinerun.yaml")
    pr["spec"]["taskRunSpecs"] = [{"pipelineTaskName": "test", "podTemplate": {"nodeSelector": {"pool": "cpu"}}}]
    objs, _ = controller_output(pr)
    by_name = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    assert by_name["train-and-test-test-pod"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert by_name["train-and-test-test-pod"]["spec"]["schedulerName"] == "kai-scheduler"
    assert "nodeSelector" not in by_name["train-and-test-train-pod"]["spec"]


def test_tekton_references_cannot_be_resolved() -> None:
    pr = workload("tekton-pipelinerun.yaml")
    del pr["spec"]["pipelineSpec"]
    pr["spec"]["pipelineRef"] = {"name": "train-and-test"}
    out = prepared(pr)
    assert out.pods == []
    assert any(e.startswith(f"PipelineRun {NS}/train-and-test: spec.pipelineRef:") for e in errors(out))
    pr = workload("tekton-pipelinerun.yaml")
    pr["spec"]["pipelineSpec"]["tasks"][1] = {"name": "test", "taskRef": {"name": "pytest"}}
    assert any("spec.pipelineSpec.tasks[1].taskRef" in e for e in errors(prepared(pr)))
    tr = workload("tekton-taskrun.yaml")
    del tr["spec"]["taskSpec"]
    tr["spec"]["taskRef"] = {"name": "build"}
    assert any(e.startswith(f"TaskRun {NS}/build-model-image: spec.taskRef:") for e in errors(prepared(tr)))


def test_tekton_child_names_are_shortened_like_knative() -> None:
    assert ctl.child_name("pr", "-task") == "pr-task"
    long = ctl.child_name("p" * 60, "-task")
    assert len(long) == 63 and long.endswith("-task") and long.startswith("p" * 26)


# ------------------------------------------------------------------------------------------- KubeVirt
def test_kubevirt_vmi_launcher_pod() -> None:
    out = prepared(workload("kubevirt-vmi.yaml"))
    assert not errors(out)
    (p,) = out.pods
    assert p.meta.name.startswith("virt-launcher-gpu-vm-") and len(p.meta.name) == len("virt-launcher-gpu-vm-") + 5
    assert owner(p) == ("VirtualMachineInstance", "gpu-vm")
    assert p.meta.labels["kubevirt.io"] == "virt-launcher"
    assert p.meta.labels["kubevirt.io/created-by"] == f"{NS}/gpu-vm"
    assert p.meta.labels[QUEUE_LABEL] == QUEUE
    assert [c.name for c in p.containers] == ["compute"]
    req = requests_of(p)
    overhead = ctl.memory_overhead(16 * GIB, 4, True)
    assert req == {"cpu": 4000, "memory": 16 * GIB + overhead, A10: 1}
    assert overhead == (210 + 16 * 1024 // 512 + 4 * 8 + 8 + 32) * MIB
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("gpu-vm")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    result = run(cluster(extra={A10: 2}), workload("kubevirt-vmi.yaml"))
    assert len(binds(result)) == 1
    assert binds(run(cluster(), workload("kubevirt-vmi.yaml"))) == {}  # no node has the device


def test_kubevirt_vm_runs_its_vmi() -> None:
    out = prepared(workload("kubevirt-vm.yaml"))
    assert not errors(out)
    (vmi,) = objects(out, "VirtualMachineInstance").values()
    assert (vmi.meta.name, owner(vmi)) == ("dev-box", ("VirtualMachine", "dev-box"))
    (p,) = out.pods
    assert owner(p) == ("VirtualMachineInstance", "dev-box")
    assert requests_of(p)["cpu"] == 200  # 2 vCPUs at KubeVirt's default 1/10 of a core each
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("dev-box")
    assert owner(pg) == ("VirtualMachine", "dev-box")


@pytest.mark.parametrize("spec", [{"runStrategy": "Halted"}, {"running": False}, {}])
def test_kubevirt_halted_vm_has_no_pod(spec: Obj) -> None:
    vm = workload("kubevirt-vm.yaml")
    vm["spec"].pop("runStrategy")
    vm["spec"].update(spec)
    objs, errs = controller_output(vm)
    assert (objs, errs) == ([], [])


def test_kubevirt_vmi_without_memory_is_reported() -> None:
    vmi = workload("kubevirt-vmi.yaml")
    del vmi["spec"]["domain"]["memory"]
    out = prepared(vmi)
    assert out.pods == []
    assert any("spec.domain.resources.requests.memory" in e for e in errors(out))


# ------------------------------------------------------------------------------------------- Seldon
def test_seldon_deployment_one_deployment_per_component_with_the_orchestrator() -> None:
    out = prepared(workload("seldon-deployment.yaml"))
    assert not errors(out)
    (deployment,) = objects(out, "Deployment").values()
    assert (deployment.meta.name, owner(deployment)) == ("iris-model-default-0-classifier",
                                                         ("SeldonDeployment", "iris-model"))
    assert len(out.pods) == 2
    for p in out.pods:
        assert p.meta.labels["seldon-deployment-id"] == "iris-model"
        assert p.meta.labels["seldon-app"] == "iris-model-default"
        assert [c.name for c in p.containers] == ["classifier", "seldon-container-engine"]
        assert requests_of(p) == {"cpu": 1500, "memory": 2 * GIB + 512 * MIB, "nvidia.com/gpu": 1}
    pg = only_pod_group(out)
    assert pg.meta.name == default_pg("iris-model")
    assert summary(pg) == (QUEUE, 1, "train", "", ())
    assert len(binds(run(cluster(), workload("seldon-deployment.yaml")))) == 2


def test_seldon_without_engine() -> None:
    sdep = workload("seldon-deployment.yaml")
    sdep["spec"]["predictors"][0]["annotations"] = {"seldon.io/no-engine": "true"}
    assert all([c.name for c in p.containers] == ["classifier"] for p in prepared(sdep).pods)


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s["predictors"][0].__setitem__("replicas", -1), "spec.predictors[0].replicas"),
    (lambda s: s["predictors"][0]["componentSpecs"][0].__setitem__("replicas", -2),
     "spec.predictors[0].componentSpecs[0].replicas"),
    (lambda s: s["predictors"][0].pop("componentSpecs"), "spec.predictors[0].componentSpecs"),
    (lambda s: s.pop("predictors"), "spec.predictors"),
])
def test_bad_seldon_deployment_is_reported(change: Any, field: str) -> None:
    sdep = workload("seldon-deployment.yaml")
    change(sdep["spec"])
    out = prepared(sdep)
    assert out.pods == []
    assert any(e.startswith(f"SeldonDeployment {NS}/iris-model: {field}:") for e in errors(out)), errors(out)


# --------------------------------------------------------------------------- queues and priorities, all kinds
ALL = ["pod.yaml", "job.yaml", "cronjob.yaml", "deployment.yaml", "statefulset.yaml", "replicaset.yaml",
       "knative-service.yaml", "tekton-taskrun.yaml", "tekton-pipelinerun.yaml", "kubevirt-vm.yaml",
       "seldon-deployment.yaml"]
DEFAULT_PRIORITY = {"deployment.yaml": "inference", "knative-service.yaml": "inference"}


def _set_label(doc: Obj, key: str, value: str) -> Obj:
    """The label on the workload and wherever its kind takes it from (the CronJob's Job, the Knative Revision)."""
    doc = copy.deepcopy(doc)
    doc["metadata"].setdefault("labels", {})[key] = value
    if doc["kind"] == "CronJob":
        doc["spec"]["jobTemplate"]["metadata"]["labels"][key] = value
    if doc["kind"] == "Service":
        doc["spec"]["template"]["metadata"]["labels"][key] = value
    return doc


@pytest.mark.parametrize("name", ALL)
def test_unknown_queue_keeps_the_podgroups_pending(name: str) -> None:
    doc = _set_label(workload(name), QUEUE_LABEL, "no-such-queue")
    result = run(cluster(), doc)
    assert binds(result) == {}
    assert result.pod_groups
    for pg in result.pod_groups:
        assert (pg.status, pg.reason, pg.queue) == ("Pending", "QueueDoesNotExist", "no-such-queue")


@pytest.mark.parametrize("name", ALL)
def test_priority_class_label_naming_a_missing_class_falls_back_to_the_kind_default(name: str) -> None:
    doc = _set_label(workload(name), PRIORITY_LABEL, "no-such-class")
    out = prepared(doc)
    assert {pg.priority_class_name for pg in out.pod_groups} == {DEFAULT_PRIORITY.get(name, "train")}


@pytest.mark.parametrize("name", ALL)
def test_priority_class_label_naming_an_existing_class_is_used(name: str) -> None:
    doc = _set_label(workload(name), PRIORITY_LABEL, "high")
    out = prepared(doc, priority_class("high", 1000))
    assert {pg.priority_class_name for pg in out.pod_groups} == {"high"}


@pytest.mark.parametrize("name", ALL)
def test_preemptibility_label_is_copied(name: str) -> None:
    doc = _set_label(workload(name), "kai.scheduler/preemptibility", "non-preemptible")
    out = prepared(doc)
    assert {pg.preemptibility for pg in out.pod_groups} == {"non-preemptible"}


def test_workload_given_with_its_pods_is_not_expanded_again() -> None:
    d = workload("deployment.yaml")
    d["metadata"]["uid"] = "deploy-uid"
    objs, _ = controller_output(d)
    out = prepared(d, objs)
    assert len(out.pods) == 2 and len(objects(out, "ReplicaSet")) == 1
