"""``kaisched run``: the scheduling loop against a real API server.

Informers keep caches of Nodes, Pods, PodGroups, Queues, PriorityClasses and Topologies, and of the DRA kinds
(DeviceClasses, ResourceSlices, ResourceClaims, ResourceClaimTemplates) in the ``resource.k8s.io`` version the
server serves (v1, else v1beta2, else v1beta1; asked once at start). Every
``schedule_period`` the leader takes one consistent view of them (:mod:`kaisched.kube.cache`), groups the
pods that have no PodGroup yet (the pod-grouper controller creates those PodGroups and annotates the pods),
runs the configured actions (the same code as ``kaisched schedule`` and the simulator) and hands what the
cycle decided to the :class:`~kaisched.kube.writer.ClusterWriter`: binds, evictions, PodGroup/Queue status,
pod conditions and events, written by a bounded worker pool that never blocks the next cycle.

DRA (:mod:`kaisched.kube.claims`): the snapshot never makes claims from templates here (the cluster's resourceclaim
controller does; a pod waits for its claim); a bind writes its claims' allocation and reservation first; the
reservations of pods that are gone are removed every cycle; claims whose reservation is in flight are shown
reserved to the next cycle.

Leadership (``leader_elect``): only the holder of the Lease schedules. A replica that loses the Lease stops
at once (:meth:`KubeScheduler.run` returns 1, the process exits and Kubernetes restarts it as a standby),
as KAI and client-go controllers do; a new leader starts from the API's state: pods bound by its
predecessor are bound in its cache, and a second bind of one pod is refused by the API server (409).

Fencing: each cycle belongs to the leadership term current when it starts
(:attr:`~kaisched.kube.leader.LeaderElector.term`), and its writes go to that term's writer, whose fence is
``elector.holds(term)`` (the term is current and its Lease valid with margin; no API call). A cycle is not run
when the fence fails at its start; the writer asks the fence again for the batch and before every request, and
once it fails drops the rest of the plan (:mod:`kaisched.kube.writer`). The first failed fence ends the
replica's leadership as a lost Lease does (exit 1), so a replica that was paused (SIGSTOP, a frozen VM, a long
GC) past its lease writes nothing after it resumes, not even its next cycle's plan. With the chart's fencing policy
the API server refuses, besides, every write of a replica that is not the Lease's holder; such a refusal (reported by
the writer, ``on_denied``) ends the term and the replica's leadership the same way.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import compiled_core, long_lived_frozen, no_cyclic_gc
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError, ParsedObjects, PodGroup
from kaisched.kube.api import Api, ApiError
from kaisched.kube.cache import OwnerCache, ParseCache, overlay
from kaisched.kube.claims import discover_dra_version, held_devices, stale_reservations
from kaisched.kube.grouper_controller import Arrivals, PodGrouperController
from kaisched.kube.health import Health, HealthServer
from kaisched.kube.informer import Informer
from kaisched.kube.leader import LeaderElector, default_identity
from kaisched.kube.live import group_live
from kaisched.kube.logs import get_logger, log_cycle
from kaisched.kube.metrics import CycleTimings, SchedulerMetrics, timed_cycle
from kaisched.kube.operations import (
    CreatePodGroup,
    EventMemory,
    ObjectRef,
    Operation,
    OperationPlanner,
    PodMetadataPatch,
    fold_grouping,
    pods_by_group,
)
from kaisched.kube.resources import (
    CONFIGMAP,
    KINDS,
    NODE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    QUEUE,
    TOPOLOGY,
    ResourceKind,
    dra_kinds,
)
from kaisched.kube.writer import ClusterWriter, Failure
from kaisched.model.usage import UsageTable
from kaisched.usage.sources import UsageSource, usage_source

log = get_logger("kaisched.kube.runner")
std_log = logging.getLogger(__name__)

#: kinds the scheduler cannot work without (their CRDs must be installed); the others are optional
REQUIRED_KINDS: tuple[ResourceKind, ...] = (NODE, POD, PODGROUP, QUEUE, PRIORITY_CLASS)
OPTIONAL_KINDS: tuple[ResourceKind, ...] = (TOPOLOGY,)
CYCLE_LOOP = "scheduler"


@dataclass(slots=True)
class RunOptions:
    schedule_period: float = 1.0
    # between cycles, the PodGroups of pods that arrived are created this often (seconds; 0: only by the cycles),
    # as KAI's pod-grouper, a controller of its own, creates them as pods arrive (group_arrivals)
    group_period: float = 0.2
    leader_elect: bool = False
    lease_namespace: str = "kai-scheduler"
    lease_name: str = "kai-scheduler"
    identity: str = ""  # default: POD_NAME (or the host name) plus a random suffix (leader.default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    listen_host: str = "0.0.0.0"
    listen_port: int | None = 8080  # None: no metrics/health server
    workers: int = 16  # the writer's requests in flight at first
    max_workers: int = 64  # ... at most, as the server's answers allow (kube/concurrency.py); workers under a fence
    # the GIL's switch interval while scheduling (None: Python's 5 ms): a writer thread waiting for the GIL while a
    # cycle computes gets it back sooner after each socket operation, so the cycle's PodGroups and binds go out
    # during the next cycle's computation instead of after it (a steady 100 pods/s: p99 create-to-bind 10-25 % lower)
    switch_interval: float | None = 0.0005
    sync_timeout: float = 120.0
    watch_timeout: float = 300.0
    max_cycles: int | None = None  # stop after this many cycles (tests, one-shot runs)
    # resource.k8s.io version of the DRA kinds: "auto" (asked from the server at start), "v1", "v1beta2",
    # "v1beta1", or "off" (no DRA informers: pods that name claims stay pending)
    dra_version: str = "auto"

    def resolved_identity(self) -> str:
        return self.identity or default_identity()


def _utcnow() -> datetime:
    return datetime.now(UTC)


@contextlib.contextmanager
def _switch_interval(seconds: float | None) -> Iterator[None]:
    """``sys.setswitchinterval(seconds)`` for the block (the previous value restored after it)."""
    if seconds is None:
        yield
        return
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeScheduler:
    """One scheduler process: caches, the cycle loop, the writer, health and metrics."""

    def __init__(self, api: Api, config: SchedulerConfig, options: RunOptions | None = None, *,
                 now: Callable[[], datetime] = _utcnow, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.config = config
        self.options = options or RunOptions()
        self._now = now
        self._clock = clock
        params = config.params
        self.scheduler_name = params.scheduler_name
        self.informers: dict[str, Informer] = {
            k.kind: Informer(api, k, watch_timeout=self.options.watch_timeout, name=f"informer-{k.plural}")
            for k in (*REQUIRED_KINDS, *OPTIONAL_KINDS)
        }
        if params.default_priorities_configmap_name:
            self.informers[CONFIGMAP.kind] = Informer(
                api, CONFIGMAP, namespace=params.default_priorities_configmap_namespace or "default",
                field_selector=f"metadata.name={params.default_priorities_configmap_name}",
                watch_timeout=self.options.watch_timeout, name="informer-configmaps")
        self.kinds: dict[str, ResourceKind] = dict(KINDS)  # by kind name: the DRA ones once discovered
        self.dra_version: str | None = None  # the resource.k8s.io version read (None: DRA not served / off)
        self.parse_cache = ParseCache()
        self.owners = OwnerCache(api)
        self.metrics = SchedulerMetrics()
        self.metrics.set_search_budgets(config)
        self.health = Health()
        self.planner = OperationPlanner()
        self.grouper = PodGrouperController(self.scheduler_name)
        # the passes between cycles (group_arrivals): their own grouper, whose warnings the cycles report
        self.arrivals = Arrivals()
        self.arrival_grouper = PodGrouperController(self.scheduler_name)
        self.error_events = EventMemory()
        for memory in (self.planner.events, self.grouper.events, self.error_events):
            memory.on_filtered = self.metrics.event_filtered  # events over an object's rate, or combined
        self.writer: ClusterWriter | None = None
        self._writer_term: int | None = None  # the leadership term the writer writes for (None: no election)
        self.elector: LeaderElector | None = None
        self.server: HealthServer | None = None
        self.cycles = 0
        self.memo = CycleMemo()  # the last quiet cycle: an unchanged cluster is not scheduled again
        self.state = IncrementalState()  # the snapshot model, updated with what changed since the last cycle
        self.failures: list[Failure] = []
        # hooks of the command that runs this scheduler (kaisched run wires the dashboard): called after each
        # cycle with (prepared objects, result, now) on the scheduling thread, and extra routes of the HTTP server
        self.cycle_listeners: list[Callable[[ParsedObjects, CycleResult, datetime], None]] = []
        # time-based fair share (usageDBConfig): each queue's usage, fetched outside the cycle (None: by weight)
        self.usage: UsageSource | None = usage_source(
            config, now=now, on_fetch=lambda report: self.metrics.usage_fetched(report.ok, report.seconds))
        self.http_routes: list[Callable[[str], tuple[int, str, bytes] | None]] = []
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._leading = threading.Event()

    # ---- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Find the DRA version the server serves, start the informers, the health/metrics server and (with
        leader election) the elector."""
        self._start_dra()
        if self.usage is not None:
            log.info("time-based fair share", usage_source=self.usage.description)
            self.usage.start()
        for informer in self.informers.values():
            informer.start()
        if self.options.listen_port is not None:
            self.server = HealthServer(self.health, self.metrics.render, self.options.listen_host,
                                       self.options.listen_port, self.http_routes).start()
        if self.options.leader_elect:
            o = self.options
            self.elector = LeaderElector(
                self.api, o.lease_namespace, o.lease_name, o.resolved_identity(), lease_duration=o.lease_duration,
                renew_deadline=o.renew_deadline, retry_period=o.retry_period,
                on_started_leading=self._leading.set, on_stopped_leading=self._on_lost)
            self.elector.start()
        else:
            self._leading.set()

    def _start_dra(self, attempts: int = 5) -> None:
        """Add the DRA informers, in the version the server serves (asked once; a server that cannot be asked
        after a few attempts is taken to serve v1: the informers retry on their own)."""
        wanted = self.options.dra_version
        version: str | None = None
        if wanted == "off":
            return
        if wanted != "auto":
            version = wanted
        else:
            delay = 0.2
            for attempt in range(1, attempts + 1):
                try:
                    version = discover_dra_version(self.api)
                    break
                except ApiError as err:
                    if attempt == attempts or self._stop.wait(delay):
                        log.warning("resource.k8s.io discovery failed: assuming v1", error=str(err))
                        version = "v1"
                        break
                    delay *= 2
        if version is None:
            log.info("the API server serves no resource.k8s.io version: DRA claims are not read")
            return
        self.dra_version = version
        for kind in dra_kinds(version):
            self.kinds[kind.kind] = kind
            self.informers[kind.kind] = Informer(self.api, kind, watch_timeout=self.options.watch_timeout,
                                                 name=f"informer-{kind.plural}")
        log.info("DRA objects read", version=f"resource.k8s.io/{version}")

    def _dra(self, kind: str) -> ResourceKind | None:
        return self.kinds.get(kind) if self.dra_version is not None else None

    def _on_lost(self) -> None:
        if self._leading.is_set():
            self._lost.set()
        self._stop.set()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current cycle."""
        self._stop.set()

    def close(self) -> None:
        """Stop everything this scheduler started (writes still queued are given a few seconds)."""
        self._stop.set()
        if self.writer is not None:
            self.writer.close(timeout=5.0, drain=True)
            self.writer = None
        if self.elector is not None:
            if self.elector.is_leader:
                self.elector.release()
            self.elector.stop()
        for informer in self.informers.values():
            informer.stop()
        if self.usage is not None:
            self.usage.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.state = IncrementalState()  # (the kept model holds the whole cluster: not kept past the scheduler)

    def wait_synced(self, timeout: float) -> bool:
        """Wait until the required kinds are listed (False on timeout or when asked to stop meanwhile)."""
        deadline = self._clock() + timeout
        dra = [k for k in (C.DEVICE_CLASS_KIND, C.RESOURCE_SLICE_KIND, C.RESOURCE_CLAIM_KIND,
                           C.RESOURCE_CLAIM_TEMPLATE_KIND) if k in self.informers]
        for kind in [*(k.kind for k in REQUIRED_KINDS), *dra]:  # (without the claims, devices would look free)
            informer = self.informers[kind]
            while not informer.wait_synced(min(0.2, max(0.0, deadline - self._clock()))):
                if self._stop.is_set() or self._clock() >= deadline:
                    return False
        self.health.set_synced(True)
        return True

    def run(self) -> int:
        """Schedule every ``schedule_period`` while this replica leads; 0 when stopped, 1 when the Lease was
        lost or the caches never synced."""
        o = self.options
        if not self.wait_synced(o.sync_timeout):
            if self._stop.is_set() and not self._lost.is_set():
                return 0  # stopped (SIGTERM) before the caches synced
            missing = [k for k, i in self.informers.items() if not i.has_synced]
            log.error("caches not synced", kinds=missing, timeout_s=o.sync_timeout)
            return 1
        log.info("caches synced", objects={k: len(i.store) for k, i in self.informers.items()})
        # the initial lists are long-lived: keep them out of every later full collection (until it stops)
        with long_lived_frozen(), _switch_interval(o.switch_interval):
            return self._schedule_while_leading()

    def _schedule_while_leading(self) -> int:
        o = self.options
        while not self._leading.is_set():
            if self._stop.wait(0.1):
                return 1 if self._lost.is_set() else 0
        log.info("leading: scheduling starts", period_s=o.schedule_period,
                 core="compiled" if compiled_core() else "interpreted")
        # /healthz fails only when no cycle ended for this long (a full cycle on a very large cluster takes
        # tens of seconds: see benchmarks/RESULTS.md)
        self.health.register_loop(CYCLE_LOOP, max(300.0, 10 * o.schedule_period))
        self._writer_for(self._term())
        if self.usage is not None:  # KAI waits up to waitTimeout for the first usage; then divides by weight only
            self.usage.wait_ready(stop=self._stop)
        next_at = self._clock()
        while not self._stop.is_set():
            if not self._holds(self._writer_term):  # before each cycle: the term still holds its Lease
                self._fenced_stop()
                break
            self.run_cycle()
            if o.max_cycles is not None and self.cycles >= o.max_cycles:
                break
            next_at += o.schedule_period
            delay = next_at - self._clock()
            if delay < 0:  # a cycle longer than the period: start the next one now, do not try to catch up
                next_at = self._clock()
                delay = 0.0
            if self._wait_grouping(delay):
                break
        self.health.unregister_loop(CYCLE_LOOP)
        if self._lost.is_set():
            log.error("leadership lost: stopping (a standby replica takes over)")
            return 1
        return 0

    def _wait_grouping(self, delay: float) -> bool:
        """Wait ``delay`` seconds for the next cycle, grouping the pods that arrive meanwhile every
        ``group_period`` (:meth:`group_arrivals`); True when stopped."""
        period = self.options.group_period
        deadline = self._clock() + delay
        while True:
            left = deadline - self._clock()
            if left <= 0:
                return self._stop.is_set()
            if self._stop.wait(min(left, period) if period > 0 else left):
                return True
            if period > 0 and deadline - self._clock() > period / 2:  # (not just before the cycle: it groups them)
                try:
                    self.group_arrivals()
                except Exception:  # a failed pass never stops scheduling: the next cycle groups the pods
                    log.exception("grouping the pods that arrived failed")

    def group_arrivals(self) -> int:
        """Create the PodGroups of the pods that arrived since the last pass, now rather than in the next cycle, as
        KAI's pod-grouper (a controller of its own) creates a pod's PodGroup as the pod arrives: the next cycle then
        binds pods whose PodGroups exist or are on their way. Only the creations: the cycles still group every pod,
        patch the pods and report what could not be grouped (:class:`~kaisched.kube.grouper_controller.Arrivals`
        says which pods a pass takes). Returns the number of creations submitted."""
        informer = self.informers.get(POD.kind)
        if informer is None or informer.store.revision == self.arrivals.revision:
            return 0
        term = self._term()
        if not self._holds(term):
            return 0
        revision = informer.store.revision
        arrived = self.arrivals.take(revision, self._items(POD), self.scheduler_name)
        if not arrived:
            return 0
        writer = self._writer_for(term)
        now = self._now()
        with no_cyclic_gc():
            prepared = self._group(self._parse(arrived), now)
            planned = self.arrival_grouper.plan([o for _, o in arrived], [o for _, o in self._items(PODGROUP)],
                                                prepared, now)
            return writer.submit(op for op in planned if isinstance(op, CreatePodGroup))

    def _new_writer(self, term: int | None = None) -> ClusterWriter:
        fence = partial(self.elector.holds, term) if self.elector is not None and term is not None else None
        o = self.options
        # under a fence the ceiling stays at workers: it bounds the writes that passed the fence just before a pause
        # (a paused replica's requests on the wire when it resumes: tests/kube/test_fencing_contract.py)
        ceiling = o.workers if fence is not None else max(o.max_workers, o.workers)
        return ClusterWriter(self.api, workers=o.workers, max_workers=ceiling,
                             on_failure=self._on_failure,
                             metrics=self.metrics, lookup=self.lookup, fence=fence,
                             on_denied=partial(self._denied, term))

    # ---- fencing ------------------------------------------------------------------------------------
    def _term(self) -> int | None:
        """The current leadership term (0: not leading), None without leader election."""
        return self.elector.term if self.elector is not None else None

    def _holds(self, term: int | None) -> bool:
        """Writes of ``term`` may be sent (always, without leader election)."""
        return term is None or (self.elector is not None and self.elector.holds(term))

    def _writer_for(self, term: int | None) -> ClusterWriter:
        """The writer of ``term``: a new one when the term changed (the old one's queue is dropped unsent)."""
        writer = self.writer
        if writer is not None and self._writer_term == term:
            return writer
        if writer is not None:
            writer.close(timeout=5.0)
        self.writer = self._new_writer(term)
        self._writer_term = term
        return self.writer

    def _denied(self, term: int | None, error: ApiError) -> None:
        """The API server's fencing policy refused a write of ``term`` (on a writer thread): the server does not see
        this replica as the Lease's holder. The term ends and the loop stops as on a lost Lease (exit 1)."""
        if self.elector is not None and term is not None:
            self.elector.abandon(term, f"the API server refused a write: {error.message}")
        if self._leading.is_set():
            self._lost.set()
        self._stop.set()

    def _fenced_stop(self) -> None:
        """The fence failed at a cycle's start: this replica's term is over; stop as on a lost Lease."""
        writer = self.writer
        dropped = writer.stats()["pending"] if writer is not None else 0
        log.error("lease not held: no more cycles in this term, leadership ends", term=self._writer_term,
                  queued_writes=dropped)
        if self._leading.is_set():
            self._lost.set()
        self._stop.set()

    def _on_failure(self, failure: Failure) -> None:
        self.failures.append(failure)
        del self.failures[:-100]
        log.warning("write failed", operation=failure.operation.describe(), error=str(failure.error),
                    attempts=failure.attempts)

    # ---- one cycle ----------------------------------------------------------------------------------
    def lookup(self, kind: str, key: str) -> Mapping[str, Any] | None:
        informer = self.informers.get(kind)
        if informer is None:
            return None
        obj = informer.store.get(key)
        return obj if isinstance(obj, Mapping) else None

    def run_cycle(self) -> CycleResult:
        """One scheduling cycle on the caches as they are now; its writes are queued, not awaited. Its plan
        belongs to the leadership term current at its start: written only while that term holds its Lease (an
        empty result, nothing planned or written, when it does not hold it at the start)."""
        term = self._term()
        if not self._holds(term):
            log.warning("cycle skipped: the lease is not held", term=term)
            return CycleResult()
        writer = self._writer_for(term)
        start = time.perf_counter()
        now = self._now()
        with no_cyclic_gc():
            writer.settle(self.lookup)
            placements = writer.in_flight_placements()
            evictions = writer.in_flight_evictions()
            api_pods = self._items(POD)
            api_pod_groups = [o for _, o in self._items(PODGROUP)]
            api_claims = self._items(self._dra(C.RESOURCE_CLAIM_KIND))
            claims = writer.claims.overlay(api_claims)
            parsed = self._parse(overlay(api_pods, {k: (p.node, p.gpu_groups) for k, p in placements.items()},
                                         evictions, _rfc3339(now)), claims)
            replanned: dict[str, PodGroup] = {}
            prepared = self._group(parsed, now, replanned)
            grouping = self.grouper.plan([o for _, o in api_pods], api_pod_groups, prepared, now, replanned)
            # the PodGroups go out at once, before the cycle; the pod patches with the cycle's binds (fold_grouping)
            writer.submit(op for op in grouping if not isinstance(op, PodMetadataPatch))
            usage = self.usage.table(now) if self.usage is not None else None
            result, timings = self._cycle(prepared, now, usage)
            if self.usage is not None:
                self.usage.after_cycle(now, result)
                self.metrics.record_usage(usage, now)
            ops = self.planner.plan(result, self.lookup, now, pods_by_group(prepared),
                                    settling=set(placements) | evictions, device_slice=self._device_slices(),
                                    held_devices=held_devices(claims) if result.claims else None)
            writer.submit(fold_grouping((op for op in grouping if isinstance(op, PodMetadataPatch)), ops, placements))
            if api_claims:
                claims_kind = self._dra(C.RESOURCE_CLAIM_KIND)
                assert claims_kind is not None
                writer.submit(stale_reservations(api_claims, api_pods, claims_kind.api_version))
            writer.submit(self._error_events(result.errors, now))
            self.metrics.record_cycle(result, timings, self.lookup, now)
            for listener in self.cycle_listeners:
                try:
                    listener(prepared, result, now)
                except Exception:  # a listener (the dashboard) never stops scheduling
                    log.exception("cycle listener %r failed", listener)
        self.cycles += 1
        self.health.beat(CYCLE_LOOP)
        log_cycle(log, result, time.perf_counter() - start, cycle=self.cycles)
        return result

    def _cycle(self, prepared: ParsedObjects, now: datetime,
               usage: UsageTable | None = None) -> tuple[CycleResult, CycleTimings]:
        """The cycle, in Kubernetes mode's snapshot options (the memo knows the DRA objects: cluster/memo.py)."""
        return timed_cycle(prepared, self.config, now, memo=self.memo, make_template_claims=False, usage=usage,
                           state=self.state)

    def _device_slices(self) -> Callable[[str, str, str], Mapping[str, Any] | None]:
        """``(driver, pool, device) -> ResourceSlice``, indexed on first use (only allocations whose devices are
        not node-local need it)."""
        index: dict[tuple[str, str, str], Mapping[str, Any]] | None = None

        def find(driver: str, pool: str, device: str) -> Mapping[str, Any] | None:
            nonlocal index
            if index is None:
                index = {}
                for _, s in self._items(self._dra(C.RESOURCE_SLICE_KIND)):
                    spec = s.get("spec") or {}
                    pool_name = str((spec.get("pool") or {}).get("name", ""))
                    for d in spec.get("devices") or ():
                        if isinstance(d, Mapping):
                            index.setdefault((str(spec.get("driver", "")), pool_name, str(d.get("name", ""))), s)
            return index.get((driver, pool, device))

        return find

    def _error_events(self, errors: list[ObjectError], now: datetime) -> list[Operation]:
        """A Warning event ``InvalidObject`` on each object with input errors (malformed fields, unknown
        queues...), once while the error lasts; the rest of the cluster is scheduled regardless."""
        memory = self.error_events
        memory.begin()
        out: list[Operation] = []
        for error in errors:
            kind, _, ref = error.object.partition(" ")
            rk = self.kinds.get(kind)
            if rk is None:
                continue
            namespace, _, name = ref.rpartition("/")
            obj = self.lookup(kind, ref if rk.namespaced else name)
            if obj is None:
                continue
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            event = memory.event(ObjectRef(rk.api_version, kind, name, namespace, uid), "Warning", "InvalidObject",
                                 f"{error.field}: {error.message}", now)
            if event is not None:
                out.append(event)
        memory.end(now)
        return out

    def _items(self, kind: ResourceKind | None) -> list[tuple[str, Mapping[str, Any]]]:
        informer = self.informers.get(kind.kind) if kind is not None else None
        if informer is None or kind is None:
            return []
        out = []
        for obj in informer.store.snapshot():
            if isinstance(obj, Mapping):
                try:
                    out.append((kind.key(obj), obj))
                except ValueError:
                    continue  # no name: nothing can refer to it
        out.sort(key=lambda kv: kv[0])
        return out

    def _parse(self, pods: list[tuple[str, Mapping[str, Any]]],
               claims: list[tuple[str, Mapping[str, Any]]] | None = None) -> ParsedObjects:
        parsed = ParsedObjects()
        cache = self.parse_cache
        cache.parse(C.DEVICE_CLASS_KIND, self._items(self._dra(C.DEVICE_CLASS_KIND)), parsed)
        cache.parse(C.RESOURCE_SLICE_KIND, self._items(self._dra(C.RESOURCE_SLICE_KIND)), parsed)
        cache.parse(C.RESOURCE_CLAIM_KIND, claims if claims is not None else
                    self._items(self._dra(C.RESOURCE_CLAIM_KIND)), parsed)
        cache.parse(C.RESOURCE_CLAIM_TEMPLATE_KIND, self._items(self._dra(C.RESOURCE_CLAIM_TEMPLATE_KIND)), parsed)
        cache.parse("Node", self._items(NODE), parsed)
        cache.parse("Pod", pods, parsed)
        cache.parse("PodGroup", self._items(PODGROUP), parsed)
        cache.parse("Queue", self._items(QUEUE), parsed)
        cache.parse("PriorityClass", self._items(PRIORITY_CLASS), parsed)
        cache.parse("Topology", self._items(TOPOLOGY), parsed)
        cache.parse("ConfigMap", self._items(CONFIGMAP), parsed)
        return parsed

    def _group(self, parsed: ParsedObjects, now: datetime,
               replanned: dict[str, PodGroup] | None = None) -> ParsedObjects:
        """Pods that name an existing PodGroup are taken as they are (as KAI's scheduler reads the
        annotation); the others of this scheduler go through the pod-grouper, with their owners read from
        the API (:func:`kaisched.kube.live.group_live`, which the read-only commands share; ``replanned``
        receives what the pod-grouper would make now of the existing PodGroups of those pods)."""
        return group_live(parsed, self.owners, self.parse_cache, self.config, now, replanned)

def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
