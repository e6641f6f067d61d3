"""The same snapshots replayed by KAI Scheduler's own snapshot-tool and by ``kaisched replay``, the decisions compared
line by line (``--diff``): KAI's tool reads the snapshots kaisched reads (hand-built in KAI's v0.13 and v0.17
shapes) and the ones kaisched writes (its ``/get-snapshot``), and decides the same, node for node.

Needs KAI's snapshot-tool, built by ``scripts/kai-snapshot-tool.sh`` (``KAISCHED_KAI_VERSION``, v0.17.0 by
default; ``$KAISCHED_KAI_SNAPSHOT_TOOL`` names another binary); skipped, saying how, when it is absent."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kaisched.cluster.kai_log import compare, cycle_decisions, read_kai_log
from kaisched.cluster.replay import load_replay, run_replay, snapshot_zip
from kaisched.cluster.schedule import resolve_config
from tests.unit import kai_snapshots as K

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def snapshot_tool() -> str:
    explicit = os.environ.get("KAISCHED_KAI_SNAPSHOT_TOOL")
    if explicit:
        return explicit
    out = subprocess.run([str(ROOT / "scripts" / "kai-snapshot-tool.sh"), "path"], capture_output=True, text=True,
                         timeout=30, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.skip("KAI's snapshot-tool is not built: run scripts/kai-snapshot-tool.sh (KAISCHED_KAI_SOURCE=<a KAI "
                    "git repository> when the Go module proxy does not serve KAI) to compare with KAI")
    return out.stdout.strip()


def kai_vs_kaisched(tool: str, path: Path) -> Any:
    """KAI's log of ``path`` (verbosity 6: the nodes too) against kaisched's replay of it."""
    run = subprocess.run([tool, "--filename", str(path), "--verbosity", "6"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    log = read_kai_log(run.stdout + run.stderr)
    return compare(log.decisions, cycle_decisions(run_replay(load_replay(path), NOW)))


def reclaim_objects() -> dict[str, list[dict[str, Any]]]:
    """One 8-GPU node full of team-b's 2-GPU pods (team-b has no quota); team-a's 4-GPU pod waits: a reclaim."""
    objects: dict[str, list[dict[str, Any]]] = {
        "nodes": [K.node("node-0")],
        "queues": [K.queue("root", 8), K.queue("team-a", 8, "root"), K.queue("team-b", 0, "root")],
        "podGroups": [K.pod_group("a", "team-a", 1)], "pods": [K.pod("a-0", "team-a", 4, group="a")]}
    for i in range(4):
        objects["podGroups"].append(K.pod_group(f"b{i}", "team-b", 1))
        objects["pods"].append(K.pod(f"b{i}-0", "team-b", 2, group=f"b{i}", node_name="node-0", phase="Running",
                                     created=f"2026-01-01T00:0{i}:00Z"))
    return objects


@pytest.mark.parametrize("name", ["snapshot", "gang"])
def test_the_examples_decide_the_same(snapshot_tool: str, name: str) -> None:
    diff = kai_vs_kaisched(snapshot_tool, ROOT / "examples" / "kai" / f"{name}.zip")
    assert diff.identical and diff.same, "\n".join(diff.lines())


@pytest.mark.parametrize("version", ["v0.13", "v0.17"])
@pytest.mark.parametrize("shape", ["gang", "reclaim"])
def test_hand_built_shapes_decide_the_same(snapshot_tool: str, tmp_path: Path, version: str, shape: str) -> None:
    objects = K.cluster() if shape == "gang" else reclaim_objects()
    config = None if version == "v0.17" else {"actions": K.ACTIONS, "tiers": K.TIERS_V017}  # v0.17's tool needs the
    path = tmp_path / "snapshot.zip"  # generators to evict; the v0.13 shape is otherwise the same JSON
    path.write_bytes(K.snapshot(version, objects=objects, config=config))
    diff = kai_vs_kaisched(snapshot_tool, path)
    assert diff.identical and diff.same, "\n".join(diff.lines())
    if shape == "reclaim":
        assert {d.action for d in diff.same} == {"evict", "pipeline"}


@pytest.mark.parametrize("shape", ["gang", "reclaim"])
def test_kaisched_snapshots_replay_in_kais_tool(snapshot_tool: str, tmp_path: Path, shape: str) -> None:
    """What kaisched's /get-snapshot writes (snapshot_zip): KAI's tool reads it and decides as kaisched."""
    objects = K.cluster() if shape == "gang" else reclaim_objects()
    for obj in (o for items in objects.values() for o in items):
        obj["metadata"].pop("ownerReferences", None)  # as Kubernetes mode's pods have them, or not: not needed here
    path = tmp_path / "kaisched.zip"
    path.write_bytes(snapshot_zip(resolve_config(None), objects, NOW, schedule_period=1.0))
    diff = kai_vs_kaisched(snapshot_tool, path)
    assert diff.identical and diff.same, "\n".join(diff.lines())
