"""KAI v0.17's scenario search budgets (``scenarioSearchBudgets``): configuration, the budget arithmetic on a
fake clock, the eviction actions stopped by them, and their metrics."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest
import yaml

import kaisched
from kaisched import ConfigError, SchedulerConfig
from kaisched.actions.registry import build_actions
from kaisched.actions.search_budget import UNLIMITED, ActionSearchBudget, unresolved_error
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.config import SearchBudgets, go_duration
from kaisched.framework.result import CycleResult, SearchOutcome
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.kube.metrics import CycleTimings, SchedulerMetrics
from kaisched.model.snapshot import build_snapshot
from kaisched.plugins.registry import build_plugins
from tests.unit.builders import NOW, flatten, job, node, pod, pod_group, queue, status
from tests.unit.test_kube_metrics import samples

KAI_DEFAULTS = {
    "maxActionSearchDuration": {"default": "5m0s"},
    "maxJobSearchDuration": "4m0s",
    "minJobSearchDuration": "0s",
    "maxGeneratorSearchDuration": {"default": "2m0s", "NodeLocalGreedy": "30s", "MultiNodeGang": "2m0s"},
}


def budgets(raw: object) -> SearchBudgets:
    cfg = SchedulerConfig.from_mapping({"scenarioSearchBudgets": raw})
    assert cfg.search_budgets is not None
    return cfg.search_budgets


# ------------------------------------------------------------------------------------------ configuration
def test_no_block_means_no_budgets_and_an_empty_block_kais_defaults() -> None:
    assert SchedulerConfig.from_mapping({}).search_budgets is None
    assert SchedulerConfig.from_mapping({"scenarioSearchBudgets": None}).search_budgets is None
    empty = budgets({})
    assert [empty.action_limit(a) for a in ("reclaim", "preempt", "consolidation")] == [300.0] * 3
    assert (empty.job_limit(), empty.min_job_limit()) == (240.0, 0.0)
    assert empty.generator_limits() == {"default": 120.0, "NodeLocalGreedy": 30.0, "MultiNodeGang": 120.0}
    assert budgets(KAI_DEFAULTS) == SearchBudgets.kai_defaults()


def test_action_and_generator_limits_fall_back_as_kai_does() -> None:
    b = budgets({"maxActionSearchDuration": {"default": "1m", "reclaim": "2s", "preempt": "0s"},
                 "maxGeneratorSearchDuration": {"default": "10s", "MultiNodeGang": "1h"}})
    assert (b.action_limit("reclaim"), b.action_limit("preempt"), b.action_limit("consolidation")) == (2.0, 0.0, 60.0)
    # a configured default replaces the known generators' own defaults; their own keys win
    assert b.generator_limits() == {"default": 10.0, "NodeLocalGreedy": 10.0, "MultiNodeGang": 3600.0}
    b = budgets({"maxGeneratorSearchDuration": {"NodeLocalGreedy": "250ms"}})
    assert b.generator_limits() == {"default": 120.0, "NodeLocalGreedy": 0.25, "MultiNodeGang": 120.0}
    assert budgets({"maxActionSearchDuration": {"preempt": "1s"}}).action_limit("reclaim") == 300.0


@pytest.mark.parametrize(("raw", "message"), [
    ({"maxActionSearchDuration": {"reclam": "1s"}},
     "scenarioSearchBudgets.maxActionSearchDuration: unknown action 'reclam' (known: default, reclaim, preempt, "
     "consolidation)"),
    ({"maxActionSearchDuration": {"reclaim": "soon"}},
     "scenarioSearchBudgets.maxActionSearchDuration[\"reclaim\"]: must be a valid Go duration like '5m', '30s' or "
     "'250ms', got 'soon'"),
    ({"maxActionSearchDuration": {"reclaim": "-1s"}},
     "scenarioSearchBudgets.maxActionSearchDuration[\"reclaim\"]: must be non-negative, got '-1s'"),
    ({"maxActionSearchDuration": "5m"},
     "scenarioSearchBudgets.maxActionSearchDuration: expected a mapping of action name to duration"),
    ({"maxGeneratorSearchDuration": {"ByPod": "1s"}},
     "scenarioSearchBudgets.maxGeneratorSearchDuration: unknown generator 'ByPod' (known: default, NodeLocalGreedy, "
     "MultiNodeGang)"),
    ({"maxJobSearchDuration": "-4m"}, "scenarioSearchBudgets.maxJobSearchDuration: must be non-negative, got '-4m'"),
    ({"maxJobSearchDuration": 240}, "scenarioSearchBudgets.maxJobSearchDuration: must be a valid Go duration"),
    ({"minJobSearchDuration": "1m", "maxJobSearchDuration": "1m"},
     "scenarioSearchBudgets: minJobSearchDuration must be less than maxJobSearchDuration: 1m0s is not less than "
     "1m0s;"),
    ({"minJobSearchDuration": "5m"},  # against the default maxJobSearchDuration (4m)
     "scenarioSearchBudgets: minJobSearchDuration must be less than maxJobSearchDuration: 5m0s is not less than "
     "4m0s (KAI's default maxJobSearchDuration)"),
    ({"maxJobSearchDurations": "1m"}, "scenarioSearchBudgets.maxJobSearchDurations: unknown field"),
    ("5m", "scenarioSearchBudgets: expected a mapping"),
])
def test_config_errors_name_the_field(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        SchedulerConfig.from_mapping({"scenarioSearchBudgets": raw})
    assert str(err.value).startswith(message)


def test_min_job_may_be_anything_when_jobs_are_unlimited() -> None:
    b = budgets({"maxJobSearchDuration": "0s", "minJobSearchDuration": "10m"})
    assert (b.job_limit(), b.min_job_limit()) == (0.0, 600.0)


def test_the_block_round_trips_in_kais_format(tmp_path: Any) -> None:
    b = budgets(KAI_DEFAULTS)
    assert b.to_mapping() == KAI_DEFAULTS
    partial = {"maxActionSearchDuration": {"reclaim": "1m30s"}, "maxJobSearchDuration": "250ms"}
    assert budgets(partial).to_mapping() == partial
    assert budgets({"maxJobSearchDuration": "90s"}).to_mapping() == {"maxJobSearchDuration": "1m30s"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"actions": "reclaim", "scenarioSearchBudgets": KAI_DEFAULTS}))
    assert SchedulerConfig.load(path).search_budgets == SearchBudgets.kai_defaults()


@pytest.mark.parametrize(("text", "go"), [("0", "0s"), ("5m", "5m0s"), ("1h", "1h0m0s"), ("90s", "1m30s"),
                                          ("250ms", "250ms"), ("1.5ms", "1.5ms"), ("3us", "3µs"),
                                          ("1h0m0.25s", "1h0m0.25s"), ("2h3s", "2h0m3s")])
def test_go_duration_writes_as_go_does(text: str, go: str) -> None:
    from kaisched.k8s.quantity import parse_duration

    assert go_duration(parse_duration(text)) == go
    assert go_duration(-timedelta(seconds=30)) == "-30s"


# ------------------------------------------------------------------------------------ budget arithmetic
class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def action_budget(raw: Mapping[str, Any], clock: FakeClock, action: str = "reclaim") -> ActionSearchBudget:
    return ActionSearchBudget(action, budgets(raw), clock)


def test_a_job_gets_the_job_limit_capped_by_what_the_action_has_left() -> None:
    clock = FakeClock()
    action = action_budget({"maxActionSearchDuration": {"reclaim": "10s"}, "maxJobSearchDuration": "4s",
                            "maxGeneratorSearchDuration": {"NodeLocalGreedy": "0s"}}, clock)
    first = action.begin_job()
    assert not first.not_attempted and not first.reduced_budget and first.generator is not None
    assert first.generator.deadline == 1004.0
    clock.now = 1003.9
    assert not first.generator.expired()
    clock.now = 1004.0  # remaining 0: expired (KAI: remaining <= 0)
    assert first.generator.expired() and first.generator.stopped_by == "job"
    clock.now = 1008.0
    second = action.begin_job()
    assert second.generator is not None and second.generator.deadline == 1010.0  # the action's 2 s, not 4
    clock.now = 1010.0
    assert second.generator.expired() and second.generator.stopped_by == "action"
    third = action.begin_job()
    assert third.not_attempted and third.generator is None
    assert third.outcome("reclaim", "ns/j", "not_attempted") == SearchOutcome("reclaim", "ns/j", "not_attempted",
                                                                              False, "action")


def test_the_generator_limit_caps_an_attempt_and_zero_is_unlimited() -> None:
    clock = FakeClock()
    action = action_budget({"maxJobSearchDuration": "0s"}, clock)  # NodeLocalGreedy: 30 s by default
    attempt = action.begin_job().generator
    assert attempt is not None and attempt.deadline == 1030.0
    clock.now = 1030.0
    assert attempt.expired() and attempt.stopped_by == "generator"
    unlimited = action_budget({"maxActionSearchDuration": {"default": "0s"}, "maxJobSearchDuration": "0s",
                               "maxGeneratorSearchDuration": {"default": "0s"}}, clock)
    clock.now = 1e12
    attempt = unlimited.begin_job().generator
    assert attempt is not None and attempt.deadline == float("inf")
    clock.now = 1e15
    assert not attempt.expired()


def test_min_job_marks_jobs_reached_with_less_than_it_left_as_reduced() -> None:
    clock = FakeClock()
    action = action_budget({"maxActionSearchDuration": {"default": "10s"}, "maxJobSearchDuration": "8s",
                            "minJobSearchDuration": "3s", "maxGeneratorSearchDuration": {"default": "0s"}}, clock)
    assert not action.begin_job().reduced_budget
    clock.now = 1008.0  # 2 s left: searched with them, reduced
    job = action.begin_job()
    assert job.reduced_budget and not job.not_attempted
    assert job.generator is not None and job.generator.deadline == 1010.0
    outcome = job.outcome("preempt", "ns/j", "deadline_exhausted")
    assert outcome.reduced_budget
    error = unresolved_error("preempt", outcome)
    assert error.reason == "ScenarioSearchUnresolved"
    assert error.message == ("kaisched could not find a valid preempt scenario within the remaining configured "
                             "search time for this scheduling attempt because the action search budget was partly "
                             "consumed by earlier jobs. The job remains pending and may be retried in a later "
                             "scheduling cycle.")


def test_without_budgets_nothing_reads_the_clock() -> None:
    def clock() -> float:
        raise AssertionError("the clock was read")

    assert ActionSearchBudget("reclaim", None, clock).begin_job().generator is None
    assert UNLIMITED.begin_job().generator is None and not UNLIMITED.begin_job().not_attempted


# ------------------------------------------------------------------------------------------- end to end
def running(name: str, node_name: str, gpus: int, *, q: str = "greedy", cpu: int = 1,
            created: str = "2025-01-01T00:00:00Z", priority_class: str = "train") -> list[dict[str, Any]]:
    return [pod_group(name, queue=q, priority_class=priority_class, created=created),
            pod(f"{name}-0", group=name, gpus=gpus, cpu=cpu, node=node_name, created=created)]


def four_simulations(reclaimers: int = 1) -> list[dict[str, Any]]:
    """Reclaim for ``mine`` needs four simulations: each of the four 1-GPU nodes frees a GPU when its victim
    goes, but on n1..n3 a non-preemptible CPU hog leaves too little CPU (34 of the 40 cores ``mine`` needs);
    the victim on n4 is the oldest, so the last one tried."""
    return flatten(
        *[node(f"n{i}", 1, cpu=64) for i in range(1, 5)],
        queue("greedy", gpu=0, gpu_weight=0), queue("owner", gpu=4), queue("infra", gpu=0),
        *[running(f"hog{i}", f"n{i}", 0, q="infra", cpu=30, priority_class="inference") for i in range(1, 4)],
        *[running(f"v{i}", f"n{i}", 1, created=f"2025-01-01T0{4 - i}:00:00Z") for i in range(1, 5)],
        *[job(f"mine{k}" if k else "mine", 1, gpus=1, cpu=40, queue="owner", created=f"2025-01-01T0{5 + k}:00:00Z")
          for k in range(reclaimers)],
    )


def ticking() -> Callable[[], float]:
    """A fake clock that moves 1 s each time it is read: the budgets read it once when an action starts, once
    per job reaching the solver and once before each simulation, so each simulation takes 1 s."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def cycle(objs: list[dict[str, Any]], budget_block: Mapping[str, Any] | None, actions: str = "reclaim",
          clock: Callable[[], float] | None = None) -> CycleResult:
    raw: dict[str, Any] = {"actions": actions}
    if budget_block is not None:
        raw["scenarioSearchBudgets"] = budget_block
    cfg = resolve_config(raw)
    ssn = Session(build_snapshot(prepare(parse_objects(objs), cfg, NOW), NOW), cfg, build_plugins(cfg.plugins))
    ssn.search_clock = clock or ticking()
    ssn.open()
    for action in build_actions(cfg):
        action.execute(ssn)
    result = ssn.close()
    ssn.discard()
    return result


