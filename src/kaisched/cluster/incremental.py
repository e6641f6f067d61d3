"""The incremental cluster state: the snapshot model kept from cycle to cycle (:mod:`kaisched.model.kept`).

A caller that runs cycle after cycle on objects it keeps (the simulator, Kubernetes mode) keeps one
:class:`IncrementalState` and passes it to :func:`kaisched.cluster.schedule.run_prepared_cycle` (``state=``), as it
keeps a :class:`~kaisched.cluster.memo.CycleMemo`. Each cycle's snapshot is then the kept model with the objects that
changed since the last cycle applied to it, or a full build where an update cannot answer (and that build is kept
for the next cycles when it may be).
"""

from __future__ import annotations

from datetime import datetime

from kaisched.k8s.objects import ParsedObjects
from kaisched.model.kept import KeptSnapshot
from kaisched.model.snapshot import Snapshot, SnapshotOptions


class IncrementalState:
    """The kept snapshot model and how each cycle's snapshot was made (``full_builds``, ``updates``)."""

    __slots__ = ("full_builds", "kept", "updates")

    def __init__(self) -> None:
        self.kept: KeptSnapshot | None = None
        self.full_builds = 0
        self.updates = 0

    def snapshot(self, parsed: ParsedObjects, now: datetime, options: SnapshotOptions) -> Snapshot:
        """The snapshot of ``parsed`` at ``now``: the kept model updated, else a full build (kept when it may be)."""
        if self.kept is not None:
            updated = self.kept.update(parsed, now, options)
            if updated is not None:
                self.updates += 1
                return updated
        snapshot, self.kept = KeptSnapshot.build(parsed, now, options)
        self.full_builds += 1
        return snapshot
