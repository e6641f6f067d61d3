"""kaisched explain: hand-computed explanations (fragmentation, a job behind others, unknown job)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kaisched.cli import cli

NOW = "2026-01-01T00:00:00Z"


def _node(name: str, gpus: int) -> str:
    return f"""---
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status:
  allocatable: {{cpu: '64', memory: 512Gi, nvidia.com/gpu: '{gpus}', pods: '110'}}
  conditions: [{{type: Ready, status: 'True'}}]
"""


def _pod(name: str, gpus: int, created: str, node: str = "") -> str:
    # running pods are non-preemptible (priority class build): nothing can move them to make room
    node_line = f"\n  nodeName: {node}\n  priorityClassName: build" if node else ""
    phase = "Running" if node else "Pending"
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  creationTimestamp: '{created}'
  labels: {{kai.scheduler/queue: team-a}}
spec:
  schedulerName: kai-scheduler{node_line}
  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: '{gpus}'}}}}}}]
status: {{phase: {phase}}}
"""


QUEUES = """---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec: {resources: {gpu: {quota: -1, limit: -1, overQuotaWeight: 1}}}
"""


def _cluster(tmp_path: Path) -> Path:
    # node-17: 4 GPUs, 1 used -> 3 free; node-02: 2 GPUs, 1 used -> 1 free. big (4 GPUs) fits nowhere;
    # later (4 GPUs, created after big) is behind big in team-a's order.
    text = (QUEUES + _node("node-17", 4) + _node("node-02", 2)
            + _pod("busy-a", 1, "2025-12-31T00:00:00Z", "node-17")
            + _pod("busy-b", 1, "2025-12-31T00:00:00Z", "node-02")
            + _pod("big", 4, "2025-12-31T10:00:00Z") + _pod("later", 4, "2025-12-31T11:00:00Z"))
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


def test_fragmentation_names_the_largest_free_block(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    out = CliRunner().invoke(cli, ["explain", "big", "-f", str(path), "--now", NOW, "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["status"] == "Pending"
    assert data["queue"] == "team-a"
    assert data["largestFreeBlock"] == {"gpus": 3.0, "node": "node-17"}
    assert "needs 4 GPUs on one node; the most free on any node is 3, on node-17" in data["advice"]
    assert data["position"] == 1 and data["ahead"] == []


def test_job_behind_another_in_its_queue(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    out = CliRunner().invoke(cli, ["explain", "later", "-f", str(path), "--now", NOW, "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["position"] == 2
    assert len(data["ahead"]) == 1 and "big" in data["ahead"][0]


def test_text_output_and_unknown_job(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    out = CliRunner().invoke(cli, ["explain", "big", "-f", str(path), "--now", NOW])
    assert out.exit_code == 0, out.output
    assert "Queue:    team-a" in out.output and "node-17" in out.output
    bad = CliRunner().invoke(cli, ["explain", "nope", "-f", str(path), "--now", NOW])
    assert bad.exit_code == 1
    assert "no pod or PodGroup 'nope' in namespace 'default'" in bad.output
    assert "Traceback" not in bad.output


def test_get_queues_and_jobs(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    out = CliRunner().invoke(cli, ["get", "queues", "-f", str(path), "--now", NOW, "-o", "json"])
    assert out.exit_code == 0, out.output
    (team,) = json.loads(out.output)
    # 2 GPUs running (busy-a, busy-b); 10 requested (2 running + 4 + 4 pending); big and later pending
    assert (team["name"], team["allocated"], team["requested"], team["pendingJobs"]) == ("team-a", 2.0, 10.0, 2)
    out = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--now", NOW, "-o", "json"])
    rows = {r["name"].rsplit("-", 1)[-1]: r for r in json.loads(out.output)}
    assert rows["big"]["state"] == "Pending" and rows["big"]["gpus"] == 4.0 and rows["big"]["preemptible"]
    assert rows["a"]["state"] == "Running" and not rows["a"]["preemptible"]
    assert rows["big"]["age"] == 14 * 3600
    table = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--now", NOW, "-o", "wide"], env={"COLUMNS": "80"})
    assert table.exit_code == 0 and "PodScheduling" in table.output  # folded to fit 80 columns
    assert max(len(line) for line in table.output.splitlines()) <= 80


def test_queue_over_its_limit(tmp_path: Path) -> None:
    # team-a's GPU limit is 2 and 2 GPUs run; big asks 1 more on an 8-GPU node with 6 free: the limit, not room
    text = (QUEUES.replace("limit: -1", "limit: 2") + _node("node-17", 8)
            + _pod("busy-a", 2, "2025-12-31T00:00:00Z", "node-17") + _pod("big", 1, "2025-12-31T10:00:00Z"))
    path = tmp_path / "limit.yaml"
    path.write_text(text)
    out = CliRunner().invoke(cli, ["explain", "big", "-f", str(path), "--now", NOW, "-o", "json"])
    data = json.loads(out.output)
    assert data["tier"] == "over queue limit" and data["reason"] == "OverLimit"
    assert data["queueShare"]["limit"] == {"gpu": 2.0} and data["queueShare"]["allocated"] == {"gpu": 2.0}
    assert not any("needs" in a for a in data["advice"])  # 6 GPUs are free on node-17
