"""Embedded controllers of the Kubeflow family of workloads: the pods their real controllers create.

* Training Operator (``kubeflow.org/v1`` TFJob, PyTorchJob, XGBoostJob, JAXJob, MPIJob): one pod per replica,
  ``<job>-<replica type, lowercase>-<index>`` (an MPIJob's launcher: ``<job>-launcher``), owned by the job,
  labelled ``training.kubeflow.org/operator-name`` (``<kind lowercase>-controller``), ``job-name``,
  ``replica-type`` (lowercase), ``replica-index`` and ``job-role: master`` on the master-role pod (PyTorch and
  XGBoost Master, TF Chief/Master or else Worker 0, JAX Worker 0, MPI Launcher).
* MPI Operator (``kubeflow.org/v2beta1`` MPIJob): workers ``<job>-worker-<i>`` owned by the job, labelled
  ``operator-name: mpi-operator``, ``job-name``, ``job-role: worker``, ``replica-index``; the launcher is a
  batch Job ``<job>-launcher`` whose pod is ``<job>-launcher-<suffix>`` (``job-role: launcher``), not created
  while ``launcherCreationPolicy: WaitForWorkersReady`` waits for the workers to be ready.
* Notebook controller (``kubeflow.org/v1beta1`` Notebook): a StatefulSet ``<notebook>`` with one pod
  ``<notebook>-0`` (none when the notebook carries ``kubeflow-resource-stopped``).
* Kubeflow Trainer (``trainer.kubeflow.org/v1alpha1`` TrainJob): a JobSet ``<trainjob>`` with one replicated
  job ``node`` of ``spec.trainer.numNodes`` pods (see :func:`trainjob`); the JobSet's Jobs and pods are made
  by the JobSet controller when one is registered.

Replica counts a manifest leaves out get the operators' defaults (1; an MPIJob's Worker: 0). A job with
``spec.runPolicy.suspend: true`` gets no pods, as with the real operators.

What the Training Operator (v1.8.1, checked against the real one in ``tests/operators/test_embedded.py``) adds to
the pod templates is added too, where the scheduler can see it: the kind's default restart policy for a replica
spec without one (PyTorchJob ``OnFailure``; TFJob, XGBoostJob, MPIJob ``Never``), the kind's default port on
its default container (``pytorchjob-port`` 23456, ``tfjob-port`` 2222, ``xgboostjob-port`` 9999), a
PyTorchJob worker's ``init-pytorch`` init container (when the job has a Master: 50m CPU and 10Mi asked), and
a v1 MPIJob launcher's ``kubectl-delivery`` init container (100m CPU, 512Mi memory and 5Gi ephemeral storage
asked: nodes need ``ephemeral-storage`` for the launcher to fit) and service account ``<job>-launcher``. The
environment variables, volumes and Services the operator also makes are not modelled.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kaisched.cluster.workloads.base import ControllerFn, Emit, Obj, Parent, count, get, suffix
from kaisched.k8s.objects import Workload

OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

DEFAULT_SCHEDULER = "kai-scheduler"
TRAINJOB_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NOTEBOOK_STOP_ANNOTATION = "kubeflow-resource-stopped"

MasterRole = Callable[[Mapping[str, Any], str, int], bool]


@dataclass(frozen=True, slots=True)
class Defaults:
    """What the Training Operator's defaulting gives one kind's replicas: restart policy, and the port it adds
    to the default container (the one of that name, else the first) when no port has the port's name."""

    restart_policy: str
    container: str = ""
    port_name: str = ""
    port: int = 0


PYTORCH_DEFAULTS = Defaults("OnFailure", "pytorch", "pytorchjob-port", 23456)
TF_DEFAULTS = Defaults("Never", "tensorflow", "tfjob-port", 2222)
XGBOOST_DEFAULTS = Defaults("Never", "xgboost", "xgboostjob-port", 9999)
MPI_DEFAULTS_V1 = Defaults("Never")
NO_DEFAULTS = Defaults("")
#: the init container the Training Operator gives a PyTorchJob's workers when the job has a Master (it waits
#: for the master's DNS name)
PYTORCH_INIT_IMAGE = "alpine:3.10"
PYTORCH_INIT_RESOURCES = {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}}
#: the init container of a Training Operator MPIJob's launcher (copies kubectl for mpirun's remote shell)
MPI_KUBECTL_DELIVERY_IMAGE = "kubeflow/kubectl-delivery:latest"
MPI_KUBECTL_DELIVERY_RESOURCES = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}


