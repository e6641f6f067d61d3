"""The outcome of one scheduling cycle."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kaisched.framework.search_stats import ActionSearchStats
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError
from kaisched.model.job import FitDetail
from kaisched.model.victim_memory import VICTIMS_ANNOTATION


@dataclass(frozen=True, slots=True, init=False)
class Placement:
    pod: str  # "<ns>/<name>"
    node: str
    gpu_groups: tuple[str, ...]

    # (the result classes a cycle makes by the thousand write their __init__ out: a compiled core keeps a
    # generated one interpreted, see docs/performance.md)
    def __init__(self, pod: str, node: str, gpu_groups: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpu_groups", gpu_groups)

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "gpuGroups": list(self.gpu_groups)}


@dataclass(frozen=True, slots=True, init=False)
class Nomination:
    """A pod's ``status.nominatedNodeName`` after the cycle, for a pod whose nomination the cycle changes: the
    node it pipelined the pod onto (the pod keeps a claim on it in the next cycle: kaisched.plugins.nominated_pods),
    or "" to clear it."""

    pod: str  # "<ns>/<name>"
    node: str  # "" clears the nomination

    def __init__(self, pod: str, node: str) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node or None}


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    action: str
    preemptor: str  # "<ns>/<podgroup>" ("" for stale-gang eviction)
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "action": self.action, "preemptor": self.preemptor or None,
                "message": self.message}


#: kaisched's reason codes: why a job waits, in tiers (a PodGroupStatus's ``code``; docs/explain.md)
MISCONFIGURED = "misconfigured"  # the job or its queue is invalid: it can never run as it is
OVER_LIMIT = "over-limit"  # its queue (or a parent) would go over its limit
NON_PREEMPTIBLE_OVER_QUOTA = "non-preemptible-over-quota"  # non-preemptible work over its queue's deserved quota
FAIR_SHARE = "fair-share"  # no room, and its queue is at its fair share: it cannot reclaim, it waits for room
GANG_INCOMPLETE = "gang-incomplete"  # fewer pods exist than the gang's minMember
BELOW_MIN_MEMBER = "below-min-member"  # room found for fewer pods than minMember
FITS_NOWHERE = "fits-nowhere"  # a pod finds no node (the fit-error histogram says why, per node)
TOPOLOGY = "topology"  # the topology constraint cannot be met
WAITING_FOR_VICTIMS = "waiting-for-victims"  # placed (pipelined): waits for evicted or terminating pods to go
SEARCH_BUDGET = "search-budget"  # a victim search budget ran out before a solution
NOT_REACHED = "not-reached"  # ready, but no action tried it in this cycle

#: each code's tier, as a sentence starts (in the order of the tiers)
REASON_TIERS: dict[str, str] = {
    MISCONFIGURED: "Misconfigured",
    OVER_LIMIT: "Over its queue's limit",
    NON_PREEMPTIBLE_OVER_QUOTA: "Non-preemptible over quota",
    FAIR_SHARE: "Waiting for fair share to free",
    GANG_INCOMPLETE: "Gang incomplete",
    BELOW_MIN_MEMBER: "Below minMember",
    FITS_NOWHERE: "Fits nowhere",
    TOPOLOGY: "Topology",
    WAITING_FOR_VICTIMS: "Waiting for victims to terminate",
    SEARCH_BUDGET: "Victim search stopped by its budget",
    NOT_REACHED: "Not reached in this cycle",
}
REASON_CODES: tuple[str, ...] = tuple(REASON_TIERS)

#: the code of a reason that is a code itself (KAI's reasons); others are coded where they are made
CODE_OF_REASON: dict[str, str] = {
    "OverLimit": OVER_LIMIT,
    "NonPreemptibleOverQuota": NON_PREEMPTIBLE_OVER_QUOTA,
    "NotReady": GANG_INCOMPLETE,
    "WaitingForVictims": WAITING_FOR_VICTIMS,
    "WaitingForReleasingResources": WAITING_FOR_VICTIMS,
    "ScenarioSearchUnresolved": SEARCH_BUDGET,
    "Unschedulable": NOT_REACHED,
    "PodSchedulingErrors": FITS_NOWHERE,
}


@dataclass(frozen=True, slots=True, init=False)
class PodGroupStatus:
    name: str  # "<ns>/<name>"
    queue: str
    status: str  # Running | Allocated | Pipelined | Pending
    reason: str | None
    message: str | None
    last_start: str | None  # RFC3339
    stale_since: str | None
    code: str | None  # kaisched's reason code (REASON_CODES) when reason is set
    detail: FitDetail | None  # the structure behind the message (histogram, gang, victims), for explanations
    victims: str | None  # the remembered victims' annotation value (model/victim_memory.py); None: none

    def __init__(self, name: str, queue: str, status: str, reason: str | None, message: str | None,
                 last_start: str | None = None, stale_since: str | None = None, code: str | None = None,
                 detail: FitDetail | None = None, victims: str | None = None) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "last_start", last_start)
        object.__setattr__(self, "stale_since", stale_since)
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "victims", victims)

    @property
    def tier(self) -> str | None:
        """The tier of the reason code, as a sentence starts ("Fits nowhere"); None without a code."""
        return REASON_TIERS.get(self.code or "")

    def tiered_message(self) -> str | None:
        """The message with its tier in front ("Over its queue's limit: ..."): what Kubernetes mode writes in the
        PodGroup's condition and event. The message itself without a code; None without a message."""
        tier = self.tier
        if self.message is None or tier is None:
            return self.message
        return f"{tier}: {self.message}"

    def annotations(self) -> dict[str, str | None]:
        """The PodGroup annotations this status sets (None: the annotation is removed)."""
        return {C.LAST_START_TIMESTAMP_ANNOTATION: self.last_start or None,
                C.STALE_PODGROUP_TIMESTAMP_ANNOTATION: self.stale_since or None,
                VICTIMS_ANNOTATION: self.victims}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "queue": self.queue, "status": self.status, "reason": self.reason,
                "message": self.message, "code": self.code, "lastStartTimestamp": self.last_start,
                "staleSinceTimestamp": self.stale_since}


