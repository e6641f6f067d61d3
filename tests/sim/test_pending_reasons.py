"""Where the waiting went (issue 24, item 6): each simulated job's time pending per reason code, from the cycles'
PodGroup statuses, in jobs.csv, summary.json, the report and the terminal summary; and the inputs the report
states. The cases are small enough to compute by hand."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.framework.result import (
    FITS_NOWHERE,
    NOT_REACHED,
    OVER_LIMIT,
    CycleResult,
    PodGroupStatus,
)
from kaisched.sim import Scenario, load_scenario
from kaisched.sim.engine import Simulator, simulate
from kaisched.sim.metrics import pending_by_reason
from kaisched.sim.model import AWAITING_CYCLE, PENDING_REASONS, JobRecord, SimResult
from kaisched.sim.report import (
    JOBS_COLUMNS,
    render_html,
    summary_dict,
    summary_text,
    waiting_phrases,
    write_outputs,
)
from tests.sim.test_engine import arrival
from tests.unit.builders import node, queue


def _jobs(result: SimResult) -> dict[str, JobRecord]:
    return {j.name.split("/")[1]: j for j in result.jobs}


def test_a_job_waits_for_the_first_cycle_then_for_room() -> None:
    """8 GPUs: a (8 GPUs, 1 h) at 0 runs at once; b (8 GPUs) arrives at 30 s, is first looked at by the 60 s cycle
    (fits nowhere: a holds every GPU) and starts when a ends at 3600 s."""
    sc = Scenario("fifo", [node("n1", 8), queue("q")], [arrival(0, "a", 1, 8, 3600), arrival(30, "b", 1, 8, 600)],
                  period=60)
    jobs = _jobs(simulate(sc))
    assert jobs["a"].pending_by_reason == {} and jobs["a"].last_reason == ""
    b = jobs["b"]
    assert b.pending_by_reason == {AWAITING_CYCLE: 30.0, FITS_NOWHERE: 3540.0}
    assert b.last_reason == FITS_NOWHERE
    assert b.pending == b.wait == 3570.0


def test_over_its_queues_limit_until_a_job_of_the_queue_ends() -> None:
    """Queue q's GPU limit is 4: a and b (2 GPUs each) run from 0; c (2 GPUs) arrives at 20 s, is over the limit from
    the 60 s cycle until a ends at 600 s. A job alone over the limit waits for it to the end of the run."""
    sc = Scenario("limit", [node("n1", 8), queue("q", gpu_limit=4)],
                  [arrival(0, "a", 1, 2, 600), arrival(0, "b", 1, 2, 1200), arrival(20, "c", 1, 2, 100)], period=60)
    c = _jobs(simulate(sc))["c"]
    assert (c.start, c.pending_by_reason) == (600.0, {AWAITING_CYCLE: 40.0, OVER_LIMIT: 540.0})
    alone = Scenario("alone", [node("n1", 8), queue("q", gpu_limit=4)], [arrival(0, "big", 1, 8, 600)], period=60,
                     until=300)
    big = _jobs(simulate(alone))["big"]
    assert (big.start, big.outcome, big.pending_by_reason, big.last_reason) == (
        None, "never started", {OVER_LIMIT: 300.0}, OVER_LIMIT)


def test_an_evicted_job_waits_again_and_its_reasons_count_every_wait() -> None:
    """Queue a (no quota) fills 4 GPUs; b (quota 4) asks 2 GPUs at 100 s: the 100 s cycle evicts two of a's jobs and
    pipelines b (waiting for victims until the 110 s cycle binds it). The evicted jobs are not looked at before the
    110 s cycle, then wait for fair share to free until b ends at 160 s."""
    cluster = [node("n1", 4), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=4)]
    arrivals = [arrival(0, f"a{i}", 1, 1, 1000, q="a") for i in range(4)] + [arrival(100, "b", 1, 2, 50, q="b")]
    jobs = _jobs(simulate(Scenario("reclaim", cluster, arrivals, period=10, until=400)))
    assert jobs["b"].pending_by_reason == {"waiting-for-victims": 10.0}
    evicted = [j for j in jobs.values() if j.evictions]
    assert len(evicted) == 2
    for j in evicted:
        assert j.pending_by_reason == {AWAITING_CYCLE: 10.0, "fair-share": 50.0}
        assert j.wait == 0.0 and j.pending == 60.0  # (the wait is to the first start; pending counts every wait)
    assert all(j.pending_by_reason == {} for j in jobs.values() if j.queue == "a" and not j.evictions)


def test_each_sample_counts_the_jobs_waiting_per_reason(tmp_path: Path) -> None:
    """The reclaim case: after the 100 s cycle a's two evicted jobs wait for a cycle and b for its victims; after the
    110 s cycle a's jobs wait for fair share (b runs); from 160 s nobody waits. Each sample's counts sum to its
    pending jobs; samples.csv has them."""
    result = _reclaim_result()
    by_time = {s.time: s for s in result.samples}
    assert by_time[100.0].pending_by_reason == {AWAITING_CYCLE: 2, "waiting-for-victims": 1}
    assert by_time[110.0].pending_by_reason == {"fair-share": 2}
    assert by_time[160.0].pending_by_reason == {}
    assert all(sum(s.pending_by_reason.values()) == s.pending_jobs for s in result.samples)
    with write_outputs(result, tmp_path)["samples.csv"].open() as f:
        rows = {float(r["time"]): r for r in csv.DictReader(f)}
    assert (rows[100.0]["pending:awaiting-cycle"], rows[100.0]["pending:waiting-for-victims"]) == ("2", "1")
    assert rows[110.0]["pending:fair-share"] == "2" and rows[110.0]["pending:awaiting-cycle"] == "0"
    page = (tmp_path / "report.html").read_text()
    assert '<img class="plot" alt="pending jobs by reason over time" src="data:image/png;base64,' in page


def test_the_first_tier_wins_and_a_reason_holds_until_a_cycle_gives_another() -> None:
    """A job of two PodGroups waits for the reason of the one whose code comes first in the tiers; a cycle that gives
    it no code leaves the reason as it was; only changes are recorded."""
    sim = Simulator(Scenario("two", [node("n1", 8), queue("q")], [], period=10))
    sim._arrive(arrival(0, "x", 1, 1, 100), 0.0)
    job = sim.jobs["default/x#0"]
    job.groups.append("default/x-extra")
    sim.job_of_group["default/x-extra"] = job

    def status(name: str, code: str | None) -> PodGroupStatus:
        return PodGroupStatus(name, "q", "Pending", "r" if code else None, "m" if code else None, code=code)

    sim._record_reasons(CycleResult(pod_groups=[status("default/x", FITS_NOWHERE),
                                                status("default/x-extra", OVER_LIMIT)]), 10.0)
    assert (job.waiting_for, job.waiting_since) == (OVER_LIMIT, 10.0)
    sim._record_reasons(CycleResult(pod_groups=[status("default/x", None)]), 20.0)  # no code: holds
    sim._record_reasons(CycleResult(pod_groups=[status("default/x", OVER_LIMIT)]), 30.0)  # same: no transition
    assert (job.waiting_for, job.waiting_since) == (OVER_LIMIT, 10.0)
    sim._record_reasons(CycleResult(pod_groups=[status("default/x", NOT_REACHED)]), 45.0)
    assert job.record.pending_by_reason == {AWAITING_CYCLE: 10.0, OVER_LIMIT: 35.0}
    assert (job.waiting_for, job.record.last_reason) == (NOT_REACHED, OVER_LIMIT)
    assert sim.waiting == {NOT_REACHED: 1}  # (the jobs waiting per reason, kept on each transition)


def _reclaim_result() -> SimResult:
    """The reclaim case above: a's two evicted jobs wait 10 s for a cycle and 50 s for fair share each, b 10 s for
    its victims: 130 job-seconds pending, 120 of them queue a's."""
    cluster = [node("n1", 4), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=4)]
    arrivals = [arrival(0, f"a{i}", 1, 1, 1000, q="a") for i in range(4)] + [arrival(100, "b", 1, 2, 50, q="b")]
    return simulate(Scenario("reclaim", cluster, arrivals, period=10, until=400))


