"""Workloads and clusters from published GPU-cluster traces, as simulator :class:`Arrival` s and Node manifests.

* :func:`openb_nodes` / :func:`openb_arrivals`: Alibaba's GPU cluster trace v2023 ("OpenB",
  ``alibaba/clusterdata`` ``cluster-trace-gpu-v2023``; Weng et al., "Beware of Fragmentation: Scheduling
  GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23): its node lists and pod lists.
* :func:`csv_arrivals`: any job CSV with a submit time, a duration (or start and end), GPUs, pods and a
  user / virtual cluster, given a column :data:`mapping <PHILLY>`; presets for the CSV forms of the Philly,
  Helios and Acme traces (:data:`PHILLY`, :data:`HELIOS`, :data:`ACME`).
* :func:`job_objects`: the PodGroup and pods of one job (whole GPUs, a GPU fraction, or CPU only), as the
  loaders build them.

A row that cannot be read raises :class:`TraceError`, which names the file, the line and the column.

Reading is bounded (:class:`TraceLimits`): the file is read with the input limits of
:func:`kaisched.k8s.loader.read_text` (its size, ``KAISCHED_MAX_INPUT_BYTES``, 1 GiB by default; a FIFO's
first writer waited for ``KAISCHED_INPUT_TIMEOUT`` seconds, 10 by default), and the jobs and pods the rows
make are counted as the rows are read, before any job's objects are made (1,000,000 of each by default, a
scenario's ``limits.jobs`` and ``limits.pods``): a trace over them raises :class:`TraceError` at the line
that goes over. With ``limit`` (the earliest rows only), only that many rows are kept while the file is read.
"""

from __future__ import annotations

import csv
import heapq
import io
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal, TypeVar

from kaisched.cluster.workloads.base import MAX_PODS
from kaisched.k8s import constants as C
from kaisched.k8s.loader import InputLimits, read_text
from kaisched.sim.model import Arrival, Obj

T = TypeVar("T")

SCHEDULER: Final = C.SCHEDULER_NAME
POD_GROUP_API: Final = "scheduling.run.ai/v2alpha2"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
TRAIN: Final = C.TRAIN_PRIORITY_CLASS
INFERENCE: Final = C.INFERENCE_PRIORITY_CLASS

# ---------------------------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class TraceProblem:
    """Where a trace file is wrong: ``line`` counts from 1 (the header is line 1)."""

    file: str
    line: int
    column: str  # "" when the problem is not about one column
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: column {self.column!r}: {self.message}" if self.column else f"{where}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "column": self.column, "message": self.message}


class TraceError(ValueError):
    """A trace file or one of its rows that cannot be used; ``problem`` says where and why."""

    def __init__(self, file: str | Path, line: int, column: str, message: str) -> None:
        self.problem = TraceProblem(str(file), line, column, message)
        super().__init__(str(self.problem))


#: the jobs one trace may make by default (a scenario's ``limits.jobs``)
MAX_JOBS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """How much one trace may make, counted as it is read, before a job's objects are made: ``jobs`` and
    ``pods`` in all, ``jobs_before`` and ``pods_before`` of them taken already (by the rest of a scenario);
    ``input``: how the file is read (its size, a FIFO's wait; default :meth:`InputLimits.from_env`). Over
    them, :class:`TraceError` names the line that goes over."""

    jobs: int = MAX_JOBS
    pods: int = MAX_PODS
    jobs_before: int = 0
    pods_before: int = 0
    input: InputLimits | None = None

    def too_many_jobs(self, file: str, line: int, jobs: int) -> TraceError:
        """The trace's ``jobs`` th job (at ``line``) is one too many."""
        before = f" with the {self.jobs_before:,} before the trace" if self.jobs_before else ""
        return TraceError(file, line, "", f"{self.jobs_before + jobs:,} jobs{before}, more than the limit of "
                          f"{self.jobs:,} jobs (limits.jobs: raise it, or take the earliest rows with limit)")

    def too_many_pods(self, file: str, line: int, column: str, pods: int, made: int) -> TraceError:
        """A job of ``pods`` pods (at ``line``, ``column``) after ``made`` pods of the trace is too many."""
        before = self.pods_before + made
        others = f" ({before + pods:,} pods with the {before:,} before it)" if before else ""
        return TraceError(file, line, column, f"a job of {pods:,} pod{'s' * (pods != 1)}{others}, more than the "
                          f"limit of {self.pods:,} pods (limits.pods: raise it to simulate more)")

    def admit(self, file: str, line: int, column: str, pods: int, made: int) -> None:
        """Before a job of ``pods`` pods is made, ``made`` pods of the trace's jobs before it."""
        if self.pods_before + made + pods > self.pods:
            raise self.too_many_pods(file, line, column, pods, made)


