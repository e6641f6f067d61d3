"""Scenario state -> Kubernetes/KAI manifests, written the way a KAI user (and KAI's binder) would.

The mapping mirrors KAI's test fakes (``test_utils/{nodes,jobs,tasks}_fake``) where they build real
objects, and the corpus README (section 4) where they poke the in-memory model directly:

* queue creation order: departments first, then queues, one running index: object *i* is created at
  ``now + i`` minutes (KAI numbers the two lists separately; only the order among siblings matters,
  and a single index keeps it);
* a job (PodGroup and its pods) is created at ``now - age_minutes``;
* a job with an allocated task carries ``kai.scheduler/last-start-timestamp = now - 60 s``;
* the task status becomes the pod phase / nodeName / deletionTimestamp KAI derives it from.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .scenario import ACTIVE_USED, ALLOCATED, Job, Node, QueueDef, Scenario, SubGroupSet, Task

SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
NODE_TYPE_LABEL = "kai.scheduler/type"
GPU_GROUP_LABEL = "runai-gpu-group"
PODGROUP_ANNOTATION = "pod-group-name"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpu-memory"
RECEIVED_TYPE_ANNOTATION = "received-resource-type"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
STALE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"
GPU = "nvidia.com/gpu"

# Legacy MIG pods are recognised by a MIG-resource *annotation*; a legacy task without listed
# instances still needs one to be expressible as a manifest.
LEGACY_MIG_DEFAULT_PROFILE = "nvidia.com/mig-1g.5gb"

# KAI's priority-class constants (pkg/scheduler/constants); other numbers get priority-<n>.
PRIORITY_CLASS_NAMES: Mapping[int, str] = {
    50: "train",
    75: "interactive-preemptible",
    100: "build",
    125: "inference",
}

LAST_START_AGE = timedelta(minutes=1)


def rfc3339(t: datetime) -> str:
    t = t.astimezone(UTC)
    if t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def priority_class_name(priority: int) -> str:
    return PRIORITY_CLASS_NAMES.get(priority, f"priority-{priority}")


def _num(v: float) -> int | float:
    return int(v) if float(v) == int(v) else float(v)


def _cpu(millis: float) -> str:
    return f"{int(millis)}m"


# ------------------------------------------------------------------------------------------------


def to_manifests(state: Scenario, now: datetime) -> list[dict[str, Any]]:
    """Every object of the scenario's current state, in a stable order.

    Order: PriorityClasses, Topologies, DRA objects, Nodes, Queues, then per job its PodGroup and
    pods.
    """
    out: list[dict[str, Any]] = []
    for prio in sorted({j.priority for j in state.jobs}):
        out.append(priority_class(prio))
    out.extend(topology(t.name, t.levels) for t in state.topologies)
    out.extend(dra_objects(state))
    out.extend(node(n) for n in state.nodes)
    out.extend(queue(q, now + timedelta(minutes=i)) for i, q in enumerate(state.queues))
    for j in state.jobs:
        out.append(pod_group(j, now))
        out.extend(pod(j, t, now) for t in j.tasks)
    return out


def priority_class(value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(value)},
        "value": value,
        "preemptionPolicy": "PreemptLowerPriority",
    }


def topology(name: str, levels: tuple[str, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def node(n: Node) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.count": str(n.gpus),
        "nvidia.com/gpu.memory": str(n.gpu_memory_mib),
        "node-role.kubernetes.io/mig-enabled": "true" if n.mig_strategy else "false",
        "nvidia.com/mig.strategy": n.mig_strategy,
        NODE_TYPE_LABEL: n.name,
    }
    labels.update(n.labels)
    allocatable: dict[str, str] = {
        "cpu": _cpu(n.cpu_millis),
        "memory": str(n.memory_bytes),
        GPU: str(n.allocatable_gpus),
        "pods": "110",
    }
    capacity: dict[str, str] = {
        "cpu": _cpu(max(n.cpu_millis, 30_000_000)),
        "memory": str(max(n.memory_bytes, 30_000_000_000)),
        GPU: str(n.gpus),
        "pods": "110",
    }
    for profile, count in n.mig_instances.items():
        allocatable[profile] = str(count)
        capacity[profile] = str(count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": n.name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queue(q: QueueDef, created: datetime) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": q.priority,
        "resources": {
            "gpu": {
                "quota": _num(q.deserved_gpus),
                "limit": _num(q.limit_gpus),
                "overQuotaWeight": _num(q.over_quota_weight),
            },
            "cpu": {
                "quota": _num(q.deserved_cpu_millis),
                "limit": _num(q.limit_cpu_millis),
                "overQuotaWeight": 1,
            },
            "memory": {
                "quota": _num(q.deserved_memory_mb),
                "limit": _num(q.limit_memory_mb),
                "overQuotaWeight": 1,
            },
        },
    }
    if q.parent:
        spec["parentQueue"] = q.parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": q.name, "creationTimestamp": rfc3339(created)},
        "spec": spec,
    }


def job_created(j: Job, now: datetime) -> datetime:
    return now - timedelta(minutes=j.age_minutes)


def job_last_start(j: Job, now: datetime) -> datetime | None:
    """The harness' last-start time: now - 1 min for a job with an allocated task, else none."""
    if any(t.status in ALLOCATED for t in j.tasks):
        return now - LAST_START_AGE
    return None


