"""Resource vectors.

Every resource vector in the model is a NumPy float64 array indexed by the constants below. The first
three entries are the resources KAI's fair share tracks (GPU devices, CPU millicores, memory bytes);
``PODS`` is the pod-slot count; further entries (ephemeral storage, extended resources such as
``rdma/ib``) get indices from a :class:`ResourceIndex` built per snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float64]

GPU = 0
CPU = 1
MEMORY = 2
PODS = 3
QUEUE_RESOURCES = 3  # gpu, cpu, memory: the resources of queues and fair share
QUEUE_RESOURCE_NAMES = ("gpu", "cpu", "memory")

# Kubernetes resource names that all mean "whole GPU devices"
GPU_RESOURCE_NAMES = ("nvidia.com/gpu", "amd.com/gpu")
EPSILON = 1e-9


class ResourceIndex:
    """Maps Kubernetes resource names to vector indices (fixed for one snapshot)."""

    __slots__ = ("_index", "names")

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.names: list[str] = ["gpu", "cpu", "memory", "pods"]
        self._index: dict[str, int] = {"cpu": CPU, "memory": MEMORY, "pods": PODS}
        for g in GPU_RESOURCE_NAMES:
            self._index[g] = GPU
        for name in sorted(set(extra)):
            self.add(name)

    def add(self, name: str) -> int:
        idx = self._index.get(name)
        if idx is None:
            idx = len(self.names)
            self.names.append(name)
            self._index[name] = idx
        return idx

    def get(self, name: str) -> int | None:
        return self._index.get(name)

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, resources: Mapping[str, float]) -> Vector:
        """Vector of a resource list; names not in the index are ignored (see :meth:`add`)."""
        v = np.zeros(len(self.names), dtype=np.float64)
        for name, value in resources.items():
            idx = self._index.get(name)
            if idx is not None:
                v[idx] += value
        return v

    def describe(self, idx: int) -> str:
        """Human name of a resource index as KAI writes it in fit errors."""
        return {GPU: "GPUs", CPU: "CPU cores", MEMORY: "memory", PODS: "pods"}.get(idx, self.names[idx])


def zeros(n: int = QUEUE_RESOURCES) -> Vector:
    return np.zeros(n, dtype=np.float64)


def queue_vector(gpu: float, cpu: float, memory: float) -> Vector:
    return np.array([gpu, cpu, memory], dtype=np.float64)
