"""Embedded KubeRay controller: the pods of a RayCluster, and the RayCluster a RayJob or RayService runs.

* RayCluster: a head pod ``<cluster>-head-<suffix>`` and, per worker group that is not suspended,
  ``replicas × numOfHosts`` pods ``<cluster>-<group>-worker-<suffix>`` (``replicas`` clamped to
  ``[minReplicas, maxReplicas]``), all owned by the RayCluster and labelled ``ray.io/cluster``,
  ``ray.io/node-type`` (``head`` / ``worker``), ``ray.io/group`` (``headgroup`` / the group name),
  ``ray.io/identifier`` and ``ray.io/is-ray-node: "yes"``; ``spec.suspend: true`` creates none. With
  ``enableInTreeAutoscaling`` the head pod also runs the autoscaler sidecar (its resources count).
* RayJob: the RayCluster ``<rayjob>-<suffix>`` (the name ``status.rayClusterName`` gives, when it
  gives one) from ``spec.rayClusterSpec``, owned by the RayJob, carrying the RayJob's labels and
  annotations plus ``ray.io/originated-from-cr-name`` / ``ray.io/originated-from-crd``, and its pods. A
  RayJob with ``clusterSelector`` runs on an existing cluster and creates nothing; a suspended one neither.
  The submitter Job KubeRay starts once the cluster is ready is not created.
* RayService: likewise from ``spec.rayClusterConfig`` (the active cluster's name when the status gives one).

As KubeRay v1.5.0 makes them (checked against the real operator in ``tests/operators/test_embedded.py``): the
Ray container (the first) gets the ``metrics`` port 8080 when it has none of that name, the head the annotation
``ray.io/ft-enabled`` (``true`` with GCS fault tolerance), and each worker the ``wait-gcs-ready`` init
container (the Ray image; 200m CPU and 256Mi memory asked and limited). KubeRay's environment variables,
volumes and head Service are not modelled, nor the operator's ``--batch-scheduler=kai-scheduler`` option (with
it, KubeRay sets ``schedulerName`` and copies the RayCluster's queue label onto the pods).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaisched.cluster.workloads.base import ControllerFn, Emit, Parent, count, get, suffix
from kaisched.cluster.workloads.others import valid_template
from kaisched.k8s.objects import Workload

RAY_GROUP = "ray.io"
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
IDENTIFIER_LABEL = "ray.io/identifier"
IS_RAY_NODE_LABEL = "ray.io/is-ray-node"
ORIGINATED_FROM_NAME_LABEL = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD_LABEL = "ray.io/originated-from-crd"
HEAD_GROUP = "headgroup"
MAX_REPLICAS = 2**31 - 1
AUTOSCALER_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
POD_PREFIX_MAX = 50  # KubeRay truncates the pod name prefix so that "-worker-" and a suffix fit in 63
METRICS_PORT = {"name": "metrics", "containerPort": 8080}
FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"
WAIT_GCS_READY_RESOURCES = {"cpu": "200m", "memory": "256Mi"}


def _pod_prefix(prefix: str) -> str:
    return prefix[:POD_PREFIX_MAX].lower()


def _node_labels(cluster: str, node_type: str, group: str) -> dict[str, str]:
    return {
        CLUSTER_LABEL: cluster,
        NODE_TYPE_LABEL: node_type,
        GROUP_LABEL: group,
        IDENTIFIER_LABEL: f"{cluster}-{node_type}",
        IS_RAY_NODE_LABEL: "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }


class _Group:
    __slots__ = ("name", "pods", "template")

    def __init__(self, name: str, pods: int, template: Mapping[str, Any]) -> None:
        self.name, self.pods, self.template = name, pods, template


def _worker_groups(emit: Emit, spec: Mapping[str, Any], prefix: str) -> list[_Group] | None:
    """The worker groups and how many pods each runs (None when the spec is invalid: errors emitted)."""
    groups = spec.get("workerGroupSpecs")
    if groups is None:
        return []
    if not isinstance(groups, list):
        emit.error(f"{prefix}.workerGroupSpecs", "must be a list of worker groups")
        return None
    out: list[_Group] = []
    names: set[str] = {HEAD_GROUP}
    pods = 1  # the head
    for i, group in enumerate(groups):
        field = f"{prefix}.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            emit.error(field, "must be a worker group (a mapping)")
            return None
        replicas = count(emit, group.get("replicas"), f"{field}.replicas", -1)
        min_replicas = count(emit, group.get("minReplicas"), f"{field}.minReplicas", 0)
        max_replicas = count(emit, group.get("maxReplicas"), f"{field}.maxReplicas", MAX_REPLICAS)
        hosts = count(emit, group.get("numOfHosts"), f"{field}.numOfHosts", 1)
        if replicas is None or min_replicas is None or max_replicas is None or hosts is None:
            return None
        if hosts < 1:
            emit.error(f"{field}.numOfHosts", f"must be >= 1, got {hosts}")
            return None
        if min_replicas > max_replicas:
            emit.error(f"{field}.minReplicas", f"must not exceed maxReplicas ({min_replicas} > {max_replicas})")
            return None
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            emit.error(f"{field}.groupName", "a worker group needs a name")
            return None
        if name in names:
            emit.error(f"{field}.groupName", f"duplicate Ray node group name '{name}'")
            return None
        names.add(name)
        template = group.get("template")
        if not isinstance(template, Mapping):
            emit.error(f"{field}.template", "a worker group needs a pod template")
            return None
        if not valid_template(emit, template, f"{field}.template"):
            return None
        if group.get("suspend") is True or group.get("suspended") is True:
            continue
        # KubeRay's desired replicas: unset or below minReplicas -> minReplicas; above maxReplicas -> max
        desired = min_replicas if replicas < 0 or replicas < min_replicas else min(replicas, max_replicas)
        which = "minReplicas" if replicas < min_replicas else "maxReplicas" if replicas > max_replicas else "replicas"
        shown = f"{desired} replicas of {hosts:,} hosts" if hosts > 1 else desired
        if not emit.expect(desired * hosts, f"{field}.{which}", shown, before=pods):
            return None
        pods += desired * hosts
        out.append(_Group(name, desired * hosts, template))
    return out


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _with_autoscaler(head: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The head template with KubeRay's in-tree autoscaler sidecar (default 500m CPU, 512Mi memory)."""
    spec = dict(_mapping(head.get("spec")))
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    image = options.get("image") or (containers[0].get("image") if containers else None) or "rayproject/ray"
    resources = options.get("resources") or {"limits": dict(AUTOSCALER_RESOURCES),
                                             "requests": dict(AUTOSCALER_RESOURCES)}
    spec["containers"] = [*containers, {"name": "autoscaler", "image": image, "resources": resources}]
    return {**head, "spec": spec}


