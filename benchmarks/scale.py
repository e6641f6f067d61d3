"""Issue 9's scale shapes: one busy 5,000-node cluster, scheduled three ways.

The cluster (:func:`scale_cluster`, seeded: every run builds the same objects):

* **nodes**: 5,000 x {8 ``nvidia.com/gpu``, 128 cores, 1 TiB, 110 pods} (40,000 GPUs);
* **queues**: 100 leaf queues in a two-level tree (10 parents ``dept-0`` ... ``dept-9``, 10 leaves each,
  ``dept-3-team-7``); the GPU quotas sum to the cluster's GPUs (parents' shares of the cluster and leaves'
  shares of their parent drawn from U(0.5, 1.5) and rounded to integers by largest remainder), over-quota
  weights drawn from {1, 2, 3, 4}; every limit -1, CPU and memory quota -1;
* **running** (about half of the GPUs, in the same queues, each job's queue drawn in proportion to the
  queues' quotas): jobs drawn like the pending ones (below) until they hold 50 % of the GPU devices, bound
  to nodes (``spec.nodeName``, phase ``Running``) largest pods first, each on a random node with room;
  fractional running pods share devices named by the ``runai-gpu-group`` label (``<node>-gpu<k>``);
* **pending**: 50,000 pods: 70 % in single-pod jobs (PodGroup minMember 1) — 30 % of those ask a GPU
  fraction (annotation ``gpu-fraction``, drawn from the OpenB frequency table ``OPENB_FRACTIONS`` as the
  ``fractional`` scenario draws them), the others 1, 2, 4 or 8 whole GPUs (weights 45/20/20/15) — and
  30 % in gangs of 4-64 pods (minMember = pods; every pod of a gang asks the same 1, 2, 4 or 8 GPUs,
  weights 30/20/20/30); the jobs shuffled, each in a leaf queue drawn uniformly, PodGroups created one
  second apart in that order. Every pod asks 8 cores and 64 GiB per GPU (a fraction f: f x 8 cores, f x 64
  GiB), so GPUs always run out first. Priority class ``train`` throughout.

Shapes (``python -m benchmarks --scenario SHAPE``):

================ ==========================================================================================
``scale``        one allocate cycle: ``kaisched.schedule(objects, {"actions": "allocate"})``; target at least
                 10,000 pods placed (bound) per second of cycle time
``scale-full``   one full cycle, KAI's five default actions: ``kaisched.schedule(objects)``; target < 5 s
                 (both also timed as a cycle alone, on objects parsed and prepared beforehand: snapshot to result;
                 the targets are judged on that cycle time)
``scale-steady`` the next cycle of a cluster where nothing changed since the last one: the objects are parsed
                 and prepared once (``kaisched.cluster.schedule.prepare``); cycle 1 (the five default actions,
                 ``run_prepared_cycle`` with a ``CycleMemo`` as ``kaisched run`` keeps one); its decisions
                 applied — binds as the simulator's engine applies them (a new Pod object per bound pod with
                 ``nodeName``, phase ``Running`` and its GPU-group labels), evicted pods terminating
                 (``deletionTimestamp``), the PodGroups' lastStartTimestamp / staleTimestamp annotations as
                 reported; cycle 2 on those objects one second later; the timed cycle on the same objects as
                 cycle 2, a second later (nothing changed since: it must decide what cycle 2 decided);
                 target < 0.5 s
================ ==========================================================================================

Smoke sizes (``--smoke``): 50 nodes, 4 x 3 queues, 500 pending pods, a few seconds in all.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final

import kaisched
from benchmarks import allocate as alloc
from benchmarks.clusters import (
    FRACTION_SEED,
    GPUS_PER_NODE,
    NAMESPACE,
    NODE_MAX_PODS,
    OPENB_FRACTIONS,
    PRIORITY_CLASS,
    SCHEDULER_NAME,
    Obj,
    node,
    node_names,
    pod_group,
    queue,
)
from kaisched.actions.batched import one_at_a_time
from kaisched.cluster import schedule as one_cycle
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import Placement
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects
from kaisched.kube.metrics import CycleTimings, timed_cycle
from kaisched.model.snapshot import forget_cached_facts
from kaisched.sim.engine import annotated_pod_group, bound_pod
from kaisched.sim.scenario import split_quota

SHAPES: Final = ("scale", "scale-full", "scale-steady")
#: The configuration each shape's timed cycle runs (None: KAI's default action list).
CONFIGS: Final[Mapping[str, Mapping[str, Any] | None]] = {
    "scale": {"actions": "allocate"}, "scale-full": None, "scale-steady": None,
}
ACTIONS: Final[Mapping[str, str]] = {"scale": "allocate", "scale-full": "default", "scale-steady": "default"}
#: Issue 9's targets: pods placed per second (``scale``), seconds per cycle (the others).
MIN_PLACED_PER_S: Final = 10_000.0
#: Issue 28's target for batched placement: pods placed per second of the allocate action (``scale``).
MIN_ALLOCATE_PLACED_PER_S: Final = 50_000.0
TARGET_S: Final[Mapping[str, float]] = {"scale-full": 5.0, "scale-steady": 0.5}
#: Seed of every draw (queues, jobs, placement of the running pods); fractions use the allocate suite's.
SEED: Final = 20261209
#: ``scale-steady``'s cycles run this long apart (KAI's default schedule period).
STEADY_PERIOD: Final = timedelta(seconds=1)
#: Whole GPUs of a single-pod job and of each pod of a gang: (GPUs, weight).
SINGLE_GPUS: Final = ((1, 45), (2, 20), (4, 20), (8, 15))
GANG_GPUS: Final = ((1, 30), (2, 20), (4, 20), (8, 30))
SINGLE_POD_SHARE: Final = 0.7  # of the pending pods
FRACTIONAL_SHARE: Final = 0.3  # of the single-pod jobs
GANG_SIZES: Final = (4, 64)
RUNNING_SHARE: Final = 0.5  # of the GPU devices
CPU_PER_GPU: Final = 8  # cores
MEMORY_PER_GPU_GIB: Final = 64
#: Timed cycles per shape with ``--smoke`` (CI checks the outcome; the traced cycle is skipped there too).
SMOKE_REPEAT: Final = 2
#: tracemalloc slows a cycle down several times: the traced cycle is skipped when it would exceed the budget.
TRACE_SLOWDOWN: Final = 10.0
FRACTION_EPS: Final = 1e-9


@dataclass(frozen=True, slots=True)
class ScaleSize:
    nodes: int
    parents: int
    leaves_per_parent: int
    pending_pods: int


FULL_SIZE: Final = ScaleSize(nodes=5000, parents=10, leaves_per_parent=10, pending_pods=50_000)
SMOKE_SIZE: Final = ScaleSize(nodes=50, parents=4, leaves_per_parent=3, pending_pods=500)


# ----------------------------------------------------------------------------------------- objects


def _pod(name: str, group: str, gpus: int, fraction: float | None, node_name: str | None = None,
         gpu_group: str | None = None) -> Obj:
    """A pod of ``group`` asking ``gpus`` whole GPUs or, with ``fraction``, that share of one GPU; Running on
    ``node_name`` when given (``gpu_group``: the shared device it runs on)."""
    annotations = {"pod-group-name": group}
    if fraction is not None:
        annotations[C.GPU_FRACTION_ANNOTATION] = f"{fraction:g}"
        requests: dict[str, str] = {"cpu": f"{round(fraction * CPU_PER_GPU * 1000)}m",
                                    "memory": f"{round(fraction * MEMORY_PER_GPU_GIB * 1024)}Mi"}
        resources: Obj = {"requests": requests}
    else:
        requests = {"cpu": str(CPU_PER_GPU * gpus), "memory": f"{MEMORY_PER_GPU_GIB * gpus}Gi",
                    "nvidia.com/gpu": str(gpus)}
        resources = {"requests": requests, "limits": {"nvidia.com/gpu": str(gpus)}}
    metadata: Obj = {"name": name, "namespace": NAMESPACE, "annotations": annotations}
    spec: Obj = {"schedulerName": SCHEDULER_NAME,
                 "containers": [{"name": "main", "image": "trainer:latest", "resources": resources}]}
    status: Obj = {"phase": "Pending"}
    if node_name is not None:
        spec["nodeName"] = node_name
        status = {"phase": "Running"}
        if gpu_group is not None:
            metadata["labels"] = {C.GPU_GROUP_LABEL: gpu_group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _split(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into integers that sum to it (largest remainder)."""
    return split_quota(total, weights)