# ----------------------------------------------------------------------------------------- job objects


def _quantity(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


CLAIM_NAME: Final = "gpu"  # the pod's DRA claim (spec.resourceClaims[].name) of a job asking GPUs by claim


def job_objects(
    name: str,
    namespace: str,
    queue: str,
    pods: int = 1,
    gpus_per_pod: float = 0.0,
    cpu: float | str = 1,
    memory: float | str = "4Gi",
    priority_class: str = TRAIN,
    min_member: int | None = None,
    node_affinity: Mapping[str, Sequence[str]] | None = None,
    *,
    created: str | None = None,
    claim_template: str | None = None,
) -> tuple[Obj, ...]:
    """A PodGroup ``name`` (queue, minMember, priority class) and its ``pods`` pending pods ``<name>-<i>``.

    ``gpus_per_pod``: 0 = CPU only; 0 < g < 1 = annotation ``gpu-fraction: "g"`` (a share of one GPU);
    a whole number g >= 1 = ``nvidia.com/gpu: g`` (requests and limits). ``cpu`` and ``memory`` are
    per pod, as Kubernetes quantities (a number is cores / bytes). ``min_member`` defaults to ``pods``
    (a gang). ``node_affinity`` maps node label keys to the values allowed (required node affinity, one
    ``In`` expression per key). ``created`` (RFC 3339) sets every object's creationTimestamp; without it
    the simulator stamps the arrival time. ``claim_template``: every pod asks for devices through a DRA claim
    ``gpu`` made from that ResourceClaimTemplate (``spec.resourceClaims``; give ``gpus_per_pod`` 0 then).
    """
    if pods < 1:
        raise ValueError(f"job {name}: pods must be >= 1, got {pods}")
    if gpus_per_pod < 0 or math.isnan(gpus_per_pod) or (gpus_per_pod > 1 and gpus_per_pod != int(gpus_per_pod)):
        raise ValueError(f"job {name}: GPUs per pod must be a whole number or a fraction below 1, got {gpus_per_pod}")
    members = pods if min_member is None else min_member
    if not 1 <= members <= pods:
        raise ValueError(f"job {name}: min_member must be 1..{pods}, got {members}")
    meta: Obj = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = created
    group: Obj = {"apiVersion": POD_GROUP_API, "kind": "PodGroup", "metadata": meta,
                  "spec": {"queue": queue, "minMember": members, "priorityClassName": priority_class}}
    resources: dict[str, str] = {}
    if cpu:
        resources["cpu"] = _quantity(cpu)
    if memory:
        resources["memory"] = _quantity(memory)
    annotations = {C.POD_GROUP_NAME_ANNOTATION: name}
    if 0 < gpus_per_pod < 1:
        annotations[C.GPU_FRACTION_ANNOTATION] = f"{gpus_per_pod:g}"
    elif gpus_per_pod >= 1:
        resources[C.GPU_RESOURCE] = str(int(gpus_per_pod))
    spec: Obj = {"schedulerName": SCHEDULER, "containers": []}
    if node_affinity:
        terms = [{"key": key, "operator": "In", "values": list(values)} for key, values in node_affinity.items()]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": terms}]}}}
    out: list[Obj] = [group]
    for i in range(pods):
        pod_meta: Obj = {"name": f"{name}-{i}", "namespace": namespace, "labels": {C.QUEUE_LABEL: queue},
                         "annotations": dict(annotations)}
        if created is not None:
            pod_meta["creationTimestamp"] = created
        pod_spec = dict(spec)
        container_resources: Obj = {"requests": dict(resources), "limits": dict(resources)}
        if claim_template:
            container_resources["claims"] = [{"name": CLAIM_NAME}]
            pod_spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template}]
        pod_spec["containers"] = [{"name": "main", "image": "sim", "resources": container_resources}]
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec,
                    "status": {"phase": "Pending"}})
    return tuple(out)


def queue_objects(names: Sequence[str] | Sequence[Arrival], *, parent: str | None = None) -> list[Obj]:
    """One Queue per distinct name (or per distinct queue of ``arrivals``), unlimited, in first-seen order."""
    seen: dict[str, None] = {}
    for item in names:
        seen.setdefault(item.queue if isinstance(item, Arrival) else item, None)
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    out: list[Obj] = []
    for q in seen:
        spec: Obj = {"resources": {"gpu": dict(unlimited), "cpu": dict(unlimited), "memory": dict(unlimited)}}
        if parent is not None:
            spec["parentQueue"] = parent
        out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": q}, "spec": spec})
    return out