def _constraint_dict(c: Any) -> dict[str, str]:
    d = {"topology": c.topology}
    if c.required_level:
        d["requiredTopologyLevel"] = c.required_level
    if c.preferred_level:
        d["preferredTopologyLevel"] = c.preferred_level
    return d


def _sub_groups(tree: SubGroupSet) -> list[dict[str, Any]]:
    """The flat ``spec.subGroups`` list of a subgroup tree (the root itself is the PodGroup)."""
    out: list[dict[str, Any]] = []

    def walk(node: SubGroupSet, parent: str | None) -> None:
        for ps in node.pod_sets:
            entry: dict[str, Any] = {"name": ps.name, "minMember": ps.min_available}
            if parent:
                entry["parent"] = parent
            if ps.topology_constraint:
                entry["topologyConstraint"] = _constraint_dict(ps.topology_constraint)
            out.append(entry)
        for child in node.sub_groups:
            entry = {"name": child.name, "minMember": max(1, len(child.pod_sets) + len(child.sub_groups))}
            if parent:
                entry["parent"] = parent
            if child.topology_constraint:
                entry["topologyConstraint"] = _constraint_dict(child.topology_constraint)
            out.append(entry)
            walk(child, child.name)

    walk(tree, None)
    return out


def pod_group(j: Job, now: datetime) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    last_start = job_last_start(j, now)
    if last_start is not None:
        annotations[LAST_START_ANNOTATION] = rfc3339(last_start)
    if j.stale_for_seconds is not None:
        annotations[STALE_ANNOTATION] = rfc3339(now - timedelta(seconds=j.stale_for_seconds))
    spec: dict[str, Any] = {
        "queue": j.queue,
        "minMember": j.min_available,
        "priorityClassName": priority_class_name(j.priority),
    }
    if j.preemptibility:
        spec["preemptibility"] = j.preemptibility
    tree = j.subgroups
    if tree is not None:
        if tree.topology_constraint:
            spec["topologyConstraint"] = _constraint_dict(tree.topology_constraint)
        if tree.is_plain:
            spec["minMember"] = tree.pod_sets[0].min_available
        else:
            spec["subGroups"] = _sub_groups(tree)
            spec["minMember"] = max(1, sum(ps.min_available for ps in tree.iter_pod_sets()))
    meta: dict[str, Any] = {
        "name": j.name,
        "namespace": j.k8s_namespace,
        "uid": j.name,
        "creationTimestamp": rfc3339(job_created(j, now)),
    }
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": spec,
    }


def _subgroup_label(j: Job, t: Task) -> str:
    if t.subgroup:
        return t.subgroup
    tree = j.subgroups
    if tree is not None and not tree.is_plain:
        # tasks without a subgroup belong to the implicit `default` pod set the fake adds
        return "default"
    return ""


def received_resource_type(j: Job, t: Task) -> str:
    if t.mig_instances or t.legacy_mig:
        return "MigInstance"
    if j.is_shared_gpu(t):
        return "Fraction"
    return "Regular"


def auto_gpu_group(t: Task) -> str:
    """The group of a placed shared-GPU task that has none in the scenario: its own GPU."""
    return f"{t.id}-gpu"