# ------------------------------------------------------------------------------------- shared checks
def _replica_specs(w: Workload, emit: Emit, spec_field: str, allowed: Sequence[str],
                   required: Sequence[str], defaults: Mapping[str, int]) -> dict[str, tuple[Mapping[str, Any], int]]:
    """The job's replica specs with their counts, in ``allowed`` order; problems reported on ``emit``."""
    specs = w.spec.get(spec_field)
    path = f"spec.{spec_field}"
    if specs is None or (isinstance(specs, Mapping) and not specs):
        emit.error(path, f"the job has no replica specs; expected at least one of {', '.join(allowed)}")
        return {}
    if not isinstance(specs, Mapping):
        emit.error(path, f"must be a mapping of replica type to replica spec, got {type(specs).__name__}")
        return {}
    out: dict[str, tuple[Mapping[str, Any], int]] = {}
    for rtype in specs:
        if rtype not in allowed:
            emit.error(f"{path}.{rtype}", f"unknown replica type {rtype!r} (expected one of {', '.join(allowed)})")
    for rtype in required:
        if rtype not in specs:
            emit.error(f"{path}.{rtype}", f"the job needs a {rtype} replica spec")
    for rtype in allowed:
        rspec = specs.get(rtype)
        if rtype not in specs:
            continue
        if not isinstance(rspec, Mapping):
            emit.error(f"{path}.{rtype}", "must be a replica spec (an object)")
            continue
        n = count(emit, rspec.get("replicas"), f"{path}.{rtype}.replicas", defaults.get(rtype, 1))
        if not _valid_template(emit, f"{path}.{rtype}.template", rspec.get("template")):
            continue
        if n is not None:
            out[rtype] = (rspec, n)
    return out


def _expect_replicas(emit: Emit, spec_field: str, specs: Mapping[str, tuple[Mapping[str, Any], int]]) -> bool:
    """The replica specs' pods, one type after the other, against the pod limit (False after an error)."""
    before = 0
    for rtype, (_, n) in specs.items():
        if not emit.expect(n, f"spec.{spec_field}.{rtype}.replicas", before=before):
            return False
        before += n
    return True


def _valid_template(emit: Emit, path: str, template: object) -> bool:
    """A pod template the controller can copy: a mapping with at least one container, its metadata's labels
    and annotations mappings."""
    if not isinstance(template, Mapping):
        emit.error(path, "the replica needs a pod template (an object)")
        return False
    ok = True
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        emit.error(f"{path}.metadata", "must be an object")
        ok = False
    for part in ("labels", "annotations"):
        if isinstance(meta, Mapping) and meta.get(part) is not None and not isinstance(meta.get(part), Mapping):
            emit.error(f"{path}.metadata.{part}", "must be a mapping of strings")
            ok = False
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list) or not containers:
        emit.error(f"{path}.spec.containers", "the pod template needs at least one container")
        ok = False
    return ok


def _single(emit: Emit, spec_field: str, specs: Mapping[str, tuple[Mapping[str, Any], int]], types: Sequence[str],
            exact: bool) -> None:
    """One replica in total for these replica types when any is given (a job has one master): at most one,
    or exactly one when ``exact``."""
    present = [t for t in types if t in specs]
    total = sum(specs[t][1] for t in present)
    if present and (total > 1 or (exact and total != 1)):
        emit.error(f"spec.{spec_field}.{present[0]}.replicas",
                   f"there must be {'exactly' if exact else 'at most'} 1 {'/'.join(present)} replica, got {total}")