def _ray_node_template(template: Mapping[str, Any], *, head: bool, ft_enabled: bool) -> dict[str, Any]:
    """The pod template KubeRay makes of a group's: the metrics port on the Ray container; the head's
    ``ray.io/ft-enabled`` annotation; a worker's ``wait-gcs-ready`` init container."""
    spec = dict(_mapping(template.get("spec")))
    containers = list(spec.get("containers") or [])
    if containers and isinstance(containers[0], Mapping):
        ray = dict(containers[0])
        ports = [p for p in ray.get("ports") or [] if isinstance(p, Mapping)]
        if not any(p.get("name") == METRICS_PORT["name"] for p in ports):
            ray["ports"] = [*ports, dict(METRICS_PORT)]
        containers[0] = ray
        spec["containers"] = containers
        if not head:
            init = {"name": "wait-gcs-ready", "image": ray.get("image"),
                    "resources": {"limits": dict(WAIT_GCS_READY_RESOURCES),
                                  "requests": dict(WAIT_GCS_READY_RESOURCES)}}
            if ray.get("imagePullPolicy"):
                init["imagePullPolicy"] = ray["imagePullPolicy"]
            spec["initContainers"] = [*(spec.get("initContainers") or []), init]
    out = {**template, "spec": spec}
    if head:
        meta = dict(_mapping(template.get("metadata")))
        meta["annotations"] = {**_mapping(meta.get("annotations")), FT_ENABLED_ANNOTATION: str(ft_enabled).lower()}
        out["metadata"] = meta
    return out


