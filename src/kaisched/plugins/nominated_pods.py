"""Nomination claims (kaisched; docs/evictions.md, "A preemptor keeps what its victims free"): a pod pipelined onto a
node keeps a claim on it in the next cycle, as kube-scheduler's nominated pods do.

KAI keeps no pipelined placement from one cycle to the next: a preemptor pipelined onto the room its victims free
is pending again in the next cycle, and that cycle's allocate may give the room to another queue's job (or to one
of the victims themselves), after which the preemptor evicts again, sometimes the very pod it already evicted once.
kaisched carries the placement over on the pod, in ``status.nominatedNodeName``:

* **Nomination.** Every pod a cycle pipelines (a reclaim, preempt or consolidation preemptor, a victim moved by
  one, a pod allocate pipelines onto releasing resources) is nominated to its node: the cycle reports it in
  :attr:`~kaisched.framework.result.CycleResult.nominations`; the embedded cluster sets it on the pod, Kubernetes
  mode patches the pod's status (only when it changes). A pod of this scheduler that holds a nomination the cycle
  does not renew (bound, pipelined elsewhere, or not placed at all) has it cleared in the same way.
* **The claim.** In the next cycle, while the nominated pod is pending (still unplaced in the session), the
  resources it asks are taken on its node for every other pod, except the pods that outrank it: pods of jobs of its
  own queue with a strictly higher priority (ordered before it: job order is priority first) that could preempt it
  once it runs (spec 4.12: its job preemptible, and not protected then by its queue's preempt min-runtime); a pod
  that was running at the start of the cycle (a victim an eviction scenario puts back or moves) outranks no claim,
  or a consolidation could evict it, pipeline its preemptor into its place and put it back on the claimed room. This is
  kube-scheduler's rule (nominated pods count for pods of an equal or lower priority) with KAI's reading of
  priority, which ranks jobs within a queue only: across queues the right to take resources is the fair share's
  (reclaim), so a pod of another queue, whatever its priority and however allocate orders its queue, respects the
  claim. (Letting a higher-priority pod of the victims' queue take the claimed room hands a reclaim back to the
  queue it was taken from, cycle after cycle; letting one take the room of a nominee it could not preempt once
  bound makes the nominee evict anew: random clusters found both.) Every other pod, the nominee's gang mates
  included (they have claims of their own), sees the node without the claimed resources: on a node where it would
  fit only with them, it does not fit, with the reason :data:`CLAIMED`. The nominated pod itself sees its own claim
  free, and it tries its nominated node first (``nominatednode``'s score, KAI's). Once the pod is placed in the
  session (allocated, pipelined, anywhere) its claim is gone; undone placements give it back.
* **Its end.** A claim lasts for the one cycle after the one that nominated the pod; only pipelining the pod onto
  that node again renews it (as KAI pipelines a pod every cycle while its victims terminate). So it ends when the
  pod is bound or deleted, when its node is gone, unschedulable or no longer admits the pod (its static
  predicates, or requests larger than the node), when the pod no longer fits there (outranked, or the node's pods
  changed), and in any case one cycle after the last decision that placed the pod there.

What a claim takes: the pod's request vector (CPU, memory, whole GPUs, pods, extended resources and the whole GPUs
of its DRA claims); a fractional pod's share of a GPU is not claimed (its CPU and memory are), and a fractional pod
respects claimed whole GPUs only as new devices (it may still join a shared device on the node).

Determinism: nominees are taken in the snapshot's (namespace, name) order, per node in node-index (name) order; the
claimed amounts are summed in that order. Everything the predicate reads is the session's state, so rolled back
statements, warm simulations and cached fit failures see the same answers: the tasks that see the same claims
share a fit shape (``Session.fit_key_parts``: the nominee itself, and which claims of its queue it outranks).

For the proofs of failure (kaisched.actions.proofs), a node where a task's claims exceed what the node has free on
a resource the task asks for is closed to it outright (a victim coming back there could be refused), so a proof
never assumes a victim comes back where a claim could keep it out.
"""

from __future__ import annotations

import bisect
from datetime import timedelta

import numpy as np
import numpy.typing as npt

from kaisched.framework.result import Nomination
from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo
from kaisched.model.resources import EPSILON, GPU, Vector
from kaisched.model.status import ALLOCATED, TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.minruntime import MinRuntimePlugin

Codes = npt.NDArray[np.int32]
IntArray = npt.NDArray[np.int64]

#: the fit-error reason of a node whose free resources are claimed by pods nominated to it
CLAIMED = "node(s) had resources claimed by pods nominated to them"
#: the tolerance of the resource comparisons (NodeTable.fits: request less 1e-9)
TOLERANCE = 1e-9


