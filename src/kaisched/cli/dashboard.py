"""``kaisched dashboard``: the read-only web dashboard over manifest files or a live cluster (docs/dashboard.md)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

import click

from kaisched.cli.schedule import input_limits, load_config
from kaisched.framework.config import ConfigError, SchedulerConfig

if TYPE_CHECKING:
    from kaisched.framework.result import CycleResult
    from kaisched.k8s.objects import ParsedObjects
    from kaisched.kube.runner import KubeScheduler
    from kaisched.web import Dashboard

EXAMPLES = """\
\b
Examples:
  # the dashboard of manifest files, re-read every 5 s, on http://127.0.0.1:8765/
  kaisched dashboard -f examples/reclaim.yaml
  # a live cluster, read-only (nothing is written), on every address
  kaisched dashboard --kubeconfig ~/.kube/config --address 0.0.0.0 --port 8765
"""


def files_source(paths: tuple[str, ...], max_input_bytes: str | None) -> Callable[[], ParsedObjects]:
    """Read the manifests afresh at each refresh."""
    from kaisched.k8s.loader import load_objects

    limits = input_limits(max_input_bytes)
    return lambda: load_objects(paths, limits=limits)


def kube_source(kubeconfig: str, context: str | None, max_input_bytes: str | None, config: SchedulerConfig,
                timeout: float = 120.0) -> tuple[Callable[[], ParsedObjects], Callable[[], None]]:
    """List and watch the cluster's objects as ``kaisched run`` does (read-only informers: the DRA kinds in the
    version the server serves, the default-priorities ConfigMap when the configuration names one) and group its pods
    as ``kaisched run`` groups them (:func:`kaisched.kube.live.group_live`: pods naming an existing PodGroup as they
    are, the others by the pod-grouper with their owners read from the API, its PodGroups kept in memory); (read,
    close). The objects read are ready for a cycle (``run_view(..., live=True)``)."""
    from kaisched.kube.api import ApiError
    from kaisched.kube.cache import OwnerCache, ParseCache
    from kaisched.kube.claims import discover_dra_version
    from kaisched.kube.client import KubeClient, KubeConfigError
    from kaisched.kube.informer import Informer
    from kaisched.kube.live import group_live
    from kaisched.kube.resources import CONFIGMAP, dra_kinds
    from kaisched.kube.runner import OPTIONAL_KINDS, REQUIRED_KINDS

    try:
        api = KubeClient.from_env(kubeconfig, context, limits=input_limits(max_input_bytes))
    except (KubeConfigError, OSError) as exc:
        raise click.UsageError(f"kubeconfig: {exc}") from None
    try:
        dra_version = discover_dra_version(api)
    except ApiError:
        dra_version = None  # (as explain --kubeconfig: a server that cannot say is read without DRA objects)
    dra = dra_kinds(dra_version) if dra_version is not None else ()
    kinds = (*REQUIRED_KINDS, *OPTIONAL_KINDS, *dra)
    informers = {k.kind: Informer(api, k, name=f"dashboard-{k.plural}") for k in kinds}
    params = config.params
    if params.default_priorities_configmap_name:
        kinds = (*kinds, CONFIGMAP)
        informers[CONFIGMAP.kind] = Informer(
            api, CONFIGMAP, namespace=params.default_priorities_configmap_namespace or "default",
            field_selector=f"metadata.name={params.default_priorities_configmap_name}", name="dashboard-configmaps")
    for informer in informers.values():
        informer.start()

    def close() -> None:
        for informer in informers.values():
            informer.stop()
        api.close()

    for k in (*REQUIRED_KINDS, *dra):  # (without the claims, devices would look free)
        if not informers[k.kind].wait_synced(timeout):
            close()
            raise click.ClickException(f"could not list {k.qualified_plural} within {timeout:g} s")
    cache = ParseCache()
    owners = OwnerCache(api)
    from kaisched.k8s.objects import ParsedObjects

    def read() -> ParsedObjects:
        parsed = ParsedObjects()
        for k in kinds:
            items = []
            for obj in informers[k.kind].store.snapshot():
                try:
                    items.append((k.key(obj), obj))
                except ValueError:
                    continue
            items.sort(key=lambda kv: kv[0])
            cache.parse(k.kind, items, parsed)
        return group_live(parsed, owners, cache, config, datetime.now(UTC))

    return read, close


def refresh_once(dashboard: Dashboard, read: Callable[[], ParsedObjects], config: SchedulerConfig, *,
                 live: bool = False) -> str | None:
    """One read-only cycle into the dashboard; the error as a sentence when the input could not be read. ``live``:
    ``read`` gives a live cluster's objects, grouped already (:func:`kube_source`), scheduled as Kubernetes mode
    schedules them; else files, through the embedded cluster's controllers first."""
    from kaisched.cluster.schedule import no_cyclic_gc
    from kaisched.explain import run_view
    from kaisched.k8s.loader import InputLimitError

    now = datetime.now(UTC)
    try:
        parsed = read()
    except (InputLimitError, OSError) as exc:
        return str(exc)
    with no_cyclic_gc():
        jobs, result = run_view(parsed, config, now, live=live)
    dashboard.update(jobs, result, now)
    return None


