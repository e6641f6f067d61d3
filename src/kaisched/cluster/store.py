"""The embedded cluster's object store: the objects that change from cycle to cycle (pods, PodGroups, DRA
ResourceClaims and ResourceClaimTemplates) beside the static ones (nodes, queues, priority classes, topologies,
DeviceClasses, ResourceSlices), and how a :class:`~kaisched.framework.result.CycleResult` changes them.

:meth:`EmbeddedCluster.apply` plays the API server and the controllers around the scheduler:

* a bind puts the pod on its node, Running, with its GPU groups' labels;
* an eviction deletes the pod and its controller recreates it at once: Pending, off its node (same name), without
  a nominated node;
* a pod the cycle pipelines is nominated to its node (``status.nominatedNodeName``, which keeps its claim there in
  the next cycle: :mod:`kaisched.plugins.nominated_pods`); a nomination the cycle clears is removed
  (``CycleResult.nominations``, applied after the evictions: a moved victim's new pod is nominated);
* PodGroups get the last-start and stale timestamps the cycle reported;
* DRA (resource.k8s.io/v1), as the resourceclaim controller and the DRA scheduler's write-back: the claim a
  cycle made from a ResourceClaimTemplate for a pod it bound is created (owned by the pod, annotated with the
  pod's claim name) and named in the pod's ``status.resourceClaimStatuses``; every claim of the cycle's binds
  gets its ``status.allocation`` (the devices) and the bound pods in ``status.reservedFor``.

A pod that finishes (:meth:`EmbeddedCluster.finish`: Succeeded or Failed), is deleted or is evicted gives its
claims back: its reservations are removed, a claim no pod reserves any more is deallocated, and the claims made
from templates for it are deleted (the recreated pod of an eviction gets new ones when it is placed again).

Objects are immutable: a change replaces the object, an object that does not change keeps its identity (the
cycle memo, :mod:`kaisched.cluster.memo`, recognises an unchanged cluster by identities).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from kaisched.framework.result import ClaimAllocation, CycleResult, Placement, PodGroupStatus
from kaisched.k8s.objects import (
    ClaimConsumer,
    DeviceRequestResult,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    ParsedObjects,
    Pod,
    PodGroup,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)
from kaisched.model.dra import POD_CLAIM_NAME_ANNOTATION, spec_gpus
from kaisched.model.dra_snapshot import claim_from_template
from kaisched.model.gpu import gpu_group_labels, is_gpu_group_label

DONE_PHASES = frozenset({"Succeeded", "Failed"})


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


# ----------------------------------------------------------------------------------------- pod changes
def bound_pod(pod: Pod, placement: Placement) -> Pod:
    """The pod after its bind: on its node, Running, with its GPU groups' labels (and no nominated node)."""
    labels = {**pod.meta.labels, **gpu_group_labels(placement.gpu_groups)} if placement.gpu_groups else \
        pod.meta.labels
    return replace(pod, node_name=placement.node, phase="Running", meta=replace(pod.meta, labels=labels),
                   nominated_node_name="")


def nominated_pod(pod: Pod, node: str) -> Pod:
    """The pod with ``status.nominatedNodeName`` set to ``node`` ("" clears it; the same object when it is so)."""
    if pod.nominated_node_name == node:
        return pod
    return replace(pod, nominated_node_name=node)


def evicted_pod(pod: Pod) -> Pod:
    """The pod after its eviction: recreated by its controller, Pending, off its node and GPU groups, without
    the claims made for the pod it replaces."""
    labels = {k: v for k, v in pod.meta.labels.items() if not is_gpu_group_label(k)}
    if pod.resource_claim_statuses:
        return replace(pod, node_name="", phase="Pending", meta=replace(pod.meta, labels=labels),
                       resource_claim_statuses={}, nominated_node_name="")
    return replace(pod, node_name="", phase="Pending", meta=replace(pod.meta, labels=labels), nominated_node_name="")


def annotated_pod_group(pg: PodGroup, status: PodGroupStatus) -> PodGroup:
    """The PodGroup with the last-start and stale timestamps the cycle reported (the same object when they
    are already there)."""
    current = pg.meta.annotations
    changes = status.annotations()
    if all(current.get(key) == value for key, value in changes.items()):
        return pg
    ann = {k: v for k, v in current.items() if k not in changes}
    ann.update({k: v for k, v in changes.items() if v is not None})
    return replace(pg, meta=replace(pg.meta, annotations=ann))


