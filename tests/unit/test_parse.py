"""Parsing and validating Kubernetes/KAI objects (kaisched.k8s.parse)."""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from kaisched.k8s import (
    LabelSelector,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    ObjectError,
    OwnerReference,
    ParsedObjects,
    PodCondition,
    QueueResource,
    SubGroup,
    Taint,
    Toleration,
    TopologyConstraint,
    parse_objects,
)
from kaisched.k8s import constants as c

# --------------------------------------------------------------------------------------- builders


def merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``patch`` into a copy of ``base``; a value of ``DELETE`` removes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


DELETE: Any = object()


def pod(name: str = "p", namespace: str | None = "ml", **patch: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
    }
    if namespace is not None:
        doc["metadata"]["namespace"] = namespace
    return merge(doc, patch)


def node(name: str = "n", **patch: Any) -> dict[str, Any]:
    doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "110"}},
    }
    return merge(doc, patch)


def queue(name: str = "q", **patch: Any) -> dict[str, Any]:
    doc = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1}}},
    }
    return merge(doc, patch)


def pod_group(name: str = "pg", namespace: str = "ml", **patch: Any) -> dict[str, Any]:
    doc = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queue": "q", "minMember": 2},
    }
    return merge(doc, patch)


def priority_class(name: str = "pc", value: Any = 100, **patch: Any) -> dict[str, Any]:
    doc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
    return merge(doc, {"value": value, **patch})


def with_spec(doc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return merge(doc, {"spec": spec})


def only_error(parsed: ParsedObjects) -> ObjectError:
    assert len(parsed.errors) == 1, parsed.errors
    return parsed.errors[0]


def parse_one_error(doc: Mapping[str, Any]) -> ObjectError:
    """Parse a single broken object: it must be dropped with exactly one error."""
    parsed = parse_objects([doc])
    assert not (parsed.pods or parsed.nodes or parsed.queues or parsed.pod_groups or parsed.priority_classes)
    return only_error(parsed)


def parse_ok(doc: Mapping[str, Any]) -> ParsedObjects:
    parsed = parse_objects([doc])
    assert parsed.errors == []
    return parsed


# ------------------------------------------------------------------------------------------- pods


FULL_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "worker-0",
        "namespace": "ml",
        "uid": "6f1c-uid",
        "labels": {"kai.scheduler/queue": "team-a", "app": "train"},
        "annotations": {"pod-group-name": "pg-1", "gpu-fraction": "0.5"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "deletionTimestamp": "2024-01-02T03:04:05.123456789+02:00",
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "controller": True}],
    },
    "spec": {
        "schedulerName": "kai-scheduler",
        "nodeName": "node-1",
        "priorityClassName": "train",
        "priority": 50,
        "nodeSelector": {"pool": "a100"},
        "overhead": {"cpu": "250m", "memory": "64Mi"},
        "schedulingGates": [{"name": "wait-for-quota"}],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "containers": [
            {
                "name": "main",
                "image": "ignored:latest",
                "resources": {
                    "requests": {"cpu": "500m", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": 1, "nvidia.com/gpu": 1},
                },
                "ports": [{"containerPort": 8080, "hostPort": 80, "protocol": "UDP", "hostIP": "0.0.0.0"}],
            },
            {"name": "sidecar", "ports": [{"containerPort": 9090}]},
        ],
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"operator": "Exists"},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10,
                     "preference": {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}}
                ],
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaces": ["a", "b"]}
                ]
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                            "namespaceSelector": {},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            },
        },
    },
    "status": {
        "phase": "Running",
        "nominatedNodeName": "node-2",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
            {"type": "Ready", "status": "True"},
        ],
    },
}  # fmt: skip


def test_full_pod() -> None:
    (p,) = parse_ok(FULL_POD).pods
    meta = p.meta
    assert (meta.name, meta.namespace, meta.uid) == ("worker-0", "ml", "6f1c-uid")
    assert meta.labels == {"kai.scheduler/queue": "team-a", "app": "train"}
    assert meta.annotations["pod-group-name"] == "pg-1"
    assert meta.creation_timestamp == datetime(2024, 1, 1, tzinfo=UTC)
    assert meta.deletion_timestamp == datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=UTC)
    assert meta.deletion_timestamp.tzinfo is UTC
    assert meta.owner_references == (OwnerReference("batch/v1", "Job", "j", "j-uid", controller=True),)
    assert p.scheduler_name == "kai-scheduler"
    assert (p.node_name, p.phase, p.nominated_node_name) == ("node-1", "Running", "node-2")
    assert (p.priority_class_name, p.priority) == ("train", 50)
    assert p.node_selector == {"pool": "a100"}
    assert p.overhead == {"cpu": 250.0, "memory": 64 * 2**20}
    assert p.scheduling_gates == ("wait-for-quota",)
    main, sidecar = p.containers
    assert main.name == "main"
    assert main.requests == {"cpu": 500.0, "memory": 16 * 2**30, "nvidia.com/gpu": 1.0}
    assert main.limits == {"cpu": 1000.0, "nvidia.com/gpu": 1.0}
    assert main.ports[0].container_port == 8080
    assert (main.ports[0].host_port, main.ports[0].protocol, main.ports[0].host_ip) == (80, "UDP", "0.0.0.0")
    assert sidecar.requests == {} and sidecar.ports[0].host_port == 0 and sidecar.ports[0].protocol == "TCP"
    assert p.host_ports == (main.ports[0],)
    assert p.init_containers[0].requests == {"cpu": 2000.0, "memory": 2.0**30}
    # effective request: max(sum of containers, init) + overhead
    assert p.requests == {"cpu": 2250.0, "memory": 16 * 2**30 + 64 * 2**20, "nvidia.com/gpu": 1.0}
    assert p.tolerations == (
        Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", 300),
        Toleration("dedicated", "Equal", "gpu", "NoSchedule", None),
        Toleration("", "Exists", "", "", None),
    )
    assert p.conditions == (PodCondition("PodScheduled", "False", "Unschedulable"), PodCondition("Ready", "True"))


