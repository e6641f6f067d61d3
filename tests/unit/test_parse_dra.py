"""Parsing and validating Dynamic Resource Allocation objects (resource.k8s.io v1, v1beta2, v1beta1)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kaisched.k8s import constants as c
from kaisched.k8s import parse_objects
from kaisched.k8s.objects import (
    ClaimConsumer,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestResult,
    DeviceSubRequest,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectError,
    ParsedObjects,
    PodResourceClaim,
    ResourceClaimSpec,
)

V1, V1BETA2, V1BETA1 = c.RESOURCE_V1_API_VERSION, c.RESOURCE_V1BETA2_API_VERSION, c.RESOURCE_V1BETA1_API_VERSION
VERSIONS = pytest.mark.parametrize("version", [V1, V1BETA2, V1BETA1])
DRIVER = "gpu.nvidia.com"
GPU_CEL = "device.capacity['gpu.nvidia.com'].memory >= quantity('40Gi')"
NIC_CEL = 'device.attributes["nic.example.com"].speed == "400G"'

# ----------------------------------------------------------------------------------------- builders


def device_class(version: str = V1, name: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}], "config": []},
    }


ATTRIBUTES: dict[str, Any] = {
    "productName": {"string": "NVIDIA A100-SXM4-80GB"},
    "index": {"int": 0},
    "mig": {"bool": False},
    "driverVersion": {"version": "550.54.15"},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
}
CAPACITY: dict[str, Any] = {"memory": {"value": "80Gi"}, "multiprocessors": {"value": 108}}


def gpu_device(version: str, name: str) -> dict[str, Any]:
    fields = {"attributes": copy.deepcopy(ATTRIBUTES), "capacity": copy.deepcopy(CAPACITY)}
    return {"name": name, "basic": fields} if version == V1BETA1 else {"name": name, **fields}


def resource_slice(version: str = V1, name: str = "node-0-gpus", **spec: Any) -> dict[str, Any]:
    node = name.removesuffix("-gpus")
    return {
        "apiVersion": version,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 3, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [gpu_device(version, "gpu-0"), gpu_device(version, "gpu-1")],
            **spec,
        },
    }


def claim_spec(version: str = V1) -> dict[str, Any]:
    exact = {"deviceClassName": DRIVER, "selectors": [{"cel": {"expression": GPU_CEL}}], "count": 2,
             "adminAccess": False}  # fmt: skip
    first_available = [
        {"name": "fast", "deviceClassName": "nic.example.com", "selectors": [{"cel": {"expression": NIC_CEL}}]},
        {"name": "any", "deviceClassName": "nic.example.com", "allocationMode": "All"},
    ]
    gpus = {"name": "gpus", **exact} if version == V1BETA1 else {"name": "gpus", "exactly": exact}
    return {
        "devices": {
            "requests": [gpus, {"name": "nic", "firstAvailable": first_available}],
            "constraints": [{"requests": ["gpus", "nic/fast"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        }
    }


ALLOCATION: dict[str, Any] = {
    "devices": {
        "results": [
            {"request": "gpus", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"},
            {"request": "gpus", "driver": DRIVER, "pool": "node-0", "device": "gpu-1"},
            {"request": "nic/fast", "driver": "nic.example.com", "pool": "node-0", "device": "nic-0"},
        ]
    },
    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                              "values": ["node-0"]}]}]},
}  # fmt: skip


def resource_claim(version: str = V1, name: str = "train-gpu", allocated: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": version,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": claim_spec(version),
    }
    if allocated:
        doc["status"] = {
            "allocation": copy.deepcopy(ALLOCATION),
            "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "uid-train-0"}],
        }
    return doc


def claim_template(version: str = V1, name: str = "train-gpu-template") -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"metadata": {"labels": {"app": "train"}, "annotations": {"note": "made for train-0"}},
                 "spec": claim_spec(version)},
    }  # fmt: skip


def claim_pod(name: str = "train-0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "train-gpu-template"},
                {"name": "shared", "resourceClaimName": "train-gpu"},
                {"name": "scratch", "resourceClaimTemplateName": "scratch-template"},
            ],
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "gpus", "resourceClaimName": "train-0-gpus-x7k2q"},
                {"name": "scratch"},  # no claim is needed for this one
            ]
        },
    }


def parse_ok(*docs: dict[str, Any]) -> ParsedObjects:
    parsed = parse_objects(docs)
    assert parsed.errors == []
    return parsed


# --------------------------------------------------------------------------------- expected objects


def gpu(name: str) -> Device:
    return Device(
        name=name,
        attributes={
            "gpu.nvidia.com/productName": DeviceAttribute("string", "NVIDIA A100-SXM4-80GB"),
            "gpu.nvidia.com/index": DeviceAttribute("int", 0),
            "gpu.nvidia.com/mig": DeviceAttribute("bool", False),
            "gpu.nvidia.com/driverVersion": DeviceAttribute("version", "550.54.15"),
            "resource.kubernetes.io/pcieRoot": DeviceAttribute("string", "pci0000:00"),
        },
        capacity={"gpu.nvidia.com/memory": 80 * 2**30, "gpu.nvidia.com/multiprocessors": 108.0},
    )


EXPECTED_SPEC = ResourceClaimSpec(
    requests=(
        DeviceRequest("gpus", exactly=DeviceSubRequest("gpus", DRIVER, (GPU_CEL,), "ExactCount", 2)),
        DeviceRequest(
            "nic",
            first_available=(
                DeviceSubRequest("fast", "nic.example.com", (NIC_CEL,)),
                DeviceSubRequest("any", "nic.example.com", allocation_mode="All"),
            ),
        ),
    ),
    constraints=(DeviceConstraint(("gpus", "nic/fast"), "resource.kubernetes.io/pcieRoot"),),
)
NODE_0_TERM = NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", ("node-0",)),))


# -------------------------------------------------------------------------------------- good input


@VERSIONS
def test_device_class(version: str) -> None:
    (device_cls,) = parse_ok(device_class(version)).device_classes
    assert isinstance(device_cls, DeviceClass)
    assert (device_cls.meta.name, device_cls.meta.namespace) == (DRIVER, "")
    assert device_cls.selectors == ('device.driver == "gpu.nvidia.com"',)


@VERSIONS
def test_node_local_resource_slice_qualifies_names_and_converts_capacity(version: str) -> None:
    (rs,) = parse_ok(resource_slice(version)).resource_slices
    assert (rs.meta.name, rs.driver, rs.pool, rs.pool_generation, rs.pool_slice_count) == (
        "node-0-gpus", DRIVER, "node-0", 3, 1,
    )  # fmt: skip
    assert (rs.node_name, rs.node_selector, rs.all_nodes) == ("node-0", None, False)
    assert rs.devices == (gpu("gpu-0"), gpu("gpu-1"))
    assert rs.devices[0].capacity["gpu.nvidia.com/memory"] == 85899345920.0


@VERSIONS
def test_network_attached_resource_slices(version: str) -> None:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    by_selector = resource_slice(version, "rack-1-gpus", nodeName=None, nodeSelector=selector)
    everywhere = resource_slice(version, "shared-gpus", allNodes=True, devices=[])
    del everywhere["spec"]["nodeName"]
    parsed = parse_ok(by_selector, everywhere)
    rack, shared = parsed.resource_slices
    assert rack.node_name == "" and not rack.all_nodes
    assert rack.node_selector == (NodeSelectorTerm((NodeSelectorRequirement("rack", "In", ("r1",)),)),)
    assert (shared.node_name, shared.node_selector, shared.all_nodes, shared.devices) == ("", None, True, ())


def test_resource_slice_defaults() -> None:
    doc = {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "s"},
           "spec": {"driver": "d.example.com", "pool": {"name": "p"}, "nodeName": "n",
                    "devices": [{"name": "dev"}]}}  # fmt: skip
    (rs,) = parse_ok(doc).resource_slices
    assert (rs.pool_generation, rs.pool_slice_count, rs.devices) == (0, 1, (Device("dev"),))


@VERSIONS
def test_resource_claim(version: str) -> None:
    (claim,) = parse_ok(resource_claim(version)).resource_claims
    assert (claim.meta.namespace, claim.meta.name, claim.api_version) == ("ml", "train-gpu", version)
    assert claim.spec == EXPECTED_SPEC
    assert claim.allocation == (
        DeviceRequestResult("gpus", DRIVER, "node-0", "gpu-0"),
        DeviceRequestResult("gpus", DRIVER, "node-0", "gpu-1"),
        DeviceRequestResult("nic/fast", "nic.example.com", "node-0", "nic-0"),
    )
    assert claim.allocation_node_selector == (NODE_0_TERM,)
    assert claim.reserved_for == (ClaimConsumer("pods", "train-0", "uid-train-0"),)


@VERSIONS
def test_unallocated_resource_claim(version: str) -> None:
    (claim,) = parse_ok(resource_claim(version, allocated=False)).resource_claims
    assert (claim.allocation, claim.allocation_node_selector, claim.reserved_for) == (None, None, ())


def test_allocation_without_node_selector_and_empty_results() -> None:
    doc = resource_claim()
    doc["status"] = {"allocation": {"devices": {"results": []}}}
    (claim,) = parse_ok(doc).resource_claims
    assert (claim.allocation, claim.allocation_node_selector) == ((), None)


@pytest.mark.parametrize("version", [V1, V1BETA1])
def test_request_defaults_and_admin_access(version: str) -> None:
    exact = {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}
    request = {"name": "r", **exact} if version == V1BETA1 else {"name": "r", "exactly": exact}
    doc = {"apiVersion": version, "kind": "ResourceClaim", "metadata": {"name": "c"},
           "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    (claim,) = parse_ok(doc).resource_claims
    assert claim.meta.namespace == "default"
    assert claim.spec == ResourceClaimSpec((DeviceRequest("r", DeviceSubRequest("r", DRIVER, admin_access=True)),))


@VERSIONS
def test_resource_claim_template(version: str) -> None:
    (template,) = parse_ok(claim_template(version)).resource_claim_templates
    assert (template.meta.namespace, template.meta.name) == ("ml", "train-gpu-template")
    assert template.spec == EXPECTED_SPEC
    assert (template.claim_labels, template.claim_annotations) == ({"app": "train"}, {"note": "made for train-0"})


def test_pod_with_templated_and_direct_claims() -> None:
    (pod,) = parse_ok(claim_pod()).pods
    assert pod.resource_claims == (
        PodResourceClaim("gpus", resource_claim_template_name="train-gpu-template"),
        PodResourceClaim("shared", resource_claim_name="train-gpu"),
        PodResourceClaim("scratch", resource_claim_template_name="scratch-template"),
    )
    assert pod.resource_claim_statuses == {"gpus": "train-0-gpus-x7k2q", "scratch": ""}


def test_pod_without_claims() -> None:
    doc = claim_pod()
    del doc["spec"]["resourceClaims"], doc["status"]
    (pod,) = parse_ok(doc).pods
    assert (pod.resource_claims, pod.resource_claim_statuses) == ((), {})


def test_list_documents_give_their_api_version_to_the_items() -> None:
    item = resource_slice(V1BETA1)
    del item["apiVersion"], item["kind"]
    (rs,) = parse_ok({"apiVersion": V1BETA1, "kind": "ResourceSliceList", "items": [item]}).resource_slices
    assert rs.devices == (gpu("gpu-0"), gpu("gpu-1"))


def test_all_kinds_together_in_input_order() -> None:
    parsed = parse_ok(device_class(), resource_slice(V1BETA1), resource_slice(V1, "node-1-gpus"),
                      claim_template(V1BETA2), resource_claim(), claim_pod())  # fmt: skip
    assert [rs.meta.name for rs in parsed.resource_slices] == ["node-0-gpus", "node-1-gpus"]
    assert (len(parsed.device_classes), len(parsed.resource_claim_templates), len(parsed.resource_claims)) == (1, 1, 1)
    assert len(parsed.pods) == 1


# --------------------------------------------------------------------------------------- bad input

Mutation = Callable[[dict[str, Any]], object]
SLICE = "ResourceSlice node-0-gpus"
CLAIM = "ResourceClaim ml/train-gpu"
TEMPLATE = "ResourceClaimTemplate ml/train-gpu-template"
POD = "Pod ml/train-0"
CLASS = "DeviceClass gpu.nvidia.com"
BETA1_BASIC = "in resource.k8s.io/v1beta1 the attributes and capacity of a device sit under basic"


def requests_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
    requests: list[dict[str, Any]] = spec["devices"]["requests"]
    return requests


def v1_device(doc: dict[str, Any]) -> dict[str, Any]:
    device: dict[str, Any] = doc["spec"]["devices"][0]
    return device


BUILDERS: dict[str, Callable[[str], dict[str, Any]]] = {
    SLICE: resource_slice, CLAIM: resource_claim, TEMPLATE: claim_template, POD: lambda _: claim_pod(),
    CLASS: device_class,
}  # fmt: skip

BAD: list[tuple[str, str, Mutation, str, str]] = [
    # (object, apiVersion, mutation, field, message)
    (CLASS, V1, lambda d: d["spec"]["selectors"][0]["cel"].update(expression=" "), "spec.selectors[0].cel.expression",
     "must be a non-empty CEL expression, got a string (' ')"),
    (CLASS, V1, lambda d: d["spec"]["selectors"].append({"expression": "true"}), "spec.selectors[1].cel",
     "is required (a CEL selector: cel.expression)"),
    (CLASS, V1, lambda d: d["spec"]["selectors"][0].update(cel="true"), "spec.selectors[0].cel",
     "expected a mapping ({expression: ...}), got a string"),
    (CLASS, V1, lambda d: d["spec"].update(selectors=["true"]), "spec.selectors[0]",
     "expected a mapping ({cel: {expression: ...}}), got a string"),
    (CLASS, V1, lambda d: d.update(apiVersion="resource.k8s.io/v1alpha3"), "apiVersion",
     "unsupported apiVersion 'resource.k8s.io/v1alpha3' for DeviceClass "
     "(expected resource.k8s.io/v1, resource.k8s.io/v1beta1 or resource.k8s.io/v1beta2)"),
    (SLICE, V1, lambda d: d["spec"].pop("nodeName"), "spec",
     "exactly one of nodeName, nodeSelector, allNodes must be set"),
    (SLICE, V1, lambda d: d["spec"].update(allNodes=True), "spec",
     "exactly one of nodeName, nodeSelector, allNodes must be set"),
    (SLICE, V1, lambda d: d["spec"].update(nodeName=None, perDeviceNodeSelection=True), "spec.perDeviceNodeSelection",
     "not supported: set nodeName, nodeSelector or allNodes on the slice instead of on each device"),
    (SLICE, V1, lambda d: d["spec"].update(nodeName=None, nodeSelector={"nodeSelectorTerms": [{}, {}]}),
     "spec.nodeSelector.nodeSelectorTerms", "must contain exactly one term, got 2"),
    (SLICE, V1, lambda d: d["spec"].update(nodeName=None, nodeSelector={"nodeSelectorTerms": []}),
     "spec.nodeSelector.nodeSelectorTerms", "must contain at least one node selector term"),
    (SLICE, V1, lambda d: d["spec"].pop("driver"), "spec.driver", "is required"),
    (SLICE, V1, lambda d: d["spec"]["pool"].pop("name"), "spec.pool.name", "is required"),
    (SLICE, V1, lambda d: d["spec"].pop("pool"), "spec.pool.name", "is required"),
    (SLICE, V1, lambda d: d["spec"]["pool"].update(resourceSliceCount=0), "spec.pool.resourceSliceCount",
     "must be >= 1, got 0"),
    (SLICE, V1, lambda d: d["spec"]["pool"].update(generation=-1), "spec.pool.generation", "must be >= 0, got -1"),
    (SLICE, V1, lambda d: d["spec"]["devices"][1].update(name="gpu-0"), "spec.devices[1].name",
     "duplicate device name 'gpu-0' (also spec.devices[0])"),
    (SLICE, V1, lambda d: v1_device(d).pop("name"), "spec.devices[0].name", "is required"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(index={"int": 0, "string": "0"}),
     "spec.devices[0].attributes.index", "exactly one of int, bool, string, version must be set"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(index={}),
     "spec.devices[0].attributes.index", "exactly one of int, bool, string, version must be set"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(index={"int": "0"}),
     "spec.devices[0].attributes.index.int", "must be an integer, got a string ('0')"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(mig={"bool": "false"}),
     "spec.devices[0].attributes.mig.bool", "must be true or false, got a string ('false')"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(driverVersion={"version": "550.54"}),
     "spec.devices[0].attributes.driverVersion.version", "must be a semantic version like 1.2.3, got a string "
     "('550.54')"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update(productName="A100"),
     "spec.devices[0].attributes.productName",
     "expected a mapping with one of int, bool, string, version, got a string"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update({"product name": {"string": "x"}}),
     "spec.devices[0].attributes['product name']",
     "invalid name: expected an identifier like productName, optionally with a domain (gpu.example.com/productName)"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update({"/index": {"int": 1}}),
     "spec.devices[0].attributes['/index']",
     "invalid name: expected an identifier like productName, optionally with a domain (gpu.example.com/productName)"),
    (SLICE, V1, lambda d: v1_device(d)["attributes"].update({"gpu.nvidia.com/index": {"int": 1}}),
     "spec.devices[0].attributes['gpu.nvidia.com/index']",
     "duplicate attribute 'gpu.nvidia.com/index' (a name without a domain gets the driver's, gpu.nvidia.com)"),
    (SLICE, V1, lambda d: v1_device(d)["capacity"].update(memory={"value": "80Gx"}),
     "spec.devices[0].capacity.memory.value", "invalid quantity '80Gx'"),
    (SLICE, V1, lambda d: v1_device(d)["capacity"].update(memory={"value": "-1Gi"}),
     "spec.devices[0].capacity.memory.value", "must not be negative, got '-1Gi'"),
    (SLICE, V1, lambda d: v1_device(d)["capacity"].update(memory="80Gi"),
     "spec.devices[0].capacity.memory", "expected a mapping ({value: <quantity>}), got a string"),
    (SLICE, V1, lambda d: v1_device(d)["capacity"].update(memory={}),
     "spec.devices[0].capacity.memory.value", "is required (a quantity like 80Gi or 1)"),
    (SLICE, V1, lambda d: d["spec"]["devices"].__setitem__(0, gpu_device(V1BETA1, "gpu-0")), "spec.devices[0].basic",
     "not a field in resource.k8s.io/v1: attributes and capacity sit directly on the device "
     "(basic is the resource.k8s.io/v1beta1 layout)"),
    (SLICE, V1BETA1, lambda d: d["spec"]["devices"].__setitem__(1, gpu_device(V1, "gpu-1")),
     "spec.devices[1].attributes", BETA1_BASIC),
    (SLICE, V1BETA1, lambda d: d["spec"]["devices"].__setitem__(1, {"name": "gpu-1", "capacity": CAPACITY}),
     "spec.devices[1].capacity", BETA1_BASIC),
    (SLICE, V1BETA1, lambda d: d["spec"]["devices"][0]["basic"]["capacity"].update(memory={"value": []}),
     "spec.devices[0].basic.capacity.memory.value", "invalid quantity []"),
    (CLAIM, V1, lambda d: requests_of(d)[0]["exactly"].update(count=0), "spec.devices.requests[0].exactly.count",
     "must be >= 1, got 0"),
    (CLAIM, V1BETA2, lambda d: requests_of(d)[0]["exactly"].update(allocationMode="All"),
     "spec.devices.requests[0].exactly.count", "must not be set when allocationMode is All"),
    (CLAIM, V1, lambda d: requests_of(d)[0]["exactly"].update(allocationMode="Some"),
     "spec.devices.requests[0].exactly.allocationMode", "unknown allocation mode 'Some' (expected All, ExactCount)"),
    (CLAIM, V1, lambda d: requests_of(d)[0]["exactly"].pop("deviceClassName"),
     "spec.devices.requests[0].exactly.deviceClassName", "is required"),
    (CLAIM, V1, lambda d: requests_of(d)[0]["exactly"].update(adminAccess="yes"),
     "spec.devices.requests[0].exactly.adminAccess", "must be true or false, got a string ('yes')"),
    (CLAIM, V1, lambda d: requests_of(d)[0]["exactly"]["selectors"][0]["cel"].update(expression=5),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression",
     "must be a non-empty CEL expression, got an integer (5)"),
    (CLAIM, V1, lambda d: requests_of(d)[0].pop("exactly"), "spec.devices.requests[0]",
     "exactly one of exactly, firstAvailable must be set"),
    (CLAIM, V1, lambda d: requests_of(d)[1].update(exactly={"deviceClassName": "x"}), "spec.devices.requests[1]",
     "exactly one of exactly, firstAvailable must be set"),
    (CLAIM, V1, lambda d: requests_of(d)[0].update(requests_of(d)[0].pop("exactly")),
     "spec.devices.requests[0].deviceClassName",
     "not a field in resource.k8s.io/v1: deviceClassName, selectors, count, adminAccess sit under exactly "
     "(on the request itself only in resource.k8s.io/v1beta1)"),
    (CLAIM, V1, lambda d: requests_of(d)[1].update(name="gpus"), "spec.devices.requests[1].name",
     "duplicate request name 'gpus' (also spec.devices.requests[0])"),
    (CLAIM, V1, lambda d: requests_of(d)[0].pop("name"), "spec.devices.requests[0].name", "is required"),
    (CLAIM, V1, lambda d: requests_of(d)[1].update(firstAvailable=[]), "spec.devices.requests[1].firstAvailable",
     "must contain at least one subrequest"),
    (CLAIM, V1, lambda d: requests_of(d)[1]["firstAvailable"][1].update(name="fast"),
     "spec.devices.requests[1].firstAvailable[1].name",
     "duplicate subrequest name 'fast' (also spec.devices.requests[1].firstAvailable[0])"),
    (CLAIM, V1, lambda d: requests_of(d)[1]["firstAvailable"][0].pop("deviceClassName"),
     "spec.devices.requests[1].firstAvailable[0].deviceClassName", "is required"),
    (CLAIM, V1BETA1, lambda d: requests_of(d)[0].update(count=-2), "spec.devices.requests[0].count",
     "must be >= 1, got -2"),
    (CLAIM, V1BETA1, lambda d: requests_of(d)[0].pop("deviceClassName"), "spec.devices.requests[0].deviceClassName",
     "is required"),
    (CLAIM, V1BETA1, lambda d: requests_of(d)[1].update(deviceClassName="nic.example.com"), "spec.devices.requests[1]",
     "firstAvailable excludes deviceClassName, selectors, allocationMode, count, adminAccess"),
    (CLAIM, V1BETA1, lambda d: requests_of(d)[0].update(exactly=requests_of(resource_claim())[0]["exactly"]),
     "spec.devices.requests[0].exactly",
     "not a field in resource.k8s.io/v1beta1: deviceClassName, selectors, allocationMode, count and adminAccess "
     "sit directly on the request"),
    (CLAIM, V1BETA1, lambda d: requests_of(d)[1].update(exactly={}), "spec.devices.requests[1].exactly",
     "not a field in resource.k8s.io/v1beta1: deviceClassName, selectors, allocationMode, count and adminAccess "
     "sit directly on the request"),
    (CLAIM, V1, lambda d: d["spec"]["devices"]["constraints"][0]["requests"].append("nic/slow"),
     "spec.devices.constraints[0].requests[2]",
     "unknown request 'nic/slow' (expected the name of a request of this claim, or <request>/<subrequest>)"),
    (CLAIM, V1, lambda d: d["spec"]["devices"]["constraints"][0].update(matchAttribute="pcieRoot"),
     "spec.devices.constraints[0].matchAttribute",
     "must be a fully qualified attribute name like gpu.example.com/productName, got 'pcieRoot'"),
    (CLAIM, V1, lambda d: d["spec"]["devices"]["constraints"][0].pop("matchAttribute"),
     "spec.devices.constraints[0].matchAttribute", "is required"),
    (CLAIM, V1, lambda d: d["spec"]["devices"]["constraints"][0].update(distinctAttribute="gpu.nvidia.com/uuid"),
     "spec.devices.constraints[0].distinctAttribute", "not supported (only matchAttribute constraints are)"),
    (CLAIM, V1, lambda d: d["status"]["allocation"]["devices"]["results"][2].pop("device"),
     "status.allocation.devices.results[2].device", "is required"),
    (CLAIM, V1, lambda d: d["status"]["allocation"].update(nodeSelector={}),
     "status.allocation.nodeSelector.nodeSelectorTerms", "must contain at least one node selector term"),
    (CLAIM, V1, lambda d: d["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0].update(
        operator="Near"), "status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].operator",
     "unknown operator 'Near' (expected DoesNotExist, Exists, Gt, In, Lt, NotIn)"),
    (CLAIM, V1, lambda d: d["status"]["reservedFor"][0].pop("uid"), "status.reservedFor[0].uid", "is required"),
    (CLAIM, V1, lambda d: d["status"].update(reservedFor={"name": "x"}), "status.reservedFor",
     "expected a list, got a mapping"),
    (TEMPLATE, V1, lambda d: d["spec"]["metadata"]["labels"].update(gpus=2), "spec.metadata.labels.gpus",
     "must be a string, got an integer (2) (quote it in YAML)"),
    (TEMPLATE, V1BETA2, lambda d: requests_of(d)[0]["exactly"].update(count=0),
     "spec.spec.devices.requests[0].exactly.count", "must be >= 1, got 0"),
    (TEMPLATE, V1, lambda d: d["spec"].update(spec=[]), "spec.spec", "expected a mapping, got a list"),
    (POD, "v1", lambda d: d["spec"]["resourceClaims"][1].update(resourceClaimTemplateName="t"),
     "spec.resourceClaims[1]", "exactly one of resourceClaimName, resourceClaimTemplateName must be set"),
    (POD, "v1", lambda d: d["spec"]["resourceClaims"][1].pop("resourceClaimName"),
     "spec.resourceClaims[1]", "exactly one of resourceClaimName, resourceClaimTemplateName must be set"),
    (POD, "v1", lambda d: d["spec"]["resourceClaims"][2].update(name="gpus"), "spec.resourceClaims[2].name",
     "duplicate resource claim name 'gpus' (also spec.resourceClaims[0])"),
    (POD, "v1", lambda d: d["spec"]["resourceClaims"][0].pop("name"), "spec.resourceClaims[0].name", "is required"),
    (POD, "v1", lambda d: d["spec"]["resourceClaims"][0].update(resourceClaimTemplateName=7),
     "spec.resourceClaims[0].resourceClaimTemplateName", "must be a string, got an integer (7)"),
    (POD, "v1", lambda d: d["status"]["resourceClaimStatuses"][0].pop("name"),
     "status.resourceClaimStatuses[0].name", "is required"),
    (POD, "v1", lambda d: d["status"]["resourceClaimStatuses"][1].update(name="gpus"),
     "status.resourceClaimStatuses[1].name", "duplicate resource claim name 'gpus'"),
    (POD, "v1", lambda d: d["status"].update(resourceClaimStatuses="gpus"), "status.resourceClaimStatuses",
     "expected a list, got a string"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "version", "mutate", "field", "message"), BAD,
                         ids=[f"{b[0].split()[0]}-{b[3]}-{i}" for i, b in enumerate(BAD)])  # fmt: skip
def test_bad_input_is_reported_and_the_rest_still_parses(
    label: str, version: str, mutate: Mutation, field: str, message: str
) -> None:
    bad = BUILDERS[label](version)
    mutate(bad)
    others = [device_class(V1, "other.example.com"), resource_slice(V1, "node-1-gpus"),
              resource_claim(V1BETA1, "other-claim"), claim_template(V1BETA2, "other-template"), claim_pod("other")]
    parsed = parse_objects([others[0], bad, *others[1:]])
    assert len(parsed.errors) == 1, parsed.errors
    error = parsed.errors[0]
    assert (error.object, error.field) == (label, field)
    assert error.message == message or error.message.startswith(message), error.message
    assert [dc.meta.name for dc in parsed.device_classes] == ["other.example.com"]
    assert [rs.meta.name for rs in parsed.resource_slices] == ["node-1-gpus"]
    assert [claim.meta.name for claim in parsed.resource_claims] == ["other-claim"]
    assert [t.meta.name for t in parsed.resource_claim_templates] == ["other-template"]
    assert [p.meta.name for p in parsed.pods] == ["other"]


def test_error_text_names_object_field_and_problem() -> None:
    bad = resource_claim()
    requests_of(bad)[0]["exactly"]["count"] = 0
    (error,) = parse_objects([bad]).errors
    assert str(error) == "ResourceClaim ml/train-gpu: spec.devices.requests[0].exactly.count: must be >= 1, got 0"
    bad_slice = resource_slice()
    del bad_slice["spec"]["nodeName"]
    (error,) = parse_objects([bad_slice]).errors
    assert str(error) == "ResourceSlice node-0-gpus: spec: exactly one of nodeName, nodeSelector, allNodes must be set"


def test_duplicate_dra_objects_keep_the_first() -> None:
    parsed = parse_objects([resource_claim(V1), resource_claim(V1BETA1)])
    assert [claim.api_version for claim in parsed.resource_claims] == [V1]
    message = f"duplicate {CLAIM}: only the first definition is used"
    assert parsed.errors == [ObjectError(CLAIM, "metadata.name", message)]


def test_single_version_kinds_keep_their_api_version_message() -> None:
    doc = {"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}
    (error,) = parse_objects([doc]).errors
    assert error.message == "unsupported apiVersion 'v2' for Pod (expected v1)"
    doc = {"kind": "ResourceSlice", "metadata": {"name": "s"}}
    (error,) = parse_objects([doc]).errors
    assert error.message == (
        "missing apiVersion (expected resource.k8s.io/v1, resource.k8s.io/v1beta1 or resource.k8s.io/v1beta2 "
        "for ResourceSlice)"
    )
