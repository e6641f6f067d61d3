"""Groupers of the Kubeflow family of workloads (spec 10.3): the Training Operator's distributed jobs
(TFJob, PyTorchJob, XGBoostJob, JAXJob, MPIJob v1 and v2beta1) and the Notebook.

A distributed job gets one PodGroup ``pg-<job>-<uid>`` whose minMember is
``spec.runPolicy.schedulingPolicy.minAvailable`` when set, else the sum of the replicas of all its replica
specs (each must be > 0). Replica counts a manifest leaves out take the value the operator's defaulting
gives them (1; an MPIJob's Worker 0), as the API server would have stored it.

A PyTorchJob also honours ``spec.elasticPolicy.minReplicas`` (overridden by ``minAvailable``) and gets the
subgroups ``master`` and ``worker``; with ``kai.scheduler/segment-size: S`` on the worker template (or the
pod) ``worker`` becomes a parent of ``worker-0``, ``worker-1``, ... of S pods each (the last one may be
smaller), a pod's segment being its ``training.kubeflow.org/replica-index`` // S. Those segments are exactly
what the snapshot's own segmentation (``kaisched.model.segments``) would make, so it leaves them alone: each
``worker-<k>`` pod set already holds at most S pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import SubGroup, TopologyConstraint
from kaisched.podgrouper.base import (
    BUILD,
    GrouperError,
    GroupFn,
    GroupRequest,
    Owner,
    PodGroupPlan,
    default_plan,
    error,
    int_field,
)

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

MAX_SEGMENTS = 10_000  # KAI's maxAllowedSegmentation
WAIT_FOR_WORKERS_READY = "WaitForWorkersReady"

# replica counts the operators' defaulting webhooks fill in when a replica spec has none
TRAINING_OPERATOR_DEFAULT_REPLICAS: Mapping[str, int] = {}  # every type: 1
MPI_DEFAULT_REPLICAS: Mapping[str, int] = {"Launcher": 1, "Worker": 0}


def _get(data: Mapping[str, Any], *path: str) -> Any:
    cur: Any = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def replica_specs(top: Owner, spec_field: str) -> Mapping[str, Any] | GrouperError:
    specs = top.spec.get(spec_field)
    if not isinstance(specs, Mapping) or not specs:
        return error(top, f"spec.{spec_field}", f"the job has no {spec_field}; it needs at least one replica spec")
    return specs


def replicas_of(top: Owner, spec_field: str, rtype: str, rspec: object,
                defaults: Mapping[str, int]) -> int | GrouperError:
    """The replica count of one replica spec (the operator's default when absent)."""
    path = f"spec.{spec_field}.{rtype}.replicas"
    if not isinstance(rspec, Mapping):
        return error(top, f"spec.{spec_field}.{rtype}", "must be a replica spec (an object)")
    raw = rspec.get("replicas")
    value = int_field(raw, defaults.get(rtype, 1))
    if value is None:
        return error(top, path, f"must be an integer, got {raw!r}")
    return value


def total_replicas(top: Owner, spec_field: str, mandatory: Sequence[str],
                   defaults: Mapping[str, int]) -> int | GrouperError:
    """Σ replicas of all replica specs; every spec must have > 0 replicas and the mandatory ones must exist
    (KAI's calcJobNumOfPods)."""
    specs = replica_specs(top, spec_field)
    if isinstance(specs, GrouperError):
        return specs
    for name in mandatory:
        if name not in specs:
            return error(top, f"spec.{spec_field}.{name}", f"the job has no {name} replica spec, which is required")
    total = 0
    for rtype in sorted(specs):
        n = replicas_of(top, spec_field, rtype, specs[rtype], defaults)
        if isinstance(n, GrouperError):
            return n
        if n <= 0:
            return error(top, f"spec.{spec_field}.{rtype}.replicas",
                         f"must be > 0 (got {n}): the job does not allow 0 {rtype} pods")
        total += n
    return total


def min_available(top: Owner) -> int | GrouperError | None:
    """``spec.runPolicy.schedulingPolicy.minAvailable``: None when unset."""
    raw = _get(top.spec, "runPolicy", "schedulingPolicy", "minAvailable")
    if raw is None:
        return None
    value = int_field(raw)
    if value is None or value < 0:
        return error(top, "spec.runPolicy.schedulingPolicy.minAvailable",
                     f"must be a non-negative integer, got {raw!r}")
    return value


def distributed_plan(req: GroupRequest, spec_field: str, mandatory: Sequence[str] = (),
                     defaults: Mapping[str, int] = TRAINING_OPERATOR_DEFAULT_REPLICAS) -> PodGroupPlan | GrouperError:
    """KAI's KubeflowDistributedGrouper: the default grouper with minMember = minAvailable, else Σ replicas."""
    top = req.top
    plan = default_plan(req)
    explicit = min_available(top)
    if isinstance(explicit, GrouperError):
        return explicit
    if explicit is not None:
        plan.min_member = explicit
        return plan
    total = total_replicas(top, spec_field, mandatory, defaults)
    if isinstance(total, GrouperError):
        return total
    plan.min_member = total
    return plan


# --------------------------------------------------------------------------------------------- kinds
def group_tfjob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    return distributed_plan(req, "tfReplicaSpecs")


def group_xgboostjob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    return distributed_plan(req, "xgbReplicaSpecs", ("Master", "Worker"))


def group_jaxjob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    return distributed_plan(req, "jaxReplicaSpecs", ("Worker",))


def group_notebook(req: GroupRequest) -> PodGroupPlan | GrouperError:
    return default_plan(req, default_priority=BUILD)


def group_mpijob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """As the other distributed jobs (Launcher and Worker required); with ``spec.launcherCreationPolicy:
    WaitForWorkersReady`` and no launcher pod yet, the launcher's replicas are not waited for."""
    plan = distributed_plan(req, "mpiReplicaSpecs", ("Launcher", "Worker"), MPI_DEFAULT_REPLICAS)
    if isinstance(plan, GrouperError):
        return plan
    top = req.top
    if top.spec.get("launcherCreationPolicy") == WAIT_FOR_WORKERS_READY and not _launcher_exists(req):
        specs = replica_specs(top, "mpiReplicaSpecs")
        if isinstance(specs, GrouperError):
            return specs
        if "Launcher" not in specs:
            return error(top, "spec.mpiReplicaSpecs.Launcher",
                         "the job has no Launcher replica spec, which is required")
        launcher = replicas_of(top, "mpiReplicaSpecs", "Launcher", specs["Launcher"], MPI_DEFAULT_REPLICAS)
        if isinstance(launcher, GrouperError):
            return launcher
        if launcher <= 0:
            return error(top, "spec.mpiReplicaSpecs.Launcher.replicas",
                         f"must be > 0 (got {launcher}): the job does not allow 0 Launcher pods")
        plan.min_member = max(plan.min_member - launcher, 0)
    return plan


def _is_launcher(labels: Mapping[str, str], job: str) -> bool:
    return labels.get(JOB_NAME_LABEL) == job and (
        labels.get(JOB_ROLE_LABEL) == "launcher" or labels.get(REPLICA_TYPE_LABEL) == "launcher")


def _launcher_exists(req: GroupRequest) -> bool:
    """Whether a (non-terminating) launcher pod of the MPIJob exists: pods labelled with the job's name and
    the launcher role (mpi-operator v2: ``job-role: launcher``; Training Operator v1: ``replica-type:
    launcher``), in the job's namespace, whoever owns them (v2's launcher pod belongs to a batch Job)."""
    top = req.top
    if _is_launcher(req.pod.meta.labels, top.name) and req.pod.meta.deletion_timestamp is None:
        return True
    for pods in req.ctx.pods_by_owner.values():
        for pod in pods:
            meta = pod.meta
            if meta.namespace == top.namespace and meta.deletion_timestamp is None and \
                    _is_launcher(meta.labels, top.name):
                return True
    return False


# ---------------------------------------------------------------------------------------- PyTorchJob
def group_pytorchjob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """The distributed grouper, then ``elasticPolicy.minReplicas``, then ``minAvailable``; subgroups
    ``master`` (its replicas) and ``worker`` (the rest), ``worker`` split into segments on request."""
    plan = distributed_plan(req, "pytorchReplicaSpecs")
    if isinstance(plan, GrouperError):
        return plan
    top = req.top
    raw_min = _get(top.spec, "elasticPolicy", "minReplicas")
    if raw_min is not None:
        elastic = int_field(raw_min)
        if elastic is None or elastic < 0:
            return error(top, "spec.elasticPolicy.minReplicas", f"must be a non-negative integer, got {raw_min!r}")
        plan.min_member = elastic
    explicit = min_available(top)
    if isinstance(explicit, GrouperError):
        return explicit
    if explicit is not None:
        plan.min_member = explicit
    specs = replica_specs(top, "pytorchReplicaSpecs")
    if isinstance(specs, GrouperError):
        return specs
    sub_groups = _pytorch_sub_groups(req, specs, plan.min_member)
    if isinstance(sub_groups, GrouperError):
        return sub_groups
    plan.sub_groups, plan.subgroup = sub_groups
    return plan


def _pytorch_sub_groups(req: GroupRequest, specs: Mapping[str, Any],
                        total_min: int) -> tuple[tuple[SubGroup, ...], str] | GrouperError:
    top, pod = req.top, req.pod
    field = "pytorchReplicaSpecs"
    pod_type = pod.meta.labels.get(REPLICA_TYPE_LABEL, "")
    out: list[SubGroup] = []
    leaf = ""
    master = 0
    if "Master" in specs:
        n = replicas_of(top, field, "Master", specs["Master"], TRAINING_OPERATOR_DEFAULT_REPLICAS)
        if isinstance(n, GrouperError):
            return n
        master = max(n, 0)
        if master > 0:
            out.append(SubGroup("master", master))
            if pod_type == "master":
                leaf = "master"
    if "Worker" not in specs:
        return tuple(out), leaf
    workers = replicas_of(top, field, "Worker", specs["Worker"], TRAINING_OPERATOR_DEFAULT_REPLICAS)
    if isinstance(workers, GrouperError):
        return workers
    worker_min = max(0, total_min - master)
    worker_spec = specs["Worker"]
    assert isinstance(worker_spec, Mapping)  # checked by replicas_of
    size = _segment_size(req, worker_spec)
    if isinstance(size, GrouperError):
        return size
    if size is None:
        out.append(SubGroup("worker", worker_min))
        return tuple(out), ("worker" if pod_type == "worker" else leaf)
    segments = -(-max(workers, 0) // size)
    if segments > MAX_SEGMENTS:
        return error(top, f"spec.{field}.Worker.template.metadata.annotations.{C.SEGMENT_SIZE_ANNOTATION}",
                     f"{segments} segments of {size} workers is more than the {MAX_SEGMENTS} allowed")
    if pod_type == "worker":
        index = _replica_index(req)
        if isinstance(index, GrouperError):
            return index
        leaf = f"worker-{index // size}"
    constraint = _segment_constraint(req, worker_spec)
    out.append(SubGroup("worker", worker_min))
    partial = workers % size
    for k in range(segments):
        out.append(SubGroup(f"worker-{k}", partial if partial and k == segments - 1 else size, parent="worker",
                            topology_constraint=constraint))
    return tuple(out), leaf


def _template_annotations(worker_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _get(worker_spec, "template", "metadata", "annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _worker_annotation(req: GroupRequest, worker_spec: Mapping[str, Any], key: str) -> str:
    """A worker annotation: on the pod first, then on the Worker template."""
    value = req.pod.meta.annotations.get(key, "")
    if value:
        return value
    raw = _template_annotations(worker_spec).get(key)
    return str(raw) if raw is not None else ""


def _segment_size(req: GroupRequest, worker_spec: Mapping[str, Any]) -> int | GrouperError | None:
    key = C.SEGMENT_SIZE_ANNOTATION
    on_pod = req.pod.meta.annotations.get(key, "")
    raw = on_pod or _template_annotations(worker_spec).get(key)
    if raw is None or raw == "":
        return None
    size = int_field(raw)
    if size is None or size <= 0:
        where = f"Pod {req.pod.meta.namespace}/{req.pod.meta.name} annotation" if on_pod else \
            "the Worker template's annotation"
        return error(req.top, f"spec.pytorchReplicaSpecs.Worker.template.metadata.annotations.{key}",
                     f"{where} {key} must be a positive integer, got {raw!r}")
    return size


def _replica_index(req: GroupRequest) -> int | GrouperError:
    pod = req.pod
    raw = pod.meta.labels.get(REPLICA_INDEX_LABEL)
    ref = f"pod {pod.meta.namespace}/{pod.meta.name}"
    if raw is None:
        return error(req.top, f"metadata.labels.{REPLICA_INDEX_LABEL}",
                     f"{ref} has no replica index label, needed to place it in a segment")
    index = int_field(raw)
    if index is None or index < 0:
        return error(req.top, f"metadata.labels.{REPLICA_INDEX_LABEL}",
                     f"{ref} has an invalid replica index {raw!r} (expected a non-negative integer)")
    return index


def _segment_constraint(req: GroupRequest, worker_spec: Mapping[str, Any]) -> TopologyConstraint | None:
    """Each segment's topology constraint: the topology named by the pod, the Worker template or the job
    (``kai.scheduler/topology``), the levels by ``kai.scheduler/segment-topology-*-placement``."""
    topology = _worker_annotation(req, worker_spec, C.TOPOLOGY_ANNOTATION) or \
        req.top.annotations.get(C.TOPOLOGY_ANNOTATION, "")
    if not topology:
        return None
    required = _worker_annotation(req, worker_spec, C.SEGMENT_TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION)
    preferred = _worker_annotation(req, worker_spec, C.SEGMENT_TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION)
    if not required and not preferred:
        return None
    return TopologyConstraint(topology, required, preferred)


GROUPERS: dict[tuple[str, str], GroupFn] = {
    ("kubeflow.org", "TFJob"): group_tfjob,
    ("kubeflow.org", "PyTorchJob"): group_pytorchjob,
    ("kubeflow.org", "XGBoostJob"): group_xgboostjob,
    ("kubeflow.org", "JAXJob"): group_jaxjob,
    ("kubeflow.org", "MPIJob"): group_mpijob,
    ("kubeflow.org", "Notebook"): group_notebook,
}
