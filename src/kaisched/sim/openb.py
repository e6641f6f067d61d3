"""The OpenB placement experiment (Weng et al., "Beware of Fragmentation", USENIX ATC'23) on kaisched.

The experiment of the paper, on Alibaba's GPU cluster trace v2023 (``/work/shared/traces/README.md``):

* the cluster is the GPU nodes only (``openb_node_list_gpu_node.csv``: 1,213 nodes, 6,212 GPUs);
* the workload of a seed (:func:`arrival_order`): the pod list **shuffled**, then **clones** drawn from it with
  replacement appended until the next one would take the GPUs asked past 130 % of the cluster's (one
  ``numpy.random.default_rng(seed)``);
* pods arrive one at a time in that order and nothing departs; a pod that does not fit when it arrives
  is **dropped**;
* ties between equally good nodes are broken by a **per-seed random node order** (the paper's scheduler picks
  one of the best at random; kaisched breaks ties by node name, so each node's name is prefixed with its rank in
  that order);
* the metric is the **GPU allocation ratio** = milli-GPUs allocated / (GPUs x 1000), sampled after every
  arrival; the value at k % (:func:`curve`) is the mean of the samples whose arrived share of the cluster's GPUs
  rounds to k %; the figure is the value at 100 %, mean over the seeds 42-51.

How it runs on the real scheduler: with one queue, no departures and every pod its own PodGroup
(minMember 1, the same priority class ``train``) created in arrival order, ONE allocate cycle over the
pods that arrive before the last point of the curve places them one at a time in arrival order (job order =
priority, then creation time), exactly as if each had arrived in a cycle of its own; a pod left pending is a pod
dropped. :func:`sequential_binds` does it literally, one cycle per pod, to check this on small cases.
Only the ``allocate`` action runs (whatever the configuration's ``actions``): consolidation or preemption
would move or evict placed pods, which the experiment does not.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np

from kaisched.cluster.schedule import resolve_config, schedule
from kaisched.framework.config import DEFAULT_PLUGINS, SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s import constants as C
from kaisched.model.gpu import gpu_group_labels
from kaisched.sim.model import Obj
from kaisched.sim.traces import OpenBPod, job_objects, openb_nodes, queue_objects, read_openb_pods

SEEDS: Final = range(42, 52)
INFLATION: Final = 1.3  # the pod list is resampled until it asks for 130 % of the GPUs
READ_AT: Final = 1.0  # the figure: the curve's value at 100 % of the GPUs asked
CURVE_POINTS: Final = (50, 70, 90, 95, 100)  # % of the GPUs asked
QUEUE: Final = "openb"
NAMESPACE: Final = "openb"
EPOCH: Final = datetime(2026, 1, 1, tzinfo=UTC)  # pod i is created at EPOCH + i seconds


def placement_config(gpu: str = "binpack", cpu: str = "binpack") -> dict[str, Any]:
    """KAI's default plugins with ``nodeplacement`` set to ``gpu``/``cpu`` (``binpack`` or ``spread``) and,
    for GPU spread, ``gpuspread`` instead of ``gpupack`` (fractions on the emptiest GPU)."""
    plugins: list[dict[str, Any]] = []
    for opt in DEFAULT_PLUGINS:
        name = "gpuspread" if opt.name == "gpupack" and gpu == "spread" else opt.name
        entry: dict[str, Any] = {"name": name}
        if opt.name == "nodeplacement":
            entry["arguments"] = {"gpu": gpu, "cpu": cpu}
        elif opt.arguments:
            entry["arguments"] = dict(opt.arguments)
        plugins.append(entry)
    return {"actions": "allocate", "tiers": [{"plugins": plugins}]}


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    ratio: float  # the curve's value at 100 %: allocated / total milli-GPUs, mean of the samples there
    arrived: int  # pods arrived up to the 100 % point
    placed: int
    dropped: int
    requested_milli: int  # milli-GPUs the arrived pods ask for
    allocated_milli: int  # milli-GPUs of the placed pods
    gpu_pods_dropped: int  # dropped pods that ask for GPUs
    wall_seconds: float  # building the objects and the cycle
    curve: Mapping[int, float]  # point (% of the GPUs asked) -> allocation ratio (:func:`curve`)


@dataclass(frozen=True, slots=True)
class OpenBResult:
    pod_csv: str
    node_csv: str
    nodes: int
    gpus: int
    config: Mapping[str, Any] | None
    seeds: tuple[SeedResult, ...]
    wall_seconds: float

    @property
    def ratios(self) -> list[float]:
        return [s.ratio for s in self.seeds]

    @property
    def mean_ratio(self) -> float:
        return sum(self.ratios) / len(self.seeds) if self.seeds else 0.0

    def mean_curve(self) -> dict[int, float]:
        """The curve's mean over the seeds, per point."""
        points = self.seeds[0].curve if self.seeds else {}
        return {k: sum(s.curve[k] for s in self.seeds) / len(self.seeds) for k in points}

    @property
    def spread(self) -> float:
        """The largest minus the smallest seed's figure."""
        return max(self.ratios) - min(self.ratios) if self.seeds else 0.0

    @property
    def pods_arrived(self) -> int:
        return sum(s.arrived for s in self.seeds)

    @property
    def pods_placed(self) -> int:
        return sum(s.placed for s in self.seeds)

    def format(self) -> str:
        return format_result(self)