def test_pod_affinity_is_parsed() -> None:
    (p,) = parse_ok(FULL_POD).pods
    assert p.affinity is not None
    node_affinity = p.affinity.node_affinity
    assert node_affinity is not None and node_affinity.required is not None
    zone_term, name_term = node_affinity.required
    assert zone_term.match_expressions == (NodeSelectorRequirement("zone", "In", ("a", "b")),)
    assert name_term.match_fields == (NodeSelectorRequirement("metadata.name", "NotIn", ("bad",)),)
    (preferred,) = node_affinity.preferred
    assert preferred.weight == 10
    assert preferred.preference.match_expressions == (NodeSelectorRequirement("gen", "Gt", ("3",)),)

    pod_affinity = p.affinity.pod_affinity
    assert pod_affinity is not None and pod_affinity.preferred == ()
    (term,) = pod_affinity.required
    assert term.topology_key == "zone"
    assert term.label_selector == LabelSelector(match_labels={"app": "db"})
    assert term.namespaces == ("a", "b") and term.namespace_selector is None

    anti = p.affinity.pod_anti_affinity
    assert anti is not None and anti.required == ()
    (weighted,) = anti.preferred
    assert weighted.weight == 100
    assert weighted.term.topology_key == "kubernetes.io/hostname"
    assert weighted.term.label_selector == LabelSelector(match_expressions=(LabelSelectorRequirement("app", "Exists"),))
    assert weighted.term.namespace_selector == LabelSelector()  # {} selects all namespaces


def test_minimal_pod_defaults() -> None:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    (p,) = parse_ok(doc).pods
    assert (p.meta.namespace, p.meta.uid) == ("default", "default/p")
    assert p.meta.labels == {} and p.meta.annotations == {} and p.meta.owner_references == ()
    assert p.meta.creation_timestamp is None and p.meta.deletion_timestamp is None
    assert p.scheduler_name == "default-scheduler"
    assert (p.phase, p.node_name, p.nominated_node_name, p.priority_class_name) == ("Pending", "", "", "")
    assert p.priority is None
    assert p.containers == () and p.init_containers == () and p.tolerations == () and p.conditions == ()
    assert p.affinity is None and p.node_selector == {} and p.overhead == {} and p.scheduling_gates == ()


def test_pod_uid_defaults_to_namespace_and_name() -> None:
    (p,) = parse_ok(pod("a", "team")).pods
    assert p.meta.uid == "team/a"


def test_null_fields_are_treated_as_absent() -> None:
    doc = pod(metadata={"labels": None, "annotations": None}, spec={"tolerations": None, "affinity": None}, status=None)
    (p,) = parse_ok(doc).pods
    assert p.meta.labels == {} and p.tolerations == () and p.affinity is None and p.phase == "Pending"


def test_empty_affinity_is_none() -> None:
    (p,) = parse_ok(with_spec(pod(), affinity={})).pods
    assert p.affinity is None


def test_numbers_as_quantities() -> None:
    doc = with_spec(pod(), containers=[{"name": "c", "resources": {"requests": {"cpu": 0.5, "memory": 1000}}}])
    (p,) = parse_ok(doc).pods
    assert p.containers[0].requests == {"cpu": 500.0, "memory": 1000.0}


@pytest.mark.parametrize("bad", ["12Gx", "", "abc", "--1", True, None])
def test_malformed_request_quantity_drops_the_pod(bad: object) -> None:
    doc = with_spec(pod("w"), containers=[{"name": "c", "resources": {"requests": {"cpu": bad}}}])
    error = parse_one_error(doc)
    assert error.object == "Pod ml/w"
    assert error.field == "spec.containers[0].resources.requests.cpu"
    assert "invalid quantity" in error.message


def test_malformed_quantity_in_limits_overhead_and_init_containers() -> None:
    cases = {
        "spec.containers[0].resources.limits['nvidia.com/gpu']": with_spec(
            pod(), containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "one"}}}]
        ),
        "spec.initContainers[1].resources.requests.memory": with_spec(
            pod(), initContainers=[{"name": "a"}, {"name": "b", "resources": {"requests": {"memory": "1Gx"}}}]
        ),
        "spec.overhead.cpu": with_spec(pod(), overhead={"cpu": "lots"}),
    }
    for field, doc in cases.items():
        error = parse_one_error(doc)
        assert (error.object, error.field) == ("Pod ml/p", field)


def test_negative_request_is_an_error() -> None:
    error = parse_one_error(with_spec(pod(), containers=[{"name": "c", "resources": {"requests": {"cpu": "-1"}}}]))
    assert error.field == "spec.containers[0].resources.requests.cpu"
    assert "negative" in error.message


