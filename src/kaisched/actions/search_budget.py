"""KAI v0.17's scenario search budgets (actions/common/solvers/search_budget.go): wall-clock bounds of the
eviction actions' victim search, configured by ``scenarioSearchBudgets`` (``SchedulerConfig.search_budgets``).

Three nested deadlines, each taken when its part of the search begins:

* the **action**'s (``maxActionSearchDuration``: the action's key, else ``default``, else 5 minutes), from the
  start of the action's loop over pending jobs;
* a **job**'s, when it reaches the solver: the action's remaining time, capped by ``maxJobSearchDuration``. A job
  reached with none of the action's time left is ``not_attempted``; one reached with less than
  ``minJobSearchDuration`` left is searched with what is left and marked ``reduced_budget``;
* the **generator** attempt's, at the same instant: the job's remaining time, capped by the generator's limit.
  kaisched has one generator, the by-node search (recorded victims plus one node's victims: KAI's
  ``NodeLocalGreedy``), so that is its limit; ``MultiNodeGang`` bounds nothing.

A limit of 0 is unlimited. The solver asks :meth:`GeneratorSearchBudget.expired` before each scenario simulation
(a simulation that started finishes, and so does the replay of the winning one); once it answers True the job's
search stops unsolved (``deadline_exhausted``). The generator's deadline is never later than the job's, nor the
job's than the action's, so that one check covers the three.

The clock (``Session.search_clock``, ``time.monotonic`` by default) is read once when the action starts, once
per job that reaches the solver (for the job and generator budgets) and once per check; without budgets
(:data:`UNLIMITED` and ``budget=None`` in the solver) it is never read and no check costs anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kaisched.framework.config import NODE_LOCAL_GREEDY, SearchBudgets
from kaisched.framework.result import (
    SCENARIO_SEARCH_UNRESOLVED,
    SEARCH_DEADLINE_EXHAUSTED,
    SEARCH_NOT_ATTEMPTED,
    SearchOutcome,
)
from kaisched.framework.session import Session
from kaisched.model.job import FitError

Clock = Callable[[], float]

#: what stopped a search: the deadline that had passed when the solver checked
STOPPED_BY_ACTION = "action"
STOPPED_BY_JOB = "job"
STOPPED_BY_GENERATOR = "generator"


def _deadline(now: float, limit: float) -> float:
    """``now`` plus ``limit`` seconds; a limit of 0 (or less) is none (infinite)."""
    return now + limit if limit > 0 else math.inf


class GeneratorSearchBudget:
    """One generator attempt's deadline (never later than its job's and action's)."""

    __slots__ = ("_action_deadline", "_clock", "_job_deadline", "deadline", "stopped_by")

    def __init__(self, clock: Clock, deadline: float, job_deadline: float, action_deadline: float) -> None:
        self._clock = clock
        self.deadline = deadline
        self._job_deadline = job_deadline
        self._action_deadline = action_deadline
        #: the budget whose deadline had passed when :meth:`expired` first answered True
        self.stopped_by: str | None = None

    def expired(self) -> bool:
        """The attempt's time is up (reads the clock once)."""
        now = self._clock()
        if now < self.deadline:
            return False
        if self.stopped_by is None:
            self.stopped_by = (STOPPED_BY_ACTION if now >= self._action_deadline
                               else STOPPED_BY_JOB if now >= self._job_deadline else STOPPED_BY_GENERATOR)
        return True


class JobSearchBudget:
    """A pending job's budget, begun when it reaches the solver: the generator budget to give the solver
    (None: unlimited), whether the job is not attempted at all, and whether it got a reduced budget."""

    __slots__ = ("generator", "not_attempted", "reduced_budget")

    def __init__(self, generator: GeneratorSearchBudget | None = None, *, not_attempted: bool = False,
                 reduced_budget: bool = False) -> None:
        self.generator = generator
        self.not_attempted = not_attempted
        self.reduced_budget = reduced_budget

    def outcome(self, action: str, job: str, result: str) -> SearchOutcome:
        generator = self.generator
        stopped = generator.stopped_by if generator is not None and result == SEARCH_DEADLINE_EXHAUSTED else None
        if result == SEARCH_NOT_ATTEMPTED:
            stopped = STOPPED_BY_ACTION
        return SearchOutcome(action, job, result, self.reduced_budget, stopped)


_UNLIMITED_JOB = JobSearchBudget()


class ActionSearchBudget:
    """One eviction action's budget for one execution (:meth:`start`); :data:`UNLIMITED` without budgets."""

    __slots__ = ("_clock", "_generator_limit", "_job_limit", "_min_job", "action", "deadline", "enabled")

    def __init__(self, action: str, budgets: SearchBudgets | None, clock: Clock) -> None:
        self.action = action
        self.enabled = budgets is not None
        self._clock = clock
        self.deadline = math.inf
        self._job_limit = self._min_job = self._generator_limit = 0.0
        if budgets is not None:
            self._job_limit = budgets.job_limit()
            self._min_job = budgets.min_job_limit()
            self._generator_limit = budgets.generator_limit(NODE_LOCAL_GREEDY)
            self.deadline = _deadline(clock(), budgets.action_limit(action))

    @staticmethod
    def start(ssn: Session, action: str) -> ActionSearchBudget:
        """The action's budget from the session's configuration and clock, starting now."""
        budgets = ssn.config.search_budgets
        if budgets is None:
            return UNLIMITED
        return ActionSearchBudget(action, budgets, ssn.search_clock)

    def begin_job(self) -> JobSearchBudget:
        """A job reaches the solver: its budget (and its generator attempt's), from now."""
        if not self.enabled:
            return _UNLIMITED_JOB
        now = self._clock()
        remaining = self.deadline - now
        if remaining <= 0:
            return JobSearchBudget(not_attempted=True)
        job_deadline = min(self.deadline, _deadline(now, self._job_limit))
        generator = GeneratorSearchBudget(self._clock, min(job_deadline, _deadline(now, self._generator_limit)),
                                          job_deadline, self.deadline)
        return JobSearchBudget(generator, reduced_budget=self._min_job > 0 and remaining < self._min_job)


UNLIMITED = ActionSearchBudget("", None, lambda: 0.0)


def unresolved_error(action: str, outcome: SearchOutcome) -> FitError:
    """The pending reason of a job whose search a budget stopped (KAI's ``ScenarioSearchUnresolved``)."""
    if outcome.result == SEARCH_NOT_ATTEMPTED:
        message = ("kaisched did not attempt scenario search for this job in this scheduling cycle because the "
                   "configured search budget was already exhausted.")
    elif outcome.reduced_budget:
        message = (f"kaisched could not find a valid {action} scenario within the remaining configured search time "
                   "for this scheduling attempt because the action search budget was partly consumed by earlier "
                   "jobs. The job remains pending and may be retried in a later scheduling cycle.")
    else:
        message = (f"kaisched could not find a valid {action} scenario within the configured search budget for this "
                   "scheduling attempt. The job remains pending and may be retried in a later scheduling cycle.")
    return FitError(SCENARIO_SEARCH_UNRESOLVED, message)
