"""The ``predicates`` plugin (spec 8.2): node conditions, node selector and affinity, taints,
host ports, inter-pod affinity and anti-affinity, and the max-node-resources pre-check.

Static predicates (everything that depends only on the node and the pod spec) are computed once per
scheduling-constraint signature and cached for the session; dynamic ones (ports, pod affinity) are
evaluated against the session's current placements.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from kaisched.framework.plugin import Plugin
from kaisched.framework.session import Session
from kaisched.k8s.objects import (
    LabelSelector,
    PodAffinityTerm,
    Taint,
    Toleration,
)
from kaisched.model.gpu import GpuKind, GpuRequest
from kaisched.model.job import FitError
from kaisched.model.node import NodeInfo
from kaisched.model.resources import CPU, GPU, MEMORY, Vector
from kaisched.model.selectors import term_matches
from kaisched.model.status import ACTIVE_USED
from kaisched.model.task import TaskInfo

Codes = npt.NDArray[np.int32]

NODE_AFFINITY_ERROR = "node(s) didn't match Pod's node affinity/selector"
PORTS_ERROR = "node(s) didn't have free ports for the requested pod ports"
POD_AFFINITY_ERROR = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY_ERROR = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_ERROR = "node(s) didn't satisfy existing pods anti-affinity rules"
FILTERING_EFFECTS = ("NoSchedule", "NoExecute")
MIG_SINGLE_ERROR = "node(s) are MIG nodes with mig.strategy=single, which accept only whole-GPU requests"
MIG_MIXED_ERROR = "node(s) are MIG nodes with mig.strategy=mixed, which accept only MIG profile requests"
NOT_MIG_ERROR = "node(s) are not MIG enabled"
LEGACY_MIG_NODE_ERROR = "node(s) run legacy MIG pods"
MEMORY_NOT_SYNCED_ERROR = "node(s) did not report their GPU memory (label nvidia.com/gpu.memory)"


# ------------------------------------------------------------------------------------ matching
def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for k, v in selector.match_labels.items():
        if labels.get(k) != v:
            return False
    for req in selector.match_expressions:
        value = labels.get(req.key)
        op = req.operator
        if op == "In" and (value is None or value not in req.values):
            return False
        if op == "NotIn" and value is not None and value in req.values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
    return True


def tolerates(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key:
            if t.key != taint.key:
                continue
        elif t.operator != "Exists":
            continue
        if t.operator == "Exists" or t.value == taint.value:
            return True
    return False


def _term_namespaces(term: PodAffinityTerm, own_namespace: str) -> frozenset[str] | None:
    """Namespaces a pod-affinity term applies to; None = all namespaces."""
    if term.namespace_selector is not None and not term.namespace_selector.match_labels and not (
        term.namespace_selector.match_expressions
    ):
        return None
    if term.namespaces:
        return frozenset(term.namespaces)
    return frozenset({own_namespace})


def pod_matches_term(term: PodAffinityTerm, owner_namespace: str, pod: TaskInfo) -> bool:
    namespaces = _term_namespaces(term, owner_namespace)
    if namespaces is not None and pod.namespace not in namespaces:
        return False
    return selector_matches(term.label_selector, pod.labels)


def _amount(r: int, value: float) -> str:
    if r == CPU:
        return f"{value / 1000:g} cores"
    if r == MEMORY:
        return f"{value / 1e9:g} GB"
    if r == GPU:
        return f"{value:g} GPUs"
    return f"{value:g}"


# --------------------------------------------------------------------------------------- plugin

class PredicatesPlugin(Plugin):
    name = "predicates"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.nodes = ssn.nodes
        n = len(ssn.nodes)
        self._static: dict[tuple[object, ...], Codes | None] = {}
        # (id of a request vector, GPU request) -> (the vector, larger than any node) (max_node_resources)
        self._too_big: dict[tuple[int, GpuRequest], tuple[Vector, bool]] = {}
        self._label_values: dict[str, npt.NDArray[np.object_]] = {}
        # node conditions never change within a session
        cond = np.zeros(n, dtype=np.int32)
        for info in ssn.nodes.infos:
            if info.condition_error is not None:
                cond[info.index] = ssn.reason_code(info.condition_error)
        self._conditions: Codes | None = cond if cond.any() else None
        self._anti_affinity_pods = [
            t for t in ssn.snapshot.tasks.values()
            if t.pod.affinity is not None and t.pod.affinity.pod_anti_affinity is not None
            and t.pod.affinity.pod_anti_affinity.required
        ]
        ssn.labels_constrain_placement = bool(self._anti_affinity_pods)
        # largest node per resource for the max-node-resources pre-check
        self._max_alloc = ssn.nodes.allocatable.max(axis=1) if n else np.zeros(len(ssn.snapshot.resources))
        ssn.pre_predicates.append(self.max_node_resources)
        ssn.predicates.append(self.static_predicates)
        ssn.static_predicates.append(self.static_predicates)
        ssn.predicates.append(self.host_ports)
        ssn.predicates.append(self.pod_affinity)
        ssn.predicates.append(self.queue_capacity)
        gpu_nodes = ssn.nodes.allocatable[GPU] > 0
        self._max_gpu_memory = float(ssn.nodes.shared.mem[gpu_nodes].max()) if gpu_nodes.any() else 0.0
        from kaisched.plugins.affinity_scoring import PreferredNodeAffinityScore

        scorer = PreferredNodeAffinityScore(ssn.nodes)
        ssn.add_node_scorer(scorer, neutral=scorer.neutral)

    # ---- pre-predicate ------------------------------------------------------------------------
    def max_node_resources(self, task: TaskInfo) -> FitError | None:
        """The task asks for more than any node has (of a resource, or of shared GPU devices); the answer
        depends on the task's requests and the nodes' allocatable resources only: whether it is too big is
        remembered per request (vector object — tasks that ask alike share theirs — and GPU request), the error
        (it names the pod) made per task."""
        req = task.req
        known = self._too_big.get((id(req), task.gpu))
        if known is None or known[0] is not req:
            error = self._larger_than_any_node(task)
            self._too_big[(id(req), task.gpu)] = (req, error is not None)  # (the vector kept: its id stays its)
            return error
        return self._larger_than_any_node(task) if known[1] else None

    def _larger_than_any_node(self, task: TaskInfo) -> FitError | None:
        too_big = np.flatnonzero(task.req > self._max_alloc + 1e-9)
        if len(too_big) == 0:
            return self._max_shared_gpu(task) if task.gpu.shared else None
        r = int(too_big[0])
        what = {GPU: "GPU", CPU: "CPU", MEMORY: "memory"}.get(r, self.ssn.snapshot.resources.describe(r))
        if self._max_alloc[r] <= 0:
            msg = f"No node in the default node-pool has {what} resources"
        else:
            msg = (f"The pod {task.key} requires {_amount(r, float(task.req[r]))}. Max {what} resources available in "
                   f"a single node in the default node-pool is topped at {_amount(r, float(self._max_alloc[r]))}")
        return FitError("PodSchedulingErrors", msg)

    def _max_shared_gpu(self, task: TaskInfo) -> FitError | None:
        devices = float(self._max_alloc[GPU])
        gpu = task.gpu
        if devices <= 0:
            return FitError("PodSchedulingErrors", "No node in the default node-pool has GPU resources")
        if gpu.count > devices:
            return FitError("PodSchedulingErrors",
                            f"The pod {task.key} requires {gpu.describe()}. Max GPU resources available in a single "
                            f"node in the default node-pool is topped at {devices:g} GPUs")
        if gpu.kind is GpuKind.MEMORY and gpu.memory_mib > self._max_gpu_memory + 1e-9:
            return FitError("PodSchedulingErrors",
                            f"The pod {task.key} requires {gpu.memory_mib:g} MiB of GPU memory. Max GPU memory of a "
                            f"single GPU in the default node-pool is topped at {self._max_gpu_memory:g} MiB")
        return None

    # ---- static -----------------------------------------------------------------------------------
    def static_predicates(self, task: TaskInfo) -> Codes | None:
        sig = (task.signature, task.gpu.kind)
        if sig in self._static:
            return self._static[sig]
        codes = self._compute_static(task)
        self._static[sig] = codes
        return codes

    def _compute_static(self, task: TaskInfo) -> Codes | None:
        ssn = self.ssn
        pod = task.pod
        n = len(self.nodes)
        codes = self._conditions.copy() if self._conditions is not None else np.zeros(n, dtype=np.int32)
        selector = pod.node_selector
        na = pod.affinity.node_affinity if pod.affinity else None
        required = na.required if na is not None else None
        tolerations = pod.tolerations
        affinity_code = 0
        for info in self.nodes.infos:
            j = info.index
            if codes[j]:
                continue
            gpu_error = self._gpu_type_error(task, info)
            if gpu_error is not None:
                codes[j] = ssn.reason_code(gpu_error)
                continue
            if (selector and any(info.labels.get(k) != v for k, v in selector.items())) or (
                required is not None and not any(term_matches(t, info) for t in required)
            ):
                affinity_code = affinity_code or ssn.reason_code(NODE_AFFINITY_ERROR)
                codes[j] = affinity_code
                continue
            for taint in info.taints:
                if taint.effect in FILTERING_EFFECTS and not tolerates(taint, tolerations):
                    shown = f"{{{taint.key}: {taint.value}}}" if taint.value else f"{{{taint.key}}}"
                    codes[j] = ssn.reason_code(f"node(s) had untolerated taint {shown}")
                    break
        return codes if codes.any() else None

    def _gpu_type_error(self, task: TaskInfo, info: NodeInfo) -> str | None:
        """KAI's resource-type checks (spec 7.5): MIG strategies, MIG requests, GPU memory known."""
        kind = task.gpu.kind
        if kind is GpuKind.NONE:
            return None
        if kind is GpuKind.MIG:
            if not info.mig_enabled:
                return NOT_MIG_ERROR
            if self.nodes.legacy_mig[info.index]:
                return LEGACY_MIG_NODE_ERROR
            return None
        if info.mig_strategy == "mixed":
            return MIG_MIXED_ERROR
        if task.gpu.shared:
            if info.mig_enabled:
                return MIG_SINGLE_ERROR
            if kind is GpuKind.MEMORY and not self.nodes.shared.synced[info.index]:
                return MEMORY_NOT_SYNCED_ERROR
        return None

    # ---- dynamic ----------------------------------------------------------------------------------
    def queue_capacity(self, task: TaskInfo) -> Codes | None:
        """The queue-capacity check on each node (spec 8.2), provided by proportion when it is loaded."""
        check = self.ssn.task_node_capacity_check
        return check(task) if check is not None else None

    def host_ports(self, task: TaskInfo) -> Codes | None:
        if not task.host_ports:
            return None
        codes = np.zeros(len(self.nodes), dtype=np.int32)
        code = self.ssn.reason_code(PORTS_ERROR)
        for info in self.nodes.infos:
            used = info.host_ports
            if not used:
                continue
            for proto, port, ip in task.host_ports:
                if any(p == port and pr == proto and (i == ip or "0.0.0.0" in (i, ip)) for pr, p, i in used):
                    codes[info.index] = code
                    break
        return codes if codes.any() else None

    def _values(self, key: str) -> npt.NDArray[np.object_]:
        arr = self._label_values.get(key)
        if arr is None:
            arr = np.array([info.labels.get(key) for info in self.nodes.infos], dtype=object)
            self._label_values[key] = arr
        return arr

    def _domain_mask(self, key: str, domains: set[str]) -> npt.NDArray[np.bool_]:
        values = self._values(key)
        if not domains:
            return np.zeros(len(values), dtype=np.bool_)
        return np.isin(values, np.array(sorted(domains), dtype=object))

    def _active_pods(self) -> list[TaskInfo]:
        out: list[TaskInfo] = []
        for info in self.nodes.infos:
            out.extend(t for t in info.tasks.values() if t.status in ACTIVE_USED)
        return out

    def pod_affinity(self, task: TaskInfo) -> Codes | None:
        aff = task.pod.affinity
        own_affinity = aff.pod_affinity.required if aff and aff.pod_affinity else ()
        own_anti = aff.pod_anti_affinity.required if aff and aff.pod_anti_affinity else ()
        existing_anti = [
            t for t in self._anti_affinity_pods if t.status in ACTIVE_USED and t.node >= 0 and t is not task
        ]
        if not own_affinity and not own_anti and not existing_anti:
            return None
        ssn = self.ssn
        n = len(self.nodes)
        codes = np.zeros(n, dtype=np.int32)
        pods = self._active_pods() if own_affinity or own_anti else []
        names = self.nodes.infos
        for term in own_affinity:
            key = term.topology_key
            matching = [p for p in pods if p is not task and pod_matches_term(term, task.namespace, p)]
            has_key = np.array([v is not None for v in self._values(key)], dtype=np.bool_)
            if not matching and pod_matches_term(term, task.namespace, task):
                ok = has_key  # the first pod of a group that selects itself
            else:
                domains = {v for p in matching if (v := names[p.node].labels.get(key)) is not None}
                ok = self._domain_mask(key, domains)
            codes[(codes == 0) & ~ok] = ssn.reason_code(POD_AFFINITY_ERROR)
        for term in own_anti:
            key = term.topology_key
            domains = {
                v for p in pods
                if p is not task and pod_matches_term(term, task.namespace, p)
                and (v := names[p.node].labels.get(key)) is not None
            }
            bad = self._domain_mask(key, domains)
            codes[(codes == 0) & bad] = ssn.reason_code(POD_ANTI_AFFINITY_ERROR)
        for other in existing_anti:
            anti = other.pod.affinity.pod_anti_affinity if other.pod.affinity else None
            if anti is None:
                continue
            for term in anti.required:
                if not pod_matches_term(term, other.namespace, task):
                    continue
                value = names[other.node].labels.get(term.topology_key)
                if value is None:
                    continue
                bad = self._domain_mask(term.topology_key, {value})
                codes[(codes == 0) & bad] = ssn.reason_code(EXISTING_ANTI_AFFINITY_ERROR)
        return codes if codes.any() else None
