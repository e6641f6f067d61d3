"""The ``kaisched`` command."""

from __future__ import annotations

import os
import sys

import click

from kaisched.cli.dashboard import dashboard_command
from kaisched.cli.explain import explain_command
from kaisched.cli.from_kai import from_kai_command
from kaisched.cli.get import get_command
from kaisched.cli.replay import replay_command
from kaisched.cli.run import run_command
from kaisched.cli.schedule import schedule_command
from kaisched.cli.simulate import simulate_command

EXAMPLES = """\
\b
Examples:
  # one scheduling cycle over manifests: what is bound, evicted, and why
  kaisched schedule -f examples/reclaim.yaml --now 2026-01-01T02:00:00Z
  # manifests on standard input, decisions as JSON
  kaisched schedule -f - -o json < examples/cluster.yaml
  # simulate a workload on a cluster: report and plots in sim-out/
  kaisched simulate examples/simulation/three-teams.yaml -o sim-out
  # schedule a real Kubernetes cluster
  kaisched run --kubeconfig ~/.kube/config
  # a command's options and more examples
  kaisched schedule --help
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXAMPLES)
@click.version_option(package_name="kaisched")
def cli() -> None:
    """kaisched: a KAI-compatible GPU cluster scheduler."""


cli.add_command(dashboard_command)
cli.add_command(explain_command)
cli.add_command(from_kai_command)
cli.add_command(get_command)
cli.add_command(replay_command)
cli.add_command(run_command)
cli.add_command(schedule_command)
cli.add_command(simulate_command)


def main() -> None:
    """Entry point: bad input is reported by the commands; an internal error never shows a traceback
    unless ``KAISCHED_DEBUG=1``."""
    try:
        cli(standalone_mode=True)
    except Exception as exc:  # only internal errors get here: click handles usage errors itself
        if os.environ.get("KAISCHED_DEBUG"):
            raise
        click.echo(f"kaisched: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("This is a bug in kaisched; run again with KAISCHED_DEBUG=1 to see the traceback.", err=True)
        sys.exit(3)
