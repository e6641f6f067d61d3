"""Time-based fair share (spec 5.7, issue 25): the usageDBConfig block and its errors, cron windows, the in-memory
usage history (the spec's worked example: 24 GPU-hours of a 10-GPU cluster over 10 hours is U = 0.24; decay;
tumbling resets), the usage file, the division with usage (shareWeight = max(0, nW + k(nW - U))) through the whole
cycle, and `kaisched schedule --usage`."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, run_prepared_cycle, schedule
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.framework.cron import CronError, parse_cron
from kaisched.framework.usage_config import UsageDBConfig, UsageParams
from kaisched.k8s.parse import parse_objects
from kaisched.model.usage import UsageTable
from kaisched.plugins.proportion.division import divide_resource
from kaisched.usage.file import UsageFileError, load_usage, parse_usage
from kaisched.usage.history import UsageHistory

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
EXAMPLE = ROOT / "examples" / "time-based-fairness.yaml"
EXAMPLE_CONFIG = ROOT / "examples" / "config" / "time-based-fairness.yaml"
EXAMPLE_USAGE = ROOT / "examples" / "usage.yaml"


def _objects() -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(EXAMPLE.read_text()) if o]


def _shares(usage: UsageTable | None, k: str = "1.0") -> dict[str, tuple[float, float]]:
    config = {"tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion", "arguments": {"kValue": k}},
                                     {"name": "priority"}, {"name": "nodeplacement"}]}]}
    result = schedule(_objects(), config, T0 + timedelta(hours=10), usage=usage)
    return {q.name: (q.fair_share["gpu"], q.allocated["gpu"]) for q in result.queues}


# ---- the configuration -------------------------------------------------------------------------------------------

def test_kai_usage_db_config_is_read_with_its_defaults() -> None:
    config = SchedulerConfig.from_mapping({"usageDBConfig": {
        "clientType": "prometheus", "connectionString": "http://prometheus:9090",
        "usageParams": {"windowSize": "10h", "halfLifePeriod": "2h", "fetchInterval": "30s", "stalenessPeriod": "10s",
                        "extraParams": {"queryResolution": "15s", "gpuAllocationMetric": "my_gpus"}}}})
    db = config.usage_db
    assert db is not None and db.client_type == "prometheus" and db.connection() == "http://prometheus:9090"
    p = db.params
    assert (p.window_type, p.window_size, p.half_life) == ("sliding", timedelta(hours=10), timedelta(hours=2))
    assert p.fetch_interval == timedelta(seconds=30)
    assert p.staleness_period == timedelta(seconds=30)  # raised to the fetch interval, as KAI does
    assert (p.wait_timeout, p.query_timeout, p.query_resolution) == (
        timedelta(minutes=1), timedelta(seconds=10), timedelta(seconds=15))
    assert p.allocation_metrics[0] == "my_gpus" and p.allocation_metrics[1] == "kai_queue_allocated_cpu_cores"
    defaults = UsageParams()
    assert (defaults.window_size, defaults.half_life, defaults.staleness_period) == (
        timedelta(days=7), None, timedelta(minutes=5))
    assert SchedulerConfig.from_mapping({}).usage_db is None


def test_a_half_life_of_zero_or_less_turns_the_decay_off() -> None:
    for value in ("0s", "-1h"):
        assert UsageParams.from_mapping({"halfLifePeriod": value}).half_life is None


def test_the_connection_string_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    db = UsageDBConfig.from_mapping({"clientType": "prometheus", "connectionStringEnvVar": "PROM_URL"})
    monkeypatch.setenv("PROM_URL", "http://from-env:9090")
    assert db.connection() == "http://from-env:9090"
    monkeypatch.delenv("PROM_URL")
    with pytest.raises(ConfigError, match="connectionStringEnvVar: the environment variable PROM_URL is not set"):
        db.connection()


@pytest.mark.parametrize(("block", "message"), [
    ({"clientType": "influx"}, "usageDBConfig.clientType: unknown client type 'influx'"),
    ({}, "usageDBConfig.clientType: required"),
    ({"clientType": "prometheus"}, "usageDBConfig.connectionString: required by clientType prometheus"),
    ({"clientType": "prometheus", "connectionString": "http://a", "connectionStringEnvVar": "B"},
     "connectionString and connectionStringEnvVar are both set"),
    ({"clientType": "fake", "endpoint": "x"}, "usageDBConfig.endpoint: unknown field"),
    ({"clientType": "fake", "usageParams": {"windowType": "daily"}},
     "usageDBConfig.usageParams.windowType: unknown window type 'daily' (known: cron, sliding, tumbling)"),
    ({"clientType": "fake", "usageParams": {"windowType": "tumbling"}},
     "usageDBConfig.usageParams.tumblingWindowStartTime: required by windowType tumbling"),
    ({"clientType": "fake", "usageParams": {"windowType": "tumbling", "tumblingWindowStartTime": "monday"}},
     "usageDBConfig.usageParams.tumblingWindowStartTime: expected an RFC3339 time"),
    ({"clientType": "fake", "usageParams": {"windowType": "cron"}},
     "usageDBConfig.usageParams.cronString: required by windowType cron"),
    ({"clientType": "fake", "usageParams": {"windowType": "cron", "cronString": "every monday"}},
     "usageDBConfig.usageParams.cronString: cron expression 'every monday': expected 5 fields"),
    ({"clientType": "fake", "usageParams": {"windowType": "cron", "cronString": "0 25 * * *"}},
     "usageDBConfig.usageParams.cronString: cron expression '0 25 * * *': hour: 25 is out of range 0-23"),
    ({"clientType": "fake", "usageParams": {"windowSize": "-1h"}},
     "usageDBConfig.usageParams.windowSize: must be a positive duration, got '-1h'"),
    ({"clientType": "fake", "usageParams": {"windowSize": "a week"}},
     "usageDBConfig.usageParams.windowSize: invalid duration 'a week'"),
    ({"clientType": "fake", "usageParams": {"fetchInterval": "0s"}},
     "usageDBConfig.usageParams.fetchInterval: must be a positive duration"),
    ({"clientType": "fake", "usageParams": {"waitTimeout": "-5s"}},
     "usageDBConfig.usageParams.waitTimeout: must be >= 0"),
    ({"clientType": "fake", "usageParams": {"window": "1h"}}, "usageDBConfig.usageParams.window: unknown field"),
    ({"clientType": "fake", "usageParams": {"extraParams": {"queryResolution": "soon"}}},
     "usageDBConfig.usageParams.extraParams.queryResolution: invalid duration 'soon'"),
    ({"clientType": "fake", "usageParams": {"extraParams": {"queryResolution": "0s"}}},
     "usageDBConfig.usageParams.extraParams.queryResolution: must be a positive duration"),
    ({"clientType": "fake", "usageParams": {"extraParams": {"gpuMetric": "x"}}},
     "usageDBConfig.usageParams.extraParams.gpuMetric: unknown parameter"),
])
def test_bad_usage_configuration_is_an_error_naming_the_field(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        SchedulerConfig.from_mapping({"usageDBConfig": block})


def test_a_bad_usage_configuration_stops_the_command_with_the_field_named(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("usageDBConfig:\n  clientType: fake\n  usageParams: {windowType: hourly}\n")
    out = CliRunner().invoke(cli, ["schedule", "-f", str(EXAMPLE), "--config", str(config)])
    assert out.exit_code == 2
    assert "usageDBConfig.usageParams.windowType: unknown window type 'hourly'" in out.output
    assert "Traceback" not in out.output


# ---- windows -----------------------------------------------------------------------------------------------------

def test_cron_expressions_give_the_start_of_the_current_window() -> None:
    now = datetime(2026, 12, 4, 21, 40, 13, tzinfo=UTC)  # a Friday
    assert parse_cron("0 0 * * *").previous(now) == datetime(2026, 12, 4, tzinfo=UTC)
    assert parse_cron("0 9 * * MON").previous(now) == datetime(2026, 11, 30, 9, tzinfo=UTC)
    assert parse_cron("@weekly").previous(now) == datetime(2026, 11, 29, tzinfo=UTC)  # Sunday midnight
    assert parse_cron("*/15 * * * *").previous(now) == datetime(2026, 12, 4, 21, 30, tzinfo=UTC)
    assert parse_cron("30 2 1 * *").previous(now) == datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
    assert parse_cron("0 0 1 JAN *").previous(now) == datetime(2026, 1, 1, tzinfo=UTC)
    # both day fields restricted: either matches (cron); the 13th of December is a Sunday, the 4th a Friday
    assert parse_cron("0 0 13 * FRI").previous(now) == datetime(2026, 12, 4, tzinfo=UTC)
    assert parse_cron("0 0 * * *").previous(datetime(2026, 12, 4, tzinfo=UTC)) == datetime(2026, 12, 4, tzinfo=UTC)
    for bad in ("", "* * * *", "60 * * * *", "0 0 L * *", "@often", "5-1 * * * *", "0 0 * * FUNDAY"):
        with pytest.raises(CronError):
            parse_cron(bad)


def test_each_window_type_starts_where_kai_resets_it() -> None:
    now = datetime(2026, 1, 10, 5, tzinfo=UTC)
    assert UsageParams(window_size=timedelta(hours=10)).reset_time(now) == now - timedelta(hours=10)
    tumbling = UsageParams.from_mapping({"windowType": "tumbling", "windowSize": "24h",
                                         "tumblingWindowStartTime": "2026-01-01T00:00:00Z"})
    assert tumbling.reset_time(now) == datetime(2026, 1, 10, tzinfo=UTC)
    assert tumbling.reset_time(datetime(2025, 12, 31, tzinfo=UTC)) == datetime(2025, 12, 31, tzinfo=UTC)  # not yet
    cron = UsageParams.from_mapping({"windowType": "cron", "cronString": "0 0 * * MON"})
    assert cron.reset_time(now) == datetime(2026, 1, 5, tzinfo=UTC)  # 2026-01-05 is a Monday


# ---- the history ------------------------------------------------------------------------------------------------

def test_the_spec_example_24_gpu_hours_of_a_10_gpu_cluster_over_10_hours_is_a_usage_of_024() -> None:
    params = UsageParams(window_size=timedelta(hours=10), query_resolution=timedelta(minutes=1))
    history = UsageHistory(params)
    start = T0 - timedelta(hours=1)
    history.record(start, {"a": [0, 0, 0], "b": [10, 0, 0]}, [10, 64, 512])
    history.record(T0, {"a": [4, 0, 0], "b": [6, 0, 0]}, [10, 64, 512])  # a: 4 GPUs for 6 hours = 24 GPU-hours
    history.record(T0 + timedelta(hours=6), {"b": [10, 0, 0]}, [10, 64, 512])  # a left out: it holds nothing
    table = history.table(T0 + timedelta(hours=10))
    # 600 one-minute samples in (T0, T0 + 10 h]; a holds 4 GPUs in 359 of them (the one at T0 + 6 h is after it left)
    assert table.of("a")[0] == pytest.approx(0.24, abs=1 / 600)
    assert table.of("a")[0] + table.of("b")[0] == pytest.approx(1.0)
    assert table.of("nobody") == (0.0, 0.0, 0.0)
    assert table.source == "history" and table.fetched_at == T0 + timedelta(hours=10)


def test_usage_decays_with_the_half_life() -> None:
    # a held the whole cluster 2 half-lives ago for one resolution step, b holds it now: with decay b counts 4x
    params = UsageParams(window_size=timedelta(hours=3), half_life=timedelta(hours=1),
                         query_resolution=timedelta(hours=1))
    history = UsageHistory(params)
    history.record(T0, {"a": [8, 0, 0]}, [8, 1, 1])
    history.record(T0 + timedelta(minutes=90), {"a": [0, 0, 0], "b": [8, 0, 0]}, [8, 1, 1])
    table = history.table(T0 + timedelta(hours=3))
    # samples at T0+1h (a, decay 1/4), T0+2h (b, 1/2), T0+3h (b, 1): a = 0.25 / 1.75, b = 1.5 / 1.75
    assert table.of("a")[0] == pytest.approx(0.25 / 1.75)
    assert table.of("b")[0] == pytest.approx(1.5 / 1.75)
    undecayed = UsageHistory(UsageParams(window_size=timedelta(hours=3), query_resolution=timedelta(hours=1)))
    undecayed.record(T0, {"a": [8, 0, 0]}, [8, 1, 1])
    undecayed.record(T0 + timedelta(minutes=90), {"a": [0, 0, 0], "b": [8, 0, 0]}, [8, 1, 1])
    assert undecayed.table(T0 + timedelta(hours=3)).of("a")[0] == pytest.approx(1 / 3)


def test_a_tumbling_window_forgets_what_came_before_its_reset() -> None:
    params = UsageParams.from_mapping({"windowType": "tumbling", "windowSize": "24h",
                                       "tumblingWindowStartTime": "2026-01-01T00:00:00Z",
                                       "extraParams": {"queryResolution": "1h"}})
    history = UsageHistory(params)
    history.record(T0, {"a": [8, 0, 0], "b": [0, 0, 0]}, [8, 1, 1])
    history.record(T0 + timedelta(hours=23), {"a": [0, 0, 0], "b": [8, 0, 0]}, [8, 1, 1])
    day_one = history.table(T0 + timedelta(hours=23))
    assert day_one.of("a")[0] == pytest.approx(22 / 23) and day_one.of("b")[0] == pytest.approx(1 / 23)
    day_two = history.table(T0 + timedelta(hours=26))  # the window restarted at T0 + 24 h: b alone since
    assert day_two.of("a")[0] == 0.0 and day_two.of("b")[0] == pytest.approx(1.0)


def test_the_history_keeps_changes_only_and_drops_what_the_window_left_behind() -> None:
    params = UsageParams(window_size=timedelta(hours=1), query_resolution=timedelta(minutes=1))
    history = UsageHistory(params)
    for minute in range(600):  # ten hours of cycles, one a minute; the allocation changes every 100 minutes
        gpus = float(minute // 100)
        history.record(T0 + timedelta(minutes=minute), {"a": [gpus, 0, 0]}, [8, 1, 1])
    assert history.changes <= 2 * 3 + 2  # what the last hour reads, and the change that carries into it
    assert history.table(T0 + timedelta(minutes=599)).of("a")[0] == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="older than the last one"):
        history.record(T0, {"a": [1, 0, 0]}, [8, 1, 1])


def test_a_cluster_without_capacity_has_no_usage() -> None:
    history = UsageHistory(UsageParams(window_size=timedelta(hours=1)))
    history.record(T0, {"a": [0, 0, 0]}, [0, 0, 0])
    assert history.table(T0 + timedelta(hours=1)).of("a") == (0.0, 0.0, 0.0)


# ---- the division ---------------------------------------------------------------------------------------------

def test_the_share_weights_of_the_spec_example() -> None:
    # equal weights (nW = 0.5), k = 1: U = 0.24 gives 0.5 + (0.5 - 0.24) = 0.76, U = 0.5 gives 0.5; 10 GPUs divide
    # 10 * 0.76 / 1.26 = 6.03 -> 6 and 3.97 -> 3, and the last GPU goes to the larger leftover: 6 / 4
    shares = divide_resource(10, [0, 0], [-1, -1], [1, 1], [8, 8], [0.24, 0.5], [100, 100], [0, 1], 1.0)
    assert shares.tolist() == [6.0, 4.0]
    assert divide_resource(10, [0, 0], [-1, -1], [1, 1], [8, 8], [0.24, 0.5], [100, 100], [0, 1], 0.0).tolist() == [
        5.0, 5.0]  # kValue 0: weight only
    # a queue far above its share gets nothing over quota: max(0, 0.5 + 2 * (0.5 - 0.9)) = 0
    assert divide_resource(10, [0, 0], [-1, -1], [1, 1], [10, 10], [0.9, 0.0], [100, 100], [0, 1], 2.0).tolist() == [
        0.0, 10.0]


def test_a_cycle_divides_with_the_usage_it_is_given_and_reports_it() -> None:
    assert _shares(None) == {"team-a": (5.0, 5.0), "team-b": (5.0, 5.0)}
    usage = UsageTable({"team-a": (0.24, 0.0, 0.0), "team-b": (0.5, 0.0, 0.0)}, "test")
    assert _shares(usage) == {"team-a": (6.0, 6.0), "team-b": (4.0, 4.0)}
    assert _shares(usage, k="0") == {"team-a": (5.0, 5.0), "team-b": (5.0, 5.0)}
    result = schedule(_objects(), None, T0, usage=usage)
    reported = {q.name: q.usage for q in result.queues}
    assert reported["team-a"] == {"gpu": 0.24, "cpu": 0.0, "memory": 0.0}
    assert result.queues[0].to_dict()["usage"] == reported[result.queues[0].name]
    assert "usage" not in schedule(_objects(), None, T0).queues[0].to_dict()  # weight only: no usage reported


def test_the_cycle_memo_does_not_answer_a_cycle_with_other_usage() -> None:
    config = SchedulerConfig()
    prepared = prepare(parse_objects(_objects()), config, T0)
    memo = CycleMemo()
    low = UsageTable({"team-a": (0.24, 0.0, 0.0), "team-b": (0.5, 0.0, 0.0)})
    later = T0 + timedelta(hours=1)  # the pods were made at T0: their order is fixed from then on
    first = run_prepared_cycle(prepared, config, later, memo, usage=low)
    same = run_prepared_cycle(prepared, config, later + timedelta(seconds=1), memo,
                              usage=UsageTable(dict(low.queues), "elsewhere"))
    assert memo.hits == 1 and [b.pod for b in same.binds] == [b.pod for b in first.binds]
    other = run_prepared_cycle(prepared, config, later + timedelta(seconds=2), memo,
                               usage=UsageTable({"team-a": (0.5, 0.0, 0.0), "team-b": (0.24, 0.0, 0.0)}))
    assert memo.hits == 1
    assert {q.name: q.fair_share["gpu"] for q in other.queues} == {"team-a": 4.0, "team-b": 6.0}


# ---- the usage file and `kaisched schedule --usage` ------------------------------------------------------------

def test_the_usage_file_is_read_and_bad_values_are_named() -> None:
    table = load_usage(EXAMPLE_USAGE)
    assert table.of("team-a") == (0.24, 0.0, 0.0) and table.source == f"file {EXAMPLE_USAGE}"
    assert parse_usage({"queues": {"q": {"nvidia.com/gpu": 0.1, "cpu": 0.2, "memory": 0.3}}}, "x").of("q") == (
        0.1, 0.2, 0.3)
    for raw, message in [
        ({"queues": {"q": {"gpu": -0.1}}}, "x: queues.q.gpu: expected a number >= 0"),
        ({"queues": {"q": {"gpu": "lots"}}}, "x: queues.q.gpu: expected a number >= 0"),
        ({"queues": {"q": {"disk": 0.1}}}, "x: queues.q.disk: unknown resource"),
        ({"queues": {"q": 0.1}}, "x: queues.q: expected a mapping"),
        ({"queue": {}}, "x: expected a mapping 'queues:"),
        ([1, 2], "x: expected a mapping 'queues:"),
    ]:
        with pytest.raises(UsageFileError, match=message):
            parse_usage(raw, "x")


def test_kaisched_schedule_reproduces_a_cycle_with_usage_from_a_file(tmp_path: Path) -> None:
    base = ["schedule", "-f", str(EXAMPLE), "--config", str(EXAMPLE_CONFIG), "--now", "2026-01-01T10:00:00Z",
            "-o", "json"]
    weight_only = CliRunner().invoke(cli, base)
    assert weight_only.exit_code == 0
    assert "the configuration has usageDBConfig, and no --usage was given" in weight_only.stderr
    data = json.loads(weight_only.stdout)
    assert {q["name"]: q["fairShare"]["gpu"] for q in data["queues"]} == {"team-a": 5.0, "team-b": 5.0}
    timed = CliRunner().invoke(cli, [*base, "--usage", str(EXAMPLE_USAGE)])
    assert timed.exit_code == 0, timed.output
    data = json.loads(timed.stdout)
    assert {q["name"]: (q["fairShare"]["gpu"], q["usage"]["gpu"]) for q in data["queues"]} == {
        "team-a": (6.0, 0.24), "team-b": (4.0, 0.5)}
    assert sum(1 for b in data["binds"] if "team-a" in b["pod"]) == 6
    bad = tmp_path / "usage.yaml"
    bad.write_text("queues:\n  team-a: {gpu: -1}\n")
    refused = CliRunner().invoke(cli, [*base, "--usage", str(bad)])
    assert refused.exit_code == 2 and "queues.team-a.gpu: expected a number >= 0" in refused.output
    both = CliRunner().invoke(cli, ["schedule", "-f", "-", "--usage", "-"], input="")
    assert both.exit_code == 2 and "can be read once" in both.output
