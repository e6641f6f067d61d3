"""Deterministic generators of benchmark clusters (lists of Kubernetes object dicts).

Every generator is a pure function of its size arguments: no clock, and the only randomness (the GPU
fractions of ``fractional``) comes from a ``random.Random`` with a fixed seed. The timed
repetitions reuse one generated list (``kaisched.schedule`` never mutates its input; if it did, the
binds would likely differ between repetitions, which the benchmark reports as a failure).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

Obj = dict[str, Any]

NAMESPACE: Final = "bench"
SCHEDULER_NAME: Final = "kai-scheduler"
PRIORITY_CLASS: Final = "train"
GPUS_PER_NODE: Final = 8
NODE_CPU_CORES: Final = 128
NODE_MEMORY: Final = "1Ti"
NODE_MAX_PODS: Final = 110
POD_CPU: Final = "8"  # 8 GPUs x 8 cores = 64 of 128 cores: CPU never runs out before GPUs
POD_MEMORY: Final = "64Gi"  # 8 x 64 GiB = 512 GiB of 1 TiB
PARENT_QUEUES: Final = ("org-a", "org-b")
TOPOLOGY_API_VERSION: Final = "kai.scheduler/v1alpha1"
#: ``topology``: the Topology object's name and its levels, widest first (spec 2.4)
TOPOLOGY_NAME: Final = "dc"
SPINE_LABEL: Final = "example.com/spine"
RACK_LABEL: Final = "example.com/rack"


@dataclass(frozen=True, slots=True)
class Cluster:
    """One generated cluster plus what the sanity checks cannot read off the objects themselves."""

    name: str
    description: str
    objects: list[Obj]
    # exact number of binds a correct scheduler makes on this cluster, when it is known
    expected_binds: int | None = None
    # every leaf queue has the same quota, weight and demand: binds per queue must come out equal
    # (within one gang)
    balanced_queues: bool = False
    # exact number of GPU devices in use after the cycle (whole-GPU binds plus distinct shared GPU groups,
    # besides those of Running pods), when it is known
    expected_gpus_used: int | None = None
    # exact number of PodGroups that get bound (all their pods), when it is known
    expected_bound_groups: int | None = None


# ------------------------------------------------------------------------------------ object makers


def node(name: str, labels: dict[str, str] | None = None) -> Obj:
    """A GPU node; ``labels`` (e.g. topology levels) besides its hostname label."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "allocatable": {
                "cpu": str(NODE_CPU_CORES),
                "memory": NODE_MEMORY,
                "nvidia.com/gpu": str(GPUS_PER_NODE),
                "pods": str(NODE_MAX_PODS),
            },
        },
    }


def _resources(gpu_quota: float, gpu_weight: float = 1) -> dict[str, dict[str, float]]:
    return {
        "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": gpu_weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }


def queue(name: str, parent: str | None, gpu_quota: float, gpu_weight: float = 1) -> Obj:
    spec: Obj = {"resources": _resources(gpu_quota, gpu_weight)}
    if parent is not None:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_group(name: str, queue_name: str, min_member: int, priority_class: str = PRIORITY_CLASS,
              created: str | None = None, required_level: tuple[str, str] | None = None) -> Obj:
    """A PodGroup; ``created`` (RFC 3339) sets metadata.creationTimestamp, which orders equal jobs;
    ``required_level`` (topology, level label) sets spec.topologyConstraint: every pod in one domain of
    that level."""
    metadata: Obj = {"name": name, "namespace": NAMESPACE}
    if created is not None:
        metadata["creationTimestamp"] = created
    spec: Obj = {"queue": queue_name, "minMember": min_member, "priorityClassName": priority_class}
    if required_level is not None:
        spec["topologyConstraint"] = {"topology": required_level[0], "requiredTopologyLevel": required_level[1]}
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": spec,
    }


