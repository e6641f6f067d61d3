"""The dashboard's data endpoint on a hand-computed cluster (tests/unit/dashboard_cluster.yaml): one node of 4 GPUs,
queue team-a with a quota of 4; pod ml/small asks 2 GPUs (bound), pod ml/huge asks 8 (fits nowhere)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from kaisched.cluster.schedule import resolve_config
from kaisched.explain import run_view
from kaisched.framework.config import SchedulerConfig
from kaisched.k8s.loader import load_objects
from kaisched.web import Dashboard, DashboardServer, handle

CLUSTER = Path(__file__).with_name("dashboard_cluster.yaml")
DRA_EXAMPLE = Path(__file__).parents[2] / "examples" / "dra-gpus.yaml"
NOW = datetime(2026, 1, 1, 1, tzinfo=UTC)


def _board() -> Dashboard:
    jobs, result = run_view(load_objects([CLUSTER]), resolve_config(SchedulerConfig()), NOW)
    board = Dashboard(source="test")
    board.update(jobs, result, NOW)
    return board


def _json(board: Dashboard, target: str) -> tuple[int, dict[str, Any]]:
    response = handle(board, target)
    assert response is not None
    status, content_type, body = response
    assert content_type.startswith("application/json")
    return status, json.loads(body)


def test_queue_bars_numbers() -> None:
    status, doc = _json(_board(), "/api/dashboard")
    assert status == 200
    [q] = doc["queues"]
    # quota 4 on a 4-GPU cluster: deserved 4; 10 GPUs asked, capped at the cluster: fair share 4; 2 bound
    assert (q["name"], q["deserved"], q["fairShare"], q["allocated"], q["requested"], q["pendingJobs"]) == (
        "team-a", 4.0, 4.0, 2.0, 10.0, 1)
    assert doc["summary"]["gpus"] == 4.0 and doc["summary"]["gpusUsed"] == 2.0
    assert doc["utilisation"] == [{"at": "2026-01-01T01:00:00Z", "used": 2.0, "total": 4.0}]


def test_pending_reason_and_decisions() -> None:
    _, doc = _json(_board(), "/api/dashboard")
    [job] = doc["pending"]
    assert job["queue"] == "team-a" and job["gpus"] == 8.0 and job["reason"] == "PodSchedulingErrors"
    assert "requires 8 GPUs" in job["message"]
    assert doc["decisions"] == [{"at": "2026-01-01T01:00:00Z", "kind": "bind", "pod": "ml/small", "node": "node-1",
                                 "reason": ""}]


def test_explanation_by_job_and_by_pod() -> None:
    board = _board()
    _, doc = _json(board, "/api/dashboard")
    name = doc["pending"][0]["name"]
    status, exp = _json(board, f"/api/explain?job={name}")
    assert status == 200 and exp["tier"] == "fits nowhere" and exp["largestFreeBlock"] == {"gpus": 2.0,
                                                                                           "node": "node-1"}
    status, by_pod = _json(board, "/api/explain?job=ml%2Fhuge")
    assert status == 200 and by_pod["job"] == name


def test_history_keeps_evictions_and_samples_per_interval() -> None:
    board = _board()
    jobs, result = run_view(load_objects([CLUSTER]), resolve_config(SchedulerConfig()), NOW)
    board.update(jobs, result, NOW + timedelta(seconds=10))  # within the sampling interval: the sample is replaced
    board.update(jobs, result, NOW + timedelta(minutes=5))
    _, doc = _json(board, "/api/dashboard")
    assert [s["at"] for s in doc["utilisation"]] == ["2026-01-01T01:00:00Z", "2026-01-01T01:05:00Z"]
    assert len(doc["decisions"]) == 1  # the same bind again: not a new decision


def test_kaisched_run_wiring() -> None:
    from types import SimpleNamespace

    from kaisched.cli.dashboard import attach
    from kaisched.cluster.schedule import prepare

    config = resolve_config(SchedulerConfig())
    scheduler: Any = SimpleNamespace(config=config, cycle_listeners=[], http_routes=[])
    board = attach(scheduler)
    prepared = prepare(load_objects([CLUSTER]), config, NOW)
    _, result = run_view(load_objects([CLUSTER]), config, NOW)
    [listener] = scheduler.cycle_listeners
    listener(prepared, result, NOW)  # the first cycle always builds the view
    [route] = scheduler.http_routes
    answer = route("/api/dashboard")
    assert answer is not None and json.loads(answer[2])["queues"][0]["allocated"] == 2.0
    assert route("/metrics") is None
    assert board.history.to_dict()["decisions"][0]["pod"] == "ml/small"


def test_kaisched_run_sees_the_jobs_as_its_cycle_does() -> None:
    """Kubernetes mode's cycle makes no claim from a ResourceClaimTemplate (the cluster's resourceclaim controller
    does): the dashboard's jobs are read the same way, so a pod whose claim is not made yet is shown as that cycle
    (and kaisched explain --kubeconfig) sees it, not with the template's GPUs."""
    from types import SimpleNamespace

    from kaisched.cli.dashboard import attach
    from kaisched.cluster.schedule import prepare
    from kaisched.explain import job_rows

    config = resolve_config(SchedulerConfig())
    scheduler: Any = SimpleNamespace(config=config, cycle_listeners=[], http_routes=[])
    board = attach(scheduler)
    prepared = prepare(load_objects([DRA_EXAMPLE]), config, NOW)
    jobs, result = run_view(prepared, config, NOW, live=True)  # the objects and the cycle of Kubernetes mode
    scheduler.cycle_listeners[0](prepared, result, NOW)
    doc = json.loads(board.data() or b"{}")
    live = {r["name"]: r for r in job_rows(jobs, result, NOW)}
    trains = [r for r in doc["pending"] if "/pg-train-" in r["name"]]
    assert len(trains) == 4
    for row in trains:
        assert (row["gpus"], row["code"]) == (live[row["name"]]["gpus"], live[row["name"]]["code"]) == (
            0.0, "misconfigured")


