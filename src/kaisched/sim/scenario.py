"""Scenario files: a YAML document that names the cluster, the queues, the scheduler configuration and the
workload of a simulation.

```yaml
name: three-teams
period: 30s                  # between scheduling cycles (a Go duration or seconds)
until: 24h                   # optional: stop here (default: when every job has finished)
seed: 7                      # for the generated workload, the queue tree and trace resampling
impossible_jobs: error       # jobs no node / the whole cluster could ever run: error (default) or drop
limits: {nodes: 100000, jobs: 1000000, pods: 1000000, devices: 1000000, queues: 100000}   # (the defaults)
config: {...}                # KAI-format scheduler configuration, or config_file: sched.yaml
cluster:
  files: [cluster/]          # node / queue / priority class / topology manifests (files or folders)
  objects: [...]             # the same, inline
  pools:                     # compact node pools: count x shape
  - {name: a100, count: 32, gpus: 8, gpu_memory_mib: 81920, cpu: 128, memory: 1Ti, labels: {zone: a}}
  - {name: h100, count: 8, cpu: 192, memory: 2Ti,          # DRA GPUs: a ResourceSlice per node
     dra: {driver: gpu.nvidia.com, devices: 8, memory: 80Gi, attributes: {productName: NVIDIA H100}}}
  queue_tree: {departments: 10, teams: 10, gpus: auto, weights: [1, 2, 3], shares: [0.5, 1.5]}  # compact Queues
  node_list: {format: openb, path: openb_node_list_gpu_node.csv, gpu_only: true, limit: 300}  # a node list file
workload:
  arrivals:                  # explicit arrivals
  - {time: 0, duration: 2h, job: {name: llm, queue: team-a, pods: 4, gpus: 8}}
  - {time: 1h, duration: 30m, file: my-pytorchjob.yaml}   # or manifest: {...}
  generate:                  # seeded synthetic jobs, one entry per stream
  - {queue: team-a, jobs: 100, every: 10m, pods: [1, 1, 2, 4], gpus: [1, 0.5, 0.25], duration: [10m, 4h],
     priority_class: train}
  - {name: running, at_start: true, fill: 0.5, queues: leaves, pods: 1, gpus: 2, duration: [24h, 168h]}
  - name: job                # a mix: 70 % of the pods in single-pod jobs, 30 % in gangs of 4-64 pods
    jobs: 2000
    every: 5m
    queues: leaves           # each job's queue drawn from: [a, b, ...], leaves, or {leaves: dept-3}
    duration: [30m, 12h]
    mix_by: pods             # the weights are shares of the pods (default: jobs, shares of the jobs)
    mix:
    - {weight: 70, pods: 1, gpus: [0.25, 0.5, 1, 2, 4, 8]}
    - {weight: 30, pods: {min: 4, max: 64}, gpus: [1, 8]}
  trace: {format: openb, path: ..., queue: team-a}   # or {format: csv, path, preset|mapping, ...}
```

Compact jobs: ``pods`` (default 1), ``gpus`` per pod (a fraction below 1 is ``gpu-fraction``), ``cpu``,
``memory``, ``queue``, ``priority_class`` (default ``train``), ``min_member`` (default all pods),
``namespace`` (default ``default``). Times and durations are Go durations (``90s``, ``1h30m``) or seconds.

Checks (:func:`scenario_from_mapping`): a malformed value raises :class:`ScenarioError` naming its field (unknown
fields, reversed ranges, a scheduler configuration KAI would refuse, sizes over the scenario's ``limits``
(:class:`ScenarioLimits`: the pools' nodes and DRA devices, the queue tree's Queues, the workload's jobs and pods,
counted before they are made: a trace's rows as they are read, a manifest's pods from its replica counts before its
controller makes any), files over the input limits (:class:`~kaisched.k8s.loader.InputLimits`: the scenario, the
files it names, the trace)); then
every unknown queue and every job that could never run
(:mod:`kaisched.sim.validate`) is collected and raised together (``ScenarioError.problems``), unless
``impossible_jobs: drop`` leaves such jobs out (``Scenario.dropped``; the run counts them as dropped). Each
arrival records where it is written (``Arrival.source``: ``workload.generate[1].mix[0]``,
``workload.arrivals[3].job``, a trace's ``file:line``).

A ``queue_tree`` (:func:`queue_tree`) adds ``departments`` top-level Queues ``dept-<d>``, each with ``teams`` leaf
Queues ``dept-<d>-team-<t>``: their GPU quotas split ``gpus`` (``auto``, the default: the GPUs of the cluster's
nodes; or a number) in proportion to shares drawn from ``U(shares)`` (the departments' of the total, the teams' of
their department; by largest remainder, so they sum exactly), over-quota weights drawn from ``weights``, limits -1,
CPU and memory unlimited; drawn with ``seed`` (default the scenario's, so ``--seed`` draws another tree too).

``generate`` streams (:func:`_generated`): ``jobs`` jobs (default 1), or ``fill: 0.5``: as many as ask half the
cluster's GPUs together; arriving from ``start`` with exponential gaps of mean ``every`` (default 10m), or all at
time 0 with ``at_start: true`` (work already running when the simulation starts: its ``duration`` is what is left
of it; no ``every`` nor ``start`` then). Per job: ``queue``, or ``queues`` to draw it from (a list of leaf queues,
``leaves``: every leaf queue of the cluster, ``{leaves: dept-3}`` or ``{leaves: [dept-3, dept-4]}``: the leaves
below those queues; ``{tree: ...}`` is the same); ``pods`` a number, a list to draw from or a range ``{min: 4,
max: 64}`` (uniform integers); ``gpus`` (or ``gpu_claim``), ``priority_class`` a value or a list to draw from;
``cpu``, ``memory`` per pod; ``duration`` a value or ``[min, max]`` (also ``{min, max}``). A ``mix`` is a list of
kinds of job, each with a ``weight`` (default 1) and any of those per-job fields, which override the stream's
for that kind; each job draws its kind by weight, the weights being shares of the jobs, or of the pods with
``mix_by: pods`` (a kind's chance per job is then its weight over its mean pods per job). Same seed, same
arrivals.

DRA (resource.k8s.io/v1): a pool's ``dra`` block (``driver``, required, its name contains ``gpu``; ``devices``
per node; ``device_class``, default the driver's name; ``attributes``: name -> string, integer, true/false or
``{version: 1.2.3}``; ``memory`` per device) gives each node a ResourceSlice (pool = the node, devices
``gpu-<i>`` with ``index`` and ``uuid`` attributes) and the cluster a DeviceClass selecting the driver's devices
(unless ``cluster.objects`` has one of that name). A compact job (or a ``generate`` stream) with ``gpu_claim:
{count: 2, selectors: ['device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"'], device_class: ...}``
(or ``gpu_claim: 2``; also spelt ``gpuClaim``; in ``generate`` the count may be a list to draw from) asks its GPUs
through a ResourceClaimTemplate ``<job>-gpu`` instead of ``nvidia.com/gpu``: every pod gets its own claim,
allocated when it is bound and released when it finishes or is evicted (:mod:`kaisched.cluster.store`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from kaisched.cluster.schedule import resolve_config
from kaisched.cluster.workloads import MAX_PODS, PodLimit, expand_workloads
from kaisched.framework.config import ConfigError
from kaisched.k8s import constants as C
from kaisched.k8s.loader import InputLimitError, InputLimits, load_documents, read_text
from kaisched.k8s.parse import parse_objects
from kaisched.k8s.quantity import QuantityError, parse_duration, parse_quantity
from kaisched.model.dra import is_gpu_class, is_gpu_driver
from kaisched.model.dra_cel import CelError, compile_selector
from kaisched.sim import traces, validate
from kaisched.sim.model import Arrival, Obj, Scenario


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the field. ``problems``: each problem found (the
    message is them, one a line)."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems) or [message]


# ------------------------------------------------------------------------------------------- limits
LIMIT_FIELDS = ("nodes", "jobs", "pods", "devices", "queues")
MAX_QUEUES = 100_000  # the default limit of a queue tree's Queues


@dataclass(frozen=True, slots=True)
class ScenarioLimits:
    """How much a scenario may make, checked before it is made (``limits:`` in the file raises them): nodes of
    the pools, jobs and pods of the workload (explicit, generated and traced), DRA devices of the pools, Queues of
    the queue tree."""

    nodes: int = 100_000
    jobs: int = traces.MAX_JOBS
    pods: int = MAX_PODS
    devices: int = 1_000_000
    queues: int = MAX_QUEUES

    @classmethod
    def of(cls, raw: object, field: str = "limits") -> ScenarioLimits:
        given = _mapping(raw, field)
        _unknown(given, LIMIT_FIELDS, field)
        for key, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScenarioError(f"{field}.{key}: expected a positive integer, got {value!r}")
        return cls(**{str(k): v for k, v in given.items()})


class _Sizes:
    """What the scenario makes, counted against its limits before each thing is made."""

    __slots__ = ("jobs", "limits", "pods")

    def __init__(self, limits: ScenarioLimits) -> None:
        self.limits = limits
        self.jobs = 0
        self.pods = 0

    def refuse(self, field: str, what: str, limit: str) -> ScenarioError:
        return ScenarioError(f"{field}: {what}, more than the scenario's limit of {getattr(self.limits, limit):,} "
                             f"(limits.{limit}: raise it to simulate more)")

    def expect(self, field: str, jobs: int, pods_each: int, max_pods_each: int) -> None:
        """Before a stream of ``jobs`` jobs of ``pods_each`` to ``max_pods_each`` pods is generated."""
        if max_pods_each > self.limits.pods:
            raise self.refuse(f"{field}.pods", f"jobs of up to {max_pods_each:,} pods", "pods")
        if self.jobs + jobs > self.limits.jobs:
            before = f" (and {self.jobs:,} before)" if self.jobs else ""
            raise self.refuse(f"{field}.jobs", f"{jobs:,} jobs{before}", "jobs")
        if self.pods + jobs * pods_each > self.limits.pods:
            before = f" (and {self.pods:,} before)" if self.pods else ""
            each = f"{pods_each:,} pod" + ("s" if pods_each != 1 else "")
            raise self.refuse(f"{field}.jobs", f"{jobs:,} jobs of at least {each}: {jobs * pods_each:,} pods{before}",
                              "pods")

    def add(self, field: str, pods: int) -> None:
        """Before one job of ``pods`` pods is made."""
        if self.jobs + 1 > self.limits.jobs:
            raise self.refuse(field, f"more than {self.jobs:,} jobs", "jobs")
        if self.pods + pods > self.limits.pods:
            raise self.refuse(field, f"{self.pods + pods:,} pods with this job's {pods:,}", "pods")
        self.jobs += 1
        self.pods += pods


def _pool_sizes(pools: Sequence[Any], limits: ScenarioLimits) -> None:
    """The pools' nodes and DRA devices against the limits, before any node is made."""
    nodes = devices = 0
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping):
            continue  # (reported when the pool is read)
        count, dra = pool.get("count", 1), pool.get("dra")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            continue
        nodes += count
        if nodes > limits.nodes:
            raise ScenarioError(f"cluster.pools[{i}].count: {nodes:,} nodes in the pools up to this one, more than "
                                f"the scenario's limit of {limits.nodes:,} (limits.nodes: raise it to simulate more)")
        per_node = dra.get("devices") if isinstance(dra, Mapping) else None
        if isinstance(per_node, int) and not isinstance(per_node, bool) and per_node > 0:
            devices += count * per_node
            if devices > limits.devices:
                raise ScenarioError(f"cluster.pools[{i}].dra.devices: {devices:,} DRA devices in the pools up to "
                                    f"this one, more than the scenario's limit of {limits.devices:,} "
                                    "(limits.devices: raise it to simulate more)")


