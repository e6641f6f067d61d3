"""The busy shared cluster's shape in scenario files: the compact queue tree, generate streams spread over many
queues, pod-size ranges, weighted mixes, at-start work, and the example built of them."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kaisched.framework.result import CycleResult
from kaisched.sim import ScenarioError, load_scenario, scenario_from_mapping, simulate
from kaisched.sim.engine import Simulator
from kaisched.sim.model import Arrival, Scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulation" / "busy-cluster.yaml"

Obj = dict[str, Any]
POOL = {"name": "gpu", "count": 8, "gpus": 8, "cpu": 128, "memory": "1Ti"}  # 64 GPUs
BUSY_MIX = [{"weight": 70, "pods": 1, "gpus": [0.25, 0.5, 1, 2, 4, 8]},
            {"weight": 30, "pods": {"min": 4, "max": 64}, "gpus": [1, 8]}]


def _doc(generate: list[Obj], *, tree: Obj | None = None, seed: int = 5, nodes: int = 8) -> Obj:
    return {"name": "t", "period": "1m", "seed": seed,
            "cluster": {"pools": [{**POOL, "count": nodes}], "queue_tree": tree or {"departments": 3, "teams": 4}},
            "workload": {"generate": generate}}


def _queues(scenario: Scenario) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in scenario.cluster if o["kind"] == "Queue"}


def _pods(arrival: Arrival) -> list[Obj]:
    return [o for o in arrival.objects if o["kind"] == "Pod"]


def _gpus_per_pod(pod: Obj) -> float:
    fraction = pod["metadata"].get("annotations", {}).get("gpu-fraction")
    if fraction is not None:
        return float(fraction)
    return float(pod["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))


# ------------------------------------------------------------------------------------------- queue tree
def test_the_tree_splits_the_cluster_gpus_exactly_and_is_seeded() -> None:
    doc = _doc([], tree={"departments": 10, "teams": 10, "gpus": "auto", "weights": [1, 2, 3],
                         "shares": [0.5, 1.5]})
    queues = _queues(scenario_from_mapping(doc))
    assert len(queues) == 110
    depts = {n: q for n, q in queues.items() if "parentQueue" not in q["spec"]}
    assert sorted(depts) == sorted(f"dept-{d}" for d in range(10))
    quota = {n: q["spec"]["resources"]["gpu"]["quota"] for n, q in queues.items()}
    assert sum(quota[d] for d in depts) == 64  # the pools' GPUs (8 nodes x 8)
    for d in depts:
        teams = [n for n, q in queues.items() if q["spec"].get("parentQueue") == d]
        assert teams == [f"{d}-team-{t}" for t in range(10)]
        assert sum(quota[t] for t in teams) == quota[d]
    for q in queues.values():
        gpu = q["spec"]["resources"]["gpu"]
        assert q["apiVersion"] == "scheduling.run.ai/v2"
        assert gpu["limit"] == -1 and gpu["overQuotaWeight"] in (1, 2, 3)
        assert q["spec"]["resources"]["cpu"]["quota"] == -1 and q["spec"]["resources"]["memory"]["quota"] == -1
    # shares drawn from U(0.5, 1.5): the largest department gets at most 3 times the smallest (+ rounding)
    assert max(quota[d] for d in depts) <= 3 * min(quota[d] for d in depts) + 1
    assert len({q["spec"]["resources"]["gpu"]["overQuotaWeight"] for q in queues.values()}) == 3
    # the same seed, the same tree; another seed, another tree; the tree's own seed pins it
    assert _queues(scenario_from_mapping(doc)) == queues
    assert _queues(scenario_from_mapping(doc, seed=6)) != queues
    pinned = copy.deepcopy(doc)
    pinned["cluster"]["queue_tree"]["seed"] = 9
    assert _queues(scenario_from_mapping(pinned, seed=1)) == _queues(scenario_from_mapping(pinned, seed=2))


def test_the_tree_splits_a_given_number_and_counts_dra_gpus() -> None:
    doc = _doc([], tree={"departments": 2, "teams": 3, "gpus": 1000, "shares": 1})
    quota = {n: q["spec"]["resources"]["gpu"]["quota"] for n, q in _queues(scenario_from_mapping(doc)).items()}
    assert quota["dept-0"] == quota["dept-1"] == 500  # equal shares
    assert [quota[f"dept-0-team-{t}"] for t in range(3)] == [167, 167, 166]  # largest remainder, ties to the first
    dra = _doc([], tree={"departments": 1, "teams": 2})
    dra["cluster"]["pools"] = [{"name": "h", "count": 3, "dra": {"driver": "gpu.nvidia.com", "devices": 4}}]
    assert _queues(scenario_from_mapping(dra))["dept-0"]["spec"]["resources"]["gpu"]["quota"] == 12


# ------------------------------------------------------------------------------------- generate streams
def test_queues_are_drawn_from_the_given_set() -> None:
    doc = _doc([{"name": "a", "jobs": 300, "every": "1m", "queues": ["dept-0-team-1", "dept-2-team-3"]},
                {"name": "b", "jobs": 600, "every": "1m", "queues": "leaves"},
                {"name": "c", "jobs": 200, "every": "1m", "queues": {"leaves": "dept-1"}},
                {"name": "d", "jobs": 50, "every": "1m", "queues": {"tree": ["dept-0", "dept-2-team-0"]}}])
    arrivals = scenario_from_mapping(doc).arrivals
    by_stream: dict[str, Counter[str]] = {}
    for a in arrivals:
        by_stream.setdefault(a.name.split("/")[1].split("-")[0], Counter())[a.queue] += 1
        assert a.objects[0]["kind"] == "PodGroup" and a.objects[0]["spec"]["queue"] == a.queue
    assert set(by_stream["a"]) == {"dept-0-team-1", "dept-2-team-3"}
    leaves = {f"dept-{d}-team-{t}" for d in range(3) for t in range(4)}
    assert set(by_stream["b"]) == leaves  # all 12 leaves, never a department
    assert min(by_stream["b"].values()) > 600 / 12 / 2  # uniformly: 50 each, give or take
    assert set(by_stream["c"]) == {f"dept-1-team-{t}" for t in range(4)}
    assert set(by_stream["d"]) <= {f"dept-0-team-{t}" for t in range(4)} | {"dept-2-team-0"}
    assert "dept-2-team-0" in by_stream["d"]


def test_a_pod_weighted_mix_keeps_its_proportions() -> None:
    doc = _doc([{"name": "job", "jobs": 20_000, "every": "1m", "queues": "leaves", "mix_by": "pods",
                 "mix": BUSY_MIX}], nodes=64)  # (room for the largest gang: 64 pods of 8 GPUs)
    arrivals = scenario_from_mapping(doc).arrivals
    pods = Counter[str]()
    for a in arrivals:
        members = _pods(a)
        gpus = {_gpus_per_pod(p) for p in members}
        if len(members) == 1:
            assert gpus <= {0.25, 0.5, 1, 2, 4, 8}
            pods["single"] += 1
        else:
            assert 4 <= len(members) <= 64 and gpus in ({1.0}, {8.0})
            assert a.objects[0]["spec"]["minMember"] == len(members)  # a gang
            pods["gang"] += len(members)
    assert pods["single"] / (pods["single"] + pods["gang"]) == pytest.approx(0.7, abs=0.05)
    sizes = Counter(len(_pods(a)) for a in arrivals if len(_pods(a)) > 1)
    assert min(sizes) <= 6 and max(sizes) >= 60  # the whole range is drawn
    # without mix_by the weights are shares of the jobs
    by_jobs = _doc([{"name": "job", "jobs": 5_000, "every": "1m", "queue": "dept-0-team-0", "mix": BUSY_MIX}],
                   nodes=64)
    singles = sum(1 for a in scenario_from_mapping(by_jobs).arrivals if len(_pods(a)) == 1)
    assert singles / 5_000 == pytest.approx(0.7, abs=0.03)


def test_mix_entries_override_the_stream_and_the_same_seed_gives_the_same_arrivals() -> None:
    doc = _doc([{"name": "job", "jobs": 200, "every": "2m", "queues": "leaves", "cpu": 4, "memory": "16Gi",
                 "duration": ["10m", "20m"], "priority_class": "train",
                 "mix": [{"gpus": 1}, {"weight": 2, "queues": ["dept-1-team-2"], "priority_class": "build",
                                       "duration": "5h", "cpu": 2}]}])
    first = scenario_from_mapping(doc).arrivals
    assert [(a.time, a.name, a.queue, a.duration, a.objects) for a in first] == \
        [(a.time, a.name, a.queue, a.duration, a.objects) for a in scenario_from_mapping(doc).arrivals]
    assert [a.queue for a in scenario_from_mapping(doc, seed=6).arrivals] != [a.queue for a in first]
    build = [a for a in first if a.objects[0]["spec"]["priorityClassName"] == "build"]
    train = [a for a in first if a.objects[0]["spec"]["priorityClassName"] == "train"]
    assert len(build) + len(train) == 200 and len(build) / 200 == pytest.approx(2 / 3, abs=0.1)
    assert {a.queue for a in build} == {"dept-1-team-2"} and len({a.queue for a in train}) > 5
    assert {a.duration for a in build} == {5 * 3600} and all(600 <= a.duration <= 1200 for a in train)
    assert {_pods(a)[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] for a in build} == {"2"}
    assert {_pods(a)[0]["spec"]["containers"][0]["resources"]["requests"]["memory"] for a in build} == {"16Gi"}


def test_at_start_jobs_fill_their_share_and_run_from_the_first_cycle() -> None:
    doc = _doc([{"name": "running", "at_start": True, "fill": 0.5, "queues": "leaves", "pods": 1, "gpus": 2,
                 "duration": ["24h", "48h"]},
                {"name": "job", "jobs": 20, "every": "10m", "queues": "leaves", "gpus": [1, 2], "duration": "30m"}])
    doc["until"] = "1h"
    scenario = scenario_from_mapping(doc)
    running = [a for a in scenario.arrivals if a.name.startswith("default/running-")]
    assert len(running) == 16 and sum(a.gpus for a in running) == 32  # half of the 64 GPUs, 2 GPUs a job
    assert {a.time for a in running} == {0} and all(24 * 3600 <= a.duration <= 48 * 3600 for a in running)
    assert all(a.time > 0 for a in scenario.arrivals if a not in running)
    result = simulate(scenario)
    first = result.samples[0]
    assert first.time == 0 and first.running_jobs == 16 and first.gpus_allocated == 32
    records = {j.name: j for j in result.jobs}
    assert all(records[a.name].start == 0 for a in running)


# ------------------------------------------------------------------------------------------ bad input
def _with(change: dict[str, Any], stream: Obj | None = None) -> Obj:
    doc = _doc([stream or {"name": "s", "jobs": 3, "queues": "leaves"}])
    for path, value in change.items():
        target: Any = doc
        *parents, last = path.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value
    return doc


@pytest.mark.parametrize(("change", "message"), [
    ({"cluster.queue_tree.departments": 0}, r"^cluster\.queue_tree\.departments: expected a positive integer"),
    ({"cluster.queue_tree.teams": "ten"}, r"^cluster\.queue_tree\.teams: expected a positive integer"),
    ({"cluster.queue_tree.gpus": -3}, r"^cluster\.queue_tree\.gpus: expected auto"),
    ({"cluster.queue_tree.shares": [1.5, 0.5]}, r"^cluster\.queue_tree\.shares: expected \[min, max\] with 0 < min"),
    ({"cluster.queue_tree.shares": {"min": 1}}, r"^cluster\.queue_tree\.shares: a range needs both min and max"),
    ({"cluster.queue_tree.weights": []}, r"^cluster\.queue_tree\.weights: expected a non-empty list"),
    ({"cluster.queue_tree.depth": 2}, r"^cluster\.queue_tree\.depth: unknown field"),
    ({"cluster.pools": []}, r"^cluster\.queue_tree\.gpus: auto found no GPUs"),
    ({"cluster.objects": [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "dept-1"},
                           "spec": {}}]}, r"^cluster\.queue_tree: the tree's queue 'dept-1' is also defined"),
    ({"workload.generate.0.queues": ["dept-0-team-0", "x"]},
     r"^workload\.generate\[0\]\.queues\[1\]: unknown queue 'x'"),
    ({"workload.generate.0.queues": ["dept-0"]}, r"^workload\.generate\[0\]\.queues\[0\]: 'dept-0' is a parent queue"),
    ({"workload.generate.0.queues": {"leaves": "dept-9"}},
     r"^workload\.generate\[0\]\.queues\.leaves: unknown queue 'dept-9'"),
    ({"workload.generate.0.queues": "all"}, r"^workload\.generate\[0\]\.queues: expected a list of leaf queues"),
    ({"workload.generate.0.queue": "q"}, r"^workload\.generate\[0\]\.queues: give queue .* or queues"),
    ({"workload.generate.0.pods": {"min": 64, "max": 4}}, r"^workload\.generate\[0\]\.pods: min \(64\) > max \(4\)"),
    ({"workload.generate.0.pods": {"min": 0, "max": 4}}, r"^workload\.generate\[0\]\.pods\.min: expected a positive"),
    ({"workload.generate.0.pods": [1, 0]}, r"^workload\.generate\[0\]\.pods: expected a positive integer"),
    ({"workload.generate.0.gpus": [1, 2.5]}, r"^workload\.generate\[0\]\.gpus: expected a whole number of GPUs"),
    ({"workload.generate.0.duration": ["2h", "1h"]}, r"^workload\.generate\[0\]\.duration: min \(2h\) > max \(1h\)"),
    ({"workload.generate.0.cpu": "lots"}, r"^workload\.generate\[0\]\.cpu: expected a quantity"),
    ({"workload.generate.0.jobz": 3}, r"^workload\.generate\[0\]\.jobz: unknown field"),
    ({"workload.generate.0.fill": 0.5}, r"^workload\.generate\[0\]\.fill: give jobs .* or fill"),
    ({"workload.generate.0.at_start": "yes"}, r"^workload\.generate\[0\]\.at_start: expected true or false"),
    ({"workload.generate.0.at_start": True, "workload.generate.0.every": "1m"},
     r"^workload\.generate\[0\]\.every: an at_start stream's jobs all arrive at time 0"),
    ({"workload.generate.0.mix": []}, r"^workload\.generate\[0\]\.mix: an empty list"),
    ({"workload.generate.0.mix_by": "pods"}, r"^workload\.generate\[0\]\.mix_by: only with a mix"),
    ({"workload.generate.0.mix": [{"weight": 0}]},
     r"^workload\.generate\[0\]\.mix\[0\]\.weight: expected a number > 0"),
    ({"workload.generate.0.mix": [{"pods": 1}, {"pods": {"min": 9, "max": 2}}]},
     r"^workload\.generate\[0\]\.mix\[1\]\.pods: min \(9\) > max \(2\)"),
    ({"workload.generate.0.mix": [{"queues": ["nope"]}]},
     r"^workload\.generate\[0\]\.mix\[0\]\.queues\[0\]: unknown queue"),
    ({"workload.generate.0.mix": [{"gpu": 1}]}, r"^workload\.generate\[0\]\.mix\[0\]\.gpu: unknown field"),
    ({"workload.generate.0.mix": [{"pods": 1}], "workload.generate.0.mix_by": "gpus"},
     r"^workload\.generate\[0\]\.mix_by: expected jobs .* or pods"),
])
def test_bad_input_names_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_from_mapping(_with(change))


def test_a_fill_that_asks_no_gpus_is_refused() -> None:
    doc = _doc([{"name": "cpu", "fill": 0.5, "gpus": 0, "queues": "leaves"}])
    with pytest.raises(ScenarioError, match=r"^workload\.generate\[0\]\.fill: the stream's jobs ask no GPUs"):
        scenario_from_mapping(doc)


# --------------------------------------------------------------------------------------------- example
class _Recording(Simulator):
    """A simulator that records every eviction: (action, the victim's queue, the preemptor's queue)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evicted: list[tuple[str, str, str]] = []

    def _apply(self, result: CycleResult, t: float) -> None:
        for e in result.evictions:
            victim, preemptor = self.job_of_pod.get(e.pod), self.job_of_group.get(e.preemptor)
            self.evicted.append((e.action, victim.record.queue if victim else "",
                                 preemptor.record.queue if preemptor else ""))
        super()._apply(result, t)


