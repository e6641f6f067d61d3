"""Batched placement (``kaisched.actions.batched``) decides exactly as placing every task from a fresh evaluation of
every node: on random clusters full of pods alike (gangs and single pods of a few shapes, with node selectors,
tolerations, host ports, anti-affinity, GPU fractions, nominated nodes and terminating pods to pipeline onto), on
random eviction clusters with every action, and on the scale benchmark's cluster two cycles deep: the same binds,
nodes, devices, pipelined pods, evictions and statuses (``CycleResult.to_dict()``), with the kept rankings on and
off (``BATCHING.enabled``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kaisched
from kaisched.actions.allocate import AllocateAction
from kaisched.actions.batched import RankedPlacements, one_at_a_time
from kaisched.framework.result import CycleResult
from kaisched.k8s import constants as C
from tests.property.test_eviction_invariants import ACTION_CONFIGS, Cluster, eviction_clusters
from tests.property.test_eviction_invariants import schedule as schedule_eviction_cluster
from tests.property.test_fast_paths import busy_cluster_decides_alike
from tests.unit.builders import NOW, Obj, node, open_session, pod, pod_group, queue, tiers

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# (GPUs, cores, gpu-fraction or None): few shapes, so that many pods are alike
SHAPES = [(1, 2, None), (1, 2, None), (2, 4, None), (4, 8, None), (0, 2, None), (0, 1, "0.5"), (0, 1, "0.25")]
ZONES = ("a", "b")
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def _with_fraction(obj: Obj, fraction: str | None) -> Obj:
    if fraction is not None:
        obj["metadata"].setdefault("annotations", {})[C.GPU_FRACTION_ANNOTATION] = fraction
    return obj


@st.composite
def alike_clusters(draw: st.DrawFn) -> tuple[list[Obj], dict[str, Any]]:
    """Nodes of a few kinds (zones, a taint, cordoned, GPU-less), some running and terminating pods, and pending
    gangs and single pods drawn from a few shapes, a few with node selectors, tolerations, host ports, anti-affinity
    or a nominated node; the configuration's GPU and CPU strategies drawn too."""
    objs: list[Obj] = []
    queues = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    objs += [queue(q, gpu=draw(st.sampled_from([-1, 2, 8])), gpu_limit=draw(st.sampled_from([-1, -1, 6])))
             for q in queues]
    n_nodes = draw(st.integers(1, 10))
    terminating = draw(st.integers(0, 2)) == 0  # (any pod releasing makes nodeavailability score: no ranking)
    names = [f"n{i:02d}" for i in range(n_nodes)]
    for i, name in enumerate(names):
        kind = draw(st.integers(0, 9))
        objs.append(node(name, gpus=0 if kind == 0 else draw(st.sampled_from([2, 4, 8])),
                         cpu=draw(st.sampled_from([8, 16, 32])), labels={"zone": ZONES[i % 2]},
                         taints=[TAINT] if kind == 1 else (), unschedulable=kind == 2,
                         pods=draw(st.sampled_from([4, 110]))))
        for p in range(draw(st.integers(0, 2))):
            run = f"run-{i}-{p}"
            gpus, cpu, fraction = draw(st.sampled_from(SHAPES))
            objs += [pod_group(run, queue=draw(st.sampled_from(queues))),
                     _with_fraction(pod(run, group=run, gpus=gpus, cpu=cpu, node=name, phase="Running",
                                        tolerations=[TOLERATION], deleting=terminating and draw(st.booleans())),
                                    fraction)]
    for g in range(draw(st.integers(1, 10))):
        name = f"g{g}"
        size = draw(st.sampled_from([1, 1, 1, 2, 3, 6]))
        gpus, cpu, fraction = draw(st.sampled_from(SHAPES))
        extra = draw(st.integers(0, 11))
        objs.append(pod_group(name, queue=draw(st.sampled_from(queues)),
                              min_member=size if draw(st.booleans()) else 1,
                              priority_class=draw(st.sampled_from(["train", "build"]))))
        for k in range(size):
            pending = _with_fraction(pod(
                f"{name}-{k}", group=name, gpus=gpus, cpu=cpu,
                node_selector={"zone": "a"} if extra == 1 else None, tolerations=[TOLERATION] if extra == 2 else (),
                host_port=8080 if extra == 3 else None, affinity=ANTI if extra == 4 else None,
                labels={"app": "spread"} if extra in (4, 5) else None), fraction)
            if extra == 6 and k == 0:
                pending["status"]["nominatedNodeName"] = draw(st.sampled_from(names))
            objs.append(pending)
    config: dict[str, Any] = {"actions": draw(st.sampled_from(["allocate", "allocate", None]))}
    if draw(st.integers(0, 2)) == 0:
        config["tiers"] = tiers(nodeplacement={"gpu": draw(st.sampled_from(["binpack", "spread"])),
                                               "cpu": draw(st.sampled_from(["binpack", "spread"]))})
    if config["actions"] is None:
        del config["actions"]
    return objs, config


def _schedule(objs: list[Obj], config: dict[str, Any]) -> CycleResult:
    return kaisched.schedule(objs, config, now=NOW)


@SETTINGS
@given(alike_clusters())
def test_batched_placement_decides_as_one_at_a_time(case: tuple[list[Obj], dict[str, Any]]) -> None:
    objs, config = case
    batched = _schedule(objs, config)
    with one_at_a_time():
        single = _schedule(objs, config)
    assert batched.to_dict() == single.to_dict()