@pytest.mark.parametrize(
    ("toleration", "field", "message"),
    [
        ({"key": "k", "operator": "Bogus"}, "operator", "unknown operator 'Bogus'"),
        ({"key": "k", "operator": "Exists", "value": "v"}, "value", "must be empty when operator is Exists"),
        ({"value": "v"}, "operator", "must be Exists when key is empty"),
        ({"key": "k", "effect": "NoWay"}, "effect", "unknown effect 'NoWay'"),
        ({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}, "tolerationSeconds", "NoExecute"),
        ({"key": "k", "effect": "NoExecute", "tolerationSeconds": "5"}, "tolerationSeconds", "must be an integer"),
        ({"key": 5}, "key", "must be a string"),
    ],
)
def test_unparsable_toleration_drops_the_pod(toleration: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(with_spec(pod(), tolerations=[{"key": "ok", "operator": "Exists"}, toleration]))
    assert error.object == "Pod ml/p"
    assert error.field == f"spec.tolerations[1].{field}"
    assert message in error.message


def test_toleration_that_is_not_a_mapping() -> None:
    error = parse_one_error(with_spec(pod(), tolerations=["NoSchedule"]))
    assert (error.field, error.message) == ("spec.tolerations[0]", "expected a mapping, got a string")


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"containers": {"name": "c"}}, "spec.containers", "expected a list, got a mapping"),
        ({"containers": [{"resources": {}}]}, "spec.containers[0].name", "needs a name"),
        ({"containers": [{"name": "c", "resources": []}]}, "spec.containers[0].resources", "expected a mapping"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 0}]}]},
         "spec.containers[0].ports[0].containerPort", "port"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 70000}]}]},
         "spec.containers[0].ports[0].hostPort", "port"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "protocol": "HTTP"}]}]},
         "spec.containers[0].ports[0].protocol", "unknown protocol"),
        ({"nodeSelector": {"gpu": True}}, "spec.nodeSelector.gpu",
         "must be a string, got a boolean (True) (quote it in YAML)"),
        ({"nodeSelector": ["a"]}, "spec.nodeSelector", "expected a mapping, got a list"),
        ({"priority": "high"}, "spec.priority", "must be an integer, got a string ('high')"),
        ({"priority": 1.5}, "spec.priority", "must be an integer"),
        ({"nodeName": 7}, "spec.nodeName", "must be a string, got an integer (7)"),
        ({"schedulerName": ["kai"]}, "spec.schedulerName", "must be a string, got a list"),
        ({"schedulingGates": [{}]}, "spec.schedulingGates[0].name", "needs a name"),
        ({"tolerations": {"key": "a"}}, "spec.tolerations", "expected a list"),
    ],
)  # fmt: skip
def test_bad_pod_spec_fields(spec: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(merge(pod(), {"spec": spec}))
    assert (error.object, error.field) == ("Pod ml/p", field)
    assert message in error.message


@pytest.mark.parametrize(
    ("affinity", "field", "message"),
    [
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            "at least one node selector term",
        ),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].operator",
            "unknown operator 'Near'",
        ),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In"}]}]}}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].values",
            "at least one value",
        ),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]}]}}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].values",
            "exactly one integer value",
        ),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"operator": "Exists"}]}]}}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].key",
            "is required",
        ),
        (
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}},
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "between 1 and 100",
        ),
        (
            {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}},
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "must not be empty",
        ),
        (
            {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "z",
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}]}},
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].values",
            "must be empty when operator is Exists",
        ),
        (
            {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "z",
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]}},
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].operator",
            "unknown operator 'Gt'",
        ),
        (
            {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "z",
                "namespaces": ["a", 3]}]}},
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[1]",
            "must be a string",
        ),
        ({"nodeAffinity": "yes"}, "spec.affinity.nodeAffinity", "expected a mapping"),
    ],
)  # fmt: skip
def test_bad_affinity(affinity: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(with_spec(pod(), affinity=affinity))
    assert error.field == field
    assert message in error.message


@pytest.mark.parametrize(
    ("phase", "ok"), [("Pending", True), ("Running", True), ("Succeeded", True), ("Failed", True),
                      ("Unknown", True), ("running", False), ("Done", False), (3, False)],
)  # fmt: skip
def test_pod_phase(phase: object, ok: bool) -> None:
    parsed = parse_objects([pod(status={"phase": phase})])
    if ok:
        assert parsed.pods[0].phase == phase and parsed.errors == []
    else:
        error = only_error(parsed)
        assert error.field == "status.phase" and parsed.pods == []


def test_bad_pod_condition() -> None:
    error = parse_one_error(pod(status={"conditions": [{"status": "True"}]}))
    assert (error.field, error.message) == ("status.conditions[0].type", "is required")


def test_errors_in_one_object_are_all_reported() -> None:
    containers = [{"name": "c", "resources": {"requests": {"cpu": "?"}}}]
    doc = with_spec(pod(), nodeName=1, priority="x", containers=containers)
    parsed = parse_objects([doc])
    assert parsed.pods == []
    assert {e.field for e in parsed.errors} == {
        "spec.nodeName",
        "spec.priority",
        "spec.containers[0].resources.requests.cpu",
    }


# --------------------------------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00Z", datetime(2024, 1, 1, tzinfo=UTC)),
        ("2024-01-01T00:00:00.5Z", datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
        ("2024-01-01T00:00:00.123456789Z", datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
        ("2024-01-01T02:00:00+02:00", datetime(2024, 1, 1, tzinfo=UTC)),
        ("2023-12-31T19:30:00-04:30", datetime(2024, 1, 1, tzinfo=UTC)),
    ],
)
def test_rfc3339_timestamps(text: str, expected: datetime) -> None:
    (p,) = parse_ok(pod(metadata={"creationTimestamp": text})).pods
    assert p.meta.creation_timestamp == expected
    assert p.meta.creation_timestamp is not None and p.meta.creation_timestamp.utcoffset() == timedelta(0)


def test_yaml_datetime_values_become_utc() -> None:
    aware = datetime(2024, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    naive = datetime(2024, 1, 1)
    for value in (aware, naive):
        (p,) = parse_ok(pod(metadata={"creationTimestamp": value})).pods
        assert p.meta.creation_timestamp == datetime(2024, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "bad",
    ["yesterday", "2024-01-01", "2024-01-01T00:00:00", "2024-01-01 00:00:00Z", "2024-13-01T00:00:00Z",
     "20240101T000000Z", 1704067200, date(2024, 1, 1)],
)  # fmt: skip
def test_bad_timestamps(bad: object) -> None:
    error = parse_one_error(pod(metadata={"deletionTimestamp": bad}))
    assert (error.object, error.field) == ("Pod ml/p", "metadata.deletionTimestamp")
    assert "invalid timestamp" in error.message


@pytest.mark.parametrize(
    ("metadata", "field", "message"),
    [
        ({"labels": {"kai.scheduler/queue": 1}}, "metadata.labels['kai.scheduler/queue']", "must be a string"),
        ({"labels": {"a": {"b": "c"}}}, "metadata.labels.a", "must be a string, got a mapping"),
        ({"labels": ["a"]}, "metadata.labels", "expected a mapping, got a list"),
        ({"annotations": {"gpu-fraction": 0.5}}, "metadata.annotations['gpu-fraction']", "quote it in YAML"),
        ({"uid": 5}, "metadata.uid", "must be a string"),
        ({"namespace": 5}, "metadata.namespace", "must be a string"),
        ({"ownerReferences": [{"kind": "Job"}]}, "metadata.ownerReferences[0]", "needs a kind and a name"),
        ({"ownerReferences": {"kind": "Job"}}, "metadata.ownerReferences", "expected a list"),
    ],
)
def test_bad_metadata(metadata: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(pod(metadata=metadata))
    assert error.field == field
    assert message in error.message


@pytest.mark.parametrize("metadata", [{}, {"name": ""}, {"name": None}, {"namespace": "x"}])
def test_missing_or_empty_name(metadata: dict[str, Any]) -> None:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    error = parse_one_error(doc)
    assert error.object == "Pod (document 1)"
    assert (error.field, error.message) == ("metadata.name", "metadata.name is missing or empty")


def test_missing_metadata_and_non_string_name() -> None:
    parsed = parse_objects([{"apiVersion": "v1", "kind": "Node"}, node(metadata={"name": 42})])
    assert parsed.nodes == []
    assert [(e.object, e.field) for e in parsed.errors] == [
        ("Node (document 1)", "metadata.name"),
        ("Node (document 2)", "metadata.name"),
    ]
    assert "must be a string, got an integer" in parsed.errors[1].message


def test_metadata_not_a_mapping() -> None:
    error = parse_one_error({"apiVersion": "v1", "kind": "Pod", "metadata": "p"})
    assert (error.object, error.field) == ("Pod (document 1)", "metadata")


# ------------------------------------------------------------------------------------------ nodes


def test_node_allocatable_defaults_to_capacity() -> None:
    (n,) = parse_ok(node("gpu-1")).nodes
    expected = {"cpu": 8000.0, "memory": 32 * 2**30, "nvidia.com/gpu": 4.0, "pods": 110.0}
    assert n.capacity == expected and n.allocatable == expected
    assert (n.meta.name, n.meta.namespace, n.meta.uid) == ("gpu-1", "", "gpu-1")
    assert n.taints == () and n.unschedulable is False and n.conditions == ()


def test_full_node() -> None:
    doc = node(
        "gpu-1",
        metadata={"namespace": "ignored", "labels": {"nvidia.com/gpu.memory": "81920"}},
        spec={"unschedulable": True, "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"},
                                                 {"key": "maint", "effect": "NoExecute"}]},
        status={"allocatable": {"cpu": "7500m", "memory": "30Gi", "nvidia.com/gpu": 4},
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]},
    )  # fmt: skip
    (n,) = parse_ok(doc).nodes
    assert n.meta.namespace == "" and n.meta.labels == {"nvidia.com/gpu.memory": "81920"}
    assert n.allocatable == {"cpu": 7500.0, "memory": 30 * 2**30, "nvidia.com/gpu": 4.0}
    assert n.capacity["cpu"] == 8000.0
    assert n.unschedulable is True
    assert n.taints == (Taint("gpu", "true", "NoSchedule"), Taint("maint", "", "NoExecute"))
    assert [(cond.type, cond.status) for cond in n.conditions] == [("Ready", "True"), ("DiskPressure", "False")]