def _queues(size: ScaleSize, total_gpus: int, rng: random.Random) -> tuple[list[Obj], list[str], list[int]]:
    """The two-level queue tree; returns the objects, the leaf names and the leaves' GPU quotas."""
    objs: list[Obj] = []
    leaves: list[str] = []
    quotas: list[int] = []
    parent_quotas = _split(total_gpus, [rng.uniform(0.5, 1.5) for _ in range(size.parents)])
    for p, parent_quota in enumerate(parent_quotas):
        parent = f"dept-{p}"
        objs.append(queue(parent, None, parent_quota, rng.choice((1, 2, 3, 4))))
        for leaf, leaf_quota in enumerate(_split(parent_quota,
                                                 [rng.uniform(0.5, 1.5) for _ in range(size.leaves_per_parent)])):
            name = f"{parent}-team-{leaf}"
            objs.append(queue(name, parent, leaf_quota, rng.choice((1, 2, 3, 4))))
            leaves.append(name)
            quotas.append(leaf_quota)
    return objs, leaves, quotas


@dataclass(frozen=True, slots=True)
class _Job:
    pods: int
    gpus: int  # per pod; 0 for a fraction
    fraction: float | None


class _JobDraws:
    """Jobs drawn like issue 9 says: single-pod jobs (whole GPUs or a fraction) and gangs of 4-64 pods."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.fractions = random.Random(FRACTION_SEED)
        self.values = [f for f, _ in OPENB_FRACTIONS]
        self.weights = [n for _, n in OPENB_FRACTIONS]

    def _gpus(self, table: tuple[tuple[int, int], ...]) -> int:
        return self.rng.choices([g for g, _ in table], [w for _, w in table])[0]

    def single(self) -> _Job:
        if self.rng.random() < FRACTIONAL_SHARE:
            return _Job(1, 0, self.fractions.choices(self.values, self.weights)[0])
        return _Job(1, self._gpus(SINGLE_GPUS), None)

    def gang(self, remaining: int) -> _Job:
        """A gang of at most ``remaining`` pods that never leaves 1-3 pods over (``remaining`` >= 4)."""
        low, high = GANG_SIZES
        size = remaining if remaining <= high else self.rng.randint(low, min(high, remaining - low))
        return _Job(size, self._gpus(GANG_GPUS), None)

    def pending(self, pods: int) -> list[_Job]:
        gang_pods = round(pods * (1 - SINGLE_POD_SHARE))
        gang_pods = gang_pods if gang_pods >= GANG_SIZES[0] else 0
        jobs = [self.single() for _ in range(pods - gang_pods)]
        while gang_pods:
            jobs.append(self.gang(gang_pods))
            gang_pods -= jobs[-1].pods
        self.rng.shuffle(jobs)
        return jobs


class _Placer:
    """Binds the running pods: each on a random node with room (a few random tries, then the next node
    with room); fractions on a shared device of that node with room, or on a new one."""

    def __init__(self, names: list[str], rng: random.Random) -> None:
        self.names = names
        self.rng = rng
        self.free = [GPUS_PER_NODE] * len(names)
        self.pods = [0] * len(names)
        self.shared: list[list[list[float | str]]] = [[] for _ in names]  # node -> [[used, group name]]

    def _fits(self, n: int, gpus: int, fraction: float | None) -> bool:
        if self.pods[n] + 2 > NODE_MAX_PODS:  # the pod and, perhaps, a reservation pod of a new device
            return False
        if fraction is None:
            return self.free[n] >= gpus
        return self.free[n] >= 1 or any(float(u) + fraction <= 1 + FRACTION_EPS for u, _ in self.shared[n])

    def place(self, gpus: int, fraction: float | None) -> tuple[str, str | None]:
        count = len(self.names)
        n = self.rng.randrange(count)
        for _ in range(8):
            if self._fits(n, gpus, fraction):
                break
            n = self.rng.randrange(count)
        else:
            start = n
            while not self._fits(n, gpus, fraction):
                n = (n + 1) % count
                if n == start:
                    raise ValueError("the running pods do not fit on the cluster")
        self.pods[n] += 1
        if fraction is None:
            self.free[n] -= gpus
            return self.names[n], None
        for device in self.shared[n]:
            if float(device[0]) + fraction <= 1 + FRACTION_EPS:
                device[0] = float(device[0]) + fraction
                return self.names[n], str(device[1])
        self.free[n] -= 1
        self.pods[n] += 1  # KAI's reservation pod of the new shared device
        group = f"{self.names[n]}-gpu{len(self.shared[n])}"
        self.shared[n].append([fraction, group])
        return self.names[n], group


@dataclass(frozen=True, slots=True)
class ScaleCluster:
    description: str
    objects: list[Obj]
    queues: int
    running_devices: int


def _created(seconds_before: int) -> str:
    return (alloc.NOW - timedelta(seconds=seconds_before)).strftime("%Y-%m-%dT%H:%M:%SZ")


def scale_cluster(size: ScaleSize) -> ScaleCluster:
    """The cluster of every scale shape (module docstring)."""
    rng = random.Random(SEED)
    names = node_names(size.nodes)
    total = size.nodes * GPUS_PER_NODE
    objs: list[Obj] = [node(n) for n in names]
    queue_objs, leaves, quotas = _queues(size, total, rng)
    objs += queue_objs
    draws = _JobDraws(rng)

    # running jobs: drawn like the pending ones (70 % of the pods in single-pod jobs) until they hold half of
    # the GPU devices; 1-GPU single-pod jobs make up the last few GPUs
    target = round(total * RUNNING_SHARE)
    running: list[tuple[str, _Job]] = []
    devices = 0.0
    for job in draws.pending(target):
        if devices >= target:
            break
        need = job.pods * (job.gpus if job.fraction is None else job.fraction)
        if devices + need > target:
            continue
        running.append((rng.choices(leaves, quotas)[0], job))
        devices += need
    while devices + 1 <= target:
        running.append((rng.choices(leaves, quotas)[0], _Job(1, 1, None)))
        devices += 1
    placer = _Placer(names, rng)
    slots = sorted(((i, p) for i, (_, job) in enumerate(running) for p in range(job.pods)),
                   key=lambda s: -(running[s[0]][1].gpus or 0))
    where: dict[tuple[int, int], tuple[str, str | None]] = {}
    for i, p in slots:
        job = running[i][1]
        where[i, p] = placer.place(job.gpus, job.fraction)
    running_pods = 0
    for i, (leaf, job) in enumerate(running):
        group = f"run-{i:06d}"
        objs.append(pod_group(group, leaf, job.pods, PRIORITY_CLASS, _created(86_400 + len(running) - i)))
        for p in range(job.pods):
            node_name, gpu_group = where[i, p]
            objs.append(_pod(f"{group}-{p}", group, job.gpus, job.fraction, node_name, gpu_group))
            running_pods += 1
    used_devices = total - sum(placer.free)

    # pending jobs
    pending = draws.pending(size.pending_pods)
    whole = sum(1 for j in pending if j.pods == 1 and j.fraction is None)
    fractional = sum(1 for j in pending if j.fraction is not None)
    gangs = sum(1 for j in pending if j.pods > 1)
    asked = 0.0
    for i, job in enumerate(pending):
        group = f"job-{i:06d}"
        objs.append(pod_group(group, rng.choice(leaves), job.pods, PRIORITY_CLASS, _created(len(pending) - i)))
        objs.extend(_pod(f"{group}-{p}", group, job.gpus, job.fraction) for p in range(job.pods))
        asked += job.pods * (job.gpus if job.fraction is None else job.fraction)
    description = (f"{size.nodes:,} nodes x {GPUS_PER_NODE} GPUs, {len(leaves)} leaf queues under {size.parents}; "
                   f"{running_pods:,} running pods ({len(running):,} jobs) on {used_devices:,} GPUs; "
                   f"{size.pending_pods:,} pending pods: {whole:,} whole-GPU and {fractional:,} "
                   f"fractional single-pod jobs, {gangs:,} gangs ({asked:,.0f} GPUs asked of "
                   f"{total - used_devices:,} free)")
    return ScaleCluster(description, objs, len(leaves), used_devices)


# ---------------------------------------------------------------------------------- steady state


def apply_result(prepared: ParsedObjects, result: kaisched.CycleResult, now: datetime) -> ParsedObjects:
    """The objects after ``result``, as the API server would hold them a moment later: a new Pod object per
    bound pod (as the simulator's engine binds it: its node, phase ``Running``, its GPU-group labels) and
    per evicted pod (terminating: ``deletionTimestamp`` ``now``, still on its node — its resources are
    releasing), the PodGroups' lastStartTimestamp / staleTimestamp annotations as the cycle reported them
    (the same PodGroup object when they are already there); pipelined placements are not written anywhere
    (as in KAI). Every other object is the same object as before."""
    pods = list(prepared.pods)
    index = {f"{p.meta.namespace}/{p.meta.name}": i for i, p in enumerate(pods)}
    for b in result.binds:
        i = index.get(b.pod)
        if i is not None:
            pods[i] = bound_pod(pods[i], b)
    for e in result.evictions:
        i = index.get(e.pod)
        if i is not None:
            pod = pods[i]
            pods[i] = replace(pod, meta=replace(pod.meta, deletion_timestamp=now))
    groups = list(prepared.pod_groups)
    group_index = {f"{g.meta.namespace}/{g.meta.name}": i for i, g in enumerate(groups)}
    for status in result.pod_groups:
        j = group_index.get(status.name)
        if j is not None:
            groups[j] = annotated_pod_group(groups[j], status)
    # the engine's cycle objects: no workloads (expanded at arrival), no errors (reported at arrival)
    return ParsedObjects(nodes=prepared.nodes, pods=pods, queues=prepared.queues, pod_groups=groups,
                         priority_classes=prepared.priority_classes, topologies=prepared.topologies)


@dataclass(frozen=True, slots=True)
class SettleCycle:
    """One of the cycles before ``scale-steady``'s timed one."""

    seconds: float
    binds: int
    pipelined: int
    evictions: int


@dataclass(slots=True)
class SteadyState:
    """``scale-steady``: the objects prepared once; cycle 1 on them; its decisions applied
    (:func:`apply_result`: its bound pods run, its evicted pods are terminating, its PodGroup timestamps
    written); cycle 2 on those objects one period later. The timed cycle is the next one: the very same
    objects as cycle 2's, one more period later — nothing changed since (cycle 2's own decisions, pipelined
    placements waiting for terminating pods and the evictions it chose, are still in flight: this cluster
    keeps reclaiming for a while). Every cycle runs with one :class:`kaisched.cluster.memo.CycleMemo`, as
    ``kaisched run`` does; a deterministic scheduler must decide in the timed cycle exactly what it decided
    in cycle 2.

    Like the simulator's run (``gc.collect(); gc.freeze()`` before the first cycle), the objects that exist
    before cycle 1 are frozen out of the cyclic collector's reach; :meth:`close` unfreezes them."""

    config: SchedulerConfig
    parsed: ParsedObjects  # the last cycle's objects
    now: datetime  # the last cycle's time
    memo: CycleMemo
    first: kaisched.CycleResult  # cycle 1's outcome
    previous: kaisched.CycleResult  # the last cycle's outcome
    prepare_s: float
    cycles: list[SettleCycle]
    applied: list[tuple[list[Placement], list[str]]]  # each applied cycle's binds and evicted pods

    @classmethod
    def start(cls, objects: list[Obj], config: Mapping[str, Any] | None = None) -> SteadyState:
        cfg = resolve_config(config)
        t0 = time.perf_counter()
        parsed = prepare(parse_objects(objects), cfg, alloc.NOW)
        prepare_s = time.perf_counter() - t0
        one_cycle.freeze_long_lived()
        memo = CycleMemo()
        cycles: list[SettleCycle] = []

        def run(objs: ParsedObjects, now: datetime) -> kaisched.CycleResult:
            t0 = time.perf_counter()
            with no_cyclic_gc():
                result = run_prepared_cycle(objs, cfg, now, memo)
            cycles.append(SettleCycle(time.perf_counter() - t0, len(result.binds), len(result.pipelined),
                                      len(result.evictions)))
            return result

        first = run(parsed, alloc.NOW)
        parsed = apply_result(parsed, first, alloc.NOW)
        now = alloc.NOW + STEADY_PERIOD
        previous = run(parsed, now)
        applied = [(list(first.binds), [e.pod for e in first.evictions])]
        return cls(cfg, parsed, now, memo, first, previous, prepare_s, cycles, applied)

    @property
    def answered(self) -> bool:
        """Cycle 2 can answer the next cycle on its objects (see ``kaisched.cluster.memo``)."""
        return self.memo.holds

    def census(self, census: Census) -> Census:
        """``census`` (of the generated objects) as the last cycle found it: the applied cycles' pods bound and
        their evicted pods terminating."""
        for binds, evictions in self.applied:
            census = census.after(binds, evictions)
        return census

    def close(self) -> None:
        one_cycle.unfreeze_long_lived()

    def next_objects(self) -> ParsedObjects:
        """The objects of the next cycle: new lists (as the simulator builds them) of the same objects."""
        return self.parsed.relisted()

    def cycle(self, parsed: ParsedObjects) -> kaisched.CycleResult:
        """The timed cycle: one period after the last one, on ``parsed`` (from :meth:`next_objects`)."""
        with no_cyclic_gc():
            return run_prepared_cycle(parsed, self.config, self.now + STEADY_PERIOD, self.memo)



# ----------------------------------------------------------------------------------------- census


def _millicores(quantity: str) -> float:
    return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000


@dataclass(frozen=True, slots=True)
class PodRec:
    group: str  # "ns/group"
    gpus: int  # whole GPUs (0 for a fraction)
    fraction: float | None
    cpu_m: float
    node: str | None = None
    gpu_group: str | None = None  # the shared device of a running fractional pod


@dataclass(slots=True)
class Census:
    """What the checks need to know about the cluster, read off the generated objects."""

    node_gpus: dict[str, int] = field(default_factory=dict)
    node_pods: dict[str, int] = field(default_factory=dict)
    node_cpu_m: dict[str, float] = field(default_factory=dict)
    pods: dict[str, PodRec] = field(default_factory=dict)  # "ns/pod"
    group_min: dict[str, int] = field(default_factory=dict)
    group_queue: dict[str, str] = field(default_factory=dict)
    terminating: frozenset[str] = frozenset()  # running pods evicted by an earlier cycle (releasing)

    @classmethod
    def of(cls, objects: Iterable[Obj]) -> Census:
        c = cls()
        for obj in objects:
            kind, meta = obj["kind"], obj["metadata"]
            if kind == "Node":
                allocatable = obj["status"]["allocatable"]
                c.node_gpus[meta["name"]] = int(allocatable["nvidia.com/gpu"])
                c.node_pods[meta["name"]] = int(allocatable["pods"])
                c.node_cpu_m[meta["name"]] = _millicores(allocatable["cpu"])
            elif kind == "PodGroup":
                key = f"{meta['namespace']}/{meta['name']}"
                c.group_min[key] = int(obj["spec"]["minMember"])
                c.group_queue[key] = obj["spec"]["queue"]
            elif kind == "Pod":
                requests = obj["spec"]["containers"][0]["resources"]["requests"]
                fraction = meta["annotations"].get(C.GPU_FRACTION_ANNOTATION)
                c.pods[f"{meta['namespace']}/{meta['name']}"] = PodRec(
                    f"{meta['namespace']}/{meta['annotations']['pod-group-name']}",
                    int(requests.get("nvidia.com/gpu", 0)), None if fraction is None else float(fraction),
                    _millicores(requests["cpu"]), obj["spec"].get("nodeName"),
                    meta.get("labels", {}).get(C.GPU_GROUP_LABEL))
        return c

    def after(self, binds: Iterable[Placement], terminating: Iterable[str] = ()) -> Census:
        """The census once ``binds`` are applied (the bound pods run where the binds say) and the pods
        ``terminating`` are evicted (still on their nodes, their resources releasing)."""
        pods = dict(self.pods)
        for b in binds:
            rec = pods.get(b.pod)
            if rec is not None:
                pods[b.pod] = replace(rec, node=b.node, gpu_group=b.gpu_groups[0] if b.gpu_groups else None)
        return Census(self.node_gpus, self.node_pods, self.node_cpu_m, pods, self.group_min, self.group_queue,
                      self.terminating | {p for p in terminating if p in pods})

    @property
    def running(self) -> dict[str, PodRec]:
        return {k: p for k, p in self.pods.items() if p.node}

    @property
    def pending(self) -> dict[str, PodRec]:
        return {k: p for k, p in self.pods.items() if not p.node}

    def devices(self) -> int:
        """GPU devices held by the running pods (whole GPUs plus distinct shared devices)."""
        usage = _Usage.of((p, p.node, (p.gpu_group,) if p.gpu_group else ()) for p in self.running.values()
                          if p.node)
        return sum(usage.devices.values())


@dataclass(slots=True)
class _Usage:
    devices: Counter[str] = field(default_factory=Counter)  # node -> whole GPUs + distinct shared devices
    pods: Counter[str] = field(default_factory=Counter)  # node -> pods (+1 reservation pod per shared device)
    cpu_m: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    shares: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, device) -> fractions

    @classmethod
    def of(cls, placed: Iterable[tuple[PodRec, str, tuple[str, ...]]]) -> _Usage:
        u = cls()
        for rec, node_name, groups in placed:
            u.pods[node_name] += 1
            u.cpu_m[node_name] += rec.cpu_m
            if rec.fraction is None:
                u.devices[node_name] += rec.gpus
            for g in groups[:1]:
                key = (node_name, g)
                if key not in u.shares:
                    u.shares[key] = 0.0
                    u.devices[node_name] += 1
                    u.pods[node_name] += 1
                u.shares[key] += rec.fraction or 0.0
        return u

    def over(self, census: Census) -> list[str]:
        out = [f"{n}: {d} GPUs > {census.node_gpus[n]}" for n, d in self.devices.items() if d > census.node_gpus[n]]
        out += [f"{n}: {p} pods > {census.node_pods[n]}" for n, p in self.pods.items() if p > census.node_pods[n]]
        out += [f"{n}: {c:g}m CPU > {census.node_cpu_m[n]:g}m" for n, c in self.cpu_m.items()
                if c > census.node_cpu_m[n]]
        out += [f"{n} device {g}: fractions sum to {f:.4f}" for (n, g), f in self.shares.items()
                if f > 1 + FRACTION_EPS]
        return out


