"""The Prometheus usage source (kaisched.usage.prometheus) against a fake Prometheus HTTP API, for fast fault
injection beside the real server of tests/kube/test_usage_contract.py: the PromQL asked per window type, the usage
computed from the answers (the spec's worked example), and every way Prometheus can fail (down, slow, an error, a
wrong shape) a UsageFetchError, never a stalled cycle; the background source's staleness and start-up wait."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.framework.usage_config import UsageDBConfig, UsageParams
from kaisched.usage.prometheus import PrometheusUsageSource, UsageFetchError, fetch_usage, usage_queries
from kaisched.usage.sources import HistoryUsageSource, NoUsageSource, usage_source

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
Answer = Callable[[str, dict[str, str]], tuple[int, Any]]


class FakePrometheus:
    """``/api/v1/query`` and ``/api/v1/query_range`` answered by ``answer(path, args) -> (status, body)``; every
    request is recorded; ``delay`` seconds before each answer."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.delay = 0.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                args = dict(urllib.parse.parse_qsl(parts.query))
                fake.requests.append((parts.path, args))
                time.sleep(fake.delay)
                status, body = fake.answer(parts.path, args)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vector(*series: tuple[dict[str, str], float]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [NOW.timestamp(), str(v)]}
                                                     for m, v in series]}}


def worked_example(path: str, args: dict[str, str]) -> tuple[int, Any]:
    """The spec's example over a 10-hour window at 1-minute resolution: a 10-GPU cluster (600 samples of 10 = 6,000),
    team-a held 24 GPU-hours (1,440 GPU-minutes), team-b 50; CPU and memory: no capacity series."""
    query = args["query"]
    if "kai_queue_allocated_gpus" in query:
        return 200, vector(({"queue_name": "team-a", "job": "kaisched"}, 1440.0),
                           ({"queue_name": "team-b", "job": "kaisched"}, 3000.0))
    if "nvidia_com_gpu" in query:
        return 200, vector(({}, 6000.0))
    if "allocated" in query:
        return 200, vector(({"queue_name": "team-a"}, 100.0))
    return 200, vector()


@pytest.fixture
def usage_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog on the source's logger itself (``kaisched run``'s log set-up stops kaisched's loggers propagating)."""
    logger = logging.getLogger("kaisched.usage.prometheus")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus(worked_example)
    try:
        yield fake
    finally:
        fake.close()


def sliding(**kw: Any) -> UsageParams:
    raw = {"windowSize": "10h", "extraParams": {"queryResolution": "1m", "usageQueryTimeout": "1s"}, **kw}
    return UsageParams.from_mapping(raw)


def test_the_sliding_window_asks_kais_subquery_and_gives_the_spec_example(prometheus: FakePrometheus) -> None:
    table = fetch_usage(prometheus.url, sliding(), NOW)
    assert table.queues == {"team-a": (0.24, 0.0, 0.0), "team-b": (0.5, 0.0, 0.0)}
    assert (table.source, table.fetched_at, table.stale) == (f"prometheus {prometheus.url}", NOW, False)
    gpu = [args for _, args in prometheus.requests if "gpu" in args["query"]]
    assert [a["query"] for a in gpu] == [
        "sum_over_time((max by (queue_name) (kai_queue_allocated_gpus))[36000s:60s])",
        'sum_over_time((sum(sum(kube_node_status_capacity{resource="nvidia_com_gpu"})))[36000s:60s])']
    assert all(a["time"] == f"{NOW.timestamp():.3f}" and a["timeout"] == "1s" for _, a in prometheus.requests)


def test_a_half_life_decays_each_sample_by_its_age_in_promql() -> None:
    queries = usage_queries(sliding(halfLifePeriod="2h"), NOW)
    assert queries is not None
    decay = f" * (0.5 ^ (({NOW.timestamp():.3f} - time()) / 7200))"
    gpus = "max by (queue_name) (kai_queue_allocated_gpus)"
    cpu = 'sum(sum(kube_node_status_capacity{resource="cpu"}))'
    assert queries.allocation[0] == f"sum_over_time(({gpus}{decay})[36000s:60s])"
    assert queries.capacity[1] == f"sum_over_time(({cpu}{decay})[36000s:60s])"


def test_tumbling_and_cron_windows_ask_the_subquery_from_the_last_reset(prometheus: FakePrometheus) -> None:
    tumbling = UsageParams.from_mapping({"windowType": "tumbling", "windowSize": "24h",
                                         "tumblingWindowStartTime": "2026-01-01T08:00:00Z",
                                         "extraParams": {"queryResolution": "1m"}})
    queries = usage_queries(tumbling, NOW)
    assert queries is not None  # the window started at 08:00: two hours, in whole minutes
    assert queries.allocation[0] == "sum_over_time((max by (queue_name) (kai_queue_allocated_gpus))[7200s:60s])"
    cron = UsageParams.from_mapping({"windowType": "cron", "cronString": "0 9 * * *",
                                     "extraParams": {"queryResolution": "1m"}})
    queries = usage_queries(cron, NOW + timedelta(seconds=150))  # reset at 09:00; whole steps: 62 minutes
    assert queries is not None and queries.capacity[0].endswith("[3720s:60s])")
    just_reset = UsageParams.from_mapping({"windowType": "cron", "cronString": "0 10 * * *"})
    assert usage_queries(just_reset, NOW) is None
    table = fetch_usage(prometheus.url, just_reset, NOW)  # nothing asked: the window has just begun
    assert table.queues == {} and prometheus.requests == []


