"""GPU sharing (spec 7): fractions, gpu-memory, multi-device fractions, MIG, and what every action does
with shared devices."""

from __future__ import annotations

from typing import Any

import pytest

from kaisched import schedule
from kaisched.k8s.objects import Container, ObjectMeta, Pod
from kaisched.model.gpu import GpuKind, parse_gpu_request

from .builders import NOW, binds, node, pipelined, pod, pod_group, queue, status, tiers

Obj = dict[str, Any]
MIB = "nvidia.com/gpu.memory"


def shared(name: str, *, fraction: float | None = None, memory: int | None = None, devices: int | None = None,
           node_name: str | None = None, gpu_group: str | None = None, q: str = "q", group: str | None = None,
           deleting: bool = False, extra_annotations: dict[str, str] | None = None,
           priority_class: str = "train") -> list[Obj]:
    """A PodGroup and one pod asking for a share of a GPU (Running when ``node_name`` is given)."""
    group = group or name
    p = pod(name, group=group, node=node_name, deleting=deleting)
    ann = p["metadata"]["annotations"]
    if fraction is not None:
        ann["gpu-fraction"] = f"{fraction:g}"
    if memory is not None:
        ann["gpu-memory"] = str(memory)
    if devices is not None:
        ann["gpu-fraction-num-devices"] = str(devices)
    ann.update(extra_annotations or {})
    if gpu_group is not None:
        p["metadata"]["labels"] = {"runai-gpu-group": gpu_group}
    return [pod_group(group, queue=q, priority_class=priority_class), p]


def whole(name: str, gpus: int = 1, *, node_name: str | None = None, q: str = "q") -> list[Obj]:
    return [pod_group(name, queue=q), pod(name, group=name, gpus=gpus, node=node_name)]


def groups_of(result: Any) -> dict[str, tuple[str, ...]]:
    return {b.pod: b.gpu_groups for b in (*result.binds, *result.pipelined)}


def run(*objs: Obj | list[Obj], config: Any = None) -> Any:
    flat: list[Obj] = []
    for o in objs:
        flat.extend(o if isinstance(o, list) else [o])
    return schedule(flat, config, NOW)


def node_gpus(result: Any, name: str) -> Any:
    return next(n for n in result.nodes if n.name == name)


# ------------------------------------------------------------------------------------------ requests
def _pod(annotations: dict[str, str], gpus: int = 0, mig: dict[str, float] | None = None) -> Pod:
    req: dict[str, float] = {"nvidia.com/gpu": float(gpus)} if gpus else {}
    req.update(mig or {})
    return Pod(meta=ObjectMeta(name="p", namespace="ns", annotations=annotations),
               containers=(Container("main", requests=req),))


@pytest.mark.parametrize(("annotations", "gpus", "kind", "count", "portion"), [
    ({}, 2, GpuKind.WHOLE, 2, 0.0),
    ({"gpu-fraction": "0.25"}, 0, GpuKind.FRACTION, 1, 0.25),
    ({"gpu-fraction": "1"}, 0, GpuKind.FRACTION, 1, 1.0),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"}, 0, GpuKind.FRACTION, 3, 0.5),
    ({"gpu-memory": "2048", "gpu-fraction-num-devices": "2"}, 0, GpuKind.MEMORY, 2, 0.0),
    ({"gpu-fraction": "0.5", "mps": "true"}, 0, GpuKind.FRACTION, 1, 0.5),
])
def test_valid_gpu_requests(annotations: dict[str, str], gpus: int, kind: GpuKind, count: int,
                            portion: float) -> None:
    req, err = parse_gpu_request(_pod(annotations, gpus))
    assert err is None
    assert (req.kind, req.count, req.portion) == (kind, count, portion)


