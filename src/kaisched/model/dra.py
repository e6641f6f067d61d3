"""Dynamic Resource Allocation in the snapshot model (spec 7.7): the devices ResourceSlices publish, the claims
pods use, and which devices each claim holds.

* :class:`DraDevices` — every device of the snapshot's ResourceSlices (``driver/pool/device``), the node it is
  on (node-local slices) or the nodes that reach it (``nodeSelector`` / ``allNodes`` slices); devices of a
  driver whose name contains ``gpu`` are GPUs: each node-local one adds a GPU to its node's GPU row.
* :class:`ClaimInfo` — one ResourceClaim as the scheduler sees it: its requests resolved to the devices that
  match their device class and selectors (CEL, through :mod:`kaisched.model.dra_cel`), the GPUs it counts
  for its pod's queue, its allocation (from ``status.allocation``, or made in this session) and its users.
* :class:`~kaisched.model.dra_state.DraState` — the accounting a NodeTable keeps beside its arrays: which claim
  holds each device, which are releasing (every pod holding them is being evicted) and which a pipelined pod
  took. ``DraState.join`` is called by ``NodeTable.add_task`` / ``remove_task`` with the
  task's current status, so statements roll device allocations back exactly like every other resource.

A claim is allocated when the first pod using it is placed (devices chosen deterministically: per request in
order, the free matching devices of the node in slice order); a claim that is already allocated pins its
pods to the node of its devices; a claim named by several pods (``reservedFor``) is allocated once and holds
its devices while any of them runs. An allocated claim that no pod of the snapshot uses or reserves any more
is left to the resourceclaim controller to deallocate: its devices are free here.

The snapshot's part — claims resolved for each pod, templated claims made — is :mod:`kaisched.model.dra_snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kaisched.k8s.objects import (
    ClaimConsumer,
    DeviceClass,
    DeviceRequest,
    DeviceSubRequest,
    NodeSelectorTerm,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceSlice,
)
from kaisched.model.dra_cel import CelError, DeviceView, compile_selector

if TYPE_CHECKING:
    from kaisched.model.node import NodeInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
_TermMatcher = Callable[[NodeSelectorTerm, "NodeInfo"], bool]

#: Kubernetes' limit on ``status.reservedFor`` (ResourceClaimReservedForMaxSize)
MAX_CONSUMERS = 256
#: set on a claim made from a template: the pod's claim it was made for (as the resourceclaim controller does)
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
GPU_MARK = "gpu"  # a driver / device class whose name contains this is a GPU one (KAI's rule, spec 7.7)


def is_gpu_driver(driver: str) -> bool:
    return GPU_MARK in driver.lower()


def is_gpu_class(device_class: str) -> bool:
    return GPU_MARK in device_class.lower()




# ----------------------------------------------------------------------------------------- devices
class DraDevices:
    """The devices of a snapshot's ResourceSlices, in slice-name then device order (the allocation order)."""

    __slots__ = ("by_key", "count", "gpu", "keys", "matched", "node_gpus", "node_of", "reach", "results", "views")

    def __init__(self, slices: Sequence[ResourceSlice], infos: Sequence[NodeInfo], node_index: Mapping[str, int],
                 term_matches: _TermMatcher) -> None:
        n = len(infos)
        keys: list[str] = []
        views: list[DeviceView] = []
        results: list[tuple[str, str, str]] = []
        node_of: list[int] = []
        gpu: list[bool] = []
        reach: dict[int, BoolArray] = {}  # device -> nodes that reach it (multi-node slices)
        by_key: dict[str, int] = {}
        # of a pool published in several generations, only the newest counts (as the DRA allocator does)
        newest: dict[tuple[str, str], int] = {}
        for s in slices:
            pool = (s.driver, s.pool)
            newest[pool] = max(newest.get(pool, s.pool_generation), s.pool_generation)
        for s in sorted(slices, key=lambda s: s.meta.name):
            if s.pool_generation != newest[(s.driver, s.pool)]:
                continue
            if s.node_name:
                node = node_index.get(s.node_name, -1)
                if node < 0:
                    continue  # a slice of a node outside the snapshot offers nothing here
                mask = None
            else:
                node = -1
                if s.all_nodes:
                    mask = np.ones(n, dtype=np.bool_)
                else:
                    terms = s.node_selector or ()
                    mask = np.array([any(term_matches(t, info) for t in terms) for info in infos], dtype=np.bool_)
            for d in s.devices:
                key = f"{s.driver}/{s.pool}/{d.name}"
                if key in by_key:
                    continue  # (a device published twice: the first slice's counts)
                i = len(keys)
                by_key[key] = i
                keys.append(key)
                results.append((s.driver, s.pool, d.name))
                views.append(DeviceView(driver=s.driver, attributes={k: (a.kind, a.value)
                                                                     for k, a in d.attributes.items()},
                                        capacity=dict(d.capacity)))
                node_of.append(node)
                gpu.append(is_gpu_driver(s.driver))
                if mask is not None:
                    reach[i] = mask
        self.keys = keys
        self.views = views
        self.results = results
        self.by_key = by_key
        self.count = len(keys)
        self.node_of: IntArray = np.array(node_of, dtype=np.int64)
        self.gpu: BoolArray = np.array(gpu, dtype=np.bool_)
        self.reach = reach
        # (device class, its selectors, the request's selectors) -> the devices they select, the first error
        self.matched: dict[tuple[str, tuple[str, ...], tuple[str, ...]], tuple[IntArray, str]] = {}
        local_gpus = self.node_of[(self.node_of >= 0) & self.gpu] if self.count else np.zeros(0, dtype=np.int64)
        self.node_gpus: npt.NDArray[np.float64] = np.bincount(local_gpus, minlength=n).astype(np.float64)

    def reachable(self, device: int, node: int) -> bool:
        home = int(self.node_of[device])
        if home >= 0:
            return home == node
        return bool(self.reach[device][node])