@pytest.mark.parametrize(("status", "body", "message"), [
    (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
     "answered 400: parse error at char 3"),
    (503, b"overloaded", "answered 503"),
    (200, b"<html>not prometheus</html>", "the answer is not JSON"),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "expected a vector"),
    (200, {"status": "error", "error": "query timed out"}, "the query failed: query timed out"),
    (200, {"status": "success", "data": {"resultType": "vector",
                                         "result": [{"metric": {"queue_name": "a"}, "value": [1, "x"]}]}},
     "is not a number"),
])
def test_every_bad_answer_is_a_usage_fetch_error(status: int, body: Any, message: str) -> None:
    fake = FakePrometheus(lambda path, args: (status, body))
    try:
        with pytest.raises(UsageFetchError, match=message):
            fetch_usage(fake.url, sliding(), NOW)
    finally:
        fake.close()


def test_a_slow_or_absent_prometheus_fails_within_the_query_timeout(prometheus: FakePrometheus) -> None:
    prometheus.delay = 3.0
    started = time.monotonic()
    with pytest.raises(UsageFetchError, match="did not answer"):
        fetch_usage(prometheus.url, sliding(), NOW)  # usageQueryTimeout 1s
    assert time.monotonic() - started < 2.5
    prometheus.delay = 0.0
    prometheus.close()
    with pytest.raises(UsageFetchError, match="did not answer"):
        fetch_usage(prometheus.url, sliding(), NOW)
    with pytest.raises(UsageFetchError, match="not a Prometheus URL"):
        fetch_usage("ftp://x", sliding(), NOW)


def test_the_background_source_keeps_the_last_table_and_says_when_it_is_stale(
        prometheus: FakePrometheus, usage_log: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    params = sliding(fetchInterval="1s", stalenessPeriod="5m", waitTimeout="5s")
    reports = []
    source = PrometheusUsageSource(prometheus.url, params, now=lambda: clock[0], on_fetch=reports.append).start()
    try:
        assert source.wait_ready()
        table = source.table(NOW + timedelta(minutes=1))
        assert table is not None and not table.stale and table.queues["team-a"][0] == 0.24
        prometheus.close()  # down: fetches fail, the last table stays
        wait = time.monotonic() + 5
        while not any(not r.ok for r in reports) and time.monotonic() < wait:
            time.sleep(0.05)
        assert any(not r.ok and "did not answer" in r.error for r in reports)
        later = source.table(NOW + timedelta(minutes=6))  # older than stalenessPeriod: used, marked stale
        assert later is not None and later.stale and later.queues == table.queues
        assert "usage data is stale" in usage_log.text
    finally:
        source.stop()


def test_without_an_answer_at_start_up_the_source_says_weight_only_after_wait_timeout(
        usage_log: pytest.LogCaptureFixture) -> None:
    fake = FakePrometheus(lambda path, args: (503, b"starting"))
    try:
        source = PrometheusUsageSource(fake.url, sliding(fetchInterval="1s", waitTimeout="1s")).start()
        try:
            started = time.monotonic()
            assert source.wait_ready() is False
            assert 0.9 < time.monotonic() - started < 3
            assert source.table(NOW) is None  # the cycle divides by weight only
            assert "dividing by weight only" in usage_log.text and "answered 503" in usage_log.text
        finally:
            source.stop()
    finally:
        fake.close()


def test_the_client_type_chooses_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    assert usage_source(SchedulerConfig()) is None
    fake = usage_source(SchedulerConfig(usage_db=UsageDBConfig("fake")))
    assert isinstance(fake, NoUsageSource) and fake.table(NOW) is not None and fake.table(NOW).queues == {}
    assert isinstance(usage_source(SchedulerConfig(usage_db=UsageDBConfig("fake-with-history"))), HistoryUsageSource)
    env = SchedulerConfig(usage_db=UsageDBConfig("prometheus", connection_string_env_var="KAISCHED_TEST_PROM"))
    monkeypatch.delenv("KAISCHED_TEST_PROM", raising=False)
    with pytest.raises(ConfigError, match=r"usageDBConfig\.connectionStringEnvVar: the environment variable "
                                          r"KAISCHED_TEST_PROM is not set"):
        usage_source(env)
    monkeypatch.setenv("KAISCHED_TEST_PROM", "http://127.0.0.1:1")
    source = usage_source(env)
    assert source is not None and source.description == "prometheus http://127.0.0.1:1"


def test_schedule_takes_the_usage_from_a_prometheus_url(prometheus: FakePrometheus) -> None:
    base = ["schedule", "-f", str(ROOT / "examples" / "time-based-fairness.yaml"), "--config",
            str(ROOT / "examples" / "config" / "time-based-fairness.yaml"), "--now", "2026-01-01T10:00:00Z",
            "-o", "json"]
    result = CliRunner().invoke(cli, [*base, "--usage", prometheus.url])
    assert result.exit_code == 0, result.output
    queues = {q["name"]: (q["fairShare"]["gpu"], q["usage"]["gpu"]) for q in json.loads(result.stdout)["queues"]}
    assert queues == {"team-a": (6.0, 0.24), "team-b": (4.0, 0.5)}
    prometheus.close()
    down = CliRunner().invoke(cli, [*base, "--usage", prometheus.url])
    assert down.exit_code == 1 and "--usage: Prometheus at" in down.stderr and "did not answer" in down.stderr
