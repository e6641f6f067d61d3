"""Totals of a simulation run (``Summary``): time-weighted means over the cycle samples, and statistics of the
jobs' waiting and completion times.

* GPU allocation: allocated / total GPUs, time-weighted (each sample holds until the next one).
* Fragmentation: the share of idle whole GPUs that sit on nodes already partly used (an idle GPU on an
  empty node can take any job; one on a busy node only what fits next to the others).
* Jain's fairness index over the leaf queues with a fair share, of ``allocated / fair share`` (capped at
  1: a queue above its fair share is not "more fair"), time-weighted; 1 is perfectly fair.
* Jobs: every job has one outcome at the end (completed, running, evicted and pending again, never started,
  dropped); the counts sum to the jobs that arrived.
* Waiting time: arrival to first start, for every job that arrived and could start: a job still waiting at the
  end counts with its wait so far (to the end of the run), so while any job still waits the figures are lower
  bounds (``Summary.wait_censored`` says how many). Dropped jobs (they could never start) are left out.
* JCT: arrival to completion, over the completed jobs only.
* Stranded GPUs by cause (:func:`stranded`), time-weighted means in GPUs: free GPU (idle devices and the free
  share of shared ones) on nodes with less free CPU than the least any GPU pod of the run asked ("no CPU"), else
  with less free memory than the least any asked ("no memory"), and the free shares of shared GPUs on the other
  nodes ("slivers"). Lower bounds of what the workload could not use: a GPU counted usable may still suit none.
* Where the waiting went (:func:`pending_by_reason`): each job's pending time per reason (the cycles' reason codes,
  ``JobRecord.pending_by_reason``) summed over jobs, as job-seconds and as GPU-seconds (the job's GPUs times the
  time), with the jobs that waited for each reason; the reasons' job-seconds sum to the jobs' pending time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kaisched.framework.result import NodeGpuStatus
from kaisched.sim.model import (
    COMPLETED,
    DROPPED,
    EVICTED_PENDING,
    NEVER_STARTED,
    PENDING_REASONS,
    RUNNING,
    JobRecord,
    Sample,
    Stats,
    Summary,
)


def stats(values: list[float]) -> Stats:
    if not values:
        return Stats(0, math.nan, math.nan, math.nan, math.nan)
    arr = np.array(values, dtype=np.float64)
    p50, p95, p99 = (float(x) for x in np.percentile(arr, [50, 95, 99]))
    return Stats(len(values), float(arr.mean()), p50, p95, p99)


def jain(sample: Sample) -> float | None:
    xs = [min(q.allocated / q.fair_share, 1.0) for q in sample.queues.values() if q.fair_share > 1e-9]
    if not xs:
        return None
    total = sum(xs)
    squares = sum(x * x for x in xs)
    return 1.0 if squares == 0 else total * total / (len(xs) * squares)


def _weights(samples: list[Sample], end: float) -> list[float]:
    out: list[float] = []
    for i, s in enumerate(samples):
        nxt = samples[i + 1].time if i + 1 < len(samples) else max(end, s.time)
        out.append(max(nxt - s.time, 0.0))
    if samples and sum(out) == 0:
        out = [1.0] * len(samples)
    return out


def _weighted(values: list[float | None], weights: list[float]) -> float:
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else math.nan


def waited(job: JobRecord, end: float) -> float | None:
    """A job's waiting time: to its first start, or, still waiting, to ``end`` (a lower bound); None when it was
    dropped (it could never start)."""
    if job.start is not None:
        return job.start - job.arrival
    if job.outcome == DROPPED:
        return None
    return max(end - job.arrival, 0.0)


def outcome_of(job: JobRecord) -> str:
    """The job's outcome (one recorded by the run, or read off its times for a record made by hand)."""
    if job.outcome:
        return job.outcome
    if job.end is not None:
        return COMPLETED
    return NEVER_STARTED if job.start is None else RUNNING


