"""The victim solver and the eviction actions end to end (spec 4.9-4.12)."""

from __future__ import annotations

from typing import Any

import kaisched
from tests.unit.builders import NOW, flatten, job, node, pod, pod_group, queue, status


def running(name: str, node_name: str, gpus: int, *, q: str = "q", n: int = 1, min_member: int | None = None,
            priority_class: str = "train", created: str = "2025-01-01T00:00:00Z") -> list[dict[str, object]]:
    out = [pod_group(name, queue=q, min_member=n if min_member is None else min_member,
                     priority_class=priority_class, created=created)]
    out += [pod(f"{name}-{i}", group=name, gpus=gpus, node=node_name, created=created) for i in range(n)]
    return out


def run(objs: list[dict[str, object]], actions: str) -> kaisched.CycleResult:
    return kaisched.schedule(objs, config={"actions": actions}, now=NOW)


def evicted(result: kaisched.CycleResult) -> list[str]:
    return sorted(e.pod for e in result.evictions)


def test_preempt_takes_the_lowest_priority_newest_job_first_and_pipelines_the_preemptor() -> None:
    objs = flatten(
        node("a", 2), queue("q"),
        running("old", "a", 1, created="2025-01-01T00:00:00Z"),
        running("new", "a", 1, created="2025-01-01T01:00:00Z"),
        job("urgent", 1, gpus=1, priority_class="build-preemptible", created="2025-01-01T02:00:00Z"),
    )
    result = run(objs, "preempt")
    assert evicted(result) == ["default/new-0"]
    assert [p.pod for p in result.pipelined] == ["default/urgent-0"]
    e = result.evictions[0]
    assert (e.action, e.preemptor) == ("preempt", "default/urgent")
    assert e.message == "Pod default/new-0 was preempted by higher priority workload default/urgent"
    g = status(result, "urgent")
    assert (g.status, g.reason) == ("Pipelined", "WaitingForVictims")
    assert "default/new-0" in g.message


def test_preempt_never_takes_equal_priority_or_non_preemptible_work() -> None:
    objs = flatten(
        node("a", 2), queue("q"),
        running("peer", "a", 1),
        running("serving", "a", 1, priority_class="inference"),
        job("urgent", 1, gpus=1, priority_class="train"),
    )
    assert run(objs, "preempt").evictions == []
    objs = flatten(node("a", 1), queue("q"), running("serving", "a", 1, priority_class="build"),
                   job("top", 1, gpus=1, priority_class="inference"))
    assert run(objs, "preempt").evictions == []


def test_node_affinity_filter_only_evicts_where_the_preemptor_may_run() -> None:
    objs = flatten(
        node("a", 1, labels={"zone": "x"}), node("b", 1, labels={"zone": "y"}), queue("q"),
        running("on-a", "a", 1, created="2025-01-01T01:00:00Z"),  # newest: the first victim candidate
        running("on-b", "b", 1, created="2025-01-01T00:00:00Z"),
        job("urgent", 1, gpus=1, priority_class="build-preemptible", node_selector={"zone": "y"}),
    )
    result = run(objs, "preempt")
    assert evicted(result) == ["default/on-b-0"]
    assert [(p.pod, p.node) for p in result.pipelined] == [("default/urgent-0", "b")]


def test_a_gang_victim_is_evicted_whole() -> None:
    objs = flatten(
        node("a", 1), node("b", 1), queue("q"),
        running("gang", "a", 1, n=1) ,
    )
    # a 2-pod gang spread over both nodes; the preemptor needs one GPU
    objs = flatten(
        node("a", 1), node("b", 1), queue("q"),
        pod_group("gang", min_member=2), pod("gang-0", group="gang", gpus=1, node="a"),
        pod("gang-1", group="gang", gpus=1, node="b"),
        job("urgent", 1, gpus=1, priority_class="build-preemptible"),
    )
    result = run(objs, "preempt")
    assert evicted(result) == ["default/gang-0", "default/gang-1"]
    assert len(result.pipelined) == 1


def test_an_elastic_victim_loses_its_surplus_pod_only() -> None:
    objs = flatten(
        node("a", 2), queue("q"),
        pod_group("elastic", min_member=1), pod("elastic-0", group="elastic", gpus=1, node="a"),
        pod("elastic-1", group="elastic", gpus=1, node="a"),
        job("urgent", 1, gpus=1, priority_class="build-preemptible"),
    )
    result = run(objs, "preempt")
    assert evicted(result) == ["default/elastic-1"]


