"""Tasks (pods) in the snapshot model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from kaisched.k8s.objects import Pod
from kaisched.model.gpu import NO_GPU, GpuRequest
from kaisched.model.resources import Vector
from kaisched.model.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALLOCATED, TaskStatus

if TYPE_CHECKING:
    from kaisched.model.job import PodGroupInfo

HostPort = tuple[str, int, str]  # protocol, port, host ip


@dataclass(slots=True, eq=False)
class TaskInfo:
    uid: str
    name: str
    namespace: str
    pod: Pod
    status: TaskStatus
    req: Vector  # node-fit vector (ResourceIndex order), incl. pods: 1; GPU row = whole devices only
    creation: datetime
    node: int = -1  # node index in the session's NodeTable, -1 when not on a node
    node_name: str = ""  # the pod's spec.nodeName (may name a node outside the snapshot)
    job: PodGroupInfo | None = None
    pod_set: str = "default"
    task_priority: int | None = None  # kai.scheduler/task-priority label; None when absent/unparsable
    host_ports: tuple[HostPort, ...] = ()
    signature: tuple[object, ...] = ()  # scheduling-constraint signature (static predicate cache key)
    labels: Mapping[str, str] = field(default_factory=dict)  # the pod's labels (never mutated)
    initial_status: TaskStatus = TaskStatus.PENDING
    gpu: GpuRequest = NO_GPU  # what the pod asks of GPUs (whole, shared, MIG)
    gpu_groups: tuple[str, ...] = ()  # shared devices (GPU groups) on its node, one per device
    request_gpus: float = 0.0  # GPUs a pending task adds to its queue's request (gpu-memory: at the min node memory)
    accepted_gpus: float = 0.0  # GPUs counted for the queue on its current node (set when put on a node)
    legacy_mig: bool = False  # MIG requested by annotation (never scheduled)
    # GPU devices the pod holds at most: its whole GPUs, or each shared device it is on (evicting it frees
    # that many whole GPUs at most: a shared device is freed when its other pods go too)
    devices: float = 0.0
    # the pod's scheduling constraints as text (the eviction actions' signature), computed once per session
    constraints_text: str = ""
    # everything its fit depends on besides the cluster state, as the session's number for it
    # (placement.failure_key); -1 until asked
    fit_id: int = -1
    key: str = field(default="", init=False, repr=False)  # "<namespace>/<name>" (set once: asked millions of times)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"

    @property
    def quota_gpus(self) -> float:
        """GPUs of this task in queue accounting: accepted on its node, or requested while unplaced."""
        return self.accepted_gpus if self.node >= 0 and self.status in ACTIVE_USED else self.request_gpus

    def quota_vector(self) -> tuple[float, float, float]:
        """(GPUs, millicores, bytes) of this task in queue accounting."""
        return self.quota_gpus, float(self.req[1]), float(self.req[2])

    @property
    def is_active_used(self) -> bool:
        return self.status in ACTIVE_USED

    @property
    def is_active_allocated(self) -> bool:
        return self.status in ACTIVE_ALLOCATED

    @property
    def is_settled_active(self) -> bool:
        """Active-allocated and not bound in this cycle: the pods that may be victims. As in KAI, a pod
        pipelined earlier in the cycle (also a victim moved by consolidation) may be taken again; a pod
        *bound* in this cycle is not (evicting a bind that is still in flight only makes the two actions
        undo each other, cycle after cycle)."""
        return self.status in ACTIVE_ALLOCATED and self.status is not TaskStatus.BINDING

    @property
    def is_allocated(self) -> bool:
        return self.status in ALLOCATED
