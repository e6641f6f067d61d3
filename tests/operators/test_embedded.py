"""kaisched's embedded workload controllers (``kaisched.cluster.workloads``, used by ``kaisched schedule`` and the
simulator) against the real operators, on the same manifest.

Each test submits a user's manifest to the real operator, reads back the job as the API server stored it, runs
the embedded controller on that very object, and compares the pods both make: names, labels, annotations,
owner references, and what the scheduler reads of the pod spec (scheduler name, restart policy, service
account, init containers and containers with their images, resources and ports). What the API server
defaults on every pod (a request copied from a limit, restart policy ``Always``, port protocol ``TCP``) is
applied to the embedded pods first, as the API server would. Not compared: environment variables, volumes
and the operators' other objects (Services, ConfigMaps, Roles), which the embedded controllers do not make;
KubeRay's random pod-name suffixes (their shape is compared).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaisched.cluster.workloads import CONTROLLERS
from kaisched.cluster.workloads.base import Emit
from kaisched.k8s.parse import parse_objects
from tests.kube.contract_helpers import JSON, QUEUE_LABEL, SCHEDULER_NAME, WAIT_S, wait_until
from tests.operators.cluster import KUBEFLOW, RAY, OperatorCluster, mpijob, ns_path, pytorchjob, raycluster, rayjob
from tests.operators.operators import OperatorProcess

pytestmark = pytest.mark.operators

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
#: KubeRay's pod-name suffix: five characters of Kubernetes' random-string alphabet
RAY_SUFFIX = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def embedded_objects(workload: Mapping[str, Any]) -> list[JSON]:
    """What kaisched's embedded controller makes for ``workload`` (the object as the API returned it)."""
    parsed = parse_objects([dict(workload)])
    assert parsed.errors == [], parsed.errors
    (w,) = parsed.workloads
    emit = Emit(w)
    CONTROLLERS[(w.group, w.kind)](w, emit)
    assert emit.errors == [], emit.errors
    return emit.objects


def embedded_pods(workload: Mapping[str, Any]) -> list[JSON]:
    return [o for o in embedded_objects(workload) if o["kind"] == "Pod"]


def _container(c: Mapping[str, Any]) -> JSON:
    resources = c.get("resources") or {}
    limits = {k: str(v) for k, v in (resources.get("limits") or {}).items()}  # a manifest's 1 is the API's "1"
    requests = {**limits, **{k: str(v) for k, v in (resources.get("requests") or {}).items()}}  # API defaulting
    ports = sorted((p.get("name", ""), p["containerPort"], p.get("protocol", "TCP")) for p in c.get("ports") or ())
    return {"name": c["name"], "image": c.get("image"), "limits": limits, "requests": requests, "ports": ports}


def projection(pod: Mapping[str, Any], *, name: str | None = None) -> JSON:
    """What is compared of a pod (``name`` replaces the pod's name: KubeRay's random suffix)."""
    meta, spec = pod["metadata"], pod["spec"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != "pod-group-name"}
    owners = [(r["apiVersion"], r["kind"], r["name"], r.get("controller"), r.get("blockOwnerDeletion"))
              for r in meta.get("ownerReferences") or ()]
    return {
        "name": name if name is not None else meta["name"],
        "labels": dict(meta.get("labels") or {}),
        "annotations": annotations,
        "owners": owners,
        "schedulerName": spec.get("schedulerName"),
        "restartPolicy": spec.get("restartPolicy") or "Always",
        "serviceAccountName": spec.get("serviceAccountName") or None,
        "initContainers": [_container(c) for c in spec.get("initContainers") or ()],
        "containers": [_container(c) for c in spec.get("containers") or ()],
    }


def by_name(pods: list[JSON]) -> dict[str, JSON]:
    return {p["metadata"]["name"]: projection(p) for p in pods}


def assert_same_pods(real: Mapping[str, JSON], embedded: Mapping[str, JSON]) -> None:
    assert sorted(real) == sorted(embedded), "pod names differ"
    for name in sorted(real):
        assert embedded[name] == real[name], f"pod {name}: embedded (left) differs from the real operator's (right)"