@dataclass(frozen=True, slots=True)
class QueueStatus:
    name: str
    parent: str | None
    deserved: dict[str, float]
    fair_share: dict[str, float]
    allocated: dict[str, float]
    request: dict[str, float]
    limit: dict[str, float]
    priority: int
    #: normalised historical usage (time-based fair share, spec 5.7); empty when the cycle had no usage input
    usage: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "parent": self.parent, "deserved": self.deserved,
               "fairShare": self.fair_share, "allocated": self.allocated, "request": self.request,
               "limit": self.limit, "priority": self.priority}
        if self.usage:
            out["usage"] = self.usage
        return out


@dataclass(frozen=True, slots=True, init=False)
class SharedGpuStatus:
    group: str  # the runai-gpu-group of this device
    memory_mib: float  # the device's memory
    used_mib: float  # held or awaited by its pods
    releasing_mib: float
    pods: tuple[str, ...]

    def __init__(self, group: str, memory_mib: float, used_mib: float, releasing_mib: float,
                 pods: tuple[str, ...]) -> None:
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "memory_mib", memory_mib)
        object.__setattr__(self, "used_mib", used_mib)
        object.__setattr__(self, "releasing_mib", releasing_mib)
        object.__setattr__(self, "pods", pods)

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "memoryMiB": self.memory_mib, "usedMiB": self.used_mib,
                "releasingMiB": self.releasing_mib, "pods": list(self.pods)}


@dataclass(frozen=True, slots=True, init=False)
class NodeGpuStatus:
    """A GPU node after the cycle: whole devices and each shared device."""

    name: str
    gpus: float  # allocatable devices
    idle: float  # whole devices nobody holds
    releasing: float  # whole devices being freed (incl. shared devices whose pods all terminate)
    whole_gpu_pods: tuple[str, ...]  # pods holding whole devices
    shared: tuple[SharedGpuStatus, ...]
    cpu_idle: float  # millicores nobody holds (what a GPU on it could still be driven with; not in to_dict)
    memory_idle: float  # bytes nobody holds

    def __init__(self, name: str, gpus: float, idle: float, releasing: float, whole_gpu_pods: tuple[str, ...],
                 shared: tuple[SharedGpuStatus, ...], cpu_idle: float = 0.0, memory_idle: float = 0.0) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "idle", idle)
        object.__setattr__(self, "releasing", releasing)
        object.__setattr__(self, "whole_gpu_pods", whole_gpu_pods)
        object.__setattr__(self, "shared", shared)
        object.__setattr__(self, "cpu_idle", cpu_idle)
        object.__setattr__(self, "memory_idle", memory_idle)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "idleGpus": self.idle, "releasingGpus": self.releasing,
                "wholeGpuPods": list(self.whole_gpu_pods), "sharedGpus": [g.to_dict() for g in self.shared]}


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One device of a claim's allocation (``status.allocation.devices.results[]``)."""

    request: str
    driver: str
    pool: str
    device: str

    def to_dict(self) -> dict[str, str]:
        return {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """A DRA ResourceClaim of a pod bound in this cycle: the devices it holds (allocated now, or before when
    ``new`` is False) and the pods of the cycle's binds that reserve it. ``template``: the ResourceClaimTemplate
    the claim is made from when the cycle made it (the embedded resourceclaim controller), else ""."""

    claim: str  # "<ns>/<name>"
    node: str  # the node of its devices ("" for devices reached from several nodes)
    devices: tuple[DeviceResult, ...]
    pods: tuple[str, ...]
    new: bool
    template: str = ""
    pod_claim: str = ""  # the pod's claim the template claim is made for

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"claim": self.claim, "node": self.node, "devices": [d.to_dict() for d in self.devices],
                               "pods": list(self.pods), "new": self.new}
        if self.template:
            out["template"] = self.template
            out["podClaim"] = self.pod_claim
        return out


