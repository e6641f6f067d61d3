"""Scenarios are checked before anything is simulated: unknown queues (generate streams, explicit jobs, manifests,
traces), jobs that could never run (a pod no node holds, a gang larger than the cluster), malformed and negative
values, unknown fields, reversed ranges, sizes over the scenario's limits, errors in the cluster's objects and the
scheduler configuration. ``kaisched simulate`` then exits 2 naming the file, the field and the value, and simulates
nothing."""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.k8s.loader import InputLimits
from kaisched.sim import ScenarioError, scenario_from_mapping, simulate
from kaisched.sim.validate import check_scenario

Obj = dict[str, Any]


def _queue(name: str, parent: str | None = None) -> Obj:
    spec: Obj = {"resources": {k: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for k in ("gpu", "cpu", "memory")}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


BASE: Obj = {
    "name": "checked", "period": "1m", "seed": 3,
    "cluster": {"pools": [{"name": "n", "count": 2, "gpus": 8, "cpu": 64, "memory": "512Gi"}],
                "objects": [_queue("org"), _queue("team-a", "org"), _queue("team-b", "org")]},
    "workload": {"generate": [{"name": "a", "queue": "team-a", "jobs": 5, "every": "5m", "gpus": 1,
                               "duration": "10m"},
                              {"name": "b", "queues": ["team-a", "team-b"], "jobs": 5, "every": "5m", "gpus": 2,
                               "duration": "10m"}]},
}


def _doc(**changes: Any) -> Obj:
    """BASE with ``path=value`` changes (path: dots, list indices as numbers, ``__`` for a dot in a key)."""
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        target: Any = doc
        *parents, last = path.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return doc


def _problems(doc: Obj) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc)
    return info.value.problems


def test_the_base_scenario_is_fine() -> None:
    scenario = scenario_from_mapping(BASE)
    assert check_scenario(scenario) == []
    assert {a.source for a in scenario.arrivals} == {"workload.generate[0]", "workload.generate[1]"}


# ------------------------------------------------------------------------------------------------- queues
def test_an_unknown_queue_in_a_stream_names_the_field_and_the_value() -> None:
    (problem,) = _problems(_doc(**{"workload.generate.1.queues": ["nope", "team-b"]}))
    assert problem.startswith("workload.generate[1].queues[0]: unknown queue 'nope'")
    assert "org, team-a, team-b" in problem  # what the cluster has
    (single,) = _problems(_doc(**{"workload.generate.0.queue": "ghost"}))
    assert single.startswith("workload.generate[0].queue: unknown queue 'ghost'")
    (parent,) = _problems(_doc(**{"workload.generate.0.queue": "org"}))
    assert parent.startswith("workload.generate[0].queue: 'org' is a parent queue")


def test_default_queue_is_always_there() -> None:
    doc = _doc()
    del doc["workload"]["generate"][0]["queue"]  # no queue: default-queue, which the scheduler adds
    scenario = scenario_from_mapping(doc)
    assert "default-queue" in {a.queue for a in scenario.arrivals}
    result = simulate(scenario)
    assert result.summary.completed == result.summary.jobs == 10


def test_an_unknown_queue_of_an_explicit_job_or_manifest() -> None:
    doc = _doc()
    doc["workload"]["arrivals"] = [
        {"time": 0, "duration": "1h", "job": {"name": "x", "queue": "team-c", "gpus": 1}},
        {"time": 0, "duration": "1h", "manifest": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"kai.scheduler/queue": "team-d"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "i"}]}}},
    ]
    problems = _problems(doc)
    assert problems[0].startswith("workload.arrivals[0].job.queue: unknown queue 'team-c'")
    assert problems[1].startswith("workload.arrivals[1].manifest: metadata.labels[kai.scheduler/queue]: "
                                  "unknown queue 'team-d'")


def test_an_unknown_queue_of_a_trace_names_its_rows(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text("name,submit,duration,gpus,queue\nj1,0,60,1,team-a\nj2,10,60,1,vc9\n"
                                       "j3,20,60,1,vc9\n")
    doc = _doc()
    doc["workload"] = {"trace": {"format": "csv", "path": "jobs.csv",
                                 "mapping": {"name": "name", "submit": "submit", "duration": "duration",
                                             "gpus": "gpus", "queue": "queue"}}}
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc, tmp_path)
    (problem,) = info.value.problems
    assert problem.startswith("workload.trace.queue: unknown queue 'vc9'")
    assert f"2 jobs: {tmp_path / 'jobs.csv'}:3, {tmp_path / 'jobs.csv'}:4" in problem


