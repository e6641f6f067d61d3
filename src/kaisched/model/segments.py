"""Segments (spec 9, 10.3): a large pod set split into consecutive blocks of S pods, each with its own
topology constraint, so that for example every 8 workers of a PyTorchJob share a rack while the job spans
a spine.

Pods ask for it with the annotation ``kai.scheduler/segment-size: S`` (on the pod; the pod-grouper copies it
from a PyTorchJob worker template or a LeaderWorkerSet), and for the segments' placement with
``kai.scheduler/segment-topology-required-placement`` / ``-preferred-placement`` (levels of the PodGroup's
topology, or of the pod's ``kai.scheduler/topology``). The pod set ``workers`` becomes a subgroup set with
children ``workers-0``, ``workers-1``, ... of S pods (the last one may be smaller), a pod's segment being its
replica index // S (labels ``training.kubeflow.org/replica-index`` or
``leaderworkerset.sigs.k8s.io/worker-index``, else its position by name). The pod set's minimum is kept:
the first segments are required in full, up to that many pods.
"""

from __future__ import annotations

import re

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ObjectError, TopologyConstraint
from kaisched.model.job import PodGroupInfo, PodSetInfo, SubGroupSet
from kaisched.model.task import TaskInfo

REPLICA_INDEX_LABELS = ("training.kubeflow.org/replica-index", "leaderworkerset.sigs.k8s.io/worker-index")


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _index(task: TaskInfo) -> int | None:
    for label in REPLICA_INDEX_LABELS:
        raw = task.labels.get(label)
        if raw is not None and raw.isdigit():
            return int(raw)
    return None


def _find_set(node: SubGroupSet, pod_set: str) -> SubGroupSet | None:
    if pod_set in node.pod_sets:
        return node
    for child in node.children:
        found = _find_set(child, pod_set)
        if found is not None:
            return found
    return None


def apply_segments(job: PodGroupInfo, errors: list[ObjectError]) -> None:
    """Split every pod set whose pods carry ``kai.scheduler/segment-size`` into segments."""
    for name in list(job.pod_sets):
        ps = job.pod_sets[name]
        annotated = [t for t in ps.tasks if C.SEGMENT_SIZE_ANNOTATION in t.pod.meta.annotations]
        if not annotated:
            continue
        first = annotated[0]
        raw = first.pod.meta.annotations[C.SEGMENT_SIZE_ANNOTATION]
        size = int(raw) if raw.isdigit() else 0
        if size <= 0:
            errors.append(ObjectError(f"Pod {first.key}", f"metadata.annotations.{C.SEGMENT_SIZE_ANNOTATION}",
                                      f"must be a positive integer, got {raw!r}; the pods are not segmented"))
            continue
        if size >= len(ps.tasks):
            continue  # one segment: nothing to split
        _split(job, ps, size, _segment_constraint(job, first))


def _segment_constraint(job: PodGroupInfo, task: TaskInfo) -> TopologyConstraint | None:
    ann = task.pod.meta.annotations
    required = ann.get(C.SEGMENT_TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, "")
    preferred = ann.get(C.SEGMENT_TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, "")
    if not required and not preferred:
        return None
    topology = ann.get(C.TOPOLOGY_ANNOTATION, "") or (job.root.constraint.topology if job.root.constraint else "")
    return TopologyConstraint(topology=topology, required_level=required, preferred_level=preferred)


def _split(job: PodGroupInfo, ps: PodSetInfo, size: int, constraint: TopologyConstraint | None) -> None:
    by_name = sorted(ps.tasks, key=lambda t: _natural(t.name))
    position = {t.uid: i for i, t in enumerate(by_name)}
    segments: dict[int, list[TaskInfo]] = {}
    for t in ps.tasks:
        idx = _index(t)
        segments.setdefault((idx if idx is not None else position[t.uid]) // size, []).append(t)
    parent = _find_set(job.root, ps.name)
    if parent is None:
        return
    node = SubGroupSet(ps.name, ps.constraint)
    parent.pod_sets.remove(ps.name)
    parent.children.append(node)
    del job.pod_sets[ps.name]
    remaining = ps.min_available
    for k in sorted(segments):
        tasks = segments[k]
        seg = PodSetInfo(f"{ps.name}-{k}", min(len(tasks), max(remaining, 0)), constraint=constraint)
        remaining -= len(tasks)
        for t in tasks:
            t.pod_set = seg.name
        seg.tasks = tasks
        job.pod_sets[seg.name] = seg
        node.pod_sets.append(seg.name)
    job.has_topology = job.root.has_constraint(job.pod_sets)
