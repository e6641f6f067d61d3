"""Dynamic Resource Allocation in the snapshot model (spec 7.7): the devices ResourceSlices publish, the claims
pods use, and which devices each claim holds.

* :class:`DraDevices` — every device of the snapshot's ResourceSlices (``driver/pool/device``), the node it is
  on (node-local slices) or the nodes that reach it (``nodeSelector`` / ``allNodes`` slices); devices of a
  driver whose name contains ``gpu`` are GPUs: each node-local one adds a GPU to its node's GPU row.
* :class:`ClaimInfo` — one ResourceClaim as the scheduler sees it: its requests resolved to the devices that
  match their device class and selectors (CEL, through :mod:`kaisched.model.dra_cel`), the GPUs it counts
  for its pod's queue, its allocation (from ``status.allocation``, or made in this session) and its users.
* :class:`DraState` — the accounting a :class:`~kaisched.model.node.NodeTable` keeps beside its arrays: which
  claim holds each device, which are releasing (every pod holding them is being evicted) and which a
  pipelined pod took. :meth:`DraState.join` is called by ``NodeTable.add_task`` / ``remove_task`` with the
  task's current status, so statements roll device allocations back exactly like every other resource.

A claim is allocated when the first pod using it is placed (devices chosen deterministically: per request in
order, the free matching devices of the node in slice order); a claim that is already allocated pins its
pods to the node of its devices; a claim named by several pods (``reservedFor``) is allocated once and holds
its devices while any of them runs. An allocated claim that no pod of the snapshot uses or reserves any more
is left to the resourceclaim controller to deallocate: its devices are free here.
"""

from __future__ import annotations

import hashlib
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
    ObjectMeta,
    OwnerReference,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from kaisched.model.dra_cel import CelError, DeviceView, compile_selector
from kaisched.model.selectors import term_matches
from kaisched.model.status import TaskStatus

if TYPE_CHECKING:
    from kaisched.model.node import NodeInfo
    from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
_TermMatcher = Callable[[NodeSelectorTerm, "NodeInfo"], bool]

#: Kubernetes' limit on ``status.reservedFor`` (ResourceClaimReservedForMaxSize)
MAX_CONSUMERS = 256
#: set on a claim made from a template: the pod's claim it was made for (as the resourceclaim controller does)
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
TEMPLATE_ANNOTATION = "kaisched/resource-claim-template"  # (kept on claims the snapshot makes: the result names it)
GPU_MARK = "gpu"  # a driver / device class whose name contains this is a GPU one (KAI's rule, spec 7.7)


def is_gpu_driver(driver: str) -> bool:
    return GPU_MARK in driver.lower()


def is_gpu_class(device_class: str) -> bool:
    return GPU_MARK in device_class.lower()


_SETTLED = frozenset({TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RELEASING})


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
    # how its pods name it, for fit errors shared by pods alike: "claim gpus (ResourceClaimTemplate ml/two-gpus)"
    origin: str = ""
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
    def asks_gpus(self) -> bool:
        return any(choice.gpu for req in self.requests for choice in req.choices)



def renewable(info: ClaimInfo) -> bool:
    """A claim its pod's template made for that pod alone: a pod recreated elsewhere gets a new one."""
    return info.from_template and not info.shared


def resolve_claim(claim: ResourceClaim, devices: DraDevices, classes: Mapping[str, DeviceClass],
                  from_template: bool) -> ClaimInfo:
    """A claim's requests matched against the devices (once per claim per snapshot)."""
    key = f"{claim.meta.namespace}/{claim.meta.name}"
    error = ""
    requests: list[ClaimRequest] = []
    gpus = 0.0
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
        if choices and choices[0].gpu and choices[0].count > 0:
            gpus += choices[0].count
        requests.append(ClaimRequest(req.name, choices))
    allocation: tuple[int, ...] | None = None
    if claim.allocation is not None:
        found = [devices.by_key.get(f"{r.driver}/{r.pool}/{r.device}", -1) for r in claim.allocation]
        allocation = tuple(d for d in found if d >= 0)
        if len(allocation) < len(found) and not error:
            error = "it is allocated to devices no ResourceSlice publishes any more"
    matches = [(c.requests, c.match_attribute) for c in claim.spec.constraints if c.match_attribute]
    return ClaimInfo(key=key, claim=claim, requests=requests, error=error, gpus=gpus, from_template=from_template,
                     allocation=allocation, reserved=claim.reserved_for, match_attributes=matches)


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