def test_consolidation_moves_a_pod_to_make_room_and_evicts_nobody_for_good() -> None:
    objs = flatten(
        node("a", 4), node("b", 4), queue("q"),
        running("left", "a", 2, created="2025-01-01T00:00:00Z"),
        running("right", "b", 2, created="2025-01-01T01:00:00Z"),
        job("big", 1, gpus=4, created="2025-01-01T02:00:00Z"),
    )
    result = run(objs, "consolidation")
    assert evicted(result) == ["default/right-0"]
    moved = {p.pod: p.node for p in result.pipelined}
    assert moved == {"default/right-0": "a", "default/big-0": "b"}
    assert "bin packing" in result.evictions[0].message


def test_consolidation_does_nothing_when_the_victim_cannot_be_moved() -> None:
    objs = flatten(
        node("a", 4), node("b", 4), queue("q"),
        running("left", "a", 3), running("right", "b", 3),
        job("big", 1, gpus=2),
    )
    result = run(objs, "consolidation")
    assert result.evictions == [] and result.pipelined == []


def test_consolidation_is_disabled_by_zero_preemptees() -> None:
    objs = flatten(
        node("a", 4), node("b", 4), queue("q"),
        running("left", "a", 2), running("right", "b", 2, created="2025-01-01T01:00:00Z"),
        job("big", 1, gpus=4, created="2025-01-01T02:00:00Z"),
    )
    result = kaisched.schedule(objs, config={"actions": "consolidation",
                                             "params": {"max-consolidation-preemptees": 0}}, now=NOW)
    assert result.evictions == []


def test_reclaim_takes_from_the_queue_over_its_share_with_kai_message() -> None:
    objs = flatten(
        node("a", 4),
        queue("greedy", gpu=0, gpu_weight=0), queue("owner", gpu=4),
        running("g1", "a", 2, q="greedy", created="2025-01-01T00:00:00Z"),
        running("g2", "a", 2, q="greedy", created="2025-01-01T01:00:00Z"),
        job("mine", 1, gpus=2, queue="owner", created="2025-01-01T02:00:00Z"),
    )
    result = run(objs, "reclaim")
    assert evicted(result) == ["default/g2-0"]
    e = result.evictions[0]
    assert e.action == "reclaim" and e.preemptor == "default/mine"
    assert e.message.startswith("Pod default/g2-0 was preempted by workload default/mine.\ngreedy uses <GPU: 4")
    assert [p.pod for p in result.pipelined] == ["default/mine-0"]


def test_reclaim_never_takes_from_a_queue_within_its_fair_share() -> None:
    objs = flatten(
        node("a", 4),
        queue("a-team", gpu=2), queue("b-team", gpu=2),
        running("a1", "a", 2, q="a-team"), running("b1", "a", 2, q="b-team"),
        job("more", 1, gpus=2, queue="a-team"),
    )
    assert run(objs, "reclaim").evictions == []


def test_min_runtime_protects_freshly_started_victims() -> None:
    protected = pod_group("fresh", queue="greedy", created="2025-01-01T11:00:00Z")
    protected["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2025-01-01T11:59:00Z"}
    greedy = queue("greedy", gpu=0, gpu_weight=0)
    greedy["spec"]["reclaimMinRuntime"] = "10m"
    objs = flatten(
        node("a", 2), greedy, queue("owner", gpu=2), protected,
        pod("fresh-0", group="fresh", gpus=2, node="a"),
        job("mine", 1, gpus=2, queue="owner"),
    )
    assert run(objs, "reclaim").evictions == []
    greedy["spec"]["reclaimMinRuntime"] = "30s"
    assert evicted(run(objs, "reclaim")) == ["default/fresh-0"]


def test_stale_gang_is_evicted_after_the_grace_period() -> None:
    pg = pod_group("broken", min_member=2)
    pg["metadata"]["annotations"] = {"kai.scheduler/stale-podgroup-timestamp": "2025-01-01T11:58:00Z"}
    objs = flatten(node("a", 2), queue("q"), pg, pod("broken-0", group="broken", gpus=1, node="a"),
                   pod("broken-1", group="broken", gpus=1, phase="Failed"))
    result = run(objs, "stalegangeviction")
    assert evicted(result) == ["default/broken-0"]
    assert result.evictions[0].preemptor is None or result.evictions[0].preemptor == ""


