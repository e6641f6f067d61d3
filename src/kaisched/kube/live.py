"""A live cluster read once, read-only, for one dry-run cycle (``kaisched explain|get|schedule --kubeconfig``).

The objects ``kaisched run`` watches are listed once (paged ``GET``s; nothing is written, no watch is opened):
Nodes, Pods, PodGroups, Queues, PriorityClasses, Topologies when the CRD is served, the DRA kinds in the
``resource.k8s.io`` version the server serves, and the default-priorities ConfigMap when the configuration names
one. They are parsed as Kubernetes mode parses them (:class:`~kaisched.kube.cache.ParseCache`), and pods that name
no existing PodGroup are grouped as Kubernetes mode groups them: by the pod-grouper, with their owners read from the
API (``GET`` only), the PodGroups it would create kept in memory. The cycle then sees what ``kaisched run``'s next
cycle would see, without the writes in flight of a running scheduler.

Whatever cannot be read is a :class:`LiveReadError`: a sentence naming the server and the object (an API server
that cannot be reached, a refusal, a CRD that is not installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

from kaisched.framework.config import SchedulerConfig
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects, Pod, PodGroup
from kaisched.kube.api import Api, ApiError
from kaisched.kube.cache import OwnerCache, ParseCache
from kaisched.kube.claims import discover_dra_version
from kaisched.kube.resources import (
    CONFIGMAP,
    NODE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    QUEUE,
    TOPOLOGY,
    ResourceKind,
    dra_kinds,
)
from kaisched.podgrouper import group_pods, kind_defaults

__all__ = ["LiveReadError", "LiveView", "check_namespace", "list_objects", "read_live"]

Json = Mapping[str, Any]

#: the kinds a cycle cannot do without (a server that does not serve one is an error)
REQUIRED: tuple[ResourceKind, ...] = (NODE, POD, PODGROUP, QUEUE, PRIORITY_CLASS)


class LiveReadError(Exception):
    """The live cluster could not be read (a sentence naming the server and what failed)."""


@dataclass(slots=True)
class LiveView:
    """What was read: the objects, grouped as Kubernetes mode groups them (ready for a cycle), the server's URL,
    the ``resource.k8s.io`` version read (None: no DRA objects) and how many objects of each kind."""

    parsed: ParsedObjects
    server: str
    dra_version: str | None
    counts: dict[str, int]


def _failure(server: str, what: str, err: ApiError) -> LiveReadError:
    if err.status == 0:
        return LiveReadError(f"cannot reach the API server {server} ({what}): {err.message}")
    if err.status in (401, 403):
        return LiveReadError(f"the API server {server} refused to {what} ({err.status} {err.reason}): {err.message}; "
                             "the kubeconfig's user needs get and list on it")
    if err.status == 404:
        return LiveReadError(f"the API server {server} does not serve it ({what}: 404 NotFound)")
    return LiveReadError(f"the API server {server} failed to {what} ({err.status} {err.reason}): {err.message}")


def list_objects(api: Api, kind: ResourceKind, *, namespace: str | None = None, page_size: int = 500,
                 params: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every object of ``kind`` (one namespace's, or all), listed in pages; each with ``kind`` and ``apiVersion``
    (list items of built-in kinds come without them). :class:`ApiError` when a page is refused."""
    path = kind.list_path(namespace)
    items: list[dict[str, Any]] = []
    token = ""
    restarts = 0
    while True:
        query = {**(params or {}), "limit": str(page_size)}
        if token:
            query["continue"] = token
        try:
            body = api.request("GET", path, params=query).body
        except ApiError as err:
            if err.status == 410 and token and restarts < 3:  # the continue token expired: list again
                items, token, restarts = [], "", restarts + 1
                continue
            raise
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise ApiError(0, "InvalidResponse", f"GET {path}: not a list: {str(body)[:200]}")
        items.extend(o for o in body["items"] if isinstance(o, dict))
        token = str((body.get("metadata") or {}).get("continue") or "")
        if not token:
            break
    for obj in items:
        obj.setdefault("kind", kind.kind)
        obj.setdefault("apiVersion", kind.api_version)
    return items


def _keyed(kind: ResourceKind, objects: list[dict[str, Any]]) -> list[tuple[str, Json]]:
    out: list[tuple[str, Json]] = []
    for obj in objects:
        try:
            out.append((kind.key(obj), obj))
        except ValueError:
            continue  # no name: nothing can refer to it
    out.sort(key=lambda kv: kv[0])
    return out


def check_namespace(api: Api, namespace: str, server: str = "") -> bool:
    """Whether ``namespace`` exists (True too when the user may not read namespaces: nothing to tell)."""
    try:
        api.request("GET", f"/api/v1/namespaces/{quote(namespace, safe='')}")
    except ApiError as err:
        if err.status == 404:
            return False
        if err.status in (401, 403):
            return True
        raise _failure(server, f"get namespace {namespace!r}", err) from None
    return True


