"""Plugin base class and the hook signatures plugins register (spec 4.1).

KAI combines comparators "first non-zero decides"; kaisched registers **order keys** instead: each
plugin gives a key function and the session orders by the tuple of all keys in registration order,
followed by KAI's fallback (creation time, then uid). That is the same order, computed with one sort.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from kaisched.framework.result import QueueStatus
from kaisched.model.job import FitError, PodGroupInfo
from kaisched.model.resources import Vector
from kaisched.model.task import TaskInfo

if TYPE_CHECKING:
    from kaisched.framework.session import Session

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(slots=True, init=False)
class NodeCandidates:
    """Nodes that passed predicates and resource fit for one task (indices into the NodeTable)."""

    indices: IntArray
    fits_idle: BoolArray  # aligned with indices: fits without waiting for releasing resources
    all_fit_idle: bool  # known to fit on idle resources everywhere (nothing releasing): fits_idle is all True

    # (written out: a compiled core keeps a generated __init__ interpreted, see docs/performance.md)
    def __init__(self, indices: IntArray, fits_idle: BoolArray, all_fit_idle: bool = False) -> None:
        self.indices = indices
        self.fits_idle = fits_idle
        self.all_fit_idle = all_fit_idle


JobKey = Callable[[PodGroupInfo], object]
TaskKey = Callable[[TaskInfo], object]
# returns per-node reason codes over ALL nodes (0 = passes), or None when every node passes
Predicate = Callable[[TaskInfo], "npt.NDArray[np.int32] | None"]
PrePredicate = Callable[[TaskInfo], "FitError | None"]
# per-candidate scores, or None when the scorer gives every candidate 0 (nothing to add)
NodeScorer = Callable[[TaskInfo, NodeCandidates], "Vector | None"]
# whether a scorer gives every candidate of this task the same score (or None): it cannot change which node wins
NeutralScorer = Callable[[TaskInfo], bool]
# the node a scorer ranks first among the nodes ``fit`` (the first of equals), when the other scorers are neutral
# for the task: the node's index, -1 when no node fits, None when it cannot tell for this task (scores are summed)
NodeRanker = Callable[[TaskInfo, BoolArray], "int | None"]
# the resource row whose available amount (idle + releasing) a ranker orders a task's nodes by, smallest first and
# then the smaller index, when its ranking is exactly that order (None: it is not, for this task)
NodeRankRow = Callable[[TaskInfo], "int | None"]
# a scorer that gives a task a fixed bonus, larger than the ranking scorer's whole range, on the nodes where a condition
# of the node holds: the condition on the nodes ``at`` (aligned with them), or None when the scorer does not score so
# for this task; for such a task the nodes rank by (condition first, then the ranker's order)
NodeTier = Callable[[TaskInfo, IntArray], "BoolArray | None"]
JobCapacityCheck = Callable[[PodGroupInfo, list[TaskInfo]], "FitError | None"]
TaskHandler = Callable[[TaskInfo], None]


class QueueOrder(Protocol):
    """Which queue's job goes next (proportion's QueueOrderFn, spec 5.4): a sort key of the queue with
    its best pending job; smaller goes first. Keys of siblings must be totally ordered (include a static
    tie-breaker)."""

    def key(self, queue: str, job: PodGroupInfo) -> tuple[object, ...]: ...

    def victim_key(self, queue: str, removed: list[float], candidate: list[float]) -> tuple[object, ...]:
        """Victim order (spec 4.5): the same criteria with ``removed`` (victims already taken from the
        queue's subtree) and ``candidate`` (its next victim) subtracted; the LARGEST key goes first."""
        ...

    def bound_key(self, queue: str, removed: list[float], request: list[float]) -> tuple[object, ...]:
        """The queue's :meth:`key` had it ``removed`` less than it holds and a best job asking ``request``. Keys
        must not decrease as the queue holds more or its job asks more (every part, each resource), so that a
        key computed on more (less) of both bounds those of every state with less (more)
        (:mod:`kaisched.actions.proofs`)."""
        ...


class QueueReporter(Protocol):
    def report(self) -> list[QueueStatus]: ...


class Plugin:
    """Base class: plugins are created fresh for every session."""

    name: ClassVar[str] = ""

    def __init__(self, arguments: Mapping[str, str]) -> None:
        self.arguments = dict(arguments)

    def on_session_open(self, ssn: Session) -> None:
        """Register hooks and compute per-session state."""

    def on_session_close(self, ssn: Session) -> None:
        """Release per-session state."""