# ------------------------------------------------------------------------------------------ claims
@dataclass(slots=True, eq=False)
class RequestChoice:
    """One way to satisfy a claim request: the devices that match, and how many it takes (-1: all of them)."""

    name: str  # "<request>" or "<request>/<subrequest>" (the allocation result's name)
    device_class: str
    devices: IntArray
    count: int
    gpu: bool


@dataclass(slots=True, eq=False)
class ClaimRequest:
    name: str
    choices: list[RequestChoice]  # one, or the firstAvailable alternatives in order


@dataclass(slots=True, eq=False)
class ClaimInfo:
    key: str  # "<namespace>/<name>"
    claim: ResourceClaim
    requests: list[ClaimRequest]
    error: str  # why it can never be allocated ("" when it can)
    gpus: float  # GPUs it counts for its queue (exact-count GPU requests; the first alternative)
    from_template: bool
    allocation: tuple[int, ...] | None  # devices of status.allocation (None: not allocated)
    users: list[str] = field(default_factory=list)  # uids of the snapshot's pods that name it
    # status.allocation still stands: a pod holds it, or reservedFor names a pod that is not known to be gone
    # or pending (otherwise the resourceclaim controller deallocates it: its devices are free here)
    live: bool = False
    # made from a template: the template's name and the pod's claim it is for ("" otherwise)
    template: str = ""
    pod_claim: str = ""
    reserved: tuple[ClaimConsumer, ...] = ()
    match_attributes: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Named by several pods: allocated once, its GPUs counted for no pod (as KAI does)."""
        return len(self.users) > 1

    @property
    def name(self) -> str:
        return self.claim.meta.name

    @property
    def origin(self) -> str:
        """How its pods name it, for fit errors shared by pods alike: ``claim gpus (ResourceClaimTemplate
        ml/two-gpus)`` ("" for a claim named by its pods)."""
        if not self.template:
            return ""
        return f"claim {self.pod_claim} (ResourceClaimTemplate {self.claim.meta.namespace}/{self.template})"

    @property
    def asks_gpus(self) -> bool:
        return any(choice.gpu for req in self.requests for choice in req.choices)



def renewable(info: ClaimInfo) -> bool:
    """A claim its pod's template made for that pod alone: a pod recreated elsewhere gets a new one."""
    return info.from_template and not info.shared