# ----------------------------------------------------------------------------------------- checks


def _first(items: list[str], limit: int = 3) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def check(shape: str, census: Census, result: kaisched.CycleResult) -> list[str]:
    """Everything wrong with ``result`` as the outcome of a cycle on the cluster ``census`` describes (for
    ``scale-steady``: the census as the cycle before it found it); empty when it makes sense."""
    failures: list[str] = []
    if result.errors:
        failures.append(f"{len(result.errors)} object errors, e.g. {result.errors[0].to_dict()}")
    running, pending = census.running, census.pending
    bad: list[str] = []

    # evictions: running pods, named by a PodGroup. KAI's actions may take a pod pipelined earlier in the cycle
    # again (KAI-faithful, see tests/property/test_eviction_invariants.py: PREEMPTOR_BECOMES_VICTIM,
    # MOVED_THEN_RECLAIMED), so a pod may be evicted more than once, and a pending pod (pipelined, then taken)
    # may be listed as evicted
    evicted: dict[str, PodRec] = {}
    for e in result.evictions:
        rec = running.get(e.pod)
        if rec is not None:
            evicted[e.pod] = rec
        elif e.pod not in pending:
            bad.append(f"evicted {e.pod} is not a pod of the cluster")
        if e.preemptor and e.preemptor not in census.group_min:
            bad.append(f"{e.pod} evicted for {e.preemptor!r}, which is no PodGroup")

    # placements: binds of pending pods, pipelined pending pods (or, moved by consolidation, evicted ones);
    # a fraction names exactly one shared device, a whole-GPU pod none
    placed: dict[str, tuple[PodRec, str, tuple[str, ...], str]] = {}
    for kind, placements in (("bind", result.binds), ("pipelined", result.pipelined)):
        for p in placements:
            rec = pending.get(p.pod)
            if rec is None and kind == "pipelined":
                rec = evicted.get(p.pod)
            if rec is None:
                bad.append(f"{kind} {p.pod} is not a pending (or evicted) pod")
            elif p.node not in census.node_gpus:
                bad.append(f"{kind} {p.pod} onto unknown node {p.node}")
            elif p.pod in placed:
                bad.append(f"{p.pod} placed twice")
            elif (rec.fraction is None) != (not p.gpu_groups) or len(p.gpu_groups) > 1:
                bad.append(f"{kind} {p.pod} ({rec.fraction or rec.gpus} GPU) with gpuGroups {list(p.gpu_groups)}")
            else:
                placed[p.pod] = (rec, p.node, p.gpu_groups, kind)
    if bad:
        failures.append(f"{len(bad)} bad evictions or placements: {_first(bad)}")

    # no node over-committed: the binds onto what is idle now; after the evictions, binds and pipelined
    # pods together
    now_running = [(r, r.node, (r.gpu_group,) if r.gpu_group else ()) for r in running.values() if r.node]
    binds = [(r, n, g) for r, n, g, kind in placed.values() if kind == "bind"]
    state = _Usage.of([*now_running, *binds])
    over = state.over(census)
    after = [(r, n, g) for k, (r, n, g) in zip(running, now_running, strict=True)
             if k not in evicted and k not in census.terminating]
    over += [f"after evictions: {o}" for o in
             _Usage.of([*after, *binds, *((r, n, g) for r, n, g, kind in placed.values() if kind == "pipelined")])
             .over(census)]
    if over:
        failures.append(f"{len(over)} node over-commitments: {_first(over)}")

    # gangs all-or-nothing: a pending PodGroup is placed whole (all its pods, at least minMember) or not at all
    group_pods = Counter(r.group for r in pending.values())
    placed_groups = Counter(r.group for k, (r, _, _, _) in placed.items() if k in pending)
    partial = [f"{g}: {n} of {group_pods[g]} pods (minMember {census.group_min[g]})"
               for g, n in placed_groups.items() if n != group_pods[g] or n < census.group_min[g]]
    if partial:
        failures.append(f"{len(partial)} PodGroups partly placed: {_first(partial)}")

    # statuses: every pending PodGroup reported; bound ones not Pending, unplaced ones Pending
    status = {g.name: g.status for g in result.pod_groups}
    missing = [g for g in group_pods if g not in status]
    if missing:
        failures.append(f"{len(missing)} pending PodGroups missing from the result: {_first(missing)}")
    wrong = [f"{g} placed but {status[g]}" for g in placed_groups if status.get(g) == "Pending"]
    wrong += [f"{g} unplaced but {status[g]}" for g in group_pods if g not in placed_groups and g in status
              and status[g] != "Pending"]
    if wrong:
        failures.append(f"{len(wrong)} PodGroup statuses disagree with the placements: {_first(wrong)}")

    if shape == "scale" and (result.pipelined or result.evictions):
        failures.append(f"allocate only, yet {len(result.pipelined)} pipelined and {len(result.evictions)} evicted")

    # work conservation (binds come from allocate, which tries every job; no queue limits): a 1-GPU single pod
    # is left unplaced only when no node has a whole GPU (and a pod slot and 8 cores) idle after the binds, a
    # fraction f only when, besides, no shared device has f left
    def roomy(n: str, cpu_m: float) -> bool:
        return (state.pods[n] + 2 <= census.node_pods[n] and state.cpu_m[n] + cpu_m <= census.node_cpu_m[n])

    idle = [n for n, gpus in census.node_gpus.items() if gpus - state.devices[n] >= 1 and roomy(n, 8000)]
    singles = [(r.fraction, k) for k, r in pending.items()
               if group_pods[r.group] == 1 and census.group_min[r.group] == 1 and r.group not in placed_groups
               and (r.gpus == 1 or r.fraction is not None)]
    if idle and singles:
        failures.append(f"{len(singles)} single pods of 1 GPU or less left unplaced while {len(idle)} nodes have an "
                        f"idle GPU, e.g. {singles[0][1]} and {idle[0]}")
    fractions = [(f, k) for f, k in singles if f is not None]
    if fractions and state.shares:
        smallest, pod_name = min(fractions)
        room, (n, g) = max((1 - f, key) for key, f in state.shares.items())
        if room >= smallest - FRACTION_EPS and roomy(n, 0):
            failures.append(f"{len(fractions)} fractional pods left unplaced, e.g. {pod_name} (gpu-fraction "
                            f"{smallest:g}), while device {g} on {n} has {room:.2f} free")
    return failures


