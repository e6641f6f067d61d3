"""KAI's Prometheus metrics (spec 11.1), on a registry of our own.

Names are KAI's, with its prefix (``kai_`` by default, ``--metrics-namespace``), label names included. KAI is
written in Go, whose client exposes a counter under exactly its name, while Python's client always appends
``_total``; :meth:`SchedulerMetrics.render` writes the text exposition format itself so that counters keep
KAI's names (``kai_podgroups_scheduled_by_action``, ``kai_pod_group_evicted_pods_total``) and no ``_created``
series appear.

Fed by :meth:`SchedulerMetrics.record_cycle` (one call per cycle, from the :class:`CycleTimings` of
:func:`timed_cycle` and the cycle's result) and :meth:`SchedulerMetrics.observe_bind` (called by the
:class:`~kaisched.kube.writer.ClusterWriter` when a bind succeeds). Scheduler metrics: the latency gauges
(e2e, open/close session, per plugin, per action), ``task_scheduling_latency_milliseconds`` (pod creation to
bind decision), ``task_bind_latency_milliseconds``, ``podgroups_scheduled_by_action``,
``pod_group_evicted_pods_total``, the queue fair-share gauges, and KAI v0.17's scenario-search metrics:
``scenario_search_jobs_total{action,result,reduced_budget}`` (one per job an eviction action searched victims
for, from the cycle result's ``scenario_search``), ``scenario_search_action_budget_exhausted_total{action}``
(an action whose budget ran out in a cycle) and the configured budgets
``scenario_search_{action,job,generator}_budget_configured_seconds`` (:meth:`SchedulerMetrics.set_search_budgets`;
0 = unlimited, as without ``scenarioSearchBudgets``). Queue-controller metrics (the queue controller runs in this
process): ``queue_info``, ``queue_deserved_gpus``, ``queue_quota_cpu_cores``, ``queue_quota_memory_bytes``,
``queue_allocated_gpus``, ``queue_allocated_cpu_cores``, ``queue_allocated_memory_bytes``.
Time-based fair share (spec 5.7): KAI's ``usage_query_latency_milliseconds`` and ``queue_gpu_usage``,
``queue_cpu_usage``, ``queue_memory_usage`` (the usage the last cycle divided with), and kaisched's own
``usage_db_fetches_total{result}``, ``usage_db_data_age_seconds`` (-1: no usage, weight-only division) and
``usage_db_stale`` (:meth:`SchedulerMetrics.record_usage`, :meth:`SchedulerMetrics.usage_fetched`), with
``cluster_capacity_gpus``, ``cluster_capacity_cpu_cores``, ``cluster_capacity_memory_bytes`` (what the queues divided:
a capacity query where kube-state-metrics is not scraped). One metric of
kaisched's own, with the same prefix: ``fenced_writes_dropped_total{operation}``, the writes a replica did not send
because its leadership term was over or its Lease no longer valid with margin
(:meth:`SchedulerMetrics.fenced_write_dropped`, fed by the writer; ``operation`` is the operation's class:
``Bind``, ``Evict``, ``Event``, ...). KAI metrics that
kaisched has nothing to feed with (victim-scenario counters and
``scenario_search_duration_seconds`` / ``scenario_search_scenarios_total``, preemption attempts, jobs considered
per action) are not exported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kaisched.actions.registry import build_actions
from kaisched.actions.search_budget import STOPPED_BY_ACTION
from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.memo import CycleMemo
from kaisched.framework.config import BUDGET_ACTIONS, BUDGET_DEFAULT, BUDGET_GENERATORS, SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.framework.session import Session
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects
from kaisched.model.snapshot import SnapshotOptions, build_snapshot
from kaisched.model.usage import UsageTable
from kaisched.plugins.registry import build_plugins

DEFAULT_NAMESPACE = "kai"
# prometheus.ExponentialBuckets(5, 2, 10): 5, 10, ..., 2560 ms
LATENCY_BUCKETS_MS: tuple[float, ...] = tuple(5.0 * 2**k for k in range(10))
ON_SESSION_OPEN = "OnSessionOpen"
ON_SESSION_CLOSE = "OnSessionClose"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNLIMITED = -1.0

Lookup = Callable[[str, str], "Mapping[str, Any] | None"]


@dataclass(slots=True)
class CycleTimings:
    """How long the parts of one cycle took, in milliseconds."""

    e2e_ms: float
    open_session_ms: float | None = None
    close_session_ms: float | None = None
    actions_ms: dict[str, float] = field(default_factory=dict)
    plugins_open_ms: dict[str, float] = field(default_factory=dict)
    plugins_close_ms: dict[str, float] = field(default_factory=dict)


def timed_cycle(parsed: ParsedObjects, config: SchedulerConfig, now: datetime,
                clock: Callable[[], float] = time.perf_counter,
                memo: CycleMemo | None = None, *, make_template_claims: bool = True,
                usage: UsageTable | None = None, state: IncrementalState | None = None) -> tuple[CycleResult,
                                                                                                 CycleTimings]:
    """:func:`kaisched.cluster.schedule.run_prepared_cycle` with each part timed: open session (snapshot and
    every plugin's open), each action, close session (every plugin's close and the result). A cycle the
    ``memo`` answers (nothing changed since the last quiet cycle) has only its end-to-end time.
    ``make_template_claims=False`` (Kubernetes mode): the snapshot does not make the DRA claims of pods'
    templated claims; a pod waits until the resourceclaim controller has made them. ``usage``: each queue's
    historical usage (time-based fair share); None: weight-only division. ``state``: the snapshot model kept
    from the last cycle (:mod:`kaisched.cluster.incremental`), updated instead of built afresh."""
    start = clock()
    if memo is not None:
        known = memo.lookup(parsed, config, now, usage)
        if known is not None:
            return known, CycleTimings((clock() - start) * 1000.0)
    options = SnapshotOptions(full_hierarchy_fairness=config.params.full_hierarchy_fairness,
                              scheduler_name=config.params.scheduler_name, make_template_claims=make_template_claims)
    snapshot = state.snapshot(parsed, now, options) if state is not None else build_snapshot(parsed, now, options)
    snapshot.usage = usage
    plugins = build_plugins(config.plugins)
    ssn = Session(snapshot, config, plugins)
    timings = CycleTimings(0.0)
    for plugin in plugins:  # Session.open, timed per plugin
        t = clock()
        plugin.on_session_open(ssn)
        timings.plugins_open_ms[plugin.name] = (clock() - t) * 1000.0
    opened = clock()
    timings.open_session_ms = (opened - start) * 1000.0
    for action in build_actions(config):
        t = clock()
        action.execute(ssn)
        timings.actions_ms[action.name] = timings.actions_ms.get(action.name, 0.0) + (clock() - t) * 1000.0
    closing = clock()
    for plugin in plugins:  # Session.close, timed per plugin; then the result with the plugins already closed
        t = clock()
        plugin.on_session_close(ssn)
        timings.plugins_close_ms[plugin.name] = (clock() - t) * 1000.0
    ssn.plugins = []
    try:
        result = ssn.close()
        if memo is not None:
            memo.record(parsed, config, now, result, ssn.valid_until, ssn.stamped, usage)
    finally:
        ssn.discard()
    end = clock()
    timings.close_session_ms = (end - closing) * 1000.0
    timings.e2e_ms = (end - start) * 1000.0
    return result, timings


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class SchedulerMetrics:
    """KAI's metrics on a private :class:`CollectorRegistry`; label children are created once and reused."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE, registry: CollectorRegistry | None = None,
                 node_pool_label_key: str = C.NODE_POOL_LABEL) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.namespace = namespace
        self.node_pool_label_key = node_pool_label_key
        ns, reg = namespace, self.registry
        self.e2e_latency = Gauge("e2e_scheduling_latency_milliseconds",
                                 "E2e scheduling latency in milliseconds (scheduling algorithm + binding), as a gauge",
                                 namespace=ns, registry=reg)
        self.open_session_latency = Gauge("open_session_latency_milliseconds",
                                          "Open session latency in milliseconds, including all plugins, as a gauge",
                                          namespace=ns, registry=reg)
        self.close_session_latency = Gauge("close_session_latency_milliseconds",
                                           "Close session latency in milliseconds, including all plugins, as a gauge",
                                           namespace=ns, registry=reg)
        self.plugin_latency = Gauge("plugin_scheduling_latency_milliseconds",
                                    "Plugin scheduling latency in milliseconds, as a gauge", ["plugin", "OnSession"],
                                    namespace=ns, registry=reg)
        self.action_latency = Gauge("action_scheduling_latency_milliseconds",
                                    "Action scheduling latency in milliseconds, as a gauge", ["action"],
                                    namespace=ns, registry=reg)
        self.task_scheduling_latency = Histogram("task_scheduling_latency_milliseconds",
                                                 "Task scheduling latency in milliseconds",
                                                 namespace=ns, registry=reg, buckets=LATENCY_BUCKETS_MS)
        self.task_bind_latency = Histogram("task_bind_latency_milliseconds",
                                           "Task bind latency histogram in milliseconds",
                                           namespace=ns, registry=reg, buckets=LATENCY_BUCKETS_MS)
        self.podgroups_scheduled = Counter("podgroups_scheduled_by_action", "Count of podgroups scheduled per action",
                                           ["action"], namespace=ns, registry=reg)
        self.evicted_pods = Counter("pod_group_evicted_pods_total", "Total number of pods evicted per pod group",
                                    ["podgroup", "namespace", "uid", "nodepool", "action"], namespace=ns,
                                    registry=reg)
        self.fair_share_cpu = Gauge("queue_fair_share_cpu_cores",
                                    "CPU Fair share of queue, as a gauge. Value is in Cores",
                                    ["queue_name"], namespace=ns, registry=reg)
        self.fair_share_memory = Gauge("queue_fair_share_memory_gb",
                                       "Memory Fair share of queue, as a gauge. Value is in GB",
                                       ["queue_name"], namespace=ns, registry=reg)
        self.fair_share_gpu = Gauge("queue_fair_share_gpu",
                                    "GPU Fair share of queue, as a gauge. Values in GPU devices",
                                    ["queue_name"], namespace=ns, registry=reg)
        self.queue_info = Gauge("queue_info", "Queue information (1 per queue)", ["queue_name"], namespace=ns,
                                registry=reg)
        self.queue_deserved_gpus = Gauge("queue_deserved_gpus", "Deserved GPUs of a queue (-1: unlimited)",
                                         ["queue_name"], namespace=ns, registry=reg)
        self.queue_quota_cpu = Gauge("queue_quota_cpu_cores", "CPU quota of a queue in cores (-1: unlimited)",
                                     ["queue_name"], namespace=ns, registry=reg)
        self.queue_quota_memory = Gauge("queue_quota_memory_bytes", "Memory quota of a queue in bytes (-1: unlimited)",
                                        ["queue_name"], namespace=ns, registry=reg)
        self.queue_allocated_gpus = Gauge("queue_allocated_gpus", "GPUs allocated to a queue", ["queue_name"],
                                          namespace=ns, registry=reg)
        self.queue_allocated_cpu = Gauge("queue_allocated_cpu_cores", "CPU cores allocated to a queue",
                                         ["queue_name"], namespace=ns, registry=reg)
        self.queue_allocated_memory = Gauge("queue_allocated_memory_bytes", "Memory bytes allocated to a queue",
                                            ["queue_name"], namespace=ns, registry=reg)
        self.search_jobs = Counter("scenario_search_jobs_total", "Count of jobs considered by bounded scenario search.",
                                   ["action", "result", "reduced_budget"], namespace=ns, registry=reg)
        self.search_action_budget = Gauge("scenario_search_action_budget_configured_seconds",
                                          "Configured action scenario search budget in seconds.", ["action"],
                                          namespace=ns, registry=reg)
        self.search_job_budget = Gauge("scenario_search_job_budget_configured_seconds",
                                       "Configured per-job scenario search budget in seconds.", namespace=ns,
                                       registry=reg)
        self.search_generator_budget = Gauge("scenario_search_generator_budget_configured_seconds",
                                             "Configured generator scenario search budget in seconds.", ["generator"],
                                             namespace=ns, registry=reg)
        self.search_action_exhausted = Counter("scenario_search_action_budget_exhausted_total",
                                               "Count of action-level scenario search budget exhaustion events.",
                                               ["action"], namespace=ns, registry=reg)
        self.fenced_writes_dropped = Counter("fenced_writes_dropped",
                                             "Writes not sent because the replica's lease was no longer held "
                                             "(a plan made under a lease or term that ended)", ["operation"],
                                             namespace=ns, registry=reg)
        # kaisched's own: the writer's adaptive concurrency (kube/concurrency.py) and its event recorder
        self.write_concurrency_limit = Gauge("write_concurrency_limit",
                                             "Writes the cluster writer lets be in flight at once (adapts to the API "
                                             "server's answers: 429, Retry-After, latency)", namespace=ns, registry=reg)
        self.write_pushbacks = Counter("write_pushbacks", "API server answers asking for fewer requests (429, 503, "
                                       "504) to the cluster writer", namespace=ns, registry=reg)
        self.events_filtered = Counter("events_filtered", "Events not written as such: over an object's event "
                                       "rate (spam), combined with similar ones (aggregated), or the event queue "
                                       "full (queue_full)", ["reason"], namespace=ns, registry=reg)
        # kaisched's own: the capacity the queues divided (a capacity query for time-based fair share where
        # kube-state-metrics is not scraped), and the usage source's health and answers (spec 5.7)
        self.cluster_capacity_gpus = Gauge("cluster_capacity_gpus", "GPUs the queues divided in the last cycle",
                                           namespace=ns, registry=reg)
        self.cluster_capacity_cpu = Gauge("cluster_capacity_cpu_cores",
                                          "CPU cores the queues divided in the last cycle", namespace=ns, registry=reg)
        self.cluster_capacity_memory = Gauge("cluster_capacity_memory_bytes",
                                             "Memory bytes the queues divided in the last cycle", namespace=ns,
                                             registry=reg)
        self.usage_fetches = Counter("usage_db_fetches", "Usage fetches from the usage database, by result",
                                     ["result"], namespace=ns, registry=reg)
        self.usage_query_latency = Histogram("usage_query_latency_milliseconds",
                                             "Usage database query latency histogram in milliseconds",
                                             namespace=ns, registry=reg, buckets=LATENCY_BUCKETS_MS)
        self.usage_age = Gauge("usage_db_data_age_seconds",
                               "Age of the usage the last cycle divided with (-1: none: weight-only division)",
                               namespace=ns, registry=reg)
        self.usage_stale = Gauge("usage_db_stale",
                                 "1 when the last cycle divided with usage older than stalenessPeriod",
                                 namespace=ns, registry=reg)
        self.queue_usage = tuple(
            Gauge(f"queue_{r}_usage", f"{r.upper() if r != 'memory' else 'Memory'} usage of queue, as a gauge: its "
                  "share of the cluster's capacity over the usage window", ["queue_name"], namespace=ns, registry=reg)
            for r in ("gpu", "cpu", "memory"))
        self._queue_gauges = (self.fair_share_cpu, self.fair_share_memory, self.fair_share_gpu, self.queue_info,
                              self.queue_deserved_gpus, self.queue_quota_cpu, self.queue_quota_memory,
                              self.queue_allocated_gpus, self.queue_allocated_cpu, self.queue_allocated_memory)
        # exposed names of counters (Go style: exactly the declared name)
        self._counter_names = {f"{ns}_podgroups_scheduled_by_action": f"{ns}_podgroups_scheduled_by_action",
                               f"{ns}_pod_group_evicted_pods": f"{ns}_pod_group_evicted_pods_total",
                               f"{ns}_scenario_search_jobs": f"{ns}_scenario_search_jobs_total",
                               f"{ns}_usage_db_fetches": f"{ns}_usage_db_fetches_total",
                               f"{ns}_write_pushbacks": f"{ns}_write_pushbacks_total",
                               f"{ns}_events_filtered": f"{ns}_events_filtered_total",
                               f"{ns}_scenario_search_action_budget_exhausted":
                                   f"{ns}_scenario_search_action_budget_exhausted_total"}
        # label children, bound once
        self._plugin_children: dict[tuple[str, str], Any] = {}
        self._action_children: dict[str, Any] = {}
        self._scheduled_children: dict[str, Any] = {}
        self._evicted_children: dict[tuple[str, str, str, str, str], Any] = {}
        self._queue_children: dict[str, tuple[Any, ...]] = {}
        self._search_children: dict[tuple[str, str, str], Any] = {}
        self._fenced_children: dict[str, Any] = {}

    # ---- feeding --------------------------------------------------------------------------------------
    def record_cycle(self, result: CycleResult, timings: CycleTimings, lookup: Lookup | None = None,
                     now: datetime | None = None) -> None:
        """Update the metrics after a cycle. ``lookup(kind, key)`` (the cache) gives pod creation times for the
        scheduling latency and the evicted pods' PodGroups; without it those labels stay empty."""
        self.e2e_latency.set(timings.e2e_ms)
        if timings.open_session_ms is not None:
            self.open_session_latency.set(timings.open_session_ms)
        if timings.close_session_ms is not None:
            self.close_session_latency.set(timings.close_session_ms)
        for plugin, ms in timings.plugins_open_ms.items():
            self._plugin_child(plugin, ON_SESSION_OPEN).set(ms)
        for plugin, ms in timings.plugins_close_ms.items():
            self._plugin_child(plugin, ON_SESSION_CLOSE).set(ms)
        for action, ms in timings.actions_ms.items():
            child = self._action_children.get(action)
            if child is None:
                child = self._action_children[action] = self.action_latency.labels(action)
            child.set(ms)
        when = now or datetime.now(UTC)
        if lookup is not None:
            for placement in result.binds:
                pod = lookup(C.POD_KIND, placement.pod)
                created = _parse_time(_mapping(pod.get("metadata") if pod else None).get("creationTimestamp"))
                if created is not None:
                    self.task_scheduling_latency.observe(max((when - created).total_seconds() * 1000.0, 0.0))
        self._scheduled_by_action(result)
        self._evictions(result, lookup)
        self._queues(result)
        self._scenario_search(result)

    def set_search_budgets(self, config: SchedulerConfig) -> None:
        """The configured-budget gauges of KAI's scenario search (seconds, 0 = unlimited): per eviction action in
        the configuration, per job, and per generator (``default`` and KAI's two generators). Without
        ``scenarioSearchBudgets`` every budget is unlimited."""
        budgets = config.search_budgets
        for action in BUDGET_ACTIONS:
            if action in config.actions:
                self.search_action_budget.labels(action).set(budgets.action_limit(action) if budgets else 0.0)
        self.search_job_budget.set(budgets.job_limit() if budgets else 0.0)
        for generator in (BUDGET_DEFAULT, *BUDGET_GENERATORS):
            self.search_generator_budget.labels(generator).set(budgets.generator_limit(generator) if budgets else 0.0)

    def record_usage(self, usage: UsageTable | None, now: datetime) -> None:
        """The usage a cycle divided with (None: weight only): its age, staleness and each queue's usage."""
        if usage is None or usage.fetched_at is None:
            self.usage_age.set(-1.0)
            self.usage_stale.set(0.0)
        else:
            self.usage_age.set(max(0.0, (now - usage.fetched_at).total_seconds()))
            self.usage_stale.set(1.0 if usage.stale else 0.0)
        for gauge in self.queue_usage:
            gauge.clear()
        for name, vector in (usage.queues.items() if usage is not None else ()):
            for gauge, value in zip(self.queue_usage, vector, strict=True):
                gauge.labels(name).set(value)

    def usage_fetched(self, ok: bool, seconds: float) -> None:
        """One fetch of the usage source (``ok``: it gave a table)."""
        self.usage_fetches.labels("success" if ok else "error").inc()
        self.usage_query_latency.observe(seconds * 1000.0)

    def observe_bind(self, milliseconds: float) -> None:
        """One bind, from its decision to the API server's answer."""
        self.task_bind_latency.observe(milliseconds)

    def observe_write(self, limit: int, pushback: bool) -> None:
        """One answer to the cluster writer: its concurrency limit after it, and whether the server pushed back."""
        self.write_concurrency_limit.set(limit)
        if pushback:
            self.write_pushbacks.inc()

    def event_filtered(self, reason: str, count: int = 1) -> None:
        """Events not written (``reason``: ``spam`` over the object's rate, ``aggregated`` combined)."""
        if count:
            self.events_filtered.labels(reason).inc(count)

    def fenced_write_dropped(self, operation: str) -> None:
        """One write dropped by the writer's fence (``operation``: the operation's class name)."""
        child = self._fenced_children.get(operation)
        if child is None:
            child = self._fenced_children[operation] = self.fenced_writes_dropped.labels(operation)
        child.inc()

    def _plugin_child(self, plugin: str, phase: str) -> Any:
        child = self._plugin_children.get((plugin, phase))
        if child is None:
            child = self._plugin_children[(plugin, phase)] = self.plugin_latency.labels(plugin, phase)
        return child

    def _scheduled_by_action(self, result: CycleResult) -> None:
        """A PodGroup allocated or pipelined this cycle counts for the action that made room for it (the
        action of the evictions it caused), else ``allocate``."""
        action_of = {ev.preemptor: ev.action for ev in result.evictions if ev.preemptor}
        for status in result.pod_groups:
            if status.status not in ("Allocated", "Pipelined"):
                continue
            action = action_of.get(status.name, "allocate")
            child = self._scheduled_children.get(action)
            if child is None:
                child = self._scheduled_children[action] = self.podgroups_scheduled.labels(action)
            child.inc()

    def _evictions(self, result: CycleResult, lookup: Lookup | None) -> None:
        for ev in result.evictions:
            namespace, _, _ = ev.pod.rpartition("/")
            group_name, uid, pool = "", "", "default"
            if lookup is not None:
                pod = lookup(C.POD_KIND, ev.pod)
                annotations = _mapping(_mapping(pod.get("metadata") if pod else None).get("annotations"))
                group_name = str(annotations.get(C.POD_GROUP_NAME_ANNOTATION, ""))
                group = lookup(C.POD_GROUP_KIND, f"{namespace}/{group_name}") if group_name else None
                meta = _mapping(group.get("metadata") if group else None)
                uid = str(meta.get("uid", "") or "")
                pool = str(_mapping(meta.get("labels")).get(self.node_pool_label_key) or "default")
            key = (group_name, namespace, uid, pool, ev.action)
            child = self._evicted_children.get(key)
            if child is None:
                child = self._evicted_children[key] = self.evicted_pods.labels(*key)
            child.inc()

    def _scenario_search(self, result: CycleResult) -> None:
        exhausted: set[str] = set()
        for outcome in result.scenario_search:
            key = (outcome.action, outcome.result, "true" if outcome.reduced_budget else "false")
            child = self._search_children.get(key)
            if child is None:
                child = self._search_children[key] = self.search_jobs.labels(*key)
            child.inc()
            if outcome.stopped_by == STOPPED_BY_ACTION:
                exhausted.add(outcome.action)
        for action in sorted(exhausted):  # (once per action and cycle: an action's budget runs out once)
            self.search_action_exhausted.labels(action).inc()

    def _queues(self, result: CycleResult) -> None:
        if result.capacity:
            self.cluster_capacity_gpus.set(result.capacity.get("gpu", 0.0))
            self.cluster_capacity_cpu.set(result.capacity.get("cpu", 0.0) / 1000.0)
            self.cluster_capacity_memory.set(result.capacity.get("memory", 0.0))
        seen: set[str] = set()
        for q in result.queues:
            seen.add(q.name)
            children = self._queue_children.get(q.name)
            if children is None:
                children = self._queue_children[q.name] = tuple(g.labels(q.name) for g in self._queue_gauges)
            fs_cpu, fs_mem, fs_gpu, info, des_gpu, quota_cpu, quota_mem, alloc_gpu, alloc_cpu, alloc_mem = children
            fs_cpu.set(q.fair_share.get("cpu", 0.0) / 1000.0)
            fs_mem.set(q.fair_share.get("memory", 0.0) / 1e9)
            fs_gpu.set(q.fair_share.get("gpu", 0.0))
            info.set(1)
            des_gpu.set(q.deserved.get("gpu", 0.0))
            quota_cpu.set(_scaled(q.deserved.get("cpu", 0.0), 1000.0))
            quota_mem.set(q.deserved.get("memory", 0.0))
            alloc_gpu.set(q.allocated.get("gpu", 0.0))
            alloc_cpu.set(q.allocated.get("cpu", 0.0) / 1000.0)
            alloc_mem.set(q.allocated.get("memory", 0.0))
        for name in [n for n in self._queue_children if n not in seen]:  # deleted queues: drop their series
            for gauge in self._queue_gauges:
                gauge.remove(name)
            del self._queue_children[name]

    # ---- exposition ---------------------------------------------------------------------------------
    def render(self) -> bytes:
        """The registry in the Prometheus text format (0.0.4), counters under KAI's names."""
        return render(self.registry, self._counter_names)


