"""The usage source a long-running scheduler takes from its ``usageDBConfig`` (Kubernetes mode).

:func:`usage_source` makes it by ``clientType``:

* ``prometheus``: :class:`~kaisched.usage.prometheus.PrometheusUsageSource`, PromQL over the Prometheus of
  ``connectionString`` (or ``$connectionStringEnvVar``), fetched in the background;
* ``fake-with-history``: :class:`HistoryUsageSource`, the allocations of this process's own cycles kept in memory
  on the cycle's clock (:class:`~kaisched.usage.history.UsageHistory`; lost on restart);
* ``fake``: no usage, every queue's usage 0 (KAI's fake client, for tests): the division is by weight only.

Every source answers :meth:`UsageSource.table` at once (a cycle never waits for it) and hears of each cycle's
result (:meth:`UsageSource.after_cycle`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.framework.usage_config import FAKE, FAKE_WITH_HISTORY, PROMETHEUS, UsageParams
from kaisched.model.usage import UsageTable
from kaisched.usage.history import UsageHistory
from kaisched.usage.prometheus import FetchReport, PrometheusUsageSource

__all__ = ["HistoryUsageSource", "NoUsageSource", "UsageSource", "usage_source"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class UsageSource(Protocol):
    """Where a long-running scheduler's cycles take each queue's usage from."""

    @property
    def description(self) -> str: ...

    def start(self) -> object: ...

    def stop(self) -> None: ...

    def wait_ready(self, timeout: float | None = None, stop: threading.Event | None = None) -> bool: ...

    def table(self, now: datetime) -> UsageTable | None: ...

    def after_cycle(self, now: datetime, result: CycleResult) -> None: ...


class _InProcess:
    """A source with nothing to start or wait for (its usage is made in this process)."""

    def start(self) -> _InProcess:
        return self

    def stop(self) -> None:
        return None

    def wait_ready(self, timeout: float | None = None, stop: threading.Event | None = None) -> bool:
        return True


class NoUsageSource(_InProcess):
    """``clientType: fake``: every queue used nothing."""

    description = "fake (no usage: weight-only division)"

    def table(self, now: datetime) -> UsageTable | None:
        return UsageTable({}, "fake", now, False)

    def after_cycle(self, now: datetime, result: CycleResult) -> None:
        return None


class HistoryUsageSource(_InProcess):
    """``clientType: fake-with-history``: the queues' allocations after each of this process's cycles."""

    def __init__(self, params: UsageParams) -> None:
        self.history = UsageHistory(params, "history")
        self.description = "fake-with-history (this process's own cycles)"

    def table(self, now: datetime) -> UsageTable | None:
        return self.history.table(now)

    def after_cycle(self, now: datetime, result: CycleResult) -> None:
        if not result.capacity:  # a cycle that did not run (not leading, nothing to divide)
            return
        cap = result.capacity
        self.history.record(now, {q.name: [q.allocated.get("gpu", 0.0), q.allocated.get("cpu", 0.0),
                                           q.allocated.get("memory", 0.0)] for q in result.queues},
                            [cap.get("gpu", 0.0), cap.get("cpu", 0.0), cap.get("memory", 0.0)])


class _Prometheus(PrometheusUsageSource):
    """The Prometheus source with the :class:`UsageSource` shape."""

    @property
    def description(self) -> str:
        return f"prometheus {self.url}"

    def after_cycle(self, now: datetime, result: CycleResult) -> None:
        return None  # Prometheus scrapes the allocations from /metrics


def usage_source(config: SchedulerConfig, *, now: Callable[[], datetime] | None = None,
                 on_fetch: Callable[[FetchReport], None] | None = None) -> UsageSource | None:
    """The source for ``config.usage_db`` (None without ``usageDBConfig``: weight-only division). A Prometheus
    connection string from an unset ``connectionStringEnvVar`` is a :class:`~kaisched.framework.config.ConfigError`;
    an unreachable Prometheus is not (the source keeps trying)."""
    db = config.usage_db
    if db is None:
        return None
    if db.client_type == PROMETHEUS:
        return _Prometheus(db.connection(), db.params, now=now or _utcnow, on_fetch=on_fetch)
    if db.client_type == FAKE_WITH_HISTORY:
        return HistoryUsageSource(db.params)
    assert db.client_type == FAKE
    return NoUsageSource()