# ------------------------------------------------------------------------------------ measurement


@dataclass(slots=True)
class ScaleMeasurement:
    shape: str
    description: str
    smoke: bool
    actions: str
    nodes: int
    gpus: int
    queues: int
    # scale-steady: the cluster of the timed cycle (as the cycle before it found it)
    running_pods: int
    running_gpus: int  # devices held by the running pods (whole GPUs + shared devices)
    pending_pods: int
    pending_groups: int
    objects: int
    gen_s: float
    walls_s: list[float]
    binds: int
    pipelined: int
    evictions: int
    placed_groups: int  # pending PodGroups bound or pipelined
    traced_peak_mib: float | None
    rss_gen_mib: float
    rss_peak_mib: float
    failures: list[str]
    # scale-steady: parsing + preparing the objects once, cycle 1 and its outcome, then every cycle before the
    # timed one as (seconds, binds, pipelined, evicted), and whether the last could answer the timed one
    prepare_s: float | None = None
    first_s: float | None = None
    first_binds: int | None = None
    first_pipelined: int | None = None
    first_evictions: int | None = None
    settle: list[tuple[float, int, int, int]] | None = None
    settled: bool | None = None
    timed_out_s: float | None = None  # the worker was stopped after this many seconds
    suite: str = "scale"
    # scale, scale-full: the same cycle on objects parsed and prepared beforehand, as Kubernetes mode holds them
    # (parsed once per resourceVersion): snapshot to result (kaisched.kube.metrics.timed_cycle), once per
    # repetition; and the parts of the median one (open session incl. the snapshot, each action, close), in ms
    cycle_walls_s: list[float] = field(default_factory=list)
    cycle_parts_ms: dict[str, float] = field(default_factory=dict)
    compiled: bool = False  # the core ran compiled with mypyc (build/compiled)
    # scale: the same cycle on prepared objects with batched placement off (every task placed from a fresh evaluation
    # of every node, kaisched.actions.batched.BATCHING), once per repetition right after the batched one; the
    # allocate action's ms of each
    single_allocate_ms: list[float] = field(default_factory=list)
    allocate_ms: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float | None:
        """Median one-shot time: ``kaisched.schedule()`` on the manifests, parsing included (scale-steady: its
        timed cycle)."""
        return statistics.median(self.walls_s) if self.walls_s else None

    @property
    def cycle_s(self) -> float | None:
        """Median cycle time: snapshot to result on prepared objects (scale-steady: its timed cycle is one)."""
        if self.cycle_walls_s:
            return statistics.median(self.cycle_walls_s)
        return self.median_s if self.shape == "scale-steady" else None

    @property
    def placed_per_s(self) -> float | None:
        """Pods bound per second of (median) cycle time: issue 9's figure."""
        m = self.cycle_s
        return None if m is None else (self.binds / m if m > 0 else float("inf"))

    @property
    def allocate_placed_per_s(self) -> float | None:
        """Pods bound per second of the allocate action (median over the cycles on prepared objects): issue 28's
        figure for batched placement."""
        return _per_s(self.binds, self.allocate_ms)

    @property
    def single_allocate_placed_per_s(self) -> float | None:
        """The same with batched placement off (one task at a time, every node evaluated for each)."""
        return _per_s(self.binds, self.single_allocate_ms)

    @property
    def one_shot_placed_per_s(self) -> float | None:
        """Pods bound per second of the (median) one-shot call, parsing included."""
        m = self.median_s
        return None if m is None else (self.binds / m if m > 0 else float("inf"))

    @property
    def pods_per_s(self) -> float | None:
        """Pending pods per second of (median) cycle time, as the allocate suite counts them."""
        m = self.median_s
        return None if m is None else (self.pending_pods / m if m > 0 else float("inf"))

    @property
    def target(self) -> str:
        return f">= {MIN_PLACED_PER_S:,.0f} placed/s" if self.shape == "scale" else f"< {TARGET_S[self.shape]:g} s"

    @property
    def met(self) -> bool:
        """Judged on the cycle time, as issue 9 words its targets (the one-shot time is reported beside it)."""
        m = self.cycle_s
        if m is None:
            return False
        if self.shape == "scale":
            rate = self.placed_per_s
            return rate is not None and rate >= MIN_PLACED_PER_S
        return m < TARGET_S[self.shape]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median_s=self.median_s, cycle_s=self.cycle_s, placed_per_s=self.placed_per_s,
                 one_shot_placed_per_s=self.one_shot_placed_per_s, pods_per_s=self.pods_per_s, target=self.target,
                 met=self.met)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScaleMeasurement:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def timed_out(cls, shape: str, smoke: bool, seconds: float) -> ScaleMeasurement:
        m = _blank(shape, smoke)
        m.timed_out_s = seconds
        return m


