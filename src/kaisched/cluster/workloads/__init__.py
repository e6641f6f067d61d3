"""The embedded cluster's workload controllers (spec 10; issue 6): a workload object given without its pods
creates them, with the names, labels and owner references its real controller (Job controller, Training
Operator, KubeRay, JobSet, LeaderWorkerSet, Argo, ...) would give them, so the pod-grouper can group them.

A workload whose pods (or intermediate objects) are already in the input is left as it is: the input is a
snapshot of a running cluster; except for the kinds whose controller creates pods as earlier ones finish
(``RECONCILERS``: an Argo Workflow's next steps), which are run again with their pods' phases.

The controllers make at most ``limit.pods`` pods over one expansion (:class:`~.base.PodLimit`, default
:data:`~.base.MAX_PODS`): a workload whose replica counts would go over is refused before anything of it is
made, with an input error naming its field; its controller creates nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from kaisched.cluster.workloads import batch, kubeflow, others, ray
from kaisched.cluster.workloads.base import MAX_PODS, ControllerFn, Emit, PodLimit, PodLimitReached
from kaisched.k8s.objects import ParsedObjects, Workload
from kaisched.k8s.parse import parse_objects

MAX_ROUNDS = 8  # workload -> child workload -> ... (TrainJob -> JobSet -> Job -> Pod is the deepest)

CONTROLLERS: dict[tuple[str, str], ControllerFn] = {
    **batch.CONTROLLERS, **kubeflow.CONTROLLERS, **ray.CONTROLLERS, **others.CONTROLLERS,
}
RECONCILERS = batch.RECONCILERS


def _phases_by_owner(parsed: ParsedObjects) -> dict[str, dict[str, str]]:
    """Owner (``namespace/kind/name``) -> the names and phases of the pods it owns (an Argo pod also under
    ``node:<its workflow node>``, so that pods named otherwise, as Argo's older POD_NAMES=v1, are recognised)."""
    out: dict[str, dict[str, str]] = {}
    for p in parsed.pods:
        node = p.meta.annotations.get(batch.ARGO_NODE_NAME_ANNOTATION)
        for ref in p.meta.owner_references:
            phases = out.setdefault(f"{p.meta.namespace}/{ref.kind}/{ref.name}", {})
            phases[p.meta.name] = p.phase
            if node:
                phases[f"node:{node}"] = p.phase
    return out


def _owned_uids(parsed: ParsedObjects) -> set[str]:
    """uids (and namespace/kind/name keys) of objects that something in the input names as its owner."""
    out: set[str] = set()
    metas = [p.meta for p in parsed.pods] + [w.meta for w in parsed.workloads]
    for meta in metas:
        for ref in meta.owner_references:
            out.add(ref.uid)
            out.add(f"{meta.namespace}/{ref.kind}/{ref.name}")
    return out


def expand_workloads(parsed: ParsedObjects, now: datetime | None = None, *,
                     limit: PodLimit | None = None) -> ParsedObjects:
    """The input plus the pods (and intermediate objects) of every workload given without them; objects a
    controller creates (a CronJob's Job, a TrainJob's JobSet) are expanded in turn. At most ``limit.pods``
    pods are made (default :data:`~.base.MAX_PODS` per input): a workload that would make more is an error."""
    limit = limit if limit is not None else PodLimit()
    owned = _owned_uids(parsed)
    pods, workloads, errors = list(parsed.pods), list(parsed.workloads), list(parsed.errors)
    todo = list(parsed.workloads)
    phases: dict[str, dict[str, str]] | None = None
    for _ in range(MAX_ROUNDS):
        created: list[dict[str, object]] = []
        for w in sorted(todo, key=lambda w: (w.meta.namespace, w.kind, w.meta.name)):
            controller = CONTROLLERS.get((w.group, w.kind))
            if controller is None:
                continue
            emit = Emit(w, now, limit)
            made, children = limit.made, limit.children
            try:
                if not _materialised(w, owned):
                    controller(w, emit)
                else:
                    reconcile = RECONCILERS.get((w.group, w.kind))
                    if reconcile is None:
                        continue
                    if phases is None:
                        phases = _phases_by_owner(parsed)
                    reconcile(w, emit, phases.get(f"{w.meta.namespace}/{w.kind}/{w.meta.name}", {}))
            except PodLimitReached:
                before = f" (with the {made:,} pods before it)" if made else ""
                emit.error("", f"its controller would make more than {limit.describe()}{before}")
                limit.refused.append(emit.errors[-1])
            errors.extend(emit.errors)
            if emit.errors:  # nothing of it is made
                limit.made, limit.children = made, children
            else:
                created.extend(emit.objects)
        if not created:
            break
        more = parse_objects(created)
        pods.extend(more.pods)
        workloads.extend(more.workloads)
        errors.extend(more.errors)
        owned |= _owned_uids(more)
        todo = list(more.workloads)
    if len(pods) == len(parsed.pods) and len(errors) == len(parsed.errors) and len(workloads) == len(parsed.workloads):
        return parsed
    return replace(parsed, pods=pods, workloads=workloads, errors=errors)


def _materialised(w: Workload, owned: set[str]) -> bool:
    return (bool(w.meta.uid) and w.meta.uid in owned) or f"{w.meta.namespace}/{w.kind}/{w.meta.name}" in owned


__all__ = ["CONTROLLERS", "MAX_PODS", "RECONCILERS", "PodLimit", "expand_workloads"]
