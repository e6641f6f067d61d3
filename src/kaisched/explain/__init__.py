"""Why a job is pending: the explanation of one job, read off one scheduling cycle (read-only).

Built on the cycle's own data (the snapshot's jobs and the CycleResult's statuses, queues and GPU nodes),
never a second scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kaisched.cluster.schedule import prepare, run_prepared_cycle
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s.objects import ParsedObjects
from kaisched.model.snapshot import SnapshotOptions, build_snapshot


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
    queue_share: dict[str, dict[str, float]]  # deserved / fairShare / allocated / limit (GPU)
    position: int  # 1-based position among the queue's pending jobs (0: not pending)
    ahead: list[str] = field(default_factory=list)
    largest_free: tuple[float, str] | None = None  # (idle whole GPUs, node) of the node with most idle GPUs
    tier: str = ""
    advice: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        free = None if self.largest_free is None else {"gpus": self.largest_free[0], "node": self.largest_free[1]}
        return {"job": self.job, "queue": self.queue, "status": self.status, "tier": self.tier,
                "reason": self.reason, "message": self.message, "gpusPerPod": self.gpus_per_pod,
                "queueShare": self.queue_share, "position": self.position, "ahead": self.ahead,
                "largestFreeBlock": free, "advice": self.advice}


def explain_job(parsed: ParsedObjects, name: str, namespace: str, config: SchedulerConfig,
                now: datetime) -> Explanation:
    """Run one cycle over ``parsed`` and explain PodGroup (or pod) ``name`` in ``namespace``."""
    jobs, result = run_view(parsed, config, now)
    key = f"{namespace}/{name}"
    job = jobs.get(key)
    if job is None:  # a pod's name: find its job
        job = next((j for j in jobs.values() if any(t.namespace == namespace and t.name == name for t in j.tasks)),
                   None)
    if job is None:
        if not any(j.namespace == namespace for j in jobs.values()):
            raise ExplainError(f"no pod or PodGroup {name!r} in namespace {namespace!r} (the namespace has no jobs)")
        raise ExplainError(f"no pod or PodGroup {name!r} in namespace {namespace!r}")
    return _explain(job.key, jobs, result)


def _gpu(d: dict[str, float]) -> float:
    return d.get("gpu", 0.0)


def _explain(key: str, jobs: dict[str, Any], result: CycleResult) -> Explanation:
    job = jobs[key]
    status = result.pod_group(key)
    queue = next((q for q in result.queues if q.name == job.queue), None)
    share = {} if queue is None else {
        "deserved": {"gpu": _gpu(queue.deserved)}, "fairShare": {"gpu": _gpu(queue.fair_share)},
        "allocated": {"gpu": _gpu(queue.allocated)}, "limit": {"gpu": _gpu(queue.limit)}}
    pending = [j for j in jobs.values() if j.queue == job.queue
               and (s := result.pod_group(j.key)) is not None and s.status == "Pending"]
    pending.sort(key=lambda j: (-j.priority, j.creation, j.key))
    keys = [j.key for j in pending]
    position = keys.index(key) + 1 if key in keys else 0
    gpus = [float(t.request_gpus) for t in job.tasks]
    largest = max(((n.idle, n.name) for n in result.nodes), key=lambda x: (x[0], [-ord(c) for c in x[1]]),
                  default=None)
    exp = Explanation(job=key, queue=job.queue, status=status.status if status else "Unknown",
                      reason=status.reason if status else None, message=status.message if status else None,
                      gpus_per_pod=gpus, queue_share=share, position=position,
                      ahead=keys[:position - 1] if position else [], largest_free=largest)
    _tier(exp, job)
    return exp


def _tier(exp: Explanation, job: Any) -> None:
    msg = (exp.message or "").lower()
    if exp.status != "Pending":
        exp.tier = "scheduled"
        return
    reason = exp.reason or ""
    if job.blocked is not None or reason == "MinMemberTooLarge":
        exp.tier = "misconfigured"
        exp.advice.append("fix the object named in the message")
    elif reason == "OverLimit":
        exp.tier = "over queue limit"
        exp.advice.append(f"wait for jobs of queue {exp.queue} to finish, or raise its limit")
    elif reason == "NonPreemptibleOverQuota":
        exp.tier = "non-preemptible over quota"
        exp.advice.append("make the job preemptible or raise the queue's quota")
    elif "fair share" in msg or "fairshare" in msg:
        exp.tier = "waiting for fair share"
    elif "minmember" in msg or "minavailable" in msg or "gang" in msg:
        exp.tier = "gang incomplete"
    elif "topology" in msg:
        exp.tier = "topology"
    else:
        exp.tier = "fits nowhere"
    need = max(exp.gpus_per_pod, default=0.0)
    if need > 0 and exp.largest_free is not None and exp.largest_free[0] < need:
        exp.advice.append(f"needs {_n(need)} GPUs on one node; the most free on any node is "
                          f"{_n(exp.largest_free[0])}, on {exp.largest_free[1]}")
    if exp.ahead:
        exp.advice.append(f"{len(exp.ahead)} job(s) ahead of it in queue {exp.queue}: {', '.join(exp.ahead)}")


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def render_text(exp: Explanation) -> str:
    lines = [f"Job:      {exp.job} ({exp.status})", f"Queue:    {exp.queue}"]
    for k, v in exp.queue_share.items():
        gpu = v["gpu"]
        lines.append(f"  {k:<10} " + ("unlimited" if gpu < 0 else f"{_n(gpu)} GPU"))
    if exp.position:
        lines.append(f"Position: {exp.position} in queue {exp.queue}"
                     + (f" (behind {', '.join(exp.ahead)})" if exp.ahead else ""))
    if exp.status == "Pending":
        lines.append(f"Tier:     {exp.tier}")
        lines.append(f"Reason:   {exp.reason}: {exp.message}")
    if exp.advice:
        lines.append("What would let it run:")
        lines.extend(f"  - {a}" for a in exp.advice)
    return "\n".join(lines)


def run_view(parsed: ParsedObjects, config: SchedulerConfig, now: datetime) -> tuple[dict[str, Any], CycleResult]:
    """The snapshot's jobs and one read-only cycle's result over ``parsed``."""
    prepared = prepare(parsed, config, now)
    snapshot = build_snapshot(prepared, now, SnapshotOptions(
        full_hierarchy_fairness=config.params.full_hierarchy_fairness,
        scheduler_name=config.params.scheduler_name))
    jobs = dict(snapshot.jobs)
    return jobs, run_prepared_cycle(prepared, config, now)


def queue_rows(jobs: dict[str, Any], result: CycleResult) -> list[dict[str, Any]]:
    """The queue tree (parents before children), GPUs per queue, and its pending jobs."""
    pending: dict[str, int] = {}
    for g in result.pod_groups:
        if g.status == "Pending":
            pending[g.queue] = pending.get(g.queue, 0) + 1
    by_parent: dict[str | None, list[Any]] = {}
    for q in result.queues:
        by_parent.setdefault(q.parent, []).append(q)
    rows: list[dict[str, Any]] = []

    def walk(parent: str | None, depth: int) -> None:
        for q in sorted(by_parent.get(parent, []), key=lambda q: q.name):
            rows.append({"name": q.name, "parent": q.parent, "depth": depth, "deserved": _gpu(q.deserved),
                         "fairShare": _gpu(q.fair_share), "allocated": _gpu(q.allocated),
                         "requested": _gpu(q.request), "limit": _gpu(q.limit), "pendingJobs": pending.get(q.name, 0)})
            walk(q.name, depth + 1)

    walk(None, 0)
    return rows


def job_rows(jobs: dict[str, Any], result: CycleResult, now: datetime) -> list[dict[str, Any]]:
    """Jobs like squeue: queue, priority, preemptible, state, reason, age (seconds), GPUs."""
    rows: list[dict[str, Any]] = []
    for key, job in sorted(jobs.items(), key=lambda kv: (kv[1].queue, -kv[1].priority, kv[1].creation, kv[0])):
        st = result.pod_group(key)
        rows.append({"name": key, "queue": job.queue, "priority": job.priority, "preemptible": job.preemptible,
                     "state": st.status if st else "Unknown", "reason": (st.reason if st else None) or "",
                     "age": int((now - job.creation).total_seconds()),
                     "gpus": sum(float(t.request_gpus) for t in job.tasks)})
    return rows