def _template(rspec: Mapping[str, Any], defaults: Defaults = NO_DEFAULTS) -> Obj:
    """The replica's pod template with the replica's restart policy (the kind's default when it has none;
    ``ExitCode`` -> ``Never``) and the kind's default port."""
    template = copy.deepcopy(dict(rspec.get("template") or {}))
    spec = dict(template.get("spec") or {})
    policy = rspec.get("restartPolicy")
    if not (isinstance(policy, str) and policy):
        policy = defaults.restart_policy
    if policy:
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    containers = spec.get("containers")
    if defaults.port_name and isinstance(containers, list) and containers:
        index = next((i for i, c in enumerate(containers)
                      if isinstance(c, Mapping) and c.get("name") == defaults.container), 0)
        container = dict(containers[index]) if isinstance(containers[index], Mapping) else {}
        ports = [p for p in container.get("ports") or [] if isinstance(p, Mapping)]
        if not any(p.get("name") == defaults.port_name for p in ports):
            container["ports"] = [*ports, {"name": defaults.port_name, "containerPort": defaults.port}]
            spec["containers"] = [*containers[:index], container, *containers[index + 1:]]
    template["spec"] = spec
    return template


def _with_init_container(template: Obj, container: Obj) -> Obj:
    spec = template["spec"]
    spec["initContainers"] = [*(spec.get("initContainers") or []), container]
    return template


def _suspended(w: Workload) -> bool:
    return get(w.spec, "runPolicy", "suspend") is True


# ------------------------------------------------------------------------------------ Training Operator
def _training_operator(spec_field: str, allowed: Sequence[str], required: Sequence[str], master_role: MasterRole,
                       single: Sequence[str] = (), exact: bool = True, defaults: Defaults = NO_DEFAULTS,
                       init: Callable[[Workload, str, Obj], Obj] | None = None) -> ControllerFn:
    """The Training Operator's controller for one kind: ``single`` names the master replica types (one
    replica in total: exactly, or at most unless ``exact``); ``init`` adds the init containers the operator
    gives a replica type's pods."""

    def controller(w: Workload, emit: Emit) -> None:
        specs = _replica_specs(w, emit, spec_field, allowed, required, {})
        _single(emit, spec_field, specs, single, exact)
        if emit.errors or _suspended(w) or not _expect_replicas(emit, spec_field, specs):
            return
        name = w.meta.name
        operator = f"{w.kind.lower()}-controller"
        for rtype, (rspec, replicas) in specs.items():
            rt = rtype.lower()
            template = _template(rspec, defaults)
            if init is not None:
                template = init(w, rtype, template)
            for index in range(replicas):
                labels = {OPERATOR_NAME_LABEL: operator, JOB_NAME_LABEL: name, REPLICA_TYPE_LABEL: rt,
                          REPLICA_INDEX_LABEL: str(index)}
                if master_role(w.spec.get(spec_field) or {}, rtype, index):
                    labels[JOB_ROLE_LABEL] = "master"
                emit.pod(f"{name}-{rt}-{index}", template, labels=labels)

    return controller


def _tf_master(specs: Mapping[str, Any], rtype: str, index: int) -> bool:
    if "Chief" in specs or "Master" in specs:
        return rtype in ("Chief", "Master")
    return rtype == "Worker" and index == 0


def _pytorch_init(w: Workload, rtype: str, template: Obj) -> Obj:
    """A worker of a job with a Master waits for the master's name to resolve (``init-pytorch``)."""
    specs = w.spec.get("pytorchReplicaSpecs")
    if rtype != "Worker" or not isinstance(specs, Mapping) or "Master" not in specs:
        return template
    master = f"{w.meta.name}-master-0"
    command = ["sh", "-c", f"err=1;for i in $(seq 100); do if nslookup {master}; then err=0 && break; fi;"
               "echo waiting for master; sleep 2; done; exit $err"]
    return _with_init_container(template, {"name": "init-pytorch", "image": PYTORCH_INIT_IMAGE,
                                           "imagePullPolicy": "IfNotPresent", "command": command,
                                           "resources": copy.deepcopy(PYTORCH_INIT_RESOURCES)})


tfjob = _training_operator("tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator"), (), _tf_master,
                           ("Chief", "Master"), exact=False, defaults=TF_DEFAULTS)
