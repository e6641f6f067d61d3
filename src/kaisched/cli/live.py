"""Where ``kaisched explain``, ``get`` and ``schedule`` read the cluster from: manifest files (``-f``, ``-`` for
standard input) or a live cluster (``--kubeconfig``, read once, read-only: :mod:`kaisched.kube.live`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import click

from kaisched.framework.config import SchedulerConfig
from kaisched.k8s.loader import InputLimitError, InputLimits
from kaisched.k8s.objects import ParsedObjects

F = TypeVar("F", bound=Callable[..., object])


def source_options(f: F) -> F:
    """``-f/--filename`` (repeatable, ``-`` reads standard input), ``--kubeconfig`` and ``--context``."""
    f = click.option("--context", default=None,
                     help="kubeconfig context (default: the file's current context).")(f)
    f = click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, allow_dash=False), default=None,
                     help="Read this cluster once, read-only (nothing is written), instead of files.")(f)
    f = click.option("-f", "--filename", "paths", multiple=True, type=click.Path(exists=True, allow_dash=True),
                     help="Manifest file or directory (YAML/JSON); '-' reads standard input. Repeatable.")(f)
    return f


@dataclass(slots=True)
class Source:
    """What was read: the objects, whether from a live cluster (grouped already), and a name for messages."""

    parsed: ParsedObjects
    live: bool
    name: str


def read_source(command: str, paths: tuple[str, ...], kubeconfig: str | None, context: str | None,
                config: SchedulerConfig, now: datetime, limits: InputLimits, *,
                namespace: str | None = None) -> Source:
    """The objects of ``-f`` paths or of the ``--kubeconfig`` cluster. Exits with a sentence, never a traceback:
    2 for a command line or kubeconfig that cannot be used (both or neither source, '-' twice, a malformed
    kubeconfig, an unknown context, input over its limits), 1 when the cluster cannot be read (unreachable,
    refused, KAI's CRDs missing) or ``namespace`` does not exist there."""
    if paths and kubeconfig:
        raise click.UsageError("give either -f FILE ... or --kubeconfig PATH, not both")
    if not paths and not kubeconfig:
        raise click.UsageError("give -f FILE ... (manifests; '-' reads standard input) or --kubeconfig PATH "
                               "(a live cluster, read-only)")
    if context and not kubeconfig:
        raise click.UsageError("--context needs --kubeconfig")
    if kubeconfig:
        return _read_live(command, kubeconfig, context, config, now, limits, namespace)
    from kaisched.cli.schedule import _check_paths, stdin_hint
    from kaisched.k8s.loader import load_objects

    _check_paths(paths)
    stdin_hint(paths, command)
    try:
        parsed = load_objects(paths, limits=limits)
    except InputLimitError as exc:
        click.echo(f"kaisched {command}: {exc}", err=True)
        sys.exit(2)
    return Source(parsed, False, ", ".join(paths))


def _read_live(command: str, kubeconfig: str, context: str | None, config: SchedulerConfig, now: datetime,
               limits: InputLimits, namespace: str | None) -> Source:
    from kaisched.kube.client import KubeClient, KubeConfigError
    from kaisched.kube.live import LiveReadError, check_namespace, read_live

    try:
        api = KubeClient.from_kubeconfig(kubeconfig, context, limits=limits)
    except (KubeConfigError, OSError) as exc:
        click.echo(f"kaisched {command}: {exc}", err=True)
        sys.exit(2)
    server = api.base_url.rstrip("/")
    try:
        with api:
            if namespace is not None and not check_namespace(api, namespace, server):
                click.echo(f"kaisched {command}: namespace {namespace!r} not found on the API server {server}",
                           err=True)
                sys.exit(1)
            view = read_live(api, config, now, server=server)
    except LiveReadError as exc:
        click.echo(f"kaisched {command}: {exc}", err=True)
        sys.exit(1)
    return Source(view.parsed, True, server)
