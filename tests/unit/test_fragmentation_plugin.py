"""The gpufragmentation plugin (kaisched.plugins.fragmentation) on hand-computed cases: the measure, the node it
picks against binpack's, a GPU stranded without CPU, its configuration errors, and the shipped config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import kaisched
from kaisched.framework.config import ConfigError
from kaisched.plugins.fragmentation import FragmentationPlugin, Workload, fragmentation
from tests.unit.builders import NOW, node, pod, pod_group, queue, tiers

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "config" / "fragmentation-aware.yaml"


def _config(**arguments: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {"actions": "allocate", "tiers": tiers()}
    plugins = [p for p in cfg["tiers"][0]["plugins"] if p["name"] != "gpusharingorder"]
    plugins.append({"name": "gpufragmentation", "arguments": arguments})
    cfg["tiers"][0]["plugins"] = plugins
    return cfg


def _job(name: str, gpus: int, node_name: str | None = None, cpu: object = 1) -> list[dict[str, Any]]:
    return [pod_group(name, queue="q"), pod(f"{name}-0", group=name, gpus=gpus, cpu=cpu, node=node_name)]


def test_the_measure_counts_what_the_workload_cannot_use() -> None:
    # one node: a device with 0.3 free and a whole free one, 8 cores; another: two devices with 0.6, no CPU left
    w = Workload(np.asarray([1000.0, 1000.0]), np.zeros(2), np.asarray([1.0, 1.0]), np.asarray([0.5, 1.0]),
                 np.asarray([0.5, 0.5]))
    free = np.asarray([[0.3, 1.0], [0.6, 0.6]])
    frag = fragmentation(np.asarray([8000.0, 0.0]), np.asarray([1e12, 1e12]), free, w)
    # node 0: both shapes fit and 0.3 is too small for both -> 0.3; node 1: no CPU, all 1.2 for both -> 1.2
    assert frag.tolist() == pytest.approx([0.3, 1.2])


def test_a_states_measure_does_not_depend_on_the_states_figured_with_it() -> None:
    # the plugin figures a node's state alone, with other nodes' or with candidate states of the same node, and
    # keeps what it figured: one state, one number (a matrix product's blocking would change the last bits)
    rng = np.random.default_rng(7)
    shapes = 23
    w = Workload(rng.uniform(0, 8000, shapes), rng.uniform(0, 1e11, shapes), rng.integers(1, 3, shapes).astype(float),
                 rng.uniform(0.05, 1.0, shapes), rng.dirichlet(np.ones(shapes)))
    free = np.where(rng.random((64, 8)) < 0.1, -1.0, rng.random((64, 8)))
    cpu, memory = rng.uniform(0, 16000, 64), rng.uniform(0, 2e11, 64)
    together = fragmentation(cpu, memory, free, w)
    for i in range(64):
        alone = fragmentation(cpu[i:i + 1], memory[i:i + 1], free[i:i + 1], w)
        assert alone[0] == together[i]  # exactly
        assert fragmentation(cpu[i:i + 5], memory[i:i + 5], free[i:i + 5], w)[0] == together[i]


def _binds(objs: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, str]:
    return {b.pod: b.node for b in kaisched.schedule(objs, config=config, now=NOW).binds}


BINPACK: dict[str, Any] = {"actions": "allocate", "tiers": tiers()}


def test_a_single_gpu_pod_keeps_room_for_the_two_gpu_pods_the_cluster_runs() -> None:
    # a: 4 GPUs, 1 used (3 free); b: 2 free; c: full with a 2-GPU pod. binpack takes b (fewest free) and leaves
    # it 1 GPU no 2-GPU pod can use; a 1-GPU pod on a leaves 2 free there, which every shape of the workload (1- and
    # 2-GPU pods) can use: no fragment either way on a, a third of b's GPU on b
    objs = [node("a", gpus=4), node("b", gpus=2), node("c", gpus=2), queue("q"),
            *_job("run0", 1, "a"), *_job("big", 2, "c"), *_job("small", 1)]
    assert _binds(objs, BINPACK) == {"default/small-0": "b"}
    assert _binds(objs, _config()) == {"default/small-0": "a"}
    shipped = yaml.safe_load(CONFIG.read_text())  # the paper's scale, best fit within a step: the same here
    assert _binds(objs, shipped) == {"default/small-0": "a"}


def test_best_fit_breaks_the_ties_of_the_coarse_scale() -> None:
    # a and b: 4 free GPUs each, a with 4 cores left, b with 60. The workload is 1-GPU pods of 2 cores: a 1-GPU pod
    # strands nothing on either (the same step), and best fit takes a, where less is left; without it, the first by
    # name (a too), so name b the tight one
    objs = [node("b", gpus=4, cpu=8), node("a", gpus=4, cpu=64), queue("q"),
            pod_group("r", queue="q"), pod("r-0", group="r", gpus=0, cpu=4, node="b"),
            *_job("one", 1, cpu=2)]
    assert _binds(objs, _config(resolution="1")) == {"default/one-0": "b"}
    assert _binds(objs, _config(resolution="1", tieBreak="none")) == {"default/one-0": "a"}


def test_a_gpu_without_the_memory_to_drive_it_counts_as_stranded() -> None:
    # a: 1 GPU, 16 cores and 1Gi free (its GPU already stranded: the workload's GPU pods ask 8Gi or 15Gi); b: 1 GPU,
    # 6 cores, 56Gi free. A 3-core CPU pod: binpack by CPU takes b (fewest cores free), leaving b 3 cores, fewer than
    # the 4 the GPU pods ask: b's GPU stranded too. The fragmentation-aware choice is a, whose GPU is lost already.
    objs = [node("a", gpus=2, cpu=20, memory="16Gi"), node("b", gpus=2, cpu=10, memory="64Gi"), queue("q"),
            pod_group("g0", queue="q"), pod("g0-0", group="g0", gpus=1, cpu=4, memory="15Gi", node="a"),
            pod_group("g1", queue="q"), pod("g1-0", group="g1", gpus=1, cpu=4, memory="8Gi", node="b"),
            pod_group("cpu", queue="q"), pod("cpu-0", group="cpu", gpus=0, cpu=3, memory="512Mi")]
    assert _binds(objs, BINPACK) == {"default/cpu-0": "b"}
    assert _binds(objs, _config()) == {"default/cpu-0": "a"}


def test_without_gpu_pods_every_node_is_alike_and_binpack_decides() -> None:
    objs = [node("a", gpus=2, cpu=8), node("b", gpus=2, cpu=4), queue("q"),
            pod_group("cpu", queue="q"), pod("cpu-0", group="cpu", gpus=0, cpu=2)]
    assert _binds(objs, _config()) == _binds(objs, BINPACK) == {"default/cpu-0": "b"}


@pytest.mark.parametrize(("arguments", "message"), [
    ({"weight": "heavy"}, "argument weight: expected a number, got 'heavy'"),
    ({"weight": "-1"}, "argument weight: expected a number >= 0"),
    ({"halfLife": "soon"}, "argument halfLife: expected a duration such as 24h, got 'soon'"),
    ({"halfLife": "-1h"}, "argument halfLife: expected a duration > 0"),
    ({"resolution": "fine"}, "argument resolution: expected a number"),
    ({"tieBreak": "random"}, "argument tieBreak: expected bestfit or none, got 'random'"),
    ({"devices": "first"}, "argument devices: expected fragmentation or gpupack, got 'first'"),
])
def test_bad_arguments_are_configuration_errors_naming_the_argument(arguments: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FragmentationPlugin(arguments)


def test_the_shipped_config_loads_and_turns_the_plugin_on() -> None:
    raw = yaml.safe_load(CONFIG.read_text())
    names = [p["name"] for p in raw["tiers"][0]["plugins"]]
    assert "gpufragmentation" in names and "gpusharingorder" not in names
    objs = [node("a", gpus=4), node("b", gpus=2), queue("q"), *_job("run0", 1, "a"), *_job("x", 2)]
    first = kaisched.schedule(objs, config=raw, now=NOW)
    again = kaisched.schedule(objs, config=raw, now=NOW)
    assert [(b.pod, b.node) for b in first.binds] == [(b.pod, b.node) for b in again.binds]  # deterministic
    assert len(first.binds) == 1


def _share(name: str, portion: str, node_name: str | None = None, group: str | None = None) -> list[dict[str, Any]]:
    """A single-pod job asking ``portion`` of a GPU; placed on ``node_name``'s device ``group`` when given."""
    p = pod(f"{name}-0", group=name, gpus=0, node=node_name)
    p["metadata"].setdefault("annotations", {})["gpu-fraction"] = portion
    if group is not None:
        p["metadata"].setdefault("labels", {})["runai-gpu-group"] = group
    return [pod_group(name, queue="q"), p]


