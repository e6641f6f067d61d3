"""The eviction actions (spec 4.10-4.12): reclaim, preempt and consolidation."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kaisched.actions.allocate import pending_jobs
from kaisched.actions.base import Action
from kaisched.actions.job_queue import JobsQueue
from kaisched.actions.placement import allocate_job, claims_key, failure_key
from kaisched.actions.search_budget import ActionSearchBudget, JobSearchBudget, unresolved_error
from kaisched.actions.solver import MessageFn, Validator, VictimSolver
from kaisched.actions.victims import ChunkSequence, VictimOrder, VictimQueue
from kaisched.framework.result import (
    SEARCH_DEADLINE_EXHAUSTED,
    SEARCH_GENERATORS_EXHAUSTED,
    SEARCH_NOT_ATTEMPTED,
    SEARCH_SOLVED,
    WAITING_FOR_VICTIMS,
)
from kaisched.framework.scenario import Scenario
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.job import FitDetail, FitError, PodGroupInfo
from kaisched.model.resources import GPU
from kaisched.model.status import ACTIVE_ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo

Difficulty = tuple[int, tuple[tuple[float, ...], ...]]
SignatureKey = tuple[str, tuple[object, ...]]  # (queue, signature)


def signature(job: PodGroupInfo) -> tuple[object, ...]:
    """KAI's scheduling-constraints signature (spec 4.9 step 8), for the job's pods not yet placed:
    node selector, node affinity, tolerations, priority and host ports of each pod set."""
    pod_sets = job.pod_sets
    if len(pod_sets) == 1:  # (most jobs)
        name, ps = next(iter(pod_sets.items()))
        pods = [_constraints(t) for t in ps.tasks if t.status is TaskStatus.PENDING]
        if len(pods) > 1:
            pods.sort()
        return (job.priority, (name, tuple(pods)))
    out: list[object] = [job.priority]
    for name in sorted(pod_sets):
        pods = sorted(_constraints(t) for t in pod_sets[name].tasks if t.status is TaskStatus.PENDING)
        out.append((name, tuple(pods)))
    return tuple(out)


def _constraints(t: TaskInfo) -> str:
    text = t.constraints_text
    if not text:
        text = t.constraints_text = repr((t.signature, t.host_ports, t.pod.priority_class_name, t.gpu.kind,
                                          t.gpu.count, claims_key(t)))
    return text


def job_difficulty(ssn: Session, job: PodGroupInfo) -> Difficulty:
    """Fewer pending pods, then smaller per-pod requests (sorted), is easier."""
    tasks = ssn.tasks_to_allocate(job)
    reqs = sorted(((t.quota_gpus, *t.req.tolist()) for t in tasks), reverse=True)
    return (len(tasks), tuple(reqs))


def preempt_message(task: TaskInfo, preemptor: PodGroupInfo) -> str:
    return f"Pod {task.key} was preempted by higher priority workload {preemptor.key}"


def consolidation_message(task: TaskInfo, preemptor: PodGroupInfo) -> str:
    return (f"Pod {task.key} was preempted and rescheduled due to bin packing (resource consolidation) "
            "procedure")


@dataclass(slots=True)
class _BetweenCommits:
    """What the preemptors share between two committed statements: each of them starts from the state the
    last commit left (the solvers' simulations and the fit tries are rolled back), so all of this is computed
    once for them and dropped at the next commit. Kept on the session (in ``_EvictionState``): the three
    eviction actions mostly run on one state (a full cycle at 5,000 nodes commits two statements in them)."""

    commits: int  # ``ssn.commits`` it belongs to
    pool: list[PodGroupInfo] | None = None  # preemptible jobs with active pods
    pool_by_queue: dict[str, list[PodGroupInfo]] | None = None
    pool_position: dict[str, int] | None = None
    lowest_priority: dict[str, int] | None = None  # per queue, the lowest priority of its pool's jobs
    victim_order: VictimOrder | None = None
    # (action, victims' ids) -> chunks: an action's own filters decide the walks a sequence replays
    sequences: dict[tuple[object, ...], ChunkSequence] = field(default_factory=dict)
    fits: dict[tuple[object, ...], bool] = field(default_factory=dict)  # task shapes -> fit without victims
    free_gpus: float | None = None  # consolidation's gate


@dataclass(slots=True)
class _EvictionState:
    """What the eviction actions keep for the session (``Session.eviction_state``)."""

    between: _BetweenCommits
    # job uid -> (job version, its signature key and difficulty): every action asks them of every pending job
    signatures: dict[str, tuple[int, tuple[SignatureKey, Difficulty]]] = field(default_factory=dict)

    @staticmethod
    def of(ssn: Session) -> _EvictionState:
        state = ssn.eviction_state
        if not isinstance(state, _EvictionState):
            state = ssn.eviction_state = _EvictionState(_BetweenCommits(ssn.commits))
        return state


class EvictingAction(Action):
    """Shared loop: pending jobs in allocate order; for each, a victim solver over eligible victims."""

    #: every victim must be placed again (the action only moves pods): the solver prunes accordingly
    moves_only = False

    def candidates(self, ssn: Session) -> list[PodGroupInfo]:
        return pending_jobs(ssn)

    def eligible(self, ssn: Session, job: PodGroupInfo) -> bool:
        return True

    def victims(self, ssn: Session, job: PodGroupInfo) -> list[PodGroupInfo]:
        raise NotImplementedError

    def may_have_victims(self, ssn: Session, job: PodGroupInfo) -> bool:
        """False only when :meth:`victims` is bound to be empty (a quick check)."""
        return True

    def validators(self, ssn: Session) -> list[Validator]:
        return []

    def message(self, ssn: Session) -> MessageFn:
        raise NotImplementedError

    def max_victim_jobs(self, ssn: Session) -> int:
        return -1

    def shared(self, ssn: Session) -> _BetweenCommits:
        """The state shared until the next committed statement."""
        state = _EvictionState.of(ssn)
        if state.between.commits != ssn.commits:
            state.between = _BetweenCommits(ssn.commits)
        return state.between

    def preemptible_running(self, ssn: Session) -> list[PodGroupInfo]:
        """Preemptible jobs that may be victims (``PodGroupInfo.may_be_victim``): the pool every action picks
        from."""
        shared = self.shared(ssn)
        if shared.pool is None:
            shared.pool = [job for job in self._preemptible if job.may_be_victim()]
        return shared.pool

    def pool_of_queue(self, ssn: Session, queue: str) -> list[PodGroupInfo]:
        """The pool's jobs of one queue, in pool order."""
        shared = self.shared(ssn)
        if shared.pool_by_queue is None:
            by_queue: dict[str, list[PodGroupInfo]] = {}
            for job in self.preemptible_running(ssn):
                by_queue.setdefault(job.queue, []).append(job)
            shared.pool_by_queue = by_queue
        return shared.pool_by_queue.get(queue, [])

    def pool_queues(self, ssn: Session) -> list[str]:
        """The queues the pool's jobs are in, in the order of their first job in the pool."""
        self.pool_of_queue(ssn, "")
        by_queue = self.shared(ssn).pool_by_queue
        return [] if by_queue is None else list(by_queue)

    def pool_position(self, ssn: Session) -> dict[str, int]:
        """Each pool job's position in the pool, by uid."""
        shared = self.shared(ssn)
        if shared.pool_position is None:
            shared.pool_position = {job.uid: i for i, job in enumerate(self.preemptible_running(ssn))}
        return shared.pool_position

    def lowest_priority_in_queue(self, ssn: Session, queue: str) -> int | None:
        """The lowest priority among the pool's jobs of one queue (None: the queue has none)."""
        shared = self.shared(ssn)
        if shared.lowest_priority is None:
            lowest: dict[str, int] = {}
            for job in self.preemptible_running(ssn):
                known = lowest.get(job.queue)
                if known is None or job.priority < known:
                    lowest[job.queue] = job.priority
            shared.lowest_priority = lowest
        return shared.lowest_priority.get(queue)

    def chunk_sequence(self, ssn: Session, victims: list[PodGroupInfo]) -> ChunkSequence:
        """The victims' chunk sequence, shared by every solver with the same victims."""
        shared = self.shared(ssn)
        # the pool itself (consolidation's usual victims) by identity, other lists by their jobs
        key: tuple[object, ...] = (self.name, id(victims)) if victims is self.preemptible_running(ssn) \
            else (self.name, *map(id, victims))
        known = shared.sequences.get(key)
        if known is None:
            queue = VictimQueue(ssn, victims, self.victim_order(ssn))
            known = shared.sequences[key] = ChunkSequence(queue, self.max_victim_jobs(ssn))
        return known

    def victim_order(self, ssn: Session) -> VictimOrder:
        """The pool's jobs sorted per leaf queue (the victims an action gives a solver are taken from the
        pool in its order)."""
        shared = self.shared(ssn)
        if shared.victim_order is None:
            shared.victim_order = VictimOrder(ssn, self.preemptible_running(ssn))
        return shared.victim_order

    def execute(self, ssn: Session) -> None:
        self._preemptible = [j for j in ssn.jobs.values() if j.preemptible]
        candidates = self.candidates(ssn)
        if self.nothing_to_do(ssn, candidates):
            return
        budget = ActionSearchBudget.start(ssn, self.name)  # (scenarioSearchBudgets; unlimited without them)
        depth = ssn.config.queue_depth_per_action.get(self.name)
        queue = JobsQueue(ssn, candidates, depth)
        failed: dict[SignatureKey, Difficulty] = {}
        use_signatures = ssn.params.use_scheduling_signatures
        while (job := queue.pop()) is not None:
            if not self.passes_quick_checks(ssn, job):
                continue
            if use_signatures:
                key, difficulty = self.signature_and_difficulty(ssn, job)
                known = failed.get(key)
                if known is not None and not difficulty < known:
                    continue  # a job with the same constraints that was no harder already failed
            if self.fits_without_victims(ssn, job):
                continue  # nothing needs evicting: allocate places it (now, or next cycle)
            victims = unremembered(ssn, job, self.victims(ssn, job))
            if not victims:
                continue
            job_budget = budget.begin_job()
            if job_budget.not_attempted:
                self.unresolved(ssn, job, job_budget, SEARCH_NOT_ATTEMPTED)
                continue  # (each later job too: the action has no time left)
            growing = grows(ssn, job)  # (asked before the search places some of its pods)
            stmt, solver, scenario = self.search(ssn, job, victims, job_budget)
            if scenario is not None and growing and self.churns(ssn, job, scenario):
                # an elastic job's next pod moves a pod that the job's later pods would move or evict again: its
                # whole growth at once instead, where it can be placed
                preemptable = self.moves_preemptable(ssn, job, scenario)
                stmt.discard()
                whole = self.grow_at_once(ssn, job, job_budget)
                if whole is not None:
                    stmt, solver, scenario = whole
                elif self.moves_only and (preemptable or job.is_allocated_gang_satisfied()):
                    # consolidation leaves the job to preempt, which takes those pods once; and it moves pods for
                    # a running elastic job's growth only when the whole growth fits, so that no pod is moved again
                    # for the job's next pod
                    continue
                else:
                    stmt, solver, scenario = self.search(ssn, job, victims, job_budget)
            if scenario is None:
                stmt.discard()
                if solver.stopped_by_budget:  # proves nothing about similar jobs: not remembered as failed
                    self.unresolved(ssn, job, job_budget, SEARCH_DEADLINE_EXHAUSTED)
                    continue
                ssn.search_outcomes.append(job_budget.outcome(self.name, job.key, SEARCH_GENERATORS_EXHAUSTED))
                if use_signatures and not ssn.remembered_victims(job):  # (fewer victims than a job alike may have)
                    known = failed.get(key)
                    if known is None or difficulty < known:
                        failed[key] = difficulty
                continue
            ssn.search_outcomes.append(job_budget.outcome(self.name, job.key, SEARCH_SOLVED))
            self.accept(ssn, job, scenario)
            stmt.commit()

    def search(self, ssn: Session, job: PodGroupInfo, victims: list[PodGroupInfo],
               job_budget: JobSearchBudget) -> tuple[Statement, VictimSolver, Scenario | None]:
        """One victim search for the job's next tasks (``ssn.tasks_to_allocate``), in a statement of its own."""
        for handler in ssn.job_solution_start_handlers:
            handler(job)
        stmt = Statement(ssn)
        solver = VictimSolver(ssn, self.name, job, victims, self.validators(ssn), self.message(ssn),
                              self.max_victim_jobs(ssn), moves_only=self.moves_only,
                              chunks=self.chunk_sequence(ssn, victims), budget=job_budget.generator)
        started = time.perf_counter()
        scenario = solver.run(stmt)
        self.count(ssn, solver, scenario is not None, time.perf_counter() - started)
        return stmt, solver, scenario

    def grow_at_once(self, ssn: Session, job: PodGroupInfo, job_budget: JobSearchBudget
                     ) -> tuple[Statement, VictimSolver, Scenario] | None:
        """The search for every pending pod of an elastic job at once (its eligibility and victims those of the
        whole job): the solved scenario with its statement, else None (nothing left applied)."""
        ssn.growing = job.uid
        try:
            if not self.eligible(ssn, job):
                return None
            victims = unremembered(ssn, job, self.victims(ssn, job))
            if not victims:
                return None
            stmt, solver, scenario = self.search(ssn, job, victims, job_budget)
        finally:
            ssn.growing = None
        if scenario is None:
            stmt.discard()
            return None
        return stmt, solver, scenario

    def churns(self, ssn: Session, job: PodGroupInfo, scenario: Scenario) -> bool:
        """The scenario moves a pod (evicts it and places it again) that a later search of the same elastic job could
        move or evict again: KAI grows an elastic job one pod per cycle, and the next pod's search may take what
        this one moved for it (docs/evictions.md, "Elastic jobs grow at once"). Preempt: a moved pod preempt may
        take (:meth:`moves_preemptable`); reclaim and consolidation: any moved pod."""
        return self.moves_preemptable(ssn, job, scenario)

    def moves_preemptable(self, ssn: Session, job: PodGroupInfo, scenario: Scenario) -> bool:
        """The scenario moves a pod of a lower-priority job of the job's queue that preempt may take."""
        if "preempt" not in ssn.config.actions:
            return False
        filters = ssn.preempt_victim_filters
        return any(t.status is TaskStatus.PIPELINED and (v := t.job) is not None and v.queue == job.queue
                   and v.priority < job.priority and v.preemptible and all(f(job, v) for f in filters)
                   for t in scenario.victim_tasks)

    def unresolved(self, ssn: Session, job: PodGroupInfo, job_budget: JobSearchBudget, result: str) -> None:
        """A search budget stopped the job's search (or left it none): recorded, and the job's pending reason
        says so (``ScenarioSearchUnresolved``); the job stays unplaced for this cycle."""
        outcome = job_budget.outcome(self.name, job.key, result)
        ssn.search_outcomes.append(outcome)
        job.fit_errors = [unresolved_error(self.name, outcome)]

    def count(self, ssn: Session, solver: VictimSolver, solved: bool, seconds: float) -> None:
        """What one victim search cost, into the session's search statistics."""
        stats = ssn.search_stats.of(self.name)
        stats.preemptors += 1
        stats.solved += solved
        stats.partial_solves += solver.partial_solves
        stats.simulations += solver.simulations
        stats.proved += solver.proved
        stats.refused_unplaced += solver.refused_unplaced
        stats.proved_everywhere += solver.proved_everywhere
        stats.filtered += solver.filtered
        stats.placements += solver.placements
        stats.seconds += seconds

    def nothing_to_do(self, ssn: Session, candidates: list[PodGroupInfo]) -> bool:
        """No candidate passes the quick checks: the loop would skip every job, and nothing changes while it
        does, so none would pass later either (no queue is built then: preempt in a cluster where no queue
        has a lower-priority job)."""
        return not any(self.passes_quick_checks(ssn, job) for job in candidates)

    def passes_quick_checks(self, ssn: Session, job: PodGroupInfo) -> bool:
        """The job has pending pods, is eligible and may have victims (:meth:`may_have_victims`: a quick check,
        with the outcome of finding no victims). They change nothing: a job that fails them leaves the
        session as it was."""
        return job.has_pending() and self.eligible(ssn, job) and self.may_have_victims(ssn, job)

    def signature_and_difficulty(self, ssn: Session, job: PodGroupInfo) -> tuple[SignatureKey, Difficulty]:
        """(queue, :func:`signature`) and :func:`job_difficulty` of the job (per job version)."""
        signatures = _EvictionState.of(ssn).signatures
        known = signatures.get(job.uid)
        if known is not None and known[0] == job.version:
            return known[1]
        value = ((job.queue, signature(job)), job_difficulty(ssn, job))
        signatures[job.uid] = (job.version, value)
        return value

    def fits_without_victims(self, ssn: Session, job: PodGroupInfo) -> bool:
        """The job's next tasks fit on idle or releasing resources as things are (tried, then undone).

        Remembered per shape of the tasks (everything a task's fit depends on, ``placement.failure_key``)
        until a statement commits. The job-level capacity check comes first, uncached: it reads the job's
        queue and preemptibility, which the shapes leave out. Jobs with a topology constraint are always
        tried.

        Never while some node is over-committed (its pods hold more than it has, in a resource row or on a shared
        GPU: an input where running pods exceed a node's capacity): KAI has no such shortcut, its solver evicts
        victims and puts back those that fit again, which for a job that fits anyway leaves nothing evicted only
        where every victim fits back; a victim evicted from an over-committed node does not, and stays evicted. The
        solver then decides, as KAI's does (spec 4.9 steps 5-7)."""
        tasks = ssn.tasks_to_allocate(job)
        check = ssn.job_capacity_check
        if tasks and check is not None and check(job, tasks) is not None:
            return False  # (what allocate_job answers at once)
        fits_of = self.shared(ssn).fits
        key: tuple[object, ...] | None = None
        if not job.has_topology:
            key = tuple(failure_key(ssn, t, True, False) for t in tasks)
            known = fits_of.get(key)
            if known is not None:
                return known
        stmt = Statement(ssn)
        fits = allocate_job(ssn, job, stmt, pipeline_only=True, explain=False, tasks=tasks)
        stmt.discard()
        if fits:
            # over-committed nodes (asked once until the next commit, and only of a fit): in a resource row, or on a
            # shared GPU, where a victim evicted would not fit back
            over_key: tuple[object, ...] = ("over-committed",)  # (no shape's key: those are tuples of tuples)
            over = fits_of.get(over_key)
            if over is None:
                nodes = ssn.nodes
                shared = nodes.shared
                over = bool(((nodes.idle + nodes.releasing) < -1e-6).any()) or any(
                    g.free_pipe(mem) < -1e-6 for mem, groups in zip(shared.mem.tolist(), shared.groups, strict=True)
                    for g in groups.values())
                fits_of[over_key] = over
            fits = not over
        if key is not None:
            fits_of[key] = fits
        return fits

    def accept(self, ssn: Session, job: PodGroupInfo, scenario: Scenario) -> None:
        job.fit_errors = []
        victims = [t for t in scenario.victim_tasks if t.status in (TaskStatus.RELEASING, TaskStatus.PIPELINED)]
        shown = ", ".join(t.key for t in victims[:5]) + (f" and {len(victims) - 5} more" if len(victims) > 5 else "")
        job.pipelined_reason = FitError(
            "WaitingForVictims",
            f"Pipelined by {self.name}: waiting for {len(victims)} evicted pod(s) to release their resources "
            f"({shown})", WAITING_FOR_VICTIMS, FitDetail(victims=tuple(t.key for t in victims)),
        )


class ReclaimAction(EvictingAction):
    """Take resources back from queues above their fair share for a queue below it (spec 4.11)."""

    name = "reclaim"

    def eligible(self, ssn: Session, job: PodGroupInfo) -> bool:
        gate = ssn.can_reclaim_resources
        return gate(job) if gate is not None else False

    def victims(self, ssn: Session, job: PodGroupInfo) -> list[PodGroupInfo]:
        filters = ssn.reclaim_victim_filters
        selectors = ssn.reclaim_victim_selectors
        if not selectors:
            return [
                v for v in self.preemptible_running(ssn)
                if v is not job and v.queue != job.queue and all(f(job, v) for f in filters)
            ]
        # the selectors answer per victim queue (the loop guard: by the queues' order keys); then the filters on
        # what they keep, in pool order
        position = self.pool_position(ssn)
        chosen: list[PodGroupInfo] = []
        for queue_name in self.pool_queues(ssn):
            if queue_name == job.queue:
                continue
            pool = self.pool_of_queue(ssn, queue_name)
            kept: list[PodGroupInfo] | None = None
            for select in selectors:
                picked = [v for v in select(job, queue_name, pool) if v.uid in position]
                if kept is not None:
                    ids = {v.uid for v in picked}
                    picked = [v for v in kept if v.uid in ids]
                kept = picked
            if kept:
                chosen.extend(kept)
        chosen.sort(key=lambda v: position[v.uid])
        return [v for v in chosen if v is not job and all(f(job, v) for f in filters)]

    def validators(self, ssn: Session) -> list[Validator]:
        return [*ssn.reclaim_scenario_validators, *storm_guard(ssn)]

    def churns(self, ssn: Session, job: PodGroupInfo, scenario: Scenario) -> bool:
        """Any moved pod: it passed reclaim's filters for this job, so the job's next pod may reclaim it."""
        return any(t.status is TaskStatus.PIPELINED for t in scenario.victim_tasks)

    def message(self, ssn: Session) -> MessageFn:
        proportion = next((p for p in ssn.plugins if p.name == "proportion"), None)
        rules = getattr(proportion, "reclaim", None)
        if rules is None:
            return lambda t, p: f"Pod {t.key} was preempted by workload {p.key}."

        def message(task: TaskInfo, preemptor: PodGroupInfo) -> str:
            assert task.job is not None
            return str(rules.reclaim_message(task, task.job, preemptor))

        return message


class PreemptAction(EvictingAction):
    """Within one queue, strictly lower-priority preemptible work makes room (spec 4.12)."""

    name = "preempt"

    def eligible(self, ssn: Session, job: PodGroupInfo) -> bool:
        if job.preemptible or ssn.job_capacity_check is None:
            return True
        err = ssn.job_capacity_check(job, ssn.tasks_to_allocate(job))
        return err is None or err.reason != "NonPreemptibleOverQuota"

    def victims(self, ssn: Session, job: PodGroupInfo) -> list[PodGroupInfo]:
        filters = ssn.preempt_victim_filters
        return [
            v for v in self.pool_of_queue(ssn, job.queue)
            if v is not job and v.priority < job.priority and all(f(job, v) for f in filters)
        ]

    def may_have_victims(self, ssn: Session, job: PodGroupInfo) -> bool:
        lowest = self.lowest_priority_in_queue(ssn, job.queue)
        return lowest is not None and lowest < job.priority

    def validators(self, ssn: Session) -> list[Validator]:
        return [*ssn.preempt_scenario_validators, *storm_guard(ssn)]

    def message(self, ssn: Session) -> MessageFn:
        return preempt_message


class ConsolidationAction(EvictingAction):
    """Move running preemptible pods so that a pending job fits, evicting nobody for good (spec 4.10)."""

    name = "consolidation"
    moves_only = True

    def candidates(self, ssn: Session) -> list[PodGroupInfo]:
        if ssn.params.max_consolidation_preemptees == 0:
            return []
        return [j for j in pending_jobs(ssn) if j.preemptible]

    def eligible(self, ssn: Session, job: PodGroupInfo) -> bool:
        shared = self.shared(ssn)
        if shared.free_gpus is None:
            nodes = ssn.nodes
            # whole GPUs and the free room on shared ones (spec 4.10)
            shared.free_gpus = float((nodes.idle[GPU] + nodes.releasing[GPU]
                                      + nodes.shared.free_sum)[nodes.schedulable].sum())
        need = sum(t.quota_gpus for t in ssn.tasks_to_allocate(job))
        return shared.free_gpus + 1e-9 >= need

    def victims(self, ssn: Session, job: PodGroupInfo) -> list[PodGroupInfo]:
        pool = self.preemptible_running(ssn)
        if not job.may_be_victim():
            return pool  # a job with no active pod is not in the pool: the pool itself (one shared sequence)
        return [v for v in pool if v is not job]

    def validators(self, ssn: Session) -> list[Validator]:
        return [all_victims_moved]

    def message(self, ssn: Session) -> MessageFn:
        return consolidation_message

    def max_victim_jobs(self, ssn: Session) -> int:
        return ssn.params.max_consolidation_preemptees

    def churns(self, ssn: Session, job: PodGroupInfo, scenario: Scenario) -> bool:
        return any(t.status is TaskStatus.PIPELINED for t in scenario.victim_tasks)


def unremembered(ssn: Session, job: PodGroupInfo, victims: list[PodGroupInfo]) -> list[PodGroupInfo]:
    """The victims without a running pod that was evicted for the job in an earlier cycle and is back
    (``Session.remembered_victims``): evicting such a job for the same preemptor again would kill that pod's work
    twice for one job (docs/evictions.md, "A pod is evicted once for a preemptor")."""
    remembered = ssn.remembered_victims(job)
    if not remembered:
        return victims
    return [v for v in victims
            if not any(t.key in remembered and t.status in ACTIVE_ALLOCATED for t in v.tasks)]


def grows(ssn: Session, job: PodGroupInfo) -> bool:
    """An elastic job whose pending pods are more than its next ones (``ssn.tasks_to_allocate``: the unsatisfied
    gang, or one more pod)."""
    if not job.is_elastic():
        return False
    pending = sum(1 for t in job.tasks if t.status is TaskStatus.PENDING)
    return pending > len(ssn.tasks_to_allocate(job))


def storm_guard(ssn: Session) -> list[Validator]:
    """The eviction storm guard (``params.max-evicted-gpus-ratio``; none when 0, the default): a scenario may
    evict at most ``ratio`` GPUs for each GPU its preemptor gains."""
    ratio = ssn.params.max_evicted_gpus_ratio
    return [] if ratio <= 0 else [lambda scenario: within_eviction_ratio(scenario, ratio)]


def within_eviction_ratio(scenario: Scenario, ratio: float) -> bool:
    """The GPUs the scenario really evicts (moved victims keep theirs) are at most ``ratio`` times the GPUs
    its preemptor's placed tasks gain (queue accounting: whole devices, fractions, DRA GPUs)."""
    evicted = sum(t.quota_gpus for t in scenario.victim_tasks if t.status is TaskStatus.RELEASING)
    if evicted <= 0:
        return True
    gained = sum(t.quota_gpus for t in scenario.preemptor_tasks)
    return evicted <= ratio * gained + 1e-9


def all_victims_moved(scenario: Scenario) -> bool:
    """Consolidation only moves pods: no victim may stay evicted."""
    return not any(t.status is TaskStatus.RELEASING for t in scenario.victim_tasks)
