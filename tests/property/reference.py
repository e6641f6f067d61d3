"""A simple, obviously-correct reference of one allocate cycle (issue 9: the optimised paths are compared
against it on random small clusters, ``test_reference_decisions.py``).

Pure Python loops over plain data: no caches, no NumPy, no kaisched imports. It covers a restricted class of
clusters:

* nodes with GPUs, CPU, memory and a pod count; no taints, labels, affinity, topology, MIG or DRA;
* pods ask for whole GPUs (>= 1), CPU and memory; no fractions, host ports or node selectors;
* one level of queues (top-level queues, each a leaf); CPU and memory quota and limit -1; a GPU quota and a GPU
  limit (-1 or at least the quota); **either** every GPU overQuotaWeight is 0 **or** every GPU quota is at least
  the queue's whole GPU request (``large quota``): in both cases a queue's fair share is ``min(quota,
  requestable)`` (spec 5.3 phase 1; phase 2 hands out nothing: no weight, or nobody unsatisfied);
* jobs are gangs: minMember = the number of pods; a job's pods are either all running (on a node) or all
  pending; nothing is releasing, gated or being deleted.

What it does, straight from ``shared/spec/kai-spec.md``:

* **Job order in a queue** (§4.5): higher PodGroup priority first, then (the elastic plugin: every pending job
  here is below its minimum, so it never decides) older PodGroup creationTimestamp, then smaller UID
  (``<namespace>/<name>``).
* **Queue order** (§5.4), over the queues that still have a pending job, comparing each queue's best job J,
  recomputed before every pop: not over-utilised first (allocated above the fair share in all three
  resources); starved first (allocated + J within the quota in all resources, -1 = infinite); higher queue
  priority; no zero-share penalty (some resource with allocatable share 0 while allocated + J > 0) first;
  smaller dominant (DRF) share with J, then without J (§5.1: ``max_r amount_r / allocatableShare_r``, the
  cluster total standing in for an unlimited share, ``amount_r x 1000`` where the share is 0); then the
  static sibling order: smaller allocatable share (GPU: the quota, capped by the limit; CPU and memory: the
  cluster total, equal for all), then older queue creationTimestamp, then name.
  kaisched rounds both DRF shares to 12 decimals before comparing them (so that floating-point noise never
  decides); the reference does the same — with the integer amounts used here it only matters for exact ties.
* **Capacity check** (§5.6) of the popped job, on the GPUs it asks: over the queue's GPU limit (when not -1),
  or, for a non-preemptible job (priority >= 100), its non-preemptible allocation plus the request over the
  GPU quota: the job fails.
* **Placement** (§4.8, §8.1): the job's pods in task order (older pod creationTimestamp, then UID); each on
  the node where it fits (GPUs, CPU, memory, one pod slot, all on idle resources: nothing is releasing)
  with the highest score: every fitting node gets +100 (nodeavailability) and the GPU binpack score
  ``9 x (1 - (free - min) / (max - min))`` over the fitting nodes' free GPUs (9 when they are all equal),
  so **the fewest free GPUs wins, ties go to the smaller node name**. A pod that fits nowhere fails the
  whole job: nothing of it stays placed (gang all-or-nothing). A placed job adds its pods' requests to its
  queue's allocation (and to the non-preemptible allocation when it is non-preemptible).
* A failed job is not tried again in the cycle; a placed one has no pending pod left.

Result: the binds, pod key (``<namespace>/<name>``) -> node name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 2**30
UNLIMITED = -1
EPS = 1e-9
ZERO_SHARE_PENALTY = 1000.0
NON_PREEMPTIBLE_PRIORITY = 100
#: KAI's built-in priority classes (spec 3.4).
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
DEFAULT_QUEUE_PRIORITY = 100


@dataclass(frozen=True)
class RNode:
    name: str
    gpus: int
    cpu_m: int  # millicores
    memory_gib: int
    pods: int


@dataclass(frozen=True)
class RPod:
    name: str
    gpus: int
    cpu_m: int
    memory_gib: int
    created: str  # RFC 3339
    node: str | None = None  # set: Running there


@dataclass(frozen=True)
class RJob:
    """A PodGroup (minMember = number of pods) and its pods."""

    name: str
    namespace: str
    queue: str
    priority_class: str
    created: str
    pods: tuple[RPod, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def priority(self) -> int:
        return PRIORITY_CLASSES[self.priority_class]

    @property
    def preemptible(self) -> bool:
        return self.priority < NON_PREEMPTIBLE_PRIORITY

    @property
    def running(self) -> bool:
        return all(p.node is not None for p in self.pods)


@dataclass(frozen=True)
class RQueue:
    name: str
    gpu_quota: int
    gpu_limit: int  # -1 or >= gpu_quota
    gpu_weight: int
    priority: int
    created: str


@dataclass
class RCluster:
    nodes: list[RNode]
    queues: list[RQueue]
    jobs: list[RJob] = field(default_factory=list)


# ------------------------------------------------------------------------------------------- objects


def to_objects(cluster: RCluster) -> list[dict[str, Any]]:
    """The cluster as the Kubernetes objects ``kaisched.schedule`` reads."""
    objs: list[dict[str, Any]] = []
    for n in cluster.nodes:
        objs.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": {"kubernetes.io/hostname": n.name}},
            "status": {"allocatable": {"cpu": f"{n.cpu_m}m", "memory": f"{n.memory_gib}Gi",
                                       "nvidia.com/gpu": str(n.gpus), "pods": str(n.pods)},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    for q in cluster.queues:
        spec: dict[str, Any] = {
            "priority": q.priority,
            "resources": {
                "gpu": {"quota": q.gpu_quota, "limit": q.gpu_limit, "overQuotaWeight": q.gpu_weight},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            },
        }
        objs.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                     "metadata": {"name": q.name, "creationTimestamp": q.created}, "spec": spec})
    for j in cluster.jobs:
        objs.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                     "metadata": {"name": j.name, "namespace": j.namespace, "creationTimestamp": j.created},
                     "spec": {"queue": j.queue, "minMember": len(j.pods), "priorityClassName": j.priority_class}})
        for p in j.pods:
            requests = {"nvidia.com/gpu": str(p.gpus), "cpu": f"{p.cpu_m}m", "memory": f"{p.memory_gib}Gi"}
            pod_spec: dict[str, Any] = {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "image": "busybox",
                                "resources": {"requests": requests, "limits": {"nvidia.com/gpu": str(p.gpus)}}}],
            }
            if p.node is not None:
                pod_spec["nodeName"] = p.node
            objs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": p.name, "namespace": j.namespace, "creationTimestamp": p.created,
                                      "annotations": {"pod-group-name": j.name}},
                         "spec": pod_spec, "status": {"phase": "Running" if p.node is not None else "Pending"}})
    return objs


# ----------------------------------------------------------------------------------------- reference


def _request(pods: tuple[RPod, ...] | list[RPod]) -> list[float]:
    """[GPUs, millicores, bytes] of ``pods``."""
    out = [0.0, 0.0, 0.0]
    for p in pods:
        out[0] += p.gpus
        out[1] += p.cpu_m
        out[2] += p.memory_gib * GIB
    return out


def _dominant_share(amount: list[float], share: list[float]) -> float:
    best = 0.0
    for a, s in zip(amount, share, strict=True):
        best = max(best, a * ZERO_SHARE_PENALTY if s == 0 else a / s)
    return best


def _within(amount: list[float], limit: list[float]) -> bool:
    """amount <= limit in every resource, -1 meaning unlimited."""
    return all(lim == UNLIMITED or a <= lim + EPS for a, lim in zip(amount, limit, strict=True))


def reference_allocate(cluster: RCluster) -> dict[str, str]:
    """The binds (pod key -> node) of one allocate cycle on ``cluster``."""
    # free resources per node: allocatable minus the running pods
    free: dict[str, list[int]] = {n.name: [n.gpus, n.cpu_m, n.memory_gib, n.pods] for n in cluster.nodes}
    for job in cluster.jobs:
        for p in job.pods:
            if p.node is not None:
                f = free[p.node]
                f[0] -= p.gpus
                f[1] -= p.cpu_m
                f[2] -= p.memory_gib
                f[3] -= 1
    total = [float(sum(n.gpus for n in cluster.nodes)), float(sum(n.cpu_m for n in cluster.nodes)),
             float(sum(n.memory_gib for n in cluster.nodes) * GIB)]

    # queue accounting: allocated (running pods), non-preemptible allocated, request (allocated + pending)
    allocated = {q.name: [0.0, 0.0, 0.0] for q in cluster.queues}
    allocated_np = {q.name: [0.0, 0.0, 0.0] for q in cluster.queues}
    request = {q.name: [0.0, 0.0, 0.0] for q in cluster.queues}
    for job in cluster.jobs:
        amount = _request(job.pods)
        for r in range(3):
            request[job.queue][r] += amount[r]
            if job.running:
                allocated[job.queue][r] += amount[r]
                if not job.preemptible:
                    allocated_np[job.queue][r] += amount[r]

    deserved: dict[str, list[float]] = {}
    limit: dict[str, list[float]] = {}
    fair: dict[str, list[float]] = {}
    share: dict[str, list[float]] = {}  # allocatable share, the cluster total where unlimited
    for q in cluster.queues:
        deserved[q.name] = [float(q.gpu_quota), UNLIMITED, UNLIMITED]
        limit[q.name] = [float(q.gpu_limit), UNLIMITED, UNLIMITED]
        fair[q.name] = []
        share[q.name] = []
        for r in range(3):
            d, lim, req = deserved[q.name][r], limit[q.name][r], request[q.name][r]
            requestable = req if lim == UNLIMITED else min(lim, req)
            # spec 5.3 phase 1: min(deserved, requestable), deserved -1 standing for the whole amount
            fs = min(total[r] if d == UNLIMITED else d, requestable)
            fair[q.name].append(fs)
            if d == UNLIMITED:
                a = lim
            else:
                a = max(d, fs) if lim == UNLIMITED else min(max(d, fs), lim)
            share[q.name].append(total[r] if a == UNLIMITED else a)
    # static sibling order: smaller allocatable share (only the GPU one differs), older queue, then name
    sibling_rank = {q.name: i for i, q in enumerate(sorted(cluster.queues,
                                                           key=lambda q: (share[q.name], q.created, q.name)))}
    priority = {q.name: q.priority for q in cluster.queues}

    # pending jobs per queue, in job order
    pending: dict[str, list[RJob]] = {q.name: [] for q in cluster.queues}
    for job in cluster.jobs:
        if not job.running:
            pending[job.queue].append(job)
    for jobs in pending.values():
        jobs.sort(key=lambda j: (-j.priority, j.created, j.key))

    def queue_key(name: str) -> tuple[object, ...]:
        job = pending[name][0]
        used = allocated[name]
        with_job = [u + x for u, x in zip(used, _request(job.pods), strict=True)]
        over_utilized = all(fair[name][r] < used[r] - EPS for r in range(3))
        starved = _within(with_job, deserved[name])
        penalty = any(share[name][r] == 0 and with_job[r] > 0 for r in range(3))
        return (1 if over_utilized else 0, 0 if starved else 1, -priority[name], 1 if penalty else 0,
                round(_dominant_share(with_job, share[name]), 12), round(_dominant_share(used, share[name]), 12),
                sibling_rank[name])

    binds: dict[str, str] = {}
    while True:
        waiting = [name for name, jobs in pending.items() if jobs]
        if not waiting:
            break
        name = min(waiting, key=queue_key)
        job = pending[name].pop(0)
        gpus = _request(job.pods)[0]
        if limit[name][0] != UNLIMITED and gpus > 0 and allocated[name][0] + gpus > limit[name][0] + EPS:
            continue  # OverLimit
        if not job.preemptible and allocated_np[name][0] + gpus > deserved[name][0] + EPS:
            continue  # NonPreemptibleOverQuota
        placed: list[tuple[RPod, str]] = []
        for p in sorted(job.pods, key=lambda p: (p.created, f"{job.namespace}/{p.name}")):
            fitting = [n for n, f in free.items()
                       if f[0] >= p.gpus and f[1] >= p.cpu_m and f[2] >= p.memory_gib and f[3] >= 1]
            if not fitting:
                break
            node = min(fitting, key=lambda n: (free[n][0], n))
            f = free[node]
            f[0] -= p.gpus
            f[1] -= p.cpu_m
            f[2] -= p.memory_gib
            f[3] -= 1
            placed.append((p, node))
        if len(placed) < len(job.pods):
            for p, node in placed:  # the gang failed: give back what its first pods took
                f = free[node]
                f[0] += p.gpus
                f[1] += p.cpu_m
                f[2] += p.memory_gib
                f[3] += 1
            continue
        amount = _request(job.pods)
        for r in range(3):
            allocated[name][r] += amount[r]
            if not job.preemptible:
                allocated_np[name][r] += amount[r]
        for p, node in placed:
            binds[f"{job.namespace}/{p.name}"] = node
    return binds
