"""``kaisched get queues|jobs``: the queue tree and the jobs after one read-only cycle over manifests or a live
cluster."""

from __future__ import annotations

import json
from typing import Any

import click
import yaml

from kaisched.cli.live import read_source, source_options
from kaisched.cli.schedule import _parse_now, input_limits, load_config
from kaisched.framework.config import ConfigError, SchedulerConfig

EXAMPLES = """\
\b
Examples:
  # the queue tree: deserved, fair share, allocated, requested GPUs, pending jobs
  kaisched get queues -f examples/explain.yaml --now 2026-01-01T00:00:00Z
  # the jobs of a live cluster (read once, nothing written), with the reasons' detail
  kaisched get jobs --kubeconfig ~/.kube/config -o wide
"""


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _g(x: float) -> str:
    if x < 0:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@click.command("get", epilog=EXAMPLES)
@click.argument("kind", type=click.Choice(["queues", "jobs"]))
@source_options
@click.option("-n", "--namespace", default=None, help="Jobs of this namespace only (default: every namespace).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scheduler configuration in KAI's format (actions, tiers, params).")
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table",
              show_default=True)
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help="Read at most this much input over all -f paths (bytes, or a quantity like 2Gi).")
def get_command(kind: str, paths: tuple[str, ...], kubeconfig: str | None, context: str | None,
                namespace: str | None, config_path: str | None, now: str | None, output: str,
                max_input_bytes: str | None) -> None:
    """Show the queue tree (deserved, fair share, allocated, requested GPUs, pending jobs; -o wide adds the limit,
    priority and parent) or the jobs like squeue (queue, priority, preemptible, state, reason code, age, GPUs; -o
    wide adds the pods and KAI's reason) after one cycle over -f files or the --kubeconfig cluster; nothing is
    written. Tables fit the terminal (or $COLUMNS).

    Exit status: 0 shown; 1 a cluster that cannot be read or an unknown namespace; 2 an unusable command line,
    configuration or kubeconfig."""
    from kaisched.cli.render import output_console, plain_table
    from kaisched.cluster.schedule import no_cyclic_gc, resolve_config
    from kaisched.explain import job_rows, queue_rows, run_view

    limits = input_limits(max_input_bytes)
    when = _parse_now(now)
    try:
        config = resolve_config(load_config(config_path, limits) if config_path else SchedulerConfig())
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    source = read_source("get", paths, kubeconfig, context, config, when, limits,
                         namespace=namespace if kubeconfig and kind == "jobs" else None)
    with no_cyclic_gc():
        jobs, result = run_view(source.parsed, config, when, live=source.live)
    rows: list[dict[str, Any]]
    if kind == "queues":
        rows = queue_rows(jobs, result)
    else:
        rows = [r for r in job_rows(jobs, result, when)
                if namespace is None or r["name"].partition("/")[0] == namespace]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if output == "yaml":
        click.echo(yaml.dump(rows, Dumper=yaml.CSafeDumper, sort_keys=False), nl=False)
        return
    wide = output == "wide"
    if kind == "queues":
        columns: list[tuple[str, Any]] = [("QUEUE", "key"), ("DESERVED", "num"), ("FAIR SHARE", "num"),
                                          ("ALLOCATED", "num"), ("REQUESTED", "num"), ("PENDING", "num")]
        if wide:
            columns += [("LIMIT", "num"), ("PRIORITY", "num"), ("PARENT", "key")]
        cells = []
        for r in rows:
            row = ["  " * r["depth"] + r["name"], _g(r["deserved"]), _g(r["fairShare"]), _g(r["allocated"]),
                   _g(r["requested"]), str(r["pendingJobs"])]
            if wide:
                row += [_g(r["limit"]), str(r["priority"]), r["parent"] or ""]
            cells.append(row)
    else:
        columns = [("JOB", "key"), ("QUEUE", "key"), ("PRIO", "num"), ("PREEMPT", "key"), ("STATE", "key"),
                   ("REASON", "key"), ("AGE", "num"), ("GPUS", "num")]
        if wide:
            columns += [("PODS", "num"), ("KAI REASON", "key")]  # (a code: cut with an ellipsis, never folded)
        cells = []
        for r in rows:
            row = [r["name"], r["queue"], str(r["priority"]), "yes" if r["preemptible"] else "no", r["state"],
                   r["code"], _age(r["age"]), _g(r["gpus"])]
            if wide:
                row += [str(r["pods"]), r["reason"]]
            cells.append(row)
    if not cells:
        what = "queues" if kind == "queues" else "jobs" + (f" in namespace {namespace!r}" if namespace else "")
        click.echo(f"No {what} found.", err=True)
        return
    output_console().print(plain_table(columns, cells))