def _scaled(value: float, divisor: float) -> float:
    return UNLIMITED if value == UNLIMITED else value / divisor


def _go_float(value: float) -> str:
    """A sample value as Go's client writes it (``+Inf``, ``-Inf``, ``NaN``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(registry: CollectorRegistry, counter_names: Mapping[str, str] | None = None) -> bytes:
    """Text exposition of ``registry``. A counter family ``f`` is exposed as ``counter_names[f]`` (default
    ``f_total``); ``_created`` samples are left out."""
    names = counter_names or {}
    lines: list[str] = []
    for metric in registry.collect():
        mtype = metric.type
        exposed = metric.name
        if mtype == "counter":
            exposed = names.get(metric.name, metric.name + "_total")
        elif mtype == "unknown":
            mtype = "untyped"
        lines.append(f"# HELP {exposed} {_escape_help(metric.documentation)}\n")
        lines.append(f"# TYPE {exposed} {mtype}\n")
        for s in metric.samples:
            if s.name.endswith("_created"):
                continue
            name = exposed if mtype == "counter" and s.name == metric.name + "_total" else s.name
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels.items())
            lines.append(f"{name}{{{labels}}} {_go_float(s.value)}\n" if labels
                         else f"{name} {_go_float(s.value)}\n")
    return "".join(lines).encode()