def test_jobs_csv_has_each_jobs_time_per_reason(tmp_path: Path) -> None:
    result = _reclaim_result()
    with write_outputs(result, tmp_path)["jobs.csv"].open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == JOBS_COLUMNS
        rows = list(reader)
    assert JOBS_COLUMNS[-len(PENDING_REASONS):] == tuple(f"pending:{r}" for r in PENDING_REASONS)
    for row, job in zip(rows, result.jobs, strict=True):
        per_reason = {r: float(row[f"pending:{r}"]) for r in PENDING_REASONS}
        assert per_reason == {r: job.pending_by_reason.get(r, 0.0) for r in PENDING_REASONS}
        assert float(row["pending"]) == pytest.approx(sum(per_reason.values()))
        assert row["last_reason"] == job.last_reason
    evicted = [r for r in rows if r["evictions"] == "1"]
    assert len(evicted) == 2
    assert all((float(r["pending"]), float(r["pending:fair-share"])) == (60.0, 50.0) for r in evicted)


def test_summary_json_and_the_report_say_where_the_waiting_went(tmp_path: Path) -> None:
    result = _reclaim_result()
    overall = pending_by_reason(result.jobs)
    assert {r: (t.seconds, t.gpu_seconds, t.jobs) for r, t in overall.items()} == {
        "fair-share": (100.0, 100.0, 2), "waiting-for-victims": (10.0, 20.0, 1), AWAITING_CYCLE: (20.0, 20.0, 2)}
    data = summary_dict(result)["pending_by_reason"]
    assert list(data["all"]) == ["fair-share", "waiting-for-victims", AWAITING_CYCLE]  # in the order of the tiers
    assert data["all"]["fair-share"] == {"tier": "Waiting for fair share to free", "seconds": 100.0,
                                         "gpu_seconds": 100.0, "jobs": 2, "share": round(100 / 130, 4)}
    assert data["all"]["waiting-for-victims"]["share"] == round(10 / 130, 4)
    assert data["queues"]["a"]["fair-share"]["share"] == round(100 / 120, 4)
    assert data["queues"]["a"][AWAITING_CYCLE]["share"] == round(20 / 120, 4)
    assert data["queues"]["b"] == {"waiting-for-victims": {"tier": "Waiting for victims to terminate",
                                                           "seconds": 10.0, "gpu_seconds": 20.0, "jobs": 1,
                                                           "share": 1.0}}
    page = render_html(result)
    section = page[page.index("<h2>Where did the waiting go</h2>"):page.index("<h2>Every job accounted for</h2>")]
    text = re.sub(r"<[^>]+>", "|", section)
    assert "|Waiting for fair share to free||fair-share||0.0||77 %|" in text  # 100 job-seconds: 0.0 job-hours
    assert "|Waiting for victims to terminate||waiting-for-victims||0.0||8 %|" in text
    assert "|Not yet looked at by a cycle||awaiting-cycle||0.0||15 %|" in text
    assert "Per queue: share of its pending time" in text
    assert "|a||0.0||83 %||||17 %|" in text and "|b||0.0||||100 %|||" in text
    jobs_lists = page[page.index("<h2>Jobs worth a look</h2>"):]
    evicted = jobs_lists[jobs_lists.index("<h3>Evicted ("):]
    evicted = evicted[:evicted.index("<h3>", 4)]  # (up to the next list)
    assert "<th>mostly waited for</th>" in evicted
    assert re.sub(r"<[^>]+>", "|", evicted).count("|fair-share (83 %)|") == 2  # a's evicted jobs: 50 s of 60
    line = next(x for x in summary_text(result, width=200).splitlines() if x.startswith("waiting: "))
    assert line == "waiting: 0.0 job-hours pending · fair-share 77 % · awaiting-cycle 15 % · waiting-for-victims 8 %"
    text = summary_text(result, width=200)
    assert "· waited mostly for fair-share (83 %)" in text.split("\n  a ")[1].split("\n  b ")[0]
    assert text.split("\n  b ")[1].rstrip().endswith("· waited mostly for waiting-for-victims (100 %)")
    assert waiting_phrases(result, limit=2)[-1] == "1 more reason 8 %"
    assert waiting_phrases(result, limit=1)[-2:] == ["fair-share 77 %", "2 more reasons 23 %"]