@pytest.mark.parametrize(("annotations", "gpus", "field", "words"), [
    ({"gpu-fraction": "1.5"}, 0, "metadata.annotations.gpu-fraction", "(0, 1]"),
    ({"gpu-fraction": "0"}, 0, "metadata.annotations.gpu-fraction", "(0, 1]"),
    ({"gpu-fraction": "half"}, 0, "metadata.annotations.gpu-fraction", "(0, 1]"),
    ({"gpu-fraction": "0.5", "gpu-memory": "100"}, 0, "metadata.annotations.gpu-memory", "cannot be combined"),
    ({"gpu-fraction": "0.5"}, 1, "metadata.annotations.gpu-fraction", "cannot be combined"),
    ({"mps": "true"}, 0, "metadata.annotations.mps", "only allowed"),
    ({"gpu-fraction-num-devices": "2"}, 1, "metadata.annotations.gpu-fraction-num-devices", "requires"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "-1"}, 0,
     "metadata.annotations.gpu-fraction-num-devices", "positive integer"),
    ({"gpu-memory": "-5"}, 0, "metadata.annotations.gpu-memory", "positive integer"),
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, 0,
     "metadata.annotations.gpu-fraction-container-name", "names no container"),
])
def test_invalid_gpu_requests_name_the_annotation(annotations: dict[str, str], gpus: int, field: str,
                                                  words: str) -> None:
    _, err = parse_gpu_request(_pod(annotations, gpus))
    assert err is not None
    assert err.field == field
    assert words in err.message


def test_mig_profile_costs_its_compute_slices() -> None:
    req, err = parse_gpu_request(_pod({}, mig={"nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-1g.5gb": 1}))
    assert err is None and req.kind is GpuKind.MIG and req.mig_gpus == 7


def test_invalid_pending_request_is_an_input_error_and_a_pending_reason_and_the_rest_schedules() -> None:
    result = run(node("n1", 2), queue("q"), shared("bad", fraction=1.5), shared("good", fraction=0.5))
    assert [(e.object, e.field) for e in result.errors] == [("Pod default/bad", "metadata.annotations.gpu-fraction")]
    bad = status(result, "bad")
    assert bad.status == "Pending" and bad.reason == "InvalidGPURequest" and "gpu-fraction" in bad.message
    assert "default/good" in binds(result)


# ------------------------------------------------------------------------------------- shared devices
def test_fractions_share_a_device_until_it_is_full() -> None:
    result = run(node("n1", 2), queue("q"), *(shared(f"f{i}", fraction=f) for i, f in
                                              enumerate((0.5, 0.3, 0.2, 0.6))))
    g = groups_of(result)
    assert len(binds(result)) == 4
    assert g["default/f0"] == g["default/f1"] == g["default/f2"]  # 0.5 + 0.3 + 0.2 = one full GPU
    assert g["default/f3"] != g["default/f0"]
    n1 = node_gpus(result, "n1")
    assert n1.idle == 0 and sorted(s.used_mib for s in n1.shared) == [60.0, 100.0]


def test_whole_gpu_pods_never_take_a_shared_device() -> None:
    result = run(node("n1", 2), queue("q"), shared("f", fraction=0.1), whole("w1"), whole("w2"))
    assert "default/f" in binds(result)
    assert len([p for p in binds(result) if p.startswith("default/w")]) == 1
    assert status(result, "w2").status == "Pending"


def test_running_pods_of_one_group_share_one_device_and_a_new_pod_joins_it() -> None:
    result = run(node("n1", 2), queue("q"),
                 shared("r1", fraction=0.4, node_name="n1", gpu_group="g-a"),
                 shared("r2", fraction=0.4, node_name="n1", gpu_group="g-a"),
                 shared("new", fraction=0.2), whole("w"))
    assert groups_of(result)["default/new"] == ("g-a",)
    assert "default/w" in binds(result)  # the second GPU is still whole
    assert node_gpus(result, "n1").idle == 0


def test_a_running_fractional_pod_without_a_group_has_a_device_of_its_own() -> None:
    objs = [node("n1", 2), queue("q"), *shared("r1", fraction=0.3, node_name="n1"),
            *shared("r2", fraction=0.3, node_name="n1"), *whole("w"), *shared("f", fraction=0.3)]
    result = run(*objs)
    assert status(result, "w").status == "Pending"  # both GPUs are held by one fractional pod each
    assert status(result, "f").status == "Pending"  # and nobody may join a device no pod names
    assert len(node_gpus(result, "n1").shared) == 2