# -------------------------------------------------------------------------------------- accounting
class _DeviceSet:
    """The devices one request selects (claims alike share the array), counted per node: how many there are,
    how many are free now and how many are free for a pipelined placement. Kept up to date by the DraState on
    every change of a device (:meth:`DraState.join`), so a fit check compares counts instead of counting."""

    __slots__ = ("by_node", "devs", "idle", "member", "pipe", "remote", "starts", "total")

    def __init__(self, devs: IntArray, state: DraState, n: int) -> None:
        homes = state.devices.node_of[devs]
        local = homes >= 0
        self.devs = devs  # (kept: the set is found by the array's identity)
        self.member: BoolArray = np.zeros(state.devices.count, dtype=np.bool_)
        self.member[devs[local]] = True
        self.remote: IntArray = devs[~local]  # devices of multi-node slices (counted when asked)
        local_homes = homes[local]
        self.total: IntArray = np.bincount(local_homes, minlength=n)
        idle, pipe = state.available(pipelined=False)[devs[local]], state.available(pipelined=True)[devs[local]]
        self.idle: IntArray = np.bincount(local_homes[idle], minlength=n)
        self.pipe: IntArray = np.bincount(local_homes[pipe], minlength=n)
        order = np.argsort(local_homes, kind="stable")
        self.by_node: IntArray = devs[local][order]  # each node's devices together, in their order
        self.starts: IntArray = np.searchsorted(local_homes[order], np.arange(n + 1))


