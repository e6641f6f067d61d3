"""The victim-based solver shared by reclaim, preempt and consolidation (spec 4.9).

For a pending job P with tasks T (its next gang, or one more elastic pod):

* **Incremental solving**: for k = 1..|T| solve the partial job made of the first k tasks, seeded with
  the victims the (k-1) solution evicted ("recorded" victims). The first k that cannot be solved fails
  the job; only the final solution's operations are kept.
* **Scenarios**: scenario 0 evicts only the recorded victims; every next scenario adds the next victim
  chunk (``VictimQueue``: worst queue, lowest-priority newest job first; one surplus pod of an elastic
  job, or a whole gang). Chunks already recorded are skipped.
* **Filter**: a scenario is rejected without simulation when the GPUs that would be free (idle +
  releasing + held by the scenario's victims) cannot hold the partial job's GPU tasks (greedy fit of the
  largest needs into the emptiest nodes).
* **Simulation** (KAI's by-pod solver): with the recorded victims evicted, for each node hosting the
  newly added victim job, evict the scenario's potential victims *on that node*, add the node to the
  feasible set, and place P and every evicted victim again in job order (as the jobs stood before the
  evictions), pipeline-only: P only onto the nodes whose victims were evicted, victims onto those nodes
  or any node with free GPUs (the feasible nodes); victims that fit are moved (or put back), the others
  stay evicted, and a victim gang left below its minimum is evicted whole. P must be placed entirely and every
  validator must accept the scenario; otherwise this node's evictions are rolled back and the next node is
  tried.
* **Validate first** (:mod:`kaisched.actions.settled_victims`): where no victim could be placed again beside
  P (by free whole GPUs) and no victim gang would be broken, the validators' verdict after the simulation is
  their verdict on the evictions alone; a scenario they refuse there is refused before anything is placed.
* **Moves only** (consolidation: every victim must be placed again): a scenario is rejected without
  simulation when P's and the victims' whole-GPU pods cannot be packed into the GPUs there would be
  (:class:`MovePacking`, a relaxation that never rejects a scenario the simulation could solve), and a
  simulation stops as soon as one victim is left evicted (the validator would reject it anyway).
* **Warm simulations** (:mod:`kaisched.actions.warm`): a simulation's victims start with the recorded ones,
  the last simulation's victims, so the evictions are kept between simulations: a simulation rolls back to the
  last eviction it shares with the previous one and evicts only the rest; what it reads of its victims (their
  jobs in queue order, shapes, broken gangs, the scenario's victim jobs) is kept up to date alongside. The
  solver then reads the cluster as it stood at its start from copies taken then, and pops more victim chunks
  only after rolling back to it. Kept only where every resource amount is a multiple of 1/1024 (whole bytes
  and millicores for memory and CPU) far from float limits (``exact_accounting``): sums are then exact, so the
  state reached does not depend on the order of the evictions and undos, and decisions are the same as
  simulating from scratch. With recorded victims the filter's jump over hopeless chunks works from per-chunk
  increments computed once per solver run, corrected on the recorded victims' nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import numpy.typing as npt

from kaisched.actions.job_queue import JobsQueue
from kaisched.actions.placement import allocate_job, claims_key
from kaisched.actions.proofs import ScenarioProof
from kaisched.actions.search_budget import GeneratorSearchBudget
from kaisched.actions.settled_victims import victims_stay_evicted
from kaisched.actions.victims import Chunk, ChunkSequence, VictimOrder, VictimQueue
from kaisched.actions.warm import RecordedVictims, WarmEvictions, exact_accounting
from kaisched.framework.scenario import Scenario, VictimJob
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.job import PodGroupInfo
from kaisched.model.resources import GPU
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo

MessageFn = Callable[[TaskInfo, PodGroupInfo], str]
Validator = Callable[[Scenario], bool]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class SearchShortcuts:
    """The victim search's shortcuts that tests and benchmarks turn off to compare with the plain search (one
    module-level instance, :data:`SHORTCUTS`: a compiled class's attributes cannot be patched, an instance's can)."""

    def __init__(self) -> None:
        #: keep evictions from one simulation to the next where exact (see the module doc)
        self.warm_simulations = True
        #: skip the scenarios :class:`~kaisched.actions.proofs.ScenarioProof` proves to fail
        self.prove_failures = True
        #: validate a scenario before placing anything where no victim can be placed again
        #: (:mod:`kaisched.actions.settled_victims`)
        self.validate_first = True


SHORTCUTS = SearchShortcuts()


class VictimSolver:

    def __init__(
        self,
        ssn: Session,
        action: str,
        preemptor: PodGroupInfo,
        victim_jobs: list[PodGroupInfo],
        validators: list[Validator],
        message: MessageFn,
        max_victim_jobs: int = -1,
        moves_only: bool = False,
        order: VictimOrder | None = None,
        chunks: ChunkSequence | None = None,
        budget: GeneratorSearchBudget | None = None,
    ) -> None:
        """``chunks``: the victims' chunk sequence when shared with other solvers (see ChunkSequence); else
        one is made of ``victim_jobs`` (taken in ``order``) and ``max_victim_jobs``. ``budget``: the search
        budget asked before each scenario simulation (None: unlimited; actions.search_budget)."""
        self.budget = budget
        #: the search stopped because ``budget`` expired (run() then returns None)
        self.stopped_by_budget = False
        self.ssn = ssn
        self.action = action
        self.preemptor = preemptor
        self.sequence = chunks or ChunkSequence(VictimQueue(ssn, victim_jobs, order), max_victim_jobs)
        self.validators = validators
        self.message = message
        self.max_victim_jobs = max_victim_jobs
        self.moves_only = moves_only
        self._packing: MovePacking | None = None
        self._e_lists: tuple[list[int], list[float], list[int]] = ([], [], [])
        self._e_index: dict[str, int] = {}
        self._e_tasks: list[TaskInfo] = []  # the materialised victim tasks, in chunk order (entries)
        self._node_entries: dict[int, list[int]] = {}  # node -> its entries, in order
        self._entries_upto = 0
        self._entry_cache: tuple[int, tuple[IntArray, FloatArray, IntArray]] | None = None
        self._increments: tuple[tuple[object, ...], FloatArray, FloatArray] | None = None
        self._allowed: dict[str, BoolArray] = {}  # task uid -> the nodes its static predicates allow
        self._answers: list[BoolArray] = []  # the distinct ones
        self.simulations = 0
        self.proved = 0  # scenarios proved to fail, not simulated
        self.refused_unplaced = 0  # scenarios the validators refused before placing (victims that stay evicted)
        self.proved_everywhere = 0  # partial jobs whose every single-node scenario was proved to fail at once
        self.victim_jobs = victim_jobs
        self.partial_solves = 0
        self.placements = 0  # job placements tried in simulations
        self._last: tuple[list[TaskInfo], BoolArray] = ([], np.zeros(0, dtype=np.bool_))
        self.filtered = 0
        self._warm: WarmEvictions | None = None
        self._recorded = RecordedVictims()
        # while warm: the cluster as it stood when the solver started (idle + releasing GPUs, feasible nodes)
        self._start_free: FloatArray = np.zeros(0)
        self._start_feasible: dict[bool, BoolArray] = {}

    # ---- victim chunks (materialised lazily, shared by all k) ------------------------------------
    @property
    def chunks(self) -> list[Chunk]:
        return self.sequence.chunks

    @property
    def _exhausted(self) -> bool:
        return self.sequence.exhausted

    def _chunk(self, i: int) -> Chunk | None:
        return self.sequence.get(i)

    def _restore_for_pop(self) -> bool:
        """Popping victim chunks reads the cluster: roll warm evictions back first (ChunkSequence.before_pop)."""
        warm = self._warm
        if warm is None or not warm.tasks:
            return False
        warm.cool()
        return True

    # ---- filter (spec 4.9 step 4c) --------------------------------------------------------------------
    @staticmethod
    def _fits_gpus(needs: list[float], free: npt.NDArray[np.float64], mask: BoolArray) -> bool:
        """Greedy: the largest needs into the nodes with the most free GPUs (idle + releasing + victims')."""
        if not needs:
            return True
        candidates = free[mask]
        if len(candidates) < 1:
            return False
        if len(needs) == 1:
            return bool(candidates.max() + 1e-9 >= needs[0])
        k = min(len(needs), len(candidates))
        top = np.partition(candidates, len(candidates) - k)[len(candidates) - k:] if k < len(candidates) else candidates
        heap = [-float(x) for x in top]
        heapq.heapify(heap)
        for need in needs:
            best = -heap[0]
            if best + 1e-9 < need:
                return False
            heapq.heapreplace(heap, -(best - need))
        return True

    def _entries(self) -> tuple[IntArray, FloatArray, IntArray]:
        """(node, GPUs, chunk index) of every materialised victim task, as arrays (cached)."""
        n = len(self.chunks)
        if self._entry_cache is None or self._entry_cache[0] != n:
            self._extend_entries()
            nodes_, gpus_, chunks_ = self._e_lists
            self._entry_cache = (n, (np.array(nodes_, dtype=np.int64), np.array(gpus_, dtype=np.float64),
                                     np.array(chunks_, dtype=np.int64)))
        return self._entry_cache[1]

    def _extend_entries(self) -> None:
        """Add the chunks materialised since to the entry lists and the per-node entries."""
        nodes_, gpus_, chunks_ = self._e_lists
        for c in range(self._entries_upto, len(self.chunks)):
            for t in self.chunks[c].tasks:
                e = len(nodes_)
                self._e_index[t.uid] = e
                self._e_tasks.append(t)
                self._node_entries.setdefault(t.node, []).append(e)
                nodes_.append(t.node)
                gpus_.append(t.devices)
                chunks_.append(c)
        self._entries_upto = len(self.chunks)

    def _victims_on(self, node: int, last_chunk: int, recorded_ids: set[str]) -> list[TaskInfo]:
        """The victim tasks on ``node`` of chunks up to ``last_chunk``, recorded ones left out, in chunk order."""
        self._extend_entries()
        chunk_of = self._e_lists[2]
        tasks = self._e_tasks
        return [tasks[e] for e in self._node_entries.get(node, ()) if chunk_of[e] <= last_chunk
                and tasks[e].uid not in recorded_ids]

    def _first_passing(self, start: int, recorded_ids: set[str], free: npt.NDArray[np.float64], mask: BoolArray,
                       g: float, slots_needed: float, sum_needed: float) -> int:
        """Index of the first chunk (from ``start``) after which the uniform-need filter can pass: the
        victims' GPUs give ``slots_needed`` more g-sized slots and ``sum_needed`` more GPUs. Returns the
        number of chunks when none does. Vectorised over all materialised chunks, materialising more in
        doubling blocks."""
        schedulable = self.ssn.nodes.schedulable
        block = 4
        if len(self.chunks) <= start:
            self._chunk(start)
        while True:
            all_node, all_gpu, all_chunk = self._entries()
            first = int(np.searchsorted(all_chunk, start))
            keep = np.ones(len(all_node) - first, dtype=np.bool_)
            for uid in recorded_ids:
                k = self._e_index.get(uid)
                if k is not None and k >= first:
                    keep[k - first] = False
            en = all_node[first:]
            keep &= en >= 0
            en, eg, ec = en[keep], all_gpu[first:][keep], all_chunk[first:][keep]
            if len(en):
                d_slots, d_sum = _increments(en, eg, free, mask & schedulable, schedulable, g)
                passing = (np.cumsum(d_slots) + 1e-9 >= slots_needed) & (np.cumsum(d_sum) + 1e-9 >= sum_needed)
                last_of_chunk = np.r_[ec[1:] != ec[:-1], True]
                hits = np.flatnonzero(passing & last_of_chunk)
                if len(hits):
                    return int(ec[hits[0]])
            if self._exhausted:
                return len(self.chunks)
            self._chunk(len(self.chunks) + block - 1)
            block *= 2

    def _jump(self, recorded: RecordedVictims, free: FloatArray, mask: BoolArray, victim_nodes: BoolArray,
              start_mask: BoolArray, g: float, slots_needed: float, sum_needed: float) -> tuple[int, bool]:
        """:meth:`_first_passing` from chunk 0 with recorded victims, then take the chunks before it into
        ``free``, ``mask`` and ``victim_nodes``; returns it and whether a placed victim was taken. What each
        entry adds to the filter does not depend on the recorded victims except on their nodes: computed once
        per solver run (``start_mask``: the filter's mask before the recorded victims) and corrected there.
        Exact amounts only (warm simulations): the sums do not depend on their order."""
        schedulable = self.ssn.nodes.schedulable
        block = 4
        if not self.chunks:
            self._chunk(0)
        rec_node = np.zeros(len(free), dtype=np.bool_)
        rec_node[recorded.placed_nodes()] = True
        while True:
            all_node, all_gpu, all_chunk = self._entries()
            base_slots, base_sum = self._start_increments(start_mask, g)
            placed = all_node >= 0
            rec_entry = recorded.entry_mask(self._e_index, len(all_node))
            on_rec = np.zeros(len(all_node), dtype=np.bool_)
            on_rec[placed] = rec_node[all_node[placed]]
            ours = np.flatnonzero(on_rec & ~rec_entry)
            d_slots = np.where(on_rec, 0.0, base_slots)
            d_sum = np.where(on_rec, 0.0, base_sum)
            if len(ours):
                d_slots[ours], d_sum[ours] = _increments(all_node[ours], all_gpu[ours], free, mask & schedulable,
                                                         schedulable, g)
            hits = np.flatnonzero((np.cumsum(d_slots) + 1e-9 >= slots_needed) & (np.cumsum(d_sum) + 1e-9 >= sum_needed))
            if len(hits) or self._exhausted:
                break
            self._chunk(len(self.chunks) + block - 1)
            block *= 2
        j = int(all_chunk[hits[0]]) if len(hits) else len(self.chunks)
        where = all_node[(all_chunk < j) & placed & ~rec_entry]
        if len(where):
            n = len(free)
            free += np.bincount(where, weights=all_gpu[(all_chunk < j) & placed & ~rec_entry], minlength=n)
            touched = np.bincount(where, minlength=n) > 0
            mask[touched] = schedulable[touched]
            victim_nodes |= touched
        return j, len(where) > 0

    def _start_increments(self, start_mask: BoolArray, g: float) -> tuple[FloatArray, FloatArray]:
        """Per materialised entry, what it adds to the filter's g-slots and GPUs in chunk order when nothing
        is recorded, from the cluster as it stood at the solver's start (cached per mask, g and entries)."""
        all_node, all_gpu, _ = self._entries()
        key: tuple[object, ...] = (start_mask.tobytes(), g, len(all_node))
        if self._increments is None or self._increments[0] != key:
            schedulable = self.ssn.nodes.schedulable
            d_slots = np.zeros(len(all_node))
            d_sum = np.zeros(len(all_node))
            placed = np.flatnonzero(all_node >= 0)
            if len(placed):
                d_slots[placed], d_sum[placed] = _increments(all_node[placed], all_gpu[placed], self._start_free,
                                                             start_mask & schedulable, schedulable, g)
            self._increments = (key, d_slots, d_sum)
        return self._increments[1], self._increments[2]

    def _feasible(self, tasks: list[TaskInfo]) -> BoolArray:
        nodes = self.ssn.nodes
        gpu_only = bool(tasks) and all(t.req[GPU] > 0 or t.gpu.shared for t in tasks)
        if self._warm is not None:  # the cluster as it stood at the start
            return self._start_feasible[gpu_only]
        if gpu_only:
            # nodes with idle or releasing GPUs, whole or room on shared ones
            result: BoolArray = (nodes.idle[GPU] + nodes.releasing[GPU] + nodes.shared.free_sum) > 1e-9
            return result
        return np.ones(len(nodes), dtype=np.bool_)

    # ---- simulation -------------------------------------------------------------------------------
    def _simulate(self, stmt: Statement, tasks: list[TaskInfo], evict: list[TaskInfo], feasible: BoolArray
                  ) -> Scenario | None:
        """Evict ``evict``, place P's ``tasks`` and the victims again; keep it only when it solves."""
        if self._warm is not None:
            return self._simulate_warm(stmt, tasks, evict, feasible, self._warm)
        ssn, p = self.ssn, self.preemptor
        checkpoint = stmt.checkpoint()
        mask = feasible.copy()  # where victims may be put again: the feasible nodes and the victims' nodes
        p_mask = np.zeros(len(mask), dtype=np.bool_)  # P goes onto what the victims release
        where = [t.node for t in evict if t.node >= 0]
        mask[where] = True
        p_mask[where] = True
        if SHORTCUTS.validate_first and not self.moves_only and victims_stay_evicted(ssn.nodes, tasks, evict, mask) \
                and self._refused_unplaced(stmt, tasks, evict):
            return None
        self.simulations += 1
        scenario = Scenario(self.action, p, tasks)
        # jobs are ordered as they stand before the evictions
        jobs = {t.job.key: t.job for t in evict if t.job is not None}
        queue = JobsQueue(ssn, [p, *jobs.values()])
        for t in evict:
            if t.job is not None:
                scenario.add_victims(t.job, [t])
            stmt.evict(t, action=self.action, preemptor=p.key, message="")  # messages: see run()
            ssn.revivable.add(t.uid)
        try:
            placed = self._place(stmt, tasks, queue, mask, p_mask, lambda: self._any_victim_fits(evict, mask))
        finally:
            ssn.revivable.clear()
        if self.moves_only and any(t.status is TaskStatus.RELEASING for t in evict):
            # a victim stays evicted: rejected (evicting broken gangs whole would only add victims)
            stmt.rollback(checkpoint)
            return None
        if placed:
            self._evict_broken_gangs(stmt, scenario)
        if placed and all(t.is_active_allocated for t in tasks) and all(v(scenario) for v in self.validators):
            self._last = (list(evict), feasible)
            return scenario
        stmt.rollback(checkpoint)
        return None

    def _refused_unplaced(self, stmt: Statement, tasks: list[TaskInfo], evict: list[TaskInfo]) -> bool:
        """The validators refuse the scenario on its evictions alone, which is their verdict after any simulation
        when no victim can be placed again (kaisched.actions.settled_victims); the evictions are rolled back."""
        checkpoint = stmt.checkpoint()
        scenario = Scenario(self.action, self.preemptor, tasks)
        for t in evict:
            if t.job is not None:
                scenario.add_victims(t.job, [t])
            stmt.evict(t, action=self.action, preemptor=self.preemptor.key, message="")
        refused = not all(v(scenario) for v in self.validators)
        stmt.rollback(checkpoint)
        self.refused_unplaced += refused
        return refused

    def _simulate_warm(self, stmt: Statement, tasks: list[TaskInfo], evict: list[TaskInfo], feasible: BoolArray,
                       warm: WarmEvictions) -> Scenario | None:
        """:meth:`_simulate` from the evictions the last simulation left in place (see WarmEvictions)."""
        ssn, p = self.ssn, self.preemptor
        self.simulations += 1
        kept, changed = warm.evict(evict, self.action, p.key)
        scenario = warm.scenario(self.action, p, tasks, kept, changed)
        mask = feasible.copy()
        p_mask = np.zeros(len(mask), dtype=np.bool_)
        where = np.array(warm.nodes, dtype=np.int64)
        where = where[where >= 0]
        mask[where] = True
        p_mask[where] = True
        queue = JobsQueue(ssn, [p], leaf_heaps=warm.heaps)
        ssn.revivable.update(warm.uids)
        replaced: set[str] = set()
        try:
            placed = self._place(stmt, tasks, queue, mask, p_mask, lambda: warm.any_fits(ssn, mask), replaced)
        finally:
            ssn.revivable.clear()
        for key in replaced:  # their tasks changed status: no longer the victim jobs of an earlier scenario
            if warm.index[key] < scenario.shared_prefix:
                entry = scenario.victims[key]
                scenario.victims[key] = VictimJob(entry.job, list(entry.tasks))
        grown: set[str] = set()
        if placed:
            grown = self._evict_broken_gangs_warm(stmt, scenario, warm, replaced)
        warm.remember(scenario, replaced | grown)
        if placed and all(t.is_active_allocated for t in tasks) and all(v(scenario) for v in self.validators):
            self._last = (list(evict), feasible)
            return scenario
        warm.settle()
        return None

    def _place(self, stmt: Statement, tasks: list[TaskInfo], queue: JobsQueue, mask: BoolArray, p_mask: BoolArray,
               any_victim_fits: Callable[[], bool], replaced: set[str] | None = None) -> bool:
        """Place P and every evicted victim again in job order; True when P is placed (``replaced``: gets the
        keys of the victim jobs placed again)."""
        ssn, p = self.ssn, self.preemptor
        placed = False
        # resources only shrink during the simulation: a victim shape that failed once fails again
        failed: set[tuple[object, ...]] = set()
        while (job := queue.pop()) is not None:
            self.placements += 1
            if job is p:
                # P goes onto what the victims release; other feasible nodes only when that is not enough
                placed = allocate_job(ssn, p, stmt, pipeline_only=True, explain=False, tasks=tasks, node_mask=p_mask)
                if not placed and (mask & ~p_mask).any():
                    placed = allocate_job(ssn, p, stmt, pipeline_only=True, explain=False, tasks=tasks,
                                          node_mask=mask)
                if not placed or not any_victim_fits():
                    break
                continue
            candidates = ssn.tasks_to_allocate(job)
            shape = (job.queue, tuple((t.signature, t.req.tobytes(), t.gpu) for t in candidates))
            if shape in failed:
                ok = False
            elif not allocate_job(ssn, job, stmt, pipeline_only=True, explain=False, tasks=candidates,
                                  node_mask=mask):
                failed.add(shape)
                ok = False
            else:
                ok = True
                if replaced is not None:
                    replaced.add(job.key)
                if any(t.uid in ssn.revivable for t in ssn.tasks_to_allocate(job)):
                    queue.push(job)
            if not ok and self.moves_only and _left_evicted(job, ssn.revivable):
                break  # a job is never tried twice: its evicted pods stay evicted
        return placed

    def _packs(self, tasks: list[TaskInfo], evict: list[TaskInfo]) -> bool:
        """Moves only: could P's ``tasks`` and every victim in ``evict`` be placed (by whole GPUs)?"""
        if not self.moves_only:
            return True
        if self._packing is None:  # every simulation starts from the state the solver started from
            self._packing = MovePacking(self.ssn)
        return self._packing.could_pack(tasks, evict)

    def _any_victim_fits(self, evicted: list[TaskInfo], mask: BoolArray) -> bool:
        """Could any evicted victim still be placed (by resources alone) on the allowed nodes?"""
        nodes = self.ssn.nodes
        shapes = {(t.req.tobytes(), t.gpu, claims_key(t)): t for t in evicted if t.status is TaskStatus.RELEASING}
        return any(bool((nodes.fits_task(t, with_releasing=True) & mask).any()) for t in shapes.values())

    def _evict_broken_gangs(self, stmt: Statement, scenario: Scenario) -> None:
        """A victim gang that lost pods below its minimum is evicted whole (spec 4.9: gang victims)."""
        p = self.preemptor
        for victim in list(scenario.victims.values()):
            job = victim.job
            if job.is_allocated_gang_satisfied():
                continue
            rest = [t for t in job.tasks if t.is_settled_active]
            for t in rest:
                stmt.evict(t, action=self.action, preemptor=p.key, message="")
            scenario.add_victims(job, rest)

    def _evict_broken_gangs_warm(self, stmt: Statement, scenario: Scenario, warm: WarmEvictions,
                                 replaced: set[str]) -> set[str]:
        """:meth:`_evict_broken_gangs` over the only victim jobs it can act on: those left below their minimum
        with pods to take by the evictions (``warm.broken``) and those placed again since; in scenario order.
        Returns the keys of the jobs it added victims to."""
        p = self.preemptor
        grown: set[str] = set()
        for key in sorted(warm.broken | replaced, key=warm.index.__getitem__):
            job = scenario.victims[key].job
            if job.is_allocated_gang_satisfied():
                continue
            rest = [t for t in job.tasks if t.is_settled_active]
            for t in rest:
                stmt.evict(t, action=self.action, preemptor=p.key, message="")
            if rest:
                if warm.index[key] < scenario.shared_prefix:
                    entry = scenario.victims[key]
                    scenario.victims[key] = VictimJob(entry.job, list(entry.tasks))
                scenario.add_victims(job, rest)
                grown.add(key)
        return grown

    def _allowed_nodes(self, tasks: list[TaskInfo]) -> list[BoolArray]:
        """Per task, the nodes its static predicates (selector, affinity, taints, conditions) allow (the same
        array for tasks the predicates answer alike)."""
        out: list[BoolArray] = []
        for t in tasks:
            ok = self._allowed.get(t.uid)
            if ok is None:
                ok = np.ones(len(self.ssn.nodes), dtype=np.bool_)
                for predicate in self.ssn.static_predicates:
                    codes = predicate(t)
                    if codes is not None:
                        ok &= codes == 0
                for known in self._answers:  # one array per distinct answer
                    if np.array_equal(known, ok):
                        ok = known
                        break
                else:
                    self._answers.append(ok)
                self._allowed[t.uid] = ok
            out.append(ok)
        return out

    def _solve_partial(self, stmt: Statement, tasks: list[TaskInfo], recorded: list[TaskInfo]
                       ) -> Scenario | None:
        feasible = self._feasible(tasks)
        scenarios: Iterable[list[TaskInfo]]
        if recorded:
            scenarios = self._scenarios(tasks, recorded, feasible)
        else:
            # without recorded victims the scenarios depend only on the tasks' shape, the victims' chunks and
            # the state every solver of this chunk sequence starts from: walked once per shape, replayed
            scenarios = self.sequence.walk(_walk_key(tasks), lambda: self._scenarios(tasks, recorded, feasible))
        budget = self.budget
        self.partial_solves += 1
        proof = self._proof(tasks, recorded, feasible)
        if proof is not None and proof.fails_everywhere():
            # no single node's victims can make room, and there is no scenario without victims (proofs are made only
            # before the first solution, without recorded victims): nothing can solve it
            self.proved_everywhere += 1
            scenarios = ()
        for evict in scenarios:
            if proof is not None and proof.fails(evict):
                self.proved += 1
                continue
            if budget is not None and budget.expired():  # (before each simulation; a started one finishes)
                self.stopped_by_budget = True
                return None
            found = self._simulate(stmt, tasks, evict, feasible)
            if found is not None:
                return found
        return None

    def _proof(self, tasks: list[TaskInfo], recorded: list[TaskInfo], feasible: BoolArray) -> ScenarioProof | None:
        """Proofs of failure for this partial job's scenarios, where they can prove anything (kaisched.actions.proofs):
        simulated from scratch, no recorded victims, victims that may stay evicted, proportion's queue order, and
        exact amounts (``exact_accounting``: the allocations the bounds subtract are the very floats the
        simulation reaches, never below zero)."""
        order = self.ssn.queue_order
        if (not SHORTCUTS.prove_failures or recorded or self._warm is not None or self.moves_only or order is None
                or not ScenarioProof.applies(self.ssn, tasks) or not exact_accounting(self.ssn)):
            return None
        return ScenarioProof(self.ssn, self.preemptor, tasks, feasible, self._allowed_nodes(tasks), order.bound_key,
                             self.victim_jobs)

    def _scenarios(self, tasks: list[TaskInfo], recorded: list[TaskInfo], feasible: BoolArray
                   ) -> Iterator[list[TaskInfo]]:
        """The victim sets to simulate, in order: the recorded victims alone, then per newly added victim
        chunk, per node it touches, the recorded victims and the potential victims on that node — each only
        when the filters let it through."""
        nodes = self.ssn.nodes
        # node-affinity filter (spec 4.9 step 4a): P goes onto its victims' nodes, so every task needs an
        # allowed node among them
        allowed = [a for a in {id(a): a for a in self._allowed_nodes(tasks)}.values() if not a.all()]
        victim_nodes = np.zeros(len(nodes), dtype=np.bool_)

        def affinity_ok() -> bool:
            return all(bool((a & victim_nodes).any()) for a in allowed)
        needs = sorted((float(t.req[GPU]) for t in tasks if t.req[GPU] > 0), reverse=True)
        # GPUs the filter sees: idle + releasing on feasible nodes, plus what the potential victims hold
        warm = self._warm is not None
        free = self._start_free.copy() if warm else (nodes.idle[GPU] + nodes.releasing[GPU]).copy()
        mask = feasible & nodes.schedulable
        start_mask = mask.copy()

        # (not for the walk without recorded victims: other solvers may replay it, while this one goes on)
        view = self._recorded.update(recorded) if warm and recorded else None
        recorded_ids = view.ids if view is not None else {t.uid for t in recorded}
        # O(1) necessary conditions kept up to date as victims are added: enough GPUs in all, and, when
        # every task needs the same amount g, enough g-sized slots (then they are also sufficient)
        uniform = needs[0] if needs and all(n == needs[0] for n in needs) else 0.0
        total_need = sum(needs)
        state = {"sum": float(free[mask].sum()), "slots": float(np.floor(free[mask] / uniform + 1e-9).sum())
                 if uniform else 0.0}

        def quick_fail() -> bool:
            if state["sum"] + 1e-9 < total_need:
                return True
            return bool(uniform) and state["slots"] < len(needs)

        def add_tracked(victims: list[TaskInfo]) -> None:
            for t in victims:
                n = t.node
                if n < 0:
                    continue
                was_in = bool(mask[n])
                old = float(free[n]) if was_in else 0.0
                free[n] += t.devices
                mask[n] = nodes.schedulable[n]
                new = float(free[n]) if mask[n] else 0.0
                state["sum"] += new - old
                if uniform:
                    state["slots"] += np.floor(new / uniform + 1e-9) - np.floor(old / uniform + 1e-9)
                victim_nodes[n] = True

        def recount() -> None:
            state["sum"] = float(free[mask].sum())
            state["slots"] = float(np.floor(free[mask] / uniform + 1e-9).sum()) if uniform else 0.0

        recorded_target = feasible & nodes.schedulable  # where P may go: the recorded victims' nodes and more
        if view is not None:  # exact sums: added at once, then counted again
            where, gpus = view.placed_nodes(), view.placed_devices()
            np.add.at(free, where, gpus)
            mask[where] = nodes.schedulable[where]
            victim_nodes[where] = True
            recorded_target[where] = nodes.schedulable[where]
            recount()
        else:
            add_tracked(recorded)
            for t in recorded:
                if t.node >= 0:
                    recorded_target[t.node] = nodes.schedulable[t.node]

        # scenario 0: the recorded victims only; none before the first solution (KAI's solver never solves without a
        # victim: a job that fits as things are is allocate's)
        if not recorded:
            pass
        elif not quick_fail() and affinity_ok() and self._fits_gpus(needs, free, mask) and self._packs(tasks, recorded):
            yield list(recorded)
        else:
            self.filtered += 1
        target = recorded_target.copy()
        i = 0
        while True:
            if uniform and quick_fail():
                # jump over the chunks that cannot make the filter pass (vectorised), taking them in
                if view is not None and i == 0:
                    j, took = self._jump(view, free, mask, victim_nodes, start_mask, uniform,
                                         len(needs) - state["slots"], total_need - state["sum"])
                    if took:
                        recount()
                else:
                    j = self._first_passing(i, recorded_ids, free, mask, uniform, len(needs) - state["slots"],
                                            total_need - state["sum"])
                    placed = [t for chunk in self.chunks[i:j] for t in chunk.tasks
                              if t.uid not in recorded_ids and t.node >= 0]
                    for t in placed:
                        victim_nodes[t.node] = True
                    if placed:
                        idx = np.fromiter((t.node for t in placed), dtype=np.int64, count=len(placed))
                        np.add.at(free, idx, np.fromiter((t.devices for t in placed), dtype=np.float64,
                                                         count=len(placed)))
                        mask[idx] = nodes.schedulable[idx]
                        recount()
                self.filtered += j - i
                i = j
            chunk = self._chunk(i)
            if chunk is None:
                break
            i += 1
            new = [t for t in chunk.tasks if t.uid not in recorded_ids]
            if not new:
                continue
            add_tracked(new)
            if quick_fail() or not affinity_ok() or not self._fits_gpus(needs, free, mask):
                self.filtered += 1
                continue
            for node in sorted({t.node for t in new if t.node >= 0}):
                # P only goes onto the recorded victims' nodes and this one: skip hopeless nodes cheaply
                target[node] = nodes.schedulable[node]
                hopeless = bool(needs) and not self._fits_gpus(needs, free, target)
                target[node] = recorded_target[node]
                evict = [*recorded, *self._victims_on(node, i - 1, recorded_ids)]
                if hopeless or not self._packs(tasks, evict):
                    self.filtered += 1
                    continue
                yield evict

    # ---- entry point ----------------------------------------------------------------------------------
    def run(self, stmt: Statement) -> Scenario | None:
        """Solve the preemptor; on success the solution's operations stay in ``stmt``."""
        tasks = self.ssn.tasks_to_allocate(self.preemptor)
        if not tasks:
            return None
        base = stmt.checkpoint()
        if SHORTCUTS.warm_simulations and len(tasks) > 1 and not self.moves_only and exact_accounting(self.ssn):
            nodes = self.ssn.nodes
            self._start_free = nodes.idle[GPU] + nodes.releasing[GPU]
            self._start_feasible = {True: (self._start_free + nodes.shared.free_sum) > 1e-9,
                                    False: np.ones(len(nodes), dtype=np.bool_)}
            self._warm = WarmEvictions(self.ssn, stmt, base)
            self.sequence.before_pop = self._restore_for_pop
        try:
            return self._run(stmt, base, tasks)
        finally:
            if self._warm is not None:
                self._warm = None
                self.sequence.before_pop = None

    def _run(self, stmt: Statement, base: int, tasks: list[TaskInfo]) -> Scenario | None:
        recorded: list[TaskInfo] = []
        found: Scenario | None = None
        for k in range(1, len(tasks) + 1):
            if found is not None:
                if self._warm is not None:
                    self._warm.settle()  # the evictions stay
                else:
                    stmt.rollback(base)
            found = self._solve_partial(stmt, tasks[:k], recorded)
            if found is None:
                stmt.rollback(base)
                return None
            recorded = found.victim_tasks
        if found is not None:
            # eviction messages describe the cluster as it was before this job's evictions: compute them
            # on the untouched state, then replay the (deterministic) winning simulation
            evict, feasible = self._last
            victims = {t.job.key: t.job for t in found.victim_tasks if t.job is not None}
            stmt.rollback(base)
            if self._warm is not None:
                self._warm = None  # (rolled back) the replay simulates from scratch
                self.sequence.before_pop = None
            messages = {t.uid: self.message(t, self.preemptor) for j in victims.values() for t in j.tasks
                        if t.is_active_allocated}
            found = self._simulate(stmt, tasks, evict, feasible)
            assert found is not None, "replaying the winning simulation must give the same solution"
            stmt.describe_evictions(lambda task: messages.get(task.uid) or self.message(task, self.preemptor))
        return found


def _increments(nodes_: IntArray, gpus: FloatArray, free: FloatArray, in_mask: BoolArray, schedulable: BoolArray,
                g: float) -> tuple[FloatArray, FloatArray]:
    """Taking the victim entries (``nodes_``, ``gpus``: placed ones, in chunk order) one by one onto ``free``:
    what each adds to the filter's g-sized slots and to its GPUs (``in_mask``: nodes counted before)."""
    order = np.argsort(nodes_, kind="stable")
    sn, sg = nodes_[order], gpus[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sn)) + 1]
    sizes = np.diff(np.r_[starts, len(sn)])
    cs = np.cumsum(sg)
    within = cs - np.repeat(cs[starts] - sg[starts], sizes)
    base = free[sn]
    counted = in_mask[sn]
    new_free = base + within
    ok = schedulable[sn]
    new_slots = np.where(ok, np.floor(new_free / g + 1e-9), 0.0)
    prev_slots = np.empty_like(new_slots)
    prev_slots[1:] = new_slots[:-1]
    first_of_group = np.zeros(len(sn), dtype=np.bool_)
    first_of_group[starts] = True
    prev_slots[first_of_group] = np.where(counted[first_of_group], np.floor(base[first_of_group] / g + 1e-9), 0.0)
    new_sum = np.where(ok, new_free, 0.0)
    prev_sum = np.empty_like(new_sum)
    prev_sum[1:] = new_sum[:-1]
    prev_sum[first_of_group] = np.where(counted[first_of_group], base[first_of_group], 0.0)
    d_slots = np.empty(len(sn))
    d_sum = np.empty(len(sn))
    d_slots[order] = new_slots - prev_slots
    d_sum[order] = new_sum - prev_sum
    return d_slots, d_sum


