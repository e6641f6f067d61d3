"""Shared GPUs on nodes (spec 7.2, 7.3).

A **GPU group** is one physical GPU shared by fractional pods (pod label ``runai-gpu-group``); a
multi-device fractional pod is a member of one group per device. Group names are per node. Per group the
node tracks the GPU memory (MiB) of its members by status:

* ``allocated``: members that hold the device now (Allocated/Binding/Bound/Running and Releasing);
* ``releasing``: Releasing members (their memory comes back when they terminate);
* ``pipelined``: members waiting for releasing memory.

Whole-device accounting (the node's GPU row of ``idle`` / ``releasing``):

* a group with a member that holds the device takes one whole GPU from idle;
* when every such member is releasing the group counts as one releasing GPU (unless pipelined members
  already wait for it);
* a group with only pipelined members takes one releasing GPU (it waits for a device being freed).

A group also takes one pod slot (KAI's reservation pod, which kaisched does not create as a pod).

A task fits on a group when the group is *shareable* (some member holds the device and is not
releasing, or only pipelined members wait for it) and ``free_pipe = mem - allocated - pipelined +
releasing >= need``; it fits without waiting when some member holds the device and
``free_idle = min(mem - allocated, free_pipe) >= need``.

Per node the table keeps the best ``free_idle`` / ``free_pipe`` over its shareable groups and their
count, so that a fit check for one task over all nodes stays a handful of vectorised comparisons.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kaisched.model.resources import EPSILON
from kaisched.model.status import TaskStatus

if TYPE_CHECKING:
    from kaisched.model.task import TaskInfo

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# group names for new groups are UUIDs derived from (node, pod, device): the same input, the same name
GROUP_NAMESPACE = uuid.UUID("5f0c3f7e-59d3-4f1e-9c3b-6b6a0c1c9a41")
_GROUP_NAMESPACE_BYTES = GROUP_NAMESPACE.bytes


def uuid5_text(name: str) -> str:
    """``str(uuid.uuid5(GROUP_NAMESPACE, name))`` without building UUID objects (a new shared device is named
    for every fractional pod placed): SHA-1 of the namespace and the name, version 5, RFC 4122 variant."""
    digest = bytearray(hashlib.sha1(_GROUP_NAMESPACE_BYTES + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


NO_FIT = -1.0
# devices of running shared pods that carry no GPU-group label: named "<PRIVATE_PREFIX><pod uid>:<i>" (a
# colon never appears in a label value, so no pod can name them); nobody else may join them
PRIVATE_PREFIX = "own-gpu:"


@dataclass(slots=True)
class GpuGroup:
    name: str
    allocated: float = 0.0  # MiB of members holding the device (incl. releasing)
    releasing: float = 0.0
    pipelined: float = 0.0
    n_active: int = 0  # members holding the device and not releasing
    n_releasing: int = 0
    n_pipelined: int = 0
    members: dict[str, float] = field(default_factory=dict)  # task uid -> MiB

    @property
    def empty(self) -> bool:
        return not self.members

    @property
    def private(self) -> bool:
        """The device of a running shared pod that names no group: it is that pod's alone."""
        return self.name.startswith(PRIVATE_PREFIX)

    @property
    def shareable(self) -> bool:
        """Another pod may join: a member holds the device and is not leaving, or the device is being
        formed by pipelined members (the joiner waits with them); never a private device."""
        if self.private:
            return False
        return self.n_active > 0 or (self.n_pipelined > 0 and self.n_releasing == 0)

    @property
    def used(self) -> float:
        return self.allocated + self.pipelined

    def devices(self) -> tuple[int, int]:
        """(whole GPUs taken from idle, whole GPUs added to releasing)."""
        if self.n_active:
            return 1, 0
        if self.n_releasing:
            return 1, 0 if self.n_pipelined else 1
        if self.n_pipelined:
            return 0, -1
        return 0, 0

    def free_pipe(self, mem: float) -> float:
        return mem - self.allocated - self.pipelined + self.releasing

    def free_idle(self, mem: float) -> float:
        if not self.n_active:
            return NO_FIT  # nobody holds the device yet: a joiner waits
        return min(mem - self.allocated, self.free_pipe(mem))

    def add(self, uid: str, status: TaskStatus, mib: float, sign: int) -> None:
        if status is TaskStatus.PIPELINED:
            self.pipelined += sign * mib
            self.n_pipelined += sign
        else:
            self.allocated += sign * mib
            if status is TaskStatus.RELEASING:
                self.releasing += sign * mib
                self.n_releasing += sign
            else:
                self.n_active += sign
        if sign > 0:
            self.members[uid] = mib
        else:
            self.members.pop(uid, None)