def test_consolidation_moves_a_fraction_onto_another_shared_gpu_to_free_a_whole_one() -> None:
    objs = [node("n1", 2), queue("q"), *shared("r1", fraction=0.3, node_name="n1", gpu_group="g1"),
            *shared("r2", fraction=0.3, node_name="n1", gpu_group="g2"), *whole("w")]
    assert status(run(*objs, config={"actions": "allocate"}), "w").status == "Pending"
    result = run(*objs)
    assert [e.action for e in result.evictions] == ["consolidation"]
    assert pipelined(result)["default/w"] == "n1"
    moved = next(p for p in result.pipelined if p.pod != "default/w")
    assert moved.gpu_groups[0] in ("g1", "g2")  # joined the device of the pod that stays


def test_gpupack_fills_the_fullest_shared_gpu_gpuspread_an_empty_one() -> None:
    objs = [node("n1", 3), queue("q"),
            *shared("a", fraction=0.2, node_name="n1", gpu_group="light"),
            *shared("b", fraction=0.7, node_name="n1", gpu_group="heavy"),
            *shared("new", fraction=0.3)]
    assert groups_of(run(*objs))["default/new"] == ("heavy",)
    spread = {"tiers": tiers(nodeplacement={"gpu": "spread", "cpu": "binpack"})}
    spread["tiers"][0]["plugins"] = [p for p in spread["tiers"][0]["plugins"]
                                     if p["name"] not in ("gpupack", "gpusharingorder")] + [{"name": "gpuspread"}]
    placed = groups_of(run(*objs, config=spread))["default/new"]
    assert placed[0] not in ("light", "heavy")  # a fresh device on the idle GPU


def test_gpusharingorder_prefers_a_node_whose_shared_gpu_has_room() -> None:
    result = run(node("a-empty", 1), node("b-shared", 1), queue("q"),
                 shared("r", fraction=0.5, node_name="b-shared", gpu_group="g"), shared("new", fraction=0.5))
    assert binds(result)["default/new"] == "b-shared"


def test_multi_device_fraction_takes_distinct_devices() -> None:
    result = run(node("n1", 4), queue("q"), shared("r", fraction=0.5, node_name="n1", gpu_group="g"),
                 shared("multi", fraction=0.5, devices=3))
    g = groups_of(result)["default/multi"]
    assert len(g) == 3 and len(set(g)) == 3 and "g" in g
    one_gpu = run(node("n1", 2), queue("q"), shared("multi", fraction=0.5, devices=3))
    assert status(one_gpu, "multi").status == "Pending"
    assert "3 GPUs" in status(one_gpu, "multi").message  # larger than any node


def test_a_new_shared_device_needs_a_pod_slot_for_its_reservation() -> None:
    result = run(node("n1", 2, pods=1), queue("q"), shared("f", fraction=0.5))
    assert status(result, "f").status == "Pending"
    assert "GPUs" in status(result, "f").message
    assert "default/f" in binds(run(node("n1", 2, pods=2), queue("q"), shared("f", fraction=0.5)))


# -------------------------------------------------------------------------------------------- gpu-memory
def test_gpu_memory_is_converted_with_the_node_memory_and_counted_for_the_queue() -> None:
    result = run(node("n1", 1, labels={MIB: "40000"}), queue("q"), shared("m", memory=10000),
                 shared("m2", memory=30000), shared("m3", memory=1))
    assert binds(result).keys() == {"default/m", "default/m2"}
    q = next(q for q in result.queues if q.name == "q")
    assert q.allocated["gpu"] == pytest.approx(1.0)  # 0.25 + 0.75
    assert status(result, "m3").status == "Pending"


def test_gpu_memory_larger_than_any_gpu_and_unknown_gpu_memory() -> None:
    big = run(node("n1", 1, labels={MIB: "16000"}), queue("q"), shared("m", memory=20000))
    assert "20000 MiB" in status(big, "m").message
    unknown = run(node("n1", 1, labels={MIB: "16000"}), node("n2", 1), queue("q"), shared("a", memory=8000),
                  shared("b", memory=8000), shared("c", memory=8000))
    assert set(binds(unknown).values()) == {"n1"}  # n2 did not report its GPU memory
    assert "did not report their GPU memory" in status(unknown, "c").message