def test_full_cycle_is_deterministic_with_evictions() -> None:
    objs = flatten(
        node("a", 4), node("b", 4),
        queue("greedy", gpu=0, gpu_weight=0), queue("owner", gpu=4),
        *[running(f"g{i}", "ab"[i % 2], 2, q="greedy", created=f"2025-01-01T0{i}:00:00Z") for i in range(4)],
        job("mine", 2, gpus=2, queue="owner", created="2025-01-01T09:00:00Z"),
    )
    first = kaisched.schedule(objs, now=NOW).to_dict()
    assert first == kaisched.schedule(objs, now=NOW).to_dict()
    assert len(first["evictions"]) == 2 and len(first["pipelined"]) == 2


# ---- the moves-only packing relaxation (consolidation) ------------------------------------------------
def _packing_session(*objs: object) -> tuple[object, dict[str, object]]:
    from kaisched.actions.solver import MovePacking
    from kaisched.cluster.schedule import resolve_config
    from kaisched.framework.session import Session
    from kaisched.k8s.parse import parse_objects
    from kaisched.model.snapshot import build_snapshot
    from kaisched.plugins.registry import build_plugins

    cfg = resolve_config(None)
    ssn = Session(build_snapshot(parse_objects(flatten(*objs)), NOW), cfg, build_plugins(cfg.plugins))  # type: ignore[arg-type]
    ssn.open()
    return MovePacking(ssn), {t.name: t for t in ssn.snapshot.tasks.values()}


def test_packing_rejects_moves_that_have_nowhere_to_go_and_keeps_every_feasible_one() -> None:
    full = [pod(f"small-{i}", gpus=1, node="a") for i in range(8)]  # node a: 8 x 1 GPU, nothing idle
    packing, tasks = _packing_session(node("a", 8), node("b", 8), queue("q"), full,
                                      pod("big", gpus=6, node="b"), pod("p", gpus=8))
    smalls = [tasks[f"small-{i}"] for i in range(8)]
    # P (8 GPUs) could only go where the 8 small pods are; they need 8 GPUs elsewhere, node b has 2
    assert not packing.could_pack([tasks["p"]], smalls)  # type: ignore[attr-defined]
    # with the big pod moved instead, it needs 6 GPUs elsewhere: there are none either (a is full)
    assert not packing.could_pack([tasks["p"]], [tasks["big"]])  # type: ignore[attr-defined]
    # a 2-GPU pod fits into node b's idle 2 without moving anyone
    packing, tasks = _packing_session(node("a", 8), node("b", 8), queue("q"), full,
                                      pod("big", gpus=6, node="b"), pod("p", gpus=2))
    assert packing.could_pack([tasks["p"]], [])  # type: ignore[attr-defined]


def test_packing_lets_a_move_with_room_through() -> None:
    """Idle 6 on a, 4 on b; a 4-GPU preemptor moving two 3-GPU pods off node c: 4 and 3 + 3 fit (a relaxation
    only rejects what cannot fit by GPUs)."""
    packing, tasks = _packing_session(
        node("a", 8), node("b", 8), queue("q"), pod("x", gpus=2, node="a"), pod("y", gpus=4, node="b"),
        pod("m1", gpus=3, node="c"), pod("m2", gpus=3, node="c"), node("c", 6), pod("p", gpus=4))
    assert packing.could_pack([tasks["p"]], [tasks["m1"], tasks["m2"]])  # type: ignore[attr-defined]


def test_a_fraction_with_no_shared_room_needs_a_whole_device() -> None:
    frac = pod("p", gpus=0)
    frac["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    packing, tasks = _packing_session(node("a", 1), node("b", 1), queue("q"), pod("v", gpus=1, node="a"),
                                      pod("w", gpus=1, node="b"), frac)
    # moving v frees a's device for P, and v then needs a whole device: b's is taken
    assert not packing.could_pack([tasks["p"]], [tasks["v"]])  # type: ignore[attr-defined]
    packing, tasks = _packing_session(node("a", 1), node("b", 1), queue("q"), pod("v", gpus=1, node="a"), frac)
    assert packing.could_pack([tasks["p"]], [tasks["v"]])  # type: ignore[attr-defined]


