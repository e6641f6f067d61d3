"""``kaisched run``: schedule a real Kubernetes cluster (Kubernetes mode)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

import click

from kaisched.cli.dashboard import attach as attach_dashboard
from kaisched.cli.schedule import input_limits
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.k8s.loader import MAX_INPUT_BYTES_ENV
from kaisched.k8s.quantity import parse_duration

if TYPE_CHECKING:
    from kaisched.kube.client import KubeClient


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        seconds = parse_duration(value).total_seconds()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds <= 0:
        raise click.BadParameter(f"must be positive, got {value!r}")
    return seconds


EXAMPLES = """\
\b
Examples:
  # schedule the cluster of a kubeconfig file (its current context)
  kaisched run --kubeconfig ~/.kube/config
  # KAI's scheduler configuration, a cycle every 2 s, metrics on :9090
  kaisched run --kubeconfig ~/.kube/config \\
      --config examples/config/binpack.yaml --schedule-period 2 \\
      --listen-address :9090
  # in the cluster (the service account), one of several replicas
  kaisched run --leader-elect --lease-namespace kai-scheduler
"""


def _listen(value: str) -> tuple[str, int | None]:
    """``host:port``, ``:port`` or ``off``."""
    if value in ("off", "none", ""):
        return "0.0.0.0", None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, :PORT or off, got {value!r}", param_hint="--listen-address")
    return host or "0.0.0.0", int(port)


def _shard_config(api: KubeClient, shard: str, fallback: SchedulerConfig) -> SchedulerConfig:
    """The configuration KAI's operator renders from SchedulingShard ``shard`` (docs/migrating-from-kai.md), or
    ``fallback`` when the cluster has no such shard or may not be asked (403, logged). A server that cannot be
    reached is asked again with a backoff, as the informers would (SIGTERM/SIGINT meanwhile: exit 0), never a
    silent fallback; a shard kaisched cannot use is a usage error; another refusal, exit status 1."""
    from kaisched.cli.from_kai import _implemented_only
    from kaisched.kube.api import ApiError
    from kaisched.kube.kai_objects import shard_from_cluster
    from kaisched.kube.logs import get_logger

    log = get_logger("kaisched.cli.run")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    delay = 0.2
    try:
        while True:
            try:
                rendered = shard_from_cluster(api, shard)
                break
            except ApiError as exc:
                if exc.status == 403:
                    log.warning("KAI's SchedulingShard may not be read: KAI's default configuration", shard=shard,
                                error=str(exc))
                    return fallback
                if not exc.retryable:
                    api.close()
                    click.echo(f"kaisched run: reading KAI's SchedulingShard {shard!r}: {exc} (give --config, or "
                               "--shard '' not to look)", err=True)
                    sys.exit(1)
                log.warning("KAI's SchedulingShard not read yet: retrying", shard=shard, error=str(exc),
                            retry_s=delay)
                if stop.wait(delay):
                    api.close()
                    sys.exit(0)
                delay = min(delay * 2, 10.0)
            except ConfigError as exc:
                api.close()
                raise click.UsageError(str(exc)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if rendered is None:
        return fallback
    notes = list(rendered.notes)
    _implemented_only(rendered.mapping, notes)
    for note in notes:
        log.warning(note)
    try:
        config = resolve_config(rendered.config())
    except ConfigError as exc:
        api.close()
        raise click.UsageError(f"SchedulingShard {shard}: {exc}") from None
    log.info("configuration from KAI's SchedulingShard", shard=shard, actions=", ".join(config.actions))
    return config


@click.command("run", epilog=EXAMPLES)
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="kubeconfig file (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config).")
@click.option("--context", default=None, help="kubeconfig context (default: the file's current context).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scheduler configuration in KAI's format (actions, tiers, params).")
@click.option("--schedule-period", type=float, default=1.0, show_default=True,
              help="Seconds between scheduling cycles (KAI's schedule-period).")
@click.option("--group-period", type=float, default=0.2, show_default=True,
              help="Between cycles, create the PodGroups of pods that arrived this often (seconds), as KAI's "
                   "pod-grouper does as pods arrive; 0: only the cycles group pods.")
@click.option("--leader-elect/--no-leader-elect", default=False, show_default=True,
              help="Only the holder of a coordination.k8s.io Lease schedules (run several replicas).")
@click.option("--lease-namespace", default=lambda: os.environ.get("POD_NAMESPACE", "kai-scheduler"),
              show_default="$POD_NAMESPACE or kai-scheduler", help="Namespace of the leader-election Lease.")
@click.option("--lease-name", default="kai-scheduler", show_default=True, help="Name of the Lease.")
@click.option("--leader-elect-lease-duration", "lease_duration", default="15s", show_default=True,
              callback=_duration, help="How long a Lease holds without renewal (Go duration).")
@click.option("--leader-elect-renew-deadline", "renew_deadline", default="10s", show_default=True,
              callback=_duration, help="How long the leader keeps trying to renew before it stops leading.")
@click.option("--leader-elect-retry-period", "retry_period", default="2s", show_default=True,
              callback=_duration, help="Time between tries to acquire or renew the Lease.")
@click.option("--listen-address", default=":8080", show_default=True,
              help="Where /metrics, /healthz and /readyz are served (HOST:PORT, :PORT, or off).")
@click.option("--shard", default="default", show_default=True,
              help="Without --config: the configuration KAI's operator renders from this SchedulingShard (and the "
                   "kai-config Config) when the cluster still has it, else KAI's defaults; '' to not look.")
@click.option("--plugin-server-address", default="127.0.0.1:8081", show_default=True,
              help="Where KAI's plugin endpoint GET /get-snapshot is served when the configuration has the snapshot "
                   "plugin (HOST:PORT, :PORT, or off); a port in use is logged, not fatal.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of the --config and --kubeconfig files (bytes, or a quantity like 2Gi; "
                   f"default 1Gi, or ${MAX_INPUT_BYTES_ENV}); more is refused (exit status 2).")
@click.option("--max-cycles", type=int, default=None, hidden=True, help="Stop after N cycles (tests).")
def run_command(kubeconfig: str | None, context: str | None, config_path: str | None,
                schedule_period: float, group_period: float, leader_elect: bool, lease_namespace: str, lease_name: str,
                lease_duration: float, renew_deadline: float, retry_period: float, listen_address: str,
                shard: str, plugin_server_address: str, log_level: str, max_input_bytes: str | None,
                max_cycles: int | None) -> None:
    """Schedule every pod with schedulerName kai-scheduler in the cluster, as KAI's scheduler does.

    Exit status: 0 when stopped (SIGTERM/SIGINT), 1 when leadership was lost or the caches never synced
    (Kubernetes restarts the pod), 2 for an unusable command line, configuration or kubeconfig (a missing
    --config or --kubeconfig file, one over --max-input-bytes, a FIFO nobody writes to for
    $KAISCHED_INPUT_TIMEOUT seconds, 10 by default), 3 on an internal error.
    """
    from kaisched.kube.client import KubeClient, KubeConfigError
    from kaisched.kube.kai_snapshot import parse_address, start_plugin_server
    from kaisched.kube.logs import configure
    from kaisched.kube.runner import KubeScheduler, RunOptions

    configure(log_level)
    limits = input_limits(max_input_bytes)
    try:
        config = resolve_config(SchedulerConfig.load(config_path, limits) if config_path else SchedulerConfig())
    except (ConfigError, OSError) as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    host, port = _listen(listen_address)
    try:
        plugin_address = parse_address(plugin_server_address)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--plugin-server-address") from None
    if schedule_period <= 0:
        raise click.BadParameter(f"must be > 0, got {schedule_period}", param_hint="--schedule-period")
    if group_period < 0:
        raise click.BadParameter(f"must be >= 0, got {group_period}", param_hint="--group-period")
    try:
        api = KubeClient.from_env(kubeconfig, context, limits=limits)
    except (KubeConfigError, OSError) as exc:
        raise click.UsageError(f"kubeconfig: {exc}") from None
    if config_path is None and shard:
        config = _shard_config(api, shard, config)
    options = RunOptions(schedule_period=schedule_period, group_period=group_period, leader_elect=leader_elect,
                         lease_namespace=lease_namespace,
                         lease_name=lease_name, lease_duration=lease_duration, renew_deadline=renew_deadline,
                         retry_period=retry_period, listen_host=host, listen_port=port, max_cycles=max_cycles)
    try:
        scheduler = KubeScheduler(api, config, options)
    except ConfigError as exc:  # usageDBConfig.connectionStringEnvVar names an unset variable
        api.close()
        raise click.UsageError(f"scheduler config: {exc}") from None
    if port is not None:  # the dashboard on the metrics/health port (docs/dashboard.md)
        attach_dashboard(scheduler)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        scheduler.stop()

    # before anything starts: the informers log at once, and a SIGTERM that follows must find the handler
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        scheduler.start()
    except (ValueError, OSError) as exc:  # leader-election timings that do not fit, a port in use
        scheduler.close()
        api.close()
        raise click.UsageError(str(exc)) from None
    plugin_server = start_plugin_server(scheduler, plugin_address)  # KAI's /get-snapshot
    try:
        code = scheduler.run()
    finally:
        if plugin_server is not None:
            plugin_server.stop()
        scheduler.close()
        api.close()
    sys.exit(code)