def _walk_key(tasks: list[TaskInfo]) -> tuple[object, ...]:
    """Everything the scenario filters read of the preemptor's tasks (their static predicates go by the
    scheduling signature)."""
    return tuple((t.signature, float(t.req[GPU]), t.gpu.kind, t.gpu.count, t.gpu.portion, t.gpu.memory_mib,
                  claims_key(t)) for t in tasks)


def _left_evicted(job: PodGroupInfo, revivable: set[str]) -> bool:
    """A pod of ``job`` evicted by this simulation is still evicted."""
    return any(t.status is TaskStatus.RELEASING and t.uid in revivable for t in job.tasks)


class MovePacking:
    """A necessary condition for a moves-only scenario: P's pods and every victim placed again.

    Items are the whole-GPU pods (P's tasks and the victims), bins the nodes with the whole devices each
    could offer: ``cap`` = whole devices idle or releasing (a shared device is not whole), plus the devices
    the scenario's victims hold there (an upper bound: a fractional victim frees its device only with its
    sharers). For every item size ``s``, the items of at least ``s`` GPUs must fit in count (``sum floor(cap
    / s)`` slots) and in total (the GPUs of the nodes with ``cap >= s``). P's single-device fractions add one
    item of 1 GPU when no shared device anywhere has room for them and no fractional victim frees some: they
    then open a whole device. Packing ignores CPU, memory, predicates and queue limits, so it never rejects a
    scenario the simulation could solve; it rejects the scenarios whose moved pods have nowhere to go.
    Built once per solver run: every simulation starts from (and rolls back to) the same state.
    """

    __slots__ = ("_base", "_shares", "cap", "ssn")

    def __init__(self, ssn: Session) -> None:
        nodes = ssn.nodes
        self.ssn = ssn
        self.cap: npt.NDArray[np.float64] = nodes.idle[GPU] + nodes.releasing[GPU]
        self._base: dict[float, tuple[float, float]] = {}
        self._shares: dict[tuple[object, ...], bool] = {}

    def _bins(self, s: float) -> tuple[float, float]:
        """(slots of s GPUs, GPUs on nodes with at least s) over the whole cluster as it stands."""
        known = self._base.get(s)
        if known is None:
            cap = self.cap
            known = (float(np.floor(cap / s + 1e-9).sum()), float(cap[cap + 1e-9 >= s].sum()))
            self._base[s] = known
        return known

    def _room_on_shared(self, task: TaskInfo) -> bool:
        """Some shared device (on any node) has room for the fraction as things stand."""
        key = (task.gpu.kind, task.gpu.portion, task.gpu.memory_mib)
        known = self._shares.get(key)
        if known is None:
            shared = self.ssn.nodes.shared
            known = self._shares[key] = bool((shared.free_pipe + 1e-9 >= shared.need(task)).any())
        return known

    def could_pack(self, tasks: list[TaskInfo], evict: list[TaskInfo]) -> bool:
        sizes = [float(t.req[GPU]) for t in tasks if t.req[GPU] > 0]
        extra: dict[int, float] = {}
        frees_shared = False
        for t in evict:
            if t.node >= 0:
                extra[t.node] = extra.get(t.node, 0.0) + t.devices
            if t.req[GPU] > 0:
                sizes.append(float(t.req[GPU]))
            frees_shared = frees_shared or t.gpu.shared
        fractions = [t for t in tasks if t.gpu.shared and t.gpu.count == 1]
        if fractions and not frees_shared and not any(self._room_on_shared(t) for t in fractions):
            sizes.append(1.0)  # they open a whole device (all of them may share that one)
        if not sizes:
            return True
        sizes.sort(reverse=True)
        cap = self.cap
        count = 0
        total = 0.0
        i = 0
        while i < len(sizes):
            s = sizes[i]
            while i < len(sizes) and sizes[i] == s:
                count += 1
                total += s
                i += 1
            slots, room = self._bins(s)
            for node, more in extra.items():
                before, after = float(cap[node]), float(cap[node]) + more
                slots += np.floor(after / s + 1e-9) - np.floor(before / s + 1e-9)
                room += (after if after + 1e-9 >= s else 0.0) - (before if before + 1e-9 >= s else 0.0)
            if count > slots + 1e-9 or total > room + 1e-9:
                return False
        return True
