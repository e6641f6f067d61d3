"""The DRA accounting a NodeTable keeps beside its arrays (:mod:`kaisched.model.dra` explains the model): which
claim holds each device, which devices are releasing or taken by a pipelined pod, and per request's device set
the free devices per node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kaisched.model.dra import (
    MAX_CONSUMERS,
    BoolArray,
    ClaimInfo,
    ClaimRequest,
    DraDevices,
    IntArray,
    describe_request,
    renewable,
)
from kaisched.model.status import TaskStatus

if TYPE_CHECKING:
    from kaisched.model.task import TaskInfo

_SETTLED = frozenset({TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RELEASING})


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

    __slots__ = ("_alloc_kind", "_by_node", "_index", "_keys", "_requests", "_rows", "_sets", "allocated", "claims",
                 "devices", "holders", "nodes", "owner", "piped", "releasing")

    def __init__(self, devices: DraDevices, claims: Mapping[str, ClaimInfo]) -> None:
        self.devices = devices
        self.nodes = len(devices.node_gpus)
        self._sets: dict[int, _DeviceSet] = {}  # by id of a request's device array
        self.claims = dict(claims)
        self._index = {key: i for i, key in enumerate(self.claims)}
        self._keys: list[str] = list(self._index)  # index -> claim key (extended when successors are added)
        self._by_node: dict[int, IntArray] = {}  # node -> its local devices, in order
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
        flipped: list[int] = []
        for d in devs:
            if self.owner[d] == c and bool(self.releasing[d]) != releasing:
                self.releasing[d] = releasing
                flipped.append(d)
        self._recount(devs, before)
        for d in flipped:
            if releasing:
                self._pipe_onto(d)
            elif self.piped[d] >= 0:
                self._pipe_off(d)

    # ---- pipelined claims follow the releasing devices --------------------------------------------------
    # A pipelined pod takes what is being released on its node (the node's GPU row: its releasing less the
    # pipelined pods', idle untouched), whatever the order of the placement and the eviction. A pipelined claim
    # placed on a free device before a device of its node starts releasing moves onto that device (its free
    # device is idle again), and back onto a free device when the release is undone, so the devices say what
    # the row says: a pod placed next fits on idle devices exactly where it fits on idle GPUs.
    def _pipe_onto(self, d: int) -> None:
        """Device ``d`` is now releasing: the first pipelined claim of its node that holds a free device of the
        same choice (in device order) takes ``d`` instead."""
        if self.piped[d] >= 0:
            return
        for f in self._node_devices(int(self.devices.node_of[d])).tolist():
            p = int(self.owner[f])
            if p < 0 or f == d or bool(self.releasing[f]) or self.piped[f] >= 0:
                continue
            key = self._key_of(p)
            if self._alloc_kind.get(key) in ("session", "pipe") and self._floating(key) and \
                    self._interchangeable(key, f, d):
                self._swap(key, p, f, d, onto_releasing=True)
                return

    def _pipe_off(self, d: int) -> None:
        """Device ``d`` is no longer releasing: the pipelined claim on it goes back to the first free device of
        its node of the same choice (it stays when there is none: the node is over-committed, as its row is)."""
        p = int(self.piped[d])
        key = self._key_of(p)
        for f in self._node_devices(int(self.devices.node_of[d])).tolist():
            if self.owner[f] < 0 and self._interchangeable(key, d, f):
                self._swap(key, p, d, f, onto_releasing=False)
                return

    def _swap(self, key: str, c: int, old: int, new: int, *, onto_releasing: bool) -> None:
        pair = (old, new)
        before = self._availability(pair)
        if onto_releasing:
            self.owner[old] = -1
            self.piped[new] = c
        else:
            self.piped[old] = -1
            self.owner[new] = c
        devs = self.allocated[key]
        self.allocated[key] = tuple(new if x == old else x for x in devs)
        self._alloc_kind[key] = "pipe" if any(self.piped[x] == c for x in self.allocated[key]) else "session"
        self._recount(pair, before)

    def _floating(self, key: str) -> bool:
        """Every pod holding the claim is pipelined."""
        holders = self.holders.get(key, {})
        return bool(holders) and all(s is TaskStatus.PIPELINED for s in holders.values())

    def _interchangeable(self, key: str, held: int, other: int) -> bool:
        """A plain claim (one request of a device count, not shared, no attribute constraint) whose choice that
        selects ``held`` selects ``other`` too."""
        info = self.claims[key]
        if info.shared or info.match_attributes or len(info.requests) != 1:
            return False
        for choice in info.requests[0].choices:
            if choice.count > 0 and len(choice.devices):
                member = self._set(choice.devices).member
                if member[held]:
                    return bool(member[other])
        return False

    def _node_devices(self, node: int) -> IntArray:
        cached = self._by_node.get(node)
        if cached is None:
            cached = self._by_node[node] = np.flatnonzero(self.devices.node_of == node)
        return cached

    def _key_of(self, c: int) -> str:
        if len(self._keys) != len(self._index):
            self._keys = list(self._index)
        return self._keys[c]

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
        evicted = task.status is TaskStatus.RELEASING
        for info in task.claims:
            ok = self.claim_fits(info, task.uid, n, pipelined=pipelined)
            if evicted and renewable(info) and self.is_allocated(info):
                ok = ok | self.claim_fits(info, task.uid, n, pipelined=pipelined, fresh=True)
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
                                 match_attributes=info.match_attributes, template=info.template,
                                 pod_claim=info.pod_claim)
                self._index[key] = len(self._index)
                self.claims[key] = info
            out.append(info)
        return tuple(out)

    def claim_fits(self, info: ClaimInfo, uid: str, n: int, *, pipelined: bool, fresh: bool = False) -> BoolArray:
        """Nodes where the claim can be satisfied now (on devices free for a pipelined placement when
        ``pipelined``; ``fresh``: a new claim of the same spec). The counted device sets answer; the devices
        themselves are looked at only for multi-node devices and for claims of several requests."""
        if info.error:
            return np.zeros(n, dtype=np.bool_)
        if not fresh and self.consumers_full(info, uid):
            return np.zeros(n, dtype=np.bool_)
        if not fresh and self.is_allocated(info):
            return self.pinned_nodes(info, n)
        mask = np.ones(n, dtype=np.bool_)
        for req in info.requests:
            mask &= self._request_fits(req, n, pipelined)
        if (len(info.requests) > 1 or info.match_attributes) and mask.any():
            # requests that may draw on the same devices, or a constraint: the exact allocation, node by node
            free = self.available(pipelined=pipelined)
            for j in np.flatnonzero(mask).tolist():
                mask[j] = self._allocate_on(info, j, free) is not None
        return mask

    def _request_fits(self, req: ClaimRequest, n: int, pipelined: bool) -> BoolArray:
        ok = np.zeros(n, dtype=np.bool_)
        devices = self.devices
        for choice in req.choices:
            if len(choice.devices) == 0:
                continue
            counted = self._set(choice.devices)
            have = counted.pipe if pipelined else counted.idle
            total = counted.total
            free = self.available(pipelined=pipelined) if len(counted.remote) else None
            for d in counted.remote.tolist():  # devices of multi-node slices
                assert free is not None
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
