"""Property tests of one scheduling cycle (DESIGN.md, Tests): on random small clusters the allocate
action never over-commits a node, keeps gangs all-or-nothing, never exceeds queue limits, keeps
non-preemptible work within quota, explains every pending PodGroup, and is deterministic."""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kaisched
from tests.unit.builders import NOW, node, pod, pod_group, priority_class, queue

GI = 2**30
PRIORITIES = {"train": 50, "build": 100, "inference": 125, "low": 10}
RESOURCES = ("gpu", "cpu", "memory")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------- model
@dataclass
class NodeSpec:
    name: str
    gpus: int
    cpu: int  # cores
    memory: int  # GiB
    pods: int
    cordoned: bool

    def capacity(self) -> dict[str, float]:
        return {"gpu": self.gpus, "cpu": self.cpu * 1000, "memory": self.memory * GI, "pods": self.pods}


@dataclass
class QueueSpec:
    name: str
    parent: str | None
    gpu: int
    gpu_limit: int
    gpu_weight: int
    cpu_limit: int  # millicores, -1 = unlimited
    priority: int


@dataclass
class PodSpec:
    name: str
    gpus: int
    cpu: int  # cores
    memory: int  # GiB
    node: str | None = None
    deleting: bool = False

    @property
    def key(self) -> str:
        return self.name

    def req(self) -> dict[str, float]:
        return {"gpu": self.gpus, "cpu": self.cpu * 1000, "memory": self.memory * GI, "pods": 1}


@dataclass
class GroupSpec:
    name: str
    ns: str
    queue: str
    min_member: int
    priority_class: str
    preemptibility: str | None
    pods: list[PodSpec] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.ns}/{self.name}"

    @property
    def preemptible(self) -> bool:
        if self.preemptibility:
            return self.preemptibility == "preemptible"
        return PRIORITIES[self.priority_class] < 100


