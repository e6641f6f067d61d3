"""Nodes as a structure of arrays.

All nodes of a snapshot live in one :class:`NodeTable`, sorted by name (the node index is the
tie-breaker KAI uses: equal scores go to the smaller name). Resource accounting is kept in two
``(resources, nodes)`` arrays, ``idle`` and ``releasing``, so a fit check for one task over all nodes
is a handful of vectorised comparisons:

* a task fits for allocation on node n iff ``req <= idle[:, n]``;
* it fits for pipelining iff ``req <= idle[:, n] + releasing[:, n]``.

Accounting by task status (KAI's NodeInfo): Allocated/Binding/Bound/Running consume idle;
Releasing consumes idle and adds to releasing; Pipelined consumes releasing (which may go below zero
while ``idle + releasing`` stays >= 0).

Shared GPUs (fractions and gpu-memory requests) are tracked per device in :mod:`kaisched.model.gpu_sharing`;
a shared device takes one whole GPU of the GPU row, so whole-GPU tasks never land on a shared device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kaisched.k8s import constants as C
from kaisched.k8s.objects import Node, Taint
from kaisched.model.dra_state import DraState
from kaisched.model.gpu import GpuKind, mig_gpus
from kaisched.model.gpu_sharing import GpuChoice, GpuDeviceScorer, GpuOrderFn, SharedGpus
from kaisched.model.resources import EPSILON, GPU, PODS, ResourceIndex, Vector
from kaisched.model.status import CONSUMES_IDLE, TaskStatus

if TYPE_CHECKING:
    from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

_ALL_TRUE: BoolArray = np.ones(0, dtype=np.bool_)
_FILLED: dict[float, Vector] = {}


def all_true(n: int) -> BoolArray:
    """A read-only boolean array of ``n`` True values (a view of one kept array: no allocation per call)."""
    global _ALL_TRUE
    if len(_ALL_TRUE) < n:
        _ALL_TRUE = np.ones(max(n, 2 * len(_ALL_TRUE)), dtype=np.bool_)
        _ALL_TRUE.flags.writeable = False
    return _ALL_TRUE[:n]


def filled(n: int, value: float) -> Vector:
    """A read-only float array of ``n`` times ``value`` (a view of one kept array per value)."""
    kept = _FILLED.get(value)
    if kept is None or len(kept) < n:
        kept = np.full(max(n, 2 * len(kept) if kept is not None else n), value, dtype=np.float64)
        kept.flags.writeable = False
        _FILLED[value] = kept
    return kept[:n]


# node conditions that make a node unusable when not False (KAI's node-condition check)
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


@dataclass(slots=True)
class NodeInfo:
    """Per-node data that is not vectorised: identity, labels, taints and the tasks on it."""

    index: int
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    condition_error: str | None  # None when the node is schedulable by conditions
    gpu_memory_mib: float
    mig_strategy: str = ""  # "", "single" or "mixed"
    mig_enabled: bool = False
    tasks: dict[str, TaskInfo] = field(default_factory=dict)  # uid -> task (active-used only)
    host_ports: dict[tuple[str, int, str], int] = field(default_factory=dict)  # (proto, port, ip) -> count

    @property
    def ready(self) -> bool:
        return self.condition_error is None

    def fresh(self) -> NodeInfo:
        """A copy without tasks (the static part of a node, shared between cycles)."""
        return NodeInfo(self.index, self.name, self.labels, self.taints, self.unschedulable, self.condition_error,
                        self.gpu_memory_mib, self.mig_strategy, self.mig_enabled)

    def copy(self) -> NodeInfo:
        """A copy with its own task and host-port tables (the same tasks)."""
        return NodeInfo(self.index, self.name, self.labels, self.taints, self.unschedulable, self.condition_error,
                        self.gpu_memory_mib, self.mig_strategy, self.mig_enabled, dict(self.tasks),
                        dict(self.host_ports))


def node_condition_error(node: Node) -> str | None:
    """KAI's node-condition check: the fit-error text, or None when the node may take pods."""
    if node.unschedulable:
        return "node(s) were unschedulable"
    conds = {c.type: c.status for c in node.conditions}
    if conds and conds.get("Ready", "True") != "True":
        return "node(s) had NotReady condition"
    for name in PRESSURE_CONDITIONS:
        if conds.get(name, "False") != "False":
            return f"node(s) had {name} condition"
    return None