class DraState:
    """Which claim holds each device (``owner``; -1: free), which devices are releasing, and which a pipelined
    pod's claim took on top of a releasing holder (``piped``)."""

    __slots__ = ("_alloc_kind", "_index", "_requests", "_rows", "_sets", "allocated", "claims", "devices",
                 "holders", "nodes", "owner", "piped", "releasing")

    def __init__(self, devices: DraDevices, claims: Mapping[str, ClaimInfo]) -> None:
        self.devices = devices
        self.nodes = len(devices.node_gpus)
        self._sets: dict[int, _DeviceSet] = {}  # by id of a request's device array
        self.claims = dict(claims)
        self._index = {key: i for i, key in enumerate(self.claims)}
        d = devices.count
        self.owner: IntArray = np.full(d, -1, dtype=np.int64)
        self.piped: IntArray = np.full(d, -1, dtype=np.int64)
        self.releasing: BoolArray = np.zeros(d, dtype=np.bool_)
        # claim key -> its devices now, and whether they were taken on releasing devices ("pipe") or free ones
        self.allocated: dict[str, tuple[int, ...]] = {}
        self._alloc_kind: dict[str, str] = {}  # "api" | "session" | "pipe"
        self.holders: dict[str, dict[str, TaskStatus]] = {}  # claim key -> active task uid -> status
        self._rows: dict[str, tuple[float, float]] = {}  # claim key -> what it takes from its node's GPU row
        self._requests: dict[str, tuple[str, ...]] = {}  # claim key -> the request of each allocated device
        for key, info in self.claims.items():
            if info.allocation and info.live:
                self._hold(key, info.allocation, "api")
                assert info.claim.allocation is not None
                self._requests[key] = tuple(r.request for r in info.claim.allocation
                                            if f"{r.driver}/{r.pool}/{r.device}" in devices.by_key)

    @property
    def empty(self) -> bool:
        return self.devices.count == 0 and not self.claims

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _hold(self, key: str, devs: tuple[int, ...], kind: str) -> None:
        c = self._index[key]
        before = self._availability(devs)
        self.allocated[key] = devs
        self._alloc_kind[key] = kind
        for d in devs:
            if kind == "pipe" and self.owner[d] >= 0:
                self.piped[d] = c
            else:
                self.owner[d] = c
        self._recount(devs, before)

    def _free(self, key: str) -> None:
        c = self._index[key]
        devs = self.allocated.pop(key)
        self._alloc_kind.pop(key, None)
        self._requests.pop(key, None)
        before = self._availability(devs)
        for d in devs:
            if self.piped[d] == c:
                self.piped[d] = -1
            elif self.owner[d] == c:
                self.owner[d] = -1
                if self.piped[d] >= 0:  # the pipelined claim now holds it alone
                    self.owner[d] = self.piped[d]
                    self.piped[d] = -1
                self.releasing[d] = False
        self._recount(devs, before)

    def _refresh(self, key: str) -> None:
        """A claim's devices are releasing when every pod holding them is being evicted."""
        devs = self.allocated.get(key)
        if devs is None:
            return
        holders = self.holders.get(key, {})
        releasing = bool(holders) and all(s is TaskStatus.RELEASING for s in holders.values())
        c = self._index[key]
        before = self._availability(devs)
        for d in devs:
            if self.owner[d] == c:
                self.releasing[d] = releasing
        self._recount(devs, before)

    def join(self, task: TaskInfo, node: int, sign: int) -> tuple[float, float]:
        """Account the claims of ``task`` (status already set) as placed on (+1) or taken off (-1) ``node``.

        Returns what changes in the node's GPU row besides the task's own request: (GPUs taken from idle, GPUs
        added to releasing) by the GPU devices of its claims that its request does not count (a shared claim's,
        an ``All`` request's): such devices are taken once, while any pod holds them."""
        status = task.status
        d_idle = d_rel = 0.0
        for info in task.claims:
            key = info.key
            holders = self.holders.setdefault(key, {})
            if sign > 0:
                holders[task.uid] = status
                if key not in self.allocated:
                    pairs = self.choose(info, node, pipelined=status is TaskStatus.PIPELINED)
                    if pairs is None:  # (a running pod whose claim the input left unallocated: what is free)
                        pairs = self.choose(info, node, pipelined=True, partial=True) or []
                    devs = tuple(d for _, d in pairs)
                    if status is task.initial_status and status in _SETTLED:
                        kind = "api"  # (a pod already on its node: its devices are its own until it is gone)
                    else:
                        kind = "pipe" if any(self.owner[d] >= 0 for d in devs) else "session"
                    self._hold(key, devs, kind)
                    self._requests[key] = tuple(r for r, _ in pairs)
            else:
                holders.pop(task.uid, None)
                if not holders and self._alloc_kind.get(key) in ("session", "pipe"):
                    self._free(key)
            self._refresh(key)
            idle, rel = self._row(info, node)
            before = self._rows.get(key, (0.0, 0.0))
            if (idle, rel) != before:
                d_idle += idle - before[0]
                d_rel += rel - before[1]
                if idle or rel:
                    self._rows[key] = (idle, rel)
                else:
                    self._rows.pop(key, None)
        return d_idle, d_rel

    def _availability(self, devs: tuple[int, ...]) -> list[tuple[bool, bool]] | None:
        """Per device: (free now, free for pipelining), when some device set is counted."""
        if not self._sets or not devs:
            return None
        owner, piped, releasing = self.owner, self.piped, self.releasing
        return [(bool(owner[d] < 0), bool(owner[d] < 0 or (releasing[d] and piped[d] < 0))) for d in devs]

    def _recount(self, devs: tuple[int, ...], before: list[tuple[bool, bool]] | None) -> None:
        """Bring the counted device sets up to date for ``devs`` (``before``: their availability before the
        change, None when no set was counted then)."""
        if before is None:
            return
        after = self._availability(devs)
        assert after is not None
        homes = self.devices.node_of
        for i, d in enumerate(devs):
            was, now = before[i], after[i]
            if was == now or homes[d] < 0:
                continue
            home = int(homes[d])
            for counted in self._sets.values():
                if counted.member[d]:
                    counted.idle[home] += int(now[0]) - int(was[0])
                    counted.pipe[home] += int(now[1]) - int(was[1])

    def _set(self, devs: IntArray) -> _DeviceSet:
        counted = self._sets.get(id(devs))
        if counted is None or counted.devs is not devs:
            counted = self._sets[id(devs)] = _DeviceSet(devs, self, self.nodes)
        return counted

    def _row(self, info: ClaimInfo, node: int) -> tuple[float, float]:
        """What the claim takes from ``node``'s GPU row beyond its owner's request, as (idle, releasing)."""
        devs = self.allocated.get(info.key)
        holders = self.holders.get(info.key)
        if not devs or not holders:
            return 0.0, 0.0
        node_of, gpu = self.devices.node_of, self.devices.gpu
        extra = sum(1 for d in devs if gpu[d] and node_of[d] == node) - (0.0 if info.shared else info.gpus)
        if extra <= 0:
            return 0.0, 0.0
        statuses = holders.values()
        if all(s is TaskStatus.PIPELINED for s in statuses):
            return 0.0, -extra  # (a pipelined placement takes what is being released)
        if all(s is TaskStatus.RELEASING or s is TaskStatus.PIPELINED for s in statuses):
            return extra, extra
        return extra, 0.0

    # ---- queries -------------------------------------------------------------------------------------
    def available(self, *, pipelined: bool) -> BoolArray:
        """Per device: free for a new allocation (or, pipelining, free or held by releasing pods only)."""
        free: BoolArray = self.owner < 0
        if pipelined:
            free = free | (self.releasing & (self.piped < 0))
        return free

    def pinned_nodes(self, info: ClaimInfo, n: int) -> BoolArray:
        """The nodes an allocated claim's pods may run on: where every one of its devices is reachable."""
        devs = self.allocated.get(info.key, ())
        mask = np.ones(n, dtype=np.bool_)
        for d in devs:
            home = int(self.devices.node_of[d])
            if home >= 0:
                only = np.zeros(n, dtype=np.bool_)
                only[home] = True
                mask &= only
            else:
                mask &= self.devices.reach[d]
        return mask

    def is_allocated(self, info: ClaimInfo) -> bool:
        return info.key in self.allocated

    def consumers_full(self, info: ClaimInfo, uid: str) -> bool:
        """Whether one more pod may not reserve the claim (Kubernetes allows 256 consumers)."""
        holders = self.holders.get(info.key, {})
        if uid in holders or any(c.uid == uid for c in info.reserved):
            return False
        others = {c.uid for c in info.reserved} | set(holders)
        return len(others) >= MAX_CONSUMERS

    def fits(self, task: TaskInfo, n: int, *, pipelined: bool, at: IntArray | None = None) -> BoolArray:
        """Nodes (of ``at``, when given) where every claim of the task can be satisfied now. A pod being evicted
        may go back to its devices, or, recreated elsewhere, get new claims from its templates."""
        mask = np.ones(n, dtype=np.bool_)
        free = self.available(pipelined=pipelined)
        evicted = task.status is TaskStatus.RELEASING
        for info in task.claims:
            ok = self.claim_fits(info, task.uid, n, free, pipelined=pipelined)
            if evicted and renewable(info) and self.is_allocated(info):
                ok = ok | self.claim_fits(info, task.uid, n, free, fresh=True, pipelined=pipelined)
            mask &= ok
        return mask if at is None else mask[at]

    def successors(self, task: TaskInfo) -> tuple[ClaimInfo, ...]:
        """The claims of ``task`` recreated elsewhere: a new, unallocated claim for each claim it has from a
        template (what the resourceclaim controller makes for the new pod), the others as they are."""
        out = []
        for info in task.claims:
            if renewable(info):
                key = f"{info.key}#{len(self._index)}"
                info = ClaimInfo(key=key, claim=info.claim, requests=info.requests, error="", gpus=info.gpus,
                                 from_template=True, allocation=None, users=[task.uid],
                                 match_attributes=info.match_attributes, origin=info.origin)
                self._index[key] = len(self._index)
                self.claims[key] = info
            out.append(info)
        return tuple(out)

    def claim_fits(self, info: ClaimInfo, uid: str, n: int, free: BoolArray, fresh: bool = False, *,
                   pipelined: bool) -> BoolArray:
        """Nodes where the claim can be satisfied now on the devices ``free`` (those free for a pipelined
        placement when ``pipelined``; ``fresh``: a new claim of the same spec)."""
        if info.error:
            return np.zeros(n, dtype=np.bool_)
        if not fresh and self.consumers_full(info, uid):
            return np.zeros(n, dtype=np.bool_)
        if not fresh and self.is_allocated(info):
            return self.pinned_nodes(info, n)
        mask = np.ones(n, dtype=np.bool_)
        for req in info.requests:
            mask &= self._request_fits(req, n, free, pipelined)
        if (len(info.requests) > 1 or info.match_attributes) and mask.any():
            # requests that may draw on the same devices, or a constraint: the exact allocation, node by node
            for j in np.flatnonzero(mask).tolist():
                mask[j] = self._allocate_on(info, j, free) is not None
        return mask

    def _request_fits(self, req: ClaimRequest, n: int, free: BoolArray, pipelined: bool) -> BoolArray:
        ok = np.zeros(n, dtype=np.bool_)
        devices = self.devices
        for choice in req.choices:
            if len(choice.devices) == 0:
                continue
            counted = self._set(choice.devices)
            have = counted.pipe if pipelined else counted.idle
            total = counted.total
            for d in counted.remote.tolist():  # devices of multi-node slices
                reach = devices.reach[d]
                have = have + (reach & bool(free[d]))
                total = total + reach
            if choice.count < 0:
                ok |= (total > 0) & (have == total)
            else:
                ok |= have >= choice.count
        return ok

    def choose(self, info: ClaimInfo, node: int, *, pipelined: bool, partial: bool = False
               ) -> list[tuple[str, int]] | None:
        """The (request, device) pairs the claim gets on ``node``: per request in order, its first alternative
        that fits, the free matching devices in order; a pipelined claim takes releasing devices first, as the
        node's accounting does (what is idle stays for pods that can start now)."""
        free = self.available(pipelined=pipelined)
        return self._allocate_on(info, node, free, prefer=self.owner >= 0 if pipelined else None, partial=partial)

    def _allocate_on(self, info: ClaimInfo, node: int, free: BoolArray, prefer: BoolArray | None = None,
                     partial: bool = False) -> list[tuple[str, int]] | None:
        taken: set[int] = set()
        out: list[tuple[str, int]] = []
        for req in info.requests:
            picked: list[tuple[str, int]] | None = None
            for choice in req.choices:
                every = self._on_node(choice.devices, node)
                usable = every[free[every]]
                if prefer is not None and len(usable) > 1:  # the preferred devices first, each in order
                    usable = np.concatenate([usable[prefer[usable]], usable[~prefer[usable]]])
                cands = [d for d in usable.tolist() if d not in taken]
                if choice.count < 0:
                    if len(every) and len(cands) == len(every):
                        picked = [(choice.name, d) for d in cands]
                        break
                    continue
                cands = self._constrained(info, req.name, cands, out)
                if len(cands) >= choice.count:
                    picked = [(choice.name, d) for d in cands[: choice.count]]
                    break
                if partial and cands:
                    picked = [(choice.name, d) for d in cands]
                    break
            if picked is None:
                if partial:
                    continue
                return None
            out.extend(picked)
            taken.update(d for _, d in picked)
        return out

    def _on_node(self, devs: IntArray, node: int) -> IntArray:
        """Those of ``devs`` that ``node`` reaches, in order (node-local ones first)."""
        counted = self._set(devs)
        here: IntArray = counted.by_node[counted.starts[node]:counted.starts[node + 1]]
        if len(counted.remote):
            reach = [d for d in counted.remote.tolist() if self.devices.reach[d][node]]
            here = np.concatenate([here, np.array(reach, dtype=np.int64)])
        return here

    def _constrained(self, info: ClaimInfo, request: str, cands: list[int], chosen: list[tuple[str, int]]
                     ) -> list[int]:
        """``cands`` less the devices whose constrained attributes differ from the devices already chosen."""
        for names, attribute in info.match_attributes:
            if names and request not in names:
                continue
            views = self.devices.views
            before = [views[d].attributes.get(attribute) for r, d in chosen
                      if not names or r.split("/")[0] in names]
            if before:
                want = before[0]
                cands = [d for d in cands if views[d].attributes.get(attribute) == want]
            else:  # the first device of the group decides: keep those that share its value with enough others
                cands = [d for d in cands if views[d].attributes.get(attribute) is not None]
        return cands

    def results(self, info: ClaimInfo) -> list[tuple[str, str, str, str]]:
        """(request, driver, pool, device) of the claim's allocation now, in order."""
        devs = self.allocated.get(info.key)
        if devs is None:
            return []
        names = self._requests.get(info.key, ())
        return [(names[i] if i < len(names) else "", *self.devices.results[d]) for i, d in enumerate(devs)]

    def is_new(self, key: str) -> bool:
        """Whether the claim was allocated in this session (not read from its status)."""
        return key in self.allocated and self._alloc_kind.get(key) != "api"

    def describe(self, info: ClaimInfo, node_names: Sequence[str]) -> str:
        return describe_claim(self, info, node_names)


