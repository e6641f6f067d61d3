"""``kaisched replay``: one cycle over KAI's snapshot ZIP, as KAI's snapshot-tool runs it
(docs/migrating-from-kai.md)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING

import click
import yaml

from kaisched.cli.schedule import _parse_now, input_limits, usage_input
from kaisched.k8s.loader import MAX_INPUT_BYTES_ENV, InputLimits

if TYPE_CHECKING:
    from kaisched.cluster.replay import Replay
    from kaisched.model.usage import UsageTable

EXAMPLES = """\
\b
Examples:
  # what kaisched decides on a KAI cluster's state (KAI serves it: kubectl
  # port-forward, then curl http://127.0.0.1:8081/get-snapshot)
  kaisched replay examples/kai/snapshot.zip
  # the same as JSON, at a fixed time
  kaisched replay examples/kai/snapshot.zip -o json --now 2026-01-02T00:00:00Z
  # why is pod train-0 of namespace team-a waiting on that state?
  kaisched replay examples/kai/snapshot.zip --explain train-0 -n team-a
  # compare with KAI's own decisions (its snapshot-tool's log of the file)
  kaisched replay examples/kai/snapshot.zip \\
      --diff examples/kai/snapshot-tool.log --now 2026-01-02T00:00:00Z
"""


def _say(text: str) -> None:
    click.echo(f"kaisched replay: {text}", err=True)


@click.command("replay", epilog=EXAMPLES)
@click.argument("snapshot", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
@click.option("--now", "now", default=None,
              help="Time of the cycle (RFC3339); default: the capture time of a kaisched snapshot, else the current "
                   "time (as KAI's snapshot-tool).")
@click.option("--usage", "usage_path", default=None, metavar="FILE|URL",
              help="Each queue's historical usage for time-based fair share (the snapshot has none): a file "
                   "(docs/fairness.md) or a Prometheus URL, queried with the snapshot's usageDBConfig.usageParams.")
@click.option("--explain", "explain_name", default=None, metavar="NAME",
              help="Instead of the decisions: explain why pod or PodGroup NAME (in --namespace) is pending.")
@click.option("-n", "--namespace", default="default", show_default=True, help="The namespace of --explain NAME.")
@click.option("--diff", "diff_log", type=click.Path(exists=True, dir_okay=False), default=None, metavar="LOG",
              help="Instead of the decisions: compare them with those in KAI's scheduler log LOG of the same "
                   "snapshot (snapshot-tool --verbosity 4 or more: Allocating/Pipelining/Evicting task lines; "
                   "colour codes are stripped).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="table: tables (--explain, --diff: text).")
@click.option("--max-rows", type=int, default=50, show_default=True,
              help="Table output: at most this many rows per section (0 = all).")
@click.option("-q", "--quiet", is_flag=True, help="Do not list what the replay could not use (on standard error).")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of the ZIP and of its snapshot.json (bytes, or a quantity like 2Gi; "
                   f"default 1Gi, or ${MAX_INPUT_BYTES_ENV}); more is refused (exit status 2).")
def replay_command(snapshot: str, now: str | None, usage_path: str | None, explain_name: str | None, namespace: str,
                   diff_log: str | None, output: str, max_rows: int, quiet: bool, max_input_bytes: str | None) -> None:
    """Replay SNAPSHOT, a KAI snapshot ZIP (KAI's GET /get-snapshot, v0.13 or v0.17, or kaisched's own), as KAI's
    snapshot-tool does: one cycle of the snapshot's own actions with its own plugin tiers and scheduler params
    over its objects, the node-pool partition filtering nodes, queues and PodGroups. Prints the decisions as
    `kaisched schedule` does. Actions, plugins, params and objects kaisched does not use are listed on standard
    error.

    Exit status: 0 on success, 1 when some snapshot objects had errors (they are listed, the rest is still
    scheduled), when --explain names no pod or PodGroup, or when --diff finds a difference; 2 when the snapshot,
    the log or the usage cannot be read (not a ZIP, truncated, no snapshot.json, invalid JSON, a field of the wrong
    type: the message names it) or the command line is unusable; 3 on an internal error.
    """
    from kaisched.cluster.replay import load_replay, run_replay
    from kaisched.k8s.kai_snapshot import SnapshotError

    if explain_name is not None and diff_log is not None:
        raise click.UsageError("--explain and --diff: give one of them")
    limits = input_limits(max_input_bytes)
    when: datetime | None = _parse_now(now) if now is not None else None
    log_text = _read_log(diff_log, limits) if diff_log is not None else None
    try:
        replay = load_replay(snapshot, limits.max_bytes)
    except SnapshotError as exc:
        _say(str(exc))
        sys.exit(2)
    snap = replay.snapshot
    if not quiet:
        counts = ", ".join(f"{n} {k}" for k, n in snap.counts().items()) or "no objects"
        server = f", Kubernetes {snap.server_version}" if snap.server_version else ""
        _say(f"{snapshot}: KAI {snap.kai_version} shape{server}; {counts}; partition: {snap.partition()}")
        _say(f"actions: {', '.join(replay.config.actions)}")
        for warning in replay.warnings:
            _say(warning)
    when = when or replay.default_now()
    usage = usage_input(usage_path, replay.config, when, "replay") if usage_path is not None else None
    if explain_name is not None:
        _explain(replay, explain_name, namespace, when, output, usage)
        return
    result = run_replay(replay, when, usage)
    if log_text is not None:
        from kaisched.cluster.kai_log import compare, cycle_decisions, read_kai_log

        kai = read_kai_log(log_text)
        if not kai.decisions:
            _say(f"{diff_log}: no 'Allocating task', 'Pipelining task' or 'Evicting task' line in {kai.lines} lines "
                 "(KAI logs them at --verbosity 4 and more)")
        diff = compare(kai.decisions, cycle_decisions(result))
        if output == "table":
            click.echo("\n".join(diff.lines()))
        else:
            _dump(diff.to_dict(), output)
        sys.exit(0 if diff.identical else 1)
    if output == "table":
        from kaisched.cli.render import InputFacts, render_table

        render_table(result, when, max_rows=max_rows, facts=InputFacts.from_objects(replay.objects))
    else:
        _dump(result.to_dict(), output)
    if result.errors:
        sys.exit(1)


def _dump(data: object, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)


def _read_log(path: str, limits: InputLimits) -> str:
    from kaisched.k8s.loader import InputReadError, read_text_reasoned

    try:
        return read_text_reasoned(path, limits, source=f"--diff {path}")
    except InputReadError as exc:
        _say(str(exc))
        sys.exit(2)


def _explain(replay: Replay, name: str, namespace: str, when: datetime, output: str,
             usage: UsageTable | None) -> None:
    """Explain pod or PodGroup ``name`` on the snapshot (the objects as they are: no pod-grouper, as KAI's tool)."""
    from kaisched.cluster.schedule import no_cyclic_gc
    from kaisched.explain import ExplainError, explain_key, find_job, render_text, run_cycle
    from kaisched.model.snapshot import build_snapshot

    options = replay.options()
    try:
        with no_cyclic_gc():
            jobs = dict(build_snapshot(replay.objects, when, options).jobs)
            exp = explain_key(find_job(jobs, name, namespace), jobs,
                              run_cycle(replay.objects, replay.config, when, options, usage))
    except ExplainError as exc:
        _say(str(exc))
        sys.exit(1)
    if output == "table":
        click.echo(render_text(exp))
    else:
        _dump(exp.to_dict(), output)