def read_live(api: Api, config: SchedulerConfig, now: datetime, *, server: str = "") -> LiveView:
    """List the cluster's objects once and group its pods as Kubernetes mode does (see the module doc)."""
    items: dict[str, list[tuple[str, Json]]] = {}
    for kind in REQUIRED:
        try:
            items[kind.kind] = _keyed(kind, list_objects(api, kind))
        except ApiError as err:
            what = f"list {kind.qualified_plural}"
            if err.status == 404 and kind.group:
                raise LiveReadError(f"the API server {server} does not serve {kind.qualified_plural} ({what}: "
                                    "404 NotFound): are KAI's CRDs installed (deploy/crds)?") from None
            raise _failure(server, what, err) from None
    optional: list[ResourceKind] = [TOPOLOGY]
    dra_version: str | None = None
    try:
        dra_version = discover_dra_version(api)
    except ApiError:
        dra_version = None  # (DRA objects are optional: a server that cannot say has none for this view)
    if dra_version is not None:
        optional.extend(dra_kinds(dra_version))
    for kind in optional:
        try:
            items[kind.kind] = _keyed(kind, list_objects(api, kind))
        except ApiError as err:
            if err.status in (403, 404):
                items[kind.kind] = []  # not served, or not readable: as a cluster without them
                continue
            raise _failure(server, f"list {kind.qualified_plural}", err) from None
    params = config.params
    if params.default_priorities_configmap_name:
        namespace = params.default_priorities_configmap_namespace or "default"
        try:
            found = list_objects(api, CONFIGMAP, namespace=namespace, params={
                "fieldSelector": f"metadata.name={params.default_priorities_configmap_name}"})
        except ApiError as err:
            if err.status not in (403, 404):
                raise _failure(server, f"list configmaps in {namespace!r}", err) from None
            found = []
        items[CONFIGMAP.kind] = _keyed(CONFIGMAP, found)
    cache = ParseCache()
    parsed = ParsedObjects()
    for kind_name in (C.DEVICE_CLASS_KIND, C.RESOURCE_SLICE_KIND, C.RESOURCE_CLAIM_KIND, C.RESOURCE_CLAIM_TEMPLATE_KIND,
                      "Node", "Pod", "PodGroup", "Queue", "PriorityClass", "Topology", "ConfigMap"):
        cache.parse(kind_name, items.get(kind_name, []), parsed)
    grouped = group_live(parsed, OwnerCache(api), cache, config, now)
    counts = {k: len(v) for k, v in items.items()}
    return LiveView(grouped, server, dra_version, counts)


def group_live(parsed: ParsedObjects, owners: OwnerCache, cache: ParseCache, config: SchedulerConfig,
               now: datetime, replanned: dict[str, PodGroup] | None = None) -> ParsedObjects:
    """Kubernetes mode's grouping (``KubeScheduler._group``): pods that name an existing PodGroup are taken as they
    are; the others of this scheduler go through the pod-grouper, their owners read from the API (GET only).

    ``replanned``, when given, receives (by ``namespace/name``) the PodGroup the pod-grouper makes now for each
    PodGroup that exists already and has pods among those grouped: the cycle keeps the existing one, the
    pod-grouper controller updates it to this (as KAI's pod-grouper does when a workload changed)."""
    params = config.params
    existing = {(pg.meta.namespace, pg.meta.name) for pg in parsed.pod_groups}
    settled: list[Pod] = []
    to_group: list[Pod] = []
    for pod in parsed.pods:
        name = pod.meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION)
        if pod.scheduler_name != params.scheduler_name or (name and (pod.meta.namespace, name) in existing):
            settled.append(pod)
        else:
            to_group.append(pod)
    if not to_group:
        return parsed
    found = ParsedObjects()
    cache.parse("Owner", [(f"{o.get('kind')}:{_owner_key(o)}", o) for o in owners.owners_of(to_group)], found)
    errors = list(parsed.errors)
    with_owners = replace(parsed, pods=to_group, workloads=[*parsed.workloads, *found.workloads], errors=errors)
    defaults = kind_defaults(with_owners, params.default_priorities_configmap_name,
                             params.default_priorities_configmap_namespace, errors)
    priority_classes = frozenset({*C.BUILTIN_PRIORITY_CLASSES, *(pc.meta.name for pc in parsed.priority_classes)})
    plans: dict[tuple[str, str], PodGroup] | None = {} if replanned is not None else None
    grouped = group_pods(replace(with_owners, errors=errors), scheduler_name=params.scheduler_name,
                         priority_classes=priority_classes, defaults=defaults, now=now, replanned=plans)
    if replanned is not None and plans:  # (one pass: the plans of existing PodGroups come with the grouping)
        for (namespace, name), pg in plans.items():
            replanned[f"{namespace}/{name}"] = pg
    return replace(grouped, pods=[*settled, *grouped.pods], errors=[*grouped.errors, *found.errors])


def _owner_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
