"""The simulator's outputs: machine-readable files, a self-contained HTML report and the terminal summary.

:func:`write_outputs` writes one run's results into a folder:

* ``summary.json``: the scenario name, the run's :class:`~kaisched.sim.model.Summary` (floats rounded,
  ``null`` where a figure is missing, e.g. the JCT statistics of a run where no job completed), what became of
  the jobs (``outcomes``: they sum to ``jobs``), the run's ``inputs`` and per-queue figures;
* ``samples.csv``: one row per scheduling cycle (cluster GPUs, allocation ratio, fragmentation, job counts, the
  jobs waiting per reason: ``pending:<code>``);
* ``queues.csv``: one row per cycle and queue (allocated, fair share, deserved (-1: unlimited), requested);
* ``jobs.csv``: one row per job (arrival, start, end, wait, JCT, evictions, GPU-seconds lost, outcome, reason),
  then its time pending in all, the reason it last waited for and its time pending per reason (``pending:<code>``,
  one column per reason of :data:`~kaisched.sim.model.PENDING_REASONS`);
* ``report.html``: one page with no outside references (the plots are embedded PNG images): the key figures,
  GPU utilisation over time (fragmentation aggregated per interval: :func:`fragmentation_intervals`), per-queue
  allocation against fair share, the distributions of waiting time and JCT, a per-queue table, where the waiting
  went (time pending per reason, overall and per queue), every job accounted for, the jobs worth a look (each
  list says how much of it is shown) and the run's inputs.

Waiting-time figures count the jobs still waiting at the end with their wait so far: they are then lower bounds,
marked ``≥`` (:mod:`kaisched.sim.metrics`).

:func:`compare` puts several runs of the same workload side by side (``compare.json``, ``compare.html``
and each run's own outputs in a sub-folder), in the order given; a row's best value is only marked where the
runs can be ranked (:func:`_not_comparable`: figures over the completed jobs only between runs that completed as
many). :func:`summary_text` and :func:`compare_text` are the terminal versions (plain text, no markup, wrapped
between phrases: :func:`wrap_phrases`).

The plots are drawn with matplotlib's Agg renderer through its object-oriented API (no pyplot, no global
state), imported only inside the functions that draw: without it (it comes with ``kaisched[sim]``) drawing
raises :class:`ReportDependencyError`. Time series longer than :data:`MAX_PLOT_POINTS` are averaged into that
many buckets first.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import re
import shutil
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kaisched.sim.fairness import RunFairness, fairness, fairness_window, reference_shares
from kaisched.sim.metrics import ReasonTime, outcome_of, pending_by_reason, waited
from kaisched.sim.model import (
    COMPLETED,
    DROPPED,
    EVICTED_PENDING,
    NEVER_STARTED,
    PENDING_REASONS,
    PENDING_TIERS,
    RUNNING,
    JobRecord,
    SimResult,
    Stats,
    Summary,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

FloatArray = npt.NDArray[np.float64]

MATPLOTLIB_MISSING = "the simulator's report needs matplotlib: pip install 'kaisched[sim]'"
MAX_JOB_ROWS = 10  # rows per list of jobs in the report (the full list is in jobs.csv)
FRAGMENTATION_INTERVALS = 60  # the fragmentation panel aggregates the run into this many intervals
MAX_PLOT_POINTS = 2000  # time-series points per line in a plot (longer series are bucket-averaged)
MAX_QUEUE_PANELS = 24  # per-queue panels in one figure (the busiest queues when there are more)
MAX_CDF_QUEUES = 8  # per-queue lines in the waiting-time / JCT plots
COMPARE_PLOT_POINTS = 500  # overlaid runs are smoothed more, to tell the lines apart

SAMPLES_COLUMNS = (
    "time",
    "gpus_total",
    "gpus_allocated",
    "gpus_fractional",
    "allocation_ratio",
    "idle_gpus",
    "fragmentation",
    "pending_jobs",
    "running_jobs",
    *(f"pending:{r}" for r in PENDING_REASONS),
)
QUEUES_COLUMNS = ("time", "queue", "allocated", "fair_share", "deserved", "requested", "usage")
#: ``fairness.csv`` (time-based runs, and every run of a comparison with one): per sample, the fair-share error and
#: Jain's index over the window (kaisched.sim.fairness), then per queue its windowed allocation
FAIRNESS_COLUMNS = ("time", "fair_share_error", "jain_window")
JOBS_COLUMNS = (
    "name",
    "queue",
    "gpus",
    "arrival",
    "start",
    "end",
    "wait",
    "jct",
    "evictions",
    "lost_gpu_seconds",
    "outcome",
    "reason",
    "pending",
    "last_reason",
    *(f"pending:{r}" for r in PENDING_REASONS),
)

_PALETTE = (
    "#4269d0",
    "#efb118",
    "#ff725c",
    "#6cc5b0",
    "#3ca951",
    "#ff8ab7",
    "#a463f2",
    "#97bbf5",
    "#9c6b4e",
    "#9498a0",
)
_WHOLE_COLOUR = "#4269d0"
_FRACTIONAL_COLOUR = "#97bbf5"
_CAPACITY_COLOUR = "#333333"
_USAGE_COLOUR = "#a463f2"


class ReportDependencyError(Exception):
    """The report's plots cannot be drawn: matplotlib is not installed (it comes with ``kaisched[sim]``)."""


# --------------------------------------------------------------------------------------------- formatting


