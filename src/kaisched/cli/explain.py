"""``kaisched explain``: why a job is pending, from one read-only scheduling cycle over manifests."""

from __future__ import annotations

import json
import sys

import click

from kaisched.cli.schedule import _parse_now, input_limits, load_config
from kaisched.framework.config import ConfigError, SchedulerConfig


@click.command("explain")
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-f", "--filename", "paths", multiple=True, required=True,
              type=click.Path(exists=True, allow_dash=True), help="Manifest file or directory; repeatable.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def explain_command(name: str, namespace: str, paths: tuple[str, ...], config_path: str | None, now: str | None,
                    output: str) -> None:
    """Explain why pod or PodGroup NAME is pending (nothing is written). Exit status 1: no such job."""
    from kaisched.cluster.schedule import no_cyclic_gc, resolve_config
    from kaisched.explain import ExplainError, explain_job, render_text
    from kaisched.k8s.loader import InputLimitError, load_objects

    limits = input_limits(None)
    when = _parse_now(now)
    try:
        config = resolve_config(load_config(config_path, limits) if config_path else SchedulerConfig())
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    try:
        parsed = load_objects(paths, limits=limits)
    except InputLimitError as exc:
        click.echo(f"kaisched explain: {exc}", err=True)
        sys.exit(2)
    try:
        with no_cyclic_gc():
            exp = explain_job(parsed, name, namespace, config, when)
    except ExplainError as exc:
        click.echo(f"kaisched explain: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(exp.to_dict(), indent=2) if output == "json" else render_text(exp))