def describe_request(req: DeviceRequest) -> str:
    sub = req.exactly if req.exactly is not None else (req.first_available[0] if req.first_available else None)
    if sub is None:
        return req.name
    amount = "all" if sub.allocation_mode == "All" else str(sub.count)
    return f"{req.name} ({amount} x {sub.device_class_name})"


def describe_claim(state: DraState, info: ClaimInfo, node_names: Sequence[str]) -> str:
    """How a fit error names a claim that could not be satisfied on a node."""
    devs = state.allocated.get(info.key)
    if devs:
        homes = sorted({node_names[int(state.devices.node_of[d])] for d in devs if state.devices.node_of[d] >= 0})
        where = f" (allocated on {', '.join(homes)})" if homes else ""
        return f"devices of ResourceClaim {info.key}{where}"
    if state.consumers_full(info, ""):
        return f"a reservation of ResourceClaim {info.key} (it has {MAX_CONSUMERS} consumers already)"
    asks = ", ".join(describe_request(r) for r in info.claim.spec.requests)
    if info.shared or info.reserved:
        return f"devices of ResourceClaim {info.key}: {asks}"
    # (pods whose claims ask alike share a fit error: it names what they ask, not one pod's claim)
    if info.origin:
        return f"devices for {info.origin}: {asks}"
    return f"devices for a ResourceClaim of {asks}"


