"""The embedded workload controllers make a bounded number of pods (issue 23, item 6): a replica count (or a
product of counts: a JobSet's Jobs x pods, a LeaderWorkerSet's groups x size, a Ray group's replicas x hosts)
over the limit is refused before anything is made, with an input error naming the object and the field; the
pods of the workloads before it count too, and a controller that goes over all the same is stopped."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.workloads import MAX_PODS, PodLimit, expand_workloads
from kaisched.cluster.workloads.base import Emit, PodLimitReached
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects

from .builders import NOW
from .workload_helpers import prepared, workload

Obj = dict[str, Any]
HUGE = 100_000_000
QUICK = 2.0  # seconds (making the pods would take minutes and gigabytes)
LIMIT = f"exceeds the limit of {MAX_PODS:,} pods per input"


def _set(path: str | tuple[str | int, ...], value: object) -> Callable[[Obj], None]:
    """A change of the manifest: ``path`` (dots, numbers index lists; or a tuple of keys) = value."""
    keys = tuple(int(k) if k.isdigit() else k for k in path.split(".")) if isinstance(path, str) else path

    def change(doc: Obj) -> None:
        target: Any = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change



def _jobs_of_pods(index: int, jobs: int, pods: int) -> list[Callable[[Obj], None]]:
    """A JobSet's ``index`` th replicated job: ``jobs`` Jobs of ``pods`` pods each."""
    field = f"spec.replicatedJobs.{index}"
    return [_set(f"{field}.replicas", jobs), _set(f"{field}.template.spec.parallelism", pods),
            _set(f"{field}.template.spec.completions", pods)]