def test_gpu_memory_respects_the_queue_limit_per_node() -> None:
    result = run(node("n1", 1, labels={MIB: "10000"}), queue("q", gpu_limit=0.5), shared("m", memory=6000))
    assert status(result, "m").status == "Pending"
    assert "allowable limit of GPUs" in status(result, "m").message


def test_a_gpu_memory_pod_over_its_queues_limit_does_not_fail_the_same_pod_of_another_queue() -> None:
    """Fit failures are remembered per task shape across queues, except for gpu-memory pods: their per-node
    capacity check reads the queue (``placement.failure_key``). The limited queue (priority 200, over the
    default 100) goes first."""
    result = run(node("n1", 1, labels={MIB: "10000"}), queue("limited", gpu_limit=0.5, priority=200), queue("free"),
                 shared("m1", memory=6000, q="limited"), shared("m2", memory=6000, q="free"))
    assert "allowable limit of GPUs" in status(result, "m1").message
    assert binds(result) == {"default/m2": "n1"}


# ----------------------------------------------------------------------------------------------- queues
def test_fractions_count_in_queue_allocation_and_limits() -> None:
    result = run(node("n1", 2), queue("q", gpu_limit=0.8), shared("a", fraction=0.5), shared("b", fraction=0.5))
    assert len(binds(result)) == 1
    q = next(q for q in result.queues if q.name == "q")
    assert q.allocated["gpu"] == pytest.approx(0.5)
    pending = status(result, "b") if "default/a" in binds(result) else status(result, "a")
    assert pending.reason == "OverLimit"


def test_evicting_every_pod_of_a_shared_gpu_frees_the_device() -> None:
    """Queue b deserves the only GPU; queue a's two fractional pods on it are reclaimed, and b's whole-GPU
    pod is pipelined onto the device they release."""
    result = run(node("n1", 1), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=1),
                 shared("a1", fraction=0.5, node_name="n1", gpu_group="g", q="a"),
                 shared("a2", fraction=0.5, node_name="n1", gpu_group="g", q="a"),
                 whole("b1", q="b"))
    assert {e.pod for e in result.evictions} == {"default/a1", "default/a2"}
    assert pipelined(result) == {"default/b1": "n1"}
    n1 = node_gpus(result, "n1")
    assert n1.idle == 0 and n1.releasing == 0  # the released device is promised to b1


def test_releasing_shared_device_counts_as_releasing() -> None:
    result = run(node("n1", 1), queue("q"),
                 shared("r1", fraction=0.5, node_name="n1", gpu_group="g", deleting=True), whole("w"))
    assert pipelined(result) == {"default/w": "n1"}


def test_gpupack_pipelines_onto_a_shared_gpu_whose_other_share_is_being_released() -> None:
    """Spec 7.3: the devices are ranked by the GPU order alone, so under gpupack the shared GPU (fully used:
    one share running, one terminating) outranks the idle GPU, and the task, which lacks idle memory there,
    is pipelined onto it (KAI does not prefer a device usable now). gpuspread ranks the idle GPU first."""
    objs = [node("n1", 2), queue("q"),
            *shared("stays", fraction=0.5, node_name="n1", gpu_group="g"),
            *shared("leaving", fraction=0.5, node_name="n1", gpu_group="g", deleting=True),
            *shared("new", fraction=0.5)]
    result = run(*objs)
    assert pipelined(result) == {"default/new": "n1"}
    assert binds(result) == {}
    assert groups_of(result)["default/new"] == ("g",)
    spread = {"tiers": tiers(nodeplacement={"gpu": "spread", "cpu": "binpack"})}
    spread["tiers"][0]["plugins"] = [p for p in spread["tiers"][0]["plugins"]
                                     if p["name"] not in ("gpupack", "gpusharingorder")] + [{"name": "gpuspread"}]
    result = run(*objs, config=spread)
    assert binds(result) == {"default/new": "n1"}
    assert groups_of(result)["default/new"] != ("g",)  # a fresh device on the idle GPU, bound now