def outranks(task: TaskInfo, nominee: TaskInfo) -> bool:
    """``task``'s job is in the nominee's queue with a strictly higher priority (it is ordered before the nominee's:
    job order is priority first). It may use the nominee's claim when the nominee could also be preempted once it
    runs (:meth:`NominationClaims.may_take`)."""
    job, other = task.job, nominee.job
    return job is not None and other is not None and job.queue == other.queue and job.priority > other.priority


def preempt_protected_once_bound(ssn: Session, job: PodGroupInfo) -> bool:
    """The job would be protected from preempt right after the nominee's bind: its queue's preempt min-runtime (the
    ``minruntime`` plugin's, when it is configured) is not 0 and the bind starts the job (none of its pods allocated:
    its last-start time is set then) or it started less than that long ago."""
    plugin = next((p for p in ssn.plugins if isinstance(p, MinRuntimePlugin)), None)
    if plugin is None:
        return False
    runtime = plugin.resolver.preempt(job.queue)
    if runtime <= timedelta(0):
        return False
    if not any(t.status in ALLOCATED for t in job.tasks):
        return True
    return job.last_start is not None and ssn.now < job.last_start + runtime


class NominationClaims:
    """The claims of one session's nominated pods (installed by the ``nominatednode`` plugin)."""

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.nodes = ssn.nodes
        # pending pods of our jobs nominated to a node of the session (validated on first use: _settle)
        self._candidates: list[tuple[int, TaskInfo]] = []
        by_name = ssn.nodes.by_name
        for task in ssn.snapshot.nominated:
            if task.initial_status is TaskStatus.PENDING and task.job is not None:
                node = by_name.get(task.pod.nominated_node_name, -1)
                if node >= 0:
                    self._candidates.append((node, task))
        self._settled = False
        self.by_node: list[tuple[int, list[TaskInfo]]] = []  # node -> its nominees, by node index
        self.nominees: dict[str, int] = {}  # uid -> its node
        self._priorities: dict[str, list[int]] = {}  # queue -> its outrankable nominees' priorities, ascending
        self.outrankable: set[str] = set()  # uids of the nominees a higher-priority pod of their queue may take from
        self._rows: dict[int, tuple[Vector, IntArray]] = {}  # id of a request vector -> (it, its requested rows)
        self.code = 0
        if self._candidates:
            ssn.predicates.append(self.predicate)
            ssn.fit_key_parts.append(self.fit_class)

    def _settle(self) -> None:
        """Keep the nominations that still admit their pod for good: a schedulable node, requests it can hold, and
        the pod's static predicates (selector, affinity, taints, node conditions) passing there."""
        if self._settled:
            return
        self._settled = True
        nodes = self.nodes
        by_node: dict[int, list[TaskInfo]] = {}
        for node, task in self._candidates:
            if not nodes.schedulable[node]:
                continue
            rows = self._requested(task.req)
            if bool((nodes.allocatable[rows, node] < task.req[rows] - TOLERANCE).any()):
                continue
            if not self._admitted(task, node):
                continue
            by_node.setdefault(node, []).append(task)
            self.nominees[task.uid] = node
        self.by_node = sorted(by_node.items())
        priorities: dict[str, list[int]] = {}
        protected: dict[str, bool] = {}  # job key -> preempt_protected_once_bound
        for _, tasks in self.by_node:
            for task in tasks:
                job = task.job
                assert job is not None
                if not job.preemptible:
                    continue
                known = protected.get(job.key)
                if known is None:
                    known = protected[job.key] = preempt_protected_once_bound(self.ssn, job)
                if not known:
                    self.outrankable.add(task.uid)
                    priorities.setdefault(job.queue, []).append(job.priority)
        for values in priorities.values():
            values.sort()
        self._priorities = priorities
        if self.nominees:
            self.code = self.ssn.reason_code(CLAIMED)

    def _admitted(self, task: TaskInfo, node: int) -> bool:
        """The task's static predicates pass on the node."""
        for predicate in self.ssn.static_predicates:
            codes = predicate(task)
            if codes is not None and int(codes[node]) != 0:
                return False
        return True

    def _requested(self, req: Vector) -> IntArray:
        known = self._rows.get(id(req))
        if known is not None and known[0] is req:
            return known[1]
        rows: IntArray = np.flatnonzero(req > 0)
        self._rows[id(req)] = (req, rows)  # (the vector kept: its id stays its)
        return rows

    # ---- hooks ---------------------------------------------------------------------------------------------
    def may_take(self, task: TaskInfo, nominee: TaskInfo) -> bool:
        """``task`` may use ``nominee``'s claim: it outranks the nominee, which could be preempted once bound
        (preemptible, and not protected by a preempt min-runtime then)."""
        self._settle()
        return nominee.uid in self.outrankable and outranks(task, nominee)

    @staticmethod
    def may_outrank(task: TaskInfo) -> bool:
        """A pod pending at the start of the cycle. A pod that was running then is placed only as a victim put back
        or moved by an eviction scenario, and it respects every claim: the room it would take from an outranked
        nominee is the room its preemptor took from it (a consolidation that evicts it, pipelines the preemptor into
        its place and puts it back on the claimed room hands the claim to the preemptor)."""
        return task.initial_status is TaskStatus.PENDING

    def fit_class(self, task: TaskInfo) -> object:
        """What tells apart tasks of one shape for the predicate: the nominee itself (its own claim is free to it),
        and how many claims of its queue it outranks (those of lower priority: a prefix of the queue's by priority)."""
        self._settle()
        own = task.uid if task.uid in self.nominees else ""
        job = task.job
        if job is None or not self.may_outrank(task):
            return (own, "", 0)
        priorities = self._priorities.get(job.queue)
        outranked = bisect.bisect_left(priorities, job.priority) if priorities else 0
        return (own, job.queue if outranked else "", outranked)

    def predicate(self, task: TaskInfo) -> Codes | None:
        """Per node, :data:`CLAIMED` where the claims the task must respect keep it out: it fits on the node's
        free resources (idle and releasing) but not once the claims are taken, or the claims exceed what the node
        has free of a resource it asks for."""
        self._settle()
        if not self.by_node:
            return None
        codes: Codes | None = None
        for node, nominees in self.by_node:
            reserved: Vector | None = None
            for nominee in nominees:
                if nominee is task or nominee.status is not TaskStatus.PENDING or (
                        self.may_outrank(task) and self.may_take(task, nominee)):
                    continue
                reserved = nominee.req if reserved is None else reserved + nominee.req
            if reserved is not None and self._kept_out(task, node, reserved):
                if codes is None:
                    codes = np.zeros(len(self.nodes), dtype=np.int32)
                codes[node] = self.code
        return codes

    def _kept_out(self, task: TaskInfo, node: int, reserved: Vector) -> bool:
        nodes = self.nodes
        free = nodes.idle[:, node]
        if nodes.any_releasing:
            free = free + nodes.releasing[:, node]
        req = task.req
        rows = self._requested(req)
        if len(rows):
            have, want, claimed = free[rows], req[rows] - TOLERANCE, reserved[rows]
            if bool((claimed > have + TOLERANCE).any()):
                return True  # over-claimed (an outranking pod took some): closed to it
            if not bool((have >= want).all()):
                return False  # it does not fit anyway: the resources say why
            if not bool((have - claimed >= want).all()):
                return True
        if task.gpu.shared and float(reserved[GPU]) > 0:
            return self._shared_kept_out(task, node, float(free[GPU]) - float(reserved[GPU]))
        return False

    def _shared_kept_out(self, task: TaskInfo, node: int, unclaimed_gpus: float) -> bool:
        """A shared task (fraction, gpu-memory) on a node with claimed whole GPUs: it fits its devices without the
        claims, but not on the existing shared devices plus the whole GPUs left unclaimed."""
        nodes = self.nodes
        at = np.array([node], dtype=np.int64)
        if not bool(nodes.shared_gpu_fit(task, with_releasing=True, at=at)[0]):
            return False  # it does not fit anyway
        need = nodes.shared.need(task)
        node_need = float(need[node]) if isinstance(need, np.ndarray) else float(need)
        existing = len(nodes.shared.fitting_groups(node, node_need, idle=False))
        new = int(np.floor(max(unclaimed_gpus, 0.0) + EPSILON))
        return existing + new < task.gpu.count

    # ---- the cycle's nominations ---------------------------------------------------------------------------
    def report(self) -> None:
        """At session close: every pod pipelined is nominated to its node (when it is not already), every other pod
        of ours that holds a nomination has it cleared (``Session.nominations``)."""
        ssn = self.ssn
        names = ssn.nodes.names
        placed: set[str] = set()
        out: list[Nomination] = []
        for task in ssn.pipelined:
            if task.status is TaskStatus.PIPELINED and task.node >= 0 and task.uid not in placed:
                placed.add(task.uid)
                node = names[task.node]
                if task.pod.nominated_node_name != node:
                    out.append(Nomination(task.key, node))
        for task in ssn.snapshot.nominated:
            if task.uid not in placed:
                out.append(Nomination(task.key, ""))
        ssn.nominations = out
