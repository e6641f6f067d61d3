"""Task (pod) statuses as KAI's scheduler sees them, and the status groups used everywhere."""

from __future__ import annotations

import enum


class TaskStatus(enum.Enum):
    PENDING = "Pending"
    GATED = "Gated"
    ALLOCATED = "Allocated"  # virtually bound in this session
    PIPELINED = "Pipelined"  # virtually placed on resources still being released
    BINDING = "Binding"  # a bind was committed (bind request in flight)
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"  # being deleted/evicted, still holds its node resources
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"

    # members are singletons: hash by identity (Enum's own __hash__ is Python code and hashes the name; status
    # sets are tested millions of times a cycle)
    __hash__ = object.__hash__


S = TaskStatus
# occupies a node
ACTIVE_USED = frozenset({S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING, S.RELEASING})
# counts toward the gang
ACTIVE_ALLOCATED = frozenset({S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING})
ALIVE = frozenset({S.PENDING, S.GATED, S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING})
# counts in queue usage
ALLOCATED = frozenset({S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING})
# consume idle node resources (Releasing consumes idle and is also "releasing"; Pipelined consumes releasing)
CONSUMES_IDLE = frozenset({S.ALLOCATED, S.BINDING, S.BOUND, S.RUNNING, S.RELEASING})