def topology(name: str, levels: tuple[str, ...]) -> Obj:
    """A Topology (spec 2.4): node labels from the widest level to the narrowest."""
    return {
        "apiVersion": TOPOLOGY_API_VERSION,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def pod(name: str, group: str, gpus: int = 1, node_name: str | None = None) -> Obj:
    """A pod of ``group``; Pending unless ``node_name`` is given, then Running on that node."""
    spec: Obj = {
        "schedulerName": SCHEDULER_NAME,
        "containers": [
            {
                "name": "main",
                "image": "trainer:latest",
                "resources": {
                    "requests": {"cpu": POD_CPU, "memory": POD_MEMORY, "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            },
        ],
    }
    status: Obj = {"phase": "Pending"}
    if node_name is not None:
        spec["nodeName"] = node_name
        status = {"phase": "Running"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": {"pod-group-name": group}},
        "spec": spec,
        "status": status,
    }


def fractional_pod(name: str, group: str, fraction: float) -> Obj:
    """A Pending pod of ``group`` asking ``fraction`` of one shared GPU (annotation ``gpu-fraction``, no
    ``nvidia.com/gpu``); CPU and memory scale with the fraction (f x 8 cores, f x 64 GiB), so the pods on
    one device never ask more than a whole-GPU pod does and GPUs still run out first."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"pod-group-name": group, "gpu-fraction": f"{fraction:g}"},
        },
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:latest",
                    "resources": {"requests": {"cpu": f"{round(fraction * 8000)}m",
                                               "memory": f"{round(fraction * 64 * 1024)}Mi"}},
                },
            ],
        },
        "status": {"phase": "Pending"},
    }


# ---------------------------------------------------------------------------------- building blocks


def node_names(count: int) -> list[str]:
    return [f"node-{i:05d}" for i in range(count)]


def leaf_queue_names(count: int) -> list[str]:
    return [f"team-{i:02d}" for i in range(count)]


def queues(leaves: int, total_gpus: int) -> list[Obj]:
    """Two parent queues, ``leaves`` leaf queues alternating between them.

    Each leaf deserves 3/4 of an equal share of the cluster's GPUs (so a quarter of the cluster is
    over-quota capacity, handed out by overQuotaWeight 1); each parent deserves the sum of its leaves.
    """
    names = leaf_queue_names(leaves)
    leaf_quota = (total_gpus * 3 // 4) // leaves
    per_parent = dict.fromkeys(PARENT_QUEUES, 0)
    leaf_objs: list[Obj] = []
    for i, name in enumerate(names):
        parent = PARENT_QUEUES[i % len(PARENT_QUEUES)]
        per_parent[parent] += leaf_quota
        leaf_objs.append(queue(name, parent, leaf_quota))
    return [queue(p, None, per_parent[p]) for p in PARENT_QUEUES] + leaf_objs


def add_single_pods(objs: list[Obj], prefix: str, count: int, queue_list: list[str]) -> None:
    """``count`` single-GPU pods, each its own PodGroup (minMember 1), round-robin over the queues."""
    for i in range(count):
        group = f"{prefix}-{i:06d}"
        objs.append(pod_group(group, queue_list[i % len(queue_list)], 1))
        objs.append(pod(f"{group}-0", group))


def add_gangs(objs: list[Obj], prefix: str, count: int, size: int, queue_list: list[str]) -> None:
    """``count`` gangs of ``size`` single-GPU pods (minMember ``size``), round-robin over the queues."""
    for i in range(count):
        group = f"{prefix}-{i:06d}"
        objs.append(pod_group(group, queue_list[i % len(queue_list)], size))
        objs.extend(pod(f"{group}-{p}", group) for p in range(size))


def base(nodes: int, leaves: int) -> list[Obj]:
    """The nodes and the queue tree every scenario shares."""
    return [node(n) for n in node_names(nodes)] + queues(leaves, nodes * GPUS_PER_NODE)


# ------------------------------------------------------------------------------------------ scenarios


def single_gpu_pods(nodes: int = 1000, pods: int = 10_000, leaves: int = 20) -> Cluster:
    """(a) ``pods`` pending single-GPU pods, one PodGroup (minMember 1) each, in ``leaves`` queues."""
    objs = base(nodes, leaves)
    add_single_pods(objs, "single", pods, leaf_queue_names(leaves))
    return Cluster(
        name="single",
        description=f"{pods:,} pending 1-GPU pods (one PodGroup each), {leaves} queues",
        objects=objs,
        expected_binds=min(pods, nodes * GPUS_PER_NODE),
        balanced_queues=pods % leaves == 0,
    )


def gangs_of_eight(nodes: int = 1000, gangs: int = 1000, leaves: int = 20, size: int = 8) -> Cluster:
    """(b) ``gangs`` pending gangs of ``size`` 1-GPU pods (minMember ``size``) in ``leaves`` queues."""
    objs = base(nodes, leaves)
    add_gangs(objs, "gang", gangs, size, leaf_queue_names(leaves))
    return Cluster(
        name="gangs",
        description=f"{gangs:,} pending gangs of {size} 1-GPU pods, {leaves} queues",
        objects=objs,
        expected_binds=min(gangs * size, nodes * GPUS_PER_NODE) // size * size,
        balanced_queues=gangs % leaves == 0,
    )


# GPUs held by Running pods on each node, cycled over the nodes: mean 2.4 of 8 = 30 % of all GPUs,
# and every node is partly used.
RUNNING_PATTERN: Final = (2, 3, 2, 3, 2)


def mixed(nodes: int = 1000, leaves: int = 20, singles: int = 3000, gangs4: int = 500,
          gangs8: int = 125) -> Cluster:
    """(c) 30 % of GPUs held by Running pods (one running PodGroup per node, 2-3 pods), plus pending
    1-GPU pods and 4- and 8-pod gangs that ask for somewhat more GPUs than are free."""
    leaf_names = leaf_queue_names(leaves)
    objs = base(nodes, leaves)
    running = 0
    for i, n in enumerate(node_names(nodes)):
        count = RUNNING_PATTERN[i % len(RUNNING_PATTERN)]
        running += count
        group = f"running-{i:06d}"
        objs.append(pod_group(group, leaf_names[i % leaves], count))
        objs.extend(pod(f"{group}-{p}", group, node_name=n) for p in range(count))
    add_single_pods(objs, "single", singles, leaf_names)
    add_gangs(objs, "gang4", gangs4, 4, leaf_names)
    add_gangs(objs, "gang8", gangs8, 8, leaf_names)
    asked = singles + 4 * gangs4 + 8 * gangs8
    return Cluster(
        name="mixed",
        description=(f"{100 * running // (nodes * GPUS_PER_NODE)}% of GPUs Running; {singles:,} 1-GPU pods, "
                     f"{gangs4:,} 4-gangs, {gangs8:,} 8-gangs pending ({asked:,} GPUs asked, "
                     f"{nodes * GPUS_PER_NODE - running:,} free)"),
        objects=objs,
    )


# GPU fractions of the GPU-sharing pods of Alibaba's OpenB trace, as (fraction, pods) pairs: the rows of
# /work/shared/traces/openb/openb_pod_list_default.csv (8,152 pods) with num_gpu == 1 and gpu_milli < 1000
# (3,078 pods), f = gpu_milli / 1000 clipped to [0.1, 0.9] and rounded to 2 decimals (only the 7 pods of
# 0.05 were clipped), counted per distinct value; mean 0.563. Derived once with
#   rows = [r for r in csv.DictReader(open(path)) if int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < 1000]
#   Counter(round(min(0.9, max(0.1, int(r["gpu_milli"]) / 1000)), 2) for r in rows)
# (the CSV is not read at run time).
OPENB_FRACTIONS: Final[tuple[tuple[float, int], ...]] = (
    (0.1, 7), (0.11, 24), (0.14, 1), (0.16, 74), (0.22, 62), (0.23, 140), (0.27, 4), (0.29, 1),
    (0.32, 328), (0.33, 7), (0.35, 6), (0.37, 47), (0.44, 2), (0.46, 128), (0.47, 750), (0.48, 19),
    (0.55, 72), (0.59, 75), (0.65, 253), (0.81, 1078),
)
#: Seed of the fraction draws: every run builds the same pods.
FRACTION_SEED: Final = 20261129
# Per leaf queue, the pods go fractional / whole in this cycle: 3 of 5 (60 %) fractional, interleaved.
SHARING_PATTERN: Final = (True, False, True, False, True)


def fractional(nodes: int = 1000, pods: int = 20_000, leaves: int = 20) -> Cluster:
    """(d) GPU sharing: ``pods`` pending pods, one PodGroup (minMember 1) each, round-robin over ``leaves``
    queues; in each queue 3 of every 5 pods ask for a fraction of one GPU (drawn from the OpenB trace's
    GPU-sharing pods with a fixed seed) and the others for 1 whole GPU."""
    leaf_names = leaf_queue_names(leaves)
    objs = base(nodes, leaves)
    rng = random.Random(FRACTION_SEED)
    values = [f for f, _ in OPENB_FRACTIONS]
    weights = [n for _, n in OPENB_FRACTIONS]
    shared = 0
    asked = 0.0
    for i in range(pods):
        group = f"share-{i:06d}"
        objs.append(pod_group(group, leaf_names[i % leaves], 1))
        if SHARING_PATTERN[(i // leaves) % len(SHARING_PATTERN)]:
            fraction = rng.choices(values, weights)[0]
            objs.append(fractional_pod(f"{group}-0", group, fraction))
            shared += 1
            asked += fraction
        else:
            objs.append(pod(f"{group}-0", group))
            asked += 1
    total = nodes * GPUS_PER_NODE
    return Cluster(
        name="fractional",
        description=(f"{pods:,} pending pods (one PodGroup each), {leaves} queues: {shared:,} ask a GPU fraction "
                     f"(OpenB), {pods - shared:,} 1 GPU ({asked:,.0f} GPUs asked of {total:,})"),
        objects=objs,
        # demand exceeds the GPUs, so a correct scheduler leaves no device idle
        expected_gpus_used=total if asked > total else None,
    )


def topology_racks(spines: int = 4, racks_per_spine: int = 8, nodes_per_rack: int = 32, jobs: int = 200,
                   size: int = 64, leaves: int = 20) -> Cluster:
    """(e) Topology-aware gangs: ``spines`` x ``racks_per_spine`` racks of ``nodes_per_rack`` nodes (labels
    ``example.com/spine: spine-S``, ``example.com/rack: rack-NN``, a two-level Topology ``dc``), and ``jobs``
    pending gangs of ``size`` 1-GPU pods (minMember ``size``), each PodGroup requiring one rack
    (``requiredTopologyLevel: example.com/rack``), round-robin over ``leaves`` queues."""
    racks = spines * racks_per_spine
    nodes = racks * nodes_per_rack
    objs: list[Obj] = []
    for i, name in enumerate(node_names(nodes)):
        rack = i // nodes_per_rack
        objs.append(node(name, {SPINE_LABEL: f"spine-{rack // racks_per_spine}", RACK_LABEL: f"rack-{rack:02d}"}))
    objs += queues(leaves, nodes * GPUS_PER_NODE)
    objs.append(topology(TOPOLOGY_NAME, (SPINE_LABEL, RACK_LABEL)))
    leaf_names = leaf_queue_names(leaves)
    for i in range(jobs):
        group = f"rackjob-{i:06d}"
        objs.append(pod_group(group, leaf_names[i % leaves], size, required_level=(TOPOLOGY_NAME, RACK_LABEL)))
        objs.extend(pod(f"{group}-{p}", group) for p in range(size))
    per_rack = nodes_per_rack * GPUS_PER_NODE // size  # 1-GPU pods: any packing inside a rack works
    fit = min(jobs, racks * per_rack)
    return Cluster(
        name="topology",
        description=(f"{jobs:,} pending {size}-pod gangs, each required in one rack ({spines} spines x "
                     f"{racks_per_spine} racks x {nodes_per_rack} nodes: {per_rack} gangs per rack, {fit:,} fit), "
                     f"{leaves} queues"),
        objects=objs,
        expected_binds=fit * size,
        balanced_queues=jobs % leaves == 0,
        expected_bound_groups=fit,
    )


Generator = Callable[[], Cluster]

#: Issue sizes: 1,000 nodes x 8 GPUs (``topology``: 1,024, in 32 racks of 32).
FULL: Final[dict[str, Generator]] = {
    "single": lambda: single_gpu_pods(nodes=1000, pods=10_000),
    "gangs": lambda: gangs_of_eight(nodes=1000, gangs=1000),
    "mixed": lambda: mixed(nodes=1000, singles=3000, gangs4=500, gangs8=125),
    "fractional": lambda: fractional(nodes=1000, pods=20_000),
    "topology": lambda: topology_racks(spines=4, racks_per_spine=8, nodes_per_rack=32, jobs=200, size=64),
}

#: CI sizes: the same shapes on 20 nodes (``topology``: 16, in 4 racks of 4), a few milliseconds each.
SMOKE: Final[dict[str, Generator]] = {
    "single": lambda: single_gpu_pods(nodes=20, pods=200),
    "gangs": lambda: gangs_of_eight(nodes=20, gangs=20),
    "mixed": lambda: mixed(nodes=20, singles=60, gangs4=10, gangs8=3),
    "fractional": lambda: fractional(nodes=20, pods=400),
    "topology": lambda: topology_racks(spines=2, racks_per_spine=2, nodes_per_rack=4, jobs=20, size=8),
}

SCENARIOS: Final = tuple(FULL)