@click.command("dashboard", epilog=EXAMPLES)
@click.option("-f", "--filename", "paths", multiple=True, type=click.Path(exists=True, allow_dash=False),
              help="Manifest file or directory; repeatable (re-read at every refresh).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Read this cluster (read-only: nothing is written).")
@click.option("--context", default=None, help="kubeconfig context (default: the file's current context).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scheduler configuration in KAI's format.")
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0: any free one).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between read-only cycles.")
@click.option("--max-input-bytes", default=None, metavar="BYTES", help="Read at most this much of each input.")
def dashboard_command(paths: tuple[str, ...], kubeconfig: str | None, context: str | None, config_path: str | None,
                      address: str, port: int, interval: float, max_input_bytes: str | None) -> None:
    """Serve the read-only dashboard: queues with deserved / fair share / allocation, pending jobs with their
    reasons and explanations, recent decisions and GPU utilisation. Runs the scheduler's own cycle every
    --interval seconds on the files or the cluster; nothing is written anywhere."""
    from kaisched.cluster.schedule import resolve_config
    from kaisched.web import Dashboard, DashboardServer

    if bool(paths) == bool(kubeconfig):
        raise click.UsageError("give either -f FILE ... or --kubeconfig PATH")
    limits = input_limits(max_input_bytes)
    try:
        config = resolve_config(load_config(config_path, limits) if config_path else SchedulerConfig())
    except ConfigError as exc:
        raise click.UsageError(f"scheduler config: {exc}") from None
    close: Callable[[], None] = lambda: None  # noqa: E731
    if paths:
        read = files_source(paths, max_input_bytes)
        source = ", ".join(paths)
    else:
        assert kubeconfig is not None
        read, close = kube_source(kubeconfig, context, max_input_bytes, config)
        source = kubeconfig
    dashboard = Dashboard(source=source)
    dashboard.history.sample_interval = max(interval, 60.0)
    live = kubeconfig is not None
    error = refresh_once(dashboard, read, config, live=live)
    if error:
        close()
        raise click.ClickException(error)
    try:
        server = DashboardServer(dashboard, address, port).start()
    except OSError as exc:
        close()
        raise click.UsageError(f"cannot listen on {address}:{port}: {exc}") from None
    click.echo(f"kaisched dashboard on {server.url} (Ctrl-C to stop)", err=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stop.wait(interval):
            error = refresh_once(dashboard, read, config, live=live)
            if error:
                click.echo(f"kaisched dashboard: {error} (the previous cycle is shown)", err=True)
    finally:
        server.stop()
        close()
    sys.exit(0)


def attach(scheduler: KubeScheduler, *, rebuild_every: float = 10.0, watched_within: float = 60.0) -> Dashboard:
    """``kaisched run``: the dashboard's routes on the scheduler's health server, fed by its cycles. Every cycle
    goes into the history; the view (a snapshot of the cycle's objects) is built on the scheduling thread, after
    the cycle, only while someone looked at the dashboard within ``watched_within`` seconds and at most every
    ``rebuild_every`` seconds, so that an unwatched dashboard costs the scheduler nothing."""
    from kaisched.model.snapshot import SnapshotOptions, build_snapshot
    from kaisched.web import Dashboard, handle

    dashboard = Dashboard(source="kaisched run", max_view_age=rebuild_every)
    params = scheduler.config.params
    options = SnapshotOptions(full_hierarchy_fairness=params.full_hierarchy_fairness,
                              scheduler_name=params.scheduler_name,
                              make_template_claims=False)  # (as the scheduler's cycle: the cluster makes them)

    def on_cycle(prepared: ParsedObjects, result: CycleResult, now: datetime) -> None:
        try:
            dashboard.cycle(result, now)
            if dashboard.data_stale(rebuild_every) and (dashboard.watched(watched_within)
                                                        or not dashboard.has_view()):
                jobs = dict(build_snapshot(prepared, now, options).jobs)
                dashboard.update(jobs, result, now, record=False)
        except Exception as exc:  # the dashboard never stops the scheduling loop
            logging.getLogger("kaisched.web").warning("dashboard update failed: %s: %s",
                                                            type(exc).__name__, exc)

    scheduler.cycle_listeners.append(on_cycle)
    scheduler.http_routes.append(lambda target: handle(dashboard, target))
    return dashboard
