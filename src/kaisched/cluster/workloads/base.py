"""What the embedded workload controllers share: making the pods (and the intermediate objects, such as a
Deployment's ReplicaSet) that a real controller would create, as Kubernetes dicts, deterministically.

A controller is a function ``(workload, Emit) -> None`` that calls :meth:`Emit.pod` and :meth:`Emit.child`
(and :meth:`Emit.error` for a workload it cannot run). Names follow the real controllers; where those use
random suffixes (a Job's pods, a ReplicaSet's pods), the suffix is derived from the parent's uid and the
pod's index, so the same manifests always give the same pods.

What the controllers make is bounded (:class:`PodLimit`): at most :data:`MAX_PODS` pods (and as many
intermediate objects) over one expansion, the pods of every workload of one input (``kaisched schedule``), or
of one simulation (a scenario's ``limits.pods``). A controller checks a replica count against it before it
makes anything (:meth:`Emit.expect`: ``Deployment ns/x: spec.replicas: 100000000 exceeds the limit of
1,000,000 pods per input``); :meth:`Emit.pod` and :meth:`Emit.child` stop a controller that goes over all the
same (:class:`PodLimitReached`).
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from kaisched.k8s.objects import ObjectError, Workload

Obj = dict[str, Any]
UID_NAMESPACE = uuid.UUID("0e2b0f1c-2f4e-4c8e-9a53-7d1d3f4f9b21")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' generated names


#: the most pods the controllers make over one expansion by default (as a scenario's ``limits.pods``); a real
#: cluster is far smaller (Kubernetes supports 150,000 pods)
MAX_PODS: Final = 1_000_000


@dataclass(slots=True)
class PodLimit:
    """At most ``pods`` pods (and as many intermediate objects) made by the controllers over one expansion;
    ``scope`` and ``hint`` say which limit it is in the errors (``per input``; ``per simulation``,
    ``limits.pods``). ``made``/``children``: what was made so far; ``refused``: the errors it caused."""

    pods: int = MAX_PODS
    scope: str = "per input"
    hint: str = ""
    made: int = 0
    children: int = 0
    refused: list[ObjectError] = field(default_factory=list)

    def describe(self, what: str = "pods") -> str:
        """``the limit of 1,000,000 pods per simulation (limits.pods)``."""
        return f"the limit of {self.pods:,} {what} {self.scope}" + (f" ({self.hint})" if self.hint else "")


class PodLimitReached(Exception):
    """Raised by :meth:`Emit.pod` / :meth:`Emit.child` past the :class:`PodLimit`: the controller is stopped
    and the workload reported (:func:`~kaisched.cluster.workloads.expand_workloads`)."""


def child_uid(parent_uid: str, kind: str, name: str) -> str:
    return str(uuid.uuid5(UID_NAMESPACE, f"{parent_uid}/{kind}/{name}"))


def suffix(seed: str, length: int = 5) -> str:
    """A Kubernetes-style random-looking suffix, derived from ``seed``."""
    digest = hashlib.sha1(seed.encode()).digest()
    return "".join(SUFFIX_ALPHABET[b % len(SUFFIX_ALPHABET)] for b in digest[:length])


def rfc3339(ts: datetime | None) -> str | None:
    return ts.isoformat().replace("+00:00", "Z") if ts is not None else None


class Parent:
    """The object new objects are owned by (a workload from the input, or an object a controller made)."""

    def __init__(self, api_version: str, kind: str, name: str, namespace: str, uid: str,
                 creation: datetime | None) -> None:
        self.api_version, self.kind, self.name, self.namespace, self.uid = api_version, kind, name, namespace, uid
        self.creation = creation

    @staticmethod
    def of(w: Workload) -> Parent:
        m = w.meta
        return Parent(w.api_version, w.kind, m.name, m.namespace, m.uid or f"{m.namespace}/{m.name}",
                      m.creation_timestamp)

    def reference(self) -> Obj:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


class Emit:
    """Collects what one controller creates for one workload."""

    def __init__(self, workload: Workload, now: datetime | None = None, limit: PodLimit | None = None) -> None:
        self.workload = workload
        self.now = now  # the cycle's time (a CronJob's schedule), None when unknown
        self.limit = limit if limit is not None else PodLimit()
        self.parent = Parent.of(workload)
        self.objects: list[Obj] = []
        self.errors: list[ObjectError] = []

    @property
    def label(self) -> str:
        m = self.workload.meta
        return f"{self.workload.kind} {m.namespace}/{m.name}"

    def error(self, field: str, message: str) -> None:
        self.errors.append(ObjectError(self.label, field, message))

    def expect(self, pods: int, field: str, value: object = None, *, before: int = 0, what: str = "pods") -> bool:
        """Before ``pods`` pods are made from the count at ``field`` (``value``: how it is shown, the count as
        written by default, or ``2 Jobs of 8 pods``), ``before`` more planned by this workload: False, with an
        error naming the field, when that goes over the limit with what was made already. ``what``: ``Jobs``
        for a JobSet's replicas (intermediate objects)."""
        limit = self.limit
        made = limit.children if what != "pods" else limit.made
        others = made + before
        if others + pods <= limit.pods:
            return True
        shown = f"{pods}" if value is None else str(value)
        if others:
            more = f" ({others + pods:,} {what} with the {others:,} before it)"
        else:
            more = f" ({pods:,} {what})" if shown != str(pods) else ""
        error = ObjectError(self.label, field, f"{shown}{more} exceeds {limit.describe(what)}")
        self.errors.append(error)
        limit.refused.append(error)
        return False

    def child(self, api_version: str, kind: str, name: str, spec: Mapping[str, Any], *, parent: Parent | None = None,
              labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
              status: Mapping[str, Any] | None = None) -> Parent:
        """An intermediate object (a Deployment's ReplicaSet, a RayJob's RayCluster, ...), owned by ``parent``
        (default: the workload); returns it as a parent for the pods."""
        self.limit.children += 1
        if self.limit.children > self.limit.pods:
            raise PodLimitReached
        owner = parent or self.parent
        uid = child_uid(owner.uid, kind, name)
        meta: Obj = {"name": name, "namespace": owner.namespace, "uid": uid,
                     "ownerReferences": [owner.reference()]}
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner.creation is not None:
            meta["creationTimestamp"] = rfc3339(owner.creation)
        obj: Obj = {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": copy.deepcopy(dict(spec))}
        if status:
            obj["status"] = copy.deepcopy(dict(status))
        self.objects.append(obj)
        return Parent(api_version, kind, name, owner.namespace, uid, owner.creation)

    def pod(self, name: str, template: Mapping[str, Any] | None, *, parent: Parent | None = None,
            labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
            hostname: str | None = None) -> Obj:
        """A pending pod made from a pod template (``metadata`` + ``spec``), owned by ``parent``."""
        self.limit.made += 1
        if self.limit.made > self.limit.pods:
            raise PodLimitReached
        owner = parent or self.parent
        template = template if isinstance(template, Mapping) else {}
        tmeta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
        assert isinstance(tmeta, Mapping)
        tlabels, tannotations = tmeta.get("labels"), tmeta.get("annotations")
        pod_labels = {**(tlabels if isinstance(tlabels, Mapping) else {}), **(labels or {})}
        pod_annotations = {**(tannotations if isinstance(tannotations, Mapping) else {}), **(annotations or {})}
        meta: Obj = {"name": name, "namespace": owner.namespace, "uid": child_uid(owner.uid, "Pod", name),
                     "ownerReferences": [owner.reference()]}
        if pod_labels:
            meta["labels"] = pod_labels
        if pod_annotations:
            meta["annotations"] = pod_annotations
        if owner.creation is not None:
            meta["creationTimestamp"] = rfc3339(owner.creation)
        tspec = template.get("spec")
        spec = copy.deepcopy(dict(tspec)) if isinstance(tspec, Mapping) else {}
        if hostname:
            spec.setdefault("hostname", hostname)
        obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
        self.objects.append(obj)
        return obj


ControllerFn = Callable[[Workload, Emit], None]


def count(emit: Emit, value: object, field: str, default: int = 1) -> int | None:
    """A replica count from the workload: ``default`` when absent; an error (and None) when it is not a
    non-negative integer."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        emit.error(field, f"must be a non-negative integer, got {value!r}")
        return None
    if value < 0:
        emit.error(field, f"must be >= 0, got {value}")
        return None
    return value


def get(data: Mapping[str, Any], *path: str) -> Any:
    """``data[path[0]][path[1]]...``, None where a step is missing or not a mapping."""
    cur: Any = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur
