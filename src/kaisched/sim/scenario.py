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
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kaisched.k8s.loader import load_documents
from kaisched.k8s.quantity import parse_duration
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
    """``count`` nodes of one shape: ``<name>-<i>``."""
    name = str(pool.get("name") or "node")
    count = pool.get("count", 1)
    if not isinstance(count, int) or count < 0:
        raise ScenarioError(f"{field}.count: expected a non-negative integer, got {count!r}")
    gpus = pool.get("gpus", 0)
    if not isinstance(gpus, int) or gpus < 0:
        raise ScenarioError(f"{field}.gpus: expected a non-negative integer, got {gpus!r}")
    labels = {str(k): str(v) for k, v in _mapping(pool.get("labels"), f"{field}.labels").items()}
    if pool.get("gpu_memory_mib"):
        labels["nvidia.com/gpu.memory"] = str(pool["gpu_memory_mib"])
    allocatable = {"cpu": str(pool.get("cpu", 64)), "memory": str(pool.get("memory", "512Gi")),
                   "nvidia.com/gpu": str(gpus), "pods": str(pool.get("pods", 110))}
    width = max(len(str(count - 1)), 3)
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"{name}-{i:0{width}d}", "labels": {"kubernetes.io/hostname": f"{name}-{i:0{width}d}",
                                                                     **labels}},
             "status": {"allocatable": dict(allocatable), "conditions": [{"type": "Ready", "status": "True"}]}}
            for i in range(count)]


def job_objects(spec: Mapping[str, Any], field: str, *, name: str | None = None) -> tuple[list[Obj], str, float]:
    """The PodGroup and pods of a compact job spec; returns (objects, queue, GPUs asked)."""
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
    objects = traces.job_objects(job_name, namespace, queue, pods, float(gpus), spec.get("cpu", 1),
                                 spec.get("memory", "4Gi"), str(spec.get("priority_class") or "train"), min_member)
    return list(objects), queue, float(gpus) * pods


# ------------------------------------------------------------------------------------------- workload
def _arrivals(entries: Sequence[Any], base: Path) -> list[Arrival]:
    out: list[Arrival] = []
    for i, raw in enumerate(entries):
        field = f"workload.arrivals[{i}]"
        e = _mapping(raw, field)
        t = _seconds(e.get("time", 0), f"{field}.time")
        duration = _seconds(e.get("duration", "inf"), f"{field}.duration")
        if "job" in e:
            objs, queue, gpus = job_objects(_mapping(e["job"], f"{field}.job"), f"{field}.job")
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


def _generated(entries: Sequence[Any], seed: int) -> list[Arrival]:
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
        t = start
        for j in range(jobs):
            t += rng.expovariate(1.0 / every) if every > 0 else 0.0
            if dmax > 10 * dmin > 0:
                duration = dmin * (dmax / dmin) ** rng.random()
            else:
                duration = rng.uniform(dmin, dmax)
            spec = {"name": f"{prefix}-{j:05d}", "namespace": g.get("namespace", "default"),
                    "queue": g.get("queue", "default-queue"), "pods": _choice(rng, g.get("pods", 1), f"{field}.pods"),
                    "gpus": _choice(rng, g.get("gpus", 1), f"{field}.gpus"), "cpu": g.get("cpu", 1),
                    "memory": g.get("memory", "4Gi"),
                    "priority_class": _choice(rng, g.get("priority_class", "train"), f"{field}.priority_class")}
            objs, queue, gpus = job_objects(spec, field)
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
    for i, pool in enumerate(_list(cluster.get("pools"), "cluster.pools")):
        objects.extend(pool_nodes(_mapping(pool, f"cluster.pools[{i}]"), f"cluster.pools[{i}]"))
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
    arrivals = _arrivals(_list(workload.get("arrivals"), "workload.arrivals"), base)
    arrivals += _generated(_list(workload.get("generate"), "workload.generate"), run_seed)
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