def format_result(result: OpenBResult) -> str:
    """A small text table: one line per seed, then the mean."""
    lines = [f"OpenB placement: {Path(result.pod_csv).name} on {result.nodes} nodes / {result.gpus} GPUs",
             f"{'seed':>6} {'ratio':>8} {'arrived':>8} {'placed':>7} {'dropped':>8} {'GPU dropped':>12} {'wall s':>7}"]
    for s in result.seeds:
        lines.append(f"{s.seed:>6} {s.ratio:>8.2%} {s.arrived:>8,} {s.placed:>7,} {s.dropped:>8,} "
                     f"{s.gpu_pods_dropped:>12,} {s.wall_seconds:>7.2f}")
    lines.append(f"{'mean':>6} {result.mean_ratio:>8.2%}   ({len(result.seeds)} seeds, {result.wall_seconds:.1f} s)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the workload


def arrival_order(pods: Sequence[OpenBPod], capacity_milli: int, seed: int, *,
                  inflation: float = INFLATION) -> list[OpenBPod]:
    """The paper's workload for one seed: the pod list shuffled, then clones drawn from it with replacement
    appended until the next one would take the milli-GPUs asked past ``inflation`` x the capacity (one
    ``numpy.random.default_rng(seed)``; a list without GPU pods is only shuffled)."""
    rng = np.random.default_rng(seed)
    order = [pods[int(i)] for i in rng.permutation(len(pods))]
    if not any(p.gpu_milli for p in pods):
        return order
    asked = sum(p.gpu_milli for p in order)
    while True:
        clone = pods[int(rng.integers(len(pods)))]
        if asked + clone.gpu_milli > inflation * capacity_milli:
            return order
        order.append(clone)
        asked += clone.gpu_milli


def node_tie_order(count: int, seed: int) -> list[int]:
    """The per-seed random order of the nodes that breaks ties: node i's rank in it."""
    rng = np.random.default_rng(seed + 1_000_003)
    rank = [0] * count
    for position, node in enumerate(rng.permutation(count)):
        rank[int(node)] = position
    return rank


def arrived_prefix(order: Sequence[OpenBPod], capacity_milli: int, *, read_at: float = READ_AT) -> list[OpenBPod]:
    """The pods that arrive until the GPUs asked reach ``read_at`` x the capacity (the one crossing it too)."""
    asked = 0
    for i, p in enumerate(order):
        asked += p.gpu_milli
        if asked >= read_at * capacity_milli:
            return list(order[:i + 1])
    return list(order)


def curve(arrived: Sequence[float], allocated: Sequence[float],
          points: Sequence[int] = CURVE_POINTS) -> dict[int, float]:
    """Per point k (%): the mean allocation ratio of the samples (one after each arrival) whose arrived share of
    the capacity rounds to k %; where none does (a small cluster, where one pod asks more than a percent), the
    sample of the first arrival that reaches k % (NaN when none does)."""
    raw = np.asarray(arrived, dtype=np.float64)
    share = np.rint(raw * 100).astype(np.int64)
    alloc = np.asarray(allocated, dtype=np.float64)
    out: dict[int, float] = {}
    for k in points:
        at = share == k
        if bool(at.any()):
            out[k] = float(alloc[at].mean())
        else:
            reached = np.flatnonzero(raw >= k / 100)
            out[k] = float(alloc[reached[0]]) if len(reached) else float("nan")
    return out


def samples(arrivals: Sequence[OpenBPod], placed: Iterable[int], capacity_milli: int
            ) -> tuple[list[float], list[float]]:
    """After each arrival: the share of the capacity asked so far and the share allocated (``placed``: the
    indexes of the arrivals that were placed)."""
    taken = set(placed)
    arrived: list[float] = []
    allocated: list[float] = []
    asked = got = 0
    for i, p in enumerate(arrivals):
        asked += p.gpu_milli
        if i in taken:
            got += p.gpu_milli
        arrived.append(asked / capacity_milli)
        allocated.append(got / capacity_milli)
    return arrived, allocated


def ranked_nodes(nodes: Sequence[Obj], seed: int) -> list[Obj]:
    """The nodes renamed ``r<rank>-<name>`` by their rank in the seed's tie order (:func:`node_tie_order`)."""
    rank = node_tie_order(len(nodes), seed)
    width = len(str(max(len(nodes) - 1, 0)))
    out: list[Obj] = []
    for i, n in enumerate(nodes):
        meta = {**n["metadata"], "name": f"r{rank[i]:0{width}d}-{n['metadata']['name']}"}
        out.append({**n, "metadata": meta})
    return out


def _pod_name(i: int, pod: OpenBPod) -> str:
    return f"a{i:06d}-{pod.name}"


def pod_objects(i: int, pod: OpenBPod) -> tuple[Obj, ...]:
    """The PodGroup and pod of the ``i``-th arrival (created at EPOCH + i s, priority class ``train``)."""
    created = (EPOCH + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
    affinity = {"nvidia.com/gpu.product": pod.models} if pod.models else None
    return job_objects(_pod_name(i, pod), NAMESPACE, QUEUE, 1, pod.gpus, f"{pod.cpu_milli}m", f"{pod.memory_mib}Mi",
                       C.TRAIN_PRIORITY_CLASS, 1, affinity, created=created)


def _allocate_only(config: SchedulerConfig | Mapping[str, Any] | None) -> SchedulerConfig:
    cfg = resolve_config(config)
    return replace(cfg, actions=("allocate",), actions_explicit=True)


def _now(n: int) -> datetime:
    return EPOCH + timedelta(seconds=n + 1)


#: Where a pod went: its node and, per shared GPU it got, the arrival index of the first pod on that GPU
#: (so that placements of two runs compare although GPU group names differ).
Placed = tuple[str, tuple[int, ...]]


class _Groups:
    def __init__(self) -> None:
        self.first: dict[str, int] = {}

    def __call__(self, i: int, groups: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.first.setdefault(g, i) for g in groups)


def one_cycle_binds(nodes: Sequence[Obj], arrivals: Sequence[OpenBPod],
                    config: SchedulerConfig | Mapping[str, Any] | None = None) -> dict[int, Placed]:
    """Arrival index -> placement of the placed pods, all arrivals pending in one allocate cycle."""
    objects: list[Obj] = [*nodes, *queue_objects([QUEUE])]
    for i, pod in enumerate(arrivals):
        objects.extend(pod_objects(i, pod))
    result = schedule(objects, _allocate_only(config), _now(len(arrivals)))
    _check(result)
    index = {f"{NAMESPACE}/{_pod_name(i, p)}-0": i for i, p in enumerate(arrivals)}
    groups = _Groups()
    placed = sorted(((index[b.pod], b) for b in result.binds), key=lambda ib: ib[0])
    return {i: (b.node, groups(i, b.gpu_groups)) for i, b in placed}


def sequential_binds(nodes: Sequence[Obj], arrivals: Sequence[OpenBPod],
                     config: SchedulerConfig | Mapping[str, Any] | None = None) -> dict[int, Placed]:
    """The same, literally: one allocate cycle per arriving pod, placed pods Running where they were bound
    (with their GPU group), a pod that does not fit dropped. Slow; for checking :func:`one_cycle_binds`."""
    cfg = _allocate_only(config)
    running: list[Obj] = []
    placed: dict[int, Placed] = {}
    groups = _Groups()
    for i, pod in enumerate(arrivals):
        objs = pod_objects(i, pod)
        result = schedule([*nodes, *queue_objects([QUEUE]), *running, *objs], cfg, _now(i))
        _check(result)
        if not result.binds:
            continue
        (bind,) = result.binds
        placed[i] = (bind.node, groups(i, bind.gpu_groups))
        group, p = objs
        labels = {**p["metadata"]["labels"], **gpu_group_labels(bind.gpu_groups)} if bind.gpu_groups else \
            dict(p["metadata"]["labels"])
        running.append(group)
        running.append({**p, "metadata": {**p["metadata"], "labels": labels},
                        "spec": {**p["spec"], "nodeName": bind.node}, "status": {"phase": "Running"}})
    return placed


def _check(result: CycleResult) -> None:
    if result.errors:
        raise ValueError("the OpenB objects have errors: " + "; ".join(str(e) for e in result.errors[:5]))


# ------------------------------------------------------------------------------------------ the experiment


def run_seed(nodes: Sequence[Obj], pods: Sequence[OpenBPod], seed: int,
             config: SchedulerConfig | Mapping[str, Any] | None = None, *,
             inflation: float = INFLATION, read_at: float = READ_AT,
             points: Sequence[int] = CURVE_POINTS) -> SeedResult:
    """One seed: the curve over ``points`` (the pods arriving until the last point is passed by half a percent
    placed in one cycle), the figure at ``read_at``, and the counts of the pods up to ``read_at``."""
    t0 = time.perf_counter()
    capacity = sum(int(n["status"]["allocatable"].get(C.GPU_RESOURCE, 0)) for n in nodes) * 1000
    order = arrival_order(pods, capacity, seed, inflation=inflation)
    last = max([*points, round(read_at * 100)]) / 100 + 0.005
    arrivals = arrived_prefix(order, capacity, read_at=last)
    placed = one_cycle_binds(ranked_nodes(nodes, seed), arrivals, config)
    arrived, allocated = samples(arrivals, placed, capacity)
    shape = curve(arrived, allocated, sorted({*points, round(read_at * 100)}))
    counted = len(arrived_prefix(arrivals, capacity, read_at=read_at))
    requested = sum(p.gpu_milli for p in arrivals[:counted])
    got = sum(arrivals[i].gpu_milli for i in placed if i < counted)
    placed_n = sum(1 for i in placed if i < counted)
    gpu_dropped = sum(1 for i, p in enumerate(arrivals[:counted]) if p.gpu_milli and i not in placed)
    return SeedResult(seed=seed, ratio=shape[round(read_at * 100)], arrived=counted, placed=placed_n,
                      dropped=counted - placed_n, requested_milli=requested, allocated_milli=got,
                      gpu_pods_dropped=gpu_dropped, wall_seconds=time.perf_counter() - t0,
                      curve={k: shape[k] for k in points})


def run_openb_experiment(
    pod_csv: str | Path,
    node_csv: str | Path,
    config: Mapping[str, Any] | None = None,
    seeds: Iterable[int] = SEEDS,
    *,
    inflation: float = INFLATION,
    read_at: float = READ_AT,
) -> OpenBResult:
    """The OpenB placement experiment (module docstring) for the placement policy of ``config`` (a KAI
    scheduler configuration mapping; None: KAI's defaults, GPU binpack; :func:`placement_config` builds
    others): per seed the GPU allocation ratio at the 100 % point, and their mean."""
    t0 = time.perf_counter()
    nodes = openb_nodes(node_csv, gpu_only=True)
    pods = read_openb_pods(pod_csv)
    cfg = _allocate_only(config)  # validate once, before the seeds
    results = tuple(run_seed(nodes, pods, seed, cfg, inflation=inflation, read_at=read_at) for seed in seeds)
    gpus = sum(int(n["status"]["allocatable"].get(C.GPU_RESOURCE, 0)) for n in nodes)
    return OpenBResult(str(pod_csv), str(node_csv), len(nodes), gpus, config, results, time.perf_counter() - t0)


__all__ = ["CURVE_POINTS", "OpenBResult", "SeedResult", "arrival_order", "arrived_prefix", "curve", "format_result",
           "node_tie_order", "one_cycle_binds", "placement_config", "ranked_nodes", "run_openb_experiment",
           "run_seed", "samples", "sequential_binds"]
