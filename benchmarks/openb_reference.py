"""Reference placements for the OpenB experiment, written from the FGD paper's description (Weng et al., "Beware
of Fragmentation", USENIX ATC'23), so that the harness can be checked against the paper's numbers before a
kaisched row is trusted.

This is a model of the paper's simulator, independent of kaisched: nodes are CPU, memory and a list of GPUs with
milli-GPUs left; a pod asks for CPU, memory and either a share of one GPU (< 1000 milli) or whole GPUs, maybe of
some GPU models only; a node fits when its model is accepted and it has the CPU, the memory and the GPUs (a share
on one GPU with room, whole GPUs entirely free).

* **Best-fit**: the node with the least left after the placement, ``0.5 cpu_left / 128 cores + 0.5 gpu_left /
  8 GPUs`` (lower is better), scored as the paper's simulator does, on an integer scale of 100; a share goes to the
  fullest GPU that holds it.
* **FGD**: the node (and, for a share, the GPU) whose fragmentation grows least. A node's fragmentation is the
  expected idle GPU it cannot give to the next pod, over the *typical pods* (the most popular GPU pod shapes of the
  workload, covering ``popularity`` of the GPU pods, renormalised): for a shape the node can host (model, CPU,
  the GPUs), the idle milli-GPUs of its GPUs too small for the shape; for one it cannot, all its idle milli-GPUs.
  The score is ``int(100 * sigmoid((before - after) / 1000))``, as the paper's scheduler plugin computes it.

The workload, the per-seed random node order that breaks ties (the paper's scheduler picks one of the best at
random) and the curve are :mod:`kaisched.sim.openb`'s, so these rows and kaisched's see the same pods.
Per node and pod shape, the score is kept until the node changes (one node changes per pod), so a run costs
what changed.
"""

from __future__ import annotations

import argparse
import copy
import csv
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from kaisched.sim.openb import CURVE_POINTS, INFLATION, arrival_order, curve, node_tie_order
from kaisched.sim.traces import OpenBPod, read_openb_pods

MAX_CPU: Final = 128_000  # milli-CPU, Best-fit's normalisation
MAX_GPU: Final = 8_000  # milli-GPU
MILLI: Final = 1000
POLICIES: Final = ("bestfit", "fgd")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Shape:
    """What a pod asks for: milli-CPU, MiB, whole GPUs ``num`` of ``milli`` each (a share: num 1, milli < 1000;
    CPU only: num 0), the GPU models it accepts (empty: any)."""

    cpu: int
    memory: int
    num: int
    milli: int
    models: tuple[str, ...]

    @staticmethod
    def of(pod: OpenBPod) -> Shape:
        if pod.gpus <= 0:
            return Shape(pod.cpu_milli, pod.memory_mib, 0, 0, pod.models)
        if pod.gpus < 1:
            return Shape(pod.cpu_milli, pod.memory_mib, 1, round(pod.gpus * MILLI), pod.models)
        return Shape(pod.cpu_milli, pod.memory_mib, round(pod.gpus), MILLI, pod.models)

    @property
    def gpu_milli(self) -> int:
        return self.num * self.milli


def typical_shapes(pods: Sequence[OpenBPod], popularity: float = 1.0) -> list[tuple[Shape, float]]:
    """The most popular GPU pod shapes (CPU and GPU asked, GPU models) covering ``popularity`` of the GPU pods,
    with their frequencies renormalised to 1; ties in popularity by the shape's fields."""
    counts = Counter(replace_memory(Shape.of(p)) for p in pods if p.gpus > 0)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda sc: (-sc[1], sc[0].cpu, sc[0].num, sc[0].milli, sc[0].models))
    out: list[tuple[Shape, int]] = []
    covered = 0
    for shape, n in ranked:
        if out and covered >= popularity * total:
            break
        out.append((shape, n))
        covered += n
    return [(s, n / covered) for s, n in out]


def replace_memory(shape: Shape) -> Shape:
    """The shape without its memory (the fragmentation measure reads CPU and GPUs only)."""
    return Shape(shape.cpu, 0, shape.num, shape.milli, shape.models)