def _seconds(value: object, field: str) -> float:
    if isinstance(value, bool):
        raise ScenarioError(f"{field}: expected a duration like '30s' or '1h', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ScenarioError(f"{field}: must be >= 0, got {value}")
        return float(value)
    if isinstance(value, str):
        if value in ("inf", "never"):
            return float("inf")
        try:
            seconds = parse_duration(value).total_seconds()
        except ValueError as exc:
            raise ScenarioError(f"{field}: {exc}") from None
        if seconds < 0:
            raise ScenarioError(f"{field}: must be >= 0, got {value!r}")
        return seconds
    raise ScenarioError(f"{field}: expected a duration like '30s' or '1h', got {value!r}")


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{field}: expected a mapping, got {type(value).__name__}")
    return value


def _list(value: object, field: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(f"{field}: expected a list, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------- objects
POOL_FIELDS = ("name", "count", "gpus", "gpu_memory_mib", "cpu", "memory", "pods", "labels", "dra")


def pool_nodes(pool: Mapping[str, Any], field: str) -> list[Obj]:
    """``count`` nodes of one shape: ``<name>-<i>`` (with a ``dra`` block, each node's ResourceSlice follows
    its Node: :func:`dra_slice`)."""
    _unknown(pool, POOL_FIELDS, field)
    name = str(pool.get("name") or "node")
    count = pool.get("count", 1)
    if not isinstance(count, int) or count < 0:
        raise ScenarioError(f"{field}.count: expected a non-negative integer, got {count!r}")
    gpus = pool.get("gpus", 0)
    if not isinstance(gpus, int) or gpus < 0:
        raise ScenarioError(f"{field}.gpus: expected a non-negative integer, got {gpus!r}")
    dra = None if pool.get("dra") is None else dra_pool(pool["dra"], f"{field}.dra")
    if dra is not None and gpus:
        raise ScenarioError(f"{field}.dra: a pool has device-plugin GPUs (gpus: {gpus}) or DRA GPUs (dra), not "
                            "both: a node with DRA GPUs gives GPUs through ResourceClaims only")
    labels = {str(k): str(v) for k, v in _mapping(pool.get("labels"), f"{field}.labels").items()}
    if pool.get("gpu_memory_mib"):
        labels["nvidia.com/gpu.memory"] = str(pool["gpu_memory_mib"])
    allocatable = {"cpu": str(pool.get("cpu", 64)), "memory": str(pool.get("memory", "512Gi")),
                   "nvidia.com/gpu": str(gpus), "pods": str(pool.get("pods", 110))}
    width = max(len(str(count - 1)), 3)
    out: list[Obj] = []
    for i in range(count):
        node = f"{name}-{i:0{width}d}"
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, **labels}},
                    "status": {"allocatable": dict(allocatable), "conditions": [{"type": "Ready", "status": "True"}]}})
        if dra is not None:
            out.append(dra_slice(dra, node))
    return out


# ------------------------------------------------------------------------------------------------ DRA
DRA_FIELDS = ("driver", "devices", "device_class", "attributes", "memory")
GPU_CLAIM_FIELDS = ("count", "selectors", "device_class")
DEFAULT_GPU_CLASS = "gpu.nvidia.com"  # the DeviceClass (and driver) of NVIDIA's DRA driver
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ATTRIBUTE_NAME = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class DraPool:
    """A pool's ``dra`` block: each node publishes ``devices`` GPUs of ``driver`` in one ResourceSlice."""

    driver: str
    devices: int
    device_class: str
    attributes: dict[str, Obj]  # name -> a DeviceAttribute ({string: ...}, {int: ...}, {bool: ...}, {version: ...})
    memory: str | None  # each device's memory capacity (a quantity)


def _unknown(raw: Mapping[str, Any], known: Sequence[str], field: str) -> None:
    extra = sorted(str(k) for k in raw if k not in known)
    if extra:
        raise ScenarioError(f"{field}.{extra[0]}: unknown field (expected {', '.join(known)})")


