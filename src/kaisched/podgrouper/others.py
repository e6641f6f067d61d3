"""Groupers of JobSet, LeaderWorkerSet and Grove workloads (spec 10.3).

* JobSet (``jobset.x-k8s.io``): with ``startupPolicy.startupPolicyOrder: InOrder`` (KAI's default when the
  field is absent) one PodGroup per replicatedJob, ``pg-<jobset>-<uid>-<replicatedJob>``, minMember
  ``replicas × min(parallelism, completions)``; otherwise one PodGroup ``pg-<jobset>-<uid>`` with the sum.
* LeaderWorkerSet (``leaderworkerset.x-k8s.io``): one PodGroup per replica group,
  ``pg-<lws>-<uid>-group-<groupIndex>``, minMember ``size`` (or 1 for a leader not yet scheduled under
  ``startupPolicy: LeaderReady``), subgroups ``leader`` + ``workers``, or segments ``segment-<i>`` with
  ``subGroupPolicy.subGroupSize`` / ``kai.scheduler/segment-size``.
* Grove (``grove.io`` PodCliqueSet / PodGangSet): the default grouper applied to the
  ``scheduler.grove.io`` PodGang the pod's ``grove.io/podgang`` label names, one subgroup per
  ``spec.podgroups[]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import SubGroup, TopologyConstraint, Workload
from kaisched.podgrouper.base import (
    GroupContext,
    GrouperError,
    GroupFn,
    GroupRequest,
    Owner,
    PodGroupPlan,
    default_plan,
    error,
    pg_name,
)


def find_workload(ctx: GroupContext, namespace: str, kind: str, name: str) -> Workload | None:
    """A workload of the input by namespace, kind and name."""
    return ctx.workload(namespace, kind, name)


def _int(value: object) -> int | None:
    """An integer field (None when it is not one: the caller reports it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _annotations_of(template: object) -> Mapping[str, Any]:
    if not isinstance(template, Mapping):
        return {}
    meta = template.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


# =========================================================================================== JobSet
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
IN_ORDER = "InOrder"
ANY_ORDER = "AnyOrder"


def jobset_startup_order(spec: Mapping[str, Any]) -> str:
    """``spec.startupPolicy.startupPolicyOrder`` (KAI's pod-grouper reads a missing one as InOrder)."""
    policy = spec.get("startupPolicy")
    order = policy.get("startupPolicyOrder") if isinstance(policy, Mapping) else None
    return order if isinstance(order, str) and order else IN_ORDER


def replicated_job_min_member(top: Owner, rj: Mapping[str, Any], field: str) -> int | GrouperError:
    """``replicas × min(parallelism, completions)`` of one replicatedJob: absent counts are 1 (a zero
    parallelism counts 1, as KAI has it), a completions count below parallelism caps it."""
    replicas = rj.get("replicas", 1)
    r = _int(replicas)
    if r is None or r < 0:
        return error(top, f"{field}.replicas", f"must be a non-negative integer, got {replicas!r}")
    template = rj.get("template")
    job_spec = template.get("spec") if isinstance(template, Mapping) else None
    job_spec = job_spec if isinstance(job_spec, Mapping) else {}
    parallelism = job_spec.get("parallelism", 1)
    p = _int(1 if parallelism is None else parallelism)
    if p is None or p < 0:
        return error(top, f"{field}.template.spec.parallelism", f"must be a non-negative integer, got {parallelism!r}")
    completions = job_spec.get("completions")
    c = _int(completions) if completions is not None else None
    if completions is not None and (c is None or c < 0):
        return error(top, f"{field}.template.spec.completions",
                     f"must be a non-negative integer, got {completions!r}")
    per_job = p if p > 0 else 1
    if c is not None and 0 < c < per_job:
        per_job = c
    return r * per_job


def group_jobset(req: GroupRequest) -> PodGroupPlan | GrouperError:
    top = req.top
    spec = top.spec
    rjobs = spec.get("replicatedJobs")
    if rjobs is not None and not isinstance(rjobs, list):
        return error(top, "spec.replicatedJobs", "must be a list of replicated jobs")
    rjobs = rjobs or []
    sizes: dict[str, int] = {}
    for i, rj in enumerate(rjobs):
        field = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, Mapping):
            return error(top, field, "must be a replicated job (a mapping)")
        name = rj.get("name")
        if not isinstance(name, str) or not name:
            continue
        size = replicated_job_min_member(top, rj, field)
        if isinstance(size, GrouperError):
            return size
        sizes[name] = size
    rj_name = req.pod.meta.labels.get(JOBSET_REPLICATED_JOB_LABEL, "")
    if not rj_name:
        # the pod's Job carries the same label
        rj_name = next((o.labels.get(JOBSET_REPLICATED_JOB_LABEL, "") for o in req.chain[:-1]
                        if o.labels.get(JOBSET_REPLICATED_JOB_LABEL)), "")
    if not rj_name:
        return error(top, f"pod {req.pod.meta.name}: metadata.labels.{JOBSET_REPLICATED_JOB_LABEL}",
                     "a JobSet pod must carry the label naming its replicated job")
    if jobset_startup_order(spec) == IN_ORDER:
        name = f"{pg_name(top.name, top.uid)}-{rj_name}"
        min_member = sizes.get(rj_name, 1)
    else:
        name = pg_name(top.name, top.uid)
        min_member = sum(sizes.values())
    return default_plan(req, name=name, min_member=max(min_member, 1))