# --------------------------------------------------------------------------------------------- claims
def _node_selector(node: str) -> tuple[NodeSelectorTerm, ...] | None:
    """``status.allocation.nodeSelector`` of devices on one node (the node by name), None for others."""
    if not node:
        return None
    return (NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", (node,)),)),)


def _consumer(pod: Pod) -> ClaimConsumer:
    return ClaimConsumer(resource="pods", name=pod.meta.name, uid=pod.meta.uid)


def _made_for(claim: ResourceClaim) -> str:
    """The uid of the pod a claim was made for from a template ("" for other claims)."""
    if POD_CLAIM_NAME_ANNOTATION not in claim.meta.annotations:
        return ""
    return next((ref.uid for ref in claim.meta.owner_references if ref.kind == "Pod" and ref.controller), "")


class EmbeddedCluster:
    """The embedded cluster's objects, by ``namespace/name`` (nodes and the other static objects in ``static``).

    ``pods``, ``pod_groups``, ``claims`` and ``templates`` may be read directly; change them through the
    methods, which keep the claims' reservations and owners indexed."""

    __slots__ = ("_made", "_reserving", "claims", "pod_groups", "pods", "static", "templates")

    def __init__(self, static: ParsedObjects | None = None) -> None:
        self.static = static if static is not None else ParsedObjects()
        self.pods: dict[str, Pod] = {}
        self.pod_groups: dict[str, PodGroup] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self._reserving: dict[str, set[str]] = {}  # pod uid -> keys of the claims it reserves
        self._made: dict[str, set[str]] = {}  # pod uid -> keys of the claims made from templates for it
        self.add(ParsedObjects(pods=self.static.pods, pod_groups=self.static.pod_groups,
                               resource_claims=self.static.resource_claims,
                               resource_claim_templates=self.static.resource_claim_templates))

    # ---- contents ------------------------------------------------------------------------------------
    def add(self, parsed: ParsedObjects) -> None:
        """Create (or replace) the pods, PodGroups, claims and templates of ``parsed``."""
        for pod in parsed.pods:
            self.pods[_key(pod.meta.namespace, pod.meta.name)] = pod
        for pg in parsed.pod_groups:
            self.pod_groups[_key(pg.meta.namespace, pg.meta.name)] = pg
        for template in parsed.resource_claim_templates:
            self.templates[_key(template.meta.namespace, template.meta.name)] = template
        for claim in parsed.resource_claims:
            self._put_claim(claim)

    def parsed(self) -> ParsedObjects:
        """Every object, as a cycle reads them (new lists of the same objects)."""
        s = self.static
        return ParsedObjects(nodes=s.nodes, pods=list(self.pods.values()), queues=s.queues,
                             pod_groups=list(self.pod_groups.values()), priority_classes=s.priority_classes,
                             topologies=s.topologies, workloads=s.workloads, device_classes=s.device_classes,
                             resource_slices=s.resource_slices, resource_claims=list(self.claims.values()),
                             resource_claim_templates=list(self.templates.values()))

    def _put_claim(self, claim: ResourceClaim) -> None:
        key = _key(claim.meta.namespace, claim.meta.name)
        old = self.claims.get(key)
        if old is not None:
            self._unindex(key, old)
        self.claims[key] = claim
        for c in claim.reserved_for:
            self._reserving.setdefault(c.uid, set()).add(key)
        owner = _made_for(claim)
        if owner:
            self._made.setdefault(owner, set()).add(key)

    def _unindex(self, key: str, claim: ResourceClaim) -> None:
        for c in claim.reserved_for:
            keys = self._reserving.get(c.uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._reserving[c.uid]
        owner = _made_for(claim)
        if owner and owner in self._made:
            self._made[owner].discard(key)
            if not self._made[owner]:
                del self._made[owner]

    def delete_claim(self, key: str) -> None:
        claim = self.claims.pop(key, None)
        if claim is not None:
            self._unindex(key, claim)

    def delete_template(self, key: str) -> None:
        self.templates.pop(key, None)

    def delete_pod_group(self, key: str) -> None:
        self.pod_groups.pop(key, None)

    # ---- a cycle's decisions -------------------------------------------------------------------------------
    def apply(self, result: CycleResult, now: datetime | None = None) -> None:
        """Binds, the claims of the binds, evictions, nominations and PodGroup timestamps of one cycle."""
        for b in result.binds:
            pod = self.pods.get(b.pod)
            if pod is not None:
                self.pods[b.pod] = bound_pod(pod, b)
        for alloc in result.claims:
            self._allocated(alloc, now)
        for e in result.evictions:
            self.evict(e.pod)
        for n in result.nominations:
            pod = self.pods.get(n.pod)
            if pod is not None and pod.phase not in DONE_PHASES:
                self.pods[n.pod] = nominated_pod(pod, n.node)
        for status in result.pod_groups:
            pg = self.pod_groups.get(status.name)
            if pg is not None:
                self.pod_groups[status.name] = annotated_pod_group(pg, status)

    def _allocated(self, alloc: ClaimAllocation, now: datetime | None) -> None:
        """A claim of the cycle's binds: made from its template when the cycle made it, allocated, reserved."""
        pods = [p for p in (self.pods.get(k) for k in alloc.pods) if p is not None]
        claim = self.claims.get(alloc.claim)
        if claim is None:
            if not alloc.template or not pods:
                return  # (a claim deleted meanwhile: nothing to write back)
            pod = pods[0]
            template = self.templates.get(_key(pod.meta.namespace, alloc.template))
            name = alloc.claim.partition("/")[2]
            if template is None:
                template = ResourceClaimTemplate(meta=ObjectMeta(name=alloc.template, namespace=pod.meta.namespace),
                                                 spec=ResourceClaimSpec())
            claim = claim_from_template(template, name, pod, alloc.pod_claim, now)
        if alloc.template and alloc.pod_claim:
            name = alloc.claim.partition("/")[2]
            for pod in pods:
                if pod.resource_claim_statuses.get(alloc.pod_claim) != name:
                    statuses = {**pod.resource_claim_statuses, alloc.pod_claim: name}
                    self.pods[_key(pod.meta.namespace, pod.meta.name)] = pod = replace(
                        pod, resource_claim_statuses=statuses)
        allocation = claim.allocation
        node_selector = claim.allocation_node_selector
        if alloc.devices and (alloc.new or allocation is None):
            allocation = tuple(DeviceRequestResult(d.request, d.driver, d.pool, d.device) for d in alloc.devices)
            node_selector = _node_selector(alloc.node)
        reserved = list(claim.reserved_for)
        known = {c.uid for c in reserved}
        for pod in pods:
            if pod.meta.uid not in known:
                reserved.append(_consumer(pod))
                known.add(pod.meta.uid)
        if (allocation is not claim.allocation or node_selector is not claim.allocation_node_selector
                or len(reserved) != len(claim.reserved_for) or alloc.claim not in self.claims):
            self._put_claim(replace(claim, allocation=allocation, allocation_node_selector=node_selector,
                                    reserved_for=tuple(reserved)))

    # ---- pods going away ---------------------------------------------------------------------------------
    def evict(self, key: str) -> None:
        """The pod is deleted and its controller recreates it at once (Pending, same name); its claims are
        given back."""
        pod = self.pods.get(key)
        if pod is None:
            return
        self.release(pod)
        self.pods[key] = evicted_pod(pod)

    def finish(self, key: str, phase: str = "Succeeded") -> None:
        """The pod ran to its end (``Succeeded`` or ``Failed``): it stays, its claims are given back."""
        if phase not in DONE_PHASES:
            raise ValueError(f"a finished pod is Succeeded or Failed, got {phase!r}")
        pod = self.pods.get(key)
        if pod is None:
            return
        self.release(pod)
        self.pods[key] = replace(pod, phase=phase)

    def delete_pod(self, key: str) -> None:
        """The pod is gone; its claims are given back."""
        pod = self.pods.pop(key, None)
        if pod is not None:
            self.release(pod)

    def delete_pods(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete_pod(key)

    def release(self, pod: Pod) -> None:
        """The resourceclaim controller for a pod that no longer runs: its reservations removed, a claim no pod
        reserves any more deallocated, the claims made from templates for it deleted."""
        uid = pod.meta.uid
        for key in sorted(self._reserving.get(uid, ())):
            claim = self.claims[key]
            reserved = tuple(c for c in claim.reserved_for if c.uid != uid)
            if reserved:
                self._put_claim(replace(claim, reserved_for=reserved))
            else:
                self._put_claim(replace(claim, reserved_for=(), allocation=None, allocation_node_selector=None))
        for key in sorted(self._made.get(uid, ())):
            self.delete_claim(key)

    # ---- questions -----------------------------------------------------------------------------------------
    def device_holders(self) -> dict[str, list[str]]:
        """``driver/pool/device`` -> the claims whose allocation holds it (more than one is a conflict)."""
        out: dict[str, list[str]] = {}
        for key, claim in self.claims.items():
            for r in claim.allocation or ():
                out.setdefault(f"{r.driver}/{r.pool}/{r.device}", []).append(key)
        return out

    def pod_claims(self, key: str) -> list[ResourceClaim]:
        """The claims a pod uses now (by name, or made for it and named in its status)."""
        pod = self.pods.get(key)
        if pod is None:
            return []
        out: list[ResourceClaim] = []
        for pc in pod.resource_claims:
            name = pc.resource_claim_name or pod.resource_claim_statuses.get(pc.name, "")
            claim = self.claims.get(_key(pod.meta.namespace, name)) if name else None
            if claim is not None:
                out.append(claim)
        return out

    def pod_claim_gpus(self, pod: Pod) -> float:
        """The DRA GPUs a pod asks for through claims only it uses (its templates' claims, or claims by name
        that no other pod of the store names), as the scheduler counts them."""
        gpus = 0.0
        ns = pod.meta.namespace
        for pc in pod.resource_claims:
            if pc.resource_claim_template_name:
                template = self.templates.get(_key(ns, pc.resource_claim_template_name))
                if template is not None:
                    gpus += spec_gpus(template.spec)
            else:
                claim = self.claims.get(_key(ns, pc.resource_claim_name))
                if claim is not None and not self._shared(pod, pc.resource_claim_name):
                    gpus += spec_gpus(claim.spec)
        return gpus

    def _shared(self, pod: Pod, name: str) -> bool:
        ns = pod.meta.namespace
        return any(other is not pod and other.meta.namespace == ns
                   and any(pc.resource_claim_name == name for pc in other.resource_claims)
                   for other in self.pods.values())
