"""``kaisched schedule``: one scheduling cycle over manifests."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click
import yaml

from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.k8s.loader import (
    MAX_INPUT_BYTES_ENV,
    STDIN,
    InputLimits,
    parse_byte_size,
)
from kaisched.model.usage import UsageTable

EXAMPLES = """\
\b
Examples:
  # one cycle of the reclaim example, at a fixed time
  kaisched schedule -f examples/reclaim.yaml --now 2026-01-01T02:00:00Z
  # manifests on standard input, decisions as JSON (exit status 1: the
  # example holds an input error on purpose)
  kaisched schedule -f - -o json < examples/cluster.yaml
  # a directory and standard input, with a scheduler configuration
  kaisched schedule -f examples/small-cluster/ -f - \\
      --config examples/config/spread.yaml < examples/workloads/job.yaml
  # one cycle of time-based fair share with the queues' usage from a file
  kaisched schedule -f examples/time-based-fairness.yaml \\
      --config examples/config/time-based-fairness.yaml \\
      --usage examples/usage.yaml
  # every row, drawn 100 columns wide
  COLUMNS=100 kaisched schedule -f examples/gpu-sharing.yaml --max-rows 0
"""


def _parse_now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"expected an RFC3339 time like 2026-01-01T00:00:00Z, got {value!r}",
                                 param_hint="'--now'") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def input_limits(max_input_bytes: str | None) -> InputLimits:
    """The input limits of a command: ``--max-input-bytes`` over ``KAISCHED_MAX_INPUT_BYTES`` over the
    defaults (a bad value is a usage error)."""
    try:
        size = None if max_input_bytes is None else parse_byte_size(max_input_bytes, "--max-input-bytes")
        return InputLimits.from_env(max_bytes=size)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def load_config(path: str, limits: InputLimits) -> SchedulerConfig:
    """A scheduler configuration file, read within the input limits (a FIFO or a device too):
    :meth:`SchedulerConfig.load`."""
    return SchedulerConfig.load(path, limits)


def usage_input(value: str | None, config: SchedulerConfig, now: datetime, command: str) -> UsageTable | None:
    """The queues' historical usage of ``--usage`` (time-based fair share): a file (:mod:`kaisched.usage.file`) or a
    Prometheus URL queried as Kubernetes mode queries it, with the configuration's ``usageDBConfig.usageParams``
    (KAI's defaults without one). Without ``--usage`` a configuration with ``usageDBConfig`` divides by weight only,
    and says so. A file that does not hold a table is a usage error; a Prometheus that cannot answer, exit 1."""
    if value is None:
        if config.usage_db is not None:
            click.echo(f"kaisched {command}: the configuration has usageDBConfig, and no --usage was given: the "
                       "division is by weight only (pass --usage FILE or --usage http://PROMETHEUS:9090)", err=True)
        return None
    if value.startswith(("http://", "https://")):
        from kaisched.framework.usage_config import UsageParams
        from kaisched.usage.prometheus import UsageFetchError, fetch_usage

        params = config.usage_db.params if config.usage_db is not None else UsageParams()
        try:
            return fetch_usage(value, params, now)
        except UsageFetchError as exc:
            click.echo(f"kaisched {command}: --usage: {exc}", err=True)
            sys.exit(1)
    from kaisched.usage.file import UsageFileError, load_usage

    try:
        return load_usage(value)
    except UsageFileError as exc:
        raise click.BadParameter(str(exc), param_hint="'--usage'") from None


def stdin_hint(paths: tuple[str, ...] | list[str], command: str) -> None:
    """Say so when standard input is a terminal that is about to be read (rather than wait silently)."""
    if STDIN in paths and sys.stdin is not None and sys.stdin.isatty():
        click.echo(f"kaisched {command}: reading manifests from standard input (the terminal); end with Ctrl-D",
                   err=True)


def _check_paths(paths: tuple[str, ...]) -> None:
    """Standard input can be read once."""
    if paths.count(STDIN) > 1:
        raise click.BadParameter("'-' (standard input) can be given only once", param_hint="'-f' / '--filename'")


@click.command("schedule", epilog=EXAMPLES)
@click.option("-f", "--filename", "paths", multiple=True,
              type=click.Path(exists=True, allow_dash=True),
              help="Manifest file or directory (YAML/JSON, multi-document, kind: List); '-' reads standard "
                   "input. Repeatable.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Instead of files: a dry run of one cycle on this cluster (read once; nothing is written).")
@click.option("--context", default=None, help="kubeconfig context (default: the file's current context).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scheduler configuration in KAI's format (actions, tiers, params).")
@click.option("--now", "now", default=None, help="Time of the cycle (RFC3339); default: the current time.")
@click.option("--usage", "usage_path", default=None, metavar="FILE|URL",
              help="Each queue's historical usage for time-based fair share: a file (docs/fairness.md) or a "
                   "Prometheus URL, queried with the configuration's usageDBConfig.usageParams.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--max-rows", type=int, default=50, show_default=True,
              help="Table output: at most this many rows per section (decisions, evictions, pending PodGroups, "
                   "GPU nodes; 0 = all).")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much input over all -f paths (bytes, or a quantity like 2Gi; default 1Gi, "
                   f"or ${MAX_INPUT_BYTES_ENV}); more is refused (exit status 2).")
def schedule_command(paths: tuple[str, ...], kubeconfig: str | None, context: str | None, config_path: str | None,
                     now: str | None, usage_path: str | None, output: str, max_rows: int,
                     max_input_bytes: str | None) -> None:
    """Run one scheduling cycle on the cluster described by the manifests (or, with --kubeconfig, on the live
    cluster: a dry run, nothing is written) and print the decisions.

    Tables fit the terminal, or $COLUMNS when set (120 columns when the output is not a terminal).

    Exit status: 0 on success, 1 when some input objects had errors (they are listed, the rest is still
    scheduled) or the live cluster cannot be read, 2 when the command line (a missing -f path, say), the
    kubeconfig or the scheduler configuration cannot be used, or the input is over its limits
    (--max-input-bytes; a FIFO nobody writes to for $KAISCHED_INPUT_TIMEOUT seconds, 10 by default), 3 on an
    internal error.
    """
    limits = input_limits(max_input_bytes)
    when = _parse_now(now)
    try:
        config = load_config(config_path, limits) if config_path else SchedulerConfig()
        config = resolve_config(config)
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    from kaisched.cli.live import read_source

    if usage_path == STDIN and STDIN in paths:
        raise click.BadParameter("'-' (standard input) can be read once: give the manifests or the usage as a file",
                                 param_hint="'--usage'")
    usage = usage_input(usage_path, config, when, "schedule")
    source = read_source("schedule", paths, kubeconfig, context, config, when, limits)  # "-": sys.stdin
    with no_cyclic_gc():
        if source.live:  # grouped as Kubernetes mode groups them; scheduled as it schedules them
            from kaisched.explain import run_cycle
            from kaisched.model.snapshot import SnapshotOptions

            prepared = source.parsed
            result = run_cycle(prepared, config, when, SnapshotOptions(
                full_hierarchy_fairness=config.params.full_hierarchy_fairness,
                scheduler_name=config.params.scheduler_name, make_template_claims=False), usage)
            click.echo(f"kaisched schedule: a dry run of one cycle on {source.name}: nothing is written", err=True)
        else:
            prepared = prepare(source.parsed, config, when)
            result = run_prepared_cycle(prepared, config, when, usage=usage)
    data = result.to_dict()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)
    else:
        from kaisched.cli.render import InputFacts, render_table

        render_table(result, when, max_rows=max_rows, facts=InputFacts.from_objects(prepared))
    if result.errors:
        sys.exit(1)