@pytest.mark.parametrize(("target", "status"), [
    ("/api/explain?job=ml/nobody", 404),
    ("/api/explain?job=nobody", 400),
    ("/api/explain", 400),
    ("/api/explain?job=a/b&job=c/d", 400),
    ("/api/explain?job=ml/huge&x=1", 400),
    ("/api/explain?%%%", 400),
    ("/api/dashboard?x=1", 400),
    ("/api/nothing", 404),
])
def test_bad_requests(target: str, status: int) -> None:
    got, body = _json(_board(), target)
    assert got == status and body["error"]


def test_before_the_first_cycle_and_other_paths() -> None:
    board = Dashboard()
    status, body = _json(board, "/api/dashboard")
    assert status == 503 and "no scheduling cycle" in body["error"]
    assert handle(board, "/metrics") is None  # not a dashboard path: the health server's own
    page = handle(board, "/")
    assert page is not None and page[0] == 200 and b"<svg" not in page[2][:100]
    assert b"http://" not in page[2].replace(b"http://www.w3.org/2000/svg", b"")  # no external assets


def test_served_over_http() -> None:
    with DashboardServer(_board(), "127.0.0.1", 0) as server:
        assert httpx.get(server.url).status_code == 200
        r = httpx.get(server.url + "api/explain?job=ml/nobody")
        assert r.status_code == 404 and "ml/nobody" in r.json()["error"]
        assert httpx.get(server.url + "api/dashboard").json()["summary"]["pendingJobs"] == 1


def test_health_server_carries_the_routes() -> None:
    from kaisched.kube.health import Health, HealthServer

    board = _board()
    with HealthServer(Health(), lambda: b"", "127.0.0.1", 0, [lambda t: handle(board, t)]) as server:
        assert httpx.get(server.url + "/api/dashboard").json()["queues"][0]["name"] == "team-a"
        assert httpx.get(server.url + "/readyz").status_code == 503
        assert httpx.get(server.url + "/nope").status_code == 404
