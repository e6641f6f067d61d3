"""The OpenB placement experiment: workload inflation and order, one cycle == one pod per cycle, determinism."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from kaisched.sim import openb as O
from kaisched.sim.traces import OpenBPod, openb_nodes, read_openb_pods

OPENB = Path("/work/shared/traces/openb")

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,2,P100
n1,64000,262144,8,G2
n2,16000,65536,4,T4
n3,96000,393216,8,V100M32
n4,8000,65536,1,T4
n5,64000,262144,8,G2
n6,32000,131072,2,P100
"""


def pods_csv(n: int, seed: int) -> str:
    """``n`` OpenB-like rows: fractions, whole GPUs (1-8), CPU-only pods, some constrained to GPU models."""
    rng = random.Random(seed)
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
             "scheduled_time"]
    for i in range(n):
        kind = rng.random()
        if kind < 0.45:
            num, milli = 1, rng.choice([110, 230, 320, 470, 500, 650, 810])
        elif kind < 0.85:
            num, milli = rng.choice([1, 1, 1, 2, 4, 8]), 1000
        else:
            num, milli = 0, 0
        spec = rng.choice(["", "", "", "T4", "P100|V100M32", "G2"]) if num else ""
        cpu = rng.choice([1000, 2000, 4000, 8000, 12000])
        lines.append(f"p{i:03d},{cpu},{cpu * 4 // 1000 * 1024},{num},{milli},{spec},BE,Running,{i},{i + 100},{i}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def small(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    pods = tmp_path / "pods.csv"
    pods.write_text(pods_csv(80, 2))
    return pods, nodes


def pod(name: str, gpus: float) -> OpenBPod:
    return OpenBPod(name, 2, 1000, 1024, gpus, (), "BE", "Running", 0.0, 1.0, 0.0)


def test_arrival_order_shuffles_the_list_then_appends_clones_up_to_130_percent():
    pods = [pod(f"p{i}", g) for i, g in enumerate([1, 0.5, 0, 2, 0.25, 1])]  # 4.75 GPUs
    capacity = 10_000
    order = O.arrival_order(pods, capacity, 42)
    assert sorted(p.name for p in order[:6]) == sorted(p.name for p in pods)  # the whole list first, shuffled
    assert order[:6] != pods
    asked = sum(p.gpu_milli for p in order)
    assert asked <= 13_000 and asked + min(p.gpu_milli for p in pods if p.gpu_milli) > 13_000 - 2000
    assert O.arrival_order(pods, capacity, 42) == order
    assert O.arrival_order(pods, capacity, 43) != order
    prefix = O.arrived_prefix(order, capacity)
    assert sum(p.gpu_milli for p in prefix) >= capacity > sum(p.gpu_milli for p in prefix[:-1])
    assert prefix == order[:len(prefix)]
    # a list that already asks for more than 130 % is only shuffled
    big = [pod(f"b{i}", 8) for i in range(3)]
    assert sorted(p.name for p in O.arrival_order(big, 10_000, 1)) == ["b0", "b1", "b2"]
    assert O.arrival_order([pod("cpu", 0)], 10_000, 1) == [pod("cpu", 0)]  # no GPU asked: no endless drawing


def test_the_tie_order_renames_nodes_by_their_rank_and_differs_per_seed():
    nodes = [{"metadata": {"name": f"node-{i}"}} for i in range(12)]
    ranked = O.ranked_nodes(nodes, 42)
    assert sorted(int(n["metadata"]["name"][1:3]) for n in ranked) == list(range(12))
    assert [n["metadata"]["name"].split("-", 1)[1] for n in ranked] == [f"node-{i}" for i in range(12)]
    assert O.node_tie_order(12, 42) != O.node_tie_order(12, 43)


def test_the_curve_reads_the_samples_that_round_to_each_point():
    arrived = [0.30, 0.495, 0.5, 0.504, 0.7, 1.2]
    allocated = [0.30, 0.40, 0.50, 0.60, 0.65, 0.9]
    points = O.curve(arrived, allocated, (50, 60, 100, 130))
    assert points[50] == pytest.approx(0.5)  # 0.495 rounds to 50 too (banker's rounding: 49.5 -> 50)
    assert points[60] == pytest.approx(0.65)  # no sample rounds to 60: the first that reaches it
    assert points[100] == pytest.approx(0.9)
    assert math.isnan(points[130])


@pytest.mark.parametrize("config", [None, O.placement_config("spread")], ids=["binpack", "spread"])
@pytest.mark.parametrize("seed", [42, 7])
def test_one_cycle_equals_one_pod_per_cycle(small, config, seed):
    """The implementation's shortcut: one allocate cycle over the arrived pods places them exactly as
    arriving one per cycle does (same nodes, same sharing of GPUs), dropping the same pods."""
    pods_path, nodes_path = small
    nodes = openb_nodes(nodes_path)
    pods = read_openb_pods(pods_path)
    capacity = 33_000
    arrivals = O.arrived_prefix(O.arrival_order(pods, capacity, seed), capacity, read_at=1.3)
    at_once = O.one_cycle_binds(nodes, arrivals, config)
    one_by_one = O.sequential_binds(nodes, arrivals, config)
    assert at_once == one_by_one
    assert 0 < len(at_once) < len(arrivals)  # some pods dropped, so the case means something
    assert any(groups for _, groups in at_once.values())  # and some GPUs are shared
    assert any(i for i, (_, groups) in at_once.items() if groups and groups[0] != i)  # joined an existing GPU


def test_experiment_on_small_files_is_deterministic(small):
    pods_path, nodes_path = small
    first = O.run_openb_experiment(pods_path, nodes_path, seeds=[42, 43, 44])
    again = O.run_openb_experiment(pods_path, nodes_path, seeds=[42, 43, 44])
    assert first.ratios == again.ratios
    assert (first.nodes, first.gpus) == (7, 33)
    assert [s.seed for s in first.seeds] == [42, 43, 44]
    for s in first.seeds:
        assert 0 < s.ratio <= 1
        assert s.placed + s.dropped == s.arrived
        assert s.requested_milli >= 33_000
        assert s.ratio == s.curve[100]
        assert s.allocated_milli <= s.requested_milli
    assert first.mean_ratio == pytest.approx(sum(first.ratios) / 3)
    assert first.pods_arrived == sum(s.arrived for s in first.seeds)
    text = first.format()
    assert "mean" in text and f"{first.mean_ratio:.2%}" in text
    spread = O.run_openb_experiment(pods_path, nodes_path, O.placement_config("spread"), seeds=[42])
    assert spread.seeds[0].arrived == first.seeds[0].arrived  # same workload, other placement


def test_placement_config():
    cfg = O.placement_config("spread")
    plugins = [p["name"] for p in cfg["tiers"][0]["plugins"]]
    assert "gpuspread" in plugins and "gpupack" not in plugins
    placement = next(p for p in cfg["tiers"][0]["plugins"] if p["name"] == "nodeplacement")
    assert placement["arguments"] == {"gpu": "spread", "cpu": "binpack"}
    assert "gpupack" in [p["name"] for p in O.placement_config()["tiers"][0]["plugins"]]


@pytest.mark.skipif(not OPENB.exists(), reason="OpenB trace not available")
def test_openb_experiment_real_trace_one_seed():
    result = O.run_openb_experiment(OPENB / "openb_pod_list_default.csv", OPENB / "openb_node_list_gpu_node.csv",
                                    seeds=[42])
    (s,) = result.seeds
    assert (result.nodes, result.gpus) == (1213, 6212)
    assert 0.8 < s.ratio < 1.0
    assert s.requested_milli >= 6_212_000
    assert s.arrived > 8000


@pytest.mark.skipif(not OPENB.exists(), reason="OpenB trace not available")
def test_one_cycle_equals_one_pod_per_cycle_on_real_rows():
    """The same on 20 real nodes and the real pods of the GPU-model-constrained list (gpuspec33)."""
    nodes = random.Random(3).sample(openb_nodes(OPENB / "openb_node_list_gpu_node.csv"), 20)
    pods = read_openb_pods(OPENB / "openb_pod_list_gpuspec33.csv")
    capacity = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) * 1000
    arrivals = O.arrived_prefix(O.arrival_order(pods, capacity, 42), capacity, read_at=1.2)
    assert any(p.models for p in arrivals)
    for config in (None, O.placement_config("spread")):
        at_once = O.one_cycle_binds(nodes, arrivals, config)
        assert at_once == O.sequential_binds(nodes, arrivals, config)
        assert len(at_once) < len(arrivals)
