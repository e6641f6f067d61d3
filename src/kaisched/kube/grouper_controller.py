"""The pod-grouper as a controller (spec 1.3, 10.1): the PodGroups and pod annotations the grouping computed
by :func:`kaisched.cluster.schedule.prepare` implies, written to the API server.

:class:`PodGrouperController` compares the cluster as the API server has it (the cached Pods and PodGroups, as
decoded JSON) with the objects after ``prepare()`` and plans, through the same
:class:`~kaisched.kube.writer.ClusterWriter` as the cycle's writes:

* a :class:`~kaisched.kube.operations.CreatePodGroup` for every PodGroup the grouper planned that the API does
  not have yet and that a pod in the API belongs to (KAI's names, ``pg-<owner>-<uid>`` etc., with an
  ownerReference to the top owner, or the pod for per-pod groupers, and the labels and annotations the
  grouper produced). A 409 AlreadyExists counts as done;
* a merge patch of every such pod whose ``pod-group-name`` annotation (or ``kai.scheduler/subgroup-name``
  label) differs from the grouping;
* a Warning ``PodGrouperWarning`` event on a pod the grouper could not group (deduplicated like every event).

* a :class:`~kaisched.kube.operations.PodGroupSpecPatch` of a PodGroup the pod-grouper made (owned by the
  same top owner) when pods of it are grouped again, new pods of a workload that changed, and the grouping
  gives other ``minMember``, ``subGroups``, ``priorityClassName``, ``preemptibility`` or
  ``topologyConstraint`` than the API holds: KAI's pod-grouper updates the PodGroup so (a RayCluster's group
  scaled up from 1 to 3 replicas without ``minReplicas`` makes its minMember 2 larger), keeping its queue.

User-made PodGroups (pods with ``pod-group-name`` and no owner) are never touched, nor is the queue of any
existing PodGroup. Pods of other schedulers, pods being deleted and pods the API does not have (those
``prepare()`` made up for workloads) are left alone. Planning is idempotent: once the API shows the writes, a
new run plans nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects, PodGroup, SubGroup, TopologyConstraint
from kaisched.kube.operations import (
    CreatePodGroup,
    EventMemory,
    ObjectRef,
    Operation,
    PodGroupSpecPatch,
    PodMetadataPatch,
    split_key,
)

GROUPER_COMPONENT = "pod-grouper"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _key(obj: Mapping[str, Any]) -> str:
    meta = _mapping(obj.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _topology(tc: TopologyConstraint) -> dict[str, str]:
    out = {"topology": tc.topology}
    if tc.required_level:
        out["requiredTopologyLevel"] = tc.required_level
    if tc.preferred_level:
        out["preferredTopologyLevel"] = tc.preferred_level
    return out


def _sub_group(sg: SubGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"name": sg.name, "minMember": sg.min_member}
    if sg.parent:
        out["parent"] = sg.parent
    if sg.topology_constraint is not None and sg.topology_constraint.topology:
        out["topologyConstraint"] = _topology(sg.topology_constraint)
    return out


def pod_group_body(pg: PodGroup) -> dict[str, Any]:
    """The PodGroup object to create (``scheduling.run.ai/v2alpha2``), as KAI's pod-grouper writes it."""
    meta: dict[str, Any] = {"name": pg.meta.name, "namespace": pg.meta.namespace}
    if pg.meta.labels:
        meta["labels"] = dict(pg.meta.labels)
    if pg.meta.annotations:
        meta["annotations"] = dict(pg.meta.annotations)
    if pg.meta.owner_references:
        meta["ownerReferences"] = [
            {"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid, "controller": r.controller}
            for r in pg.meta.owner_references]
    spec: dict[str, Any] = {"minMember": pg.min_member, "queue": pg.queue}
    if pg.priority_class_name:
        spec["priorityClassName"] = pg.priority_class_name
    if pg.preemptibility:
        spec["preemptibility"] = pg.preemptibility
    if pg.sub_groups:
        spec["subGroups"] = [_sub_group(sg) for sg in pg.sub_groups]
    if pg.topology_constraint is not None and pg.topology_constraint.topology:
        spec["topologyConstraint"] = _topology(pg.topology_constraint)
    return {"apiVersion": C.POD_GROUP_API_VERSION, "kind": C.POD_GROUP_KIND, "metadata": meta, "spec": spec}


class PodGrouperController:
    """Plans the pod-grouper's writes; keeps the memory of the warnings it reported."""

    def __init__(self, scheduler_name: str = C.SCHEDULER_NAME, events: EventMemory | None = None) -> None:
        self.scheduler_name = scheduler_name
        self.events = events if events is not None else EventMemory(GROUPER_COMPONENT)

    def plan(self, pods: Iterable[Mapping[str, Any]], pod_groups: Iterable[Mapping[str, Any]],
             grouped: ParsedObjects, now: datetime | None = None,
             replanned: Mapping[str, PodGroup] | None = None) -> list[Operation]:
        """``pods`` and ``pod_groups``: the API's objects (decoded JSON); ``grouped``: the objects after
        ``prepare()``; ``replanned``: the pod-grouper's PodGroups, made afresh, of existing PodGroups (by
        ``namespace/name``; :func:`kaisched.kube.live.group_live`). Returns the PodGroup creations, then their
        updates, then the pod patches, then the warnings."""
        when = now or datetime.now(UTC)
        existing = {_key(pg): pg for pg in pod_groups}
        planned = {f"{pg.meta.namespace}/{pg.meta.name}": pg for pg in grouped.pod_groups}
        grouped_pods = {f"{p.meta.namespace}/{p.meta.name}": p for p in grouped.pods}
        creates: dict[str, CreatePodGroup] = {}
        updates: dict[str, PodGroupSpecPatch | None] = {}
        patches: list[Operation] = []
        self.events.begin()
        warnings: list[Operation] = []
        for key, pod in sorted(((_key(p), p) for p in pods), key=lambda kp: kp[0]):
            meta = _mapping(pod.get("metadata"))
            spec = _mapping(pod.get("spec"))
            if (spec.get("schedulerName") or C.DEFAULT_SCHEDULER_NAME) != self.scheduler_name:
                continue
            if meta.get("deletionTimestamp"):
                continue
            parsed = grouped_pods.get(key)
            if parsed is None:
                continue  # not parsed (its error is reported with the cycle's input errors)
            namespace, name = split_key(key)
            ref = ObjectRef.pod(key, str(meta.get("uid", "") or ""))
            group = parsed.meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION, "")
            if not group:
                continue
            if group.startswith(C.UNGROUPED_POD_GROUP_PREFIX):
                for err in grouped.errors:
                    if f"(pod {namespace}/{name} is not scheduled)" in err.message:
                        ev = self.events.event(ref, "Warning", "PodGrouperWarning", str(err), when)
                        if ev is not None:
                            warnings.append(ev)
                continue
            group_key = f"{namespace}/{group}"
            if group_key not in existing and group_key not in creates:
                pg = planned.get(group_key)
                if pg is None:
                    continue  # a manual PodGroup that does not exist (yet): the user's to create
                creates[group_key] = CreatePodGroup(pod_group_body(pg), for_pod=ref)
            elif group_key in existing and group_key not in updates:
                pg = (replanned or {}).get(group_key)
                updates[group_key] = _spec_update(existing[group_key], pg, ref) if pg is not None else None
            annotations = _mapping(meta.get("annotations"))
            labels = _mapping(meta.get("labels"))
            want_annotations: dict[str, str | None] = {}
            want_labels: dict[str, str | None] = {}
            if annotations.get(C.POD_GROUP_NAME_ANNOTATION) != group:
                want_annotations[C.POD_GROUP_NAME_ANNOTATION] = group
            subgroup = parsed.meta.labels.get(C.SUBGROUP_NAME_LABEL)
            if subgroup and labels.get(C.SUBGROUP_NAME_LABEL) != subgroup:
                want_labels[C.SUBGROUP_NAME_LABEL] = subgroup
            if want_annotations or want_labels:
                patches.append(PodMetadataPatch(ref, labels=want_labels, annotations=want_annotations))
        self.events.end(when)
        changed = [u for _, u in sorted(updates.items()) if u is not None]
        return [*(creates[k] for k in sorted(creates)), *changed, *patches, *warnings]


