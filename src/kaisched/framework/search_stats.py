"""What the eviction actions' victim searches cost, per action and cycle (``Session.search_stats``): the numbers
that show where a busy cycle's time goes (``python -m benchmarks --suite busy`` prints them per preemptor)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class ActionSearchStats:
    """One action's victim searches in one cycle."""

    preemptors: int = 0  # pending jobs whose victim search ran
    solved: int = 0  # of them, those it found a scenario for
    partial_solves: int = 0  # partial jobs solved for (k = 1, 2, ... pods of a gang)
    simulations: int = 0  # scenarios simulated (a winner's replay included)
    proved: int = 0  # scenarios proved to fail without simulating them (kaisched.actions.proofs)
    refused_unplaced: int = 0  # scenarios the validators refused before anything was placed (settled_victims)
    proved_everywhere: int = 0  # partial jobs for which every single-node scenario was proved at once (not walked)
    filtered: int = 0  # scenarios the filters rejected before simulating them
    placements: int = 0  # job placements tried inside simulations (the preemptor's and its victims')
    seconds: float = 0.0  # wall time in the searches

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class SearchStats(dict[str, ActionSearchStats]):
    """Per action name."""

    def of(self, action: str) -> ActionSearchStats:
        stats = self.get(action)
        if stats is None:
            stats = self[action] = ActionSearchStats()
        return stats
