"""KAI's time-based fair-share simulator input, run on kaisched's simulator (spec 5.7).

KAI's ``cmd/time-based-fairshare-simulator`` reads a YAML file and writes, per cycle and queue, the queue's GPU
allocation and fair share (CSV ``Time,QueueID,Allocation,FairShare``). The same file runs here::

    Cycles: 200              # scheduling cycles (default 100); one cycle is one second of simulated time
    WindowSize: 10           # the usage window, in cycles (default 5): usageParams.windowSize
    HalfLifePeriod: 0        # the usage decay half-life, in cycles (default 0: no decay)
    KValue: 1.0              # the proportion plugin's kValue (default 1.0)
    Nodes: [{GPUs: 8, Count: 2}]
    Queues:                  # Parent "" (or none): a top-level queue (KAI's department)
      - {Name: dept, Parent: ""}
      - {Name: team-a, Parent: dept, Priority: 100, DeservedGPUs: 0, Weight: 1.0}
      - {Name: team-b, Parent: dept}
    Jobs:                    # per queue: NumJobs jobs of NumPods pods of GPUs each, submitted at cycle 0
      team-a: {GPUs: 1, NumPods: 1, NumJobs: 100}
      team-b: {GPUs: 1, NumPods: 1, NumJobs: 100, Start: 30}   # Start: kaisched's extension (see below)

How it is run (:func:`scenario_of`): the nodes, Queues (GPU quota ``DeservedGPUs``, over-quota weight ``Weight``,
no limit; CPU and memory unlimited) and jobs (preemptible ``train`` jobs whose pods each ask ``GPUs`` whole GPUs
and nothing else of note, ``minMember`` 1 as in KAI) become a simulator scenario; the scheduler config is KAI's
default one (all actions, all default plugins) with the proportion plugin's ``kValue`` and a ``usageDBConfig``
of clientType ``fake-with-history``: the usage comes from the allocation history the simulator keeps on its own
clock, sampled every cycle (``queryResolution`` one second) over a sliding window of ``WindowSize`` cycles. Jobs
never finish. A cycle runs every simulated second, whether or not anything changed, and each cycle's allocation
and fair share of every queue (top-level ones included) is a row of the CSV.

Differences from KAI's tool (none changes the division): KAI runs its scheduler components against a test API
server, one cycle every ~10 ms of wall time, and its rows come in the random order of a Go map; here time is
simulated, the rows of a cycle follow the file's queue order, and the run is deterministic. KAI makes one node per
``Nodes`` entry whatever its ``Count``; here ``Count`` nodes are made. ``Start`` (a cycle, default 0) is an
extension: the queue's jobs are submitted at that cycle instead of at the start, so that a queue can run alone
first. Keys are matched without regard to case (``cycles`` is ``Cycles``), as KAI's YAML decoder does, and a
``null`` value takes the default.

:func:`long_run_fair_share` is the division without history for every queue's whole demand (what weight-only
division gives every cycle once all jobs are submitted, and what time-based division gives on average);
:func:`settling` reads from a run how long each queue took to come within a GPU of it and stay there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kaisched.framework.config import DEFAULT_PLUGINS
from kaisched.framework.result import CycleResult
from kaisched.plugins.proportion.division import QueueShareInput, compute_fair_shares
from kaisched.sim.model import Scenario, SimResult

__all__ = ["KaiJobs", "KaiNodes", "KaiQueue", "Settling", "TimeBasedError", "TimeBasedRun", "TimeBasedSimulation",
           "csv_text", "load_time_based", "long_run_fair_share", "parse_time_based", "run_time_based", "scenario_of",
           "settling"]

CSV_HEADER = "Time,QueueID,Allocation,FairShare"
NODE_CPU = "4096"  # each node's CPU and memory: plenty, so that only GPUs count
NODE_MEMORY = "64Ti"
NODE_PODS = 100_000


class TimeBasedError(ValueError):
    """A time-based simulator file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class KaiQueue:
    name: str
    parent: str | None = None  # None: a top-level queue (Parent "" in the file)
    priority: int = 100
    deserved_gpus: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class KaiJobs:
    queue: str
    gpus: int  # per pod
    num_pods: int = 1
    num_jobs: int = 1
    start: int = 0  # the cycle at which they are submitted (kaisched's extension)


