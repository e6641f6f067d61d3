"""``kaisched replay``: one cycle over KAI's snapshot ZIP, as KAI's snapshot-tool runs it
(docs/migrating-from-kai.md)."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import click
import yaml

from kaisched.cli.schedule import _parse_now, input_limits
from kaisched.k8s.loader import MAX_INPUT_BYTES_ENV

EXAMPLES = """\
\b
Examples:
  # what kaisched decides on a KAI cluster's state (curl it from KAI's
  # scheduler: kubectl port-forward, then http://127.0.0.1:8081/get-snapshot)
  kaisched replay snapshot.zip
  # the same as JSON, at a fixed time
  kaisched replay snapshot.zip -o json --now 2026-01-01T00:00:00Z
"""


def _say(text: str) -> None:
    click.echo(f"kaisched replay: {text}", err=True)


@click.command("replay", epilog=EXAMPLES)
@click.argument("snapshot", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
@click.option("--now", "now", default=None,
              help="Time of the cycle (RFC3339); default: the capture time of a kaisched snapshot, else the current "
                   "time (as KAI's snapshot-tool).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--max-rows", type=int, default=50, show_default=True,
              help="Table output: at most this many rows per section (0 = all).")
@click.option("-q", "--quiet", is_flag=True, help="Do not list what the replay could not use (on standard error).")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of the ZIP and of its snapshot.json (bytes, or a quantity like 2Gi; "
                   f"default 1Gi, or ${MAX_INPUT_BYTES_ENV}); more is refused (exit status 2).")
def replay_command(snapshot: str, now: str | None, output: str, max_rows: int, quiet: bool,
                   max_input_bytes: str | None) -> None:
    """Replay SNAPSHOT, a KAI snapshot ZIP (KAI's GET /get-snapshot, v0.13 or v0.17, or kaisched's own), as KAI's
    snapshot-tool does: one cycle of the snapshot's own actions with its own plugin tiers and scheduler params
    over its objects, the node-pool partition filtering nodes, queues and PodGroups. Prints the decisions as
    `kaisched schedule` does. Actions, plugins, params and objects kaisched does not use are listed on standard
    error.

    Exit status: 0 on success, 1 when some snapshot objects had errors (they are listed, the rest is still
    scheduled), 2 when the snapshot cannot be read (not a ZIP, truncated, no snapshot.json, invalid JSON, a
    field of the wrong type: the message names it) or the command line is unusable, 3 on an internal error.
    """
    from kaisched.cluster.replay import load_replay, run_replay
    from kaisched.k8s.kai_snapshot import SnapshotError

    limits = input_limits(max_input_bytes)
    when: datetime | None = _parse_now(now) if now is not None else None
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
    result = run_replay(replay, when)
    data = result.to_dict()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)
    else:
        from kaisched.cli.render import InputFacts, render_table

        render_table(result, when, max_rows=max_rows, facts=InputFacts.from_objects(replay.objects))
    if result.errors:
        sys.exit(1)