def decisions(result: CycleResult) -> dict[str, Any]:
    out = result.to_dict()
    del out["scenarioSearch"]
    return out


def test_today_reclaim_needs_four_simulations_and_finds_the_victim_on_n4() -> None:
    result = kaisched.schedule(four_simulations(), config={"actions": "reclaim"}, now=NOW)
    assert [e.pod for e in result.evictions] == ["default/v4-0"]
    assert [(p.pod, p.node) for p in result.pipelined] == [("default/mine-0", "n4")]
    assert result.scenario_search == [SearchOutcome("reclaim", "default/mine", "solved")]
    reads = itertools.count()
    cycle(four_simulations(), {"maxJobSearchDuration": "1h"}, clock=lambda: float(next(reads)))
    assert next(reads) == 6  # action start, the job's start, four checks


def test_a_job_budget_stops_the_search_and_the_job_stays_pending() -> None:
    result = cycle(four_simulations(), {"maxJobSearchDuration": "2s"})
    assert result.evictions == [] and result.pipelined == []
    assert result.scenario_search == [SearchOutcome("reclaim", "default/mine", "deadline_exhausted", False, "job")]
    g = status(result, "mine")
    assert (g.status, g.reason) == ("Pending", "ScenarioSearchUnresolved")
    assert g.message == ("kaisched could not find a valid reclaim scenario within the configured search budget for "
                         "this scheduling attempt. The job remains pending and may be retried in a later scheduling "
                         "cycle.")
    assert result.to_dict()["scenarioSearch"] == [{"action": "reclaim", "job": "default/mine",
                                                   "result": "deadline_exhausted", "reducedBudget": False,
                                                   "stoppedBy": "job"}]


