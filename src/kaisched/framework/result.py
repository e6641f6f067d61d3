"""The outcome of one scheduling cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError


@dataclass(frozen=True, slots=True)
class Placement:
    pod: str  # "<ns>/<name>"
    node: str
    gpu_groups: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "gpuGroups": list(self.gpu_groups)}


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    action: str
    preemptor: str  # "<ns>/<podgroup>" ("" for stale-gang eviction)
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "action": self.action, "preemptor": self.preemptor or None,
                "message": self.message}


@dataclass(frozen=True, slots=True)
class PodGroupStatus:
    name: str  # "<ns>/<name>"
    queue: str
    status: str  # Running | Allocated | Pipelined | Pending
    reason: str | None
    message: str | None
    last_start: str | None = None  # RFC3339
    stale_since: str | None = None

    def annotations(self) -> dict[str, str | None]:
        """The PodGroup annotations this status sets (None: the annotation is removed)."""
        return {C.LAST_START_TIMESTAMP_ANNOTATION: self.last_start or None,
                C.STALE_PODGROUP_TIMESTAMP_ANNOTATION: self.stale_since or None}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "queue": self.queue, "status": self.status, "reason": self.reason,
                "message": self.message, "lastStartTimestamp": self.last_start,
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

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "parent": self.parent, "deserved": self.deserved,
                "fairShare": self.fair_share, "allocated": self.allocated, "request": self.request,
                "limit": self.limit, "priority": self.priority}


@dataclass(frozen=True, slots=True)
class SharedGpuStatus:
    group: str  # the runai-gpu-group of this device
    memory_mib: float  # the device's memory
    used_mib: float  # held or awaited by its pods
    releasing_mib: float
    pods: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "memoryMiB": self.memory_mib, "usedMiB": self.used_mib,
                "releasingMiB": self.releasing_mib, "pods": list(self.pods)}


@dataclass(frozen=True, slots=True)
class NodeGpuStatus:
    """A GPU node after the cycle: whole devices and each shared device."""

    name: str
    gpus: float  # allocatable devices
    idle: float  # whole devices nobody holds
    releasing: float  # whole devices being freed (incl. shared devices whose pods all terminate)
    whole_gpu_pods: tuple[str, ...]  # pods holding whole devices
    shared: tuple[SharedGpuStatus, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "idleGpus": self.idle, "releasingGpus": self.releasing,
                "wholeGpuPods": list(self.whole_gpu_pods), "sharedGpus": [g.to_dict() for g in self.shared]}


@dataclass(slots=True)
class CycleResult:
    binds: list[Placement] = field(default_factory=list)
    pipelined: list[Placement] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    pod_groups: list[PodGroupStatus] = field(default_factory=list)
    queues: list[QueueStatus] = field(default_factory=list)
    errors: list[ObjectError] = field(default_factory=list)
    nodes: list[NodeGpuStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "binds": [b.to_dict() for b in self.binds],
            "pipelined": [p.to_dict() for p in self.pipelined],
            "evictions": [e.to_dict() for e in self.evictions],
            "podGroups": [g.to_dict() for g in self.pod_groups],
            "queues": [q.to_dict() for q in self.queues],
            "errors": [e.to_dict() for e in self.errors],
            "nodes": [n.to_dict() for n in self.nodes],
        }

    def pod_group(self, name: str) -> PodGroupStatus | None:
        return next((g for g in self.pod_groups if g.name == name), None)