# ================================================================================== LeaderWorkerSet
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LEADER_CREATED = "LeaderCreated"
LEADER_READY = "LeaderReady"
LEADER_WORKER = "LeaderWorker"
LEADER_EXCLUDED = "LeaderExcluded"
LEADER_SUBGROUP = "leader"
WORKERS_SUBGROUP = "workers"
MAX_SEGMENTS = 10000


def lws_size(spec: Mapping[str, Any]) -> int | None:
    """``spec.leaderWorkerTemplate.size`` (default 1, as the CRD defaults it); None when not an integer."""
    template = spec.get("leaderWorkerTemplate")
    size = template.get("size", 1) if isinstance(template, Mapping) else 1
    return _int(1 if size is None else size)


def lws_segment_index(worker_index: int, size: int, segment: int) -> int:
    """The segment of a pod (worker index 0 is the leader): when ``size - 1`` divides into segments the
    leader is an extra member of the first one, otherwise segments are cut from index 0."""
    if worker_index == 0:
        return 0
    if (size - 1) % segment == 0:
        return (worker_index - 1) // segment
    return worker_index // segment


def group_lws(req: GroupRequest) -> PodGroupPlan | GrouperError:
    top = req.top
    spec = top.spec
    size = lws_size(spec)
    if size is None or size < 1:
        template = spec.get("leaderWorkerTemplate")
        raw = template.get("size") if isinstance(template, Mapping) else None
        return error(top, "spec.leaderWorkerTemplate.size", f"must be an integer >= 1, got {raw!r}")
    policy = spec.get("startupPolicy") or LEADER_CREATED
    if policy not in (LEADER_CREATED, LEADER_READY):
        return error(top, "spec.startupPolicy", f"unknown startup policy {policy!r} (LeaderCreated or LeaderReady)")
    pod = req.pod
    labels = pod.meta.labels
    worker_label = labels.get(LWS_WORKER_INDEX_LABEL)
    worker_index: int | None = None
    if worker_label is not None:
        worker_index = int(worker_label) if worker_label.isdigit() else None
        if worker_index is None:
            return error(top, f"pod {pod.meta.name}: metadata.labels.{LWS_WORKER_INDEX_LABEL}",
                         f"must be a non-negative integer, got {worker_label!r}")
    is_leader = worker_index == 0
    min_member = size
    if policy == LEADER_READY:
        announced = pod.meta.annotations.get(LWS_SIZE_ANNOTATION, "")
        if announced.isdigit():
            min_member = int(announced)
        if is_leader and not pod.node_name:
            min_member = 1  # the workers are created once the leader is ready
    plan = default_plan(req, min_member=min_member)
    group_index = labels.get(LWS_GROUP_INDEX_LABEL, "")
    if group_index.lstrip("-").isdigit():
        plan.name = f"{plan.name}-group-{int(group_index)}"
    built = _lws_sub_groups(req, min_member, worker_index)
    if isinstance(built, GrouperError):
        return built
    plan.sub_groups, plan.subgroup = built
    return plan


