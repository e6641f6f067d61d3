"""The embedded cluster as the resourceclaim controller and the DRA scheduler's write-back
(kaisched.cluster.store): claims made from templates are created and allocated after a bind, released and
deallocated when their pods finish, are deleted or evicted; the next cycle sees the allocations; workload
controllers copy pod templates' resourceClaims to their pods."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s.objects import ClaimConsumer, ParsedObjects, ResourceClaim
from kaisched.k8s.parse import parse_objects
from kaisched.model.dra import POD_CLAIM_NAME_ANNOTATION, spec_gpus
from kaisched.model.dra_snapshot import template_claim_name

from .builders import NOW
from .workload_helpers import FIXTURES, fixture

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
CONFIG = SchedulerConfig.from_mapping(None)


# ------------------------------------------------------------------------------------------------ builders
def node(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def gpu_class() -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def gpu_slice(node_name: str, count: int) -> Obj:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(count)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node_name, "pool": {"name": node_name}, "devices": devices}}


def claim_spec(count: int) -> Obj:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}]}}


def template(name: str, count: int = 1) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"metadata": {"labels": {"made-by": "template"}}, "spec": claim_spec(count)}}


def shared_claim(name: str, count: int = 1) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml", "labels": {"kai.scheduler/queue": "team"}},
            "spec": claim_spec(count)}


def queue(name: str = "team", gpus: float = -1) -> Obj:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": gpus, "limit": -1, "overQuotaWeight": 1},
                                   "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                   "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


def meta(name: str, minute: int = 0) -> Obj:
    return {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"kai.scheduler/queue": "team"},
            "creationTimestamp": f"2025-01-01T10:{minute:02d}:00Z"}


def pod(name: str, *, templates: dict[str, str] | None = None, claims: dict[str, str] | None = None,
        priority_class: str = "train", minute: int = 0) -> Obj:
    entries = [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    entries += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": e["name"]} for e in entries]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, minute),
            "spec": {"schedulerName": "kai-scheduler", "priorityClassName": priority_class, "resourceClaims": entries,
                     "containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Pending"}}


def cluster_of(*objs: Obj) -> EmbeddedCluster:
    parsed = parse_objects(list(objs))
    assert not parsed.errors, parsed.errors
    return EmbeddedCluster(prepare(parsed, CONFIG, NOW))


def cycle(cluster: EmbeddedCluster, minutes: int = 1) -> CycleResult:
    """One cycle on the store's objects, applied to it."""
    now = NOW + timedelta(minutes=minutes)
    result = run_prepared_cycle(prepare(cluster.parsed(), CONFIG, now), CONFIG, now)
    assert not result.errors, result.errors
    cluster.apply(result, now)
    return result


def devices(claim: ResourceClaim) -> list[str]:
    return [f"{r.pool}/{r.device}" for r in claim.allocation or ()]


def made_claim(cluster: EmbeddedCluster, pod_name: str, pod_claim: str = "gpu") -> ResourceClaim | None:
    return cluster.claims.get(f"ml/{template_claim_name(pod_name, f'uid-{pod_name}', pod_claim)}")


def no_device_twice(cluster: EmbeddedCluster) -> None:
    assert all(len(claims) == 1 for claims in cluster.device_holders().values()), cluster.device_holders()


# ------------------------------------------------------------------------------------------- write-back
def test_a_templated_claim_is_created_owned_by_its_pod_allocated_and_reserved_after_the_bind() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 2), queue(), template("two", 2),
                         pod("train-0", templates={"gpu": "two"}))
    result = cycle(cluster)
    assert [b.pod for b in result.binds] == ["ml/train-0"]
    name = template_claim_name("train-0", "uid-train-0", "gpu")
    claim = cluster.claims[f"ml/{name}"]
    assert devices(claim) == ["node-a/gpu-0", "node-a/gpu-1"]
    assert [r.request for r in claim.allocation or ()] == ["gpu", "gpu"]
    assert claim.reserved_for == (ClaimConsumer("pods", "train-0", "uid-train-0"),)
    assert [(o.kind, o.name, o.uid, o.controller) for o in claim.meta.owner_references] == \
        [("Pod", "train-0", "uid-train-0", True)]
    assert claim.meta.annotations[POD_CLAIM_NAME_ANNOTATION] == "gpu"
    assert claim.meta.labels == {"made-by": "template"}  # the template's claim metadata
    assert claim.spec.requests[0].exactly is not None and claim.spec.requests[0].exactly.count == 2
    assert claim.allocation_node_selector is not None
    assert claim.allocation_node_selector[0].match_fields[0].values == ("node-a",)
    bound = cluster.pods["ml/train-0"]
    assert (bound.node_name, bound.phase) == ("node-a", "Running")
    assert bound.resource_claim_statuses == {"gpu": name}
    assert cluster.pod_claims("ml/train-0") == [claim]


