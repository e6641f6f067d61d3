"""Victims that no simulation can place again (``SHORTCUTS.validate_first``, see :mod:`kaisched.actions.solver`).

A simulation evicts a scenario's victims, places the preemptor P, then places its victims again where they fit;
the scenario validators then judge the victims by what stays evicted (a moved victim costs its queue nothing).
Validators read only the victims' statuses and P's requests (scenario validators' contract: never where P went),
so when no victim can be placed again *together with P* and no victim gang is left below its minimum (which would
add victims), the validators' verdict after the simulation is the verdict on the evictions alone. A scenario the
validators refuse there fails whatever the placement does, and is refused before placing anything: on a busy
cluster most reclaim scenarios place P and are then refused by the proportion rules or the loop guard.

:func:`victims_stay_evicted` decides "no victim can be placed again together with P" by whole GPUs alone, a
relaxation: CPU, memory, affinity and the placement order only ever make fewer placements possible. It answers
only for whole-GPU pods without DRA claims (P's and the victims'), and False (simulate) otherwise.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kaisched.model.gpu import GpuKind
from kaisched.model.job import PodGroupInfo
from kaisched.model.node import NodeTable
from kaisched.model.resources import GPU
from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]

#: an amount within this of a fit counts as fitting (the relaxation errs towards "could be placed")
_SLACK = 1e-6


def _whole(task: TaskInfo) -> float:
    """The whole GPUs ``task`` asks for, or 0 when it is not a plain whole-GPU pod (shared, MIG, DRA, none)."""
    if task.gpu.kind is not GpuKind.WHOLE or task.claims:
        return 0.0
    return float(task.req[GPU])


def victims_stay_evicted(nodes: NodeTable, tasks: list[TaskInfo], evict: list[TaskInfo], mask: BoolArray) -> bool:
    """True when, once ``evict`` (active pods) are evicted, no victim can be placed on ``mask`` (where the
    simulation places victims again, and P; it holds the victims' nodes) while P's ``tasks`` are placed too,
    counting free whole GPUs (idle and releasing, with what the victims release) only; and no victim job falls
    below its minimum (no broken gang to evict whole). Read before the evictions."""
    needs = [_whole(t) for t in tasks]
    if not needs or min(needs) <= 0.0:
        return False
    smallest = float("inf")
    jobs: dict[str, PodGroupInfo] = {}
    losing: dict[tuple[str, str], int] = {}  # (job key, pod set) -> victims taken from it
    for t in evict:
        g = _whole(t)
        if g <= 0.0 or t.job is None or t.node < 0 or not t.is_settled_active:
            return False
        smallest = min(smallest, g)
        jobs[t.job.key] = t.job
        losing[(t.job.key, t.pod_set)] = losing.get((t.job.key, t.pod_set), 0) + 1
    if not jobs:
        return False
    for key, job in jobs.items():
        # a job left below its minimum with pods still active is evicted whole: more victims (a job losing all
        # its active pods has nothing left to evict)
        taken_from_job = sum(taken for (k, _), taken in losing.items() if k == key)
        if sum(1 for t in job.tasks if t.is_settled_active) == taken_from_job:
            continue
        for ps in job.pod_sets.values():
            if ps.active_allocated - losing.get((key, ps.name), 0) < ps.min_available:
                return False
    free_all = nodes.idle[GPU] + nodes.releasing[GPU]
    np.add.at(free_all, np.fromiter((t.node for t in evict), dtype=np.int64, count=len(evict)),
              np.fromiter((t.req[GPU] for t in evict), dtype=np.float64, count=len(evict)))
    free = np.maximum(free_all[mask], 0.0)
    if len(needs) == 1:
        p = needs[0]
        top = np.sort(free)[-2:]
        first = float(top[-1])
        second = float(top[0]) if top.size == 2 else -1.0
        # a victim and P on one node, or each on its own
        if first + _SLACK >= p + smallest:
            return False
        return not (first + _SLACK >= max(p, smallest) and second + _SLACK >= min(p, smallest))
    # several tasks: all of them and one victim need that many GPUs in all, and the victim one node with room
    return not (float(free.sum()) + _SLACK >= sum(needs) + smallest and float(free.max()) + _SLACK >= smallest)