def test_preempt_a_lower_priority_fraction_for_a_higher_one() -> None:
    result = run(node("n1", 1), queue("q"),
                 shared("low", fraction=0.7, node_name="n1", gpu_group="g"),
                 shared("high", fraction=0.5, priority_class="inference"))
    assert [e.pod for e in result.evictions] == ["default/low"]
    assert "default/high" in pipelined(result)


# -------------------------------------------------------------------------------------------------- MIG
MIG_1G = "nvidia.com/mig-1g.10gb"


def mig_node(name: str, slices: int, strategy: str = "mixed") -> Obj:
    n = node(name, 0, labels={"nvidia.com/mig.strategy": strategy, "node-role.kubernetes.io/mig-enabled": "true"},
             extra={MIG_1G: slices})
    return n


def test_mig_profiles_schedule_on_mixed_nodes_and_count_g_gpus_for_the_queue() -> None:
    result = run(mig_node("mig", 4), node("plain", 2), queue("q"),
                 pod_group("m", queue="q"), pod("m", group="m", extra={MIG_1G: 2}), whole("w"))
    assert binds(result) == {"default/m": "mig", "default/w": "plain"}
    q = next(q for q in result.queues if q.name == "q")
    assert q.allocated["gpu"] == pytest.approx(3.0)  # 2 x 1g + 1 whole GPU


def test_fraction_refused_on_mig_nodes() -> None:
    single = node("single", 2, labels={"nvidia.com/mig.strategy": "single",
                                      "node-role.kubernetes.io/mig-enabled": "true"})
    result = run(single, queue("q"), shared("f", fraction=0.5))
    assert status(result, "f").status == "Pending"
    assert "mig.strategy=single" in status(result, "f").message


def test_mig_request_refused_on_a_node_without_mig() -> None:
    result = run(mig_node("mig", 1), node("plain", 2), queue("q"),
                 pod_group("busy", queue="q"), pod("busy", group="busy", node="mig", extra={MIG_1G: 1}),
                 pod_group("m", queue="q"), pod("m", group="m", extra={MIG_1G: 1}))
    assert status(result, "m").status == "Pending"
    message = status(result, "m").message
    assert "1 node(s) are not MIG enabled" in message
    assert "1 node(s) didn't have enough resources: nvidia.com/mig-1g.10gb" in message


def test_legacy_mig_annotation_is_never_scheduled() -> None:
    p = pod("legacy", group="legacy")
    p["metadata"]["annotations"][MIG_1G] = "1"
    result = run(mig_node("mig", 2), queue("q"), pod_group("legacy", queue="q"), p)
    assert status(result, "legacy").reason == "LegacyMIGRequest"
    assert not result.binds


# ------------------------------------------------------------------------------------------ reservations
def test_reservation_pods_are_not_counted_twice() -> None:
    reservation = pod("gpu-reservation-n1-abcde", ns="kai-resource-reservation", gpus=1, node="n1",
                      scheduler="default-scheduler", labels={"app": "kai-resource-reservation",
                                                             "runai-gpu-group": "g"})
    result = run(node("n1", 2), queue("q"), reservation,
                 shared("r", fraction=0.5, node_name="n1", gpu_group="g"), whole("w"))
    assert "default/w" in binds(result)  # the reservation pod's GPU is the group's device


def test_decisions_are_deterministic_including_new_group_names() -> None:
    objs = [node("n1", 4), node("n2", 4), queue("q"),
            *(o for i in range(10) for o in shared(f"f{i}", fraction=0.1 * (i % 9 + 1)))]
    assert run(*objs).to_dict() == run(*objs).to_dict()


@pytest.mark.parametrize("name", ["", "node-1/uid-1/0/0", "n/ü-ñ/3/12", "x" * 300])
def test_shared_device_names_are_uuid5_of_their_parts(name: str) -> None:
    """A new shared device's name is computed without UUID objects: exactly uuid5 in the group namespace."""
    import uuid

    from kaisched.model.gpu_sharing import GROUP_NAMESPACE, uuid5_text

    assert uuid5_text(name) == str(uuid.uuid5(GROUP_NAMESPACE, name))
