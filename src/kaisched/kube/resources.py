"""The resource kinds kaisched reads and writes, and the API paths to reach them.

A :class:`ResourceKind` knows its group, version, plural and scope, and builds every path the rest of
:mod:`kaisched.kube` sends: the collection across all namespaces (list and watch), one namespace's
collection, one object, and an object's subresources (``status``, ``binding``, ``eviction``). The DRA kinds
(``resource.k8s.io``) come in the version the server serves (:func:`dra_kinds`).
Cache keys follow client-go: ``"<namespace>/<name>"`` for namespaced objects, ``"<name>"`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

__all__ = [
    "CONFIGMAP",
    "DEVICE_CLASS",
    "DRA_GROUP",
    "DRA_VERSIONS",
    "EVENT",
    "KINDS",
    "LEASE",
    "NODE",
    "POD",
    "PODGROUP",
    "PRIORITY_CLASS",
    "QUEUE",
    "RESOURCE_CLAIM",
    "RESOURCE_CLAIM_TEMPLATE",
    "RESOURCE_SLICE",
    "TOPOLOGY",
    "ResourceKind",
    "dra_kinds",
    "key_for",
    "kind_for",
    "object_key",
]


def _seg(value: str, what: str) -> str:
    if not value:
        raise ValueError(f"empty {what} in an API path")
    if "/" in value:
        raise ValueError(f"{what} {value!r} contains '/'")
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """One API resource: ``kind`` (``"Pod"``), ``group`` (``""`` for the core group), ``version``, ``plural``."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of the objects: ``"v1"`` or ``"<group>/<version>"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base_path(self) -> str:
        """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified_plural(self) -> str:
        """``pods`` or ``podgroups.scheduling.run.ai``: how the API server names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def list_path(self, namespace: str | None = None) -> str:
        """The collection: all namespaces when ``namespace`` is None (list, watch), else one namespace's."""
        if namespace is None:
            return f"{self.base_path}/{self.plural}"
        if not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace {namespace!r} in its path")
        return f"{self.base_path}/namespaces/{_seg(namespace, 'namespace')}/{self.plural}"

    def create_path(self, namespace: str | None = None) -> str:
        """Where to POST a new object: the namespace's collection (namespaced kinds need one)."""
        self._check_scope(namespace)
        return self.list_path(namespace if self.namespaced else None)

    def object_path(self, name: str, namespace: str | None = None) -> str:
        """One object; ``namespace`` is required for namespaced kinds and refused for cluster-scoped ones."""
        self._check_scope(namespace)
        return f"{self.list_path(namespace if self.namespaced else None)}/{_seg(name, 'name')}"

    def subresource_path(self, subresource: str, name: str, namespace: str | None = None) -> str:
        """``.../<name>/<subresource>``, e.g. ``pods/<name>/binding``; unknown subresources are refused."""
        if subresource not in self.subresources:
            raise ValueError(f"{self.kind} has no subresource {subresource!r} (known: {sorted(self.subresources)})")
        return f"{self.object_path(name, namespace)}/{subresource}"

    def key(self, obj: Mapping[str, Any]) -> str:
        """The cache key of an object of this kind."""
        return object_key(obj, namespaced=self.namespaced)

    def _check_scope(self, namespace: str | None) -> None:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        if not self.namespaced and namespace:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace {namespace!r} in its path")


def key_for(namespace: str | None, name: str) -> str:
    """``"<namespace>/<name>"``, or ``"<name>"`` when ``namespace`` is empty or None."""
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Mapping[str, Any], *, namespaced: bool | None = None) -> str:
    """The cache key of a decoded object. ``namespaced=None`` trusts ``metadata.namespace``; ``False`` drops it."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        raise ValueError(f"object without metadata: {str(obj)[:120]}")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"object without metadata.name: {str(obj)[:120]}")
    if namespaced is False:
        return name
    namespace = meta.get("namespace")
    if namespaced and not namespace:
        raise ValueError(f"namespaced object {name!r} without metadata.namespace")
    return key_for(namespace if isinstance(namespace, str) else None, name)


NODE = ResourceKind("Node", "", "v1", "nodes", namespaced=False, subresources=frozenset({"status"}))
POD = ResourceKind(
    "Pod", "", "v1", "pods", namespaced=True, subresources=frozenset({"status", "binding", "eviction"})
)
CONFIGMAP = ResourceKind("ConfigMap", "", "v1", "configmaps", namespaced=True)
EVENT = ResourceKind("Event", "", "v1", "events", namespaced=True)
PODGROUP = ResourceKind(
    "PodGroup", "scheduling.run.ai", "v2alpha2", "podgroups", namespaced=True, subresources=frozenset({"status"})
)
QUEUE = ResourceKind("Queue", "scheduling.run.ai", "v2", "queues", namespaced=False, subresources=frozenset({"status"}))
PRIORITY_CLASS = ResourceKind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
TOPOLOGY = ResourceKind("Topology", "kai.scheduler", "v1alpha1", "topologies", namespaced=False)
LEASE = ResourceKind("Lease", "coordination.k8s.io", "v1", "leases", namespaced=True)

# Dynamic Resource Allocation (resource.k8s.io): v1 by default; :func:`dra_kinds` gives them in the version the
# server serves (``kaisched.kube.claims.discover_dra_version``: v1, else v1beta2, else v1beta1)
DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")
DEVICE_CLASS = ResourceKind("DeviceClass", DRA_GROUP, "v1", "deviceclasses", namespaced=False)
RESOURCE_SLICE = ResourceKind("ResourceSlice", DRA_GROUP, "v1", "resourceslices", namespaced=False)
RESOURCE_CLAIM = ResourceKind("ResourceClaim", DRA_GROUP, "v1", "resourceclaims", namespaced=True,
                              subresources=frozenset({"status"}))
RESOURCE_CLAIM_TEMPLATE = ResourceKind("ResourceClaimTemplate", DRA_GROUP, "v1", "resourceclaimtemplates",
                                       namespaced=True)


def dra_kinds(version: str) -> tuple[ResourceKind, ...]:
    """The four DRA kinds kaisched reads (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate) in
    ``version`` of ``resource.k8s.io``."""
    if version not in DRA_VERSIONS:
        raise ValueError(f"unknown {DRA_GROUP} version {version!r} (known: {', '.join(DRA_VERSIONS)})")
    return tuple(replace(k, version=version) for k in (DEVICE_CLASS, RESOURCE_SLICE, RESOURCE_CLAIM,
                                                        RESOURCE_CLAIM_TEMPLATE))


KINDS: Mapping[str, ResourceKind] = {
    k.kind: k for k in (NODE, POD, PODGROUP, QUEUE, PRIORITY_CLASS, TOPOLOGY, CONFIGMAP, LEASE, EVENT)
}


def kind_for(kind: str) -> ResourceKind:
    """The :class:`ResourceKind` named ``kind`` (``"Pod"``, ``"PodGroup"``...); a clear error otherwise."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown resource kind {kind!r} (known: {', '.join(sorted(KINDS))})") from None
