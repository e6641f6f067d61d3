"""``kaisched simulate``: replay a scenario's workload through the scheduler on a simulated clock.

Every scenario is read and checked before anything is simulated (unknown fields and queues, jobs that could never
run, malformed values, sizes over the scenario's limits, errors in the cluster's objects or the scheduler
configuration: exit 2, each problem on a line naming the file and the field). The summary goes to standard
output, wrapped between phrases to the terminal's width (``COLUMNS`` when set); the progress of a run goes to
standard error: a bar on a terminal, nothing otherwise (``--progress`` prints plain lines instead,
``--no-progress`` or ``--quiet`` never shows it).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TextIO

import click

from kaisched.cli.schedule import input_limits
from kaisched.framework.config import ConfigError
from kaisched.k8s.loader import MAX_INPUT_BYTES_ENV
from kaisched.sim import ProgressInfo, ScenarioError, SimResult, SimulationError, load_scenario, simulate
from kaisched.sim.model import Scenario
from kaisched.sim.validate import cluster_problems

EXAMPLES = """\
\b
Examples:
  # a day of three teams on 512 GPUs: summary here, report in sim-out/report.html
  kaisched simulate examples/simulation/three-teams.yaml -o sim-out
  # DRA GPUs, another draw of the generated workload
  kaisched simulate examples/simulation/dra-gpus.yaml -o dra-out --seed 3
  # the same workload under two scheduler configs, side by side (cmp/compare.html)
  kaisched simulate --compare examples/simulation/compare/binpack.yaml examples/simulation/compare/spread.yaml -o cmp
  # a week of a busy shared cluster of 100 teams, progress as plain lines (e.g. in CI logs)
  kaisched simulate examples/simulation/busy-cluster.yaml -o busy --progress