def _per_s(count: int, walls_ms: list[float]) -> float | None:
    if not walls_ms:
        return None
    m = statistics.median(walls_ms)
    return count / (m / 1000.0) if m > 0 else float("inf")


def _size(smoke: bool) -> ScaleSize:
    return SMOKE_SIZE if smoke else FULL_SIZE


def generate(smoke: bool) -> tuple[ScaleCluster, float]:
    t0 = time.perf_counter()
    cluster = scale_cluster(_size(smoke))
    return cluster, time.perf_counter() - t0


def _blank(shape: str, smoke: bool, cluster: ScaleCluster | None = None, census: Census | None = None,
           gen_s: float = 0.0) -> ScaleMeasurement:
    cluster = cluster or generate(smoke)[0]
    census = census or Census.of(cluster.objects)
    pending = census.pending
    return ScaleMeasurement(
        shape=shape, description=cluster.description, smoke=smoke, actions=ACTIONS[shape],
        nodes=len(census.node_gpus), gpus=sum(census.node_gpus.values()), queues=cluster.queues,
        running_pods=len(census.pods) - len(pending), running_gpus=cluster.running_devices,
        pending_pods=len(pending), pending_groups=len({p.group for p in pending.values()}),
        objects=len(cluster.objects), gen_s=gen_s, walls_s=[], binds=0, pipelined=0, evictions=0, placed_groups=0,
        traced_peak_mib=None, rss_gen_mib=0.0, rss_peak_mib=0.0, failures=[])


