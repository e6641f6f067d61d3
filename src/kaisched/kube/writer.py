"""Apply a cycle's operations to the API server without ever blocking the cycle.

:class:`ClusterWriter` keeps one *lane* per written object: operations on one object run one at a time, in
submission order; lanes run concurrently on the writer's threads. :meth:`ClusterWriter.submit` only queues and
returns.

* **Concurrency adapts to the server** (:class:`~kaisched.kube.concurrency.AdaptiveLimit`): at most ``limit``
  requests are in flight, starting at ``workers``; every answer in time raises the limit (additively, up to
  ``max_workers``, by default ``workers``: ``kaisched run`` starts at 16 and may reach 64), a 429/503/504
  halves it and its ``Retry-After`` holds every new request back that long, and answers that queue (slower
  than the limit's latency target) lower it. The requests go over the client's pool of persistent connections
  (:data:`kaisched.kube.client.POOL_LIMITS`).
* **Priorities**: a lane whose queue holds an urgent operation (a PodGroup creation, a pod-grouper patch, a bind,
  an eviction, a claim release: ``Operation.priority``) is started before any background one (events, statuses,
  conditions, nominations); while urgent lanes wait for a thread or for a creation, background lanes run one at a
  time, and while urgent lanes run, on at most a quarter of the limit.
* **Events** are written as client-go's recorder writes them: asynchronously, by a few lanes at a time
  (``event_workers``, 2; while urgent operations wait for a thread or for a PodGroup's creation, none, but for one
  every ``event_hold`` seconds, 1), after everything else that is ready, from a
  queue of at most ``max_queued_events`` (1,000; a later event is dropped and counted:
  ``events_filtered_total{reason="queue_full"}``). A burst of binds is neither queued behind its own
  ``Scheduled`` events nor slowed down by them at the server.
* **Order across objects** (``Operation.after``): a bind waits until the creation of its pod's PodGroup submitted
  before it (``Operation.creates``) is done, as KAI's pod-grouper creates the PodGroup before the scheduler binds
  the pod; creations and pod patches of a cycle go out at once, in parallel, ahead of the cycle's binds. When
  the creation failed for good, the bind fails without being sent (the pod stays pending; the next cycle groups it
  again).

* **Coalescing**: an operation with a ``slot`` (status, condition, annotations, ...) replaces a still-queued
  operation of the same lane and slot, so a slow object never accumulates stale status writes; an operation
  identical to the one last written on its slot less than ``settle_timeout`` seconds ago is dropped (the cache
  has not caught up with our own write yet).
* **Binds are never duplicated**: a :class:`~kaisched.kube.operations.Bind` for a pod that already has one in
  flight is dropped, and so is a second :class:`~kaisched.kube.operations.Evict`.
* **In flight** (the contract with the scheduling loop): a pod is in :meth:`~ClusterWriter.in_flight_binds`
  from the moment its Bind is submitted until one of

  1. the bind failed for good (then at once: the next cycle may place the pod again);
  2. the bind succeeded and :meth:`~ClusterWriter.settle` sees the pod in the caller's cache with
     ``spec.nodeName`` set, or gone;
  3. the bind succeeded and :meth:`~ClusterWriter.forget` was called for the pod (a ``forget`` before the bind
     finished takes effect when it finishes);
  4. the bind succeeded more than ``settle_timeout`` seconds ago (a safety net for a cache that never shows it).

  The loop treats those pods as bound to the given node (``Binding`` in KAI's terms) in its next snapshot.
  :meth:`~ClusterWriter.in_flight_evictions` works the same way, settling when the cache shows the pod with a
  ``deletionTimestamp`` or gone; the loop treats those pods as terminating. A pod the cache shows under the same
  name with another uid is gone too (a controller recreated it, as the Training Operator does an evicted
  replica's pod within milliseconds): its in-flight bind or eviction settles, so the new pod is not shown bound
  or terminating.
* **Retries**: a refusal that is worth retrying (429, 5xx, no connection) is retried with exponential backoff
  (``backoff_base * 2**n`` capped at ``backoff_max``) up to ``max_attempts`` attempts in all; a multi-step
  operation resumes at the step that failed. Refusals that mean "already done" (see each request's
  ``done_when``) are success. Anything else, or the last failed attempt, is a :class:`Failure`: logged, passed
  to ``on_failure``, and reported the way KAI does (``FailedBinding`` event and ``PodScheduled=False/BindingError``
  for a bind, ``EvictionFailed`` for an eviction, ...: ``Operation.failure_ops``). A failed Event is only logged.
* **After success** the operation's ``success_ops`` are queued (the ``Scheduled`` event of a bind, the
  PodGroup's ``Evict`` event of an eviction), and a bind's latency (submission to the server's answer) goes to
  ``metrics.observe_bind``.
* **DRA claims**: a Bind's claim steps (its first requests) and :class:`~kaisched.kube.operations.ReleaseClaim`
  are carried out by :attr:`ClusterWriter.claims` (:class:`~kaisched.kube.claims.ClaimStatusWriter`); the claims
  of submitted binds are shown reserved by its ``overlay`` until the cache shows them (or the bind fails).
* **Fencing** (with leader election): a writer belongs to one leadership term and is given its ``fence``, a
  cheap check without I/O (``LeaderElector.holds(term)``: the term is current and its Lease valid with margin).
  The fence is asked when a batch is submitted, before every request of every operation (retries included) and,
  through :class:`FencedApi`, before every write the DRA claim steps send. The first time it fails, the writer
  is *fenced* for good: the operation at hand and everything still queued is dropped (one warning, the
  ``fenced_writes_dropped_total`` metric per operation), in-flight binds and evictions are forgotten, and
  every later submission (follow-up events, failure reports, the next cycle's plan) is dropped on arrival. No
  write that reaches the fence after the lease lapsed leaves the process. What client-side fencing cannot call
  back is a request that passed the fence just before the process was paused and leaves after it resumes: at
  most one per request slot (``max_workers``: ``kaisched run`` keeps it at ``workers``, 16, under leader election
  for that reason), each logged (``a write that passed the fence was answered after the lease lapsed``); a
  pause shorter than the margin (``lease_duration - renew_deadline``) is harmless for them.
* **Server-side fencing**: the chart's ValidatingAdmissionPolicy (:data:`~kaisched.kube.leader.FENCING_POLICY`)
  makes the API server refuse those too, and any write of a replica that is not the Lease's holder
  (:func:`is_fencing_denial`: a 403 or 422 that names the policy). Such a refusal is lost leadership: the writer is
  fenced for good as above (the refused operation and the rest of the plan dropped and counted, no failure report),
  and ``on_denied`` is called once so that the scheduler ends the term and exits.
* **Shutdown**: :meth:`~ClusterWriter.close` (on leadership loss: drop everything; on a graceful stop:
  ``drain=True`` first). A new leader starts with a new writer and rebuilds its view from the API.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kaisched.framework.result import Placement
from kaisched.kube.api import JSON, Api, ApiError, Response
from kaisched.kube.claims import ClaimStatusWriter
from kaisched.kube.concurrency import AdaptiveLimit, Ticket, is_pushback
from kaisched.kube.leader import FENCING_POLICY
from kaisched.kube.logs import get_logger
from kaisched.kube.operations import BACKGROUND, EVENTS, URGENT, Bind, Evict, Lookup, Operation, Request

if TYPE_CHECKING:
    from kaisched.kube.metrics import SchedulerMetrics

log = get_logger("kaisched.kube.writer")


@dataclass(frozen=True, slots=True)
class Failure:
    """An operation that failed for good: the refusal, how many attempts were made, which request failed."""

    operation: Operation
    error: ApiError
    attempts: int
    step: int


class WriterClosed(RuntimeError):
    """:meth:`ClusterWriter.submit` after :meth:`ClusterWriter.close`."""


Fence = Callable[[], bool]
"""``fence()``: True while the writer may write (its leadership term is current and its Lease valid with margin).
Called before every write: it must be cheap and never block on I/O."""


class Fenced(Exception):
    """A write not sent because the fence failed (raised by :class:`FencedApi`; the writer drops the operation)."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: not sent, the lease is not held")
        self.method = method
        self.path = path


