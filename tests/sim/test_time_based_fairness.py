"""Time-based fair share in the simulator (spec 5.7): the usage history on the simulated clock, KAI's time-based
simulator input, and the dynamics: a starved queue gets more until usage evens out, then allocations settle at the
long-run fair share (weight-only division gives the instantaneous share at once)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.sim import scenario_from_mapping, simulate
from kaisched.sim.fairness import _windowed, fairness, long_run_shares
from kaisched.sim.model import QueueSample, Sample, SimResult, Stats, Summary
from kaisched.sim.timebased import (
    TimeBasedError,
    TimeBasedRun,
    TimeBasedSimulation,
    csv_text,
    load_time_based,
    long_run_fair_share,
    parse_time_based,
    run_time_based,
    settling,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simulation" / "time-based"


@pytest.fixture(scope="module")
def two() -> TimeBasedSimulation:
    return load_time_based(EXAMPLES / "two-queues.yaml")


@pytest.fixture(scope="module")
def two_runs(two: TimeBasedSimulation) -> tuple[TimeBasedRun, TimeBasedRun]:
    return run_time_based(two), run_time_based(two, time_based=False)


# ------------------------------------------------------------------------------------------ two queues


def test_weight_only_gives_the_instantaneous_division(two_runs: tuple[TimeBasedRun, TimeBasedRun]) -> None:
    """Without usageDBConfig team-b gets half the cluster the cycle its jobs arrive, whatever team-a used."""
    _, weight_only = two_runs
    a, fa = weight_only.series("team-a")
    b, fb = weight_only.series("team-b")
    assert len(a) == 80
    assert a[:20] == [16.0] * 20 and b[:20] == [0.0] * 20
    assert a[20:] == [8.0] * 60 and b[20:] == [8.0] * 60
    assert fa[20:] == fb[20:] == [8.0] * 60
    assert all(s.queues["team-a"].usage is None for s in weight_only.result.samples)


def test_time_based_gives_the_starved_queue_more_then_settles(two_runs: tuple[TimeBasedRun, TimeBasedRun]) -> None:
    """team-a ran alone for 20 cycles (usage 1 over the 10-cycle window): when team-b arrives its shareWeight is
    0.5 + (0.5 - 0) = 1 against team-a's 0.5 + (0.5 - 1) = 0, so team-b takes the whole cluster; as the window
    slides the usages even out and both settle at the long-run fair share of 8 GPUs, 10 cycles (one window)
    after team-b arrived, without oscillating."""
    timed, _ = two_runs
    a, fa = timed.series("team-a")
    b, fb = timed.series("team-b")
    assert a[:20] == [16.0] * 20
    assert (fa[20], fb[20]) == (0.0, 16.0) and (a[20], b[20]) == (0.0, 16.0)
    assert all(x >= 8 for x in b[20:27]) and max(b[20:]) == 16
    assert sum(b[20:30]) == 100  # over its first window team-b got 100 GPU-cycles of 160, not 80
    figures = settling(timed)
    assert figures["team-a"].long_run == figures["team-b"].long_run == 8.0
    assert figures["team-a"].cycles == figures["team-b"].cycles == 10  # cycles to within 1 GPU, for good
    assert figures["team-a"].swing == figures["team-b"].swing == 0.0
    assert a[31:] == [8.0] * 49 and b[31:] == [8.0] * 49
    # the fair shares of the two always add up to the cluster
    assert all(x + y == pytest.approx(16.0) for x, y in zip(fa, fb, strict=True))
    # usage evened out: at the end both used half the cluster's GPUs over the window
    last = timed.result.samples[-1].queues
    assert last["team-a"].usage == pytest.approx(0.5) and last["team-b"].usage == pytest.approx(0.5)


def test_weight_only_error_is_zero_and_time_based_compensates(two_runs: tuple[TimeBasedRun, TimeBasedRun]) -> None:
    timed, weight_only = two_runs
    assert settling(weight_only)["team-b"].cycles == 0 and settling(weight_only)["team-b"].error == 0
    assert settling(timed)["team-b"].peak == 16.0
    # over the run team-b gets more GPU-time under time-based division: it is paid back what team-a took alone
    # within the window (19 GPU-cycles here)
    assert sum(weight_only.series("team-b")[0]) == 480 and sum(timed.series("team-b")[0]) == 499


def test_csv_is_kais_format(two_runs: tuple[TimeBasedRun, TimeBasedRun]) -> None:
    timed, _ = two_runs
    text = csv_text(timed.rows)
    lines = text.splitlines()
    assert lines[0] == "Time,QueueID,Allocation,FairShare"
    assert len(lines) == 1 + 80 * 3  # every cycle, every queue (the department too)
    assert lines[1:4] == ["0,dept,16.000000,16.000000", "0,team-a,16.000000,16.000000", "0,team-b,0.000000,0.000000"]
    assert lines[61:64] == ["20,dept,16.000000,16.000000", "20,team-a,0.000000,0.000000",
                            "20,team-b,16.000000,16.000000"]


def test_runs_are_deterministic(two: TimeBasedSimulation) -> None:
    short = replace(two, cycles=30)
    assert csv_text(run_time_based(short).rows) == csv_text(run_time_based(short).rows)


# ------------------------------------------------------------------------------------------ three queues


def test_three_queues_settle_at_their_weighted_shares() -> None:
    """Weights 1:1:2 on 16 GPUs; team-a ran alone for 30 cycles. Weight-only: 4/4/8 at once. Time-based: team-a
    gets less than 4 while its usage is the highest, b and c more than their share, then all three settle."""
    sim = load_time_based(EXAMPLES / "three-queues.yaml")
    assert long_run_fair_share(sim) == {"dept": 16.0, "team-a": 4.0, "team-b": 4.0, "team-c": 8.0}
    weight_only = run_time_based(sim, time_based=False)
    for q, share in (("team-a", 4.0), ("team-b", 4.0), ("team-c", 8.0)):
        assert weight_only.series(q)[0][30:] == [share] * 90
    timed = run_time_based(sim)
    a, b, c = (timed.series(q)[0] for q in ("team-a", "team-b", "team-c"))
    assert a[30:40] == [0.0] * 10  # paid back first
    assert min(b[30:40]) > 4 and min(c[30:40]) > 8
    assert all(x + y + z == pytest.approx(16.0) for x, y, z in zip(a, b, c, strict=True))
    figures = settling(timed)
    assert figures["team-a"].cycles == 21 and figures["team-b"].cycles == 10 and figures["team-c"].cycles == 12
    assert all(f.swing == 0 for f in figures.values())
    assert (a[-1], b[-1], c[-1]) == (4.0, 4.0, 8.0)


# --------------------------------------------------------------------------------------------- half-life


def test_a_half_life_forgives_old_usage_faster_and_damps_the_swing() -> None:
    """A 40-cycle window, team-a alone for 40 cycles. Without decay team-b is paid back for most of a window and
    overshoots below its share (the allocation swings 3 GPUs over the last window and takes 42 cycles to settle);
    with a half-life of 5 cycles old usage fades and both settle within 5 cycles."""
    sim = load_time_based(EXAMPLES / "half-life.yaml")
    assert sim.half_life == 5 and sim.window_size == 40
    decayed = settling(run_time_based(sim))
    plain = settling(run_time_based(replace(sim, half_life=0)))
    assert decayed["team-b"].cycles == 5 and decayed["team-b"].swing == 0
    assert plain["team-b"].cycles is not None and plain["team-b"].cycles >= 40
    assert plain["team-a"].swing >= 3
    assert decayed["team-b"].error < plain["team-b"].error / 3


# ------------------------------------------------------------------------------------------- oscillation


def test_whole_cluster_jobs_take_turns() -> None:
    """KAI's two-queue oscillation: jobs of 16 GPUs on 16 GPUs, so one queue runs at a time; with a 256-cycle
    window and a 128-cycle half-life the cluster changes hands every 239 cycles (it cannot settle at 8 and 8)."""
    sim = replace(load_time_based(EXAMPLES / "oscillating.yaml"), cycles=600)
    run = run_time_based(sim)
    a, _ = run.series("queue1")
    b, _ = run.series("queue2")
    assert all(sorted((x, y)) == [0.0, 16.0] for x, y in zip(a, b, strict=True))
    turns: list[list[object]] = []
    for x in a:
        who = "queue1" if x == 16 else "queue2"
        if turns and turns[-1][0] == who:
            turns[-1][1] = int(str(turns[-1][1])) + 1
        else:
            turns.append([who, 1])
    assert turns == [["queue1", 1], ["queue2", 28], ["queue1", 239], ["queue2", 239], ["queue1", 93]]
    assert settling(run)["queue1"].cycles is None and settling(run)["queue1"].swing == 16


# ---------------------------------------------------------------------------------------------- parsing


def test_keys_are_matched_without_case_and_kai_defaults_apply() -> None:
    sim = parse_time_based({"nodes": [{"gpus": 4}], "queues": [{"name": "q", "DeservedGPUs": None}],
                            "jobs": {"q": {"gpus": 1}}, "KValue": None})
    assert (sim.cycles, sim.window_size, sim.half_life, sim.k_value) == (100, 5, 0, 1.0)
    assert sim.queues[0].priority == 100 and sim.queues[0].weight == 1.0 and sim.queues[0].deserved_gpus == 0.0
    assert sim.nodes[0].count == 1 and sim.jobs[0].num_pods == 1 and sim.jobs[0].num_jobs == 1


@pytest.mark.parametrize(("doc", "message"), [
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "q"}], "Cycle": 3}, "f: Cycle: unknown field"),
    ({"Nodes": [], "Queues": [{"Name": "q"}]}, "f: Nodes: no GPUs"),
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "q", "Parent": "x"}]}, "Queues[0].Parent: queue x is not defined"),
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "q"}], "Jobs": {"r": {"GPUs": 1}}},
     "f: Jobs.r: queue r is not defined in Queues"),
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "d"}, {"Name": "q", "Parent": "d"}], "Jobs": {"d": {}}},
     "Jobs.d: queue d has child queues"),
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "q"}], "WindowSize": 0},
     "f: WindowSize: expected a whole number >= 1"),
    ({"Nodes": [{"GPUs": 4}], "Queues": [{"Name": "q"}], "Jobs": {"q": {"GPUs": 1.5}}},
     "Jobs.q.GPUs: expected a whole"),
])
def test_bad_files_are_named_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(TimeBasedError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_time_based(doc, "f")


# ---------------------------------------------------------------------------------------------- simulator


WEEK = ROOT / "examples" / "simulation" / "time-based-week.yaml"


def _day() -> dict[str, Any]:
    """A day on 8 GPUs: training from the start, research from 4h; time-based with a 4h window."""
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "spec": {"resources": {
        "gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}, "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}
    return {
        "name": "day", "period": "10m", "until": "12h", "seed": 3,
        "config": {"usageDBConfig": {"clientType": "fake", "usageParams": {
            "windowSize": "4h", "extraParams": {"queryResolution": "10m"}}}},
        "cluster": {"pools": [{"name": "n", "count": 1, "gpus": 8}],
                    "objects": [{**queue, "metadata": {"name": "training"}},
                                {**queue, "metadata": {"name": "research"}}]},
        "workload": {"generate": [
            {"name": "t", "queue": "training", "jobs": 60, "every": "10m", "gpus": 1, "duration": ["1h", "3h"]},
            {"name": "r", "queue": "research", "start": "4h", "jobs": 60, "every": "5m", "gpus": 1,
             "duration": ["1h", "2h"]}]},
    }


def test_the_simulator_keeps_a_usage_history_only_with_usage_db_config() -> None:
    doc = _day()
    timed = simulate(doc)
    assert timed.time_based
    at_4h = next(s for s in timed.samples if s.time == 4 * 3600)
    assert (at_4h.queues["training"].usage or 0.0) > 0.75  # most of the cluster over the window; research none
    assert at_4h.queues["research"].usage == 0.0
    assert timed.samples[-1].queues["research"].usage == pytest.approx(0.5, abs=0.15)
    # cycles run every period while jobs wait (the window slides, so the shares move)
    gaps = {b.time - a.time for a, b in zip(timed.samples, timed.samples[1:], strict=False) if a.pending_jobs}
    assert gaps == {600.0}
    plain = simulate({k: v for k, v in doc.items() if k != "config"})
    assert not plain.time_based
    assert all(q.usage is None for s in plain.samples for q in s.queues.values())
    assert timed.long_run_share == pytest.approx({"training": 4.0, "research": 4.0})


def test_fairness_figures_of_a_hand_made_run() -> None:
    """Queue a holds 4 GPUs for 100 s, then 0; b holds 0, then 4. Long-run shares 2 and 2; window 100 s."""
    samples = [Sample(t, 4, 4, 0, 0, 0, 0, 1, {"a": QueueSample(a, 2, -1, 4), "b": QueueSample(b, 2, -1, 4)})
               for t, a, b in ((0, 4, 0), (100, 0, 4), (200, 0, 4))]
    stats = Stats(0, 0, 0, 0, 0)
    summary = Summary(0, 0, 0, 300, 1, 0, stats, stats, 0, 0, 0, 1, 3, 0, end=300)
    result = SimResult("hand", samples, [], summary)
    f = fairness(result, {"a": 2.0, "b": 2.0}, 100.0)
    assert list(f.windowed["a"]) == [4.0, 4.0, 0.0] and list(f.windowed["b"]) == [0.0, 0.0, 4.0]
    assert list(f.error) == [2.0, 2.0, 2.0]
    assert list(f.jain) == [pytest.approx(0.5)] * 3
    f2 = fairness(result, {"a": 2.0, "b": 2.0}, 200.0)
    assert list(f2.windowed["a"]) == [4.0, 4.0, 2.0] and f2.jain[-1] == pytest.approx(1.0)
    # a step function: 1 on [0, 10), 3 on [10, 20); the mean over [t - 15, t]
    assert list(_windowed(np.array([0.0, 10.0, 20.0]), np.array([1.0, 3.0, 0.0]), 15.0)) == [1.0, 1.0, pytest.approx(
        (5 * 1 + 10 * 3) / 15)]


def test_long_run_shares_divide_mean_demand_by_weight() -> None:
    from kaisched.k8s.parse import parse_objects

    def q(name: str, weight: float) -> dict[str, Any]:
        return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": weight}}}}

    queues = parse_objects([q("a", 1), q("b", 3), q("c", 1)]).queues
    # a asks 20 all the time, b 20 half the time (mean 10), c 1
    samples = [Sample(t, 16, 0, 0, 0, 0, 0, 0, {"a": QueueSample(0, 0, -1, 20), "b": QueueSample(0, 0, -1, bq),
                                                "c": QueueSample(0, 0, -1, 1)})
               for t, bq in ((0, 20), (50, 0))]
    shares = long_run_shares(queues, samples, 100)
    assert shares["c"] == pytest.approx(1.0)  # its whole demand
    assert shares["b"] == pytest.approx(10.0)  # 3/4 of the 15 left is 11.25, more than it asks on average
    assert shares["a"] == pytest.approx(5.0)


# ---------------------------------------------------------------------------------------------------- CLI


def test_compare_weight_only_puts_the_two_divisions_side_by_side(tmp_path: Path) -> None:
    scenario = tmp_path / "day.yaml"
    scenario.write_text(json.dumps(_day()))
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "--compare-weight-only", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "time-based: day" in result.output and "weight-only: day" in result.output
    assert "fair-share error over 4h" in result.output and "research: wait mean" in result.output
    data = json.loads((out / "compare.json").read_text())
    assert data["labels"] == ["time-based", "weight-only"]
    fair = data["fairness"]
    assert fair["window"] == 4 * 3600 and fair["long_run_fair_share"] == {"research": 4.0, "training": 4.0}
    error = next(m for m in fair["metrics"] if m["key"] == "fair_share_error")
    assert error["values"][0] < error["values"][1] and error["best"] == ["time-based"]
    assert data["runs"]["weight-only"]["time_based"] is False and data["runs"]["time-based"]["time_based"] is True
    assert data["runs"]["weight-only"]["inputs"]["variant"].startswith("usageDBConfig removed")
    with (out / "time-based" / "queues.csv").open() as f1, (out / "weight-only" / "queues.csv").open() as f2:
        assert next(csv.DictReader(f1))["usage"] != "" and next(csv.DictReader(f2))["usage"] == ""
    assert (out / "time-based" / "fairness.csv").is_file() and (out / "weight-only" / "fairness.csv").is_file()
    assert "Fairness over time" in (out / "compare.html").read_text()
    assert "Fairness over time" in (out / "time-based" / "report.html").read_text()


def test_compare_weight_only_needs_a_usage_db_config(tmp_path: Path) -> None:
    scenario = tmp_path / "plain.yaml"
    scenario.write_text(json.dumps({k: v for k, v in _day().items() if k != "config"}))
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "--compare-weight-only", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no usageDBConfig" in result.output


def test_kai_time_based_writes_the_csv_and_the_report(tmp_path: Path) -> None:
    out = tmp_path / "tb"
    result = CliRunner().invoke(cli, ["simulate", "--kai-time-based", str(EXAMPLES / "two-queues.yaml"), "-o",
                                      str(out), "--compare-weight-only"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert ["team-b", "time-based", "8", "10", "cycles", "16", "0", "0.48"] in lines
    assert ["team-b", "weight-only", "8", "0", "cycles", "8", "0", "0.00"] in lines
    timed = (out / "time-based" / "simulation_results.csv").read_text().splitlines()
    plain = (out / "weight-only" / "simulation_results.csv").read_text().splitlines()
    assert len(timed) == len(plain) == 241
    assert "20,team-b,16.000000,16.000000" in timed and "20,team-b,8.000000,8.000000" in plain
    assert (out / "compare.html").is_file()


def test_kai_time_based_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("Nodes: [{GPUs: 4}]\nQueues: [{Name: q}]\nJobs: {x: {GPUs: 1}}\n")
    result = CliRunner().invoke(cli, ["simulate", "--kai-time-based", str(bad), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Jobs.x: queue x is not defined in Queues" in result.output


def test_the_week_example_is_time_based() -> None:
    sc = scenario_from_mapping({"name": "x", "cluster": {"pools": [{"name": "n", "gpus": 1}]}})
    assert sc.config is None
    import yaml

    doc = yaml.safe_load(WEEK.read_text())
    assert doc["config"]["usageDBConfig"]["clientType"] == "fake-with-history"
