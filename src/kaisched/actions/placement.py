"""Placing a job's tasks on nodes: KAI's AllocateJob (spec 4.8), shared by all actions.

For one task, every node is checked at once: predicates give per-node reason codes, the resource fit
is a vectorised comparison against idle (+ releasing) resources, the plugins' scores are summed over
the fitting nodes and the best one wins (ties: smaller node name, i.e. smaller index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from kaisched.actions.batched import batched_node
from kaisched.framework.plugin import NodeCandidates
from kaisched.framework.result import BELOW_MIN_MEMBER, FITS_NOWHERE, TOPOLOGY
from kaisched.framework.session import Session, TopologySubsets
from kaisched.framework.statement import Statement
from kaisched.k8s.objects import TopologyConstraint
from kaisched.model.gpu import GpuKind
from kaisched.model.job import FitDetail, FitError, NodeReason, PodGroupInfo, SubGroupSet
from kaisched.model.node import IntArray, NodeTable, all_true
from kaisched.model.resources import CPU, GPU, MEMORY
from kaisched.model.task import TaskInfo

NO_NODES = "no nodes with enough resources were found"
#: nodes named per row of a fit error's breakdown (FitHistogram.breakdown)
NODES_NAMED = 5


def fit_error_histogram(ssn: Session, task: TaskInfo, codes: npt.NDArray[np.int32] | None) -> str:
    """KAI's per-task fit error: base text, then the sorted histogram of per-node reasons."""
    return FitHistogram.of(ssn, task, codes).text(ssn, task, codes)


Bits = npt.NDArray[np.integer[Any]]


class FitHistogram:
    """The counts behind a fit error: nodes per predicate reason, and per combination of lacking resources
    among the nodes every predicate passes (``bits``: per node, bit i set when it lacks ``names[i]``)."""

    __slots__ = ("bits", "by_code", "by_lacking", "names")

    def __init__(self, by_code: Counter[str], names: list[str], bits: Bits | None,
                 by_lacking: dict[int, int]) -> None:
        self.by_code, self.names, self.bits, self.by_lacking = by_code, names, bits, by_lacking

    @classmethod
    def of(cls, ssn: Session, task: TaskInfo, codes: npt.NDArray[np.int32] | None) -> FitHistogram:
        nodes = ssn.nodes
        by_code: Counter[str] = Counter()
        open_nodes = None  # the nodes every predicate passes (None: all)
        if codes is not None:
            per_code = np.bincount(codes, minlength=1)
            for code in np.flatnonzero(per_code[1:]).tolist():
                by_code[ssn.reason_text(code + 1)] += int(per_code[code + 1])
            open_nodes = codes == 0
        names: list[str] = []
        bits: Bits | None = None
        by_lacking: dict[int, int] = {}
        if len(nodes) and (open_nodes is None or open_nodes.any()):
            names = nodes.lacking_names(task)
            if names:
                # one bit per insufficient resource, counted per distinct combination
                every = nodes.lacking(task)
                if open_nodes is not None:
                    every[~open_nodes] = 0
                per_value = np.bincount(every, minlength=1)
                # kept as a byte per node when they fit (a histogram is kept per failed task shape)
                bits = every.astype(np.uint8) if len(names) <= 8 else every
                by_lacking = {v + 1: int(per_value[v + 1]) for v in np.flatnonzero(per_value[1:]).tolist()}
        return cls(by_code, names, bits, by_lacking)

    def recount(self, nodes: NodeTable, task: TaskInfo, at: IntArray) -> int:
        """Count the nodes ``at`` (every predicate passes them; their accounting changed) anew: how many of them
        now lack another combination of resources (0: the counts, hence the text, are as they were); -1, with
        nothing changed, when the task fits on one of them now."""
        new = nodes.lacking(task, at)
        if not np.logical_and.reduce(new):
            return -1
        bits, counts = self.bits, self.by_lacking
        if bits is None:  # nothing requested: the task would fit wherever the predicates pass
            return -1
        recounted = 0
        for j, old, value in zip(at.tolist(), bits[at].tolist(), new.tolist(), strict=True):
            if old == value:
                continue
            if old:
                left = counts[old] - 1
                if left:
                    counts[old] = left
                else:
                    del counts[old]
            counts[value] = counts.get(value, 0) + 1
            bits[j] = value
            recounted += 1
        return recounted

    def lacking_text(self, value: int) -> str:
        """KAI's fit-error text of the nodes lacking the combination of resources ``value`` (bits of ``names``)."""
        names = self.names
        what = ", ".join(names[i] for i in range(len(names)) if value >> i & 1)
        return f"node(s) didn't have enough resources: {what}"

    def breakdown(self, ssn: Session, codes: npt.NDArray[np.int32] | None) -> tuple[NodeReason, ...]:
        """The histogram as rows (most nodes first, then by text), each naming its first few nodes (for
        explanations: the counts are those of :meth:`text`)."""
        names = ssn.nodes.names
        rows: list[NodeReason] = []
        if codes is not None:
            for text, count in self.by_code.items():
                code = ssn.reason_code(text)
                at = np.flatnonzero(codes == code)[:NODES_NAMED].tolist()
                rows.append(NodeReason(text, count, tuple(names[j] for j in at), False))
        bits = self.bits
        for value, count in self.by_lacking.items():
            at = np.flatnonzero(bits == value)[:NODES_NAMED].tolist() if bits is not None else []
            rows.append(NodeReason(self.lacking_text(value), count, tuple(names[j] for j in at), True))
        rows.sort(key=lambda r: (-r.count, r.text))
        return tuple(rows)

    def text(self, ssn: Session, task: TaskInfo, codes: npt.NDArray[np.int32] | None) -> str:
        if len(ssn.nodes) == 0:
            return f"{NO_NODES}: 0 nodes in the cluster."
        reasons = Counter(self.by_code)
        for value, count in self.by_lacking.items():
            reasons[self.lacking_text(value)] += count
        parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
        text = f"{NO_NODES}: " + ". \n".join(parts) + "."
        if ssn.params.detailed_fit_errors:
            text += "".join(f"\n{line}" for line in _detailed_lines(ssn, task, codes))
        return text