@dataclass(slots=True)
class GpuChoice:
    """The devices chosen for a shared task on one node."""

    groups: tuple[str, ...]
    immediate: bool  # every chosen device has the memory now (no waiting for releasing pods)


GpuOrderFn = Callable[[float, bool], float]  # (used fraction of the group, is a whole free GPU) -> score
#: a task- and node-aware device score (``gpufragmentation``): (task, node, the free share of each candidate
#: device, 1.0 for a whole free GPU) -> a score per candidate, added to the order functions' scores
GpuDeviceScorer = Callable[["TaskInfo", int, FloatArray], FloatArray]


class SharedGpus:
    """GPU groups of all nodes of a :class:`~kaisched.model.node.NodeTable`."""

    __slots__ = ("_borrowed", "_need", "count", "free_idle", "free_pipe", "free_sum", "groups", "mem", "names",
                 "synced")

    def __init__(self, names: list[str], mem_per_gpu: FloatArray, synced: npt.NDArray[np.bool_]) -> None:
        n = len(mem_per_gpu)
        self.names = names
        self.mem = mem_per_gpu
        self.synced = synced
        self.groups: list[dict[str, GpuGroup]] = [{} for _ in range(n)]
        self.free_idle: FloatArray = np.full(n, NO_FIT)
        self.free_pipe: FloatArray = np.full(n, NO_FIT)
        self.count: IntArray = np.zeros(n, dtype=np.int64)
        self.free_sum: FloatArray = np.zeros(n, dtype=np.float64)  # free room on shared GPUs, in GPUs
        self._need: dict[float, FloatArray] = {}  # MiB per device of a fraction, per node (by fraction)
        # nodes whose devices are still those of the SharedGpus this one copies (copy): copied before a change
        self._borrowed: set[int] = set()

    def copy(self) -> SharedGpus:
        """The same devices with the same members, its own (changing the copy leaves these as they are: a node's
        devices are copied when the copy first changes them)."""
        out = SharedGpus(self.names, self.mem, self.synced)
        out.groups = list(self.groups)
        out._borrowed = set(range(len(self.groups)))
        out.free_idle = self.free_idle.copy()
        out.free_pipe = self.free_pipe.copy()
        out.count = self.count.copy()
        out.free_sum = self.free_sum.copy()
        out._need = self._need
        return out

    def need(self, task: TaskInfo) -> FloatArray | float:
        """MiB the task takes on each of its devices, per node (a scalar for gpu-memory requests)."""
        from kaisched.model.gpu import GpuKind

        if task.gpu.kind is GpuKind.MEMORY:
            return task.gpu.memory_mib
        need = self._need.get(task.gpu.portion)
        if need is None:
            need = self._need[task.gpu.portion] = np.floor(task.gpu.portion * self.mem + 1e-9)
        return need

    # ---- membership -------------------------------------------------------------------------------
    def join(self, task: TaskInfo, node: int, sign: int) -> tuple[int, int, int]:
        """Add (sign=1) or remove (sign=-1) the task in its groups on ``node``.

        Returns the change of (GPUs taken from idle, GPUs added to releasing, pod slots taken)."""
        mib = task.gpu.memory_on(float(self.mem[node]))
        groups = self.groups[node]
        if node in self._borrowed:  # (a copy's: its own devices first)
            self._borrowed.discard(node)
            groups = self.groups[node] = {
                name: GpuGroup(g.name, g.allocated, g.releasing, g.pipelined, g.n_active, g.n_releasing, g.n_pipelined,
                               dict(g.members)) for name, g in groups.items()}
        d_idle = d_rel = d_pods = 0
        for name in task.gpu_groups:
            grp = groups.get(name)
            if grp is None:
                if sign < 0:
                    continue
                grp = groups[name] = GpuGroup(name)
                d_pods += 1
            before = grp.devices()
            grp.add(task.uid, task.status, mib, sign)
            after = grp.devices()
            d_idle += after[0] - before[0]
            d_rel += after[1] - before[1]
            if grp.empty:
                del groups[name]
                d_pods -= 1
        self._refresh(node)
        return d_idle, d_rel, d_pods

    def _refresh(self, node: int) -> None:
        mem = float(self.mem[node])
        best_idle = best_pipe = NO_FIT
        count = 0
        free = 0.0
        for grp in self.groups[node].values():
            if grp.shareable:
                count += 1
                room = grp.free_pipe(mem)
                best_pipe = max(best_pipe, room)
                best_idle = max(best_idle, grp.free_idle(mem))
                free += max(room, 0.0) / mem if mem > 0 else 0.0
        self.free_idle[node] = best_idle
        self.free_pipe[node] = best_pipe
        self.count[node] = count
        self.free_sum[node] = free

    # ---- placement ---------------------------------------------------------------------------------
    def fitting_groups(self, node: int, need: float, *, idle: bool) -> list[GpuGroup]:
        mem = float(self.mem[node])
        return [g for g in self.groups[node].values() if g.shareable and
                (g.free_idle(mem) if idle else g.free_pipe(mem)) + EPSILON >= need]

    def choose(self, task: TaskInfo, node: int, free_idle_gpus: int, free_releasing_gpus: int, new_slots: int,
               order_fns: list[GpuOrderFn], *, prefer_immediate: bool,
               device_scorer: GpuDeviceScorer | None = None) -> GpuChoice | None:
        """Pick the task's devices on ``node`` (spec 7.3): existing groups it fits on and whole free GPUs
        (new groups), best score first; with ``prefer_immediate`` devices usable now come before those
        that wait for releasing pods. Ties: existing groups by name, then idle GPUs, then releasing ones.
        ``device_scorer`` (kaisched's, not KAI's; None: KAI's choice) adds its score per candidate device."""
        mem = float(self.mem[node])
        need = task.gpu.memory_on(mem)
        cands: list[tuple[int, float, int, str, bool]] = []  # (waits, -score, kind, name, immediate)
        frees: list[float] = []
        for grp in sorted(self.groups[node].values(), key=lambda g: g.name):
            room = grp.free_pipe(mem)
            if not grp.shareable or room + EPSILON < need:
                continue
            immediate = grp.free_idle(mem) + EPSILON >= need
            used = grp.used / mem if mem > 0 else 1.0
            score = sum(fn(used, False) for fn in order_fns)
            cands.append((0 if immediate or not prefer_immediate else 1, -score, 0, grp.name, immediate))
            frees.append(room / mem if mem > 0 else 0.0)
        whole_score = -sum(fn(0.0, True) for fn in order_fns)
        new_total = min(free_idle_gpus + free_releasing_gpus, max(new_slots, 0), task.gpu.count)
        for i in range(new_total):
            immediate = i < free_idle_gpus
            cands.append((0 if immediate or not prefer_immediate else 1, whole_score, 1 if immediate else 2,
                          f"{i:06d}", immediate))
            frees.append(1.0)
        if len(cands) < task.gpu.count:
            return None
        if device_scorer is not None and cands:
            extra = device_scorer(task, node, np.asarray(frees, dtype=np.float64))
            cands = [(c[0], c[1] - float(e), *c[2:]) for c, e in zip(cands, extra.tolist(), strict=True)]
        cands.sort()
        chosen = cands[: task.gpu.count]
        names: list[str] = []
        taken = set(self.groups[node])
        for _, _, kind, name, _ in chosen:
            names.append(name if kind == 0 else self._new_name(task, self.names[node], len(names), taken))
            taken.add(names[-1])
        return GpuChoice(tuple(names), all(c[4] for c in chosen))

    @staticmethod
    def _new_name(task: TaskInfo, node: str, device: int, taken: set[str]) -> str:
        attempt = 0
        while True:
            name = uuid5_text(f"{node}/{task.uid}/{device}/{attempt}")
            if name not in taken:
                return name
            attempt += 1


def pack_score(used: float, whole: bool) -> float:
    """gpupack: fill the fullest shared GPU first (a whole free GPU scores 0)."""
    return 0.0 if whole else used


def spread_score(used: float, whole: bool) -> float:
    """gpuspread: prefer empty GPUs (a whole free GPU scores 1)."""
    return 1.0 if whole else 1.0 - used
