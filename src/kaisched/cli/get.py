"""``kaisched get queues|jobs``: the queue tree and the jobs after one read-only cycle over manifests."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import yaml

from kaisched.cli.schedule import _parse_now, input_limits


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _g(x: float) -> str:
    if x < 0:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@click.command("get")
@click.argument("kind", type=click.Choice(["queues", "jobs"]))
@click.option("-f", "--filename", "paths", multiple=True, required=True,
              type=click.Path(exists=True, allow_dash=True), help="Manifest file or directory; repeatable.")
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table",
              show_default=True)
def get_command(kind: str, paths: tuple[str, ...], now: str | None, output: str) -> None:
    """Show the queue tree (deserved, fair share, allocated, requested GPUs, pending jobs) or the jobs
    (queue, priority, preemptible, state, reason, age, GPUs) after one cycle; nothing is written."""
    from rich.table import Table

    from kaisched.cli.render import output_console
    from kaisched.cluster.schedule import no_cyclic_gc, resolve_config
    from kaisched.explain import job_rows, queue_rows, run_view
    from kaisched.framework.config import SchedulerConfig
    from kaisched.k8s.loader import InputLimitError, load_objects

    limits = input_limits(None)
    when = _parse_now(now)
    try:
        parsed = load_objects(paths, limits=limits)
    except InputLimitError as exc:
        click.echo(f"kaisched get: {exc}", err=True)
        sys.exit(2)
    with no_cyclic_gc():
        jobs, result = run_view(parsed, resolve_config(SchedulerConfig()), when)
    rows: list[dict[str, Any]] = queue_rows(jobs, result) if kind == "queues" else job_rows(jobs, result, when)
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if output == "yaml":
        click.echo(yaml.dump(rows, Dumper=yaml.CSafeDumper, sort_keys=False), nl=False)
        return
    table = Table(box=None, pad_edge=False)
    if kind == "queues":
        cols = ["QUEUE", "DESERVED", "FAIR SHARE", "ALLOCATED", "REQUESTED", "PENDING"]
        if output == "wide":
            cols.append("LIMIT")
        for c in cols:
            table.add_column(c, no_wrap=c == "QUEUE")
        for r in rows:
            cells = ["  " * r["depth"] + r["name"], _g(r["deserved"]), _g(r["fairShare"]), _g(r["allocated"]),
                     _g(r["requested"]), str(r["pendingJobs"])]
            if output == "wide":
                cells.append(_g(r["limit"]))
            table.add_row(*cells)
    else:
        cols = ["JOB", "QUEUE", "PRIO", "PREEMPT", "STATE", "AGE", "GPUS"]
        if output == "wide":
            cols.append("REASON")
        for c in cols:
            table.add_column(c, overflow="fold")
        for r in rows:
            cells = [r["name"], r["queue"], str(r["priority"]), "yes" if r["preemptible"] else "no", r["state"],
                     _age(r["age"]), _g(r["gpus"])]
            if output == "wide":
                cells.append(r["reason"])
            table.add_row(*cells)
    output_console().print(table)
