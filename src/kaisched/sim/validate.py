"""Checks of a loaded scenario before anything is simulated: jobs that name a queue the cluster does not have,
and jobs that could never run on the cluster however empty it was.

* **Queues**: a job's queue must be a leaf Queue of the cluster (``default-queue`` is always there: the scheduler
  adds it, as KAI's Helm chart does). The ``generate`` streams' queues are checked as the scenario is read; these
  checks cover the explicit arrivals, manifests (their ``kai.scheduler/queue`` label) and traces.
* **Impossible jobs**: a pod whose requests (CPU, memory, whole GPUs, a GPU fraction, DRA GPUs) no single node
  of the cluster has, and a gang whose ``minMember`` pods do not fit in the whole empty cluster (counted per
  node: how many pods of that shape each node holds). Node selectors, affinities and taints are not looked at:
  a job these checks pass may still never start, but a job they refuse never could.

* **The cluster's objects** (:func:`cluster_problems`): their input errors, as ``kaisched schedule`` reports them
  (``kaisched simulate`` lists them before any run; :func:`kaisched.simulate` raises ``SimulationError``).

:func:`check_scenario` returns the problems (field path, what is wrong, the value), all of them, in the order of
the scenario's arrivals; :func:`~kaisched.sim.scenario.scenario_from_mapping` raises those of the jobs together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kaisched.k8s import constants as C
from kaisched.k8s.parse import parse_objects
from kaisched.k8s.quantity import QuantityError, parse_quantity
from kaisched.model.dra import is_gpu_driver
from kaisched.sim.model import Arrival, Obj, Scenario

FloatArray = npt.NDArray[np.float64]
MAX_EXAMPLES = 3  # jobs named per problem (the rest counted)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a scenario: where (a field path), what, and how many jobs it concerns."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class Shape:
    """What one pod asks for: CPU cores, memory bytes, whole GPUs, a GPU fraction (0 when none), DRA GPUs."""

    cpu: float
    memory: float
    gpus: float
    fraction: float
    claim_gpus: int

    def describe(self) -> str:
        parts = []
        if self.gpus:
            parts.append(f"{self.gpus:g} GPU" + ("" if self.gpus == 1 else "s"))
        if self.fraction:
            parts.append(f"a {self.fraction:g} GPU fraction")
        if self.claim_gpus:
            parts.append(f"{self.claim_gpus} DRA GPUs")
        if self.cpu:
            parts.append(f"{self.cpu:g} CPU core" + ("" if self.cpu == 1 else "s"))
        if self.memory:
            parts.append(f"{format_bytes(self.memory)} memory")
        return ", ".join(parts) or "nothing"


def format_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1 (``512Gi``, ``1.5Ti``)."""
    for unit, size in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
        if n >= size:
            return f"{n / size:.4g}{unit}"
    return f"{n:g}"


