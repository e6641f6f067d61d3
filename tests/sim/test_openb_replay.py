"""The dynamic OpenB replay (issue 26): a scenario's ``cluster.node_list``, the trace's ``arrival_scale``, stranded
GPUs by cause (kaisched.sim.metrics.stranded) and the shipped example scenario, compared with
``--compare-config``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.framework.result import NodeGpuStatus, SharedGpuStatus
from kaisched.sim import load_scenario, simulate
from kaisched.sim.metrics import stranded
from kaisched.sim.scenario import ScenarioError, scenario_from_mapping

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "simulation" / "openb-replay.yaml"
AWARE = ROOT / "examples" / "config" / "fragmentation-aware.yaml"
OPENB = Path("/work/shared/traces/openb")

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,8000,65536,2,T4
n1,4000,32768,2,T4
cpu0,16000,65536,0,
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,2000,4096,1,500,,BE,Running,0,7200,0
p1,2000,4096,1,500,,BE,Running,3600,10800,3600
p2,1000,2048,1,1000,,BE,Running,7200,9000,7200
"""
QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}}}


def _scenario(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    doc: dict[str, Any] = {
        "name": "mini-openb", "period": "60s",
        "cluster": {"node_list": {"format": "openb", "path": "nodes.csv"}, "objects": [QUEUE]},
        "workload": {"trace": {"format": "openb", "path": "pods.csv", "queue": "q"}},
    }
    doc.update(overrides)
    return doc


def test_a_node_list_gives_the_gpu_nodes_and_limit_takes_the_first(tmp_path: Path) -> None:
    sc = scenario_from_mapping(_scenario(tmp_path), tmp_path)
    assert [o["metadata"]["name"] for o in sc.cluster if o["kind"] == "Node"] == ["n0", "n1"]
    doc = _scenario(tmp_path)
    doc["cluster"]["node_list"].update(limit=1, gpu_only=False)
    sc = scenario_from_mapping(doc, tmp_path)
    assert [o["metadata"]["name"] for o in sc.cluster if o["kind"] == "Node"] == ["n0"]


@pytest.mark.parametrize(("node_list", "message"), [
    ({"format": "csv", "path": "nodes.csv"}, "cluster.node_list.format: expected openb, got 'csv'"),
    ({"format": "openb"}, "cluster.node_list.path: the node list file is required"),
    ({"path": "nodes.csv", "limit": 0}, "cluster.node_list.limit: expected an integer >= 1, got 0"),
    ({"path": "nodes.csv", "gpu_only": "yes"}, "cluster.node_list.gpu_only: expected true or false, got 'yes'"),
    ({"path": "nodes.csv", "zone": "a"}, "cluster.node_list.zone: unknown field"),
    ({"path": "missing.csv"}, "cluster.node_list: file .*missing.csv: cannot read"),
])
def test_a_bad_node_list_names_its_field(tmp_path: Path, node_list: dict[str, Any], message: str) -> None:
    doc = _scenario(tmp_path)
    doc["cluster"]["node_list"] = node_list
    with pytest.raises(ScenarioError, match=message):
        scenario_from_mapping(doc, tmp_path)


def test_arrival_scale_compresses_the_arrivals_and_keeps_the_durations(tmp_path: Path) -> None:
    doc = _scenario(tmp_path)
    doc["workload"]["trace"]["arrival_scale"] = 0.001
    sc = scenario_from_mapping(doc, tmp_path)
    assert [(a.time, a.duration) for a in sc.arrivals] == [(0.0, 7200.0), (3.6, 7200.0), (7.2, 1800.0)]
    doc["workload"]["trace"]["arrival_scale"] = -1
    with pytest.raises(ScenarioError, match=r"workload\.trace: arrival_scale must be a number > 0, got -1"):
        scenario_from_mapping(doc, tmp_path)


def test_stranded_gpus_by_cause() -> None:
    share = SharedGpuStatus("g", 16384.0, 12288.0, 0.0, ("a/p",))  # a quarter free
    nodes = [
        NodeGpuStatus("no-cpu", 2, 1, 0, (), (share,), cpu_idle=500.0, memory_idle=64e9),  # 1.25 GPU, no CPU
        NodeGpuStatus("no-mem", 2, 2, 0, (), (), cpu_idle=8000.0, memory_idle=1e9),  # 2 GPUs, no memory
        NodeGpuStatus("sliver", 2, 1, 0, (), (share,), cpu_idle=8000.0, memory_idle=64e9),  # 0.25 sliver, 1 usable
        NodeGpuStatus("cpu-node", 0, 0, 0, (), (), cpu_idle=0.0, memory_idle=0.0),
    ]
    assert stranded(nodes, 1000.0, 2e9) == pytest.approx((1.25, 2.0, 0.25))
    assert stranded(nodes, 0.0, 0.0) == pytest.approx((0.0, 0.0, 0.5))  # no GPU pod seen: only slivers


def test_the_simulator_reports_stranded_gpus(tmp_path: Path) -> None:
    # p0 (half a GPU) runs alone on its shared GPU for an hour: the other half is a sliver meanwhile
    result = simulate(scenario_from_mapping(_scenario(tmp_path), tmp_path))
    s = result.summary
    assert s.completed == 3
    assert s.stranded_slivers_mean > 0
    assert all(x.stranded_no_cpu >= 0 and x.stranded_slivers >= 0 for x in result.samples)


@pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").exists(), reason="no OpenB trace")
def test_the_example_replay_loads_with_its_documented_window() -> None:
    sc = load_scenario(EXAMPLE)
    nodes = [o for o in sc.cluster if o["kind"] == "Node"]
    assert len(nodes) == 300 and sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) == 1607
    assert len(sc.arrivals) == 8152 and not sc.dropped and sc.until == 8 * 3600
    assert max(a.time for a in sc.arrivals) < 3.6 * 3600


@pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").exists(), reason="no OpenB trace")
def test_the_example_replay_compares_kai_default_and_fragmentation_aware(tmp_path: Path) -> None:
    # the example's 300 earliest pods on its first 50 nodes: both policies in one run, side by side
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["workload"]["trace"]["limit"] = 300
    doc["cluster"]["node_list"]["limit"] = 50
    doc["impossible_jobs"] = "drop"
    small = tmp_path / "replay.yaml"
    doc["cluster"]["node_list"]["path"] = str(OPENB / "openb_node_list_gpu_node.csv")
    doc["workload"]["trace"]["path"] = str(OPENB / "openb_pod_list_default.csv")
    small.write_text(yaml.safe_dump(doc))
    out = tmp_path / "cmp"
    run = CliRunner().invoke(cli, ["simulate", str(small), "--compare-config", str(AWARE), "-o", str(out)])
    assert run.exit_code == 0, run.output
    compared = json.loads((out / "compare.json").read_text())
    assert compared["labels"] == ["kai-default", "fragmentation-aware"]
    keys = {m["key"] for m in compared["metrics"]}
    assert {"stranded_no_cpu", "stranded_no_memory", "stranded_slivers", "wait_mean", "gpu_allocation_mean"} <= keys
    assert "stranded GPUs: no CPU" in run.stdout
