"""Fairness over time: how close each queue's GPUs came to its long-run fair share (time-based against
weight-only division, spec 5.7).

* **Long-run fair share** of a queue (:func:`long_run_shares`): the weight-only division of the cluster's GPUs
  (quotas, over-quota weights, limits and priorities of the Queues, as the proportion plugin divides) among the
  queues, each asking its mean demand over the run (time-weighted mean of what it requested: allocated plus
  pending). It is what a queue is entitled to over the long run; weight-only division gives each queue the
  instantaneous share of the moment, time-based division gives more to queues that used less over the window.
* **Windowed allocation**: a queue's mean allocation over the last ``window`` seconds (the usage window of the
  time-based run), at each sample.
* **Fair-share error** at a sample: the mean over the queues with a long-run fair share of |windowed allocation
  - long-run fair share| (GPUs); per queue its time-weighted mean, also of the instantaneous allocation.
* **Jain's index over the window** at a sample: Jain's index over those queues of windowed allocation / long-run
  fair share, each capped at 1 (more than the share is not "more fair"); 1 is perfectly fair.
* **Waiting time per queue**: arrival to first start (jobs still waiting count to the end: lower bounds then).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kaisched.k8s.objects import Queue
from kaisched.plugins.proportion.division import QueueShareInput, compute_fair_shares
from kaisched.sim.metrics import waited
from kaisched.sim.model import Sample, SimResult

__all__ = ["QueueFairness", "RunFairness", "fairness", "fairness_window", "long_run_shares", "reference_shares"]

FloatArray = npt.NDArray[np.float64]
DEFAULT_WINDOW_SHARE = 0.1  # without a usage window: a tenth of the run


def _durations(times: FloatArray, end: float) -> FloatArray:
    if len(times) == 0:
        return np.zeros(0)
    nxt = np.append(times[1:], max(end, float(times[-1])))
    w = np.maximum(nxt - times, 0.0)
    return w if w.sum() > 0 else np.ones(len(times))


def long_run_shares(queues: Sequence[Queue], samples: Sequence[Sample], end: float) -> dict[str, float]:
    """Each queue's long-run fair share in GPUs (the module's docstring), by name; {} without samples."""
    if not samples or not queues:
        return {}
    times = np.array([s.time for s in samples], dtype=np.float64)
    weights = _durations(times, end)
    total = float(np.average([s.gpus_total for s in samples], weights=weights))
    names = {q.meta.name for q in queues}
    parent_of = {q.meta.name: (q.parent_queue if q.parent_queue in names else None) for q in queues}
    demand = dict.fromkeys(names, 0.0)
    leaves = {name for s in samples for name in s.queues}
    for name in leaves & names:
        mean = float(np.average([s.queues[name].requested if name in s.queues else 0.0 for s in samples],
                                weights=weights))
        cur: str | None = name
        seen: set[str] = set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            demand[cur] += mean
            cur = parent_of.get(cur)
    def order(q: Queue) -> tuple[float, str]:
        ts = q.meta.creation_timestamp
        return (ts.timestamp() if ts is not None else 0.0, q.meta.name)

    inputs = []
    for q in sorted(queues, key=order):
        gpu = q.resources.gpu
        inputs.append(QueueShareInput(
            name=q.meta.name, parent=parent_of[q.meta.name], priority=q.priority,
            order_key=order(q), deserved=np.array([gpu.quota, -1.0, -1.0]),
            max_allowed=np.array([gpu.limit, -1.0, -1.0]), over_quota_weight=np.array([gpu.over_quota_weight, 1, 1]),
            request=np.array([demand[q.meta.name], 0.0, 0.0]), usage=np.zeros(3)))
    try:
        shares = compute_fair_shares(inputs, np.array([total, 0.0, 0.0]), 0.0)
    except ValueError:  # a queue tree the cycles reported as errors: no reference
        return {}
    return {name: float(share[0]) for name, share in shares.items() if name in leaves}


def reference_shares(results: Sequence[SimResult]) -> dict[str, float]:
    """The long-run fair shares runs are measured against: the weight-only runs' (the runs without
    ``usageDBConfig``), or all runs' when every run is time-based; averaged over those runs per queue. A run
    without them (made by hand) falls back to its time-weighted mean fair share."""
    pick = [r for r in results if not r.time_based] or list(results)
    sums: dict[str, list[float]] = {}
    for r in pick:
        shares = r.long_run_share or _mean_fair_share(r)
        for q, v in shares.items():
            sums.setdefault(q, []).append(v)
    return {q: float(np.mean(v)) for q, v in sorted(sums.items())}


def _mean_fair_share(result: SimResult) -> dict[str, float]:
    samples = result.samples
    if not samples:
        return {}
    times = np.array([s.time for s in samples], dtype=np.float64)
    w = _durations(times, result.summary.end)
    names = sorted({q for s in samples for q in s.queues})
    return {q: float(np.average([s.queues[q].fair_share if q in s.queues else 0.0 for s in samples], weights=w))
            for q in names}


def fairness_window(results: Sequence[SimResult]) -> float:
    """The window fairness is measured over: the usage window of the first time-based run (its
    ``usageDBConfig.usageParams.windowSize``), else a tenth of the longest run; at most the longest run."""
    span = max((r.summary.end for r in results), default=0.0)
    for r in results:
        if r.time_based and isinstance(r.config, dict):
            from kaisched.framework.usage_config import UsageDBConfig

            try:
                size = UsageDBConfig.from_mapping(r.config["usageDBConfig"]).params.window_size.total_seconds()
            except ValueError:
                continue
            return min(size, span) if span > 0 else size
    return span * DEFAULT_WINDOW_SHARE


@dataclass(frozen=True, slots=True)
class QueueFairness:
    queue: str
    long_run: float  # GPUs
    error: float | None  # time-weighted mean |allocation - long-run| (GPUs)
    window_error: float | None  # time-weighted mean |windowed allocation - long-run| (GPUs)
    allocated: float | None  # time-weighted mean allocation (GPUs)
    jobs: int
    wait_mean: float | None  # seconds (lower bound while jobs still wait)
    wait_p95: float | None
    waiting_at_end: int


@dataclass(frozen=True, slots=True)
class RunFairness:
    window: float  # seconds
    queues: list[QueueFairness]
    times: FloatArray
    error: FloatArray  # fair-share error over the window at each sample (GPUs; NaN: no queue with a share)
    jain: FloatArray  # Jain's index over the window at each sample (NaN: no queue with a share)
    error_mean: float | None  # time-weighted means of the two series
    jain_mean: float | None
    windowed: dict[str, FloatArray]  # each queue's windowed allocation at each sample (GPUs)


def _windowed(times: FloatArray, values: FloatArray, window: float) -> FloatArray:
    """The mean of a step function (``values[i]`` from ``times[i]`` on) over ``[t - window, t]`` at each sample
    time (over what there is of the window at the start; the value itself where the span is 0)."""
    n = len(times)
    if n == 0:
        return np.zeros(0)
    steps = np.diff(times)
    cumulative = np.concatenate([[0.0], np.cumsum(values[:-1] * steps)])  # integral from times[0] to times[i]
    start = np.maximum(times - window, times[0])
    # integral up to ``start``: the last sample at or before it, plus its value for the rest
    idx = np.clip(np.searchsorted(times, start, side="right") - 1, 0, n - 1)
    at_start = cumulative[idx] + values[idx] * (start - times[idx])
    span = times - start
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (cumulative - at_start) / np.where(span > 0, span, 1.0)
    return np.where(span > 0, mean, values)


def _jain(xs: FloatArray) -> float:
    total = float(xs.sum())
    squares = float((xs * xs).sum())
    return 1.0 if squares == 0 else total * total / (len(xs) * squares)


def _wmean(values: FloatArray, weights: FloatArray) -> float | None:
    ok = ~np.isnan(values)
    if not ok.any() or weights[ok].sum() <= 0:
        return None
    return float(np.average(values[ok], weights=weights[ok]))


def fairness(result: SimResult, long_run: dict[str, float], window: float) -> RunFairness:
    """The fairness figures of a run against the given long-run fair shares (GPUs per queue)."""
    samples = result.samples
    end = result.summary.end
    times = np.array([s.time for s in samples], dtype=np.float64)
    weights = _durations(times, end)
    names = sorted({q for s in samples for q in s.queues} | {j.queue for j in result.jobs})
    shared = [q for q in names if long_run.get(q, 0.0) > 1e-9]
    windowed: dict[str, FloatArray] = {}
    instant: dict[str, FloatArray] = {}
    for q in names:
        alloc = np.array([s.queues[q].allocated if q in s.queues else 0.0 for s in samples], dtype=np.float64)
        instant[q] = alloc
        windowed[q] = _windowed(times, alloc, window)
    n = len(samples)
    error = np.full(n, np.nan)
    jain = np.full(n, np.nan)
    if shared and n:
        dev = np.array([np.abs(windowed[q] - long_run[q]) for q in shared])
        error = dev.mean(axis=0)
        ratios = np.array([np.minimum(windowed[q] / long_run[q], 1.0) for q in shared])
        jain = np.array([_jain(ratios[:, i]) for i in range(n)])
    out = []
    for q in names:
        jobs = [j for j in result.jobs if j.queue == q]
        waits = [w for j in jobs if (w := waited(j, end)) is not None]
        target = long_run.get(q, 0.0)
        has = bool(n)
        out.append(QueueFairness(
            queue=q, long_run=target,
            error=_wmean(np.abs(instant[q] - target), weights) if has else None,
            window_error=_wmean(np.abs(windowed[q] - target), weights) if has else None,
            allocated=_wmean(instant[q], weights) if has else None,
            jobs=len(jobs),
            wait_mean=float(np.mean(waits)) if waits else None,
            wait_p95=float(np.percentile(waits, 95)) if waits else None,
            waiting_at_end=sum(1 for j in jobs if j.start is None and waited(j, end) is not None),
        ))
    return RunFairness(window, out, times, error, jain, _wmean(error, weights) if n else None,
                       _wmean(jain, weights) if n else None, windowed)


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
