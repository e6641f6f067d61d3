"""``gpufragmentation``: place a pod where it fragments the cluster's GPUs least, for the pods the cluster sees.

Not a KAI plugin (kaisched's own, docs/placement.md): a KAI-format configuration turns it on in ``tiers``
(``examples/config/fragmentation-aware.yaml``), in place of ``nodeplacement``'s GPU binpack.

The measure (after Weng et al., "Beware of Fragmentation", USENIX ATC'23, and beyond it): a node's
**fragmentation** is the GPU it has free that the next pod could not use, expected over the **workload** — the pod
shapes of the cluster's own pods (running and pending, every GPU pod of the session; GPU count or share, CPU and
memory), each weighted by ``0.5 ** (age / halfLife)`` of its creation (so that the measure follows a changing
workload), never a trace file. For one shape, the free GPU of a node that can host it (its CPU, its memory and
enough devices with room) is fragmented where a device has less room than the shape asks; for a shape the node
cannot host at all, all its free GPU is. So a GPU without the CPU or memory to drive it counts as stranded, which
the paper's measure ignores for memory.

A pod's score on a node is the fragmentation its placement removes (usually negative: the smallest increase wins),
``-(F_after - F_before)`` in GPUs, times ``weight`` (default 1000, so it outweighs the default scorers' tie
breaks). With ``resolution`` it is put on the paper's integer scale ``int(100 * sigmoid(gain) / resolution)``, and
``tieBreak: bestfit`` breaks the ties of that scale (where FGD picks at random) by best fit on the dominant
resource: the node whose largest share left (CPU, memory, GPU, each as a share of the largest node's) is least.

**Devices** (``devices: fragmentation``, the default): a share goes to the device of the node whose choice leaves
the least fragmentation (:meth:`FragmentationPlugin.device_score`, registered as the session's GPU device scorer;
ties: gpupack's fullest device, then KAI's order), and the node's score counts that choice; ``devices: gpupack``
keeps gpupack's fullest device. Without the plugin the session has no device scorer and KAI's choice stands.

Nodes' states and fragmentations are kept for the session and figured again only for the nodes whose accounting
changed (``NodeTable.changed_since``), and a node's gain for a pod shape is kept until that node changes: a
placement costs the candidates' after-states, not a rebuild.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from kaisched.framework.config import ConfigError
from kaisched.framework.plugin import NodeCandidates, Plugin
from kaisched.framework.session import Session
from kaisched.k8s.quantity import QuantityError, parse_duration
from kaisched.model.gpu import GpuKind
from kaisched.model.node import NodeTable
from kaisched.model.resources import CPU, GPU, MEMORY, Vector
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

EPS = 1e-9
DEFAULT_WEIGHT = 1000.0
DEFAULT_HALF_LIFE_S = 24 * 3600.0
#: changed nodes figured again one by one up to this many; beyond, every node (one vectorised pass)
REFRESH_LIMIT = 256


class Workload:
    """The pod shapes the measure is taken over: per shape (CPU millicores, memory bytes, devices, share of each
    device), its weight (summing to 1)."""

    def __init__(self, cpu: FloatArray, memory: FloatArray, devices: FloatArray, portion: FloatArray,
                 weight: FloatArray) -> None:
        self.cpu, self.memory, self.devices, self.portion, self.weight = cpu, memory, devices, portion, weight
        # the same, shaped for broadcasting over (nodes, shapes[, devices]) (fragmentation)
        self.cpu_row, self.memory_row, self.devices_row = cpu[None, :], memory[None, :], devices[None, :]
        self.portion_cube = portion[None, :, None]

    def __len__(self) -> int:
        return len(self.weight)

    @staticmethod
    def of(tasks: Sequence[TaskInfo], now: datetime, half_life_s: float) -> Workload:
        """The GPU pods' shapes (whole GPUs and shares; DRA, MIG and gpu-memory requests aside), each pod weighted
        by its age; shapes in a stated order (weight, then fields, descending) so that sums are deterministic."""
        weights: dict[tuple[float, float, float, float], float] = {}
        for t in tasks:
            shape = _shape(t)
            if shape is None:
                continue
            age = max((now - t.creation).total_seconds(), 0.0)
            w = 0.5 ** (age / half_life_s) if half_life_s > 0 else 1.0
            weights[shape] = weights.get(shape, 0.0) + w
        items = sorted(weights.items(), key=lambda kv: (-kv[1], tuple(-x for x in kv[0])))
        total = sum(w for _, w in items)
        if not items or total <= 0:
            z = np.zeros(0)
            return Workload(z, z, z, z, z)
        cols = list(zip(*(k for k, _ in items), strict=True))
        return Workload(np.asarray(cols[0]), np.asarray(cols[1]), np.asarray(cols[2]), np.asarray(cols[3]),
                        np.asarray([w / total for _, w in items]))


def _shape(task: TaskInfo) -> tuple[float, float, float, float] | None:
    """(CPU millicores, memory bytes, devices, share of each device) of a GPU pod, None for any other."""
    g = task.gpu
    if g.kind is GpuKind.WHOLE and g.count > 0:
        devices, portion = float(g.count), 1.0
    elif g.kind is GpuKind.FRACTION and g.count > 0:
        devices, portion = float(g.count), float(g.portion)
    else:
        return None
    return float(task.req[CPU]), float(task.req[MEMORY]), devices, portion


def fragmentation(cpu: FloatArray, memory: FloatArray, free: FloatArray, workload: Workload) -> FloatArray:
    """Each node state's expected free GPU the workload's next pod could not use (``free``: per node and device,
    the share of the device free; -1 for devices a node does not have). One pass over nodes x shapes x devices."""
    room = np.maximum(free, 0.0)  # (nodes, devices)
    total = room.sum(axis=1)
    fits = free[:, None, :] + EPS >= workload.portion_cube  # (nodes, shapes, devices)
    host = (cpu[:, None] + EPS >= workload.cpu_row) & (memory[:, None] + EPS >= workload.memory_row) \
        & (fits.sum(axis=2) >= workload.devices_row)
    small = np.where(fits, 0.0, room[:, None, :]).sum(axis=2)  # (nodes, shapes): room on devices too small
    lost = np.where(host, small, total[:, None])
    # (a sum along each state's row, not a matrix product: BLAS's blocking makes a row's value depend on the other
    # rows of the batch, and a node state's fragmentation is one number wherever and with whatever it is figured)
    out: FloatArray = (lost * workload.weight).sum(axis=1)
    return out


class FragmentationPlugin(Plugin):
    """Node scores by the fragmentation a placement adds (module docstring)."""

    name = "gpufragmentation"

    def __init__(self, arguments: Mapping[str, str]) -> None:
        super().__init__(arguments)
        raw_weight = arguments.get("weight", str(DEFAULT_WEIGHT))
        try:
            self.weight = float(raw_weight)
        except ValueError:
            raise ConfigError(f"plugin gpufragmentation: argument weight: expected a number, got {raw_weight!r}") \
                from None
        if not math.isfinite(self.weight) or self.weight < 0:
            raise ConfigError(f"plugin gpufragmentation: argument weight: expected a number >= 0, got {raw_weight!r}")
        raw_res = arguments.get("resolution", "0")
        try:
            self.resolution = float(raw_res)
        except ValueError:
            raise ConfigError(f"plugin gpufragmentation: argument resolution: expected a number, got {raw_res!r}") \
                from None
        tie = arguments.get("tieBreak", "bestfit")
        if tie not in ("bestfit", "none"):
            raise ConfigError(f"plugin gpufragmentation: argument tieBreak: expected bestfit or none, got {tie!r}")
        self.best_fit = tie == "bestfit"
        devices = arguments.get("devices", "fragmentation")
        if devices not in ("fragmentation", "gpupack"):
            raise ConfigError(f"plugin gpufragmentation: argument devices: expected fragmentation or gpupack, got "
                              f"{devices!r}")
        self.devices = devices == "fragmentation"
        raw_half = arguments.get("halfLife", "")
        self.half_life_s = DEFAULT_HALF_LIFE_S
        if raw_half:
            try:
                self.half_life_s = parse_duration(raw_half).total_seconds()
            except (QuantityError, ValueError):
                raise ConfigError(f"plugin gpufragmentation: argument halfLife: expected a duration such as 24h, "
                                  f"got {raw_half!r}") from None
            if self.half_life_s <= 0:
                raise ConfigError(f"plugin gpufragmentation: argument halfLife: expected a duration > 0, got "
                                  f"{raw_half!r}")

    def on_session_open(self, ssn: Session) -> None:
        tasks = [t for job in ssn.jobs.values() for t in job.tasks
                 if t.status is not TaskStatus.SUCCEEDED and t.status is not TaskStatus.FAILED]
        self.workload = Workload.of(tasks, ssn.now, self.half_life_s)
        if not len(self.workload):
            return  # no GPU pod: nothing to measure, every node alike
        self.nodes = ssn.nodes
        width = max(int(np.max(ssn.nodes.gpu_capacity, initial=0)), 1)
        n = len(ssn.nodes)
        self.width = width
        self.cpu: FloatArray = np.zeros(n)
        self.memory: FloatArray = np.zeros(n)
        self.free: FloatArray = np.full((n, width), -1.0)
        self.frag: FloatArray = np.zeros(n)
        self.unfigured: set[int] = set()  # nodes refreshed whose fragmentation is not figured yet (lazily: _measure)
        self._carried: list[int] = []
        self.max_cpu = max(float(np.max(ssn.nodes.allocatable[CPU], initial=0.0)), 1.0)
        self.max_gpus = float(width)
        self.max_mem = max(float(np.max(ssn.nodes.allocatable[MEMORY], initial=0.0)), 1.0)
        self.node_version: npt.NDArray[np.int64] = np.zeros(n, dtype=np.int64)  # bumped by each refresh of a node
        # per task shape (_known): the node version each node's score was figured at, for a share of one device the
        # free share of the device the measure chooses on each node (NaN: not figured), and the scores
        self._gains: dict[tuple[float, float, GpuKind, int, float],
                          tuple[npt.NDArray[np.int64], FloatArray, FloatArray]] = {}
        self._chosen: FloatArray = np.zeros(0)
        self._refresh(np.arange(n))
        self.version = ssn.nodes.version
        # the ranker: when every other scorer is neutral for a task, placement asks for the best node directly
        # (the same node: the first maximum of the same scores) instead of scoring with all of them
        ssn.add_node_scorer(self.score, neutral=self.neutral, ranker=self.first_ranked)
        if self.devices:
            ssn.gpu_device_scorer = self.device_score

    # ---- the nodes' states -----------------------------------------------------------------------------------
    def _refresh(self, nodes: npt.NDArray[np.int64]) -> None:
        table: NodeTable = self.nodes
        idle = table.idle
        capacity = table.gpu_capacity
        shared = table.shared
        for j in nodes.tolist():
            row = np.full(self.width, -1.0)
            cap = int(capacity[j])
            row[:cap] = 0.0
            whole = max(math.floor(float(table.idle[GPU, j]) + EPS), 0)
            k = 0
            mem = float(shared.mem[j])
            for grp in shared.groups[j].values():  # (in any order: the measure does not depend on it)
                if k >= cap or grp.empty:
                    continue
                row[k] = max(grp.free_pipe(mem), 0.0) / mem if mem > 0 and grp.shareable else 0.0
                k += 1
            row[k:min(k + whole, cap)] = 1.0
            self.free[j] = row
        if len(nodes) == 1:  # (most refreshes: the node of the last placement)
            j = int(nodes[0])
            self.cpu[j], self.memory[j] = idle[CPU, j], idle[MEMORY, j]
            self.unfigured.add(j)  # (figured with the next measure that needs it, in the same pass)
            self.node_version[j] += 1
            return
        self.cpu[nodes] = idle[CPU].take(nodes)
        self.memory[nodes] = idle[MEMORY].take(nodes)
        self.frag[nodes] = fragmentation(self.cpu[nodes], self.memory[nodes], self.free[nodes], self.workload)
        self.unfigured.difference_update(nodes.tolist())
        self.node_version[nodes] += 1

    def _carry(self, idx: npt.NDArray[np.int64]) -> None:
        """The nodes of ``idx`` whose fragmentation is not figured yet go with the next :meth:`_measure`."""
        if self.unfigured:
            self._carried = [j for j in idx.tolist() if j in self.unfigured]

    def _measure(self, cpu: FloatArray, memory: FloatArray, free: FloatArray) -> FloatArray:
        """:func:`fragmentation` of the states given, in one pass with the current states of the carried nodes
        (whose fragmentation it figures: a state's value does not depend on the others of its pass)."""
        carried = self._carried
        if not carried:
            return fragmentation(cpu, memory, free, self.workload)
        self._carried = []
        at = np.asarray(carried, dtype=np.int64)
        m = len(cpu)
        both = fragmentation(np.concatenate([cpu, self.cpu.take(at)]), np.concatenate([memory, self.memory.take(at)]),
                             np.concatenate([free, self.free.take(at, axis=0)]), self.workload)
        self.frag[at] = both[m:]
        self.unfigured.difference_update(carried)
        return both[:m]

    def _figured(self, idx: npt.NDArray[np.int64]) -> FloatArray:
        """The fragmentation of the nodes of ``idx`` as they are (figuring those not figured yet)."""
        if self.unfigured:
            self._carry(idx)
            if self._carried:
                self._measure(np.zeros(0), np.zeros(0), np.zeros((0, self.width)))
        out: FloatArray = self.frag.take(idx)
        return out

    def _sync(self) -> None:
        table: NodeTable = self.nodes
        if table.version == self.version:
            return
        changed = table.changed_since(self.version, REFRESH_LIMIT)
        self._refresh(np.arange(len(table)) if changed is None else changed)
        self.version = table.version

    # ---- scores ----------------------------------------------------------------------------------------------
    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        return False

    def first_ranked(self, task: TaskInfo, fit: BoolArray) -> int | None:
        """The node of ``fit`` with the best score, the first (smallest index) of equal ones; -1: none fits. (Over the
        mask: the scores of the nodes that do not fit are not read, and only the changed nodes that fit are figured.)"""
        self._sync()
        _, (version, chosen, weighted) = self._known(task)
        stale = np.flatnonzero(fit & (version != self.node_version))
        if len(stale):
            self._update(task, stale, version, chosen, weighted)
        best = int(np.argmax(np.where(fit, weighted, -np.inf)))
        return best if bool(fit[best]) else -1

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        return self.scores(task, cands.indices)

    def scores(self, task: TaskInfo, idx: npt.NDArray[np.int64]) -> Vector:
        """The task's score on each node of ``idx`` (figured again for the nodes of ``idx`` that changed since; a
        node's score is a function of its state and the task's shape alone)."""
        if len(idx) == 0:
            return np.zeros(0)
        self._sync()
        _, (version, chosen, weighted) = self._known(task)
        stale = idx[version.take(idx) != self.node_version.take(idx)]
        if len(stale):
            self._update(task, stale, version, chosen, weighted)
        out: Vector = weighted.take(idx)
        return out

    def _known(self, task: TaskInfo) -> tuple[tuple[float, float, GpuKind, int, float],
                                              tuple[npt.NDArray[np.int64], FloatArray, FloatArray]]:
        """The task's shape and its kept figures: per node the version they were figured at (-1: never), the free
        share of the device the measure chose (a share of one device; NaN: not figured) and the score (the gain
        times the weight)."""
        g = task.gpu
        key = (float(task.req[CPU]), float(task.req[MEMORY]), g.kind, g.count, g.portion)
        known = self._gains.get(key)
        if known is None:
            n = len(self.frag)
            known = self._gains[key] = (np.full(n, -1, dtype=np.int64), np.full(n, np.nan), np.zeros(n))
        return key, known

    def _update(self, task: TaskInfo, stale: npt.NDArray[np.int64], version: npt.NDArray[np.int64],
                chosen: FloatArray, weighted: FloatArray) -> None:
        shared = task.gpu.kind is GpuKind.FRACTION
        if shared:
            self._chosen = np.full(len(stale), np.nan)
        weighted[stale] = self._gain(task, stale) * self.weight
        if shared:
            chosen[stale] = self._chosen
        version[stale] = self.node_version.take(stale)

    def _gain(self, task: TaskInfo, idx: npt.NDArray[np.int64]) -> FloatArray:
        """The fragmentation the task's placement removes on each node of ``idx`` (GPUs; mostly negative), on
        the scale of ``resolution`` when set."""
        cpu = self.cpu[idx] - float(task.req[CPU])
        memory = self.memory[idx] - float(task.req[MEMORY])
        free = self.free[idx].copy()
        self._carry(idx)
        g = task.gpu
        after: FloatArray | None = None
        if g.kind is GpuKind.WHOLE and g.count > 0:
            whole = free >= 1.0 - EPS
            taken = whole & (np.cumsum(whole, axis=1) <= g.count)
            free[taken] = 0.0
        elif g.kind is GpuKind.FRACTION and g.count > 0 and self.devices:
            after, free, self._chosen = self._best_devices(cpu, memory, free, g.portion, g.count)
        elif g.kind is GpuKind.FRACTION and g.count > 0:
            rows = np.arange(len(idx))
            used = np.zeros(free.shape, dtype=np.bool_)
            for _ in range(g.count):  # the fullest device with room (gpupack's choice), one per device asked
                room = np.where((free + EPS >= g.portion) & ~used, free, np.inf)
                dev = np.argmin(room, axis=1)
                ok = np.isfinite(room[rows, dev])
                free[rows[ok], dev[ok]] -= g.portion
                used[rows[ok], dev[ok]] = True
        if after is None:
            after = self._measure(cpu, memory, free)
        gain: FloatArray = self._figured(idx) - after
        if self.resolution > 0 and len(idx) == 1:
            return np.full(1, self._scaled(float(gain[0]), float(cpu[0]), float(memory[0]), free))
        if self.resolution > 0:
            step = self.resolution / 100.0
            gain = np.floor(100.0 / (1.0 + np.exp(-gain)) / self.resolution) * step
            if self.best_fit:  # within a step: the node whose dominant share left is least (best fit)
                gain = gain + 0.9 * step * (1.0 - self._dominant_left(cpu, memory, free))
        return gain

    def _scaled(self, gain: float, cpu: float, memory: float, free: FloatArray) -> float:
        """The gain of one node on the scale of ``resolution`` with its best-fit part: the arithmetic of
        :meth:`_gain`'s arrays in floats, the same operations in the same order (so the same numbers)."""
        step = self.resolution / 100.0
        scaled = math.floor(100.0 / (1.0 + float(np.exp(-np.float64(gain)))) / self.resolution) * step
        if not self.best_fit:
            return scaled
        left = max(cpu / self.max_cpu, memory / self.max_mem)
        left = max(left, float(np.maximum(free, 0.0).sum(axis=1)[0]) / self.max_gpus)
        left = min(max(left, 0.0), 1.0)
        return scaled + 0.9 * step * (1.0 - left)

    def _dominant_left(self, cpu: FloatArray, memory: FloatArray, free: FloatArray) -> FloatArray:
        """Per node state, the largest of what it has left of CPU, memory and GPU (free devices and shares), each
        as a share of the largest node's (0..1): best fit by the dominant resource, as in DRF's dominant share."""
        out: FloatArray = np.maximum(cpu / self.max_cpu, memory / self.max_mem)
        np.maximum(out, np.maximum(free, 0.0).sum(axis=1) / self.max_gpus, out=out)
        np.maximum(out, 0.0, out=out)  # (a share below 0 of one resource: the others' decide)
        np.minimum(out, 1.0, out=out)
        return out

    def _best_devices(self, cpu: FloatArray, memory: FloatArray, free: FloatArray, portion: float, count: int
                      ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Each node's fragmentation after a share of ``portion`` of ``count`` devices is placed on the devices
        that leave the least (one device at a time, the best first), the nodes' devices after it (sorted: the
        measure does not depend on their order) and the free share of the first device chosen (NaN: none). Of
        devices with the same free share only one is tried; of devices that leave the same, the fullest is chosen
        (gpupack's choice among them)."""
        free = np.sort(free, axis=1)
        m, w = free.shape
        if m == 1 and count == 1:  # (most placements: the one node the last placement changed)
            return self._best_device_of_one(cpu, memory, free, portion)
        rows = np.arange(m)
        used = np.zeros(free.shape, dtype=np.bool_)
        best: FloatArray = np.full(m, np.inf)
        first_free: FloatArray = np.full(m, np.nan)
        for k in range(count):
            ok = (free + EPS >= portion) & ~used
            # a device like the one before it (sorted), both able to take the share: the same state
            ok[:, 1:] &= ~(ok[:, :-1] & (np.abs(free[:, 1:] - free[:, :-1]) < EPS))
            node, dev = np.nonzero(ok)
            if not len(node):
                break
            states = free[node]
            states[np.arange(len(node)), dev] -= portion
            frag = self._measure(cpu[node], memory[node], states)
            # (np.nonzero gives the candidates node by node, each node's devices in order)
            nodes_with, starts = np.unique(node, return_index=True)
            best = np.full(m, np.inf)
            best[nodes_with] = np.minimum.reduceat(frag, starts)
            # the first device (the fullest) within a micro-GPU of the node's minimum
            first = np.full(m, w, dtype=np.int64)
            hit = frag <= best[node] + 5e-7
            hit_nodes, at = np.unique(node[hit], return_index=True)
            first[hit_nodes] = dev[hit][at]
            has = first < w
            if k == 0:
                first_free[has] = free[rows[has], first[has]]
            free[rows[has], first[has]] -= portion
            used[rows[has], first[has]] = True
        none = ~np.isfinite(best)  # (no device could take it: the state as it is)
        if none.any():
            best[none] = self._measure(cpu[none], memory[none], free[none])
        return best, free, first_free

    def _best_device_of_one(self, cpu: FloatArray, memory: FloatArray, free: FloatArray, portion: float
                            ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """:meth:`_best_devices` for one node (``free``: its devices, sorted) and a share of one device: the same
        candidates (a device with room, not like the one before it), the same minimum and the same first device
        within a micro-GPU of it, without the per-node scatter of the general case."""
        row = free[0]
        values = row.tolist()
        able = [f + EPS >= portion for f in values]
        cands = [d for d in range(len(values))
                 if able[d] and not (d > 0 and able[d - 1] and abs(values[d] - values[d - 1]) < EPS)]
        if not cands:
            return self._measure(cpu, memory, free), free, np.full(1, np.nan)
        k = len(cands)
        states = np.repeat(free, k, axis=0)
        states[np.arange(k), cands] -= portion
        frag = self._measure(np.repeat(cpu, k), np.repeat(memory, k), states)
        least = float(frag.min())
        first = cands[int(np.argmax(frag <= least + 5e-7))]
        first_free = np.full(1, values[first])
        free[0, first] -= portion
        return np.full(1, least), free, first_free

    def device_score(self, task: TaskInfo, node: int, frees: FloatArray) -> FloatArray:
        """Per candidate device of a share on ``node`` (its free share; 1.0 a whole free GPU): minus the node's
        fragmentation after the share is placed on it, in whole micro-GPUs times 10 so that it outranks the
        GPU order functions (gpupack's fullest device breaks the ties). A candidate the plugin does not see free
        (a GPU being released) scores as the node's fragmentation plus one GPU."""
        self._sync()
        g = task.gpu
        known = self._gains.get((float(task.req[CPU]), float(task.req[MEMORY]), g.kind, g.count, g.portion))
        if known is not None and g.count == 1 and known[0][node] == self.node_version[node]:
            best = float(known[1][node])  # (the device the node's score counted: figured already)
            hit = np.abs(frees - best) < 1e-6
            if bool(hit.any()):
                scored: FloatArray = np.where(hit, 0.0, -1e7)
                return scored
        row = self.free[node]
        portion = g.portion if g.kind is GpuKind.FRACTION else 1.0
        states = np.repeat(row[None, :], len(frees), axis=0)
        found = np.zeros(len(frees), dtype=np.bool_)
        for k, f in enumerate(frees.tolist()):
            at = np.flatnonzero(np.abs(row - f) < 1e-6)
            if len(at):
                states[k, int(at[0])] -= portion
                found[k] = True
        n = len(frees)
        cpu = np.full(n, float(self.cpu[node]) - float(task.req[CPU]))
        memory = np.full(n, float(self.memory[node]) - float(task.req[MEMORY]))
        frag = fragmentation(cpu, memory, states, self.workload)
        frag = np.where(found, frag, float(self._figured(np.array([node]))[0]) + 1.0)
        out: FloatArray = -10.0 * np.rint(frag * 1e6)
        return out


__all__ = ["FragmentationPlugin", "Workload", "fragmentation"]