def test_the_next_cycle_sees_the_allocation_and_gives_the_device_to_nobody_else() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 2), queue(), template("one"),
                         pod("p0", templates={"gpu": "one"}))
    cycle(cluster)
    first = made_claim(cluster, "p0")
    assert first is not None and devices(first) == ["node-a/gpu-0"]
    cluster.add(parse_objects([pod("p1", templates={"gpu": "one"}, minute=1),
                               pod("p2", templates={"gpu": "one"}, minute=2)]))
    result = cycle(cluster, 2)
    assert [b.pod for b in result.binds] == ["ml/p1"]  # one device left: p2 waits
    assert [c.claim for c in result.claims] == [f"ml/{template_claim_name('p1', 'uid-p1', 'gpu')}"]
    assert made_claim(cluster, "p0") is first  # p0's claim untouched: the same object
    second = made_claim(cluster, "p1")
    assert second is not None and devices(second) == ["node-a/gpu-1"]
    assert made_claim(cluster, "p2") is None  # (not bound: no claim made for it yet)
    no_device_twice(cluster)
    again = cycle(cluster, 3)  # nothing changed: nothing moves
    assert not again.binds and not again.claims
    no_device_twice(cluster)


def test_a_finished_pod_gives_its_devices_back_and_its_claim_is_deleted() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 1), queue(), template("one"),
                         pod("p0", templates={"gpu": "one"}), pod("p1", templates={"gpu": "one"}, minute=1))
    assert [b.pod for b in cycle(cluster).binds] == ["ml/p0"]
    assert not cycle(cluster, 2).binds
    cluster.finish("ml/p0", "Succeeded")
    assert made_claim(cluster, "p0") is None
    assert cluster.pods["ml/p0"].phase == "Succeeded" and not cluster.device_holders()
    result = cycle(cluster, 3)
    assert [b.pod for b in result.binds] == ["ml/p1"]
    claim = made_claim(cluster, "p1")
    assert claim is not None and devices(claim) == ["node-a/gpu-0"]
    with pytest.raises(ValueError, match="Succeeded or Failed"):
        cluster.finish("ml/p1", "Running")


def test_a_deleted_pod_gives_its_devices_back() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 1), queue(), template("one"),
                         pod("p0", templates={"gpu": "one"}), pod("p1", templates={"gpu": "one"}, minute=1))
    cycle(cluster)
    cluster.delete_pod("ml/p0")
    assert not cluster.claims and "ml/p0" not in cluster.pods
    assert [b.pod for b in cycle(cluster, 2).binds] == ["ml/p1"]


def test_preemption_evicts_the_holder_releases_its_claim_and_the_preemptor_gets_the_device() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 1), queue(), template("one"),
                         pod("low", templates={"gpu": "one"}))
    cycle(cluster)
    assert made_claim(cluster, "low") is not None
    cluster.add(parse_objects([pod("high", templates={"gpu": "one"}, priority_class="inference", minute=1)]))
    result = cycle(cluster, 2)
    assert [e.pod for e in result.evictions] == ["ml/low"] and not result.binds
    # the evicted pod is recreated Pending without the claim made for it; that claim is gone, the device free
    low = cluster.pods["ml/low"]
    assert (low.node_name, low.phase, dict(low.resource_claim_statuses)) == ("", "Pending", {})
    assert made_claim(cluster, "low") is None and not cluster.device_holders()
    result = cycle(cluster, 3)
    assert [b.pod for b in result.binds] == ["ml/high"]
    high = made_claim(cluster, "high")
    assert high is not None and devices(high) == ["node-a/gpu-0"]
    assert [c.uid for c in high.reserved_for] == ["uid-high"]
    no_device_twice(cluster)


def test_a_shared_claim_is_reserved_by_each_pod_and_deallocated_when_the_last_one_goes() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 2), queue(), shared_claim("shared"),
                         pod("a", claims={"gpu": "shared"}), pod("b", claims={"gpu": "shared"}, minute=1))
    result = cycle(cluster)
    assert sorted(b.pod for b in result.binds) == ["ml/a", "ml/b"]
    claim = cluster.claims["ml/shared"]
    assert devices(claim) == ["node-a/gpu-0"]
    assert sorted(c.name for c in claim.reserved_for) == ["a", "b"]
    assert cluster.pods["ml/a"].resource_claim_statuses == {}  # (a claim by name needs no status)
    cluster.delete_pod("ml/a")
    claim = cluster.claims["ml/shared"]
    assert devices(claim) == ["node-a/gpu-0"] and [c.name for c in claim.reserved_for] == ["b"]
    cluster.finish("ml/b", "Failed")
    claim = cluster.claims["ml/shared"]  # a claim by name stays, deallocated
    assert claim.allocation is None and claim.reserved_for == () and claim.allocation_node_selector is None


def test_an_allocated_claim_in_the_input_is_released_with_its_pods() -> None:
    allocated = shared_claim("given")
    allocated["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-1"}]}},
        "reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"}]}
    running = pod("a", claims={"gpu": "given"})
    running["spec"]["nodeName"] = "node-a"
    running["status"]["phase"] = "Running"
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 2), queue(), allocated, running,
                         pod("b", templates={"gpu": "two"}, minute=1), template("two", 2))
    assert not cycle(cluster).binds  # gpu-1 is a's
    cluster.delete_pod("ml/a")
    assert cluster.claims["ml/given"].allocation is None
    assert [b.pod for b in cycle(cluster, 2).binds] == ["ml/b"]
    claim = made_claim(cluster, "b")
    assert claim is not None and devices(claim) == ["node-a/gpu-0", "node-a/gpu-1"]


