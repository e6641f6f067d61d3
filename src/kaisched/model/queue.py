"""The queue tree in the snapshot model.

Queue resource vectors are ``[gpu devices, cpu millicores, memory bytes]`` (see
:mod:`kaisched.model.resources`); ``-1`` means unlimited. Live accounting (allocated, fair share)
belongs to the ``proportion`` plugin, not to this static description.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kaisched.model.resources import Vector


@dataclass(slots=True, eq=False)
class QueueInfo:
    name: str
    parent: str | None
    priority: int
    creation: datetime
    uid: str
    deserved: Vector
    limit: Vector
    over_quota_weight: Vector
    display_name: str = ""
    preempt_min_runtime: timedelta | None = None
    reclaim_min_runtime: timedelta | None = None
    children: list[str] = field(default_factory=list)  # sorted by (creation, uid)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def label(self) -> str:
        """Name used in messages (KAI uses the display name when set)."""
        return self.display_name or self.name

    def order_key(self) -> tuple[object, ...]:
        return (self.creation, self.uid)


@dataclass(slots=True)
class QueueTree:
    queues: dict[str, QueueInfo]
    roots: list[str]
    # depth-first order, computed once (the tree is complete when the snapshot is built; the job and victim
    # queues walk it for every simulation); checked against the tree's size in case a tree is grown later
    _depth_first: tuple[int, int, list[str]] | None = field(default=None, repr=False, compare=False)

    def ancestors(self, name: str) -> list[str]:
        """The queue itself and its ancestors, leaf first."""
        out: list[str] = []
        cur: str | None = name
        while cur is not None:
            out.append(cur)
            cur = self.queues[cur].parent
        return out

    def depth_first(self) -> list[str]:
        cached = self._depth_first
        if cached is not None and cached[0] == len(self.queues) and cached[1] == len(self.roots):
            return cached[2]
        out = self._walk()
        self._depth_first = (len(self.queues), len(self.roots), out)
        return out

    def _walk(self) -> list[str]:
        out: list[str] = []
        stack = list(reversed(self.roots))
        while stack:
            q = stack.pop()
            out.append(q)
            stack.extend(reversed(self.queues[q].children))
        return out
