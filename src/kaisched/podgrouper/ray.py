"""Groupers of the Ray family (spec 10.3): KubeRay's RayCluster, RayJob and RayService.

One PodGroup per Ray CR (the default grouper's ``pg-<cr>-<uid>`` on the top owner), sized from the
RayCluster the pods belong to: ``1 + Σ (minReplicas > 0 ? minReplicas : replicas) × numOfHosts`` over the
worker groups that are not suspended, with the subgroups ``headgroup`` (1) and one per worker group
(``groupName``, or ``worker-group-<i>``); each pod's leaf is its ``ray.io/group`` label. A RayJob's cluster
is named by ``status.rayClusterName``, a RayService's by ``status.activeServiceStatus.rayClusterName``
(else ``pendingServiceStatus``); when the status does not name one (the embedded controllers do not
write status), the RayCluster of the pod's owner chain is used, then the spec the CR embeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import SubGroup, TopologyConstraint
from kaisched.podgrouper.base import (
    GrouperError,
    GroupFn,
    GroupRequest,
    Owner,
    PodGroupPlan,
    default_plan,
    error,
)
from kaisched.podgrouper.others import find_workload

RAY_GROUP = "ray.io"
RAY_PRIORITY_LABEL = "ray.io/priority-class-name"
RAY_GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"

# where each Ray CR names its RayCluster, first match wins
CLUSTER_NAME_PATHS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "RayJob": (("status", "rayClusterName"),),
    "RayService": (("status", "activeServiceStatus", "rayClusterName"),
                   ("status", "pendingServiceStatus", "rayClusterName")),
}
# the RayCluster spec a RayJob / RayService embeds (the cluster its controller creates)
EMBEDDED_CLUSTER_SPEC: Mapping[str, str] = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}


class _ClusterSpec:
    """The RayCluster spec a PodGroup is sized from, and where to point errors about it."""

    __slots__ = ("owner", "prefix", "spec")

    def __init__(self, spec: Mapping[str, Any], owner: Owner, prefix: str) -> None:
        self.spec, self.owner, self.prefix = spec, owner, prefix

    def error(self, field: str, message: str) -> GrouperError:
        return error(self.owner, f"{self.prefix}.{field}", message)


def group_ray(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """RayCluster, RayJob and RayService (any ``ray.io`` version)."""
    cluster = _cluster(req)
    if isinstance(cluster, GrouperError):
        return cluster
    sized = _size(cluster)
    if isinstance(sized, GrouperError):
        return sized
    min_member, sub_groups = sized
    plan = default_plan(req)
    plan.min_member = min_member
    plan.sub_groups = sub_groups
    ray_priority = req.top.labels.get(RAY_PRIORITY_LABEL, "")
    if ray_priority and ray_priority in req.ctx.priority_classes:
        plan.priority_class_name = ray_priority
    group = req.pod.meta.labels.get(RAY_GROUP_LABEL, "")
    if not group:
        return error(req.top, f"pod {req.pod.meta.name}: metadata.labels.{RAY_GROUP_LABEL}",
                     "a Ray pod must name its node group (label ray.io/group)")
    if all(sg.name != group for sg in sub_groups):
        return error(cluster.owner, f"{cluster.prefix}.workerGroupSpecs",
                     f"the pod {req.pod.meta.name} belongs to the Ray node group '{group}', which the cluster "
                     "does not run (no such group, or a suspended / zero-replica one)")
    plan.subgroup = group
    return plan


def _cluster(req: GroupRequest) -> _ClusterSpec | GrouperError:
    """The RayCluster spec of the top owner: itself for a RayCluster, else the cluster its status names,
    else the RayCluster of the pod's owner chain, else the spec it embeds."""
    top = req.top
    if top.kind == "RayCluster":
        return _ClusterSpec(top.spec, top, "spec")
    chain_clusters = [o for o in req.chain[:-1] if o.kind == "RayCluster" and o.group == RAY_GROUP]
    for path in CLUSTER_NAME_PATHS.get(top.kind, ()):
        name = _nested(top.status, path)
        if not isinstance(name, str) or not name:
            continue
        for owner in chain_clusters:
            if owner.name == name and owner.workload is not None:
                return _ClusterSpec(owner.spec, owner, "spec")
        found = find_workload(req.ctx, top.namespace, "RayCluster", name)
        if found is not None:
            owner = Owner.of_workload(found)
            return _ClusterSpec(owner.spec, owner, "spec")
        break  # named, but not given: fall back to the pod's own cluster
    for owner in chain_clusters:
        if owner.workload is not None:
            return _ClusterSpec(owner.spec, owner, "spec")
    embedded_field = EMBEDDED_CLUSTER_SPEC.get(top.kind)
    embedded = top.spec.get(embedded_field) if embedded_field else None
    if isinstance(embedded, Mapping):
        return _ClusterSpec(embedded, top, f"spec.{embedded_field}")
    paths = CLUSTER_NAME_PATHS.get(top.kind, ())
    field = ".".join(paths[0]) if paths else "spec"
    return error(top, field, f"cannot find the RayCluster of {top.kind} {top.namespace}/{top.name}: its status "
                 "names none that is given and its RayCluster object is not in the input")