def test_without_or_with_generous_budgets_the_decisions_are_todays() -> None:
    today = kaisched.schedule(four_simulations(2), config={"actions": "reclaim"}, now=NOW)
    assert [e.pod for e in today.evictions] == ["default/v4-0"]
    for block in (None, {}, KAI_DEFAULTS, {"maxActionSearchDuration": {"reclaim": "1h"}, "maxJobSearchDuration": "0s"}):
        result = cycle(four_simulations(2), block)
        assert decisions(result) == decisions(today), block
        assert result.scenario_search == today.scenario_search, block
    assert [(o.job, o.result) for o in today.scenario_search] == [("default/mine", "solved"),
                                                                  ("default/mine1", "generators_exhausted")]


def test_an_action_budget_used_up_by_one_job_leaves_the_next_not_attempted() -> None:
    result = cycle(four_simulations(2), {"maxActionSearchDuration": {"reclaim": "3s"}, "maxJobSearchDuration": "0s"})
    assert result.evictions == []
    assert result.scenario_search == [
        SearchOutcome("reclaim", "default/mine", "deadline_exhausted", False, "action"),
        SearchOutcome("reclaim", "default/mine1", "not_attempted", False, "action"),
    ]
    assert status(result, "mine").reason == "ScenarioSearchUnresolved"
    g = status(result, "mine1")
    assert (g.status, g.reason) == ("Pending", "ScenarioSearchUnresolved")
    assert g.message == ("kaisched did not attempt scenario search for this job in this scheduling cycle because the "
                         "configured search budget was already exhausted.")


