"""``kaisched explain``: why a job is pending, from one read-only scheduling cycle over manifests or a live
cluster."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import yaml

from kaisched.cli.live import read_source, source_options
from kaisched.cli.schedule import _parse_now, input_limits, load_config
from kaisched.framework.config import ConfigError, SchedulerConfig

EXAMPLES = """\
\b
Examples:
  # why is pod (or PodGroup) big pending? one read-only cycle over the manifests
  kaisched explain big -f examples/explain.yaml --now 2026-01-01T00:00:00Z
  # the same on a live cluster (read once, nothing written), as JSON
  kaisched explain train-0 -n team-a --kubeconfig ~/.kube/config -o json
  # what the running scheduler said in its latest cycle (kaisched run's metrics port), no cycle of its own
  kaisched explain train-0 -n team-a --scheduler http://127.0.0.1:8080
"""


@click.command("explain", epilog=EXAMPLES)
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@source_options
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scheduler configuration in KAI's format (actions, tiers, params).")
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help="Read at most this much input over all -f paths (bytes, or a quantity like 2Gi).")
@click.option("--scheduler", "scheduler_url", default=None, metavar="URL",
              help="Ask the running scheduler at URL (kaisched run's metrics address, or kaisched dashboard's) for "
                   "its latest cycle's explanation instead of running a cycle.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.0),
              help="With --scheduler: seconds to wait for a scheduler that has no view of a recent cycle yet.")
def explain_command(name: str, namespace: str, paths: tuple[str, ...], kubeconfig: str | None, context: str | None,
                    config_path: str | None, now: str | None, output: str, max_input_bytes: str | None,
                    scheduler_url: str | None, timeout: float) -> None:
    """Explain why pod or PodGroup NAME is pending: its queue's shares, its place in the queue, the reason in
    tiers with the per-node breakdown, and what would let it run. Runs the scheduler's own cycle over -f files or
    the --kubeconfig cluster; nothing is written. With --scheduler, the running scheduler's own explanation from
    its latest cycle, without a cycle here.

    Exit status: 0 explained; 1 no such pod or PodGroup, an unknown namespace, or a cluster or scheduler that
    cannot be read; 2 an unusable command line, configuration or kubeconfig."""
    from kaisched.cluster.schedule import no_cyclic_gc, resolve_config
    from kaisched.explain import ExplainError, explain_job, render_text

    if scheduler_url is not None:
        if paths or kubeconfig or config_path or now or max_input_bytes:
            raise click.UsageError("--scheduler asks the running scheduler: give no -f, --kubeconfig, --config, "
                                   "--now or --max-input-bytes with it")
        _explain_from_scheduler(scheduler_url, name, namespace, output, timeout)
        return

    limits = input_limits(max_input_bytes)
    when = _parse_now(now)
    try:
        config = resolve_config(load_config(config_path, limits) if config_path else SchedulerConfig())
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    source = read_source("explain", paths, kubeconfig, context, config, when, limits,
                         namespace=namespace if kubeconfig else None)
    try:
        with no_cyclic_gc():
            exp = explain_job(source.parsed, name, namespace, config, when, live=source.live)
    except ExplainError as exc:
        where = f" (on {source.name})" if source.live else ""
        click.echo(f"kaisched explain: {exc}{where}", err=True)
        sys.exit(1)
    _print(exp.to_dict(), render_text(exp), output)


def _print(data: dict[str, Any], text: str, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)
    else:
        click.echo(text)


def _explain_from_scheduler(url: str, name: str, namespace: str, output: str, timeout: float) -> None:
    from kaisched.explain import ExplainError, render_text
    from kaisched.explain.remote import SchedulerUnreachable, explain_from_scheduler

    try:
        remote = explain_from_scheduler(url, namespace, name, timeout=timeout)
    except SchedulerUnreachable as exc:
        click.echo(f"kaisched explain: {exc}", err=True)
        sys.exit(1)
    except ExplainError as exc:
        click.echo(f"kaisched explain: {exc} (on the scheduler at {url})", err=True)
        sys.exit(1)
    exp = remote.explanation
    data = {**exp.to_dict(), "cycle": remote.cycle}
    text = render_text(exp) + (f"\nCycle:     {remote.cycle} (the scheduler's latest viewed cycle)" if remote.cycle
                               else "")
    _print(data, text, output)