_copies = 0  # tables made by NodeTable.copy so far (each starts at a version of its own)
#: new shared devices per node (NodeTable.new_devices) are figured again on the changed nodes up to this many changes
NEW_DEVICES_REDONE = 64
#: changes of the accounting remembered for :meth:`NodeTable.changed_since` (the older half is forgotten beyond)
MAX_CHANGES_KEPT = 1 << 16


class NodeTable:
    """All nodes of a session; arrays are indexed ``[resource, node]``."""

    __slots__ = ("_borrowed", "_changes", "_changes_base", "_new_devices", "_requested", "_with_releasing",
                 "allocatable", "any_releasing", "by_name", "dra", "gpu_capacity", "idle", "infos", "legacy_mig",
                 "names", "releasing", "resources", "schedulable", "shared", "touched", "version")

    def __init__(self, nodes: Sequence[Node], resources: ResourceIndex, gpu_memory: Sequence[float],
                 gpu_memory_synced: Sequence[bool] | None = None, *, copy_of: NodeTable | None = None) -> None:
        if copy_of is not None:
            self._copy(copy_of)
            return
        static = _static_nodes(nodes, resources, gpu_memory, gpu_memory_synced)
        self.resources = resources
        self.names = static.names
        self.by_name = static.by_name
        self.allocatable = static.allocatable
        self.gpu_capacity = static.gpu_capacity
        self.schedulable = static.schedulable
        # the per-node objects are shared with earlier tables of the same nodes: the nodes an earlier table
        # put tasks on are emptied (a table is only valid until the next one is built from the same nodes)
        for j in static.touched:
            info = static.infos[j]
            info.tasks = {}
            info.host_ports = {}
        static.touched.clear()
        self.touched = static.touched
        self.infos: list[NodeInfo] = static.infos
        # nodes whose per-node object is still the one of the table this one copies (NodeTable.copy): copied
        # before the first change
        self._borrowed: set[int] = set()
        self.idle: Vector = static.allocatable.copy()
        r, n = static.allocatable.shape
        self.releasing: Vector = np.zeros((r, n), dtype=np.float64)
        self.shared = SharedGpus(self.names, static.gpu_memory, static.synced)
        self.legacy_mig: IntArray = np.zeros(n, dtype=np.int64)  # running legacy MIG pods per node
        self.version = 0  # bumped by every change of the accounting (a cache key for fit results)
        # the node of every change since version ``_changes_base`` (version v's change is _changes[v - base - 1])
        self._changes: list[int] = []
        self._changes_base = 0
        # False while no resource has ever been releasing or pipelined in this table: then "fits with
        # releasing resources" is "fits on idle ones" and is computed once
        self.any_releasing = False
        # (version, with releasing, pod slots a task takes) -> new shared devices per node (new_gpu_slots)
        self._new_devices: tuple[tuple[int, bool, float], IntArray] | None = None
        self._with_releasing: tuple[int, Vector] | None = None  # (version, idle + releasing)
        self._requested: dict[int, _Requested] = {}  # by id of a request vector (tasks that ask alike share one)
        self.dra: DraState | None = None  # DRA devices and claims (set by the snapshot before tasks are added)

    def _copy(self, other: NodeTable) -> None:
        """This table as a copy of ``other`` (see :meth:`copy`)."""
        global _copies
        self.resources = other.resources
        self.names = other.names
        self.by_name = other.by_name
        self.allocatable = other.allocatable
        self.gpu_capacity = other.gpu_capacity
        self.schedulable = other.schedulable
        self.touched = set()
        self.infos = list(other.infos)
        self._borrowed = set(range(len(other.infos)))
        self.idle = other.idle.copy()
        self.releasing = other.releasing.copy()
        self.shared = other.shared.copy()
        self.legacy_mig = other.legacy_mig.copy()
        # a version no other table had (fit results remembered by version never answer for another table)
        _copies += 1
        self.version = other.version + (_copies << 40)
        self._changes = []
        self._changes_base = self.version
        self.any_releasing = other.any_releasing
        self._new_devices = None
        self._with_releasing = None
        self._requested = {}
        self.dra = other.dra

    def copy(self) -> NodeTable:
        """A table of the same nodes with the same tasks and accounting, its own: what a session changes in the
        copy leaves this one as it was (the kept snapshot's nodes, :mod:`kaisched.model.kept`). The per-node
        objects (tasks, host ports, shared devices) are copied when the copy first changes them, the node facts
        are shared."""
        return NodeTable((), self.resources, (), copy_of=self)

    def own_nodes(self) -> None:
        """Give this table per-node objects of its own (copies of the static ones shared with the tables built
        later from the same nodes, which would empty them): it is kept across cycles."""
        self.infos = [info.copy() for info in self.infos]
        self.touched = set()

    def _own(self, node: int) -> NodeInfo:
        """The node's object, copied first when it is still the copied table's."""
        info = self.infos[node]
        if node in self._borrowed:
            self._borrowed.discard(node)
            info = self.infos[node] = info.copy()
        return info

    def use_dra(self, dra: DraState) -> None:
        """Take the snapshot's DRA devices: each node-local GPU of a GPU driver adds one to its node's GPU row."""
        self.dra = dra
        gpus = dra.devices.node_gpus
        if gpus.any():
            self.allocatable = self.allocatable.copy()  # (the static arrays are shared with other tables)
            self.allocatable[GPU] += gpus
            self.idle[GPU] += gpus
            self.gpu_capacity = self.gpu_capacity + gpus

    def __len__(self) -> int:
        return len(self.names)

    def release(self) -> None:
        """Let go of the tasks this table put on the shared per-node objects (the table is not used again):
        the static part of the nodes stays cached, their tasks do not outlive the session."""
        for j in self.touched:
            info = self.infos[j]
            info.tasks = {}
            info.host_ports = {}
        self.touched.clear()

    # ---- accounting -----------------------------------------------------------------------------
    def add_task(self, task: TaskInfo, node: int) -> None:
        """Put a task with an active-used status onto a node."""
        self._changed(node)
        status = task.status
        req = task.req
        if status is TaskStatus.RELEASING or status is TaskStatus.PIPELINED:
            self.any_releasing = True
        if status in CONSUMES_IDLE:
            self.idle[:, node] -= req
            if status is TaskStatus.RELEASING:
                self.releasing[:, node] += req
        elif status is TaskStatus.PIPELINED:
            self.releasing[:, node] -= req
        if task.gpu_groups:
            self._join_groups(task, node, 1)
            if task.gpu.kind is GpuKind.MEMORY:  # the only request whose GPUs depend on the node
                task.accepted_gpus = task.gpu.accepted_gpus(float(self.shared.mem[node]))
        if task.legacy_mig:
            self.legacy_mig[node] += 1
        if task.claims and self.dra is not None:
            self._join_claims(task, node, 1)
        info = self._own(node) if self._borrowed else self.infos[node]
        self.touched.add(node)
        info.tasks[task.uid] = task
        for port in task.host_ports:
            info.host_ports[port] = info.host_ports.get(port, 0) + 1

    def remove_task(self, task: TaskInfo, node: int) -> None:
        """Exact inverse of :meth:`add_task` for the task's current status."""
        self._changed(node)
        status = task.status
        req = task.req
        if status in CONSUMES_IDLE:
            self.idle[:, node] += req
            if status is TaskStatus.RELEASING:
                self.releasing[:, node] -= req
        elif status is TaskStatus.PIPELINED:
            self.releasing[:, node] += req
        if task.gpu_groups:
            self._join_groups(task, node, -1)
        if task.legacy_mig:
            self.legacy_mig[node] -= 1
        if task.claims and self.dra is not None:
            self._join_claims(task, node, -1)
        info = self._own(node) if self._borrowed else self.infos[node]
        info.tasks.pop(task.uid, None)
        for port in task.host_ports:
            left = info.host_ports.get(port, 0) - 1
            if left > 0:
                info.host_ports[port] = left
            else:
                info.host_ports.pop(port, None)

    def _changed(self, node: int) -> None:
        self.version += 1
        changes = self._changes
        changes.append(node)
        if len(changes) > MAX_CHANGES_KEPT:  # forget the older half
            half = len(changes) // 2
            del changes[:half]
            self._changes_base += half

    def changed_since(self, version: int, limit: int) -> IntArray | None:
        """The nodes whose accounting changed since ``version`` (sorted, each once), or None when that is
        not known any more or more than ``limit`` changes were made since."""
        changes = self.changes_since(version, limit)
        if changes is None:
            return None
        changed: IntArray = np.array(sorted(set(changes)), dtype=np.int64)
        return changed

    def changes_since(self, version: int, limit: int) -> list[int] | None:
        """The node of each change since ``version`` (in order, a node once per change), or None when that
        is not known any more or there were more than ``limit``."""
        start = version - self._changes_base
        if start < 0 or self.version - version > limit:
            return None
        return self._changes[start:]

    def _join_claims(self, task: TaskInfo, node: int, sign: int) -> None:
        assert self.dra is not None
        d_idle, d_rel = self.dra.join(task, node, sign)
        if d_idle or d_rel:
            if d_rel:
                self.any_releasing = True
            self.idle[GPU, node] -= d_idle
            self.releasing[GPU, node] += d_rel

    def _join_groups(self, task: TaskInfo, node: int, sign: int) -> None:
        d_idle, d_rel, d_pods = self.shared.join(task, node, sign)
        if d_rel:
            self.any_releasing = True
        self.idle[GPU, node] -= d_idle
        self.releasing[GPU, node] += d_rel
        self.idle[PODS, node] -= d_pods

    # ---- queries ------------------------------------------------------------------------------------
    def idle_gpus(self, node: int) -> float:
        return float(self.idle[GPU, node])

    def releasing_gpus(self, node: int) -> float:
        return float(self.releasing[GPU, node])

    def available(self, *, with_releasing: bool) -> Vector:
        """Idle resources, or idle + releasing ones, per resource and node (read-only; the sum is remembered
        until the accounting changes)."""
        if not (with_releasing and self.any_releasing):
            return self.idle
        known = self._with_releasing
        if known is None or known[0] != self.version:
            known = self._with_releasing = (self.version, self.idle + self.releasing)
        return known[1]

    def _requested_rows(self, req: Vector) -> _Requested:
        """The rows ``req`` asks for and what each must reach, remembered per request vector."""
        known = self._requested.get(id(req))
        if known is not None and known.req is req:
            return known
        if len(self._requested) >= REQUESTS_KEPT:
            self._requested.clear()
        known = self._requested[id(req)] = _Requested(req)
        return known

    def fits(self, req: Vector, *, with_releasing: bool) -> BoolArray:
        """Nodes where ``req`` fits on idle (or idle + releasing) resources; only requested rows."""
        asked = self._requested_rows(req)
        if asked.count == 0:
            return np.ones(len(self.names), dtype=np.bool_)
        avail = self.available(with_releasing=with_releasing)
        # (adjacent rows are a view of the array, other rows a copy of theirs)
        mask: BoolArray = np.logical_and.reduce(avail[asked.select] >= asked.floor, axis=0)
        return mask

    def fits_at(self, req: Vector, indices: IntArray, *, with_releasing: bool) -> BoolArray:
        """:meth:`fits` on the nodes ``indices`` only (aligned with them)."""
        asked = self._requested_rows(req)
        if asked.count == 0:
            return np.ones(len(indices), dtype=np.bool_)
        rows = asked.select
        avail = self.idle[rows].take(indices, axis=1)
        if with_releasing and self.any_releasing:
            avail = avail + self.releasing[rows].take(indices, axis=1)
        out: BoolArray = np.logical_and.reduce(avail >= asked.floor, axis=0)
        return out

    # ---- shared GPUs (spec 7.2) -----------------------------------------------------------------------
    def new_gpu_slots(self, task: TaskInfo, *, with_releasing: bool, at: IntArray | None = None
                      ) -> tuple[IntArray, IntArray]:
        """Per node (of ``at``, when given): whole free GPUs a task could open new shared devices on, and the
        pod slots left for their reservations (each new device takes one more pod slot)."""
        def row(values: Vector) -> Vector:
            return values if at is None else values.take(at)
        idle = row(self.idle[GPU])
        free = np.floor(np.maximum(idle + row(self.releasing[GPU]) if with_releasing else idle, 0.0) + EPSILON)
        pods = row(self.idle[PODS]) + (row(self.releasing[PODS]) if with_releasing else 0.0)
        slots = np.floor(pods - task.req[PODS] + EPSILON)
        return free.astype(np.int64), slots.astype(np.int64)

    def new_devices(self, task: TaskInfo, *, with_releasing: bool) -> IntArray:
        """Per node: how many new shared devices the task could open (whole free GPUs, each taking one more pod
        slot). Depends on the accounting and the task's pod slots only: remembered until the next change."""
        key = (self.version, with_releasing, float(task.req[PODS]))
        known = self._new_devices
        if known is not None:
            if known[0] == key:
                return known[1]
            if known[0][1:] == key[1:]:  # the same question some changes ago: answered again on their nodes
                changes = self.changes_since(known[0][0], NEW_DEVICES_REDONE)
                if changes is not None:
                    new_ok = known[1].copy()
                    for j in changes:
                        new_ok[j] = self._new_devices_at(j, with_releasing, key[2])
                    self._new_devices = (key, new_ok)
                    return new_ok
        free, slots = self.new_gpu_slots(task, with_releasing=with_releasing)
        new_ok = np.minimum(free, slots)
        self._new_devices = (key, new_ok)
        return new_ok

    def _new_devices_at(self, j: int, with_releasing: bool, pods_asked: float) -> int:
        """:meth:`new_gpu_slots`' figures for node ``j`` (the same float operations, one node), their minimum."""
        idle_gpus, idle_pods = float(self.idle[GPU, j]), float(self.idle[PODS, j])
        if with_releasing:
            gpus = max(idle_gpus + float(self.releasing[GPU, j]), 0.0)
            pods = idle_pods + float(self.releasing[PODS, j])
        else:
            gpus = max(idle_gpus, 0.0)
            pods = idle_pods + 0.0
        return min(math.floor(gpus + EPSILON), math.floor(pods - pods_asked + EPSILON))

    def shared_gpu_fit(self, task: TaskInfo, *, with_releasing: bool, at: IntArray | None = None) -> BoolArray:
        """Nodes (of ``at``, when given) with devices for a shared task (fraction or gpu-memory), ignoring its
        other resources."""
        shared = self.shared
        need = shared.need(task)
        k = task.gpu.count
        if at is not None and k > 1:
            return self.shared_gpu_fit(task, with_releasing=with_releasing)[at]
        if at is None:
            new_ok = self.new_devices(task, with_releasing=with_releasing)
        else:
            free, slots = self.new_gpu_slots(task, with_releasing=with_releasing, at=at)
            new_ok = np.minimum(free, slots)
        best = shared.free_pipe if with_releasing else shared.free_idle
        if at is not None:
            best = best.take(at)
            if isinstance(need, np.ndarray):
                need = need.take(at)
        if task.gpu.kind is GpuKind.MEMORY:
            new_ok = np.where((shared.mem if at is None else shared.mem.take(at)) + EPSILON >= need, new_ok, 0)
        if k <= 1:
            result: BoolArray = (new_ok >= 1) | (best + EPSILON >= need)
            return result
        ok: BoolArray = new_ok + shared.count >= k
        for n in np.flatnonzero(ok & (new_ok < k)).tolist():
            node_need = float(need[n]) if isinstance(need, np.ndarray) else need
            fitting = len(shared.fitting_groups(n, node_need, idle=not with_releasing))
            ok[n] = int(new_ok[n]) + fitting >= k
        return ok

    def fits_task(self, task: TaskInfo, *, with_releasing: bool) -> BoolArray:
        """Nodes where the task fits by resources: its vector, and its shared devices if any."""
        mask = self.fits(task.req, with_releasing=with_releasing)
        if task.gpu.shared:
            mask &= self.shared_gpu_fit(task, with_releasing=with_releasing)
        if task.claims and self.dra is not None:
            mask &= self.dra.fits(task, len(self.names), pipelined=with_releasing)
        return mask

    def fits_task_at(self, task: TaskInfo, indices: IntArray, *, with_releasing: bool) -> BoolArray:
        """:meth:`fits_task` on the nodes ``indices`` only (aligned with them)."""
        out = self.fits_at(task.req, indices, with_releasing=with_releasing)
        if task.gpu.shared:
            out &= self.shared_gpu_fit(task, with_releasing=with_releasing, at=indices)
        if task.claims and self.dra is not None:
            out &= self.dra.fits(task, len(self.names), pipelined=with_releasing, at=indices)
        return out

    def lacking_names(self, task: TaskInfo) -> list[str]:
        """The resources a task asks for, as KAI names them in fit errors, in the order of :meth:`lacking`'s
        bits: each requested resource, then its shared devices (GPUs, or GPU memory)."""
        names = [self.resources.describe(int(r)) for r in np.flatnonzero(task.req > 0)]
        if task.gpu.shared:
            names.append("GPU memory" if task.gpu.kind is GpuKind.MEMORY else "GPUs")
        if task.claims and self.dra is not None:
            names.extend(self.dra.describe(info, self.names) for info in task.claims)
        return names

    def lacking(self, task: TaskInfo, at: IntArray | None = None) -> IntArray:
        """Per node (of ``at``, when given): bit i set when, even with releasing resources, it lacks the i-th
        of :meth:`lacking_names` (0: the task fits there by resources)."""
        asked = self._requested_rows(task.req)
        rows = asked.select
        if at is None:
            avail = self.available(with_releasing=True)[rows]
        else:
            avail = self.idle[rows].take(at, axis=1)
            if self.any_releasing:
                avail = avail + self.releasing[rows].take(at, axis=1)
        below = avail < asked.floor
        bits: IntArray = np.add.reduce(below.astype(np.int64) << asked.shifts, axis=0)
        shift = asked.count
        if task.gpu.shared:
            no_devices = ~self.shared_gpu_fit(task, with_releasing=True, at=at)
            bits |= no_devices.astype(np.int64) << shift
            shift += 1
        if task.claims and self.dra is not None:
            n = len(self.names)
            for info in task.claims:
                ok = self.dra.claim_fits(info, task.uid, n, pipelined=True)
                bits |= (~(ok if at is None else ok[at])).astype(np.int64) << shift
                shift += 1
        return bits

    def choose_gpus(self, task: TaskInfo, node: int, order_fns: list[GpuOrderFn], *, pipeline_only: bool,
                    device_scorer: GpuDeviceScorer | None = None) -> GpuChoice | None:
        """The devices for a shared task on ``node`` (spec 7.3), or None when it does not fit there."""
        idle = float(self.idle[GPU, node])
        free_idle = int(np.floor(max(idle, 0.0) + EPSILON))
        free_all = int(np.floor(max(idle + float(self.releasing[GPU, node]), 0.0) + EPSILON))
        slots = int(np.floor(float(self.idle[PODS, node] + self.releasing[PODS, node] - task.req[PODS]) + EPSILON))
        if task.gpu.kind is GpuKind.MEMORY and task.gpu.memory_mib > float(self.shared.mem[node]) + EPSILON:
            free_idle = free_all = 0
        return self.shared.choose(task, node, free_idle, free_all - free_idle, slots, order_fns,
                                  prefer_immediate=not pipeline_only, device_scorer=device_scorer)