@pytest.mark.parametrize(
    ("patch", "field", "message"),
    [
        ({"spec": {"taints": [{"effect": "NoSchedule"}]}}, "spec.taints[0].key", "is required"),
        ({"spec": {"taints": [{"key": "a"}]}}, "spec.taints[0].effect", "is required"),
        ({"spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}}, "spec.taints[0].effect", "unknown effect"),
        ({"spec": {"unschedulable": "yes"}}, "spec.unschedulable", "must be true or false"),
        ({"status": {"allocatable": {"memory": "lots"}}}, "status.allocatable.memory", "invalid quantity"),
        ({"status": {"capacity": {"cpu": "8 cores"}}}, "status.capacity.cpu", "invalid quantity"),
        ({"status": {"conditions": [{"type": "Ready"}]}}, "status.conditions[0].status", "is required"),
        ({"status": "Ready"}, "status", "expected a mapping, got a string"),
    ],
)
def test_bad_node_fields(patch: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(node("n1", **patch))
    assert (error.object, error.field) == ("Node n1", field)
    assert message in error.message


# ----------------------------------------------------------------------------------------- queues


def test_full_queue() -> None:
    doc = queue(
        "team-a",
        metadata={"labels": {"kai.scheduler/node-pool": "pool-a"}},
        spec={
            "displayName": "Team A",
            "parentQueue": "research",
            "priority": 120,
            "preemptMinRuntime": "5m",
            "reclaimMinRuntime": "1h30m",
            "resources": {
                "gpu": {"quota": 4, "overQuotaWeight": 2, "limit": 16},
                "cpu": {"quota": "32000", "overQuotaWeight": "1", "limit": "-1"},
                "memory": {"quota": 128000.5, "overQuotaWeight": -1, "limit": -1},
            },
        },
    )
    (q,) = parse_ok(doc).queues
    assert (q.meta.name, q.meta.namespace, q.meta.uid) == ("team-a", "", "team-a")
    assert (q.display_name, q.parent_queue, q.priority) == ("Team A", "research", 120)
    assert q.preempt_min_runtime == timedelta(minutes=5)
    assert q.reclaim_min_runtime == timedelta(hours=1, minutes=30)
    assert q.resources.gpu == QueueResource(quota=4.0, over_quota_weight=2.0, limit=16.0)
    assert q.resources.cpu == QueueResource(quota=32000.0, over_quota_weight=1.0, limit=-1.0)
    assert q.resources.memory == QueueResource(quota=128000.5, over_quota_weight=-1.0, limit=-1.0)


def queue_with_resources(resources: Any) -> dict[str, Any]:
    return merge(queue(spec={"resources": DELETE}), {"spec": {"resources": resources}})


def test_queue_omitted_fields_are_zero() -> None:
    doc = queue_with_resources({"gpu": {"quota": 2}, "cpu": {}})
    (q,) = parse_ok(doc).queues
    assert q.resources.gpu == QueueResource(quota=2.0, over_quota_weight=0.0, limit=0.0)
    assert q.resources.cpu == QueueResource()
    assert q.resources.memory == QueueResource(0.0, 0.0, 0.0)  # whole block omitted
    assert (q.priority, q.parent_queue, q.display_name) == (100, "", "")
    assert q.preempt_min_runtime is None and q.reclaim_min_runtime is None


def test_queue_with_empty_resources_is_accepted() -> None:
    (q,) = parse_ok(queue_with_resources({})).queues
    assert q.resources.gpu == q.resources.cpu == q.resources.memory == QueueResource()


@pytest.mark.parametrize("resource", ["gpu", "cpu", "memory"])
@pytest.mark.parametrize("key", ["quota", "limit"])
def test_queue_negative_quota_or_limit_other_than_minus_one(resource: str, key: str) -> None:
    error = parse_one_error(queue("team-a", spec={"resources": {resource: {key: -2}}}))
    assert error.object == "Queue team-a"
    assert error.field == f"spec.resources.{resource}.{key}"
    assert error.message == "must be >= 0 or -1 (unlimited), got -2"


def test_queue_negative_fractional_quota_is_an_error() -> None:
    error = parse_one_error(queue(spec={"resources": {"gpu": {"quota": -0.5}}}))
    assert error.message == "must be >= 0 or -1 (unlimited), got -0.5"


def test_queue_over_quota_weight_minus_one_is_allowed() -> None:
    """-1: what KAI's own test harness gives its implicit department (spec, appendix A.2)."""
    (q,) = parse_ok(queue(spec={"resources": {"gpu": {"overQuotaWeight": -1}}})).queues
    assert q.resources.gpu.over_quota_weight == -1.0


@pytest.mark.parametrize("weight", [-2, -0.5, "-3"])
def test_queue_other_negative_over_quota_weight_is_an_error(weight: object) -> None:
    error = parse_one_error(queue("team-a", spec={"resources": {"cpu": {"overQuotaWeight": weight}}}))
    assert (error.object, error.field) == ("Queue team-a", "spec.resources.cpu.overQuotaWeight")
    assert error.message == f"must be >= 0 (0: no share of what is left over quotas), got {float(weight):g}"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"resources": DELETE}, "spec.resources", "is required"),
        ({"resources": None}, "spec.resources", "is required"),
        ({"resources": [1]}, "spec.resources", "expected a mapping"),
        ({"resources": {"gpus": {"quota": 1}}}, "spec.resources.gpus", "unknown queue resource 'gpus'"),
        ({"resources": {"gpu": 4}}, "spec.resources.gpu", "expected a mapping, got an integer"),
        ({"resources": {"gpu": {"quota": "lots"}}}, "spec.resources.gpu.quota",
         "must be a number, got a string ('lots')"),
        ({"resources": {"cpu": {"limit": "1Gi"}}}, "spec.resources.cpu.limit", "must be a number"),
        ({"resources": {"cpu": {"overQuotaWeight": True}}}, "spec.resources.cpu.overQuotaWeight", "must be a number"),
        ({"resources": {"cpu": {"quota": float("nan")}}}, "spec.resources.cpu.quota", "must be a number"),
        ({"priority": "high"}, "spec.priority", "must be an integer, got a string ('high')"),
        ({"priority": 1.5}, "spec.priority", "must be an integer"),
        ({"priority": True}, "spec.priority", "must be an integer"),
        ({"preemptMinRuntime": "5 minutes"}, "spec.preemptMinRuntime", "invalid duration '5 minutes'"),
        ({"reclaimMinRuntime": 30}, "spec.reclaimMinRuntime", "invalid duration"),
        ({"parentQueue": ["a"]}, "spec.parentQueue", "must be a string"),
    ],
)  # fmt: skip
def test_bad_queue_fields(spec: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(queue("team-a", spec=spec))
    assert (error.object, error.field) == ("Queue team-a", field)
    assert message in error.message


def test_queue_without_spec_is_an_error() -> None:
    doc = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}}
    assert parse_one_error(doc).field == "spec.resources"


