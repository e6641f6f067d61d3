"""The allocate action (spec 4.7): place pending jobs in queue/job order, gang by gang."""

from __future__ import annotations

from kaisched.actions.base import Action
from kaisched.actions.job_queue import JobsQueue
from kaisched.actions.placement import allocate_job
from kaisched.framework.result import WAITING_FOR_VICTIMS
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.job import FitDetail, FitError, PodGroupInfo
from kaisched.model.status import TaskStatus


def pending_jobs(ssn: Session) -> list[PodGroupInfo]:
    """Jobs that are ready, have a pending task and sit in an existing leaf queue.

    A task becomes Pending within a session only when a statement is rolled back to the status it had
    before, so the jobs with pending tasks can only get fewer as the session goes on: they are looked for
    among those that had some at the first call (each action asks; most jobs of a busy cluster run)."""
    candidates = ssn.jobs_with_pending
    if candidates is None:
        candidates = ssn.jobs_with_pending = [j for j in ssn.jobs.values() if j.has_pending()]
    out = []
    for job in candidates:
        if job.blocked is not None or job.queue not in ssn.queues.queues:
            continue
        if not job.has_pending() or not job.is_ready():
            continue
        out.append(job)
    return out


def releasing_pods(ssn: Session, nodes: list[int]) -> tuple[str, ...]:
    """The pods terminating on ``nodes`` (node indices), sorted: those a job pipelined there waits for."""
    infos = ssn.nodes.infos
    return tuple(sorted(t.key for j in nodes for t in infos[j].tasks.values() if t.status is TaskStatus.RELEASING))


class AllocateAction(Action):
    name = "allocate"

    def execute(self, ssn: Session) -> None:
        depth = ssn.config.queue_depth_per_action.get(self.name)
        queue = JobsQueue(ssn, pending_jobs(ssn), depth)
        while True:
            job = queue.pop()
            if job is None:
                break
            stmt = Statement(ssn)
            had_allocated = job.has_allocated()
            if allocate_job(ssn, job, stmt):
                pipelined = job.should_pipeline()
                if pipelined:
                    stmt.convert_allocated_to_pipelined(job.key)
                    at = sorted({t.node for t in job.tasks if t.status is TaskStatus.PIPELINED})
                    nodes = sorted(ssn.nodes.names[j] for j in at)
                    job.pipelined_reason = FitError(
                        "WaitingForReleasingResources",
                        f"Pipelined: waiting for terminating pods to release resources on {', '.join(nodes)}",
                        WAITING_FOR_VICTIMS, FitDetail(victims=releasing_pods(ssn, at)),
                    )
                stmt.commit()
                if not pipelined and not had_allocated:
                    ssn.record_job_started(job)
                if job.has_pending():
                    queue.push(job)
            else:
                stmt.discard()