def is_fencing_denial(err: ApiError) -> bool:
    """The API server refused the write because of the fencing policy: the writer's replica does not hold the Lease
    as the server sees it. The server names the policy in the message and answers 403 (the policy's validation, whose
    reason is Forbidden) or 422 (a binding with ``parameterNotFoundAction: Deny`` that finds no Lease; the chart's
    binding admits instead, so that a missing Lease never blocks other users)."""
    return err.status in (403, 422) and FENCING_POLICY in err.message


class FencedApi:
    """An :class:`~kaisched.kube.api.Api` whose writes (every method but GET) are sent only while ``fence()``
    holds; otherwise :class:`Fenced` is raised before anything goes out. Reads and watches pass through."""

    def __init__(self, api: Api, fence: Fence) -> None:
        self._api = api
        self._fence = fence

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: JSON = None,
                content_type: str = "application/json") -> Response:
        if method != "GET" and not self._fence():
            raise Fenced(method, path)
        return self._api.request(method, path, params=params, body=body, content_type=content_type)

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[JSON]:
        return self._api.stream(path, params=params, timeout=timeout)


@dataclass(slots=True)
class _Flight:
    placement: Placement
    submitted: float
    done_at: float | None = None  # clock() when the operation succeeded
    forgotten: bool = False
    uid: str = ""  # the uid of the pod the operation was for ("" when the operation did not name one)

    def replaced(self, pod: Mapping[str, Any] | None) -> bool:
        """The cache shows another pod under this key (same name, new uid): the one written is gone."""
        meta = pod.get("metadata") if pod is not None else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return bool(self.uid and uid and uid != self.uid)