def test_negative_durations_are_allowed() -> None:
    (q,) = parse_ok(queue(spec={"preemptMinRuntime": "-1s"})).queues
    assert q.preempt_min_runtime == timedelta(seconds=-1)


# -------------------------------------------------------------------------------------- podgroups


def test_full_pod_group() -> None:
    doc = pod_group(
        "pg-disagg",
        spec={
            "queue": "team-a",
            "priorityClassName": "inference",
            "preemptibility": "non-preemptible",
            "markUnschedulable": False,
            "schedulingBackoff": 1,
            "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "zone"},
            "subGroups": [
                {"name": "prefill", "topologyConstraint": {"topology": "dc", "preferredTopologyLevel": "rack"}},
                {"name": "prefill-leader", "parent": "prefill", "minMember": 1},
                {"name": "prefill-workers", "parent": "prefill", "minMember": 4},
                {"name": "decode", "minMember": 2},
            ],
        },
    )
    (pg,) = parse_ok(doc).pod_groups
    assert (pg.meta.name, pg.meta.namespace, pg.meta.uid) == ("pg-disagg", "ml", "ml/pg-disagg")
    assert (pg.queue, pg.min_member, pg.priority_class_name) == ("team-a", 2, "inference")
    assert pg.preemptibility == "non-preemptible"
    assert pg.mark_unschedulable is False and pg.scheduling_backoff == 1
    assert pg.topology_constraint == TopologyConstraint("dc", "zone", "")
    assert pg.sub_groups == (
        SubGroup("prefill", 1, None, TopologyConstraint("dc", "", "rack")),
        SubGroup("prefill-leader", 1, "prefill"),
        SubGroup("prefill-workers", 4, "prefill"),
        SubGroup("decode", 2),
    )


