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
from dataclasses import replace
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
  # the OpenB trace replayed (arrivals and departures) with KAI's default placement and fragmentation-aware
  kaisched simulate examples/simulation/openb-replay.yaml \
      --compare-config examples/config/fragmentation-aware.yaml -o openb
  # time-based fair share (the scenario's usageDBConfig) against the same scenario divided by weight only
  kaisched simulate examples/simulation/time-based-week.yaml --compare-weight-only -o week
  # KAI's time-based fair-share simulator input: simulation_results.csv (Time,QueueID,Allocation,FairShare)
  kaisched simulate --kai-time-based examples/simulation/time-based/two-queues.yaml -o tb
"""

TIME_BASED, WEIGHT_ONLY = "time-based", "weight-only"

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


def _command_line(paths: list[str], compare: bool, outdir: str, seed: int | None, weight_only: bool = False,
                  kai: bool = False, compare_config: str | None = None) -> str:
    """The command that makes this run again (options as given, in a fixed order)."""
    if kai:
        args = ["kaisched", "simulate", "--kai-time-based", *paths]
    else:
        args = ["kaisched", "simulate", *(["--compare", *paths] if compare else paths)]
    if weight_only:
        args.append("--compare-weight-only")
    if compare_config is not None:
        args += ["--compare-config", compare_config]
    args += ["-o", outdir]
    if seed is not None:
        args += ["--seed", str(seed)]
    return shlex.join(args)


def weight_only_variant(scenario: Scenario) -> Scenario:
    """The same scenario divided by weight only: its scheduler config without ``usageDBConfig``."""
    config = {k: v for k, v in (scenario.config or {}).items() if k != "usageDBConfig"}
    return replace(scenario, config=config or None)


def config_label(scenario: Scenario) -> str:
    """What a scenario's scheduler configuration is called in a comparison: ``kai-default`` without one, else the
    stem of its ``config_file`` or ``scenario-config``."""
    if scenario.config is None:
        return "kai-default"
    source = scenario.config_source
    if source.startswith("config_file: "):
        return Path(source.removeprefix("config_file: ")).stem
    return "scenario-config"


def load_compare_config(path: str) -> dict[str, object]:
    """A scheduler configuration file (KAI format) for ``--compare-config``, checked as a scenario's would be;
    raises ConfigError naming the problem."""
    import yaml

    from kaisched.cluster.schedule import resolve_config

    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read it: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError("expected a scheduler configuration (a mapping with actions, tiers, ...)")
    resolve_config(loaded)
    return loaded


def with_config(scenario: Scenario, config: dict[str, object], path: str) -> Scenario:
    """The same scenario with its scheduler configuration replaced by ``config`` (read from ``path``)."""
    return replace(scenario, config=config, config_source=f"config_file: {path}")


def has_usage_db(scenario: Scenario) -> bool:
    return isinstance(scenario.config, dict) and scenario.config.get("usageDBConfig") is not None


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
@click.option("--compare-weight-only", "weight_only", is_flag=True,
              help="Run SCENARIO as written (time-based fair share: its config has usageDBConfig) and again without "
                   "its usageDBConfig (weight-only division), and compare them side by side, fairness over time "
                   "included.")
@click.option("--compare-config", "compare_config", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="CONFIG",
              help="Run SCENARIO as written and again with its scheduler configuration replaced by CONFIG (a "
                   "KAI-format scheduler configuration file, e.g. examples/config/fragmentation-aware.yaml), and "
                   "compare them "
                   "side by side: GPU allocation, waiting times, stranded GPUs by cause.")
@click.option("--kai-time-based", "kai_file", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="FILE",
              help="Run a KAI time-based fair-share simulator input (Cycles, WindowSize, HalfLifePeriod, KValue, "
                   "Nodes, Queues, Jobs): one cycle per simulated second; writes simulation_results.csv "
                   "(Time,QueueID,Allocation,FairShare) and the report.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Show the progress of the run on standard error (default: a bar when it is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary: only problems and the report's path.")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of each scenario and the files it names (bytes, or a quantity like 2Gi; "
                   f"default 1Gi, or ${MAX_INPUT_BYTES_ENV}).")
def simulate_command(scenario: str | None, outdir: str, seed: int | None, compare_paths: tuple[str, str] | None,
                     weight_only: bool, compare_config: str | None, kai_file: str | None, show_progress: bool | None,
                     quiet: bool, max_input_bytes: str | None) -> None:
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

    if kai_file is not None:
        if scenario or compare_paths:
            raise click.UsageError("give either --kai-time-based FILE or a SCENARIO (or --compare A.yaml B.yaml)")
        _kai_time_based(kai_file, outdir, weight_only, quiet)
        return
    if compare_config is not None and (not scenario or weight_only):
        raise click.UsageError("--compare-config CONFIG compares one SCENARIO with itself under CONFIG (not with "
                               "--compare or --compare-weight-only)")
    paths = list(compare_paths) if compare_paths else ([scenario] if scenario else [])
    if not paths:
        raise click.UsageError("give a SCENARIO file, or --compare A.yaml B.yaml")
    if compare_paths and scenario:
        raise click.UsageError("give either a SCENARIO or --compare A.yaml B.yaml, not both")
    if weight_only and not scenario:
        raise click.UsageError("--compare-weight-only compares one SCENARIO with itself divided by weight only")
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
    if weight_only and not problems and not has_usage_db(scenarios[0]):
        problems.append(f"{paths[0]}: config: no usageDBConfig: --compare-weight-only compares time-based fair "
                        "share (a scheduler config with usageDBConfig) against weight-only division")
    other: dict[str, object] | None = None
    if compare_config is not None:
        try:
            other = load_compare_config(compare_config)
        except ConfigError as exc:
            problems.append(f"{compare_config}: config: {exc}")
    if problems:
        _fail([*problems, f"nothing simulated: {len(problems)} problem{'s' if len(problems) > 1 else ''}"], 2)
    labels_given: list[str] = [Path(p).stem for p in paths] if compare_paths else []
    if other is not None and compare_config is not None:  # the same file twice: as written, and under CONFIG
        scenarios.append(with_config(scenarios[0], other, compare_config))
        paths.append(paths[0])
        labels_given = [config_label(scenarios[0]), Path(compare_config).stem]
        if labels_given[0] == labels_given[1]:
            labels_given = [f"{labels_given[0]} (scenario)", f"{labels_given[1]} (--compare-config)"]
    if weight_only:  # the same file twice: as written, and without its usageDBConfig
        scenarios.append(weight_only_variant(scenarios[0]))
        paths.append(paths[0])
        labels_given = [TIME_BASED, WEIGHT_ONLY]
    compared = bool(labels_given)
    mode = "off" if quiet or show_progress is False else "bar" if sys.stderr.isatty() else (
        "lines" if show_progress else "off")
    err = sys.stderr
    results: list[SimResult] = []
    labels: list[str] = []
    command = _command_line(paths[:1] if weight_only or other is not None else paths, bool(compare_paths), outdir,
                            seed, weight_only, compare_config=compare_config)
    for k, (path, sc) in enumerate(zip(paths, scenarios, strict=True)):
        label = labels_given[k] if compared else sc.name
        if not quiet:
            jobs = len(sc.arrivals) + len(sc.dropped)
            click.echo(f"{label}: " * compared + f"{sc.name}: {jobs:,} jobs, period {sc.period:g}s"
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
        if weight_only:
            result.inputs["variant"] = ("as written (time-based fair share)" if k == 0 else
                                        "usageDBConfig removed (weight-only division)")
        if other is not None:
            result.inputs["variant"] = ("as written" if k == 0 else
                                        f"scheduler configuration replaced by {compare_config}")
        results.append(result)
        labels.append(label)
    out = Path(outdir)
    try:
        if compared:
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


def _kai_time_based(path: str, outdir: str, weight_only: bool, quiet: bool) -> None:
    """``--kai-time-based FILE``: KAI's time-based fair-share simulator input (kaisched.sim.timebased)."""
    from kaisched.sim import report
    from kaisched.sim.timebased import TimeBasedError, csv_text, load_time_based, run_time_based, settling

    try:
        report.check_plotting()
        sim = load_time_based(path)
    except report.ReportDependencyError as exc:
        _fail([f"kaisched simulate: {exc}"], 2)
    except TimeBasedError as exc:
        _fail([str(exc), "nothing simulated: 1 problem"], 2)
    command = _command_line([path], False, outdir, None, weight_only, kai=True)
    variants = [True, False] if weight_only else [True]
    runs = []
    try:
        for time_based in variants:
            run = run_time_based(sim, time_based=time_based)
            run.result.inputs.update(command=command, scenario_path=path)
            runs.append(run)
    except (ConfigError, SimulationError, ScenarioError) as exc:
        _fail([f"{path}: {exc}"], 2)
    out = Path(outdir)
    labels = [TIME_BASED if r.time_based else WEIGHT_ONLY for r in runs]
    try:
        if weight_only:
            files = report.compare([r.result for r in runs], labels, out)
            where = files["compare.html"]
            csvs = []
            for label, r in zip(labels, runs, strict=True):
                (out / label / "simulation_results.csv").write_text(csv_text(r.rows), encoding="utf-8")
                csvs.append(out / label / "simulation_results.csv")
        else:
            files = report.write_outputs(runs[0].result, out)
            where = files["report.html"]
            (out / "simulation_results.csv").write_text(csv_text(runs[0].rows), encoding="utf-8")
            csvs = [out / "simulation_results.csv"]
    except OSError as exc:
        _fail([f"kaisched simulate: cannot write the report to {outdir}: {exc.strerror or exc}"], 2)
    if not quiet:
        click.echo(f"{sim.name}: {sim.cycles} cycles of 1s, {sim.gpus} GPUs, window {sim.window_size} cycles, "
                   f"half-life {f'{sim.half_life} cycles' if sim.half_life else 'off'}, kValue {sim.k_value:g}")
        table = [["queue", "division", "long-run share", "within 1 GPU after", "peak", "last-window swing",
                  "mean |error|"]]
        for label, r in zip(labels, runs, strict=True):
            for q in settling(r).values():
                table.append([q.queue, label, f"{q.long_run:g}", "never" if q.cycles is None else f"{q.cycles} cycles",
                              f"{q.peak:g}", f"{q.swing:g}", f"{q.error:.2f}"])
        widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
        for row in table:
            click.echo("  ".join(cell.ljust(w) if c < 2 else cell.rjust(w)
                                 for c, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        click.echo("(GPUs; long-run share: the weight-only division of every queue's whole demand; cycles from the "
                   "last arrival)")
    for c in csvs:
        click.echo(f"csv: {c}")
    click.echo(f"report: {where}")