@dataclass(frozen=True, slots=True)
class KaiNodes:
    gpus: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class TimeBasedSimulation:
    """A parsed time-based simulator file (KAI's defaults applied)."""

    nodes: tuple[KaiNodes, ...]
    queues: tuple[KaiQueue, ...]
    jobs: tuple[KaiJobs, ...]
    cycles: int = 100
    window_size: int = 5  # cycles
    half_life: int = 0  # cycles; 0: no decay
    k_value: float = 1.0
    name: str = "time-based"
    text: str | None = None  # the file as read

    @property
    def gpus(self) -> int:
        return sum(n.gpus * n.count for n in self.nodes)


# ------------------------------------------------------------------------------------------------ parsing


def _lower(raw: Mapping[Any, Any], where: str, known: Sequence[str]) -> dict[str, Any]:
    """The mapping with its keys matched to ``known`` without regard to case; an unknown key is an error."""
    names = {k.lower(): k for k in known}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = names.get(str(key).lower())
        if name is None:
            raise TimeBasedError(f"{where}{key}: unknown field (known: {', '.join(known)})")
        if value is not None:  # null: the default (a nil pointer in KAI's Go structs)
            out[name] = value
    return out


def _int(value: object, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < minimum:
        raise TimeBasedError(f"{where}: expected a whole number >= {minimum}, got {value!r}")
    return int(value)


def _float(value: object, where: str, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or (
            minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise TimeBasedError(f"{where}: expected a number{bound}, got {value!r}")
    return float(value)


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TimeBasedError(f"{where}: expected a list")
    return value


def _map(value: object, where: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TimeBasedError(f"{where}: expected a mapping")
    return value


def parse_time_based(raw: object, source: str = "<input>", *, name: str = "time-based",
                     text: str | None = None) -> TimeBasedSimulation:
    """The simulation a decoded file describes (``source`` names it in errors)."""
    top = _lower(_map(raw, source), f"{source}: ",
                 ("Cycles", "WindowSize", "HalfLifePeriod", "KValue", "Nodes", "Queues", "Jobs"))
    at = f"{source}: "
    cycles = _int(top.get("Cycles", 100), f"{at}Cycles", 1)
    window = _int(top.get("WindowSize", 5), f"{at}WindowSize", 1)
    half_life = _int(top.get("HalfLifePeriod", 0) or 0, f"{at}HalfLifePeriod", 0)
    k_value = _float(top.get("KValue", 1.0), f"{at}KValue", None)
    nodes = []
    for i, entry in enumerate(_list(top.get("Nodes"), f"{at}Nodes")):
        where = f"{at}Nodes[{i}]"
        n = _lower(_map(entry, where), f"{where}.", ("GPUs", "Count"))
        nodes.append(KaiNodes(_int(n.get("GPUs", 0), f"{where}.GPUs", 0), _int(n.get("Count", 1), f"{where}.Count", 0)))
    if not any(n.gpus * n.count for n in nodes):
        raise TimeBasedError(f"{at}Nodes: no GPUs (give e.g. Nodes: [{{GPUs: 8, Count: 2}}])")
    queues: list[KaiQueue] = []
    for i, entry in enumerate(_list(top.get("Queues"), f"{at}Queues")):
        where = f"{at}Queues[{i}]"
        q = _lower(_map(entry, where), f"{where}.", ("Name", "Parent", "Priority", "DeservedGPUs", "Weight"))
        qname = q.get("Name")
        if not isinstance(qname, str) or not qname:
            raise TimeBasedError(f"{where}.Name: a queue needs a name")
        parent = q.get("Parent") or None
        if parent is not None and not isinstance(parent, str):
            raise TimeBasedError(f"{where}.Parent: expected a queue name or \"\", got {parent!r}")
        queues.append(KaiQueue(qname, parent, _int(q.get("Priority", 100), f"{where}.Priority", 0),
                               _float(q.get("DeservedGPUs", 0.0), f"{where}.DeservedGPUs"),
                               _float(q.get("Weight", 1.0), f"{where}.Weight")))
    names = [q.name for q in queues]
    for i, kq in enumerate(queues):
        if names.count(kq.name) > 1:
            raise TimeBasedError(f"{at}Queues[{i}].Name: queue {kq.name} is defined twice")
        if kq.parent is not None and kq.parent not in names:
            raise TimeBasedError(f"{at}Queues[{i}].Parent: queue {kq.parent} is not defined in Queues")
    parents = {kq.parent for kq in queues if kq.parent is not None}
    jobs = []
    for queue, entry in _map(top.get("Jobs"), f"{at}Jobs").items():
        where = f"{at}Jobs.{queue}"
        if str(queue) not in names:
            raise TimeBasedError(f"{where}: queue {queue} is not defined in Queues")
        if str(queue) in parents:
            raise TimeBasedError(f"{where}: queue {queue} has child queues; jobs go to leaf queues")
        j = _lower(_map(entry, where), f"{where}.", ("GPUs", "NumPods", "NumJobs", "Start"))
        jobs.append(KaiJobs(str(queue), _int(j.get("GPUs", 1), f"{where}.GPUs", 1),
                            _int(j.get("NumPods", 1), f"{where}.NumPods", 1),
                            _int(j.get("NumJobs", 1), f"{where}.NumJobs", 0),
                            _int(j.get("Start", 0), f"{where}.Start", 0)))
    return TimeBasedSimulation(tuple(nodes), tuple(queues), tuple(jobs), cycles, window, half_life, k_value, name,
                               text)


def load_time_based(path: str | Path) -> TimeBasedSimulation:
    """The simulation of a file (YAML)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TimeBasedError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    try:
        raw = yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        raise TimeBasedError(f"{source}: invalid YAML: {exc}") from None
    return parse_time_based(raw if raw is not None else {}, source, name=Path(path).stem, text=text)


# ------------------------------------------------------------------------------------------------ running


def _queue_object(q: KaiQueue) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": q.priority,
        "resources": {
            "gpu": {"quota": q.deserved_gpus, "limit": -1, "overQuotaWeight": q.weight},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        },
    }
    if q.parent is not None:
        spec["parentQueue"] = q.parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": q.name}, "spec": spec}


def scheduler_config(sim: TimeBasedSimulation, *, time_based: bool = True) -> dict[str, Any]:
    """KAI's default scheduler config with the file's kValue and, when ``time_based``, a ``usageDBConfig`` over
    the simulated history (window ``WindowSize`` s, half-life ``HalfLifePeriod`` s, resolution 1 s)."""
    plugins: list[dict[str, Any]] = []
    for p in DEFAULT_PLUGINS:
        option: dict[str, Any] = {"name": p.name}
        arguments = dict(p.arguments)
        if p.name == "proportion":
            arguments["kValue"] = f"{sim.k_value:g}"
        if arguments:
            option["arguments"] = arguments
        plugins.append(option)
    config: dict[str, Any] = {"tiers": [{"plugins": plugins}]}
    if time_based:
        params: dict[str, Any] = {"windowType": "sliding", "windowSize": f"{sim.window_size}s",
                                  "extraParams": {"queryResolution": "1s"}}
        if sim.half_life > 0:
            params["halfLifePeriod"] = f"{sim.half_life}s"
        config["usageDBConfig"] = {"clientType": "fake-with-history", "usageParams": params}
    return config


def scenario_of(sim: TimeBasedSimulation, *, time_based: bool = True) -> Scenario:
    """The simulator scenario of a time-based simulation (weight-only division when not ``time_based``)."""
    from kaisched.sim.scenario import scenario_from_mapping

    arrivals = []
    for jobs in sim.jobs:
        digits = len(str(max(jobs.num_jobs - 1, 0)))
        for i in range(jobs.num_jobs):
            arrivals.append({"time": jobs.start, "job": {
                "name": f"{jobs.queue}-{i:0{digits}d}", "queue": jobs.queue, "pods": jobs.num_pods,
                "gpus": jobs.gpus, "cpu": "1m", "memory": "1Mi", "min_member": 1, "priority_class": "train"}})
    doc = {
        "name": sim.name,
        "description": f"KAI time-based fair-share simulation: {sim.cycles} cycles of 1 s, window {sim.window_size}"
                       f" cycles, half-life {sim.half_life or 'off'}, kValue {sim.k_value:g}",
        "period": 1,
        "until": sim.cycles - 1,
        "config": scheduler_config(sim, time_based=time_based),
        "cluster": {
            "pools": [{"name": f"gpu{n.gpus}-{i}", "count": n.count, "gpus": n.gpus, "cpu": NODE_CPU,
                       "memory": NODE_MEMORY, "pods": NODE_PODS} for i, n in enumerate(sim.nodes) if n.count],
            "objects": [_queue_object(q) for q in sim.queues],
        },
        "workload": {"arrivals": arrivals},
    }
    scenario = scenario_from_mapping(doc)
    scenario.text = sim.text
    return scenario


@dataclass(frozen=True, slots=True)
class Row:
    time: int  # the cycle
    queue: str
    allocation: float
    fair_share: float


@dataclass(slots=True)
class TimeBasedRun:
    """One run: the simulator's result and the per-cycle rows of every queue (in the file's queue order)."""

    simulation: TimeBasedSimulation
    time_based: bool
    result: SimResult
    rows: list[Row] = field(default_factory=list)

    def series(self, queue: str) -> tuple[list[float], list[float]]:
        """The queue's allocation and fair share per cycle."""
        rows = [r for r in self.rows if r.queue == queue]
        return [r.allocation for r in rows], [r.fair_share for r in rows]


def run_time_based(sim: TimeBasedSimulation, *, time_based: bool = True) -> TimeBasedRun:
    """Run the simulation: a cycle every simulated second for ``Cycles`` cycles."""
    from kaisched.sim.engine import Simulator

    order = [q.name for q in sim.queues]
    rows: list[Row] = []

    def observe(t: float, result: CycleResult) -> None:
        by_name = {q.name: q for q in result.queues}
        for name in order:
            q = by_name.get(name)
            if q is not None:
                rows.append(Row(round(t), name, q.allocated.get("gpu", 0.0), q.fair_share.get("gpu", 0.0)))

    scenario = scenario_of(sim, time_based=time_based)
    result = Simulator(scenario, every_cycle=True, observer=observe).run()
    return TimeBasedRun(sim, time_based, result, rows)


def csv_text(rows: Sequence[Row]) -> str:
    """KAI's output: ``Time,QueueID,Allocation,FairShare``, numbers with six decimals."""
    lines = [CSV_HEADER, *(f"{r.time},{r.queue},{r.allocation:f},{r.fair_share:f}" for r in rows)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- figures


def long_run_fair_share(sim: TimeBasedSimulation) -> dict[str, float]:
    """Each queue's GPUs under the weight-only division of the cluster for every queue's whole demand (all its
    jobs submitted): where time-based division settles once usage has evened out."""
    demand: dict[str, float] = {q.name: 0.0 for q in sim.queues}
    parent_of = {q.name: q.parent for q in sim.queues}
    for jobs in sim.jobs:
        name: str | None = jobs.queue
        while name is not None:
            demand[name] += float(jobs.gpus * jobs.num_pods * jobs.num_jobs)
            name = parent_of[name]
    inputs = [QueueShareInput(name=q.name, parent=q.parent, priority=q.priority, order_key=(i, q.name),
                              deserved=np.array([q.deserved_gpus, -1.0, -1.0]),
                              max_allowed=np.array([-1.0, -1.0, -1.0]),
                              over_quota_weight=np.array([q.weight, 1.0, 1.0]),
                              request=np.array([demand[q.name], 0.0, 0.0]), usage=np.zeros(3))
              for i, q in enumerate(sim.queues)]
    shares = compute_fair_shares(inputs, np.array([float(sim.gpus), 0.0, 0.0]), 0.0)
    return {name: float(share[0]) for name, share in shares.items()}


@dataclass(frozen=True, slots=True)
class Settling:
    """How a queue's allocation approached its long-run fair share after ``since`` (the last submission)."""

    queue: str
    long_run: float
    #: cycles from ``since`` until the allocation came within ``tolerance`` GPUs of the long-run fair share and
    #: stayed there to the end; None: it never settled
    cycles: int | None
    #: max - min of the allocation over the last window (0: steady)
    swing: float
    #: the largest allocation after ``since`` (above the long-run share: the queue was compensated)
    peak: float
    #: mean |allocation - long-run fair share| over the cycles from ``since`` on
    error: float


def settling(run: TimeBasedRun, tolerance: float = 1.0) -> dict[str, Settling]:
    """Per leaf queue with jobs: how fast its allocation settled to the long-run fair share (within ``tolerance``
    GPUs) after the last queue's jobs were submitted, and how much it still swings over the last window."""
    sim = run.simulation
    since = max((j.start for j in sim.jobs), default=0)
    long_run = long_run_fair_share(sim)
    out: dict[str, Settling] = {}
    for jobs in sim.jobs:
        alloc, _ = run.series(jobs.queue)
        after = alloc[since:]
        target = long_run[jobs.queue]
        if not after:
            continue
        off = [abs(a - target) > tolerance + 1e-9 for a in after]
        last_off = max((i for i, bad in enumerate(off) if bad), default=-1)
        cycles = last_off + 1 if last_off + 1 < len(after) else None
        tail = alloc[-sim.window_size:]
        out[jobs.queue] = Settling(jobs.queue, target, cycles, max(tail) - min(tail), max(after),
                                   float(np.mean([abs(a - target) for a in after])))
    return out
