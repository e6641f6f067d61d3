"""Each queue's historical usage from a real Prometheus (``usageDBConfig.clientType: prometheus``, spec 5.7).

What is asked (:func:`usage_queries`), for each resource ``r`` of ``[gpu, cpu, memory]``, with the allocation metric
``A_r`` (``extraParams.<r>AllocationMetric``, a series per queue with the label ``queue_name``), the capacity query
``C_r`` (``extraParams.<r>CapacityMetric``) and ``decay = 0.5 ^ ((now - time()) / halfLife)`` (left out without a
half-life):

* one instant query at ``now`` of ``sum_over_time((max by (queue_name) (A_r) * decay)[W:R])`` and of
  ``sum_over_time((sum(C_r) * decay)[W:R])``, ``R`` the query resolution and ``W`` the window: ``windowSize``
  (sliding, as KAI asks), or the time since the window's last reset, in whole resolution steps (tumbling and cron,
  :meth:`~kaisched.framework.usage_config.UsageParams.reset_time`; KAI asks a range query there whose matrix answer
  its own client rejects, docs/compatibility.md). The subquery samples the window every ``R`` at times aligned to
  ``R``, the grid of the in-memory history (:mod:`kaisched.usage.history`).

A queue's usage of ``r`` is the first sum over the second (0 when the cluster had none of ``r`` in the window, or
when the capacity query has no data: a CPU-only cluster has no GPU capacity series). ``max by (queue_name)``: a
queue exported by two scrape targets (two jobs scraping one scheduler) counts once. Every request has the
``usageQueryTimeout``; a Prometheus that does not answer, answers with an error, or answers with what is not a
PromQL vector or matrix is a :class:`UsageFetchError`, never a configuration error.

:class:`PrometheusUsageSource` fetches in the background every ``fetchInterval`` (Kubernetes mode): a cycle never
waits for Prometheus. It takes the last table it fetched; once that is older than ``stalenessPeriod`` it is still
used, marked stale and logged, as KAI does. Before the first fetch succeeds there is no table: the division is by
weight only (the runner waits up to ``waitTimeout`` for it at start-up, :meth:`PrometheusUsageSource.wait_ready`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kaisched.framework.usage_config import SLIDING, UsageParams
from kaisched.model.usage import UsageTable, UsageVector

__all__ = ["RESOURCES", "FetchReport", "PrometheusAPI", "PrometheusUsageSource", "UsageFetchError", "UsageQueries",
           "fetch_usage", "usage_queries"]

log = logging.getLogger(__name__)

RESOURCES = ("gpu", "cpu", "memory")
QUEUE_LABEL = "queue_name"
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # a usage answer is a few series; more is not a Prometheus answering us


class UsageFetchError(Exception):
    """Prometheus could not give the usage (unreachable, slow, an error answer, an answer of the wrong shape)."""


def _seconds(d: timedelta) -> str:
    """A PromQL duration in whole seconds (at least 1s)."""
    return f"{max(1, round(d.total_seconds()))}s"


def _decay(params: UsageParams, now: float) -> str:
    if params.half_life is None:
        return ""
    return f" * (0.5 ^ (({now:.3f} - time()) / {params.half_life.total_seconds():g}))"


@dataclass(frozen=True, slots=True)
class UsageQueries:
    """The PromQL of one fetch: per resource the allocation and the capacity query, both asked at ``at``."""

    allocation: tuple[str, str, str]
    capacity: tuple[str, str, str]
    at: float


def usage_queries(params: UsageParams, now: datetime) -> UsageQueries | None:
    """What :func:`fetch_usage` asks Prometheus at ``now`` (see the module's docstring); None when the window
    starts now (a tumbling or cron window that has just reset: nothing was used in it yet)."""
    at = now.astimezone(UTC).timestamp()
    resolution = params.query_resolution.total_seconds()
    if params.window_type == SLIDING:
        span = params.window_size.total_seconds()
    else:
        span = math.floor((at - params.reset_time(now).astimezone(UTC).timestamp()) / resolution) * resolution
        if span <= 0:
            return None
    window, step, decay = _seconds(timedelta(seconds=span)), _seconds(timedelta(seconds=resolution)), _decay(params, at)
    alloc = tuple(f"sum_over_time((max by ({QUEUE_LABEL}) ({m}){decay})[{window}:{step}])"
                  for m in params.allocation_metrics)
    cap = tuple(f"sum_over_time((sum({m}){decay})[{window}:{step}])" for m in params.capacity_metrics)
    return UsageQueries((alloc[0], alloc[1], alloc[2]), (cap[0], cap[1], cap[2]), at)


class PrometheusAPI:
    """Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``) over the standard library, each request
    with ``timeout`` seconds."""

    def __init__(self, url: str, timeout: float) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageFetchError(f"{url!r} is not a Prometheus URL (expected http://HOST:PORT)")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, args: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode({**args, "timeout": f"{self.timeout:g}s"})
        address = f"{self.url}{path}?{query}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                body = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:  # Prometheus answers a bad query with 400/422 and a JSON error
            try:
                detail = json.loads(exc.read(65536)).get("error", "")
            except (ValueError, AttributeError, OSError):
                detail = ""
            raise UsageFetchError(f"Prometheus at {self.url} answered {exc.code}"
                                  + (f": {detail}" if detail else "")) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UsageFetchError(f"Prometheus at {self.url} did not answer: {reason}") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise UsageFetchError(f"Prometheus at {self.url}: the answer is larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            data = json.loads(body)
        except ValueError:
            raise UsageFetchError(f"Prometheus at {self.url}: the answer is not JSON") from None
        if not isinstance(data, dict) or data.get("status") != "success" or not isinstance(data.get("data"), dict):
            error = data.get("error", "") if isinstance(data, dict) else ""
            raise UsageFetchError(f"Prometheus at {self.url}: the query failed" + (f": {error}" if error else ""))
        return data["data"]

    def instant(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: ``(labels, value)`` per series."""
        data = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise UsageFetchError(f"Prometheus at {self.url}: expected a vector for {query!r}, "
                                  f"got {data.get('resultType')!r}")
        return [(_labels(s), _number(s.get("value"), query)) for s in data["result"] if isinstance(s, dict)]