@dataclass(frozen=True, slots=True)
class Nodes:
    """The cluster's schedulable nodes as arrays (one entry per node)."""

    names: tuple[str, ...]
    cpu: FloatArray  # cores
    memory: FloatArray  # bytes
    gpus: FloatArray  # device-plugin GPUs
    dra: FloatArray  # DRA GPUs (devices of GPU drivers' ResourceSlices naming the node)
    pods: FloatArray

    @classmethod
    def of(cls, objects: Sequence[Obj]) -> Nodes:
        names: list[str] = []
        rows: list[tuple[float, float, float, float]] = []
        for o in objects:
            if o.get("kind") != "Node":
                continue
            meta, spec, status = (o.get(k) for k in ("metadata", "spec", "status"))
            if isinstance(spec, Mapping) and spec.get("unschedulable") is True:
                continue
            alloc = status.get("allocatable") if isinstance(status, Mapping) else None
            alloc = alloc if isinstance(alloc, Mapping) else {}
            names.append(str(meta.get("name") if isinstance(meta, Mapping) else ""))
            rows.append((_amount(alloc.get("cpu"), 0.0), _amount(alloc.get("memory"), 0.0),
                         _amount(alloc.get(C.GPU_RESOURCE), 0.0), _amount(alloc.get("pods"), 110.0)))
        dra = dict.fromkeys(names, 0.0)
        for o in objects:
            spec = o.get("spec")
            if o.get("kind") != C.RESOURCE_SLICE_KIND or not isinstance(spec, Mapping):
                continue
            node, devices = spec.get("nodeName"), spec.get("devices")
            if node in dra and is_gpu_driver(str(spec.get("driver") or "")) and isinstance(devices, list):
                dra[str(node)] += len(devices)
        arr = np.array(rows, dtype=np.float64).reshape(len(rows), 4)
        return cls(tuple(names), arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(),
                   np.array([dra[n] for n in names], dtype=np.float64), arr[:, 3].copy())

    def capacity(self, shape: Shape) -> npt.NDArray[np.int64]:
        """How many pods of ``shape`` each empty node holds."""
        cap = np.floor(self.pods)
        for ask, have in ((shape.cpu, self.cpu), (shape.memory, self.memory), (shape.gpus, self.gpus),
                          (float(shape.claim_gpus), self.dra)):
            if ask > 0:
                cap = np.minimum(cap, np.floor(have / ask + 1e-9))
        if shape.fraction > 0:
            cap = np.minimum(cap, self.gpus * math.floor(1.0 / shape.fraction + 1e-9))
        return np.maximum(cap, 0).astype(np.int64)

    def largest(self) -> str:
        """The most of each resource one node has."""
        if not self.names:
            return "the cluster has no nodes"
        parts = [f"{float(self.gpus.max()):g} GPUs"]
        if self.dra.max() > 0:
            parts.append(f"{float(self.dra.max()):g} DRA GPUs")
        parts += [f"{float(self.cpu.max()):g} CPU cores", f"{format_bytes(float(self.memory.max()))} memory"]
        return "the largest node has " + ", ".join(parts)


def _amount(value: object, default: float) -> float:
    if value is None or isinstance(value, bool):
        return default
    try:
        return parse_quantity(value)  # type: ignore[arg-type]
    except (QuantityError, ValueError, TypeError):
        return default  # (a malformed node is reported by the cluster's own checks)


def _requests(pod: Obj) -> tuple[float, float, float]:
    """CPU cores, memory bytes and whole GPUs the pod's containers ask for (requests, else limits)."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    cpu = memory = gpus = 0.0
    for c in containers if isinstance(containers, list) else []:
        resources = c.get("resources") if isinstance(c, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        raw_requests, raw_limits = resources.get("requests"), resources.get("limits")
        requests: Mapping[str, object] = raw_requests if isinstance(raw_requests, Mapping) else {}
        limits: Mapping[str, object] = raw_limits if isinstance(raw_limits, Mapping) else {}
        cpu += _amount(requests.get("cpu", limits.get("cpu")), 0.0)
        memory += _amount(requests.get("memory", limits.get("memory")), 0.0)
        gpus += _amount(requests.get(C.GPU_RESOURCE, limits.get(C.GPU_RESOURCE)), 0.0)
    return cpu, memory, gpus


def _template_gpus(objects: Sequence[Obj]) -> dict[str, int]:
    """ResourceClaimTemplate name -> the devices its requests ask for (exact counts)."""
    out: dict[str, int] = {}
    for o in objects:
        if o.get("kind") != C.RESOURCE_CLAIM_TEMPLATE_KIND:
            continue
        meta, spec = o.get("metadata"), o.get("spec")
        inner = spec.get("spec") if isinstance(spec, Mapping) else None
        devices = inner.get("devices") if isinstance(inner, Mapping) else None
        requests = devices.get("requests") if isinstance(devices, Mapping) else None
        count = 0
        for r in requests if isinstance(requests, list) else []:
            exactly = r.get("exactly") if isinstance(r, Mapping) else None
            n = exactly.get("count", 1) if isinstance(exactly, Mapping) else 0
            count += n if isinstance(n, int) and not isinstance(n, bool) else 0
        if isinstance(meta, Mapping):
            out[str(meta.get("name"))] = count
    return out


def pod_shape(pod: Obj, templates: Mapping[str, int]) -> Shape:
    cpu, memory, gpus = _requests(pod)
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    fraction = 0.0
    if isinstance(annotations, Mapping):
        if annotations.get(C.GPU_FRACTION_ANNOTATION) is not None:
            fraction = _amount(annotations.get(C.GPU_FRACTION_ANNOTATION), 0.0)
        elif annotations.get(C.GPU_MEMORY_ANNOTATION) is not None:
            fraction = 1.0  # some memory of one GPU: needs a node with a GPU
    spec = pod.get("spec")
    claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    claim_gpus = 0
    for c in claims if isinstance(claims, list) else []:
        if isinstance(c, Mapping):
            claim_gpus += templates.get(str(c.get("resourceClaimTemplateName")), 0)
    return Shape(cpu, memory, gpus, fraction if 0 < fraction <= 1 else 0.0, claim_gpus)


def _group_of(pod: Obj) -> str:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    group = annotations.get(C.POD_GROUP_NAME_ANNOTATION) if isinstance(annotations, Mapping) else None
    return str(group) if group else f"pod/{meta.get('name') if isinstance(meta, Mapping) else ''}"


def _min_members(objects: Sequence[Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in objects:
        meta, spec = o.get("metadata"), o.get("spec")
        if o.get("kind") == "PodGroup" and isinstance(meta, Mapping) and isinstance(spec, Mapping):
            n = spec.get("minMember", 1)
            out[str(meta.get("name"))] = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    return out


class _Fit:
    """Cached per-shape answers: does one pod fit on some node, and how many fit in the empty cluster."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.cache: dict[Shape, int] = {}

    def total(self, shape: Shape) -> int:
        got = self.cache.get(shape)
        if got is None:
            got = int(self.nodes.capacity(shape).sum())
            self.cache[shape] = got
        return got