def _gpu_name(value: object, field: str, what: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ScenarioError(f"{field}: expected a {what} name (a DNS subdomain like gpu.nvidia.com), got {value!r}")
    if not (is_gpu_driver(value) if what == "driver" else is_gpu_class(value)):
        raise ScenarioError(f"{field}: a GPU {what}'s name contains 'gpu' (kaisched counts the devices of such "
                            f"{what}s as GPUs), got {value!r}")
    return value


def _attribute(value: object, field: str) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, Mapping) and len(value) == 1 and "version" in value and isinstance(value["version"], str):
        return {"version": value["version"]}
    raise ScenarioError(f"{field}: expected a string, an integer, true/false or {{version: 1.2.3}}, got {value!r}")


def dra_pool(raw: object, field: str) -> DraPool:
    """A pool's ``dra`` block, validated: ``{driver, devices, device_class, attributes, memory}``."""
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{field}: expected a mapping like {{driver: gpu.nvidia.com, devices: 8}}, "
                            f"got {type(raw).__name__}")
    _unknown(raw, DRA_FIELDS, field)
    if raw.get("driver") is None:
        raise ScenarioError(f"{field}.driver: required (the DRA driver that publishes the GPUs, e.g. gpu.nvidia.com)")
    driver = _gpu_name(raw["driver"], f"{field}.driver", "driver")
    devices = raw.get("devices")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ScenarioError(f"{field}.devices: expected a positive integer (GPUs per node), got {devices!r}")
    device_class = _gpu_name(raw.get("device_class", driver), f"{field}.device_class", "device class")
    attributes: dict[str, Obj] = {}
    for key, value in _mapping(raw.get("attributes"), f"{field}.attributes").items():
        if not isinstance(key, str) or not _ATTRIBUTE_NAME.fullmatch(key):
            raise ScenarioError(f"{field}.attributes.{key}: expected an attribute name like productName or "
                                f"{driver}/productName")
        attributes[key] = _attribute(value, f"{field}.attributes.{key}")
    memory = raw.get("memory")
    if memory is not None:
        try:
            amount = parse_quantity(memory)
        except (QuantityError, ValueError, TypeError):
            raise ScenarioError(f"{field}.memory: expected a quantity like 80Gi, got {memory!r}") from None
        if amount <= 0:
            raise ScenarioError(f"{field}.memory: must be > 0, got {memory!r}")
        memory = str(memory)
    return DraPool(driver, devices, device_class, attributes, memory)