# ---- warm simulations: only where the accounting is exact -----------------------------------------------
def _session(*objs: object) -> object:
    from kaisched.cluster.schedule import resolve_config
    from kaisched.framework.session import Session
    from kaisched.k8s.parse import parse_objects
    from kaisched.model.snapshot import build_snapshot
    from kaisched.plugins.registry import build_plugins

    cfg = resolve_config(None)
    ssn = Session(build_snapshot(parse_objects(flatten(*objs)), NOW), cfg, build_plugins(cfg.plugins))  # type: ignore[arg-type]
    ssn.open()
    return ssn


def _shared(name: str, annotations: dict[str, str], node_name: str | None = None) -> list[dict[str, object]]:
    p = pod(name, group=name, node=node_name)
    p["metadata"]["annotations"] = annotations
    return [pod_group(name), p]


def test_accounting_is_exact_with_whole_gpus_and_binary_fractions_only() -> None:
    from kaisched.actions.warm import exact_accounting

    base = (node("a", 4), queue("q"), running("w", "a", 2))
    assert exact_accounting(_session(*base))  # type: ignore[arg-type]
    assert exact_accounting(_session(*base, _shared("half", {"gpu-fraction": "0.5"}, "a")))  # type: ignore[arg-type]
    # a tenth of a GPU is no binary fraction: queue sums then depend on their order
    assert not exact_accounting(_session(*base, _shared("tenth", {"gpu-fraction": "0.1"}, "a")))  # type: ignore[arg-type]
    # GPU memory: the GPUs it counts for depend on the node
    assert not exact_accounting(_session(*base, _shared("mem", {"gpu-memory": "1000"})))  # type: ignore[arg-type]
    # a fraction of a byte: neither
    assert not exact_accounting(_session(*base, pod("odd", group="w", memory="0.1")))  # type: ignore[arg-type]


def test_sums_are_exact_below_2_to_the_53_units_of_the_values_common_power_of_two() -> None:
    import numpy as np

    from kaisched.actions.warm import _on_grid

    tib = 2.0**40
    memory = np.array([tib, 64 * 2.0**30, 2.0**35])  # bytes, all multiples of 2**35
    # a bound above 2**53 bytes is still far below 2**53 units of 2**35 bytes: exact (the 5,000-node busy cluster)
    assert _on_grid(memory, 2.0**54)
    assert not _on_grid(memory, 2.0**88)
    # one odd byte makes the unit 1: the same bound is then too large
    assert not _on_grid(np.append(memory, 3.0), 2.0**54)
    assert _on_grid(np.append(memory, 3.0), 2.0**52)
    # binary fractions: the unit is 1/1024 at the finest, and below it nothing is exact
    assert _on_grid(np.array([0.25, 0.5, 8.0]), 2.0**50)
    assert not _on_grid(np.array([0.25, 0.5, 8.0]), 2.0**52)
    assert not _on_grid(np.array([2.0**-11]), 1.0)
    assert _on_grid(np.zeros(3), 0.0)
    # exactness itself: sums of such values in any order agree
    values = [tib * 3, 2.0**30, -tib, 2.0**31 * 7]
    assert sum(values) == sum(reversed(values)) == sum(sorted(values))


def test_common_prefix_compares_by_identity() -> None:
    from kaisched.framework.scenario import common_prefix

    a, b, c, d = object(), object(), object(), object()
    assert common_prefix([a, b, c], [a, b, c]) == 3
    assert common_prefix([a, b, c], [a, b]) == 2
    assert common_prefix([a, b, c], [a, d, c]) == 1
    assert common_prefix([a, b], [d]) == 0
    assert common_prefix([], [a]) == 0
    assert common_prefix([a, b, c, d], [a, b, c, a]) == 3