def _detailed_lines(ssn: Session, task: TaskInfo, codes: npt.NDArray[np.int32] | None) -> list[str]:
    """--detailed-fit-errors: one line per node saying why the task does not fit there."""
    nodes = ssn.nodes
    res = ssn.snapshot.resources
    lines: list[str] = []
    shared_ok = nodes.shared_gpu_fit(task, with_releasing=True) if task.gpu.shared else None
    for j, name in enumerate(nodes.names):
        if codes is not None and codes[j]:
            lines.append(f"{name}: {ssn.reason_text(int(codes[j]))}")
            continue
        if shared_ok is not None and not shared_ok[j]:
            lines.append(f"{name}: {_shared_gpu_line(ssn, task, j)}")
            continue
        for r in np.flatnonzero(task.req > 0):
            avail = nodes.idle[r, j] + nodes.releasing[r, j]
            if avail < task.req[r] - 1e-9:
                cap = nodes.allocatable[r, j]
                lines.append(
                    f"{name}: Node didn't have enough resources: {res.describe(int(r))}, requested: "
                    f"{_show(int(r), float(task.req[r]))}, used: {_show(int(r), float(cap - avail))}, "
                    f"capacity: {_show(int(r), float(cap))}"
                )
                break
    return lines


def _shared_gpu_line(ssn: Session, task: TaskInfo, node: int) -> str:
    nodes = ssn.nodes
    mem = float(nodes.shared.mem[node])
    if task.gpu.kind is GpuKind.MEMORY:
        return (f"Each gpu on the node has a gpu memory capacity of {mem:g} Mib. {task.gpu.memory_mib:g} Mib of gpu "
                "memory has been requested.")
    free = int(max(float(nodes.idle[GPU, node] + nodes.releasing[GPU, node]), 0.0))
    return (f"Node didn't have enough resources: GPUs, requested: {task.gpu.describe()}, whole free GPUs: {free}, "
            f"capacity: {float(nodes.allocatable[GPU, node]):g}")


