"""Scenario files: a YAML document that names the cluster, the queues, the scheduler configuration and the
workload of a simulation.

```yaml
name: three-teams
period: 30s                  # between scheduling cycles (a Go duration or seconds)
until: 24h                   # optional: stop here (default: when every job has finished)
seed: 7                      # for the generated workload and trace resampling
config: {...}                # KAI-format scheduler configuration, or config_file: sched.yaml
cluster:
  files: [cluster/]          # node / queue / priority class / topology manifests (files or folders)
  objects: [...]             # the same, inline
  pools:                     # compact node pools: count x shape
  - {name: a100, count: 32, gpus: 8, gpu_memory_mib: 81920, cpu: 128, memory: 1Ti, labels: {zone: a}}
  - {name: h100, count: 8, cpu: 192, memory: 2Ti,          # DRA GPUs: a ResourceSlice per node
     dra: {driver: gpu.nvidia.com, devices: 8, memory: 80Gi, attributes: {productName: NVIDIA H100}}}
workload:
  arrivals:                  # explicit arrivals
  - {time: 0, duration: 2h, job: {name: llm, queue: team-a, pods: 4, gpus: 8}}
  - {time: 1h, duration: 30m, file: my-pytorchjob.yaml}   # or manifest: {...}
  generate:                  # seeded synthetic jobs, one entry per stream
  - {queue: team-a, jobs: 100, every: 10m, pods: [1, 1, 2, 4], gpus: [1, 0.5, 0.25], duration: [10m, 4h],
     priority_class: train}
  trace: {format: openb, path: ..., queue: team-a}   # or {format: csv, path, preset|mapping, ...}
```

Compact jobs: ``pods`` (default 1), ``gpus`` per pod (a fraction below 1 is ``gpu-fraction``), ``cpu``,
``memory``, ``queue``, ``priority_class`` (default ``train``), ``min_member`` (default all pods),
``namespace`` (default ``default``). Times and durations are Go durations (``90s``, ``1h30m``) or seconds.

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

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kaisched.k8s import constants as C
from kaisched.k8s.loader import load_documents
from kaisched.k8s.quantity import QuantityError, parse_duration, parse_quantity
from kaisched.model.dra import is_gpu_class, is_gpu_driver
from kaisched.model.dra_cel import CelError, compile_selector
from kaisched.sim import traces
from kaisched.sim.model import Arrival, Obj, Scenario


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the field."""


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
def pool_nodes(pool: Mapping[str, Any], field: str) -> list[Obj]:
    """``count`` nodes of one shape: ``<name>-<i>`` (with a ``dra`` block, each node's ResourceSlice follows
    its Node: :func:`dra_slice`)."""
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
    if not isinstance(pods, int) or pods < 1:
        raise ScenarioError(f"{field}.pods: expected a positive integer, got {pods!r}")
    gpus = spec.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int | float) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise ScenarioError(f"{field}.gpus: expected a whole number of GPUs or a fraction below 1, got {gpus!r}")
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
def _arrivals(entries: Sequence[Any], base: Path, classes: ClaimClasses) -> list[Arrival]:
    out: list[Arrival] = []
    for i, raw in enumerate(entries):
        field = f"workload.arrivals[{i}]"
        e = _mapping(raw, field)
        t = _seconds(e.get("time", 0), f"{field}.time")
        duration = _seconds(e.get("duration", "inf"), f"{field}.duration")
        if "job" in e:
            objs, queue, gpus = job_objects(_mapping(e["job"], f"{field}.job"), f"{field}.job", classes=classes)
            name = f"{objs[0]['metadata']['namespace']}/{objs[0]['metadata']['name']}"
        elif "manifest" in e or "file" in e:
            if "file" in e:
                docs, errors = load_documents([base / str(e["file"])])
                if errors:
                    raise ScenarioError(f"{field}.file: " + "; ".join(str(x) for x in errors))
            else:
                docs = [dict(_mapping(e["manifest"], f"{field}.manifest"))]
            if not docs:
                raise ScenarioError(f"{field}: no objects")
            meta = _mapping(docs[0].get("metadata"), f"{field}.metadata")
            name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            labels = _mapping(meta.get("labels"), f"{field}.metadata.labels")
            objs, queue, gpus = [dict(d) for d in docs], str(labels.get("kai.scheduler/queue", "")), 0.0
        else:
            raise ScenarioError(f"{field}: give a job, a manifest or a file")
        out.append(Arrival(t, name, queue, tuple(objs), duration, gpus))
    return out


def _choice(rng: random.Random, value: object, field: str) -> Any:
    if isinstance(value, list):
        if not value:
            raise ScenarioError(f"{field}: an empty list")
        return rng.choice(value)
    return value


