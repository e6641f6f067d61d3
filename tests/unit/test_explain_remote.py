"""``kaisched explain --scheduler URL``: the running scheduler's explanation from its latest cycle, over the
dashboard's HTTP route, on the hand-computed cluster of tests/unit/dashboard_cluster.yaml (pod ml/huge asks 8 GPUs of
a 4-GPU node: fits nowhere)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.explain import ExplainError, Explanation, explain_key, render_text
from kaisched.explain.remote import SchedulerUnreachable, explain_from_scheduler, explain_url
from kaisched.web import Dashboard, DashboardServer, handle
from tests.unit.test_dashboard import NOW, _board


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_answer_is_the_explanation_of_the_latest_cycle() -> None:
    board = _board()
    view = board._view
    assert view is not None
    key = view.pod_keys["ml/huge"]
    with DashboardServer(board, "127.0.0.1", 0) as server:
        remote = explain_from_scheduler(server.url, "ml", "huge", timeout=5)
    local = explain_key(key, view.jobs, view.result)
    assert remote.explanation == local  # field by field, through JSON and back
    assert remote.cycle == "2026-01-01T01:00:00Z"
    assert remote.explanation.code == "fits-nowhere" and remote.explanation.largest_free == (2.0, "node-1")
    assert render_text(remote.explanation) == render_text(local)


def test_an_unknown_job_is_the_schedulers_sentence() -> None:
    with DashboardServer(_board(), "127.0.0.1", 0) as server, pytest.raises(ExplainError, match="ml/nobody"):
        explain_from_scheduler(server.url, "ml", "nobody", timeout=5)


def test_a_scheduler_without_a_view_is_asked_again_until_it_has_one() -> None:
    done = _board()
    assert done._view is not None
    board = Dashboard(source="test")
    with DashboardServer(board, "127.0.0.1", 0) as server:
        with pytest.raises(SchedulerUnreachable, match=r"no answer within 0\.2 s"):
            explain_from_scheduler(server.url, "ml", "huge", timeout=0.2)
        later = threading.Timer(0.6, lambda: board.update(done._view.jobs, done._view.result, NOW))  # type: ignore[union-attr]
        later.start()
        remote = explain_from_scheduler(server.url, "ml", "huge", timeout=10)
        later.join()
    assert remote.explanation.code == "fits-nowhere"


def test_a_view_older_than_newer_cycles_is_not_an_answer() -> None:
    clock = Clock()
    board = Dashboard(source="kaisched run", clock=clock, max_view_age=10.0)
    done = _board()
    assert done._view is not None
    board.update(done._view.jobs, done._view.result, NOW)
    clock.t += 30
    assert handle(board, "/api/explain?job=ml/huge")[0] == 200  # type: ignore[index]  # no newer cycle: still it
    board.cycle(done._view.result, NOW)  # a newer cycle ran, its view not built
    status, _, body = handle(board, "/api/explain?job=ml/huge")  # type: ignore[misc]
    assert status == 503 and "30 s old" in json.loads(body)["error"]
    assert board.watched(1.0)  # the ask is a look: kaisched run builds the next cycle's view
    board.update(done._view.jobs, done._view.result, NOW)
    assert handle(board, "/api/explain?job=ml/huge")[0] == 200  # type: ignore[index]


@pytest.mark.parametrize(("url", "match"), [
    ("127.0.0.1:8080", "expected http://HOST:PORT"),
    ("ftp://127.0.0.1:8080", "expected http://HOST:PORT"),
    ("http://127.0.0.1:1", "cannot be asked"),
])
def test_bad_addresses(url: str, match: str) -> None:
    with pytest.raises(SchedulerUnreachable, match=match):
        explain_from_scheduler(url, "ml", "huge", timeout=2)


def test_the_url_keeps_a_prefix_and_quotes_the_job() -> None:
    assert explain_url("http://h:8080/kai/", "ml", "a b") == "http://h:8080/kai/api/explain?job=ml%2Fa+b"


@pytest.mark.parametrize(("data", "match"), [
    ([], "must be a JSON object"),
    ({"queue": "q", "status": "Pending"}, "no field 'job'"),
    ({"job": "a/b", "queue": "q", "status": "Pending", "position": "1"}, "'position' is a str"),
    ({"job": "a/b", "queue": "q", "status": 3}, "'status' is a int"),
])
def test_an_answer_that_is_not_an_explanation(data: Any, match: str) -> None:
    with pytest.raises(ExplainError, match=match):
        Explanation.from_dict(data)


def test_cli_prints_the_schedulers_explanation_and_its_cycle() -> None:
    runner = CliRunner()
    with DashboardServer(_board(), "127.0.0.1", 0) as server:
        text = runner.invoke(cli, ["explain", "huge", "-n", "ml", "--scheduler", server.url])
        data = runner.invoke(cli, ["explain", "huge", "-n", "ml", "--scheduler", server.url, "-o", "json"])
        missing = runner.invoke(cli, ["explain", "nobody", "-n", "ml", "--scheduler", server.url])
    assert text.exit_code == 0, text.output
    assert "Tier:      fits nowhere (fits-nowhere)" in text.output
    assert "Cycle:     2026-01-01T01:00:00Z" in text.output
    assert json.loads(data.output)["cycle"] == "2026-01-01T01:00:00Z"
    assert missing.exit_code == 1 and "ml/nobody" in missing.output
    both = runner.invoke(cli, ["explain", "huge", "--scheduler", "http://127.0.0.1:1", "-f", "README.md"])
    assert both.exit_code == 2 and "give no -f" in both.output