def test_a_claim_change_is_a_different_cycle_for_the_memo() -> None:
    cluster = cluster_of(node("node-a"), gpu_class(), gpu_slice("node-a", 1), queue(), template("one"),
                         pod("p0", templates={"gpu": "one"}), pod("p1", templates={"gpu": "one"}, minute=1))
    cycle(cluster)
    memo = CycleMemo()
    parsed = prepare(cluster.parsed(), CONFIG, NOW)
    assert not run_prepared_cycle(parsed, CONFIG, NOW + timedelta(minutes=2), memo).binds
    assert not run_prepared_cycle(prepare(cluster.parsed(), CONFIG, NOW), CONFIG, NOW + timedelta(minutes=3),
                                  memo).binds
    assert (memo.hits, memo.misses) == (1, 1)
    # the same pods, a new claim object: the cycle runs again
    (claim,) = cluster.claims.values()
    cluster.add(ParsedObjects(resource_claims=[replace(claim)]))
    assert not run_prepared_cycle(prepare(cluster.parsed(), CONFIG, NOW), CONFIG, NOW + timedelta(minutes=4),
                                  memo).binds
    assert (memo.hits, memo.misses) == (1, 2)


def test_claim_gpus_counts_exact_gpu_requests() -> None:
    (t,) = parse_objects([template("two", 2)]).resource_claim_templates
    assert spec_gpus(t.spec) == 2


# ------------------------------------------------------------------------------------- workload controllers
def job(name: str, pods: int, claim_template: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name),
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "schedulerName": "kai-scheduler", "restartPolicy": "Never",
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
                "containers": [{"name": "main", "image": "train",
                                "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]}}}}


def pytorchjob(name: str, workers: int, claim_template: str) -> Obj:
    replica = {"replicas": 1, "template": {"spec": {
        "schedulerName": "kai-scheduler",
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
        "containers": [{"name": "pytorch", "image": "train", "resources": {"claims": [{"name": "gpu"}]}}]}}}
    workers_spec = copy.deepcopy(replica)
    workers_spec["replicas"] = workers
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta(name),
            "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": workers_spec}}}


@pytest.mark.parametrize(("workload", "count"), [(job("train", 3, "two"), 3), (pytorchjob("ddp", 2, "two"), 3)],
                         ids=["Job", "PyTorchJob"])
def test_a_workload_whose_pod_template_has_resource_claims_gets_a_claim_per_pod(workload: Obj, count: int) -> None:
    cluster = cluster_of(node("node-a"), node("node-b"), gpu_class(), gpu_slice("node-a", 4), gpu_slice("node-b", 4),
                         queue(), template("two", 2), workload)
    pods = list(cluster.pods.values())
    assert len(pods) == count
    assert all([(c.name, c.resource_claim_template_name) for c in p.resource_claims] == [("gpu", "two")] for p in pods)
    result = cycle(cluster)
    assert len(result.binds) == count
    assert len(cluster.claims) == count  # one claim per pod, each made from the template
    for p in cluster.pods.values():
        (claim,) = cluster.pod_claims(f"ml/{p.meta.name}")
        assert [o.name for o in claim.meta.owner_references] == [p.meta.name]
        assert len(claim.allocation or ()) == 2
        assert {r.pool for r in claim.allocation or ()} == {p.node_name}  # the devices of its node
    no_device_twice(cluster)
    for key in list(cluster.pods):
        cluster.finish(key)
    assert not cluster.claims and not cluster.device_holders()


def _pod_specs(obj: Any) -> Iterator[dict[str, Any]]:
    """Every mapping of a manifest that looks like a pod spec (it has a list of containers)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("containers"), list) and obj["containers"] and isinstance(obj["containers"][0], dict):
            yield obj
        for value in obj.values():
            yield from _pod_specs(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _pod_specs(value)


# every workload fixture with a pod template (Argo, Tekton, KubeVirt and TrainJob describe their pods otherwise)
WORKLOAD_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.yaml")
                           if any(True for doc in fixture(p.name) for _ in _pod_specs(doc)))


@pytest.mark.parametrize("name", WORKLOAD_FIXTURES)
def test_workload_controllers_copy_the_pod_templates_resource_claims(name: str) -> None:
    docs = fixture(name)
    for doc in docs:
        for spec in _pod_specs(doc):
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    parsed = prepare(parse_objects(docs), CONFIG, NOW)
    assert parsed.pods, f"{name}: no pods"
    missing = [p.meta.name for p in parsed.pods
               if [c.resource_claim_template_name for c in p.resource_claims] != ["one"]]
    assert not missing, f"{name}: pods without the template's resourceClaims: {missing}"
