"""Historical usage per queue: the input of time-based fair share (spec 5.7).

A :class:`UsageTable` holds, for each queue by name, its usage of GPU, CPU and memory over the configured window,
normalised to the cluster's capacity over the same window (``U = Σ alloc·decay / Σ capacity·decay``: 0.24 is a
queue that held a quarter of the cluster's GPUs, decay weighted). It is made outside the cycle, by a usage source
(:mod:`kaisched.usage`: a Prometheus server, the in-memory history of the embedded cluster and the simulator, a
file) and handed to the cycle as an input; the proportion plugin reads it, nothing in the core fetches it. A queue
the table does not name used nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["NO_USAGE", "UsageTable", "UsageVector"]

UsageVector = tuple[float, float, float]  # [gpu, cpu, memory], each a fraction of the capacity (>= 0)
NO_USAGE: UsageVector = (0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class UsageTable:
    """Each queue's normalised usage ``[gpu, cpu, memory]`` (``queues``), where it came from (``source``: e.g.
    ``prometheus http://prom:9090``, ``history``, ``file usage.yaml``), when it was fetched (``fetched_at``) and
    whether it is older than the configured staleness period (``stale``: still used, as KAI does, and said so)."""

    queues: Mapping[str, UsageVector] = field(default_factory=dict)
    source: str = ""
    fetched_at: datetime | None = None
    stale: bool = False

    def of(self, queue: str) -> UsageVector:
        """The queue's usage (zeros for a queue the table does not name)."""
        return self.queues.get(queue, NO_USAGE)

    def __post_init__(self) -> None:
        for name, vector in self.queues.items():
            if len(vector) != 3 or not all(math.isfinite(v) and v >= 0 for v in vector):
                raise ValueError(f"usage of queue {name}: expected three finite numbers >= 0, got {vector!r}")