# --------------------------------------------------------------------------------------- CSV reading


def _rows(path: str | Path, required: Sequence[str] = (),
          limits: InputLimits | None = None) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of a CSV file with a header; the header must name ``required``. The file is read within
    ``limits`` (:func:`~kaisched.k8s.loader.read_text`: raises ``InputLimitError`` or ``OSError``)."""
    name = str(path)
    try:
        text = read_text(path, limits, source=f"file {name}")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1 if isinstance(exc.object, bytes) else 1
        raise TraceError(name, line, "", f"not UTF-8 text (byte {exc.start + 1:,} of the file)") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    if not header:
        raise TraceError(name, 1, "", "empty file: expected a header line")
    for column in required:
        if column not in header:
            raise TraceError(name, 1, column, f"no such column (the header has: {', '.join(header)})")
    for row in reader:
        if None in row:
            raise TraceError(name, reader.line_num, "", f"more fields than the header's {len(header)}")
        yield reader.line_num, {k: (v or "").strip() for k, v in row.items()}


def _earliest(items: Iterable[tuple[float, int, T]], keep: int | None, cap: int,
              refuse: Callable[[int, int], TraceError]) -> list[tuple[float, int, T]]:
    """The ``keep`` earliest ``(time, line, item)`` by time then line (every one when ``keep`` is None), in
    that order. At most ``cap`` are taken: the one beyond raises ``refuse(line, cap + 1)``; fewer than ``keep`` +
    1 are held while reading (the later ones are let go as earlier ones come)."""
    if keep is None:
        out: list[tuple[float, int, T]] = []
        for entry in items:
            out.append(entry)
            if len(out) > cap:
                raise refuse(entry[1], len(out))
        out.sort(key=lambda j: (j[0], j[1]))
        return out
    size = min(max(keep, 0), cap + 1)
    heap: list[tuple[float, int, T]] = []  # the latest of those held on top: (-time, -line)
    for t, line, item in items:
        if len(heap) < size:
            heapq.heappush(heap, (-t, -line, item))
        elif size and (-t, -line) > heap[0][:2]:
            heapq.heapreplace(heap, (-t, -line, item))
    out = sorted(((-t, -line, item) for t, line, item in heap), key=lambda j: (j[0], j[1]))
    if len(out) > cap:
        raise refuse(out[cap][1], cap + 1)
    return out


class _Row:
    """Typed access to one row's cells, raising :class:`TraceError` with the file, line and column."""

    __slots__ = ("file", "line", "row")

    def __init__(self, file: str, line: int, row: Mapping[str, str]) -> None:
        self.file, self.line, self.row = file, line, row

    def error(self, column: str, message: str) -> TraceError:
        return TraceError(self.file, self.line, column, message)

    def text(self, column: str | None) -> str:
        return "" if column is None else self.row.get(column, "")

    def number(self, column: str, *, what: str = "a number", minimum: float | None = 0.0) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected {what}, got {raw!r}") from None
        if math.isnan(value) or math.isinf(value):
            raise self.error(column, f"expected {what}, got {raw!r}")
        if minimum is not None and value < minimum:
            raise self.error(column, f"must be >= {minimum:g}, got {raw!r}")
        return value

    def optional_number(self, column: str | None, default: float | None, *, what: str = "a number") -> float | None:
        if column is None or self.text(column) == "":
            return default
        return self.number(column, what=what)

    def integer(self, column: str, *, minimum: int = 0) -> int:
        value = self.number(column, what="an integer", minimum=minimum)
        if value != int(value):
            raise self.error(column, f"expected an integer, got {self.text(column)!r}")
        return int(value)


# ---------------------------------------------------------------------------------------------- OpenB