def test_a_job_stopped_by_a_budget_is_not_remembered_as_failed() -> None:
    # mine1 has mine's scheduling signature and is no easier: had mine failed (all scenarios tried), mine1 would be
    # skipped; stopped by its job budget, it proves nothing, so mine1 is searched with a budget of its own
    result = cycle(four_simulations(2), {"maxJobSearchDuration": "2s"})
    assert [(o.job, o.result) for o in result.scenario_search] == [("default/mine", "deadline_exhausted"),
                                                                   ("default/mine1", "deadline_exhausted")]


def test_a_cycle_a_budget_decided_is_not_memoised() -> None:
    unlimited = {"maxJobSearchDuration": "0s", "maxActionSearchDuration": {"default": "0s"}}
    cfg = resolve_config({"actions": "reclaim", "scenarioSearchBudgets": unlimited})
    parsed = prepare(parse_objects(four_simulations()), cfg, NOW)
    memo = CycleMemo()
    first = run_prepared_cycle(parsed, cfg, NOW, memo)
    assert memo.holds and first.scenario_search[0].result == "solved"
    assert run_prepared_cycle(parsed, cfg, NOW, memo).to_dict() == first.to_dict()
    memo.record(parsed, cfg, NOW, CycleResult(scenario_search=[
        SearchOutcome("reclaim", "default/mine", "deadline_exhausted", False, "job")]), None, {})
    assert not memo.holds


