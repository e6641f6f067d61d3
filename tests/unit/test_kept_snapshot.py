"""The incremental cluster state (kaisched.model.kept, kaisched.cluster.incremental) decides every cycle exactly as a
full rebuild of the same objects: random event sequences (jobs arriving, pods finishing or deleted, PodGroups
replaced or deleted, nodes cordoned), each cycle's decisions applied as the simulator applies them, and every
cycle's whole result (binds, pipelined placements, evictions, statuses, queues, nodes, nominations) compared."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.cluster.store import annotated_pod_group, bound_pod, nominated_pod
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NS = "t"
QUEUES = ("a", "b", "c")
Obj = dict[str, Any]


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(i: int, unschedulable: bool = False) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4", "pods": "20"}}}


def _queue(name: str, parent: str | None, quota: float, created: bool = True) -> Obj:
    res = {"gpu": {"quota": quota, "overQuotaWeight": 1, "limit": -1},
           "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
           "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}
    spec: Obj = {"resources": res}
    if parent:
        spec["parentQueue"] = parent
    meta = {"name": name, "creationTimestamp": _ts(T0)} if created else {"name": name}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec}


def _job(name: str, queue: str, pods: int, gpus: int, fraction: bool, priority: str, now: datetime) -> list[Obj]:
    group: Obj = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                  "metadata": {"name": name, "namespace": NS, "creationTimestamp": _ts(now)},
                  "spec": {"queue": queue, "minMember": pods, "priorityClassName": priority}}
    out = [group]
    for k in range(pods):
        annotations = {"pod-group-name": name}
        if fraction:
            annotations["gpu-fraction"] = "0.5"
            resources: Obj = {"requests": {"cpu": "1", "memory": "4Gi"}}
        else:
            resources = {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
                         "limits": {"nvidia.com/gpu": str(gpus)}}
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{k}", "namespace": NS, "uid": f"{name}-{k}-{now.timestamp():.0f}",
                                 "creationTimestamp": _ts(now), "annotations": annotations},
                    "spec": {"schedulerName": "kai-scheduler",
                             "containers": [{"name": "c", "image": "x", "resources": resources}]},
                    "status": {"phase": "Pending"}})
    return out


def _start(config: SchedulerConfig) -> ParsedObjects:
    objs = [_node(i) for i in range(4)]
    # (queue c without a creation time: each cycle creates it at its clock)
    objs += [_queue("top", None, 16), _queue("a", "top", 6), _queue("b", "top", 6), _queue("c", "top", 4, False)]
    return prepare(parse_objects(objs), config, T0)


JOB = st.tuples(st.just("job"), st.sampled_from(QUEUES), st.integers(1, 3), st.integers(1, 4), st.booleans(),
                st.sampled_from(("train", "build")))
EVENT = st.one_of(
    JOB, JOB, JOB,
    st.tuples(st.sampled_from(("finish", "delete", "delete-group", "replace-group")), st.integers(0, 1000)),
    st.tuples(st.just("cordon"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("reap")), st.tuples(st.just("reap")),
)


def _apply_events(parsed: ParsedObjects, events: list[tuple[Any, ...]], config: SchedulerConfig, now: datetime,
                  serial: int) -> ParsedObjects:
    nodes, pods, groups = list(parsed.nodes), list(parsed.pods), list(parsed.pod_groups)
    for n, event in enumerate(events):
        kind = event[0]
        if kind == "job":
            _, queue, count, gpus, fraction, priority = event
            new = prepare(parse_objects(_job(f"j{serial}-{n}", queue, count, gpus, fraction, priority, now)),
                          config, now)
            pods += new.pods
            groups += new.pod_groups
        elif kind == "cordon":
            i = event[1]
            nodes = [parse_objects([_node(i, event[2])]).nodes[0] if node.meta.name == f"n{i}" else node
                     for node in nodes]
        elif kind == "finish":
            running = [i for i, p in enumerate(pods) if p.phase == "Running"]
            if running:
                i = running[event[1] % len(running)]
                pods[i] = replace(pods[i], phase="Succeeded")
        elif kind == "reap":  # the evicted pods are gone
            pods = [p for p in pods if p.meta.deletion_timestamp is None]
        elif kind == "delete" and pods:
            del pods[event[1] % len(pods)]
        elif kind in ("delete-group", "replace-group") and groups:
            i = event[1] % len(groups)
            pg = groups[i]
            if kind == "replace-group":  # the same PodGroup as a new object (a write the scheduler did not make)
                groups[i] = replace(pg, meta=replace(pg.meta, labels={**pg.meta.labels, "touched": str(serial)}))
            else:
                del groups[i]
                pods = [p for p in pods if p.meta.annotations.get("pod-group-name") != pg.meta.name]
    return ParsedObjects(nodes=nodes, pods=pods, queues=parsed.queues, pod_groups=groups,
                         priority_classes=parsed.priority_classes, topologies=parsed.topologies)


def _applied(parsed: ParsedObjects, result: CycleResult, now: datetime, binds: bool = True) -> ParsedObjects:
    """The objects after the cycle, as the embedded cluster holds them: bound pods run (``binds``: else the binds
    are still in flight: the next cycle sees the same pods), evicted pods are terminating (until a ``reap`` event
    deletes them), the pods' nominated nodes and the PodGroups' timestamps written."""
    pods = list(parsed.pods)
    index = {f"{p.meta.namespace}/{p.meta.name}": i for i, p in enumerate(pods)}
    for b in result.binds if binds else ():
        i = index[b.pod]
        pods[i] = replace(bound_pod(pods[i], b), meta=replace(pods[i].meta, creation_timestamp=now))
    for e in result.evictions:
        i = index[e.pod]
        if pods[i].meta.deletion_timestamp is None:
            pods[i] = replace(pods[i], meta=replace(pods[i].meta, deletion_timestamp=now))
    for n in result.nominations:
        if n.pod in index:
            i = index[n.pod]
            pods[i] = nominated_pod(pods[i], n.node)
    statuses = {s.name: s for s in result.pod_groups}
    groups = [annotated_pod_group(g, statuses[k]) if (k := f"{g.meta.namespace}/{g.meta.name}") in statuses else g
              for g in parsed.pod_groups]
    return ParsedObjects(nodes=parsed.nodes, pods=pods, queues=parsed.queues, pod_groups=groups,
                         priority_classes=parsed.priority_classes, topologies=parsed.topologies)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(EVENT, min_size=0, max_size=6), st.booleans()), min_size=2, max_size=8))
def test_every_incremental_cycle_decides_as_a_rebuilt_one(steps: list[tuple[list[tuple[Any, ...]], bool]]) -> None:
    config = resolve_config(None)  # KAI's five actions
    parsed = _start(config)
    state = IncrementalState()
    now = T0
    for serial, (events, binds) in enumerate(steps):
        now += timedelta(seconds=10)
        parsed = _apply_events(parsed, events, config, now, serial)
        incremental = run_prepared_cycle(parsed, config, now, state=state)
        rebuilt = run_prepared_cycle(parsed, config, now)
        assert incremental == rebuilt, f"cycle {serial}"
        parsed = _applied(parsed, incremental, now, binds)
    assert state.full_builds + state.updates == len(steps)


def test_unchanged_and_changed_objects_are_updated_not_rebuilt() -> None:
    """Pods arriving, binding and finishing are applied to the kept model (no full build after the first); a node
    change is not (a full build, kept again)."""
    config = resolve_config(None)
    parsed = _start(config)
    state = IncrementalState()
    now = T0
    for serial in range(4):
        now += timedelta(seconds=10)
        events: list[tuple[Any, ...]] = [("job", "a", 2, 1, False, "train"), ("job", "b", 1, 2, False, "build"),
                                         ("job", "c", 1, 1, True, "train"), ("finish", serial)]
        parsed = _apply_events(parsed, events, config, now, serial)
        result = run_prepared_cycle(parsed, config, now, state=state)
        assert result == run_prepared_cycle(parsed, config, now)
        assert result.binds
        parsed = _applied(parsed, result, now)
    assert (state.full_builds, state.updates) == (1, 3)
    now += timedelta(seconds=10)
    parsed = _apply_events(parsed, [("cordon", 1, True)], config, now, 9)
    assert run_prepared_cycle(parsed, config, now, state=state) == run_prepared_cycle(parsed, config, now)
    assert (state.full_builds, state.updates) == (2, 3)
