"""The allocation history of the embedded cluster and the simulator, kept in memory on the cycle's clock.

After each cycle the caller records each queue's allocation ``[gpu, cpu, memory]`` and the cluster's capacity
(:meth:`UsageHistory.record`); before the next it asks for the usage table (:meth:`UsageHistory.table`). The
usage is what KAI's Prometheus query computes, on the same grid: the window (``usageParams``: sliding, tumbling or
cron, :meth:`~kaisched.framework.usage_config.UsageParams.reset_time`) is sampled every ``queryResolution`` at
times aligned to it (as a PromQL subquery ``[window:resolution]`` is), each sample holding the allocation last
recorded at or before it, weighted by ``0.5 ** (age / halfLifePeriod)``; a queue's usage is the weighted sum of
its samples over the weighted sum of the capacity's (0 when the cluster had no capacity of that resource).

Only changes are stored (a queue's allocation when it differs from its last), so a week of cycles costs the
number of times allocations changed, and what is older than the window is dropped as time passes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from kaisched.framework.usage_config import UsageParams
from kaisched.model.usage import UsageTable, UsageVector

__all__ = ["MAX_SAMPLES", "UsageHistory", "usage_over"]

#: grid points a window may hold (a week at one minute is 10,080); a finer resolution is coarsened to fit
MAX_SAMPLES = 200_000
ZERO: UsageVector = (0.0, 0.0, 0.0)

FloatArray = npt.NDArray[np.float64]


class _Series:
    """One series' change points: times (epoch seconds, increasing) and the value from each on."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[UsageVector] = []

    def add(self, at: float, value: UsageVector) -> None:
        if self.values and self.values[-1] == value:
            return
        if self.times and at <= self.times[-1]:  # the same instant recorded again: the later record holds
            while self.times and at <= self.times[-1]:
                self.times.pop()
                self.values.pop()
            if self.values and self.values[-1] == value:
                return
        self.times.append(at)
        self.values.append(value)

    def prune(self, before: float) -> None:
        """Drop what no sample at or after ``before`` can read (the last change before it carries on)."""
        keep = bisect_right(self.times, before) - 1
        if keep > 0:
            del self.times[:keep]
            del self.values[:keep]

    def at(self, grid: FloatArray) -> FloatArray:
        """The value at each grid time (zeros before the first change point): shape (len(grid), 3)."""
        out = np.zeros((len(grid), 3))
        if not self.times:
            return out
        idx = np.searchsorted(np.asarray(self.times), grid, side="right") - 1
        values = np.asarray(self.values, dtype=np.float64)
        seen = idx >= 0
        out[seen] = values[idx[seen]]
        return out


def _grid(start: float, now: float, resolution: float) -> FloatArray:
    """Times aligned to ``resolution`` in ``(start, now]`` (at most :data:`MAX_SAMPLES`, coarsened to fit)."""
    if now <= start:
        return np.zeros(0)
    span = now - start
    if span / resolution > MAX_SAMPLES:
        resolution = math.ceil(span / MAX_SAMPLES / resolution) * resolution
    first = math.floor(start / resolution) + 1
    last = math.floor(now / resolution)
    return np.arange(first, last + 1, dtype=np.float64) * resolution


def usage_over(allocations: Mapping[str, FloatArray], capacity: FloatArray, grid: FloatArray, now: float,
               half_life: float | None) -> dict[str, UsageVector]:
    """Each queue's usage from its allocation and the capacity sampled on ``grid`` (arrays of shape (len(grid), 3)):
    ``Σ alloc·decay / Σ capacity·decay`` per resource, ``decay = 0.5 ** ((now - t) / half_life)`` (1 without a
    half-life); 0 for a resource the cluster had none of."""
    if half_life is not None and half_life > 0:
        decay = np.power(0.5, (now - grid) / half_life)
    else:
        decay = np.ones(len(grid))
    denominator = decay @ capacity
    out: dict[str, UsageVector] = {}
    for name, alloc in allocations.items():
        numerator = decay @ alloc
        u = np.divide(numerator, denominator, out=np.zeros(3), where=denominator > 0)
        out[name] = (float(u[0]), float(u[1]), float(u[2]))
    return out


class UsageHistory:
    """Per-queue allocation and cluster capacity over time (KAI's ``fake-with-history`` client, on the cycle's
    clock instead of one sample per cycle)."""

    def __init__(self, params: UsageParams, source: str = "history") -> None:
        self.params = params
        self.source = source
        self._queues: dict[str, _Series] = {}
        self._capacity = _Series()
        self._last: float | None = None

    def record(self, when: datetime, allocated: Mapping[str, Sequence[float]], capacity: Sequence[float]) -> None:
        """The allocation ``[gpu, cpu, memory]`` of each queue and the cluster's capacity from ``when`` on (a queue
        left out holds nothing). Records must come in time order; one at the same time as the last replaces it."""
        at = when.astimezone(UTC).timestamp()
        if self._last is not None and at < self._last:
            raise ValueError(f"usage history: a record at {when.isoformat()} is older than the last one")
        self._last = at
        for name, vector in allocated.items():
            series = self._queues.get(name)
            if series is None:
                series = self._queues[name] = _Series()
            series.add(at, _vector(vector))
        for name, series in self._queues.items():
            if name not in allocated:
                series.add(at, ZERO)
        self._capacity.add(at, _vector(capacity))
        horizon = self._horizon(when)
        if horizon is not None:
            for series in (*self._queues.values(), self._capacity):
                series.prune(horizon)

    def _horizon(self, now: datetime) -> float | None:
        """Before this no sample is read again (sliding: the window; tumbling and cron windows start at their last
        reset, which only moves forward)."""
        return self.params.reset_time(now).astimezone(UTC).timestamp() - self.params.query_resolution.total_seconds()

    def table(self, now: datetime) -> UsageTable:
        """The usage table at ``now``."""
        params = self.params
        end = now.astimezone(UTC).timestamp()
        start = params.reset_time(now).astimezone(UTC).timestamp()
        grid = _grid(start, end, params.query_resolution.total_seconds())
        allocations = {name: series.at(grid) for name, series in sorted(self._queues.items())}
        half_life = params.half_life.total_seconds() if params.half_life is not None else None
        queues = usage_over(allocations, self._capacity.at(grid), grid, end, half_life)
        return UsageTable(queues, self.source, now, False)

    @property
    def changes(self) -> int:
        """How many change points are held (for tests and reports)."""
        return len(self._capacity.times) + sum(len(s.times) for s in self._queues.values())


def _vector(values: Sequence[float]) -> UsageVector:
    if len(values) < 3:
        raise ValueError(f"usage history: expected [gpu, cpu, memory], got {list(values)!r}")
    g, c, m = (max(0.0, float(v)) for v in values[:3])
    return (g, c, m)

