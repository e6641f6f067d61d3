"""The placement and eviction-action shortcuts of the scale work (issue 9) change no decision: with each of
them replaced by the plain computation it stands for, random eviction clusters and the scale benchmark's
cluster are scheduled exactly alike (binds, pipelined pods, evictions, every status message).

* new shared devices per node remembered until the accounting changes, then figured again on the changed
  nodes only (``NodeTable.new_devices``);
* "fits on idle resources" computed on the candidate nodes only (``NodeTable.fits_task_at``);
* the fit-error histogram counted with ``bincount`` (the plain version: ``np.unique``);
* failure keys numbered once per session and shared by the queues, and by pods of other labels where no
  anti-affinity reads them (``placement.failure_key``; the plain version: the task's whole spec — queue,
  preemptibility, labels and namespace included — built on every call);
* a failed task shape checked again on the nodes changed since it failed, its histogram counted anew there
  (``placement.recheck_failure``; the plain version: every node evaluated, the histogram counted afresh);
* the job queue's leaves kept as a sorted run plus a heap of later pushes (the plain version: one heap);
* binpack asked for its first node directly when every other node scorer is neutral for the task
  (``Session.ranked_node``; the plain version: every scorer on every candidate, the first maximum of the sum);
* tasks alike placed from one fit and one ranking per task shape (``actions.batched``; the plain version: each task
  fitted and scored on its own, ``one_at_a_time()``);
* an eviction action where no job passes the quick checks returns before ordering the jobs
  (``EvictingAction.nothing_to_do``; the plain version: every job popped and skipped);
* the eviction actions' per-commit state shared by the three actions (``Session.eviction_state``), and the
  signatures, victim candidacy and lowest victim priority remembered per job version / per commit.
"""

from __future__ import annotations

import datetime
import heapq
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given

from kaisched.actions import evicting, placement
from kaisched.actions.batched import BATCHING, one_at_a_time
from kaisched.actions.evicting import EvictingAction, PreemptAction
from kaisched.actions.job_queue import Entry, JobsQueue
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.session import Session
from kaisched.k8s.parse import parse_objects
from kaisched.model.gpu import GpuKind
from kaisched.model.job import PodGroupInfo
from kaisched.model.node import IntArray, NodeTable
from kaisched.model.snapshot import build_snapshot
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.registry import build_plugins
from tests.property.test_eviction_invariants import (
    ACTION_CONFIGS,
    NOW,
    SETTINGS,
    Cluster,
    GroupSpec,
    NodeSpec,
    PodSpec,
    QueueSpec,
    eviction_clusters,
)
from tests.property.test_fast_paths import busy_cluster_decides_alike, decide_alike


def _plain_new_devices(self: NodeTable, task: TaskInfo, *, with_releasing: bool) -> IntArray:
    free, slots = self.new_gpu_slots(task, with_releasing=with_releasing)
    out: IntArray = np.minimum(free, slots)
    return out


def _plain_fits_task_at(self: NodeTable, task: TaskInfo, indices: IntArray, *, with_releasing: bool
                        ) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = self.fits_task(task, with_releasing=with_releasing)[indices]
    return out


def _plain_histogram(ssn: Session, task: TaskInfo, codes: npt.NDArray[np.int32] | None) -> str:
    """The fit-error histogram as first written (``np.unique`` over every node)."""
    nodes = ssn.nodes
    reasons: Counter[str] = Counter()
    if codes is not None:
        for code, count in zip(*np.unique(codes[codes > 0], return_counts=True), strict=True):
            reasons[ssn.reason_text(int(code))] += int(count)
        open_nodes = codes == 0
    else:
        open_nodes = np.ones(len(nodes), dtype=np.bool_)
    if open_nodes.any():
        avail = nodes.idle + nodes.releasing
        lacking = [(nodes.resources.describe(int(r)), avail[r] < task.req[r] - 1e-9)
                   for r in np.flatnonzero(task.req > 0)]
        if task.gpu.shared:
            lacking.append(("GPU memory" if task.gpu.kind is GpuKind.MEMORY else "GPUs",
                            ~nodes.shared_gpu_fit(task, with_releasing=True)))
        if lacking:
            bits = np.zeros(int(open_nodes.sum()), dtype=np.int64)
            for i, (_, mask) in enumerate(lacking):
                bits |= mask[open_nodes].astype(np.int64) << i
            names = [name for name, _ in lacking]
            values, counts = np.unique(bits[bits > 0], return_counts=True)
            for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                what = ", ".join(names[i] for i in range(len(lacking)) if value >> i & 1)
                reasons[f"node(s) didn't have enough resources: {what}"] += count
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"{placement.NO_NODES}: " + ". \n".join(parts) + "."