# ----------------------------------------------------------------------------------------- impossible jobs
@pytest.mark.parametrize(("change", "field", "message"), [
    ({"workload.generate.0.gpus": 16}, "workload.generate[0]",
     "a pod asks 16 GPUs, 1 CPU core, 4Gi memory; no node has that much (the largest node has 8 GPUs"),
    ({"workload.generate.0.cpu": 65}, "workload.generate[0]", "a pod asks 1 GPU, 65 CPU cores"),
    ({"workload.generate.0.memory": "1Ti"}, "workload.generate[0]", "1Ti memory; no node has that much"),
    ({"workload.generate.1.pods": 3, "workload.generate.1.gpus": 8}, "workload.generate[1]",
     "a gang of 3 pods of 8 GPUs, 1 CPU core, 4Gi memory each (minMember 3) does not fit in the whole empty "
     "cluster: it holds at most 2 such pods"),
])
def test_a_job_that_could_never_run_is_refused(change: Obj, field: str, message: str) -> None:
    (problem,) = _problems(_doc(**change))
    assert problem.startswith(f"{field}: job default/")
    assert message in problem
    assert "(5 jobs of it:" in problem  # every job of the stream, counted


def test_an_impossible_mix_entry_and_an_explicit_job() -> None:
    doc = _doc(**{"workload.generate.0.mix": [{"gpus": 1}, {"weight": 1, "pods": 40, "gpus": 1}]})
    doc["workload"]["arrivals"] = [{"time": 0, "duration": "1h",
                                    "job": {"name": "huge", "queue": "team-a", "pods": 1, "cpu": 100}}]
    problems = _problems(doc)
    assert problems[0].startswith("workload.arrivals[0].job: job default/huge can never run: a pod asks 100 CPU cores")
    assert problems[1].startswith("workload.generate[0].mix[1]: job default/a-")
    assert "holds at most 16 such pods" in problems[1]


def test_every_problem_is_reported_together() -> None:
    doc = _doc(**{"workload.generate.0.queue": "ghost", "workload.generate.1.queues": ["team-a", "nope"],
                  "workload.generate.1.gpus": 16})
    problems = _problems(doc)
    assert [p.split(":")[0] for p in problems] == ["workload.generate[0].queue", "workload.generate[1].queues[1]",
                                                   "workload.generate[1]"]


def test_impossible_jobs_can_be_dropped_and_are_counted() -> None:
    doc = _doc(**{"workload.generate.1.gpus": 16, "impossible_jobs": "drop"})
    scenario = scenario_from_mapping(doc)
    assert len(scenario.arrivals) == 5 and len(scenario.dropped) == 5
    result = simulate(scenario)
    s = result.summary
    assert (s.jobs, s.completed, s.dropped) == (10, 5, 5)
    dropped = [j for j in result.jobs if j.outcome == "dropped"]
    assert len(dropped) == 5 and all("no node has that much" in j.reason for j in dropped)
    assert s.wait.count == 5  # dropped jobs could never start: left out of the waiting times
    with pytest.raises(ScenarioError, match=r"^impossible_jobs: expected error .* or drop"):
        scenario_from_mapping(_doc(impossible_jobs="skip"))


