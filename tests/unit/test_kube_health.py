"""/metrics, /healthz and /readyz served over real HTTP on a free port."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from kaisched.framework.result import CycleResult
from kaisched.kube.health import Health, HealthServer
from kaisched.kube.metrics import CycleTimings, SchedulerMetrics


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


@pytest.fixture
def health(clock: list[float]) -> Health:
    return Health(clock=lambda: clock[0])


def test_metrics_endpoint_serves_the_registry(health):
    metrics = SchedulerMetrics()
    metrics.record_cycle(CycleResult(), CycleTimings(42.0))
    with HealthServer(health, metrics.render, host="127.0.0.1", port=0) as server:
        assert server.port > 0
        status, content_type, body = get(f"{server.url}/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "kai_e2e_scheduling_latency_milliseconds 42.0" in body


def test_healthz_follows_the_loops_heartbeats(health, clock):
    health.register_loop("cycle", max_silence=10.0)
    health.register_loop("watch-pods", max_silence=60.0)
    with HealthServer(health, lambda: b"", host="127.0.0.1", port=0) as server:
        assert get(f"{server.url}/healthz")[0] == 200
        clock[0] += 30.0
        health.beat("watch-pods")
        status, _, body = get(f"{server.url}/healthz")
        assert (status, body) == (503, "stalled: cycle\n")
        health.beat("cycle")
        assert get(f"{server.url}/healthz")[0] == 200
        clock[0] += 30.0
        health.unregister_loop("cycle")
        health.beat("watch-pods")
        assert get(f"{server.url}/healthz")[0] == 200


def test_readyz_waits_for_synced_caches_not_for_leadership(health):
    with HealthServer(health, lambda: b"", host="127.0.0.1", port=0) as server:
        assert get(f"{server.url}/readyz")[:3:2] == (503, "caches not synced\n")
        health.set_synced()  # a standby replica (not leading) is ready too
        assert get(f"{server.url}/readyz")[0] == 200
        health.set_synced(False)
        assert get(f"{server.url}/readyz")[0] == 503
        assert get(f"{server.url}/nope")[0] == 404


def test_broken_metrics_answer_500_and_stop_frees_the_port(health):
    def broken() -> bytes:
        raise RuntimeError("collector failed")

    server = HealthServer(health, broken, host="127.0.0.1", port=0).start()
    url = server.url
    status, _, body = get(f"{url}/metrics")
    assert status == 500 and "collector failed" in body
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/healthz", timeout=2)