def _show(r: int, value: float) -> str:
    if r == CPU:
        return f"{value / 1000:g}"
    if r == MEMORY:
        return f"{value / 1e9:g}G"
    return f"{value:g}"


Codes = npt.NDArray[np.int32]


class FitFailure:
    """A task shape that found no node at ``version`` of the accounting: its fit error (``detail``; "" when not
    explained), the predicates' codes then and, when explained, the histogram the text was made from.
    ``recheckable``: codes and histogram kept (:func:`recheck_failure` may bring it up to date)."""

    __slots__ = ("breakdown", "codes", "detail", "histogram", "recheckable", "too_big", "version")

    def __init__(self, version: int, detail: str, codes: Codes | None, histogram: FitHistogram | None,
                 breakdown: tuple[NodeReason, ...] = (), too_big: bool = False) -> None:
        self.version, self.detail, self.codes, self.histogram = version, detail, codes, histogram
        self.breakdown = breakdown  # the histogram's rows (explained failures only)
        self.too_big = too_big  # larger than any node (a pre-predicate said so)
        self.recheckable = True

    def forget_arrays(self) -> None:
        """Keep the fit error only (a node-sized array or two less): answered while nothing changes."""
        self.codes = self.histogram = None
        self.recheckable = False


#: failures of this many task shapes per session keep what a recheck needs (their per-node arrays: some 25 KB
#: each at 5,000 nodes); the others are remembered as their fit error only
RECHECKABLE_FAILURES = 1024


def place_task(
    ssn: Session, task: TaskInfo, stmt: Statement, *, pipeline_only: bool, explain: bool = True,
    node_mask: npt.NDArray[np.bool_] | None = None,
) -> str | None:
    """Place one task; returns None on success or the fit-error text ("" when ``explain`` is off)."""
    failure = try_place_task(ssn, task, stmt, pipeline_only=pipeline_only, explain=explain, node_mask=node_mask)
    return None if failure is None else failure.detail


def try_place_task(
    ssn: Session, task: TaskInfo, stmt: Statement, *, pipeline_only: bool, explain: bool = True,
    node_mask: npt.NDArray[np.bool_] | None = None,
) -> FitFailure | None:
    """Place one task; returns None on success or its :class:`FitFailure` (``detail``: the fit-error text, ""
    when ``explain`` is off; ``breakdown``: the histogram's rows when explained).

    A task that failed while nothing changed since an identical task failed (same constraints and
    requests — :func:`failure_key` —, no placement or eviction in between) fails again without being
    evaluated; after a few changes, only the nodes they touched are evaluated again (:func:`recheck_failure`)."""
    for pre in ssn.pre_predicates:
        err = pre(task)
        if err is not None:
            return FitFailure(ssn.nodes.version, err.message, None, None, too_big=True)
    cache_key = failure_key(ssn, task, pipeline_only, explain) if node_mask is None else None
    known: FitFailure | None = None
    if cache_key is not None:
        known = cast(FitFailure | None, ssn.fit_failures.get(cache_key))
        if known is not None and (known.version == ssn.nodes.version or recheck_failure(ssn, task, known)):
            return known
    failure = _place(ssn, task, stmt, pipeline_only=pipeline_only, explain=explain, node_mask=node_mask)
    if failure is None:
        return None
    if cache_key is not None:
        failures = ssn.fit_failures
        # the first RECHECKABLE_FAILURES shapes of the session keep their arrays, the others never do
        if not known.recheckable if known is not None else len(failures) >= RECHECKABLE_FAILURES:
            failure.forget_arrays()
        failures[cache_key] = failure
    return failure