def dra_slice(dra: DraPool, node: str) -> Obj:
    """The ResourceSlice of one node: its pool (named after the node), devices ``gpu-<i>`` with an ``index``
    and a ``uuid`` attribute, the pool's attributes and memory."""
    devices: list[Obj] = []
    for i in range(dra.devices):
        device: Obj = {"name": f"gpu-{i}",
                       "attributes": {"index": {"int": i}, "uuid": {"string": f"GPU-{node}-{i}"}, **dra.attributes}}
        if dra.memory is not None:
            device["capacity"] = {"memory": {"value": dra.memory}}
        devices.append(device)
    return {"apiVersion": C.RESOURCE_V1_API_VERSION, "kind": C.RESOURCE_SLICE_KIND,
            "metadata": {"name": f"{node}-{dra.driver}"},
            "spec": {"driver": dra.driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def device_class(name: str, driver: str) -> Obj:
    """A DeviceClass selecting the devices of one driver."""
    return {"apiVersion": C.RESOURCE_V1_API_VERSION, "kind": C.DEVICE_CLASS_KIND, "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


@dataclass(frozen=True, slots=True)
class ClaimClasses:
    """The GPU DeviceClasses of the cluster, and the one a ``gpu_claim`` asks for by default."""

    names: frozenset[str] = frozenset()
    default: str = DEFAULT_GPU_CLASS


def claim_classes(objects: Sequence[Obj]) -> ClaimClasses:
    """The cluster's GPU DeviceClasses; the default: the only one, else gpu.nvidia.com."""
    names = frozenset(str(o.get("metadata", {}).get("name") or "") for o in objects
                      if o.get("kind") == C.DEVICE_CLASS_KIND and isinstance(o.get("metadata"), Mapping))
    gpu = sorted(n for n in names if is_gpu_class(n))
    return ClaimClasses(names, gpu[0] if len(gpu) == 1 else DEFAULT_GPU_CLASS)


def gpu_claim(raw: object, field: str, classes: ClaimClasses) -> tuple[int, tuple[str, ...], str]:
    """A compact job's ``gpu_claim`` (``{count, selectors, device_class}``, or the count alone), validated:
    (GPUs per pod, CEL selectors, device class)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = {"count": raw}
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{field}: expected a mapping like {{count: 2, selectors: [...]}} or a GPU count, "
                            f"got {raw!r}")
    _unknown(raw, GPU_CLAIM_FIELDS, field)
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ScenarioError(f"{field}.count: expected a positive integer (GPUs per pod), got {count!r}")
    selectors: list[str] = []
    for i, expr in enumerate(_list(raw.get("selectors"), f"{field}.selectors")):
        if not isinstance(expr, str) or not expr.strip():
            raise ScenarioError(f"{field}.selectors[{i}]: expected a CEL expression such as "
                                f"'device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100\"', got {expr!r}")
        problem = _cel_problem(expr)
        if problem:
            raise ScenarioError(f"{field}.selectors[{i}]: {problem}")
        selectors.append(expr)
    name = raw.get("device_class", classes.default)
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"{field}.device_class: expected a DeviceClass name, got {name!r}")
    if name not in classes.names:
        known = ", ".join(sorted(classes.names)) or "none"
        raise ScenarioError(f"{field}.device_class: the cluster has no DeviceClass {name!r} (it has: {known}); give "
                            "a pool a dra block or add the DeviceClass to cluster.objects")
    if not is_gpu_class(name):
        raise ScenarioError(f"{field}.device_class: a GPU DeviceClass's name contains 'gpu' (kaisched counts "
                            f"the devices of such classes as GPUs), got {name!r}")
    return count, tuple(selectors), name


def _cel_problem(expr: str) -> str:
    """Why a CEL selector cannot be used ("" when it can)."""
    try:
        compile_selector(expr)
    except CelError as exc:
        return f"invalid CEL selector: {exc}"
    return ""


def claim_template(name: str, namespace: str, count: int, selectors: Sequence[str], device_class_name: str) -> Obj:
    """The ResourceClaimTemplate of a compact job asking GPUs by claim: one request ``gpu`` of ``count``
    devices of the class that match every selector."""
    exactly: Obj = {"deviceClassName": device_class_name, "allocationMode": C.ALLOCATION_MODE_EXACT_COUNT,
                    "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"apiVersion": C.RESOURCE_V1_API_VERSION, "kind": C.RESOURCE_CLAIM_TEMPLATE_KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": traces.CLAIM_NAME, "exactly": exactly}]}}}}


def job_objects(spec: Mapping[str, Any], field: str, *, name: str | None = None,
                classes: ClaimClasses | None = None) -> tuple[list[Obj], str, float]:
    """The PodGroup and pods of a compact job spec (and the ResourceClaimTemplate of a job asking GPUs by claim:
    ``gpu_claim``); returns (objects, queue, GPUs asked)."""
    job_name = str(name or spec.get("name") or "")
    if not job_name:
        raise ScenarioError(f"{field}.name: a job needs a name")
    namespace = str(spec.get("namespace") or "default")
    queue = str(spec.get("queue") or "default-queue")
    pods = spec.get("pods", 1)
    if isinstance(pods, bool) or not isinstance(pods, int) or pods < 1:
        raise ScenarioError(f"{field}.pods: expected a positive integer, got {pods!r}")
    gpus = spec.get("gpus", 0)
    if not _is_number(gpus) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise ScenarioError(f"{field}.gpus: expected a whole number of GPUs or a fraction below 1, got {gpus!r}")
    _quantity_value(spec.get("cpu", 1), f"{field}.cpu")
    _quantity_value(spec.get("memory", "4Gi"), f"{field}.memory")
    min_member = spec.get("min_member", pods)
    if not isinstance(min_member, int) or not 1 <= min_member <= pods:
        raise ScenarioError(f"{field}.min_member: expected 1..{pods}, got {min_member!r}")
    claim_field, raw_claim = _claim_entry(spec, field)
    template: Obj | None = None
    if raw_claim is not None:
        if gpus:
            spelt = claim_field.rpartition(".")[2]
            raise ScenarioError(f"{claim_field}: a job asks GPUs by gpus (device plugin) or by {spelt} (DRA), not both")
        count, selectors, class_name = gpu_claim(raw_claim, claim_field, classes or ClaimClasses())
        template = claim_template(f"{job_name}-gpu", namespace, count, selectors, class_name)
        gpus = count
    objects = traces.job_objects(job_name, namespace, queue, pods, 0.0 if template else float(gpus),
                                 spec.get("cpu", 1), spec.get("memory", "4Gi"),
                                 str(spec.get("priority_class") or "train"), min_member,
                                 claim_template=template["metadata"]["name"] if template else None)
    return [*objects, *([template] if template else [])], queue, float(gpus) * pods


def _claim_entry(spec: Mapping[str, Any], field: str) -> tuple[str, Any]:
    """(field, value) of a job's ``gpu_claim`` (also spelt ``gpuClaim``); value None when absent."""
    if spec.get("gpu_claim") is not None and spec.get("gpuClaim") is not None:
        raise ScenarioError(f"{field}.gpuClaim: give gpu_claim or gpuClaim (the same field), not both")
    if spec.get("gpuClaim") is not None:
        return f"{field}.gpuClaim", spec["gpuClaim"]
    return f"{field}.gpu_claim", spec.get("gpu_claim")


# ------------------------------------------------------------------------------------------- workload
JOB_SPEC_FIELDS = ("name", "namespace", "queue", "pods", "gpus", "gpu_claim", "gpuClaim", "cpu", "memory",
                   "priority_class", "min_member")


def _arrivals(entries: Sequence[Any], base: Path, classes: ClaimClasses, sizes: _Sizes,
              limits: InputLimits) -> list[Arrival]:
    out: list[Arrival] = []
    for i, raw in enumerate(entries):
        field = f"workload.arrivals[{i}]"
        e = _mapping(raw, field)
        _unknown(e, ARRIVAL_FIELDS, field)
        t = _seconds(e.get("time", 0), f"{field}.time")
        duration = _seconds(e.get("duration", "inf"), f"{field}.duration")
        if "job" in e:
            source = f"{field}.job"
            spec = _mapping(e["job"], source)
            _unknown(spec, JOB_SPEC_FIELDS, source)
            pods = spec.get("pods", 1)
            if isinstance(pods, int) and not isinstance(pods, bool) and pods > 0:
                sizes.add(f"{source}.pods", pods)
            objs, queue, gpus = job_objects(spec, source, classes=classes)
            name = f"{objs[0]['metadata']['namespace']}/{objs[0]['metadata']['name']}"
        elif "manifest" in e or "file" in e:
            source = f"{field}.file" if "file" in e else f"{field}.manifest"
            if "file" in e:
                docs, errors = _documents([base / str(e["file"])], f"{field}.file", limits)
                if errors:
                    raise ScenarioError(f"{field}.file: " + "; ".join(str(x) for x in errors))
            else:
                docs = [dict(_mapping(e["manifest"], f"{field}.manifest"))]
            if not docs:
                raise ScenarioError(f"{field}: no objects")
            sizes.add(field, sum(1 for d in docs if d.get("kind") == "Pod") + _workload_pods(docs, source, sizes))
            meta = _mapping(docs[0].get("metadata"), f"{field}.metadata")
            name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            labels = _mapping(meta.get("labels"), f"{field}.metadata.labels")
            objs, queue, gpus = [dict(d) for d in docs], str(labels.get("kai.scheduler/queue", "")), 0.0
        else:
            raise ScenarioError(f"{field}: give a job, a manifest or a file")
        out.append(Arrival(t, name, queue, tuple(objs), duration, gpus, source))
    return out


def _workload_pods(docs: Sequence[Obj], field: str, sizes: _Sizes) -> int:
    """The pods the workload manifests of one arrival make (their controllers run as at the arrival, within
    what is left of ``limits.pods``: a replica count over it is refused before anything is made)."""
    if all(d.get("kind") == "Pod" for d in docs):
        return 0
    limit = PodLimit(sizes.limits.pods, "per simulation", "limits.pods", made=sizes.pods)
    expanded = expand_workloads(parse_objects(docs), limit=limit)
    if limit.refused:
        problems = [f"{field}: {e}" for e in limit.refused]
        raise ScenarioError("\n".join(problems), problems)
    return len(expanded.pods) - sum(1 for d in docs if d.get("kind") == "Pod")


# ----------------------------------------------------------------------------------------- queue tree
QUEUE_TREE_FIELDS = ("departments", "teams", "gpus", "weights", "shares", "seed")


def _positive_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScenarioError(f"{field}: expected a positive integer, got {value!r}")
    return value


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bounds(value: object, field: str, example: str) -> tuple[Any, Any]:
    """A ``[min, max]`` pair or a ``{min: .., max: ..}`` mapping (checked for min <= max by the caller)."""
    if isinstance(value, list) and len(value) == 2:
        return value[0], value[1]
    if isinstance(value, Mapping):
        _unknown(value, ("min", "max"), field)
        if "min" not in value or "max" not in value:
            raise ScenarioError(f"{field}: a range needs both min and max, like {example}")
        return value["min"], value["max"]
    raise ScenarioError(f"{field}: expected a range like {example}, got {value!r}")


def cluster_gpus(objects: Sequence[Obj]) -> int:
    """The GPUs of the cluster's nodes: every Node's allocatable ``nvidia.com/gpu`` and the devices of the
    ResourceSlices of GPU drivers (DRA)."""
    total = 0.0
    for o in objects:
        kind = o.get("kind")
        if kind == "Node":
            status = o.get("status")
            allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
            if isinstance(allocatable, Mapping):
                with contextlib.suppress(QuantityError, ValueError, TypeError):  # (the simulator reports it)
                    total += parse_quantity(allocatable.get(C.GPU_RESOURCE, 0))
        elif kind == C.RESOURCE_SLICE_KIND:
            spec = o.get("spec")
            if isinstance(spec, Mapping) and is_gpu_driver(str(spec.get("driver") or "")):
                devices = spec.get("devices")
                total += len(devices) if isinstance(devices, list) else 0
    return int(total)


def split_quota(total: int, shares: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``shares`` into integers that sum to it (largest remainder; ties to
    the first)."""
    whole = sum(shares)
    exact = [total * s / whole for s in shares]
    parts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def queue_manifest(name: str, parent: str | None, gpu_quota: float, weight: float = 1) -> Obj:
    """A Queue (scheduling.run.ai/v2) with a GPU quota and over-quota weight, no limits, CPU and memory
    unlimited."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: Obj = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": weight},
                               "cpu": dict(unlimited), "memory": dict(unlimited)}}
    if parent is not None:
        spec["parentQueue"] = parent
    return {"apiVersion": C.QUEUE_API_VERSION, "kind": C.QUEUE_KIND, "metadata": {"name": name}, "spec": spec}


def queue_tree(raw: object, objects: Sequence[Obj], seed: int, field: str = "cluster.queue_tree", *,
               max_queues: int = MAX_QUEUES) -> list[Obj]:
    """The Queues of a compact ``queue_tree``: ``departments`` top-level queues ``dept-<d>``, each with ``teams``
    leaf queues ``dept-<d>-team-<t>``; the GPU quotas split ``gpus`` (``auto``: the cluster's, from
    :func:`cluster_gpus`) by shares drawn from ``U(shares)`` (the departments' of the cluster, the teams' of
    their department; largest remainder), over-quota weights drawn from ``weights``; seeded by ``seed`` (default
    the scenario's)."""
    tree = _mapping(raw, field)
    _unknown(tree, QUEUE_TREE_FIELDS, field)
    departments = _positive_int(tree.get("departments", 10), f"{field}.departments")
    teams = _positive_int(tree.get("teams", 10), f"{field}.teams")
    if departments * (teams + 1) > max_queues:
        raise ScenarioError(f"{field}: {departments:,} departments of {teams:,} teams: {departments * (teams + 1):,} "
                            f"queues, more than the scenario's limit of {max_queues:,} (limits.queues: raise it to "
                            "simulate more)")
    gpus = tree.get("gpus", "auto")
    if gpus == "auto":
        gpus = cluster_gpus(objects)
        if gpus < 1:
            raise ScenarioError(f"{field}.gpus: auto found no GPUs in the cluster (give the pools gpus, or a "
                                "number of GPUs to split)")
    elif isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ScenarioError(f"{field}.gpus: expected auto (the cluster's GPUs) or a non-negative integer, "
                            f"got {gpus!r}")
    weights = tree.get("weights", [1, 2, 3])
    weights = weights if isinstance(weights, list) else [weights]
    if not weights or not all(_is_number(w) and w >= 0 for w in weights):
        raise ScenarioError(f"{field}.weights: expected a non-empty list of over-quota weights >= 0 to draw "
                            f"from, like [1, 2, 3], got {tree.get('weights')!r}")
    shares = tree.get("shares", [0.5, 1.5])
    low, high = (shares, shares) if _is_number(shares) else _bounds(shares, f"{field}.shares", "[0.5, 1.5]")
    if not (_is_number(low) and _is_number(high) and 0 < low <= high):
        raise ScenarioError(f"{field}.shares: expected [min, max] with 0 < min <= max (shares are drawn "
                            f"uniformly between them), got {shares!r}")
    tree_seed = tree.get("seed", seed)
    if isinstance(tree_seed, bool) or not isinstance(tree_seed, int):
        raise ScenarioError(f"{field}.seed: expected an integer, got {tree_seed!r}")
    rng = random.Random(f"{tree_seed}/queue_tree")  # (not the workload's stream of numbers)
    out: list[Obj] = []
    for d, dept_quota in enumerate(split_quota(gpus, [rng.uniform(low, high) for _ in range(departments)])):
        dept = f"dept-{d}"
        out.append(queue_manifest(dept, None, dept_quota, rng.choice(weights)))
        for t, team_quota in enumerate(split_quota(dept_quota, [rng.uniform(low, high) for _ in range(teams)])):
            out.append(queue_manifest(f"{dept}-team-{t}", dept, team_quota, rng.choice(weights)))
    taken = set(_queue_parents(objects))
    for q in out:
        if q["metadata"]["name"] in taken:
            raise ScenarioError(f"{field}: the tree's queue {q['metadata']['name']!r} is also defined in the "
                                "cluster's objects; rename or drop one of them")
    return out


def _queue_parents(objects: Sequence[Obj]) -> dict[str, str | None]:
    """Queue name -> its parent queue (None at the top), in the order of the objects."""
    out: dict[str, str | None] = {}
    for o in objects:
        meta, spec = o.get("metadata"), o.get("spec")
        if o.get("kind") == C.QUEUE_KIND and isinstance(meta, Mapping) and meta.get("name"):
            parent = spec.get("parentQueue") if isinstance(spec, Mapping) else None
            out[str(meta["name"])] = str(parent) if parent else None
    return out


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What a ``generate`` stream needs to know of the cluster: its queues and its GPUs."""

    parents: dict[str, str | None]  # Queue name -> its parent, in the order of the objects
    gpus: int
    problems: list[str] = dataclass_field(default_factory=list)  # found while reading, reported together

    @classmethod
    def of(cls, objects: Sequence[Obj]) -> ClusterFacts:
        return cls(_queue_parents(objects), cluster_gpus(objects))

    def check_queue(self, name: object, field: str) -> None:
        """Note a problem unless ``name`` is a leaf queue of the cluster (or ``default-queue``, always there)."""
        if name == C.DEFAULT_QUEUE_NAME and name not in self.parents:
            return
        if not isinstance(name, str) or name not in self.parents:
            known = ", ".join(self.parents) or "none"
            self.problems.append(f"{field}: unknown queue {name!r} (the cluster's queues: {known}; define it in "
                                 "cluster.objects, cluster.files or cluster.queue_tree)")
        elif not self.is_leaf(name):
            self.problems.append(f"{field}: {name!r} is a parent queue; jobs go to leaf queues (try "
                                 f"{{leaves: {name}}})")

    def is_leaf(self, name: str) -> bool:
        return name not in set(self.parents.values())

    def leaves(self, under: str | None = None) -> list[str]:
        """The leaf queues (those nobody has as parent), or those below (or equal to) ``under``."""
        inner = set(self.parents.values())
        out = []
        for name in self.parents:
            if name in inner:
                continue
            node: str | None = name
            seen: set[str] = set()
            while node is not None and node != under and node not in seen:
                seen.add(node)
                node = self.parents.get(node)
            if under is None or node == under:
                out.append(name)
        return out


# ------------------------------------------------------------------------------------------- generate
#: per-job fields: a stream's, and a mix entry's (which override the stream's)
JOB_FIELDS = ("queue", "queues", "pods", "gpus", "gpu_claim", "gpuClaim", "cpu", "memory", "priority_class", "duration")
GENERATE_FIELDS = ("name", "namespace", "jobs", "fill", "every", "start", "at_start", "mix", "mix_by", *JOB_FIELDS)
MIX_FIELDS = ("weight", *JOB_FIELDS)
_GPU_FIELDS = ("gpus", "gpu_claim", "gpuClaim")
MAX_FILL_JOBS = 1_000_000


@dataclass(frozen=True, slots=True)
class _Pick:
    """A size drawn per job: one of ``choices`` (a list, uniformly), an integer in ``[low, high]`` (a range),
    or ``value`` (fixed: no draw)."""

    value: Any = None
    choices: tuple[Any, ...] = ()
    low: int = 0
    high: int = -1

    def draw(self, rng: random.Random) -> Any:
        if self.choices:
            return rng.choice(self.choices)
        if self.high >= self.low:
            return rng.randint(self.low, self.high)
        return self.value

    def values(self) -> tuple[Any, ...]:
        if self.choices:
            return self.choices
        if self.high >= self.low:
            return (self.low, self.high)
        return (self.value,)

    def mean(self) -> float:
        if self.high >= self.low:
            return (self.low + self.high) / 2
        values = self.values()
        return float(sum(values)) / len(values)


def _pick(value: object, field: str, *, ranged: bool = False) -> _Pick:
    if isinstance(value, list):
        if not value:
            raise ScenarioError(f"{field}: an empty list")
        return _Pick(choices=tuple(value))
    if ranged and isinstance(value, Mapping):
        low, high = _bounds(value, field, "{min: 4, max: 64}")
        for bound, name in ((low, "min"), (high, "max")):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ScenarioError(f"{field}.{name}: expected a positive integer, got {bound!r}")
        if low > high:
            raise ScenarioError(f"{field}: min ({low}) > max ({high})")
        return _Pick(low=low, high=high)
    return _Pick(value=value)


@dataclass(frozen=True, slots=True)
class _Kind:
    """One kind of job of a ``generate`` stream (the stream itself, or one entry of its ``mix``)."""

    field: str  # where its GPU ask is written (for the errors of its claim)
    source: str  # the stream or mix entry it is (``workload.generate[1].mix[0]``)
    weight: float
    queue: str
    queues: tuple[str, ...]  # each job's queue drawn from these (empty: ``queue``)
    duration: tuple[float, float]
    pods: _Pick
    gpus: _Pick
    claim: Mapping[str, Any] | None
    claim_field: str
    cpu: Any
    memory: Any
    priority_class: _Pick

    def mean_pods(self) -> float:
        return self.pods.mean()

    def max_gpus(self) -> float:
        if self.claim is not None:
            return float(max(_pick(self.claim.get("count", 1), "").values()))
        return float(max(self.gpus.values()))


def _layered(layers: Sequence[tuple[Mapping[str, Any], str]], key: str, default: Any) -> tuple[Any, str]:
    """(value, field) of ``key`` from the last layer that has it (a mix entry over its stream)."""
    for raw, field in reversed(layers):
        if key in raw:
            return raw[key], f"{field}.{key}"
    return default, f"{layers[-1][1]}.{key}"


def _queue_list(value: object, field: str, facts: ClusterFacts) -> tuple[str, ...]:
    """A stream's ``queues``: a list of leaf queues, ``leaves`` (every leaf queue of the cluster) or
    ``{leaves: <parent or list of parents>}`` (also spelt ``{tree: ...}``: the leaves below them)."""
    if value == "leaves":
        names = facts.leaves()
        if not names:
            raise ScenarioError(f"{field}: the cluster has no queues (define them in cluster.objects, cluster.files "
                                "or cluster.queue_tree)")
        return tuple(names)
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in ("leaves", "tree"):
            raise ScenarioError(f"{field}: expected {{leaves: <parent queue>}}, got {dict(value)!r}")
        key = next(iter(value))
        parents = value[key] if isinstance(value[key], list) else [value[key]]
        if not parents:
            raise ScenarioError(f"{field}.{key}: an empty list")
        names = []
        for parent in parents:
            if not isinstance(parent, str) or parent not in facts.parents:
                raise ScenarioError(f"{field}.{key}: unknown queue {parent!r}")
            names.extend(n for n in facts.leaves(parent) if n not in names)
        return tuple(names)
    if not isinstance(value, list) or not value:
        raise ScenarioError(f"{field}: expected a list of leaf queues, leaves (all of them) or "
                            f"{{leaves: <parent queue>}}, got {value!r}")
    for i, name in enumerate(value):
        facts.check_queue(name, f"{field}[{i}]")
    return tuple(str(name) for name in value)


def _duration_range(value: object, field: str) -> tuple[float, float]:
    if isinstance(value, Mapping) or (isinstance(value, list) and len(value) == 2):
        lo, hi = _bounds(value, field, "[10m, 4h]")
    else:
        lo = hi = value
    low, high = _seconds(lo, field), _seconds(hi, field)
    if low > high:
        raise ScenarioError(f"{field}: min ({lo}) > max ({hi})")
    return low, high


def _gpu_value(value: object, field: str) -> None:
    if not (_is_number(value) and value >= 0 and (value < 1 or value == int(value))):
        raise ScenarioError(f"{field}: expected a whole number of GPUs or a fraction below 1, got {value!r}")


def _quantity_value(value: object, field: str) -> None:
    if value is None:
        return  # (no request)
    try:
        if isinstance(value, bool):
            raise TypeError
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except (QuantityError, ValueError, TypeError):
        raise ScenarioError(f"{field}: expected a quantity like 8 or 64Gi, got {value!r}") from None
    if amount < 0:
        raise ScenarioError(f"{field}: must be >= 0, got {value!r}")


def _kind(layers: Sequence[tuple[Mapping[str, Any], str]], weight: float, facts: ClusterFacts,
          classes: ClaimClasses) -> _Kind:
    """A stream's (or a mix entry's over its stream's) per-job fields, validated."""
    # the queue (queue or queues) comes from the last layer that names one
    q_raw, q_field = next(((raw, f) for raw, f in reversed(layers) if "queue" in raw or "queues" in raw), layers[-1])
    if "queue" in q_raw and "queues" in q_raw:
        raise ScenarioError(f"{q_field}.queues: give queue (one queue) or queues (drawn per job), not both")
    queue = str(q_raw.get("queue") or "default-queue")
    if q_raw.get("queue") is not None:
        facts.check_queue(q_raw["queue"], f"{q_field}.queue")
    queues = () if q_raw.get("queues") is None else _queue_list(q_raw["queues"], f"{q_field}.queues", facts)
    dur, dur_field = _layered(layers, "duration", ["10m", "1h"])
    pods_raw, pods_field = _layered(layers, "pods", 1)
    pods = _pick(pods_raw, pods_field, ranged=True)
    for n in pods.values():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScenarioError(f"{pods_field}: expected a positive integer, a list of them or a range like "
                                f"{{min: 4, max: 64}}, got {n!r}")
    # the GPU ask (gpus or gpu_claim) comes whole from the last layer that gives one
    gpu_raw, gpu_field = next(((raw, f) for raw, f in reversed(layers) if any(k in raw for k in _GPU_FIELDS)),
                              layers[-1])
    claim_field, raw_claim = _claim_entry(gpu_raw, gpu_field)
    claim: Mapping[str, Any] | None = None
    if raw_claim is not None:
        if gpu_raw.get("gpus"):
            raise ScenarioError(f"{claim_field}: a job asks GPUs by gpus (device plugin) or by "
                                f"{claim_field.rpartition('.')[2]} (DRA), not both")
        claim = _mapping(raw_claim if not isinstance(raw_claim, int | list) else {"count": raw_claim}, claim_field)
        for count in _pick(claim.get("count", 1), f"{claim_field}.count").values():
            gpu_claim({**claim, "count": count}, claim_field, classes)
    gpus = _pick(gpu_raw.get("gpus", 1 if claim is None else 0), f"{gpu_field}.gpus")
    for g in gpus.values():
        _gpu_value(g, f"{gpu_field}.gpus")
    cpu, cpu_field = _layered(layers, "cpu", 1)
    memory, memory_field = _layered(layers, "memory", "4Gi")
    _quantity_value(cpu, cpu_field)
    _quantity_value(memory, memory_field)
    pc_raw, pc_field = _layered(layers, "priority_class", "train")
    priority_class = _pick("train" if pc_raw is None else pc_raw, pc_field)
    for pc in priority_class.values():
        if not isinstance(pc, str) or not pc:
            raise ScenarioError(f"{pc_field}: expected a priority class name or a list of them, got {pc!r}")
    return _Kind(gpu_field, layers[-1][1], weight, str(queue), queues, _duration_range(dur, dur_field), pods, gpus,
                 claim, claim_field, cpu, memory, priority_class)


def _mix(g: Mapping[str, Any], field: str, facts: ClusterFacts, classes: ClaimClasses) -> list[_Kind]:
    """The kinds of job of a stream: its ``mix`` entries over the stream's fields, or the stream alone."""
    if g.get("mix") is None:
        if "mix_by" in g:
            raise ScenarioError(f"{field}.mix_by: only with a mix")
        return [_kind([(g, field)], 1.0, facts, classes)]
    entries = _list(g["mix"], f"{field}.mix")
    if not entries:
        raise ScenarioError(f"{field}.mix: an empty list")
    kinds: list[_Kind] = []
    for i, raw in enumerate(entries):
        entry_field = f"{field}.mix[{i}]"
        entry = _mapping(raw, entry_field)
        _unknown(entry, MIX_FIELDS, entry_field)
        weight = entry.get("weight", 1)
        if not _is_number(weight) or weight <= 0:
            raise ScenarioError(f"{entry_field}.weight: expected a number > 0, got {weight!r}")
        kinds.append(_kind([(g, field), (entry, entry_field)], float(weight), facts, classes))
    by = g.get("mix_by", "jobs")
    if by not in ("jobs", "pods"):
        raise ScenarioError(f"{field}.mix_by: expected jobs (the weights are shares of the jobs) or pods (shares of "
                            f"the pods), got {by!r}")
    if by == "pods":  # a kind's share of the jobs: its share of the pods over its mean pods per job
        kinds = [replace(k, weight=k.weight / k.mean_pods()) for k in kinds]
    return kinds


def _generated(entries: Sequence[Any], seed: int, classes: ClaimClasses, facts: ClusterFacts,
               sizes: _Sizes | None = None) -> list[Arrival]:
    """Seeded synthetic jobs: per stream, ``jobs`` arrivals (or enough to ask ``fill`` x the cluster's GPUs)
    ``every`` (exponential gaps with that mean; all at time 0 with ``at_start``), each of a kind of its ``mix``
    drawn by weight, sizes drawn from the lists or ranges given, queues from ``queues``, durations uniform in
    ``[min, max]`` (log-uniform when max > 10 x min)."""
    rng = random.Random(seed)
    sizes = sizes if sizes is not None else _Sizes(ScenarioLimits())
    out: list[Arrival] = []
    for s, raw in enumerate(entries):
        field = f"workload.generate[{s}]"
        g = _mapping(raw, field)
        _unknown(g, GENERATE_FIELDS, field)
        kinds = _mix(g, field, facts, classes)
        jobs, target = g.get("jobs", 1), math.inf
        if "fill" in g:
            if "jobs" in g:
                raise ScenarioError(f"{field}.fill: give jobs (a number of jobs) or fill (a share of the cluster's "
                                    "GPUs), not both")
            fill = g["fill"]
            if not _is_number(fill) or fill <= 0:
                raise ScenarioError(f"{field}.fill: expected a share of the cluster's GPUs > 0 (0.5: jobs asking half "
                                    f"of them), got {fill!r}")
            if facts.gpus < 1:
                raise ScenarioError(f"{field}.fill: the cluster has no GPUs to fill")
            if max(k.max_gpus() for k in kinds) <= 0:
                raise ScenarioError(f"{field}.fill: the stream's jobs ask no GPUs, so no number of them fills any")
            jobs, target = MAX_FILL_JOBS, fill * facts.gpus
        elif isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
            raise ScenarioError(f"{field}.jobs: expected a non-negative integer, got {jobs!r}")
        fewest = min(min(k.pods.values()) for k in kinds)  # pods per job
        most = max(max(k.pods.values()) for k in kinds)
        sizes.expect(field, jobs if target == math.inf else 0, fewest, most)
        at_start = g.get("at_start", False)
        if not isinstance(at_start, bool):
            raise ScenarioError(f"{field}.at_start: expected true or false, got {at_start!r}")
        if at_start and ("every" in g or "start" in g):
            raise ScenarioError(f"{field}.{'every' if 'every' in g else 'start'}: an at_start stream's jobs all "
                                "arrive at time 0 (already running when the simulation starts); drop it")
        every = _seconds(g.get("every", "10m"), f"{field}.every")
        if every == math.inf:
            raise ScenarioError(f"{field}.every: expected a finite duration (the mean gap between arrivals)")
        start = _seconds(g.get("start", 0), f"{field}.start")
        prefix = str(g.get("name") or f"{g.get('queue', 'job')}-s{s}")
        namespace = g.get("namespace", "default")
        cum_weights = list(itertools.accumulate(k.weight for k in kinds))
        t = start
        asked = 0.0
        for j in range(jobs):
            if asked >= target - 1e-9:
                break
            if not at_start:
                t += rng.expovariate(1.0 / every) if every > 0 else 0.0
            kind = kinds[0] if len(kinds) == 1 else rng.choices(kinds, cum_weights=cum_weights)[0]
            dmin, dmax = kind.duration
            if dmax > 10 * dmin > 0:
                duration = dmin * (dmax / dmin) ** rng.random()
            else:
                duration = rng.uniform(dmin, dmax)
            spec = {"name": f"{prefix}-{j:05d}", "namespace": namespace, "queue": kind.queue,
                    "pods": kind.pods.draw(rng), "gpus": kind.gpus.draw(rng), "cpu": kind.cpu, "memory": kind.memory,
                    "priority_class": kind.priority_class.draw(rng)}
            if kind.claim is not None:  # (GPUs per pod drawn from a list of counts like the other sizes)
                count = _pick(kind.claim.get("count", 1), f"{kind.claim_field}.count").draw(rng)
                spec["gpu_claim"] = {**kind.claim, "count": count}
            if kind.queues:
                spec["queue"] = rng.choice(kind.queues)
            sizes.add(field, spec["pods"])
            objs, queue, gpus = job_objects(spec, kind.field, classes=classes)
            asked += gpus
            out.append(Arrival(round(t, 3), f"{spec['namespace']}/{spec['name']}", queue, tuple(objs),
                               round(duration, 3), gpus, kind.source))
        else:
            if target != math.inf and asked < target - 1e-9:
                raise ScenarioError(f"{field}.fill: {MAX_FILL_JOBS:,} jobs do not ask {target:g} GPUs; ask fewer")
    return out


def _trace(raw: Mapping[str, Any], base: Path, sizes: _Sizes, limits: InputLimits) -> list[Arrival]:
    """The trace's jobs: the file read within the input limits, its rows counted against the scenario's limits
    (with the jobs and pods before it) as they are read, before any job's objects are made."""
    fmt = raw.get("format", "csv")
    path = base / str(raw.get("path") or "")
    options = {k: v for k, v in raw.items() if k not in ("format", "path")}
    for reserved in ("limits", "problems"):
        if reserved in options:
            raise ScenarioError(f"workload.trace.{reserved}: not an option of a trace"
                                + (" (the scenario's limits apply to it)" if reserved == "limits" else ""))
    bounds = traces.TraceLimits(sizes.limits.jobs, sizes.limits.pods, sizes.jobs, sizes.pods, limits)
    try:
        if fmt == "openb":
            arrivals = traces.openb_arrivals(path, **options, limits=bounds)
        elif fmt == "csv":
            arrivals = traces.csv_arrivals(path, **options, limits=bounds)
        else:
            raise ScenarioError(f"workload.trace.format: expected openb or csv, got {fmt!r}")
    except (TypeError, ValueError, OSError) as exc:
        if isinstance(exc, ScenarioError):
            raise
        what = f"file {path}: cannot read: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        raise ScenarioError(f"workload.trace: {what}") from None
    return [replace(a, source=f"workload.trace ({a.source or a.name})") for a in arrivals]


def _node_list(raw: Mapping[str, Any], base: Path, limits: InputLimits) -> list[Obj]:
    """The nodes of a node list file (``format: openb``: an OpenB ``openb_node_list_*.csv``, GPU nodes only unless
    ``gpu_only: false``; ``limit``: the first that many nodes of the file)."""
    _unknown(raw, NODE_LIST_FIELDS, "cluster.node_list")
    fmt = raw.get("format", "openb")
    if fmt != "openb":
        raise ScenarioError(f"cluster.node_list.format: expected openb, got {fmt!r}")
    if not raw.get("path"):
        raise ScenarioError("cluster.node_list.path: the node list file is required")
    gpu_only = raw.get("gpu_only", True)
    if not isinstance(gpu_only, bool):
        raise ScenarioError(f"cluster.node_list.gpu_only: expected true or false, got {gpu_only!r}")
    limit = raw.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ScenarioError(f"cluster.node_list.limit: expected an integer >= 1, got {limit!r}")
    path = base / str(raw["path"])
    try:
        nodes = traces.openb_nodes(path, gpu_only=gpu_only, limits=limits)
    except (ValueError, OSError) as exc:
        what = f"file {path}: cannot read: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        raise ScenarioError(f"cluster.node_list: {what}") from None
    return nodes if limit is None else nodes[:limit]


# ------------------------------------------------------------------------------------------- loading
SCENARIO_FIELDS = ("name", "description", "period", "until", "seed", "config", "config_file", "cluster", "workload",
                   "impossible_jobs", "limits")
CLUSTER_FIELDS = ("files", "objects", "pools", "queue_tree", "node_list")
NODE_LIST_FIELDS = ("format", "path", "gpu_only", "limit")
WORKLOAD_FIELDS = ("arrivals", "generate", "trace")
ARRIVAL_FIELDS = ("time", "duration", "job", "manifest", "file")


def _documents(paths: Sequence[Path], field: str, limits: InputLimits) -> tuple[list[dict[str, Any]], list[Any]]:
    """The documents of manifest files named by ``field``, read within the input limits."""
    try:
        return load_documents(paths, limits=limits)
    except InputLimitError as exc:
        raise ScenarioError(f"{field}: {exc}") from None


def scenario_from_mapping(doc: Mapping[str, Any], base: Path = Path("."), *, seed: int | None = None,
                          limits: InputLimits | None = None) -> Scenario:
    """The scenario a file's content describes; raises :class:`ScenarioError` naming the field of the first
    malformed value (a size over the scenario's ``limits``, a scheduler configuration KAI would refuse), or
    listing every error of the cluster's objects, unknown queue and impossible job (:mod:`kaisched.sim.validate`).
    ``limits``: how much of the files it names may be read (default :meth:`InputLimits.from_env`)."""
    extra = sorted(str(k) for k in doc if k not in SCENARIO_FIELDS)
    if extra:
        raise ScenarioError(f"{extra[0]}: unknown field (expected {', '.join(SCENARIO_FIELDS)})")
    try:
        input_limits = limits if limits is not None else InputLimits.from_env()
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    sizes = _Sizes(ScenarioLimits.of(doc.get("limits")))
    cluster = _mapping(doc.get("cluster"), "cluster")
    _unknown(cluster, CLUSTER_FIELDS, "cluster")
    objects: list[Obj] = []
    files = [base / str(f) for f in _list(cluster.get("files"), "cluster.files")]
    if files:
        docs, errors = _documents(files, "cluster.files", input_limits)
        if errors:
            raise ScenarioError("cluster.files: " + "; ".join(str(e) for e in errors))
        objects.extend(dict(d) for d in docs)
    objects.extend(dict(_mapping(o, "cluster.objects[]")) for o in _list(cluster.get("objects"), "cluster.objects"))
    if cluster.get("node_list") is not None:
        listed = _node_list(_mapping(cluster["node_list"], "cluster.node_list"), base, input_limits)
        if len(listed) > sizes.limits.nodes:
            raise ScenarioError(f"cluster.node_list: {len(listed):,} nodes, more than the scenario's limit of "
                                f"{sizes.limits.nodes:,} (limits.nodes: raise it, or take fewer with limit)")
        objects.extend(listed)
    dra_classes: dict[str, tuple[str, str]] = {}  # DeviceClass of the pools' DRA GPUs -> (driver, its pool's field)
    _pool_sizes(_list(cluster.get("pools"), "cluster.pools"), sizes.limits)
    for i, pool in enumerate(_list(cluster.get("pools"), "cluster.pools")):
        field = f"cluster.pools[{i}]"
        nodes = pool_nodes(_mapping(pool, field), field)
        objects.extend(nodes)
        dra = _mapping(pool, field).get("dra")
        if dra is not None:
            pool_dra = dra_pool(dra, f"{field}.dra")
            known = dra_classes.setdefault(pool_dra.device_class, (pool_dra.driver, field))
            if known[0] != pool_dra.driver:
                raise ScenarioError(f"{field}.dra.device_class: DeviceClass {pool_dra.device_class!r} selects the "
                                    f"devices of {known[0]} ({known[1]}); give this pool's driver "
                                    f"({pool_dra.driver}) its own device_class")
    defined = {str(o.get("metadata", {}).get("name")) for o in objects
               if o.get("kind") == C.DEVICE_CLASS_KIND and isinstance(o.get("metadata"), Mapping)}
    objects.extend(device_class(name, driver) for name, (driver, _) in sorted(dra_classes.items())
                   if name not in defined)
    run_seed = seed if seed is not None else doc.get("seed", 0)
    if isinstance(run_seed, bool) or not isinstance(run_seed, int):
        raise ScenarioError(f"seed: expected an integer, got {run_seed!r}")
    if cluster.get("queue_tree") is not None:
        objects.extend(queue_tree(cluster["queue_tree"], objects, run_seed, max_queues=sizes.limits.queues))
    classes = claim_classes(objects)
    config: Obj | None = dict(_mapping(doc.get("config"), "config")) or None
    config_field = "config"
    config_source = "config (in the scenario)" if config is not None else ""
    if doc.get("config_file"):
        config_field = "config_file"
        config_source = f"config_file: {base / str(doc['config_file'])}"
        try:
            loaded = yaml.safe_load(read_text(base / str(doc["config_file"]), input_limits))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, InputLimitError) as exc:
            raise ScenarioError(f"config_file: {_read_problem(exc)}") from None
        config = dict(_mapping(loaded, "config_file"))
    try:
        resolve_config(config)
    except ConfigError as exc:
        raise ScenarioError(f"{config_field}: {exc}") from None
    workload = _mapping(doc.get("workload"), "workload")
    _unknown(workload, WORKLOAD_FIELDS, "workload")
    facts = ClusterFacts.of(objects)
    arrivals = _arrivals(_list(workload.get("arrivals"), "workload.arrivals"), base, classes, sizes, input_limits)
    arrivals += _generated(_list(workload.get("generate"), "workload.generate"), run_seed, classes, facts, sizes)
    if workload.get("trace") is not None:
        traced = _trace(_mapping(workload.get("trace"), "workload.trace"), base, sizes, input_limits)
        for a in traced:
            sizes.add("workload.trace", sum(1 for o in a.objects if o.get("kind") == "Pod"))
        arrivals += traced
    until = doc.get("until")
    period = _seconds(doc.get("period", 10), "period")
    if period <= 0 or period == math.inf:
        raise ScenarioError(f"period: expected a duration > 0 (the time between scheduling cycles), got "
                            f"{doc.get('period')!r}")
    scenario = Scenario(
        name=str(doc.get("name") or "scenario"), cluster=objects, arrivals=arrivals, config=config,
        period=period, until=None if until is None else _seconds(until, "until"), seed=run_seed,
        description=str(doc.get("description") or ""), max_pods=sizes.limits.pods, config_source=config_source,
    )
    impossible = doc.get("impossible_jobs", "error")
    if impossible not in ("error", "drop"):
        raise ScenarioError(f"impossible_jobs: expected error (refuse a scenario with jobs that could never run) or "
                            f"drop (leave them out; the report counts them as dropped), got {impossible!r}")
    found = validate.impossible_jobs(scenario)
    problems = [*facts.problems, *(str(p) for p in validate.queue_problems(scenario))]
    if impossible == "error":
        problems += [str(p) for p in validate.impossible_problems(scenario, found)]
    elif found:
        reasons = dict(found)
        scenario.dropped = [(a, reasons[i]) for i, a in enumerate(arrivals) if i in reasons]
        scenario.arrivals = [a for i, a in enumerate(arrivals) if i not in reasons]
    problems = list(dict.fromkeys(problems))
    if problems:
        raise ScenarioError("\n".join(problems), problems)
    return scenario


