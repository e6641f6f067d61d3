"""Bounded input of a simulation (issue 23, item 6): trace files read within the input limits (their size, a
FIFO's wait), the jobs and pods of a trace counted against the scenario's limits as its rows are read, and
workload manifests whose replica counts would make more pods than ``limits.pods`` refused before their
controllers make anything; ``kaisched simulate`` exits 2 naming the file, the object and the field."""

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
from kaisched.k8s.loader import InputLimitError, InputLimits
from kaisched.sim import ScenarioError, scenario_from_mapping, simulate
from kaisched.sim import traces as T

Obj = dict[str, Any]
HUGE = 100_000_000
QUICK = 2.0  # seconds: what refusing a huge count may take (making the pods would take minutes and gigabytes)


def _queue(name: str) -> Obj:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {k: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                                   for k in ("gpu", "cpu", "memory")}}}


BASE: Obj = {
    "name": "bounded", "period": "1m",
    "cluster": {"pools": [{"name": "n", "count": 2, "gpus": 8, "cpu": 64, "memory": "512Gi"}],
                "objects": [_queue("team-a")]},
    "workload": {},
}


def _doc(**workload: Any) -> Obj:
    doc = copy.deepcopy(BASE)
    doc["workload"].update(workload)
    return doc


def _deployment(replicas: int, name: str = "x") -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ml", "labels": {"kai.scheduler/queue": "team-a"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"schedulerName": "kai-scheduler",
                                           "containers": [{"name": "c", "image": "i",
                                                           "resources": {"requests": {"cpu": "1"}}}]}}}}


def _write(path: Path, doc: Obj) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _simulate(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner(env=env).invoke(cli, ["simulate", *args])


# ------------------------------------------------------------------------------------------- manifests
def test_a_huge_replica_count_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    doc = _doc(arrivals=[{"time": 0, "duration": "1h", "manifest": _deployment(HUGE)}])
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc)
    assert time.perf_counter() - start < QUICK
    assert info.value.problems == [
        "workload.arrivals[0].manifest: Deployment ml/x: spec.replicas: 100000000 exceeds the limit of 1,000,000 "
        "pods per simulation (limits.pods)"]
    path = _write(tmp_path / "s.yaml", doc)
    start = time.perf_counter()
    result = _simulate(str(path), "-o", str(tmp_path / "out"))
    assert time.perf_counter() - start < QUICK
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"{path}: workload.arrivals[0].manifest: Deployment ml/x: spec.replicas: 100000000 exceeds the limit of "
        "1,000,000 pods per simulation (limits.pods)", "nothing simulated: 1 problem"]
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_a_manifest_file_counts_with_the_pods_before_it_and_the_limit_can_be_raised(tmp_path: Path) -> None:
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump(_deployment(30)))
    jobs = [{"time": 0, "duration": "1h", "job": {"name": "j", "queue": "team-a", "pods": 80}},
            {"time": 60, "duration": "1h", "file": "deploy.yaml"}]
    doc = _doc(arrivals=jobs)
    doc["limits"] = {"pods": 100}
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc, tmp_path)
    assert info.value.problems == [
        "workload.arrivals[1].file: Deployment ml/x: spec.replicas: 30 (110 pods with the 80 before it) exceeds the "
        "limit of 100 pods per simulation (limits.pods)"]
    doc["limits"] = {"pods": 110}
    scenario = scenario_from_mapping(doc, tmp_path)
    assert scenario.max_pods == 110
    result = simulate(scenario)
    deployment = next(r for r in result.jobs if r.name == "ml/x")
    assert deployment.start == 60  # its 30 pods were made at the arrival, within the limit


@pytest.mark.parametrize(("manifest", "message"), [
    ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "ml"},
      "spec": {"replicatedJobs": [{"name": "w", "replicas": 1000, "template": {"spec": {
          "parallelism": 2000, "completions": 2000,
          "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}]}},
     "JobSet ml/js: spec.replicatedJobs[0].replicas: 1000 Jobs of 2,000 pods (2,000,000 pods) exceeds the limit of "
     "1,000,000 pods per simulation (limits.pods)"),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
      "spec": {"parallelism": HUGE, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}},
     "Job ml/j: spec.parallelism: 100000000 exceeds the limit of 1,000,000 pods per simulation (limits.pods)"),
])
def test_products_and_other_kinds_are_refused_naming_the_field(manifest: Obj, message: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(_doc(arrivals=[{"time": 0, "manifest": manifest}]))
    assert time.perf_counter() - start < QUICK
    assert info.value.problems == [f"workload.arrivals[0].manifest: {message}"]


# ---------------------------------------------------------------------------------------------- traces
HEADER = "jobname,submit_time,duration,gpu_num,node_num,vc\n"


def _trace(tmp_path: Path, rows: list[str], **options: Any) -> Obj:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "".join(f"{r}\n" for r in rows))
    mapping = {"name": "jobname", "submit": "submit_time", "duration": "duration", "gpus": "gpu_num",
               "pods": "node_num", "queue": "vc"}
    return _doc(trace={"format": "csv", "path": str(path), "mapping": mapping, **options})


def test_a_trace_row_asking_huge_pods_is_refused_before_its_pods_are_made(tmp_path: Path) -> None:
    doc = _trace(tmp_path, ["a,0,60,1,1,team-a", f"b,10,60,8,{HUGE},team-a"])
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc)
    assert time.perf_counter() - start < QUICK
    assert info.value.problems == [
        f"workload.trace: {tmp_path / 'jobs.csv'}:3: column 'node_num': a job of 100,000,000 pods (100,000,001 pods "
        "with the 1 before it), more than the limit of 1,000,000 pods (limits.pods: raise it to simulate more)"]