def test_pod_group_defaults() -> None:
    doc = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg"}}
    (pg,) = parse_ok(doc).pod_groups
    assert pg.meta.namespace == "default"
    assert (pg.queue, pg.min_member, pg.priority_class_name, pg.preemptibility) == ("", 1, "", "")
    assert pg.sub_groups == () and pg.topology_constraint is None
    assert pg.mark_unschedulable is True and pg.scheduling_backoff == -1


@pytest.mark.parametrize("value", ["", "preemptible", "non-preemptible"])
def test_valid_preemptibility(value: str) -> None:
    (pg,) = parse_ok(pod_group(spec={"preemptibility": value})).pod_groups
    assert pg.preemptibility == value


def test_min_member_zero_is_allowed() -> None:
    (pg,) = parse_ok(pod_group(spec={"minMember": 0})).pod_groups
    assert pg.min_member == 0


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"minMember": -1}, "spec.minMember", "must be >= 0, got -1"),
        ({"minMember": "2"}, "spec.minMember", "must be an integer"),
        ({"preemptibility": "sometimes"}, "spec.preemptibility", "invalid value 'sometimes'"),
        ({"preemptibility": "Preemptible"}, "spec.preemptibility", "invalid value"),
        ({"markUnschedulable": "true"}, "spec.markUnschedulable", "must be true or false"),
        ({"topologyConstraint": "dc"}, "spec.topologyConstraint", "expected a mapping"),
        ({"subGroups": [{"name": "a"}, {"name": "a"}]}, "spec.subGroups[1].name", "duplicate subgroup name 'a'"),
        ({"subGroups": [{"name": "a", "parent": "nope"}]}, "spec.subGroups[0].parent",
         "parent subgroup 'nope' of 'a' does not exist"),
        ({"subGroups": [{"minMember": 1}]}, "spec.subGroups[0].name", "needs a name"),
        ({"subGroups": [{"name": "Workers"}]}, "spec.subGroups[0].name", "must be lowercase"),
        ({"subGroups": [{"name": "a", "minMember": -3}]}, "spec.subGroups[0].minMember", "must be >= 0"),
        ({"subGroups": [{"name": "a", "parent": 1}]}, "spec.subGroups[0].parent", "must be a string"),
        ({"subGroups": [{"name": "a", "parent": "a"}]}, "spec.subGroups[0].parent",
         "cycle in subgroup parents: a -> a"),
        ({"subGroups": {"name": "a"}}, "spec.subGroups", "expected a list"),
    ],
)  # fmt: skip
def test_bad_pod_group_fields(spec: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(pod_group("pg-1", spec=spec))
    assert (error.object, error.field) == ("PodGroup ml/pg-1", field)
    assert message in error.message


def test_subgroup_parent_cycle_is_reported_once() -> None:
    sub_groups = [{"name": "root"}, {"name": "a", "parent": "c"}, {"name": "b", "parent": "a"},
                  {"name": "c", "parent": "b"}, {"name": "leaf", "parent": "a"}]  # fmt: skip
    error = parse_one_error(pod_group(spec={"subGroups": sub_groups}))
    assert error.field == "spec.subGroups[1].parent"
    assert error.message == "cycle in subgroup parents: a -> c -> b -> a"


@pytest.mark.parametrize("api_version", ["scheduling.run.ai/v2alpha1", "scheduling.run.ai/v1", "v1", ""])
def test_pod_group_accepts_only_v2alpha2(api_version: str) -> None:
    error = parse_one_error(pod_group("pg-1", apiVersion=api_version))
    assert (error.object, error.field) == ("PodGroup ml/pg-1", "apiVersion")
    assert "scheduling.run.ai/v2alpha2" in error.message
    if api_version:
        assert repr(api_version) in error.message
    else:
        assert "missing apiVersion" in error.message


# --------------------------------------------------------------------------------- priorityclasses


def test_priority_class() -> None:
    parsed = parse_ok(priority_class("inference", 125, globalDefault=True, preemptionPolicy="Never"))
    (pc,) = parsed.priority_classes
    assert (pc.meta.name, pc.meta.uid, pc.value, pc.global_default, pc.preemption_policy) == (
        "inference", "inference", 125, True, "Never",
    )  # fmt: skip


def test_priority_class_defaults() -> None:
    (pc,) = parse_ok(priority_class("train", 50)).priority_classes
    assert pc.global_default is False and pc.preemption_policy == "PreemptLowerPriority"


@pytest.mark.parametrize(
    ("patch", "field", "message"),
    [
        ({"value": DELETE}, "value", "is required"),
        ({"value": None}, "value", "is required"),
        ({"value": "100"}, "value", "must be an integer"),
        ({"globalDefault": "yes"}, "globalDefault", "must be true or false"),
        ({"preemptionPolicy": "Always"}, "preemptionPolicy", "unknown policy 'Always'"),
        ({"apiVersion": "scheduling.k8s.io/v1beta1"}, "apiVersion", "unsupported apiVersion"),
    ],
)
def test_bad_priority_class(patch: dict[str, Any], field: str, message: str) -> None:
    error = parse_one_error(priority_class("pc", **patch))
    assert (error.object, error.field) == ("PriorityClass pc", field)
    assert message in error.message


# ---------------------------------------------------------------------------- documents and kinds


def test_broken_object_does_not_prevent_the_others() -> None:
    docs: list[Any] = [
        node("n1"),
        pod("bad", spec={"containers": [{"name": "c", "resources": {"requests": {"memory": "12Gx"}}}]}),
        pod("good"),
        queue("q", spec={"resources": {"gpu": {"quota": -5}}}),
        queue("q2"),
        "not an object",
        pod_group("pg"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cm", "namespace": "ml"}},
        priority_class("train", 50),
    ]
    parsed = parse_objects(docs)
    assert [n.meta.name for n in parsed.nodes] == ["n1"]
    assert [p.meta.name for p in parsed.pods] == ["good"]
    assert [q.meta.name for q in parsed.queues] == ["q2"]
    assert [pg.meta.name for pg in parsed.pod_groups] == ["pg"]
    assert [pc.meta.name for pc in parsed.priority_classes] == ["train"]
    assert [(e.object, e.field) for e in parsed.errors] == [
        ("Pod ml/bad", "spec.containers[0].resources.requests.memory"),
        ("Queue q", "spec.resources.gpu.quota"),
        ("document 6", ""),
        ("Secret ml/cm", "kind"),
    ]


def test_objects_keep_input_order() -> None:
    parsed = parse_ok_many([pod(f"p{i}") for i in (3, 1, 2)])
    assert [p.meta.name for p in parsed.pods] == ["p3", "p1", "p2"]


def parse_ok_many(docs: list[Any]) -> ParsedObjects:
    parsed = parse_objects(docs)
    assert parsed.errors == []
    return parsed


@pytest.mark.parametrize("doc", ["Pod", 42, None, ["a"]])
def test_non_mapping_documents(doc: object) -> None:
    parsed = parse_objects([node(), doc])  # type: ignore[list-item]
    error = only_error(parsed)
    assert (error.object, error.field) == ("document 2", "")
    assert error.message.startswith("expected a mapping (a Kubernetes object), got ")
    assert len(parsed.nodes) == 1


def test_unknown_kind_is_reported_and_ignored() -> None:
    docs = [
        {"apiVersion": "apps/v1beta1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        pod(),
    ]
    parsed = parse_objects(docs)
    assert len(parsed.pods) == 1
    assert [e.to_dict() for e in parsed.errors] == [
        {"object": "Deployment ml/d", "field": "kind", "message": "unsupported kind Deployment (ignored)"},
        {"object": "Namespace ml", "field": "kind", "message": "unsupported kind Namespace (ignored)"},
    ]


def test_workload_kinds_are_kept_with_their_spec() -> None:
    docs = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
             "spec": {"replicas": 2}}]
    parsed = parse_objects(docs)
    assert not parsed.errors
    (w,) = parsed.workloads
    assert (w.kind, w.group, w.meta.namespace, w.spec["replicas"]) == ("Deployment", "apps", "ml", 2)


@pytest.mark.parametrize("kind", [DELETE, "", None, 5])
def test_missing_or_bad_kind(kind: object) -> None:
    error = parse_one_error(pod(kind=kind))
    assert (error.object, error.field) == ("document 1", "kind")
    assert error.message in ("missing kind", "kind must be a string, got an integer")


@pytest.mark.parametrize(
    ("doc", "label"),
    [
        (pod(apiVersion="apps/v1"), "Pod ml/p"),
        (node(apiVersion="v2"), "Node n"),
        (queue(apiVersion="scheduling.run.ai/v1"), "Queue q"),
        (node(apiVersion=DELETE), "Node n"),
    ],
)
def test_unknown_api_version_for_known_kind(doc: dict[str, Any], label: str) -> None:
    error = parse_one_error(doc)
    assert (error.object, error.field) == (label, "apiVersion")
    assert "apiVersion" in error.message


def test_duplicates_keep_the_first() -> None:
    docs = [
        pod("a", spec={"nodeName": "first"}),
        pod("a", spec={"nodeName": "second"}),
        pod("a", namespace="other"),  # another namespace: not a duplicate
        node("a"),  # another kind: not a duplicate
        queue("q"),
        queue("q", spec={"priority": 1}),
    ]
    parsed = parse_objects(docs)
    assert [(p.meta.namespace, p.node_name) for p in parsed.pods] == [("ml", "first"), ("other", "")]
    assert len(parsed.nodes) == 1
    assert [q.priority for q in parsed.queues] == [100]
    assert [(e.object, e.field) for e in parsed.errors] == [("Pod ml/a", "metadata.name"), ("Queue q", "metadata.name")]
    assert "duplicate" in parsed.errors[0].message


def test_duplicate_namespace_defaulting() -> None:
    parsed = parse_objects([pod("a", namespace=None), pod("a", namespace="default")])
    assert len(parsed.pods) == 1
    assert only_error(parsed).object == "Pod default/a"


def test_broken_first_definition_lets_a_later_valid_one_in() -> None:
    parsed = parse_objects([pod("a", status={"phase": "Bogus"}), pod("a", spec={"nodeName": "n"})])
    assert [p.node_name for p in parsed.pods] == ["n"]
    assert only_error(parsed).field == "status.phase"


def test_kind_list_is_flattened() -> None:
    docs: list[Any] = [
        {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": [node("n1"), pod("p1"), {"apiVersion": "v1", "kind": "List", "items": [pod("p2")]}],
        },
        pod("p3"),
    ]
    parsed = parse_ok_many(docs)
    assert [n.meta.name for n in parsed.nodes] == ["n1"]
    assert [p.meta.name for p in parsed.pods] == ["p1", "p2", "p3"]


def test_typed_lists_fill_in_kind_and_api_version_of_items() -> None:
    bare_node = {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}}
    bare_queue = {"metadata": {"name": "q1"}, "spec": {"resources": {}}}
    docs = [
        {"apiVersion": "v1", "kind": "NodeList", "items": [bare_node, node("n2")]},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "QueueList", "items": [bare_queue]},
        {"apiVersion": "v1", "kind": "PodList", "items": []},
        {"apiVersion": "v1", "kind": "List", "items": None},
    ]
    parsed = parse_ok_many(docs)
    assert [n.meta.name for n in parsed.nodes] == ["n1", "n2"]
    assert [q.meta.name for q in parsed.queues] == ["q1"]