pytorchjob = _training_operator("pytorchReplicaSpecs", ("Master", "Worker"), (),
                                lambda _s, rtype, _i: rtype == "Master", ("Master",), defaults=PYTORCH_DEFAULTS,
                                init=_pytorch_init)
xgboostjob = _training_operator("xgbReplicaSpecs", ("Master", "Worker"), ("Master",),
                                lambda _s, rtype, _i: rtype == "Master", ("Master",), defaults=XGBOOST_DEFAULTS)
jaxjob = _training_operator("jaxReplicaSpecs", ("Worker",), ("Worker",), lambda _s, _rtype, index: index == 0)


# -------------------------------------------------------------------------------------------- MPIJob
MPI_TYPES = ("Launcher", "Worker")
MPI_DEFAULTS = {"Launcher": 1, "Worker": 0}


def mpijob(w: Workload, emit: Emit) -> None:
    """``kubeflow.org/v1`` (Training Operator) or ``v2beta1`` (MPI Operator v2) MPIJob."""
    specs = _replica_specs(w, emit, "mpiReplicaSpecs", MPI_TYPES, ("Launcher",), MPI_DEFAULTS)
    launcher = specs.get("Launcher")
    if launcher is not None and launcher[1] != 1:
        emit.error("spec.mpiReplicaSpecs.Launcher.replicas", f"there must be exactly 1 Launcher replica, "
                   f"got {launcher[1]}")
    if emit.errors or _suspended(w) or not _expect_replicas(emit, "mpiReplicaSpecs", specs):
        return
    if w.api_version == "kubeflow.org/v1":
        _mpijob_v1(w, emit, specs)
    else:
        _mpijob_v2(w, emit, specs)


def _mpijob_v1(w: Workload, emit: Emit, specs: Mapping[str, tuple[Mapping[str, Any], int]]) -> None:
    name = w.meta.name
    generic = {OPERATOR_NAME_LABEL: "mpijob-controller", JOB_NAME_LABEL: name}
    if "Worker" in specs:
        rspec, replicas = specs["Worker"]
        template = _template(rspec, MPI_DEFAULTS_V1)
        for index in range(replicas):
            emit.pod(f"{name}-worker-{index}", template,
                     labels={**generic, REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: str(index)})
    launcher = _template(specs["Launcher"][0], MPI_DEFAULTS_V1)
    if not launcher["spec"].get("serviceAccountName"):
        launcher["spec"]["serviceAccountName"] = f"{name}-launcher"
    _with_init_container(launcher, {
        "name": "kubectl-delivery", "image": MPI_KUBECTL_DELIVERY_IMAGE, "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": dict(MPI_KUBECTL_DELIVERY_RESOURCES),
                      "requests": dict(MPI_KUBECTL_DELIVERY_RESOURCES)}})
    emit.pod(f"{name}-launcher", launcher, labels={**generic, REPLICA_TYPE_LABEL: "launcher", JOB_ROLE_LABEL: "master"})


def _mpijob_v2(w: Workload, emit: Emit, specs: Mapping[str, tuple[Mapping[str, Any], int]]) -> None:
    name = w.meta.name
    workers_service = f"{name}-worker"

    def labels(role: str) -> dict[str, str]:
        return {OPERATOR_NAME_LABEL: "mpi-operator", JOB_NAME_LABEL: name, JOB_ROLE_LABEL: role}

    if "Worker" in specs:
        rspec, replicas = specs["Worker"]
        template = _template(rspec)
        template["spec"]["subdomain"] = workers_service
        for index in range(replicas):
            pod_name = f"{name}-worker-{index}"
            emit.pod(pod_name, template, labels={**labels("worker"), REPLICA_INDEX_LABEL: str(index)},
                     hostname=pod_name)
    if w.spec.get("launcherCreationPolicy") == "WaitForWorkersReady":
        return  # the launcher is created once every worker is ready: not yet
    template = _template(specs["Launcher"][0])
    meta = dict(template.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels("launcher")}
    template["metadata"] = meta
    template["spec"]["hostname"] = f"{name}-launcher"
    template["spec"]["subdomain"] = workers_service
    job_spec: Obj = {"template": template}
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = get(w.spec, "runPolicy", key)
        if value is not None:
            job_spec[key] = value
    job = emit.child("batch/v1", "Job", f"{name}-launcher", job_spec, labels={"app": name})
    _job_pod(emit, job, template)


