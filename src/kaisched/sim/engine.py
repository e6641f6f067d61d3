"""The discrete-event simulator: the real scheduler on a simulated clock.

Events (a ``heapq`` of ``(time, priority, seq, kind, payload)``; ties by priority, then insertion order):

* **arrival**: a job's objects join the cluster; workload manifests are expanded by the embedded
  controllers and grouped by the pod-grouper once, at arrival;
* **completion**: a job that has run its whole gang for its duration finishes and leaves;
* **cycle**: one scheduling cycle (all configured actions) every ``period``; binds start pods at once, evicted pods
  go back to pending (their controller recreates them) and the work the job had done since it last started is
  counted as lost; a pipelined pod is nominated to its node (``status.nominatedNodeName``, through the embedded
  cluster) and keeps a claim there in the next cycle, where it is placed again once the resources are free
  (kaisched.plugins.nominated_pods; KAI keeps nothing). When only jobs finished since the last cycle and nobody
  waits, no cycle runs (no action would do anything): the sample records the GPUs given back. Cycles where nothing
  changed are skipped: the next one runs at the next event, or after 10 periods while jobs wait (min-runtime and
  stale-gang grace periods expire with time); when nothing is left to arrive or finish and 6 such idle cycles
  changed nothing, the run ends.

Time-based fair share (spec 5.7): when the scheduler config has ``usageDBConfig`` (whatever its ``clientType``: the
simulator has no Prometheus), a :class:`~kaisched.usage.history.UsageHistory` on the simulated clock stands in for
it (KAI's ``fake-with-history``): each cycle gets ``usage=history.table(now)`` and each queue's allocation after the
cycle is recorded with the cluster's capacity. Fair shares then move with time alone, so a cycle runs every period
while jobs wait (no idle skipping, no light samples), and with nothing left to arrive or finish the run ends after a
whole usage window of cycles that changed nothing. Without ``usageDBConfig`` the division is by weight only, as
before. ``Simulator(every_cycle=True)`` runs a cycle every period up to ``until`` regardless (KAI's time-based
simulator input, :mod:`kaisched.sim.timebased`); an ``observer`` sees every cycle's result.

At the end every job gets its outcome (:data:`~kaisched.sim.model.OUTCOMES`: completed, running, evicted and
pending again, never started, dropped); jobs a scenario left out as impossible (``Scenario.dropped``) are
recorded as dropped. A progress callback gets a :class:`ProgressInfo` at most every :data:`PROGRESS_EVERY` wall
seconds and once at the end.

A job starts when every PodGroup of it has its minimum of running pods, and completes ``duration`` later if
nothing broke its gang meanwhile. The same scenario always gives the same result.

The cluster's changing objects live in the embedded cluster (:class:`~kaisched.cluster.store.EmbeddedCluster`),
which applies each cycle's decisions; for DRA it is also the resourceclaim controller: the claims a cycle makes
from templates are created and allocated at the bind, and given back (reservation removed, deallocated, the
template's claim deleted) when the pod is evicted or its job completes. DRA GPUs count in the metrics like
device-plugin GPUs.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.schedule import long_lived_frozen, no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster, annotated_pod_group, bound_pod, evicted_pod
from kaisched.cluster.workloads import PodLimit
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import REASON_CODES, CycleResult
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError, ParsedObjects, Pod
from kaisched.k8s.parse import parse_objects
from kaisched.model.pod_facts import pod_facts
from kaisched.sim.fairness import long_run_shares
from kaisched.sim.metrics import stranded, summarize
from kaisched.sim.model import (
    AWAITING_CYCLE,
    COMPLETED,
    DROPPED,
    EVICTED_PENDING,
    NEVER_STARTED,
    RUNNING,
    Arrival,
    JobRecord,
    QueueSample,
    Sample,
    Scenario,
    SimResult,
)
from kaisched.usage.history import UsageHistory

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # simulated time 0
ARRIVAL, COMPLETION, CYCLE = 0, 1, 2  # event priorities at equal times: arrivals first, cycle last
IDLE_CYCLES = 10  # while nothing changes but jobs wait, a cycle every 10 periods
MAX_IDLE_CYCLES = 6  # with nothing left to arrive or finish, stop after this many idle cycles

PROGRESS_EVERY = 0.1  # wall seconds between two progress reports (the first and the last are always reported)


@dataclass(frozen=True, slots=True)
class ProgressInfo:
    """Where a run is, for a progress display: simulated time, jobs arrived of the scenario's, and what the
    arrived jobs are doing."""

    time: float  # simulated seconds
    until: float | None  # the scenario's end, if it has one
    arrived: int
    total: int  # the scenario's jobs
    completed: int
    running: int
    pending: int
    done: bool = False  # the last report of the run

    @property
    def fraction(self) -> float:
        """0..1: simulated time of ``until``; without one, the jobs' arrivals and completions so far of all
        of them (a job that never completes keeps it below 1 until the end)."""
        if self.done:
            return 1.0
        if self.until is not None and self.until > 0:
            return min(self.time / self.until, 1.0)
        if self.total == 0:
            return 1.0
        return min((self.arrived + self.completed) / (2 * self.total), 1.0)


Progress = Callable[[ProgressInfo], None]


class SimulationError(ValueError):
    """A scenario that cannot be simulated (its objects have errors); the message lists them."""


@dataclass(slots=True)
class _Job:
    record: JobRecord
    pods: list[str] = field(default_factory=list)  # pod keys
    groups: list[str] = field(default_factory=list)  # PodGroup keys
    templates: list[str] = field(default_factory=list)  # ResourceClaimTemplate keys (DRA)
    claims: list[str] = field(default_factory=list)  # ResourceClaim keys it brought (DRA)
    run_start: float | None = None
    run: int = 0  # bumped on every (re)start, so stale completions are ignored
    done: bool = False
    key: str = ""
    waiting_for: str = ""  # while it waits: the reason it waits for ("" while it runs, or never could wait)
    waiting_since: float = 0.0  # since when it waits for that reason


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _ts(t: float) -> str:
    return (EPOCH + timedelta(seconds=t)).isoformat().replace("+00:00", "Z")


#: called after every cycle with its simulated time and result (e.g. to record what the samples leave out)
CycleObserver = Callable[[float, CycleResult], None]


class Simulator:
    """``every_cycle``: run a cycle every period up to the scenario's ``until`` whether or not anything changed
    (the time-based simulator's one cycle per second); ``observer``: called after each cycle."""

    def __init__(self, scenario: Scenario, *, progress: Progress | None = None, every_cycle: bool = False,
                 observer: CycleObserver | None = None) -> None:
        self.scenario = scenario
        self.every_cycle = every_cycle and scenario.until is not None
        self.observer = observer
        self.config: SchedulerConfig = resolve_config(scenario.config)
        static = parse_objects(scenario.cluster)
        if static.errors:
            raise SimulationError("the cluster has errors:\n" + "\n".join(f"  {e}" for e in static.errors))
        self.static = static
        self.progress = progress
        # the embedded cluster: pods, PodGroups and DRA claims; binds, evictions and completions go through it
        # (the cluster's own pods and workloads are not simulated: jobs come as arrivals)
        self.cluster = EmbeddedCluster(replace(static, pods=[], pod_groups=[], workloads=[]))
        self.pods = self.cluster.pods
        self.gpus_of_pod: dict[str, float] = {}  # whole GPUs, fractions and DRA GPUs each pod asks for
        # the least CPU (millicores) and memory (bytes) a GPU pod arrived so far asks (stranded GPUs by cause)
        self.gpu_pod_cpu = self.gpu_pod_memory = math.inf
        self.groups = self.cluster.pod_groups
        self.jobs: dict[str, _Job] = {}
        self.active: dict[str, _Job] = {}  # jobs not done yet (arrival order)
        self.job_of_pod: dict[str, _Job] = {}
        self.job_of_group: dict[str, _Job] = {}
        # (kind, key) of DRA claims and templates -> the active jobs whose arrival brought them
        self.brought: dict[tuple[str, str], int] = {}
        self.errors: list[ObjectError] = []
        self.samples: list[Sample] = []
        self.waiting: dict[str, int] = {}  # reason -> the jobs waiting for it now (kept on each transition)
        self.heap: list[tuple[float, int, int, int, object]] = []
        self.seq = itertools.count()
        self.dirty = True
        self.only_completions = False  # since the last cycle, only completions changed the cluster
        self.cycles = 0
        self.idle_cycles = 0
        self.completed = 0
        self.arrived = 0
        self.reported = -math.inf  # wall time of the last progress report
        # time-based fair share (the scheduler config's usageDBConfig, any clientType): the allocation history on
        # the simulated clock stands in for Prometheus (KAI's fake-with-history); None: weight-only division
        usage_db = self.config.usage_db
        self.history: UsageHistory | None = (UsageHistory(usage_db.params, "simulated history")
                                             if usage_db is not None else None)
        # with it, idle cycles keep running (the window slides, fair shares move) but the run stops once nothing
        # is left to arrive or finish and nothing moved for a whole window
        self.max_idle_cycles = MAX_IDLE_CYCLES
        self.state = IncrementalState()  # the snapshot model, updated with what changed since the last cycle
        if usage_db is not None:
            window = usage_db.params.window_size.total_seconds()
            self.max_idle_cycles = max(MAX_IDLE_CYCLES, math.ceil(window / max(scenario.period, 1e-9)))

    # ---- events ------------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: object) -> None:
        heapq.heappush(self.heap, (t, kind, next(self.seq), kind, payload))

    def run(self) -> SimResult:
        """Run to the end. The scenario's objects (every arrival's manifests: a trace of 100,000 jobs is
        millions of dicts) are frozen out of the collector's reach meanwhile: full collections then scan
        only the simulation's own state (gc.freeze; unfrozen when the run ends)."""
        with long_lived_frozen():
            return self._run()

    def _run(self) -> SimResult:
        wall = time.perf_counter()
        scenario = self.scenario
        for a in sorted(scenario.arrivals, key=lambda a: (a.time, a.name)):
            self._push(a.time, ARRIVAL, a)
        self._push(0.0, CYCLE, None)
        until = scenario.until if scenario.until is not None else math.inf
        last = 0.0
        while self.heap:
            t, _, _, kind, payload = heapq.heappop(self.heap)
            if t > until:
                last = until  # (simulated up to it)
                break
            last = t
            if kind == ARRIVAL:
                assert isinstance(payload, Arrival)
                self._arrive(payload, t)
                self.arrived += 1
            elif kind == COMPLETION:
                assert isinstance(payload, tuple)
                self._complete(payload[0], payload[1], t)
            else:
                self._cycle(t)
            if self.progress is not None:
                self._report(t, False)
        end = min(last, until) if until != math.inf else last
        for job in self.jobs.values():
            job.record.outcome = _outcome(job)
            _stop_waiting(job, end, self.waiting)  # (a job still waiting at the end waited up to it)
        if self.progress is not None:
            self._report(end, True)
        records = [j.record for j in self.jobs.values()]
        dropped = [JobRecord(a.name, a.queue, a.gpus, a.time, a.duration, outcome=DROPPED, reason=why)
                   for a, why in scenario.dropped if a.time <= until]
        records = sorted([*records, *dropped], key=lambda r: r.arrival) if dropped else records
        summary = summarize(self.samples, records, end, self.cycles, time.perf_counter() - wall,
                            not_arrived=len(scenario.arrivals) + len(scenario.dropped) - self.arrived - len(dropped))
        long_run = long_run_shares(self.static.queues, self.samples, end)
        return SimResult(scenario.name, self.samples, records, summary, scenario.config, run_inputs(scenario),
                         long_run)

    def _report(self, t: float, done: bool) -> None:
        """Tell the progress callback where the run is (at most every PROGRESS_EVERY wall seconds)."""
        now = time.perf_counter()
        if not done and now - self.reported < PROGRESS_EVERY:
            return
        self.reported = now
        assert self.progress is not None
        running = sum(1 for j in self.active.values() if j.run_start is not None)
        self.progress(ProgressInfo(t, self.scenario.until, self.arrived, len(self.scenario.arrivals),
                                   self.completed, running, len(self.active) - running, done))

    def _more_events(self) -> bool:
        return any(kind != CYCLE for _, _, _, kind, _ in self.heap)

    # ---- arrivals and completions ---------------------------------------------------------------------
    def _arrive(self, a: Arrival, t: float) -> None:
        now = EPOCH + timedelta(seconds=t)
        parsed = parse_objects([_with_creation(o, now) for o in a.objects])
        parsed = replace(parsed, priority_classes=self.static.priority_classes)
        limit = PodLimit(self.scenario.max_pods, "per simulation", "limits.pods")
        prepared = prepare(parsed, self.config, now, pod_limit=limit)
        self.errors.extend(prepared.errors)
        job = _Job(JobRecord(a.name, a.queue, a.gpus, a.time, a.duration))
        ours = [p for p in prepared.pods if p.scheduler_name == self.config.params.scheduler_name]
        cluster = self.cluster
        cluster.add(ParsedObjects(pods=ours, pod_groups=prepared.pod_groups, resource_claims=prepared.resource_claims,
                                  resource_claim_templates=prepared.resource_claim_templates))
        job.templates = [_key(t.meta.namespace, t.meta.name) for t in prepared.resource_claim_templates]
        job.claims = [_key(c.meta.namespace, c.meta.name) for c in prepared.resource_claims]
        for kind, keys in (("claim", job.claims), ("template", job.templates)):
            for key in keys:
                self.brought[kind, key] = self.brought.get((kind, key), 0) + 1
        for pod in ours:
            key = _key(pod.meta.namespace, pod.meta.name)
            self.gpus_of_pod[key] = _pod_gpus(pod) + (cluster.pod_claim_gpus(pod) if pod.resource_claims else 0.0)
            if self.gpus_of_pod[key] > 0:
                requests = pod_facts(pod).requests
                self.gpu_pod_cpu = min(self.gpu_pod_cpu, float(requests.get("cpu", 0.0)))
                self.gpu_pod_memory = min(self.gpu_pod_memory, float(requests.get("memory", 0.0)))
            self.job_of_pod[key] = job
            job.pods.append(key)
        for pg in prepared.pod_groups:
            key = _key(pg.meta.namespace, pg.meta.name)
            self.job_of_group[key] = job
            job.groups.append(key)
        if not job.record.gpus:
            job.record.gpus = sum(self.gpus_of_pod[k] for k in job.pods)
        key = f"{a.name}#{len(self.jobs)}"
        job.key = key
        if job.groups:  # (a job with no PodGroup can never start: it is dropped, it does not wait)
            _wait_for(job, AWAITING_CYCLE, t, self.waiting)
        self.jobs[key] = job
        self.active[key] = job
        self.dirty = True
        self.only_completions = False

    def _complete(self, job: _Job, run: int, t: float) -> None:
        if job.done or run != job.run:
            return  # the run this completion belonged to was broken by an eviction
        job.done = True
        self.completed += 1
        job.record.end = t
        self.active.pop(job.key, None)
        cluster = self.cluster
        for key in job.pods:
            cluster.delete_pod(key)  # (its claims are given back: reservations, allocations, template claims)
            self.gpus_of_pod.pop(key, None)
        for key in job.groups:
            cluster.delete_pod_group(key)
        # the claims and templates its arrival brought go with it (unless a job still running brought them too)
        for kind, keys, delete in (("claim", job.claims, cluster.delete_claim),
                                   ("template", job.templates, cluster.delete_template)):
            for key in keys:
                self.brought[kind, key] -= 1
                if not self.brought[kind, key]:
                    del self.brought[kind, key]
                    delete(key)
        self.dirty = True

    # ---- cycles --------------------------------------------------------------------------------------------
    def _cycle(self, t: float) -> None:
        pending = any(j.run_start is None for j in self.active.values())
        timed = self.history is not None  # time-based: fair shares move with time, every cycle may change things
        if self.dirty and not pending and self.only_completions and not timed and not self.every_cycle:
            # jobs only finished and nobody waits: no action has anything to do; record the freed GPUs
            self.samples.append(self._light_sample(t))
            self.dirty = False
        elif self.dirty or self.every_cycle or (pending and (timed or self._idle_due(t))):
            self._run_cycle(t)
        self.only_completions = True
        period = self.scenario.period
        if self.every_cycle:
            self._push(t + period, CYCLE, None)
            return
        more = self._more_events()
        if self.dirty:
            self.idle_cycles = 0
            self._push(t + period, CYCLE, None)
        elif not more and self.idle_cycles >= self.max_idle_cycles:
            return  # nothing will arrive or finish, and waiting jobs have not moved for a long time: stop
        elif more or pending:
            if not more:
                self.idle_cycles += 1
            nxt = min((e[0] for e in self.heap if e[3] != CYCLE), default=math.inf)
            idle = t + period * (1 if timed else IDLE_CYCLES) if pending else math.inf
            when = min(nxt, idle)
            if when != math.inf:
                # on the period grid, after the next event
                steps = max(1, math.ceil((when - t) / period - 1e-9))
                self._push(t + steps * period, CYCLE, None)

    def _idle_due(self, t: float) -> bool:
        last = self.samples[-1].time if self.samples else -math.inf
        return t - last >= self.scenario.period * IDLE_CYCLES - 1e-9

    def _run_cycle(self, t: float) -> None:
        now = EPOCH + timedelta(seconds=t)
        history = self.history
        usage = history.table(now) if history is not None else None
        with no_cyclic_gc():
            result = run_prepared_cycle(self.cluster.parsed(), self.config, now, usage=usage, state=self.state)
        self.cycles += 1
        changed = bool(result.binds or result.evictions)
        if history is not None:  # what each queue holds from now on (after this cycle's binds and evictions)
            cap = result.capacity
            history.record(now, {q.name: [q.allocated.get("gpu", 0.0), q.allocated.get("cpu", 0.0),
                                          q.allocated.get("memory", 0.0)] for q in result.queues},
                           [cap.get("gpu", 0.0), cap.get("cpu", 0.0), cap.get("memory", 0.0)])
        self._apply(result, t)
        self._update_jobs(t)
        self._record_reasons(result, t)
        self.samples.append(self._sample(result, t))
        if self.observer is not None:
            self.observer(t, result)
        self.dirty = changed

    def _apply(self, result: CycleResult, t: float) -> None:
        """The cycle's decisions on the embedded cluster (binds, claims, evictions, PodGroup timestamps); an
        eviction breaks its job's run (the work since it started is lost)."""
        for e in result.evictions:
            if e.pod not in self.pods:
                continue
            job = self.job_of_pod.get(e.pod)
            if job is not None and job.run_start is not None:
                job.record.evictions += 1
                job.record.lost_gpu_seconds += (t - job.run_start) * job.record.gpus
                job.run_start = None
                job.run += 1
                _wait_for(job, AWAITING_CYCLE, t, self.waiting)  # (until a cycle says why: this one may, below)
        self.cluster.apply(result, EPOCH + timedelta(seconds=t))

    def _update_jobs(self, t: float) -> None:
        """Start the jobs not running yet whose every PodGroup has its minimum of pods on nodes (only the
        pods of jobs that wait are looked at)."""
        for job in self.active.values():
            if job.run_start is not None or not job.groups:
                continue
            running: dict[str, int] = {}
            for key in job.pods:
                pod = self.pods[key]
                if pod.node_name:
                    gkey = _key(pod.meta.namespace, pod.meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION, ""))
                    running[gkey] = running.get(gkey, 0) + 1
            if all(running.get(g, 0) >= max(self.groups[g].min_member, 1) for g in job.groups if g in self.groups):
                job.run_start = t
                job.run += 1
                _stop_waiting(job, t, self.waiting)
                if job.record.start is None:
                    job.record.start = t
                if job.record.duration != math.inf:
                    self._push(t + job.record.duration, COMPLETION, (job, job.run))

    def _record_reasons(self, result: CycleResult, t: float) -> None:
        """Each waiting job's reason from this cycle's PodGroup statuses (the code of its PodGroup's pending reason;
        of several PodGroups, the first in the order of the tiers), recorded only when it changes: a job the cycle
        gives no code keeps the reason it had."""
        codes: dict[str, str] = {}  # job key -> its code in this cycle
        job_of_group = self.job_of_group
        for g in result.pod_groups:
            code = g.code
            if code is None:
                continue
            job = job_of_group.get(g.name)
            if job is None or job.run_start is not None or job.done:
                continue
            was = codes.get(job.key)
            if was is None or _TIER_ORDER.get(code, len(_TIER_ORDER)) < _TIER_ORDER.get(was, len(_TIER_ORDER)):
                codes[job.key] = code
        active = self.active
        for key, code in codes.items():
            job = active.get(key)
            if job is not None and job.waiting_for != code:
                _wait_for(job, code, t, self.waiting)

    def _light_sample(self, t: float) -> Sample:
        """The last sample with the GPUs of the jobs that finished since given back (no cycle ran)."""
        last = self.samples[-1] if self.samples else None
        gpus = self.gpus_of_pod
        held = sum(gpus[k] for k, p in self.pods.items() if p.node_name)
        shared = sum(gpus[k] for k, p in self.pods.items()
                     if p.node_name and C.GPU_FRACTION_ANNOTATION in p.meta.annotations)
        by_queue: dict[str, float] = {}
        for job in self.active.values():
            if job.run_start is not None:
                by_queue[job.record.queue] = by_queue.get(job.record.queue, 0.0) + job.record.gpus
        total = last.gpus_total if last is not None else 0.0
        active = list(self.active.values())
        queues = {name: replace(q, allocated=by_queue.get(name, 0.0))
                  for name, q in (last.queues if last else {}).items()}
        return Sample(time=t, gpus_total=total, gpus_allocated=held, gpus_fractional=shared,
                      idle_gpus=max(total - held, 0.0), fragmentation=last.fragmentation if last else 0.0,
                      pending_jobs=0, running_jobs=len(active), queues=queues, pending_by_reason=dict(self.waiting),
                      stranded_no_cpu=last.stranded_no_cpu if last else 0.0,
                      stranded_no_memory=last.stranded_no_memory if last else 0.0,
                      stranded_slivers=last.stranded_slivers if last else 0.0)

    def _sample(self, result: CycleResult, t: float) -> Sample:
        total = sum(n.gpus for n in result.nodes)
        idle = sum(max(n.idle, 0.0) for n in result.nodes)
        fractional = sum(s.used_mib / s.memory_mib for n in result.nodes for s in n.shared if s.memory_mib > 0)
        partial_idle = sum(max(n.idle, 0.0) for n in result.nodes if n.gpus - n.idle - n.releasing > 1e-9)
        parents = {q.parent for q in result.queues if q.parent}
        timed = self.history is not None
        queues = {q.name: QueueSample(q.allocated.get("gpu", 0.0), q.fair_share.get("gpu", 0.0),
                                      q.deserved.get("gpu", 0.0), q.request.get("gpu", 0.0),
                                      q.usage.get("gpu", 0.0) if timed else None)
                  for q in result.queues}
        allocated = sum(q.allocated.get("gpu", 0.0) for q in result.queues if q.parent is None)
        if not result.queues:
            allocated = total - idle
        active = list(self.active.values())
        no_cpu, no_memory, slivers = stranded(result.nodes, 0.0 if self.gpu_pod_cpu == math.inf else self.gpu_pod_cpu,
                                              0.0 if self.gpu_pod_memory == math.inf else self.gpu_pod_memory)
        return Sample(
            stranded_no_cpu=no_cpu, stranded_no_memory=no_memory, stranded_slivers=slivers,
            time=t, gpus_total=total, gpus_allocated=allocated, gpus_fractional=fractional, idle_gpus=idle,
            fragmentation=partial_idle / idle if idle > 0 else 0.0,
            pending_jobs=sum(1 for j in active if j.run_start is None),
            running_jobs=sum(1 for j in active if j.run_start is not None),
            queues={k: v for k, v in queues.items() if k not in parents},
            pending_by_reason=dict(self.waiting),
        )