#: the spec fields of a PodGroup the pod-grouper keeps up to date (the queue is kept as created)
GROUPER_SPEC_FIELDS = ("minMember", "priorityClassName", "preemptibility", "subGroups", "topologyConstraint")


def _spec_update(current: Mapping[str, Any], pg: PodGroup, pod: ObjectRef) -> PodGroupSpecPatch | None:
    """The patch that brings an existing PodGroup the pod-grouper made to the grouping, or None when it is
    already there (or is not the pod-grouper's: not owned by the planned top owner)."""
    meta = _mapping(current.get("metadata"))
    owner_uids = {str(_mapping(r).get("uid", "")) for r in meta.get("ownerReferences") or ()}
    planned_uids = {r.uid for r in pg.meta.owner_references}
    if not planned_uids or not owner_uids & planned_uids:
        return None
    want = pod_group_body(pg)["spec"]
    have = _mapping(current.get("spec"))
    diff = {f: want.get(f) for f in GROUPER_SPEC_FIELDS if want.get(f) != have.get(f)}
    if not diff:
        return None
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    ref = ObjectRef(C.POD_GROUP_API_VERSION, C.POD_GROUP_KIND, name, namespace, str(meta.get("uid", "")))
    return PodGroupSpecPatch(ref, diff, for_pod=pod)


