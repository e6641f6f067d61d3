"""Why a job is pending: the explanation of one job, read off one scheduling cycle (read-only).

Built on the cycle's own data, never a second scheduler: the snapshot's jobs, and the CycleResult's PodGroup
statuses (their reason code, ``PodGroupStatus.code``, and the structure behind the message,
``PodGroupStatus.detail``: the fit-error histogram per node and predicate, the gang's progress, the victims
waited for), queues (deserved, fair share, allocated, requested, limit) and GPU nodes (the largest free block).
The tier is the reason code's; the numbers and "what would let it run" are read off the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kaisched.cluster.schedule import prepare, run_prepared_cycle
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import (
    BELOW_MIN_MEMBER,
    FAIR_SHARE,
    FITS_NOWHERE,
    GANG_INCOMPLETE,
    MISCONFIGURED,
    NON_PREEMPTIBLE_OVER_QUOTA,
    NOT_REACHED,
    OVER_LIMIT,
    REASON_TIERS,
    SEARCH_BUDGET,
    TOPOLOGY,
    WAITING_FOR_VICTIMS,
    CycleResult,
    PodGroupStatus,
    QueueStatus,
)
from kaisched.k8s.objects import ParsedObjects
from kaisched.model.job import FitDetail, PodGroupInfo
from kaisched.model.snapshot import SnapshotOptions, build_snapshot
from kaisched.model.status import ALIVE, TaskStatus
from kaisched.model.usage import UsageTable

__all__ = ["ExplainError", "Explanation", "explain_job", "explain_key", "job_rows", "queue_rows", "render_text",
           "run_view"]

EPS = 1e-9
#: jobs named in "ahead of it", GPU nodes listed per explanation
LISTED = 10
#: the codes of a job that lacks room on the nodes (the free GPUs per node are shown)
ROOM_CODES = frozenset({FITS_NOWHERE, BELOW_MIN_MEMBER, FAIR_SHARE, TOPOLOGY})


class ExplainError(Exception):
    """The job asked about is not in the input (a sentence naming it)."""


@dataclass(slots=True)
class Explanation:
    job: str
    queue: str
    status: str
    reason: str | None
    message: str | None
    gpus_per_pod: list[float]
    queue_share: dict[str, dict[str, float]]  # deserved / fairShare / allocated / requested / limit (GPU)
    position: int  # 1-based position among the queue's pending jobs (0: not pending)
    ahead: list[str] = field(default_factory=list)
    largest_free: tuple[float, str] | None = None  # (idle whole GPUs, node) of the node with most idle GPUs
    tier: str = ""  # the tier in words ("fits nowhere"); "running", "allocated" for a scheduled job
    code: str | None = None  # the cycle's reason code (kaisched.framework.result.REASON_CODES)
    nodes: dict[str, Any] | None = None  # the fit-error breakdown: pod, total, available, reasons, summary
    gpu_nodes: list[dict[str, Any]] = field(default_factory=list)  # GPU nodes, most idle first (LISTED at most)
    gang: dict[str, int] | None = None  # placed / required pods of a gang left short
    victims: list[str] = field(default_factory=list)  # the pods whose termination it waits for
    advice: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        free = None if self.largest_free is None else {"gpus": self.largest_free[0], "node": self.largest_free[1]}
        return {"job": self.job, "queue": self.queue, "status": self.status, "code": self.code, "tier": self.tier,
                "reason": self.reason, "message": self.message, "gpusPerPod": self.gpus_per_pod,
                "queueShare": self.queue_share, "position": self.position, "ahead": self.ahead,
                "nodes": self.nodes, "gpuNodes": self.gpu_nodes, "largestFreeBlock": free, "gang": self.gang,
                "victims": self.victims, "advice": self.advice}

    @classmethod
    def from_dict(cls, data: Any) -> Explanation:
        """The explanation :meth:`to_dict` made (a running scheduler's answer); ExplainError naming the first field
        that is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise ExplainError(f"an explanation must be a JSON object, got {type(data).__name__}")

        def field_of(name: str, kinds: tuple[type, ...], default: Any = ...) -> Any:
            if name not in data or data[name] is None:
                if default is ...:
                    raise ExplainError(f"the explanation has no field {name!r}")
                return default
            value = data[name]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ExplainError(f"the explanation's field {name!r} is a {type(value).__name__}")
            return value

        free = field_of("largestFreeBlock", (dict,), None)
        largest = None if free is None else (float(free.get("gpus", 0.0)), str(free.get("node", "")))
        return cls(job=field_of("job", (str,)), queue=field_of("queue", (str,)), status=field_of("status", (str,)),
                   reason=field_of("reason", (str,), None), message=field_of("message", (str,), None),
                   gpus_per_pod=[float(g) for g in field_of("gpusPerPod", (list,), [])],
                   queue_share=field_of("queueShare", (dict,), {}), position=int(field_of("position", (int,), 0)),
                   ahead=[str(a) for a in field_of("ahead", (list,), [])], largest_free=largest,
                   tier=field_of("tier", (str,), ""), code=field_of("code", (str,), None),
                   nodes=field_of("nodes", (dict,), None), gpu_nodes=list(field_of("gpuNodes", (list,), [])),
                   gang=field_of("gang", (dict,), None), victims=[str(v) for v in field_of("victims", (list,), [])],
                   advice=[str(a) for a in field_of("advice", (list,), [])])


def find_job(jobs: dict[str, PodGroupInfo], name: str, namespace: str) -> str:
    """The key of PodGroup ``name`` in ``namespace``, or of the job of pod ``name`` there; ExplainError otherwise."""
    key = f"{namespace}/{name}"
    if key in jobs:
        return key
    for job in jobs.values():
        if job.namespace == namespace and any(t.name == name for t in job.tasks):
            return job.key
    if not any(j.namespace == namespace for j in jobs.values()):
        raise ExplainError(f"no pod or PodGroup {name!r} in namespace {namespace!r} (the namespace has no jobs)")
    raise ExplainError(f"no pod or PodGroup {name!r} in namespace {namespace!r}")


def explain_job(parsed: ParsedObjects, name: str, namespace: str, config: SchedulerConfig,
                now: datetime, *, live: bool = False) -> Explanation:
    """Run one cycle over ``parsed`` and explain PodGroup (or pod) ``name`` in ``namespace`` (``live``: objects read
    from a cluster, grouped already: :func:`run_view`)."""
    jobs, result = run_view(parsed, config, now, live=live)
    return explain_key(find_job(jobs, name, namespace), jobs, result)


def _gpu(d: dict[str, float]) -> float:
    return d.get("gpu", 0.0)


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _pending_gpus(job: PodGroupInfo) -> float:
    return sum(float(t.request_gpus) for t in job.tasks if t.status in (TaskStatus.PENDING, TaskStatus.GATED))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def explain_key(key: str, jobs: dict[str, Any], result: CycleResult) -> Explanation:
    """The explanation of snapshot job ``key`` from this cycle's data (no new cycle)."""
    job: PodGroupInfo = jobs[key]
    statuses = {g.name: g for g in result.pod_groups}
    status = statuses.get(key)
    queues = {q.name: q for q in result.queues}
    queue = queues.get(job.queue)
    share = {} if queue is None else {
        "deserved": {"gpu": _gpu(queue.deserved)}, "fairShare": {"gpu": _gpu(queue.fair_share)},
        "allocated": {"gpu": _gpu(queue.allocated)}, "requested": {"gpu": _gpu(queue.request)},
        "limit": {"gpu": _gpu(queue.limit)}}
    pending = [j for j in jobs.values() if j.queue == job.queue
               and (s := statuses.get(j.key)) is not None and s.status == "Pending"]
    pending.sort(key=lambda j: (-j.priority, j.creation, j.key))
    keys = [j.key for j in pending]
    position = keys.index(key) + 1 if key in keys else 0
    gpus = [float(t.request_gpus) for t in job.tasks]
    largest = max(((n.idle, n.name) for n in result.nodes), key=lambda x: (x[0], [-ord(c) for c in x[1]]),
                  default=None)
    gpu_nodes = sorted(result.nodes, key=lambda n: (-n.idle, n.name))[:LISTED]
    exp = Explanation(job=key, queue=job.queue, status=status.status if status else "Unknown",
                      reason=status.reason if status else None, message=status.message if status else None,
                      gpus_per_pod=gpus, queue_share=share, position=position,
                      ahead=keys[:position - 1] if position else [], largest_free=largest,
                      code=status.code if status else None,
                      gpu_nodes=[{"node": n.name, "gpus": n.gpus, "idleGpus": n.idle, "releasingGpus": n.releasing}
                                 for n in gpu_nodes])
    _Advisor(exp, job, status, queues, result).run()
    return exp


_explain = explain_key  # (the name the dashboard looked for first)


class _Advisor:
    """The tier, the breakdown and what would let the job run, per reason code."""

    def __init__(self, exp: Explanation, job: PodGroupInfo, status: PodGroupStatus | None,
                 queues: dict[str, QueueStatus], result: CycleResult) -> None:
        self.exp, self.job, self.status, self.queues, self.result = exp, job, status, queues, result
        self.detail: FitDetail | None = status.detail if status is not None else None
        self.need = _pending_gpus(job)
        self.fragmented = False

    def run(self) -> None:
        exp, status = self.exp, self.status
        if status is None or (status.status in ("Running", "Allocated") and status.code is None):
            exp.tier = status.status.lower() if status is not None else "unknown"
            return
        code = exp.code or (WAITING_FOR_VICTIMS if status.status == "Pipelined" else FITS_NOWHERE)
        exp.code = code
        headline = REASON_TIERS[code]
        exp.tier = headline[:1].lower() + headline[1:]
        detail = self.detail
        if detail is not None and (detail.reasons or detail.too_big or detail.pod):
            self.breakdown(detail)
        if detail is not None and detail.required > 0:
            exp.gang = {"placed": detail.placed, "required": detail.required}
        advise: dict[str, Callable[[], None]] = {
            MISCONFIGURED: self.advise_misconfigured, OVER_LIMIT: self.advise_over_limit,
            NON_PREEMPTIBLE_OVER_QUOTA: self.advise_non_preemptible_over_quota, FAIR_SHARE: self.advise_fair_share,
            GANG_INCOMPLETE: self.advise_gang_incomplete, BELOW_MIN_MEMBER: self.advise_below_min_member,
            FITS_NOWHERE: self.advise_fits_nowhere, TOPOLOGY: self.advise_topology,
            WAITING_FOR_VICTIMS: self.advise_waiting_for_victims, SEARCH_BUDGET: self.advise_search_budget,
            NOT_REACHED: self.advise_not_reached}
        block = self.largest_block() if code in (FITS_NOWHERE, BELOW_MIN_MEMBER, FAIR_SHARE) else []
        self.fragmented = bool(block)
        advise.get(code, self.advise_fits_nowhere)()
        exp.advice.extend(block)
        if exp.ahead:
            exp.advice.append(f"{len(exp.ahead)} job(s) ahead of it in queue {exp.queue}: {_listed(exp.ahead)}")

    # ---- the breakdown ----------------------------------------------------------------------------
    def breakdown(self, detail: FitDetail) -> None:
        failing = sum(r.count for r in detail.reasons)
        available = max(detail.nodes - failing, 0) if detail.reasons else 0
        rows = [{"count": r.count, "reason": r.text, "nodes": list(r.nodes), "resources": r.resources}
                for r in detail.reasons]
        if detail.too_big:
            summary = f"0/{detail.nodes} nodes are large enough: {self.exp.message}"
        elif rows:
            summary = (f"{available}/{detail.nodes} nodes are available: "
                       + ", ".join(f"{r.count} {r.text}" for r in detail.reasons) + ".")
        else:
            summary = ""
        self.exp.nodes = {"pod": detail.pod, "total": detail.nodes, "available": available, "reasons": rows,
                          "summary": summary}

    def largest_block(self) -> list[str]:
        """What to say when no node has the GPUs one pod asks (nothing when one has)."""
        exp = self.exp
        need = max(exp.gpus_per_pod, default=0.0)
        if need <= 0 or exp.largest_free is None or exp.largest_free[0] >= need:
            return []
        out = [f"needs {_n(need)} GPUs on one node; the most free on any node is {_n(exp.largest_free[0])}, "
               f"on {exp.largest_free[1]}"]
        free = sum(n.idle for n in self.result.nodes)
        if free + EPS >= need:
            out.append(f"the cluster has {_n(free)} GPUs free in all, spread over nodes: the room is fragmented (a "
                       "node with room for the whole pod lets it run)")
        return out

    def _path(self) -> list[QueueStatus]:
        """The job's queue and its parents, leaf first."""
        out: list[QueueStatus] = []
        name: str | None = self.job.queue
        while name is not None and name in self.queues and len(out) < 64:
            q = self.queues[name]
            out.append(q)
            name = q.parent
        return out

    # ---- per code ---------------------------------------------------------------------------------
    def advise_misconfigured(self) -> None:
        self.exp.advice.append(f"fix what the reason names ({self.exp.reason}); the next cycle schedules it then")

    def advise_over_limit(self) -> None:
        exp, need = self.exp, self.need
        for q in self._path():
            limit, allocated = _gpu(q.limit), _gpu(q.allocated)
            if limit >= 0 and need > 0 and allocated + need > limit + EPS:
                said = (f"queue {q.name}'s GPU limit is {_n(limit)}, {_n(allocated)} are allocated and the job asks "
                        f"{_n(need)}")
                if need > limit + EPS:  # no job finishing can make room: the job alone is over the limit
                    exp.advice.append(f"{said}: the job alone is over the limit; raise it to at least {_n(need)}, "
                                      "or ask for fewer GPUs")
                else:
                    exp.advice.append(f"{said}: {_n(allocated + need - limit)} GPUs of {q.name}'s running jobs must "
                                      f"finish first, or raise its limit to at least {_n(allocated + need)}")
                return
        exp.advice.append(f"wait for jobs of queue {exp.queue} to finish, or raise the limit the reason names")

    def advise_non_preemptible_over_quota(self) -> None:
        leaf = self.queues.get(self.job.queue)
        quota = f" (now {_n(_gpu(leaf.deserved))} GPUs)" if leaf is not None and _gpu(leaf.deserved) >= 0 else ""
        self.exp.advice.append(
            "make the job preemptible (spec.preemptibility: preemptible, or a priority class below 100), or raise "
            f"queue {self.job.queue}'s deserved quota{quota}: non-preemptible work must fit within it")

    def advise_fair_share(self) -> None:
        leaf = self.queues.get(self.job.queue)
        if leaf is None:
            return
        allocated, fair = _gpu(leaf.allocated), _gpu(leaf.fair_share)
        need = self.need
        if need > fair + EPS:
            self.exp.advice.append(
                f"the job asks {_n(need)} GPUs, more than queue {leaf.name}'s fair share of {_n(fair)}: it may not "
                "reclaim from other queues and runs only on room nobody uses (or when its fair share grows: other "
                "queues ask less, or its deserved quota or over-quota weight is raised)")
            return
        self.exp.advice.append(
            f"queue {leaf.name} holds {_n(allocated)} GPUs of its fair share of {_n(fair)}; with the job's "
            f"{_n(need)} it would be over it, so it may not reclaim from other queues: it runs once "
            f"{_n(max(allocated + need - fair, 0.0))} GPUs of {leaf.name}'s jobs are released or free room appears, "
            "or when its fair share grows (other queues ask less, or its deserved quota or over-quota weight is "
            "raised)")

    def advise_gang_incomplete(self) -> None:
        job = self.job
        if not job.tasks:
            self.exp.advice.append("the PodGroup has no pods yet: create them (or the workload that makes them)")
            return
        for ps in job.pod_sets.values():
            alive = sum(1 for t in ps.tasks if t.status in ALIVE)
            gated = sum(1 for t in ps.tasks if t.status is TaskStatus.GATED)
            if alive - gated < ps.min_available:
                where = "" if len(job.pod_sets) == 1 else f" in sub-group {ps.name}"
                self.exp.advice.append(
                    f"minMember{where} is {ps.min_available} and {alive - gated} pod(s) can be scheduled "
                    f"({alive} exist, {gated} gated): create or un-gate {ps.min_available - (alive - gated)} more, "
                    "or lower minMember")

    def advise_below_min_member(self) -> None:
        detail = self.detail
        if detail is None or detail.required <= 0:
            self.advise_fits_nowhere()
            return
        self.exp.advice.append(
            f"room for {detail.placed} of the {detail.required} pods the gang needs at once ({detail.pod} found no "
            f"node): room for {detail.required - detail.placed} more pod(s) at the same time, or a lower minMember, "
            "lets it run")

    def advise_fits_nowhere(self) -> None:
        detail, exp = self.detail, self.exp
        if detail is None:
            return
        if detail.too_big:
            exp.advice.append(f"no node is large enough for pod {detail.pod}: ask for less, or add a larger node")
            return
        predicates = [r for r in detail.reasons if not r.resources]
        if predicates and not any(r.resources for r in detail.reasons):
            exp.advice.append(f"every node fails a predicate for pod {detail.pod} ("
                              + "; ".join(f"{r.count} {r.text}" for r in predicates)
                              + "): change the pod's constraints (node selector, affinity, tolerations) or the nodes")
        elif any(r.resources for r in detail.reasons) and not self.fragmented:
            exp.advice.append("room on a node that passes the pod's predicates: pods finishing there, lower-priority "
                              "preemptible pods of its queue, or more nodes")

    def advise_topology(self) -> None:
        self.exp.advice.append("relax the topology constraint (requiredTopologyLevel), or wait for a topology "
                               "domain with room for the whole job")

    def advise_waiting_for_victims(self) -> None:
        exp = self.exp
        victims = list(self.detail.victims) if self.detail is not None else []
        for e in self.result.evictions:
            if e.preemptor == exp.job and e.pod not in victims:
                victims.append(e.pod)
        victims.sort()
        exp.victims = victims
        if victims:
            exp.advice.append(f"nothing: it is bound once {len(victims)} pod(s) terminate: {_listed(victims)}")
        else:
            exp.advice.append("nothing: it is bound once the pods terminating on its nodes are gone")

    def advise_search_budget(self) -> None:
        self.exp.advice.append("the next cycle searches again; a larger scenarioSearchBudgets lets one cycle search "
                               "longer")

    def advise_not_reached(self) -> None:
        self.exp.advice.append("the next cycle tries it; queueDepthPerAction limits how many jobs an action tries")


def render_text(exp: Explanation) -> str:
    lines = [f"Job:       {exp.job} ({exp.status})", f"Queue:     {exp.queue}"]
    for k, v in exp.queue_share.items():
        gpu = v["gpu"]
        lines.append(f"  {k:<10} " + ("unlimited" if gpu < 0 else f"{_n(gpu)} GPU"))
    if exp.gpus_per_pod:
        each = sorted(set(exp.gpus_per_pod))
        pods = len(exp.gpus_per_pod)
        lines.append("GPUs:      " + ", ".join(_n(g) for g in each) + " per pod"
                     + (f" ({pods} pods)" if pods > 1 else ""))
    if exp.position:
        lines.append(f"Position:  {exp.position} in queue {exp.queue}"
                     + (f" (behind {_listed(exp.ahead)})" if exp.ahead else ""))
    if exp.status in ("Pending", "Pipelined") or exp.reason:
        lines.append(f"Tier:      {exp.tier} ({exp.code})")
        lines.append(f"Reason:    {exp.reason}: {exp.message}")
    if exp.nodes and exp.nodes["summary"]:
        lines.append("Nodes:     " + (f"pod {exp.nodes['pod']}: " if exp.nodes["pod"] else "") + exp.nodes["summary"])
        for row in exp.nodes["reasons"]:
            if row["nodes"]:
                more = row["count"] - len(row["nodes"])
                lines.append(f"  {row['count']} {row['reason']}: {', '.join(row['nodes'])}"
                             + (f" and {more} more" if more > 0 else ""))
    if exp.gpu_nodes and exp.code in ROOM_CODES and any(g > 0 for g in exp.gpus_per_pod):
        lines.append("Free GPUs: " + ", ".join(f"{n['node']} {_n(n['idleGpus'])}/{_n(n['gpus'])}"
                                               for n in exp.gpu_nodes))
    if exp.victims:
        lines.append(f"Victims:   {_listed(exp.victims)}")
    if exp.advice:
        lines.append("What would let it run:")
        lines.extend(f"  - {a}" for a in exp.advice)
    return "\n".join(lines)


def run_view(parsed: ParsedObjects, config: SchedulerConfig, now: datetime, *,
             live: bool = False) -> tuple[dict[str, Any], CycleResult]:
    """The snapshot's jobs and one read-only cycle's result over ``parsed``. Files go through the embedded cluster's
    controllers first (workloads make their pods, the pod-grouper groups them); ``live`` objects (read from a
    cluster by :func:`kaisched.kube.live.read_live`, grouped already) are scheduled as Kubernetes mode schedules
    them: the snapshot makes no claims from templates (the cluster's resourceclaim controller does)."""
    prepared = parsed if live else prepare(parsed, config, now)
    options = SnapshotOptions(full_hierarchy_fairness=config.params.full_hierarchy_fairness,
                              scheduler_name=config.params.scheduler_name, make_template_claims=not live)
    jobs = dict(build_snapshot(prepared, now, options).jobs)
    return jobs, run_cycle(prepared, config, now, options)


def run_cycle(prepared: ParsedObjects, config: SchedulerConfig, now: datetime,
              options: SnapshotOptions, usage: UsageTable | None = None) -> CycleResult:
    """One cycle of the configured actions on ``prepared``: :func:`kaisched.cluster.schedule.run_prepared_cycle`
    with the snapshot options given (``usage``: the queues' historical usage, time-based fair share)."""
    return run_prepared_cycle(prepared, config, now, usage=usage, options=options)


def queue_rows(jobs: dict[str, Any], result: CycleResult) -> list[dict[str, Any]]:
    """The queue tree (parents before children), GPUs per queue, and its pending jobs."""
    pending: dict[str, int] = {}
    for g in result.pod_groups:
        if g.status == "Pending":
            pending[g.queue] = pending.get(g.queue, 0) + 1
    by_parent: dict[str | None, list[Any]] = {}
    names = {q.name for q in result.queues}
    for q in result.queues:
        by_parent.setdefault(q.parent if q.parent in names else None, []).append(q)
    rows: list[dict[str, Any]] = []

    def walk(parent: str | None, depth: int) -> None:
        for q in sorted(by_parent.get(parent, []), key=lambda q: q.name):
            rows.append({"name": q.name, "parent": q.parent, "depth": depth, "deserved": _gpu(q.deserved),
                         "fairShare": _gpu(q.fair_share), "allocated": _gpu(q.allocated),
                         "requested": _gpu(q.request), "limit": _gpu(q.limit), "priority": q.priority,
                         "pendingJobs": pending.get(q.name, 0)})
            walk(q.name, depth + 1)

    walk(None, 0)
    return rows


def job_rows(jobs: dict[str, Any], result: CycleResult, now: datetime) -> list[dict[str, Any]]:
    """Jobs like squeue: queue, priority, preemptible, state, reason (and its code), age (seconds), GPUs, pods."""
    rows: list[dict[str, Any]] = []
    statuses = {g.name: g for g in result.pod_groups}
    for key, job in sorted(jobs.items(), key=lambda kv: (kv[1].queue, -kv[1].priority, kv[1].creation, kv[0])):
        st = statuses.get(key)
        rows.append({"name": key, "queue": job.queue, "priority": job.priority, "preemptible": job.preemptible,
                     "state": st.status if st else "Unknown", "reason": (st.reason if st else None) or "",
                     "code": (st.code if st else None) or "",
                     "age": int((now - job.creation).total_seconds()),
                     "gpus": sum(float(t.request_gpus) for t in job.tasks), "pods": len(job.tasks)})
    return rows
