"""The simulator's event loop on small scenarios whose outcome can be computed by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import kaisched
from kaisched.sim import Arrival, Scenario, ScenarioError, SimulationError, scenario_from_mapping
from kaisched.sim.engine import simulate
from tests.unit.builders import node, pod, pod_group, queue

Obj = dict[str, Any]


def job(name: str, n: int, gpus: int = 1, q: str = "q", priority_class: str = "train") -> tuple[Obj, ...]:
    objs = [pod_group(name, queue=q, min_member=n, priority_class=priority_class)]
    objs += [pod(f"{name}-{i}", group=name, gpus=gpus) for i in range(n)]
    return tuple(objs)


def arrival(t: float, name: str, n: int, gpus: int, duration: float, q: str = "q") -> Arrival:
    return Arrival(t, f"default/{name}", q, job(name, n, gpus, q), duration, float(n * gpus))


def records(result: kaisched.SimResult) -> dict[str, tuple[float | None, float | None]]:
    return {j.name.split("/")[1]: (j.start, j.end) for j in result.jobs}


def test_one_queue_first_come_first_served_with_backfill() -> None:
    """2 GPUs: a (1 GPU, 100 s) and the gang b (2 x 1 GPU, 50 s) arrive at 0, c (1 GPU, 30 s) at 10.
    a starts at once; b cannot start before a ends; c fits next to a at the 10 s cycle."""
    sc = Scenario("fifo", [node("n1", 2), queue("q")],
                  [arrival(0, "a", 1, 1, 100), arrival(0, "b", 2, 1, 50), arrival(10, "c", 1, 1, 30)], period=10)
    result = simulate(sc)
    assert records(result) == {"a": (0, 100), "b": (100, 150), "c": (10, 40)}
    s = result.summary
    assert (s.jobs, s.completed, s.makespan) == (3, 3, 150)
    assert s.wait.mean == pytest.approx((0 + 100 + 0) / 3)
    assert s.jct.mean == pytest.approx((100 + 150 + 30) / 3)
    assert s.evictions == 0
    # 2 GPUs: 0-10 one busy, 10-40 two, 40-100 one, 100-150 two: (10 + 60 + 60 + 100) / 300
    assert s.gpu_allocation_mean == pytest.approx((10 * 1 + 30 * 2 + 60 * 1 + 50 * 2) / (150 * 2), abs=0.02)


def test_a_gang_waits_for_all_its_pods() -> None:
    sc = Scenario("gang", [node("n1", 4), queue("q")],
                  [arrival(0, "big", 1, 3, 100), arrival(0, "gang", 2, 1, 10)], period=10)
    result = simulate(sc)
    assert records(result) == {"big": (0, 100), "gang": (100, 110)}
    gang = next(j for j in result.jobs if j.name.endswith("gang"))
    assert gang.wait == 100


def test_two_queues_reclaim_and_the_lost_work_is_counted() -> None:
    """Queue a (no quota) fills 4 GPUs with four 1-GPU jobs; queue b (quota 4) asks 2 GPUs at 100 s: reclaim
    evicts two of a's jobs (100 GPU-seconds of work lost each), b starts at the next cycle, and the evicted
    jobs wait for GPUs again."""
    cluster = [node("n1", 4), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=4)]
    arrivals = [arrival(0, f"a{i}", 1, 1, 1000, q="a") for i in range(4)] + [arrival(100, "b", 1, 2, 50, q="b")]
    result = simulate(Scenario("reclaim", cluster, arrivals, period=10, until=400))
    by_name = {j.name.split("/")[1]: j for j in result.jobs}
    evicted = [j for n, j in by_name.items() if n.startswith("a") and j.evictions]
    assert len(evicted) == 2
    assert all(j.lost_gpu_seconds == pytest.approx(100) for j in evicted)
    assert by_name["b"].start == 110 and by_name["b"].end == 160
    assert result.summary.evictions == 2 and result.summary.gpu_hours_lost == pytest.approx(200 / 3600)
    # once b is done, the evicted jobs run again (from scratch)
    assert all(j.start == 0 for j in evicted)
    assert {round(s.queues["b"].fair_share) for s in result.samples if s.time >= 100} >= {2}


def test_same_scenario_same_result() -> None:
    doc = {"name": "det", "period": "30s", "seed": 3,
           "cluster": {"pools": [{"name": "n", "count": 4, "gpus": 8}],
                       "objects": [queue("q"), queue("r", gpu=16)]},
           "workload": {"generate": [
               {"queue": "q", "jobs": 30, "every": "2m", "pods": [1, 2, 4], "gpus": [1, 0.5, 2],
                "duration": ["5m", "1h"]},
               {"queue": "r", "jobs": 20, "every": "3m", "pods": [1, 2], "gpus": [1, 4], "duration": ["10m", "2h"]}]}}
    first = kaisched.simulate(doc)
    second = kaisched.simulate(doc)
    assert [(j.name, j.start, j.end, j.evictions) for j in first.jobs] == \
        [(j.name, j.start, j.end, j.evictions) for j in second.jobs]
    assert first.samples == second.samples
    other_seed = kaisched.simulate(doc, seed=4)
    assert [j.duration for j in other_seed.jobs] != [j.duration for j in first.jobs]


def test_fractional_jobs_share_gpus_in_the_simulation() -> None:
    doc = {"name": "frac", "period": 10,
           "cluster": {"pools": [{"name": "n", "count": 1, "gpus": 1}], "objects": [queue("q")]},
           "workload": {"arrivals": [{"time": 0, "duration": 100, "job": {"name": f"nb{i}", "queue": "q", "gpus": 0.25}}
                                     for i in range(4)]}}
    result = kaisched.simulate(doc)
    assert all(j.start == 0 and j.end == 100 for j in result.jobs)  # four quarters on one GPU
    assert result.samples[0].gpus_fractional == pytest.approx(1.0)


def test_never_completing_jobs_and_until() -> None:
    sc = Scenario("svc", [node("n1", 1), queue("q")], [arrival(0, "svc", 1, 1, math.inf)], period=10, until=100)
    result = simulate(sc)
    (j,) = result.jobs
    assert j.start == 0 and j.end is None
    assert result.summary.completed == 0


def test_bad_scenarios_are_reported_with_the_field() -> None:
    with pytest.raises(ScenarioError, match="period"):
        scenario_from_mapping({"period": "soon"})
    with pytest.raises(ScenarioError, match=r"workload.arrivals\[0\].job.pods"):
        scenario_from_mapping({"workload": {"arrivals": [{"time": 0, "job": {"name": "x", "pods": 0}}]}})
    with pytest.raises(ScenarioError, match=r"cluster.pools\[0\].count"):
        scenario_from_mapping({"cluster": {"pools": [{"count": -1}]}})
    with pytest.raises(SimulationError, match="Queue bad"):
        simulate(scenario_from_mapping({"cluster": {"objects": [queue("bad", gpu=-5)]}}))


def test_the_bundled_example_loads() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "simulation" / "three-teams.yaml"
    sc = kaisched.sim.load_scenario(path)
    assert len([o for o in sc.cluster if o["kind"] == "Node"]) == 64
    assert len(sc.arrivals) > 500


def test_a_job_that_can_never_run_does_not_keep_the_simulation_going() -> None:
    sc = Scenario("stuck", [node("n1", 1), queue("q")], [arrival(0, "big", 1, 4, 100)], period=10)
    result = simulate(sc)
    assert result.summary.never_started == 1
    assert result.summary.cycles <= 8  # the first cycle, then a few idle ones 10 periods apart
