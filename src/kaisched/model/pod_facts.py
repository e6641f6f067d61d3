"""What a pod's spec says that the snapshot needs, computed once per Pod object.

Pods are frozen: the same object always yields the same requests, GPU request, host ports and scheduling
signature. A cycle over a cluster where little changed (the simulator's next cycle, Kubernetes mode's next
snapshot) reuses them instead of re-deriving them for every running pod; the cost of a snapshot then grows
with the pods that changed, not with all pods. Facts are kept for the pods of the latest snapshots only
(:func:`retain`), checked by identity, so a replaced Pod object is never served stale facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaisched.k8s import constants as C
from kaisched.k8s.objects import Pod
from kaisched.model.gpu import GpuRequest, GpuRequestError, legacy_mig_annotation, parse_gpu_request
from kaisched.model.resources import GPU_RESOURCE_NAMES, PODS, ResourceIndex, Vector

HostPort = tuple[str, int, str]  # (protocol, port, host IP)
_BASE_RESOURCES = frozenset({"cpu", "memory", "pods", *GPU_RESOURCE_NAMES})


@dataclass(slots=True, eq=False)
class PodFacts:
    pod: Pod
    requests: dict[str, float]  # effective requests (never mutate)
    extended: tuple[str, ...]  # requested resource names beyond cpu, memory, pods and GPUs
    host_ports: tuple[HostPort, ...]
    signature: tuple[object, ...]
    task_priority: int | None
    uid: str  # metadata.uid, or "<namespace>/<name>" without one
    key: str  # "<namespace>/<name>"
    group_name: str | None  # the pod-group-name annotation
    _gpu: tuple[GpuRequest, GpuRequestError | None] | None = None
    _legacy_mig: bool | None = None
    _vector: Vector | None = None
    _vector_names: tuple[str, ...] = ()

    @property
    def gpu(self) -> tuple[GpuRequest, GpuRequestError | None]:
        """The pod's GPU request and its first validation error (:func:`parse_gpu_request`)."""
        if self._gpu is None:
            self._gpu = parse_gpu_request(self.pod, self.requests)
        return self._gpu

    @property
    def legacy_mig(self) -> bool:
        """MIG asked for by KAI's retired annotation (and no GPU resource)."""
        if self._legacy_mig is None:
            self._legacy_mig = legacy_mig_annotation(self.pod) is not None and not self.gpu[0].any
        return self._legacy_mig

    def vector(self, resources: ResourceIndex, names: tuple[str, ...]) -> Vector:
        """A fresh copy of the pod's request vector in ``resources`` order (``names`` = its names), pods: 1."""
        if self._vector is None or self._vector_names != names:
            self._vector, self._vector_names = _request_vector(resources, names, self.requests), names
        return self._vector.copy()


#: request vectors (never mutated: pods get copies) by resource names and requests; pods of one workload ask alike
_VECTORS: dict[tuple[tuple[str, ...], tuple[tuple[str, float], ...]], Vector] = {}
_VECTORS_MAX = 4096


def _request_vector(resources: ResourceIndex, names: tuple[str, ...], requests: dict[str, float]) -> Vector:
    key = (names, tuple(requests.items()))
    v = _VECTORS.get(key)
    if v is None:
        v = resources.vector(requests)
        v[PODS] = 1.0
        if len(_VECTORS) >= _VECTORS_MAX:
            _VECTORS.clear()
        _VECTORS[key] = v
    return v


_CACHE: dict[int, PodFacts] = {}  # by Pod identity; entries are checked against the pod, so races only miss


def pod_facts(pod: Pod) -> PodFacts:
    """The facts of this Pod object (cached by identity)."""
    f = _CACHE.get(id(pod))
    if f is not None and f.pod is pod:
        return f
    requests = pod.requests
    affinity = pod.affinity
    meta = pod.meta
    selector = pod.node_selector
    host_ports = pod.host_ports
    key = f"{meta.namespace}/{meta.name}"
    f = PodFacts(
        pod=pod,
        requests=requests,
        extended=() if _BASE_RESOURCES.issuperset(requests) else tuple(n for n in requests
                                                                         if n not in _BASE_RESOURCES),
        host_ports=tuple((p.protocol or "TCP", p.host_port, p.host_ip or "0.0.0.0") for p in host_ports)
        if host_ports else (),
        signature=(tuple(sorted(selector.items())) if selector else (),
                   repr(affinity.node_affinity) if affinity else "None", pod.tolerations),
        task_priority=_task_priority(pod),
        uid=meta.uid or key,
        key=key,
        group_name=meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION),
    )
    _CACHE[id(pod)] = f
    return f


def forget_all() -> None:
    """Forget every pod's facts (the next objects are all new: nothing kept could be used again)."""
    _CACHE.clear()


def retain(pods: list[Pod]) -> None:
    """Forget the facts of every pod not in ``pods`` (called once per snapshot; keeps the cache bounded)."""
    kept = {id(p): f for p in pods if (f := _CACHE.get(id(p))) is not None and f.pod is p}
    _CACHE.clear()
    _CACHE.update(kept)


def _task_priority(pod: Pod) -> int | None:
    raw = pod.meta.labels.get(C.TASK_PRIORITY_LABEL)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None