def _lws_segment_size(top: Owner, size: int) -> int | GrouperError | None:
    spec = top.spec
    template = spec.get("leaderWorkerTemplate")
    template = template if isinstance(template, Mapping) else {}
    policy = template.get("subGroupPolicy")
    raw: object = policy.get("subGroupSize") if isinstance(policy, Mapping) else None
    field = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
    segment = _int(raw) if raw is not None else None
    if raw is not None and segment is None:
        return error(top, field, f"must be an integer, got {raw!r}")
    if raw is None:
        for value, where in ((top.annotations.get(C.SEGMENT_SIZE_ANNOTATION),
                              f"metadata.annotations.{C.SEGMENT_SIZE_ANNOTATION}"),
                             (_annotations_of(template.get("workerTemplate")).get(C.SEGMENT_SIZE_ANNOTATION),
                              f"spec.leaderWorkerTemplate.workerTemplate.metadata.annotations."
                              f"{C.SEGMENT_SIZE_ANNOTATION}")):
            if value is None:
                continue
            text = str(value).strip()
            if not text.lstrip("-").isdigit():
                return error(top, where, f"invalid segment size {value!r}")
            segment, field = int(text), where
            break
    if segment is None:
        return None
    if segment <= 1:
        return error(top, field, f"segment size {segment} is not valid: it must be greater than 1")
    if segment > size:
        return error(top, field, f"segment size {segment} is greater than the group size {size}")
    return segment


def _lws_segment_topology(req: GroupRequest) -> TopologyConstraint | None:
    """Each segment's constraint: topology from the pod, the worker template or the LWS; levels from the
    ``kai.scheduler/segment-topology-*`` annotations of the pod or the worker template."""
    top = req.top
    template = top.spec.get("leaderWorkerTemplate")
    worker = _annotations_of(template.get("workerTemplate")) if isinstance(template, Mapping) else {}
    pod_annotations = req.pod.meta.annotations

    def value(key: str) -> str:
        return pod_annotations.get(key) or str(worker.get(key) or "")

    topology = value(C.TOPOLOGY_ANNOTATION) or top.annotations.get(C.TOPOLOGY_ANNOTATION, "")
    required = value(C.SEGMENT_TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION)
    preferred = value(C.SEGMENT_TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION)
    if not topology or (not required and not preferred):
        return None
    return TopologyConstraint(topology, required, preferred)


def _lws_sub_groups(req: GroupRequest, size: int,
                    worker_index: int | None) -> tuple[tuple[SubGroup, ...], str] | GrouperError:
    """The subgroups of one replica group of ``size`` pods and the pod's leaf."""
    top = req.top
    is_leader = worker_index == 0
    segment = _lws_segment_size(top, size) if size > 1 else None
    if isinstance(segment, GrouperError):
        return segment
    if segment is None:
        groups = [SubGroup(LEADER_SUBGROUP, 1)]
        if size > 1:
            groups.append(SubGroup(WORKERS_SUBGROUP, size - 1))
        return tuple(groups), LEADER_SUBGROUP if is_leader else WORKERS_SUBGROUP
    template = top.spec.get("leaderWorkerTemplate")
    policy = template.get("subGroupPolicy") if isinstance(template, Mapping) else None
    kind = policy.get("subGroupPolicyType") if isinstance(policy, Mapping) else None
    kind = kind or LEADER_WORKER
    if kind not in (LEADER_WORKER, LEADER_EXCLUDED):
        return error(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
                     f"unknown sub-group policy type {kind!r} (LeaderWorker or LeaderExcluded)")
    if kind == LEADER_EXCLUDED and (size - 1) % segment != 0:
        return error(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                     f"the group size {size} minus the leader is not divisible by the segment size {segment}: "
                     "the LeaderExcluded policy needs equal segments of workers")
    if worker_index is None:
        return error(top, f"pod {req.pod.meta.name}: metadata.labels.{LWS_WORKER_INDEX_LABEL}",
                     "a segmented LeaderWorkerSet pod must carry its worker index")
    # members of each segment: worker indexes 1..size-1, plus the leader in segment 0 (LeaderWorker)
    first = 0 if kind == LEADER_WORKER else 1
    counts: dict[int, int] = {}
    for w in range(first, size):
        s = lws_segment_index(w, size, segment)
        counts[s] = counts.get(s, 0) + 1
    if len(counts) > MAX_SEGMENTS:
        return error(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                     f"{len(counts)} segments is more than the {MAX_SEGMENTS} allowed")
    topology = _lws_segment_topology(req)
    segments = [SubGroup(f"segment-{s}", counts[s], None, topology) for s in sorted(counts)]
    pod_segment = f"segment-{lws_segment_index(worker_index, size, segment)}"
    if kind == LEADER_EXCLUDED:
        return (SubGroup(LEADER_SUBGROUP, 1), *segments), LEADER_SUBGROUP if is_leader else pod_segment
    # LeaderWorker: the first segment holds the leader, as a parent of "leader" and "workers"
    inner = [SubGroup(LEADER_SUBGROUP, 1, "segment-0")]
    if counts[0] > 1:
        inner.append(SubGroup(WORKERS_SUBGROUP, counts[0] - 1, "segment-0"))
    if is_leader:
        leaf = LEADER_SUBGROUP
    elif pod_segment == "segment-0":
        leaf = WORKERS_SUBGROUP
    else:
        leaf = pod_segment
    return (*segments, *inner), leaf