# ------------------------------------------------------------------------------------ malformed values
@pytest.mark.parametrize(("change", "message"), [
    ({"period": 0}, r"^period: expected a duration > 0"),
    ({"period": "-5s"}, r"^period: must be >= 0"),
    ({"until": -1}, r"^until: must be >= 0, got -1"),
    ({"workload.generate.0.cpu": "-2"}, r"^workload\.generate\[0\]\.cpu: must be >= 0, got '-2'"),
    ({"workload.generate.0.memory": "lots"}, r"^workload\.generate\[0\]\.memory: expected a quantity"),
    ({"workload.generate.0.jobs": -3}, r"^workload\.generate\[0\]\.jobs: expected a non-negative integer, got -3"),
    ({"workload.generate.0.every": "-1m"}, r"^workload\.generate\[0\]\.every: must be >= 0"),
    ({"perod": "1m"}, r"^perod: unknown field"),
    ({"workload.traces": {}}, r"^workload\.traces: unknown field"),
    ({"cluster.pool": []}, r"^cluster\.pool: unknown field"),
    ({"cluster.pools.0.gpu": 8}, r"^cluster\.pools\[0\]\.gpu: unknown field \(expected name, count, gpus, "),
    ({"workload.generate.0.duration": ["2h", "10m"]}, r"^workload\.generate\[0\]\.duration: min \(2h\) > max \(10m\)"),
    ({"workload.generate.0.pods": {"min": 8, "max": 2}}, r"^workload\.generate\[0\]\.pods: min \(8\) > max \(2\)"),
    ({"cluster.queue_tree": {"shares": [2, 1]}},
     r"^cluster\.queue_tree\.shares: expected \[min, max\] with 0 < min <= max"),
    ({"limits": {"pods": 0}}, r"^limits\.pods: expected a positive integer, got 0"),
    ({"limits": {"gpus": 5}}, r"^limits\.gpus: unknown field \(expected nodes, jobs, pods, devices, queues\)"),
])
def test_malformed_values_name_the_field(change: Obj, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_from_mapping(_doc(**change))


def test_explicit_job_quantities_are_checked() -> None:
    doc = _doc()
    doc["workload"]["arrivals"] = [{"time": 0, "job": {"name": "x", "queue": "team-a", "memory": "-1Gi"}}]
    with pytest.raises(ScenarioError, match=r"^workload\.arrivals\[0\]\.job\.memory: must be >= 0"):
        scenario_from_mapping(doc)
    doc["workload"]["arrivals"] = [{"time": 0, "when": 5, "job": {"name": "x", "queue": "team-a"}}]
    with pytest.raises(ScenarioError, match=r"^workload\.arrivals\[0\]\.when: unknown field"):
        scenario_from_mapping(doc)
    doc["workload"]["arrivals"] = [{"time": 0, "job": {"name": "x", "queue": "team-a", "gpu": 2}}]
    with pytest.raises(ScenarioError, match=r"^workload\.arrivals\[0\]\.job\.gpu: unknown field \(expected name, "):
        scenario_from_mapping(doc)


# ------------------------------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(("change", "message"), [
    ({"cluster.pools.0.count": 10_000_000},
     "cluster.pools[0].count: 10,000,000 nodes in the pools up to this one, more than the scenario's limit of "
     "100,000 (limits.nodes: raise it to simulate more)"),
    ({"workload.generate.0.jobs": 10_000_000},
     "workload.generate[0].jobs: 10,000,000 jobs, more than the scenario's limit of 1,000,000 (limits.jobs: raise "
     "it to simulate more)"),
    ({"workload.generate.1.jobs": 999_999},
     "workload.generate[1].jobs: 999,999 jobs (and 5 before), more than the scenario's limit of 1,000,000"),
    ({"workload.generate.0.pods": [1_000_001]},
     "workload.generate[0].pods: jobs of up to 1,000,001 pods, more than the scenario's limit of 1,000,000 "
     "(limits.pods: raise it to simulate more)"),
    ({"workload.generate.0.pods": 300_000},
     "workload.generate[0].jobs: 5 jobs of at least 300,000 pods: 1,500,000 pods, more than the scenario's limit "
     "of 1,000,000"),
    ({"cluster.queue_tree": {"departments": 1000, "teams": 1000}},
     "cluster.queue_tree: 1,000 departments of 1,000 teams: 1,001,000 queues, more than the scenario's limit of "
     "100,000 (limits.queues: raise it to simulate more)"),
    ({"cluster.pools.0.gpus": 0, "cluster.pools.0.count": 2_000,
      "cluster.pools.0.dra": {"driver": "gpu.nvidia.com", "devices": 1000}},
     "cluster.pools[0].dra.devices: 2,000,000 DRA devices in the pools up to this one, more than the scenario's "
     "limit of 1,000,000 (limits.devices: raise it to simulate more)"),
])
def test_sizes_over_the_limits_are_refused_before_anything_is_made(change: Obj, message: str) -> None:
    doc = _doc(**change)
    started = time.monotonic()
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc)
    assert str(info.value).startswith(message), str(info.value)
    assert time.monotonic() - started < 5  # nothing was generated


def test_pods_drawn_are_counted_as_the_jobs_are_made() -> None:
    doc = _doc(**{"workload.generate.0.pods": [1, 600], "workload.generate.0.jobs": 40}, limits={"pods": 1000})
    with pytest.raises(ScenarioError, match=r"^workload\.generate\[0\]: 1,\d{3} pods with this job's 600, more "
                                            r"than the scenario's limit of 1,000 \(limits\.pods"):
        scenario_from_mapping(doc)