def owned_by(cluster: OperatorCluster, workload: Mapping[str, Any]) -> list[JSON]:
    uid = workload["metadata"]["uid"]
    return [p for p in cluster.live_pods().values()
            if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences") or ())]


def test_the_embedded_training_operator_makes_the_pytorchjob_pods_the_real_one_makes(
    cluster: OperatorCluster,
) -> None:
    manifest = pytorchjob("pt", "team-a", workers=3)
    # a second container and a restart policy left to the operator's default
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"].pop("restartPolicy")
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}})
    cluster.create(f"{KUBEFLOW}/pytorchjobs", manifest)
    cluster.wait_pods(4, "PyTorchJob pt", {"training.kubeflow.org/job-name": "pt"})
    job = cluster.get(f"{KUBEFLOW}/pytorchjobs", "pt")
    assert job is not None
    real = by_name(owned_by(cluster, job))
    assert_same_pods(real, by_name(embedded_pods(job)))
    # what the comparison covers, on the real pods
    worker = real["pt-worker-0"]
    assert [c["name"] for c in worker["initContainers"]] == ["init-pytorch"]
    assert worker["restartPolicy"] == "OnFailure"
    assert worker["containers"][0]["ports"] == [("pytorchjob-port", 23456, "TCP")]
    assert real["pt-master-0"]["initContainers"] == []


@pytest.mark.parametrize(("fixture", "resource", "pods"), [
    ("tfjob.yaml", "tfjobs", ["dist-mnist-ps-0", "dist-mnist-worker-0", "dist-mnist-worker-1"]),
    ("xgboostjob.yaml", "xgboostjobs", ["xgboost-dist-iris-master-0", "xgboost-dist-iris-worker-0",
                                        "xgboost-dist-iris-worker-1"]),
])
def test_the_embedded_training_operator_makes_the_tfjob_and_xgboostjob_pods_the_real_one_makes(
    cluster: OperatorCluster, fixture: str, resource: str, pods: list[str],
) -> None:
    """The workload fixtures of the unit tests (Kubeflow's examples), one replica spec left without a restart
    policy so that the kind's default is compared too."""
    manifest = yaml.safe_load((FIXTURES / fixture).read_text())
    del manifest["metadata"]["namespace"]
    specs = next(v for k, v in manifest["spec"].items() if k.endswith("ReplicaSpecs"))
    next(iter(specs.values())).pop("restartPolicy", None)
    made = cluster.create(f"{KUBEFLOW}/{resource}", manifest)
    name = made["metadata"]["name"]
    cluster.wait_pods(len(pods), f"{made['kind']} {name}", {"training.kubeflow.org/job-name": name})
    job = cluster.get(f"{KUBEFLOW}/{resource}", name)
    assert job is not None
    real = by_name(owned_by(cluster, job))
    assert sorted(real) == pods
    assert_same_pods(real, by_name(embedded_pods(job)))


def test_the_embedded_training_operator_makes_the_mpijob_pods_the_real_one_makes(cluster: OperatorCluster) -> None:
    cluster.create(f"{KUBEFLOW}/mpijobs", mpijob("mpi", "team-a", workers=2))
    cluster.wait_pods(3, "MPIJob mpi", {"training.kubeflow.org/job-name": "mpi"})
    job = cluster.get(f"{KUBEFLOW}/mpijobs", "mpi")
    assert job is not None
    real = by_name(owned_by(cluster, job))
    assert_same_pods(real, by_name(embedded_pods(job)))
    launcher = real["mpi-launcher"]
    assert launcher["serviceAccountName"] == "mpi-launcher" and launcher["restartPolicy"] == "Never"
    assert [(c["name"], c["requests"].get("ephemeral-storage")) for c in launcher["initContainers"]] == [
        ("kubectl-delivery", "5Gi")]


def shaped(pods: list[JSON]) -> dict[str, JSON]:
    """Pods keyed by name without KubeRay's random suffix, numbered within a group."""
    out: dict[str, JSON] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name = pod["metadata"]["name"]
        assert RAY_SUFFIX.search(name), f"pod name {name}: not <prefix>-<5 random characters>"
        stem = RAY_SUFFIX.sub("", name)
        key = f"{stem}#{sum(1 for k in out if k.startswith(stem + '#'))}"
        out[key] = projection(pod, name=stem)
    return out