def kaisched_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kaisched")
    except PackageNotFoundError:
        return "unknown"


def run_inputs(scenario: Scenario) -> dict[str, object]:
    """What a run was made of, for its report: the scenario file and the SHA-256 of its content (as read), that
    content, the seed, the period and end, the scheduler configuration's source and the SHA-256 of it as canonical
    JSON (sorted keys; None for KAI's defaults) and kaisched's version (the command line is added by
    ``kaisched simulate``)."""
    text = scenario.text
    config = scenario.config
    canonical = None if config is None else json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return {
        "scenario": scenario.name,
        "scenario_path": scenario.path,
        "scenario_sha256": None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "scenario_text": text,
        "config_source": scenario.config_source or ("KAI's defaults" if config is None else "given in code"),
        "config_sha256": None if canonical is None else hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        "seed": scenario.seed,
        "period": scenario.period,
        "until": scenario.until,
        "jobs": len(scenario.arrivals) + len(scenario.dropped),
        "kaisched_version": kaisched_version(),
    }


_TIER_ORDER = {code: i for i, code in enumerate(REASON_CODES)}


def _stop_waiting(job: _Job, t: float, waiting: dict[str, int]) -> None:
    """The job no longer waits from ``t`` on: the time since its reason began is counted under that reason (and the
    job taken off ``waiting``, the jobs waiting per reason)."""
    reason = job.waiting_for
    if not reason:
        return
    spent = t - job.waiting_since
    if spent > 0:
        by = job.record.pending_by_reason
        by[reason] = by.get(reason, 0.0) + spent
        job.record.last_reason = reason
    job.waiting_for = ""
    left = waiting[reason] - 1
    if left:
        waiting[reason] = left
    else:
        del waiting[reason]


