"""The scheduler's view of the cluster: informers' stores turned into the parsed objects of one cycle.

* Each object is parsed once per ``resourceVersion`` (:class:`ParseCache`): a cycle re-parses only what
  changed since the last one, and an unchanged pod is the same :class:`~kaisched.k8s.objects.Pod` object
  from cycle to cycle (so the snapshot's per-pod facts are reused too). A malformed object's errors are
  reported every cycle, the rest of the cluster is scheduled.
* Pods whose bind or eviction is still in flight (the writer's) are shown bound to their node, or
  terminating, so the next cycle never places them twice (:func:`overlay`).
* Workload owners (Jobs, PyTorchJobs, ReplicaSets...) are fetched on demand for the pod-grouper, only for
  pods that are not grouped yet, and cached for :data:`OWNER_TTL_S` (:class:`OwnerCache`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import (
    KubeObject,
    ObjectError,
    ParsedObjects,
    Pod,
)
from kaisched.k8s.parse import parse_objects
from kaisched.kube.api import Api, ApiError
from kaisched.model.gpu import gpu_group_labels

log = logging.getLogger(__name__)

OWNER_TTL_S = 60.0
MISSING_OWNER_TTL_S = 15.0
MAX_OWNER_DEPTH = 8

Json = Mapping[str, Any]


@dataclass(slots=True)
class _Parsed:
    rv: str
    obj: KubeObject | None
    errors: list[ObjectError]


class ParseCache:
    """Parsed objects by (kind, key), valid while the object's resourceVersion is unchanged."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], _Parsed] = {}

    def parse(self, kind: str, docs: Iterable[tuple[str, Json]], out: ParsedObjects) -> None:
        """Add the objects ``docs`` ((key, decoded JSON) pairs of one kind) to ``out``; forget the cached
        objects of this kind that are gone."""
        seen: set[tuple[str, str]] = set()
        entries = self._entries
        for key, doc in docs:
            ck = (kind, key)
            seen.add(ck)
            meta = doc.get("metadata")
            rv = str(meta.get("resourceVersion", "")) if isinstance(meta, Mapping) else ""
            entry = entries.get(ck)
            if entry is None or not rv or entry.rv != rv:
                entry = _parse_one(doc, rv)
                entries[ck] = entry
            out.errors.extend(entry.errors)
            if entry.obj is not None:
                out.add(entry.obj)
        for ck in [k for k in entries if k[0] == kind and k not in seen]:
            del entries[ck]

    def __len__(self) -> int:
        return len(self._entries)


def _parse_one(doc: Json, rv: str) -> _Parsed:
    parsed = parse_objects([doc])
    objs: list[KubeObject] = [*parsed.nodes, *parsed.pods, *parsed.queues, *parsed.pod_groups,
                              *parsed.priority_classes, *parsed.topologies, *parsed.workloads,
                              *parsed.device_classes, *parsed.resource_slices, *parsed.resource_claims,
                              *parsed.resource_claim_templates]
    return _Parsed(rv, objs[0] if objs else None, list(parsed.errors))


def overlay(pods: Iterable[tuple[str, Json]], binds: Mapping[str, tuple[str, tuple[str, ...]]],
            evictions: Iterable[str], now_rfc3339: str) -> list[tuple[str, Json]]:
    """The pods as the scheduler must see them: those with a bind in flight on their node (with their GPU
    groups' labels), those being evicted terminating. Other pods are passed through unchanged (same dict)."""
    evicting = set(evictions)
    if not binds and not evicting:
        return list(pods)
    out: list[tuple[str, Json]] = []
    for key, pod in pods:
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        placed = binds.get(key)
        if placed is not None and not spec.get("nodeName"):
            node, groups = placed
            labels = {**(meta.get("labels") or {}), **gpu_group_labels(groups)} if groups else \
                dict(meta.get("labels") or {})
            # the resourceVersion changes too, so the parse cache does not serve the unbound pod
            meta = {**meta, "labels": labels, "resourceVersion": f"{meta.get('resourceVersion', '')}+bind:{node}"}
            pod = {**pod, "metadata": meta, "spec": {**spec, "nodeName": node}}
        if key in evicting and not meta.get("deletionTimestamp"):
            meta = {**meta, "deletionTimestamp": now_rfc3339,
                    "resourceVersion": f"{meta.get('resourceVersion', '')}+evict"}
            pod = {**pod, "metadata": meta}
        out.append((key, pod))
    return out


