"""Group every pod into its PodGroup, as KAI's pod-grouper controller does (spec 10.1).

For each pod of our scheduler: pods that carry ``pod-group-name`` and have no owner keep their manual
PodGroup; the others get the PodGroup their top owner's grouper plans (the default grouper for kinds
without one). The PodGroups are added (a PodGroup of that name already in the input is kept as it is: the
pod-grouper would have written it, and KAI preserves its queue), the pods get ``pod-group-name`` and, when
the PodGroup has subgroups, ``kai.scheduler/subgroup-name``. Problems become input errors naming the
workload and field, and the pod is left out of scheduling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError, ParsedObjects, Pod, PodGroup, Workload
from kaisched.podgrouper.base import (
    GroupContext,
    GrouperError,
    GroupRequest,
    KindDefault,
    Owner,
    PodGroupPlan,
    default_plan,
    pod_group_meta,
)
from kaisched.podgrouper.registry import SKIP_TOP_OWNER, grouper_for

MAX_OWNER_DEPTH = 16


class _Index:
    def __init__(self, workloads: list[Workload], pods: list[Pod]) -> None:
        self.by_uid: dict[str, Workload] = {}
        self.by_name: dict[tuple[str, str, str], Workload] = {}
        for w in workloads:
            if w.meta.uid:
                self.by_uid.setdefault(w.meta.uid, w)
            self.by_name.setdefault((w.meta.namespace, w.kind, w.meta.name), w)
        # pods can own objects too (a LeaderWorkerSet's worker StatefulSets are owned by the leader pod)
        self.pods_by_uid: dict[str, Pod] = {p.meta.uid: p for p in pods if p.meta.uid}
        self.pods_by_name: dict[tuple[str, str], Pod] = {(p.meta.namespace, p.meta.name): p for p in pods}

    def chain(self, pod: Pod) -> tuple[Owner, ...]:
        out: list[Owner] = []
        refs = pod.meta.owner_references
        namespace = pod.meta.namespace
        seen: set[str] = set()
        while refs and len(out) < MAX_OWNER_DEPTH:
            ref = next((r for r in refs if r.controller), refs[0])
            owner: Owner
            if ref.kind == "Pod" and ref.api_version == "v1":
                owning_pod = (self.pods_by_uid.get(ref.uid) if ref.uid else None) or \
                    self.pods_by_name.get((namespace, ref.name))
                owner = Owner.of_pod(owning_pod) if owning_pod is not None else Owner.of_reference(ref, namespace)
                next_refs = owning_pod.meta.owner_references if owning_pod is not None else ()
            else:
                w = self.by_uid.get(ref.uid) if ref.uid else None
                if w is None:
                    w = self.by_name.get((namespace, ref.kind, ref.name))
                owner = Owner.of_workload(w) if w is not None else Owner.of_reference(ref, namespace)
                next_refs = w.meta.owner_references if w is not None else ()
            if owner.uid in seen:
                break  # an ownership cycle: stop at the first repeat
            seen.add(owner.uid)
            out.append(owner)
            refs = next_refs
        return tuple(out)


def kind_defaults(parsed: ParsedObjects, name: str, namespace: str,
                  errors: list[ObjectError]) -> dict[str, KindDefault]:
    """The optional per-kind defaults ConfigMap: ``types`` holds a JSON list of
    ``{typeName, group, priorityName, preemptibility}``."""
    if not name:
        return {}
    cm = next((w for w in parsed.workloads if w.kind == "ConfigMap" and w.meta.name == name
               and (not namespace or w.meta.namespace == namespace)), None)
    if cm is None:
        return {}
    label = f"ConfigMap {cm.meta.namespace}/{cm.meta.name}"
    raw = cm.data.get("types", "[]")
    try:
        entries = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        errors.append(ObjectError(label, "data.types", f"invalid JSON: {exc.msg}"))
        return {}
    out: dict[str, KindDefault] = {}
    if not isinstance(entries, list):
        errors.append(ObjectError(label, "data.types", "expected a JSON list"))
        return {}
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping) or not e.get("typeName"):
            errors.append(ObjectError(label, f"data.types[{i}]", "expected an object with typeName"))
            continue
        key = f"{e['typeName']}.{e['group']}" if e.get("group") else str(e["typeName"])
        out[key] = KindDefault(str(e.get("priorityName") or ""), str(e.get("preemptibility") or ""))
    return out


def group_pods(parsed: ParsedObjects, *, scheduler_name: str, priority_classes: frozenset[str],
               defaults: Mapping[str, KindDefault], now: datetime,
               replanned: dict[tuple[str, str], PodGroup] | None = None) -> ParsedObjects:
    """The objects with every pod grouped: PodGroups added, pods annotated (never mutates ``parsed``).

    ``replanned``, when given, receives (by namespace and name) the PodGroup the pod-grouper would make now for each
    existing PodGroup that pods are grouped into: what it makes for a new one, from the first such pod."""
    index = _Index(parsed.workloads, parsed.pods)
    errors = list(parsed.errors)
    pods_by_owner: dict[tuple[str, str], list[Pod]] = {}
    for pod in parsed.pods:
        for ref in pod.meta.owner_references:
            pods_by_owner.setdefault((pod.meta.namespace, ref.uid or f"{pod.meta.namespace}/{ref.name}"),
                                     []).append(pod)
    ctx = GroupContext(priority_classes, defaults, pods_by_owner, index.by_name)
    existing = {(pg.meta.namespace, pg.meta.name) for pg in parsed.pod_groups}
    planned: dict[tuple[str, str], PodGroup] = {}
    pods: list[Pod] = []
    for pod in parsed.pods:
        meta = pod.meta
        if pod.scheduler_name != scheduler_name or (
                C.POD_GROUP_NAME_ANNOTATION in meta.annotations and not meta.owner_references):
            pods.append(pod)
            continue
        chain = index.chain(pod)
        plan = plan_for(GroupRequest(pod, chain, ctx))
        if isinstance(plan, GrouperError):
            errors.append(ObjectError(plan.object, plan.field, f"{plan.message} (pod {meta.namespace}/{meta.name} "
                                      "is not scheduled)"))
            pods.append(_annotated(pod, f"{C.UNGROUPED_POD_GROUP_PREFIX}{meta.name}", ""))
            continue
        key = (plan.namespace, plan.name)
        if key not in existing:
            if key not in planned:
                planned[key] = _pod_group(plan, meta.creation_timestamp or now)
        elif replanned is not None and key not in replanned:
            replanned[key] = _pod_group(plan, meta.creation_timestamp or now)
        pods.append(_annotated(pod, plan.name, plan.subgroup))
    return replace(parsed, pods=pods, pod_groups=[*parsed.pod_groups, *planned.values()], errors=errors)


def _pod_group(plan: PodGroupPlan, created: datetime) -> PodGroup:
    return PodGroup(meta=pod_group_meta(plan, created), queue=plan.queue, min_member=plan.min_member,
                    priority_class_name=plan.priority_class_name, preemptibility=plan.preemptibility,
                    sub_groups=plan.sub_groups, topology_constraint=plan.topology)


def plan_for(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """The top owner's grouper (spec 10.3); kinds that skip their top owner are grouped by the next one, with
    the top owner's labels and annotations propagated."""
    chain = req.chain
    top = req.top
    skipped: Owner | None = None
    if (top.group, top.kind) in SKIP_TOP_OWNER and chain:
        # the next owner down groups the pod (the pod itself when the skipped kind owns it directly), with
        # the skipped owner's labels and annotations under its own (so its queue and priority labels count)
        skipped = top
        rest = list(chain[:-1])
        pod = req.pod
        if rest:
            rest[-1] = _with_metadata_of(rest[-1], skipped)
        else:  # the pod is grouped by itself: it gets the skipped owner's labels
            pod = replace(pod, meta=replace(pod.meta, labels={**skipped.labels, **pod.meta.labels}))
        req = GroupRequest(pod, tuple(rest), req.ctx)
    grouper = grouper_for(req.top.group, req.top.kind)
    plan = grouper(req) if grouper is not None else default_plan(req)
    if skipped is not None and isinstance(plan, PodGroupPlan):
        plan.labels = {**skipped.labels, **plan.labels}
        plan.annotations = {**skipped.annotations, **plan.annotations}
    return plan


def _with_metadata_of(owner: Owner, skipped: Owner) -> Owner:
    w = owner.workload
    if w is None:
        return owner
    meta = replace(w.meta, labels={**skipped.labels, **w.meta.labels},
                   annotations={**skipped.annotations, **w.meta.annotations})
    return replace(owner, workload=replace(w, meta=meta))


def _annotated(pod: Pod, pod_group: str, subgroup: str) -> Pod:
    meta = pod.meta
    annotations = {**meta.annotations, C.POD_GROUP_NAME_ANNOTATION: pod_group}
    labels = dict(meta.labels)
    if subgroup:
        labels[C.SUBGROUP_NAME_LABEL] = subgroup
    return replace(pod, meta=replace(meta, annotations=annotations, labels=labels))
