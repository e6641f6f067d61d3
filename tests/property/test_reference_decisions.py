"""kaisched's allocate decisions against a simple reference implementation (issue 9, item 4).

On random small clusters of the class ``tests/property/reference.py`` covers (1-12 nodes of 1-8 GPUs, 1-4
top-level queues, 1-30 gangs of 1-4 pods x 1-4 GPUs, some already running), one allocate cycle of
``kaisched.schedule`` must place exactly the jobs the reference places, and every pod on the very node the
reference chooses. The reference mirrors KAI's tie-breaks (its docstring lists them): jobs by priority,
creation time, then UID; queues by spec 5.4 down to the static sibling order (smaller quota, older queue,
name); pods by creation time, then UID; nodes by fewest free GPUs, then name.

A seeded loop (``SEEDS`` clusters, each built by its own ``random.Random(seed)``), so that a failure names a
seed that reproduces it: ``pytest tests/property/test_reference_decisions.py -k 'seed-17'``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

import kaisched
from tests.property.reference import (
    PRIORITY_CLASSES,
    RCluster,
    RJob,
    RNode,
    RPod,
    RQueue,
    reference_allocate,
    to_objects,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
SEEDS = range(200)
#: A few distinct timestamps, so that creation times often tie and the UID decides.
STAMPS = ("2025-01-01T08:00:00Z", "2025-01-01T09:00:00Z", "2025-01-01T09:00:00Z", "2025-01-01T10:30:00Z")
LARGE_QUOTA = 10_000  # above any queue's GPU request here


def random_cluster(seed: int) -> RCluster:
    rng = random.Random(seed)
    names = [f"node-{i:02d}" for i in range(rng.randint(1, 12))]
    rng.shuffle(names)  # the objects' order must not matter: ties go to the smaller name
    nodes = [RNode(n, rng.randint(1, 8), rng.choice((8000, 16_000, 32_000, 64_000)), rng.choice((32, 64, 128, 256)),
                   rng.choice((110, 110, 110, 3, 6))) for n in names]

    # one level of queues; either no GPU over-quota weight (any quota, some limits) or quotas above any request
    no_weight = rng.random() < 0.5
    # a third of the clusters are made of ties: equal queues (same quota and priority) and pods that ask no
    # CPU or memory, so that the queue order comes down to the sibling order and the zero-share penalty
    ties = rng.random() < 0.35
    same_quota = rng.choice((0, 0, 4, 8))
    queues: list[RQueue] = []
    for i in range(rng.randint(1, 4)):
        priority = 100 if ties else rng.choice((100, 100, 100, 50, 150))
        created = rng.choice(STAMPS)
        name = f"q-{rng.choice('abcdef')}{i}"
        if no_weight:
            quota = same_quota if ties else rng.randint(0, 16)
            limit = rng.choice((-1, -1, quota + rng.randint(0, 8)))
            queues.append(RQueue(name, quota, limit, 0, priority, created))
        else:
            queues.append(RQueue(name, LARGE_QUOTA, -1, rng.randint(1, 3), priority, created))

    # jobs: gangs of 1-4 pods of 1-4 GPUs, about 30 % of them running (where they fit)
    free = {n.name: [n.gpus, n.cpu_m, n.memory_gib, n.pods] for n in nodes}
    jobs: list[RJob] = []
    for i in range(rng.randint(1, 30)):
        namespace = rng.choice(("default", "team-b"))
        name = f"job-{i:02d}"
        same = rng.random() < 0.7
        gpus = rng.randint(1, 4)
        specs = [(gpus if same else rng.randint(1, 4), 0 if ties else rng.choice((0, 500, 1000, 2000, 4000, 8000)),
                  0 if ties else rng.choice((0, 1, 4, 16)), rng.choice(STAMPS)) for _ in range(rng.randint(1, 4))]
        where: list[str | None] = [None] * len(specs)
        if rng.random() < 0.3:
            taken: list[tuple[str, tuple[int, int, int]]] = []
            for k, (g, c, m, _) in enumerate(specs):
                fits = [n for n, f in free.items() if f[0] >= g and f[1] >= c and f[2] >= m and f[3] >= 1]
                if not fits:
                    break
                node = rng.choice(sorted(fits))
                f = free[node]
                f[0] -= g
                f[1] -= c
                f[2] -= m
                f[3] -= 1
                taken.append((node, (g, c, m)))
                where[k] = node
            if len(taken) < len(specs):  # does not fit: stays pending
                for node, (g, c, m) in taken:
                    f = free[node]
                    f[0] += g
                    f[1] += c
                    f[2] += m
                    f[3] += 1
                where = [None] * len(specs)
        pods = tuple(RPod(f"{name}-{k}", g, c, m, created, where[k]) for k, (g, c, m, created) in enumerate(specs))
        jobs.append(RJob(name, namespace, rng.choice(queues).name, rng.choice(tuple(PRIORITY_CLASSES)),
                         rng.choice(STAMPS), pods))
    return RCluster(nodes, queues, jobs)


def describe(cluster: RCluster) -> str:
    """The cluster in a few lines, for failure messages."""
    nodes = sorted(cluster.nodes, key=lambda n: n.name)
    lines = ["nodes: " + ", ".join(f"{n.name}({n.gpus} GPU, {n.cpu_m}m, {n.memory_gib}Gi, {n.pods} pods)"
                                   for n in nodes)]
    lines += [f"queue {q.name}: quota {q.gpu_quota} limit {q.gpu_limit} weight {q.gpu_weight} priority {q.priority} "
              f"created {q.created}" for q in cluster.queues]
    for j in cluster.jobs:
        pods = ", ".join(f"{p.name}[{p.gpus}g {p.cpu_m}m {p.memory_gib}Gi {p.created[11:16]}"
                         + (f" on {p.node}]" if p.node else "]") for p in j.pods)
        lines.append(f"job {j.key} queue {j.queue} {j.priority_class} created {j.created[11:16]}: {pods}")
    return "\n".join(lines)


def kaisched_binds(cluster: RCluster) -> dict[str, str]:
    result = kaisched.schedule(to_objects(cluster), {"actions": "allocate"}, NOW)
    assert not result.errors, [e.to_dict() for e in result.errors]
    assert not result.pipelined and not result.evictions, "nothing is releasing: allocate only binds"
    assert all(not b.gpu_groups for b in result.binds), "whole-GPU pods name no GPU group"
    return {b.pod: b.node for b in result.binds}


def placed_jobs(cluster: RCluster, binds: dict[str, str]) -> set[str]:
    return {j.key for j in cluster.jobs if any(f"{j.namespace}/{p.name}" in binds for p in j.pods)}


def _check(cluster: RCluster) -> None:
    expected = reference_allocate(cluster)
    actual = kaisched_binds(cluster)
    want_jobs, got_jobs = placed_jobs(cluster, expected), placed_jobs(cluster, actual)
    assert got_jobs == want_jobs, (
        f"placed jobs differ: kaisched only {sorted(got_jobs - want_jobs)}, reference only "
        f"{sorted(want_jobs - got_jobs)}\n{describe(cluster)}")
    assert actual == expected, (
        f"node choices differ: {sorted(set(actual.items()) ^ set(expected.items()))}\n{describe(cluster)}")


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed-{s}")
def test_allocate_matches_reference(seed: int) -> None:
    _check(random_cluster(seed))


def test_generator_covers_the_class() -> None:
    """The random clusters exercise what the reference distinguishes: both queue regimes, several queues,
    running and pending gangs, non-preemptible jobs, jobs that do not fit, and placements."""
    clusters = [random_cluster(s) for s in SEEDS]
    placed = [placed_jobs(c, reference_allocate(c)) for c in clusters]
    assert any(all(q.gpu_weight == 0 for q in c.queues) for c in clusters)
    assert any(all(q.gpu_quota == 10_000 for q in c.queues) for c in clusters)
    assert sum(len(c.queues) > 1 for c in clusters) > len(clusters) // 2
    assert sum(any(j.running for j in c.jobs) for c in clusters) > len(clusters) // 2
    assert sum(any(not j.preemptible and not j.running for j in c.jobs) for c in clusters) > len(clusters) // 2
    assert sum(any(len(j.pods) > 1 and j.key in p for j in c.jobs) for c, p in zip(clusters, placed, strict=True)) > 50
    assert sum(any(not j.running and j.key not in p for j in c.jobs)
               for c, p in zip(clusters, placed, strict=True)) > len(clusters) // 2


# ------------------------------------------------------------------------------ hand-made tie-breaks
S0, S1, S3 = STAMPS[0], STAMPS[1], STAMPS[3]


def _n(name: str, gpus: int, cpu_m: int = 64_000) -> RNode:
    return RNode(name, gpus, cpu_m, 256, 110)


def _q(name: str, quota: int, created: str = S0, priority: int = 100) -> RQueue:
    return RQueue(name, quota, -1, 0, priority, created)


def _j(name: str, queue: str, gpus: list[int], created: str = S0, pc: str = "train", ns: str = "default",
       cpu_m: int = 0, pod_created: list[str] | None = None, node: str | None = None) -> RJob:
    stamps = pod_created or [created] * len(gpus)
    return RJob(name, ns, queue, pc, created, tuple(RPod(f"{name}-{k}", g, cpu_m, 0, stamps[k], node)
                                                    for k, g in enumerate(gpus)))


#: (id, cluster, expected binds): each built so that exactly one tie-break decides; worked out by hand
HAND_MADE: list[tuple[str, RCluster, dict[str, str]]] = [
    # two equal queues, room for one job: the older queue (not the first by name) goes first
    ("older-queue-first", RCluster([_n("node-a", 2)], [_q("q-a", 4, S1), _q("q-z", 4, S0)],
                                   [_j("ja", "q-a", [2]), _j("jz", "q-z", [2], S3)]),
     {"default/jz-0": "node-a"}),
    # equal queues created at the same time: the smaller name (its job is the newer one)
    ("queue-name", RCluster([_n("node-a", 2)], [_q("q-b", 4), _q("q-a", 4)],
                            [_j("jb", "q-b", [2]), _j("ja", "q-a", [2], S3)]),
     {"default/ja-0": "node-a"}),
    # CPU dominates both DRF shares (0.5 = 32 of 64 cores): the smaller allocatable share (quota 4) first
    ("smaller-share-first", RCluster([_n("node-a", 2)], [_q("q-a", 8), _q("q-z", 4, S3)],
                                     [_j("ja", "q-a", [2], cpu_m=32_000), _j("jz", "q-z", [2], cpu_m=32_000)]),
     {"default/jz-0": "node-a"}),
    # equal DRF share with the job (4/8), q-b's share without it is smaller (0 < 2/8)
    ("drf-without-job", RCluster([_n("node-r", 2), _n("node-a", 4)], [_q("q-a", 8), _q("q-b", 8, S3)],
                                 [_j("run", "q-a", [1, 1], node="node-r"), _j("ja", "q-a", [2]),
                                  _j("jb", "q-b", [4])]),
     {"default/jb-0": "node-a"}),
    # both starved: the higher queue priority beats the larger DRF share (4/4 against 2/8)
    ("queue-priority", RCluster([_n("node-r", 2), _n("node-a", 2)], [_q("q-a", 4, priority=150), _q("q-b", 8)],
                                [_j("run", "q-a", [2], node="node-r"), _j("ja", "q-a", [2]), _j("jb", "q-b", [2])]),
     {"default/ja-0": "node-a"}),
    # starved (q-b: 2 <= 8) before the higher priority of a queue over its quota (q-a: 2 + 2 > 2)
    ("starved-first", RCluster([_n("node-r", 2), _n("node-a", 2)], [_q("q-a", 2, priority=150), _q("q-b", 8)],
                               [_j("run", "q-a", [2], node="node-r"), _j("ja", "q-a", [2]), _j("jb", "q-b", [2])]),
     {"default/jb-0": "node-a"}),
    # job order in a queue: priority (inference, non-preemptible, within the quota) before an older train job
    ("job-priority", RCluster([_n("node-a", 2)], [RQueue("q", LARGE_QUOTA, -1, 1, 100, S0)],
                              [_j("old", "q", [2]), _j("new", "q", [2], S3, pc="inference")]),
     {"default/new-0": "node-a"}),
    # equal priority: the older PodGroup, then the smaller UID (namespace first: default/ before team-b/)
    ("job-created", RCluster([_n("node-a", 2)], [RQueue("q", LARGE_QUOTA, -1, 1, 100, S0)],
                             [_j("job-a", "q", [2], S3), _j("job-z", "q", [2], S0)]),
     {"default/job-z-0": "node-a"}),
    ("job-uid", RCluster([_n("node-a", 2)], [RQueue("q", LARGE_QUOTA, -1, 1, 100, S0)],
                         [_j("job-a", "q", [2], ns="team-b"), _j("job-z", "q", [2])]),
     {"default/job-z-0": "node-a"}),
    # a gang's pods by creation time then UID; each on the fewest free GPUs, ties to the smaller node name
    # (the nodes listed out of order)
    ("task-and-node-order", RCluster([_n("node-b", 3), _n("node-c", 1), _n("node-a", 3)],
                                     [RQueue("q", LARGE_QUOTA, -1, 1, 100, S0)],
                                     [_j("g", "q", [1, 2, 1], pod_created=[S1, S0, S1])]),
     {"default/g-1": "node-a", "default/g-0": "node-a", "default/g-2": "node-c"}),
    # all or nothing: the gang's first pod fits, its second does not; the later single job gets the GPUs
    ("gang-rolled-back", RCluster([_n("node-a", 2)], [RQueue("q", LARGE_QUOTA, -1, 1, 100, S0)],
                                  [_j("gang", "q", [2, 2]), _j("single", "q", [2], S3)]),
     {"default/single-0": "node-a"}),
]


@pytest.mark.parametrize(("cluster", "expected"), [(c, e) for _, c, e in HAND_MADE], ids=[i for i, _, _ in HAND_MADE])
def test_hand_made_tie_breaks(cluster: RCluster, expected: dict[str, str]) -> None:
    assert reference_allocate(cluster) == expected, describe(cluster)
    assert kaisched_binds(cluster) == expected, describe(cluster)


def test_reference_on_a_hand_made_cluster() -> None:
    """The reference itself, on a cluster small enough to work out by hand: q-a is starved (1 of its 4 GPUs
    used), q-b is over its quota of 0, so q-a's jobs go first; each pod takes the node with the fewest free
    GPUs that fits it (node-b, 2 free, before node-a, 4 free); the 3-GPU gang of q-b no longer fits."""
    nodes = [RNode("node-a", 4, 64_000, 256, 110), RNode("node-b", 4, 64_000, 256, 110)]
    queues = [RQueue("q-a", 4, -1, 0, 100, STAMPS[0]), RQueue("q-b", 0, -1, 0, 100, STAMPS[0])]
    jobs = [
        RJob("run", "default", "q-a", "train", STAMPS[0],
             (RPod("run-0", 1, 0, 0, STAMPS[0], "node-b"), RPod("run-1", 1, 0, 0, STAMPS[0], "node-b"))),
        RJob("b-gang", "default", "q-b", "train", STAMPS[0],
             (RPod("b-gang-0", 3, 0, 0, STAMPS[0]), RPod("b-gang-1", 1, 0, 0, STAMPS[0]))),
        RJob("a-one", "default", "q-a", "train", STAMPS[1], (RPod("a-one-0", 2, 0, 0, STAMPS[1]),)),
        RJob("a-two", "default", "q-a", "train", STAMPS[3], (RPod("a-two-0", 3, 0, 0, STAMPS[1]),)),
    ]
    cluster = RCluster(nodes, queues, jobs)
    assert reference_allocate(cluster) == {"default/a-one-0": "node-b", "default/a-two-0": "node-a"}
    assert kaisched_binds(cluster) == reference_allocate(cluster)