def _ft_enabled(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    """GCS fault tolerance: ``spec.gcsFaultToleranceOptions`` set, or the cluster annotated ``ray.io/ft-enabled:
    "true"``."""
    return isinstance(spec.get("gcsFaultToleranceOptions"), Mapping) or \
        str(annotations.get(FT_ENABLED_ANNOTATION, "")).lower() == "true"


def emit_ray_cluster_pods(emit: Emit, spec: Mapping[str, Any], cluster: str, parent: Parent | None,
                          prefix: str, annotations: Mapping[str, str] | None = None) -> None:
    """The pods KubeRay runs for a RayCluster spec, owned by ``parent`` (the RayCluster)."""
    if spec.get("suspend") is True:
        return
    head = get(spec, "headGroupSpec", "template")
    if not isinstance(head, Mapping):
        emit.error(f"{prefix}.headGroupSpec.template", "a RayCluster needs a head pod template")
        return
    if not valid_template(emit, head, f"{prefix}.headGroupSpec.template"):
        return
    groups = _worker_groups(emit, spec, prefix)
    if groups is None:
        return
    seed = parent.uid if parent is not None else emit.parent.uid
    if spec.get("enableInTreeAutoscaling") is True:
        head = _with_autoscaler(head, _mapping(spec.get("autoscalerOptions")))
    head = _ray_node_template(head, head=True, ft_enabled=_ft_enabled(spec, annotations or {}))
    emit.pod(f"{_pod_prefix(cluster)}-head-{suffix(f'{seed}/head')}", head, parent=parent,
             labels=_node_labels(cluster, "head", HEAD_GROUP))
    for group in groups:
        template = _ray_node_template(group.template, head=False, ft_enabled=False)
        for i in range(group.pods):
            name = f"{_pod_prefix(f'{cluster}-{group.name}')}-worker-{suffix(f'{seed}/{group.name}/{i}')}"
            emit.pod(name, template, parent=parent, labels=_node_labels(cluster, "worker", group.name))


def run_ray_cluster(w: Workload, emit: Emit) -> None:
    emit_ray_cluster_pods(emit, w.spec, w.meta.name, None, "spec", w.meta.annotations)


def _run_owned_cluster(w: Workload, emit: Emit, spec_field: str, crd: str, status_name: object) -> None:
    spec = w.spec.get(spec_field)
    if not isinstance(spec, Mapping):
        emit.error(f"spec.{spec_field}", f"a {crd} needs the RayCluster spec it runs (spec.{spec_field})")
        return
    meta = w.meta
    name = status_name if isinstance(status_name, str) and status_name else \
        f"{meta.name}-{suffix(f'{emit.parent.uid}/raycluster')}"
    labels = {**meta.labels, ORIGINATED_FROM_NAME_LABEL: meta.name, ORIGINATED_FROM_CRD_LABEL: crd}
    before = len(emit.errors)
    _worker_groups(emit, spec, f"spec.{spec_field}")  # validate before creating anything
    if len(emit.errors) > before:
        return
    cluster = emit.child(w.api_version, "RayCluster", name, spec, labels=labels, annotations=meta.annotations)
    emit_ray_cluster_pods(emit, spec, name, cluster, f"spec.{spec_field}", meta.annotations)


def run_ray_job(w: Workload, emit: Emit) -> None:
    spec = w.spec
    if spec.get("suspend") is True:
        return
    selector = spec.get("clusterSelector")
    if isinstance(selector, Mapping) and selector:
        return  # runs on an existing RayCluster
    _run_owned_cluster(w, emit, "rayClusterSpec", "RayJob", get(w.status, "rayClusterName"))


def run_ray_service(w: Workload, emit: Emit) -> None:
    name = get(w.status, "activeServiceStatus", "rayClusterName") or \
        get(w.status, "pendingServiceStatus", "rayClusterName")
    _run_owned_cluster(w, emit, "rayClusterConfig", "RayService", name)


CONTROLLERS: dict[tuple[str, str], ControllerFn] = {
    (RAY_GROUP, "RayCluster"): run_ray_cluster,
    (RAY_GROUP, "RayJob"): run_ray_job,
    (RAY_GROUP, "RayService"): run_ray_service,
}