class Arrivals:
    """The pods that arrived since the pod-grouper last saw them, for its passes between scheduling cycles.

    KAI's pod-grouper is a controller of its own: it creates a pod's PodGroup as the pod arrives, not when the
    scheduler's next cycle starts, so that the cycle binds pods whose PodGroups exist. ``kaisched run`` does the same
    between its cycles (:meth:`kaisched.kube.runner.KubeScheduler.group_arrivals`); this remembers which pods
    such a pass took (by uid), so that each pass groups only what arrived since (a pod that stays pending is not
    grouped again by every pass: the cycles group it as before)."""

    __slots__ = ("revision", "seen")

    def __init__(self) -> None:
        self.revision = -1  # the pod store's revision at the last pass
        self.seen: set[str] = set()  # uids of the pods a pass took (pruned to the pods the store still has)

    def take(self, revision: int, pods: Iterable[tuple[str, Mapping[str, Any]]],
             scheduler_name: str) -> list[tuple[str, Mapping[str, Any]]]:
        """The pods of ``pods`` (``(key, decoded pod)``, the store at ``revision``) a pass should group: this
        scheduler's, without ``pod-group-name``, not bound, not being deleted, not taken before. Empty when the
        store has not changed since the last call."""
        if revision == self.revision:
            return []
        self.revision = revision
        present: set[str] = set()
        out: list[tuple[str, Mapping[str, Any]]] = []
        for key, pod in pods:
            meta = _mapping(pod.get("metadata"))
            uid = str(meta.get("uid", "") or "")
            present.add(uid)
            if uid in self.seen:
                continue
            spec = _mapping(pod.get("spec"))
            if ((spec.get("schedulerName") or C.DEFAULT_SCHEDULER_NAME) != scheduler_name or spec.get("nodeName")
                    or meta.get("deletionTimestamp")
                    or _mapping(meta.get("annotations")).get(C.POD_GROUP_NAME_ANNOTATION)):
                continue
            self.seen.add(uid)
            out.append((key, pod))
        self.seen &= present
        return out
