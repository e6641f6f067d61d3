"""Shared-GPU plugins (spec 7.3, 8.1): which device of a node a fractional task takes, and which node.

* ``gpupack`` (with GPU binpack, the default): fill the fullest shared GPU first;
* ``gpuspread`` (with GPU spread): prefer empty GPUs;
* ``gpusharingorder``: +1000 on nodes where an existing shared GPU has room for the task, so fractional
  pods gather on GPUs that are already shared instead of opening new ones.
"""

from __future__ import annotations

import numpy as np

from kaisched.framework.plugin import BoolArray, IntArray, NodeCandidates, Plugin
from kaisched.framework.session import Session
from kaisched.model.gpu_sharing import pack_score, spread_score
from kaisched.model.resources import EPSILON, Vector
from kaisched.model.task import TaskInfo

GPU_SHARING_SCORE = 1000.0


class GpuPackPlugin(Plugin):
    name = "gpupack"

    def on_session_open(self, ssn: Session) -> None:
        ssn.gpu_order_fns.append(pack_score)


class GpuSpreadPlugin(Plugin):
    name = "gpuspread"

    def on_session_open(self, ssn: Session) -> None:
        ssn.gpu_order_fns.append(spread_score)


class GpuSharingOrderPlugin(Plugin):
    name = "gpusharingorder"

    def on_session_open(self, ssn: Session) -> None:
        self.shared = ssn.nodes.shared
        ssn.add_node_scorer(self.score, neutral=self.neutral, tier=self.tier)

    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        return not task.gpu.shared

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        fits = self.tier(task, cands.indices)
        if fits is None:
            return None
        out: Vector = fits.astype(np.float64) * GPU_SHARING_SCORE
        return out

    def tier(self, task: TaskInfo, idx: IntArray) -> BoolArray | None:
        """The nodes of ``idx`` where an existing shared device has room for the task (the +1000 ones; the bonus is
        larger than nodeplacement's whole range, 0-9), or None for a task that does not share a device."""
        if not task.gpu.shared:
            return None
        need = self.shared.need(task)
        need_at = need[idx] if isinstance(need, np.ndarray) else need
        fits: BoolArray = self.shared.free_pipe[idx] + EPSILON >= need_at
        return fits
