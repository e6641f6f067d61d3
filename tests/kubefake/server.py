"""A fake Kubernetes API server, in process, on 127.0.0.1, for the integration tests of Kubernetes mode.

It speaks the real server's wire format: ``Status`` objects for errors (``reason``, ``code``, ``details``),
lists with ``metadata.resourceVersion``/``continue``/``remainingItemCount`` and items without
``kind``/``apiVersion`` for built-in kinds, chunked watch streams of ``{"type": ..., "object": ...}`` lines,
``BOOKMARK`` events, in-stream ``ERROR`` 410s for compacted resource versions, and ``pods/binding``
answering a ``Status`` (never a Binding). What it models from kube-apiserver 1.20:

* one global resourceVersion counter; ``uid`` and ``creationTimestamp`` on create; no-op updates do not
  bump the resourceVersion; ``metadata.generation`` for custom resources and workload kinds;
* create-time strategies: pods get ``status: {phase: Pending, qosClass}``, a default ``schedulerName``,
  ``terminationGracePeriodSeconds`` and ``restartPolicy``, and the Priority admission plugin
  (``spec.priority`` from the PriorityClass; 403 for an unknown class; the two ``system-*`` classes exist
  from the start); nodes keep their status; other kinds with a status subresource lose it;
* updates with a stale ``metadata.resourceVersion`` answer 409; status subresources change only
  ``status``, main-resource writes never change ``status``; pod ``spec`` is immutable except container
  images, ``activeDeadlineSeconds`` and tolerations (422 otherwise: use ``pods/binding``);
* patches: merge (RFC 7386), strategic merge for built-in kinds (lists merged by their keys: conditions
  by ``type``, containers by ``name``...; 415 for custom resources, like the real server), JSON patch;
* deletion: graceful for bound, non-terminal pods (``deletionTimestamp``; a second delete with
  ``gracePeriodSeconds=0`` removes them), objects with finalizers wait for them, immediate otherwise;
* list with ``limit``/``continue`` over a consistent snapshot (410 ``Expired`` once compacted),
  ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!`` not-exists) and
  ``fieldSelector`` (``metadata.name``, ``metadata.namespace``, and per-kind fields such as
  ``spec.nodeName``, ``spec.schedulerName``, ``status.phase``);
* watch from a resourceVersion (410 once older than the compaction point, and after a restart, whose
  rebuilt watch cache starts at the current resourceVersion; ``0``/empty: current state as ``ADDED``
  first), selectors with the real server's ``ADDED``/``DELETED`` on (un)matching changes,
  ``timeoutSeconds``, and ``BOOKMARK`` events every ``bookmark_interval`` (60 s by default: a real 1.20
  server sent none during an idle 8 s watch, so clients must never wait for one) or on
  :meth:`FakeApiServer.bookmark_now`;
* ``pods/binding`` (sets ``spec.nodeName`` and the ``PodScheduled`` condition, copies the Binding's
  annotations; 409 when bound or terminating), ``pods/eviction`` with a ``policy/v1`` or
  ``policy/v1beta1`` body (``eviction_v1 = False`` makes v1 answer what a 1.20 server answers: a 400
  ``BadRequest`` saying no kind "Eviction" is registered for version "policy/v1", *not* a 404).

Not modelled: namespaces existing before use, admission webhooks, PodDisruptionBudgets, garbage
collection, server-side apply, ``managedFields``, most defaulting of container fields.

Fault injection: :meth:`FakeApiServer.fail_next`, :meth:`FakeApiServer.pause`,
:meth:`FakeApiServer.expire_watches`, :meth:`FakeApiServer.compact`, :meth:`FakeApiServer.drop_connections`,
and :meth:`FakeApiServer.stop`/:meth:`FakeApiServer.start` (a restart on the same port, keeping the stored
objects like etcd would). Every request is logged (:attr:`FakeApiServer.requests`).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import json
import random
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import msgspec

__all__ = ["DEFAULT_RESOURCES", "FakeApiServer", "Gate", "RequestRecord", "Resource"]

JSON = Any
_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def _clone(obj: JSON) -> JSON:
    return _dec.decode(_enc.encode(obj))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------------
# resources


@dataclass(frozen=True)
class Resource:
    """One served resource. ``crd`` marks custom resources (no strategic merge patch, list items keep
    ``kind``/``apiVersion``, ``metadata.generation``)."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False
    crd: bool = False
    generation: bool = False
    subresources: frozenset[str] = frozenset()

    @property
    def rid(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str | None = None) -> str:
        v = version or self.versions[0]
        return f"{self.group}/{v}" if self.group else v

    def key(self, namespace: str | None, name: str) -> str:
        return f"{namespace}/{name}" if self.namespaced else name


def _r(group: str, versions: str, plural: str, kind: str, **kw: Any) -> Resource:
    return Resource(group, tuple(versions.split(",")), plural, kind, **kw)