def test_errors_inside_lists() -> None:
    docs: list[Any] = [
        {"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"name": "x"}}, 7, pod("ok"), pod("")]},
        {"apiVersion": "v1", "kind": "PodList", "items": "nope"},
    ]
    parsed = parse_objects(docs)
    assert [p.meta.name for p in parsed.pods] == ["ok"]
    assert [(e.object, e.field) for e in parsed.errors] == [
        ("document 1, items[0]", "kind"),
        ("document 1, items[1]", ""),
        ("Pod (document 1, items[3])", "metadata.name"),
        ("PodList (document 2)", "items"),
    ]


def test_cluster_scoped_objects_ignore_namespace() -> None:
    parsed = parse_ok_many([node("n", metadata={"namespace": "x"}), queue("q", metadata={"namespace": "x"})])
    assert parsed.nodes[0].meta.namespace == "" and parsed.queues[0].meta.namespace == ""
    assert parsed.queues[0].meta.uid == "q"


def test_error_strings() -> None:
    error = parse_one_error(queue("team-a", spec={"resources": {"gpu": {"quota": -3}}}))
    assert str(error) == "Queue team-a: spec.resources.gpu.quota: must be >= 0 or -1 (unlimited), got -3"


def test_input_is_not_modified_and_not_shared() -> None:
    doc = copy.deepcopy(FULL_POD)
    (p,) = parse_ok(doc).pods
    assert doc == FULL_POD
    doc["metadata"]["labels"]["app"] = "changed"
    doc["spec"]["nodeSelector"]["pool"] = "changed"
    assert p.meta.labels["app"] == "train" and p.node_selector["pool"] == "a100"


def test_accepts_any_iterable_and_restores_gc() -> None:
    def docs() -> Iterator[dict[str, Any]]:
        yield pod("a")
        yield node("b")

    parsed = parse_objects(docs())
    assert len(parsed.pods) == 1 and len(parsed.nodes) == 1
    assert gc.isenabled()

    def broken() -> Iterator[dict[str, Any]]:
        yield pod("a")
        raise RuntimeError("reader failed")

    with pytest.raises(RuntimeError):
        parse_objects(broken())
    assert gc.isenabled()


def test_gc_stays_disabled_when_it_was() -> None:
    gc.disable()
    try:
        parse_objects([pod()])
        assert not gc.isenabled()
    finally:
        gc.enable()


# ----------------------------------------------------------------------------------- performance


def kubectl_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"job-{i // 8}-worker-{i % 8}",
            "namespace": "team-a",
            "uid": f"uid-{i}",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"kai.scheduler/queue": "team-a", "job-name": f"job-{i // 8}"},
            "annotations": {"pod-group-name": f"pg-job-{i // 8}"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"job-{i // 8}", "uid": "u"}],
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "4", "memory": "16Gi",
                                                                         "nvidia.com/gpu": "1"}}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }  # fmt: skip