# ---------------------------------------------------------------------------------------------- metrics
def test_scenario_search_metrics_have_kais_names_and_labels() -> None:
    m = SchedulerMetrics()
    m.set_search_budgets(resolve_config({"scenarioSearchBudgets": {"maxActionSearchDuration": {"reclaim": "2s"}}}))
    result = cycle(four_simulations(2), {"maxActionSearchDuration": {"reclaim": "3s"}, "maxJobSearchDuration": "0s"})
    m.record_cycle(result, CycleTimings(1.0))
    m.record_cycle(CycleResult(scenario_search=[SearchOutcome("preempt", "ns/j", "solved", True)]), CycleTimings(1.0))
    s = samples(m)
    jobs = "kai_scenario_search_jobs_total"
    assert s[(jobs, (("action", "reclaim"), ("result", "deadline_exhausted"), ("reduced_budget", "false")))] == 1.0
    assert s[(jobs, (("action", "reclaim"), ("result", "not_attempted"), ("reduced_budget", "false")))] == 1.0
    assert s[(jobs, (("action", "preempt"), ("result", "solved"), ("reduced_budget", "true")))] == 1.0
    assert s[("kai_scenario_search_action_budget_exhausted_total", (("action", "reclaim"),))] == 1.0
    assert s[("kai_scenario_search_action_budget_configured_seconds", (("action", "reclaim"),))] == 2.0
    assert s[("kai_scenario_search_action_budget_configured_seconds", (("action", "preempt"),))] == 300.0
    assert s[("kai_scenario_search_job_budget_configured_seconds", ())] == 240.0
    gen = "kai_scenario_search_generator_budget_configured_seconds"
    assert {dict(k[1])["generator"]: v for k, v in s.items() if k[0] == gen} == {
        "default": 120.0, "NodeLocalGreedy": 30.0, "MultiNodeGang": 120.0}
    text = m.render().decode()
    assert "# TYPE kai_scenario_search_jobs_total counter" in text
    assert "# TYPE kai_scenario_search_action_budget_exhausted_total counter" in text
    assert "_created" not in text


def test_without_budgets_the_configured_gauges_say_unlimited() -> None:
    m = SchedulerMetrics()
    m.set_search_budgets(resolve_config({"actions": "allocate, reclaim"}))
    s = samples(m)
    assert s[("kai_scenario_search_action_budget_configured_seconds", (("action", "reclaim"),))] == 0.0
    assert ("kai_scenario_search_action_budget_configured_seconds", (("action", "preempt"),)) not in s
    assert s[("kai_scenario_search_job_budget_configured_seconds", ())] == 0.0


def test_kubernetes_mode_exports_the_configured_budgets_from_the_start() -> None:
    from kaisched.kube.runner import KubeScheduler

    scheduler = KubeScheduler(object(), resolve_config({"scenarioSearchBudgets": KAI_DEFAULTS}))  # type: ignore[arg-type]
    s = samples(scheduler.metrics)
    assert {dict(k[1])["action"]: v for k, v in s.items()
            if k[0] == "kai_scenario_search_action_budget_configured_seconds"} == {
        "reclaim": 300.0, "preempt": 300.0, "consolidation": 300.0}
    assert s[("kai_scenario_search_job_budget_configured_seconds", ())] == 240.0
