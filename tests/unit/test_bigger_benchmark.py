"""benchmarks.bigger's ``--search-stats``: each size's row carries what the eviction actions' victim searches cost in
its last cycle (``CycleResult.search_stats``), and the table prints them under the size."""

from __future__ import annotations

import pytest
from benchmarks import bigger


def test_worker_row_has_the_searches_of_each_eviction_action() -> None:
    row = bigger.worker(50, 1)
    for action in ("consolidation", "reclaim"):
        for name in bigger.SEARCH_FIELDS:
            assert isinstance(row[f"{action}.{name}"], float)
        assert 0 <= row[f"{action}.solved"] <= row[f"{action}.preemptors"]


def test_search_stats_are_printed_under_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert bigger.main(["--nodes", "50", "--repeat", "1", "--search-stats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == "50")
    searches = [line.split()[0] for line in lines[row + 1:] if line.startswith(" ") and "simulations" in line]
    assert searches[:2] == ["consolidation:", "reclaim:"]