class ReferenceCluster:
    """Nodes' free CPU, memory and per-GPU milli-GPUs (``gpu``: -1 where a node has no such GPU)."""

    def __init__(self, cpu: Sequence[int], memory: Sequence[int], gpus: Sequence[int], models: Sequence[str]) -> None:
        n = len(cpu)
        width = max(gpus, default=0) or 1
        self.cpu: FloatArray = np.asarray(cpu, dtype=np.float64).copy()
        self.memory: FloatArray = np.asarray(memory, dtype=np.float64).copy()
        self.gpu: FloatArray = np.full((n, width), -1.0)
        for i, g in enumerate(gpus):
            self.gpu[i, :g] = MILLI
        self.models = list(models)
        self.model_names = sorted(set(models))
        self.model_index: IntArray = np.asarray([self.model_names.index(m) for m in models], dtype=np.int64)
        self.version: IntArray = np.zeros(n, dtype=np.int64)

    @property
    def capacity_milli(self) -> int:
        return int((self.gpu >= 0).sum()) * MILLI

    def accepts(self, models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model the shape accepts."""
        if not models:
            return np.ones(len(self.cpu), dtype=np.bool_)
        ok = np.asarray([m in models for m in self.model_names], dtype=np.bool_)
        return ok[self.model_index]

    def fits(self, shape: Shape, access: BoolArray) -> BoolArray:
        ok = access & (self.cpu >= shape.cpu) & (self.memory >= shape.memory)
        if shape.num:
            ok &= (self.gpu >= shape.milli).sum(axis=1) >= shape.num
        return ok

    def place(self, node: int, shape: Shape, device: int) -> None:
        """The pod on ``node``: a share on GPU ``device``, whole GPUs on the first free ones."""
        self.cpu[node] -= shape.cpu
        self.memory[node] -= shape.memory
        if shape.num == 1 and shape.milli < MILLI:
            if self.gpu[node, device] < shape.milli:
                raise AssertionError(f"node {node} GPU {device}: {self.gpu[node, device]} milli left, "
                                     f"{shape.milli} placed")
            self.gpu[node, device] -= shape.milli
        elif shape.num:
            free = np.flatnonzero(self.gpu[node] >= MILLI)[:shape.num]
            self.gpu[node, free] = 0.0
        self.version[node] += 1


def fragmentation(cpu: FloatArray, gpu: FloatArray, model_index: IntArray,
                  typical: Sequence[tuple[Shape, float, BoolArray]]) -> FloatArray:
    """Each node state's expected idle milli-GPUs the typical pods cannot use (``typical``: shape, frequency, the
    models it accepts indexed by model)."""
    idle = np.where(gpu > 0, gpu, 0.0)
    total = idle.sum(axis=1)
    out = np.zeros(len(cpu))
    for shape, freq, accepted in typical:
        host = accepted[model_index] & (cpu >= shape.cpu) & ((gpu >= shape.milli).sum(axis=1) >= shape.num)
        small = np.where(gpu < shape.milli, idle, 0.0).sum(axis=1)
        out += freq * np.where(host, small, total)
    return out


class Placer:
    """One reference policy placing pods one at a time on a :class:`ReferenceCluster`."""

    def __init__(self, cluster: ReferenceCluster, policy: str, rank: IntArray,
                 typical: Sequence[tuple[Shape, float]] = ()) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
        self.cluster = cluster
        self.policy = policy
        self.rank = rank  # each node's place in the order that breaks ties (the first wins)
        self.typical = [(s, f, np.asarray([not s.models or m in s.models for m in cluster.model_names]))
                        for s, f in typical]
        self._access: dict[tuple[str, ...], BoolArray] = {}
        # per shape: the version of each node its score was computed at, the score, the device
        self._scores: dict[Shape, tuple[IntArray, IntArray, IntArray]] = {}
        self._frag_version: IntArray = np.full(len(cluster.cpu), -1, dtype=np.int64)
        self._frag: FloatArray = np.zeros(len(cluster.cpu))

    def place(self, shape: Shape) -> int | None:
        """The node the pod goes to (placed there), or None: it fits nowhere and is dropped."""
        c = self.cluster
        access = self._access.get(shape.models)
        if access is None:
            access = self._access[shape.models] = c.accepts(shape.models)
        fit = c.fits(shape, access)
        nodes = np.flatnonzero(fit)
        if not len(nodes):
            return None
        version, score, device = self._scores.setdefault(
            shape, (np.full(len(c.cpu), -1, dtype=np.int64), np.zeros(len(c.cpu), dtype=np.int64),
                    np.zeros(len(c.cpu), dtype=np.int64)))
        stale = nodes[version[nodes] != c.version[nodes]]
        if len(stale):
            s, d = self._score(shape, stale)
            score[stale], device[stale], version[stale] = s, d, c.version[stale]
        best = score[nodes].max()
        top = nodes[score[nodes] == best]
        node = int(top[np.argmin(self.rank[top])])
        c.place(node, shape, int(device[node]))
        return node

    # ---- scores (higher is better) -----------------------------------------------------------------------------
    def _score(self, shape: Shape, nodes: IntArray) -> tuple[IntArray, IntArray]:
        if self.policy == "bestfit":
            return self._bestfit(shape, nodes)
        return self._fgd(shape, nodes)

    def _share_devices(self, shape: Shape, nodes: IntArray) -> IntArray:
        """For a share: the fullest GPU of each node that holds it (the lowest index among equals)."""
        gpu = self.cluster.gpu[nodes]
        room = np.where(gpu >= shape.milli, gpu, np.inf)
        out: IntArray = np.argmin(room, axis=1).astype(np.int64)
        return out

    def _bestfit(self, shape: Shape, nodes: IntArray) -> tuple[IntArray, IntArray]:
        c = self.cluster
        gpu_left = np.where(c.gpu[nodes] > 0, c.gpu[nodes], 0.0).sum(axis=1)
        left = 0.5 * (c.cpu[nodes] - shape.cpu) / MAX_CPU + 0.5 * (gpu_left - shape.gpu_milli) / MAX_GPU
        score = ((1.0 - left) * 100).astype(np.int64)
        share = shape.num == 1 and shape.milli < MILLI
        device = self._share_devices(shape, nodes) if share else np.zeros(len(nodes), dtype=np.int64)
        return score, device

    def _node_frag(self, nodes: IntArray) -> FloatArray:
        c = self.cluster
        stale = nodes[self._frag_version[nodes] != c.version[nodes]]
        if len(stale):
            self._frag[stale] = fragmentation(c.cpu[stale], c.gpu[stale], c.model_index[stale], self.typical)
            self._frag_version[stale] = c.version[stale]
        return self._frag[nodes]

    def _fgd(self, shape: Shape, nodes: IntArray) -> tuple[IntArray, IntArray]:
        c = self.cluster
        before = self._node_frag(nodes)
        cpu = c.cpu[nodes] - shape.cpu
        models = c.model_index[nodes]
        if shape.num == 1 and shape.milli < MILLI:  # every GPU with room is a candidate
            width = c.gpu.shape[1]
            best = np.full(len(nodes), np.iinfo(np.int64).min, dtype=np.int64)
            where = np.zeros(len(nodes), dtype=np.int64)
            for g in range(width):
                ok = c.gpu[nodes, g] >= shape.milli
                if not ok.any():
                    continue
                rows = np.flatnonzero(ok)
                after_gpu = c.gpu[nodes[rows]].copy()
                after_gpu[:, g] -= shape.milli
                after = fragmentation(cpu[rows], after_gpu, models[rows], self.typical)
                score = _sigmoid_score(before[rows] - after)
                better = score > best[rows]  # (the first GPU among equals)
                best[rows[better]] = score[better]
                where[rows[better]] = g
            return best, where
        after_gpu = c.gpu[nodes].copy()
        if shape.num:
            for row in range(len(nodes)):
                free = np.flatnonzero(after_gpu[row] >= MILLI)[:shape.num]
                after_gpu[row, free] = 0.0
        after = fragmentation(cpu, after_gpu, models, self.typical)
        return _sigmoid_score(before - after), np.zeros(len(nodes), dtype=np.int64)


def _sigmoid_score(gain: FloatArray) -> IntArray:
    """The paper's plugin score: ``int(100 * sigmoid(gain / 1000))`` (gain: fragmentation removed, milli-GPUs)."""
    return (100.0 / (1.0 + np.exp(-gain / 1000.0))).astype(np.int64)





