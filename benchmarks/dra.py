"""DRA placement against device-plugin placement, side by side in one run.

Two clusters of the same shape (``--nodes`` nodes x 8 GPUs, 20 leaf queues, ``--pods`` pending single-GPU pods,
each its own PodGroup): in one the GPUs are ``nvidia.com/gpu`` of the device plugin and each pod asks
``nvidia.com/gpu: 1``; in the other every node's GPUs are published by a ResourceSlice of the driver
``gpu.nvidia.com`` and each pod asks one GPU through a ResourceClaimTemplate (the snapshot makes a claim per pod
and allocates it at placement). One allocate cycle of each is timed (best of ``--repeat``), and the outcome is
checked: the same number of binds, no device in two claims, every bound DRA pod's claim on its node.

    .venv/bin/python -m benchmarks.dra                  # 1,000 nodes, 10,000 pods
    .venv/bin/python -m benchmarks.dra --smoke          # 20 nodes, 200 pods (what make test runs)
    PYTHONPATH=build/compiled .venv/bin/python -m benchmarks.dra    # on the compiled core (make compiled)

Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from datetime import UTC, datetime
from typing import Any

import kaisched
from benchmarks.clusters import NAMESPACE, Obj, base, leaf_queue_names, node_names, pod, pod_group

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DRIVER = "gpu.nvidia.com"
GPUS_PER_NODE = 8


def device_class() -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def resource_slice(node_name: str) -> Obj:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "productName": {"string": "NVIDIA H100"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(GPUS_PER_NODE)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def claim_template(namespace: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]}}}}


def cluster(nodes: int, pods: int, *, dra: bool) -> list[Obj]:
    """The shared shape; with ``dra`` the nodes' GPUs come from ResourceSlices and the pods ask by claim."""
    objs = base(nodes, 20)
    queues = leaf_queue_names(20)
    if dra:
        for n in objs:
            if n["kind"] == "Node":
                n["status"]["allocatable"].pop("nvidia.com/gpu", None)
        objs.append(device_class())
        objs.extend(resource_slice(name) for name in node_names(nodes))
        objs.append(claim_template(NAMESPACE))
    for i in range(pods):
        group = f"p-{i:06d}"
        objs.append(pod_group(group, queues[i % len(queues)], 1))
        p = pod(f"{group}-0", group, gpus=1)
        if dra:
            resources = p["spec"]["containers"][0]["resources"]
            resources["requests"].pop("nvidia.com/gpu")
            resources.pop("limits")
            p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        objs.append(p)
    return objs


def timed(objs: list[Obj], repeat: int) -> tuple[float, dict[str, Any]]:
    best = float("inf")
    out: dict[str, Any] = {}
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = kaisched.schedule(objs, {"actions": "allocate"}, NOW)
        best = min(best, time.perf_counter() - t0)
        out = result.to_dict()
    return best, out


def check(plain: dict[str, Any], dra: dict[str, Any], nodes: int, pods: int) -> list[str]:
    problems = []
    want = min(pods, nodes * GPUS_PER_NODE)
    if len(plain["binds"]) != want:
        problems.append(f"device plugin: {len(plain['binds'])} binds, expected {want}")
    if len(dra["binds"]) != want:
        problems.append(f"DRA: {len(dra['binds'])} binds, expected {want}")
    devices = [(d["pool"], d["device"]) for c in dra["claims"] for d in c["devices"]]
    if len(devices) != len(set(devices)):
        problems.append("DRA: a device is in two claims")
    where = {b["pod"]: b["node"] for b in dra["binds"]}
    for c in dra["claims"]:
        if any(where.get(p) != c["node"] for p in c["pods"]) or any(d["pool"] != c["node"] for d in c["devices"]):
            problems.append(f"DRA: claim {c['claim']} is not on its pod's node")
            break
    if len(dra["claims"]) != len(dra["binds"]):
        problems.append(f"DRA: {len(dra['claims'])} claims for {len(dra['binds'])} binds")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dra", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=None, help="nodes of 8 GPUs (default 1,000; 20 with --smoke)")
    p.add_argument("--pods", type=int, default=None, help="pending pods (default 10 per node)")
    p.add_argument("--repeat", type=int, default=3, help="timed cycles of each cluster, the best is reported")
    p.add_argument("--smoke", action="store_true", help="20 nodes, 200 pods, one repetition")
    args = p.parse_args(argv)
    nodes = args.nodes or (20 if args.smoke else 1000)
    pods = args.pods or nodes * 10
    repeat = 1 if args.smoke else args.repeat
    core = "compiled" if kaisched.compiled() else "interpreted"
    plain_s, plain = timed(cluster(nodes, pods, dra=False), repeat)
    dra_s, dra = timed(cluster(nodes, pods, dra=True), repeat)
    binds = len(dra["binds"])
    print(f"DRA vs device-plugin placement, {nodes:,} nodes x {GPUS_PER_NODE} GPUs, {pods:,} pending pods "
          f"({core} core, best of {repeat})")
    print(f"  device plugin: {plain_s:.3f} s for {len(plain['binds']):,} binds "
          f"({len(plain['binds']) / plain_s:,.0f} placed/s)")
    print(f"  DRA claims:    {dra_s:.3f} s for {binds:,} binds ({binds / dra_s:,.0f} placed/s), "
          f"{len(dra['claims']):,} claims allocated")
    print(f"  ratio DRA / device plugin: {dra_s / plain_s:.2f}x")
    problems = check(plain, dra, nodes, pods)
    for problem in problems:
        print(f"CHECK FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
