"""The reference placements of the OpenB harness (benchmarks/openb_reference.py) on hand-computed cases: the
fragmentation measure, FGD's and Best-fit's choices, the paper's workload order and the curve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from benchmarks.openb_reference import (
    Placer,
    ReferenceCluster,
    Shape,
    fragmentation,
    typical_shapes,
)

from kaisched.sim.openb import arrival_order, curve
from kaisched.sim.traces import OpenBPod


def _pod(name: str, gpus: float, cpu: int = 1000, models: tuple[str, ...] = ()) -> OpenBPod:
    return OpenBPod(name=name, line=1, cpu_milli=cpu, memory_mib=1024, gpus=gpus, models=models, qos="", phase="",
                    creation=None, deletion=None, scheduled=None)


def _typical(cluster: ReferenceCluster, *shapes: tuple[Shape, float]) -> list[tuple[Shape, float, np.ndarray]]:
    return [(s, f, np.asarray([not s.models or m in s.models for m in cluster.model_names])) for s, f in shapes]


def test_fragmentation_counts_the_idle_gpu_a_typical_pod_cannot_use() -> None:
    # node 0: GPUs with 300 and 1000 milli left, 8 cores; node 1: 600 and 600 left, no CPU left
    c = ReferenceCluster([8000, 0], [1 << 20, 1 << 20], [2, 2], ["T4", "T4"])
    c.gpu[0] = [300, 1000]
    c.gpu[1] = [600, 600]
    half = Shape(1000, 0, 1, 500, ())
    whole = Shape(1000, 0, 1, 1000, ())
    frag = fragmentation(c.cpu, c.gpu, c.model_index, _typical(c, (half, 0.5), (whole, 0.5)))
    # node 0: half fits (300 too small: 300); whole fits (300 too small: 300) -> 300
    # node 1: nothing fits (no CPU): all 1200 idle, for both shapes -> 1200
    assert frag.tolist() == [300.0, 1200.0]


def test_a_model_the_shape_does_not_accept_makes_all_idle_gpu_a_fragment() -> None:
    c = ReferenceCluster([8000], [1 << 20], [2], ["P100"])
    frag = fragmentation(c.cpu, c.gpu, c.model_index, _typical(c, (Shape(1000, 0, 1, 500, ("T4",)), 1.0)))
    assert frag.tolist() == [2000.0]


def test_fgd_puts_a_share_where_it_fragments_least() -> None:
    # two nodes; node 0 has a GPU with 500 left, node 1 only whole GPUs: a 500 share fills node 0's half GPU (no
    # fragment either way for the 500 shape, but a whole-GPU pod would lose a GPU on node 1)
    c = ReferenceCluster([8000, 8000], [1 << 20] * 2, [2, 2], ["T4", "T4"])
    c.gpu[0] = [500, 0]
    typical = [(Shape(1000, 0, 1, 500, ()), 0.5), (Shape(1000, 0, 1, 1000, ()), 0.5)]
    placer = Placer(c, "fgd", np.asarray([1, 0]), typical)  # (ranks: ties would go to node 1 first)
    assert placer.place(Shape(1000, 0, 1, 500, ())) == 0
    assert c.gpu[0].tolist() == [0.0, 0.0]


def test_bestfit_takes_the_fullest_node_and_drops_what_fits_nowhere() -> None:
    c = ReferenceCluster([8000, 8000], [1 << 20] * 2, [4, 2], ["T4", "T4"])
    placer = Placer(c, "bestfit", np.asarray([0, 1]))
    assert placer.place(Shape(1000, 0, 1, 1000, ())) == 1  # 1 GPU left on node 1 against 3 on node 0
    assert placer.place(Shape(1000, 0, 2, 1000, ())) == 0
    assert placer.place(Shape(1000, 0, 4, 1000, ())) is None


def test_the_paper_order_shuffles_the_originals_then_appends_clones_up_to_130_percent() -> None:
    pods = [_pod(f"p{i}", 1) for i in range(10)]
    order = arrival_order(pods, 10_000, 42)
    assert sorted(p.name for p in order[:10]) == [p.name for p in pods]
    assert order[:10] != pods  # shuffled
    assert sum(p.gpu_milli for p in order) == 13_000  # the next clone would pass 130 %
    assert arrival_order(pods, 10_000, 42) == order
    assert arrival_order(pods, 10_000, 43) != order


def test_the_curve_averages_the_samples_that_round_to_each_point() -> None:
    points = curve([0.494, 0.5, 0.504, 0.506, 1.0], [0.4, 0.5, 0.6, 0.9, 0.8], points=(50, 51, 100, 70))
    assert points[50] == pytest.approx(0.55)  # 0.5 and 0.504 (0.494 rounds to 49)
    assert points[51] == pytest.approx(0.9)
    assert points[100] == pytest.approx(0.8)
    assert points[70] == pytest.approx(0.8)  # none rounds to 70: the first sample that reaches it
    assert math.isnan(curve([0.5], [0.4], points=(70,))[70])  # none reaches it


def test_typical_shapes_cover_the_popular_gpu_pods_renormalised() -> None:
    pods = [_pod("a", 1)] * 6 + [_pod("b", 0.5)] * 3 + [_pod("c", 2)] + [_pod("cpu", 0)] * 5
    shapes = typical_shapes(pods, popularity=0.85)
    assert [(s.num, s.milli) for s, _ in shapes] == [(1, 1000), (1, 500)]
    assert [f for _, f in shapes] == pytest.approx([6 / 9, 3 / 9])
