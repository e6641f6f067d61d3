"""``kaisched schedule`` through click's test runner."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from rich.console import Console

from kaisched.cli import cli
from kaisched.cli.render import render_table
from kaisched.framework.result import CycleResult, NodeGpuStatus, Placement, SharedGpuStatus
from tests.unit.builders import flatten, job, node, queue

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
SHARING = EXAMPLE.with_name("gpu-sharing.yaml")
TOP_LEVEL_KEYS = ["binds", "pipelined", "evictions", "podGroups", "queues", "errors", "nodes", "claims",
                  "scenarioSearch", "nominations"]
NOW = "2025-01-01T12:00:00Z"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["schedule", *args])


@pytest.fixture
def clean_input(tmp_path: Path) -> Path:
    objs = flatten(node("n1", 8), node("n2", 8), queue("q", gpu_limit=12), queue("q2"),
                   job("gang", 2, gpus=4), job("big", 1, gpus=16, queue="q2"), job("over", 1, gpus=8))
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return path


def test_json_output_of_a_clean_input(clean_input):
    result = invoke("-f", str(clean_input), "-o", "json", "--now", NOW)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == TOP_LEVEL_KEYS
    assert {b["pod"]: b["node"] for b in data["binds"]} == {"default/gang-0": "n1", "default/gang-1": "n1"}
    by_name = {g["name"]: g for g in data["podGroups"]}
    assert by_name["default/gang"]["status"] == "Allocated"
    assert by_name["default/gang"]["lastStartTimestamp"] == NOW
    assert "topped at 8" in by_name["default/big"]["message"]
    assert by_name["default/over"]["reason"] == "OverLimit"
    assert data["errors"] == []
    assert [q["name"] for q in data["queues"]] == ["q", "q2"]


def test_example_cluster_json():
    result = invoke("-f", str(EXAMPLE), "-o", "json", "--now", NOW)
    # the example holds one deliberate input error (a PodGroup naming a missing queue)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert list(data) == TOP_LEVEL_KEYS
    assert data["errors"] == [{"object": "PodGroup nlp/lost", "field": "spec.queue",
                               "message": "queue 'team-speech' does not exist"}]
    bound = {b["pod"]: b["node"] for b in data["binds"]}
    assert bound["serving/chat-api-0"] == "a100-00"  # the only node its selector and toleration allow
    assert bound["nlp/tokenize-0"] == "cpu-00"  # CPU-only work on the CPU node
    assert "dgx-04" not in bound.values()  # cordoned
    by_name = {g["name"]: g for g in data["podGroups"]}
    assert by_name["nlp/lost"]["reason"] == "QueueDoesNotExist"
    assert by_name["serving/chat-batch"]["reason"] == "NonPreemptibleOverQuota"


def test_yaml_output(clean_input):
    result = invoke("-f", str(clean_input), "-o", "yaml", "--now", NOW)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert list(data) == TOP_LEVEL_KEYS
    assert len(data["binds"]) == 2


def test_json_and_yaml_agree(clean_input):
    as_json = json.loads(invoke("-f", str(clean_input), "-o", "json", "--now", NOW).output)
    as_yaml = yaml.safe_load(invoke("-f", str(clean_input), "-o", "yaml", "--now", NOW).output)
    assert as_json == as_yaml


def test_table_output():
    result = invoke("-f", str(EXAMPLE), "-o", "table", "--now", NOW)
    assert result.exit_code == 1
    out = result.output
    assert "Queues" in out
    assert "Decisions" in out
    assert "Pending PodGroups" in out
    assert "QueueDoesNotExist" in out
    assert "NonPreemptibleOverQuota" in out
    assert "Input errors" in out
    assert "2025-01-01T12:00:00" in out
    assert "Traceback" not in out


def test_table_is_the_default_output(clean_input):
    result = invoke("-f", str(clean_input), "--now", NOW)
    assert result.exit_code == 0
    assert "Queues" in result.output
    assert "OverLimit" in result.output


def test_directory_input(tmp_path, clean_input):
    result = invoke("-f", str(clean_input.parent), "-o", "json", "--now", NOW)
    assert result.exit_code == 0
    assert len(json.loads(result.output)["binds"]) == 2


@pytest.mark.parametrize("name", ["nope.yaml", "no-such-dir/"])
def test_a_missing_path_is_a_usage_error(tmp_path, name):
    missing = str(tmp_path / name)
    result = invoke("-f", missing, "-o", "json", "--now", NOW)
    assert result.exit_code == 2
    assert result.stdout == ""  # nothing scheduled, nothing printed
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert error == f"Error: Invalid value for '-f' / '--filename': Path {missing!r} does not exist."
    assert "Traceback" not in result.output


def test_a_missing_path_stops_the_command_even_beside_good_files(tmp_path, clean_input):
    missing = tmp_path / "nope.yaml"
    result = invoke("-f", str(clean_input), "-f", str(missing), "--now", NOW)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert str(missing) in result.stderr


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: a\n")
    result = invoke("-f", str(bad), "-o", "json", "--now", NOW)
    assert result.exit_code == 1
    [error] = json.loads(result.output)["errors"]
    assert error["object"] == f"file {bad}"
    assert "line 4" in error["message"]
    assert "invalid YAML" in error["message"]


def test_invalid_object_is_reported_with_its_field(tmp_path):
    objs = flatten(node("n1", 8), queue("q", gpu=-3), job("j", 1, gpus=1, queue="ok"), queue("ok"))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    result = invoke("-f", str(path), "-o", "json", "--now", NOW)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert [(e["object"], e["field"]) for e in data["errors"]] == [("Queue q", "spec.resources.gpu.quota")]
    assert len(data["binds"]) == 1


def test_invalid_now_is_a_usage_error(clean_input):
    result = invoke("-f", str(clean_input), "--now", "yesterday")
    assert result.exit_code == 2
    assert "yesterday" in result.output
    assert "RFC3339" in result.output
    assert "Traceback" not in result.output


def test_now_sets_the_start_time(clean_input):
    result = invoke("-f", str(clean_input), "-o", "json", "--now", "2030-05-06T07:08:09+00:00")
    started = {g["name"]: g["lastStartTimestamp"] for g in json.loads(result.output)["podGroups"]}
    assert started["default/gang"] == "2030-05-06T07:08:09Z"


def test_config_with_unknown_plugin_is_a_usage_error(tmp_path, clean_input):
    config = tmp_path / "sched.yaml"
    config.write_text("tiers:\n- plugins:\n  - name: gang\n")
    result = invoke("-f", str(clean_input), "--config", str(config))
    assert result.exit_code == 2
    assert "unknown plugin 'gang'" in result.output
    assert "Traceback" not in result.output


def test_missing_config_file_is_a_usage_error(tmp_path, clean_input):
    result = invoke("-f", str(clean_input), "--config", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "nope.yaml" in result.output
    assert "Traceback" not in result.output


def test_config_file_changes_placement(tmp_path, clean_input):
    config = tmp_path / "sched.yaml"
    config.write_text('actions: "allocate"\ntiers:\n- plugins:\n  - name: predicates\n  - name: proportion\n'
                      "  - name: nodeplacement\n    arguments: {gpu: spread}\n")
    result = invoke("-f", str(clean_input), "--config", str(config), "-o", "json", "--now", NOW)
    assert result.exit_code == 0
    nodes = sorted(b["node"] for b in json.loads(result.output)["binds"])
    assert nodes == ["n1", "n2"]


def test_filename_is_required():
    result = invoke("-o", "json")
    assert result.exit_code == 2
    assert "-f" in result.output


def test_unknown_output_format(clean_input):
    result = invoke("-f", str(clean_input), "-o", "xml")
    assert result.exit_code == 2


def _gpus_section(out: str) -> str:
    return out[out.index("GPUs (shared devices"):]


def _short(group: str) -> str:
    return group[:8] + "…" if len(group) == 36 and group.count("-") == 4 else group


def test_gpu_sharing_example_json():
    result = invoke("-f", str(SHARING), "-o", "json", "--now", NOW)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["errors"] == []
    assert all(g["status"] != "Pending" for g in data["podGroups"])
    nodes = {n["name"]: n for n in data["nodes"]}
    assert set(nodes) == {"gpu-node-0", "gpu-node-1"}
    shared = {g["group"]: g for g in nodes["gpu-node-0"]["sharedGpus"]}
    assert shared["gpu-a"]["pods"] == ["team-a/nb-1", "team-a/nb-2", "team-a/nb-running"]
    assert shared["gpu-a"]["memoryMiB"] == 40900  # the label floored to 100 MiB, as KAI does
    assert shared["gpu-a"]["usedMiB"] == pytest.approx(0.95 * 40900)
    assert sorted(p for g in shared.values() for p in g["pods"]) == [
        "team-a/infer-0", "team-a/nb-1", "team-a/nb-2", "team-a/nb-3", "team-a/nb-4", "team-a/nb-running"]
    assert nodes["gpu-node-1"]["wholeGpuPods"] == ["team-a/train-0"]
    assert nodes["gpu-node-1"]["sharedGpus"] == []
    assert nodes["gpu-node-1"]["idleGpus"] == 2
    groups = {b["pod"]: b["gpuGroups"] for b in data["binds"]}
    assert groups["team-a/nb-1"] == ["gpu-a"]
    assert groups["team-a/train-0"] == []


def test_table_shows_how_gpus_are_shared():
    data = json.loads(invoke("-f", str(SHARING), "-o", "json", "--now", NOW).output)
    result = invoke("-f", str(SHARING), "-o", "table", "--now", NOW)
    assert result.exit_code == 0, result.output
    out = result.output
    section = _gpus_section(out)
    for n in data["nodes"]:
        assert n["name"] in section
        for g in n["sharedGpus"]:
            pct = round(100 * g["usedMiB"] / g["memoryMiB"])
            assert f"{_short(g['group'])}: {pct}% ({', '.join(g['pods'])})" in section
    assert "gpu-a: 95% (team-a/nb-1, team-a/nb-2, team-a/nb-running)" in section
    assert "team-a/train-0" in section  # the whole-GPU pod
    assert "releasing" not in section
    uuids = [g["group"] for n in data["nodes"] for g in n["sharedGpus"] if g["group"] != "gpu-a"]
    assert uuids
    assert all(u not in out for u in uuids)  # shortened everywhere, in the decisions too
    decisions = out[: out.index("Queues")]
    assert "GPU group gpu-a" in decisions
    nb3 = next(b for b in data["binds"] if b["pod"] == "team-a/nb-3")
    assert f"GPU group {_short(nb3['gpuGroups'][0])}" in decisions


def test_max_rows_truncates_the_gpus_section():
    result = invoke("-f", str(SHARING), "-o", "table", "--now", NOW, "--max-rows", "1")
    assert result.exit_code == 0, result.output
    section = _gpus_section(result.output)
    assert "gpu-node-0" in section
    assert "gpu-node-1" not in section
    assert "... and 1 more GPU nodes" in section
    full = _gpus_section(invoke("-f", str(SHARING), "--now", NOW, "--max-rows", "0").output)
    assert "gpu-node-1" in full
    assert "more GPU nodes" not in full


def test_table_without_gpu_nodes_has_no_gpus_section(tmp_path):
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump_all(flatten(node("c1", 0), queue("q"), job("cpu", 1, gpus=0))))
    result = invoke("-f", str(path), "--now", NOW)
    assert result.exit_code == 0, result.output
    assert "GPUs (shared devices" not in result.output


def _render(result: CycleResult, width: int, max_rows: int = 50) -> str:
    buf = io.StringIO()
    render_table(result, datetime(2025, 1, 1, tzinfo=UTC), max_rows=max_rows,
                 console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_gpus_section_marks_releasing_memory_and_fits_120_columns():
    uuid = "3f2a9c1e-0000-5000-8000-000000000001"
    result = CycleResult(
        pipelined=[Placement("team-a/nb-9", "dgx-0", (uuid,))],
        nodes=[
            NodeGpuStatus("dgx-0", 8, 5, 1, ("team-b/train-0",), (
                SharedGpuStatus(uuid, 40000, 28000, 8000, ("team-a/nb-1", "team-a/nb-2")),
                SharedGpuStatus("gpu-a", 40000, 100, 0, ("team-a/nb-3",)),
            )),
            NodeGpuStatus("dgx-1", 8, 8, 0, (), ()),
            NodeGpuStatus("cpu-0", 0, 0, 0, (), ()),  # not a GPU node: not listed
        ])
    out = _render(result, 120)
    assert max(len(line) for line in out.splitlines()) <= 120
    section = _gpus_section(out)
    assert "3f2a9c1e…: 70%, 20% releasing (team-a/nb-1, team-a/nb-2)" in section
    assert "gpu-a: <1% (team-a/nb-3)" in section
    assert uuid not in out
    assert "team-b/train-0" in section
    assert "dgx-1" in section
    assert "cpu-0" not in section
    assert "GPU group 3f2a9c1e…" in out[: out.index("GPUs (shared devices")]  # the pipelined row
    truncated = _gpus_section(_render(result, 120, max_rows=1))
    assert "dgx-1" not in truncated
    assert "... and 1 more GPU nodes" in truncated


def test_gpu_sharing_example_fits_120_columns():
    from kaisched.cluster.schedule import resolve_config, run_cycle
    from kaisched.framework.config import SchedulerConfig
    from kaisched.k8s.loader import load_objects

    now = datetime(2025, 1, 1, 12, tzinfo=UTC)
    result = run_cycle(load_objects((str(SHARING),)), resolve_config(SchedulerConfig()), now)
    out = _render(result, 120)
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "gpu-a: 95% (team-a/nb-1, team-a/nb-2, team-a/nb-running)" in out  # one line, not folded


def test_standard_input_is_read_for_dash(clean_input):
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "-o", "json", "--now", NOW],
                                input=clean_input.read_text())
    assert result.exit_code == 0, result.output
    from_file = json.loads(invoke("-f", str(clean_input), "-o", "json", "--now", NOW).stdout)
    assert json.loads(result.stdout) == from_file


def test_standard_input_combines_with_files(tmp_path):
    cluster = tmp_path / "nodes.yaml"
    cluster.write_text(yaml.safe_dump_all(flatten(node("n1", 8), queue("q"))))
    workload = yaml.safe_dump_all(flatten(job("gang", 2, gpus=4)))
    for args in (["-f", str(cluster), "-f", "-"], ["-f", "-", "-f", str(cluster)]):
        result = CliRunner().invoke(cli, ["schedule", *args, "-o", "json", "--now", NOW], input=workload)
        assert result.exit_code == 0, result.output
        assert {b["pod"]: b["node"] for b in json.loads(result.stdout)["binds"]} == {
            "default/gang-0": "n1", "default/gang-1": "n1"}


def test_standard_input_as_json_and_kind_list(clean_input):
    objects = list(yaml.safe_load_all(clean_input.read_text()))
    as_list = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "-o", "json", "--now", NOW], input=as_list)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["binds"]) == 2


def test_bad_standard_input_is_an_input_error_naming_it():
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "-o", "json", "--now", NOW],
                                input="kind: Node\nmetadata: {name: [a\n")
    assert result.exit_code == 1
    [error] = json.loads(result.stdout)["errors"]
    assert error["object"] == "standard input"
    assert error["message"].startswith("invalid YAML at line 3")


def test_standard_input_that_is_not_text_is_an_input_error():
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "-o", "json", "--now", NOW], input=b"\xff\xfe\x00bad")
    assert result.exit_code == 1, result.output
    [error] = json.loads(result.stdout)["errors"]
    assert error["object"] == "standard input"
    assert error["message"].startswith("cannot read: 'utf-8' codec can't decode byte 0xff")


def test_standard_input_can_be_named_once(clean_input):
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "-f", str(clean_input), "-f", "-"], input="")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "'-' (standard input) can be given only once" in result.stderr


def test_a_config_directory_is_a_usage_error(tmp_path, clean_input):
    result = invoke("-f", str(clean_input), "--config", str(tmp_path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"Error: Invalid value for '--config': File {str(tmp_path)!r} is a directory." in result.stderr


@pytest.mark.parametrize("option", ["--kubeconfig", "--config"])
def test_run_with_a_missing_file_is_a_usage_error(tmp_path, option):
    missing = str(tmp_path / "nope")
    result = CliRunner().invoke(cli, ["run", option, missing])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"Error: Invalid value for '{option}': File {missing!r} does not exist." in result.stderr


# ------------------------------------------------------------------------------------------- bounded input
def test_a_character_device_is_read_up_to_the_limit_then_refused_with_exit_2():
    result = invoke("-f", "/dev/zero", "--max-input-bytes", "1Mi", "--now", NOW)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == ("kaisched schedule: file /dev/zero: larger than 1,048,576 bytes (the input limit: "
                             "--max-input-bytes or KAISCHED_MAX_INPUT_BYTES)\n")


def test_the_input_limit_from_the_environment(clean_input):
    size = clean_input.stat().st_size
    runner = CliRunner(env={"KAISCHED_MAX_INPUT_BYTES": str(size - 1)})
    result = runner.invoke(cli, ["schedule", "-f", str(clean_input), "--now", NOW])
    assert result.exit_code == 2 and f"larger than {size - 1:,} bytes" in result.stderr
    # the option wins over the environment
    result = runner.invoke(cli, ["schedule", "-f", str(clean_input), "--now", NOW, "--max-input-bytes", str(size)])
    assert result.exit_code == 0, result.output
    # standard input is bounded the same way
    result = CliRunner().invoke(cli, ["schedule", "-f", "-", "--max-input-bytes", "100", "--now", NOW],
                                input=clean_input.read_text())
    assert result.exit_code == 2 and "kaisched schedule: standard input: larger than 100 bytes" in result.stderr


@pytest.mark.parametrize(("value", "where"), [("lots", "--max-input-bytes"), ("0", "--max-input-bytes")])
def test_a_bad_input_limit_is_a_usage_error(clean_input, value, where):
    result = invoke("-f", str(clean_input), "--max-input-bytes", value)
    assert result.exit_code == 2
    assert f"{where}: expected a number of bytes >= 1 like 1073741824 or 1Gi, got {value!r}" in result.stderr
    env = CliRunner(env={"KAISCHED_MAX_INPUT_BYTES": "lots"}).invoke(cli, ["schedule", "-f", str(clean_input)])
    assert env.exit_code == 2 and "KAISCHED_MAX_INPUT_BYTES: expected a number of bytes" in env.stderr


def test_a_fifo_nobody_writes_to_is_refused_after_the_wait(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = CliRunner(env={"KAISCHED_INPUT_TIMEOUT": "0.2"}).invoke(cli, ["schedule", "-f", str(fifo), "--now", NOW])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"kaisched schedule: file {fifo}: a FIFO that no program writes to: nothing came in "
                             "0.2 s (start the writer first, or wait longer with KAISCHED_INPUT_TIMEOUT=SECONDS)\n")


def test_a_config_that_is_a_fifo_nobody_writes_to_is_refused(tmp_path, clean_input):
    fifo = tmp_path / "config"
    os.mkfifo(fifo)
    result = CliRunner(env={"KAISCHED_INPUT_TIMEOUT": "0.2"}).invoke(
        cli, ["schedule", "-f", str(clean_input), "--config", str(fifo)])
    assert result.exit_code == 2
    assert f"scheduler config: {fifo}: a FIFO that no program writes to" in result.stderr


def test_reading_a_terminal_says_how_to_end(monkeypatch, capsys):
    from kaisched.cli.schedule import stdin_hint

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    stdin_hint(("-",), "schedule")
    assert capsys.readouterr().err == ("kaisched schedule: reading manifests from standard input (the terminal); "
                                       "end with Ctrl-D\n")
    stdin_hint(("cluster.yaml",), "schedule")
    monkeypatch.setattr("sys.stdin", io.StringIO())
    stdin_hint(("-",), "schedule")
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------------- honest reports
def _schedule(tmp_path: Path, objs: list[dict[str, object]]) -> tuple[Result, dict[str, object]]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    result = invoke("-f", str(path), "-o", "json", "--now", NOW)
    return result, json.loads(result.stdout)


def _group(data: dict[str, object], name: str) -> dict[str, object]:
    groups = data["podGroups"]
    assert isinstance(groups, list)
    return next(g for g in groups if g["name"] == name)


def test_pods_of_an_invalid_queue_are_told_it_is_invalid_not_missing(tmp_path):
    objs = flatten(node("n1", 8), queue("bad", gpu=-5), job("train", 1, gpus=1, queue="bad"))
    result, data = _schedule(tmp_path, objs)
    assert result.exit_code == 1, result.output
    message = "spec.resources.gpu.quota: must be >= 0 or -1 (unlimited), got -5"
    assert {"object": "Queue bad", "field": "spec.resources.gpu.quota",
            "message": "must be >= 0 or -1 (unlimited), got -5"} in data["errors"]
    group = _group(data, "default/train")
    assert (group["status"], group["reason"]) == ("Pending", "InvalidQueue")
    assert group["message"] == f"Queue 'bad' is invalid, so it is not scheduled: {message}"
    assert "does not exist" not in json.dumps(data)
    # the Python API says the same
    import kaisched

    api = kaisched.schedule(objs, now=datetime(2025, 1, 1, 12, tzinfo=UTC))
    status = api.pod_group("default/train")
    assert status is not None and status.reason == "InvalidQueue" and message in (status.message or "")


def test_a_negative_over_quota_weight_is_reported(tmp_path):
    objs = flatten(node("n1", 8), queue("q", gpu_weight=-2), job("train", 1, gpus=1))
    result, data = _schedule(tmp_path, objs)
    assert result.exit_code == 1, result.output
    assert {"object": "Queue q", "field": "spec.resources.gpu.overQuotaWeight",
            "message": "must be >= 0 (0: no share of what is left over quotas), got -2"} in data["errors"]
    assert _group(data, "default/train")["reason"] == "InvalidQueue"


@pytest.mark.parametrize("fraction", [" 0.5", "0.5 ", "0_5", "\u0660.5"])
def test_a_gpu_fraction_kai_could_not_parse_is_reported(tmp_path, fraction):
    objs = flatten(node("n1", 8), queue("q"), job("nb", 1))
    objs[-1]["metadata"]["annotations"]["gpu-fraction"] = fraction
    result, data = _schedule(tmp_path, objs)
    assert result.exit_code == 1, result.output
    assert data["errors"] == [{"object": "Pod default/nb-0", "field": "metadata.annotations.gpu-fraction",
                               "message": f"must be a number in (0, 1], got {fraction!r}"}]
    group = _group(data, "default/nb")
    assert group["reason"] == "InvalidGPURequest" and data["binds"] == []


def test_a_gang_larger_than_the_cluster_can_ever_hold_is_told_so(tmp_path):
    """minMember 100,000 and one pod: KAI would only say NotReady (an event, no condition); no number of pods can
    make it run on two nodes of 110 pod slots, so the reason says so (in Kubernetes mode: a PodGroup condition and
    Unschedulable events, as for any reason but NotReady)."""
    objs = flatten(node("n1", 8), node("n2", 8), queue("q"), job("huge", 1, min_member=100_000))
    result, data = _schedule(tmp_path, objs)
    assert result.exit_code == 0, result.output
    group = _group(data, "default/huge")
    assert (group["status"], group["reason"]) == ("Pending", "MinMemberTooLarge")
    assert group["message"] == ("PodGroup default/huge can never run: minMember 100,000 is more pods than the "
                                "cluster's nodes hold together (220, their allocatable pods); lower minMember or add "
                                "nodes")
    import kaisched

    status = kaisched.schedule(objs, now=datetime(2025, 1, 1, 12, tzinfo=UTC)).pod_group("default/huge")
    assert status is not None and status.reason == "MinMemberTooLarge"
    # a gang that fits the cluster but lacks pods is still NotReady, as in KAI
    objs = flatten(node("n1", 8), queue("q"), job("later", 1, min_member=3))
    _, data = _schedule(tmp_path, objs)
    assert _group(data, "default/later")["reason"] == "NotReady"


def test_the_children_of_an_invalid_queue_are_told_why_their_parent_is_missing(tmp_path):
    objs = flatten(node("n1", 8), queue("dept", gpu_limit=-3), queue("team", "dept"), job("train", 1, queue="team"))
    result, data = _schedule(tmp_path, objs)
    assert result.exit_code == 1, result.output
    invalid = "spec.resources.gpu.limit: must be >= 0 or -1 (unlimited), got -3"
    assert {"object": "Queue team", "field": "spec.parentQueue",
            "message": f"parent queue 'dept' is invalid ({invalid}); the queue and its subtree are ignored"} \
        in data["errors"]
    assert _group(data, "default/train")["message"].endswith(
        f"Parent queue 'dept' of queue 'team' is invalid: {invalid}")


# ----------------------------------------------------------------- bounded input of kaisched run's files
def test_run_reads_its_config_within_the_input_limit():
    result = CliRunner().invoke(cli, ["run", "--config", "/dev/zero", "--max-input-bytes", "1Mi"])
    assert result.exit_code == 2, result.output
    assert "Error: scheduler config: /dev/zero: larger than 1,048,576 bytes (the input limit: " \
           "--max-input-bytes or KAISCHED_MAX_INPUT_BYTES)" in result.stderr
    assert "Traceback" not in result.output
    env = CliRunner(env={"KAISCHED_MAX_INPUT_BYTES": "1000"}).invoke(cli, ["run", "--config", "/dev/zero"])
    assert env.exit_code == 2 and "/dev/zero: larger than 1,000 bytes" in env.stderr


def test_run_gives_up_a_config_fifo_nobody_writes_to(tmp_path):
    fifo = tmp_path / "config"
    os.mkfifo(fifo)
    result = CliRunner(env={"KAISCHED_INPUT_TIMEOUT": "0.2"}).invoke(cli, ["run", "--config", str(fifo)])
    assert result.exit_code == 2, result.output
    assert f"Error: scheduler config: {fifo}: a FIFO that no program writes to: nothing came in 0.2 s" \
           in result.stderr


def test_run_reads_its_kubeconfig_within_the_input_limit(tmp_path):
    result = CliRunner().invoke(cli, ["run", "--kubeconfig", "/dev/zero", "--max-input-bytes", "1Mi"])
    assert result.exit_code == 2, result.output
    assert "Error: kubeconfig: kubeconfig '/dev/zero': larger than 1,048,576 bytes (the input limit: " \
           "--max-input-bytes or KAISCHED_MAX_INPUT_BYTES)" in result.stderr
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    result = CliRunner(env={"KAISCHED_INPUT_TIMEOUT": "0.2"}).invoke(cli, ["run", "--kubeconfig", str(fifo)])
    assert result.exit_code == 2, result.output
    assert f"Error: kubeconfig: kubeconfig '{fifo}': a FIFO that no program writes to" in result.stderr


def test_a_scheduler_config_file_is_read_within_the_limits_in_python(tmp_path):
    from kaisched.framework.config import ConfigError, SchedulerConfig
    from kaisched.k8s.loader import InputLimits

    with pytest.raises(ConfigError, match=r"^/dev/zero: larger than 1,000 bytes"):
        SchedulerConfig.load("/dev/zero", InputLimits(max_bytes=1000))
    binary = tmp_path / "config.yaml"
    binary.write_bytes(b"actions: \xff\n")
    with pytest.raises(ConfigError, match=r"cannot read: not a text file \(UTF-8\)"):
        SchedulerConfig.load(binary)


def test_a_kubeconfig_fifo_with_a_writer_is_read(tmp_path):
    """``--kubeconfig <(kubectl config view --raw)``: a pipe, read to its end (and bounded like a file)."""
    import threading

    from kaisched.kube.client import KubeClient
    from tests.unit.test_kube_client import write_kubeconfig

    text = write_kubeconfig(tmp_path / "kc", "https://api.example:6443").read_text()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    client = KubeClient.from_kubeconfig(fifo)
    writer.join()
    assert client.namespace == "ns-one"
    client.close()
