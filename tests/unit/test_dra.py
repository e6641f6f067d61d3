"""Scheduling with DRA GPUs (spec 7.7): devices from ResourceSlices, claims allocated at placement, pinned once
allocated, shared claims allocated once, GPUs counted for queues, device-plugin GPUs kept off DRA nodes, and the
eviction actions freeing DRA GPUs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kaisched
from kaisched.model.dra_snapshot import template_claim_name

GPU_CLASS = "gpu.nvidia.com"
NOW = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def node(name: str, cpu: str = "64", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"}}}


def gpu_class(name: str = GPU_CLASS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}}


def slice_(node_name: str, count: int, product: str = "NVIDIA A100-SXM4-80GB", driver: str = GPU_CLASS,
           memory: str = "80Gi") -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}, "index": {"int": i}},
                "capacity": {"memory": {"value": memory}}} for i in range(count)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpus"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def claim_spec(count: int = 1, selectors: tuple[str, ...] = (), mode: str = "ExactCount",
               device_class: str = GPU_CLASS) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim(name: str, queue: str = "team-a", namespace: str = "ml", allocated: list[str] | None = None,
          reserved: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": queue}},
                           "spec": claim_spec(**spec)}
    if allocated:
        results = [{"request": "gpu", "driver": GPU_CLASS, "pool": d.split("/")[0], "device": d.split("/")[1]}
                   for d in allocated]
        out["status"] = {"allocation": {"devices": {"results": results}},
                         "reservedFor": [{"resource": "pods", "name": p, "uid": f"{namespace}/{p}"}
                                         for p in reserved or []]}
    return out


def template(name: str, namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(**spec)}}


def queue(name: str, gpus: float = 8, limit: float = -1, weight: float = 1, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {
        "gpu": {"quota": gpus, "limit": limit, "overQuotaWeight": weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod(name: str, *, claims: dict[str, str] | None = None, templates: dict[str, str] | None = None,
        queue_name: str = "team-a", node_name: str = "", phase: str = "Pending", gpus: int = 0,
        priority_class: str = "train", namespace: str = "ml", minute: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "priorityClassName": priority_class,
                            "containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    entries = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    entries += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    if entries:
        spec["resourceClaims"] = entries
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}",
                         "labels": {"kai.scheduler/queue": queue_name},
                         "creationTimestamp": f"2026-01-01T00:{minute:02d}:00Z"},
            "spec": spec, "status": {"phase": phase}}


def run(*objects: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = kaisched.schedule(list(objects), config=config, now=NOW).to_dict()
    return result


def binds(result: dict[str, Any]) -> dict[str, str]:
    return {b["pod"]: b["node"] for b in result["binds"]}


def pod_group_of(result: dict[str, Any], pod_name: str) -> dict[str, Any]:
    return next(g for g in result["podGroups"] if pod_name in g["name"])


def test_a_templated_claim_is_made_for_its_pod_and_allocated_where_the_devices_are() -> None:
    result = run(node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 1), slice_("node-b", 4),
                 queue("team-a"), template("two-gpus", count=2), pod("train-0", templates={"gpus": "two-gpus"}))
    assert binds(result) == {"ml/train-0": "node-b"}
    [alloc] = result["claims"]
    assert alloc["claim"] == f"ml/{template_claim_name('train-0', 'ml/train-0', 'gpus')}"
    assert alloc["node"] == "node-b" and alloc["new"] and alloc["template"] == "two-gpus"
    assert alloc["podClaim"] == "gpus" and alloc["pods"] == ["ml/train-0"]
    assert [(d["pool"], d["device"]) for d in alloc["devices"]] == [("node-b", "gpu-0"), ("node-b", "gpu-1")]


def test_devices_are_never_over_committed_and_the_fit_error_names_the_claim() -> None:
    pods = [pod(f"p{i}", templates={"gpu": "one"}, minute=i) for i in range(3)]
    result = run(node("node-a"), gpu_class(), slice_("node-a", 2), queue("team-a"), template("one"), *pods)
    assert sorted(binds(result)) == ["ml/p0", "ml/p1"]
    devices = [(d["pool"], d["device"]) for c in result["claims"] for d in c["devices"]]
    assert sorted(devices) == [("node-a", "gpu-0"), ("node-a", "gpu-1")]
    message = pod_group_of(result, "p2")["message"]
    assert "node(s) didn't have enough resources" in message and "GPUs" in message


def test_device_level_over_commit_is_refused_even_when_the_gpu_row_has_room() -> None:
    # two GPUs on the node, one already held by an allocated claim of a running pod: one pending claim fits
    running = pod("run-0", claims={"gpu": "held"}, node_name="node-a", phase="Running")
    result = run(node("node-a"), gpu_class(), slice_("node-a", 2), queue("team-a"),
                 claim("held", allocated=["node-a/gpu-1"], reserved=["run-0"]), running,
                 template("one"), pod("p0", templates={"gpu": "one"}, minute=1),
                 pod("p1", templates={"gpu": "one"}, minute=2))
    assert list(binds(result)) == ["ml/p0"]
    [alloc] = result["claims"]
    assert [d["device"] for d in alloc["devices"]] == ["gpu-0"]


def test_an_allocated_claim_pins_its_pod_to_the_node_of_its_devices() -> None:
    result = run(node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 4), slice_("node-b", 4),
                 queue("team-a"), claim("mine", allocated=["node-b/gpu-2"]), pod("p0", claims={"gpu": "mine"}))
    assert binds(result) == {"ml/p0": "node-b"}
    [alloc] = result["claims"]
    assert not alloc["new"] and [d["device"] for d in alloc["devices"]] == ["gpu-2"]


def test_a_claim_shared_by_two_pods_is_allocated_once() -> None:
    result = run(node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 1), slice_("node-b", 1),
                 queue("team-a"), claim("shared"), pod("p0", claims={"gpu": "shared"}),
                 pod("p1", claims={"gpu": "shared"}, minute=1))
    assert binds(result) == {"ml/p0": "node-a", "ml/p1": "node-a"}
    [alloc] = result["claims"]
    assert alloc["pods"] == ["ml/p0", "ml/p1"] and len(alloc["devices"]) == 1


def test_selectors_with_cel_choose_the_devices_that_match() -> None:
    wanted = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"'
    big = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("60Gi")) >= 0'
    result = run(node("node-a"), node("node-b"), node("node-c"), gpu_class(), slice_("node-a", 4),
                 slice_("node-b", 4, product="NVIDIA H100", memory="40Gi"),
                 slice_("node-c", 4, product="NVIDIA H100", memory="80Gi"), queue("team-a"),
                 claim("h100", selectors=(wanted, big)), pod("p0", claims={"gpu": "h100"}))
    assert binds(result) == {"ml/p0": "node-c"}


def test_all_mode_takes_every_matching_device_of_the_node() -> None:
    result = run(node("node-a"), gpu_class(), slice_("node-a", 3), queue("team-a"), claim("all", mode="All"),
                 pod("p0", claims={"gpu": "all"}))
    assert binds(result) == {"ml/p0": "node-a"}
    assert [d["device"] for d in result["claims"][0]["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]


def test_device_plugin_gpus_do_not_land_on_dra_gpu_nodes() -> None:
    result = run(node("node-a"), gpu_class(), slice_("node-a", 4), queue("team-a"), pod("p0", gpus=1))
    assert binds(result) == {}
    assert "DRA GPUs" in pod_group_of(result, "p0")["message"]


def test_dra_gpus_count_in_the_queue_limit_and_fair_share() -> None:
    result = run(node("node-a"), gpu_class(), slice_("node-a", 8), queue("team-a", gpus=1, limit=1),
                 claim("two", count=2), pod("p0", claims={"gpu": "two"}))
    assert binds(result) == {}
    assert "limit" in pod_group_of(result, "p0")["message"]
    result = run(node("node-a"), gpu_class(), slice_("node-a", 8), queue("team-a", gpus=1),
                 claim("two", count=2), pod("p0", claims={"gpu": "two"}))
    team = next(q for q in result["queues"] if q["name"] == "team-a")
    assert team["allocated"]["gpu"] == 2


def test_reclaim_frees_dra_gpus_for_a_queue_below_its_fair_share() -> None:
    # team-b holds all four devices; team-a deserves two and asks for one
    held = [claim(f"b{i}", queue="team-b", allocated=[f"node-a/gpu-{i}"], reserved=[f"b{i}"]) for i in range(4)]
    running = [pod(f"b{i}", claims={"gpu": f"b{i}"}, queue_name="team-b", node_name="node-a", phase="Running",
                   minute=i) for i in range(4)]
    result = run(node("node-a"), gpu_class(), slice_("node-a", 4), queue("team-a", gpus=2),
                 queue("team-b", gpus=2), *held, *running, template("one", ),
                 pod("a0", templates={"gpu": "one"}, minute=10))
    evicted = [e["pod"] for e in result["evictions"]]
    assert len(evicted) == 1 and evicted[0].startswith("ml/b")
    assert [p["pod"] for p in result["pipelined"]] == ["ml/a0"]


def test_a_claim_that_can_never_be_allocated_blocks_its_job_with_the_reason() -> None:
    result = run(node("node-a"), gpu_class(), slice_("node-a", 4), queue("team-a"),
                 claim("odd", device_class="no-such-class"), pod("p0", claims={"gpu": "odd"}),
                 pod("p1", claims={"gpu": "missing"}))
    assert binds(result) == {}
    assert "DeviceClass 'no-such-class' does not exist" in pod_group_of(result, "p0")["message"]
    assert "ResourceClaim ml/missing" in pod_group_of(result, "p1")["message"]


def test_a_shared_gpu_claim_must_carry_the_pods_queue() -> None:
    result = run(node("node-a"), gpu_class(), slice_("node-a", 4), queue("team-a"), queue("team-b"),
                 claim("theirs", queue="team-b"), pod("p0", claims={"gpu": "theirs"}))
    assert binds(result) == {}
    assert "kai.scheduler/queue=team-a" in pod_group_of(result, "p0")["message"]


def test_same_input_same_devices() -> None:
    objs = [node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 3), slice_("node-b", 3), queue("team-a"),
            template("one"), *[pod(f"p{i}", templates={"gpu": "one"}, minute=i) for i in range(5)]]
    assert run(*objs) == run(*objs)


def test_preempt_frees_dra_gpus_for_higher_priority_work_in_the_queue() -> None:
    held = [claim(f"low{i}", allocated=[f"node-a/gpu-{i}"], reserved=[f"low{i}"]) for i in range(2)]
    running = [pod(f"low{i}", claims={"gpu": f"low{i}"}, node_name="node-a", phase="Running", minute=i)
               for i in range(2)]
    result = run(node("node-a"), gpu_class(), slice_("node-a", 2), queue("team-a", gpus=2), *held, *running,
                 template("one"), pod("urgent", templates={"gpu": "one"}, priority_class="build", minute=9))
    assert [e["action"] for e in result["evictions"]] == ["preempt"]
    assert [p["pod"] for p in result["pipelined"]] == ["ml/urgent"]


def test_consolidation_moves_pods_with_templated_claims_but_not_with_named_ones() -> None:
    # node-a and node-b each have one of their two GPUs held; a 2-GPU claim fits only once one pod moves.
    # A pod whose claim is named (shared, or made by hand) is pinned to its devices: nothing moves. A pod whose
    # claim its template made is recreated elsewhere with a new claim: consolidation moves it.
    named = [claim("c0", allocated=["node-a/gpu-0"], reserved=["r0"]),
             claim("c1", allocated=["node-b/gpu-0"], reserved=["r1"])]
    pinned = [pod("r0", claims={"gpu": "c0"}, node_name="node-a", phase="Running"),
              pod("r1", claims={"gpu": "c1"}, node_name="node-b", phase="Running", minute=1)]
    cluster = [node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 2), slice_("node-b", 2),
               queue("team-a", gpus=4), template("one"), template("two", count=2),
               pod("big", templates={"gpu": "two"}, minute=9)]
    result = run(*cluster, *named, *pinned)
    assert result["evictions"] == [] and binds(result) == {} and result["pipelined"] == []
    made = [claim("r0-gpu", allocated=["node-a/gpu-0"], reserved=["r0"]),
            claim("r1-gpu", allocated=["node-b/gpu-0"], reserved=["r1"])]
    templated = [pod("r0", templates={"gpu": "one"}, node_name="node-a", phase="Running"),
                 pod("r1", templates={"gpu": "one"}, node_name="node-b", phase="Running", minute=1)]
    for p, c in zip(templated, made, strict=True):
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": c["metadata"]["name"]}]
    result = run(*cluster, *made, *templated)
    [eviction] = result["evictions"]
    assert eviction["action"] == "consolidation"
    moved = eviction["pod"]
    pipelined = {p["pod"]: p["node"] for p in result["pipelined"]}
    assert set(pipelined) == {moved, "ml/big"} and pipelined[moved] != pipelined["ml/big"]
    assert result["claims"] == []  # (pipelined pods reserve nothing yet)


def test_fractions_stay_off_dra_gpu_nodes_and_use_device_plugin_nodes() -> None:
    plain = node("plain")
    plain["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    frac = pod("frac")
    frac["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    result = run(node("dra-node"), plain, gpu_class(), slice_("dra-node", 4), queue("team-a"), frac,
                 template("one"), pod("claimer", templates={"gpu": "one"}, minute=1))
    assert binds(result) == {"ml/frac": "plain", "ml/claimer": "dra-node"}


def test_the_dra_example_of_the_docs_runs_as_written() -> None:
    """docs/dra.md: `kaisched schedule -f examples/dra-gpus.yaml --now 2026-01-01T02:00:00Z [-o json]`."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from kaisched.cli import cli

    example = str(Path(__file__).parents[2] / "examples" / "dra-gpus.yaml")
    table = CliRunner().invoke(cli, ["schedule", "-f", example, "--now", "2026-01-01T02:00:00Z"])
    assert table.exit_code == 0, table.output
    assert "6 binds, 0 pipelined, 0 evictions, 1 of 7 PodGroups pending" in table.output
    out = CliRunner().invoke(cli, ["schedule", "-f", example, "--now", "2026-01-01T02:00:00Z", "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert {b["pod"]: b["node"] for b in data["binds"]}["inference/llm-server"] == "h100-0"
    shared = next(c for c in data["claims"] if c["claim"] == "inference/shared-gpu")
    assert shared["pods"] == ["inference/embed-0", "inference/embed-1"] and len(shared["devices"]) == 1
    pending = [g for g in data["podGroups"] if g["status"] == "Pending"]
    assert [g["name"] for g in pending] == ["research/pg-train-3-research-train-3"]
    assert ("devices for claim gpus (ResourceClaimTemplate research/two-gpus): gpus (2 x gpu.nvidia.com)"
            in pending[0]["message"])
    devices = [(d["pool"], d["device"]) for c in data["claims"] for d in c["devices"]]
    assert len(devices) == len(set(devices)) == 8


def test_counted_device_sets_follow_every_allocation_and_rollback() -> None:
    """The per-node free counts a fit check reads are kept up to date incrementally: after placements,
    evictions and rollbacks they equal counts made afresh from the devices' state."""
    import numpy as np

    from kaisched.framework.statement import Statement
    from kaisched.model.dra_state import _DeviceSet
    from tests.unit.builders import open_session

    held = [claim(f"h{i}", allocated=[f"node-a/gpu-{i}"], reserved=[f"h{i}"]) for i in range(2)]
    running = [pod(f"h{i}", claims={"gpu": f"h{i}"}, node_name="node-a", phase="Running") for i in range(2)]
    pending = [pod(f"p{i}", templates={"gpu": "one"}, minute=i) for i in range(4)]
    ssn = open_session(node("node-a"), node("node-b"), gpu_class(), slice_("node-a", 4), slice_("node-b", 2),
                       queue("team-a"), template("one"), *held, *running, *pending)
    dra = ssn.nodes.dra
    assert dra is not None
    tasks = {t.name: t for t in ssn.snapshot.tasks.values()}
    choice = tasks["p0"].claims[0].requests[0].choices[0]
    assert dra.fits(tasks["p0"], len(ssn.nodes), pipelined=False).tolist() == [True, True]  # (counts the set)

    def check() -> None:
        counted = dra._set(choice.devices)
        fresh = _DeviceSet(choice.devices, dra, len(ssn.nodes))
        assert np.array_equal(counted.idle, fresh.idle) and np.array_equal(counted.pipe, fresh.pipe)

    stmt = Statement(ssn)
    stmt.allocate(tasks["p0"], 0)
    stmt.allocate(tasks["p1"], 1)
    check()
    mark = stmt.checkpoint()
    stmt.evict(tasks["h0"], action="reclaim", preemptor="x", message="")
    stmt.pipeline(tasks["p2"], 0)
    check()
    p2 = tasks["p2"].claims[0].key
    assert [dra.devices.keys[d] for d in dra.allocated[p2]] == ["gpu.nvidia.com/node-a/gpu-0"]  # (releasing first)
    stmt.allocate(tasks["p3"], 0)  # the last idle device of node-a
    check()
    assert dra.fits(tasks["p3"], len(ssn.nodes), pipelined=False).tolist() == [True, False]  # (pinned by its claim)
    stmt.rollback(mark)
    check()
    stmt.discard()
    check()
    assert dra.allocated.keys() == {"ml/h0", "ml/h1"}


def test_devices_of_multi_node_slices_and_claims_of_several_requests() -> None:
    # a network-attached device every node reaches, and one that only zone-a nodes reach
    shared = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "fabric"},
              "spec": {"driver": "nic.example.com", "allNodes": True,
                       "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                       "devices": [{"name": "nic-0"}]}}
    zonal = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "zone-a"},
             "spec": {"driver": "nic.example.com", "pool": {"name": "zone-a", "generation": 1,
                                                            "resourceSliceCount": 1},
                      "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": "zone", "operator": "In", "values": ["a"]}]}]},
                      "devices": [{"name": "nic-1"}]}}
    two = claim("gpu-and-nic", count=1)
    two["spec"]["devices"]["requests"].append(
        {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 2}})
    result = run(node("node-a", labels={"zone": "b"}), node("node-b", labels={"zone": "a"}), gpu_class(),
                 gpu_class("nic.example.com"), slice_("node-a", 1), slice_("node-b", 1), shared, zonal,
                 queue("team-a"), two, pod("p0", claims={"c": "gpu-and-nic"}))
    assert binds(result) == {"ml/p0": "node-b"}  # (both NICs are reachable from zone a only)
    [alloc] = result["claims"]
    assert sorted((d["request"], d["device"]) for d in alloc["devices"]) == [
        ("gpu", "gpu-0"), ("nic", "nic-0"), ("nic", "nic-1")]
    assert alloc["node"] == "node-b"
    # the devices are taken: a second claim asking one NIC finds none
    result = run(node("node-a", labels={"zone": "b"}), node("node-b", labels={"zone": "a"}), gpu_class(),
                 gpu_class("nic.example.com"), shared, zonal, queue("team-a"),
                 claim("nics", allocated=None, device_class="nic.example.com", count=2),
                 claim("one-nic", device_class="nic.example.com"),
                 pod("p0", claims={"c": "nics"}), pod("p1", claims={"c": "one-nic"}, minute=1))
    assert list(binds(result)) == ["ml/p0"]
