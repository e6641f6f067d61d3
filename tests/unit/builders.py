"""Small builders of Kubernetes/KAI objects (plain dicts) for tests of ``kaisched.schedule``.

Every builder returns a fresh dict that ``kaisched.schedule`` accepts as is; keyword arguments cover
the fields the scheduler reads. Quantities may be numbers or Kubernetes quantity strings.
:func:`open_session` opens a scheduling session on such objects, for tests of the session's parts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import DEFAULT_PLUGINS, SchedulerConfig
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.snapshot import build_snapshot
from kaisched.plugins.registry import build_plugins

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
SCHEDULER = "kai-scheduler"
GPU = "nvidia.com/gpu"

Obj = dict[str, Any]


def _q(value: object) -> str:
    """A quantity as Kubernetes writes it (strings stay, numbers become their text)."""
    return value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)


def node(
    name: str,
    gpus: int = 8,
    cpu: object = 64,
    memory: object = "512Gi",
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    conditions: Mapping[str, str] | None = None,
    pods: int = 110,
    extra: Mapping[str, object] | None = None,
) -> Obj:
    """A Node; ``conditions`` maps condition type to status (default: Ready=True only)."""
    allocatable: dict[str, str] = {"cpu": _q(cpu), "memory": _q(memory), GPU: str(gpus), "pods": str(pods)}
    for k, v in (extra or {}).items():
        allocatable[k] = _q(v)
    conds = {"Ready": "True"} if conditions is None else dict(conditions)
    spec: Obj = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": t, "status": s} for t, s in conds.items()],
        },
    }


def _qres(quota: object, limit: object, weight: object) -> Obj:
    return {"quota": quota, "limit": limit, "overQuotaWeight": weight}


def queue(
    name: str,
    parent: str | None = None,
    *,
    gpu: object = -1,
    gpu_limit: object = -1,
    gpu_weight: object = 1,
    cpu: object = -1,
    cpu_limit: object = -1,
    cpu_weight: object = 1,
    memory: object = -1,
    memory_limit: object = -1,
    memory_weight: object = 1,
    priority: int | None = None,
    display_name: str | None = None,
    created: str | None = None,
) -> Obj:
    """A Queue; quotas default to unlimited (-1) so tests only state what matters to them."""
    spec: Obj = {
        "resources": {
            "gpu": _qres(gpu, gpu_limit, gpu_weight),
            "cpu": _qres(cpu, cpu_limit, cpu_weight),
            "memory": _qres(memory, memory_limit, memory_weight),
        }
    }
    if parent is not None:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    if display_name is not None:
        spec["displayName"] = display_name
    meta: Obj = {"name": name}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec}


def pod_group(
    name: str,
    ns: str = "default",
    queue: str = "q",
    min_member: int = 1,
    priority_class: str | None = "train",
    preemptibility: str | None = None,
    *,
    created: str | None = None,
) -> Obj:
    spec: Obj = {"queue": queue, "minMember": min_member}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preemptibility is not None:
        spec["preemptibility"] = preemptibility
    meta: Obj = {"name": name, "namespace": ns}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec}


def pod(
    name: str,
    ns: str = "default",
    group: str | None = None,
    gpus: int = 0,
    cpu: object = 1,
    memory: object = "1Gi",
    node: str | None = None,
    phase: str | None = None,
    *,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    host_port: int | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER,
    deleting: bool = False,
    extra: Mapping[str, object] | None = None,
    created: str | None = None,
) -> Obj:
    """A Pod of PodGroup ``group``; phase defaults to Running when placed on ``node``, else Pending."""
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = _q(cpu)
    if memory:
        requests["memory"] = _q(memory)
    if gpus:
        requests[GPU] = str(gpus)
    for k, v in (extra or {}).items():
        requests[k] = _q(v)
    container: Obj = {"name": "main", "image": "busybox", "resources": {"requests": requests}}
    if host_port is not None:
        container["ports"] = [{"containerPort": 8080, "hostPort": host_port, "protocol": "TCP"}]
    spec: Obj = {"schedulerName": scheduler, "containers": [container]}
    if node is not None:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    meta: Obj = {"name": name, "namespace": ns}
    if group is not None:
        meta["annotations"] = {"pod-group-name": group}
    if labels:
        meta["labels"] = dict(labels)
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T11:59:00Z"
    if created is not None:
        meta["creationTimestamp"] = created
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }


def priority_class(name: str, value: int, *, global_default: bool = False) -> Obj:
    out: Obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value}
    if global_default:
        out["globalDefault"] = True
    return out


def job(
    name: str,
    n: int,
    *,
    ns: str = "default",
    queue: str = "q",
    min_member: int | None = None,
    gpus: int = 0,
    cpu: object = 1,
    memory: object = "1Gi",
    priority_class: str | None = "train",
    preemptibility: str | None = None,
    created: str | None = None,
    **pod_kwargs: Any,
) -> list[Obj]:
    """A PodGroup plus ``n`` pending pods ``<name>-0..n-1`` (minMember defaults to ``n``: a gang)."""
    out = [pod_group(name, ns, queue, n if min_member is None else min_member, priority_class, preemptibility,
                     created=created)]
    out += [pod(f"{name}-{i}", ns, name, gpus, cpu, memory, **pod_kwargs) for i in range(n)]
    return out


def tiers(**overrides: Mapping[str, str]) -> list[Obj]:
    """KAI's default plugin list as a ``tiers`` config value, with some plugins' arguments replaced."""
    plugins: list[Obj] = []
    for opt in DEFAULT_PLUGINS:
        entry: Obj = {"name": opt.name}
        args = overrides.get(opt.name, opt.arguments)
        if args:
            entry["arguments"] = dict(args)
        plugins.append(entry)
    return [{"plugins": plugins}]


# ------------------------------------------------------------------------------------- result helpers
def binds(result: Any) -> dict[str, str]:
    """pod key -> node of the result's binds."""
    return {b.pod: b.node for b in result.binds}


def pipelined(result: Any) -> dict[str, str]:
    return {p.pod: p.node for p in result.pipelined}


def status(result: Any, name: str) -> Any:
    """The PodGroupStatus of ``<ns>/<name>`` (``default`` namespace when no slash); fails if absent."""
    key = name if "/" in name else f"default/{name}"
    found = result.pod_group(key)
    assert found is not None, f"no status for PodGroup {key}: {[g.name for g in result.pod_groups]}"
    return found


def queue_status(result: Any, name: str) -> Any:
    found = next((q for q in result.queues if q.name == name), None)
    assert found is not None, f"no status for queue {name}"
    return found


def flatten(*parts: Obj | Iterable[Obj]) -> list[Obj]:
    out: list[Obj] = []
    for p in parts:
        if isinstance(p, dict):
            out.append(p)
        else:
            out.extend(p)
    return out


def open_session(*objs: object, config: SchedulerConfig | Mapping[str, Any] | None = None) -> Session:
    """An open session (the snapshot of ``objs`` at NOW, every configured plugin opened), no action run."""
    cfg = resolve_config(config)
    snap = build_snapshot(parse_objects(flatten(*objs)), NOW)  # type: ignore[arg-type]
    ssn = Session(snap, cfg, build_plugins(cfg.plugins))
    ssn.open()
    return ssn
