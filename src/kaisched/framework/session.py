"""One scheduling session (cycle): the snapshot, the plugins' hooks and the cycle's decisions."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from kaisched.framework.config import SchedulerConfig
from kaisched.framework.plugin import (
    JobCapacityCheck,
    JobKey,
    NeutralScorer,
    NodeRanker,
    NodeRankRow,
    NodeScorer,
    NodeTier,
    Plugin,
    Predicate,
    PrePredicate,
    QueueOrder,
    QueueReporter,
    TaskHandler,
    TaskKey,
)
from kaisched.framework.result import (
    BELOW_MIN_MEMBER,
    CODE_OF_REASON,
    FAIR_SHARE,
    FITS_NOWHERE,
    GANG_INCOMPLETE,
    MISCONFIGURED,
    ClaimAllocation,
    CycleResult,
    DeviceResult,
    Eviction,
    NodeGpuStatus,
    Nomination,
    Placement,
    PodGroupStatus,
    SearchOutcome,
    SharedGpuStatus,
)
from kaisched.framework.scenario import Scenario
from kaisched.framework.search_stats import SearchStats
from kaisched.k8s.objects import TopologyConstraint
from kaisched.model.dra import ClaimInfo
from kaisched.model.gpu_sharing import GpuDeviceScorer, GpuOrderFn
from kaisched.model.job import FitError, PodGroupInfo, PodSetInfo
from kaisched.model.resources import CPU, GPU, MEMORY, QUEUE_RESOURCE_NAMES
from kaisched.model.snapshot import Snapshot
from kaisched.model.status import ACTIVE_ALLOCATED, ALIVE, TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.model.victim_memory import format_victims

PodSetKey = Callable[[PodSetInfo], object]
BoolArray = npt.NDArray[np.bool_]
# node sets to try in order for a (sub)group, each with per-node scores (or None), spec 9.4
TopologySubsets = list[tuple[BoolArray, "npt.NDArray[np.float64] | None"]]
SubsetNodes = Callable[[PodGroupInfo, str, TopologyConstraint, list[TaskInfo], BoolArray],
                       "TopologySubsets | FitError"]
VictimFilter = Callable[[PodGroupInfo, PodGroupInfo], bool]  # (pending job, victim job) -> keep victim
# (pending job, a victim queue, that queue's victim pool in pool order) -> the pool's jobs that may be victims, as a
# victim filter would keep them, answered for the whole queue at once (possibly with jobs since gone from the pool)
VictimSelector = Callable[[PodGroupInfo, str, list[PodGroupInfo]], list[PodGroupInfo]]
ScenarioValidator = Callable[[Scenario], bool]
JobPredicate = Callable[[PodGroupInfo], bool]


def rfc3339(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.isoformat().replace("+00:00", "Z")


class Session:
    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, plugins: list[Plugin]) -> None:
        self.snapshot = snapshot
        self.config = config
        self.params = config.params
        self.now = snapshot.now
        # the earliest later instant at which a time rule read in this session (min-runtime protection, a
        # stale gang's grace period) would answer differently; None: none would (see expires_at)
        self.valid_until: datetime | None = None
        # job key -> the PodGroup timestamps ("last_start", "stale_since") set to ``now`` in this session
        self.stamped: dict[str, set[str]] = {}
        self.nodes = snapshot.nodes
        self.jobs = snapshot.jobs
        self.queues = snapshot.queues
        self.plugins = plugins
        # ---- hooks (registered by plugins in on_session_open) ----
        self.job_order_keys: list[JobKey] = []
        self.task_order_keys: list[TaskKey] = []
        self.pod_set_order_keys: list[PodSetKey] = []
        self.predicates: list[Predicate] = []
        # the subset of predicates that depend only on the node and the pod spec (never on placements)
        self.static_predicates: list[Predicate] = []
        self.pre_predicates: list[PrePredicate] = []
        # parts of what a task's fit depends on that plugins add to its shape (placement.failure_key): a predicate
        # that answers tasks of one request and spec differently registers what tells them apart
        self.fit_key_parts: list[TaskKey] = []
        self.node_scorers: list[NodeScorer] = []
        # aligned with node_scorers (add_node_scorer): when each is neutral for a task, and the one that can rank
        self.node_scorers_neutral: list[NeutralScorer | None] = []
        self.node_ranker: tuple[int, NodeRanker] | None = None
        # the resource row the ranker orders a task's nodes by (fewest available first), when it does (add_node_scorer)
        self.node_rank_row: NodeRankRow | None = None
        # aligned with node_scorers: the scorers that rank a task's nodes in two tiers (add_node_scorer)
        self.node_scorers_tier: list[NodeTier | None] = []
        # shared-GPU device order within a node (gpupack / gpuspread), summed
        self.gpu_order_fns: list[GpuOrderFn] = []
        # a task- and node-aware device score added to the order (gpufragmentation; None in KAI's configurations)
        self.gpu_device_scorer: GpuDeviceScorer | None = None
        # per-node queue-capacity check of a task (proportion; gpu-memory requests convert per node)
        self.task_node_capacity_check: Predicate | None = None
        # some pod's required anti-affinity may select other pods by their labels and namespace (set by the
        # predicates plugin): only then do a pod's labels and namespace decide where it fits
        self.search_stats = SearchStats()  # what the victim searches cost, per action
        self.labels_constrain_placement = False
        # topology (spec 9.4): node sets for a constrained (sub)group, and the scores of the set being tried
        self.subset_nodes: SubsetNodes | None = None
        self.topology_scores: npt.NDArray[np.float64] | None = None
        self.allocate_handlers: list[TaskHandler] = []
        self.deallocate_handlers: list[TaskHandler] = []
        self.queue_order: QueueOrder | None = None
        self.queue_reporter: QueueReporter | None = None
        self.job_capacity_check: JobCapacityCheck | None = None
        # eviction actions (spec 4.9-4.14): all filters/validators must agree; CanReclaim: first registered
        self.reclaim_victim_filters: list[VictimFilter] = []
        self.reclaim_victim_selectors: list[VictimSelector] = []
        self.preempt_victim_filters: list[VictimFilter] = []
        self.reclaim_scenario_validators: list[ScenarioValidator] = []
        self.preempt_scenario_validators: list[ScenarioValidator] = []
        self.can_reclaim_resources: JobPredicate | None = None
        self.job_solution_start_handlers: list[Callable[[PodGroupInfo], None]] = []
        # predicate reason texts: code -> text (code 0 = passes)
        self._reasons: list[str] = [""]
        self._reason_codes: dict[str, int] = {}
        # ---- decisions ----
        self.binds: list[TaskInfo] = []
        self.pipelined: list[TaskInfo] = []
        self.evictions: list[Eviction] = []
        # job uid -> the keys of the pods evicted for it in earlier cycles that it may not evict again yet
        self._remembered: dict[str, frozenset[str]] = {}
        #: the pods' nominated nodes the cycle sets or clears (set by the nominatednode plugin at session close)
        self.nominations: list[Nomination] = []
        # uids of the pods evicted / placed (bound, pipelined) by committed decisions: the cycle checks that a
        # pod is evicted at most once and never after it was placed (``record_*``)
        self._evicted_uids: set[str] = set()
        self._placed_uids: set[str] = set()
        self.started_jobs: set[str] = set()
        # uids of virtually evicted tasks that a victim simulation may place again (spec 4.4)
        self.revivable: set[str] = set()
        self._job_keys: dict[str, tuple[int, tuple[object, ...]]] = {}
        #: statements committed so far: task statuses only change for good when this grows (a rolled back or
        #: discarded statement restores them), so it keys caches of "which tasks are where"
        self.commits = 0
        #: jobs with a pending task when first asked (see actions.allocate.pending_jobs); None until then
        self.jobs_with_pending: list[PodGroupInfo] | None = None
        self._to_allocate: dict[str, tuple[int, list[TaskInfo]]] = {}
        #: the uid of the elastic job an eviction search is placing whole (every pending pod at once, not one more:
        #: actions.evicting, "growing at once"); None otherwise
        self.growing: str | None = None
        self.ghost_ids = itertools.count()  # releasing copies left behind by moved victims
        # placement failures: task shape -> when it failed and why (actions.placement's FitFailure)
        self.fit_failures: dict[tuple[object, ...], object] = {}
        # what a task's fit depends on -> its number (actions.placement.failure_key)
        self.fit_ids: dict[tuple[object, ...], int] = {}
        #: what the eviction actions keep for the session and share until the next commit (its type is
        #: actions.evicting's)
        self.eviction_state: object = None
        #: the task shapes' kept rankings of batched placement (its type is actions.batched's); None until used
        self.placement_index: object = None
        #: every amount the session adds up is exact in floats (actions.warm.exact_accounting); None: not asked
        self.exact_accounting: bool | None = None
        #: the monotonic clock (seconds) the eviction actions' search budgets read (``scenarioSearchBudgets``);
        #: never read without budgets. Tests give a fake one.
        self.search_clock: Callable[[], float] = time.monotonic
        #: how each eviction action's victim search for a pending job ended (actions.search_budget)
        self.search_outcomes: list[SearchOutcome] = []
        self._holding: set[str] | None = None  # queues holding resources (_holding_queues)

    # ---- registration helpers ----------------------------------------------------------------------
    def reason_code(self, text: str) -> int:
        code = self._reason_codes.get(text)
        if code is None:
            code = len(self._reasons)
            self._reasons.append(text)
            self._reason_codes[text] = code
        return code

    def reason_text(self, code: int) -> str:
        return self._reasons[code]

    def set_queue_order(self, order: QueueOrder) -> None:
        if self.queue_order is None:  # first registered wins
            self.queue_order = order

    def set_job_capacity_check(self, fn: JobCapacityCheck) -> None:
        if self.job_capacity_check is None:
            self.job_capacity_check = fn

    def set_can_reclaim_resources(self, fn: JobPredicate) -> None:
        if self.can_reclaim_resources is None:
            self.can_reclaim_resources = fn

    def set_queue_reporter(self, reporter: QueueReporter) -> None:
        if self.queue_reporter is None:
            self.queue_reporter = reporter

    # ---- lifecycle ----------------------------------------------------------------------------------
    def open(self) -> None:
        for plugin in self.plugins:
            plugin.on_session_open(self)

    def close(self) -> CycleResult:
        for plugin in self.plugins:
            plugin.on_session_close(self)
        return self._result()

    def discard(self) -> None:
        """Break the session's reference cycles (plugins and hooks hold the session, tasks their jobs) so
        reference counting frees a finished session at once instead of the cyclic collector tracing it;
        only for a session nobody looks at any more."""
        for task in self.snapshot.tasks.values():
            task.job = None
        self.nodes.release()
        # the plugins and every hook they registered (bound methods, closures) hold the session; so may the
        # eviction actions' state. (Named one by one, not by clearing ``__dict__``: a compiled Session has
        # none, see docs/performance.md.)
        self.plugins = []
        for hooks in (self.job_order_keys, self.task_order_keys, self.pod_set_order_keys, self.predicates,
                      self.static_predicates, self.pre_predicates, self.fit_key_parts, self.node_scorers,
                      self.gpu_order_fns,
                      self.allocate_handlers, self.deallocate_handlers, self.reclaim_victim_filters,
                      self.reclaim_victim_selectors,
                      self.preempt_victim_filters, self.reclaim_scenario_validators,
                      self.preempt_scenario_validators, self.job_solution_start_handlers):
            hooks.clear()
        self.node_scorers_neutral.clear()
        self.node_scorers_tier.clear()
        self.node_ranker = None
        self.node_rank_row = None
        self.placement_index = None
        self.gpu_device_scorer = None
        self.task_node_capacity_check = None
        self.subset_nodes = None
        self.queue_order = None
        self.queue_reporter = None
        self.job_capacity_check = None
        self.can_reclaim_resources = None
        self.eviction_state = None

    # ---- node scoring -------------------------------------------------------------------------------
    def add_node_scorer(self, scorer: NodeScorer, *, neutral: NeutralScorer | None = None,
                        ranker: NodeRanker | None = None, rank_row: NodeRankRow | None = None,
                        tier: NodeTier | None = None) -> None:
        """Register a node scorer (scores of all scorers are summed; the first maximum wins). ``neutral``: tells
        when the scorer gives every candidate of a task the same score (or None), so that it cannot change which
        node wins; ``ranker``: finds the node this scorer ranks first directly — placement asks it instead of
        scoring every candidate when every other scorer is neutral for the task (the same node, fewer arrays);
        ``rank_row``: the resource row whose available amount (idle + releasing) the ranker's order is, smallest
        first (then the smaller node index), when it is for a task: batched placement keeps that order per task
        shape (actions.batched); ``tier``: for a task this scorer gives a bonus larger than the ranker's range on the
        nodes where a condition holds, that condition (the nodes then rank by it first, then by the ranker)."""
        if ranker is not None:
            self.node_ranker = (len(self.node_scorers), ranker)
            self.node_rank_row = rank_row
        self.node_scorers.append(scorer)
        self.node_scorers_neutral.append(neutral)
        self.node_scorers_tier.append(tier)

    def ranked_node(self, task: TaskInfo, fit: BoolArray) -> int | None:
        """The node the scorers would choose for ``task`` among the nodes ``fit``, when one scorer can rank them
        alone (every other one neutral for the task): its index, or -1 when no node fits; None: score them."""
        ranking = self.node_ranker
        if ranking is None:
            return None
        at, ranker = ranking
        for i, neutral in enumerate(self.node_scorers_neutral):
            if i != at and (neutral is None or not neutral(task)):
                return None
        return ranker(task, fit)

    # ---- ordering -----------------------------------------------------------------------------------
    def job_order_key(self, job: PodGroupInfo) -> tuple[object, ...]:
        return (*[fn(job) for fn in self.job_order_keys], job.creation, job.uid)

    def cached_job_order_key(self, job: PodGroupInfo) -> tuple[object, ...]:
        """:meth:`job_order_key`, cached until one of the job's tasks changes (``job.version``)."""
        cached = self._job_keys.get(job.uid)
        if cached is not None and cached[0] == job.version:
            return cached[1]
        key = self.job_order_key(job)
        self._job_keys[job.uid] = (job.version, key)
        return key

    def task_order_key(self, task: TaskInfo) -> tuple[object, ...]:
        return (*(fn(task) for fn in self.task_order_keys), task.creation, task.uid)

    def pod_set_order(self, job: PodGroupInfo) -> list[PodSetInfo]:
        return sorted(job.pod_sets.values(), key=lambda ps: (*(fn(ps) for fn in self.pod_set_order_keys),
                                                             ps.name))

    def tasks_to_allocate(self, job: PodGroupInfo) -> list[TaskInfo]:
        """Spec 4.4: the whole unsatisfied gang at once, or one more pod of an elastic job (cached until
        one of the job's tasks changes, outside victim simulations). While an eviction search places the elastic
        job ``growing`` whole: every pending pod of that job."""
        if self.revivable or self.growing is not None:
            return self._tasks_to_allocate(job)
        cached = self._to_allocate.get(job.uid)
        if cached is None or cached[0] != job.version:
            cached = (job.version, self._tasks_to_allocate(job))
            self._to_allocate[job.uid] = cached
        return list(cached[1])

    def _tasks_to_allocate(self, job: PodGroupInfo) -> list[TaskInfo]:
        whole = job.uid == self.growing
        if len(job.pod_sets) == 1:  # (most jobs: the loop below for one pod set)
            return self._pending_of(next(iter(job.pod_sets.values())), whole)
        ordered = self.pod_set_order(job)
        unsatisfied = sum(1 for ps in ordered if ps.active_allocated < ps.min_available)
        limit = len(ordered) if whole else max(unsatisfied, 1)
        out: list[TaskInfo] = []
        taken = 0
        for ps in ordered:
            if taken >= limit:
                break
            pending = self._pending_of(ps, whole)
            if not pending:
                continue
            out.extend(pending)
            taken += 1
        return out

    def _pending_of(self, ps: PodSetInfo, whole: bool = False) -> list[TaskInfo]:
        """The pod set's next tasks: up to its unsatisfied minimum, else one (in task order); ``whole``: all its
        pending tasks."""
        revivable = self.revivable
        tasks = ps.tasks
        if len(tasks) == 1:  # (most pod sets) pending: none of it allocated, and a minimum is at least 1
            t = tasks[0]
            if t.status is TaskStatus.PENDING or (t.status is TaskStatus.RELEASING and t.uid in revivable):
                return [t]
            return []
        pending = [
            t for t in tasks
            if t.status is TaskStatus.PENDING or (t.status is TaskStatus.RELEASING and t.uid in revivable)
        ]
        if not pending:
            return pending
        if len(pending) > 1:
            pending.sort(key=self.task_order_key)
        if whole:
            return pending
        a = ps.active_allocated
        n = ps.min_available - a if a < ps.min_available else 1
        return pending[:n]

    # ---- events ---------------------------------------------------------------------------------------
    def fire_allocate(self, task: TaskInfo) -> None:
        for fn in self.allocate_handlers:
            fn(task)

    def fire_deallocate(self, task: TaskInfo) -> None:
        for fn in self.deallocate_handlers:
            fn(task)

    # ---- decisions ------------------------------------------------------------------------------------
    # Each decision is checked against the earlier ones (set look-ups: a cycle's own guard, as the property
    # tests check its result with CycleResult.decision_errors): a pod is placed at most once, evicted at most
    # once, never evicted once placed, and placed after its eviction only when it was active (a moved victim).
    def record_bind(self, task: TaskInfo) -> None:
        assert task.uid not in self._evicted_uids, f"{task.key} bound after its eviction in the same cycle"
        assert task.uid not in self._placed_uids, f"{task.key} placed twice in one cycle"
        self._placed_uids.add(task.uid)
        self.binds.append(task)

    def record_pipeline(self, task: TaskInfo) -> None:
        assert task.uid not in self._placed_uids, f"{task.key} placed twice in one cycle"
        assert task.uid not in self._evicted_uids or task.initial_status in ACTIVE_ALLOCATED, (
            f"{task.key} pipelined after its eviction, although it was not running")
        self._placed_uids.add(task.uid)
        self.pipelined.append(task)

    def record_eviction(self, task: TaskInfo, action: str, preemptor: str, message: str) -> None:
        assert task.uid not in self._evicted_uids, f"{task.key} evicted twice in one cycle (now by {action} for " \
            f"{preemptor or 'nobody'})"
        assert task.uid not in self._placed_uids, f"{task.key} evicted by {action} for {preemptor or 'nobody'} " \
            "after this cycle placed it"
        self._evicted_uids.add(task.uid)
        self.evictions.append(Eviction(task.key, action, preemptor, message))

    def record_job_started(self, job: PodGroupInfo) -> None:
        self.stamp(job, "last_start")
        self.started_jobs.add(job.key)

    def stamp(self, job: PodGroupInfo, field: str) -> None:
        """Set the job's ``last_start`` or ``stale_since`` to the session's time (remembered in ``stamped``)."""
        setattr(job, field, self.now)
        self.stamped.setdefault(job.key, set()).add(field)

    def remembered_victims(self, job: PodGroupInfo) -> frozenset[str]:
        """The pods evicted for the job in earlier cycles within ``params.victim-memory``: a search for the job
        leaves their jobs alone (model/victim_memory.py). Each entry read holds until it expires (``expires_at``)."""
        remembered = self._remembered.get(job.uid)
        if remembered is None:
            remembered = frozenset()
            period = self.params.victim_memory
            if job.victims and period > timedelta(0):
                kept = []
                for key, when in job.victims.items():
                    until = when + period
                    if until > self.now:
                        kept.append(key)
                        self.expires_at(until)
                remembered = frozenset(kept)
            self._remembered[job.uid] = remembered
        return remembered

    def _victims_annotation(self, job: PodGroupInfo, waits: bool, evicted_for: dict[str, list[str]]) -> str | None:
        """The job's remembered victims after the cycle, as the annotation's value: the entries still within the
        memory and the pods this cycle evicted for it, while it still waits (a pending or pipelined pod)."""
        period = self.params.victim_memory
        if not waits or period <= timedelta(0):
            return None
        now = self.now
        victims = {key: when for key, when in job.victims.items() if when + period > now}
        for key in evicted_for.get(job.key, ()):
            victims[key] = now
        return format_victims(victims)

    def expires_at(self, when: datetime) -> None:
        """A time rule answered as it did because ``now`` is before ``when``: the session's decisions hold
        until then at most (``valid_until``)."""
        if when > self.now and (self.valid_until is None or when < self.valid_until):
            self.valid_until = when

    # ---- result ---------------------------------------------------------------------------------------
    def _result(self) -> CycleResult:
        names = self.nodes.names
        result = CycleResult(errors=list(self.snapshot.errors), search_stats=dict(self.search_stats),
                             capacity={n: float(x) for n, x in zip(QUEUE_RESOURCE_NAMES, self.snapshot.total[:3],
                                                                   strict=True)})
        bound_jobs: set[str] = set()
        pipelined_jobs: set[str] = set()
        for t in self.binds:
            if t.status is TaskStatus.BINDING:
                result.binds.append(Placement(t.key, names[t.node], t.gpu_groups))
                if t.job is not None:
                    bound_jobs.add(t.job.key)
        seen: set[str] = set()
        for t in self.pipelined:
            if t.status is TaskStatus.PIPELINED and t.uid not in seen:
                seen.add(t.uid)
                result.pipelined.append(Placement(t.key, names[t.node], t.gpu_groups))
                if t.job is not None:
                    pipelined_jobs.add(t.job.key)
        result.evictions = list(self.evictions)
        evicted_for: dict[str, list[str]] = {}
        for e in self.evictions:
            if e.preemptor:
                evicted_for.setdefault(e.preemptor, []).append(e.pod)
        for job in self.jobs.values():
            status = self._pod_group_status(job, bound_jobs, pipelined_jobs, evicted_for)
            if status is not None:
                result.pod_groups.append(status)
        if self.queue_reporter is not None:
            result.queues = self.queue_reporter.report()
        result.nodes = self._node_gpus()
        if self.nodes.dra is not None:
            result.claims = self._claims()
        result.scenario_search = list(self.search_outcomes)
        result.nominations = list(self.nominations)
        return result

    def _claims(self) -> list[ClaimAllocation]:
        """The DRA claims of the cycle's binds, each once, in the order of the binds."""
        dra = self.nodes.dra
        snapshot = self.snapshot.dra
        assert dra is not None and snapshot is not None
        names = self.nodes.names
        pods: dict[str, list[str]] = {}
        infos: dict[str, ClaimInfo] = {}
        for t in self.binds:
            if t.status is TaskStatus.BINDING:
                for info in t.claims:
                    pods.setdefault(info.key, []).append(t.key)
                    infos[info.key] = info
        out: list[ClaimAllocation] = []
        for key, users in pods.items():
            info = infos[key]
            results = dra.results(info)
            homes = sorted({names[int(dra.devices.node_of[d])] for d in dra.allocated.get(key, ())
                            if dra.devices.node_of[d] >= 0})
            made = key in snapshot.created  # (made from its template by this snapshot: to be created)
            out.append(ClaimAllocation(
                claim=key, node=homes[0] if len(homes) == 1 else "",
                devices=tuple(DeviceResult(*r) for r in results), pods=tuple(users), new=dra.is_new(key),
                template=info.template if made else "", pod_claim=info.pod_claim if made else ""))
        return out

    def _node_gpus(self) -> list[NodeGpuStatus]:
        """How each GPU node's devices are used after the cycle's decisions."""
        nodes = self.nodes
        out: list[NodeGpuStatus] = []
        gpus = nodes.allocatable[GPU].tolist()
        idle = nodes.idle[GPU].tolist()
        releasing = nodes.releasing[GPU].tolist()
        cpu = nodes.idle[CPU].tolist()
        memory = nodes.idle[MEMORY].tolist()
        groups_of = nodes.shared.groups
        for j, name in enumerate(nodes.names):
            groups = groups_of[j]
            total = gpus[j]
            if total <= 0 and not groups:
                continue
            info = nodes.infos[j]
            if not info.tasks and not groups:
                out.append(NodeGpuStatus(name, total, idle[j], releasing[j], (), (), cpu[j], memory[j]))
                continue
            mem = float(nodes.shared.mem[j])
            shared = []
            for grp in sorted(groups.values(), key=lambda g: g.name):
                pods = tuple(sorted(info.tasks[uid].key for uid in grp.members if uid in info.tasks))
                shared.append(SharedGpuStatus(grp.name, mem, grp.used, grp.releasing, pods))
            whole = tuple(sorted(t.key for t in info.tasks.values() if t.req[GPU] > 0))
            out.append(NodeGpuStatus(name, total, idle[j], releasing[j], whole, tuple(shared), cpu[j], memory[j]))
        return out

    def _pod_group_status(self, job: PodGroupInfo, bound: set[str], pipelined: set[str],
                          evicted_for: dict[str, list[str]]) -> PodGroupStatus | None:
        pod_sets = job.pod_sets
        tasks = next(iter(pod_sets.values())).tasks if len(pod_sets) == 1 else job.tasks  # (most jobs: one set)
        statuses = {tasks[0].status} if len(tasks) == 1 else {t.status for t in tasks}
        if tasks and statuses.isdisjoint(ALIVE) and TaskStatus.RELEASING not in statuses:
            return None  # finished: every pod succeeded or failed
        has_pending = TaskStatus.PENDING in statuses or TaskStatus.GATED in statuses
        if job.key in pipelined:
            status = "Pipelined"
        elif job.key in bound and tasks and job.is_allocated_gang_satisfied():
            status = "Allocated"
        elif not statuses.isdisjoint(ACTIVE_ALLOCATED) and tasks and job.is_allocated_gang_satisfied():
            status = "Running"
        else:
            status = "Pending"
        error: FitError | None = None
        if status == "Pipelined" and job.pipelined_reason is not None:
            error = job.pipelined_reason
        elif has_pending or not tasks:  # like KAI, only jobs with Pending/Gated pods (or none yet) are explained
            error = self.pending_reason(job, tasks)
        victims = (self._victims_annotation(job, has_pending or status == "Pipelined", evicted_for)
                   if job.victims or job.key in evicted_for else None)
        if error is None:
            return PodGroupStatus(job.key, job.queue, status, None, None, rfc3339(job.last_start),
                                  rfc3339(job.stale_since), victims=victims)
        return PodGroupStatus(job.key, job.queue, status, error.reason, error.message, rfc3339(job.last_start),
                              rfc3339(job.stale_since), self.pending_code(job, error), error.detail, victims)

    def pending_code(self, job: PodGroupInfo, error: FitError) -> str:
        """The reason code of the job's pending reason ``error`` (framework.result.REASON_CODES): the one it was made
        with, else the one its reason stands for. A job with no room whose queue could not reclaim any (it would be
        over its fair share with the job, so the reclaim action's gate refuses it) while its queue's jobs hold
        resources and other queues hold the rest waits for fair share to free."""
        if error is job.blocked:
            return MISCONFIGURED
        code = error.code or CODE_OF_REASON.get(error.reason, FITS_NOWHERE)
        if code in (FITS_NOWHERE, BELOW_MIN_MEMBER):
            detail = error.detail
            gate = self.can_reclaim_resources
            if (detail is not None and not detail.too_big and any(r.resources for r in detail.reasons)
                    and gate is not None and "reclaim" in self.config.actions and not gate(job)
                    and job.queue in (holding := self._holding_queues()) and any(q != job.queue for q in holding)):
                return FAIR_SHARE
        return code

    def _holding_queues(self) -> set[str]:
        """The queues of the jobs holding resources (computed once, when a reason needs it)."""
        holding = self._holding
        if holding is None:
            holding = self._holding = {j.queue for j in self.jobs.values() if j.has_allocated()}
        return holding

    def pending_reason(self, job: PodGroupInfo, tasks: list[TaskInfo] | None = None) -> FitError | None:
        """Why the job waits (``tasks``: its tasks, when the caller has them)."""
        if job.blocked is not None:
            return job.blocked
        if tasks is None:
            tasks = job.tasks
        if not tasks:
            return FitError("NotReady", "Job is not ready for scheduling. The PodGroup has no pods", GANG_INCOMPLETE)
        if not job.is_ready():
            parts = []
            for ps in job.pod_sets.values():
                alive = sum(1 for t in ps.tasks if t.status in ALIVE)
                gated = sum(1 for t in ps.tasks if t.status is TaskStatus.GATED)
                if alive - gated < ps.min_available:
                    where = "" if ps.name == "default" and len(job.pod_sets) == 1 else f" for SubGroup {ps.name}"
                    parts.append(f"Waiting for {ps.min_available} pods{where}, currently {alive} exist, "
                                 f"{gated} are gated")
            return FitError("NotReady", "Job is not ready for scheduling. " + ". ".join(parts), GANG_INCOMPLETE)
        if job.fit_errors:
            if len(job.fit_errors) == 1:
                return job.fit_errors[0]
            first = job.fit_errors[0]
            return FitError("Unable to schedule podgroup", "\n".join(sorted({e.message for e in job.fit_errors})),
                            first.code or CODE_OF_REASON.get(first.reason, FITS_NOWHERE), first.detail)
        if any(t.status is TaskStatus.PENDING for t in tasks):
            return FitError("Unschedulable", "Unable to schedule pod")
        return None