def _wait_for(job: _Job, reason: str, t: float, waiting: dict[str, int]) -> None:
    """The job waits for ``reason`` from ``t`` on (the time spent on the reason before is counted)."""
    _stop_waiting(job, t, waiting)
    job.waiting_for = reason
    job.waiting_since = t
    waiting[reason] = waiting.get(reason, 0) + 1


def _outcome(job: _Job) -> str:
    """What became of a job by the end of the run."""
    if job.done:
        return COMPLETED
    if job.run_start is not None:
        return RUNNING
    if not job.groups:
        return DROPPED  # none of its pods is for this scheduler, or its objects have errors: it cannot start
    return EVICTED_PENDING if job.record.start is not None else NEVER_STARTED


def _pod_gpus(pod: Pod) -> float:
    """Whole GPUs and GPU fractions the pod asks for as device-plugin resources (gpu-memory requests count 0)."""
    return pod_facts(pod).gpu[0].required_gpus


def _with_creation(obj: dict[str, object], now: datetime) -> dict[str, object]:
    """The object created at ``now`` (the simulated arrival time), unless it says otherwise."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "creationTimestamp" in meta:
        return obj
    return {**obj, "metadata": {**meta, "creationTimestamp": now.isoformat().replace("+00:00", "Z")}}


def simulate(scenario: Scenario, *, progress: Progress | None = None) -> SimResult:
    """Run a scenario to its end (or its ``until``) and return what it measured."""
    return Simulator(scenario, progress=progress).run()


__all__ = ["EPOCH", "CycleObserver", "Progress", "ProgressInfo", "SimulationError", "Simulator", "annotated_pod_group",
           "bound_pod", "evicted_pod", "simulate"]
