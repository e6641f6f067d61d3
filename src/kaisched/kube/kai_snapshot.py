"""KAI's plugin HTTP server in Kubernetes mode: ``GET /get-snapshot`` answers with the scheduler's state as KAI's
snapshot ZIP (spec 11.3; the format in :mod:`kaisched.k8s.kai_snapshot`), so that KAI's own ``snapshot-tool``
and ``kaisched replay`` replay it.

As KAI's plugin does, the snapshot holds the raw objects as the informers list them (not the session model), the
configuration and the scheduler params. KAI serves it on ``127.0.0.1:8081`` (reach it with a port-forward);
``kaisched run --plugin-server-address`` chooses the address.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from kaisched.cluster.replay import snapshot_zip
from kaisched.k8s import constants as C
from kaisched.kube.health import HealthServer, Route

if TYPE_CHECKING:
    from kaisched.kube.runner import KubeScheduler

PATH: Final = "/get-snapshot"
CONTENT_TYPE: Final = "application/zip"
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8081
#: informer kind -> KAI's rawObjects key
RAW_KEYS: Final[Mapping[str, str]] = {
    C.POD_KIND: "pods",
    C.NODE_KIND: "nodes",
    C.QUEUE_KIND: "queues",
    C.POD_GROUP_KIND: "podGroups",
    C.PRIORITY_CLASS_KIND: "priorityClasses",
    "ConfigMap": "configMaps",
    C.RESOURCE_CLAIM_KIND: "resourceClaims",
    C.RESOURCE_SLICE_KIND: "resourceSlices",
    C.DEVICE_CLASS_KIND: "deviceClasses",
    C.TOPOLOGY_KIND: "topologies",
}


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def raw_objects(scheduler: KubeScheduler) -> dict[str, list[Mapping[str, Any]]]:
    """The informers' objects by rawObjects key, sorted by namespace and name (each with its apiVersion, so that a
    DRA object keeps the version the server served)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for kind, informer in scheduler.informers.items():
        key = RAW_KEYS.get(kind)
        if key is None:
            continue
        resource = scheduler.kinds.get(kind)
        items = [obj for obj in informer.store.snapshot() if isinstance(obj, Mapping)]
        if resource is not None:
            items = [obj if obj.get("apiVersion") else {"apiVersion": resource.api_version, "kind": kind, **obj}
                     for obj in items]
        out[key] = sorted(items, key=_name)
    return out


#: the DRA resources KAI's snapshot-tool looks for in the discovery it fakes (DRA is on when they are served)
DRA_RESOURCES: Final = (("resourceclaims", "ResourceClaim", True), ("resourceslices", "ResourceSlice", False),
                        ("deviceclasses", "DeviceClass", False))


def discovery(scheduler: KubeScheduler) -> dict[str, Any]:
    """``discovery`` of the snapshot: the server's version (``GET /version``, left out when it cannot be asked) and,
    when the server serves DRA, its ``resource.k8s.io`` resources (KAI's tool turns DRA on from them)."""
    from kaisched.kube.api import ApiError

    out: dict[str, Any] = {}
    try:
        version = scheduler.api.request("GET", "/version").body
    except ApiError:
        version = None
    if isinstance(version, Mapping):
        out["serverVersion"] = {k: version[k] for k in ("major", "minor", "gitVersion", "gitCommit", "platform")
                                if isinstance(version.get(k), str)}
    if scheduler.dra_version:
        out["resources"] = [{
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"resource.k8s.io/{scheduler.dra_version}",
            "resources": [{"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
                           "verbs": ["get", "list", "watch"]} for name, kind, namespaced in DRA_RESOURCES]}]
    return out


def capture(scheduler: KubeScheduler, now: datetime | None = None) -> bytes:
    """The scheduler's state now, as KAI's snapshot ZIP."""
    return snapshot_zip(scheduler.config, raw_objects(scheduler), now or datetime.now(UTC),
                        schedule_period=scheduler.options.schedule_period, discovery=discovery(scheduler) or None)


def snapshot_route(scheduler: KubeScheduler) -> Route:
    """The ``GET /get-snapshot`` route of a :class:`HealthServer`."""

    def route(target: str) -> tuple[int, str, bytes] | None:
        if target.split("?", 1)[0] != PATH:
            return None
        return 200, CONTENT_TYPE, capture(scheduler)

    return route


def plugin_server(scheduler: KubeScheduler, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> HealthServer:
    """KAI's plugin HTTP server (not started): ``/get-snapshot`` only."""
    return HealthServer(scheduler.health, lambda: b"", host, port, [snapshot_route(scheduler)], builtin=False)


def serves_snapshots(scheduler: KubeScheduler) -> bool:
    """Whether the configuration enables KAI's ``snapshot`` plugin (KAI's default configuration does)."""
    return scheduler.config.plugin("snapshot") is not None


def parse_address(value: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``off`` (None); ValueError otherwise."""
    if value in ("off", "none", ""):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, :PORT or off, got {value!r}")
    return host or "0.0.0.0", int(port)


def start_plugin_server(scheduler: KubeScheduler, address: tuple[str, int] | None) -> HealthServer | None:
    """Serve ``/get-snapshot`` at ``address`` when the configuration enables the ``snapshot`` plugin. A port that
    cannot be bound is logged, not fatal: the endpoint is a debugging aid, scheduling goes on without it."""
    if address is None or not serves_snapshots(scheduler):
        return None
    from kaisched.kube.logs import get_logger

    try:
        server = plugin_server(scheduler, *address).start()
    except OSError as exc:
        get_logger("kaisched.kube.kai_snapshot").warning(
            "plugin server not started: /get-snapshot is not served", address=f"{address[0]}:{address[1]}",
            error=str(exc))
        return None
    get_logger("kaisched.kube.kai_snapshot").info("serving KAI snapshots", url=f"{server.url}{PATH}")
    return server