#: request vectors whose rows a NodeTable remembers (tasks of one shape share their vector)
REQUESTS_KEPT = 4096


class _Requested:
    """A request vector's requested rows (``select``: a slice when they are adjacent), and per row the least
    a node must have (``floor``: the request less the tolerance, as a column)."""

    __slots__ = ("count", "floor", "req", "select", "shifts")

    def __init__(self, req: Vector) -> None:
        rows = (req > 0).nonzero()[0]
        self.req = req
        self.count = len(rows)
        self.select: IntArray | slice = rows
        if self.count and int(rows[-1]) - int(rows[0]) == self.count - 1:
            self.select = slice(int(rows[0]), int(rows[-1]) + 1)
        self.floor: Vector = (req[rows] - 1e-9)[:, None]
        self.shifts: IntArray = np.arange(self.count, dtype=np.int64)[:, None]  # row i: bit i (NodeTable.lacking)


@dataclass(slots=True)
class _StaticNodes:
    """What a NodeTable computes from the Node objects alone (never changed by a cycle)."""

    nodes: Sequence[Node]
    key: tuple[object, ...]
    names: list[str]
    by_name: dict[str, int]
    allocatable: Vector
    gpu_capacity: Vector
    schedulable: BoolArray
    infos: list[NodeInfo]
    gpu_memory: Vector
    synced: BoolArray
    touched: set[int] = field(default_factory=set)  # nodes the latest table put tasks on


