"""The min-runtime plugin (spec 6.3): a job that started recently is protected from reclaim and preempt.

Arguments: ``defaultPreemptMinRuntime`` and ``defaultReclaimMinRuntime`` (Go durations, default
``0s``; negative values count as 0) and ``reclaimResolveMethod`` (``lca``, the default, or ``queue``).

Which min-runtime applies to a victim job:

* preempt: the first ``spec.preemptMinRuntime`` on the way from the victim's leaf queue up to its root,
  else the default;
* reclaim, ``queue``: the same walk over ``spec.reclaimMinRuntime``;
* reclaim, ``lca``: when the reclaimer's and the victim's queues sit under different top-level queues,
  the victim's top-level queue's ``reclaimMinRuntime`` (else the default); otherwise the walk starts at
  the child of the lowest common ancestor on the victim's side (the level where the two queues
  diverge) and goes up; the default when nothing is set.

A victim is *protected* iff it has a last-start time and ``now < lastStart + minRuntime``.

Hooks: the victim filters drop protected jobs that are not elastic; elastic protected jobs stay
candidates, and the scenario validators accept a scenario only if every protected victim keeps at
least ``minAvailable`` active-used pods in each of its pod sets. The pods a victim keeps are its
active-used pods (Releasing included, as KAI's ``GetActivelyRunningTasksCount``) that are not among the
scenario's victim tasks. The count does not depend on whether the scenario's simulation is still
applied: a victim task is active-used before (Running) and after (Releasing, or Pipelined when moved)
the simulation, and it is subtracted either way. A moved victim task counts as taken, as in KAI.

Resolved durations are cached per session per victim queue (preempt) and per (reclaimer queue, victim
queue) pair (reclaim); protection per victim (preempt) and per (reclaimer, victim) pair (reclaim).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from kaisched.framework.config import ConfigError
from kaisched.framework.plugin import Plugin
from kaisched.framework.scenario import Scenario
from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo
from kaisched.model.queue import QueueTree

PREEMPT_ARG = "defaultPreemptMinRuntime"
RECLAIM_ARG = "defaultReclaimMinRuntime"
METHOD_ARG = "reclaimResolveMethod"
LCA = "lca"
QUEUE = "queue"
ZERO = timedelta(0)


def _duration_argument(arguments: Mapping[str, str], name: str) -> timedelta:
    raw = arguments.get(name)
    if raw is None or raw == "":
        return ZERO
    from kaisched.k8s.quantity import parse_duration

    try:
        value = parse_duration(str(raw))
    except ValueError as exc:
        raise ConfigError(f"plugin minruntime: argument {name}: {exc}") from None
    return max(value, ZERO)


class MinRuntimeResolver:
    """The min-runtime that applies to a victim queue (spec 6.3), cached for one session."""

    def __init__(self, queues: QueueTree, default_preempt: timedelta, default_reclaim: timedelta,
                 method: str = LCA) -> None:
        self.queues = queues
        self.default_preempt = default_preempt
        self.default_reclaim = default_reclaim
        self.method = method
        self._preempt: dict[str, timedelta] = {}
        self._reclaim: dict[tuple[str, str], timedelta] = {}

    def _path(self, queue: str) -> list[str]:
        """Top-level queue first, down to ``queue``."""
        return list(reversed(self.queues.ancestors(queue)))

    def preempt(self, victim_queue: str) -> timedelta:
        cached = self._preempt.get(victim_queue)
        if cached is None:
            cached = self._preempt[victim_queue] = self._walk_up(victim_queue, preempt=True)
        return cached

    def reclaim(self, reclaimer_queue: str, victim_queue: str) -> timedelta:
        key = (reclaimer_queue, victim_queue)
        cached = self._reclaim.get(key)
        if cached is None:
            if self.method == QUEUE:
                cached = self._walk_up(victim_queue, preempt=False)
            else:
                cached = self._lca(reclaimer_queue, victim_queue)
            self._reclaim[key] = cached
        return cached

    def _walk_up(self, queue: str, *, preempt: bool) -> timedelta:
        default = self.default_preempt if preempt else self.default_reclaim
        if queue not in self.queues.queues:
            return default
        for name in self.queues.ancestors(queue):
            q = self.queues.queues[name]
            value = q.preempt_min_runtime if preempt else q.reclaim_min_runtime
            if value is not None:
                return value
        return default

    def _lca(self, reclaimer_queue: str, victim_queue: str) -> timedelta:
        tree = self.queues.queues
        if victim_queue not in tree or reclaimer_queue not in tree:
            return self.default_reclaim
        reclaimer_path = self._path(reclaimer_queue)
        victim_path = self._path(victim_queue)
        if reclaimer_path[0] != victim_path[0]:  # different top-level queues (siblings under a shadow root)
            value = tree[victim_path[0]].reclaim_min_runtime
            return self.default_reclaim if value is None else value
        lca = 0
        for i in range(min(len(reclaimer_path), len(victim_path))):
            if reclaimer_path[i] != victim_path[i]:
                break
            lca = i
        start = lca + 1 if lca + 1 < len(victim_path) else lca  # the LCA's child on the victim's side
        for name in reversed(victim_path[: start + 1]):
            value = tree[name].reclaim_min_runtime
            if value is not None:
                return value
        return self.default_reclaim


class MinRuntimePlugin(Plugin):
    name = "minruntime"

    def __init__(self, arguments: Mapping[str, str]) -> None:
        super().__init__(arguments)
        self.default_preempt = _duration_argument(arguments, PREEMPT_ARG)
        self.default_reclaim = _duration_argument(arguments, RECLAIM_ARG)
        method = arguments.get(METHOD_ARG) or LCA
        if method not in (LCA, QUEUE):
            raise ConfigError(f"plugin minruntime: argument {METHOD_ARG}: expected {LCA} or {QUEUE}, got {method!r}")
        self.method = method
        self._ssn: Session | None = None
        self._resolver: MinRuntimeResolver | None = None
        self._preempt_protected: dict[str, bool] = {}
        self._reclaim_protected: dict[tuple[str, str], bool] = {}
        self._may_protect = True  # (see _any_protection)

    # ---- session ----------------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self._ssn = ssn
        self._resolver = MinRuntimeResolver(ssn.queues, self.default_preempt, self.default_reclaim, self.method)
        self._preempt_protected = {}
        self._reclaim_protected = {}
        self._may_protect = self._any_protection(ssn)
        ssn.preempt_victim_filters.append(self.preempt_filter)
        ssn.reclaim_victim_filters.append(self.reclaim_filter)
        ssn.preempt_scenario_validators.append(self.preempt_validator)
        ssn.reclaim_scenario_validators.append(self.reclaim_validator)

    def on_session_close(self, ssn: Session) -> None:
        self._ssn = None
        self._resolver = None
        self._preempt_protected = {}
        self._reclaim_protected = {}

    def _any_protection(self, ssn: Session) -> bool:
        """Some job could be protected: started less than the longest min-runtime that applies anywhere ago
        (the defaults and every queue's own). False in the default configuration (every min-runtime 0s, no
        start in the future): then no victim is ever protected and the hooks answer without asking per job."""
        longest = max([self.default_preempt, self.default_reclaim,
                       *(value for q in ssn.queues.queues.values()
                         for value in (q.preempt_min_runtime, q.reclaim_min_runtime) if value is not None)])
        return any(job.last_start is not None and ssn.now < job.last_start + longest for job in ssn.jobs.values())

    @property
    def resolver(self) -> MinRuntimeResolver:
        assert self._resolver is not None, "minruntime: session not open"
        return self._resolver

    # ---- protection -------------------------------------------------------------------------------
    def _protected(self, victim: PodGroupInfo, min_runtime: timedelta) -> bool:
        assert self._ssn is not None, "minruntime: session not open"
        if victim.last_start is None:
            return False
        until = victim.last_start + min_runtime
        if self._ssn.now < until:
            self._ssn.expires_at(until)
            return True
        return False

    def is_preempt_protected(self, victim: PodGroupInfo) -> bool:
        cached = self._preempt_protected.get(victim.key)
        if cached is None:
            cached = self._protected(victim, self.resolver.preempt(victim.queue))
            self._preempt_protected[victim.key] = cached
        return cached

    def is_reclaim_protected(self, reclaimer: PodGroupInfo, victim: PodGroupInfo) -> bool:
        key = (reclaimer.queue, victim.key)  # protection depends on the reclaimer's queue only
        cached = self._reclaim_protected.get(key)
        if cached is None:
            cached = self._protected(victim, self.resolver.reclaim(reclaimer.queue, victim.queue))
            self._reclaim_protected[key] = cached
        return cached

    # ---- hooks ------------------------------------------------------------------------------------
    def preempt_filter(self, pending: PodGroupInfo, victim: PodGroupInfo) -> bool:
        return not self._may_protect or not self.is_preempt_protected(victim) or victim.is_elastic()

    def reclaim_filter(self, pending: PodGroupInfo, victim: PodGroupInfo) -> bool:
        return not self._may_protect or not self.is_reclaim_protected(pending, victim) or victim.is_elastic()

    def preempt_validator(self, scenario: Scenario) -> bool:
        if not self._may_protect:
            return True
        return all(
            keeps_min_available(scenario, entry.job)
            for entry in scenario.victims.values()
            if self.is_preempt_protected(entry.job)
        )

    def reclaim_validator(self, scenario: Scenario) -> bool:
        if not self._may_protect:
            return True
        reclaimer = scenario.preemptor
        return all(
            keeps_min_available(scenario, entry.job)
            for entry in scenario.victims.values()
            if self.is_reclaim_protected(reclaimer, entry.job)
        )


def keeps_min_available(scenario: Scenario, victim: PodGroupInfo) -> bool:
    """Every pod set of ``victim`` keeps at least minAvailable active-used pods that the scenario does
    not take."""
    entry = scenario.victims.get(victim.key)
    taken = {id(t) for t in entry.tasks} if entry is not None else set()
    for ps in victim.pod_sets.values():
        kept = sum(1 for t in ps.tasks if t.is_active_used and id(t) not in taken)
        if kept < ps.min_available:
            return False
    return True