@dataclass(slots=True)
class _Lane:
    queue: deque[Operation] = field(default_factory=deque)
    running: bool = False
    ready: int = -1  # the priority class whose ready queue holds it (-1: none)
    parked: str = ""  # waiting for the creation on this lane to finish (Operation.after)
    priority: int = BACKGROUND  # while running: the class it was started in

    def most_urgent(self) -> int:
        return min(op.priority for op in self.queue)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _fingerprint(op: Operation) -> str:
    return json.dumps([[r.method, r.path, r.content_type, r.body] for r in op.requests()], sort_keys=True,
                      default=str)


class ClusterWriter:
    def __init__(
        self,
        api: Api,
        *,
        workers: int = 16,
        max_workers: int | None = None,
        latency_target: float = 1.0,
        limiter: AdaptiveLimit | None = None,
        event_workers: int = 2,
        event_hold: float = 1.0,
        max_queued_events: int = 1000,
        max_attempts: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utcnow,
        on_failure: Callable[[Failure], None] | None = None,
        metrics: SchedulerMetrics | None = None,
        settle_timeout: float = 60.0,
        lookup: Lookup | None = None,
        fence: Fence | None = None,
        on_denied: Callable[[ApiError], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers: must be at least 1, got {workers}")
        ceiling = workers if max_workers is None else max_workers
        if ceiling < workers:
            raise ValueError(f"max_workers: must be at least workers ({workers}), got {ceiling}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {max_attempts}")
        if event_hold < 0:
            raise ValueError(f"event_hold: must be >= 0 seconds, got {event_hold}")
        if event_workers < 1 or max_queued_events < 1:
            raise ValueError(f"event_workers, max_queued_events: must be at least 1, got {event_workers}, "
                             f"{max_queued_events}")
        self.event_workers = event_workers
        self.event_hold = event_hold  # while urgent writes wait, at most one event starts per this many seconds
        self._last_event_start = float("-inf")
        self.max_queued_events = max_queued_events
        self._events_queued = 0
        self.events_dropped = 0  # events not queued: max_queued_events were waiting
        self._fence = fence
        self._on_denied = on_denied  # called once, when the fencing policy refused a write (is_fencing_denial)
        self._denied = False
        if fence is not None:
            api = FencedApi(api, fence)
        self._api = api
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._stop = threading.Event()
        self._sleep = sleep if sleep is not None else self._interruptible_sleep
        self._clock = clock
        self._now = now
        self._on_failure = on_failure
        self._metrics = metrics
        self.settle_timeout = settle_timeout
        #: the DRA claim steps of binds and releases (``lookup`` reads the caches' claims)
        self.claims = ClaimStatusWriter(api, lookup, clock=clock, settle_timeout=settle_timeout)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._lanes: dict[str, _Lane] = {}
        self._pending = 0  # operations queued or running
        self._binds: dict[str, _Flight] = {}
        self._evictions: dict[str, _Flight] = {}
        self._recent: dict[tuple[str, str], tuple[str, float]] = {}  # (lane, slot) -> (fingerprint, when)
        #: requests in flight: adapts to the server's answers
        self.limiter = limiter if limiter is not None else AdaptiveLimit(
            workers, maximum=ceiling, latency_target=latency_target, clock=clock)
        self._max_threads = max(ceiling, self.limiter.maximum)
        self._threads: list[threading.Thread] = []
        self._idle_threads = 0
        self._work = threading.Condition(self._lock)
        self._ready: tuple[deque[str], ...] = (deque(), deque(), deque())  # lane keys by priority class
        self._running = [0, 0, 0]  # lanes running, by the priority class they were started in
        self._creating: dict[str, int] = {}  # lane -> creations queued or running (Operation.creates)
        self._create_failed: dict[str, tuple[ApiError, float]] = {}  # lane -> why its creation failed, when
        self._parked: dict[str, list[str]] = {}  # lane being created -> lanes waiting for it
        self._closed = False
        self._fenced = False  # the fence failed once: nothing is written any more
        self._seq = 0
        self.failures = 0  # operations that failed for good
        self.completed = 0  # operations that succeeded
        self.fenced_drops = 0  # operations dropped because the fence failed

    # ---- submitting -------------------------------------------------------------------------------
    def submit(self, ops: Iterable[Operation]) -> int:
        """Queue operations (never blocks on the API). Returns how many were queued, coalesced ones included.
        A fenced writer (the fence failed, now or before) drops the whole batch and returns 0."""
        accepted = 0
        with self._lock:
            if self._closed:
                raise WriterClosed("the cluster writer is closed")
            if self._check_fence():
                batch = list(ops)
                if batch:
                    self._count_fenced(batch)
                    log.info("lease not held: a batch of writes dropped", count=len(batch),
                             first=batch[0].describe())
                return 0
            for op in ops:
                if self._enqueue(op):
                    accepted += 1
        return accepted

    @property
    def fenced(self) -> bool:
        """True once the fence failed: this writer writes nothing any more."""
        with self._lock:
            return self._check_fence()

    def _check_fence(self) -> bool:  # with the lock held: True when fenced
        if not self._fenced and self._fence is not None and not self._fence():
            self._fenced = True
        return self._fenced

    def _count_fenced(self, ops: Iterable[Operation]) -> None:  # with the lock held
        for op in ops:
            self.fenced_drops += 1
            if self._metrics is not None:
                self._metrics.fenced_write_dropped(type(op).__name__)

    def _enqueue(self, op: Operation) -> bool:  # with the lock held
        now = self._clock()
        if isinstance(op, Bind):
            if op.pod.key in self._binds:
                log.debug("duplicate bind dropped", pod=op.pod.key, node=op.node)
                return False
            self._binds[op.pod.key] = _Flight(Placement(op.pod.key, op.node, op.gpu_groups), now, uid=op.pod.uid)
            if op.claims:
                self.claims.planned(op.claims)
        elif isinstance(op, Evict):
            if op.pod.key in self._evictions:
                return False
            self._evictions[op.pod.key] = _Flight(Placement(op.pod.key, ""), now, uid=op.pod.uid)
        if op.creates and self._creating.get(op.lane):
            return False  # that object's creation is already queued or on the wire (the cache does not show it yet)
        if op.priority == EVENTS:
            if self._events_queued >= self.max_queued_events:  # client-go drops events when its queue is full
                self.events_dropped += 1
                if self._metrics is not None:
                    self._metrics.event_filtered("queue_full")
                return False
            self._events_queued += 1
        lane = self._lanes.get(op.lane)
        if lane is None:
            lane = self._lanes[op.lane] = _Lane()
        if op.supersedes:
            kept = deque(q for q in lane.queue if q.slot not in op.supersedes)
            self._pending -= len(lane.queue) - len(kept)
            lane.queue = kept
        slot = op.slot
        if slot is not None:
            for i, queued in enumerate(lane.queue):
                if queued.slot == slot:
                    lane.queue[i] = op  # supersede the queued write of the same slot
                    return True
            recent = self._recent.get((op.lane, slot))
            if recent is not None and now - recent[1] < self.settle_timeout and recent[0] == _fingerprint(op):
                if not lane.queue and not lane.running:
                    del self._lanes[op.lane]
                return False
        lane.queue.append(op)
        self._pending += 1
        if op.creates:
            self._creating[op.lane] = self._creating.get(op.lane, 0) + 1
            self._create_failed.pop(op.lane, None)
        self._make_ready(op.lane, lane, op.priority)
        return True

    # ---- dispatching ------------------------------------------------------------------------------
    def _make_ready(self, key: str, lane: _Lane, priority: int | None = None, *, first: bool = False) -> None:
        """Queue the lane for a thread (again, in the urgent queue, when an urgent operation joined a lane waiting
        in the background queue); ``first``: ahead of the others (a lane whose creation it waited for is done: it
        is older than the lanes queued meanwhile, and its bind completes a pod). With the lock held."""
        if lane.running or lane.parked or not lane.queue:
            return
        if priority is None:
            priority = lane.most_urgent()
        if lane.ready >= 0 and lane.ready <= priority:
            return  # already waiting in this class's queue or a more urgent one
        lane.ready = priority
        if first:
            self._ready[priority].appendleft(key)
        else:
            self._ready[priority].append(key)
        # a thread per lane that may run now: no more threads than the limit allows requests (more would only wait)
        if self._idle_threads == 0 and len(self._threads) < min(self._max_threads, self.limiter.limit + 1):
            thread = threading.Thread(target=self._worker, name=f"kaisched-writer-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()
        else:
            self._work.notify()

    def _next_lane(self) -> tuple[str, int] | None:  # with the lock held
        """The next lane to start (urgent first; background within its share), or None when none may start now."""
        limit = self.limiter.limit
        stopping = self._stop.is_set()
        if sum(self._running) >= limit and not stopping:
            return None
        # background lanes: one at a time while urgent ones wait (queued, or parked on a creation), a quarter of the
        # limit while urgent ones run, all of it otherwise; events: event_workers at a time, whatever else runs
        share = 1 if self._parked else max(1, limit // 4) if self._running[URGENT] else limit
        # events: none while urgent writes wait (for a thread or a creation), but one per event_hold seconds so
        # that they are never starved; event_workers at a time otherwise, whatever else runs
        events = self.event_workers
        if self._ready[EVENTS] and (self._parked or self._ready[URGENT]):
            events = 1 if self._clock() - self._last_event_start >= self.event_hold else 0
        caps = (limit, share, events)
        for priority, ready in enumerate(self._ready):
            while ready and (self._running[priority] < caps[priority] or stopping):
                key = ready.popleft()
                lane = self._lanes.get(key)
                if lane is not None and lane.ready == priority and not lane.running:
                    if priority == EVENTS:
                        self._last_event_start = self._clock()
                    return key, priority
        return None

    def _worker(self) -> None:
        while True:
            with self._lock:
                picked = self._next_lane()
                while picked is None:
                    if self._closed and not any(self._ready):
                        return
                    self._idle_threads += 1
                    self._work.wait(0.5)
                    self._idle_threads -= 1
                    picked = self._next_lane()
                key, priority = picked
                lane = self._lanes[key]
                lane.ready = -1
                lane.running = True
                lane.priority = priority
                self._running[priority] += 1
            try:
                self._run_lane(key)
            finally:
                with self._lock:
                    self._running[priority] -= 1
                    self._work.notify()

    def _blocker(self, op: Operation) -> tuple[str, ApiError | None] | None:  # with the lock held
        """The lane ``op`` waits for (a creation queued or running; None error), or the failed creation that makes
        it fail; None when it may go."""
        for after in op.after:
            if self._creating.get(after):
                return after, None
            failed = self._create_failed.get(after)
            if failed is not None:
                return after, failed[0]
        return None

    def _creation_done(self, op: Operation, error: ApiError | None) -> None:  # with the lock held
        """A creation finished (``error``: it failed for good; dropped operations pass None): wake the lanes
        parked on it."""
        key = op.lane
        left = self._creating.get(key, 0) - 1
        if left > 0:
            self._creating[key] = left
        else:
            self._creating.pop(key, None)
        if error is not None:
            self._create_failed[key] = (error, self._clock())
        if left > 0:
            return
        for waiting in self._parked.pop(key, ()):
            lane = self._lanes.get(waiting)
            if lane is None:
                continue
            lane.parked = ""
            if lane.queue:
                self._make_ready(waiting, lane, first=True)
            elif not lane.running:
                del self._lanes[waiting]

    # ---- in-flight view ---------------------------------------------------------------------------
    def in_flight_binds(self) -> dict[str, str]:
        """Pod key -> node for every bind submitted and not yet settled (see the module docstring)."""
        with self._lock:
            return {k: f.placement.node for k, f in self._binds.items()}

    def in_flight_placements(self) -> dict[str, Placement]:
        """Like :meth:`in_flight_binds`, with the GPU groups of fractional pods."""
        with self._lock:
            return {k: f.placement for k, f in self._binds.items()}

    def in_flight_evictions(self) -> set[str]:
        """Pod keys of every eviction submitted and not yet settled."""
        with self._lock:
            return set(self._evictions)

    def forget(self, pod_key: str) -> None:
        """The caller has seen the pod settle: drop its in-flight bind/eviction (when the operation finishes,
        if it is still queued or running)."""
        with self._lock:
            for flights in (self._binds, self._evictions):
                flight = flights.get(pod_key)
                if flight is None:
                    continue
                if flight.done_at is None:
                    flight.forgotten = True
                else:
                    del flights[pod_key]

    def settle(self, lookup: Lookup) -> None:
        """Drop in-flight entries whose success the cache now shows (bound pods, terminating or deleted pods),
        and those that succeeded more than ``settle_timeout`` seconds ago."""
        now = self._clock()
        with self._lock:
            for key in list(self._binds):
                flight = self._binds[key]
                if flight.done_at is None:
                    continue
                pod = lookup("Pod", key)
                spec = pod.get("spec") if pod is not None else None
                if (pod is None or (isinstance(spec, Mapping) and spec.get("nodeName")) or flight.replaced(pod)
                        or now - flight.done_at >= self.settle_timeout):
                    del self._binds[key]
            for key in list(self._evictions):
                flight = self._evictions[key]
                if flight.done_at is None:
                    continue
                pod = lookup("Pod", key)
                meta = pod.get("metadata") if pod is not None else None
                if (pod is None or (isinstance(meta, Mapping) and meta.get("deletionTimestamp"))
                        or flight.replaced(pod) or now - flight.done_at >= self.settle_timeout):
                    del self._evictions[key]
            self._recent = {k: v for k, v in self._recent.items() if now - v[1] < self.settle_timeout}
            # a failed creation stops failing binds once the cache shows the object (made by someone else) or after
            # settle_timeout; a new creation of it resets it at once
            self._create_failed = {k: v for k, v in self._create_failed.items()
                                   if now - v[1] < self.settle_timeout and lookup(*k.split(":", 1)) is None}
        self.claims.settle(lookup)

    def pending(self) -> int:
        """Operations queued or running."""
        with self._lock:
            return self._pending

    # ---- lifecycle --------------------------------------------------------------------------------
    def drain(self, timeout: float) -> bool:
        """Wait until every queued operation (and the failure reports they caused) is done; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 5.0, *, drain: bool = False) -> bool:
        """Stop: with ``drain``, first let queued operations finish (up to ``timeout``); then drop what is still
        queued, interrupt backoff waits, and wait up to ``timeout`` for requests in progress. True when
        everything stopped in time. Idempotent."""
        if drain:
            self.drain(timeout)
        with self._lock:
            self._closed = True
            self._stop.set()
            self._drop_idle_lanes("cluster writer closed: operation dropped")
            self._work.notify_all()
        self.limiter.close()
        return self.drain(timeout)

    def _interruptible_sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # ---- workers ----------------------------------------------------------------------------------
    def _run_lane(self, lane_key: str) -> None:
        while True:
            blocked_by: ApiError | None = None
            with self._lock:
                lane = self._lanes[lane_key]
                if lane.queue and self._check_fence():
                    self._drop_fenced(lane.queue.popleft(), running=False)
                    continue
                if self._stop.is_set() and lane.queue:
                    self._drop(lane)
                if not lane.queue:
                    lane.running = False
                    del self._lanes[lane_key]
                    self._idle.notify_all()
                    return
                blocker = self._blocker(lane.queue[0])
                if blocker is not None and blocker[1] is None:  # wait for the creation, without a thread
                    lane.running = False
                    lane.parked = blocker[0]
                    self._parked.setdefault(blocker[0], []).append(lane_key)
                    return
                if blocker is not None:
                    blocked_by = blocker[1]
                op = lane.queue.popleft()
                if op.priority == EVENTS:
                    self._events_queued -= 1
            try:
                if blocked_by is not None:
                    self._failed(op, ApiError(blocked_by.status, blocked_by.reason,
                                              f"not sent: {op.after[0]} could not be created: {blocked_by.message}",
                                              blocked_by.body), 0, 0)
                else:
                    self._execute(op)
            except Exception:  # never let a worker die; _execute handles every refusal itself
                log.exception("cluster writer: unexpected error", operation=op.describe())
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def _drop(self, lane: _Lane) -> None:  # with the lock held: closing
        for op in lane.queue:
            self._forget_flight(op)
            log.warning("cluster writer closed: operation dropped", operation=op.describe())
        self._pending -= len(lane.queue)
        lane.queue.clear()

    def _drop_idle_lanes(self, message: str) -> None:  # with the lock held: closing or fenced
        """Drop the queues of lanes no thread runs (waiting for a thread or parked) and forget those lanes."""
        self._parked.clear()
        for key in list(self._lanes):
            lane = self._lanes[key]
            if lane.running:
                continue
            for op in lane.queue:
                self._forget_flight(op)
                log.warning(message, operation=op.describe())
            self._pending -= len(lane.queue)
            lane.queue.clear()
            del self._lanes[key]
        self._idle.notify_all()

    def _forget_flight(self, op: Operation, *, queued: bool = True) -> None:
        """The operation will not happen (``queued``: it was still counted as queued). With the lock held."""
        if queued and op.priority == EVENTS:
            self._events_queued -= 1
        if isinstance(op, Bind):
            self._binds.pop(op.pod.key, None)
            self.claims.dropped(op.claims)
        elif isinstance(op, Evict):
            self._evictions.pop(op.pod.key, None)
        if op.creates:
            self._creation_done(op, None)

    def _drop_fenced(self, op: Operation, *, running: bool) -> None:
        """The fence failed at ``op`` (taken off its lane; ``running``: its worker counts it done afterwards): drop
        it and every operation still queued. With the lock held."""
        dropped = [op]
        self._parked.clear()
        for key, lane in list(self._lanes.items()):
            dropped.extend(lane.queue)
            self._pending -= len(lane.queue)
            lane.queue.clear()
            if not lane.running:
                del self._lanes[key]
        if not running:
            self._pending -= 1
        self._idle.notify_all()
        for i, each in enumerate(dropped):
            self._forget_flight(each, queued=i > 0 or not running)
        self._count_fenced(dropped)
        log.warning("lease not held: writes of a plan made under it dropped", count=len(dropped),
                    first=op.describe(), binds=sum(isinstance(o, Bind) for o in dropped),
                    evictions=sum(isinstance(o, Evict) for o in dropped))

    def _execute(self, op: Operation) -> None:
        started = self._clock()
        requests = op.requests()
        attempt = 1
        step = 0
        while step < len(requests):
            request = requests[step]
            error: ApiError | None = None
            ticket = self.limiter.acquire()  # a slot within the adaptive limit (after any Retry-After pause)
            try:
                with self._lock:
                    if self._check_fence():
                        raise Fenced(request.method, request.path)
                self._send(request)
            except Fenced:
                self.limiter.cancel(ticket)
                with self._lock:
                    self._fenced = True
                    self._drop_fenced(op, running=True)
                return
            except ApiError as err:
                error = err
            except Exception as exc:  # a client that leaks its transport's exception: treat as no connection
                error = ApiError(0, type(exc).__name__, str(exc))
            if self._fence is not None:
                self._lapsed_on_the_wire(op, request, error)
            if error is not None and is_fencing_denial(error):
                self._denied_by_the_server(op, request, error)  # fenced before any other lane may start
                self.limiter.cancel(ticket)
                return
            self._answered(ticket, error)
            if error is None:
                step += 1
                continue
            if error.retryable and attempt < self.max_attempts and not self._stop.is_set():
                delay = min(self.backoff_base * 2 ** (attempt - 1) if error.retry_after is None
                            else error.retry_after, self.backoff_max)
                log.info("cluster writer: retrying", operation=op.describe(), status=error.status, attempt=attempt,
                         delay_s=delay)
                attempt += 1
                self._sleep(delay)
                continue
            self._failed(op, error, attempt, step)
            return
        self._succeeded(op, started)

    def _answered(self, ticket: Ticket, error: ApiError | None) -> None:
        """Tell the adaptive limit how the request went (and the metrics)."""
        self.limiter.release(ticket, error)
        if self._metrics is not None:
            self._metrics.observe_write(self.limiter.limit, is_pushback(error))

    def _lapsed_on_the_wire(self, op: Operation, request: Request, error: ApiError | None) -> None:
        """After a request that passed the fence: log it when the fence fails now. If the process was paused
        between the check and the moment the request's bytes left (or while it waited for the answer), the server
        may have received it after the lease lapsed: the one write per worker that client-side fencing cannot call
        back (harmless for pauses shorter than the margin, ``lease_duration - renew_deadline``). Whatever the
        operation would write next (its next step, a retry, its events, failure reports) meets the fence."""
        with self._lock:
            lapsed = self._check_fence()
        if lapsed:
            log.warning("lease not held: a write that passed the fence was answered after the lease lapsed",
                        operation=op.describe(), request=f"{request.method} {request.path}",
                        status=error.status if error is not None else "ok")

    def _denied_by_the_server(self, op: Operation, request: Request, error: ApiError) -> None:
        """The fencing policy refused ``request``: the server does not see this replica as the Lease's holder. Lost
        leadership: fenced for good, ``op`` and the rest of the plan dropped (no failure report: every write would be
        refused alike), ``on_denied`` told once."""
        with self._lock:
            self._fenced = True
            first = not self._denied
            self._denied = True
            log.warning("lease not held as the API server sees it: a write was denied by the fencing policy",
                        operation=op.describe(), request=f"{request.method} {request.path}", status=error.status,
                        message=error.message)
            self._drop_fenced(op, running=True)
        if first and self._on_denied is not None:
            try:
                self._on_denied(error)
            except Exception:
                log.exception("cluster writer: on_denied callback raised", operation=op.describe())

    def _send(self, req: Request) -> None:
        if req.claim_step is not None:
            self.claims.run(req.claim_step)
            return
        try:
            self._api.request(req.method, req.path, body=req.body, content_type=req.content_type)
        except ApiError as err:
            if is_fencing_denial(err):
                raise  # never "already done", never a fallback: lost leadership
            if req.fallback is not None and req.fallback_when(err):
                self._send(req.fallback)
                return
            if req.done_when(err):
                return
            raise

    def _succeeded(self, op: Operation, started: float) -> None:
        now = self._clock()
        with self._lock:
            self.completed += 1
            flights = self._binds if isinstance(op, Bind) else self._evictions if isinstance(op, Evict) else None
            if flights is not None:
                key = op.target.key
                flight = flights.get(key)
                if flight is not None:
                    if flight.forgotten:
                        del flights[key]
                    else:
                        flight.done_at = now
            slot = op.slot
            if slot is not None:
                self._recent[(op.lane, slot)] = (_fingerprint(op), now)
            if op.creates:
                self._creation_done(op, None)
            closed = self._closed
        if isinstance(op, Bind) and self._metrics is not None:
            self._metrics.observe_bind((now - started) * 1000.0)
        follow_ups = op.success_ops()
        if follow_ups and not closed:
            with contextlib.suppress(WriterClosed):  # closed meanwhile: dropped with the rest
                self.submit(follow_ups)

    def _failed(self, op: Operation, error: ApiError, attempts: int, step: int) -> None:
        failure = Failure(op, error, attempts, step)
        log.warning("cluster writer: operation failed", operation=op.describe(), status=error.status,
                    reason=error.reason, message=error.message, attempts=attempts)
        with self._lock:
            self.failures += 1
            if isinstance(op, Bind):
                self._binds.pop(op.pod.key, None)
                self.claims.dropped(op.claims)
            elif isinstance(op, Evict):
                self._evictions.pop(op.pod.key, None)
            if op.creates:
                self._creation_done(op, error)
            self._seq += 1
            seq = self._seq
            closed = self._closed
        if self._on_failure is not None:
            try:
                self._on_failure(failure)
            except Exception:
                log.exception("cluster writer: on_failure callback raised", operation=op.describe())
        if closed:
            return
        reports = op.failure_ops(error, step, self._now(), seq)
        if reports:
            with contextlib.suppress(WriterClosed):  # closed meanwhile: the report is dropped with the rest
                self.submit(reports)

    # ---- introspection ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"pending": self._pending, "lanes": len(self._lanes), "inFlightBinds": len(self._binds),
                    "inFlightEvictions": len(self._evictions), "completed": self.completed, "failures": self.failures,
                    "fencedDrops": self.fenced_drops, "fenced": self._fenced, "deniedByPolicy": self._denied,
                    "parked": sum(len(v) for v in self._parked.values()), "threads": len(self._threads),
                    "eventsQueued": self._events_queued, "eventsDropped": self.events_dropped,
                    "concurrency": self.limiter.stats()}
