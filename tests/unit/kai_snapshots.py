"""KAI snapshot ZIPs built by hand in the shapes KAI v0.13 and v0.17 write (../shared/spec/kai-snapshot.md), for
the replay tests. Built without kaisched's writer, so that the reader is checked against the format itself."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

NS = "team"
V013_RAW_KEYS = ("pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses", "configMaps",
                 "persistentVolumeClaims", "csiStorageCapacities", "storageClasses", "csiDrivers", "resourceClaims",
                 "resourceSlices", "deviceClasses", "topologies")
V017_RAW_KEYS = ("pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses", "configMaps",
                 "persistentVolumes", "persistentVolumeClaims", "csiStorageCapacities", "storageClasses", "csiDrivers",
                 "resourceClaims", "resourceSlices", "deviceClasses", "topologies", "nodeResourceTopologies")
TIERS = [{"plugins": [{"name": n} for n in ("predicates", "proportion", "priority", "elastic", "kubeflow", "ray",
                                            "nodeavailability", "gpusharingorder", "gpupack", "resourcetype",
                                            "subgrouporder", "taskorder", "nominatednode", "dynamicresources")]
          + [{"name": "nodeplacement", "arguments": {"cpu": "binpack", "gpu": "binpack"}},
             {"name": "minruntime"}, {"name": "topology"}, {"name": "snapshot"}]}]
#: KAI v0.16+'s default tiers add the eviction search's scenario generators (conf_util's default configuration)
TIERS_V017 = [{"plugins": [*TIERS[0]["plugins"], {"name": "sg-nodelocalgreedy"}, {"name": "sg-multinodegang"}]}]
ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"


def node(name: str, gpus: int = 8, pool: str | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920"}
    if pool:
        labels["kai.scheduler/node-pool"] = pool
    resources = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {"metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "10", "labels": labels},
            "status": {"allocatable": resources, "capacity": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def queue(name: str, gpu_quota: float, parent: str | None = None, pool: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                          "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    meta: dict[str, Any] = {"name": name, "uid": f"uid-queue-{name}", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if pool:
        meta["labels"] = {"kai.scheduler/node-pool": pool}
    return {"metadata": meta, "spec": spec}


def pod_group(name: str, q: str, min_member: int, pool: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-pg-{name}",
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if pool:
        meta["labels"] = {"kai.scheduler/node-pool": pool}
    return {"metadata": meta, "spec": {"queue": q, "minMember": min_member, "priorityClassName": "train"}}


def pod(name: str, q: str, gpus: int, *, group: str | None, node_name: str = "", phase: str | None = "Pending",
        created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    annotations = {"pod-group-name": group} if group else {}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "main", "image": "busybox", "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    status = {"phase": phase} if phase else {}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-pod-{name}", "creationTimestamp": created,
                         "labels": {"kai.scheduler/queue": q}, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": group or name,
                                              "uid": f"uid-job-{group or name}", "controller": True}]},
            "spec": spec, "status": status}


def cluster() -> dict[str, list[dict[str, Any]]]:
    """Two 8-GPU nodes; team-b runs a 4-GPU pod; team-a's gang of two 4-GPU pods is pending."""
    return {
        "nodes": [node("node-0"), node("node-1")],
        "queues": [queue("root", 16), queue("team-a", 8, "root"), queue("team-b", 8, "root")],
        "podGroups": [pod_group("train", "team-a", 2), pod_group("serve", "team-b", 1)],
        "pods": [pod("train-0", "team-a", 4, group="train"), pod("train-1", "team-a", 4, group="train"),
                 pod("serve-0", "team-b", 4, group="serve", node_name="node-1", phase="Running")],
    }


def params_v013(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
        "maxNumberConsolidationPreemptees": 16, "useSchedulingSignatures": True, "fullHierarchyFairness": True,
        "allowConsolidatingReclaim": True, "numOfStatusRecordingWorkers": 5,
        "globalDefaultStalenessGracePeriod": 60_000_000_000, "schedulePeriod": 1_000_000_000,
        "queueLabelKey": "kai.scheduler/queue"}
    params.update(changes)
    return params


def document(version: str = "v0.17", objects: dict[str, list[dict[str, Any]]] | None = None,
             params: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """snapshot.json as KAI ``version`` writes it (null for an empty list)."""
    objects = cluster() if objects is None else objects
    keys = V017_RAW_KEYS if version == "v0.17" else V013_RAW_KEYS
    raw = {k: objects.get(k) or None for k in keys}
    if config is None:
        config = {"actions": ACTIONS, "tiers": TIERS_V017 if version == "v0.17" else TIERS}
        if version == "v0.17":
            config["scenarioSearchBudgets"] = {"maxActionSearchDuration": {"default": "5m0s"},
                                               "maxJobSearchDuration": "4m0s", "minJobSearchDuration": "0s",
                                               "maxGeneratorSearchDuration": {"default": "2m0s",
                                                                              "NodeLocalGreedy": "30s"}}
    if params is None:
        params = params_v013()  # v0.17's stuckInReleasingThreshold is 0 by default: omitempty leaves it out
    return {"config": config, "schedulerParams": params, "rawObjects": raw,
            "discovery": {"serverVersion": {"major": "1", "minor": "33", "gitVersion": "v1.33.1"}}}


def zipped(doc: object, *, name: str = "snapshot.json", version: str = "v0.17") -> bytes:
    """The ZIP of a document: compact JSON, a newline after it in v0.17 (json.Encoder), none in v0.13."""
    text = json.dumps(doc, separators=(",", ":")) + ("\n" if version == "v0.17" else "")
    return zip_bytes({name: text.encode()})


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def snapshot(version: str = "v0.17", **kwargs: Any) -> bytes:
    return zipped(document(version, **kwargs), version=version)


def without_generators(config: Any) -> Any:
    """``config`` (a SchedulerConfig) without KAI's scenario generator plugins, which kaisched's snapshots name for
    KAI's tool (no-ops in kaisched), and with KAI's explicit action list flag: to compare a replayed configuration
    with the one written."""
    from dataclasses import replace

    from kaisched.plugins.registry import SCENARIO_GENERATOR_PLUGINS

    tiers = tuple(tuple(p for p in tier if p.name not in SCENARIO_GENERATOR_PLUGINS) for tier in config.tiers)
    return replace(config, tiers=tiers, actions_explicit=False)
