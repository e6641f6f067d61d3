"""``kaisched schedule`` through click's test runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from tests.unit.builders import flatten, job, node, queue

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
TOP_LEVEL_KEYS = ["binds", "pipelined", "evictions", "podGroups", "queues", "errors", "nodes"]
NOW = "2025-01-01T12:00:00Z"


def invoke(*args: str):
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


def test_missing_file_is_listed_as_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    result = invoke("-f", str(missing), "-o", "json", "--now", NOW)
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    data = json.loads(result.output)
    assert data["errors"] == [{"object": f"file {missing}", "field": "", "message": "no such file or directory"}]


def test_missing_file_does_not_stop_other_files(tmp_path, clean_input):
    result = invoke("-f", str(tmp_path / "nope.yaml"), "-f", str(clean_input), "-o", "json", "--now", NOW)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert len(data["binds"]) == 2
    assert len(data["errors"]) == 1


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
