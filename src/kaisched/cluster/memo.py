"""The steady state: a cycle over exactly the objects of the previous cycle is not run again.

A cycle is a function of its objects, its configuration and its clock. The clock enters only

* through the time rules a session reads — min-runtime protection, a stale gang's grace period — each of
  which tells the session when its answer would change (``Session.valid_until``);
* through creation times that default to the cycle's clock (an object without ``creationTimestamp``), which
  only order objects: the order stays when every creation time that is given is before the cycle's clock;
* as the value of the PodGroup timestamps a cycle sets — a job started, a gang found stale
  (``Session.stamped``): the next cycle on the same objects sets them again, to its own time, and every
  rule that reads them compares them with that same time.

With ``scenarioSearchBudgets`` the wall clock enters too, through the eviction actions' search budgets: a cycle
in which a budget stopped a job's search is not remembered (its decisions depend on how fast it ran).

So the next cycle on the very same objects (the same Python objects: the simulator and Kubernetes mode keep
an unchanged object's identity across cycles; objects are immutable), the same configuration and a clock
that is not earlier and not yet at ``valid_until`` makes the same
decisions and reports the same statuses, with the stamped timestamps at its own time. :class:`CycleMemo`
hands back that result instead of building a snapshot and running the actions. Anything changed — one pod,
one PodGroup annotation, the configuration, an input error — and the cycle runs in full.

In a running cluster that is every cycle in which nothing happened since the last one: pods waiting for
room, pipelined jobs waiting for terminating pods, binds and evictions still in flight.

The recorded objects are kept alive by the memo, so their identities cannot be reused by new objects.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult, PodGroupStatus
from kaisched.framework.session import rfc3339
from kaisched.k8s.objects import ParsedObjects
from kaisched.model.usage import UsageTable

Fingerprint = tuple[tuple[int, ...], ...]


def fingerprint(parsed: ParsedObjects) -> Fingerprint:
    """The identities of every object a prepared cycle reads, list by list."""
    return (tuple(map(id, parsed.nodes)), tuple(map(id, parsed.pods)), tuple(map(id, parsed.queues)),
            tuple(map(id, parsed.pod_groups)), tuple(map(id, parsed.priority_classes)),
            tuple(map(id, parsed.topologies)), tuple(map(id, parsed.workloads)),
            tuple(map(id, parsed.device_classes)), tuple(map(id, parsed.resource_slices)),
            tuple(map(id, parsed.resource_claims)), tuple(map(id, parsed.resource_claim_templates)))


def creation_order_fixed(parsed: ParsedObjects, now: datetime) -> bool:
    """The pods, PodGroups and Queues without a creation time (created at the cycle's clock) sort after every
    other one at ``now`` and at any later time: none, or every given creation time is before ``now``."""
    defaulted = False
    latest: datetime | None = None
    for objs in (parsed.pods, parsed.pod_groups, parsed.queues):
        for o in objs:
            ts = o.meta.creation_timestamp
            if ts is None:
                defaulted = True
            elif latest is None or ts > latest:
                latest = ts
    return not defaulted or latest is None or latest < now


def copy_result(result: CycleResult) -> CycleResult:
    """A result with its own lists (the statuses themselves are immutable)."""
    return CycleResult(binds=list(result.binds), pipelined=list(result.pipelined),
                       evictions=list(result.evictions), pod_groups=list(result.pod_groups),
                       queues=list(result.queues), errors=list(result.errors), nodes=list(result.nodes),
                       claims=list(result.claims), scenario_search=list(result.scenario_search),
                       nominations=list(result.nominations))


def restamped(result: CycleResult, stamped: dict[str, frozenset[str]], now: datetime) -> CycleResult:
    """A copy of ``result`` with the timestamps its cycle set (``stamped``) at ``now``."""
    out = copy_result(result)
    if stamped:
        when = rfc3339(now)
        statuses: list[PodGroupStatus] = []
        for status in out.pod_groups:
            fields = stamped.get(status.name)
            if fields:
                status = replace(status, **dict.fromkeys(fields, when))
            statuses.append(status)
        out.pod_groups = statuses
    return out


@dataclass(slots=True, eq=False)
class _Recorded:
    parsed: ParsedObjects  # kept alive: the fingerprint's identities stay theirs
    ids: Fingerprint
    config: SchedulerConfig
    now: datetime
    valid_until: datetime | None
    result: CycleResult
    stamped: dict[str, frozenset[str]]  # job key -> the timestamps set to the cycle's time
    usage: UsageTable | None  # the usage input (another usage divides otherwise)


class CycleMemo:
    """The last cycle, for :func:`kaisched.cluster.schedule.run_prepared_cycle` (``memo=``)."""

    __slots__ = ("_last", "hits", "misses")

    def __init__(self) -> None:
        self._last: _Recorded | None = None
        self.hits = 0
        self.misses = 0

    @property
    def holds(self) -> bool:
        """The last cycle recorded can answer the next one on the same objects."""
        return self._last is not None

    def lookup(self, parsed: ParsedObjects, config: SchedulerConfig, now: datetime,
               usage: UsageTable | None = None) -> CycleResult | None:
        """The result this cycle would have when it is bound to decide as the last one did; else None."""
        q = self._last
        if (q is None or now < q.now or (q.valid_until is not None and now >= q.valid_until)
                or not (config is q.config or config == q.config) or parsed.errors != q.parsed.errors
                or not _same_usage(usage, q.usage) or fingerprint(parsed) != q.ids):
            self.misses += 1
            return None
        self.hits += 1
        return restamped(q.result, q.stamped, now)

    def record(self, parsed: ParsedObjects, config: SchedulerConfig, now: datetime, result: CycleResult,
               valid_until: datetime | None, stamped: dict[str, set[str]], usage: UsageTable | None = None) -> None:
        """Remember a cycle that just ran (unless a later clock could order its objects otherwise, or a search
        budget decided some of it: with more time the same objects could be decided otherwise)."""
        if creation_order_fixed(parsed, now) and not any(o.stopped_by_budget for o in result.scenario_search):
            self._last = _Recorded(parsed, fingerprint(parsed), config, now, valid_until, copy_result(result),
                                   {k: frozenset(v) for k, v in stamped.items()}, usage)
        else:
            self._last = None


def _same_usage(a: UsageTable | None, b: UsageTable | None) -> bool:
    """Two usage inputs divide alike: the same table, or the same usage per queue (where and when it was fetched
    does not matter)."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    return dict(a.queues) == dict(b.queues)
