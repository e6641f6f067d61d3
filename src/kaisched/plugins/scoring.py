"""Node scoring plugins (spec 8.1): nodeavailability, resourcetype, nominatednode, nodeplacement.

Scores are summed over plugins; the best node has the highest sum, ties go to the smaller node name.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kaisched.framework.config import ConfigError
from kaisched.framework.plugin import BoolArray, NodeCandidates, Plugin
from kaisched.framework.session import Session
from kaisched.model.gpu import GpuKind
from kaisched.model.node import filled
from kaisched.model.resources import CPU, GPU, Vector
from kaisched.model.task import TaskInfo
from kaisched.plugins.nominated_pods import NominationClaims

AVAILABILITY_SCORE = 100.0
RESOURCE_TYPE_SCORE = 10.0
MAX_HIGH_DENSITY_SCORE = 9.0
NOMINATED_NODE_SCORE = 1_000_000.0
CLAIMS_ARG = "claims"  # nominatednode: "false" keeps KAI's score only (no nominations written, no claims)


class NodeAvailabilityPlugin(Plugin):
    """+100 on nodes where the task fits without waiting for releasing resources."""

    name = "nodeavailability"

    def on_session_open(self, ssn: Session) -> None:
        self.nodes = ssn.nodes
        ssn.add_node_scorer(self.score, neutral=self.neutral)

    def neutral(self, task: TaskInfo) -> bool:
        """Nothing releasing anywhere: every candidate fits on idle resources and scores alike."""
        return not self.nodes.any_releasing

    @staticmethod
    def score(task: TaskInfo, cands: NodeCandidates) -> Vector:
        if cands.all_fit_idle:  # (the same values, read-only: scores are summed into new arrays)
            return filled(len(cands.indices), AVAILABILITY_SCORE)
        return np.asarray(cands.fits_idle, dtype=np.float64) * AVAILABILITY_SCORE


class ResourceTypePlugin(Plugin):
    """+10 for a CPU-only task on a node without GPUs (keeps GPU nodes for GPU work)."""

    name = "resourcetype"

    def on_session_open(self, ssn: Session) -> None:
        self.no_gpu = ssn.nodes.allocatable[GPU] <= 0
        ssn.add_node_scorer(self.score, neutral=self.neutral)

    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        return task.asks_gpus

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        if task.asks_gpus:
            return None
        return np.asarray(self.no_gpu[cands.indices], dtype=np.float64) * RESOURCE_TYPE_SCORE


class NominatedNodePlugin(Plugin):
    """+1,000,000 on the pod's ``status.nominatedNodeName`` (KAI's); and, unless argument ``claims`` is ``"false"``,
    kaisched's nomination claims (:mod:`kaisched.plugins.nominated_pods`): the pods a cycle pipelines are nominated
    to their node, and keep a claim on it in the next cycle."""

    name = "nominatednode"

    def __init__(self, arguments: Mapping[str, str]) -> None:
        super().__init__(arguments)
        value = str(arguments.get(CLAIMS_ARG, "true")).lower()
        if value not in ("true", "false"):
            raise ConfigError(f"plugin nominatednode: argument {CLAIMS_ARG}: expected true or false, got "
                              f"{arguments.get(CLAIMS_ARG)!r}")
        self.claims_on = value == "true"
        self.claims: NominationClaims | None = None

    def on_session_open(self, ssn: Session) -> None:
        self.by_name = ssn.nodes.by_name
        ssn.add_node_scorer(self.score, neutral=self.neutral)
        self.claims = NominationClaims(ssn) if self.claims_on else None

    def on_session_close(self, ssn: Session) -> None:
        if self.claims is not None:
            self.claims.report()
            self.claims = None

    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        return not task.pod.nominated_node_name

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        nominated = task.pod.nominated_node_name
        if not nominated:
            return None
        out = np.zeros(len(cands.indices))
        idx = self.by_name.get(nominated, -1)
        out[cands.indices == idx] = NOMINATED_NODE_SCORE
        return out


class NodePlacementPlugin(Plugin):
    """binpack (fewest free resources first) or spread (emptiest first), per GPU and CPU tasks."""

    name = "nodeplacement"

    def __init__(self, arguments: Mapping[str, str]) -> None:
        super().__init__(arguments)
        self.gpu = arguments.get("gpu", "binpack")
        self.cpu = arguments.get("cpu", "binpack")
        for key, value in (("gpu", self.gpu), ("cpu", self.cpu)):
            if value not in ("binpack", "spread"):
                raise ConfigError(f"plugin nodeplacement: argument {key}: expected binpack or spread, got {value!r}")

    def on_session_open(self, ssn: Session) -> None:
        self.nodes = ssn.nodes
        # nodes without any of the resource score 0 (allocatable is fixed for the session)
        self.without = {r: ssn.nodes.allocatable[r] <= 0 for r in (GPU, CPU)}
        self.all_have = {r: not bool(self.without[r].any()) for r in (GPU, CPU)}
        ssn.add_node_scorer(self.score, ranker=self.first_ranked, rank_row=self.rank_row)

    def _placing(self, task: TaskInfo) -> tuple[int, str]:
        """The resource row the task is placed by (GPUs for a GPU task but MIG, else CPU) and its strategy."""
        if task.asks_gpus and task.gpu.kind is not GpuKind.MIG:
            return GPU, self.gpu
        return CPU, self.cpu

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        r, strategy = self._placing(task)
        idx = cands.indices
        nodes = self.nodes
        # idle + releasing (nothing releasing anywhere: idle, the same values)
        non_alloc = nodes.idle[r].take(idx)
        if nodes.any_releasing:
            non_alloc += nodes.releasing[r].take(idx)
        if strategy == "spread":
            capacity = nodes.allocatable[r].take(idx)
            out: Vector = np.divide(non_alloc, capacity, out=np.zeros(len(idx)), where=capacity > 0)
            return out
        if len(idx) == 0:
            return np.zeros(0)
        lo, hi = float(np.minimum.reduce(non_alloc)), float(np.maximum.reduce(non_alloc))
        if hi == lo:
            out = np.full(len(idx), MAX_HIGH_DENSITY_SCORE)
        else:  # MAX * (1 - (x - lo) / (hi - lo)), in place (``take`` made non_alloc: ours to change)
            out = non_alloc
            out -= lo
            out /= hi - lo
            np.subtract(1.0, out, out=out)
            out *= MAX_HIGH_DENSITY_SCORE
        if not self.all_have[r]:
            out[self.without[r].take(idx)] = 0.0
        return out

    def first_ranked(self, task: TaskInfo, fit: BoolArray) -> int | None:
        """binpack's first node among the nodes ``fit`` (the session asks when every other scorer gives all
        candidates one score): the first of those with the least non-allocated resource. :meth:`score` falls as
        that amount grows (``MAX * (1 - (x - lo) / (hi - lo))``, every step monotone; distinct amounts keep
        distinct scores, since they differ by far more than a rounding step of their range) and gives equal
        amounts equal scores, so its first maximum is this node. -1 when no node fits; None for spread, or when
        some node lacks the resource altogether (it scores 0 there, not by its amount)."""
        r, strategy = self._placing(task)
        if strategy != "binpack" or not self.all_have[r]:
            return None
        nodes = self.nodes
        if len(fit) == 0:
            return -1
        non_alloc = nodes.idle[r] + nodes.releasing[r] if nodes.any_releasing else nodes.idle[r]
        best = int(np.where(fit, non_alloc, np.inf).argmin())
        return best if fit[best] else -1

    def rank_row(self, task: TaskInfo) -> int | None:
        """The row :meth:`first_ranked` orders the nodes by (its first node: the first least non-allocated amount,
        ``idle + releasing``, which is ``idle`` itself while nothing was ever releasing), when it ranks the task."""
        r, strategy = self._placing(task)
        if strategy != "binpack" or not self.all_have[r]:
            return None
        return r
