"""The snapshot's DRA part: the devices of its ResourceSlices, the claims each pod uses (made from their
templates where the snapshot plays the resourceclaim controller) and the :class:`DraState` that accounts them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kaisched.k8s.objects import (
    DeviceClass,
    ObjectMeta,
    OwnerReference,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from kaisched.model.dra import (
    POD_CLAIM_NAME_ANNOTATION,
    ClaimInfo,
    DraDevices,
    resolve_claim,
)
from kaisched.model.dra_state import DraState
from kaisched.model.selectors import term_matches
from kaisched.model.status import TaskStatus

if TYPE_CHECKING:
    from kaisched.model.node import NodeInfo


def template_claim_name(pod_name: str, pod_uid: str, pod_claim: str) -> str:
    """The name of the claim made from a template for a pod's claim (the resourceclaim controller's
    ``<pod>-<claim>-<5 characters>``; the characters are taken from the pod's uid, so the name is stable)."""
    digest = hashlib.sha256(f"{pod_uid}/{pod_claim}".encode()).hexdigest()
    suffix = "".join(_NAME_CHARS[int(digest[i:i + 2], 16) % len(_NAME_CHARS)] for i in range(0, 10, 2))
    return f"{pod_name[:_MAX_PREFIX]}-{pod_claim[:_MAX_PREFIX]}-{suffix}"


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # (the alphabet of Kubernetes' generated names)
_MAX_PREFIX = 28


def claim_from_template(template: ResourceClaimTemplate, name: str, pod: Pod, pod_claim: str,
                        now: datetime | None = None) -> ResourceClaim:
    """The ResourceClaim the resourceclaim controller makes from ``template`` for ``pod``'s claim ``pod_claim``:
    the template's spec, labels and annotations, owned by the pod, annotated with the pod's claim name."""
    ns = pod.meta.namespace
    return ResourceClaim(
        meta=ObjectMeta(name=name, namespace=ns, uid=f"{ns}/{name}", labels=dict(template.claim_labels),
                        annotations={**template.claim_annotations, POD_CLAIM_NAME_ANNOTATION: pod_claim},
                        creation_timestamp=now or pod.meta.creation_timestamp,
                        owner_references=(OwnerReference("v1", "Pod", pod.meta.name, pod.meta.uid, True),)),
        spec=template.spec)


@dataclass(slots=True)
class PodClaims:
    """What the snapshot found for one pod's ``spec.resourceClaims``: its claims, or why it cannot run."""

    claims: tuple[ClaimInfo, ...] = ()
    problem: str = ""  # the reason the pod cannot be scheduled ("" when none)
    reason: str = ""  # KAI-style reason code for the problem


CLAIM_MISSING = "ResourceClaimNotFound"
CLAIM_INVALID = "InvalidResourceClaim"
CLAIM_QUEUE = "ResourceClaimQueueMismatch"


class DraSnapshot:
    """Builds a snapshot's DRA part: the devices, the claims resolved for each pod (templated claims made when
    ``make_template_claims``), and the :class:`DraState` a NodeTable accounts them in."""

    def __init__(self, slices: Sequence[ResourceSlice], classes: Sequence[DeviceClass],
                 claims: Sequence[ResourceClaim], templates: Sequence[ResourceClaimTemplate],
                 infos: Sequence[NodeInfo], node_index: Mapping[str, int], *, make_template_claims: bool) -> None:
        self.devices = DraDevices(slices, infos, node_index, term_matches)
        self.classes = {c.meta.name: c for c in classes}
        self.claim_objects = {f"{c.meta.namespace}/{c.meta.name}": c for c in claims}
        self.templates = {f"{t.meta.namespace}/{t.meta.name}": t for t in templates}
        self.make_template_claims = make_template_claims
        self.infos: dict[str, ClaimInfo] = {}
        self.created: dict[str, ResourceClaim] = {}  # claims made from templates in this snapshot, by key
        self.by_pod: dict[str, PodClaims] = {}

    def resolve(self, pods: Sequence[tuple[str, Pod]]) -> None:
        """Each pod's claims (``pods``: uid and pod, of every pod that names a claim)."""
        for uid, pod in pods:
            self.by_pod[uid] = self._pod_claims(uid, pod)

    def _pod_claims(self, uid: str, pod: Pod) -> PodClaims:
        ns = pod.meta.namespace
        found: list[ClaimInfo] = []
        for pc in pod.resource_claims:
            templated = not pc.resource_claim_name
            if not templated:
                name = pc.resource_claim_name
            else:
                made = pod.resource_claim_statuses.get(pc.name)
                if made == "":
                    continue  # (the controller decided no claim is needed)
                name = made or ""
            key = f"{ns}/{name}"
            info = self.infos.get(key) if name else None
            if info is None:
                claim = self.claim_objects.get(key) if name else None
                if claim is None and templated:
                    claim, problem = self._from_template(pod, uid, pc.name, pc.resource_claim_template_name, name)
                    if claim is None:
                        return PodClaims(problem=problem, reason=CLAIM_MISSING)
                    key = f"{ns}/{claim.meta.name}"
                elif claim is None:
                    return PodClaims(problem=f"ResourceClaim {key} (spec.resourceClaims[{pc.name}]) does not exist",
                                     reason=CLAIM_MISSING)
                info = self.infos[key] = resolve_claim(claim, self.devices, self.classes, templated)
                if templated:
                    info.template, info.pod_claim = pc.resource_claim_template_name, pc.name
            if uid not in info.users:
                info.users.append(uid)
            found.append(info)
        return PodClaims(claims=tuple(found))

    def _from_template(self, pod: Pod, uid: str, pod_claim: str, template_name: str, made: str
                       ) -> tuple[ResourceClaim | None, str]:
        ns = pod.meta.namespace
        where = f"spec.resourceClaims[{pod_claim}]"
        if made:
            return None, f"ResourceClaim {ns}/{made} ({where}, made from template {template_name}) does not exist"
        template = self.templates.get(f"{ns}/{template_name}")
        if template is None:
            return None, f"ResourceClaimTemplate {ns}/{template_name} ({where}) does not exist"
        if not self.make_template_claims:
            return None, (f"waiting for the resourceclaim controller to make the claim of {where} from "
                          f"ResourceClaimTemplate {ns}/{template_name}")
        claim = claim_from_template(template, template_claim_name(pod.meta.name, uid, pod_claim), pod, pod_claim)
        self.created[f"{ns}/{claim.meta.name}"] = claim
        return claim, ""

    def state(self, statuses: Mapping[str, TaskStatus]) -> DraState:
        """The accounting, once every pod is resolved (``statuses``: every pod's status by uid)."""
        active = frozenset({TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING, TaskStatus.BOUND,
                            TaskStatus.RUNNING, TaskStatus.RELEASING})
        def alive(uid: str) -> bool:  # (a pod the snapshot does not hold: another scheduler's, or not seen yet)
            status = statuses.get(uid)
            return status is None or status in alive_statuses

        alive_statuses = active | {TaskStatus.PENDING, TaskStatus.GATED}
        for info in self.infos.values():
            if info.allocation:
                info.live = any(statuses.get(u) in alive_statuses for u in info.users) or any(
                    alive(c.uid) for c in info.reserved)
        for key, claim in self.claim_objects.items():  # claims no pod names: allocated ones still hold devices
            if key not in self.infos and claim.allocation:
                info = self.infos[key] = resolve_claim(claim, self.devices, self.classes, False)
                info.live = any(alive(c.uid) for c in info.reserved)
        return DraState(self.devices, self.infos)