def pod(j: Job, t: Task, now: datetime) -> dict[str, Any]:
    labels: dict[str, str] = {"job-name": t.id, QUEUE_LABEL: j.queue}
    labels.update(t.pod_labels)
    sg = _subgroup_label(j, t)
    if sg:
        labels[SUBGROUP_LABEL] = sg
    if t.task_priority is not None:
        labels[TASK_PRIORITY_LABEL] = str(t.task_priority)

    annotations: dict[str, str] = {PODGROUP_ANNOTATION: j.name}
    requests: dict[str, str] = {}
    if not j.best_effort:
        requests["cpu"] = _cpu(j.milli_cpu(t))
        requests["memory"] = str(j.memory(t))
        whole = j.whole_gpus(t)
        if whole > 0:
            requests[GPU] = str(whole)
        elif t.required_gpus is None and j.is_fractional:
            annotations[GPU_FRACTION_ANNOTATION] = f"{j.gpus_per_task:g}"
        if j.gpu_memory_mib_per_task:
            annotations[GPU_MEMORY_ANNOTATION] = str(j.gpu_memory_mib_per_task)
        if t.legacy_mig:
            for profile, count in (t.mig_instances or {LEGACY_MIG_DEFAULT_PROFILE: 1}).items():
                annotations[profile] = str(count)
        else:
            for profile, count in t.mig_instances.items():
                requests[profile] = str(count)

    placed = t.status in ACTIVE_USED
    groups = t.gpu_groups
    if not groups and placed and j.is_shared_gpu(t):
        groups = (auto_gpu_group(t),)
    if len(groups) == 1:
        labels[GPU_GROUP_LABEL] = groups[0]
    else:
        for g in groups:
            labels[f"{GPU_GROUP_LABEL}/{g}"] = g
    if placed:
        annotations[RECEIVED_TYPE_ANNOTATION] = received_resource_type(j, t)

    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": dict(requests), "limits": dict(requests)}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER_NAME, "containers": [container]}
    affinity = _affinity(t)
    if affinity:
        spec["affinity"] = affinity
    if t.resource_claims or t.resource_claim_templates:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in t.resource_claims] + [
            {"name": tmpl, "resourceClaimTemplateName": tmpl} for tmpl in t.resource_claim_templates
        ]

    meta: dict[str, Any] = {
        "name": t.id,
        "namespace": j.k8s_namespace,
        "uid": t.id,
        "labels": labels,
        "annotations": annotations,
        "creationTimestamp": rfc3339(job_created(j, now)),
    }
    status: dict[str, Any] = {}
    match t.status:
        case "Pending":
            status["phase"] = "Pending"
        case "Running" | "Binding":
            status["phase"] = "Running"
            spec["nodeName"] = t.node
        case "Releasing":
            status["phase"] = "Running"
            spec["nodeName"] = t.node
            meta["deletionTimestamp"] = rfc3339(now)
        case "Bound" | "Allocated":
            status["phase"] = "Pending"
            spec["nodeName"] = t.node
        case "Pipelined":
            # KAI keeps no pipelined placement across cycles; the nominated node is the closest
            # user-visible form (one fractional scenario uses it).
            status["phase"] = "Pending"
            if t.node:
                status["nominatedNodeName"] = t.node
        case "Failed" | "Succeeded":
            status["phase"] = t.status
            if t.node:
                spec["nodeName"] = t.node
        case other:
            raise ValueError(f"task {t.id}: unsupported input status {other!r}")
    if t.resource_claim_templates:
        status["resourceClaimStatuses"] = [
            {"name": tmpl, "resourceClaimName": claim} for tmpl, claim in t.resource_claim_templates.items()
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _affinity(t: Task) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    if t.node_affinity:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_TYPE_LABEL, "operator": "In", "values": list(t.node_affinity)}]}
                ]
            }
        }
    if t.pod_labels and t.pod_affinity_topology_key:
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": dict(t.pod_labels)},
                    "topologyKey": t.pod_affinity_topology_key,
                }
            ]
        }
    if t.pod_labels and t.pod_anti_affinity_topology_key:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": dict(t.pod_labels)},
                    "topologyKey": t.pod_anti_affinity_topology_key,
                }
            ]
        }
    return affinity


# ------------------------------------------------------------------------------------------------
# DRA (resource.k8s.io/v1), as dra_fake.TestDRAObjects builds them


def dra_objects(state: Scenario) -> list[dict[str, Any]]:
    dra = state.dra
    if not dra:
        return []
    out: list[dict[str, Any]] = []
    for name in dra.get("device_classes") or []:
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]},
            }
        )
    for s in dra.get("resource_slices") or []:
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": s["name"]},
                "spec": {
                    # (dra_fake: the slice's driver is its device class's name, which the class selects)
                    "driver": s.get("device_class_name") or "nvidia.com/gpu",
                    "nodeName": s["node_name"],
                    "pool": {"name": s["node_name"], "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": str(i), "capacity": {"gpu": {"value": "1"}}} for i in range(int(s["count"]))],
                },
            }
        )
    for c in dra.get("resource_claims") or []:
        meta: dict[str, Any] = {"name": c["name"], "namespace": c.get("namespace") or "default"}
        if c.get("labels"):
            meta["labels"] = dict(c["labels"])
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": c["name"],
                            "exactly": {
                                "deviceClassName": c["device_class_name"],
                                "allocationMode": "ExactCount",
                                "count": int(c.get("count") or 1),
                            },
                        }
                    ]
                }
            },
        }
        cs = c.get("claim_status")
        if cs:
            status: dict[str, Any] = {}
            if cs.get("allocation"):
                status["allocation"] = cs["allocation"]
            reserved = list(cs.get("reserved_for") or [])
            if cs.get("reserved_for_generated"):
                n = int(cs.get("reserved_for_count") or 0)
                reserved = [{"resource": "pods", "name": f"pod-{i}", "uid": f"pod-{i}"} for i in range(n)]
            if reserved:
                status["reservedFor"] = reserved
            claim["status"] = status
        out.append(claim)
    return out