def _plain_text(self: placement.FitHistogram, ssn: Session, task: TaskInfo,
                codes: npt.NDArray[np.int32] | None) -> str:
    return _plain_histogram(ssn, task, codes)


def _plain_failure_key(ssn: Session, task: TaskInfo, pipeline_only: bool, explain: bool) -> tuple[object, ...]:
    job = task.job
    spec = (task.signature, task.gpu, task.req.tobytes(), task.host_ports, repr(task.pod.affinity), task.namespace,
            tuple(sorted(task.labels.items())), job.queue if job else "", job.preemptible if job else True)
    return (spec, pipeline_only, explain)


def _never_recheck(ssn: Session, task: TaskInfo, known: placement.FitFailure) -> bool:
    return False


def _own_state_per_action(original: Any) -> Any:
    def execute(self: EvictingAction, ssn: Session) -> None:
        ssn.eviction_state = None  # nothing carried over from the action before
        original(self, ssn)
    return execute


def _plain_victim(job: PodGroupInfo) -> bool:
    """Settled active pods, no bind in flight, and no pod placed by this cycle (one eviction per pod per cycle)."""
    tasks = job.tasks
    return (not any(t.status is TaskStatus.BINDING or t.placed_in_cycle for t in tasks)
            and any(t.is_settled_active for t in tasks))


def _plain_may_have_victims(self: PreemptAction, ssn: Session, job: PodGroupInfo) -> bool:
    return any(v.priority < job.priority for v in self.pool_of_queue(ssn, job.queue))


@contextmanager
def plain_paths() -> Iterator[None]:
    with mock.patch.object(NodeTable, "new_devices", _plain_new_devices), \
            mock.patch.object(NodeTable, "fits_task_at", _plain_fits_task_at), \
            mock.patch.object(placement, "fit_error_histogram", _plain_histogram), \
            mock.patch.object(placement.FitHistogram, "text", _plain_text), \
            mock.patch.object(placement, "recheck_failure", _never_recheck), \
            mock.patch.object(placement, "failure_key", _plain_failure_key), \
            mock.patch.object(evicting, "failure_key", _plain_failure_key), \
            mock.patch.object(EvictingAction, "execute", _own_state_per_action(EvictingAction.execute)), \
            mock.patch.object(PodGroupInfo, "may_be_victim", _plain_victim), \
            mock.patch.object(PreemptAction, "may_have_victims", _plain_may_have_victims), \
            mock.patch.object(EvictingAction, "nothing_to_do", lambda self, ssn, candidates: False), \
            mock.patch.object(Session, "ranked_node", _never_ranked), one_at_a_time():
        yield


def _never_ranked(self: Session, task: TaskInfo, fit: npt.NDArray[np.bool_]) -> int | None:
    return None


def test_the_plain_paths_are_really_swapped_in() -> None:
    with plain_paths():
        assert placement.fit_error_histogram is _plain_histogram
        assert NodeTable.new_devices is _plain_new_devices
        assert placement.recheck_failure is _never_recheck
        assert Session.ranked_node is _never_ranked
        assert not BATCHING.enabled
    assert placement.fit_error_histogram is not _plain_histogram
    assert BATCHING.enabled


