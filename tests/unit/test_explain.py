"""kaisched explain and get: hand-computed explanations (fragmentation, a job behind others, a queue over its
limit, a gang that does not fit, a gang without its pods, a queue at its fair share, a job waiting for its victims,
predicates per node, misconfiguration), the reason codes of the cycle, tables and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kaisched.cli import cli

NOW = "2026-01-01T00:00:00Z"
JSON = dict[str, Any]


def _node(name: str, gpus: int, labels: dict[str, str] | None = None) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _queue(name: str, quota: float = -1, limit: float = -1) -> JSON:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1}}}}


def _pod(name: str, gpus: int, created: str = "2025-12-31T10:00:00Z", node: str = "", *, queue: str = "team-a",
         priority_class: str = "", group: str = "", selector: dict[str, str] | None = None) -> JSON:
    """A pod of ``queue``; a running one (``node``) is non-preemptible (build) unless ``priority_class`` says."""
    meta: JSON = {"name": name, "namespace": "default", "creationTimestamp": created,
                  "labels": {"kai.scheduler/queue": queue}}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    spec: JSON = {"schedulerName": "kai-scheduler",
                  "containers": [{"name": "c", "image": "x",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    pc = priority_class or ("build" if node else "")
    if pc:
        spec["priorityClassName"] = pc
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def _group(name: str, min_member: int, queue: str = "team-a", priority_class: str = "train") -> JSON:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2025-12-31T10:00:00Z"},
            "spec": {"queue": queue, "minMember": min_member, "priorityClassName": priority_class}}


def _write(tmp_path: Path, *objects: JSON) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _explain(path: Path, name: str, *extra: str) -> JSON:
    out = CliRunner().invoke(cli, ["explain", name, "-f", str(path), "--now", NOW, "-o", "json", *extra])
    assert out.exit_code == 0, out.output
    data: JSON = json.loads(out.output)
    return data


def _fragmented(tmp_path: Path) -> Path:
    # node-17: 4 GPUs, 1 used -> 3 free; node-02: 2 GPUs, 1 used -> 1 free. big (4 GPUs) fits nowhere although 4
    # GPUs are free in all; later (4 GPUs, created after big) is behind big in team-a's order.
    return _write(tmp_path, _queue("team-a"), _node("node-17", 4), _node("node-02", 2),
                  _pod("busy-a", 1, "2025-12-31T00:00:00Z", "node-17"),
                  _pod("busy-b", 1, "2025-12-31T00:00:00Z", "node-02"),
                  _pod("big", 4, "2025-12-31T10:00:00Z"), _pod("later", 4, "2025-12-31T11:00:00Z"))


def test_fragmentation_names_the_largest_free_block_and_the_nodes(tmp_path: Path) -> None:
    data = _explain(_fragmented(tmp_path), "big")
    assert (data["status"], data["queue"], data["code"], data["tier"]) == ("Pending", "team-a", "fits-nowhere",
                                                                           "fits nowhere")
    assert data["largestFreeBlock"] == {"gpus": 3.0, "node": "node-17"}
    assert data["advice"][0] == "needs 4 GPUs on one node; the most free on any node is 3, on node-17"
    assert "the cluster has 4 GPUs free in all" in data["advice"][1]
    assert data["position"] == 1 and data["ahead"] == []
    nodes = data["nodes"]
    assert (nodes["pod"], nodes["total"], nodes["available"]) == ("default/big", 2, 0)
    assert nodes["reasons"] == [{"count": 2, "reason": "node(s) didn't have enough resources: GPUs",
                                 "nodes": ["node-02", "node-17"], "resources": True}]
    assert nodes["summary"] == "0/2 nodes are available: 2 node(s) didn't have enough resources: GPUs."
    assert [(n["node"], n["idleGpus"]) for n in data["gpuNodes"]] == [("node-17", 3.0), ("node-02", 1.0)]


def test_job_behind_another_in_its_queue(tmp_path: Path) -> None:
    data = _explain(_fragmented(tmp_path), "later")
    assert data["position"] == 2
    assert data["ahead"] == ["default/pg-big-default-big"]
    assert data["advice"][-1] == "1 job(s) ahead of it in queue team-a: default/pg-big-default-big"


def test_text_output_standard_input_and_unknown_job(tmp_path: Path) -> None:
    path = _fragmented(tmp_path)
    out = CliRunner().invoke(cli, ["explain", "big", "-f", "-", "--now", NOW], input=path.read_text())
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "Queue:     team-a" in lines
    assert "Tier:      fits nowhere (fits-nowhere)" in lines
    assert ("Nodes:     pod default/big: 0/2 nodes are available: 2 node(s) didn't have enough resources: GPUs."
            in lines)
    assert "Free GPUs: node-17 3/4, node-02 1/2" in lines
    bad = CliRunner().invoke(cli, ["explain", "nope", "-f", str(path), "--now", NOW])
    assert bad.exit_code == 1
    assert "no pod or PodGroup 'nope' in namespace 'default'" in bad.output
    other = CliRunner().invoke(cli, ["explain", "big", "-n", "elsewhere", "-f", str(path), "--now", NOW])
    assert other.exit_code == 1 and "namespace 'elsewhere' (the namespace has no jobs)" in other.output
    for result in (bad, other):
        assert "Traceback" not in result.output


def test_bad_sources_are_usage_errors(tmp_path: Path) -> None:
    path = _fragmented(tmp_path)
    neither = CliRunner().invoke(cli, ["explain", "big"])
    assert neither.exit_code == 2 and "give -f FILE" in neither.output
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters: [oops")
    both = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--kubeconfig", str(kubeconfig)])
    assert both.exit_code == 2 and "not both" in both.output
    malformed = CliRunner().invoke(cli, ["get", "queues", "--kubeconfig", str(kubeconfig)])
    assert malformed.exit_code == 2 and f"kubeconfig {str(kubeconfig)!r}: malformed" in malformed.output
    twice = CliRunner().invoke(cli, ["schedule", "-f", "-", "-f", "-"], input="")
    assert twice.exit_code == 2 and "only once" in twice.output
    for result in (neither, both, malformed, twice):
        assert "Traceback" not in result.output


def test_unreachable_api_server_is_a_clear_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    for args in (["explain", "big"], ["get", "queues"], ["get", "jobs"], ["schedule"]):
        out = CliRunner().invoke(cli, [*args, "--kubeconfig", str(kubeconfig)])
        assert out.exit_code == 1, out.output
        assert "cannot reach the API server http://127.0.0.1:9" in out.output
        assert "Traceback" not in out.output
    missing = CliRunner().invoke(cli, ["get", "jobs", "--kubeconfig", str(kubeconfig), "--context", "nope"])
    assert missing.exit_code == 2 and "nope" in missing.output


def test_get_queues_and_jobs(tmp_path: Path) -> None:
    path = _fragmented(tmp_path)
    out = CliRunner().invoke(cli, ["get", "queues", "-f", str(path), "--now", NOW, "-o", "json"])
    assert out.exit_code == 0, out.output
    (team,) = json.loads(out.output)
    # 2 GPUs running (busy-a, busy-b); 10 requested (2 running + 4 + 4 pending); big and later pending; the only
    # queue's fair share is the cluster (6 GPUs)
    assert (team["name"], team["allocated"], team["requested"], team["pendingJobs"], team["fairShare"]) == (
        "team-a", 2.0, 10.0, 2, 6.0)
    out = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--now", NOW, "-o", "yaml"])
    rows = {r["name"].rsplit("-", 1)[-1]: r for r in yaml.safe_load(out.output)}
    assert rows["big"]["state"] == "Pending" and rows["big"]["gpus"] == 4.0 and rows["big"]["preemptible"]
    assert (rows["big"]["code"], rows["big"]["reason"]) == ("fits-nowhere", "PodSchedulingErrors")
    assert rows["a"]["state"] == "Running" and not rows["a"]["preemptible"] and rows["a"]["code"] == ""
    assert rows["big"]["age"] == 14 * 3600
    for width in (80, 100, 120):
        for output in ("table", "wide"):
            table = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--now", NOW, "-o", output],
                                       env={"COLUMNS": str(width)})
            assert table.exit_code == 0, table.output
            assert max(len(line) for line in table.output.splitlines()) <= width
            lines = table.output.splitlines()
            assert len(lines) == 1 + len(rows)  # one line a job: KAI's reason is a code, cut but never folded
            assert all(line.split()[-1] in ("PodSchedulingErrors", "1") or line.endswith("…")
                       for line in lines[1:] if output == "wide")
    wide = CliRunner().invoke(cli, ["get", "jobs", "-f", str(path), "--now", NOW, "-o", "wide"],
                              env={"COLUMNS": "160"})
    header = wide.output.splitlines()[0].split()
    assert header == ["JOB", "QUEUE", "PRIO", "PREEMPT", "STATE", "REASON", "AGE", "GPUS", "PODS", "KAI", "REASON"]
    assert "default/pg-big-default-big" in wide.output and "PodSchedulingErrors" in wide.output


def test_queue_over_its_limit(tmp_path: Path) -> None:
    # team-a's GPU limit is 2 and 2 GPUs run; big asks 1 more on an 8-GPU node with 6 free: the limit, not room
    path = _write(tmp_path, _queue("team-a", limit=2), _node("node-17", 8),
                  _pod("busy-a", 2, "2025-12-31T00:00:00Z", "node-17"), _pod("big", 1))
    data = _explain(path, "big")
    assert (data["code"], data["tier"], data["reason"]) == ("over-limit", "over its queue's limit", "OverLimit")
    assert data["queueShare"]["limit"] == {"gpu": 2.0} and data["queueShare"]["allocated"] == {"gpu": 2.0}
    assert data["advice"] == ["queue team-a's GPU limit is 2, 2 are allocated and the job asks 1: 1 GPUs of "
                              "team-a's running jobs must finish first, or raise its limit to at least 3"]
    assert data["nodes"] is None  # no node was tried


def test_a_job_alone_over_its_queues_limit_is_told_no_job_finishing_helps(tmp_path: Path) -> None:
    # team-a may use 1 GPU and nothing runs; big asks 2: only a higher limit (or a smaller job) lets it run
    path = _write(tmp_path, _queue("team-a", limit=1), _node("node-17", 8), _pod("big", 2))
    data = _explain(path, "big")
    assert data["code"] == "over-limit"
    assert data["advice"] == ["queue team-a's GPU limit is 1, 0 are allocated and the job asks 2: the job alone is "
                              "over the limit; raise it to at least 2, or ask for fewer GPUs"]


def test_gang_that_does_not_fit(tmp_path: Path) -> None:
    # three 2-GPU pods, all needed at once; node-a has 4 free GPUs (two pods), node-b 1: room for 2 of 3
    path = _write(tmp_path, _queue("team-a"), _node("node-a", 4), _node("node-b", 2),
                  _pod("other", 1, "2025-12-31T00:00:00Z", "node-b"), _group("gang", 3),
                  *[_pod(f"gang-{i}", 2, group="gang") for i in range(3)])
    data = _explain(path, "gang-1")
    assert data["job"] == "default/gang"
    assert (data["code"], data["tier"]) == ("below-min-member", "below minMember")
    assert data["gang"] == {"placed": 2, "required": 3}
    assert data["message"].startswith("Resources were found for 2 pods while 3 are required for gang scheduling.")
    assert data["advice"][0].startswith("room for 2 of the 3 pods the gang needs at once")
    # the third pod: node-a is full once two are placed, node-b has 1 GPU free
    assert data["nodes"]["summary"] == "0/2 nodes are available: 2 node(s) didn't have enough resources: GPUs."


def test_gang_without_its_pods(tmp_path: Path) -> None:
    path = _write(tmp_path, _queue("team-a"), _node("node-a", 8), _group("gang", 3), _pod("gang-0", 1, group="gang"))
    data = _explain(path, "gang")
    assert (data["code"], data["reason"]) == ("gang-incomplete", "NotReady")
    assert data["advice"] == ["minMember is 3 and 1 pod(s) can be scheduled (1 exist, 0 gated): create or un-gate "
                              "2 more, or lower minMember"]


def test_queue_at_its_fair_share_waits_for_it(tmp_path: Path) -> None:
    # 4 GPUs; team-a and team-b deserve 2 each and each asks for more, so each one's fair share is 2. team-a runs
    # 2 (its fair share), team-b runs 2 non-preemptible: team-a's new 1-GPU job cannot reclaim (3 > 2)
    path = _write(tmp_path, _queue("team-a", quota=2), _queue("team-b", quota=2), _node("node-a", 4),
                  _pod("a-run", 2, "2025-12-31T00:00:00Z", "node-a"),
                  _pod("b-run", 2, "2025-12-31T00:00:00Z", "node-a", queue="team-b"),
                  _pod("b-more", 2, queue="team-b"), _pod("a-new", 1))
    data = _explain(path, "a-new")
    assert (data["code"], data["tier"]) == ("fair-share", "waiting for fair share to free")
    assert data["queueShare"]["fairShare"] == {"gpu": 2.0} and data["queueShare"]["allocated"] == {"gpu": 2.0}
    assert data["advice"][0].startswith("queue team-a holds 2 GPUs of its fair share of 2; with the job's 1 it "
                                        "would be over it, so it may not reclaim from other queues: it runs once 1 "
                                        "GPUs of team-a's jobs are released")
    # the same job in a queue below its fair share fits nowhere instead (team-b's pod is non-preemptible)
    lower = _write(tmp_path, _queue("team-a", quota=4), _queue("team-b", quota=0), _node("node-a", 4),
                   _pod("a-run", 2, "2025-12-31T00:00:00Z", "node-a"),
                   _pod("b-run", 2, "2025-12-31T00:00:00Z", "node-a", queue="team-b"), _pod("a-new", 1))
    assert _explain(lower, "a-new")["code"] == "fits-nowhere"


def test_job_waiting_for_its_victims_names_them(tmp_path: Path) -> None:
    # team-b (deserved 0) runs two preemptible 2-GPU pods on team-a's 4 GPUs; team-a's job reclaims them
    path = _write(tmp_path, _queue("team-a", quota=4), _queue("team-b", quota=0), _node("node-a", 4),
                  _pod("b-0", 2, "2025-12-31T00:00:00Z", "node-a", queue="team-b", priority_class="train"),
                  _pod("b-1", 2, "2025-12-31T00:00:00Z", "node-a", queue="team-b", priority_class="train"),
                  _pod("a-new", 4))
    data = _explain(path, "a-new")
    assert (data["status"], data["code"], data["reason"]) == ("Pipelined", "waiting-for-victims", "WaitingForVictims")
    assert data["victims"] == ["default/b-0", "default/b-1"]
    assert data["advice"] == ["nothing: it is bound once 2 pod(s) terminate: default/b-0, default/b-1"]


def test_predicates_per_node_like_kai_histogram(tmp_path: Path) -> None:
    # 5 nodes: 3 with the label but no free GPU, 2 with free GPUs but without the label the pod selects
    path = _write(tmp_path, _queue("team-a"),
                  *[_node(f"gpu-{i}", 1, {"pool": "a100"}) for i in range(3)],
                  *[_node(f"cpu-{i}", 2) for i in range(2)],
                  *[_pod(f"busy-{i}", 1, "2025-12-31T00:00:00Z", f"gpu-{i}") for i in range(3)],
                  _pod("want", 1, selector={"pool": "a100"}))
    data = _explain(path, "want")
    assert data["code"] == "fits-nowhere"
    assert data["nodes"]["summary"] == ("0/5 nodes are available: 3 node(s) didn't have enough resources: GPUs, "
                                        "2 node(s) didn't match Pod's node affinity/selector.")
    rows = {r["reason"]: r for r in data["nodes"]["reasons"]}
    assert rows["node(s) didn't match Pod's node affinity/selector"]["nodes"] == ["cpu-0", "cpu-1"]
    assert not rows["node(s) didn't match Pod's node affinity/selector"]["resources"]
    # every node failing a predicate alone: change the pod or the nodes
    only = _write(tmp_path, _queue("team-a"), _node("cpu-0", 2), _pod("want", 1, selector={"pool": "a100"}))
    advice = _explain(only, "want")["advice"]
    assert advice == ["every node fails a predicate for pod default/want (1 node(s) didn't match Pod's node "
                      "affinity/selector): change the pod's constraints (node selector, affinity, tolerations) or "
                      "the nodes"]


def test_non_preemptible_over_quota_and_misconfigured(tmp_path: Path) -> None:
    path = _write(tmp_path, _queue("team-a", quota=1), _node("node-a", 8), _pod("build", 2, priority_class="build"),
                  _pod("lost", 1, queue="nowhere"))
    data = _explain(path, "build")
    assert (data["code"], data["reason"]) == ("non-preemptible-over-quota", "NonPreemptibleOverQuota")
    assert "raise queue team-a's deserved quota (now 1 GPUs)" in data["advice"][0]
    lost = _explain(path, "lost")
    assert (lost["code"], lost["reason"], lost["tier"]) == ("misconfigured", "QueueDoesNotExist", "misconfigured")


def test_schedule_json_carries_the_reason_code(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["schedule", "-f", str(_fragmented(tmp_path)), "--now", NOW, "-o", "json"])
    assert out.exit_code == 0, out.output
    codes = {g["name"]: g["code"] for g in json.loads(out.output)["podGroups"]}
    assert codes["default/pg-big-default-big"] == "fits-nowhere"
    assert codes["default/pg-busy-a-default-busy-a"] is None


def test_running_job_is_explained_as_running(tmp_path: Path) -> None:
    data = _explain(_fragmented(tmp_path), "busy-a")
    assert (data["status"], data["tier"], data["code"], data["advice"]) == ("Running", "running", None, [])
