"""The stale gang eviction action (spec 4.13).

A job is *stale* (spec 4.4) when it has no Succeeded pod, at least one active-used pod, and some pod
set below its minimum of active-used pods. The first cycle that sees a job stale records the time
(``stale_since``, persisted by KAI in the PodGroup annotation ``kai.scheduler/stale-podgroup-timestamp``);
once the job has been stale for at least the grace period (``--default-staleness-grace-period``,
60 s by default) every active-allocated pod of the job is evicted. A negative grace period never evicts.
A job that is no longer stale loses its timestamp.

KAI evicts directly through the session, outside any statement; kaisched evicts through a statement
committed at once, which has the same effect on the session and the cycle's decisions.
"""

from __future__ import annotations

from datetime import timedelta

from kaisched.actions.base import Action
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.job import PodGroupInfo
from kaisched.model.task import TaskInfo

DEFAULT_POD_SET = "default"


def eviction_message(job: PodGroupInfo, task: TaskInfo) -> str:
    """KAI's gang eviction message (``api.GetGangEvictionMessage``)."""
    pod = f"{task.namespace}/{task.name}"
    if len(job.pod_sets) == 1 and DEFAULT_POD_SET in job.pod_sets:
        minimum = job.pod_sets[DEFAULT_POD_SET].min_available
        return f"Workload doesn't meet the minimum required number of pods ({minimum}), evicting remaining pod: {pod}"
    pod_set = job.pod_sets.get(task.pod_set)
    if pod_set is None:
        return (f"Workload doesn't meet the minimum required number of pods in sub-group {task.pod_set}, "
                f"evicting remaining pod: {pod}")
    return (f"Workload doesn't meet the minimum required number of pods ({pod_set.min_available}) in sub-group "
            f"{pod_set.name}, evicting remaining pod: {pod}")


class StaleGangEvictionAction(Action):
    name = "stalegangeviction"

    def execute(self, ssn: Session) -> None:
        grace = ssn.params.default_staleness_grace_period
        for job in ssn.jobs.values():
            if not job.is_stale():
                job.stale_since = None
                continue
            if job.stale_since is None:
                ssn.stamp(job, "stale_since")
            if self._grace_elapsed(ssn, job, grace):
                self._evict(ssn, job)

    @staticmethod
    def _grace_elapsed(ssn: Session, job: PodGroupInfo, grace: timedelta) -> bool:
        if grace < timedelta(0):  # negative: never evict
            return False
        assert job.stale_since is not None
        if ssn.now - job.stale_since >= grace:
            return True
        ssn.expires_at(job.stale_since + grace)
        return False

    def _evict(self, ssn: Session, job: PodGroupInfo) -> None:
        victims = [t for t in job.tasks if t.is_active_allocated]
        if not victims:
            return
        stmt = Statement(ssn)
        for task in victims:
            stmt.evict(task, action=self.name, preemptor="", message=eviction_message(job, task))
        stmt.commit()
