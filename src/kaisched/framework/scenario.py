"""A victim scenario (spec 4.9): a pending job, the victims chosen for it, and what the simulation did.

Actions that evict (reclaim, preempt, consolidation) build scenarios with growing victim sets; plugins
filter victims and validate scenarios through the session hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from kaisched.model.job import PodGroupInfo
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo


@dataclass(slots=True, eq=False)
class VictimJob:
    job: PodGroupInfo
    tasks: list[TaskInfo] = field(default_factory=list)  # victim tasks of this job, in the order taken


@dataclass(slots=True, eq=False)
class Scenario:
    action: str
    preemptor: PodGroupInfo
    preemptor_tasks: list[TaskInfo]  # the tasks of the preemptor this scenario places (req(P))
    victims: dict[str, VictimJob] = field(default_factory=dict)  # victim job key -> its victim tasks
    # the first ``shared_prefix`` victim jobs are VictimJob objects of an earlier scenario of the same solver,
    # unchanged since (same tasks, in the same statuses): validators may reuse what they computed of them
    shared_prefix: int = 0

    def add_victims(self, job: PodGroupInfo, tasks: list[TaskInfo]) -> None:
        entry = self.victims.get(job.key)
        if entry is None:
            entry = self.victims[job.key] = VictimJob(job)
        entry.tasks.extend(t for t in tasks if t not in entry.tasks)

    @property
    def victim_tasks(self) -> list[TaskInfo]:
        return [t for v in self.victims.values() for t in v.tasks]

    def moved(self, task: TaskInfo) -> bool:
        """After the simulation: the victim task was re-placed (pipelined elsewhere), not evicted."""
        return task.status is TaskStatus.PIPELINED

    def evicted_tasks(self) -> list[TaskInfo]:
        """After the simulation: victim tasks that really lose their place (still Releasing)."""
        return [t for t in self.victim_tasks if t.status is TaskStatus.RELEASING]


T = TypeVar("T")


def common_prefix(a: list[T], b: list[T]) -> int:
    """How many leading items ``a`` and ``b`` have in common; for items that compare by identity (tasks,
    victim jobs) the comparisons are C loops over list slices: cheap for the long victim lists of a solver."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo] and a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