def _job_pod(emit: Emit, job: Parent, template: Mapping[str, Any]) -> Obj:
    """The one pod of a non-indexed batch Job: ``<job>-<suffix>`` with the Job controller's labels."""
    job_labels = {"batch.kubernetes.io/controller-uid": job.uid, "batch.kubernetes.io/job-name": job.name,
                  "controller-uid": job.uid, "job-name": job.name}
    return emit.pod(f"{job.name}-{suffix(f'{job.uid}/0')}", template, parent=job, labels=job_labels)


# ------------------------------------------------------------------------------------------ Notebook
def notebook(w: Workload, emit: Emit) -> None:
    """A StatefulSet ``<notebook>`` (one replica, none while stopped) and its pod ``<notebook>-0``, labelled
    ``statefulset``/``notebook-name`` plus the notebook's own labels (annotations are copied too)."""
    name = w.meta.name
    pod_spec = get(w.spec, "template", "spec")
    if not isinstance(pod_spec, Mapping):
        emit.error("spec.template.spec", "the notebook needs a pod spec")
        return
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], Mapping):
        emit.error("spec.template.spec.containers", "the notebook's pod spec needs at least one container")
        return
    spec = copy.deepcopy(dict(pod_spec))
    first = dict(spec["containers"][0])
    first.setdefault("workingDir", "/home/jovyan")
    if not first.get("ports"):
        first["ports"] = [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}]
    env = [e for e in first.get("env") or [] if not (isinstance(e, Mapping) and e.get("name") == "NB_PREFIX")]
    first["env"] = [*env, {"name": "NB_PREFIX", "value": f"/notebook/{w.meta.namespace}/{name}"}]
    spec["containers"] = [first, *spec["containers"][1:]]
    labels = {"statefulset": name, "notebook-name": name, **w.meta.labels}
    annotations = {k: v for k, v in w.meta.annotations.items() if not k.startswith("kubectl.kubernetes.io/")}
    template: Obj = {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}
    replicas = 0 if NOTEBOOK_STOP_ANNOTATION in w.meta.annotations else 1
    sts = emit.child("apps/v1", "StatefulSet", name,
                     {"replicas": replicas, "selector": {"matchLabels": {"statefulset": name}}, "template": template})
    revision = f"{name}-{suffix(sts.uid, 10)}"
    for index in range(replicas):
        pod_name = f"{name}-{index}"
        emit.pod(pod_name, template, parent=sts, hostname=pod_name,
                 labels={"controller-revision-hash": revision, "statefulset.kubernetes.io/pod-name": pod_name,
                         "apps.kubernetes.io/pod-index": str(index)})