#: the results of a pending job's victim search (KAI v0.17's solvers.SearchResultReason)
SEARCH_SOLVED = "solved"
SEARCH_DEADLINE_EXHAUSTED = "deadline_exhausted"  # a search budget expired before a solution
SEARCH_GENERATORS_EXHAUSTED = "generators_exhausted"  # every scenario tried, none solved
SEARCH_NOT_ATTEMPTED = "not_attempted"  # no action budget left when the job was reached
SCENARIO_SEARCH_UNRESOLVED = "ScenarioSearchUnresolved"  # the pending reason of a job a budget stopped


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """How an eviction action's victim search for one pending job ended (every job that reached the solver).
    ``stopped_by``: the budget that stopped it (``action``, ``job`` or ``generator``), else None."""

    action: str
    job: str  # "<ns>/<podgroup>"
    result: str  # solved | deadline_exhausted | generators_exhausted | not_attempted
    reduced_budget: bool = False
    stopped_by: str | None = None

    @property
    def stopped_by_budget(self) -> bool:
        """A budget decided this outcome: with more time the search might have gone otherwise."""
        return self.result in (SEARCH_DEADLINE_EXHAUSTED, SEARCH_NOT_ATTEMPTED)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "job": self.job, "result": self.result, "reducedBudget": self.reduced_budget,
                "stoppedBy": self.stopped_by}


@dataclass(slots=True)
class CycleResult:
    binds: list[Placement] = field(default_factory=list)
    pipelined: list[Placement] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    pod_groups: list[PodGroupStatus] = field(default_factory=list)
    queues: list[QueueStatus] = field(default_factory=list)
    errors: list[ObjectError] = field(default_factory=list)
    nodes: list[NodeGpuStatus] = field(default_factory=list)
    claims: list[ClaimAllocation] = field(default_factory=list)  # DRA claims of the pods bound
    # the eviction actions' victim searches, one per job that reached the solver, in the order they ran
    scenario_search: list[SearchOutcome] = field(default_factory=list)
    # the pods whose status.nominatedNodeName the cycle sets (pipelined) or clears, by pod key
    nominations: list[Nomination] = field(default_factory=list)
    # what the victim searches cost, per action (diagnostics: not part of the decisions, nor of to_dict)
    search_stats: dict[str, ActionSearchStats] = field(default_factory=dict, compare=False)
    # the capacity the queues divided (spec 5.2: gpu, cpu, memory in the units of QueueStatus.allocated): what a
    # usage history records beside the queues' allocations (not part of the decisions, nor of to_dict)
    capacity: dict[str, float] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "binds": [b.to_dict() for b in self.binds],
            "pipelined": [p.to_dict() for p in self.pipelined],
            "evictions": [e.to_dict() for e in self.evictions],
            "podGroups": [g.to_dict() for g in self.pod_groups],
            "queues": [q.to_dict() for q in self.queues],
            "errors": [e.to_dict() for e in self.errors],
            "nodes": [n.to_dict() for n in self.nodes],
            "claims": [c.to_dict() for c in self.claims],
            "scenarioSearch": [o.to_dict() for o in self.scenario_search],
            "nominations": [n.to_dict() for n in self.nominations],
        }

    def pod_group(self, name: str) -> PodGroupStatus | None:
        return next((g for g in self.pod_groups if g.name == name), None)

    def decision_errors(self, active_at_start: Collection[str] | None = None) -> list[str]:
        """What is wrong with the cycle's account of its decisions (empty: nothing), as sentences naming the
        pod: a pod evicted more than once, placed (bound or pipelined) more than once, or bound and evicted.
        With ``active_at_start`` (the keys of the pods that held resources when the cycle started and were not
        terminating) also an evicted pod that was not active then: the cycle placed it and took it as a victim
        again (only a moved victim is both evicted and pipelined, and it was active). For tests and
        diagnostics: linear in the decisions."""
        errors: list[str] = []
        evicted: dict[str, list[Eviction]] = {}
        for e in self.evictions:
            evicted.setdefault(e.pod, []).append(e)
        for pod, evictions in evicted.items():
            if len(evictions) > 1:
                by = ", ".join(f"{e.action} for {e.preemptor or 'nobody'}" for e in evictions)
                errors.append(f"{pod} evicted {len(evictions)} times: {by}")
        placed: dict[str, list[str]] = {}
        for kind, placements in (("bound", self.binds), ("pipelined", self.pipelined)):
            for p in placements:
                placed.setdefault(p.pod, []).append(f"{kind} on {p.node}")
        for pod, where in placed.items():
            if len(where) > 1:
                errors.append(f"{pod} placed {len(where)} times: {', '.join(where)}")
        bound = {b.pod for b in self.binds}
        for pod in bound & evicted.keys():
            errors.append(f"{pod} bound and evicted ({evicted[pod][0].action} for {evicted[pod][0].preemptor})")
        if active_at_start is not None:
            active = set(active_at_start)
            for pod, evictions in evicted.items():
                if pod not in active:
                    e = evictions[0]
                    errors.append(f"{pod} evicted by {e.action} for {e.preemptor or 'nobody'} although it was not "
                                  "running when the cycle started")
        return errors