def _outcome_key(result: kaisched.CycleResult) -> tuple[object, ...]:
    return (tuple((b.pod, b.node, b.gpu_groups) for b in result.binds),
            tuple((p.pod, p.node, p.gpu_groups) for p in result.pipelined),
            tuple((e.pod, e.preemptor) for e in result.evictions))


def _traced_mib(run: Callable[[], object]) -> float:
    gc.collect()
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / alloc.MIB


def measure(shape: str, *, smoke: bool = False, repeat: int = 5, budget_s: float = 120.0,
            trace_memory: bool = True, log: Callable[[str], None] | None = None) -> ScaleMeasurement:
    """Generate the cluster, time up to ``repeat`` cycles of ``shape`` (fewer once ``budget_s`` seconds are
    spent; at least one), check the outcome, and measure the memory of one more, traced, cycle when it would
    fit in the budget. ``log``: a callable given a line of progress."""
    def say(line: str) -> None:
        if log is not None:
            log(f"{shape}{' (smoke)' if smoke else ''}: {line}")

    cluster, gen_s = generate(smoke)
    census = Census.of(cluster.objects)
    say(f"{len(cluster.objects):,} objects generated in {gen_s:.1f} s")
    m = _blank(shape, smoke, cluster, census, gen_s)
    m.rss_gen_mib = alloc.max_rss_mib()
    m.compiled = kaisched.compiled()

    steady: SteadyState | None = None
    if shape == "scale-steady":
        steady = SteadyState.start(cluster.objects, CONFIGS[shape])
        first = steady.first
        m.prepare_s, m.first_s = steady.prepare_s, steady.cycles[0].seconds
        m.first_binds, m.first_pipelined = len(first.binds), len(first.pipelined)
        m.first_evictions = len(first.evictions)
        m.settle = [(c.seconds, c.binds, c.pipelined, c.evictions) for c in steady.cycles]
        m.settled = steady.answered
        say(f"objects prepared in {steady.prepare_s:.1f} s; "
            + ", ".join(f"cycle {i + 1} {c.seconds:.1f} s ({c.binds:,} binds, {c.pipelined:,} pipelined, "
                        f"{c.evictions:,} evicted)" for i, c in enumerate(steady.cycles)))
        m.failures += [f"cycle 1: {f}" for f in check("scale-full", census, first)]
        census = steady.census(census)
        # the timed cycle's cluster: as the cycle before it found it
        pending = census.pending
        m.running_pods, m.running_gpus = len(census.pods) - len(pending), census.devices()
        m.pending_pods, m.pending_groups = len(pending), len({p.group for p in pending.values()})

    def timed() -> tuple[kaisched.CycleResult, float]:
        if steady is not None:
            parsed = steady.next_objects()
            gc.collect()
            t0 = time.perf_counter()
            result = steady.cycle(parsed)
            return result, time.perf_counter() - t0
        gc.collect()
        t0 = time.perf_counter()
        result = kaisched.schedule(cluster.objects, CONFIGS[shape], alloc.NOW)
        return result, time.perf_counter() - t0

    def timed_prepared() -> tuple[kaisched.CycleResult, CycleTimings]:
        """The cycle alone: the objects parsed and prepared first (untimed), then snapshot to result."""
        config = resolve_config(CONFIGS[shape])
        forget_cached_facts()
        parsed = prepare(parse_objects(cluster.objects), config, alloc.NOW)
        gc.collect()
        with no_cyclic_gc():
            return timed_cycle(parsed, config, alloc.NOW)

    first_key: tuple[object, ...] | None = None
    result: kaisched.CycleResult | None = None
    parts: list[CycleTimings] = []
    for i in range(max(1, repeat)):
        result = None  # let the previous cycle's result go before the next one runs
        result, wall = timed()
        m.walls_s.append(wall)
        line = f"cycle {i + 1} of {repeat}: {wall:.3f} s, {len(result.binds):,} binds"
        key = _outcome_key(result)
        if first_key is None:
            first_key = key
        elif key != first_key and "outcome differs between repetitions of the same cycle" not in m.failures:
            m.failures.append("outcome differs between repetitions of the same cycle")
        if steady is None:
            result = None
            result, timings = timed_prepared()
            parts.append(timings)
            m.cycle_walls_s.append(timings.e2e_ms / 1000.0)
            line += f"; on prepared objects {timings.e2e_ms / 1000.0:.3f} s"
            message = "the cycle on prepared objects decided otherwise than kaisched.schedule()"
            if _outcome_key(result) != first_key and message not in m.failures:
                m.failures.append(message)
            if shape == "scale":
                m.allocate_ms.append(timings.actions_ms.get("allocate", 0.0))
                result = None
                with one_at_a_time():
                    result, single = timed_prepared()
                m.single_allocate_ms.append(single.actions_ms.get("allocate", 0.0))
                line += (f"; allocate {m.allocate_ms[-1]:,.0f} ms batched, {m.single_allocate_ms[-1]:,.0f} ms one at a "
                         "time")
                message = "one-at-a-time placement decided otherwise than batched placement"
                if _outcome_key(result) != first_key and message not in m.failures:
                    m.failures.append(message)
        say(line)
        if sum(m.walls_s) + sum(m.cycle_walls_s) >= budget_s:
            break
    assert result is not None
    if parts:
        median_run = sorted(parts, key=lambda t: t.e2e_ms)[len(parts) // 2]
        m.cycle_parts_ms = {"open": median_run.open_session_ms or 0.0, **median_run.actions_ms,
                            "close": median_run.close_session_ms or 0.0}
    m.rss_peak_mib = alloc.max_rss_mib()
    if steady is not None:
        steady.close()
    m.failures += check(shape, census, result)
    if steady is not None and _outcome_key(result) != _outcome_key(steady.previous):
        m.failures.append("the cycle decided otherwise than the cycle before it on the same objects")
    pending = census.pending
    m.binds, m.pipelined, m.evictions = len(result.binds), len(result.pipelined), len(result.evictions)
    m.placed_groups = len({pending[p.pod].group for p in [*result.binds, *result.pipelined] if p.pod in pending})
    result = None
    median = statistics.median(m.walls_s)
    if trace_memory and not smoke and median * TRACE_SLOWDOWN <= budget_s:
        m.traced_peak_mib = _traced_mib(timed)
    return m


def profile_cycle(shape: str, smoke: bool) -> tuple[ScaleCluster, Census, Callable[[], kaisched.CycleResult]]:
    """The cluster, the census the checks of the profiled cycle use, and a callable running that cycle (for
    ``scale-steady``: the timed cycle, everything before it already done)."""
    cluster, _ = generate(smoke)
    census = Census.of(cluster.objects)
    if shape != "scale-steady":
        return cluster, census, lambda: kaisched.schedule(cluster.objects, CONFIGS[shape], alloc.NOW)
    steady = SteadyState.start(cluster.objects, CONFIGS[shape])
    parsed = steady.next_objects()
    return cluster, steady.census(census), lambda: steady.cycle(parsed)


# -------------------------------------------------------------------------------------- reporting


COLUMNS: Final = ("shape", "actions", "nodes", "GPUs", "queues", "running", "pending", "one-shot s", "cycle s", "runs",
                  "binds",
                  "pipelined", "evicted", "placed PG", "placed/s", "pods/s", "traced MiB", "RSS MiB", "target",
                  "met", "check")


def table_rows(results: list[ScaleMeasurement]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for m in results:
        median, cycle, placed, rate = m.median_s, m.cycle_s, m.placed_per_s, m.pods_per_s
        rows.append((
            m.shape, m.actions, f"{m.nodes:,}", f"{m.gpus:,}", str(m.queues),
            f"{m.running_pods:,}", f"{m.pending_pods:,}",
            f"> {m.timed_out_s:g} (timeout)" if median is None else f"{median:.3f}",
            "-" if cycle is None else f"{cycle:.3f}", str(len(m.walls_s)), f"{m.binds:,}", f"{m.pipelined:,}",
            f"{m.evictions:,}",
            f"{m.placed_groups:,}/{m.pending_groups:,}",
            "-" if placed is None else f"{placed:,.0f}", "-" if rate is None else f"{rate:,.0f}",
            "-" if m.traced_peak_mib is None else f"{m.traced_peak_mib:.1f}",
            "-" if m.timed_out_s is not None else f"{m.rss_peak_mib:.1f}",
            "-" if m.smoke else m.target, "-" if m.smoke else ("yes" if m.met else "NO"),
            "-" if m.timed_out_s is not None else ("ok" if m.ok else "FAIL"),
        ))
    return rows


def format_report(results: list[ScaleMeasurement], repeat: int, markdown: bool = False) -> str:
    rows = [COLUMNS, *table_rows(results)]
    if markdown:
        head = "| " + " | ".join(COLUMNS) + " |"
        rule = "|" + "|".join("---" if i < 2 else "---:" for i in range(len(COLUMNS))) + "|"
        table = "\n".join([head, rule, *("| " + " | ".join(r) + " |" for r in rows[1:])])
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

        def line(r: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True)))

        table = "\n".join([line(rows[0]), "  ".join("-" * w for w in widths), *(line(r) for r in rows[1:])])
    lines = [table, ""]
    lines.append(f"one-shot s: median of up to {repeat} timed calls (fewer when the --budget ran out: see runs); "
                 "scale, scale-full: kaisched.schedule() on the manifests, parsing included; scale-steady: the "
                 "cycle (run_prepared_cycle with a CycleMemo) on the objects of the cycle before it;")
    lines.append("cycle s: the same cycle on objects parsed and prepared beforehand, snapshot to result "
                 "(kaisched.kube.metrics.timed_cycle), median of as many (scale-steady: its one-shot s); the "
                 "targets are judged on it;")
    lines.append("placed/s: binds / cycle s (issue 9's figure); pods/s: pending pods / one-shot s; placed PG: "
                 "pending PodGroups bound or pipelined; traced MiB: tracemalloc peak of one more one-shot call; "
                 "RSS MiB: process peak (ru_maxrss).")
    described = False
    for m in results:
        if not described:
            lines.append(f"  cluster: {m.description}")
            lines.append("  core: " + (
                "compiled with mypyc, as kaisched's wheels and image ship it (docs/performance.md)" if m.compiled
                else "interpreted, as the development checkout runs it; the wheels and image ship it compiled: "
                "`make bench` (docs/performance.md)"))
            described = True
        if m.settle is not None:
            cycles = "; ".join(f"cycle {i + 1}: {sec:.2f} s ({b:,} binds, {p:,} pipelined, {e:,} evicted)"
                               for i, (sec, b, p, e) in enumerate(m.settle))
            lines.append(f"  {m.shape}: objects prepared in {m.prepare_s or 0:.2f} s; {cycles}; each cycle's binds, "
                         "evictions (terminating pods) and PodGroup timestamps applied before the next, the timed "
                         "cycle on the last one's objects"
                         + ("" if m.settled else " (the memo cannot answer: see kaisched.cluster.memo)"))
        batched, single = m.allocate_placed_per_s, m.single_allocate_placed_per_s
        if batched is not None and single is not None:
            same = not any("one-at-a-time" in f for f in m.failures)
            lines.append(f"  {m.shape}: placed per second of allocate (binds / the allocate action's median ms on "
                         f"prepared objects): {batched:,.0f} batched ({statistics.median(m.allocate_ms):,.0f} ms), "
                         f"{single:,.0f} one at a time ({statistics.median(m.single_allocate_ms):,.0f} ms), "
                         + ("the same decisions" if same else "NOT the same decisions"))
        if m.cycle_parts_ms:
            lines.append(f"  {m.shape}: the median cycle on prepared objects, ms: "
                         + ", ".join(f"{k} {v:,.0f}" for k, v in m.cycle_parts_ms.items())
                         + (f"; one-shot {m.one_shot_placed_per_s:,.0f} placed/s"
                            if m.shape == "scale" and m.one_shot_placed_per_s is not None else ""))
        for f in m.failures:
            lines.append(f"    FAIL {m.shape}: {f}")
    full = [m for m in results if not m.smoke]
    if full:
        missed = [f"{m.shape} " + ("timed out" if m.cycle_s is None else f"{m.cycle_s:.2f} s")
                  + (f", {m.placed_per_s:,.0f} placed/s" if m.shape == "scale" and m.placed_per_s else "")
                  for m in full if not m.met]
        core = "compiled" if any(m.compiled for m in full) else "interpreted"
        lines.append(f"issue 9's targets (scale >= 10,000 placed/s, scale-full < 5 s, scale-steady < 0.5 s), {core} "
                     "core: " + ("met" if not missed else f"NOT met ({', '.join(missed)})"))
        for m in full:
            rate = m.allocate_placed_per_s
            if rate is not None:
                lines.append(f"issue 28's batched placement target (scale >= {MIN_ALLOCATE_PLACED_PER_S:,.0f} "
                             f"placed per second of allocate), {core} core: "
                             + ("met" if rate >= MIN_ALLOCATE_PLACED_PER_S else f"NOT met ({rate:,.0f})"))
    return "\n".join(lines)