def _labels(series: Mapping[str, Any]) -> dict[str, str]:
    metric = series.get("metric")
    return {str(k): str(v) for k, v in metric.items()} if isinstance(metric, dict) else {}


def _number(point: object, query: str) -> float:
    if not isinstance(point, list) or len(point) != 2:
        raise UsageFetchError(f"a sample of {query!r} is not [time, value]: {point!r}")
    try:
        value = float(point[1])
    except (TypeError, ValueError):
        raise UsageFetchError(f"a sample of {query!r} is not a number: {point[1]!r}") from None
    return value if math.isfinite(value) and value > 0 else 0.0


def fetch_usage(url: str, params: UsageParams, now: datetime, *, api: PrometheusAPI | None = None) -> UsageTable:
    """Each queue's usage at ``now`` from the Prometheus at ``url`` (:class:`UsageFetchError` when it cannot)."""
    prom = api or PrometheusAPI(url, params.query_timeout.total_seconds())
    queries = usage_queries(params, now)
    used: dict[str, list[float]] = {}
    capacity = [0.0, 0.0, 0.0]
    for r in range(3 if queries is not None else 0):  # a window that starts now: nothing used in it yet
        assert queries is not None
        for labels, value in prom.instant(queries.allocation[r], queries.at):
            name = labels.get(QUEUE_LABEL)
            if name:
                used.setdefault(name, [0.0, 0.0, 0.0])[r] += value
        capacity[r] = math.fsum(v for _, v in prom.instant(queries.capacity[r], queries.at))
    table: dict[str, UsageVector] = {}
    for name in sorted(used):
        u = [used[name][r] / capacity[r] if capacity[r] > 0 else 0.0 for r in range(3)]
        table[name] = (u[0], u[1], u[2])
    return UsageTable(table, f"prometheus {prom.url}", now, False)


@dataclass(frozen=True, slots=True)
class FetchReport:
    """One background fetch: whether it gave a table, how long it took, its error; what the metrics record."""

    ok: bool
    seconds: float
    error: str = ""


class PrometheusUsageSource:
    """Usage fetched in the background every ``fetchInterval`` (:meth:`start`; :meth:`stop`); :meth:`table` gives
    the last table at once (never waits), marked stale once older than ``stalenessPeriod``. ``on_fetch`` is called
    after each fetch (metrics)."""

    def __init__(self, url: str, params: UsageParams, *, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_fetch: Callable[[FetchReport], None] | None = None, api: PrometheusAPI | None = None) -> None:
        self.url = url
        self.params = params
        self._now = now
        self._on_fetch = on_fetch
        self._api = api or PrometheusAPI(url, params.query_timeout.total_seconds())
        self._table: UsageTable | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_stale = False
        self.last_error = ""

    def start(self) -> PrometheusUsageSource:
        self._thread = threading.Thread(target=self._loop, name="usage-prometheus", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.params.query_timeout.total_seconds() + 1.0)

    def wait_ready(self, timeout: float | None = None, stop: threading.Event | None = None) -> bool:
        """Wait (at most ``waitTimeout``, or ``timeout`` seconds) for the first table; False when none came (the
        division is by weight only until one does, and that is logged). ``stop`` ends the wait early."""
        limit = self.params.wait_timeout.total_seconds() if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not self._ready.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                break
            self._ready.wait(min(left, 0.1))
        if not self._ready.is_set():
            log.warning("time-based fair share: no usage from Prometheus at %s after waitTimeout %gs (%s): dividing "
                        "by weight only until it answers", self.url, limit, self.last_error or "no answer yet")
            return False
        return True

    def fetch_once(self) -> FetchReport:
        """One fetch now (the background loop's step)."""
        start = time.monotonic()
        try:
            table = fetch_usage(self.url, self.params, self._now(), api=self._api)
        except UsageFetchError as exc:
            self.last_error = str(exc)
            log.error("time-based fair share: usage fetch failed: %s", exc)
            report = FetchReport(False, time.monotonic() - start, str(exc))
        else:
            with self._lock:
                self._table = table
                self._said_stale = False
            self.last_error = ""
            self._ready.set()
            report = FetchReport(True, time.monotonic() - start)
        if self._on_fetch is not None:
            self._on_fetch(report)
        return report

    def _loop(self) -> None:
        interval = self.params.fetch_interval.total_seconds()
        while not self._stop.is_set():
            started = time.monotonic()
            self.fetch_once()
            if self._stop.wait(max(0.0, interval - (time.monotonic() - started))):
                return

    def table(self, now: datetime) -> UsageTable | None:
        """The last table (None before the first fetch), stale once older than ``stalenessPeriod`` (logged once
        per table)."""
        with self._lock:
            table = self._table
        if table is None or table.fetched_at is None:
            return table
        age = now - table.fetched_at
        if age <= self.params.staleness_period:
            return table
        if not self._said_stale:
            self._said_stale = True
            log.error("time-based fair share: usage data is stale (fetched %ds ago, stalenessPeriod %ds): still "
                      "used; last error: %s", age.total_seconds(), self.params.staleness_period.total_seconds(),
                      self.last_error or "none")
        return UsageTable(table.queues, table.source, table.fetched_at, True)
