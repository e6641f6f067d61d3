"""``kaisched simulate``: the report and where it is, its recorded inputs, progress on standard error only, the
summary wrapped between phrases, the help's examples, and the report's optional dependency (matplotlib)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli

ROOT = Path(__file__).resolve().parents[2]

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
    assert "GPU allocation" in result.stdout and str(out / "report.html") in result.stdout
    assert "12 of 12 jobs completed" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "tiny" and summary["summary"]["jobs"] == 12
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_the_report_records_its_inputs(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(out), "--seed", "9"])
    assert result.exit_code == 0, result.output
    digest = hashlib.sha256(scenario.read_bytes()).hexdigest()
    from importlib.metadata import version

    command = shlex.join(["kaisched", "simulate", str(scenario), "-o", str(out), "--seed", "9"])
    inputs = json.loads((out / "summary.json").read_text())["inputs"]
    assert inputs["scenario_path"] == str(scenario) and inputs["scenario_sha256"] == digest
    assert inputs["seed"] == 9 and inputs["kaisched_version"] == version("kaisched")
    assert inputs["command"] == command and inputs["jobs"] == 12
    page = (out / "report.html").read_text()
    for text in (str(scenario), digest, version("kaisched"), "every: 5m"):  # the scenario's text as read
        assert text in page, text
    assert command.replace("'", "&#x27;") in page or command in page


def test_compare_runs_both_in_the_order_given(tmp_path: Path) -> None:
    a = _write(tmp_path, "zspread.yaml", {**SCENARIO, "name": "zeta", "config": {"tiers": [{"plugins": [
        {"name": "predicates"}, {"name": "proportion"}, {"name": "priority"}, {"name": "gpuspread"},
        {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}}]}]}})
    b = _write(tmp_path, "abinpack.yaml", {**SCENARIO, "name": "alpha"})
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["simulate", "--compare", str(a), str(b), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = (out / "compare.html").read_text()
    assert "<h1>zeta / alpha</h1>" in html  # A then B, as given
    assert html.index("<th>zspread</th>") < html.index("<th>abinpack</th>")
    assert result.stdout.splitlines()[2].startswith("zeta / alpha: 2 runs compared (zspread, abinpack)")
    assert json.loads((out / "compare.json").read_text())["labels"] == ["zspread", "abinpack"]


def test_bad_scenario_exits_2_as_a_missing_file_does(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", {**SCENARIO, "period": "soon"})
    result = CliRunner().invoke(cli, ["simulate", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{bad}: period: ")
    missing = CliRunner().invoke(cli, ["simulate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "nope.yaml" in missing.output
    listed = _write(tmp_path, "list.yaml", [1, 2])
    result = CliRunner().invoke(cli, ["simulate", str(listed)])
    assert result.exit_code == 2 and "expected a scenario (a mapping" in result.stderr


# ------------------------------------------------------------------------------------------------ progress
def test_no_progress_when_stderr_is_not_a_terminal_and_forced_progress_goes_to_stderr(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    quiet = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(tmp_path / "a")])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    forced = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(tmp_path / "a"), "--progress"])
    assert forced.exit_code == 0
    lines = forced.stderr.splitlines()
    assert lines and all(line.startswith("tiny: ") for line in lines)
    assert re.fullmatch(r"tiny: done · 100 % · t=\d+\.\dh · 12/12 jobs arrived · 12 completed, 0 running, "
                        r"0 pending", lines[-1])
    assert re.sub(r"\d+\.\d s wall", "", forced.stdout) == re.sub(r"\d+\.\d s wall", "", quiet.stdout)
    off = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(tmp_path / "a"), "--progress", "-q"])
    assert off.stderr == "" and off.stdout == f"report: {tmp_path / 'a' / 'report.html'}\n"


def test_the_progress_callback_sees_the_jobs() -> None:
    from kaisched.sim import ProgressInfo, scenario_from_mapping, simulate

    seen: list[ProgressInfo] = []
    simulate(scenario_from_mapping(SCENARIO), progress=seen.append)
    assert seen[-1].done and seen[-1].fraction == 1.0 and not any(p.done for p in seen[:-1])
    assert [p.arrived for p in seen] == sorted(p.arrived for p in seen)
    assert (seen[-1].arrived, seen[-1].total, seen[-1].completed, seen[-1].pending) == (12, 12, 12, 0)
    assert all(0.0 <= p.fraction <= 1.0 for p in seen)


# -------------------------------------------------------------------------------------------- wrapping
def test_the_summary_wraps_between_phrases_within_columns(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    wide = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(tmp_path / "a")], env={"COLUMNS": "400"})
    narrow = CliRunner().invoke(cli, ["simulate", str(scenario), "-o", str(tmp_path / "a")], env={"COLUMNS": "60"})
    assert narrow.exit_code == 0
    summary = [line for line in narrow.stdout.splitlines() if not line.startswith("report: ")]
    assert max(len(line) for line in summary) <= 60
    assert len(summary) > len(wide.stdout.splitlines())
    # every phrase of the wide summary is whole on some line of the narrow one
    for line in wide.stdout.splitlines()[1:3]:
        for phrase in line.removeprefix("tiny: ").split(" · "):
            if len(phrase) <= 54 and not phrase.endswith(" s wall"):  # (the two runs' wall times may differ)
                assert any(phrase.strip() in n for n in summary), phrase


def test_wrap_phrases_breaks_long_phrases_between_words() -> None:
    from kaisched.sim.report import wrap_phrases

    lines = wrap_phrases(["alpha beta", "gamma delta epsilon zeta eta theta iota", "kappa"], 20, prefix="> ")
    assert lines == ["> alpha beta", "  gamma delta", "  epsilon zeta eta", "  theta iota · kappa"]
    assert all(len(line) <= 20 for line in lines)
    assert wrap_phrases(["a", "b"], 80) == ["a · b"]


# ------------------------------------------------------------------------------------------------ help
def test_help_ends_with_examples_whose_files_exist() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = result.output.rstrip()
    examples = text[text.index("Examples:"):]
    commands = [line.strip() for line in examples.splitlines()[1:] if line.strip().startswith("kaisched ")]
    assert len(commands) >= 3 and text.splitlines()[-1].strip() == commands[-1]
    files = [word for c in commands for word in shlex.split(c) if word.endswith(".yaml")]
    assert files and all((ROOT / f).is_file() for f in files), files


def test_the_documented_compare_example_runs_from_the_repo_root(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    docs = (ROOT / "docs" / "simulator.md").read_text()
    lines = {x for x in docs.splitlines() if x.startswith("kaisched simulate --compare ")}
    assert len(lines) == 1  # (the same command wherever the page shows it)
    (line,) = lines
    args = shlex.split(line.split("#")[0])[1:]
    args[args.index("-o") + 1] = str(tmp_path / "cmp")
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cmp" / "compare.html").is_file()
    assert "binpack" in result.stdout and "spread" in result.stdout


def test_documented_files_exist() -> None:
    docs = (ROOT / "docs" / "simulator.md").read_text()
    named = set(re.findall(r"examples/simulation/[\w./-]+\.yaml", docs))
    assert named and all((ROOT / f).is_file() for f in named), named
    assert "../shared" not in docs and not re.search(r"\bspec \d", docs)


# ------------------------------------------------------------------------------------------ matplotlib
def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)


BLOCK = "import sys; sys.modules['matplotlib'] = None\n"  # any import of matplotlib now raises ImportError


def test_without_matplotlib_simulate_exits_2_with_the_extra_to_install(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    run = _run(BLOCK + "from kaisched.cli import cli\ncli(sys.argv[1:])", "simulate", str(scenario),
               "-o", str(tmp_path / "out"))
    assert run.returncode == 2, run.stderr
    assert "pip install 'kaisched[sim]'" in run.stderr and "matplotlib" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert not (tmp_path / "out").exists()  # refused before simulating


def test_the_scheduler_imports_nothing_of_matplotlib() -> None:
    run = _run("import sys, kaisched, kaisched.cli, kaisched.sim, kaisched.sim.report, kaisched.sim.engine\n"
               "assert 'matplotlib' not in sys.modules, sorted(m for m in sys.modules if 'matplotlib' in m)")
    assert run.returncode == 0, run.stderr
    schedule = _run(BLOCK + "from kaisched.cli import cli\ncli(sys.argv[1:])", "schedule", "-f",
                    "examples/reclaim.yaml", "--now", "2026-01-01T02:00:00Z")
    assert schedule.returncode == 0, schedule.stderr


def test_matplotlib_is_imported_only_inside_functions() -> None:
    for path in sorted((ROOT / "src" / "kaisched" / "sim").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level (an `if TYPE_CHECKING:` block is for the type checker only)
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] == "matplotlib" for n in names), f"{path.name}:{node.lineno}"


@pytest.mark.parametrize("argv", [["simulate"], ["simulate", "a.yaml", "--compare", "a.yaml", "b.yaml"]])
def test_usage_errors(tmp_path: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text("name: a\n")
    (tmp_path / "b.yaml").write_text("name: b\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2 and "SCENARIO" in result.output


# ------------------------------------------------------------------------------------------ --compare-config
AWARE = ROOT / "examples" / "config" / "fragmentation-aware.yaml"


def test_compare_config_runs_the_scenario_as_written_and_under_the_config(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "--compare-config", str(AWARE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    compared = json.loads((out / "compare.json").read_text())
    assert compared["labels"] == ["kai-default", "fragmentation-aware"]
    html = (out / "compare.html").read_text()
    assert "stranded GPUs: no CPU (mean)" in html and "stranded GPUs: slivers (mean)" in html
    runs = [json.loads((out / label / "summary.json").read_text()) for label in compared["labels"]]
    assert [r["inputs"]["variant"] for r in runs] == [
        "as written", f"scheduler configuration replaced by {AWARE}"]
    assert all(set(r["summary"]["stranded_gpus_mean"]) == {"no_cpu", "no_memory", "slivers"} for r in runs)
    assert runs[1]["inputs"]["command"].endswith(f"--compare-config {AWARE} -o {out}")


def test_compare_config_names_a_bad_argument_and_simulates_nothing(tmp_path: Path) -> None:
    scenario = _write(tmp_path, "tiny.yaml", SCENARIO)
    bad = yaml.safe_load(AWARE.read_text())
    for plugin in bad["tiers"][0]["plugins"]:
        if plugin["name"] == "gpufragmentation":
            plugin["arguments"]["tieBreak"] = "coin"
    config = _write(tmp_path, "bad-config.yaml", bad)
    result = CliRunner().invoke(cli, ["simulate", str(scenario), "--compare-config", str(config),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"{config}: config: " in result.stderr and "argument tieBreak" in result.stderr
    assert not (tmp_path / "out").exists()
    alone = CliRunner().invoke(cli, ["simulate", "--compare-config", str(AWARE)])
    assert alone.exit_code == 2 and "--compare-config CONFIG compares one SCENARIO" in alone.output