CASES = [
    ("deployment.yaml", [_set("spec.replicas", HUGE)], f"Deployment ml/llm-server: spec.replicas: 100000000 {LIMIT}"),
    ("replicaset.yaml", [_set("spec.replicas", HUGE)], f"ReplicaSet ml/notebook-workers: spec.replicas: 100000000 "
                                                       f"{LIMIT}"),
    ("statefulset.yaml", [_set("spec.replicas", HUGE)], f"StatefulSet ml/embedder: spec.replicas: 100000000 {LIMIT}"),
    ("job.yaml", [_set("spec.parallelism", HUGE), _set("spec.completions", HUGE)],
     f"Job ml/batch-job: spec.parallelism: 100000000 {LIMIT}"),
    ("job.yaml", [_set("spec.parallelism", HUGE), _set("spec.completions", 2 * HUGE)],
     f"Job ml/batch-job: spec.parallelism: 100000000 {LIMIT}"),
    ("job-indexed.yaml", [_set("spec.parallelism", 2 * HUGE), _set("spec.completions", HUGE)],
     f"Job ml/shard-eval: spec.completions: 100000000 {LIMIT}"),
    ("cronjob.yaml", [_set("spec.jobTemplate.spec.parallelism", HUGE)],
     f"CronJob ml/nightly-eval: spec.jobTemplate.spec.parallelism: 100000000 {LIMIT}"),
    ("jobset.yaml", [_set("spec.replicatedJobs.1.replicas", HUGE)],
     f"JobSet ml/pytorch: spec.replicatedJobs[1].replicas: 100000000 (100,000,001 Jobs with the 1 before it) "
     f"exceeds the limit of {MAX_PODS:,} Jobs per input"),
    ("jobset.yaml", _jobs_of_pods(1, 1000, 2000),
     "JobSet ml/pytorch: spec.replicatedJobs[1].replicas: 1000 Jobs of 2,000 pods (2,000,001 pods with the 1 before "
     f"it) {LIMIT}"),
    ("jobset.yaml", [_set("spec.replicatedJobs.0.template.spec.parallelism", HUGE),
                     _set("spec.replicatedJobs.0.template.spec.completions", HUGE)],
     f"JobSet ml/pytorch: spec.replicatedJobs[0].template.spec.parallelism: 100000000 {LIMIT}"),
    ("leaderworkerset.yaml", [_set("spec.replicas", HUGE)],
     f"LeaderWorkerSet ml/vllm: spec.replicas: 100000000 groups of 2 pods (200,000,000 pods) {LIMIT}"),
    ("jobset.yaml", _jobs_of_pods(0, 1000, 2000),
     f"JobSet ml/pytorch: spec.replicatedJobs[0].replicas: 1000 Jobs of 2,000 pods (2,000,000 pods) {LIMIT}"),
    ("leaderworkerset.yaml", [_set("spec.replicas", 1), _set("spec.leaderWorkerTemplate.size", HUGE)],
     f"LeaderWorkerSet ml/vllm: spec.leaderWorkerTemplate.size: 100000000 {LIMIT}"),
    ("raycluster.yaml", [_set("spec.workerGroupSpecs.0.replicas", HUGE)],  # clamped to maxReplicas: 4
     None),
    ("raycluster.yaml", [_set("spec.workerGroupSpecs.0.replicas", HUGE), _set("spec.workerGroupSpecs.0.maxReplicas",
                                                                              HUGE)],
     f"RayCluster ml/raycluster-kuberay: spec.workerGroupSpecs[0].replicas: 100000000 (100,000,001 pods with the 1 "
     f"before it) {LIMIT}"),
    ("raycluster.yaml", [_set("spec.workerGroupSpecs.0.minReplicas", HUGE),
                         _set("spec.workerGroupSpecs.0.maxReplicas", HUGE)],
     f"RayCluster ml/raycluster-kuberay: spec.workerGroupSpecs[0].minReplicas: 100000000 (100,000,001 pods with "
     f"the 1 before it) {LIMIT}"),
    ("rayjob.yaml", [_set("spec.rayClusterSpec.workerGroupSpecs.0.replicas", 1000),
                     _set("spec.rayClusterSpec.workerGroupSpecs.0.maxReplicas", 1000),
                     _set("spec.rayClusterSpec.workerGroupSpecs.0.numOfHosts", 2000)],
     "RayJob ml/rayjob-sample: spec.rayClusterSpec.workerGroupSpecs[0].replicas: 1000 replicas of 2,000 hosts "
     f"(2,000,001 pods with the 1 before it) {LIMIT}"),
    ("pytorchjob.yaml", [_set("spec.pytorchReplicaSpecs.Worker.replicas", HUGE)],
     "PyTorchJob team-a/pytorch-simple: spec.pytorchReplicaSpecs.Worker.replicas: 100000000 (100,000,001 pods with "
     f"the 1 before it) {LIMIT}"),
    ("mpijob-v2beta1.yaml", [_set("spec.mpiReplicaSpecs.Worker.replicas", HUGE)],
     "MPIJob team-a/mpi-hello-world: spec.mpiReplicaSpecs.Worker.replicas: 100000000 (100,000,001 pods with the 1 "
     f"before it) {LIMIT}"),
    ("trainjob.yaml", [_set("spec.trainer.numNodes", HUGE)],
     f"TrainJob team-a/pytorch-mnist: spec.trainer.numNodes: 100000000 {LIMIT}"),
    ("knative-service.yaml", [_set(("spec", "template", "metadata", "annotations",
                                    "autoscaling.knative.dev/min-scale"), str(HUGE))],
     "Service ml/sentiment: spec.template.metadata.annotations[autoscaling.knative.dev/min-scale]: 100000000 "
     f"{LIMIT}"),
    ("seldon-deployment.yaml", [_set("spec.predictors.0.replicas", HUGE)],
     f"SeldonDeployment ml/iris-model: spec.predictors[0].replicas: 100000000 {LIMIT}"),
    ("argo-workflow.yaml", [_set("spec.templates.0.steps.1.0.withItems", None),
                            _set("spec.templates.0.steps.1.0.withSequence", {"count": str(HUGE)})],
     "Workflow ml/fine-tune: spec.entrypoint.steps[1][0].withSequence: 100,000,000 items: the embedded controller "
     "expands at most 10,000"),
]