# ============================================================================================ Grove
GROVE_GROUP = "grove.io"
GROVE_SCHEDULER_GROUP = "scheduler.grove.io"
PODGANG_LABEL = "grove.io/podgang"
PODCLIQUE_LABEL = "grove.io/podclique"
GROVE_TOPOLOGY_ANNOTATION = "grove.io/topology-name"


def group_grove(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """Grove pods: the PodGang named by the pod's ``grove.io/podgang`` label holds the gang."""
    pod = req.pod
    top = req.top
    gang_name = pod.meta.labels.get(PODGANG_LABEL, "")
    if not gang_name:
        return error(top, f"pod {pod.meta.name}: metadata.labels.{PODGANG_LABEL}",
                     f"label for podgang name (key: {PODGANG_LABEL}) not found in pod "
                     f"{pod.meta.namespace}/{pod.meta.name}")
    gang = find_workload(req.ctx, pod.meta.namespace, "PodGang", gang_name)
    if gang is None or gang.group != GROVE_SCHEDULER_GROUP:
        return error(top, f"pod {pod.meta.name}: metadata.labels.{PODGANG_LABEL}",
                     f"PodGang {pod.meta.namespace}/{gang_name} (scheduler.grove.io) is not in the input")
    gang_owner = Owner.of_workload(gang)
    gang_req = GroupRequest(pod, (*req.chain, gang_owner), req.ctx)
    plan = default_plan(gang_req)
    # the top owner's labels and annotations (Dynamo -> PodCliqueSet) where the PodGang has none
    for key, value in top.labels.items():
        plan.labels.setdefault(key, value)
    for key, value in top.annotations.items():
        plan.annotations.setdefault(key, value)
    spec = gang.spec
    priorities = req.ctx.priority_classes
    spec_priority = spec.get("priorityClassName")
    if isinstance(spec_priority, str) and spec_priority in priorities:
        plan.priority_class_name = spec_priority
    label_priority = plan.labels.get(C.PRIORITY_CLASS_LABEL, "")
    if label_priority in priorities:
        plan.priority_class_name = label_priority
    preemptibility = plan.labels.get(C.PREEMPTIBILITY_LABEL, "")
    if preemptibility in (C.PREEMPTIBLE, C.NON_PREEMPTIBLE):
        plan.preemptibility = preemptibility
    topology = gang.meta.annotations.get(GROVE_TOPOLOGY_ANNOTATION) or \
        gang.meta.annotations.get(C.TOPOLOGY_ANNOTATION, "")
    root = _pack_constraint(gang_owner, spec.get("topologyConstraint"), topology, "spec.topologyConstraint")
    if isinstance(root, GrouperError):
        return root
    annotations = plan.annotations
    root_required = (root.required_level if root else "") or annotations.get(
        C.TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, "")
    root_preferred = (root.preferred_level if root else "") or annotations.get(
        C.TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, "")
    root_topology = (root.topology if root else "") or annotations.get(C.TOPOLOGY_ANNOTATION, "")
    plan.topology = TopologyConstraint(root_topology, root_required, root_preferred) if root_topology else None
    built = _grove_sub_groups(gang_owner, topology)
    if isinstance(built, GrouperError):
        return built
    sub_groups, min_member, members = built
    plan.sub_groups = sub_groups
    plan.min_member = max(min_member, 1)
    leaf = members.get(pod.meta.name)
    if leaf is None:
        # the PodGang does not list the pod yet: its PodClique is the podgroup of the same name
        clique = pod.meta.labels.get(PODCLIQUE_LABEL, "")
        leaf = clique if any(sg.name == clique for sg in sub_groups) else None
    if leaf is None:
        return error(gang_owner, "spec.podgroups",
                     f"no podgroup of the PodGang lists the pod {pod.meta.name} (podReferences)")
    plan.subgroup = leaf
    return plan


def _pack_constraint(owner: Owner, data: object, topology: str, field: str) -> TopologyConstraint | GrouperError | None:
    pack = data.get("packConstraint") if isinstance(data, Mapping) else None
    if not isinstance(pack, Mapping):
        return None
    required, preferred = pack.get("required"), pack.get("preferred")
    if required is None and preferred is None:
        return None
    if not topology:
        return error(owner, f"{field}.packConstraint", "topology name cannot be empty when topology constraints "
                     f"are defined (annotation {GROVE_TOPOLOGY_ANNOTATION} or {C.TOPOLOGY_ANNOTATION})")
    return TopologyConstraint(topology, str(required or ""), str(preferred or ""))


def _grove_sub_groups(gang: Owner, topology: str) -> tuple[tuple[SubGroup, ...], int, dict[str, str]] | GrouperError:
    """Parents from ``topologyConstraintGroupConfigs``, one leaf per ``podgroups[]`` (minMember
    ``minReplicas``); minMember is their sum; pod name -> leaf from the ``podReferences``."""
    spec = gang.spec
    parents: list[SubGroup] = []
    parent_of: dict[str, str] = {}
    configs = spec.get("topologyConstraintGroupConfigs") or []
    if not isinstance(configs, list):
        return error(gang, "spec.topologyConstraintGroupConfigs", "must be a list")
    for i, config in enumerate(configs):
        field = f"spec.topologyConstraintGroupConfigs[{i}]"
        if not isinstance(config, Mapping) or not isinstance(config.get("name"), str) or not config.get("name"):
            return error(gang, field, "must be a mapping with a name")
        names = config.get("podGroupNames") or []
        if not isinstance(names, list) or not names:
            continue
        for pg in names:
            parent_of[str(pg)] = str(config["name"])
        constraint = _pack_constraint(gang, config.get("topologyConstraint"), topology, f"{field}.topologyConstraint")
        if isinstance(constraint, GrouperError):
            return constraint
        parents.append(SubGroup(str(config["name"]), 0, None, constraint))
    groups = spec.get("podgroups") or []
    if not isinstance(groups, list):
        return error(gang, "spec.podgroups", "must be a list")
    leaves: list[SubGroup] = []
    members: dict[str, str] = {}
    total = 0
    for i, group in enumerate(groups):
        field = f"spec.podgroups[{i}]"
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str) or not group.get("name"):
            return error(gang, f"{field}.name", "missing required 'name' field")
        name = str(group["name"])
        raw = group.get("minReplicas")
        min_replicas = _int(raw)
        if min_replicas is None or min_replicas <= 0:
            return error(gang, f"{field}.minReplicas", f"must be an integer greater than 0, got {raw!r}")
        refs = group.get("podReferences")
        if refs is None:
            refs = []
        if not isinstance(refs, list):
            return error(gang, f"{field}.podReferences", "must be a list of pod references")
        for j, ref in enumerate(refs):
            if not isinstance(ref, Mapping) or not ref.get("name"):
                return error(gang, f"{field}.podReferences[{j}]", "must be a {namespace, name} reference")
            namespace = ref.get("namespace") or gang.namespace
            if namespace != gang.namespace:
                return error(gang, f"{field}.podReferences[{j}].namespace",
                             f"cross-namespace pod reference not allowed: pod {namespace}/{ref['name']} cannot be "
                             f"referenced from PodGang in namespace {gang.namespace}")
            members[str(ref["name"])] = name
        constraint = _pack_constraint(gang, group.get("topologyConstraint"), topology, f"{field}.topologyConstraint")
        if isinstance(constraint, GrouperError):
            return constraint
        leaves.append(SubGroup(name, min_replicas, parent_of.get(name), constraint))
        total += min_replicas
    return (*parents, *leaves), total, members


GROUPERS: dict[tuple[str, str], GroupFn] = {
    (JOBSET_GROUP, "JobSet"): group_jobset,
    (LWS_GROUP, "LeaderWorkerSet"): group_lws,
    (GROVE_GROUP, "PodCliqueSet"): group_grove,
    (GROVE_GROUP, "PodGangSet"): group_grove,
    # when the PodCliqueSet is not reachable (PodClique objects not given), the PodGang still holds the gang
    (GROVE_GROUP, "PodClique"): group_grove,
    (GROVE_GROUP, "PodCliqueScalingGroup"): group_grove,
}
