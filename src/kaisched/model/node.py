"""Nodes as a structure of arrays.

All nodes of a snapshot live in one :class:`NodeTable`, sorted by name (the node index is the
tie-breaker KAI uses: equal scores go to the smaller name). Resource accounting is kept in two
``(resources, nodes)`` arrays, ``idle`` and ``releasing``, so a fit check for one task over all nodes
is a handful of vectorised comparisons:

* a task fits for allocation on node n iff ``req <= idle[:, n]``;
* it fits for pipelining iff ``req <= idle[:, n] + releasing[:, n]``.

Accounting by task status (KAI's NodeInfo): Allocated/Binding/Bound/Running consume idle;
Releasing consumes idle and adds to releasing; Pipelined consumes releasing (which may go below zero
while ``idle + releasing`` stays >= 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kaisched.k8s.objects import Node, Taint
from kaisched.model.resources import GPU, ResourceIndex, Vector
from kaisched.model.status import CONSUMES_IDLE, TaskStatus

if TYPE_CHECKING:
    from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# node conditions that make a node unusable when not False (KAI's node-condition check)
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


@dataclass(slots=True)
class NodeInfo:
    """Per-node data that is not vectorised: identity, labels, taints and the tasks on it."""

    index: int
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    condition_error: str | None  # None when the node is schedulable by conditions
    gpu_memory_mib: float
    tasks: dict[str, TaskInfo] = field(default_factory=dict)  # uid -> task (active-used only)
    host_ports: dict[tuple[str, int, str], int] = field(default_factory=dict)  # (proto, port, ip) -> count

    @property
    def ready(self) -> bool:
        return self.condition_error is None


def node_condition_error(node: Node) -> str | None:
    """KAI's node-condition check: the fit-error text, or None when the node may take pods."""
    if node.unschedulable:
        return "node(s) were unschedulable"
    conds = {c.type: c.status for c in node.conditions}
    if conds and conds.get("Ready", "True") != "True":
        return "node(s) had NotReady condition"
    for name in PRESSURE_CONDITIONS:
        if conds.get(name, "False") != "False":
            return f"node(s) had {name} condition"
    return None


class NodeTable:
    """All nodes of a session; arrays are indexed ``[resource, node]``."""

    __slots__ = ("allocatable", "by_name", "idle", "infos", "names", "releasing", "resources", "schedulable")

    def __init__(self, nodes: Sequence[Node], resources: ResourceIndex, gpu_memory: Sequence[float]) -> None:
        order = sorted(range(len(nodes)), key=lambda i: nodes[i].meta.name)
        self.resources = resources
        self.names: list[str] = [nodes[i].meta.name for i in order]
        self.by_name: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        r, n = len(resources), len(order)
        self.allocatable: Vector = np.zeros((r, n), dtype=np.float64)
        self.infos: list[NodeInfo] = []
        for j, i in enumerate(order):
            node = nodes[i]
            self.allocatable[:, j] = resources.vector(node.allocatable)
            self.infos.append(
                NodeInfo(
                    index=j,
                    name=node.meta.name,
                    labels=node.meta.labels,
                    taints=node.taints,
                    unschedulable=node.unschedulable,
                    condition_error=node_condition_error(node),
                    gpu_memory_mib=gpu_memory[i],
                )
            )
        self.idle: Vector = self.allocatable.copy()
        self.releasing: Vector = np.zeros((r, n), dtype=np.float64)
        self.schedulable: BoolArray = np.array([info.ready for info in self.infos], dtype=np.bool_)

    def __len__(self) -> int:
        return len(self.names)

    # ---- accounting -----------------------------------------------------------------------------
    def add_task(self, task: TaskInfo, node: int) -> None:
        """Put a task with an active-used status onto a node."""
        status = task.status
        req = task.req
        if status in CONSUMES_IDLE:
            self.idle[:, node] -= req
            if status is TaskStatus.RELEASING:
                self.releasing[:, node] += req
        elif status is TaskStatus.PIPELINED:
            self.releasing[:, node] -= req
        info = self.infos[node]
        info.tasks[task.uid] = task
        for port in task.host_ports:
            info.host_ports[port] = info.host_ports.get(port, 0) + 1

    def remove_task(self, task: TaskInfo, node: int) -> None:
        """Exact inverse of :meth:`add_task` for the task's current status."""
        status = task.status
        req = task.req
        if status in CONSUMES_IDLE:
            self.idle[:, node] += req
            if status is TaskStatus.RELEASING:
                self.releasing[:, node] -= req
        elif status is TaskStatus.PIPELINED:
            self.releasing[:, node] += req
        info = self.infos[node]
        info.tasks.pop(task.uid, None)
        for port in task.host_ports:
            left = info.host_ports.get(port, 0) - 1
            if left > 0:
                info.host_ports[port] = left
            else:
                info.host_ports.pop(port, None)

    # ---- queries ------------------------------------------------------------------------------------
    def idle_gpus(self, node: int) -> float:
        return float(self.idle[GPU, node])

    def releasing_gpus(self, node: int) -> float:
        return float(self.releasing[GPU, node])

    def fits(self, req: Vector, *, with_releasing: bool) -> BoolArray:
        """Nodes where ``req`` fits on idle (or idle + releasing) resources; only requested rows."""
        mask = np.ones(len(self.names), dtype=np.bool_)
        for r in np.flatnonzero(req > 0):
            avail = self.idle[r] + self.releasing[r] if with_releasing else self.idle[r]
            mask &= avail >= req[r] - 1e-9
        return mask

    def insufficient(self, req: Vector, *, with_releasing: bool = True) -> list[tuple[int, BoolArray]]:
        """Per requested resource, the mask of nodes that lack it (for fit-error histograms)."""
        out: list[tuple[int, BoolArray]] = []
        for r in np.flatnonzero(req > 0):
            avail = self.idle[r] + self.releasing[r] if with_releasing else self.idle[r]
            out.append((int(r), avail < req[r] - 1e-9))
        return out