def _generated(entries: Sequence[Any], seed: int, classes: ClaimClasses) -> list[Arrival]:
    """Seeded synthetic jobs: per stream, ``jobs`` arrivals ``every`` (exponential gaps with that mean),
    sizes drawn from the lists given, durations uniform in ``[min, max]`` (log-uniform when max > 10 x min)."""
    rng = random.Random(seed)
    out: list[Arrival] = []
    for s, raw in enumerate(entries):
        field = f"workload.generate[{s}]"
        g = _mapping(raw, field)
        jobs = g.get("jobs", 1)
        if not isinstance(jobs, int) or jobs < 0:
            raise ScenarioError(f"{field}.jobs: expected a non-negative integer, got {jobs!r}")
        every = _seconds(g.get("every", "10m"), f"{field}.every")
        start = _seconds(g.get("start", 0), f"{field}.start")
        dur = g.get("duration", ["10m", "1h"])
        lo, hi = (dur if isinstance(dur, list) and len(dur) == 2 else [dur, dur])
        dmin, dmax = _seconds(lo, f"{field}.duration"), _seconds(hi, f"{field}.duration")
        prefix = str(g.get("name") or f"{g.get('queue', 'job')}-s{s}")
        claim_field, raw_claim = _claim_entry(g, field)
        claim = None if raw_claim is None else _mapping(raw_claim if not isinstance(raw_claim, int | list) else
                                                        {"count": raw_claim}, claim_field)
        t = start
        for j in range(jobs):
            t += rng.expovariate(1.0 / every) if every > 0 else 0.0
            if dmax > 10 * dmin > 0:
                duration = dmin * (dmax / dmin) ** rng.random()
            else:
                duration = rng.uniform(dmin, dmax)
            spec = {"name": f"{prefix}-{j:05d}", "namespace": g.get("namespace", "default"),
                    "queue": g.get("queue", "default-queue"), "pods": _choice(rng, g.get("pods", 1), f"{field}.pods"),
                    "gpus": _choice(rng, g.get("gpus", 1 if claim is None else 0), f"{field}.gpus"),
                    "cpu": g.get("cpu", 1), "memory": g.get("memory", "4Gi"),
                    "priority_class": _choice(rng, g.get("priority_class", "train"), f"{field}.priority_class")}
            if claim is not None:  # (GPUs per pod drawn from a list of counts like the other sizes)
                spec["gpu_claim"] = {**claim, "count": _choice(rng, claim.get("count", 1), f"{claim_field}.count")}
            objs, queue, gpus = job_objects(spec, field, classes=classes)
            out.append(Arrival(round(t, 3), f"{spec['namespace']}/{spec['name']}", queue, tuple(objs),
                               round(duration, 3), gpus))
    return out


def _trace(raw: Mapping[str, Any], base: Path) -> list[Arrival]:
    fmt = raw.get("format", "csv")
    path = base / str(raw.get("path") or "")
    options = {k: v for k, v in raw.items() if k not in ("format", "path")}
    try:
        if fmt == "openb":
            return traces.openb_arrivals(path, **options)
        if fmt == "csv":
            return traces.csv_arrivals(path, **options)
    except (TypeError, ValueError, OSError) as exc:
        raise ScenarioError(f"workload.trace: {exc}") from None
    raise ScenarioError(f"workload.trace.format: expected openb or csv, got {fmt!r}")


# ------------------------------------------------------------------------------------------- loading
def scenario_from_mapping(doc: Mapping[str, Any], base: Path = Path("."), *, seed: int | None = None) -> Scenario:
    cluster = _mapping(doc.get("cluster"), "cluster")
    objects: list[Obj] = []
    files = [base / str(f) for f in _list(cluster.get("files"), "cluster.files")]
    if files:
        docs, errors = load_documents(files)
        if errors:
            raise ScenarioError("cluster.files: " + "; ".join(str(e) for e in errors))
        objects.extend(dict(d) for d in docs)
    objects.extend(dict(_mapping(o, "cluster.objects[]")) for o in _list(cluster.get("objects"), "cluster.objects"))
    dra_classes: dict[str, tuple[str, str]] = {}  # DeviceClass of the pools' DRA GPUs -> (driver, its pool's field)
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
    classes = claim_classes(objects)
    config: Obj | None = dict(_mapping(doc.get("config"), "config")) or None
    if doc.get("config_file"):
        try:
            loaded = yaml.safe_load((base / str(doc["config_file"])).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError(f"config_file: {exc}") from None
        config = dict(_mapping(loaded, "config_file"))
    run_seed = seed if seed is not None else doc.get("seed", 0)
    if not isinstance(run_seed, int):
        raise ScenarioError(f"seed: expected an integer, got {run_seed!r}")
    workload = _mapping(doc.get("workload"), "workload")
    arrivals = _arrivals(_list(workload.get("arrivals"), "workload.arrivals"), base, classes)
    arrivals += _generated(_list(workload.get("generate"), "workload.generate"), run_seed, classes)
    if workload.get("trace") is not None:
        arrivals += _trace(_mapping(workload.get("trace"), "workload.trace"), base)
    until = doc.get("until")
    return Scenario(
        name=str(doc.get("name") or "scenario"), cluster=objects, arrivals=arrivals, config=config,
        period=_seconds(doc.get("period", 10), "period") or 10.0,
        until=None if until is None else _seconds(until, "until"), seed=run_seed,
        description=str(doc.get("description") or ""),
    )


def load_scenario(path: str | Path, *, seed: int | None = None) -> Scenario:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: invalid YAML: {exc}") from None
    return scenario_from_mapping(_mapping(doc, str(path)), p.parent, seed=seed)
