"""The pod-grouper's building blocks (spec 10.1, 10.2): owner chains, the plan a grouper returns, and the
default grouper every kind builds on.

A grouper is a function ``GroupRequest -> PodGroupPlan | GrouperError``: given one pod and its owner chain
it says which PodGroup the pod belongs to (name, minMember, subgroups, queue, priority, preemptibility,
topology) and, when the PodGroup has subgroups, the pod's leaf. Groupers never see the clock or any
other pod than the one they group, except through :attr:`GroupContext.pods_of` (Spark, LeaderWorkerSet).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectMeta, OwnerReference, Pod, SubGroup, TopologyConstraint, Workload

TRAIN = "train"
INFERENCE = "inference"
BUILD = "build"


@dataclass(frozen=True, slots=True)
class Owner:
    """One object of a pod's owner chain. ``workload`` is None when only the ownerReference is known (the
    object itself was not given): its labels, annotations and spec are then empty."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str
    workload: Workload | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def labels(self) -> Mapping[str, str]:
        return self.workload.meta.labels if self.workload is not None else {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.workload.meta.annotations if self.workload is not None else {}

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.workload.spec if self.workload is not None else {}

    @property
    def status(self) -> Mapping[str, Any]:
        return self.workload.status if self.workload is not None else {}

    @property
    def creation(self) -> datetime | None:
        return self.workload.meta.creation_timestamp if self.workload is not None else None

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @staticmethod
    def of_pod(pod: Pod) -> Owner:
        meta = pod.meta
        return Owner("v1", "Pod", meta.name, meta.namespace, meta.uid or f"{meta.namespace}/{meta.name}")

    @staticmethod
    def of_workload(w: Workload) -> Owner:
        meta = w.meta
        return Owner(w.api_version, w.kind, meta.name, meta.namespace, meta.uid or f"{meta.namespace}/{meta.name}",
                     w)

    @staticmethod
    def of_reference(ref: OwnerReference, namespace: str) -> Owner:
        return Owner(ref.api_version, ref.kind, ref.name, namespace, ref.uid or f"{namespace}/{ref.name}")


@dataclass(frozen=True, slots=True)
class KindDefault:
    """A per-kind default from the pod-grouper's optional ConfigMap (``types`` key)."""

    priority_class: str = ""
    preemptibility: str = ""


@dataclass(slots=True)
class GroupContext:
    priority_classes: frozenset[str]  # names that exist (KAI's built-in ones included)
    kind_defaults: Mapping[str, KindDefault] = field(default_factory=dict)  # "Kind.group" or "Kind" -> default
    # all pods (namespace, owner uid) -> pods, for groupers that look at a workload's other pods
    pods_by_owner: Mapping[tuple[str, str], Sequence[Pod]] = field(default_factory=dict)
    # every workload of the input by (namespace, kind, name), for objects outside a pod's owner chain
    workloads: Mapping[tuple[str, str, str], Workload] = field(default_factory=dict)

    def workload(self, namespace: str, kind: str, name: str) -> Workload | None:
        return self.workloads.get((namespace, kind, name))

    def pods_of(self, owner: Owner) -> Sequence[Pod]:
        return self.pods_by_owner.get((owner.namespace, owner.uid), ())

    def kind_default(self, owner: Owner) -> KindDefault:
        return self.kind_defaults.get(f"{owner.kind}.{owner.group}") or self.kind_defaults.get(owner.kind) or \
            KindDefault()


@dataclass(frozen=True, slots=True)
class GroupRequest:
    pod: Pod
    chain: tuple[Owner, ...]  # the pod's owners, its direct owner first, the top owner last (may be empty)
    ctx: GroupContext

    @property
    def top(self) -> Owner:
        """The top owner (the pod itself for a pod without owners)."""
        return self.chain[-1] if self.chain else Owner.of_pod(self.pod)

    @property
    def owners_top_first(self) -> tuple[Owner, ...]:
        return tuple(reversed(self.chain))


@dataclass(slots=True)
class PodGroupPlan:
    """What the pod-grouper writes: the PodGroup, and the pod's leaf subgroup."""

    name: str
    namespace: str
    queue: str
    min_member: int = 1
    priority_class_name: str = TRAIN
    preemptibility: str = ""
    sub_groups: tuple[SubGroup, ...] = ()
    topology: TopologyConstraint | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    owner: Owner | None = None  # the object the PodGroup belongs to (ownerReference, creation time)
    subgroup: str = ""  # the pod's leaf subgroup ("" without subgroups)


@dataclass(frozen=True, slots=True)
class GrouperError:
    """Why a pod cannot be grouped (KAI: a ``PodGrouperWarning`` event); ``field`` names the workload field."""

    object: str
    field: str
    message: str


GroupFn = Callable[[GroupRequest], "PodGroupPlan | GrouperError"]


# ------------------------------------------------------------------------------- default grouper (10.2)
def queue_of(req: GroupRequest) -> str:
    """Label ``kai.scheduler/queue`` on the top owner, then the pod; then ``project`` (+ ``-<node pool>``);
    else ``default-queue``."""
    pod_labels = req.pod.meta.labels
    for labels in (req.top.labels, pod_labels):
        for key in (C.QUEUE_LABEL, C.LEGACY_QUEUE_LABEL):
            if labels.get(key):
                return labels[key]
    for labels in (req.top.labels, pod_labels):
        project = labels.get(C.PROJECT_LABEL)
        if project:
            pool = pod_labels.get(C.NODE_POOL_LABEL)
            return f"{project}-{pool}" if pool else project
    return C.DEFAULT_QUEUE_NAME


def priority_of(req: GroupRequest, default: str) -> str:
    """The first existing PriorityClass named by an owner's label (top first), the pod's label or the pod's
    ``spec.priorityClassName``; else the per-kind ConfigMap default; else ``default``."""
    names = [o.labels.get(C.PRIORITY_CLASS_LABEL, "") for o in req.owners_top_first]
    names += [req.pod.meta.labels.get(C.PRIORITY_CLASS_LABEL, ""), req.pod.priority_class_name]
    for name in names:
        if name and name in req.ctx.priority_classes:
            return name
    configured = req.ctx.kind_default(req.top).priority_class
    return configured or default


def preemptibility_of(req: GroupRequest) -> str:
    for labels in (*(o.labels for o in req.owners_top_first), req.pod.meta.labels):
        value = labels.get(C.PREEMPTIBILITY_LABEL, "")
        if value in (C.PREEMPTIBLE, C.NON_PREEMPTIBLE):
            return value
    configured = req.ctx.kind_default(req.top).preemptibility
    return configured if configured in (C.PREEMPTIBLE, C.NON_PREEMPTIBLE) else ""


def topology_of(annotations: Mapping[str, str]) -> TopologyConstraint | None:
    topology = annotations.get(C.TOPOLOGY_ANNOTATION, "")
    if not topology:
        return None
    return TopologyConstraint(topology, annotations.get(C.TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, ""),
                              annotations.get(C.TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, ""))


def top_owner_metadata(owner: Owner) -> str:
    """``kai.scheduler/top-owner-metadata``: name, uid, group, version and kind of the top owner (YAML; JSON
    is valid YAML)."""
    return json.dumps({"name": owner.name, "uid": owner.uid, "group": owner.group, "version": owner.version,
                       "kind": owner.kind}, sort_keys=True)


def default_plan(req: GroupRequest, *, default_priority: str = TRAIN, owner: Owner | None = None,
                 name: str | None = None, min_member: int = 1) -> PodGroupPlan:
    """The default grouper (spec 10.2) for ``owner`` (the top owner unless given): PodGroup
    ``pg-<owner>-<uid>``, minMember 1 unless given, queue / priority / preemptibility / topology from the
    labels and annotations, the owner's labels and annotations copied."""
    top = owner or req.top
    labels = dict(top.labels)
    annotations = dict(top.annotations)
    for key in (C.USER_LABEL,):
        if key in req.pod.meta.labels and key not in labels:
            labels[key] = req.pod.meta.labels[key]
        if key in req.pod.meta.annotations and key not in annotations:
            annotations[key] = req.pod.meta.annotations[key]
    pool = req.pod.meta.labels.get(C.NODE_POOL_LABEL)
    if pool and C.NODE_POOL_LABEL not in labels:
        labels[C.NODE_POOL_LABEL] = pool
    annotations[C.TOP_OWNER_METADATA_ANNOTATION] = top_owner_metadata(req.top)
    return PodGroupPlan(
        name=name or pg_name(top.name, top.uid),
        namespace=req.pod.meta.namespace,
        queue=queue_of(req),
        min_member=min_member,
        priority_class_name=priority_of(req, default_priority),
        preemptibility=preemptibility_of(req),
        topology=topology_of(req.top.annotations),
        labels=labels,
        annotations=annotations,
        owner=top,
    )


def pg_name(name: str, uid: str) -> str:
    return f"pg-{name}-{uid}".replace("/", "-")


def int_field(value: object, default: int = 0) -> int | None:
    """An integer from workload data (None when it is not one: the caller reports the field)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def error(owner: Owner, field_path: str, message: str) -> GrouperError:
    return GrouperError(owner.ref, field_path, message)


def pod_group_meta(plan: PodGroupPlan, default_creation: datetime | None) -> ObjectMeta:
    owner = plan.owner
    refs: tuple[OwnerReference, ...] = ()
    if owner is not None:
        refs = (OwnerReference(owner.api_version, owner.kind, owner.name, owner.uid, controller=True),)
    return ObjectMeta(name=plan.name, namespace=plan.namespace, uid=f"podgroup/{plan.namespace}/{plan.name}",
                      labels=plan.labels, annotations=plan.annotations,
                      creation_timestamp=(owner.creation if owner is not None and owner.creation else default_creation),
                      owner_references=refs)