#: MiB of GPU memory per model of the OpenB node lists (label ``nvidia.com/gpu.memory``): the models'
#: nominal memory (P100, T4, V100-16GB: 16 GiB; V100-32GB: 32 GiB; A10: 24 GiB). G1/G2/G3 are undisclosed
#: internal codes; they and any other model get :data:`OPENB_DEFAULT_GPU_MEMORY_MIB`. Only ``gpu-memory``
#: requests and the rounding of fractions (``floor(f x memory)`` MiB a share) depend on it.
OPENB_GPU_MEMORY_MIB: Final[Mapping[str, int]] = {
    "P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768, "A10": 24576,
}
OPENB_DEFAULT_GPU_MEMORY_MIB: Final = 16384
#: OpenB ``qos`` -> priority class: latency-sensitive pods are KAI ``inference`` (non-preemptible);
#: everything else (``BE`` best effort, ``Burstable``, ``Guaranteed``, empty) is ``train``.
OPENB_QOS_PRIORITY: Final[Mapping[str, str]] = {"LS": INFERENCE}
OPENB_NODE_COLUMNS: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
OPENB_POD_COLUMNS: Final = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def openb_nodes(path: str | Path, *, gpu_only: bool = True, pods: int = 110,
                gpu_memory: Mapping[str, int] | int | None = None, limits: InputLimits | None = None) -> list[Obj]:
    """Node manifests of an OpenB node list (``openb_node_list_gpu_node.csv`` or ``..._all_node.csv``).

    Each node (named by ``sn``) is Ready with allocatable ``cpu`` (``cpu_milli``), ``memory``
    (``memory_mib``), ``pods`` and, on a GPU node, ``nvidia.com/gpu`` plus the labels
    ``nvidia.com/gpu.product`` (``model``), ``nvidia.com/gpu.count`` and ``nvidia.com/gpu.memory``
    (``gpu_memory``: MiB per model, or one value for all; default :data:`OPENB_GPU_MEMORY_MIB`).
    ``gpu_only`` leaves out nodes without GPUs. The file is read within ``limits`` (its size, a FIFO's wait).
    """
    name = str(path)
    out: list[Obj] = []
    for line, raw in _rows(path, OPENB_NODE_COLUMNS, limits):
        row = _Row(name, line, raw)
        sn = row.text("sn")
        if not sn:
            raise row.error("sn", "a node needs a name")
        cpu = row.integer("cpu_milli")
        mem = row.integer("memory_mib")
        gpus = row.integer("gpu")
        if gpu_only and gpus == 0:
            continue
        model = row.text("model")
        labels = {"kubernetes.io/hostname": sn}
        allocatable = {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": str(pods)}
        if gpus:
            if isinstance(gpu_memory, int):
                mib = gpu_memory
            else:
                mib = (OPENB_GPU_MEMORY_MIB if gpu_memory is None else gpu_memory).get(
                    model, OPENB_DEFAULT_GPU_MEMORY_MIB)
            allocatable[C.GPU_RESOURCE] = str(gpus)
            labels[C.GPU_COUNT_NODE_LABEL] = str(gpus)
            labels[C.GPU_MEMORY_NODE_LABEL] = str(mib)
            if model:
                labels[GPU_PRODUCT_LABEL] = model
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": sn, "labels": labels}, "spec": {},
                    "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}})
    return out


@dataclass(frozen=True, slots=True)
class OpenBPod:
    """One row of an OpenB pod list."""

    name: str
    line: int
    cpu_milli: int
    memory_mib: int
    gpus: float  # per pod: 0, a fraction (gpu_milli / 1000 of one GPU) or whole GPUs
    models: tuple[str, ...]  # acceptable GPU models (gpu_spec), empty = any
    qos: str
    phase: str
    creation: float | None
    deletion: float | None
    scheduled: float | None

    @property
    def gpu_milli(self) -> int:
        """milli-GPUs asked for (num_gpu x gpu_milli)."""
        return round(self.gpus * 1000)


def read_openb_pods(path: str | Path, *, limits: InputLimits | None = None) -> list[OpenBPod]:
    """Every row of an OpenB pod list (the ``multigpu`` variants have no qos, spec or time columns), read
    within ``limits`` (its size, a FIFO's wait).

    ``num_gpu == 1`` and ``gpu_milli < 1000``: a share ``gpu_milli / 1000`` of one GPU; otherwise
    ``num_gpu`` whole GPUs (0: CPU only; ``gpu_milli`` is then ignored).
    """
    return list(_openb_pods(path, limits))


def _openb_pods(path: str | Path, limits: InputLimits | None) -> Iterator[OpenBPod]:
    name = str(path)
    for line, raw in _rows(path, OPENB_POD_COLUMNS, limits):
        row = _Row(name, line, raw)
        pod = row.text("name")
        if not pod:
            raise row.error("name", "a pod needs a name")
        num = row.integer("num_gpu")
        milli = row.integer("gpu_milli")
        if num == 1 and milli < 1000:
            if milli == 0:
                raise row.error("gpu_milli", "a GPU pod asks for 0 milli-GPU")
            gpus = milli / 1000
        else:
            gpus = float(num)
        spec = row.text("gpu_spec")
        models = tuple(dict.fromkeys(m.strip() for m in spec.split("|") if m.strip()))
        yield OpenBPod(
            name=pod, line=line, cpu_milli=row.integer("cpu_milli"), memory_mib=row.integer("memory_mib"),
            gpus=gpus, models=models, qos=row.text("qos"), phase=row.text("pod_phase"),
            creation=row.optional_number("creation_time", None), deletion=row.optional_number("deletion_time", None),
            scheduled=row.optional_number("scheduled_time", None),
        )


def openb_arrivals(
    path: str | Path,
    *,
    queue: str,
    namespace: str = "default",
    limit: int | None = None,
    time_scale: float = 1.0,
    default_duration: float = math.inf,
    skip_unscheduled: bool = False,
    priority_classes: Mapping[str, str] | None = None,
    default_priority_class: str = TRAIN,
    limits: TraceLimits | None = None,
    arrival_scale: float = 1.0,
) -> list[Arrival]:
    """One single-pod job per row of an OpenB pod list (``openb_pod_list_*.csv``), in arrival order.

    * **arrival** = ``creation_time`` minus the earliest creation time of the rows taken, times
      ``time_scale`` and ``arrival_scale`` (which compresses the arrivals alone, durations kept: the trace's
      149 days never ask more than ~70 GPUs at once; ``arrival_scale: 0.001`` makes its pods overlap);
      **duration** = ``deletion_time - scheduled_time`` (the time it ran), or
      ``deletion_time - creation_time`` for a pod the real cluster never scheduled (it asked for the
      resources that long; ``skip_unscheduled`` leaves these rows out instead: 897 of the default list's
      8,152), times ``time_scale``; ``default_duration`` (default: never ends) without a
      ``deletion_time`` column or value. Without a ``creation_time`` column every pod arrives at 0.
    * ``limit``: the ``limit`` earliest rows (by creation time, then file order).
    * **resources**: ``cpu_milli`` and ``memory_mib`` per pod; ``num_gpu == 1`` and ``gpu_milli < 1000``:
      annotation ``gpu-fraction: gpu_milli / 1000``, else ``num_gpu`` whole GPUs (0: CPU only).
    * ``gpu_spec`` (models separated by ``|``): required node affinity ``nvidia.com/gpu.product In
      (models)`` (the label :func:`openb_nodes` gives).
    * ``qos`` -> priority class: ``priority_classes`` (default :data:`OPENB_QOS_PRIORITY`: ``LS`` ->
      ``inference``), anything else ``default_priority_class`` (``train``).

    Each job is a PodGroup (minMember 1) and its pod, both named after the row's ``name``.

    ``limits`` (:class:`TraceLimits`): the jobs (and pods) taken, counted as the rows are read, and how the
    file is read; over them, :class:`TraceError` names the line.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if isinstance(arrival_scale, bool) or not isinstance(arrival_scale, int | float) or not 0 < arrival_scale <= 1e6:
        raise ValueError(f"arrival_scale must be a number > 0, got {arrival_scale!r}")
    bounds = limits if limits is not None else TraceLimits()
    name = str(path)
    rows = (p for p in _openb_pods(path, bounds.input)
            if not skip_unscheduled or p.scheduled is not None or p.creation is None)
    cap = max(min(bounds.jobs - bounds.jobs_before, bounds.pods - bounds.pods_before), 0)  # (a pod a job)

    def refuse(line: int, jobs: int) -> TraceError:
        if bounds.jobs - bounds.jobs_before <= bounds.pods - bounds.pods_before:
            return bounds.too_many_jobs(name, line, jobs)
        return bounds.too_many_pods(name, line, "", 1, jobs - 1)

    taken = [p for _, _, p in _earliest(((p.creation or 0.0, p.line, p) for p in rows), limit, cap, refuse)]
    t0 = min((p.creation for p in taken if p.creation is not None), default=0.0)
    mapping = OPENB_QOS_PRIORITY if priority_classes is None else priority_classes
    out: list[Arrival] = []
    for p in taken:
        arrival = 0.0 if p.creation is None else (p.creation - t0) * time_scale * arrival_scale
        if p.deletion is None:
            duration = default_duration
        else:
            start = p.scheduled if p.scheduled is not None else p.creation
            duration = default_duration if start is None else max(p.deletion - start, 0.0) * time_scale
        affinity = {GPU_PRODUCT_LABEL: p.models} if p.models else None
        objects = job_objects(p.name, namespace, queue, 1, p.gpus, f"{p.cpu_milli}m", f"{p.memory_mib}Mi",
                              mapping.get(p.qos, default_priority_class), 1, affinity)
        out.append(Arrival(arrival, f"{namespace}/{p.name}", queue, objects, duration, p.gpus))
    return out


# ------------------------------------------------------------------------------------ generic job CSV

#: Our fields and what each means in a :func:`csv_arrivals` mapping (values: the CSV's column names).
CSV_FIELDS: Final[Mapping[str, str]] = {
    "submit": "submit time (seconds, or a date) - required",
    "duration": "run time in seconds (or give start and end)",
    "start": "start time (seconds or a date), with end: duration = end - start when there is no duration",
    "end": "end time (seconds or a date)",
    "gpus": "GPUs of the job (total; per pod with gpus_per_pod=True); default 0",
    "pods": "pods (nodes) of the job: a gang with minMember = pods; default 1 (or enough pods for the GPUs)",
    "cpu": "CPU cores of the job (total or per pod, like gpus); default: the cpu argument per pod",
    "queue": "queue (user, virtual cluster); default: default_queue",
    "name": "job name; default: job-<line>",
}

#: Philly (Microsoft, Jeon et al., ATC'19). The published ``cluster_job_log`` (msr-fiddle/philly-traces)
#: is JSON; this fits its CSV form ``philly_trace.csv`` in the Helios schema (HeliosData/HeliosArtifact
#: "compare with Philly trace", also bundled with AcmeTrace's previous-work traces): ``jobname``,
#: ``vc``, ``gpu_num`` (total), ``submit_time``, ``duration`` (seconds). It has no node count: jobs
#: larger than ``max_gpus_per_pod`` are split into a gang of equal pods.
PHILLY: Final[Mapping[str, str]] = {
    "name": "jobname", "submit": "submit_time", "duration": "duration", "gpus": "gpu_num", "queue": "vc",
}
#: Helios (SenseTime, Hu et al., SC'21; S-Lab-System-Group/HeliosData ``data/<cluster>/cluster_log.csv``:
#: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue``;
#: ``gpu_num`` / ``cpu_num`` are the job's totals, ``queue`` is the queueing delay, not a queue).
#: Queues are the virtual clusters (``vc``).
HELIOS: Final[Mapping[str, str]] = {
    "name": "job_id", "submit": "submit_time", "duration": "duration", "start": "start_time", "end": "end_time",
    "gpus": "gpu_num", "pods": "node_num", "cpu": "cpu_num", "queue": "vc",
}
#: Acme (Shanghai AI Lab, Hu et al., NSDI'24; InternLM/AcmeTrace ``data/job_trace/trace_seren.csv`` and
#: ``trace_kalos.csv``: ``job_id,user,node_num,gpu_num,cpu_num,[mem_per_pod_GB,shared_mem_per_pod,]type,
#: state,submit_time,start_time,end_time,[fail_time,stop_time,]duration,queue,gpu_time``, dates like
#: ``2023-03-01 00:18:22+08:00``; totals per job). It has no virtual clusters: queues are the users.
ACME: Final[Mapping[str, str]] = {
    "name": "job_id", "submit": "submit_time", "duration": "duration", "start": "start_time", "end": "end_time",
    "gpus": "gpu_num", "pods": "node_num", "cpu": "cpu_num", "queue": "user",
}
PRESETS: Final[Mapping[str, Mapping[str, str]]] = {"philly": PHILLY, "helios": HELIOS, "acme": ACME}
TIME_UNITS: Final[Mapping[str, float]] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0}
_NAME_BAD = re.compile(r"[^A-Za-z0-9.-]+")


def _object_name(raw: str) -> str:
    """A usable object name: characters other than letters, digits, '.' and '-' become '-'."""
    return _NAME_BAD.sub("-", raw).strip("-.")[:200]


def _time(row: _Row, column: str, unit: float) -> float | None:
    """Seconds: a number (times ``unit``) or an ISO date (``YYYY-MM-DD HH:MM:SS[+hh:mm]``, naive = UTC)."""
    raw = row.text(column)
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if math.isnan(value) or math.isinf(value):
            raise row.error(column, f"expected a time, got {raw!r}")
        return value * unit
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise row.error(column, f"expected seconds or a date like 2020-06-09 18:41:01, got {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def csv_arrivals(
    path: str | Path,
    mapping: Mapping[str, str] | str | None = None,
    *,
    preset: str | None = None,
    default_queue: str = "default-queue",
    namespace: str = "default",
    time_unit: str = "s",
    time_scale: float = 1.0,
    gpus_per_pod: bool = False,
    max_gpus_per_pod: int = 8,
    cpu: float | str = 1,
    memory: float | str = "4Gi",
    priority_class: str = TRAIN,
    default_duration: float | None = None,
    limit: int | None = None,
    gpu_jobs_only: bool = False,
    errors: Literal["raise", "skip"] = "raise",
    problems: list[TraceProblem] | None = None,
    limits: TraceLimits | None = None,
) -> list[Arrival]:
    """Jobs of a generic job CSV (one job a row), in arrival order.

    ``mapping`` maps our fields (:data:`CSV_FIELDS`) to the CSV's column names, or names a preset
    (``"philly"``, ``"helios"``, ``"acme"``: :data:`PHILLY`, :data:`HELIOS`, :data:`ACME`); ``preset``
    does the same by name, with ``mapping`` then overriding some of its fields.

    * **times**: ``submit``/``start``/``end`` are numbers in ``time_unit`` (``s``, ``ms``, ``us``,
      ``min``, ``h``) or dates (ISO 8601, e.g. ``2020-06-09 18:41:01`` or ``2023-03-01 00:18:22+08:00``;
      without a zone: UTC). Arrivals are relative to the earliest submit of the rows taken. ``duration``
      is in ``time_unit``; when it is not mapped or empty, ``end - start``; when neither gives one,
      ``default_duration`` (None: the row is an error). Both are multiplied by ``time_scale``.
    * **GPUs**: ``gpus`` is the job's total (``gpus_per_pod=False``, the traces' convention) or per pod.
      A total is spread over the pods (rounded up to whole GPUs when it does not divide); without a
      ``pods`` column a job asking more than ``max_gpus_per_pod`` GPUs is split into
      ``ceil(gpus / max_gpus_per_pod)`` pods. Per pod, 0 < g < 1 is a GPU fraction. ``cpu`` (column)
      follows the same total/per-pod rule; unmapped, every pod asks ``cpu`` cores and ``memory``.
    * **jobs**: a PodGroup (``priority_class``; minMember = pods: multi-pod jobs are gangs) and its pods;
      names are the ``name`` column with characters other than letters, digits, '.' and '-' replaced by
      '-' (``job-<line>`` when empty; a repeated name gets ``-<line>`` appended). Queue names likewise.
    * ``limit``: the first ``limit`` jobs by submit time; ``gpu_jobs_only``: leave out jobs without GPUs.
    * **bad rows** raise :class:`TraceError` (file, line, column, what is wrong), or with
      ``errors="skip"`` are left out and, if given, appended to ``problems``.
    * ``limits`` (:class:`TraceLimits`): the jobs and pods taken, counted as the rows are read (before a job's
      objects are made), and how the file is read; over them, :class:`TraceError` names the line (never
      skipped).
    """
    file = str(path)
    fields = _resolve_mapping(mapping, preset)
    unit = TIME_UNITS.get(time_unit)
    if unit is None:
        raise ValueError(f"time_unit: expected one of {', '.join(TIME_UNITS)}, got {time_unit!r}")
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if max_gpus_per_pod < 1:
        raise ValueError(f"max_gpus_per_pod must be >= 1, got {max_gpus_per_pod}")
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors: expected 'raise' or 'skip', got {errors!r}")
    bounds = limits if limits is not None else TraceLimits()
    required = list(dict.fromkeys(fields.values()))

    def read() -> Iterator[tuple[float, int, _CsvJob]]:
        for line, raw in _rows(path, required, bounds.input):
            row = _Row(file, line, raw)
            try:
                job = _csv_job(row, fields, unit, gpus_per_pod, max_gpus_per_pod, default_duration, default_queue)
            except TraceError as exc:
                if errors == "raise":
                    raise
                if problems is not None:
                    problems.append(exc.problem)
                continue
            if gpu_jobs_only and job.gpus_per_pod == 0:
                continue
            yield job.submit, line, job

    def refuse(line: int, jobs: int) -> TraceError:
        return bounds.too_many_jobs(file, line, jobs)

    jobs = _earliest(read(), limit, max(bounds.jobs - bounds.jobs_before, 0), refuse)
    t0 = jobs[0][0] if jobs else 0.0
    names: set[str] = set()
    out: list[Arrival] = []
    made = 0  # pods
    pods_column = fields.get("pods") or fields.get("gpus") or ""
    for submit, line, job in jobs:
        bounds.admit(file, line, pods_column, job.pods, made)
        made += job.pods
        name = _object_name(job.name) or f"job-{line}"
        if name in names:
            name = f"{name}-{line}"
        names.add(name)
        queue = _object_name(job.queue) or default_queue
        per_pod_cpu: float | str = cpu if job.cpu_per_pod is None else job.cpu_per_pod
        objects = job_objects(name, namespace, queue, job.pods, job.gpus_per_pod, per_pod_cpu, memory,
                              priority_class, job.pods)
        duration = job.duration * time_scale if math.isfinite(job.duration) else job.duration
        out.append(Arrival((submit - t0) * time_scale, f"{namespace}/{name}", queue, objects, duration,
                           job.gpus_per_pod * job.pods, f"{file}:{line}"))
    return out


@dataclass(frozen=True, slots=True)
class _CsvJob:
    name: str
    queue: str
    submit: float
    duration: float
    pods: int
    gpus_per_pod: float
    cpu_per_pod: float | None


def _resolve_mapping(mapping: Mapping[str, str] | str | None, preset: str | None) -> dict[str, str]:
    base: dict[str, str] = {}
    if preset is not None:
        if preset.lower() not in PRESETS:
            raise ValueError(f"preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
        base = dict(PRESETS[preset.lower()])
    if isinstance(mapping, str):
        if mapping.lower() not in PRESETS:
            raise ValueError(f"mapping: expected a column mapping or one of {', '.join(PRESETS)}, got {mapping!r}")
        base.update(PRESETS[mapping.lower()])
    elif mapping is not None:
        for key, value in mapping.items():
            if key not in CSV_FIELDS:
                raise ValueError(f"mapping: unknown field {key!r} (known: {', '.join(CSV_FIELDS)})")
            if not isinstance(value, str) or not value:
                raise ValueError(f"mapping.{key}: expected a column name, got {value!r}")
            base[key] = value
    if not base:
        raise ValueError("csv_arrivals needs a column mapping or a preset (philly, helios, acme)")
    if "submit" not in base:
        raise ValueError("mapping: the submit field is required")
    if ("start" in base) != ("end" in base):
        raise ValueError("mapping: start and end go together")
    return base


def _csv_job(row: _Row, fields: Mapping[str, str], unit: float, per_pod: bool, max_per_pod: int,
             default_duration: float | None, default_queue: str) -> _CsvJob:
    submit = _time(row, fields["submit"], unit)
    if submit is None:
        raise row.error(fields["submit"], "no submit time")
    duration: float | None = None
    if "duration" in fields and row.text(fields["duration"]) != "":
        duration = row.number(fields["duration"], what="a duration") * unit
    if duration is None and "start" in fields:
        start, end = _time(row, fields["start"], unit), _time(row, fields["end"], unit)
        if start is not None and end is not None:
            if end < start:
                raise row.error(fields["end"], f"ends before it starts ({row.text(fields['start'])!r})")
            duration = end - start
    if duration is None:
        if default_duration is None:
            column = fields.get("duration") or fields.get("end") or ""
            raise row.error(column, "no duration (empty, and no start and end to derive it from)")
        duration = default_duration
    gpus = 0.0 if "gpus" not in fields or row.text(fields["gpus"]) == "" else row.number(fields["gpus"],
                                                                                          what="a number of GPUs")
    if "pods" in fields:
        pods = row.integer(fields["pods"], minimum=1)
    elif per_pod or gpus <= max_per_pod:
        pods = 1
    else:
        pods = math.ceil(gpus / max_per_pod)
    if per_pod:
        each = gpus
    else:
        each = gpus / pods
        if each > 1 and each != int(each):
            each = float(math.ceil(each))
    if each > 1 and each != int(each):
        raise row.error(fields["gpus"], f"{gpus:g} GPUs per pod: expected a whole number or a fraction below 1")
    cpu: float | None = None
    if "cpu" in fields and row.text(fields["cpu"]) != "":
        total = row.number(fields["cpu"], what="a number of CPU cores")
        cpu = total if per_pod else total / pods
    name = row.text(fields.get("name"))
    queue = row.text(fields.get("queue")) or default_queue
    return _CsvJob(name, queue, submit, duration, pods, each, cpu)


__all__ = [
    "ACME", "CSV_FIELDS", "HELIOS", "MAX_JOBS", "OPENB_GPU_MEMORY_MIB", "OPENB_QOS_PRIORITY", "PHILLY", "PRESETS",
    "OpenBPod", "TraceError", "TraceLimits", "TraceProblem", "csv_arrivals", "job_objects", "openb_arrivals",
    "openb_nodes", "queue_objects", "read_openb_pods",
]