# Found by ``make fuzz`` (seed 424345207585006814): reclaim pipelines g7 (q1) onto g2-1's place, and preempt then looks
# for victims for g6 (q1's lower-priority g7 among them). The plain ``may_be_victim`` had not been told that a job
# with a pod placed by this cycle is no victim (one eviction per pod per cycle), and preempted the pipelined g7.
PLACED_PREEMPTOR_PREEMPTED = Cluster(
    nodes=[NodeSpec(name='n0', gpus=2, cpu=64, memory=512), NodeSpec(name='n1', gpus=4, cpu=64, memory=512),
        NodeSpec(name='n2', gpus=5, cpu=64, memory=512), NodeSpec(name='n3', gpus=5, cpu=64, memory=512)],
    queues=[
        QueueSpec(name='d0', parent=None, gpu=-1, gpu_limit=-1, gpu_weight=1, priority=100, preempt_min_runtime=None,
            reclaim_min_runtime=None),
        QueueSpec(name='d1', parent=None, gpu=-1, gpu_limit=-1, gpu_weight=1, priority=100, preempt_min_runtime=None,
            reclaim_min_runtime=None),
        QueueSpec(name='q0', parent='d0', gpu=0, gpu_limit=-1, gpu_weight=0, priority=100, preempt_min_runtime=None,
            reclaim_min_runtime=None),
        QueueSpec(name='q1', parent='d1', gpu=2, gpu_limit=-1, gpu_weight=0, priority=100, preempt_min_runtime=None,
            reclaim_min_runtime=None),
        QueueSpec(name='q2', parent='d0', gpu=2, gpu_limit=4, gpu_weight=1, priority=100, preempt_min_runtime=None,
            reclaim_min_runtime=None),
    ],
    groups=[
        GroupSpec(name='g0', ns='ns0', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g0-0', gpus=1, cpu=1, memory=1, node='n3', deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g1', ns='ns1', queue='q0', min_member=3, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 1, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g1-0', gpus=4, cpu=1, memory=1, node='n2', deleting=False, absent=0, nominated=''),
            PodSpec(name='g1-1', gpus=2, cpu=1, memory=1, node='n0', deleting=False, absent=0, nominated=''),
            PodSpec(name='g1-2', gpus=1, cpu=1, memory=1, node='n3', deleting=False, absent=0, nominated=''),
        ], last_start=datetime.datetime(2025, 1, 1, 11, 59, 55, tzinfo=datetime.UTC), stale_since=None),
        GroupSpec(name='g2', ns='ns0', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 2, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g2-0', gpus=2, cpu=1, memory=1, node='n3', deleting=False, absent=0, nominated=''),
            PodSpec(name='g2-1', gpus=2, cpu=1, memory=1, node='n1', deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g3', ns='ns1', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 3, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g3-0', gpus=3, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g4', ns='ns0', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 4, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g4-0', gpus=1, cpu=1, memory=1, node='n2', deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g5', ns='ns1', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 5, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g5-0', gpus=4, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
            PodSpec(name='g5-1', gpus=4, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g6', ns='ns0', queue='q2', min_member=2, priority_class='build-preemptible',
            preemptibility=None, created=datetime.datetime(2025, 1, 1, 11, 0, 6, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g6-0', gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
            PodSpec(name='g6-1', gpus=2, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g7', ns='ns1', queue='q2', min_member=2, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 7, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g7-0', gpus=2, cpu=1, memory=1, node='n1', deleting=False, absent=0, nominated=''),
            PodSpec(name='g7-1', gpus=1, cpu=1, memory=1, node='n3', deleting=False, absent=0, nominated=''),
            PodSpec(name='g7-2', gpus=1, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
        GroupSpec(name='g8', ns='ns0', queue='q0', min_member=1, priority_class='train', preemptibility=None,
            created=datetime.datetime(2025, 1, 1, 11, 0, 8, tzinfo=datetime.UTC), pods=[
            PodSpec(name='g8-0', gpus=2, cpu=1, memory=1, node=None, deleting=False, absent=0, nominated=''),
        ], last_start=None, stale_since=None),
    ],
    default_preempt='0s', default_reclaim='0s', resolve_method='lca', claims=True)


@SETTINGS
@example(cluster=PLACED_PREEMPTOR_PREEMPTED, actions=None)
@given(eviction_clusters(), ACTION_CONFIGS)
def test_fast_paths_decide_as_the_plain_ones(cluster: Cluster, actions: str | None) -> None:
    decide_alike(cluster, actions, plain_paths)


@pytest.mark.parametrize("nodes", [30, 80])
def test_fast_paths_decide_as_the_plain_ones_on_a_busy_cluster(nodes: int) -> None:
    """Fractions, gangs, thousands of failed fits."""
    busy_cluster_decides_alike(nodes, plain_paths)


@pytest.mark.interpreted
def test_failures_past_the_recheck_cap_keep_no_arrays_and_decide_alike() -> None:
    """Only the first ``RECHECKABLE_FAILURES`` failed shapes of a session keep their per-node arrays; the others
    are answered while nothing changes and evaluated in full after a change, with the same decisions."""
    kept: list[int] = []
    close = Session.close

    def counting_close(self: Session) -> Any:
        failures = [f for f in self.fit_failures.values() if isinstance(f, placement.FitFailure)]
        kept.append(sum(1 for f in failures if f.recheckable))
        assert all(f.codes is None and f.histogram is None for f in failures if not f.recheckable)
        assert len(failures) > 3
        return close(self)

    @contextmanager
    def small_cap() -> Iterator[None]:
        with mock.patch.object(placement, "RECHECKABLE_FAILURES", 3), \
                mock.patch.object(Session, "close", counting_close):
            yield

    busy_cluster_decides_alike(60, small_cap)
    assert kept and max(kept) <= 3


@pytest.mark.interpreted
def test_preempt_with_no_lower_priority_work_orders_no_jobs() -> None:
    """Every pending and running job at one priority: preempt returns before building a job queue (and decides
    what popping and skipping every job decided)."""
    from benchmarks.scale import ScaleSize, scale_cluster

    cfg = resolve_config({"actions": "allocate, preempt"})
    objs = prepare(parse_objects(scale_cluster(ScaleSize(30, 2, 2, 300)).objects), cfg, NOW)
    original = JobsQueue.__init__

    def queues_built() -> tuple[int, dict[str, Any]]:
        built: list[int] = []

        def counting(self: JobsQueue, *args: Any, **kwargs: Any) -> None:
            built.append(1)
            original(self, *args, **kwargs)

        with mock.patch.object(JobsQueue, "__init__", counting):
            result = run_prepared_cycle(objs, cfg, NOW)
        return len(built), result.to_dict()

    quick, decided = queues_built()
    assert quick == 1  # allocate's; none for preempt
    with mock.patch.object(EvictingAction, "nothing_to_do", lambda self, ssn, candidates: False):
        plain, plainly_decided = queues_built()
    assert plain == 2 and plainly_decided == decided


def _as_plain_heaps(queue: JobsQueue) -> JobsQueue:
    """The same queue with every leaf's sorted run moved into its heap: the single heap per leaf it replaced."""
    for node in queue._nodes.values():
        node.heap = node.run[node.next:] + node.heap
        heapq.heapify(node.heap)
        node.run, node.next = [], 0
    return queue


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_job_queue_pops_as_with_one_heap_per_leaf(seed: int) -> None:
    """Sorted runs read from the front plus a heap of later pushes pop in the order one heap per leaf did, with
    jobs pushed back while popping and with ready-made runs (``leaf_heaps``)."""
    from benchmarks.scale import ScaleSize, scale_cluster

    cfg = resolve_config(None)
    objs = prepare(parse_objects(scale_cluster(ScaleSize(20 * seed, 3, seed, 200 * seed)).objects), cfg, NOW)
    ssn = Session(build_snapshot(objs, NOW), cfg, build_plugins(cfg.plugins))
    ssn.open()
    jobs = sorted((j for j in ssn.jobs.values() if j.has_pending()), key=lambda j: j.uid)
    rng = random.Random(seed)
    ready_jobs = rng.sample(jobs, len(jobs) // 3)
    rest = [j for j in jobs if j not in ready_jobs]
    ready: dict[str, list[Entry]] = {}
    for i, job in enumerate(ready_jobs):
        ready.setdefault(job.queue, []).append((ssn.cached_job_order_key(job), -1 - i, job))
    for entries in ready.values():
        entries.sort()
    fast = JobsQueue(ssn, rest, leaf_heaps=ready)
    plain = _as_plain_heaps(JobsQueue(ssn, rest, leaf_heaps=ready))
    popped: list[tuple[str, str]] = []
    while True:
        a, b = fast.pop(), plain.pop()
        assert a is b
        if a is None:
            break
        popped.append((a.uid, a.queue))
        if rng.random() < 0.2:  # pushed back (an elastic job with pods left)
            fast.push(a)
            plain.push(a)
    assert len(popped) > len(jobs)  # every job, and the pushed-back ones again


def _shared_key_cluster(seed: int) -> list[dict[str, Any]]:
    """Queues with and without limits (one whose jobs are non-preemptible), pods of one shape in every queue,
    per-job labels, gpu-memory pods on nodes with known GPU memory and, in half the clusters, running pods with
    a required anti-affinity: everything the shared failure keys leave out or keep in."""
    from tests.unit.builders import node, pod, pod_group, queue

    rng = random.Random(seed)
    objs: list[dict[str, Any]] = []
    for i in range(4):
        objs.append(node(f"n{i}", 4, labels={"nvidia.com/gpu.memory": "16000", "kubernetes.io/hostname": f"n{i}"}))
    names = ["capped", "open", "strict"]
    objs.append(queue("capped", gpu=2, gpu_limit=3))
    objs.append(queue("open", gpu=4))
    objs.append(queue("strict", gpu=2, gpu_limit=6))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    guarded = seed % 2 == 0
    free = [4, 4, 4, 4]
    for i in range(rng.randint(5, 9)):  # running work, preemptible, most of it in the open queue
        gpus = rng.choice([1, 2])
        n = rng.choice([k for k in range(4) if free[k] >= gpus] or [-1])
        if n < 0:
            break
        free[n] -= gpus
        objs.append(pod_group(f"r{i}", queue=rng.choice(["open", "open", "capped"]), priority_class="train"))
        objs.append(pod(f"r{i}-0", group=f"r{i}", gpus=gpus, node=f"n{n}", deleting=rng.random() < 0.15,
                        affinity=anti if guarded and i == 0 else None, labels={"app": rng.choice(["web", "db"])}))
    for i in range(rng.randint(8, 16)):  # pending work, a few shapes shared by every queue
        q = rng.choice(names)
        group = f"p{i}"
        objs.append(pod_group(group, queue=q, priority_class="build" if q == "strict" else "train",
                              created=f"2024-01-01T00:00:{i:02d}Z"))
        p = pod(f"{group}-0", group=group, gpus=0 if (memory := rng.random() < 0.3) else rng.choice([1, 2]),
                labels={"job-name": group, "app": rng.choice(["web", "db"])})
        if memory:
            p["metadata"]["annotations"]["gpu-memory"] = str(rng.choice([4000, 8000]))
        objs.append(p)
    return objs


@pytest.mark.parametrize("seed", range(12))
def test_shared_failure_keys_decide_as_the_whole_spec(seed: int) -> None:
    """The failure keys that leave the queue, preemptibility, labels and namespace out where nothing reads them
    decide every action exactly as the whole spec does."""
    import kaisched

    objs = _shared_key_cluster(seed)
    fast = kaisched.schedule(objs, None, NOW)
    with mock.patch.object(placement, "failure_key", _plain_failure_key), \
            mock.patch.object(evicting, "failure_key", _plain_failure_key):
        plain = kaisched.schedule(objs, None, NOW)
    assert fast.errors == []
    assert fast.to_dict() == plain.to_dict()