def impossible(arrival: Arrival, fit: _Fit) -> str:
    """Why the job could never run on the empty cluster ("" when it could, as far as requests go)."""
    pods = [o for o in arrival.objects if o.get("kind") == "Pod"]
    if not pods:
        return ""  # a workload manifest: its controller makes the pods at arrival
    templates = _template_gpus(arrival.objects)
    members = _min_members(arrival.objects)
    groups: dict[str, list[Shape]] = {}
    for pod in pods:
        groups.setdefault(_group_of(pod), []).append(pod_shape(pod, templates))
    for group, shapes in groups.items():
        for shape in dict.fromkeys(shapes):
            if fit.total(shape) == 0:
                return f"a pod asks {shape.describe()}; no node has that much ({fit.nodes.largest()})"
        need = min(members.get(group, 1), len(shapes))
        if need > 1 and len(set(shapes)) == 1:
            holds = fit.total(shapes[0])
            if holds < need:
                return (f"a gang of {need} pods of {shapes[0].describe()} each (minMember {need}) does not fit in "
                        f"the whole empty cluster: it holds at most {holds} such pods")
        elif need > 1:
            gpus = sorted(s.gpus + s.fraction + s.claim_gpus for s in shapes)[:need]
            have = float(fit.nodes.gpus.sum() + fit.nodes.dra.sum())
            if sum(gpus) > have + 1e-9:
                return (f"a gang whose {need} smallest pods (minMember {need}) ask {sum(gpus):g} GPUs; the whole "
                        f"cluster has {have:g}")
    return ""


def _queue_field(source: str) -> str:
    """The field that names an arrival's queue, from where the arrival is written."""
    base = source.split(" (", 1)[0]
    if base.endswith(".job"):
        return f"{base}.queue"
    if base.endswith((".manifest", ".file")):
        return f"{base}: metadata.labels[{C.QUEUE_LABEL}]"
    return f"{base}.queue" if base.startswith("workload.trace") else base or "workload"


def _detail(source: str) -> str:
    """The part of a source after the field: a trace's ``file:line``."""
    return source.split(" (", 1)[1].rstrip(")") if " (" in source else ""