# ------------------------------------------------------------------------------------------------ the protocol
def run_reference(pods: Sequence[OpenBPod], nodes: ReferenceCluster, policy: str, seed: int, *,
                  popularity: float = 1.0, inflation: float = INFLATION,
                  stop_at: float = 1.0) -> tuple[dict[int, float], list[float], list[float]]:
    """One seed of a reference policy: (the curve, arrived shares, allocation ratios after each arrival), until
    the arrived share passes ``stop_at`` (the last point) by half a percent."""
    cluster = copy.deepcopy(nodes)
    capacity = cluster.capacity_milli
    placer = Placer(cluster, policy, np.asarray(node_tie_order(len(cluster.cpu), seed), dtype=np.int64),
                    typical_shapes(pods, popularity) if policy == "fgd" else ())
    arrived: list[float] = []
    allocated: list[float] = []
    asked = placed = 0
    for pod in arrival_order(pods, capacity, seed, inflation=inflation):
        shape = Shape.of(pod)
        asked += shape.gpu_milli
        if placer.place(shape) is not None:
            placed += shape.gpu_milli
        arrived.append(asked / capacity)
        allocated.append(placed / capacity)
        if asked / capacity > stop_at + 0.005:
            break
    return curve(arrived, allocated), arrived, allocated


# ------------------------------------------------------------------------------------------------ the command
#: the paper's figures (GPU allocation ratio at 100 % arrived, mean of seeds 42-51)
PAPER: Final = {"fgd": 95.23, "bestfit": 92.86}
OPENB: Final = "/work/shared/traces/openb"