# ---------------------------------------------------------------------------------- the snapshot's part
def template_claim_name(pod_name: str, pod_uid: str, pod_claim: str) -> str:
    """The name of the claim made from a template for a pod's claim (the resourceclaim controller's
    ``<pod>-<claim>-<5 characters>``; the characters are taken from the pod's uid, so the name is stable)."""
    digest = hashlib.sha256(f"{pod_uid}/{pod_claim}".encode()).hexdigest()
    suffix = "".join(_NAME_CHARS[int(digest[i:i + 2], 16) % len(_NAME_CHARS)] for i in range(0, 10, 2))
    return f"{pod_name[:_MAX_PREFIX]}-{pod_claim[:_MAX_PREFIX]}-{suffix}"


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # (the alphabet of Kubernetes' generated names)
_MAX_PREFIX = 28


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
                    info.origin = f"claim {pc.name} (ResourceClaimTemplate {ns}/{pc.resource_claim_template_name})"
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
        name = template_claim_name(pod.meta.name, uid, pod_claim)
        labels = dict(template.claim_labels)
        claim = ResourceClaim(
            meta=ObjectMeta(name=name, namespace=ns, uid=f"{ns}/{name}", labels=labels,
                            annotations={**template.claim_annotations, POD_CLAIM_NAME_ANNOTATION: pod_claim,
                                         TEMPLATE_ANNOTATION: template_name},
                            creation_timestamp=pod.meta.creation_timestamp,
                            owner_references=(OwnerReference("v1", "Pod", pod.meta.name, pod.meta.uid, True),)),
            spec=template.spec)
        self.created[f"{ns}/{name}"] = claim
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


def created_template(claim: ResourceClaim) -> str:
    """The template a claim made in this snapshot came from (its pod's claim names it)."""
    return claim.meta.annotations.get(TEMPLATE_ANNOTATION, "")
