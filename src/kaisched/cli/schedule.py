"""``kaisched schedule``: one scheduling cycle over manifests."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click
import yaml

from kaisched.cluster.schedule import resolve_config, run_cycle
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.k8s.loader import load_objects


def _parse_now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"expected an RFC3339 time like 2026-01-01T00:00:00Z, got {value!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


@click.command("schedule")
@click.option("-f", "--filename", "paths", multiple=True, required=True, type=click.Path(),
              help="Manifest file or directory (YAML/JSON, multi-document, kind: List). Repeatable.")
@click.option("--config", "config_path", type=click.Path(), default=None,
              help="Scheduler configuration in KAI's format (actions, tiers, params).")
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--max-rows", type=int, default=50, show_default=True,
              help="Table output: at most this many rows per section (decisions, pending PodGroups, GPU "
                   "nodes; 0 = all).")
def schedule_command(paths: tuple[str, ...], config_path: str | None, now: str | None, output: str,
                     max_rows: int) -> None:
    """Run one scheduling cycle on the cluster described by the manifests and print the decisions.

    Exit status: 0 on success, 1 when some input objects had errors (the rest is still scheduled),
    2 when the command line or the scheduler configuration cannot be used.
    """
    when = _parse_now(now)
    try:
        config = SchedulerConfig.load(config_path) if config_path else SchedulerConfig()
        config = resolve_config(config)
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    parsed = load_objects(paths)
    result = run_cycle(parsed, config, when)
    data = result.to_dict()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)
    else:
        from kaisched.cli.render import render_table

        render_table(result, when, max_rows=max_rows)
    if result.errors:
        sys.exit(1)