def test_a_victim_in_a_queue_that_does_not_exist_is_judged_by_simulation_not_proofs() -> None:
    """A running job whose queue does not exist (an input error) holds the only GPU: the proofs of failure, which
    reason about the queue order, leave its scenarios to the simulation (they used to walk its queue's ancestors
    and fail with a KeyError), and the cycle decides as the full search does."""
    from tests.property.test_fast_paths import shortcut_off

    objs = flatten(
        node("n0", 1), queue("q0", gpu_weight=0), queue("q1", gpu_weight=0),
        pod_group("g0", queue="ghost"), pod("g0-0", group="g0", gpus=0, node="n0"),
        pod("g0-1", group="g0", gpus=1, node="n0"),
        job("p", 1, queue="q0", gpus=1),
    )
    fast = kaisched.schedule(objs, None, NOW)
    with shortcut_off("prove_failures"):
        full = kaisched.schedule(objs, None, NOW)
    assert fast.to_dict() == full.to_dict()
    assert [(e.object, e.field) for e in fast.errors] == [("PodGroup default/g0", "spec.queue")]
    assert status(fast, "p").status == "Pending"


def _stay_evicted(objs: tuple[object, ...], preemptor: str, victims: list[str], mask_nodes: list[str]) -> bool:
    import numpy as np

    from kaisched.actions.settled_victims import victims_stay_evicted

    ssn: Any = _session(*objs)
    tasks = {t.name: t for t in ssn.snapshot.tasks.values()}
    names = list(ssn.nodes.names)
    mask = np.array([n in mask_nodes for n in names], dtype=np.bool_)
    return victims_stay_evicted(ssn.nodes, [tasks[preemptor]], [tasks[v] for v in victims], mask)


def test_victims_stay_evicted_when_none_fits_beside_the_preemptor() -> None:
    base = (node("a", 2), node("b", 2), queue("q"), running("w", "a", 2), running("x", "b", 1))
    pending = (pod_group("p", queue="q"), pod("p-0", group="p", gpus=2))
    # w's 2 GPUs on a go to P; b has 1 free: w fits nowhere beside P
    assert _stay_evicted((*base, *pending), "p-0", ["w-0"], ["a", "b"])
    # nodes the simulation may not use do not count, nor do GPUs no node holds alone
    assert _stay_evicted((*base, *pending), "p-0", ["w-0"], ["a"])
    # b with 2 free GPUs: w could be placed there while P takes a
    free_b = (node("a", 2), node("b", 2), queue("q"), running("w", "a", 2))
    assert not _stay_evicted((*free_b, *pending), "p-0", ["w-0"], ["a", "b"])
    # 1-GPU pods on one node: a victim fits beside P only when two GPUs are free there
    small = (node("a", 2), queue("q"), running("w", "a", 1), running("v", "a", 1),
             pod_group("p", queue="q"), pod("p-0", group="p", gpus=1))
    assert _stay_evicted(small, "p-0", ["w-0"], ["a"])  # a: 1 free after w goes, P takes it
    assert not _stay_evicted(small, "p-0", ["w-0", "v-0"], ["a"])  # 2 free: P and one victim


def test_victims_stay_evicted_answers_no_where_it_cannot_tell() -> None:
    base = (node("a", 2), queue("q"), running("g", "a", 1, n=2, min_member=2))
    pending = (pod_group("p", queue="q"), pod("p-0", group="p", gpus=1))
    # one pod of a gang at its minimum: the gang is broken and evicted whole, more victims than listed
    assert not _stay_evicted((*base, *pending), "p-0", ["g-0"], ["a"])
    # the whole gang: nothing left to break
    assert _stay_evicted((*base, pod_group("p", queue="q"), pod("p-0", group="p", gpus=2)), "p-0",
                         ["g-0", "g-1"], ["a"])
    # a fraction: shared devices are not counted
    frac = (node("a", 2), queue("q"), running("w", "a", 2), *_shared("half", {"gpu-fraction": "0.5"}))
    assert not _stay_evicted(frac, "half", ["w-0"], ["a"])


def test_the_loop_filter_orders_a_victim_as_it_stands_once_evicted() -> None:
    from kaisched.model.status import TaskStatus

    ssn: Any = _session(node("a", 4), queue("q"), running("g", "a", 1, n=2, min_member=1), running("w", "a", 1))
    job_g = ssn.jobs["default/g"]
    rules = next(p for p in ssn.plugins if p.name == "proportion").reclaim
    running_key = ssn.job_order_key(job_g)
    both = list(job_g.tasks)
    # above its minimum while running (elastic rank 2), below it once both pods are evicted (rank 0): first
    assert rules._key_without(job_g, both) < running_key
    assert all(t.status is TaskStatus.RUNNING for t in job_g.tasks)  # restored