def test_a_trace_counts_its_jobs_as_it_is_read_with_the_jobs_before_it(tmp_path: Path) -> None:
    rows = [f"j{i},{i},60,1,1,team-a" for i in range(6)]
    doc = _trace(tmp_path, rows)
    doc["workload"]["arrivals"] = [{"time": 0, "duration": "1h", "job": {"name": "first", "queue": "team-a"}}]
    doc["limits"] = {"jobs": 4}
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc)
    assert info.value.problems == [
        f"workload.trace: {tmp_path / 'jobs.csv'}:5: 5 jobs with the 1 before the trace, more than the limit of 4 "
        "jobs (limits.jobs: raise it, or take the earliest rows with limit)"]
    doc["workload"]["trace"]["limit"] = 3  # the earliest three rows only: within the limit
    scenario = scenario_from_mapping(doc)
    assert [a.name for a in scenario.arrivals] == ["default/first", "default/j0", "default/j1", "default/j2"]


def test_a_trace_limit_keeps_the_earliest_rows_whatever_their_order_in_the_file(tmp_path: Path) -> None:
    rows = ["late,900,60,1,1,team-a", "b,20,60,1,1,team-a", "a,20,60,1,1,team-a", "first,5,60,1,1,team-a",
            "c,700,60,1,1,team-a"]
    doc = _trace(tmp_path, rows, limit=3)
    doc["limits"] = {"jobs": 3}
    scenario = scenario_from_mapping(doc)
    assert [(a.name, a.time) for a in scenario.arrivals] == [("default/first", 0), ("default/b", 15),
                                                             ("default/a", 15)]


def test_a_trace_that_is_a_character_device_is_read_up_to_the_limit(tmp_path: Path) -> None:
    doc = _doc(trace={"format": "openb", "path": "/dev/zero", "queue": "team-a"})
    with pytest.raises(ScenarioError) as info:
        scenario_from_mapping(doc, limits=InputLimits(max_bytes=1 << 20))
    assert info.value.problems == [
        "workload.trace: file /dev/zero: larger than 1,048,576 bytes (the input limit: --max-input-bytes or "
        "KAISCHED_MAX_INPUT_BYTES)"]
    path = _write(tmp_path / "s.yaml", doc)
    result = _simulate(str(path), "--max-input-bytes", "1Mi", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{path}: workload.trace: file /dev/zero: larger than 1,048,576 bytes")


def test_a_trace_that_is_a_fifo_nobody_writes_to_is_given_up(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    path = _write(tmp_path / "s.yaml", _doc(trace={"format": "csv", "preset": "philly", "path": str(fifo)}))
    start = time.perf_counter()
    result = _simulate(str(path), "-o", str(tmp_path / "out"), env={"KAISCHED_INPUT_TIMEOUT": "0.2"})
    assert time.perf_counter() - start < 5
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{path}: workload.trace: file {fifo}: a FIFO that no program writes to: "
                                    "nothing came in 0.2 s (start the writer first, or wait longer with "
                                    "KAISCHED_INPUT_TIMEOUT=SECONDS)")


def test_a_missing_or_binary_trace_and_a_limits_option_are_clear(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(ScenarioError, match=rf"^workload\.trace: file {missing}: cannot read: No such file"):
        scenario_from_mapping(_doc(trace={"format": "csv", "preset": "philly", "path": str(missing)}))
    binary = tmp_path / "bin.csv"
    binary.write_bytes(HEADER.encode() + b"a,0,60,1,1,team-a\n\xff\xfe,1,60,1,1,team-a\n")
    with pytest.raises(ScenarioError, match=rf"^workload\.trace: {binary}:3: not UTF-8 text \(byte 68 of the file\)"):
        scenario_from_mapping(_doc(trace={"format": "csv", "preset": "philly", "path": str(binary)}))
    with pytest.raises(ScenarioError, match=r"^workload\.trace\.limits: not an option of a trace \(the scenario's "):
        scenario_from_mapping(_doc(trace={"format": "csv", "preset": "philly", "path": "x", "limits": {}}))


# ------------------------------------------------------------------------------------------ the trace API
def test_trace_limits_in_python(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n"
                    + "".join(f"p{i},1000,1024,1,1000,{100 - i}\n" for i in range(5)))
    with pytest.raises(T.TraceError) as info:
        T.openb_arrivals(path, queue="q", limits=T.TraceLimits(jobs=3))
    assert info.value.problem == T.TraceProblem(str(path), 5, "", "4 jobs, more than the limit of 3 jobs "
                                                "(limits.jobs: raise it, or take the earliest rows with limit)")
    with pytest.raises(T.TraceError, match=r"csv:4: a job of 1 pod \(3 pods with the 2 before it\), more than the "
                                           r"limit of 2 pods"):
        T.openb_arrivals(path, queue="q", limits=T.TraceLimits(pods=2))
    latest_first = T.openb_arrivals(path, queue="q", limit=2, limits=T.TraceLimits(jobs=2))
    assert [a.name for a in latest_first] == ["default/p4", "default/p3"]  # the earliest creation times
    with pytest.raises(InputLimitError, match=rf"^file {path}: larger than 10 bytes"):
        T.read_openb_pods(path, limits=InputLimits(max_bytes=10))