def spec_gpus(spec: ResourceClaimSpec) -> float:
    """The GPUs a claim counts for its queue, as whole GPUs (spec 7.1): its exact-count requests of GPU device
    classes (of a request with alternatives, the first)."""
    gpus = 0.0
    for req in spec.requests:
        sub = req.exactly if req.exactly is not None else (req.first_available[0] if req.first_available else None)
        if sub is not None and sub.allocation_mode != "All" and is_gpu_class(sub.device_class_name):
            gpus += sub.count
    return gpus


def resolve_claim(claim: ResourceClaim, devices: DraDevices, classes: Mapping[str, DeviceClass],
                  from_template: bool) -> ClaimInfo:
    """A claim's requests matched against the devices (once per claim per snapshot)."""
    key = f"{claim.meta.namespace}/{claim.meta.name}"
    error = ""
    requests: list[ClaimRequest] = []
    for req in claim.spec.requests:
        subs: list[tuple[str, DeviceSubRequest]] = []
        if req.exactly is not None:
            subs.append((req.name, req.exactly))
        subs.extend((f"{req.name}/{sub.name}", sub) for sub in req.first_available)
        choices: list[RequestChoice] = []
        for name, sub in subs:
            matched, problem = _matching(sub, devices, classes)
            if problem and not error:
                error = f"request {name}: {problem}"
            choices.append(RequestChoice(name, sub.device_class_name, matched,
                                         -1 if sub.allocation_mode == "All" else sub.count,
                                         is_gpu_class(sub.device_class_name)))
        requests.append(ClaimRequest(req.name, choices))
    allocation: tuple[int, ...] | None = None
    if claim.allocation is not None:
        found = [devices.by_key.get(f"{r.driver}/{r.pool}/{r.device}", -1) for r in claim.allocation]
        allocation = tuple(d for d in found if d >= 0)
        if len(allocation) < len(found) and not error:
            error = "it is allocated to devices no ResourceSlice publishes any more"
    matches = [(c.requests, c.match_attribute) for c in claim.spec.constraints if c.match_attribute]
    return ClaimInfo(key=key, claim=claim, requests=requests, error=error, gpus=spec_gpus(claim.spec),
                     from_template=from_template, allocation=allocation, reserved=claim.reserved_for,
                     match_attributes=matches)


def _matching(sub: DeviceSubRequest, devices: DraDevices, classes: Mapping[str, DeviceClass]
              ) -> tuple[IntArray, str]:
    """The devices a request's class and selectors select (remembered per class and selectors: claims made
    from one template ask alike), and the first error met evaluating them."""
    device_class = classes.get(sub.device_class_name)
    if device_class is None:
        return np.zeros(0, dtype=np.int64), f"DeviceClass {sub.device_class_name!r} does not exist"
    key = (sub.device_class_name, device_class.selectors, sub.selectors)
    known = devices.matched.get(key)
    if known is None:
        known = devices.matched[key] = _evaluate([*device_class.selectors, *sub.selectors], devices)
    return known


def _evaluate(selectors: list[str], devices: DraDevices) -> tuple[IntArray, str]:
    try:
        compiled = [compile_selector(expr) for expr in selectors]
    except CelError as exc:
        return np.zeros(0, dtype=np.int64), str(exc)
    matched: list[int] = []
    problem = ""
    for i, view in enumerate(devices.views):
        try:
            if all(sel.matches(view) for sel in compiled):
                matched.append(i)
        except CelError as exc:  # (Kubernetes: the device does not match, and the error is reported)
            problem = problem or f"device {devices.keys[i]}: {exc}"
    if not matched and problem:
        return np.zeros(0, dtype=np.int64), problem
    return np.array(matched, dtype=np.int64), ""


def describe_request(req: DeviceRequest) -> str:
    sub = req.exactly if req.exactly is not None else (req.first_available[0] if req.first_available else None)
    if sub is None:
        return req.name
    amount = "all" if sub.allocation_mode == "All" else str(sub.count)
    return f"{req.name} ({amount} x {sub.device_class_name})"
