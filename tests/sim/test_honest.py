"""Figures that do not flatter the run: every job accounted for, waiting times that count the jobs still waiting,
"showing 10 of 19" when a list is cut, a readable fragmentation panel, and a comparison that only ranks runs
that can be ranked, in the order given."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kaisched.sim import Scenario
from kaisched.sim.engine import simulate
from kaisched.sim.model import JobRecord, Sample, SimResult, Stats, Summary
from kaisched.sim.report import (
    _Series,
    accounting_text,
    compare,
    compare_dict,
    compare_text,
    fragmentation_intervals,
    render_compare_html,
    render_html,
    summary_text,
    write_outputs,
)
from tests.sim.test_engine import arrival
from tests.unit.builders import node, queue


def _accounting_run() -> SimResult:
    """5 GPUs. Queue a (no quota) fills 4 with four 1-GPU jobs; d (queue b) takes the fifth and completes at 30;
    b (queue b, 3 GPUs) arrives at 100 and reclaims two of a's GPUs; c (queue a, 4 GPUs) arrives at 120 and
    cannot get them; late arrives after the end (125)."""
    cluster = [node("n1", 5), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=4)]
    arrivals = [arrival(0, f"a{i}", 1, 1, 1000, q="a") for i in range(4)]
    arrivals += [arrival(0, "d", 1, 1, 30, q="b"), arrival(100, "b", 1, 3, 20, q="b"),
                 arrival(120, "c", 1, 4, 100, q="a"), arrival(500, "late", 1, 1, 10, q="b")]
    return simulate(Scenario("accounting", cluster, arrivals, period=10, until=125))


def test_every_job_is_accounted_for() -> None:
    result = _accounting_run()
    s = result.summary
    outcome = {j.name.split("/")[1]: j.outcome for j in result.jobs}
    assert outcome == {"a0": "running", "a1": "running", "a2": "evicted", "a3": "evicted", "d": "completed",
                       "b": "running", "c": "never started"}
    assert s.accounted == {"completed": 1, "running": 3, "evicted": 2, "never started": 1, "dropped": 0}
    assert sum(s.accounted.values()) == s.jobs == 7 and s.not_arrived == 1 and s.end == 125
    assert accounting_text(s) == ("1 of 7 jobs completed, 3 still running at the end, 2 evicted and waiting again "
                                  "at the end, 1 never started (1 more would have arrived after the end)")


def test_waiting_times_count_the_jobs_still_waiting_as_a_lower_bound(tmp_path: Path) -> None:
    result = _accounting_run()
    s = result.summary
    # a0-a3 and d wait 0, b 10 (arrived at 100, started at the 110 cycle), c still waits: 5 s until the end
    assert (s.wait.count, s.wait_censored) == (7, 1)
    assert s.wait.mean == pytest.approx((10 + 5) / 7)
    assert s.jct.count == 1  # JCT: the completed jobs only
    text = summary_text(result, width=200)
    assert "wait mean ≥ 2.1s" in text
    assert "waiting times are a lower bound: 1 job still waiting at the end counts with its wait up to the end" in text
    assert "JCT and makespan are over the 1 completed jobs" in text
    data = json.loads(write_outputs(result, tmp_path)["summary.json"].read_text())
    assert data["summary"]["wait_is_lower_bound"] is True and data["summary"]["wait_censored"] == 1
    assert data["outcomes"] == {"completed": 1, "running": 3, "evicted": 2, "never started": 1, "dropped": 0}
    page = (tmp_path / "report.html").read_text()
    assert "≥ 2.1s" in page and "Every job accounted for" in page
    rows = [r.split(",") for r in (tmp_path / "jobs.csv").read_text().splitlines()]
    at = rows[0].index("outcome")
    assert rows[0][at:at + 4] == ["outcome", "reason", "pending", "last_reason"]
    assert sorted(r[at] for r in rows[1:]) == sorted(j.outcome for j in result.jobs)
    # c still waits at the end: its 5 s count as pending, under the reason it waits for
    c = next(r for r in rows[1:] if r[0].endswith("/c"))
    assert float(c[at + 2]) == 5.0 and float(c[rows[0].index(f"pending:{c[at + 3]}")]) == 5.0


def _summary(jobs: int, completed: int, makespan: float, jct: float) -> Summary:
    st = Stats(completed, jct, jct, jct, jct)
    return Summary(jobs, completed, jobs - completed, makespan, 0.5, 0.0, st, st, 0, 0.0, 0.1, 0.9, 10, 0.1)


def _run(name: str, jobs: int, completed: int, makespan: float, jct: float) -> SimResult:
    sample = Sample(0.0, 8.0, 4.0, 0.0, 4.0, 0.0, 0, 1, {})
    records = [JobRecord(f"j{i}", "q", 1.0, 0.0, 60.0, 0.0, 60.0 if i < completed else None) for i in range(jobs)]
    return SimResult(name, [sample], records, _summary(jobs, completed, makespan, jct))


def test_compare_ranks_only_comparable_runs_in_the_order_given(tmp_path: Path) -> None:
    # B looks faster (makespan, JCT) because it finished fewer jobs
    a, b = _run("zeta", 750, 750, 7200.0, 600.0), _run("alpha", 750, 730, 3600.0, 300.0)
    data = compare_dict([a, b], ["A", "B"])
    rows = {m["key"]: m for m in data["metrics"]}
    for key in ("makespan", "jct_mean", "wait_p95"):
        assert rows[key]["best"] == [] and rows[key]["comparable"] is False
        assert rows[key]["note"] == "not comparable: run B finished fewer jobs (A 750, B 730 completed)"
    assert rows["completed"]["best"] == ["A"] and rows["completed"]["better"] == "higher"
    assert rows["gpu_allocation_mean"]["comparable"] is True
    html = render_compare_html([a, b], ["A", "B"])
    assert "<h1>zeta / alpha</h1>" in html and "not comparable: run B finished fewer jobs" in html
    text = compare_text([a, b], ["A", "B"], width=200)
    makespan = next(line for line in text.splitlines() if line.startswith("makespan"))
    assert "†" in makespan and "*" not in makespan
    assert "† not comparable: run B finished fewer jobs (A 750, B 730 completed)" in text
    assert text.splitlines()[0] == "zeta / alpha: 2 runs compared (A, B)"
    # the same number completed: the faster run is the best
    c = _run("alpha", 750, 750, 3600.0, 300.0)
    rows = {m["key"]: m for m in compare_dict([a, c], ["A", "C"])["metrics"]}
    assert rows["makespan"]["best"] == ["C"] and rows["completed"]["best"] == []
    # different workloads: nothing about jobs is ranked
    d = _run("other", 700, 700, 3600.0, 300.0)
    rows = {m["key"]: m for m in compare_dict([a, d], ["A", "D"])["metrics"]}
    assert rows["completed"]["best"] == [] and "different workloads (A 750, D 700 jobs)" in rows["completed"]["note"]
    compare([a, b], ["A", "B"], tmp_path)
    assert json.loads((tmp_path / "compare.json").read_text())["labels"] == ["A", "B"]


def test_a_cut_list_says_how_much_it_shows() -> None:
    result = _accounting_run()
    extra = [JobRecord(f"default/e{i}", "a", 1.0, 0.0, 60.0, 0.0, 60.0, evictions=1, lost_gpu_seconds=10.0 + i,
                       outcome="completed") for i in range(17)]
    result.jobs.extend(extra)  # 19 evicted jobs in all
    page = render_html(result)
    assert "Evicted (19; showing 10 of 19, most work lost first)" in page
    assert "Never started (1; in arrival order)" in page
    assert "Still running at the end (3; in arrival order)" in page


def test_fragmentation_is_aggregated_per_interval() -> None:
    """Samples alternate between 1 idle GPU, fragmented (100 %), and 99 idle GPUs of which 1 fragmented (1 %):
    per sample the ratio jumps between 100 % and 1 %; per interval it is 2 of 100 idle GPUs, 2 %."""
    n = 400
    t = np.arange(n, dtype=np.float64) * 60.0
    idle = np.where(np.arange(n) % 2 == 0, 1.0, 99.0)
    frag = np.where(np.arange(n) % 2 == 0, 1.0, 1.0 / 99.0)
    zeros = np.zeros(n)
    series = _Series(t, zeros + 100, 100 - idle, zeros, idle, frag, zeros, zeros, {})
    starts, ends, share = fragmentation_intervals(series, 20)
    assert len(starts) == len(ends) == len(share) == 20
    assert starts[0] == 0 and ends[-1] == pytest.approx(n * 60.0)
    assert np.allclose(share, 0.02)
    # no idle GPU in an interval: no value there (not 0 %)
    idle[:200] = 0.0
    _, _, share = fragmentation_intervals(_Series(t, zeros + 100, 100 - idle, zeros, idle, frag, zeros, zeros, {}),
                                          20)
    assert np.isnan(share[:10]).all() and not np.isnan(share[10:]).any()
    none = np.zeros(0)
    empty = _Series(none, none, none, none, none, none, none, none, {})
    assert all(len(x) == 0 for x in fragmentation_intervals(empty))


def test_the_utilisation_caption_defines_fragmentation() -> None:
    page = render_html(_accounting_run())
    assert "the share that sat on nodes already partly used" in page
    assert "per interval of" in page
