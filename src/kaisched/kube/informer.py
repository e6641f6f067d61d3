"""A list+watch cache of one resource kind, kept current by a daemon thread.

The loop (what client-go's reflector does, minus its known traps):

1. a paged list (``limit`` + ``continue``; an expired ``continue`` token restarts the list, and after
   three in a row the list is taken in one page), which *replaces* the :class:`Store` wholesale, with the
   differences reported as ``ADDED``/``MODIFIED``/``DELETED`` events;
2. a watch from the list's ``resourceVersion`` with ``allowWatchBookmarks=true`` and a jittered
   ``timeoutSeconds``; the resourceVersion advances on every event, ``BOOKMARK`` included, and an ended
   watch is resumed from it;
3. a 410 (HTTP, or an in-stream ``ERROR`` event) goes back to 1; 429, 5xx, lost connections and other
   errors back off exponentially (the API server may be restarting) and resume where they were.
   Nothing spins: a watch that ends at once without any event backs off too, and so does a 410 that
   follows a relist without any event in between.

Events are applied in the order the server sends them; resourceVersions are never compared for order
(only for equality, to skip no-op updates). The store holds the decoded JSON dicts as the API returned
them; treat them as read-only.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kaisched.kube.api import JSON, Api, ApiError
from kaisched.kube.backoff import Backoff, retry_after_seconds
from kaisched.kube.resources import ResourceKind

__all__ = ["Informer", "Store", "WatchEvent", "gc_paused"]

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

# -- gc pause shared by all informers (gc.disable is process-wide) ------------------------------------

_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for a bulk decode (nests across threads; restores the state)."""
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def _rv_of(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        rv = meta.get("resourceVersion")
        return rv if isinstance(rv, str) else None
    return None


# -- the store -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change applied to a :class:`Store`: ``type`` is ``ADDED``, ``MODIFIED`` or ``DELETED``; ``obj``
    the new object (for ``DELETED``: its last state); ``old`` the previous object, if any."""

    type: str
    key: str
    obj: JSON
    old: JSON = None


class Store:
    """A thread-safe ``key -> object`` map with a ``revision`` bumped on every change."""

    def __init__(self, key: Callable[[Mapping[str, Any]], str]) -> None:
        self._key = key
        self._lock = threading.Lock()
        self._items: dict[str, JSON] = {}
        self._revision = 0

    @property
    def revision(self) -> int:
        """Increases by one for every object added, changed or removed; never decreases."""
        return self._revision

    def get(self, key: str) -> JSON:
        """The object stored under ``key`` (``"<namespace>/<name>"`` or ``"<name>"``), or None."""
        with self._lock:
            return self._items.get(key)

    def snapshot(self) -> list[JSON]:
        """A consistent copy of the list of objects (the objects themselves are shared: do not mutate)."""
        with self._lock:
            return list(self._items.values())

    def versioned_snapshot(self) -> tuple[int, list[JSON]]:
        """``(revision, snapshot())`` taken atomically."""
        with self._lock:
            return self._revision, list(self._items.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def __iter__(self) -> Iterator[str]:
        """The keys (a copy taken now)."""
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def apply(self, etype: str, obj: JSON) -> WatchEvent | None:
        """Apply one watch event in order; returns what changed (None: nothing did)."""
        key = self._key(obj)
        with self._lock:
            old = self._items.get(key)
            if etype == DELETED:
                if old is None:
                    return None
                del self._items[key]
                self._revision += 1
                return WatchEvent(DELETED, key, obj, old)
            if old is not None:
                rv = _rv_of(obj)
                if rv is not None and rv == _rv_of(old):
                    return None  # the same version again (a duplicate): nothing changed
            self._items[key] = obj
            self._revision += 1
            return WatchEvent(ADDED if old is None else MODIFIED, key, obj, old)

    def replace(self, objects: list[JSON]) -> list[WatchEvent]:
        """Make the store hold exactly ``objects``; returns the differences as events."""
        fresh = {self._key(o): o for o in objects}
        events: list[WatchEvent] = []
        with self._lock:
            old_items = self._items
            for key, old in old_items.items():
                if key not in fresh:
                    events.append(WatchEvent(DELETED, key, old, old))
            for key, obj in fresh.items():
                old = old_items.get(key)
                if old is None:
                    events.append(WatchEvent(ADDED, key, obj, None))
                elif _rv_of(obj) is None or _rv_of(obj) != _rv_of(old):
                    events.append(WatchEvent(MODIFIED, key, obj, old))
            self._items = fresh
            self._revision += len(events)
        return events


# -- the informer --------------------------------------------------------------------------------------


class _Gone(Exception):
    """The resourceVersion we watch from was compacted (HTTP or in-stream 410)."""


class Informer:
    """List and watch ``kind`` through ``api`` into :attr:`store`, in a daemon thread (see the module doc).

    ``on_event(event)`` is called from the informer's thread after each change is applied (also for the
    differences found by a relist); exceptions it raises are logged and ignored. ``namespace`` restricts
    to one namespace; ``label_selector``/``field_selector`` are passed to the server. ``watch_timeout``
    is the server-side ``timeoutSeconds`` (jittered up to twice as long, like client-go); ``backoff``
    the delays after errors (default 0.5 s doubling to 30 s, seeded by ``seed``).
    """

    def __init__(
        self,
        api: Api,
        kind: ResourceKind,
        on_event: Callable[[WatchEvent], None] | None = None,
        *,
        page_size: int = 500,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: float = 300.0,
        read_timeout_margin: float = 30.0,
        backoff: Backoff | None = None,
        min_watch_duration: float = 1.0,
        seed: int | None = None,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if page_size < 0:
            raise ValueError(f"page_size must be >= 0 (0: one page), got {page_size}")
        if watch_timeout <= 0:
            raise ValueError(f"watch_timeout must be > 0, got {watch_timeout}")
        self.api = api
        self.kind = kind
        self.on_event = on_event
        self.page_size = page_size
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.read_timeout_margin = read_timeout_margin
        self.min_watch_duration = min_watch_duration
        self.name = name or f"informer-{kind.plural}"
        self._clock = clock
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        #: delays after errors; the informer waits them out itself, interruptibly (the Backoff's sleep is unused)
        self.backoff = backoff if backoff is not None else Backoff(0.5, 30.0, seed=seed)
        self.store = Store(kind.key)
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._rv: str | None = None
        self._events_since_list = 0
        self._stats_lock = threading.Lock()
        #: completed lists (the initial one included)
        self.lists = 0
        #: lists started again because the watched resourceVersion was gone (410)
        self.relists = 0
        #: failed requests and broken streams (410s not included)
        self.errors = 0
        #: watch requests sent
        self.watches = 0
        #: events received on watches (bookmarks included)
        self.events = 0
        #: the last error seen, for logs and health checks
        self.last_error: Exception | None = None

    # -- public ------------------------------------------------------------------------------------

    def start(self) -> Informer:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 0.0) -> bool:
        """Ask the thread to stop; wait up to ``timeout`` seconds. True when it has ended.

        A thread blocked in a watch stops when the stream yields its next event or bookmark or ends
        (at the latest after ``watch_timeout``); it is a daemon thread, so it never holds up exit.
        """
        self._stop.set()
        if self._thread is None:
            return True
        if timeout > 0:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def has_synced(self) -> bool:
        """True once a first full list is in the store."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion the next watch starts from."""
        return self._rv

    # -- the loop ----------------------------------------------------------------------------------

    def _count(self, attr: str) -> None:
        with self._stats_lock:
            setattr(self, attr, getattr(self, attr) + 1)

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    if self._stop.is_set():
                        break
                if self._watch():
                    self.backoff.reset()
                else:  # ended at once without a single event: do not hammer the server
                    self._back_off()
            except _Gone:
                if self._stop.is_set():
                    break
                self._count("relists")
                need_list = True
                log.info("%s: resourceVersion %s expired, relisting", self.name, self._rv)
                if self._events_since_list == 0:  # gone again right after a list: back off first
                    self._back_off()
            except ApiError as err:
                if self._stop.is_set():
                    break
                self._count("errors")
                self.last_error = err
                log.warning("%s: %s", self.name, err)
                self._back_off(retry_after_seconds(err))
            except Exception as err:  # never let the thread die: log, back off, try again
                if self._stop.is_set():
                    break
                self._count("errors")
                self.last_error = err
                log.exception("%s: unexpected error", self.name)
                self._back_off()

    def _back_off(self, at_least: float = 0.0) -> None:
        self._stop.wait(max(self.backoff.next_delay(), min(at_least, self.backoff.maximum)))

    def _list(self) -> None:
        path = self.kind.list_path(self.namespace)
        base = self._params()
        expired_in_a_row = 0
        while True:
            limit = self.page_size if expired_in_a_row < 3 else 0
            items: list[JSON] = []
            token: str | None = None
            rv: str | None = None
            try:
                with gc_paused():
                    while True:
                        params = dict(base)
                        if limit:
                            params["limit"] = str(limit)
                        if token:
                            params["continue"] = token
                        body = self.api.request("GET", path, params=params).body
                        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
                            raise ApiError(0, "InvalidResponse", f"GET {path}: not a list: {str(body)[:200]}")
                        items.extend(body["items"])
                        meta = body.get("metadata") or {}
                        rv = meta.get("resourceVersion")
                        token = meta.get("continue") or None
                        if self._stop.is_set():
                            return
                        if not token:
                            break
            except ApiError as err:
                if err.status == 410 and token:
                    expired_in_a_row += 1
                    log.info("%s: list continue token expired, listing again", self.name)
                    continue
                raise
            break
        kind_fields = {"kind": self.kind.kind, "apiVersion": self.kind.api_version}
        for obj in items:  # list items of built-in kinds come without kind/apiVersion: add them
            if isinstance(obj, dict) and "kind" not in obj:
                obj.update(kind_fields)
        events = self.store.replace(items)
        self._rv = rv
        self._events_since_list = 0
        self._count("lists")
        self._synced.set()
        self._emit(events)

    def _watch(self) -> bool:
        """One watch request, until the stream ends; returns whether it was worth it (events, or long)."""
        timeout = max(1, int(self.watch_timeout * (1.0 + self._rng.random())))
        params = self._params()
        params.update({"allowWatchBookmarks": "true", "timeoutSeconds": str(timeout)})
        if self._rv:
            params["resourceVersion"] = self._rv
        path = self.kind.list_path(self.namespace)
        started = self._clock()
        received = 0
        self._count("watches")
        stream = self.api.stream(path, params=params, timeout=timeout + self.read_timeout_margin)
        try:
            for line in stream:
                if not isinstance(line, dict):
                    raise ApiError(0, "InvalidResponse", f"watch {path}: not an event: {str(line)[:200]}")
                etype = line.get("type")
                obj = line.get("object")
                if etype == "ERROR":
                    status = obj if isinstance(obj, dict) else {}
                    code = int(status.get("code") or 500)
                    if code == 410:
                        raise _Gone()
                    raise ApiError(code, str(status.get("reason") or "WatchError"),
                                   str(status.get("message") or status), status)
                if not isinstance(obj, dict):
                    raise ApiError(0, "InvalidResponse", f"watch {path}: event without object: {str(line)[:200]}")
                received += 1
                self._count("events")
                rv = _rv_of(obj)
                if etype in (ADDED, MODIFIED, DELETED):
                    change = self.store.apply(etype, obj)
                    if rv:
                        self._rv = rv
                    self._events_since_list += 1
                    if change is not None:
                        self._emit([change])
                elif etype == "BOOKMARK":
                    if rv:
                        self._rv = rv
                else:
                    log.warning("%s: unknown watch event type %r ignored", self.name, etype)
                if self._stop.is_set():
                    break
        except ApiError as err:
            if err.status == 410:
                raise _Gone() from err
            raise
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return received > 0 or self._clock() - started >= self.min_watch_duration

    def _emit(self, events: list[WatchEvent]) -> None:
        if self.on_event is None:
            return
        for event in events:
            try:
                self.on_event(event)
            except Exception:
                log.exception("%s: on_event failed for %s %s", self.name, event.type, event.key)
