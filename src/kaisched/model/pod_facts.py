"""What a pod's spec says that the snapshot needs, computed once per Pod object.

Pods are frozen: the same object always yields the same requests, GPU request, host ports and scheduling
signature. A cycle over a cluster where little changed (the simulator's next cycle, Kubernetes mode's next
snapshot) reuses them instead of re-deriving them for every running pod; the cost of a snapshot then grows
with the pods that changed, not with all pods. Facts are kept for the pods of the latest snapshots, and for a
few gone ones until they are a quarter of them (:func:`retain`), checked by identity, so a replaced Pod object is
never served stale facts. A task's fit vector (:meth:`PodFacts.task_vector`) is kept with them, read-only and
shared by the pods that ask alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaisched.k8s import constants as C
from kaisched.k8s.objects import Pod
from kaisched.model.gpu import GpuKind, GpuRequest, GpuRequestError, legacy_mig_annotation, parse_gpu_request
from kaisched.model.resources import GPU, GPU_RESOURCE_NAMES, PODS, ResourceIndex, Vector

HostPort = tuple[str, int, str]  # (protocol, port, host IP)
_BASE_RESOURCES = frozenset({"cpu", "memory", "pods", *GPU_RESOURCE_NAMES})


@dataclass(slots=True, eq=False, init=False)
class PodFacts:
    pod: Pod
    requests: dict[str, float]  # effective requests (never mutate)
    extended: tuple[str, ...]  # requested resource names beyond cpu, memory, pods and GPUs
    host_ports: tuple[HostPort, ...]
    signature: tuple[object, ...]
    task_priority: int | None
    uid: str  # metadata.uid, or "<namespace>/<name>" without one
    key: str  # "<namespace>/<name>"
    # "<namespace>\0<name>": sorts as the pair (namespace, name) does (NUL precedes every character of a name),
    # one string comparison instead of a tuple's
    order: str
    group_name: str | None  # the pod-group-name annotation
    _gpu: tuple[GpuRequest, GpuRequestError | None] | None
    _legacy_mig: bool | None
    _vector: Vector | None
    _vector_names: tuple[str, ...]
    _task_vector: tuple[tuple[str, ...], GpuRequest, Vector] | None  # (names, GPU request, task_vector)
    _request_items: tuple[tuple[str, float], ...] | None

    # (written out: a compiled core keeps a generated __init__ interpreted, see docs/performance.md)
    def __init__(self, pod: Pod, requests: dict[str, float], extended: tuple[str, ...],
                 host_ports: tuple[HostPort, ...], signature: tuple[object, ...], task_priority: int | None,
                 uid: str, key: str, order: str, group_name: str | None) -> None:
        self.pod = pod
        self.requests = requests
        self.extended = extended
        self.host_ports = host_ports
        self.signature = signature
        self.task_priority = task_priority
        self.uid = uid
        self.key = key
        self.order = order
        self.group_name = group_name
        self._gpu = None
        self._legacy_mig = None
        self._vector = None
        self._vector_names = ()
        self._task_vector = None
        self._request_items = None

    @property
    def gpu(self) -> tuple[GpuRequest, GpuRequestError | None]:
        """The pod's GPU request and its first validation error (:func:`parse_gpu_request`)."""
        if self._gpu is None:
            self._gpu = parse_gpu_request(self.pod, self.requests, self.request_items())
        return self._gpu

    @property
    def legacy_mig(self) -> bool:
        """MIG asked for by KAI's retired annotation (and no GPU resource)."""
        if self._legacy_mig is None:
            self._legacy_mig = legacy_mig_annotation(self.pod) is not None and not self.gpu[0].any
        return self._legacy_mig

    def request_items(self) -> tuple[tuple[str, float], ...]:
        """The requests as a tuple (both request memos are keyed by it), made once."""
        items = self._request_items
        if items is None:
            items = self._request_items = tuple(self.requests.items())
        return items

    def request_vector(self, resources: ResourceIndex, names: tuple[str, ...]) -> Vector:
        """The pod's request vector in ``resources`` order (``names`` = its names), pods: 1 (read-only, shared
        by the pods that ask alike)."""
        if self._vector is None or self._vector_names != names:
            self._vector = _request_vector(resources, names, self.requests, self.request_items(), AS_REQUESTED)
            self._vector_names = names
        return self._vector

    def task_vector(self, resources: ResourceIndex, names: tuple[str, ...], gpu: GpuRequest) -> Vector:
        """The task's node-fit vector: :meth:`request_vector` with the GPU row counting whole devices only
        (``gpu.count`` of a whole-GPU request, 0 for a shared one: its devices are accounted by their GPU groups;
        MIG as asked). Read-only and shared like the request vector (no copy per task per snapshot)."""
        known = self._task_vector
        if known is not None and known[0] == names and (known[1] is gpu or known[1] == gpu):
            return known[2]
        row = 0.0 if gpu.shared else float(gpu.count) if gpu.kind is GpuKind.WHOLE else AS_REQUESTED
        vector = _request_vector(resources, names, self.requests, self.request_items(), row)
        self._task_vector = (names, gpu, vector)
        return vector


#: the GPU row of a request vector as the pod asks (in :func:`_request_vector`)
AS_REQUESTED = -1.0
#: request vectors (read-only) by resource names, requests and GPU row; pods of one workload ask alike
_VECTORS: dict[tuple[tuple[str, ...], tuple[tuple[str, float], ...], float], Vector] = {}
_VECTORS_MAX = 4096


def _request_vector(resources: ResourceIndex, names: tuple[str, ...], requests: dict[str, float],
                    items: tuple[tuple[str, float], ...], gpu_row: float) -> Vector:
    """The requests as a vector in ``resources`` order, pods: 1, and the GPU row ``gpu_row`` unless it is
    :data:`AS_REQUESTED`."""
    key = (names, items, gpu_row)
    v = _VECTORS.get(key)
    if v is None:
        if gpu_row == AS_REQUESTED:
            v = resources.vector(requests)
            v[PODS] = 1.0
        else:
            v = _request_vector(resources, names, requests, items, AS_REQUESTED).copy()
            v[GPU] = gpu_row
        v.flags.writeable = False
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
    namespace, name = meta.namespace, meta.name
    key = f"{namespace}/{name}"
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
        order=f"{namespace}\0{name}",
        group_name=meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION),
    )
    _CACHE[id(pod)] = f
    return f


def forget_all() -> None:
    """Forget every pod's facts (the next objects are all new: nothing kept could be used again)."""
    _CACHE.clear()


def retain(pods: list[Pod]) -> None:
    """Forget the facts of every pod not in ``pods`` once the cache holds a quarter more facts than that (called
    once per snapshot: the cache stays within 1.25 times the latest snapshot's pods and the facts they add,
    without a pass over every pod each cycle)."""
    if len(_CACHE) <= stale_allowance(len(pods)):
        return
    kept = {id(p): f for p in pods if (f := _CACHE.get(id(p))) is not None and f.pod is p}
    _CACHE.clear()
    _CACHE.update(kept)


def stale_allowance(count: int) -> int:
    """How many cached facts of ``count`` current objects a cache may hold before it drops the stale ones."""
    return count + count // 4 + 64


def _task_priority(pod: Pod) -> int | None:
    raw = pod.meta.labels.get(C.TASK_PRIORITY_LABEL)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None