@dataclass(slots=True)
class _Owner:
    obj: Json | None
    fetched: float


@dataclass
class OwnerCache:
    """Workload owners fetched from the API on demand (the pod-grouper follows owner chains).

    Only kinds the pod-grouper knows (``WORKLOAD_KINDS``) are fetched; an owner that cannot be read (gone,
    forbidden, an API group the cluster does not serve) is remembered as missing for a while, and the
    pod is grouped from its references alone, as for any other unknown owner.

    A pod not seen before (by uid) has its owner chain read afresh, whatever the cache holds: new pods of a
    workload often follow a change of it (a RayCluster or an elastic job scaled up), and the pod-grouper must
    size the PodGroup from the workload as it is now, as KAI's reads it from an up-to-date informer.
    """

    api: Api
    clock: Callable[[], float] = time.monotonic
    ttl: float = OWNER_TTL_S
    missing_ttl: float = MISSING_OWNER_TTL_S
    _owners: dict[tuple[str, str, str], _Owner] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)  # uids of the pods of the last call
    fetches: int = 0

    def owners_of(self, pods: Iterable[Pod]) -> list[Json]:
        """Every owner object up the chains of ``pods`` that the API has (decoded JSON), once each; the chains
        of pods the last call did not have are read afresh."""
        out: dict[tuple[str, str, str], Json] = {}
        todo: list[tuple[str, str, str, str, int, bool]] = []  # (namespace, apiVersion, kind, name, depth, fresh)
        seen: set[str] = set()
        for pod in pods:
            fresh = bool(pod.meta.uid) and pod.meta.uid not in self._seen
            seen.add(pod.meta.uid)
            for ref in pod.meta.owner_references:
                todo.append((pod.meta.namespace, ref.api_version, ref.kind, ref.name, 0, fresh))
        self._seen = seen
        # the chains of new pods first, so that an owner shared with older pods is read afresh once
        todo.sort(key=lambda item: item[5])
        while todo:
            namespace, api_version, kind, name, depth, fresh = todo.pop()
            key = (namespace, f"{api_version}/{kind}", name)
            if key in out or depth >= MAX_OWNER_DEPTH or kind not in C.WORKLOAD_KINDS:
                continue
            obj = self._get(namespace, api_version, kind, name, fresh=fresh)
            if obj is None:
                continue
            out[key] = obj
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
                if isinstance(ref, Mapping) and ref.get("kind") and ref.get("name"):
                    todo.append((namespace, str(ref.get("apiVersion", "")), str(ref["kind"]), str(ref["name"]),
                                 depth + 1, fresh))
        return [out[k] for k in sorted(out)]

    def _get(self, namespace: str, api_version: str, kind: str, name: str, *, fresh: bool = False) -> Json | None:
        key = (namespace, f"{api_version}/{kind}", name)
        now = self.clock()
        cached = self._owners.get(key)
        if not fresh and cached is not None and \
                now - cached.fetched < (self.ttl if cached.obj is not None else self.missing_ttl):
            return cached.obj
        path = owner_path(api_version, kind, namespace, name)
        obj: Json | None = None
        if path is not None:
            self.fetches += 1
            try:
                body = self.api.request("GET", path).body
                obj = body if isinstance(body, Mapping) else None
            except ApiError as exc:
                if exc.status not in (403, 404):
                    log.warning("owner %s %s/%s not read: %s", kind, namespace, name, exc)
        self._owners[key] = _Owner(obj, now)
        return obj


def owner_path(api_version: str, kind: str, namespace: str, name: str) -> str | None:
    """The API path of a namespaced workload object (plural = lower-case kind + ``s``, true of every
    workload kind the pod-grouper knows)."""
    if not api_version or not name or not namespace:
        return None
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{kind.lower()}s/{name}"