@dataclass
class Cluster:
    nodes: list[NodeSpec]
    queues: list[QueueSpec]
    groups: list[GroupSpec]

    def objects(self) -> list[dict]:
        objs: list[dict] = [priority_class("low", PRIORITIES["low"])]
        for n in self.nodes:
            objs.append(node(n.name, n.gpus, n.cpu, f"{n.memory}Gi", pods=n.pods, unschedulable=n.cordoned))
        for q in self.queues:
            objs.append(queue(q.name, q.parent, gpu=q.gpu, gpu_limit=q.gpu_limit, gpu_weight=q.gpu_weight,
                              cpu_limit=q.cpu_limit, priority=q.priority))
        for g in self.groups:
            objs.append(pod_group(g.name, g.ns, g.queue, g.min_member, g.priority_class, g.preemptibility))
            for p in g.pods:
                objs.append(pod(p.name, g.ns, g.name, p.gpus, p.cpu, f"{p.memory}Gi", node=p.node,
                                deleting=p.deleting))
        return objs

    def ancestors(self, queue_name: str) -> list[str]:
        """The queue and its ancestors; [] for a queue that does not exist."""
        by_name = {q.name: q for q in self.queues}
        out: list[str] = []
        cur = by_name.get(queue_name)
        while cur is not None:
            out.append(cur.name)
            cur = by_name.get(cur.parent) if cur.parent else None
        return out


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    nodes = [
        NodeSpec(
            name=f"n{i}",
            gpus=draw(st.integers(0, 8)),
            cpu=draw(st.sampled_from([8, 16, 32, 64])),
            memory=draw(st.sampled_from([32, 64, 256])),
            pods=draw(st.sampled_from([3, 8, 110])),
            cordoned=draw(st.integers(0, 4)) == 0,
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    queues: list[QueueSpec] = []
    for i in range(draw(st.integers(1, 4))):
        tops = [q.name for q in queues if q.parent is None]
        parent = draw(st.sampled_from([None, *tops])) if tops else None
        queues.append(QueueSpec(
            name=f"q{i}",
            parent=parent,
            gpu=draw(st.sampled_from([-1, 0, 1, 2, 4, 8, 16])),
            gpu_limit=draw(st.sampled_from([-1, -1, -1, 0, 4, 8, 12, 24])),
            gpu_weight=draw(st.integers(0, 3)),
            cpu_limit=draw(st.sampled_from([-1, -1, -1, -1, 16000, 64000])),
            priority=draw(st.sampled_from([50, 100, 100, 200])),
        ))
    parents = {q.parent for q in queues if q.parent}
    leaves = [q.name for q in queues if q.name not in parents]
    odd_queues = [*sorted(parents), "ghost"]  # non-leaf or missing: never scheduled
    free = {n.name: n.capacity() for n in nodes}
    groups: list[GroupSpec] = []
    for j in range(draw(st.integers(1, 12))):
        n_pods = draw(st.integers(1, 5))
        gang = draw(st.integers(1, min(4, n_pods))) if draw(st.integers(0, 7)) else draw(st.integers(1, 4))
        g = GroupSpec(
            name=f"g{j}",
            ns=f"ns{j % 2}",
            queue=draw(st.sampled_from(odd_queues)) if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(leaves)),
            min_member=gang,
            priority_class=draw(st.sampled_from(["train", "build", "inference", "low"])),
            preemptibility=draw(st.sampled_from([None, None, None, "preemptible", "non-preemptible"])),
        )
        for k in range(n_pods):
            p = PodSpec(f"g{j}-{k}", draw(st.integers(0, 4)), draw(st.integers(1, 8)), draw(st.integers(1, 16)))
            if draw(st.integers(0, 3)) == 0:  # try to place it as an already running pod
                target = draw(st.sampled_from(nodes)).name
                req = p.req()
                if all(free[target][r] >= v for r, v in req.items()):
                    for r, v in req.items():
                        free[target][r] -= v
                    p.node = target
                    p.deleting = draw(st.integers(0, 5)) == 0
            g.pods.append(p)
        groups.append(g)
    return Cluster(nodes, queues, groups)


def schedule(cluster: Cluster):
    """One allocate cycle: these are the allocate invariants (the eviction actions have their own)."""
    return kaisched.schedule(cluster.objects(), config={"actions": "allocate"}, now=NOW)


def pod_key(g: GroupSpec, p: PodSpec) -> str:
    return f"{g.ns}/{p.name}"


# --------------------------------------------------------------------------------------- invariants
@SETTINGS
@given(clusters())
def test_no_node_is_over_committed(cluster):
    result = schedule(cluster)
    bound = {b.pod: b.node for b in result.binds}
    used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for g in cluster.groups:
        for p in g.pods:
            where = p.node or bound.get(pod_key(g, p))
            if where is not None:
                for r, v in p.req().items():
                    used[where][r] += v
    for n in cluster.nodes:
        cap = n.capacity()
        for r, v in used[n.name].items():
            assert v <= cap[r] + 1e-6, f"node {n.name} over-committed in {r}: {v} > {cap[r]}"


@SETTINGS
@given(clusters())
def test_only_pending_pods_are_placed_and_only_on_usable_nodes(cluster):
    result = schedule(cluster)
    pending = {pod_key(g, p) for g in cluster.groups for p in g.pods if p.node is None}
    cordoned = {n.name for n in cluster.nodes if n.cordoned}
    bound = [b.pod for b in result.binds]
    piped = [p.pod for p in result.pipelined]
    assert len(bound) == len(set(bound))
    assert not set(bound) & set(piped)
    assert set(bound) | set(piped) <= pending
    assert not {b.node for b in result.binds} & cordoned
    assert not {p.node for p in result.pipelined} & cordoned


@SETTINGS
@given(clusters())
def test_gangs_are_all_or_nothing(cluster):
    result = schedule(cluster)
    bound = {b.pod for b in result.binds}
    piped = {p.pod for p in result.pipelined}
    for g in cluster.groups:
        running = sum(1 for p in g.pods if p.node is not None and not p.deleting)
        new_bound = sum(1 for p in g.pods if pod_key(g, p) in bound)
        new_piped = sum(1 for p in g.pods if pod_key(g, p) in piped)
        if new_bound:
            assert running + new_bound >= g.min_member, f"{g.key}: partial gang bound"
        if new_piped:
            assert running + new_bound + new_piped >= g.min_member, f"{g.key}: partial gang pipelined"


def _queue_usage(
    cluster: Cluster, placed: set[str] | None, *, non_preemptible_only: bool
) -> dict[str, dict[str, float]]:
    """Per queue (summed over its subtree): requests of running pods ('before') or of ``placed`` pods."""
    usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for g in cluster.groups:
        if non_preemptible_only and g.preemptible:
            continue
        for p in g.pods:
            counts = (p.node is not None and not p.deleting) if placed is None else pod_key(g, p) in placed
            if not counts:
                continue
            for q in cluster.ancestors(g.queue):
                for r, v in p.req().items():
                    usage[q][r] += v
    return usage


def _queue_bounds(q: QueueSpec) -> dict[str, tuple[float, float]]:
    """resource -> (deserved, limit) in the scheduler's units; -1 = unbounded."""
    return {"gpu": (q.gpu, q.gpu_limit), "cpu": (-1, q.cpu_limit), "memory": (-1, -1)}


@SETTINGS
@given(clusters())
def test_queue_limits_are_never_exceeded_by_new_work(cluster):
    result = schedule(cluster)
    placed = {b.pod for b in result.binds} | {p.pod for p in result.pipelined}
    before = _queue_usage(cluster, None, non_preemptible_only=False)
    added = _queue_usage(cluster, placed, non_preemptible_only=False)
    for q in cluster.queues:
        for r, (_, limit) in _queue_bounds(q).items():
            if limit == -1 or added[q.name][r] == 0:
                continue
            after = before[q.name][r] + added[q.name][r]
            assert after <= limit + 1e-6, f"queue {q.name} over its {r} limit: {after} > {limit}"


@SETTINGS
@given(clusters())
def test_non_preemptible_work_stays_within_quota(cluster):
    result = schedule(cluster)
    placed = {b.pod for b in result.binds} | {p.pod for p in result.pipelined}
    before = _queue_usage(cluster, None, non_preemptible_only=True)
    added = _queue_usage(cluster, placed, non_preemptible_only=True)
    for q in cluster.queues:
        for r, (deserved, _) in _queue_bounds(q).items():
            if deserved == -1 or added[q.name][r] == 0:
                continue
            after = before[q.name][r] + added[q.name][r]
            assert after <= deserved + 1e-6, f"queue {q.name}: non-preemptible {r} {after} > quota {deserved}"


@SETTINGS
@given(clusters())
def test_work_of_missing_or_non_leaf_queues_is_never_placed(cluster):
    result = schedule(cluster)
    placed = {b.pod for b in result.binds} | {p.pod for p in result.pipelined}
    parents = {q.parent for q in cluster.queues if q.parent}
    existing = {q.name for q in cluster.queues}
    for g in cluster.groups:
        if g.queue in existing and g.queue not in parents:
            continue
        assert not {pod_key(g, p) for p in g.pods} & placed
        if any(p.node is None for p in g.pods):
            st_ = result.pod_group(g.key)
            assert st_ is not None and st_.reason  # Running (gang met) or Pending, but explained


@SETTINGS
@given(clusters())
def test_pending_pod_groups_are_explained(cluster):
    result = schedule(cluster)
    placed = {b.pod for b in result.binds} | {p.pod for p in result.pipelined}
    for g in cluster.groups:
        still_pending = [p for p in g.pods if p.node is None and pod_key(g, p) not in placed]
        st_ = result.pod_group(g.key)
        assert st_ is not None, f"no status for {g.key}"
        if st_.status == "Pending" and still_pending:
            assert st_.reason, f"{g.key} pending without a reason"
            assert st_.message, f"{g.key} pending without a message"


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_deterministic(cluster, rnd: random.Random):
    objs = cluster.objects()
    first = kaisched.schedule(objs, now=NOW).to_dict()
    assert kaisched.schedule(copy.deepcopy(objs), now=NOW).to_dict() == first
    shuffled = list(objs)
    rnd.shuffle(shuffled)
    again = kaisched.schedule(shuffled, now=NOW).to_dict()
    assert again["binds"] == first["binds"]
    assert again["pipelined"] == first["pipelined"]
    assert sorted(again["podGroups"], key=lambda g: g["name"]) == sorted(first["podGroups"], key=lambda g: g["name"])