def _read_problem(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    if isinstance(exc, UnicodeDecodeError):
        return "not a text file (UTF-8)"
    if isinstance(exc, yaml.YAMLError):
        return f"invalid YAML: {exc}"
    return str(exc)


def load_scenario(path: str | Path, *, seed: int | None = None, limits: InputLimits | None = None) -> Scenario:
    """The scenario of a file (read within ``limits``, default :meth:`InputLimits.from_env`, as the files it
    names are); raises :class:`ScenarioError`."""
    p = Path(path)
    try:
        limits = limits if limits is not None else InputLimits.from_env()
        text = read_text(p, limits, source=str(path))
        doc = yaml.safe_load(text)
    except InputLimitError as exc:
        raise ScenarioError(str(exc)) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        raise ScenarioError(f"{path}: {_read_problem(exc)}") from None
    if doc is None:
        raise ScenarioError(f"{path}: an empty file; a scenario is a mapping with cluster, workload, ...")
    if not isinstance(doc, Mapping):
        raise ScenarioError(f"{path}: expected a scenario (a mapping with cluster, workload, ...), got "
                            f"{_type_name(doc)}")
    scenario = scenario_from_mapping(doc, p.parent, seed=seed, limits=limits)
    scenario.path = str(path)
    scenario.text = text
    return scenario


def _type_name(value: object) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