def recheck_failure(ssn: Session, task: TaskInfo, known: FitFailure) -> bool:
    """Whether a task of a shape that failed at ``known.version`` still fits nowhere, evaluating only the nodes
    whose accounting changed since (a node's fit depends on its own accounting only) when the predicates
    answer as they did; ``known`` is brought up to date then (its histogram counted anew on those nodes).
    False when it may fit now, or when too much changed to tell cheaply: the caller evaluates every node."""
    nodes = ssn.nodes
    histogram = known.histogram
    if not known.recheckable or (histogram is not None and ssn.params.detailed_fit_errors):
        return False  # (detailed fit errors: a line per node, evaluated anew)
    changed = nodes.changed_since(known.version, limit=max(len(nodes) // RECHECK_SHARE, RECHECK_LEAST))
    if changed is None:
        return False
    codes = predicate_codes(ssn, task)
    old = known.codes
    if codes is not old and (codes is None or old is None or not np.array_equal(codes, old)):
        return False
    at = changed if codes is None else changed[codes[changed] == 0]
    if len(at):
        if histogram is None:
            if np.logical_or.reduce(nodes.fits_task_at(task, at, with_releasing=True)):
                return False
        else:
            recounted = histogram.recount(nodes, task, at)
            if recounted < 0:
                return False
            if recounted:  # (the text is made of the counts only)
                known.detail = histogram.text(ssn, task, codes)
                known.breakdown = histogram.breakdown(ssn, codes)
    known.version = nodes.version
    return True


#: a failure is checked again on the nodes changed since while there were at most nodes / RECHECK_SHARE changes
#: (at least RECHECK_LEAST); past that, every node is evaluated again
RECHECK_SHARE = 16
RECHECK_LEAST = 32


def failure_key(ssn: Session, task: TaskInfo, pipeline_only: bool, explain: bool) -> tuple[int, bool, bool]:
    """Everything a task's fit depends on besides the cluster state (which ``nodes.version`` stands for): the
    task's part numbered once per session (tasks alike share the number), so the key hashes at once.

    The queue and the job's preemptibility are part of it only for a gpu-memory task: the one predicate that
    reads them is the per-node capacity check of such a task (``queue_capacity``); any other task fails or
    fits alike in every queue (the job-level capacity check comes before, per job). The pod's labels and
    namespace are part of it only when it has affinity terms of its own or some pod of the session has a
    required anti-affinity (``Session.labels_constrain_placement``): the inter-pod affinity predicate is the
    one that reads them (per-job labels would otherwise make every job a shape of its own). Plugins whose predicates
    tell tasks of one shape apart add what does (``Session.fit_key_parts``: the nominatednode plugin's claims)."""
    fit_id = task.fit_id
    if fit_id < 0:
        job = task.job
        per_queue = job is not None and task.gpu.kind is GpuKind.MEMORY
        affinity = task.pod.affinity
        by_labels = affinity is not None or ssn.labels_constrain_placement
        spec: tuple[object, ...] = (
            task.signature, task.gpu, task.req.tobytes(), task.host_ports, repr(affinity),
            task.namespace if by_labels else "", tuple(sorted(task.labels.items())) if by_labels else (),
            job.queue if per_queue and job else "", job.preemptible if per_queue and job else True, claims_key(task))
        parts = ssn.fit_key_parts
        if parts:
            spec = (*spec, *[part(task) for part in parts])
        ids = ssn.fit_ids
        fit_id = task.fit_id = ids.setdefault(spec, len(ids))
    return (fit_id, pipeline_only, explain)


def claims_key(task: TaskInfo) -> tuple[object, ...]:
    """What a task's DRA claims add to its shape: each claim itself when it is shared or already allocated (it pins
    its pods), otherwise how its pod names it and what it asks (claims made from one template for pods alike fit
    alike, and their fit error names the template)."""
    if not task.claims:
        return ()
    return tuple(info.key if info.shared or info.allocation is not None or info.reserved
                 else (info.origin, repr(info.claim.spec)) for info in task.claims)


def predicate_codes(ssn: Session, task: TaskInfo) -> Codes | None:
    """Per node, the first failing predicate's reason code (0: every predicate passes); None: all pass."""
    codes = None
    for predicate in ssn.predicates:
        c = predicate(task)
        if c is None:
            continue
        codes = c.copy() if codes is None else np.where(codes == 0, c, codes)
    return codes


def _place(
    ssn: Session, task: TaskInfo, stmt: Statement, *, pipeline_only: bool, explain: bool,
    node_mask: npt.NDArray[np.bool_] | None,
) -> FitFailure | None:
    nodes = ssn.nodes
    if node_mask is None:  # tasks alike: the node from the shape's kept ranking (actions.batched), when it decides
        batched = batched_node(ssn, task, failure_key(ssn, task, pipeline_only, explain)[0])
        if batched is not None and batched >= 0:
            idle_fit = not nodes.any_releasing or bool(
                nodes.fits_task_at(task, np.array([batched]), with_releasing=False)[0])
            _take(ssn, task, stmt, batched, idle_fit, pipeline_only)
            return None
    codes = predicate_codes(ssn, task)
    if node_mask is not None and np.count_nonzero(node_mask) * 4 < len(nodes):  # a few nodes (a simulation's)
        allowed = np.flatnonzero(node_mask)
        if codes is not None:
            allowed = allowed[codes[allowed] == 0]
        indices = allowed[nodes.fits_task_at(task, allowed, with_releasing=True)]
    else:
        fit = nodes.fits_task(task, with_releasing=True)
        if node_mask is not None:
            fit &= node_mask
        if codes is not None:
            fit &= codes == 0
        ranked = ssn.ranked_node(task, fit)  # one scorer decides alone: its first node, without scoring them all
        if ranked is not None and ranked >= 0:
            idle_fit = not nodes.any_releasing or bool(
                nodes.fits_task_at(task, np.array([ranked]), with_releasing=False)[0])
            _take(ssn, task, stmt, ranked, idle_fit, pipeline_only)
            return None
        indices = _NO_NODES if ranked is not None else fit.nonzero()[0]
    if len(indices) == 0:
        if not explain:
            return FitFailure(nodes.version, "", codes, None)
        histogram = FitHistogram.of(ssn, task, codes)
        return FitFailure(nodes.version, histogram.text(ssn, task, codes), codes, histogram,
                          histogram.breakdown(ssn, codes))
    if nodes.any_releasing:
        cands = NodeCandidates(indices, nodes.fits_task_at(task, indices, with_releasing=False))
    else:  # nothing releasing anywhere: every candidate fits on idle resources
        cands = NodeCandidates(indices, all_true(len(indices)), True)
    fits_idle = cands.fits_idle
    if len(indices) == 1:
        best = 0
    else:
        scores = None  # (0 + the first score is that score: the sum starts there)
        for scorer in ssn.node_scorers:
            score = scorer(task, cands)
            if score is not None:
                scores = score if scores is None else scores + score
        best = int(scores.argmax()) if scores is not None else 0  # first maximum: the smallest node name
    _take(ssn, task, stmt, int(indices[best]), bool(fits_idle[best]), pipeline_only)
    return None


_NO_NODES: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)


def _take(ssn: Session, task: TaskInfo, stmt: Statement, node: int, fits_idle: bool, pipeline_only: bool) -> None:
    """Allocate the task on ``node`` (pipeline it when it fits there only once releasing resources are freed,
    or when asked to), with its shared devices if any.

    A shared task's devices are chosen by the GPU order alone, as KAI does (spec 7.3): a shared GPU whose other
    share is being released outranks an idle GPU under gpupack, and the task is then pipelined onto it. (The
    model's ``pipeline_only`` there only stops preferring devices usable now; whether to pipeline is decided
    here.)"""
    nodes = ssn.nodes
    if task.gpu.shared:
        choice = nodes.choose_gpus(task, node, ssn.gpu_order_fns, pipeline_only=True,
                                   device_scorer=ssn.gpu_device_scorer)
        if choice is None:  # the fit check said yes: cannot happen unless the model is inconsistent
            raise AssertionError(f"no GPU devices for {task.key} on {nodes.names[node]} after a fit")
        if choice.immediate and fits_idle and not pipeline_only:
            stmt.allocate(task, node, choice.groups)
        else:
            stmt.pipeline(task, node, choice.groups)
        return
    if fits_idle and not pipeline_only:
        stmt.allocate(task, node)
    else:
        stmt.pipeline(task, node)


def gang_message(job: PodGroupInfo, task: TaskInfo, placed: list[TaskInfo], detail: str) -> str:
    """KAI's job fit error for a task that found no node (spec 4.8).

    ``placed`` are the tasks placed earlier in this attempt; the count is those of the task's pod set.
    """
    ps = job.pod_sets[task.pod_set]
    found, _ = gang_progress(job, task, placed)
    if found < 0:
        return f"Resources were not found for pod {task.key} due to: {detail}"
    if len(job.pod_sets) == 1:
        return (f"Resources were found for {found} pods while {ps.min_available} are required for gang "
                f"scheduling. Additional pods cannot be scheduled due to: {detail}")
    return (f"Resources were found for {found} pods from all sub-groups while sub-group {ps.name} requires "
            f"{ps.min_available} pods for gang scheduling. Additional pods cannot be scheduled in this sub-group "
            f"due to: {detail}")


def gang_progress(job: PodGroupInfo, task: TaskInfo, placed: list[TaskInfo]) -> tuple[int, int]:
    """(pods of the task's pod set placed in this attempt, the pod set's minAvailable) when the task's failure
    leaves its gang short (KAI's gang text); (-1, -1) when the job is no gang or its pod set is satisfied."""
    ps = job.pod_sets[task.pod_set]
    is_gang = any(p.min_available > 1 for p in job.pod_sets.values())
    if not is_gang or ps.active_used >= ps.min_available:
        return -1, -1
    return sum(1 for t in placed if t.pod_set == ps.name), ps.min_available


def task_fit_error(ssn: Session, job: PodGroupInfo, task: TaskInfo, placed: list[TaskInfo], failure: FitFailure,
                   code: str = "") -> FitError:
    """The job's fit error for ``task`` finding no node (KAI's text, spec 4.8) with its reason code and detail:
    the histogram's rows, the gang's progress. ``code``: given (topology), else below-min-member for a gang left
    short, fits-nowhere otherwise."""
    found, required = gang_progress(job, task, placed)
    detail = FitDetail(task.key, len(ssn.nodes), failure.breakdown, found, required, too_big=failure.too_big)
    if not code:
        code = BELOW_MIN_MEMBER if found > 0 else FITS_NOWHERE
    return FitError("PodSchedulingErrors", gang_message(job, task, placed, failure.detail), code, detail)


def allocate_job(
    ssn: Session, job: PodGroupInfo, stmt: Statement, *, pipeline_only: bool = False, explain: bool = True,
    tasks: list[TaskInfo] | None = None, node_mask: npt.NDArray[np.bool_] | None = None,
) -> bool:
    """Try to place the job's next tasks (the unsatisfied gang, or one elastic pod) within ``stmt``.

    On failure the job's fit error is recorded and the statement is rolled back to where it was.
    """
    if tasks is None:
        tasks = ssn.tasks_to_allocate(job)
    if not tasks:
        return False
    if ssn.job_capacity_check is not None:
        err = ssn.job_capacity_check(job, tasks)
        if err is not None:
            if explain:
                job.fit_errors = [err]
            return False
    checkpoint = stmt.checkpoint()
    if ssn.subset_nodes is not None and job.has_topology:
        placer = _TopologyPlacer(ssn, job, stmt, tasks, pipeline_only=pipeline_only, explain=explain)
        if placer.place_set(job.root, node_mask if node_mask is not None else np.ones(len(ssn.nodes), np.bool_)):
            if explain:
                job.fit_errors = []
            return True
        stmt.rollback(checkpoint)
        if explain:
            job.fit_errors = [placer.error or FitError("PodSchedulingErrors", "Unable to schedule pod", TOPOLOGY)]
        return False
    for i, task in enumerate(tasks):
        failure = try_place_task(ssn, task, stmt, pipeline_only=pipeline_only, explain=explain, node_mask=node_mask)
        if failure is not None:
            stmt.rollback(checkpoint)
            if explain:
                job.fit_errors = [task_fit_error(ssn, job, task, tasks[:i], failure)]
            return False
    if explain:
        job.fit_errors = []
    return True


class _TopologyPlacer:
    """AllocateJob's recursion over the subgroup tree (spec 4.8 step 4): each (sub)group with a topology
    constraint narrows the nodes to the sets its ``subset_nodes`` gives, tried in order; inside a set,
    every child subgroup set is placed (by name), then every pod set (in pod-set order). The first set
    where everything below fits wins; a failure rolls that set's placements back."""

    def __init__(self, ssn: Session, job: PodGroupInfo, stmt: Statement, tasks: list[TaskInfo], *,
                 pipeline_only: bool, explain: bool) -> None:
        self.ssn, self.job, self.stmt = ssn, job, stmt
        self.pipeline_only, self.explain = pipeline_only, explain
        self.by_pod_set: dict[str, list[TaskInfo]] = {}
        for t in tasks:
            self.by_pod_set.setdefault(t.pod_set, []).append(t)
        self.rank = {ps.name: i for i, ps in enumerate(ssn.pod_set_order(job))}
        self.placed: list[TaskInfo] = []
        self.error: FitError | None = None

    def _subsets(self, name: str, constraint: TopologyConstraint | None, tasks: list[TaskInfo],
                 mask: npt.NDArray[np.bool_]) -> TopologySubsets | None:
        if constraint is None or self.ssn.subset_nodes is None:
            return [(mask, None)]
        subsets = self.ssn.subset_nodes(self.job, name, constraint, tasks, mask)
        if isinstance(subsets, FitError):
            if not subsets.code:
                subsets.code = TOPOLOGY
            self.error = subsets
            return None
        return subsets

    def _try(self, subsets: TopologySubsets, place: Callable[[npt.NDArray[np.bool_]], bool]) -> bool:
        ssn, stmt = self.ssn, self.stmt
        for mask, scores in subsets:
            checkpoint, placed = stmt.checkpoint(), len(self.placed)
            inherited = ssn.topology_scores
            if scores is not None:
                ssn.topology_scores = scores
            try:
                ok = place(mask)
            finally:
                ssn.topology_scores = inherited
            if ok:
                return True
            stmt.rollback(checkpoint)
            del self.placed[placed:]
        return False

    def place_set(self, node: SubGroupSet, mask: npt.NDArray[np.bool_]) -> bool:
        tasks = [t for name in node.all_pod_sets() for t in self.by_pod_set.get(name, ())]
        if not tasks:
            return True
        subsets = self._subsets(node.name, node.constraint, tasks, mask)
        if subsets is None:
            return False
        children = sorted(node.children, key=lambda c: c.name)
        pod_sets = sorted(node.pod_sets, key=lambda n: (self.rank.get(n, len(self.rank)), n))

        def place(m: npt.NDArray[np.bool_]) -> bool:
            return all(self.place_set(c, m) for c in children) and all(self.place_pod_set(n, m) for n in pod_sets)

        return self._try(subsets, place)

    def place_pod_set(self, name: str, mask: npt.NDArray[np.bool_]) -> bool:
        tasks = self.by_pod_set.get(name, [])
        if not tasks:
            return True
        subsets = self._subsets(name, self.job.pod_sets[name].constraint, tasks, mask)
        if subsets is None:
            return False

        def place(m: npt.NDArray[np.bool_]) -> bool:
            for task in tasks:
                failure = try_place_task(self.ssn, task, self.stmt, pipeline_only=self.pipeline_only,
                                         explain=self.explain, node_mask=m)
                if failure is not None:
                    if self.explain:
                        self.error = task_fit_error(self.ssn, self.job, task, self.placed, failure, TOPOLOGY)
                    return False
                self.placed.append(task)
            return True

        return self._try(subsets, place)