def read_cluster(node_csv: str) -> ReferenceCluster:
    """The GPU nodes of an OpenB node list."""
    with open(node_csv, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["gpu"] or 0) > 0]
    return ReferenceCluster([int(r["cpu_milli"]) for r in rows], [int(r["memory_mib"]) for r in rows],
                            [int(r["gpu"]) for r in rows], [r["model"] for r in rows])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.openb_reference",
                                description="the OpenB experiment with the paper's Best-fit and FGD, beside the "
                                            "paper's figures")
    p.add_argument("--policy", choices=POLICIES, action="append", help="repeatable; default: both")
    p.add_argument("--seeds", type=int, default=10, help="seeds 42.. (default 10: the paper's 42-51)")
    p.add_argument("--openb", default=OPENB, help="folder of the OpenB CSV files")
    p.add_argument("--pods", default="openb_pod_list_default.csv")
    args = p.parse_args(argv)
    pods = read_openb_pods(f"{args.openb}/{args.pods}")
    cluster = read_cluster(f"{args.openb}/openb_node_list_gpu_node.csv")
    print(f"{len(pods):,} pods on {len(cluster.cpu):,} nodes / {cluster.capacity_milli // MILLI:,} GPUs, "
          f"seeds 42-{41 + args.seeds}")
    print(f"{'policy':>8} " + " ".join(f"{k:>6}%" for k in CURVE_POINTS) + f" {'spread':>7} {'paper':>6} {'s/seed':>7}")
    for policy in args.policy or POLICIES:
        t0 = time.perf_counter()
        curves = [run_reference(pods, cluster, policy, seed)[0] for seed in range(42, 42 + args.seeds)]
        mean = {k: float(np.mean([c[k] for c in curves])) * 100 for k in CURVE_POINTS}
        at100 = [c[100] * 100 for c in curves]
        per_seed = (time.perf_counter() - t0) / args.seeds
        print(f"{policy:>8} " + " ".join(f"{mean[k]:>7.2f}" for k in CURVE_POINTS)
              + f" {max(at100) - min(at100):>7.2f} {PAPER[policy]:>6.2f} {per_seed:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["MAX_CPU", "MAX_GPU", "PAPER", "POLICIES", "Placer", "ReferenceCluster", "Shape", "fragmentation", "main",
           "read_cluster", "run_reference", "typical_shapes"]