"""

PLAIN_EVERY = 2.0  # wall seconds between two plain progress lines


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}h"


def describe_progress(p: ProgressInfo) -> str:
    """One line of progress: ``40 % · t=10.4h of 26h · 300/750 jobs arrived · 200 completed, 40 running, 60
    pending``."""
    where = f"t={_hours(p.time)}" + (f" of {_hours(p.until)}" if p.until is not None else "")
    return (f"{100 * p.fraction:.0f} % · {where} · {p.arrived:,}/{p.total:,} jobs arrived · {p.completed:,} completed,"
            f" {p.running:,} running, {p.pending:,} pending")


@contextmanager
def _progress(label: str, mode: str, err: TextIO) -> Iterator[Callable[[ProgressInfo], None] | None]:
    """A progress callback for one run: ``bar`` (rich, on a terminal), ``lines`` (plain lines), ``off``."""
    if mode == "off":
        yield None
        return
    if mode == "lines":
        last = [-float("inf")]

        def line(p: ProgressInfo) -> None:
            now = time.monotonic()
            if p.done or now - last[0] >= PLAIN_EVERY:
                last[0] = now
                click.echo(f"{label}: " + ("done · " if p.done else "") + describe_progress(p), file=err)

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    console = Console(file=err)
    with Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[t]}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(label, total=1.0, t="")

        def update(p: ProgressInfo) -> None:
            where = f"t={_hours(p.time)}" + (f"/{_hours(p.until)}" if p.until is not None else "")
            bar.update(task, completed=p.fraction,
                       t=f"{where} · {p.completed:,}/{p.total:,} done · {p.running:,} running · {p.pending:,} pending")

        yield update


def _command_line(paths: list[str], compare: bool, outdir: str, seed: int | None) -> str:
    """The command that makes this run again (options as given, in a fixed order)."""
    args = ["kaisched", "simulate", *(["--compare", *paths] if compare else paths), "-o", outdir]
    if seed is not None:
        args += ["--seed", str(seed)]
    return shlex.join(args)


def _fail(lines: list[str], code: int) -> NoReturn:
    for line in lines:
        click.echo(line, err=True)
    raise SystemExit(code)


@click.command("simulate", epilog=EXAMPLES)
@click.argument("scenario", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("-o", "--output", "outdir", type=click.Path(file_okay=False), default="sim-out", show_default=True,
              help="Folder for the report (report.html), the metrics (JSON, CSV).")
@click.option("--seed", type=int, default=None, help="Seed of the generated workload (overrides the scenario's).")
@click.option("--compare", "compare_paths", nargs=2, type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="A.yaml B.yaml",
              help="Run two scenarios (the same workload under two configs) and compare them side by side.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Show the progress of the run on standard error (default: a bar when it is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary: only problems and the report's path.")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of each scenario and the files it names (bytes, or a quantity like 2Gi; "
                   f"default 1Gi, or ${MAX_INPUT_BYTES_ENV}).")
def simulate_command(scenario: str | None, outdir: str, seed: int | None, compare_paths: tuple[str, str] | None,
                     show_progress: bool | None, quiet: bool, max_input_bytes: str | None) -> None:
    """Simulate SCENARIO (a scenario file: cluster, queues, scheduler config, workload) and write a report.

    Every scenario is checked before anything runs: unknown fields, queues that do not exist, jobs no node (or
    the whole cluster) could ever run, malformed or negative values, reversed ranges, sizes over the scenario's
    limits, errors in the cluster's objects and the scheduler configuration. The summary accounts for every job
    (completed, running, waiting, dropped) and wraps to the terminal's width (COLUMNS).

    Exit status: 0 on success; 2 when a scenario cannot be used (nothing is simulated; each problem is named with
    its file and field), for a bad command line, or when the report cannot be drawn (matplotlib missing: pip
    install 'kaisched[sim]'); 3 on an internal error.
    """
    from kaisched.sim import report

    paths = list(compare_paths) if compare_paths else ([scenario] if scenario else [])
    if not paths:
        raise click.UsageError("give a SCENARIO file, or --compare A.yaml B.yaml")
    if compare_paths and scenario:
        raise click.UsageError("give either a SCENARIO or --compare A.yaml B.yaml, not both")
    limits = input_limits(max_input_bytes)
    try:
        report.check_plotting()
    except report.ReportDependencyError as exc:
        _fail([f"kaisched simulate: {exc}"], 2)
    scenarios: list[Scenario] = []
    problems: list[str] = []
    for path in paths:
        try:
            scenarios.append(load_scenario(path, seed=seed, limits=limits))
        except ScenarioError as exc:
            problems += [p if p.startswith(f"{path}:") else f"{path}: {p}" for p in exc.problems]
        else:  # the cluster's objects, checked as the run would (before any run starts)
            problems += [f"{path}: {p}" for p in cluster_problems(scenarios[-1])]
    if problems:
        _fail([*problems, f"nothing simulated: {len(problems)} problem{'s' if len(problems) > 1 else ''}"], 2)
    mode = "off" if quiet or show_progress is False else "bar" if sys.stderr.isatty() else (
        "lines" if show_progress else "off")
    err = sys.stderr
    results: list[SimResult] = []
    labels: list[str] = []
    command = _command_line(paths, bool(compare_paths), outdir, seed)
    for path, sc in zip(paths, scenarios, strict=True):
        label = Path(path).stem if compare_paths else sc.name
        if not quiet:
            jobs = len(sc.arrivals) + len(sc.dropped)
            click.echo(f"{label}: " * bool(compare_paths) + f"{sc.name}: {jobs:,} jobs, period {sc.period:g}s"
                       + (f", until {sc.until / 3600:g}h" if sc.until else "")
                       + (f", {len(sc.dropped):,} dropped (could never run)" if sc.dropped else ""))
        try:
            with _progress(label, mode, err) as callback:
                result = simulate(sc, progress=callback)
        except ConfigError as exc:  # (checked when the scenario is read: not expected here)
            _fail([f"{path}: config: {exc}"], 2)
        except SimulationError as exc:
            _fail([f"{path}: {exc}"], 2)
        result.inputs["command"] = command
        results.append(result)
        labels.append(label)
    out = Path(outdir)
    try:
        if compare_paths:
            files = report.compare(results, labels, out)
            text, where = report.compare_text(results, labels), files["compare.html"]
        else:
            files = report.write_outputs(results[0], out)
            text, where = report.summary_text(results[0]), files["report.html"]
    except report.ReportDependencyError as exc:
        _fail([f"kaisched simulate: {exc}"], 2)
    except OSError as exc:
        _fail([f"kaisched simulate: cannot write the report to {outdir}: {exc.strerror or exc}"], 2)
    if not quiet:
        click.echo(text)
    click.echo(f"report: {where}")
