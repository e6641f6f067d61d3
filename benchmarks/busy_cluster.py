"""Issue 21's busy shared cluster: a cluster shaped like a real shared one, where a full cycle evicts.

The cluster (:func:`busy_cluster`, seeded: every run builds the same objects), at N nodes:

* **nodes**: N x {8 ``nvidia.com/gpu``, 128 cores, 1 TiB, 110 pods};
* **queues**: 100 leaf queues under 10 departments (``dept-3-team-7``); the GPU quotas sum to the cluster's
  GPUs (departments' shares of the cluster and teams' shares of their department drawn from U(0.5, 1.5),
  rounded by largest remainder), over-quota weights drawn from {1, 2, 3}; every limit -1, CPU and memory
  quota -1 (the smoke size: 4 departments of 3 teams);
* **running**: half of the GPUs held by single-pod 2-GPU jobs, each in a leaf queue drawn uniformly (so
  small queues run far above their share and large ones below it: reclaim has work), bound to random nodes
  with room (``spec.nodeName``, phase ``Running``);
* **pending**: 10 pods per node (N = 5,000: 50,000 pending and 10,000 running, 60,000 pods): 70 % in single-pod
  jobs asking 0.25, 0.5 (annotation ``gpu-fraction``), 1, 2, 4 or 8 GPUs (equal weights), 30 % in gangs of
  4-64 pods (minMember = pods) of 1 or 8 GPUs each (equal weights); the jobs shuffled, each in a leaf queue
  drawn uniformly, PodGroups created one second apart. Every pod asks 8 cores and 64 GiB per GPU, priority
  class ``train`` (preemptible) throughout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from benchmarks import allocate as alloc
from benchmarks.clusters import GPUS_PER_NODE, PRIORITY_CLASS, Obj, node, node_names, pod_group, queue
from benchmarks.scale import _Placer, _pod, _split

SEED: Final = 20261202
PENDING_PER_NODE: Final = 10
RUNNING_SHARE: Final = 0.5  # of the GPUs
RUNNING_GPUS: Final = 2  # per running pod (one pod a job)
#: what a single-pod job asks: (whole GPUs, fraction) with equal weights
SINGLE_ASKS: Final[tuple[tuple[int, float | None], ...]] = ((0, 0.25), (0, 0.5), (1, None), (2, None), (4, None),
                                                            (8, None))
GANG_GPUS: Final = (1, 8)  # per pod of a gang, equal weights
GANG_SIZES: Final = (4, 64)
SINGLE_POD_SHARE: Final = 0.7  # of the pending pods
WEIGHTS: Final = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class BusySize:
    nodes: int
    departments: int = 10
    teams: int = 10  # per department

    @property
    def pending_pods(self) -> int:
        return self.nodes * PENDING_PER_NODE


@dataclass(frozen=True, slots=True)
class BusyCluster:
    description: str
    objects: list[Obj]
    queues: int
    running_pods: int
    pending_pods: int


def _queues(size: BusySize, total_gpus: int, rng: random.Random) -> tuple[list[Obj], list[str]]:
    objs: list[Obj] = []
    leaves: list[str] = []
    for d, dept_quota in enumerate(_split(total_gpus, [rng.uniform(0.5, 1.5) for _ in range(size.departments)])):
        dept = f"dept-{d}"
        objs.append(queue(dept, None, dept_quota, rng.choice(WEIGHTS)))
        for t, team_quota in enumerate(_split(dept_quota, [rng.uniform(0.5, 1.5) for _ in range(size.teams)])):
            name = f"{dept}-team-{t}"
            objs.append(queue(name, dept, team_quota, rng.choice(WEIGHTS)))
            leaves.append(name)
    return objs, leaves


def _created(seconds_before: int) -> str:
    return (alloc.NOW - timedelta(seconds=seconds_before)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pending_jobs(pods: int, rng: random.Random) -> list[tuple[int, int, float | None]]:
    """(pods, GPUs per pod, fraction) of each pending job, shuffled."""
    gang_pods = round(pods * (1 - SINGLE_POD_SHARE))
    gang_pods = gang_pods if gang_pods >= GANG_SIZES[0] else 0
    jobs: list[tuple[int, int, float | None]] = []
    for _ in range(pods - gang_pods):
        gpus, fraction = rng.choice(SINGLE_ASKS)
        jobs.append((1, gpus, fraction))
    low, high = GANG_SIZES
    while gang_pods:
        size = gang_pods if gang_pods <= high else rng.randint(low, min(high, gang_pods - low))
        jobs.append((size, rng.choice(GANG_GPUS), None))
        gang_pods -= size
    rng.shuffle(jobs)
    return jobs


def busy_cluster(size: BusySize) -> BusyCluster:
    """The cluster of the module docstring."""
    rng = random.Random(SEED)
    names = node_names(size.nodes)
    total = size.nodes * GPUS_PER_NODE
    objs: list[Obj] = [node(n) for n in names]
    queue_objs, leaves = _queues(size, total, rng)
    objs += queue_objs
    placer = _Placer(names, rng)
    running = round(total * RUNNING_SHARE) // RUNNING_GPUS
    for i in range(running):
        group = f"run-{i:06d}"
        node_name, _ = placer.place(RUNNING_GPUS, None)
        objs.append(pod_group(group, rng.choice(leaves), 1, PRIORITY_CLASS, _created(86_400 + running - i)))
        objs.append(_pod(f"{group}-0", group, RUNNING_GPUS, None, node_name))
    jobs = _pending_jobs(size.pending_pods, rng)
    asked = 0.0
    for i, (pods, gpus, fraction) in enumerate(jobs):
        group = f"job-{i:06d}"
        objs.append(pod_group(group, rng.choice(leaves), pods, PRIORITY_CLASS, _created(len(jobs) - i)))
        objs.extend(_pod(f"{group}-{p}", group, gpus, fraction) for p in range(pods))
        asked += pods * (gpus if fraction is None else fraction)
    gangs = sum(1 for p, _, _ in jobs if p > 1)
    description = (f"{size.nodes:,} nodes x {GPUS_PER_NODE} GPUs, {len(leaves)} leaf queues under "
                   f"{size.departments}; {running:,} running 2-GPU pods ({running * RUNNING_GPUS:,} GPUs); "
                   f"{size.pending_pods:,} pending pods in {len(jobs) - gangs:,} single-pod jobs and {gangs:,} "
                   f"gangs ({asked:,.0f} GPUs asked of {total - running * RUNNING_GPUS:,} free)")
    return BusyCluster(description, objs, len(leaves), running, size.pending_pods)