@pytest.mark.benchmark
def test_parsing_50000_pods_is_fast() -> None:
    docs = [kubectl_pod(i) for i in range(50_000)]
    start = time.perf_counter()
    parsed = parse_objects(docs)
    elapsed = time.perf_counter() - start
    assert len(parsed.pods) == 50_000 and parsed.errors == []
    assert elapsed < 2.0, f"parsing 50,000 pods took {elapsed:.2f}s"


def test_parsing_many_pods_smoke() -> None:
    parsed = parse_objects([kubectl_pod(i) for i in range(2_000)])
    assert len(parsed.pods) == 2_000 and parsed.errors == []
    assert parsed.pods[9].meta.name == "job-1-worker-1"
    assert parsed.pods[0].containers[0].requests == {"cpu": 4000.0, "memory": 16 * 2**30, "nvidia.com/gpu": 1.0}


def test_kai_constants() -> None:
    assert (c.SCHEDULER_NAME, c.QUEUE_LABEL, c.LEGACY_QUEUE_LABEL) == (
        "kai-scheduler",
        "kai.scheduler/queue",
        "runai/queue",
    )
    assert (c.QUEUE_API_VERSION, c.POD_GROUP_API_VERSION) == ("scheduling.run.ai/v2", "scheduling.run.ai/v2alpha2")
    assert c.PRIORITY_CLASS_API_VERSION == "scheduling.k8s.io/v1"
    assert (c.DEFAULT_QUEUE_PRIORITY, c.DEFAULT_JOB_PRIORITY, c.NON_PREEMPTIBLE_PRIORITY_THRESHOLD) == (100, 50, 100)
    assert dict(c.BUILTIN_PRIORITY_CLASSES) == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    assert sorted(c.PREEMPTIBILITY_VALUES) == ["", "non-preemptible", "preemptible"]