def test_the_embedded_kuberay_makes_the_raycluster_pods_the_real_one_makes(
    cluster: OperatorCluster, kuberay_without_batch_scheduler: OperatorProcess,
) -> None:
    """KubeRay without its KAI plugin (the embedded controller does not model that option): the manifest's
    templates name the scheduler."""
    manifest = raycluster("rc", "team-a", {"small": (1, 1, 5), "large": (2, 2, 4)})
    for template in [manifest["spec"]["headGroupSpec"]["template"],
                     *(g["template"] for g in manifest["spec"]["workerGroupSpecs"])]:
        template["spec"]["schedulerName"] = SCHEDULER_NAME
    cluster.create(f"{RAY}/rayclusters", manifest)
    cluster.wait_pods(4, "RayCluster rc", {"ray.io/cluster": "rc"})
    made = cluster.get(f"{RAY}/rayclusters", "rc")
    assert made is not None
    real = shaped(owned_by(cluster, made))
    assert sorted(real) == ["rc-head#0", "rc-large-worker#0", "rc-large-worker#1", "rc-small-worker#0"]
    assert_same_pods(real, shaped(embedded_pods(made)))
    assert real["rc-head#0"]["annotations"] == {"ray.io/ft-enabled": "false"}
    assert [c["name"] for c in real["rc-small-worker#0"]["initContainers"]] == ["wait-gcs-ready"]
    assert all(QUEUE_LABEL not in p["labels"] for p in real.values())


def test_the_embedded_kuberay_makes_the_rayjob_cluster_and_pods_the_real_one_makes(
    cluster: OperatorCluster, kuberay_without_batch_scheduler: OperatorProcess,
) -> None:
    manifest = rayjob("sample", "team-a", {"workers": (2, 2, 2)}, scheduler_name=SCHEDULER_NAME)
    manifest["metadata"]["annotations"] = {"example.com/team": "vision"}
    made = cluster.create(f"{RAY}/rayjobs", manifest)
    ray_clusters = wait_until(lambda: cluster.kube.items(ns_path(f"{RAY}/rayclusters", cluster.ns)), WAIT_S,
                              "the RayJob's RayCluster", describe=cluster.describe)
    (real_cluster,) = ray_clusters
    name = real_cluster["metadata"]["name"]
    cluster.wait_pods(3, f"RayCluster {name}", {"ray.io/cluster": name})
    job = cluster.get(f"{RAY}/rayjobs", "sample")
    assert job is not None and job["status"]["rayClusterName"] == name

    # the cluster's name: <rayjob>-<5 random characters>, also when the status does not name it yet
    assert re.fullmatch(r"sample" + RAY_SUFFIX.pattern, name), name
    unnamed = embedded_objects({**made, "status": {}})
    (fresh,) = [o for o in unnamed if o["kind"] == "RayCluster"]
    assert re.fullmatch(r"sample" + RAY_SUFFIX.pattern, fresh["metadata"]["name"]), fresh["metadata"]["name"]

    objects = embedded_objects(job)
    (own_cluster,) = [o for o in objects if o["kind"] == "RayCluster"]

    def cluster_view(obj: Mapping[str, Any]) -> JSON:
        meta = obj["metadata"]
        return {"name": meta["name"], "labels": meta.get("labels"), "annotations": meta.get("annotations"),
                "owners": [(r["apiVersion"], r["kind"], r["name"], r.get("controller"))
                           for r in meta.get("ownerReferences") or ()],
                "workerGroups": [(g["groupName"], g["replicas"]) for g in obj["spec"]["workerGroupSpecs"]]}

    assert cluster_view(own_cluster) == cluster_view(real_cluster)
    real_pods = shaped(owned_by(cluster, real_cluster))
    assert sorted(real_pods) == [f"{name}-head#0", f"{name}-workers-worker#0", f"{name}-workers-worker#1"]
    assert_same_pods(real_pods, shaped([o for o in objects if o["kind"] == "Pod"]))