def _finite(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def format_duration(seconds: float | None) -> str:
    """A duration for people: ``4.5s``, ``42s``, ``5m07s``, ``12m``, ``2h13m``, ``3d04h`` (``n/a`` if None)."""
    if seconds is None or math.isnan(seconds):
        return "n/a"
    if math.isinf(seconds):
        return "∞" if seconds > 0 else "-∞"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if round(seconds, 1) < 10:
        return f"{round(seconds, 1):g}s"
    secs = round(seconds)
    if secs < 60:
        return f"{secs}s"
    if secs < 600:
        m, s = divmod(secs, 60)
        return f"{m}m{s:02d}s"
    mins = round(seconds / 60)
    if mins < 60:
        return f"{mins}m"
    if mins < 48 * 60:
        h, m = divmod(mins, 60)
        return f"{h}h{m:02d}m"
    d, h = divmod(round(seconds / 3600), 24)
    return f"{d}d{h:02d}h"


def _pct(ratio: float | None, digits: int = 1) -> str:
    r = _finite(ratio)
    return "n/a" if r is None else f"{100 * r:.{digits}f} %"


def _num(x: float | None, digits: int = 1) -> str:
    v = _finite(x)
    if v is None:
        return "n/a"
    if v == round(v) and abs(v) < 1e15:
        return f"{round(v):,}"
    return f"{v:,.{digits}f}"


def _fixed(x: float | None, digits: int) -> str:
    v = _finite(x)
    return "n/a" if v is None else f"{v:.{digits}f}"


def _gpu_hours(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 10 else f"{x:,.0f}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _csv_num(x: float | None) -> str:
    """A number for a CSV cell: integers without a fraction, others to 6 decimals, empty when missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == round(x) and abs(x) < 1e15:
        return str(round(x))
    return repr(round(float(x), 6))


def _round(x: float | None, digits: int) -> float | None:
    v = _finite(x)
    return None if v is None else round(v, digits)


# ------------------------------------------------------------------------------------------- derived data


def _natural(name: str) -> list[tuple[int, int | str]]:
    """Sort key: digit runs as numbers (q2 before q10)."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p]


def _sorted_names(names: Iterable[str]) -> list[str]:
    return sorted(names, key=_natural)


def _stat(stats: Stats, name: str) -> float | None:
    """One figure of a :class:`Stats` (None when there were no values)."""
    if stats.count == 0:
        return None
    return _finite(float(getattr(stats, name)))


def _weights(times: FloatArray) -> FloatArray:
    """Each sample's weight in a time average: the time to the next sample (the last: the median step)."""
    n = len(times)
    if n == 0:
        return np.zeros(0)
    if n == 1:
        return np.ones(1)
    steps = np.diff(times)
    last = float(np.median(steps)) if len(steps) else 1.0
    w = np.append(steps, max(last, 0.0))
    w = np.clip(w, 0.0, None)
    return w if w.sum() > 0 else np.ones(n)


def _wmean(values: FloatArray, weights: FloatArray) -> float | None:
    """Time-weighted mean ignoring NaNs (None if nothing is left)."""
    ok = ~np.isnan(values)
    if not ok.any():
        return None
    w = weights[ok]
    if w.sum() <= 0:
        return float(values[ok].mean())
    return float(np.average(values[ok], weights=w))


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(np.asarray(values, dtype=np.float64))) if values else None


@dataclass(slots=True)
class _Series:
    """The samples as arrays (queue arrays hold NaN where a queue is missing from a sample)."""

    time: FloatArray
    total: FloatArray
    allocated: FloatArray
    fractional: FloatArray
    idle: FloatArray
    fragmentation: FloatArray
    pending: FloatArray
    running: FloatArray
    queues: dict[str, dict[str, FloatArray]]  # queue -> allocated / fair_share / deserved / requested
    #: reason -> the jobs waiting for it after each cycle (the reasons some job waited for, in the order of the tiers)
    pending_by_reason: dict[str, FloatArray] = field(default_factory=dict)

    @classmethod
    def of(cls, result: SimResult) -> _Series:
        samples = result.samples
        n = len(samples)

        def col(get: Callable[[Any], float]) -> FloatArray:
            return np.fromiter((get(s) for s in samples), dtype=np.float64, count=n)

        names = _sorted_names({q for s in samples for q in s.queues})
        queues: dict[str, dict[str, FloatArray]] = {}
        for q in names:
            arrs = {k: np.full(n, np.nan) for k in ("allocated", "fair_share", "deserved", "requested", "usage")}
            queues[q] = arrs
        for i, s in enumerate(samples):
            for q, qs in s.queues.items():
                a = queues[q]
                a["allocated"][i] = qs.allocated
                a["fair_share"][i] = qs.fair_share
                a["deserved"][i] = qs.deserved if qs.deserved >= 0 else np.nan
                a["requested"][i] = qs.requested
                if qs.usage is not None:  # as GPUs: the share of the cluster's GPUs it held over the window
                    a["usage"][i] = qs.usage * s.gpus_total
        return cls(
            time=col(lambda s: s.time),
            total=col(lambda s: s.gpus_total),
            allocated=col(lambda s: s.gpus_allocated),
            fractional=col(lambda s: s.gpus_fractional),
            idle=col(lambda s: s.idle_gpus),
            fragmentation=col(lambda s: s.fragmentation),
            pending=col(lambda s: s.pending_jobs),
            running=col(lambda s: s.running_jobs),
            queues=queues,
            pending_by_reason={r: np.fromiter((s.pending_by_reason.get(r, 0) for s in samples), dtype=np.float64,
                                              count=n)
                               for r in PENDING_REASONS if any(r in s.pending_by_reason for s in samples)},
        )


@dataclass(slots=True)
class QueueFigures:
    """One queue's figures over a run (GPU figures are time-weighted means over the samples)."""

    queue: str
    allocated: float | None
    fair_share: float | None
    deserved: float | None  # None: unlimited (or never sampled)
    deserved_unlimited: bool
    requested: float | None
    jobs: int
    completed: int
    never_started: int
    evictions: int
    running: int  # at the end of the run
    waiting: int  # at the end: never started, or evicted and pending again
    dropped: int
    gpu_hours_lost: float
    wait_mean: float | None  # jobs still waiting count to the end of the run (a lower bound then)
    wait_p95: float | None
    wait_censored: int  # jobs still waiting at the end, in the wait figures with their wait so far
    jct_mean: float | None
    jct_p95: float | None

    @property
    def share_ratio(self) -> float | None:
        """Mean allocation over mean fair share (None when the fair share is zero)."""
        if self.allocated is None or not self.fair_share:
            return None
        return self.allocated / self.fair_share


def queue_figures(result: SimResult, series: _Series | None = None) -> list[QueueFigures]:
    """Per-queue figures, one per queue seen in the samples or the jobs, by name."""
    series = series or _Series.of(result)
    w = _weights(series.time)
    end = _run_end(result)
    by_queue: dict[str, list[JobRecord]] = {}
    for j in result.jobs:
        by_queue.setdefault(j.queue, []).append(j)
    out = []
    for q in _sorted_names(set(series.queues) | set(by_queue)):
        arrs = series.queues.get(q)
        jobs = by_queue.get(q, [])
        outcomes = [outcome_of(j) for j in jobs]
        waits = [x for x in (waited(j, end) for j in jobs) if x is not None]
        jcts = [x for x in (j.jct for j in jobs) if x is not None]
        deserved_unlimited = False
        if arrs is not None:
            raw_des = [s.queues[q].deserved for s in result.samples if q in s.queues]
            deserved_unlimited = bool(raw_des) and all(d < 0 for d in raw_des)
        out.append(
            QueueFigures(
                queue=q,
                allocated=None if arrs is None else _wmean(arrs["allocated"], w),
                fair_share=None if arrs is None else _wmean(arrs["fair_share"], w),
                deserved=None if arrs is None else _wmean(arrs["deserved"], w),
                deserved_unlimited=deserved_unlimited,
                requested=None if arrs is None else _wmean(arrs["requested"], w),
                jobs=len(jobs),
                completed=outcomes.count(COMPLETED),
                never_started=outcomes.count(NEVER_STARTED),
                evictions=sum(j.evictions for j in jobs),
                running=outcomes.count(RUNNING),
                waiting=outcomes.count(NEVER_STARTED) + outcomes.count(EVICTED_PENDING),
                dropped=outcomes.count(DROPPED),
                gpu_hours_lost=sum(j.lost_gpu_seconds for j in jobs) / 3600,
                wait_mean=_mean(waits),
                wait_p95=_percentile(waits, 95),
                wait_censored=sum(1 for j, o in zip(jobs, outcomes, strict=True) if j.start is None and o != DROPPED),
                jct_mean=_mean(jcts),
                jct_p95=_percentile(jcts, 95),
            )
        )
    return out


def _gpus_total(result: SimResult) -> float | None:
    return max((s.gpus_total for s in result.samples), default=None)


def _simulated_span(result: SimResult) -> float:
    last = result.samples[-1].time if result.samples else 0.0
    return max(last, _finite(result.summary.makespan) or 0.0, _finite(result.summary.end) or 0.0)


def _run_end(result: SimResult) -> float:
    """When the run ended (the jobs still waiting have waited until then)."""
    return _simulated_span(result)


def accounting(s: Summary) -> list[tuple[str, int]]:
    """(what, jobs) for every outcome with jobs, completed first; the counts sum to ``s.jobs``."""
    parts = [("completed", s.completed), ("still running at the end", s.running_at_end),
             ("evicted and waiting again at the end", s.evicted_pending), ("never started", s.never_started),
             ("dropped (could never run)", s.dropped)]
    return [(what, n) for what, n in parts if n or what == "completed"]


def accounting_text(s: Summary) -> str:
    """Every job accounted for: ``730 of 750 completed, 19 still running at the end, 1 never started``."""
    parts = accounting(s)
    text = f"{s.completed:,} of {_plural(s.jobs, 'job')} completed"
    text += "".join(f", {n:,} {what}" for what, n in parts[1:])
    if s.not_arrived:
        text += f" ({s.not_arrived:,} more would have arrived after the end)"
    return text


def wait_note(s: Summary) -> str:
    """What the waiting-time figures include ("" when every job that could start did)."""
    dropped = f"{_plural(s.dropped, 'dropped job')} left out" if s.dropped else ""
    if s.wait_censored:
        still = "1 job" if s.wait_censored == 1 else f"{s.wait_censored:,} jobs"
        verb = "counts with its wait" if s.wait_censored == 1 else "count with their wait"
        return f"a lower bound: {still} still waiting at the end {verb} up to the end" + (
            f"; {dropped}" if dropped else "")
    return dropped


def _bound(s: Summary) -> str:
    """``≥ `` before a waiting-time figure that is a lower bound."""
    return "≥ " if s.wait_censored else ""


# --------------------------------------------------------------------------------------- machine-readable


def _stats_dict(stats: Stats) -> dict[str, Any]:
    return {"count": stats.count, **{k: _round(_stat(stats, k), 2) for k in ("mean", "p50", "p95", "p99")}}


def summary_dict(result: SimResult) -> dict[str, Any]:
    """What ``summary.json`` holds: the scenario, the summary (rounded; None where missing), per-queue figures."""
    s: Summary = result.summary
    queues = queue_figures(result)
    return {
        "scenario": result.scenario,
        "summary": {
            "jobs": s.jobs,
            "completed": s.completed,
            "never_started": s.never_started,
            "makespan": _round(s.makespan, 2),
            "gpu_allocation_mean": _round(s.gpu_allocation_mean, 4),
            "fractional_allocation_mean": _round(s.fractional_allocation_mean, 4),
            "wait": _stats_dict(s.wait),
            "jct": _stats_dict(s.jct),
            "evictions": s.evictions,
            "gpu_hours_lost": _round(s.gpu_hours_lost, 4),
            "fragmentation_mean": _round(s.fragmentation_mean, 4),
            "jain_fairness": _round(s.jain_fairness, 4),
            "cycles": s.cycles,
            "wall_seconds": _round(s.wall_seconds, 3),
            "running_at_end": s.running_at_end,
            "evicted_pending_at_end": s.evicted_pending,
            "dropped": s.dropped,
            "not_arrived": s.not_arrived,
            "end": _round(s.end, 2),
            "wait_censored": s.wait_censored,
            "wait_is_lower_bound": s.wait_censored > 0,
            "stranded_gpus_mean": {"no_cpu": _round(s.stranded_no_cpu_mean, 2),
                                   "no_memory": _round(s.stranded_no_memory_mean, 2),
                                   "slivers": _round(s.stranded_slivers_mean, 2)},
        },
        "outcomes": dict(s.accounted),
        "inputs": _inputs_json(result),
        "pending_by_reason": _pending_json(result),
        "gpus_total": _round(_gpus_total(result), 4),
        "samples": len(result.samples),
        "time_based": result.time_based,
        "long_run_fair_share": {q: _round(v, 4) for q, v in sorted(result.long_run_share.items())},
        "queues": {
            q.queue: {
                "allocated_mean": _round(q.allocated, 4),
                "fair_share_mean": _round(q.fair_share, 4),
                "deserved_mean": None if q.deserved_unlimited else _round(q.deserved, 4),
                "deserved_unlimited": q.deserved_unlimited,
                "requested_mean": _round(q.requested, 4),
                "jobs": q.jobs,
                "completed": q.completed,
                "never_started": q.never_started,
                "running_at_end": q.running,
                "waiting_at_end": q.waiting,
                "dropped": q.dropped,
                "evictions": q.evictions,
                "gpu_hours_lost": _round(q.gpu_hours_lost, 4),
                "wait_mean": _round(q.wait_mean, 2),
                "wait_p95": _round(q.wait_p95, 2),
                "wait_censored": q.wait_censored,
                "jct_mean": _round(q.jct_mean, 2),
                "jct_p95": _round(q.jct_p95, 2),
            }
            for q in queues
        },
    }


def _reason_json(by: dict[str, ReasonTime]) -> dict[str, Any]:
    total = sum(r.seconds for r in by.values())
    return {reason: {"tier": PENDING_TIERS.get(reason, reason), "seconds": _round(r.seconds, 2),
                     "gpu_seconds": _round(r.gpu_seconds, 2), "jobs": r.jobs,
                     "share": _round(r.seconds / total if total > 0 else None, 4)}
            for reason, r in by.items()}


def _by_queue(result: SimResult) -> dict[str, list[JobRecord]]:
    out: dict[str, list[JobRecord]] = {}
    for j in result.jobs:
        out.setdefault(j.queue, []).append(j)
    return {q: out[q] for q in _sorted_names(out)}


def _pending_json(result: SimResult) -> dict[str, Any]:
    """Where the waiting went: the time pending per reason, over all jobs and per queue (reasons nobody waited for
    left out; ``share``: of the group's pending job-seconds)."""
    return {"all": _reason_json(pending_by_reason(result.jobs)),
            "queues": {q: _reason_json(pending_by_reason(jobs)) for q, jobs in _by_queue(result).items()}}


def _inputs_json(result: SimResult) -> dict[str, Any]:
    """The run's inputs for summary.json (the scenario's text left out: it is in the report)."""
    return {k: v for k, v in result.inputs.items() if k != "scenario_text"}


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _samples_rows(result: SimResult) -> Iterable[list[str]]:
    for s in result.samples:
        ratio = s.gpus_allocated / s.gpus_total if s.gpus_total > 0 else None
        yield [
            _csv_num(s.time),
            _csv_num(s.gpus_total),
            _csv_num(s.gpus_allocated),
            _csv_num(s.gpus_fractional),
            _csv_num(ratio),
            _csv_num(s.idle_gpus),
            _csv_num(s.fragmentation),
            str(s.pending_jobs),
            str(s.running_jobs),
            *(str(s.pending_by_reason.get(r, 0)) for r in PENDING_REASONS),
        ]


def _queues_rows(result: SimResult) -> Iterable[list[str]]:
    for s in result.samples:
        t = _csv_num(s.time)
        for name in _sorted_names(s.queues):
            q = s.queues[name]
            yield [t, name, _csv_num(q.allocated), _csv_num(q.fair_share), _csv_num(q.deserved), _csv_num(q.requested),
                   _csv_num(q.usage)]


def _jobs_rows(result: SimResult) -> Iterable[list[str]]:
    for j in result.jobs:
        yield [
            j.name,
            j.queue,
            _csv_num(j.gpus),
            _csv_num(j.arrival),
            _csv_num(j.start),
            _csv_num(j.end),
            _csv_num(j.wait),
            _csv_num(j.jct),
            str(j.evictions),
            _csv_num(j.lost_gpu_seconds),
            outcome_of(j),
            j.reason,
            _csv_num(j.pending),
            j.last_reason,
            *(_csv_num(j.pending_by_reason.get(r, 0.0)) for r in PENDING_REASONS),
        ]


def write_outputs(result: SimResult, outdir: Path) -> dict[str, Path]:
    """Write a run's ``summary.json``, ``samples.csv``, ``queues.csv``, ``jobs.csv`` and ``report.html``.

    Creates ``outdir`` if needed; returns file name -> path.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = {name: outdir / name for name in ("summary.json", "samples.csv", "queues.csv", "jobs.csv", "report.html")}
    _write_json(paths["summary.json"], summary_dict(result))
    _write_csv(paths["samples.csv"], SAMPLES_COLUMNS, _samples_rows(result))
    _write_csv(paths["queues.csv"], QUEUES_COLUMNS, _queues_rows(result))
    _write_csv(paths["jobs.csv"], JOBS_COLUMNS, _jobs_rows(result))
    if result.time_based:
        paths["fairness.csv"] = outdir / "fairness.csv"
        long_run = reference_shares([result])
        _write_fairness_csv(paths["fairness.csv"], fairness(result, long_run, fairness_window([result])))
    paths["report.html"].write_text(render_html(result), encoding="utf-8")
    return paths


def _write_fairness_csv(path: Path, f: RunFairness) -> None:
    names = [q.queue for q in f.queues]
    header = [*FAIRNESS_COLUMNS, *(f"windowed_allocation:{q}" for q in names)]
    _write_csv(path, header, ([_csv_num(float(t)), _csv_num(_finite(float(e))), _csv_num(_finite(float(j))),
                               *(_csv_num(float(w[i])) for w in f.windowed.values())]
                              for i, (t, e, j) in enumerate(zip(f.times, f.error, f.jain, strict=True))))


# ------------------------------------------------------------------------------------------------ terminal


def terminal_width(default: int = 100) -> int:
    """The terminal's width: ``COLUMNS`` when set (also when the output is not a terminal), else the terminal's,
    else ``default``."""
    return max(shutil.get_terminal_size((default, 24)).columns, 20)


def wrap_phrases(phrases: Sequence[str], width: int | None = None, *, sep: str = " · ", prefix: str = "",
                 indent: str = "  ") -> list[str]:
    """Phrases joined by ``sep`` into lines of at most ``width`` characters (default: :func:`terminal_width`),
    broken between phrases (the separator dropped at the break), or between the words of a phrase too long for a
    line, never inside a word; ``prefix`` starts the first line, ``indent`` the others."""
    width = width or terminal_width()
    lines: list[str] = []
    line, empty = prefix, True  # the line being filled; no phrase on it yet
    for phrase in phrases:
        candidate = line + phrase if empty else line + sep + phrase
        if len(candidate) <= width:
            line, empty = candidate, False
            continue
        if not empty:  # the phrase goes to a line of its own
            lines.append(line)
            line, empty = indent, True
            if len(line + phrase) <= width:
                line, empty = line + phrase, False
                continue
        # too long for any line: broken between its words
        parts = textwrap.wrap(phrase, width=width, initial_indent=line, subsequent_indent=indent,
                              break_long_words=False, break_on_hyphens=False) or [line]
        lines.extend(parts[:-1])
        line, empty = parts[-1], False
    if not empty or not lines:
        lines.append(line.rstrip())
    return lines


def _key_figures(s: Summary) -> list[str]:
    ev = "no evictions" if s.evictions == 0 else _plural(s.evictions, "eviction")
    b = _bound(s)
    parts = [
        f"GPU allocation {_pct(s.gpu_allocation_mean)} (fractional {_pct(s.fractional_allocation_mean)})",
        f"JCT mean {format_duration(_stat(s.jct, 'mean'))} p95 {format_duration(_stat(s.jct, 'p95'))}",
        f"wait mean {b}{format_duration(_stat(s.wait, 'mean'))} p95 {b}{format_duration(_stat(s.wait, 'p95'))}",
        f"makespan {format_duration(s.makespan)}",
        f"{ev}, {_gpu_hours(s.gpu_hours_lost)} GPU-hours lost",
        f"fragmentation {_pct(s.fragmentation_mean)}",
        *([f"stranded GPUs {stranded_text(s)}"] if _stranded_any(s) else []),
        f"Jain {_fixed(s.jain_fairness, 2)}",
    ]
    notes = []
    if s.completed < s.jobs:
        notes.append(f"JCT and makespan are over the {s.completed:,} completed jobs")
    if wait_note(s):
        notes.append(f"waiting times are {wait_note(s)}" if s.wait_censored else f"waiting times: {wait_note(s)}")
    return parts + notes


def stranded_text(s: Summary) -> str:
    """The mean stranded GPUs by cause: ``no CPU 12.3 · no memory 0.0 · slivers 4.5``."""
    return (f"no CPU {_num(s.stranded_no_cpu_mean, 1)} · no memory {_num(s.stranded_no_memory_mean, 1)} · "
            f"slivers {_num(s.stranded_slivers_mean, 1)}")


def _stranded_any(s: Summary) -> bool:
    return s.stranded_no_cpu_mean + s.stranded_no_memory_mean + s.stranded_slivers_mean >= 0.05


def _key_figures_line(s: Summary) -> str:
    return " · ".join(_key_figures(s))


def _header(result: SimResult) -> list[str]:
    s = result.summary
    total = _gpus_total(result)
    return [
        accounting_text(s),
        f"{_num(total)} GPUs" if total is not None else "no GPUs sampled",
        f"{_plural(s.cycles, 'cycle')} over {format_duration(_simulated_span(result))} simulated",
        f"{s.wall_seconds:.1f} s wall",
    ]


def _header_line(result: SimResult) -> str:
    return f"{result.scenario}: " + " · ".join(_header(result))


def summary_text(result: SimResult, max_queues: int = 12, width: int | None = None) -> str:
    """The terminal summary: a header (every job accounted for), the key figures, then each queue (plain text),
    wrapped between phrases to ``width`` (default: :func:`terminal_width`)."""
    width = width or terminal_width()
    lines = wrap_phrases(_header(result), width, prefix=f"{result.scenario}: ")
    lines += wrap_phrases(_key_figures(result.summary), width)
    if pending := waiting_phrases(result):
        lines += wrap_phrases(pending, width, prefix="waiting: ")
    queues = queue_figures(result)
    if queues:
        lines.append("per queue:")
        name_width = max(len(q.queue) for q in queues[:max_queues])
        waits = _by_queue(result)
        for q in queues[:max_queues]:
            des = "∞" if q.deserved_unlimited else _fixed(q.deserved, 1)
            b = "≥ " if q.wait_censored else ""
            waiting = "".join(f", {n:,} {what}" for n, what in ((q.running, "running at the end"),
                                                                 (q.waiting, "waiting at the end"),
                                                                 (q.dropped, "dropped")) if n)
            lines += wrap_phrases(
                [f"allocated {_fixed(q.allocated, 1)} GPUs (fair share {_fixed(q.fair_share, 1)}, deserved {des})",
                 f"{_plural(q.jobs, 'job')}, {q.completed:,} completed{waiting}",
                 f"wait mean {b}{format_duration(q.wait_mean)} p95 {b}{format_duration(q.wait_p95)}",
                 *_mostly_phrase(waits.get(q.queue, []))],
                width, prefix=f"  {q.queue:<{name_width}}  ", indent="      ")
        if len(queues) > max_queues:
            lines.append(f"  … and {len(queues) - max_queues} more queues (all of them in the report)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ compare


@dataclass(frozen=True, slots=True)
class _Metric:
    key: str
    title: str
    get: Callable[[Summary], float | None]
    fmt: Callable[[float | None], str]
    better: str | None  # "lower" / "higher" / None (no best)
    digits: int = 4
    #: the figure depends on which jobs finished: a best only among runs that completed as many jobs
    per_completed: bool = False


def _stat_getter(which: str, name: str) -> Callable[[Summary], float | None]:
    return lambda s: _stat(getattr(s, which), name)


def _int_fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{round(x):,}"


METRICS: tuple[_Metric, ...] = (
    _Metric("gpu_allocation_mean", "GPU allocation", lambda s: s.gpu_allocation_mean, _pct, "higher"),
    _Metric("fractional_allocation_mean", "of which fractional", lambda s: s.fractional_allocation_mean, _pct, None),
    _Metric("jct_mean", "JCT mean", _stat_getter("jct", "mean"), format_duration, "lower", 2, True),
    _Metric("jct_p50", "JCT p50", _stat_getter("jct", "p50"), format_duration, "lower", 2, True),
    _Metric("jct_p95", "JCT p95", _stat_getter("jct", "p95"), format_duration, "lower", 2, True),
    _Metric("jct_p99", "JCT p99", _stat_getter("jct", "p99"), format_duration, "lower", 2, True),
    _Metric("wait_mean", "wait mean", _stat_getter("wait", "mean"), format_duration, "lower", 2, True),
    _Metric("wait_p50", "wait p50", _stat_getter("wait", "p50"), format_duration, "lower", 2, True),
    _Metric("wait_p95", "wait p95", _stat_getter("wait", "p95"), format_duration, "lower", 2, True),
    _Metric("wait_p99", "wait p99", _stat_getter("wait", "p99"), format_duration, "lower", 2, True),
    _Metric("makespan", "makespan", lambda s: s.makespan, format_duration, "lower", 2, True),
    _Metric("jobs", "jobs", lambda s: s.jobs, _int_fmt, None),
    _Metric("completed", "jobs completed", lambda s: s.completed, _int_fmt, "higher"),
    _Metric("running_at_end", "still running at the end", lambda s: s.running_at_end, _int_fmt, None),
    _Metric("evicted_pending", "evicted, waiting at the end", lambda s: s.evicted_pending, _int_fmt, "lower"),
    _Metric("never_started", "jobs never started", lambda s: s.never_started, _int_fmt, "lower"),
    _Metric("dropped", "jobs dropped", lambda s: s.dropped, _int_fmt, "lower"),
    _Metric("evictions", "evictions", lambda s: s.evictions, _int_fmt, "lower"),
    _Metric("gpu_hours_lost", "GPU-hours lost", lambda s: s.gpu_hours_lost, lambda x: _num(x, 1), "lower"),
    _Metric("fragmentation_mean", "fragmentation", lambda s: s.fragmentation_mean, _pct, "lower"),
    _Metric("stranded_no_cpu", "stranded GPUs: no CPU (mean)", lambda s: s.stranded_no_cpu_mean,
            lambda x: _num(x, 1), "lower"),
    _Metric("stranded_no_memory", "stranded GPUs: no memory (mean)", lambda s: s.stranded_no_memory_mean,
            lambda x: _num(x, 1), "lower"),
    _Metric("stranded_slivers", "stranded GPUs: slivers (mean)", lambda s: s.stranded_slivers_mean,
            lambda x: _num(x, 1), "lower"),
    _Metric("jain_fairness", "Jain's fairness index", lambda s: s.jain_fairness, lambda x: _fixed(x, 3), "higher"),
    _Metric("cycles", "scheduling cycles", lambda s: s.cycles, _int_fmt, None),
    _Metric("wall_seconds", "wall time (s)", lambda s: s.wall_seconds, lambda x: _num(x, 2), None),
)


def _best(values: Sequence[float | None], better: str | None) -> set[int]:
    """Indices of the best values of a row (none when there is no order, or all values are equal)."""
    present = [(i, v) for i, v in enumerate(values) if v is not None]
    if better is None or not present:
        return set()
    pick = min if better == "lower" else max
    target = pick(v for _, v in present)
    best = {i for i, v in present if math.isclose(v, target, rel_tol=1e-9, abs_tol=1e-12)}
    return set() if len(best) == len(values) else best


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: _Metric
    values: list[float | None]
    best: set[int]  # indices of the runs with the best value (none: no order, all equal, or not comparable)
    note: str = ""  # why no best is given although the figure has an order


def _not_comparable(results: Sequence[SimResult], labels: Sequence[str], metric: _Metric) -> str:
    """Why the runs' values of ``metric`` cannot be ranked ("" when they can)."""
    jobs = [r.summary.jobs for r in results]
    if metric.better is not None and len(set(jobs)) > 1:
        counts = ", ".join(f"{label} {n:,}" for label, n in zip(labels, jobs, strict=True))
        return f"not comparable: the runs have different workloads ({counts} jobs)"
    done = [r.summary.completed for r in results]
    if metric.per_completed and len(set(done)) > 1:
        most = max(done)
        fewer = [label for label, n in zip(labels, done, strict=True) if n < most]
        counts = ", ".join(f"{label} {n:,}" for label, n in zip(labels, done, strict=True))
        runs = "run " + fewer[0] if len(fewer) == 1 else "runs " + ", ".join(fewer)
        return f"not comparable: {runs} finished fewer jobs ({counts} completed)"
    return ""


def _metric_rows(results: Sequence[SimResult], labels: Sequence[str] | None = None) -> list[MetricRow]:
    names = list(labels) if labels is not None else [r.scenario for r in results]
    rows = []
    for m in METRICS:
        values = [_finite(m.get(r.summary)) for r in results]
        note = _not_comparable(results, names, m) if len(results) > 1 else ""
        rows.append(MetricRow(m, values, set() if note else _best(values, m.better), note))
    return rows


def _title(results: Sequence[SimResult]) -> str:
    """The runs' scenarios in the order given (each once)."""
    return " / ".join(dict.fromkeys(r.scenario for r in results))


_LABEL_RE = re.compile(r"[^A-Za-z0-9._-]+")


def _check_labels(results: Sequence[SimResult], labels: Sequence[str]) -> list[str]:
    """Each run's folder name: its label with characters other than ``A-Za-z0-9._-`` replaced by ``_``, made
    distinct by a ``-2``, ``-3`` ... suffix. ValueError when the counts differ or there is nothing to compare."""
    if len(results) != len(labels):
        raise ValueError(f"{len(results)} results but {len(labels)} labels")
    if not results:
        raise ValueError("nothing to compare")
    dirs: list[str] = []
    for label in labels:
        base = _LABEL_RE.sub("_", label).strip("._") or "run"
        d, k = base, 1
        while d.lower() in (x.lower() for x in dirs):  # also distinct on case-insensitive file systems
            k += 1
            d = f"{base}-{k}"
        dirs.append(d)
    return dirs


def compare_dict(results: Sequence[SimResult], labels: Sequence[str]) -> dict[str, Any]:
    """What ``compare.json`` holds: labels, scenarios, each metric's values and best labels, each run's summary."""
    return {
        "labels": list(labels),
        "scenarios": [r.scenario for r in results],
        "metrics": [
            {
                "key": row.metric.key,
                "title": row.metric.title,
                "better": row.metric.better,
                "values": [_round(v, row.metric.digits) for v in row.values],
                "best": [labels[i] for i in sorted(row.best)],
                "comparable": not row.note,
                "note": row.note,
            }
            for row in _metric_rows(results, labels)
        ],
        "runs": {label: summary_dict(r) for label, r in zip(labels, results, strict=True)},
        "fairness": _fairness_dict(fairness_comparison(results, labels), labels),
    }


def _fairness_dict(fc: FairnessComparison | None, labels: Sequence[str]) -> dict[str, Any] | None:
    if fc is None:
        return None
    return {
        "window": _round(fc.window, 2),
        "reference": fc.reference,
        "long_run_fair_share": {q: _round(v, 4) for q, v in fc.long_run.items()},
        "metrics": [{"key": row.metric.key, "title": row.metric.title, "better": row.metric.better,
                     "values": [_round(v, row.metric.digits) for v in row.values],
                     "best": [labels[i] for i in sorted(row.best)]} for row in fc.rows],
    }


def compare_text(results: Sequence[SimResult], labels: Sequence[str], width: int | None = None) -> str:
    """The comparison as an aligned plain-text table, the best value of each row marked with ``*`` and the rows
    that cannot be ranked with ``†`` (why, below the table), the runs in the order given."""
    _check_labels(results, labels)
    rows = _metric_rows(results, labels)
    lines = _rows_text(["", *labels], rows)
    title = f"{_title(results)}: {len(results)} runs compared ({', '.join(labels)})"
    notes = list(dict.fromkeys(row.note for row in rows if row.note))
    footer = (["* best of the row"] if any(row.best for row in rows) else []) + [f"† {n}" for n in notes]
    out = [*wrap_phrases([title], width), *lines]
    for line in footer:
        out.extend(wrap_phrases([line], width))
    for label, r in zip(labels, results, strict=True):
        out.extend(wrap_phrases([f"{label}: {accounting_text(r.summary)}"], width))
    fair = fairness_text(results, labels, width)
    if fair:
        out += ["", fair]
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class FairnessComparison:
    """Fairness over time of runs side by side (kaisched.sim.fairness), against one set of long-run fair shares."""

    window: float  # seconds
    reference: str  # which runs the long-run fair shares come from
    long_run: dict[str, float]
    runs: list[RunFairness]
    rows: list[MetricRow]


def _fairness_rows(labels: Sequence[str], runs: Sequence[RunFairness]) -> list[MetricRow]:
    w = format_duration(runs[0].window) if runs else ""
    rows: list[MetricRow] = []

    def row(key: str, title: str, values: list[float | None], fmt: Callable[[float | None], str],
            better: str | None, digits: int = 4) -> None:
        metric = _Metric(key, title, lambda _s: None, fmt, better, digits)
        rows.append(MetricRow(metric, [_finite(v) for v in values], _best([_finite(v) for v in values], better)))

    row("fair_share_error", f"fair-share error over {w} (GPUs)", [r.error_mean for r in runs],
        lambda x: _fixed(x, 2), "lower")
    row("jain_window", f"Jain's index over {w}", [r.jain_mean for r in runs], lambda x: _fixed(x, 3), "higher")
    names = [q.queue for q in runs[0].queues] if runs else []
    for k, name in enumerate(names):
        qs = [r.queues[k] for r in runs]
        share = qs[0].long_run
        row(f"{name}.allocated", f"{name}: allocated (long-run share {_fixed(share, 1)})",
            [q.allocated for q in qs], lambda x: _fixed(x, 1), None, 2)
        row(f"{name}.window_error", f"{name}: error over {w} (GPUs)", [q.window_error for q in qs],
            lambda x: _fixed(x, 2), "lower")
        row(f"{name}.wait_mean", f"{name}: wait mean", [q.wait_mean for q in qs],
            _bounded_duration if any(q.waiting_at_end for q in qs) else format_duration, None, 2)
    return rows


def _bounded_duration(x: float | None) -> str:
    """A waiting time that is a lower bound (jobs still waited at the end)."""
    return "≥ " + format_duration(x) if x is not None else format_duration(x)


def fairness_comparison(results: Sequence[SimResult], labels: Sequence[str]) -> FairnessComparison | None:
    """The fairness over time of the runs, when any of them is time-based (None otherwise)."""
    if not any(r.time_based for r in results):
        return None
    window = fairness_window(results)
    long_run = reference_shares(results)
    weight_only = [label for label, r in zip(labels, results, strict=True) if not r.time_based]
    reference = ("run" + ("s " if len(weight_only) > 1 else " ") + ", ".join(weight_only) + " (weight-only)"
                 if weight_only else "all runs (all time-based)")
    runs = [fairness(r, long_run, window) for r in results]
    return FairnessComparison(window, reference, long_run, runs, _fairness_rows(labels, runs))


def _fairness_note(fc: FairnessComparison) -> str:
    return (f"Fairness over time (window {format_duration(fc.window)}): each queue's mean allocation over the "
            f"window against its long-run fair share (the weight-only division of the cluster for its mean demand, "
            f"from {fc.reference}); error: mean |windowed allocation - long-run share| over the queues; Jain's "
            "index of windowed allocation / long-run share (capped at 1)")


def _rows_text(header: Sequence[str], rows: Sequence[MetricRow]) -> list[str]:
    table = [list(header)]
    for row in rows:
        mark = " †" if row.note else ""
        table.append([row.metric.title + mark,
                      *(row.metric.fmt(v) + (" *" if i in row.best else "") for i, v in enumerate(row.values))])
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    lines = []
    for k, cells_row in enumerate(table):
        cells = [cells_row[0].ljust(widths[0])] + [cells_row[c].rjust(widths[c]) for c in range(1, len(cells_row))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def fairness_text(results: Sequence[SimResult], labels: Sequence[str], width: int | None = None) -> str:
    """The fairness comparison as plain text ("" when no run is time-based)."""
    fc = fairness_comparison(results, labels)
    if fc is None:
        return ""
    return "\n".join([*wrap_phrases([_fairness_note(fc)], width), *_rows_text(["", *labels], fc.rows)])


def compare(results: list[SimResult], labels: list[str], outdir: Path) -> dict[str, Path]:
    """Write ``compare.json``, ``compare.html`` and each run's outputs under ``outdir/<label>/``.

    Returns file name -> path, the runs' files as ``<label>/<file name>``.
    """
    dirs = _check_labels(results, labels)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {"compare.json": outdir / "compare.json", "compare.html": outdir / "compare.html"}
    fc = fairness_comparison(results, labels)
    for k, (r, d) in enumerate(zip(results, dirs, strict=True)):
        for name, p in write_outputs(r, outdir / d).items():
            paths[f"{d}/{name}"] = p
        if fc is not None:  # against the comparison's long-run fair shares (a run's own file has its own)
            paths[f"{d}/fairness.csv"] = outdir / d / "fairness.csv"
            _write_fairness_csv(paths[f"{d}/fairness.csv"], fc.runs[k])
    _write_json(paths["compare.json"], compare_dict(results, labels))
    paths["compare.html"].write_text(render_compare_html(results, labels, dirs), encoding="utf-8")
    return paths


# ------------------------------------------------------------------------------------------------- plots


def downsample(times: FloatArray, *series: FloatArray, max_points: int = MAX_PLOT_POINTS) -> list[FloatArray]:
    """Average consecutive samples into at most ``max_points`` buckets (times: each bucket's first time).

    NaN values are left out of a bucket's mean (a bucket of NaN only stays NaN).
    """
    n = len(times)
    if n <= max_points:
        return [times, *series]
    starts = np.unique(np.linspace(0, n, max_points + 1).astype(np.int64)[:-1])
    counts = np.diff(np.append(starts, n)).astype(np.float64)
    out = [times[starts]]
    for s in series:
        nan = np.isnan(s)
        sums = np.add.reduceat(np.where(nan, 0.0, s), starts)
        ok = counts - np.add.reduceat(nan.astype(np.float64), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(ok > 0, sums / np.where(ok > 0, ok, 1.0), np.nan))
    return out


@dataclass(frozen=True, slots=True)
class _TimeUnit:
    divisor: float
    name: str


def _time_unit(span: float) -> _TimeUnit:
    if span <= 5 * 60:  # (KAI's time-based simulator input: a cycle a second)
        return _TimeUnit(1.0, "s")
    if span <= 2 * 3600:
        return _TimeUnit(60.0, "min")
    if span <= 72 * 3600:
        return _TimeUnit(3600.0, "h")
    return _TimeUnit(86400.0, "days")


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _png(fig: Figure) -> str:
    """The figure as a base64 PNG data URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def check_plotting() -> None:
    """Raise :class:`ReportDependencyError` unless matplotlib can be imported (the report's plots need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportDependencyError(MATPLOTLIB_MISSING) from None


def _render(draw: Callable[[], Figure]) -> str:
    check_plotting()
    import matplotlib

    with matplotlib.rc_context(
        {
            "font.size": 9.5,
            "axes.titlesize": 10.5,
            "axes.titleweight": "bold",
            "axes.labelsize": 9.5,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.color": "#e4e4e4",
            "grid.linewidth": 0.7,
            "legend.fontsize": 8.5,
            "legend.frameon": False,
            "figure.dpi": 100,
            "savefig.dpi": 110,
        }
    ):
        return _png(draw())


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#888888")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _line(colour: str, ls: Any = "-", lw: float = 1.4) -> Line2D:
    """A legend entry for a line style (drawn nowhere)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, ls=ls, lw=lw)


def _headroom(ax: Axes, top: float, factor: float) -> None:
    """Y from 0 to ``top`` plus room for a legend above the data."""
    ax.set_ylim(0, max(top, 1.0) * factor)


def _plot_utilisation(series: _Series, unit: _TimeUnit) -> Figure:
    fig = _new_figure(11, 5.8)
    axes = fig.subplots(3, 1, sharex=True, height_ratios=[3, 1.2, 1.1])
    ax, ax_jobs, ax_frag = axes
    if len(series.time) == 0:
        for a in axes:
            _empty(a, "no samples")
        return fig
    t, total, alloc, frac, pending, running = downsample(
        series.time,
        series.total,
        series.allocated,
        series.fractional,
        series.pending,
        series.running,
    )
    x = t / unit.divisor
    whole = np.clip(alloc - frac, 0.0, None)
    ax.fill_between(x, 0, whole, step="post", color=_WHOLE_COLOUR, alpha=0.85, lw=0, label="whole GPUs")
    ax.fill_between(
        x, whole, whole + frac, step="post", color=_FRACTIONAL_COLOUR, alpha=0.95, lw=0, label="fractional GPUs"
    )
    ax.step(x, total, where="post", color=_CAPACITY_COLOUR, lw=1.3, ls="--", label="capacity")
    ax.set_ylabel("GPUs")
    _headroom(ax, float(np.nanmax(np.maximum(total, alloc))), 1.2)
    ax.legend(loc="upper right", ncols=3)
    ax_jobs.step(x, pending, where="post", color="#ff725c", lw=1.1, label="pending jobs")
    ax_jobs.step(x, running, where="post", color="#3ca951", lw=1.1, label="running jobs")
    ax_jobs.set_ylabel("jobs")
    _headroom(ax_jobs, float(np.nanmax(np.maximum(pending, running))), 1.45)
    ax_jobs.legend(loc="upper right", ncols=2)
    starts, ends, share = fragmentation_intervals(series)
    ax_frag.bar(starts / unit.divisor, 100 * np.nan_to_num(share), width=(ends - starts) / unit.divisor, align="edge",
                color="#a463f2", alpha=0.6, lw=0)
    ax_frag.set_ylabel("fragmented\nidle GPUs (%)")
    ax_frag.set_ylim(0, 100)
    ax_frag.set_xlabel(f"time ({unit.name})")
    if len(x) == 1:
        ax.set_xlim(x[0] - 1, x[0] + 1)
    else:
        ax.set_xlim(float(x[0]), float(x[-1]))
    return fig


def fragmentation_intervals(
    series: _Series, intervals: int = FRAGMENTATION_INTERVALS
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The fragmentation per interval of the run: (interval starts, ends, share 0..1 or NaN).

    In each of ``intervals`` equal intervals, the idle whole GPUs that sat on partly used nodes over all idle
    whole GPUs, each weighted by how long it lasted (GPU-seconds over GPU-seconds): a ratio of sums, so a moment
    with 1 idle GPU weighs 1/100 of one with 100, unlike the per-cycle ratio, which jumps between 0 and 100 %
    whenever only a few GPUs are idle. NaN where no GPU was idle in the interval."""
    t = series.time
    if len(t) == 0:
        empty = np.zeros(0)
        return empty, empty, empty
    w = _weights(t)
    idle = np.nan_to_num(series.idle) * w
    partial = np.nan_to_num(series.fragmentation) * idle
    start, end = float(t[0]), float(t[-1] + w[-1])
    n = max(1, min(intervals, len(t)))
    edges = np.linspace(start, end, n + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    idle_sum = np.bincount(which, weights=idle, minlength=n)
    partial_sum = np.bincount(which, weights=partial, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(idle_sum > 1e-12, partial_sum / np.where(idle_sum > 1e-12, idle_sum, 1.0), np.nan)
    return edges[:-1], edges[1:], share


def _busiest(queues: dict[str, dict[str, FloatArray]], limit: int) -> list[str]:
    """The queue names, or the ``limit`` with the most GPUs allocated, requested and shared when there are more."""
    names = _sorted_names(queues)
    if len(names) <= limit:
        return names

    def weight(q: str) -> float:
        a = queues[q]
        return float(np.nansum(a["allocated"]) + np.nansum(a["requested"]) + np.nansum(a["fair_share"]))

    return _sorted_names(sorted(names, key=weight, reverse=True)[:limit])


def _panel_grid(fig: Figure, n: int, unit: _TimeUnit) -> list[Axes]:
    """``n`` panels sharing the time axis, in up to 3 columns; the lowest panel of each column has the x labels."""
    ncols = 1 if n == 1 else 2 if n <= 4 else 3
    nrows = math.ceil(n / ncols)
    grid = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
    axes = [a for row in grid for a in row]
    for i, a in enumerate(axes):
        if i >= n:
            a.set_visible(False)
        elif i + ncols >= n:  # nothing below it
            a.xaxis.set_tick_params(labelbottom=True)
            a.set_xlabel(f"time ({unit.name})")
    return axes[:n]


def _queue_figure(n: int) -> Figure:
    ncols = 1 if n == 1 else 2 if n <= 4 else 3
    return _new_figure(11, 0.5 + 2.3 * math.ceil(n / ncols))


def _plot_queues(series: _Series, unit: _TimeUnit) -> Figure:
    """Per queue: allocation, fair share, deserved, requested, and (time-based runs) the usage the division used,
    as GPUs: the queue's share of the cluster's GPUs over the usage window times the cluster's GPUs."""
    names = _busiest(series.queues, MAX_QUEUE_PANELS)
    timed = any(not np.isnan(a["usage"]).all() for a in series.queues.values())
    if not names or len(series.time) == 0:
        fig = _new_figure(11, 2.5)
        _empty(fig.subplots(), "no queues sampled")
        return fig
    fig = _queue_figure(len(names))
    axes = _panel_grid(fig, len(names), unit)
    for ax, q in zip(axes, names, strict=True):
        a = series.queues[q]
        t, alloc, fair, des, req = downsample(
            series.time, a["allocated"], a["fair_share"], a["deserved"], a["requested"]
        )
        x = t / unit.divisor
        ax.fill_between(x, 0, alloc, step="post", color=_WHOLE_COLOUR, alpha=0.3, lw=0)
        ax.step(x, alloc, where="post", color=_WHOLE_COLOUR, lw=1.2)
        ax.step(x, fair, where="post", color="#ff725c", lw=1.5)
        ax.step(x, req, where="post", color="#9498a0", lw=1.0, ls=":")
        if not np.isnan(des).all():
            ax.step(x, des, where="post", color="#333333", lw=1.0, ls="--")
        ax.set_title(q, loc="left")
        ax.set_ylim(bottom=0)
        if timed:
            _, use = downsample(series.time, a["usage"])
            ax.step(x, use, where="post", color=_USAGE_COLOUR, lw=1.3, ls="-.")
            # what the division did, not a backlog many times the cluster (requested is cut off then)
            top = float(np.nanmax(np.concatenate([alloc, fair, use, np.nan_to_num(des), [1.0]])))
            ax.set_ylim(0, top * 1.25)
    handles = [_line(_WHOLE_COLOUR), _line("#ff725c", lw=1.5), _line("#333333", "--", 1.0), _line("#9498a0", ":", 1.0)]
    names_ = ["allocated", "fair share", "deserved (when limited)", "requested"]
    if timed:
        handles.append(_line(_USAGE_COLOUR, "-.", 1.3))
        names_.append("usage over the window (GPUs)")
    fig.legend(handles, names_, loc="outside upper center", ncols=len(names_))
    return fig


_DURATION_TICKS = {1.0: "1s", 10.0: "10s", 60.0: "1m", 600.0: "10m", 3600.0: "1h", 21600.0: "6h", 86400.0: "1d"}
_DURATION_TICKS |= {604800.0: "7d", 2592000.0: "30d"}
_LOG_FLOOR = 1.0  # seconds: on a log axis, shorter durations (0 included) are drawn at 1 s


@dataclass(frozen=True, slots=True)
class _DurationAxis:
    """How a CDF's x axis shows durations: linear in a human unit, or log-scaled seconds for skewed data."""

    log: bool
    unit: _TimeUnit
    top: float  # seconds

    @classmethod
    def of(cls, values: Sequence[float]) -> _DurationAxis:
        top = max(values, default=0.0)
        median = float(np.median(values)) if values else 0.0
        if top > 30 * max(median, 60.0):  # a long tail: most of the curve would hug the y axis
            return cls(True, _TimeUnit(1.0, "s"), top)
        return cls(False, _TimeUnit(1.0, "s") if top <= 120 else _time_unit(top), top)

    def prepare(self, values: FloatArray) -> FloatArray:
        return np.maximum(values, _LOG_FLOOR) if self.log else values / self.unit.divisor

    @property
    def start(self) -> float:
        return _LOG_FLOOR if self.log else 0.0

    def style(self, ax: Axes, what: str) -> None:
        if not self.log:
            ax.set_xlim(left=0)
            ax.set_xlabel(f"{what} ({self.unit.name})")
            return
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        right = self.top * 1.3
        ax.set_xscale("log")
        ax.set_xlim(_LOG_FLOOR, right)
        ax.xaxis.set_major_locator(FixedLocator([t for t in _DURATION_TICKS if t <= right]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _DURATION_TICKS.get(x) or format_duration(x)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"{what} (log scale; up to 1s at the left edge)")


def _draw_cdf(ax: Axes, values: Sequence[float], total: int, axis: _DurationAxis, **kw: Any) -> None:
    """The share of ``total`` jobs with a value up to x (jobs without a value keep the curve below 1)."""
    if total == 0:
        return
    v = axis.prepare(np.sort(np.asarray(values, dtype=np.float64)))
    y = np.arange(1, len(v) + 1, dtype=np.float64) / total
    if len(v) > MAX_PLOT_POINTS:
        idx = np.unique(np.linspace(0, len(v) - 1, MAX_PLOT_POINTS).astype(np.int64))
        v, y = v[idx], y[idx]
    xs = np.concatenate([[axis.start], v])
    ys = np.concatenate([[0.0], y])
    ax.step(xs, 100 * ys, where="post", **kw)


def _plot_distributions(runs: Sequence[tuple[str, Sequence[JobRecord]]], by_queue: bool) -> Figure:
    """Waiting-time and JCT CDFs: one line per run (and per queue when ``by_queue``, for a single run)."""
    fig = _new_figure(11, 3.8)
    ax_w, ax_j = fig.subplots(1, 2)
    all_jobs = [j for _, jobs in runs for j in jobs]
    for ax, what, title in (
        (ax_w, "wait", "Waiting time (arrival → first start)"),
        (ax_j, "jct", "JCT (arrival → end)"),
    ):
        ax.set_title(title)
        if not all_jobs:
            _empty(ax, "no jobs")
            continue
        axis = _DurationAxis.of([x for x in (getattr(j, what) for j in all_jobs) if x is not None])
        for k, (label, jobs) in enumerate(runs):
            vals = [x for x in (getattr(j, what) for j in jobs) if x is not None]
            missing = len(jobs) - len(vals)
            note = f" ({missing:,} without)" if missing else ""
            colour = _CAPACITY_COLOUR if by_queue else _PALETTE[k % len(_PALETTE)]
            _draw_cdf(ax, vals, len(jobs), axis, color=colour, lw=2.0, label=f"{label}{note}")
        if by_queue and len(runs) == 1:
            queues: dict[str, list[JobRecord]] = {}
            for j in runs[0][1]:
                queues.setdefault(j.queue, []).append(j)
            if 1 < len(queues) <= MAX_CDF_QUEUES:
                for k, q in enumerate(_sorted_names(queues)):
                    vals = [x for x in (getattr(j, what) for j in queues[q]) if x is not None]
                    _draw_cdf(ax, vals, len(queues[q]), axis, color=_PALETTE[k % len(_PALETTE)], lw=1.1, label=q)
        axis.style(ax, "waiting time" if what == "wait" else "JCT")
        ax.set_ylabel("jobs (%)")
        ax.set_ylim(0, 102)
        ax.legend(loc="lower right")
    return fig


def _run_legend(fig: Figure, labels: Sequence[str], styles: Sequence[tuple[str, Any]]) -> None:
    """A figure legend: one colour per run, then the line styles in grey."""
    handles = [_line(_PALETTE[k % len(_PALETTE)], lw=2.0) for k in range(len(labels))]
    handles += [_line("#666666", ls) for _, ls in styles]
    names = [*labels, *(name for name, _ in styles)]
    fig.legend(handles, names, loc="outside upper center", ncols=min(6, len(names)))


def _plot_compare_utilisation(runs: Sequence[tuple[str, _Series]], unit: _TimeUnit) -> Figure:
    fig = _new_figure(11, 4.4)
    ax = fig.subplots()
    top = 0.0
    capacity = False
    for k, (_, s) in enumerate(runs):
        if len(s.time) == 0:
            continue
        t, total, alloc, frac = downsample(s.time, s.total, s.allocated, s.fractional, max_points=COMPARE_PLOT_POINTS)
        x = t / unit.divisor
        colour = _PALETTE[k % len(_PALETTE)]
        if not capacity:
            ax.step(x, total, where="post", color=_CAPACITY_COLOUR, lw=1.2, ls="--")
            capacity = True
        ax.step(x, alloc, where="post", color=colour, lw=1.4)
        if float(np.nanmax(frac)) > 0:
            ax.step(x, frac, where="post", color=colour, lw=1.0, ls=":")
        top = max(top, float(np.nanmax(np.maximum(total, alloc))))
    if not capacity:
        _empty(ax, "no samples")
        return fig
    _headroom(ax, top, 1.08)
    ax.set_xlim(left=0)
    ax.set_ylabel("GPUs")
    ax.set_xlabel(f"time ({unit.name})")
    _run_legend(fig, [label for label, _ in runs], [("allocated", "-"), ("fractional", ":"), ("capacity", "--")])
    return fig


def _plot_compare_queues(runs: Sequence[tuple[str, _Series]], unit: _TimeUnit) -> Figure:
    merged: dict[str, dict[str, FloatArray]] = {}
    for _, s in runs:
        for q, a in s.queues.items():
            m = merged.setdefault(q, {key: np.zeros(0) for key in a})
            for key, v in a.items():
                m[key] = np.concatenate([m[key], v])
    names = _busiest(merged, MAX_QUEUE_PANELS)
    if not names:
        fig = _new_figure(11, 2.5)
        _empty(fig.subplots(), "no queues sampled")
        return fig
    fig = _queue_figure(len(names))
    axes = _panel_grid(fig, len(names), unit)
    for ax, q in zip(axes, names, strict=True):
        for k, (_, s) in enumerate(runs):
            qa = s.queues.get(q)
            if qa is None or len(s.time) == 0:
                continue
            t, alloc, fair = downsample(s.time, qa["allocated"], qa["fair_share"], max_points=COMPARE_PLOT_POINTS)
            x = t / unit.divisor
            colour = _PALETTE[k % len(_PALETTE)]
            ax.step(x, alloc, where="post", color=colour, lw=1.3)
            ax.step(x, fair, where="post", color=colour, lw=1.1, ls=(0, (2, 2)))
        ax.set_title(q, loc="left")
        ax.set_ylim(bottom=0)
    _run_legend(fig, [label for label, _ in runs], [("allocated", "-"), ("fair share", (0, (2, 2)))])
    return fig


def _plot_fairness(runs: Sequence[tuple[str, RunFairness]], unit: _TimeUnit) -> Figure:
    """Fair-share error (GPUs) and Jain's index over the window, one line per run."""
    fig = _new_figure(11, 4.6)
    ax_e, ax_j = fig.subplots(2, 1, sharex=True)
    drawn = False
    for k, (label, f) in enumerate(runs):
        if len(f.times) == 0:
            continue
        t, err, jain = downsample(f.times, f.error, f.jain, max_points=COMPARE_PLOT_POINTS)
        x = t / unit.divisor
        colour = _PALETTE[k % len(_PALETTE)]
        ax_e.step(x, err, where="post", color=colour, lw=1.4, label=label)
        ax_j.step(x, jain, where="post", color=colour, lw=1.4, label=label)
        drawn = True
    if not drawn:
        _empty(ax_e, "no samples")
        _empty(ax_j, "no samples")
        return fig
    w = format_duration(runs[0][1].window)
    ax_e.set_ylabel(f"fair-share error\nover {w} (GPUs)")
    ax_e.set_ylim(bottom=0)
    ax_e.legend(loc="upper right", ncols=len(runs))
    ax_j.set_ylabel(f"Jain's index\nover {w}")
    ax_j.set_ylim(0, 1.05)
    ax_j.set_xlabel(f"time ({unit.name})")
    ax_j.set_xlim(left=0)
    return fig


def _fairness_section(labels: Sequence[str], fc: FairnessComparison, unit: _TimeUnit) -> str:
    plot = _render(lambda: _plot_fairness(list(zip(labels, fc.runs, strict=True)), unit))
    rows, classes = [], []
    for row in fc.rows:
        rows.append([row.metric.title, *(row.metric.fmt(v) for v in row.values)])
        classes.append(["", *("best" if i in row.best else "" for i in range(len(row.values)))])
    note = _fairness_note(fc) + "."
    return (f'<section><h2>Fairness over time</h2><p class="note">{_e(note)}</p>'
            + _table(["", *labels], rows, classes)
            + f'<img class="plot" alt="fair-share error and Jain\'s index over time" src="{plot}"></section>')


# --------------------------------------------------------------------------------------------------- HTML

_CSS = """
:root { --fg:#1d2330; --muted:#697386; --line:#e3e6ec; --bg:#f6f7f9; --card:#fff; --accent:#4269d0;
        --good:#e3f4e6; --good-fg:#17652b; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width:1180px; margin:0 auto; padding:28px 24px 48px; }
header h1 { margin:0 0 4px; font-size:26px; letter-spacing:-0.01em; }
header .kind { color:var(--accent); font-weight:600; text-transform:uppercase; font-size:12px; letter-spacing:.08em; }
header .sub { color:var(--muted); margin:2px 0 0; }
header .desc { margin:8px 0 0; max-width:80ch; }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(205px, 1fr)); gap:12px; margin:22px 0 26px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:12px 14px; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.05em; }
.card .value { font-size:24px; font-weight:650; margin-top:2px; font-variant-numeric:tabular-nums; }
.card .detail { color:var(--muted); font-size:12.5px; margin-top:2px; font-variant-numeric:tabular-nums; }
.bar { height:6px; background:#e9ecf2; border-radius:3px; margin-top:8px; overflow:hidden; display:flex; }
.bar span { display:block; height:100%; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:16px 18px;
          margin:0 0 18px; }
section h2 { margin:0 0 4px; font-size:17px; }
section p.note { margin:0 0 10px; color:var(--muted); font-size:13px; }
img.plot { display:block; width:100%; height:auto; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; font-size:13px; }
th, td { padding:6px 9px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
th { color:var(--muted); font-weight:600; font-size:12px; background:#fafbfc; }
th:first-child, td:first-child { text-align:left; }
td.best { background:var(--good); color:var(--good-fg); font-weight:650; }
td.muted { color:var(--muted); white-space:normal; text-align:left; }
td.share { min-width:90px; }
td.share .bar { margin-top:3px; }
.scroll { overflow-x:auto; }
details { margin-top:8px; }
pre { background:#f3f4f7; padding:10px; border-radius:6px; overflow-x:auto; font-size:12px; }
footer { color:var(--muted); font-size:12px; margin-top:18px; }
footer a, section a { color:var(--accent); }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def _card(label: str, value: str, detail: str = "", extra: str = "") -> str:
    d = f'<div class="detail">{_e(detail)}</div>' if detail else ""
    return f'<div class="card"><div class="label">{_e(label)}</div><div class="value">{_e(value)}</div>{d}{extra}</div>'


def _allocation_bar(whole: float, frac: float) -> str:
    w = max(0.0, min(100.0, 100 * whole))
    f = max(0.0, min(100.0 - w, 100 * frac))
    return (
        f'<div class="bar"><span style="width:{w:.1f}%;background:{_WHOLE_COLOUR}"></span>'
        f'<span style="width:{f:.1f}%;background:{_FRACTIONAL_COLOUR}"></span></div>'
    )


def _stats_detail(stats: Stats, prefix: str = "") -> str:
    return " · ".join(f"{k} {prefix}{format_duration(_stat(stats, k))}" for k in ("p50", "p95", "p99"))


def _cards(result: SimResult) -> str:
    s = result.summary
    alloc = _finite(s.gpu_allocation_mean) or 0.0
    frac = _finite(s.fractional_allocation_mean) or 0.0
    jain = _finite(s.jain_fairness)
    cards = [
        _card(
            "GPU allocation",
            _pct(s.gpu_allocation_mean),
            f"fractional {_pct(s.fractional_allocation_mean)} · time-weighted mean",
            _allocation_bar(alloc - frac, frac),
        ),
        _card("JCT mean", format_duration(_stat(s.jct, "mean")),
              _stats_detail(s.jct) + f" · over the {s.jct.count:,} completed jobs"),
        _card("Waiting time mean", _bound(s) + format_duration(_stat(s.wait, "mean")),
              _stats_detail(s.wait, _bound(s)) + (f" · {wait_note(s)}" if wait_note(s) else "")),
        _card("Makespan", format_duration(s.makespan),
              "last completion" + ("" if s.completed == s.jobs else f" (of the {s.completed:,} completed jobs)")),
        _card("Jobs completed", f"{s.completed:,} / {s.jobs:,}", accounting_text(s)),
        _card(
            "Evictions",
            f"{s.evictions:,}",
            f"{_gpu_hours(s.gpu_hours_lost)} GPU-hours of work lost",
        ),
        _card("Fragmentation", _pct(s.fragmentation_mean), "idle whole GPUs on partly used nodes"),
        _card("Stranded GPUs", _num(s.stranded_no_cpu_mean + s.stranded_no_memory_mean + s.stranded_slivers_mean, 1),
              "mean, by cause: " + stranded_text(s)),
        _card(
            "Jain's fairness",
            "n/a" if jain is None else f"{jain:.3f}",
            "allocated / fair share over queues (1 = fair)",
        ),
    ]
    return '<div class="cards">' + "".join(cards) + "</div>"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[Sequence[str]] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            cls = classes[r][c] if classes else ""
            cells.append(f'<td class="{cls}">{_e(cell)}</td>' if cls else f"<td>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _queue_table(queues: Sequence[QueueFigures]) -> str:
    header = [
        "queue",
        "allocated",
        "fair share",
        "alloc / fair",
        "deserved",
        "requested",
        "jobs",
        "completed",
        "running at end",
        "waiting at end",
        "dropped",
        "evictions",
        "GPU-h lost",
        "wait mean",
        "wait p95",
        "JCT mean",
        "JCT p95",
    ]
    rows = [
        [
            q.queue,
            _fixed(q.allocated, 1),
            _fixed(q.fair_share, 1),
            _pct(q.share_ratio, 0),
            "∞" if q.deserved_unlimited else _fixed(q.deserved, 1),
            _fixed(q.requested, 1),
            f"{q.jobs:,}",
            f"{q.completed:,}",
            f"{q.running:,}",
            f"{q.waiting:,}",
            f"{q.dropped:,}",
            f"{q.evictions:,}",
            _fixed(q.gpu_hours_lost, 2),
            ("≥ " if q.wait_censored else "") + format_duration(q.wait_mean),
            ("≥ " if q.wait_censored else "") + format_duration(q.wait_p95),
            format_duration(q.jct_mean),
            format_duration(q.jct_p95),
        ]
        for q in queues
    ]
    return _table(header, rows)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"


def _share_cell(share: float) -> str:
    w = max(0.0, min(100.0, 100 * share))
    return (f'<td class="share">{_e(_pct(share, 0))}<div class="bar"><span style="width:{w:.1f}%;'
            f'background:{_WHOLE_COLOUR}"></span></div></td>')


def _plot_pending_reasons(series: _Series, unit: _TimeUnit) -> Figure:
    """The jobs waiting after each cycle, stacked by reason (in the order of the tiers)."""
    fig = _new_figure(11, 2.8)
    ax = fig.subplots()
    reasons = list(series.pending_by_reason)
    if len(series.time) == 0 or not reasons:
        _empty(ax, "no job waited")
        return fig
    t, *counts = downsample(series.time, *series.pending_by_reason.values())
    x = t / unit.divisor
    low = np.zeros_like(x)
    for k, (reason, count) in enumerate(zip(reasons, counts, strict=True)):
        ax.fill_between(x, low, low + count, step="post", color=_PALETTE[k % len(_PALETTE)], alpha=0.85, lw=0,
                        label=reason)
        low = low + count
    ax.set_ylabel("pending jobs")
    ax.set_xlabel(f"time ({unit.name})")
    _headroom(ax, float(np.nanmax(low)) if len(low) else 1.0, 1.45)
    ax.legend(loc="upper right", ncols=min(len(reasons), 4), fontsize=8)
    if len(x) == 1:
        ax.set_xlim(x[0] - 1, x[0] + 1)
    else:
        ax.set_xlim(float(x[0]), float(x[-1]))
    return fig


def _waiting_section(result: SimResult, series: _Series, unit: _TimeUnit) -> str:
    """Where did the waiting go: the jobs' time pending per reason, overall and per queue, and the jobs waiting per
    reason over time."""
    overall = pending_by_reason(result.jobs)
    total = sum(r.seconds for r in overall.values())
    if total <= 0:
        return ""
    head = "".join(f"<th>{_e(h)}</th>" for h in ("reason", "code", "job-hours", "share", "GPU-hours", "jobs"))
    body = "".join(
        f"<tr><td>{_e(PENDING_TIERS.get(reason, reason))}</td><td>{_e(reason)}</td><td>{_e(_hours(r.seconds))}</td>"
        f"{_share_cell(r.seconds / total)}<td>{_e(_hours(r.gpu_seconds))}</td><td>{r.jobs:,}</td></tr>"
        for reason, r in overall.items())
    body += (f"<tr><td>total</td><td></td><td>{_e(_hours(total))}</td><td>100 %</td>"
             f"<td>{_e(_hours(sum(r.gpu_seconds for r in overall.values())))}</td>"
             f"<td>{sum(1 for j in result.jobs if j.pending_by_reason):,}</td></tr>")
    table = f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    reasons = list(overall)
    rows = []
    for q, jobs in _by_queue(result).items():
        by = pending_by_reason(jobs)
        q_total = sum(r.seconds for r in by.values())
        if q_total <= 0:
            continue
        rows.append([q, _hours(q_total), *(_pct(by[r].seconds / q_total, 0) if r in by else "" for r in reasons)])
    per_queue = _table(["queue", "job-hours pending", *reasons], rows)
    plot = _render(lambda: _plot_pending_reasons(series, unit))
    note = ("Every second a job was pending (from its arrival, and again from each eviction, to its start or the end "
            "of the run), under the reason the scheduling cycles gave it: the reason code of its PodGroup's status, "
            "the tiers of kaisched explain (docs/explain.md); the reason holds until a cycle gives another. "
            f"\u201c{PENDING_TIERS[PENDING_REASONS[-1]]}\u201d is the time from an arrival or an eviction to the "
            "next cycle. Job-hours count each waiting job once; GPU-hours weigh it by the GPUs it asks. Per job: "
            "the pending:<code> columns of jobs.csv.")
    return (f'<section><h2>Where did the waiting go</h2><p class="note">{_e(note)}</p>{table}'
            f'<h3>Per queue: share of its pending time</h3>{per_queue}'
            '<h3>Jobs waiting, by reason, after each cycle</h3>'
            f'<img class="plot" alt="pending jobs by reason over time" src="{plot}"></section>')


def _compare_waiting_section(results: Sequence[SimResult], labels: Sequence[str]) -> str:
    """Where did the waiting go, run by run: each reason's job-hours pending and share of the run's pending time."""
    by_run = [pending_by_reason(r.jobs) for r in results]
    totals = [sum(t.seconds for t in by.values()) for by in by_run]
    if not any(total > 0 for total in totals):
        return ""
    order = {r: i for i, r in enumerate(PENDING_REASONS)}
    reasons = sorted({r for by in by_run for r in by}, key=lambda r: (order.get(r, len(order)), r))
    rows = [[PENDING_TIERS.get(reason, reason) + f" ({reason})",
             *(f"{_hours(by[reason].seconds)} h · {_pct(by[reason].seconds / total, 0)}" if reason in by else ""
               for by, total in zip(by_run, totals, strict=True))]
            for reason in reasons]
    rows.append(["total", *(f"{_hours(total)} h" for total in totals)])
    note = ("Each run's pending time (job-hours) by the reason the cycles gave, and its share of the run's pending "
            "time (the runs' own reports have it per queue).")
    return (f'<section><h2>Where did the waiting go</h2><p class="note">{_e(note)}</p>'
            + _table(["reason", *labels], rows) + "</section>")


def _mostly_phrase(jobs: Sequence[JobRecord]) -> list[str]:
    """A queue's line on the terminal: the reason its jobs spent most of their pending time on ([] if none waited)."""
    by = pending_by_reason(jobs)
    total = sum(r.seconds for r in by.values())
    if total <= 0:
        return []
    reason, top = max(by.items(), key=lambda kv: kv[1].seconds)  # (the first in the tiers on a tie)
    return [f"waited mostly for {reason} ({_pct(top.seconds / total, 0)})"]


def waiting_phrases(result: SimResult, limit: int = 4) -> list[str]:
    """The terminal's line on where the waiting went: the reasons with the most pending time, with their share."""
    by = pending_by_reason(result.jobs)
    total = sum(r.seconds for r in by.values())
    if total <= 0:
        return []
    top = sorted(by.items(), key=lambda kv: -kv[1].seconds)
    phrases = [f"{reason} {_pct(r.seconds / total, 0)}" for reason, r in top[:limit]]
    if len(top) > limit:
        rest = len(top) - limit
        share = sum(r.seconds for _, r in top[limit:]) / total
        phrases.append(f"{rest} more {'reasons' if rest > 1 else 'reason'} {_pct(share, 0)}")
    return [f"{_hours(total)} job-hours pending", *phrases]


def _job_row(j: JobRecord) -> list[str]:
    return [
        j.name,
        j.queue,
        f"{j.gpus:g}",
        format_duration(j.arrival),
        format_duration(j.start),
        format_duration(j.end),
        format_duration(j.wait),
        format_duration(j.jct),
        f"{j.evictions:,}",
        _fixed(j.lost_gpu_seconds / 3600, 2),
        outcome_of(j) + (f": {j.reason}" if j.reason else ""),
        _mostly(j),
    ]


def _mostly(j: JobRecord) -> str:
    """The reason the job spent most of its pending time on, with its share (the first in the tiers on a tie)."""
    total = j.pending
    if total <= 0:
        return ""
    order = {r: i for i, r in enumerate(PENDING_REASONS)}
    reason, seconds = max(j.pending_by_reason.items(), key=lambda kv: (kv[1], -order.get(kv[0], len(order))))
    return f"{reason} ({_pct(seconds / total, 0)})"


_JOB_HEADER = ["job", "queue", "GPUs", "arrival", "start", "end", "wait", "JCT", "evictions", "GPU-h lost", "outcome",
               "mostly waited for"]


def _shown(title: str, total: int, limit: int, order: str = "") -> str:
    """A list's heading that says how much of it is shown: ``Evicted (19; showing 10 of 19, most work lost
    first)``."""
    if total <= limit:
        return f"<h3>{_e(title)} ({total:,}{'; ' + order if order else ''})</h3>"
    return f"<h3>{_e(title)} ({total:,}; showing {limit:,} of {total:,}{', ' + order if order else ''})</h3>"


def _notable_jobs(result: SimResult, limit: int = MAX_JOB_ROWS) -> str:
    jobs = result.jobs
    parts = []
    outcome = [(j, outcome_of(j)) for j in jobs]
    lists: list[tuple[str, list[JobRecord], str]] = [
        ("Dropped: could never run", [j for j, o in outcome if o == DROPPED], ""),
        ("Never started", [j for j, o in outcome if o == NEVER_STARTED], "in arrival order"),
        ("Evicted and waiting again at the end", [j for j, o in outcome if o == EVICTED_PENDING], "in arrival order"),
        ("Still running at the end", [j for j, o in outcome if o == RUNNING], "in arrival order"),
        ("Evicted", sorted((j for j in jobs if j.evictions), key=lambda j: (-j.lost_gpu_seconds, -j.evictions, j.name)),
         "most work lost first"),
        ("Longest waits", sorted((j for j in jobs if j.wait is not None), key=lambda j: (-(j.wait or 0.0), j.name)),
         "longest first"),
    ]
    for title, listed, order in lists:
        if listed:
            parts.append(_shown(title, len(listed), limit, order))
            parts.append(_table(_JOB_HEADER, [_job_row(j) for j in listed[:limit]]))
    if not parts:
        return ""
    note = ("Times are from the start of the simulation. Each list shows at most "
            f"{limit} jobs; every job, with its outcome, is in jobs.csv.")
    return (f'<section><h2>Jobs worth a look</h2><p class="note">{_e(note)} <a href="jobs.csv">jobs.csv</a></p>'
            f'{"".join(parts)}</section>')


def _plot_section(title: str, note: str, uri: str, alt: str) -> str:
    n = f'<p class="note">{_e(note)}</p>' if note else ""
    return f'<section><h2>{_e(title)}</h2>{n}<img class="plot" alt="{_e(alt)}" src="{uri}"></section>'


def _config_details(config: Any, summary: str = "Scheduler configuration") -> str:
    if config is None:
        return ""
    text = json.dumps(config, indent=2, default=str, ensure_ascii=False)
    return f"<details><summary>{_e(summary)}</summary><pre>{_e(text)}</pre></details>"


_INPUT_ROWS = (
    ("scenario", "scenario"),
    ("scenario_path", "scenario file"),
    ("scenario_sha256", "SHA-256 of the file"),
    ("config_source", "scheduler configuration"),
    ("config_sha256", "SHA-256 of the configuration (canonical JSON)"),
    ("seed", "seed"),
    ("period", "scheduling period"),
    ("until", "until"),
    ("jobs", "jobs in the scenario"),
    ("kaisched_version", "kaisched version"),
    ("command", "command line"),
)


def _input_value(key: str, value: object) -> str:
    if value is None:
        return "until every job finished" if key == "until" else "n/a (not from a file)" if key.startswith(
            "scenario") else "n/a"
    if key in ("period", "until") and isinstance(value, int | float):
        return format_duration(float(value))
    if key == "jobs" and isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _inputs_html(result: SimResult, label: str = "") -> str:
    """What the run was made of: the scenario file, its hash, seed, version, command line, the scenario's text."""
    inputs = result.inputs
    if not inputs:
        return ""
    rows = [[title, _input_value(key, inputs.get(key))] for key, title in _INPUT_ROWS if key in inputs]
    head = f"{label}: " if label else ""
    text = inputs.get("scenario_text")
    scenario = (f"<details><summary>{_e(head)}scenario file as read</summary><pre>{_e(text)}</pre></details>"
                if isinstance(text, str) else "")
    return _table(["input", "value"], rows) + scenario


def render_html(result: SimResult) -> str:
    """``report.html``: one self-contained page (plots embedded as PNG data URIs)."""
    series = _Series.of(result)
    span = _simulated_span(result)
    unit = _time_unit(span)
    queues = queue_figures(result, series)
    s = result.summary
    total = _gpus_total(result)
    sub = " · ".join(
        [
            _plural(s.jobs, "job"),
            f"{_num(total)} GPUs" if total is not None else "no GPUs sampled",
            f"{_plural(s.cycles, 'scheduling cycle')} over {format_duration(span)} simulated",
            f"{s.wall_seconds:.1f} s wall time",
        ]
    )
    busiest = (
        f" The {MAX_QUEUE_PANELS} busiest of {len(series.queues)} queues are drawn; the table below has them all."
        if len(series.queues) > MAX_QUEUE_PANELS
        else ""
    )
    util = _render(lambda: _plot_utilisation(series, unit))
    per_queue = _render(lambda: _plot_queues(series, unit))
    dist = _render(lambda: _plot_distributions([("all jobs", result.jobs)], by_queue=True))
    body = [
        '<header><div class="kind">kaisched simulation</div>',
        f"<h1>{_e(result.scenario)}</h1>",
        f'<p class="sub">{_e(sub)}</p></header>',
        _cards(result),
        _plot_section(
            "GPU utilisation",
            "GPUs held by running pods, whole and fractional (shared) stacked, against the cluster's capacity; "
            "below, the pending and running jobs. Bottom: fragmentation, per interval of "
            f"{format_duration(span / FRAGMENTATION_INTERVALS)}: of the idle whole GPUs in the interval "
            "(GPU-time), the share that sat on nodes already partly used, where only jobs that fit beside the "
            "others can use them (an idle GPU on an empty node takes any job); no bar: no GPU idle in the interval, "
            "or none on a partly used node.",
            util,
            "GPU allocation over time",
        ),
        _plot_section(
            "Queues: allocation vs fair share",
            "Each queue's allocated GPUs against its fair share (what the proportion plugin divides to it), "
            "its deserved quota (dashed, when limited) and what its jobs request"
            + ("; time-based fair share: the usage the division used, as GPUs (the queue's share of the cluster's "
               "GPUs over the usage window, times the cluster's GPUs)." if result.time_based else ".") + busiest,
            per_queue,
            "per-queue allocation and fair share over time",
        ),
        _plot_section(
            "Waiting time and JCT",
            "Cumulative share of the jobs that started (left) or completed (right) within a given time of their "
            "arrival; jobs that never started or never completed keep a curve below 100 %.",
            dist,
            "waiting time and JCT distributions",
        ),
        _fairness_section(["this run"], fc, unit) if (fc := fairness_comparison([result], ["this run"])) else "",
        "<section><h2>Per queue</h2>"
        '<p class="note">GPU figures are time-weighted means over the run.</p>' + _queue_table(queues) + "</section>",
        _waiting_section(result, series, unit),
        "<section><h2>Every job accounted for</h2>"
        f'<p class="note">{_e(accounting_text(s))}.'
        + (f" Waiting times are {_e(wait_note(s))}." if s.wait_censored else
           f" Waiting times: {_e(wait_note(s))}." if wait_note(s) else "")
        + " JCT and makespan are over the completed jobs only.</p>"
        + _table(["outcome", "jobs"], [[what, f"{n:,}"] for what, n in accounting(s)] + [["total", f"{s.jobs:,}"]])
        + "</section>",
        _notable_jobs(result),
        "<section><h2>Inputs</h2>"
        '<p class="note">What this run was made of: run the command line again on a file with the same SHA-256 '
        "for the same result.</p>" + _inputs_html(result) + _config_details(result.config) + "</section>",
        '<footer>Data: <a href="summary.json">summary.json</a> · <a href="samples.csv">samples.csv</a> · '
        '<a href="queues.csv">queues.csv</a> · <a href="jobs.csv">jobs.csv</a>'
        + (' · <a href="fairness.csv">fairness.csv</a>' if result.time_based else "") + "</footer>",
    ]
    return _page(f"{result.scenario} · kaisched simulation", "\n".join(x for x in body if x))


def render_compare_html(results: Sequence[SimResult], labels: Sequence[str], dirs: Sequence[str] | None = None) -> str:
    """``compare.html``: the key metrics side by side (best of each row highlighted) and overlaid plots."""
    dirs = list(dirs) if dirs is not None else _check_labels(results, labels)
    series = [_Series.of(r) for r in results]
    span = max(_simulated_span(r) for r in results)
    unit = _time_unit(span)
    runs = list(zip(labels, series, strict=True))
    util = _render(lambda: _plot_compare_utilisation(runs, unit))
    dist = _render(lambda: _plot_distributions(list(zip(labels, (r.jobs for r in results), strict=True)), False))
    per_queue = _render(lambda: _plot_compare_queues(runs, unit))
    rows, classes = [], []
    for row in _metric_rows(results, labels):
        rows.append([row.metric.title, *(row.metric.fmt(v) for v in row.values), row.note])
        classes.append(["", *("best" if i in row.best else "" for i in range(len(row.values))), "muted"])
    title = _title(results)
    links = " · ".join(f'<a href="{_e(d)}/report.html">{_e(label)}</a>' for label, d in zip(labels, dirs, strict=True))
    configs = "".join(
        f"<h3>{_e(label)}</h3>" + _inputs_html(r, label)
        + _config_details(r.config, f"{label}: scheduler configuration")
        for label, r in zip(labels, results, strict=True)
    )
    accounted = "".join(f"<li>{_e(label)}: {_e(accounting_text(r.summary))}</li>"
                        for label, r in zip(labels, results, strict=True))
    body = [
        '<header><div class="kind">kaisched simulation · comparison</div>',
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">{_e(f"{len(results)} runs: " + ", ".join(labels))}</p></header>',
        "<section><h2>Key figures</h2>"
        '<p class="note">The best value of each row is highlighted (none when all runs are equal, and none where '
        "the runs are not comparable: a figure over the completed jobs (JCT, waiting time, makespan) is only ranked "
        "between runs that completed as many jobs; a run that finishes fewer jobs can look faster).</p>"
        + _table(["", *labels, "note"], rows, classes)
        + f"<ul>{accounted}</ul>"
        + f'<p class="note" style="margin-top:10px">Each run\'s own report: {links}</p>'
        + "</section>",
        "<section><h2>Inputs</h2>" + configs + "</section>",
        _plot_section(
            "GPU utilisation",
            "Allocated GPUs per run (fractional dotted) against capacity.",
            util,
            "GPU allocation over time, per run",
        ),
        _plot_section(
            "Waiting time and JCT",
            "Cumulative share of the jobs started (left) or completed (right) within a given time of arrival.",
            dist,
            "waiting time and JCT distributions, per run",
        ),
        _compare_waiting_section(results, labels),
        _plot_section(
            "Queues: allocation vs fair share", "", per_queue, "per-queue allocation and fair share, per run"
        ),
        _fairness_section(labels, fc, unit) if (fc := fairness_comparison(results, labels)) else "",
    ]
    return _page(f"{title} · kaisched comparison", "\n".join(x for x in body if x))