# ------------------------------------------------------------------------------------------ TrainJob
def trainjob(w: Workload, emit: Emit) -> None:
    """The JobSet ``<trainjob>`` Kubeflow Trainer makes from the TrainJob and its runtime.

    Simplification: the runtime (``spec.runtimeRef``, a ClusterTrainingRuntime or TrainingRuntime) is not an
    input object kaisched reads, so the JobSet is built from ``spec.trainer`` alone, as the usual runtimes
    (``torch-distributed`` and the like) shape it: one replicated job ``node`` (1 replica, an Indexed Job with
    parallelism = completions = ``numNodes``, default 1) whose pod has one container ``node`` with the
    trainer's image, command, args, env and ``resourcesPerNode``, and ``schedulerName: kai-scheduler`` (the
    runtime's pod template is assumed to name KAI). ``spec.podTemplateOverrides`` (or the older
    ``podSpecOverrides``) aimed at ``node`` add their metadata, node selector, affinity, tolerations, service
    account, volumes and scheduling gates; ``spec.labels`` / ``spec.annotations`` go on the JobSet;
    ``spec.suspend`` suspends it. Dataset/model initializers are not modelled.

    The JobSet's Jobs and pods are made by the JobSet controller when one is registered
    (``("jobset.x-k8s.io", "JobSet")`` in the embedded controllers), in the same pass.
    """
    spec = w.spec
    runtime = get(spec, "runtimeRef", "name")
    if not isinstance(runtime, str) or not runtime:
        emit.error("spec.runtimeRef.name", "a TrainJob must reference a training runtime")
    trainer = spec.get("trainer")
    if trainer is not None and not isinstance(trainer, Mapping):
        emit.error("spec.trainer", f"must be an object, got {type(trainer).__name__}")
        return
    trainer = trainer or {}
    nodes = count(emit, trainer.get("numNodes"), "spec.trainer.numNodes", 1)
    if nodes == 0:
        emit.error("spec.trainer.numNodes", "must be >= 1, got 0")
    if emit.errors or nodes is None or not emit.expect(nodes, "spec.trainer.numNodes"):
        return
    container: Obj = {"name": "node"}
    for key in ("image", "command", "args", "env"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    if isinstance(trainer.get("resourcesPerNode"), Mapping):
        container["resources"] = copy.deepcopy(dict(trainer["resourcesPerNode"]))
    pod_spec: Obj = {"schedulerName": DEFAULT_SCHEDULER, "restartPolicy": "OnFailure", "containers": [container]}
    pod_meta: Obj = {}
    _apply_overrides(spec, pod_meta, pod_spec)
    job_template: Obj = {
        "metadata": {"labels": {TRAINJOB_ANCESTOR_LABEL: "trainer"}},
        "spec": {"parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0,
                 "template": {"metadata": pod_meta, "spec": pod_spec} if pod_meta else {"spec": pod_spec}},
    }
    jobset_spec: Obj = {"replicatedJobs": [{"name": "node", "replicas": 1, "template": job_template}]}
    if spec.get("suspend") is True:
        jobset_spec["suspend"] = True
    labels = spec.get("labels") if isinstance(spec.get("labels"), Mapping) else None
    annotations = spec.get("annotations") if isinstance(spec.get("annotations"), Mapping) else None
    emit.child("jobset.x-k8s.io/v1alpha2", "JobSet", w.meta.name, jobset_spec, labels=labels,
               annotations=annotations)


_OVERRIDE_FIELDS = ("serviceAccountName", "nodeSelector", "affinity", "tolerations", "volumes", "schedulingGates",
                    "imagePullSecrets")


def _apply_overrides(spec: Mapping[str, Any], pod_meta: Obj, pod_spec: Obj) -> None:
    """``podTemplateOverrides`` (``{targetJobs, metadata, spec}``) and the older ``podSpecOverrides``
    (``{targetJobs, <fields>}``) that target the ``node`` job."""
    for key, nested in (("podSpecOverrides", False), ("podTemplateOverrides", True)):
        overrides = spec.get(key)
        if not isinstance(overrides, list):
            continue
        for override in overrides:
            if not isinstance(override, Mapping):
                continue
            targets = override.get("targetJobs")
            if not isinstance(targets, list) or not any(isinstance(t, Mapping) and t.get("name") == "node"
                                                        for t in targets):
                continue
            fields = override.get("spec") if nested else override
            if isinstance(fields, Mapping):
                for name in _OVERRIDE_FIELDS:
                    if fields.get(name) is not None:
                        pod_spec[name] = copy.deepcopy(fields[name])
            meta = override.get("metadata") if nested else None
            if isinstance(meta, Mapping):
                for part in ("labels", "annotations"):
                    if isinstance(meta.get(part), Mapping):
                        pod_meta[part] = {**pod_meta.get(part, {}), **meta[part]}


CONTROLLERS: dict[tuple[str, str], ControllerFn] = {
    ("kubeflow.org", "TFJob"): tfjob,
    ("kubeflow.org", "PyTorchJob"): pytorchjob,
    ("kubeflow.org", "XGBoostJob"): xgboostjob,
    ("kubeflow.org", "JAXJob"): jaxjob,
    ("kubeflow.org", "MPIJob"): mpijob,
    ("kubeflow.org", "Notebook"): notebook,
    ("trainer.kubeflow.org", "TrainJob"): trainjob,
}
