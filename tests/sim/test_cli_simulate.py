"""``kaisched simulate``: the command writes the report and says where; bad scenarios give exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from kaisched.cli import cli

SCENARIO = {
    "name": "tiny", "period": "30s",
    "cluster": {"pools": [{"name": "n", "count": 2, "gpus": 4}],
                "objects": [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
                             "spec": {"resources": {"gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1},
                                                    "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                                    "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}]},
    "workload": {"generate": [{"queue": "q", "jobs": 12, "every": "5m", "pods": [1, 2], "gpus": [1, 0.5],
                               "duration": ["10m", "1h"]}]},
}


def _write(tmp_path: Path, name: str, doc: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_simulate_writes_the_report(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "GPU allocation" in result.output and str(out / "report.html") in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "tiny" and summary["summary"]["jobs"] == 12
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_compare_runs_both(tmp_path: Path) -> None:
    a = _write(tmp_path, "binpack.yaml", SCENARIO)
    b = _write(tmp_path, "spread.yaml", {**SCENARIO, "config": {"tiers": [{"plugins": [
        {"name": "predicates"}, {"name": "proportion"}, {"name": "priority"}, {"name": "gpuspread"},
        {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}}]}]}})
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["simulate", "--compare", str(a), str(b), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = (out / "compare.html").read_text()
    assert "binpack" in html and "spread" in html


def test_bad_scenario_is_a_usage_error(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", {**SCENARIO, "period": "soon"})
    result = CliRunner().invoke(cli, ["simulate", str(bad)])
    assert result.exit_code == 2
    assert "period" in result.output
    missing = CliRunner().invoke(cli, ["simulate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "nope.yaml" in missing.output