def summarize(samples: list[Sample], jobs: list[JobRecord], end: float, cycles: int, wall: float, *,
              not_arrived: int = 0) -> Summary:
    weights = _weights(samples, end)
    alloc = [s.gpus_allocated / s.gpus_total if s.gpus_total > 0 else None for s in samples]
    frac = [s.gpus_fractional / s.gpus_total if s.gpus_total > 0 else None for s in samples]
    frag = [s.fragmentation if s.idle_gpus > 0 else None for s in samples]
    ends = [j.end for j in jobs if j.end is not None]
    outcomes = [outcome_of(j) for j in jobs]
    waits = [w for j in jobs if (w := waited(j, end)) is not None]
    return Summary(
        jobs=len(jobs),
        completed=outcomes.count(COMPLETED),
        never_started=outcomes.count(NEVER_STARTED),
        makespan=max(ends) if ends else end,
        gpu_allocation_mean=_weighted(alloc, weights),
        fractional_allocation_mean=_weighted(frac, weights),
        wait=stats(waits),
        jct=stats([c for j in jobs if (c := j.jct) is not None]),
        evictions=sum(j.evictions for j in jobs),
        gpu_hours_lost=sum(j.lost_gpu_seconds for j in jobs) / 3600.0,
        fragmentation_mean=_weighted(frag, weights),
        jain_fairness=_weighted([jain(s) for s in samples], weights),
        cycles=cycles,
        wall_seconds=wall,
        running_at_end=outcomes.count(RUNNING),
        evicted_pending=outcomes.count(EVICTED_PENDING),
        dropped=outcomes.count(DROPPED),
        not_arrived=not_arrived,
        end=end,
        wait_censored=sum(1 for j, o in zip(jobs, outcomes, strict=True)
                          if j.start is None and o != DROPPED),
        stranded_no_cpu_mean=_weighted([s.stranded_no_cpu for s in samples], weights) if samples else 0.0,
        stranded_no_memory_mean=_weighted([s.stranded_no_memory for s in samples], weights) if samples else 0.0,
        stranded_slivers_mean=_weighted([s.stranded_slivers for s in samples], weights) if samples else 0.0,
    )


def stranded(nodes: Iterable[NodeGpuStatus], min_cpu: float, min_memory: float) -> tuple[float, float, float]:
    """The free GPU of ``nodes`` no GPU pod could use, by cause: (no CPU, no memory, slivers) in GPUs. ``min_cpu``
    (millicores) and ``min_memory`` (bytes): the least a GPU pod of the run asks (0: none seen)."""
    no_cpu = no_memory = slivers = 0.0
    for n in nodes:
        if n.gpus <= 0:
            continue
        share = sum(max(g.memory_mib - g.used_mib, 0.0) / g.memory_mib for g in n.shared if g.memory_mib > 0)
        free = max(n.idle, 0.0) + share
        if free <= 1e-9:
            continue
        if n.cpu_idle + 1e-9 < min_cpu:
            no_cpu += free
        elif n.memory_idle + 1e-9 < min_memory:
            no_memory += free
        else:
            slivers += share
    return no_cpu, no_memory, slivers


@dataclass(slots=True)
class ReasonTime:
    """The time jobs spent pending for one reason."""

    seconds: float = 0.0  # job-seconds
    gpu_seconds: float = 0.0  # the waiting jobs' GPUs x seconds
    jobs: int = 0  # jobs that waited for it at some time


def pending_by_reason(jobs: Iterable[JobRecord]) -> dict[str, ReasonTime]:
    """Reason -> the time the jobs spent pending for it, in the order of the tiers (PENDING_REASONS; reasons no job
    waited for are left out)."""
    out: dict[str, ReasonTime] = {}
    for j in jobs:
        for reason, seconds in j.pending_by_reason.items():
            rt = out.get(reason)
            if rt is None:
                rt = out[reason] = ReasonTime()
            rt.seconds += seconds
            rt.gpu_seconds += seconds * j.gpus
            rt.jobs += 1
    order = {r: i for i, r in enumerate(PENDING_REASONS)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
