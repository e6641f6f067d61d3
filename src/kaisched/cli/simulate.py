"""``kaisched simulate``: replay a scenario's workload through the scheduler on a simulated clock."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from kaisched.framework.config import ConfigError
from kaisched.sim import ScenarioError, SimResult, SimulationError, load_scenario, simulate
from kaisched.sim.model import Scenario


def _run(scenario: Scenario, console: Console, label: str) -> SimResult:
    with Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[t]}"),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(label, total=1.0, t="")

        def progress(done: float, where: str) -> None:
            bar.update(task, completed=done, t=where)

        return simulate(scenario, progress=progress)


@click.command("simulate")
@click.argument("scenario", type=click.Path(), required=False)
@click.option("-o", "--output", "outdir", type=click.Path(), default="sim-out", show_default=True,
              help="Folder for the report (report.html), the metrics (JSON, CSV).")
@click.option("--seed", type=int, default=None, help="Seed of the generated workload (overrides the scenario's).")
@click.option("--compare", "compare_paths", nargs=2, type=click.Path(), default=None, metavar="A.yaml B.yaml",
              help="Run two scenarios (the same workload under two configs) and compare them side by side.")
def simulate_command(scenario: str | None, outdir: str, seed: int | None,
                     compare_paths: tuple[str, str] | None) -> None:
    """Simulate SCENARIO (a scenario file: cluster, queues, scheduler config, workload) and write a report.

    Exit status: 0 on success, 1 when the scenario's objects have errors, 2 for an unusable scenario file or
    command line.
    """
    from kaisched.sim import report

    console = Console()
    paths = list(compare_paths) if compare_paths else ([scenario] if scenario else [])
    if not paths:
        raise click.UsageError("give a SCENARIO file, or --compare A.yaml B.yaml")
    if compare_paths and scenario:
        raise click.UsageError("give either a SCENARIO or --compare A.yaml B.yaml, not both")
    results: list[SimResult] = []
    labels: list[str] = []
    for path in paths:
        try:
            sc = load_scenario(path, seed=seed)
        except ScenarioError as exc:
            raise click.UsageError(f"scenario {path}: {exc}") from None
        console.print(f"[bold]{sc.name}[/]: {len(sc.arrivals):,} jobs, period {sc.period:g}s"
                      + (f", until {sc.until / 3600:g}h" if sc.until else ""))
        try:
            results.append(_run(sc, console, sc.name))
        except ConfigError as exc:
            raise click.UsageError(f"scenario {path}: scheduler config: {exc}") from None
        except SimulationError as exc:
            console.print(f"[red]scenario {path}: {exc}[/]")
            raise SystemExit(1) from None
        labels.append(Path(path).stem if compare_paths else sc.name)
    out = Path(outdir)
    if compare_paths:
        files = report.compare(results, labels, out)
        console.print(report.compare_text(results, labels), markup=False, highlight=False)
        console.print(f"report: [bold]{files['compare.html']}[/]")
    else:
        files = report.write_outputs(results[0], out)
        console.print(report.summary_text(results[0]), markup=False, highlight=False)
        console.print(f"report: [bold]{files['report.html']}[/]")
