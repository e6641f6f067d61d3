"""What a pod asks of GPUs (spec 7.1, 7.5): whole devices, a share of devices, or MIG slices.

A pod's GPU request is one of:

* ``WHOLE``: ``nvidia.com/gpu`` / ``amd.com/gpu`` in the container resources, ``count`` devices;
* ``FRACTION``: annotation ``gpu-fraction: f`` (0 < f <= 1), ``portion`` of each of ``count`` devices
  (``gpu-fraction-num-devices``, default 1);
* ``MEMORY``: annotation ``gpu-memory: M`` (MiB) on each of ``count`` devices;
* ``MIG``: ``nvidia.com/mig-<g>g.<m>gb`` container resources; a slice of profile ``<g>g`` costs ``g`` GPUs of
  quota.

FRACTION and MEMORY requests are *shared*: the pod joins a GPU group (one physical device shared by
fractional pods, ``runai-gpu-group`` label) on each of its ``count`` devices. Invalid combinations are
reported by :func:`parse_gpu_request` with the annotation at fault, as KAI's admission webhook rejects
them.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kaisched.k8s import constants as C
from kaisched.k8s.objects import Pod
from kaisched.model.resources import GPU_RESOURCE_NAMES

MIG_PROFILE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")


class GpuKind(enum.Enum):
    NONE = "none"
    WHOLE = "whole"
    FRACTION = "fraction"
    MEMORY = "memory"
    MIG = "mig"


def mig_gpus(resource: str) -> int:
    """GPUs of quota one slice of a MIG profile resource costs (``g`` of ``<g>g.<m>gb``); 0 if not MIG."""
    m = MIG_PROFILE.match(resource)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True, slots=True)
class GpuRequest:
    kind: GpuKind = GpuKind.NONE
    count: int = 0  # WHOLE: devices; FRACTION/MEMORY: devices shared (num-devices)
    portion: float = 0.0  # FRACTION: share of each device
    memory_mib: float = 0.0  # MEMORY: MiB on each device
    mig_gpus: float = 0.0  # MIG: sum over profiles of g x count
    mps: bool = False
    container: str = ""  # the container that receives the shared GPU ("" = the first)
    # the hash of the fields above, computed once (requests key the placement caches, asked per task placed)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.count, self.portion, self.memory_mib,
                                                self.mig_gpus, self.mps, self.container)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def shared(self) -> bool:
        return self.kind is GpuKind.FRACTION or self.kind is GpuKind.MEMORY

    @property
    def any(self) -> bool:
        """The pod asks for GPUs in some form."""
        return self.kind is not GpuKind.NONE

    def memory_on(self, mem_per_gpu: float) -> float:
        """MiB this request takes on each of its devices on a node with ``mem_per_gpu`` MiB per GPU."""
        if self.kind is GpuKind.MEMORY:
            return self.memory_mib
        return float(math.floor(self.portion * mem_per_gpu + 1e-9))

    def accepted_gpus(self, mem_per_gpu: float) -> float:
        """GPUs counted for queues when placed on a node (KAI's AcceptedResource)."""
        if self.kind is GpuKind.MEMORY:
            return self.count * math.ceil(self.memory_mib / mem_per_gpu * 100 - 1e-9) / 100
        return self.requested_gpus(0.0)

    def requested_gpus(self, min_node_gpu_memory: float) -> float:
        """GPUs a pending pod adds to its queue's request (spec 5.1)."""
        match self.kind:
            case GpuKind.WHOLE:
                return float(self.count)
            case GpuKind.FRACTION:
                return self.count * self.portion
            case GpuKind.MEMORY:
                return self.count * self.memory_mib / min_node_gpu_memory if min_node_gpu_memory > 0 else 0.0
            case GpuKind.MIG:
                return self.mig_gpus
        return 0.0

    @property
    def capacity_gpus(self) -> float:
        """GPUs of the job-level queue-capacity check (spec 5.6): gpu-memory counts 0 there."""
        return 0.0 if self.kind is GpuKind.MEMORY else self.requested_gpus(0.0)

    @property
    def required_gpus(self) -> float:
        """KAI's ``ResReq.GPUs()``: whole devices or the fractions; gpu-memory and MIG count 0."""
        if self.kind is GpuKind.WHOLE:
            return float(self.count)
        if self.kind is GpuKind.FRACTION:
            return self.count * self.portion
        return 0.0

    @property
    def received_type(self) -> str:
        """The binder's ``received-resource-type`` annotation value."""
        if self.shared:
            return C.RECEIVED_RESOURCE_TYPE_FRACTION
        if self.kind is GpuKind.MIG:
            return C.RECEIVED_RESOURCE_TYPE_MIG_INSTANCE
        return C.RECEIVED_RESOURCE_TYPE_REGULAR

    def describe(self) -> str:
        match self.kind:
            case GpuKind.WHOLE:
                return f"{self.count} GPU" + ("s" if self.count != 1 else "")
            case GpuKind.FRACTION:
                each = f"{self.portion:g} of a GPU"
                return each if self.count == 1 else f"{each} on each of {self.count} GPUs"
            case GpuKind.MEMORY:
                each = f"{self.memory_mib:g} MiB of GPU memory"
                return each if self.count == 1 else f"{each} on each of {self.count} GPUs"
            case GpuKind.MIG:
                return f"MIG slices worth {self.mig_gpus:g} GPUs"
        return "no GPU"


NO_GPU = GpuRequest()


@dataclass(frozen=True, slots=True)
class GpuRequestError:
    field: str  # e.g. "metadata.annotations.gpu-fraction"
    message: str


def _go_number(text: str) -> bool:
    """Whether Go's strconv (KAI parses these annotations with it) could read ``text`` as a number: Python's
    float() and int() also take surrounding spaces, underscores and non-ASCII digits."""
    return text.isascii() and "_" not in text and text.strip() == text


def _ann_field(key: str) -> str:
    return f"metadata.annotations.{key}"


def legacy_mig_annotation(pod: Pod) -> str | None:
    """A MIG profile given as a pod annotation (the legacy form KAI refuses to schedule)."""
    found = [key for key in pod.meta.annotations if key.startswith(C.MIG_RESOURCE_PREFIX)]
    return min(found) if found else None  # (the first in sorted order)


#: GPU requests read so far, by everything they are read from (pods of one workload ask alike)
_READ: dict[tuple[object, ...], tuple[GpuRequest, GpuRequestError | None]] = {}
_READ_MAX = 4096


def parse_gpu_request(pod: Pod, requests: Mapping[str, float] | None = None,
                      request_items: tuple[tuple[str, float], ...] | None = None
                      ) -> tuple[GpuRequest, GpuRequestError | None]:
    """The pod's GPU request, or the best reading of it and the first validation error (spec 7.1).
    ``requests``: the pod's effective requests when already computed (``request_items``: as a tuple).
    (Remembered by what it is read from: the requests, the GPU annotations and, when one is named, the
    container names.)"""
    ann = pod.meta.annotations
    if requests is None:
        requests = pod.requests
    container = ann.get(C.GPU_FRACTION_CONTAINER_NAME_ANNOTATION, "")
    items = request_items if request_items is not None else tuple(requests.items())
    key = (items, ann.get(C.GPU_FRACTION_ANNOTATION), ann.get(C.GPU_MEMORY_ANNOTATION),
           ann.get(C.GPU_FRACTION_NUM_DEVICES_ANNOTATION), ann.get(C.MPS_ANNOTATION, ""), container,
           tuple(c.name for c in (*pod.containers, *pod.init_containers)) if container else ())
    known = _READ.get(key)
    if known is None:
        known = _read_gpu_request(pod, requests)
        if len(_READ) >= _READ_MAX:
            _READ.clear()
        _READ[key] = known
    return known


def _read_gpu_request(pod: Pod, requests: Mapping[str, float]) -> tuple[GpuRequest, GpuRequestError | None]:
    ann = pod.meta.annotations
    whole = 0.0
    for name in GPU_RESOURCE_NAMES:
        whole += requests.get(name, 0.0)
    mig = 0.0
    for name, value in requests.items():
        if name.startswith(C.MIG_RESOURCE_PREFIX):
            mig += mig_gpus(name) * value
    raw_fraction = ann.get(C.GPU_FRACTION_ANNOTATION)
    raw_memory = ann.get(C.GPU_MEMORY_ANNOTATION)
    raw_devices = ann.get(C.GPU_FRACTION_NUM_DEVICES_ANNOTATION)
    mps = ann.get(C.MPS_ANNOTATION, "").lower() == "true"
    container = ann.get(C.GPU_FRACTION_CONTAINER_NAME_ANNOTATION, "")

    if whole and whole != int(whole):
        return GpuRequest(GpuKind.WHOLE, math.ceil(whole)), GpuRequestError(
            "spec.containers.resources", f"nvidia.com/gpu must be a whole number of devices, got {whole:g}")
    if raw_fraction is None and raw_memory is None:
        err: GpuRequestError | None = None
        if raw_devices is not None:
            err = GpuRequestError(_ann_field(C.GPU_FRACTION_NUM_DEVICES_ANNOTATION),
                                  "gpu-fraction-num-devices requires gpu-fraction or gpu-memory")
        elif mps:
            err = GpuRequestError(_ann_field(C.MPS_ANNOTATION), "mps is only allowed with gpu-fraction or gpu-memory")
        if whole:
            return GpuRequest(GpuKind.WHOLE, int(whole)), err
        if mig:
            return GpuRequest(GpuKind.MIG, mig_gpus=float(mig)), err
        return NO_GPU, err

    count = 1
    err = None
    if raw_devices is not None:
        try:
            count = int(raw_devices) if _go_number(raw_devices) else 0
        except ValueError:
            count = 0
        if count <= 0:
            err = GpuRequestError(_ann_field(C.GPU_FRACTION_NUM_DEVICES_ANNOTATION),
                                  f"must be a positive integer, got {raw_devices!r}")
            count = 1
    if container and container not in {c.name for c in (*pod.containers, *pod.init_containers)}:
        err = err or GpuRequestError(_ann_field(C.GPU_FRACTION_CONTAINER_NAME_ANNOTATION),
                                     f"names no container of the pod: {container!r}")
    if raw_fraction is not None and raw_memory is not None:
        return GpuRequest(GpuKind.FRACTION, count, portion=1.0), GpuRequestError(
            _ann_field(C.GPU_MEMORY_ANNOTATION), "gpu-memory cannot be combined with gpu-fraction")
    if whole or mig:
        key = C.GPU_FRACTION_ANNOTATION if raw_fraction is not None else C.GPU_MEMORY_ANNOTATION
        return GpuRequest(GpuKind.WHOLE, max(int(whole), count)), GpuRequestError(
            _ann_field(key), f"{key} cannot be combined with a GPU resource request (nvidia.com/gpu or MIG)")
    if raw_fraction is not None:
        try:
            portion = float(raw_fraction) if _go_number(raw_fraction) else math.nan
        except ValueError:
            portion = math.nan
        if not 0.0 < portion <= 1.0:  # also rejects NaN
            return GpuRequest(GpuKind.FRACTION, count, portion=1.0, mps=mps, container=container), GpuRequestError(
                _ann_field(C.GPU_FRACTION_ANNOTATION), f"must be a number in (0, 1], got {raw_fraction!r}")
        return GpuRequest(GpuKind.FRACTION, count, portion=portion, mps=mps, container=container), err
    assert raw_memory is not None
    try:
        memory = int(raw_memory) if _go_number(raw_memory) else 0
    except ValueError:
        memory = 0
    if memory <= 0:
        return GpuRequest(GpuKind.FRACTION, count, portion=1.0, mps=mps, container=container), GpuRequestError(
            _ann_field(C.GPU_MEMORY_ANNOTATION), f"must be a positive integer (MiB), got {raw_memory!r}")
    return GpuRequest(GpuKind.MEMORY, count, memory_mib=float(memory), mps=mps, container=container), err


def gpu_group_labels(groups: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The labels naming a bound pod's GPU groups (what KAI's binder writes): ``runai-gpu-group=<g>`` for one
    device, ``runai-gpu-group/<g>=<g>`` per device for several; the inverse of :func:`gpu_groups_of`."""
    if len(groups) == 1:
        return {C.GPU_GROUP_LABEL: groups[0]}
    return {f"{C.GPU_GROUP_LABEL}/{g}": g for g in groups}


def is_gpu_group_label(key: str) -> bool:
    return key == C.GPU_GROUP_LABEL or key.startswith(C.GPU_GROUP_LABEL + "/")


def gpu_groups_of(labels: dict[str, str] | object) -> tuple[str, ...]:
    """The GPU groups a pod's labels name: ``runai-gpu-group=<g>`` or ``runai-gpu-group/<g>=<g>`` per device."""
    if not isinstance(labels, dict):
        return ()
    single = labels.get(C.GPU_GROUP_LABEL)
    prefix = C.GPU_GROUP_LABEL + "/"
    multi = sorted(v for k, v in labels.items() if k.startswith(prefix) and v)
    if multi:
        return tuple(multi)
    return (single,) if single else ()