def _devices(objs: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {b.pod: (b.node, b.gpu_groups) for b in kaisched.schedule(objs, config=config, now=NOW).binds}


def test_a_share_goes_to_the_device_that_fragments_least_not_the_fullest() -> None:
    # node a: device ga holds two 0.3 pods (0.4 free), gb one (0.7 free); node c: two devices each with two 0.4 pods
    # (0.2 free). The workload: 0.3 and 0.4 shares, half each. A 0.3 pod fits on a only. gpupack takes the fullest
    # device, ga, leaving 0.1 + 0.7: 0.1 of a GPU no pod can use; on gb it leaves 0.4 + 0.4, which both shapes use
    objs = [node("a", gpus=2), node("c", gpus=2), queue("q"),
            *_share("x1", "0.3", "a", "ga"), *_share("x2", "0.3", "a", "ga"), *_share("y1", "0.3", "a", "gb"),
            *_share("c1", "0.4", "c", "gc1"), *_share("c2", "0.4", "c", "gc1"),
            *_share("c3", "0.4", "c", "gc2"), *_share("c4", "0.4", "c", "gc2"), *_share("new", "0.3")]
    assert _devices(objs, BINPACK) == {"default/new-0": ("a", ("ga",))}
    assert _devices(objs, _config()) == {"default/new-0": ("a", ("gb",))}
    assert _devices(objs, yaml.safe_load(CONFIG.read_text())) == {"default/new-0": ("a", ("gb",))}
    # devices: gpupack keeps gpupack's device (the node's score too)
    assert _devices(objs, _config(devices="gpupack")) == {"default/new-0": ("a", ("ga",))}


def test_a_device_tie_goes_to_the_fullest_device() -> None:
    # every device choice strands nothing (the workload: 0.1 shares only): gpupack's fullest device, ga, decides
    objs = [node("a", gpus=2), queue("q"), *_share("x1", "0.1", "a", "ga"), *_share("x2", "0.1", "a", "ga"),
            *_share("y1", "0.1", "a", "gb"), *_share("new", "0.1")]
    assert _devices(objs, _config()) == {"default/new-0": ("a", ("ga",))}