@pytest.mark.parametrize(("fixture", "changes", "message"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_huge_count_is_refused_before_any_pod_is_made(fixture: str, changes: list[Callable[[Obj], None]],
                                                         message: str | None) -> None:
    doc = copy.deepcopy(workload(fixture))
    for change in changes:
        change(doc)
    start = time.perf_counter()
    out = prepared(doc)
    assert time.perf_counter() - start < QUICK
    if message is None:  # (KubeRay clamps the replicas to maxReplicas)
        assert not out.errors and len(out.pods) < 10
        return
    assert [str(e) for e in out.errors] == [message]
    assert out.pods == []  # nothing of it is made


def test_the_pods_before_count_and_a_refused_workload_gives_its_share_back() -> None:
    small = copy.deepcopy(workload("deployment.yaml"))
    small["spec"]["replicas"] = 6
    other = copy.deepcopy(small)
    other["metadata"]["name"] = "other"
    big = copy.deepcopy(small)
    big["metadata"]["name"] = "big"
    big["spec"]["replicas"] = 20
    limit = PodLimit(10)
    out = expand_workloads(parse_objects([small, big, other]), NOW, limit=limit)
    # in name order: big is refused (20 > 10), then llm-server's 6, then other's 6 over the 10 left
    assert [str(e) for e in out.errors] == [
        "Deployment ml/big: spec.replicas: 20 exceeds the limit of 10 pods per input",
        "Deployment ml/other: spec.replicas: 6 (12 pods with the 6 before it) exceeds the limit of 10 pods per input"]
    assert len(out.pods) == 6 and limit.made == 6
    assert limit.refused == out.errors


def test_a_simulation_names_its_limit() -> None:
    doc = copy.deepcopy(workload("deployment.yaml"))
    doc["spec"]["replicas"] = 3
    out = expand_workloads(parse_objects([doc]), NOW, limit=PodLimit(2, "per simulation", "limits.pods"))
    assert [str(e) for e in out.errors] == [
        "Deployment ml/llm-server: spec.replicas: 3 exceeds the limit of 2 pods per simulation (limits.pods)"]


def test_a_controller_that_goes_over_is_stopped_all_the_same() -> None:
    # a PipelineRun makes a TaskRun per task (2), then their pods: over a limit of 1, whatever counted it
    out = expand_workloads(parse_objects([workload("tekton-pipelinerun.yaml")]), NOW, limit=PodLimit(1))
    assert [str(e) for e in out.errors] == [
        "PipelineRun ml/train-and-test: its controller would make more than the limit of 1 pods per input"]
    assert out.pods == [] and len(out.workloads) == 1
    emit = Emit(parse_objects([workload("deployment.yaml")]).workloads[0], NOW, PodLimit(1))
    emit.pod("a", {})
    with pytest.raises(PodLimitReached):
        emit.pod("b", {})


def test_completed_indexes_and_huge_completions_cost_nothing() -> None:
    doc = copy.deepcopy(workload("job-indexed.yaml"))
    doc["spec"].update(completions=10**12, parallelism=2)
    doc["status"] = {"completedIndexes": f"0-{10**12 - 2},5-7"}
    start = time.perf_counter()
    out = prepared(doc)
    assert time.perf_counter() - start < QUICK
    assert not out.errors
    assert [p.meta.labels["batch.kubernetes.io/job-completion-index"] for p in out.pods] == [str(10**12 - 1)]
    doc["status"] = {"completedIndexes": "1,3-4"}
    doc["spec"].update(completions=6, parallelism=3)
    assert [p.meta.labels["batch.kubernetes.io/job-completion-index"] for p in prepared(doc).pods] == ["0", "2", "5"]


def test_kaisched_schedule_reports_a_huge_workload_as_an_input_error(tmp_path: Any) -> None:
    import yaml

    doc = copy.deepcopy(workload("deployment.yaml"))
    doc["spec"]["replicas"] = HUGE
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(doc))
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["schedule", "-f", str(path), "--now", "2026-01-01T00:00:00Z", "-o", "json"])
    assert time.perf_counter() - start < QUICK * 2
    assert result.exit_code == 1, result.output  # an input error: listed, the rest scheduled
    import json

    errors = json.loads(result.stdout)["errors"]
    assert errors == [{"object": "Deployment ml/llm-server", "field": "spec.replicas",
                       "message": f"100000000 {LIMIT}"}]
    assert "Traceback" not in result.output


def test_nothing_else_changes_within_the_limit() -> None:
    out = prepared(workload("jobset.yaml"), workload("leaderworkerset.yaml"), workload("raycluster.yaml"))
    assert not out.errors and len(out.pods) == (1 + 2 * 2) + 2 * 2 + (1 + 2 + 1)  # JobSet, LWS, RayCluster
    assert isinstance(out, ParsedObjects)
