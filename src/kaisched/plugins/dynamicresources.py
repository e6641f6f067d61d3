"""The ``dynamicresources`` plugin (spec 7.7): DRA GPUs.

The devices themselves are accounted by the model (:mod:`kaisched.model.dra`, kept by the NodeTable: a claim's
devices are chosen when its first pod is placed and freed or released with its pods), so that no action and no
configuration can over-commit them. This plugin adds KAI's rules on top:

* a node with DRA GPUs serves GPUs through ResourceClaims only: pods asking for device-plugin GPUs (whole,
  fractions, GPU memory, MIG) do not fit there;
* a pod whose claims can never be satisfied (a claim that is missing, names an unknown DeviceClass, has a
  broken selector, or is shared across queues) is refused before any node is tried, with the reason the
  snapshot found.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kaisched.framework.plugin import Plugin
from kaisched.framework.session import Session
from kaisched.model.gpu import GpuKind
from kaisched.model.task import TaskInfo

DRA_NODE_ERROR = "node(s) have DRA GPUs, which are given to pods through ResourceClaims only"


class DynamicResourcesPlugin(Plugin):
    name = "dynamicresources"

    def on_session_open(self, ssn: Session) -> None:
        dra = ssn.nodes.dra
        if dra is None:
            return
        dra_gpu_nodes = dra.devices.node_gpus > 0
        if not dra_gpu_nodes.any():
            return
        codes: npt.NDArray[np.int32] = np.where(dra_gpu_nodes, ssn.reason_code(DRA_NODE_ERROR), 0).astype(np.int32)
        codes.flags.writeable = False

        def device_plugin_gpus(task: TaskInfo) -> npt.NDArray[np.int32] | None:
            return None if task.gpu.kind is GpuKind.NONE else codes

        ssn.predicates.append(device_plugin_gpus)
        ssn.static_predicates.append(device_plugin_gpus)