def queue_facts(objects: Sequence[Obj]) -> tuple[set[str], set[str]]:
    """(every Queue's name, the names of the queues that are some queue's parent)."""
    names: set[str] = set()
    parents: set[str] = set()
    for o in objects:
        meta, spec = o.get("metadata"), o.get("spec")
        if o.get("kind") == C.QUEUE_KIND and isinstance(meta, Mapping) and meta.get("name"):
            names.add(str(meta["name"]))
            parent = spec.get("parentQueue") if isinstance(spec, Mapping) else None
            if parent:
                parents.add(str(parent))
    return names, parents


def _examples(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_EXAMPLES])
    return shown + (f" and {len(items) - MAX_EXAMPLES:,} more" if len(items) > MAX_EXAMPLES else "")


def queue_problems(scenario: Scenario) -> list[Problem]:
    """Arrivals (explicit jobs, manifests, trace rows) whose queue is not a leaf queue of the cluster; one problem
    per field and queue, naming a few of the jobs."""
    names, parents = queue_facts(scenario.cluster)
    known = ", ".join(sorted(names)) or "none"
    unknown: dict[tuple[str, str], list[str]] = {}
    for a in scenario.arrivals:
        source = a.source or "workload"
        checked = not a.queue or source.startswith("workload.generate") or a.queue == C.DEFAULT_QUEUE_NAME
        if not checked and (a.queue not in names or a.queue in parents):
            unknown.setdefault((_queue_field(source), a.queue), []).append(_detail(source) or a.name)
    problems: list[Problem] = []
    for (field, queue), where in unknown.items():
        if queue in parents:
            what = f"{queue!r} is a parent queue; jobs go to leaf queues"
        else:
            what = (f"unknown queue {queue!r} (the cluster's queues: {known}; define it in cluster.objects, "
                    "cluster.files or cluster.queue_tree)")
        many = len(where) > 1 or field.startswith("workload.trace")
        problems.append(Problem(field, what + (f" ({len(where):,} jobs: {_examples(where)})" if many else "")))
    return problems


def impossible_jobs(scenario: Scenario) -> list[tuple[int, str]]:
    """(index in ``scenario.arrivals``, why) of every job that could never run on the cluster."""
    fit = _Fit(Nodes.of(scenario.cluster))
    out: list[tuple[int, str]] = []
    for i, a in enumerate(scenario.arrivals):
        why = impossible(a, fit)
        if why:
            out.append((i, why))
    return out


def impossible_problems(scenario: Scenario, found: Sequence[tuple[int, str]]) -> list[Problem]:
    """The impossible jobs as problems: one per stream, mix entry, arrival or trace, naming a few of its jobs."""
    refused: dict[str, list[tuple[str, str]]] = {}  # field -> (job, why)
    for i, why in found:
        a = scenario.arrivals[i]
        source = a.source or "workload"
        refused.setdefault(source.split(" (", 1)[0], []).append((_detail(source) or a.name, why))
    problems: list[Problem] = []
    for field, refusals in refused.items():
        job, why = refusals[0]
        more = f" ({len(refusals):,} jobs of it: {_examples([j for j, _ in refusals])})" if len(refusals) > 1 else ""
        problems.append(Problem(field, f"job {job} can never run: {why}{more}"))
    return problems


def cluster_problems(scenario: Scenario) -> list[Problem]:
    """The input errors of the cluster's objects (what :func:`kaisched.simulate` would stop at), each named as
    ``kaisched schedule`` names it: ``cluster: Queue team-a: spec.resources.gpu.quota: must be >= 0 ...``."""
    return [Problem("cluster", str(e)) for e in parse_objects(scenario.cluster).errors]


def check_scenario(scenario: Scenario) -> list[Problem]:
    """Every problem of the scenario (errors of the cluster's objects, unknown queues, impossible jobs); [] when it
    can be simulated."""
    return [*cluster_problems(scenario), *queue_problems(scenario),
            *impossible_problems(scenario, impossible_jobs(scenario))]


def problems_text(problems: Sequence[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


__all__ = ["Nodes", "Problem", "Shape", "check_scenario", "cluster_problems", "format_bytes", "impossible",
           "impossible_jobs", "impossible_problems", "pod_shape", "queue_facts", "queue_problems"]
