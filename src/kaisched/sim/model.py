"""The simulator's data: what a scenario says, and what a run measures.

A :class:`Scenario` is the cluster (Kubernetes objects: nodes, queues, priority classes, topologies), the
scheduler configuration, the scheduling period and the workload: :class:`Arrival` s, each a set of
Kubernetes objects (a workload manifest, or the PodGroup and pods of a compact job spec) arriving at a
simulated time with a run duration.

A :class:`SimResult` is everything a run measured: one :class:`Sample` per scheduling cycle (cluster GPU
allocation, per-queue allocation / fair share / deserved), one :class:`JobRecord` per job (arrival, start,
end, evictions), and the totals of :class:`Summary`. Times are seconds from the start of the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kaisched.cluster.workloads.base import MAX_PODS
from kaisched.framework.result import REASON_CODES, REASON_TIERS

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Arrival:
    """Objects that arrive together (one job): a workload manifest or a PodGroup with its pods."""

    time: float  # seconds from the start
    name: str  # the job's name in the metrics (the workload's or PodGroup's namespace/name)
    queue: str
    objects: tuple[Obj, ...]
    duration: float  # run time once the whole gang runs; inf = never completes by itself
    gpus: float = 0.0  # GPUs the job asks for (for the metrics)
    source: str = ""  # where the scenario says it (``workload.generate[1].mix[0]``, a trace's file:line)


@dataclass(slots=True)
class Scenario:
    name: str
    cluster: list[Obj]  # nodes, queues, priority classes, topologies (Kubernetes objects)
    arrivals: list[Arrival]
    config: Obj | None = None  # KAI-format scheduler configuration (None: KAI's defaults)
    period: float = 10.0  # seconds between scheduling cycles
    until: float | None = None  # stop the simulation at this time (default: when everything finished)
    seed: int = 0
    description: str = ""
    path: str | None = None  # the scenario file it was loaded from (None: built in code or from a mapping)
    text: str | None = None  # that file's content, as read
    #: jobs left out because they could never run on the cluster (``impossible_jobs: drop``), with the reason;
    #: the run counts them as dropped
    dropped: list[tuple[Arrival, str]] = field(default_factory=list)
    #: the most pods the workload controllers make for one arrival (the scenario's ``limits.pods``)
    max_pods: int = MAX_PODS
    #: where the scheduler configuration came from (``config_file: <path>``, or the scenario's own ``config``);
    #: "" for KAI's defaults, or a configuration given in code
    config_source: str = ""


@dataclass(frozen=True, slots=True)
class QueueSample:
    allocated: float  # GPUs (fractions counted as such)
    fair_share: float
    deserved: float  # -1 = unlimited
    requested: float
    #: the queue's normalised historical GPU usage the cycle divided with (time-based fair share: 0..1 of the
    #: cluster's GPUs over the window); None when the run divides by weight only (no usageDBConfig)
    usage: float | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster after one scheduling cycle."""

    time: float
    gpus_total: float
    gpus_allocated: float  # whole and fractional GPUs held by running pods
    gpus_fractional: float  # of which held by shared (fractional / gpu-memory) pods
    idle_gpus: float  # whole GPUs nobody holds
    fragmentation: float  # share of the idle whole GPUs that sit on nodes already partly used (0..1)
    pending_jobs: int
    running_jobs: int
    queues: dict[str, QueueSample] = field(default_factory=dict)
    #: the jobs waiting per reason after the cycle (PENDING_REASONS; reasons nobody waits for left out)
    pending_by_reason: dict[str, int] = field(default_factory=dict)
    #: free GPU no GPU pod of the run could use, by cause (GPUs; :func:`kaisched.sim.metrics.stranded`): on nodes
    #: with less free CPU than any GPU pod asks, with less free memory, and the free shares of shared GPUs
    stranded_no_cpu: float = 0.0
    stranded_no_memory: float = 0.0
    stranded_slivers: float = 0.0