# the last few node sets: a caller that schedules the same Node objects cycle after cycle (the simulator)
# builds their static part once
_STATIC_CACHE: list[_StaticNodes] = []
_STATIC_CACHE_SIZE = 4


def forget_static_nodes() -> None:
    """Forget the cached static parts of earlier node lists (the next list is new: they cannot be reused)."""
    _STATIC_CACHE.clear()


def _static_nodes(nodes: Sequence[Node], resources: ResourceIndex, gpu_memory: Sequence[float],
                  gpu_memory_synced: Sequence[bool] | None) -> _StaticNodes:
    key = (tuple(resources.names), tuple(gpu_memory), None if gpu_memory_synced is None else tuple(gpu_memory_synced))
    for entry in _STATIC_CACHE:
        if entry.nodes is nodes and entry.key == key:
            return entry
    order = sorted(range(len(nodes)), key=lambda i: nodes[i].meta.name)
    names = [nodes[i].meta.name for i in order]
    r, n = len(resources), len(order)
    allocatable: Vector = np.zeros((r, n), dtype=np.float64)
    gpu_capacity: Vector = np.zeros(n, dtype=np.float64)  # GPUs for queues: devices + MIG g-slices
    infos: list[NodeInfo] = []
    for j, i in enumerate(order):
        node = nodes[i]
        allocatable[:, j] = resources.vector(node.allocatable)
        mig = sum(mig_gpus(name) * value for name, value in node.allocatable.items()
                  if name.startswith(C.MIG_RESOURCE_PREFIX))
        gpu_capacity[j] = allocatable[GPU, j] + mig
        labels = node.meta.labels
        strategy = labels.get(C.MIG_STRATEGY_NODE_LABEL, "")
        infos.append(NodeInfo(
            index=j, name=node.meta.name, labels=node.meta.labels, taints=node.taints,
            unschedulable=node.unschedulable, condition_error=node_condition_error(node),
            gpu_memory_mib=gpu_memory[i], mig_strategy=strategy if strategy in ("single", "mixed") else "",
            mig_enabled=labels.get(C.MIG_ENABLED_NODE_LABEL, "").lower() == "true" or mig > 0
            or strategy in ("single", "mixed"),
        ))
    synced = gpu_memory_synced if gpu_memory_synced is not None else [True] * len(nodes)
    entry = _StaticNodes(
        nodes=nodes, key=key, names=names, by_name={name: i for i, name in enumerate(names)},
        allocatable=allocatable, gpu_capacity=gpu_capacity,
        schedulable=np.array([info.ready for info in infos], dtype=np.bool_), infos=infos,
        gpu_memory=np.array([float(gpu_memory[i]) for i in order], dtype=np.float64),
        synced=np.array([bool(synced[i]) for i in order], dtype=np.bool_),
    )
    _STATIC_CACHE.insert(0, entry)
    del _STATIC_CACHE[_STATIC_CACHE_SIZE:]
    return entry