def test_an_explicit_job_counts_too_and_the_limits_can_be_raised() -> None:
    doc = _doc(limits={"pods": 12})
    doc["workload"]["arrivals"] = [{"time": 0, "duration": "1h", "job": {"name": "x", "queue": "team-a", "pods": 3,
                                                                         "gpus": 1}}]
    with pytest.raises(ScenarioError, match=r"^workload\.generate\[1\]\.jobs: 5 jobs of at least 1 pod: 5 pods "
                                            r"\(and 8 before\), more than the scenario's limit of 12 \(limits\.pods"):
        scenario_from_mapping(doc)
    doc["limits"] = {"pods": 13, "jobs": 11}
    assert len(scenario_from_mapping(doc).arrivals) == 11
    doc["cluster"]["pools"][0]["count"] = 200_000
    doc["limits"] = {"nodes": 100}
    with pytest.raises(ScenarioError, match=r"limits\.nodes"):
        scenario_from_mapping(doc)


# ------------------------------------------------------------------------------------- cluster objects
def test_errors_of_the_cluster_objects_are_problems_of_the_scenario(tmp_path: Path) -> None:
    doc = _doc()
    doc["cluster"]["objects"][1]["spec"]["resources"]["gpu"] = {"quota": -5, "limit": -1, "overQuotaWeight": -2}
    expected = [
        "cluster: Queue team-a: spec.resources.gpu.quota: must be >= 0 or -1 (unlimited), got -5",
        "cluster: Queue team-a: spec.resources.gpu.overQuotaWeight: must be >= 0 (0: no share of what is left over "
        "quotas), got -2"]
    assert [str(p) for p in check_scenario(scenario_from_mapping(doc))] == expected
    path = _write(tmp_path, doc)
    result = CliRunner().invoke(cli, ["simulate", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"{path}: {line}" for line in expected] + ["nothing simulated: 2 problems"]
    assert result.stdout == "" and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ files and input limits
@pytest.mark.parametrize(("text", "message"), [
    ("", "an empty file; a scenario is a mapping with cluster, workload, ..."),
    ("# nothing but a comment\n", "an empty file; a scenario is a mapping"),
    ("- 1\n- 2\n", "expected a scenario (a mapping with cluster, workload, ...), got a list"),
    ("just words\n", "expected a scenario (a mapping with cluster, workload, ...), got a string"),
])
def test_an_empty_or_shapeless_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["simulate", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{path}: {message}")
    assert result.stderr.endswith("nothing simulated: 1 problem\n")


def test_the_scenario_and_its_files_are_read_within_the_input_limit(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE)
    size = path.stat().st_size
    result = CliRunner().invoke(cli, ["simulate", str(path), "--max-input-bytes", str(size - 1)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{path}: larger than {size - 1:,} bytes (the input limit: --max-input-bytes or "
                                    "KAISCHED_MAX_INPUT_BYTES)")
    doc = _doc()
    doc["cluster"]["files"] = ["/dev/zero"]
    with pytest.raises(ScenarioError, match=r"^cluster\.files: file /dev/zero: larger than 1,000 bytes"):
        scenario_from_mapping(doc, limits=InputLimits(max_bytes=1000))


def test_a_scenario_that_is_a_fifo_nobody_writes_to_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    result = CliRunner(env={"KAISCHED_INPUT_TIMEOUT": "0.2"}).invoke(cli, ["simulate", str(fifo)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{fifo}: a FIFO that no program writes to: nothing came in 0.2 s")


# ----------------------------------------------------------------------------------------- the command
def _write(tmp_path: Path, doc: Obj, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_command_exits_2_naming_the_file_the_field_and_the_value(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc(**{"workload.generate.1.queues": ["team-a", "nope"],
                                    "workload.generate.0.gpus": 16}))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(path), "-o", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{path}: workload.generate[1].queues[1]: unknown queue 'nope'")
    assert lines[1].startswith(f"{path}: workload.generate[0]: job default/a-00000 can never run: a pod asks 16 GPUs")
    assert lines[-1] == "nothing simulated: 2 problems"
    assert "Traceback" not in result.output
    assert result.stdout == "" and not out.exists()  # nothing simulated, nothing written


def test_compare_checks_both_files_before_running_either(tmp_path: Path) -> None:
    good = _write(tmp_path, BASE, "good.yaml")
    bad = _write(tmp_path, _doc(period="soon"), "bad.yaml")
    result = CliRunner().invoke(cli, ["simulate", "--compare", str(good), str(bad), "-o", str(tmp_path / "cmp")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{bad}: period: ")
    assert result.stdout == "" and not (tmp_path / "cmp").exists()


def test_a_scheduler_config_error_exits_2_before_anything_runs(tmp_path: Path) -> None:
    path = _write(tmp_path, {**BASE, "config": {"actions": "allocate, teleport"}})
    result = CliRunner().invoke(cli, ["simulate", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{path}: config: ") and "teleport" in result.stderr
    assert result.stdout == ""  # refused while reading: no run started
    assert "Traceback" not in result.output