@dataclass(slots=True)
class JobRecord:
    name: str
    queue: str
    gpus: float
    arrival: float
    duration: float
    start: float | None = None  # first time the whole gang ran
    end: float | None = None  # completion
    evictions: int = 0  # times the job lost its gang to an eviction
    lost_gpu_seconds: float = 0.0  # work thrown away by evictions (GPUs x seconds run before)
    outcome: str = ""  # at the end of the run: one of OUTCOMES ("" while it runs)
    reason: str = ""  # why it was dropped
    #: seconds pending per reason (PENDING_REASONS: the cycles' reason codes, and AWAITING_CYCLE), over every
    #: time it waited (before its first start and after each eviction; to the end of the run if it still waits)
    pending_by_reason: dict[str, float] = field(default_factory=dict)
    last_reason: str = ""  # the last reason it spent time pending for ("" if it never waited)

    @property
    def wait(self) -> float | None:
        """Queueing delay: from arrival to the first start."""
        return None if self.start is None else self.start - self.arrival

    @property
    def jct(self) -> float | None:
        """Job completion time: from arrival to the end."""
        return None if self.end is None else self.end - self.arrival

    @property
    def pending(self) -> float:
        """Seconds pending in all, over every reason."""
        return sum(self.pending_by_reason.values())


#: the reason of a job's wait before a cycle looked at it: from its arrival, or its eviction, to the next cycle that
#: gave it a reason code (not one of kaisched's codes: the simulator's own)
AWAITING_CYCLE = "awaiting-cycle"
#: every reason a simulated job's pending time is counted under, in the order of the tiers
PENDING_REASONS: tuple[str, ...] = (*REASON_CODES, AWAITING_CYCLE)
#: each reason's tier, as a sentence starts
PENDING_TIERS: dict[str, str] = {**REASON_TIERS, AWAITING_CYCLE: "Not yet looked at by a cycle"}


#: what became of a job by the end of the run (every job has exactly one)
COMPLETED = "completed"  # ran its whole duration
RUNNING = "running"  # its gang runs at the end of the run (not finished yet)
EVICTED_PENDING = "evicted"  # started, was evicted back to pending and waits again at the end
NEVER_STARTED = "never started"  # waits at the end and never ran
DROPPED = "dropped"  # nothing of it could ever be scheduled (no pod for this scheduler, or its objects have errors)
OUTCOMES = (COMPLETED, RUNNING, EVICTED_PENDING, NEVER_STARTED, DROPPED)


@dataclass(frozen=True, slots=True)
class Stats:
    count: int
    mean: float
    p50: float
    p95: float
    p99: float


@dataclass(slots=True)
class Summary:
    jobs: int
    completed: int
    never_started: int
    makespan: float  # last completion (or the end of the simulation)
    gpu_allocation_mean: float  # time-weighted share of GPUs allocated (0..1)
    fractional_allocation_mean: float  # of which fractional
    wait: Stats
    jct: Stats
    evictions: int
    gpu_hours_lost: float
    fragmentation_mean: float
    jain_fairness: float  # time-weighted Jain index over queues of allocated / fair share
    cycles: int
    wall_seconds: float
    # what became of the jobs (with ``completed`` and ``never_started`` they sum to ``jobs``)
    running_at_end: int = 0
    evicted_pending: int = 0  # started once, evicted, waiting again at the end
    dropped: int = 0
    not_arrived: int = 0  # the scenario's jobs that would arrive after the end (``until``): not in ``jobs``
    end: float = 0.0  # simulated time of the end of the run
    #: jobs in ``wait`` still waiting at the end: their wait counts up to the end, so the figures are lower
    #: bounds when this is not 0
    wait_censored: int = 0
    #: stranded GPUs by cause (Sample.stranded_*), time-weighted means in GPUs
    stranded_no_cpu_mean: float = 0.0
    stranded_no_memory_mean: float = 0.0
    stranded_slivers_mean: float = 0.0

    @property
    def accounted(self) -> dict[str, int]:
        """Outcome -> jobs; sums to ``jobs``."""
        return {COMPLETED: self.completed, RUNNING: self.running_at_end, EVICTED_PENDING: self.evicted_pending,
                NEVER_STARTED: self.never_started, DROPPED: self.dropped}


@dataclass(slots=True)
class SimResult:
    scenario: str
    samples: list[Sample]
    jobs: list[JobRecord]
    summary: Summary
    config: Obj | None = None
    #: what the run was made of: scenario file, its hash and text, seed, kaisched version, command line
    inputs: dict[str, Any] = field(default_factory=dict)

    #: each leaf queue's long-run fair share in GPUs (kaisched.sim.fairness.long_run_shares): the weight-only
    #: division of the cluster among the queues for their mean demand over the run
    long_run_share: dict[str, float] = field(default_factory=dict)

    @property
    def time_based(self) -> bool:
        """The run divided with historical usage (its scheduler config has ``usageDBConfig``)."""
        return isinstance(self.config, dict) and self.config.get("usageDBConfig") is not None