DEFAULT_RESOURCES: tuple[Resource, ...] = (
    _r("", "v1", "pods", "Pod", status=True, subresources=frozenset({"binding", "eviction"})),
    _r("", "v1", "nodes", "Node", namespaced=False, status=True),
    _r("", "v1", "namespaces", "Namespace", namespaced=False, status=True),
    _r("", "v1", "configmaps", "ConfigMap"),
    _r("", "v1", "secrets", "Secret"),
    _r("", "v1", "services", "Service", status=True),
    _r("", "v1", "events", "Event"),
    _r("", "v1", "serviceaccounts", "ServiceAccount"),
    _r("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", status=True),
    _r("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False, status=True),
    _r("apps", "v1", "deployments", "Deployment", status=True, generation=True),
    _r("apps", "v1", "replicasets", "ReplicaSet", status=True, generation=True),
    _r("apps", "v1", "statefulsets", "StatefulSet", status=True, generation=True),
    _r("apps", "v1", "daemonsets", "DaemonSet", status=True, generation=True),
    _r("batch", "v1", "jobs", "Job", status=True),
    _r("batch", "v1beta1", "cronjobs", "CronJob", status=True),
    _r("policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget", status=True),
    _r("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    _r("coordination.k8s.io", "v1", "leases", "Lease"),
    _r("events.k8s.io", "v1", "events", "Event"),
    _r("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False),
    _r("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", status=True, crd=True, generation=True),
    _r("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False, status=True, crd=True, generation=True),
    _r("scheduling.run.ai", "v1alpha2", "bindrequests", "BindRequest", status=True, crd=True, generation=True),
    _r("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False, crd=True, generation=True),
    _r("kai.scheduler", "v1", "configs", "Config", namespaced=False, status=True, crd=True, generation=True),
    _r("kai.scheduler", "v1", "schedulingshards", "SchedulingShard", namespaced=False, status=True, crd=True,
       generation=True),
)

_FIELDS_COMMON = ("metadata.name", "metadata.namespace")
_FIELDS: dict[str, tuple[str, ...]] = {
    "/pods": ("spec.nodeName", "spec.schedulerName", "spec.serviceAccountName", "spec.restartPolicy",
              "status.phase", "status.podIP", "status.nominatedNodeName"),
    "/nodes": ("spec.unschedulable",),
    "/events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                "reason", "source", "type"),
    "/secrets": ("type",),
    "/namespaces": ("status.phase",),
}

_SYSTEM_PRIORITY_CLASSES = (("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000))

# ---------------------------------------------------------------------------------------------------
# errors


class _Fail(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> dict[str, Any]:
        return _status_failure(self.code, self.reason, self.message, self.details)


def _status_failure(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason}
    if details:
        out["details"] = details
    out["code"] = code
    return out


def _status_success(code: int) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


_DEFAULT_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
                    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                    504: "Timeout"}
_DEFAULT_MESSAGES = {429: "Too many requests, please try again later.",
                     500: "Internal error occurred: injected fault",
                     503: "The server is currently unable to handle the request",
                     410: "The resourceVersion for the provided watch is too old."}


def _details(res: Resource, name: str | None, kind: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = kind or res.plural
    return d


def _not_found(res: Resource, name: str) -> _Fail:
    return _Fail(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def _conflict(res: Resource, name: str) -> _Fail:
    return _Fail(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has '
                 "been modified; please apply your changes to the latest version and try again",
                 _details(res, name))


def _invalid(res: Resource, name: str, field_path: str, detail: str) -> _Fail:
    reason = next((r for prefix, r in (("Required", "FieldValueRequired"), ("Forbidden", "FieldValueForbidden"),
                                       ("Unsupported", "FieldValueNotSupported")) if detail.startswith(prefix)),
                  "FieldValueInvalid")
    return _Fail(422, "Invalid", f'{res.kind} "{name}" is invalid: {field_path}: {detail}',
                 {**_details(res, name, res.kind), "causes": [{"reason": reason, "message": detail,
                                                               "field": field_path}]})


def _bad_request(message: str) -> _Fail:
    return _Fail(400, "BadRequest", message)


_PAGE_NOT_FOUND = _Fail(404, "NotFound", "the server could not find the requested resource",
                        {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})

# ---------------------------------------------------------------------------------------------------
# selectors

_KEY_RE = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VAL_RE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


@dataclass(frozen=True)
class LabelRequirement:
    """One requirement of a label selector: ``op`` is one of ``= != in notin exists !exists > <``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def __call__(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "=":
            return value is not None and value in self.values
        if self.op in ("!=", "notin"):
            return value not in self.values
        if self.op == "in":
            return value in self.values
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        bound = int(next(iter(self.values)))
        number = _int_label(value)
        return number > bound if self.op == ">" else number < bound


def parse_label_selector(text: str) -> list[LabelRequirement]:
    """Kubernetes label selector syntax; a 400 ``BadRequest`` for anything else."""
    reqs: list[LabelRequirement] = []
    for part in _split_top(text):
        m = re.fullmatch(rf"({_KEY_RE})\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            values = frozenset(v.strip() for v in m.group(4).split(",") if v.strip())
            if not all(re.fullmatch(_VAL_RE, v) for v in values):
                raise _bad_request(f"unable to parse requirement: invalid label value in {part!r}")
            reqs.append(LabelRequirement(m.group(1), m.group(3), values))
            continue
        m = re.fullmatch(rf"(!?)\s*({_KEY_RE})", part)
        if m:
            reqs.append(LabelRequirement(m.group(2), "!exists" if m.group(1) else "exists"))
            continue
        m = re.fullmatch(rf"({_KEY_RE})\s*(==|=|!=|>|<)\s*(\S*)", part)
        if m:
            key, op, value = m.group(1), m.group(3), m.group(4)
            if op in (">", "<") and not re.fullmatch(r"-?\d+", value):
                raise _bad_request(f"unable to parse requirement: for 'gt', 'lt' operators, the value must be an "
                                   f"integer: {part!r}")
            if op not in (">", "<") and not re.fullmatch(_VAL_RE, value):
                raise _bad_request(f"unable to parse requirement: invalid label value: {value!r}")
            reqs.append(LabelRequirement(key, "=" if op == "==" else op, frozenset({value})))
            continue
        raise _bad_request(f"unable to parse requirement: {part!r}")
    return reqs


def _int_label(value: str | None) -> float:
    if value is None:
        return float("nan")
    try:
        return int(value)
    except ValueError:
        return float("nan")


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        return (_field_value(obj, self.path) == self.value) != self.negate


def parse_field_selector(text: str, res: Resource) -> list[FieldRequirement]:
    allowed = set(_FIELDS_COMMON) | set(_FIELDS.get(f"{res.group}/{res.plural}", ()))
    reqs: list[FieldRequirement] = []
    for part in _split_top(text):
        m = re.fullmatch(r"([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise _bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in allowed:
            raise _bad_request(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, op == "!=", value))
    return reqs


@dataclass
class _Filter:
    namespace: str | None
    labels: list[LabelRequirement]
    fields: list[FieldRequirement]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(r(labels) for r in self.labels) and all(f(obj) for f in self.fields)


# ---------------------------------------------------------------------------------------------------
# patches


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386 JSON merge patch (returns a new value; ``target`` is not modified)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_SMP_MERGE_KEYS = {"conditions": "type", "containers": "name", "initContainers": "name",
                   "ephemeralContainers": "name", "volumes": "name", "env": "name", "volumeMounts": "mountPath",
                   "ownerReferences": "uid", "imagePullSecrets": "name", "addresses": "type"}
_SMP_SET_LISTS = {"finalizers"}


def strategic_merge_patch(target: JSON, patch: JSON) -> JSON:
    """A strategic merge patch for the lists whose merge keys matter here (see ``_SMP_MERGE_KEYS``)."""
    if not isinstance(patch, dict):
        return patch
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, list) and key in _SMP_MERGE_KEYS and isinstance(result.get(key), list):
            merge_key = _SMP_MERGE_KEYS[key]
            merged = list(result[key])
            for item in value:
                if not isinstance(item, dict) or merge_key not in item:
                    raise _bad_request(f"map: {item!r} does not contain declared merge key: {merge_key}")
                idx = next((i for i, cur in enumerate(merged)
                            if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        merged.pop(idx)
                elif idx is None:
                    merged.append({k: v for k, v in item.items() if not k.startswith("$")})
                else:
                    merged[idx] = strategic_merge_patch(merged[idx], item)
            result[key] = merged
        elif isinstance(value, list) and key in _SMP_SET_LISTS and isinstance(result.get(key), list):
            result[key] = list(result[key]) + [v for v in value if v not in result[key]]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _Fail(422, "Invalid", f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: JSON, ops: JSON) -> JSON:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise _bad_request("a JSON patch must be a list of operations")
    doc = _clone(target)

    def parent(parts: list[str]) -> tuple[Any, str]:
        if not parts:
            raise _Fail(422, "Invalid", "cannot operate on the document root")
        cur = doc
        for p in parts[:-1]:
            try:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            except (KeyError, IndexError, ValueError, TypeError):
                raise _Fail(422, "Invalid", f"JSON patch path /{'/'.join(parts)} does not exist") from None
        return cur, parts[-1]

    def get(parts: list[str]) -> Any:
        c, last = parent(parts)
        try:
            return c[int(last)] if isinstance(c, list) else c[last]
        except (KeyError, IndexError, ValueError, TypeError):
            raise _Fail(422, "Invalid", f"JSON patch path /{'/'.join(parts)} does not exist") from None

    def remove(parts: list[str]) -> Any:
        value = get(parts)
        c, last = parent(parts)
        if isinstance(c, list):
            c.pop(int(last))
        else:
            del c[last]
        return value

    def add(parts: list[str], value: Any) -> None:
        c, last = parent(parts)
        if isinstance(c, list):
            if last == "-":
                c.append(value)
            else:
                try:
                    c.insert(int(last), value)
                except ValueError:
                    raise _Fail(422, "Invalid", f"bad array index {last!r}") from None
        elif isinstance(c, dict):
            c[last] = value
        else:
            raise _Fail(422, "Invalid", f"JSON patch path /{'/'.join(parts)}: parent is not a container")

    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _bad_request(f"invalid JSON patch operation {op!r}")
        parts = _pointer(op["path"])
        kind = op["op"]
        if kind == "add":
            add(parts, _clone(op.get("value")))
        elif kind == "remove":
            remove(parts)
        elif kind == "replace":
            get(parts)
            c, last = parent(parts)
            if isinstance(c, list):
                c[int(last)] = _clone(op.get("value"))
            else:
                c[last] = _clone(op.get("value"))
        elif kind == "move":
            add(parts, remove(_pointer(op.get("from", ""))))
        elif kind == "copy":
            add(parts, _clone(get(_pointer(op.get("from", "")))))
        elif kind == "test":
            if get(parts) != op.get("value"):
                raise _Fail(422, "Invalid", f"JSON patch test failed at {op['path']}")
        else:
            raise _bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


# ---------------------------------------------------------------------------------------------------
# bookkeeping types


@dataclass(frozen=True)
class RequestRecord:
    """One request the server answered (watches: logged when the stream starts)."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    body: JSON
    content_type: str
    watch: bool
    time: float

    @property
    def target(self) -> str:
        """``path?query`` with the query decoded, as :meth:`FakeApiServer.fail_next` patterns see it."""
        if not self.query:
            return self.path
        return self.path + "?" + "&".join(f"{k}={v}" for k, v in self.query.items())


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    remaining: int
    reason: str
    message: str
    retry_after: int | None


class Gate:
    """Holds matching requests until :meth:`release` (see :meth:`FakeApiServer.pause`)."""

    def __init__(self, method: str, pattern: str, timeout: float) -> None:
        self.method = method.upper()
        self.pattern = re.compile(pattern)
        self.timeout = timeout
        self._event = threading.Event()
        self._cond = threading.Condition()
        self.waiting = 0
        self.passed = 0

    def matches(self, method: str, target: str) -> bool:
        return (self.method in ("*", method)) and self.pattern.search(target) is not None

    def hold(self) -> None:
        with self._cond:
            self.waiting += 1
            self._cond.notify_all()
        try:
            self._event.wait(self.timeout)
        finally:
            with self._cond:
                self.waiting -= 1
                self.passed += 1
                self._cond.notify_all()

    def wait_for(self, waiting: int, timeout: float) -> bool:
        """Wait until ``waiting`` requests are held; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting >= waiting, timeout)

    def release(self) -> None:
        self._event.set()

    @property
    def released(self) -> bool:
        return self._event.is_set()


@dataclass
class _Entry:
    rv: int
    rid: str
    type: str
    obj: JSON
    prev: JSON


@dataclass(eq=False)
class _Watcher:
    res: Resource
    version: str
    flt: _Filter
    cursor: int
    bookmarks: bool
    deadline: float
    next_bookmark: float
    closed: bool = False
    expired: bool = False
    force_bookmark: bool = False


@dataclass
class _Route:
    res: Resource
    version: str
    namespace: str | None
    name: str | None
    sub: str | None
    watch_path: bool = False


# ---------------------------------------------------------------------------------------------------
# HTTP plumbing


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeApiServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):  # no Nagle: headers and body go out at once, as small answers should
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track(self.connection, True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.fake._track(self.connection, False)

    def handle(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        self.server.fake._handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    # response helpers
    def send_json(self, code: int, body: JSON, headers: Mapping[str, str] | None = None) -> None:
        data = _enc.encode(body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


# ---------------------------------------------------------------------------------------------------
# the server


class FakeApiServer:
    """An in-process fake kube-apiserver. ``start()`` it (or use it as a context manager), point a client at
    :attr:`url`, and inspect or steer it from the test."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        bookmark_interval: float = 60.0,
        default_watch_timeout: float = 1800.0,
        history_limit: int = 100_000,
        eviction_v1: bool = True,
        graceful_pod_deletion: bool = True,
        resources: Iterable[Resource] = DEFAULT_RESOURCES,
        seed_system_priority_classes: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.history_limit = history_limit
        #: False: a ``policy/v1`` Eviction answers 400 BadRequest (``no kind "Eviction" is registered for
        #: version "policy/v1"``), exactly as kube-apiserver 1.20.2 does (measured; not a 404).
        self.eviction_v1 = eviction_v1
        #: False: pods are always deleted at once (as with ``gracePeriodSeconds=0``).
        self.graceful_pod_deletion = graceful_pod_deletion
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._rv = 0
        self._compacted = 0
        self._resources: dict[tuple[str, str, str], Resource] = {}
        self._by_kind: dict[tuple[str, str], Resource] = {}
        self._store: dict[str, dict[str, JSON]] = {}
        self._log: list[_Entry] = []
        self._log_rvs: list[int] = []
        self._snapshots: OrderedDict[str, tuple[int, list[JSON]]] = OrderedDict()
        self._watchers: set[_Watcher] = set()
        self._connections: set[socket.socket] = set()
        self._faults: list[_Fault] = []
        self._gates: list[Gate] = []
        self._requests: list[RequestRecord] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._rng = random.Random(0)
        self._started_once = False
        self._token_floor = 0  # continue tokens of lists older than this have expired
        for res in resources:
            self.register(res)
        if seed_system_priority_classes:
            for name, value in _SYSTEM_PRIORITY_CLASSES:
                self.seed({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value,
                           "description": "Used for system critical pods that must not be moved from their "
                                          "current node.", "preemptionPolicy": "PreemptLowerPriority"})

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, *, keep_watch_history: bool = False) -> FakeApiServer:
        """Start serving (again, on the same port after :meth:`stop`).

        A restart rebuilds the watch cache like kube-apiserver does: watches from a resourceVersion older
        than the current one answer 410 (measured on 1.20.2: ``too old resource version: 190 (191)``),
        while continue tokens, served from etcd, stay valid. ``keep_watch_history=True`` keeps the history.
        """
        if self._httpd is not None:
            return self
        if self._started_once and not keep_watch_history:
            with self._lock:
                self._compact_watches(self._rv)
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.fake = self
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-apiserver-{self.port}", daemon=True)
        self._thread.start()
        self._started_once = True
        return self

    def stop(self) -> None:
        """Stop serving: close the listening socket and every connection (watches end abruptly).
        The stored objects and resourceVersions survive; :meth:`start` serves them again."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for gate in list(self._gates):
            gate.release()
        self.drop_connections()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig for this server (with the bearer token, if any) and return its path."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        conf = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }
        out = Path(path)
        out.write_text(json.dumps(conf, indent=2))
        return out

    # -- resources ----------------------------------------------------------------------------------

    def register(self, res: Resource) -> None:
        """Serve another resource (a CRD of a workload kind, say)."""
        with self._lock:
            for v in res.versions:
                self._resources[(res.group, v, res.plural)] = res
            self._by_kind[(res.group, res.kind)] = res
            self._store.setdefault(res.rid, {})

    def _resource_for(self, api_version: str, kind: str) -> Resource:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        try:
            return self._by_kind[(group, kind)]
        except KeyError:
            raise KeyError(f"the fake API server does not serve {kind} in {api_version!r}") from None

    # -- direct access for tests (no HTTP, no admission) ---------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        with self._lock:
            return self._rv

    def seed(self, obj: Mapping[str, Any]) -> JSON:
        """Create or replace ``obj`` as is (status included, no defaults or admission), as if it had been
        written long ago; watchers see ``ADDED``/``MODIFIED``. Returns the stored copy."""
        res = self._resource_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        new = _clone(obj)
        meta = new.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ValueError(f"seed: {res.kind} without metadata.name")
        if res.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        key = res.key(meta.get("namespace"), name)
        with self._lock:
            old = self._store[res.rid].get(key)
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"] if old else _now())
            if res.generation:
                meta.setdefault("generation", 1)
            return _clone(self._commit(res, key, new, "MODIFIED" if old else "ADDED", old))

    def get_object(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JSON:
        """A copy of the stored object, or None."""
        res = self._resource_for(api_version, kind)
        with self._lock:
            obj = self._store[res.rid].get(res.key(namespace, name))
            return _clone(obj) if obj is not None else None

    def list_objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[JSON]:
        res = self._resource_for(api_version, kind)
        with self._lock:
            return [_clone(o) for k, o in sorted(self._store[res.rid].items())
                    if namespace is None or o["metadata"].get("namespace") == namespace]

    def delete_object(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Remove an object at once (finalizers and grace periods ignored); False if absent."""
        res = self._resource_for(api_version, kind)
        key = res.key(namespace, name)
        with self._lock:
            old = self._store[res.rid].get(key)
            if old is None:
                return False
            self._commit(res, key, None, "DELETED", old)
            return True

    # -- fault injection ----------------------------------------------------------------------------

    def fail_next(self, method: str, path_regex: str, status: int, times: int = 1, *, reason: str | None = None,
                  message: str | None = None, retry_after: int | None = None) -> None:
        """Answer the next ``times`` requests whose method is ``method`` (``"*"``: any) and whose decoded
        ``path?query`` matches ``path_regex`` (``re.search``) with a ``Status`` error ``status``. A 429
        carries ``Retry-After`` and ``details.retryAfterSeconds`` (``retry_after``, default 1)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex), status, times,
                                       reason or _DEFAULT_REASONS.get(status, "InternalError"),
                                       message or _DEFAULT_MESSAGES.get(status, f"injected fault {status}"),
                                       retry_after))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            for gate in self._gates:
                gate.release()
            self._gates.clear()

    def pause(self, method: str, path_regex: str, *, timeout: float = 30.0) -> Gate:
        """Hold matching requests (before they are served) until the returned gate is released
        (or ``timeout`` passes, so that a failing test cannot hang)."""
        gate = Gate(method, path_regex, timeout)
        with self._lock:
            self._gates.append(gate)
        return gate

    def expire_watches(self) -> None:
        """Compact history at the current resourceVersion: every open watch gets an in-stream ``ERROR``
        410 and ends, and watches or continue tokens from older resourceVersions answer 410."""
        with self._lock:
            self._compact_to(self._rv)
            for w in self._watchers:
                w.expired = True
            self._cond.notify_all()

    def compact(self, rv: int | None = None) -> None:
        """Forget history up to ``rv`` (default: now); lagging watches and older continue tokens get 410."""
        with self._lock:
            self._compact_to(self._rv if rv is None else rv)
            for w in self._watchers:
                if w.cursor < self._compacted:
                    w.expired = True
            self._cond.notify_all()

    def bookmark_now(self) -> None:
        """Make every watch that asked for bookmarks send one now."""
        with self._lock:
            for w in self._watchers:
                w.force_bookmark = True
            self._cond.notify_all()

    def drop_connections(self) -> None:
        """Cut every open connection (watches end without their last chunk); new connections still work."""
        with self._lock:
            conns = list(self._connections)
            for w in self._watchers:
                w.closed = True
            self._cond.notify_all()
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    def wait_for_watches(self, count: int, timeout: float = 5.0, *, plural: str | None = None) -> bool:
        """Wait until at least ``count`` watches (of ``plural``, if given) are open."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                n = sum(1 for w in self._watchers if plural is None or w.res.plural == plural)
                if n >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))

    # -- request log --------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._requests)

    def requests_matching(self, method: str | None = None, path_regex: str | None = None, *,
                          watch: bool | None = None) -> list[RequestRecord]:
        pattern = re.compile(path_regex) if path_regex else None
        return [r for r in self.requests
                if (method is None or r.method == method.upper())
                and (pattern is None or pattern.search(r.target))
                and (watch is None or r.watch == watch)]

    def count(self, method: str | None = None, path_regex: str | None = None, *, watch: bool | None = None) -> int:
        return len(self.requests_matching(method, path_regex, watch=watch))

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # -- internals: connections ---------------------------------------------------------------------

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)

    # -- internals: storage -------------------------------------------------------------------------

    def _compact_watches(self, rv: int) -> None:
        """Forget the watch history up to ``rv`` (watches from older versions get 410)."""
        if rv <= self._compacted:
            return
        self._compacted = rv
        idx = bisect.bisect_right(self._log_rvs, rv)
        del self._log[:idx]
        del self._log_rvs[:idx]

    def _compact_to(self, rv: int) -> None:
        """Compaction in etcd: the watch history and the consistent snapshots of paged lists."""
        self._compact_watches(rv)
        if rv > self._token_floor:
            self._token_floor = rv
            for sid in [s for s, (srv, _) in self._snapshots.items() if srv < rv]:
                del self._snapshots[sid]

    def _commit(self, res: Resource, key: str, new: JSON, etype: str, prev: JSON) -> JSON:
        """Store ``new`` (None: delete) under a fresh resourceVersion and log the event. Lock held."""
        self._rv += 1
        rv = self._rv
        store = self._store[res.rid]
        if new is None:
            obj = _clone(prev)
            obj["metadata"]["resourceVersion"] = str(rv)
            store.pop(key, None)
        else:
            obj = new
            obj["metadata"]["resourceVersion"] = str(rv)
            store[key] = obj
        self._log.append(_Entry(rv, res.rid, etype, obj, prev))
        self._log_rvs.append(rv)
        if len(self._log) > self.history_limit:  # the watch cache's window (continue tokens are unaffected)
            self._compact_watches(self._log_rvs[len(self._log) - self.history_limit - 1])
        self._cond.notify_all()
        return obj

    # -- internals: routing -------------------------------------------------------------------------

    def _route(self, path: str) -> _Route | None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        watch_path = False
        if rest and rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = self._resources.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        res = self._resources.get((group, version, rest[0]))
        if res is None:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if namespace is not None and not res.namespaced:
            return None
        if res.namespaced and name is not None and namespace is None:
            return None
        if sub is not None and sub != "status" and sub not in res.subresources:
            return None
        if sub == "status" and not res.status:
            return None
        return _Route(res, version, namespace, name, sub, watch_path)

    def _handle(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        target = unquote(path) + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        method = h.command.upper()
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        body: JSON = None
        body_error = False
        if raw:
            try:
                body = _dec.decode(raw)
            except msgspec.DecodeError:
                body, body_error = raw.decode("utf-8", "replace"), True
        is_watch = method == "GET" and (query.get("watch") in ("true", "1") or "/watch/" in path)

        def log(status: int) -> None:
            with self._lock:
                self._requests.append(RequestRecord(method, path, query, status, body, content_type, is_watch,
                                                    time.monotonic()))

        try:
            if self.token is not None and h.headers.get("Authorization") != f"Bearer {self.token}":
                raise _Fail(401, "Unauthorized", "Unauthorized")
            self._inject(method, target)
            if path in ("/healthz", "/readyz", "/livez"):
                log(200)
                h.send_text(200, "ok")
                return
            if path == "/version":
                log(200)
                h.send_json(200, {"major": "1", "minor": "20", "gitVersion": "v1.20.2-kaisched-fake",
                                  "platform": "linux/amd64"})
                return
            route = self._route(path)
            if route is None:
                raise _PAGE_NOT_FOUND
            if body_error:
                raise _bad_request(f"the body of the request could not be decoded as JSON: {str(body)[:100]}")
            if is_watch:
                if route.name is not None:
                    raise _Fail(405, "MethodNotAllowed", "watch of a single object: use a fieldSelector "
                                "metadata.name=<name> on the collection")
                self._watch(h, route, query, log)
                return
            code, out = self._serve(method, route, query, body, content_type)
        except _Fail as fail:
            log(fail.code)
            h.send_json(fail.code, fail.status(), fail.headers)
            return
        except (OSError, ValueError):
            raise  # the connection went away (handled by _Handler.handle)
        except Exception as exc:  # a bug in the fake: answer it rather than hang the client
            log(500)
            h.send_json(500, _status_failure(500, "InternalError", f"fake API server bug: {exc!r}"))
            return
        log(code)
        h.send_json(code, out)

    def _inject(self, method: str, target: str) -> None:
        gate = None
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.method in ("*", method) and fault.pattern.search(target):
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    details: dict[str, Any] | None = None
                    headers: dict[str, str] = {}
                    if fault.retry_after is not None:
                        details = {"retryAfterSeconds": fault.retry_after}
                        headers["Retry-After"] = str(fault.retry_after)
                    raise _Fail(fault.status, fault.reason, fault.message, details, headers)
            for g in self._gates:
                if not g.released and g.matches(method, target):
                    gate = g
                    break
        if gate is not None:
            gate.hold()

    # -- internals: verbs ---------------------------------------------------------------------------

    def _serve(self, method: str, route: _Route, query: dict[str, str], body: JSON,
               content_type: str) -> tuple[int, JSON]:
        res = route.res
        if route.name is None:
            if method == "GET":
                return 200, self._list(route, query)
            if method == "POST":
                return 201, self._create(route, body, query)
            if method == "DELETE":
                return 200, self._delete_collection(route, query, body)
            raise _Fail(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                        f"resource ({method} {res.qualified})")
        if route.sub in ("binding", "eviction"):
            if method != "POST":
                raise _Fail(405, "MethodNotAllowed", f"the server does not allow this method on {route.sub}")
            if route.sub == "binding":
                return self._bind(route, body)
            return self._evict(route, body)
        if method == "GET":
            with self._lock:
                obj = self._store[res.rid].get(res.key(route.namespace, route.name))
                if obj is None:
                    raise _not_found(res, route.name)
                return 200, obj
        if method == "PUT":
            return 200, self._update(route, body, patch=None)
        if method == "PATCH":
            return 200, self._update(route, body, patch=content_type)
        if method == "DELETE":
            return 200, self._delete(route, query, body)
        raise _Fail(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource "
                    f"({method})")

    def _filter(self, route: _Route, query: Mapping[str, str]) -> _Filter:
        return _Filter(route.namespace, parse_label_selector(query.get("labelSelector", "")),
                       parse_field_selector(query.get("fieldSelector", ""), route.res))

    def _list_item(self, res: Resource, obj: JSON) -> JSON:
        if res.crd:
            return obj
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    def _list(self, route: _Route, query: Mapping[str, str]) -> JSON:
        res = route.res
        flt = self._filter(route, query)
        limit_text = query.get("limit", "")
        try:
            limit = int(limit_text) if limit_text else 0
        except ValueError:
            raise _bad_request(f"invalid limit {limit_text!r}") from None
        if query.get("resourceVersion") == "0":
            limit = 0  # served from the watch cache: the real server ignores limit then
        token = query.get("continue", "")
        with self._lock:
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    sid, start = str(decoded["id"]), str(decoded["start"])
                except (ValueError, KeyError, TypeError):
                    raise _bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                       "(version meta.k8s.io/v1)") from None
                snap = self._snapshots.get(sid)
                if snap is None or snap[0] < self._token_floor:
                    raise _Fail(410, "Expired", "The provided continue parameter is too old to display a "
                                "consistent list result. You can start a new list without the continue "
                                "parameter.")
                rv, items = snap
            else:
                rv = self._rv
                items = [o for _, o in sorted(self._store[res.rid].items()) if flt.matches(o)]
                sid, start = "", ""
                if limit and len(items) > limit:
                    sid = uuid.uuid4().hex
                    self._snapshots[sid] = (rv, items)
                    while len(self._snapshots) > 64:
                        self._snapshots.popitem(last=False)
        if start:
            keys = [res.key(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in items]
            begin = bisect.bisect_right(keys, start)
        else:
            begin = 0
        page = items[begin:begin + limit] if limit else items[begin:]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and begin + limit < len(items):
            last = page[-1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"id": sid, "rv": rv, "start": res.key(last.get("namespace"), last["name"])}).encode()).decode()
            if not query.get("labelSelector") and not query.get("fieldSelector"):
                meta["remainingItemCount"] = len(items) - begin - limit
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version(route.version), "metadata": meta,
                "items": [self._list_item(res, o) for o in page]}

    def _create(self, route: _Route, body: JSON, query: Mapping[str, str]) -> JSON:
        res = route.res
        if not isinstance(body, dict):
            raise _bad_request(f"a {res.kind} object is required in the body")
        if body.get("kind") not in (None, res.kind):
            raise _bad_request(f"the kind {body.get('kind')!r} of the body does not match {res.kind}")
        new = _clone(body)
        new["apiVersion"] = res.api_version(route.version)
        new["kind"] = res.kind
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != route.namespace:
                raise _bad_request("the namespace of the provided object does not match the namespace sent on "
                                   "the request")
            if route.namespace is None:
                raise _PAGE_NOT_FOUND
            meta["namespace"] = route.namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))
        name = meta.get("name")
        if not name:
            raise _invalid(res, "", "metadata.name", "Required value: name or generateName is required")
        for drop in ("resourceVersion", "uid", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(drop, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if res.generation:
            meta["generation"] = 1
        with self._lock:
            self._prepare_create(res, new)
            key = res.key(route.namespace, name)
            if key in self._store[res.rid]:
                raise _Fail(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))
            if query.get("dryRun"):
                return new
            return self._commit(res, key, new, "ADDED", None)

    def _prepare_create(self, res: Resource, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        if res.rid == "/pods":
            spec = obj.get("spec")
            if not isinstance(spec, dict) or not spec.get("containers"):
                raise _invalid(res, name, "spec.containers", "Required value")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("enableServiceLinks", True)
            self._admit_priority(res, obj)
            obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        elif res.rid == "/namespaces":
            obj["status"] = {"phase": "Active"}
        elif res.rid == "/nodes":
            pass  # nodes may set their status on create
        elif res.status:
            obj.pop("status", None)
            if not res.crd:
                obj["status"] = {}

    def _admit_priority(self, res: Resource, pod: JSON) -> None:
        spec = pod["spec"]
        name = pod["metadata"]["name"]
        classes = self._store["scheduling.k8s.io/priorityclasses"]
        class_name = spec.get("priorityClassName")
        value = 0
        policy = "PreemptLowerPriority"
        if class_name:
            pc = classes.get(class_name)
            if pc is None:
                raise _Fail(403, "Forbidden", f'pods "{name}" is forbidden: no PriorityClass with name '
                            f"{class_name} was found", _details(res, name))
            value = int(pc.get("value", 0))
            policy = pc.get("preemptionPolicy") or policy
        else:
            default = next((pc for pc in classes.values() if pc.get("globalDefault")), None)
            if default is not None:
                spec["priorityClassName"] = default["metadata"]["name"]
                value = int(default.get("value", 0))
                policy = default.get("preemptionPolicy") or policy
        spec.setdefault("preemptionPolicy", policy)
        if "priority" in spec and spec["priority"] != value:
            raise _Fail(403, "Forbidden", f'pods "{name}" is forbidden: the integer value of priority '
                        f"({spec['priority']}) must not be provided in pod spec; priority admission controller "
                        f"computed {value} from the given PriorityClass name", _details(res, name))
        spec["priority"] = value

    def _update(self, route: _Route, body: JSON, *, patch: str | None) -> JSON:
        res = route.res
        name = route.name or ""
        key = res.key(route.namespace, name)
        with self._lock:
            old = self._store[res.rid].get(key)
            if old is None:
                raise _not_found(res, name)
            if patch is None:
                if not isinstance(body, dict):
                    raise _bad_request(f"a {res.kind} object is required in the body")
                new = _clone(body)
                meta = new.get("metadata")
                if not isinstance(meta, dict):
                    raise _bad_request("metadata must be an object")
                if meta.get("name") != name:
                    raise _bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                       f"the URL ({name})")
                precondition = meta.get("resourceVersion")
            else:
                new = _clone(self._apply_patch(res, old, body, patch))
                meta = new.get("metadata")
                if not isinstance(meta, dict):
                    raise _bad_request("metadata must be an object")
                precondition = meta.get("resourceVersion")
            if precondition and precondition != old["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            if route.sub == "status":
                status = new.get("status")
                new = _clone(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            else:
                self._keep_immutable(res, old, new)
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if res.generation and _spec_part(new) != _spec_part(old):
                new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
            if new == old:
                return old  # a no-op: the real server does not write (same resourceVersion)
            nmeta = new["metadata"]
            if (nmeta.get("deletionTimestamp") and not nmeta.get("finalizers") and old["metadata"].get("finalizers")
                    and int(nmeta.get("deletionGracePeriodSeconds") or 0) == 0):
                return self._commit(res, key, None, "DELETED", new)  # the last finalizer is gone
            return self._commit(res, key, new, "MODIFIED", old)

    def _apply_patch(self, res: Resource, old: JSON, body: JSON, content_type: str) -> JSON:
        if content_type == "application/merge-patch+json":
            if not isinstance(body, dict):
                raise _bad_request("a merge patch must be a JSON object")
            return merge_patch(old, body)
        if content_type == "application/strategic-merge-patch+json":
            if res.crd:
                raise _Fail(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                            "accepted media types include: application/json-patch+json, "
                            "application/merge-patch+json, application/apply-patch+yaml")
            if not isinstance(body, dict):
                raise _bad_request("a strategic merge patch must be a JSON object")
            return strategic_merge_patch(old, body)
        if content_type == "application/json-patch+json":
            return json_patch(old, body)
        raise _Fail(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted "
                    f"media types include: application/json-patch+json, application/merge-patch+json, "
                    f"application/apply-patch+yaml (got {content_type!r})")

    def _keep_immutable(self, res: Resource, old: JSON, new: JSON) -> None:
        meta, old_meta = new["metadata"], old["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["name"] = old_meta["name"]
        if res.namespaced:
            meta["namespace"] = old_meta["namespace"]
        if res.status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if res.rid == "/pods":
            before, after = _mutable_pod_spec(old.get("spec")), _mutable_pod_spec(new.get("spec"))
            if before != after:
                raise _invalid(res, old_meta["name"], "spec", "Forbidden: pod updates may not change fields other "
                               "than `spec.containers[*].image`, `spec.initContainers[*].image`, "
                               "`spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing "
                               "tolerations)")

    def _delete(self, route: _Route, query: Mapping[str, str], body: JSON) -> JSON:
        opts = body if isinstance(body, dict) else {}
        grace_text = query.get("gracePeriodSeconds")
        try:
            grace = int(grace_text) if grace_text not in (None, "") else opts.get("gracePeriodSeconds")
        except ValueError:
            raise _bad_request(f"invalid gracePeriodSeconds {grace_text!r}") from None
        with self._lock:
            return self._delete_locked(route.res, route.namespace, route.name or "", grace,
                                       opts.get("preconditions") or {})

    def _delete_locked(self, res: Resource, namespace: str | None, name: str, grace: int | None,
                       preconditions: Mapping[str, Any]) -> JSON:
        key = res.key(namespace, name)
        old = self._store[res.rid].get(key)
        if old is None:
            raise _not_found(res, name)
        meta = old["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise _Fail(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": Precondition '
                        f"failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta.get('uid')}",
                        _details(res, name))
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise _Fail(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": Precondition '
                        f"failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                        f"ResourceVersion in object meta: {meta.get('resourceVersion')}", _details(res, name))
        if res.rid == "/pods":
            spec, status = old.get("spec") or {}, old.get("status") or {}
            if grace is None:
                grace = int(meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30)))
            if (not self.graceful_pod_deletion or not spec.get("nodeName")
                    or status.get("phase") in ("Succeeded", "Failed")):
                grace = 0
            if grace > 0:
                if meta.get("deletionTimestamp") and grace >= int(meta.get("deletionGracePeriodSeconds", 0)):
                    return old
                new = _clone(old)
                new["metadata"]["deletionTimestamp"] = (datetime.now(UTC) + timedelta(seconds=grace)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._commit(res, key, new, "MODIFIED", old)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds") or 0) == 0:
                return old
            new = _clone(old)
            new["metadata"].setdefault("deletionTimestamp", _now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._commit(res, key, new, "MODIFIED", old)
        return self._commit(res, key, None, "DELETED", old)

    def _delete_collection(self, route: _Route, query: Mapping[str, str], body: JSON) -> JSON:
        flt = self._filter(route, query)
        res = route.res
        with self._lock:
            doomed = [o for _, o in sorted(self._store[res.rid].items()) if flt.matches(o)]
            for obj in doomed:
                self._delete_locked(res, obj["metadata"].get("namespace"), obj["metadata"]["name"], None, {})
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version(route.version),
                "metadata": {"resourceVersion": str(self._rv)}, "items": [self._list_item(res, o) for o in doomed]}

    def _bind(self, route: _Route, body: JSON) -> tuple[int, JSON]:
        res = route.res
        name = route.name or ""
        if not isinstance(body, dict):
            raise _bad_request("a Binding object is required in the body")
        bmeta = body.get("metadata") or {}
        if bmeta.get("name") and bmeta["name"] != name:
            raise _bad_request("name in URL does not match name in Binding object")
        target = body.get("target") or {}
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise _invalid(res, name, "target.name", "Required value")
        if target.get("kind") not in (None, "", "Node"):
            raise _invalid(res, name, "target.kind", f'Unsupported value: "{target.get("kind")}": supported '
                           'values: "Node"')
        key = res.key(route.namespace, name)
        with self._lock:
            pod = self._store[res.rid].get(key)
            if pod is None:
                raise _not_found(res, name)
            conflict = None
            if pod["metadata"].get("deletionTimestamp"):
                conflict = f"pod {name} is being deleted, cannot be assigned to a host"
            elif (pod.get("spec") or {}).get("nodeName"):
                conflict = f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            if conflict:
                raise _Fail(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": {conflict}',
                            {"name": name, "kind": "pods/binding"})
            new = _clone(pod)
            new.setdefault("spec", {})["nodeName"] = node
            if bmeta.get("annotations"):
                new["metadata"].setdefault("annotations", {}).update(bmeta["annotations"])
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": _now()})
            status["conditions"] = conditions
            self._commit(res, key, new, "MODIFIED", pod)
        return 201, _status_success(201)

    def _evict(self, route: _Route, body: JSON) -> tuple[int, JSON]:
        res = route.res
        name = route.name or ""
        if not isinstance(body, dict):
            raise _bad_request("an Eviction object is required in the body")
        api_version = body.get("apiVersion") or "policy/v1beta1"
        if api_version not in ("policy/v1", "policy/v1beta1") or (api_version == "policy/v1"
                                                                  and not self.eviction_v1):
            version = api_version.rpartition("/")[2]
            raise _bad_request(f'Eviction in version "{version}" cannot be handled as a Eviction: no kind "Eviction" '
                               f'is registered for version "{api_version}" in scheme '
                               '"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"')
        if body.get("kind") not in (None, "Eviction"):
            raise _bad_request(f"an Eviction is required, got {body.get('kind')}")
        emeta = body.get("metadata") or {}
        if emeta.get("name") and emeta["name"] != name:
            raise _bad_request("name in URL does not match name in Eviction object")
        opts = body.get("deleteOptions") or {}
        with self._lock:
            self._delete_locked(res, route.namespace, name, opts.get("gracePeriodSeconds"),
                                opts.get("preconditions") or {})
        return 201, _status_success(201)

    # -- internals: watch ---------------------------------------------------------------------------

    def _watch(self, h: _Handler, route: _Route, query: Mapping[str, str],
               log: Callable[[int], None]) -> None:
        res = route.res
        flt = self._filter(route, query)
        rv_text = query.get("resourceVersion", "")
        timeout_text = query.get("timeoutSeconds", "")
        try:
            timeout = float(timeout_text) if timeout_text else self.default_watch_timeout
            start_rv = int(rv_text) if rv_text else 0
        except ValueError:
            raise _bad_request(f"invalid resourceVersion {rv_text!r} or timeoutSeconds {timeout_text!r}") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        now = time.monotonic()
        initial: list[tuple[str, JSON]] = []
        too_old: int | None = None
        with self._lock:
            if rv_text in ("", "0"):
                initial = [("ADDED", o) for _, o in sorted(self._store[res.rid].items()) if flt.matches(o)]
                cursor = self._rv
            elif start_rv < self._compacted:
                too_old, cursor = start_rv, start_rv
            else:
                cursor = start_rv
            w = _Watcher(res, route.version, flt, cursor, bookmarks, now + timeout, now + self.bookmark_interval)
            if too_old is None:
                self._watchers.add(w)
                self._cond.notify_all()
        log(200)
        try:
            h.start_chunked()
            if too_old is not None:
                h.chunk(self._expired_line(too_old))
                h.end_chunked()
                return
            for etype, obj in initial:
                h.chunk(_enc.encode({"type": etype, "object": obj}) + b"\n")
            while True:
                lines, finished = self._next_lines(w)
                for line in lines:
                    h.chunk(line)
                if finished is None:
                    continue
                if finished:
                    h.end_chunked()
                else:  # dropped: cut the connection without the last chunk
                    with contextlib.suppress(OSError):
                        h.connection.shutdown(socket.SHUT_RDWR)
                    h.close_connection = True
                return
        finally:
            with self._lock:
                self._watchers.discard(w)
                self._cond.notify_all()

    def _expired_line(self, rv: int) -> bytes:
        status = _status_failure(410, "Expired", f"too old resource version: {rv} ({self._compacted})")
        return _enc.encode({"type": "ERROR", "object": status}) + b"\n"

    def _next_lines(self, w: _Watcher) -> tuple[list[bytes], bool | None]:
        """The next lines for a watcher; ``finished`` True: end the stream cleanly, False: cut it, None: go on."""
        with self._cond:
            while True:
                if w.closed or self._httpd is None:
                    return [], False
                if w.expired or w.cursor < self._compacted:
                    return [self._expired_line(w.cursor)], True
                idx = bisect.bisect_right(self._log_rvs, w.cursor)
                if idx < len(self._log):
                    entries = self._log[idx:]
                    w.cursor = self._log_rvs[-1]
                    break
                now = time.monotonic()
                if now >= w.deadline:
                    return [], True
                if w.bookmarks and (w.force_bookmark or now >= w.next_bookmark):
                    w.force_bookmark = False
                    w.next_bookmark = now + self.bookmark_interval
                    w.cursor = self._rv
                    mark = {"type": "BOOKMARK", "object": {
                        "kind": w.res.kind, "apiVersion": w.res.api_version(w.version),
                        "metadata": {"resourceVersion": str(self._rv), "creationTimestamp": None}}}
                    return [_enc.encode(mark) + b"\n"], None
                wake = w.deadline
                if w.bookmarks:
                    wake = min(wake, w.next_bookmark)
                self._cond.wait(max(0.001, wake - now))
        lines = []
        for e in entries:
            if e.rid != w.res.rid:
                continue
            now_match = e.obj is not None and e.type != "DELETED" and w.flt.matches(e.obj)
            was_match = e.prev is not None and w.flt.matches(e.prev)
            if e.type == "DELETED":
                etype = "DELETED" if was_match else None
            elif now_match and was_match:
                etype = "MODIFIED"
            elif now_match:
                etype = "ADDED"
            elif was_match:
                etype = "DELETED"
            else:
                etype = None
            if etype is not None:
                lines.append(_enc.encode({"type": etype, "object": e.obj}) + b"\n")
        return lines, None


def _spec_part(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _mutable_pod_spec(spec: JSON) -> JSON:
    if not isinstance(spec, dict):
        return spec
    out = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations")}
    for field_name in ("containers", "initContainers"):
        if isinstance(out.get(field_name), list):
            out[field_name] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                               for c in out[field_name]]
    return out


def _qos_class(spec: Mapping[str, Any]) -> str:
    containers = [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                  if isinstance(c, dict)]
    requests_any = False
    guaranteed = True
    for c in containers:
        resources = c.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        if requests or limits:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in limits or str(requests.get(r)) != str(limits.get(r)):
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"