def _nested(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _int(cluster: _ClusterSpec, data: Mapping[str, Any], key: str, field: str, default: int) -> int | GrouperError:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        return cluster.error(field, f"must be an integer, got {value!r}")
    return value


def _size(cluster: _ClusterSpec) -> tuple[int, tuple[SubGroup, ...]] | GrouperError:
    """minMember and subgroups (KAI's calcJobNumOfPodsAndSubGroups, after KubeRay's Volcano PodGroups)."""
    spec = cluster.spec
    head = spec.get("headGroupSpec")
    head_topology = _template_topology(cluster, head if isinstance(head, Mapping) else {}, "headGroupSpec")
    if isinstance(head_topology, GrouperError):
        return head_topology
    sub_groups = [SubGroup(HEAD_GROUP, 1, None, head_topology)]
    total = 1
    groups = spec.get("workerGroupSpecs")
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        return cluster.error("workerGroupSpecs", "must be a list of worker groups")
    seen: set[str] = {HEAD_GROUP}
    for i, group in enumerate(groups):
        field = f"workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            return cluster.error(field, "must be a worker group (a mapping)")
        if group.get("suspend") is True or group.get("suspended") is True:
            continue
        replicas = _int(cluster, group, "replicas", f"{field}.replicas", 0)
        if isinstance(replicas, GrouperError):
            return replicas
        min_replicas = _int(cluster, group, "minReplicas", f"{field}.minReplicas", 0)
        if isinstance(min_replicas, GrouperError):
            return min_replicas
        hosts = _int(cluster, group, "numOfHosts", f"{field}.numOfHosts", 1)
        if isinstance(hosts, GrouperError):
            return hosts
        if replicas < 0:
            return cluster.error(f"{field}.replicas", f"must be >= 0, got {replicas}")
        if min_replicas < 0:
            return cluster.error(f"{field}.minReplicas", f"must be >= 0, got {min_replicas}")
        if hosts < 1:
            return cluster.error(f"{field}.numOfHosts", f"must be >= 1, got {hosts}")
        if min_replicas > replicas:
            return cluster.error(f"{field}.replicas", f"the worker group's replicas ({replicas}) can't be less "
                                 f"than its minReplicas ({min_replicas})")
        if replicas == 0 and min_replicas == 0:
            continue
        name = group.get("groupName")
        name = name if isinstance(name, str) and name else f"worker-group-{i}"
        if name in seen:
            return cluster.error(f"{field}.groupName", f"duplicate Ray node group name '{name}'")
        seen.add(name)
        topology = _template_topology(cluster, group, f"{field}")
        if isinstance(topology, GrouperError):
            return topology
        members = (min_replicas if min_replicas > 0 else replicas) * hosts
        total += members
        sub_groups.append(SubGroup(name, members, None, topology))
    return total, tuple(sub_groups)


def _template_topology(cluster: _ClusterSpec, group: Mapping[str, Any],
                       field: str) -> TopologyConstraint | GrouperError | None:
    """A Ray group's constraint from its pod template's annotations: only when a placement level is given
    (the topology name alone is not a constraint), and then the topology name is required."""
    annotations = _nested(group, ("template", "metadata", "annotations"))
    if not isinstance(annotations, Mapping):
        return None
    topology = str(annotations.get(C.TOPOLOGY_ANNOTATION) or "")
    required = str(annotations.get(C.TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION) or "")
    preferred = str(annotations.get(C.TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION) or "")
    if not required and not preferred:
        return None
    if not topology:
        return cluster.error(f"{field}.template.metadata.annotations",
                             f"the annotation {C.TOPOLOGY_ANNOTATION} is required when topology placement "
                             "annotations are set")
    return TopologyConstraint(topology, required, preferred)


GROUPERS: dict[tuple[str, str], GroupFn] = {
    (RAY_GROUP, "RayCluster"): group_ray,
    (RAY_GROUP, "RayJob"): group_ray,
    (RAY_GROUP, "RayService"): group_ray,
}