@SETTINGS
@given(eviction_clusters(), ACTION_CONFIGS)
def test_batched_placement_decides_as_one_at_a_time_in_every_action(cluster: Cluster, actions: str | None) -> None:
    """The eviction actions place (and roll back) through the same placement: their simulations too."""
    batched = schedule_eviction_cluster(cluster, actions)
    with one_at_a_time():
        single = schedule_eviction_cluster(cluster, actions)
    assert batched.to_dict() == single.to_dict()


@pytest.mark.parametrize("nodes", [30, 80])
def test_batched_placement_decides_as_one_at_a_time_on_the_scale_cluster(nodes: int) -> None:
    """Fractions, gangs, thousands of failed fits, two cycles of the five actions."""
    busy_cluster_decides_alike(nodes, one_at_a_time)


def test_tasks_alike_are_answered_from_the_kept_ranking() -> None:
    """Sixteen 1-GPU pods on four 8-GPU nodes, two of them half used: binpack fills the fuller nodes first, every
    pod from the one ranking, and the decisions are those of one-at-a-time placement."""
    objs: list[Obj] = [queue("q")]
    for i in range(4):
        objs.append(node(f"n{i}", gpus=8))
        if i % 2:
            objs += [pod_group(f"run{i}"), pod(f"run{i}", group=f"run{i}", gpus=4, node=f"n{i}")]
    objs += [pod_group(f"p{k}") for k in range(16)]
    objs += [pod(f"p{k}", group=f"p{k}", gpus=1) for k in range(16)]
    ssn = open_session(*objs, config={"actions": "allocate"})
    AllocateAction().execute(ssn)
    index = ssn.placement_index
    assert isinstance(index, RankedPlacements)
    assert index.answered == 16 and len(index.rankings) == 1
    nodes = [ssn.nodes.names[t.node] for t in ssn.binds]
    assert nodes == ["n1"] * 4 + ["n3"] * 4 + ["n0"] * 8
    with one_at_a_time():
        single = _schedule(objs, {"actions": "allocate"})
    assert [b.node for b in single.binds] == nodes


def test_a_dynamic_predicate_sends_the_task_to_a_full_evaluation() -> None:
    """A pod whose host port is taken on some node is not answered from a kept ranking (the ports in use change with
    placements): only the first of three, placed while no node used the port, is."""
    objs: list[Obj] = [queue("q"), node("n0", gpus=8), node("n1", gpus=8)]
    objs += [pod_group(f"p{k}") for k in range(3)]
    objs += [pod(f"p{k}", group=f"p{k}", gpus=1, host_port=9000) for k in range(3)]
    ssn = open_session(*objs, config={"actions": "allocate"})
    AllocateAction().execute(ssn)
    index = ssn.placement_index
    assert isinstance(index, RankedPlacements) and index.answered == 1
    assert sorted(ssn.nodes.names[t.node] for t in ssn.binds) == ["n0", "n1"]


def allocated_alike(objs: list[Obj], *, answered: int) -> dict[str, str]:
    """Pod name -> node of one allocate action on ``objs``, which answered that many tasks from kept rankings and
    decided as one-at-a-time placement does."""
    ssn = open_session(*objs, config={"actions": "allocate"})
    AllocateAction().execute(ssn)
    index = ssn.placement_index
    assert isinstance(index, RankedPlacements) and index.answered == answered
    placed = {t.name: ssn.nodes.names[t.node] for t in ssn.binds}
    with one_at_a_time():
        single = _schedule(objs, {"actions": "allocate"})
    assert {b.pod.split("/")[1]: b.node for b in single.binds} == placed
    return placed


def test_a_ranking_follows_the_nodes_other_shapes_changed() -> None:
    """A 1-GPU pod goes to n0 (equal nodes: the smaller name); two 2-GPU pods that only fit in zone b then fill n1
    with 4 GPUs; the next 1-GPU pod, answered from its ranking kept since the first, must see n1 changed and take it
    (binpack: 4 idle GPUs there, 7 on n0)."""
    objs: list[Obj] = [queue("q"), node("n0", gpus=8, labels={"zone": "a"}), node("n1", gpus=8, labels={"zone": "b"})]
    objs += [pod_group("a0", created="2025-01-01T10:00:00Z"), pod("a0", group="a0", gpus=1)]
    objs += [pod_group("b", min_member=2, created="2025-01-01T10:00:01Z")]
    objs += [pod(f"b{k}", group="b", gpus=2, node_selector={"zone": "b"}) for k in range(2)]
    objs += [pod_group("a1", created="2025-01-01T10:00:02Z"), pod("a1", group="a1", gpus=1)]
    placed = allocated_alike(objs, answered=4)
    assert placed == {"a0": "n0", "b0": "n1", "b1": "n1", "a1": "n1"}


def test_fractions_rank_by_the_shared_devices_with_room_first() -> None:
    """gpusharingorder's +1000 on nodes with a shared device that has room outranks binpack: the ranking of the
    0.5-GPU pods keeps that tier up to date. Two of them fill a device on n1 (fewer idle GPUs), a 0.5-GPU pod bound to
    zone a opens one on n0; the third pod alike must go to n0, where a device has room, though n1 has fewer idle
    GPUs."""
    objs: list[Obj] = [queue("q"), node("n0", gpus=8, labels={"zone": "a"}), node("n1", gpus=8, labels={"zone": "b"}),
                       pod_group("run"), pod("run", group="run", gpus=4, node="n1")]
    for k, (name, selector) in enumerate([("f1", None), ("f2", None), ("s", {"zone": "a"}), ("f3", None)]):
        objs += [pod_group(name, created=f"2025-01-01T10:00:0{k}Z"),
                 _with_fraction(pod(name, group=name, cpu=1, node_selector=selector), "0.5")]
    placed = allocated_alike(objs, answered=4)
    assert placed == {"f1": "n1", "f2": "n1", "s": "n0", "f3": "n0"}