@pytest.mark.interpreted  # (_Recording overrides the simulator: compiled classes take no interpreted subclass)
def test_the_busy_cluster_example_has_the_shape_and_reclaims() -> None:
    scenario = load_scenario(EXAMPLE)
    nodes = [o for o in scenario.cluster if o["kind"] == "Node"]
    total = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
    queues = _queues(scenario)
    leaves = [n for n in queues if "-team-" in n]
    assert len(leaves) == 100 and len(queues) == 110
    assert sum(q["spec"]["resources"]["gpu"]["quota"] for n, q in queues.items() if n not in leaves) == total
    assert scenario.until == 7 * 24 * 3600  # a week
    running = [a for a in scenario.arrivals if a.time == 0]
    assert sum(a.gpus for a in running) == total / 2 and {len(_pods(a)) for a in running} == {1}
    assert {_gpus_per_pod(_pods(a)[0]) for a in running} == {2}
    pending = [a for a in scenario.arrivals if a.time > 0]
    single = sum(1 for a in pending if len(_pods(a)) == 1)
    assert single / sum(len(_pods(a)) for a in pending) == pytest.approx(0.7, abs=0.1)
    assert len({a.queue for a in scenario.arrivals}) == 100
    # half a day of it: once the cluster is full, queues below their share reclaim GPUs from queues that took
    # more than theirs while it was not
    scenario.until = 12 * 3600
    sim = _Recording(scenario)
    result = sim.run()
    assert result.samples[0].gpus_allocated == total / 2  # the at-start jobs, bound by the first cycle
    assert result.summary.evictions > 0 and result.summary.gpu_hours_lost > 0
    reclaims = [(victim, by) for action, victim, by in sim.evicted if action == "reclaim"]
    assert reclaims and all(victim != by for victim, by in reclaims)  # from one queue to another