def test_a_run_where_nobody_waited_has_no_section() -> None:
    result = simulate(Scenario("idle", [node("n1", 8), queue("q")], [arrival(0, "a", 1, 1, 60)], period=10))
    assert all(j.pending == 0 for j in result.jobs)
    assert "Where did the waiting go" not in render_html(result)
    assert summary_dict(result)["pending_by_reason"] == {"all": {}, "queues": {"q": {}}}
    assert not any(x.startswith("waiting: ") for x in summary_text(result).splitlines())


def test_the_report_states_the_scheduler_configuration_it_ran(tmp_path: Path) -> None:
    config = {"actions": "allocate", "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"},
                                                            {"name": "priority"}]}]}
    (tmp_path / "sched.yaml").write_text(yaml.safe_dump(config))
    doc = {"name": "cfg", "period": "30s", "config_file": "sched.yaml",
           "cluster": {"pools": [{"name": "n", "count": 1, "gpus": 8}], "objects": [queue("q")]},
           "workload": {"arrivals": [{"time": 0, "duration": "1m", "job": {"name": "j", "queue": "q", "gpus": 1}}]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    run = CliRunner().invoke(cli, ["simulate", str(path), "-o", str(out), "--no-progress"])
    assert run.exit_code == 0, run.output
    inputs = json.loads((out / "summary.json").read_text())["inputs"]
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert inputs["config_source"] == f"config_file: {tmp_path / 'sched.yaml'}"
    assert inputs["config_sha256"] == digest and inputs["scenario"] == "cfg"
    page = (out / "report.html").read_text()
    for text in ("scheduler configuration", f"config_file: {tmp_path / 'sched.yaml'}", digest):
        assert text in page, text
    # inline, and KAI's defaults
    doc.pop("config_file")
    path.write_text(yaml.safe_dump(doc))
    assert simulate(load_scenario(path)).inputs["config_source"] == "KAI's defaults"
    doc["config"] = config
    path.write_text(yaml.safe_dump(doc))
    inline = simulate(load_scenario(path)).inputs
    assert (inline["config_source"], inline["config_sha256"]) == ("config (in the scenario)", digest)


def test_a_comparison_says_where_each_runs_waiting_went(tmp_path: Path) -> None:
    from kaisched.sim.report import compare

    reclaim = _reclaim_result()
    limit = simulate(Scenario("limit", [node("n1", 8), queue("q", gpu_limit=4)],
                              [arrival(0, "a", 1, 2, 600), arrival(0, "b", 1, 2, 1200), arrival(20, "c", 1, 2, 100)],
                              period=60))
    files = compare([reclaim, limit], ["first", "second"], tmp_path)
    page = files["compare.html"].read_text()
    section = page[page.index("<h2>Where did the waiting go</h2>"):]
    text = re.sub(r"<[^>]+>", "|", section[:section.index("</section>")])
    # reclaim: 100 s fair-share, 10 s waiting-for-victims, 20 s awaiting-cycle of 130; limit: 40 s awaiting a cycle
    # and 540 s over the limit of 580
    assert "|Over its queue&#x27;s limit (over-limit)||||0.1 h · 93 %|" in text
    assert "|Waiting for fair share to free (fair-share)||0.0 h · 77 %|||" in text
    assert "|Not yet looked at by a cycle (awaiting-cycle)||0.0 h · 15 %||0.0 h · 7 %|" in text
    assert "|total||0.0 h||0.2 h|" in text
    data = json.loads(files["compare.json"].read_text())
    assert data["runs"]["second"]["pending_by_reason"]["all"]["over-limit"]["seconds"] == 540.0
