"""The installation in ``deploy/``: CRDs, RBAC, the scheduler Deployment, defaults, the Helm chart, the image.

* Every YAML file parses; the plain manifests agree with the chart they are generated from.
* The CRDs are structural OpenAPI v3 schemas (Kubernetes >= 1.29) with KAI's groups, versions, kinds and
  fields, KAI's CEL rules (``x-kubernetes-validations``, each with a Python twin here) and printer columns
  whose paths name fields of the schema; every Queue/PodGroup/Topology in ``examples/``, in the KAI
  conformance scenarios (as the harness writes them) and in ``docs/install.md`` validates against them, with
  nothing pruned. The validator for the OpenAPI subset the CRDs use is below; tests/kube/test_crds.py checks
  the same rules and columns on a real API server.
* The ClusterRole grants exactly what the scheduler does (table below), nothing with ``*``.
* The leader-election fencing policy (``fencing.yaml``, a ValidatingAdmissionPolicy with the Lease as its parameter)
  matches every kind the ClusterRole lets the scheduler write and no Lease, only the scheduler's ServiceAccount,
  and names the Lease the Deployment contends for (tests/kube/test_fencing_contract.py runs it on a real server).
* Default queues and priority classes have KAI's names and values; the config is one kaisched accepts.
* With helm built (``scripts/helm.sh``), ``helm lint`` and ``helm template`` run on the chart.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import yaml

from kaisched.framework.config import DEFAULT_ACTIONS, DEFAULT_PLUGINS, SchedulerConfig, SchedulerParams, SearchBudgets
from kaisched.k8s import constants as c
from kaisched.k8s.parse import parse_objects
from kaisched.kube.leader import FENCING_POLICY

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "kaisched"
PLAIN_CRDS = DEPLOY / "crds"
CHART_CRDS = CHART / "crds"
NAMESPACE = "kai-scheduler"
SERVICE_ACCOUNT = "kaisched"
CONFIG_PATH = "/etc/kaisched/config.yaml"
METRICS_PORT = 8080
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=_LOADER) if d is not None]


def deploy_yaml_files() -> list[Path]:
    """Every YAML file under deploy/ except the chart's Go templates."""
    templates = CHART / "templates"
    return sorted(p for p in DEPLOY.rglob("*.yaml") if templates not in p.parents)


@cache
def plain(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(load_docs(DEPLOY / name))


def find(docs: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> list[Mapping[str, Any]]:
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> Mapping[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_every_yaml_file_parses() -> None:
    files = deploy_yaml_files()
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "rbac.yaml", "scheduler.yaml", "defaults.yaml", "helm/kaisched/Chart.yaml", "helm/kaisched/values.yaml",
        *(f"crds/{p.name}" for p in CHART_CRDS.glob("*.yaml")),
    }
    for path in files:
        docs = load_docs(path)
        assert docs, f"{path}: no YAML documents"
        for doc in docs:
            assert isinstance(doc, dict), f"{path}: a document is not a mapping"
            if path.parent != CHART:  # Chart.yaml and values.yaml are not Kubernetes objects
                assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), path


# =================================================================================== CRDs: structure

# name -> (group, version, kind, plural, scope, short names, status subresource)
CRDS: dict[str, tuple[str, str, str, str, str, tuple[str, ...], bool]] = {
    "queues.scheduling.run.ai": ("scheduling.run.ai", "v2", "Queue", "queues", "Cluster", (), True),
    "podgroups.scheduling.run.ai": ("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", "Namespaced", ("pg",),
                                    True),
    "topologies.kai.scheduler": ("kai.scheduler", "v1alpha1", "Topology", "topologies", "Cluster", (), False),
}

# JSONSchemaProps fields of apiextensions.k8s.io/v1 (as of Kubernetes 1.35). A server silently drops any
# other key, so a misspelt one would be lost.
_SCHEMA_KEYS = frozenset({
    "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "multipleOf", "enum",
    "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "nullable", "example", "externalDocs", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
})
# fields of one x-kubernetes-validations rule, and the reasons a rule may give
_RULE_KEYS = frozenset({"rule", "message", "messageExpression", "reason", "fieldPath", "optionalOldSelf"})
_RULE_REASONS = frozenset({"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"})
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_errors(schema: Mapping[str, Any], path: str = "", *, root: bool = True) -> list[str]:
    """Why ``schema`` is not a structural schema the API server accepts (empty: it is)."""
    errors: list[str] = []
    where = path or "<root>"
    unknown = set(schema) - _SCHEMA_KEYS
    if unknown:
        errors.append(f"{where}: keys the API server does not know: {sorted(unknown)}")
    for rule in schema.get("x-kubernetes-validations", ()):
        if not isinstance(rule, Mapping) or not isinstance(rule.get("rule"), str) or not rule["rule"].strip():
            errors.append(f"{where}: an x-kubernetes-validations entry without a rule: {rule!r}")
            continue
        if set(rule) - _RULE_KEYS:
            errors.append(f"{where}: unknown keys in a validation rule: {sorted(set(rule) - _RULE_KEYS)}")
        if "reason" in rule and rule["reason"] not in _RULE_REASONS:
            errors.append(f"{where}: bad rule reason {rule['reason']!r}")
        if not rule.get("message") and not rule.get("messageExpression"):
            errors.append(f"{where}: rule {rule['rule']!r} has no message")
    if "uniqueItems" in schema:
        errors.append(f"{where}: uniqueItems is forbidden in structural schemas")
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if "type" in schema:
        if schema["type"] not in _TYPES:
            errors.append(f"{where}: unknown type {schema['type']!r}")
        if int_or_string:
            errors.append(f"{where}: x-kubernetes-int-or-string must not have a type")
    elif not int_or_string and not preserve:
        errors.append(f"{where}: no type (and not int-or-string or preserve-unknown-fields)")
    if "properties" in schema and "additionalProperties" in schema:
        errors.append(f"{where}: properties and additionalProperties are mutually exclusive")
    if "properties" in schema and schema.get("type") != "object":
        errors.append(f"{where}: properties on a non-object")
    if "items" in schema and schema.get("type") != "array":
        errors.append(f"{where}: items on a non-array")
    if schema.get("type") == "array" and not isinstance(schema.get("items"), Mapping):
        errors.append(f"{where}: an array needs one items schema")
    for key in ("allOf", "oneOf", "not"):
        if key in schema:
            errors.append(f"{where}: {key} is not used by these CRDs")
    if "anyOf" in schema and not (int_or_string and schema["anyOf"] == _INT_OR_STRING):
        errors.append(f"{where}: anyOf is only allowed as the int-or-string pattern")
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(schema.get("properties", {})):
        errors.append(f"{where}: required names fields that are not properties: {required}")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        errors.append(f"{where}: bad x-kubernetes-list-type {list_type!r}")
    for name, sub in schema.get("properties", {}).items():
        sub_path = f"{path}.{name}" if path else name
        if root and name == "metadata":
            if dict(sub) != {"type": "object"}:
                errors.append(f"metadata: only 'type: object' is allowed at the root, got {dict(sub)}")
            continue
        errors.extend(structural_errors(sub, sub_path, root=False))
    if isinstance(schema.get("additionalProperties"), Mapping):
        errors.extend(structural_errors(schema["additionalProperties"], f"{path}{{*}}", root=False))
    if isinstance(schema.get("items"), Mapping):
        errors.extend(structural_errors(schema["items"], f"{path}[*]", root=False))
    return errors


def crd_files() -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for path in sorted(PLAIN_CRDS.glob("*.yaml")):
        docs = load_docs(path)
        assert len(docs) == 1, f"{path}: one CRD per file"
        out[docs[0]["metadata"]["name"]] = docs[0]
    return out


@cache
def schemas() -> dict[tuple[str, str], Mapping[str, Any]]:
    """(apiVersion, kind) -> the OpenAPI v3 schema of that version."""
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for crd in crd_files().values():
        spec = crd["spec"]
        for version in spec["versions"]:
            out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


def walk_keys(node: object) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield str(key)
            yield from walk_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_keys(item)


def test_crds_are_the_kai_kinds() -> None:
    crds = crd_files()
    assert set(crds) == set(CRDS), "deploy/crds holds exactly Queue, PodGroup and Topology (no BindRequest)"
    for name, (group, version, kind, plural, scope, short, status) in CRDS.items():
        crd = crds[name]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        spec = crd["spec"]
        assert name == f"{plural}.{group}"
        assert (spec["group"], spec["scope"]) == (group, scope)
        names = spec["names"]
        assert (names["kind"], names["plural"], names["singular"], names["listKind"]) == (
            kind, plural, kind.lower(), f"{kind}List")
        assert tuple(names.get("shortNames", ())) == short
        [v] = spec["versions"]
        assert (v["name"], v["served"], v["storage"]) == (version, True, True)
        assert ("status" in v.get("subresources", {})) == status, name
        assert "conversion" not in spec


@pytest.mark.parametrize("name", sorted(CRDS))
def test_crd_schemas_are_structural(name: str) -> None:
    crd = crd_files()[name]
    keys = set(walk_keys(crd))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema.get("type") == "object"
    assert structural_errors(schema) == []
    # nothing is left open: no preserve-unknown-fields in these CRDs (KAI's are closed too)
    assert "x-kubernetes-preserve-unknown-fields" not in keys


def test_structural_check_catches_what_the_server_rejects_or_drops() -> None:
    ok = {"type": "object", "properties": {"metadata": {"type": "object"}, "a": {"type": "string"}}}
    assert structural_errors(ok) == []
    bad = [
        ({"type": "object", "properties": {"a": {"description": "no type"}}}, "no type"),
        ({"type": "object", "properties": {"a": {"type": "string", "x-kubernets-validations": []}}}, "not know"),
        ({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": [
            {"message": "no rule"}]}}}, "without a rule"),
        ({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self != ''"}]}}}, "no message"),
        ({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self != ''", "message": "m", "reason": "Bad"}]}}}, "bad rule reason"),
        ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"x": {"type": "string"}}}}},
         "metadata"),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}, "anyOf"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "items"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {
            "type": "string"}}}}, "mutually exclusive"),
        ({"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}}}, "required"),
    ]
    for schema, message in bad:
        errors = structural_errors(schema)
        assert errors and message in " ".join(errors), (schema, errors)


def test_crds_have_the_fields_kaisched_reads_and_writes() -> None:
    paths = {
        ("scheduling.run.ai/v2", "Queue"): [
            "spec.parentQueue", "spec.priority", "spec.displayName", "spec.preemptMinRuntime", "spec.reclaimMinRuntime",
            *(f"spec.resources.{r}.{f}" for r in ("gpu", "cpu", "memory")
              for f in ("quota", "limit", "overQuotaWeight")),
            "status.allocated{*}", "status.allocatedNonPreemptible{*}", "status.requested{*}", "status.childQueues[*]",
            "status.conditions[*].type", "status.conditions[*].status", "status.conditions[*].lastTransitionTime",
        ],
        ("scheduling.run.ai/v2alpha2", "PodGroup"): [
            "spec.minMember", "spec.queue", "spec.priorityClassName", "spec.preemptibility", "spec.markUnschedulable",
            "spec.schedulingBackoff", "spec.topologyConstraint.topology",
            "spec.topologyConstraint.requiredTopologyLevel",
            "spec.topologyConstraint.preferredTopologyLevel", "spec.subGroups[*].name", "spec.subGroups[*].minMember",
            "spec.subGroups[*].parent", "spec.subGroups[*].topologyConstraint.requiredTopologyLevel",
            "status.phase", "status.schedulingConditions[*].type", "status.schedulingConditions[*].nodePool",
            "status.schedulingConditions[*].reason", "status.schedulingConditions[*].message",
            "status.schedulingConditions[*].transitionID", "status.schedulingConditions[*].lastTransitionTime",
            "status.schedulingConditions[*].status", "status.schedulingConditions[*].reasons[*].reason",
            "status.schedulingConditions[*].reasons[*].message",
            "status.schedulingConditions[*].reasons[*].details.queueDetails.queueDeservedResources{*}",
            "status.resourcesStatus.allocated{*}", "status.resourcesStatus.allocatedNonPreemptible{*}",
            "status.resourcesStatus.requested{*}",
        ],
        ("kai.scheduler/v1alpha1", "Topology"): ["spec.levels[*].nodeLabel"],
    }
    for key, fields in paths.items():
        for field in fields:
            assert schema_at(schemas()[key], field) is not None, f"{key[1]}: no schema for {field}"
    queue = schemas()[("scheduling.run.ai/v2", "Queue")]
    assert schema_at(queue, "spec.resources.gpu.quota") == {"type": "number"}
    assert schema_at(queue, "spec.priority") == {"type": "integer", "description": ANY}
    pod_group = schemas()[("scheduling.run.ai/v2alpha2", "PodGroup")]
    assert (schema_at(pod_group, "spec.preemptibility") or {}).get("enum") == ["preemptible", "non-preemptible"]


def crd_rules() -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """(CRD name, schema path) -> the x-kubernetes-validations rules there."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}

    def walk(node: Mapping[str, Any], path: str, name: str) -> None:
        if node.get("x-kubernetes-validations"):
            out[(name, path)] = list(node["x-kubernetes-validations"])
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}" if path else key, name)
        if isinstance(node.get("items"), Mapping):
            walk(node["items"], f"{path}[*]", name)
        if isinstance(node.get("additionalProperties"), Mapping):
            walk(node["additionalProperties"], f"{path}{{*}}", name)

    for name, crd in crd_files().items():
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "", name)
    return out


def test_crds_carry_kais_cel_rules_and_no_others() -> None:
    """KAI's CRDs have CEL rules on Topology.spec.levels only: immutable, unique nodeLabels, hostname last."""
    rules = crd_rules()
    assert set(rules) == {("topologies.kai.scheduler", "spec.levels")}
    levels = rules[("topologies.kai.scheduler", "spec.levels")]
    assert [is_transition_rule(r) for r in levels] == [True, False, False]
    for rule in levels:
        assert set(rule) == {"rule", "message"}, rule
        cel_twin(rule)
    schema = schemas()[("kai.scheduler/v1alpha1", "Topology")]
    # the rules' cost is bounded (the server refuses a CRD whose rules' estimated cost is too high)
    assert (schema_at(schema, "spec.levels") or {}).get("maxItems") == 16
    assert (schema_at(schema, "spec.levels[*].nodeLabel") or {}).get("maxLength") == 316


def test_every_cel_rule_has_a_python_twin() -> None:
    found = {str(r["rule"]) for rules in crd_rules().values() for r in rules}
    assert found == set(CEL_TWINS), "CEL_TWINS must hold exactly the CRDs' rules"


def test_topology_levels_cannot_change_once_set() -> None:
    levels = [{"nodeLabel": "topology.kubernetes.io/zone"}, {"nodeLabel": "kubernetes.io/hostname"}]
    old = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
           "spec": {"levels": levels}}
    assert update_errors(old, old) == []
    relabelled = {**old, "metadata": {"name": "t", "labels": {"a": "b"}}}
    assert update_errors(old, relabelled) == []
    for changed_levels in (levels[1:], levels[::-1], [{"nodeLabel": "example.com/rack"}, *levels]):
        changed = {**old, "spec": {"levels": changed_levels}}
        assert update_errors(old, changed) == [
            "spec.levels: levels cannot be changed once set; create a new Topology instead"]


# name -> (column name, type, jsonPath, priority) of `kubectl get`, in order
PRINTER_COLUMNS: dict[str, list[tuple[str, str, str, int]]] = {
    "queues.scheduling.run.ai": [
        ("Parent", "string", ".spec.parentQueue", 0),
        ("GPU Quota", "number", ".spec.resources.gpu.quota", 0),
        ("GPU Limit", "number", ".spec.resources.gpu.limit", 0),
        ("GPU Allocated", "string", ".status.allocated.nvidia\\.com/gpu", 0),
        ("Priority", "integer", ".spec.priority", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
        ("Children", "string", ".status.childQueues", 1),  # KAI's columns, with -o wide
        ("DisplayName", "string", ".spec.displayName", 1),
    ],
    "podgroups.scheduling.run.ai": [
        ("Queue", "string", ".spec.queue", 0),
        ("Phase", "string", ".status.phase", 0),
        ("MinMember", "integer", ".spec.minMember", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ],
}


def json_path_schema(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any] | None:
    """The sub-schema a printer column's simple JSONPath (``.a.b``, ``\\.`` for a dot in a key) names."""
    assert json_path.startswith("."), json_path
    keys = [k.replace("\\.", ".") for k in re.split(r"(?<!\\)\.", json_path[1:])]
    if keys == ["metadata", "creationTimestamp"]:
        return {"type": "string", "format": "date-time"}  # ObjectMeta, not in the CRD's schema
    node: Mapping[str, Any] | None = schema
    for key in keys:
        if node is None:
            return None
        extra = node.get("additionalProperties")
        node = node.get("properties", {}).get(key) or (extra if isinstance(extra, Mapping) else None)
    return node


def test_printer_columns() -> None:
    crds = crd_files()
    for name, crd in crds.items():
        [version] = crd["spec"]["versions"]
        columns = version.get("additionalPrinterColumns", [])
        got = [(col["name"], col["type"], col["jsonPath"], col.get("priority", 0)) for col in columns]
        assert got == PRINTER_COLUMNS.get(name, []), name
        schema = version["schema"]["openAPIV3Schema"]
        for col in columns:
            target = json_path_schema(schema, col["jsonPath"])
            assert target is not None, f"{name}: column {col['name']} names no field: {col['jsonPath']}"
            if col["type"] in ("integer", "number"):
                assert target.get("type") == col["type"], (name, col, target)
            if col["type"] == "date":
                assert target.get("format") == "date-time", (name, col, target)
    assert json_path_schema(schemas()[("scheduling.run.ai/v2", "Queue")], ".spec.resources.gpu.deserved") is None


def schema_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The sub-schema at ``a.b[*].c{*}`` (``[*]``: array items, ``{*}``: additionalProperties)."""
    node: Mapping[str, Any] | None = schema
    for token in re.findall(r"[^.\[\]{}]+|\[\*\]|\{\*\}", path):
        if node is None:
            return None
        if token == "[*]":
            node = node.get("items")
        elif token == "{*}":
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, Mapping) else None
        else:
            node = node.get("properties", {}).get(token)
    return node


# ========================================================================= CRDs: validating objects


def validate(value: object, schema: Mapping[str, Any], path: str = "", *, root: bool = True) -> list[str]:
    """Errors of ``value`` against a structural schema, as the API server would see them on a create.

    Covers the subset the CRDs use: type, properties, required, items, additionalProperties, enum, minimum,
    maximum, minLength, maxLength, pattern, minItems, maxItems, nullable, format date-time,
    x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields and the CEL rules of
    x-kubernetes-validations, through their Python twins (:data:`CEL_TWINS`; transition rules, which read
    ``oldSelf``, apply to updates only: :func:`update_errors`). A field the schema does not know is reported
    too: the server would prune it silently, so its value would be lost.
    """
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: must not be null"]
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{where}: must be an integer or a string, got {type(value).__name__} {value!r}"]
        if isinstance(value, str) and "pattern" in schema and re.search(schema["pattern"], value) is None:
            return [f"{where}: {value!r} does not match {schema['pattern']}"]
        return []
    kind = schema.get("type")
    if kind is not None and not _is_type(value, kind):
        return [f"{where}: must be {kind}, got {type(value).__name__} {value!r}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} is less than the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} is more than the maximum {schema['maximum']}")
        if schema.get("format") == "int32" and not -(2**31) <= value < 2**31:
            errors.append(f"{where}: {value} does not fit in int32")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: longer than {schema['maxLength']}")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if schema.get("format") == "date-time" and not _is_date_time(value):
            errors.append(f"{where}: {value!r} is not an RFC 3339 date-time")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                errors.extend(validate(item, items, f"{path}[{i}]", root=False))
    if isinstance(value, Mapping):
        errors.extend(_validate_object(value, schema, path, root))
    if not errors:  # CEL rules see values of the right shape (the server skips them after a type error)
        errors.extend(f"{where}: {rule['message']}" for rule in schema.get("x-kubernetes-validations", ())
                      if not is_transition_rule(rule) and not cel_twin(rule)(value, None))
    return errors


# ======================================================================= CRDs: CEL rules' Python twins

_HOSTNAME = "kubernetes.io/hostname"


def _labels(levels: Any) -> list[Any]:
    return [level.get("nodeLabel") for level in levels]


# CEL rule text (exactly as in the CRDs) -> what it checks, in Python: (self, oldSelf or None) -> valid.
# A rule in a CRD without a twin here fails test_every_cel_rule_has_a_python_twin.
Twin = Callable[[Any, Any], bool]
CEL_TWINS: dict[str, Twin] = {
    "self == oldSelf": lambda new, old: new == old,
    "self.all(l, self.exists_one(m, m.nodeLabel == l.nodeLabel))":
        lambda levels, _old: len(set(_labels(levels))) == len(levels),
    "!self.exists(l, l.nodeLabel == 'kubernetes.io/hostname') || self[size(self) - 1].nodeLabel == "
    "'kubernetes.io/hostname'":
        lambda levels, _old: _HOSTNAME not in _labels(levels) or _labels(levels)[-1] == _HOSTNAME,
}


def is_transition_rule(rule: Mapping[str, Any]) -> bool:
    return re.search(r"\boldSelf\b", str(rule["rule"])) is not None


def cel_twin(rule: Mapping[str, Any]) -> Twin:
    twin = CEL_TWINS.get(str(rule["rule"]))
    assert twin is not None, f"no Python twin for the CEL rule {rule['rule']!r}: add it to CEL_TWINS"
    return twin


def update_errors(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The transition rules (``oldSelf``) an update from ``old`` to ``new`` breaks, by field path (only
    rules on fields inside ``spec``/``status`` objects, which is where the CRDs have them)."""
    schema = schemas()[(str(new["apiVersion"]), str(new["kind"]))]
    errors: list[str] = []

    def walk(node: Mapping[str, Any], new_value: object, old_value: object, path: str) -> None:
        if new_value is None or old_value is None:
            return
        for rule in node.get("x-kubernetes-validations", ()):
            if is_transition_rule(rule) and not cel_twin(rule)(new_value, old_value):
                errors.append(f"{path}: {rule['message']}")
        if isinstance(new_value, Mapping) and isinstance(old_value, Mapping):
            for key, sub in node.get("properties", {}).items():
                walk(sub, new_value.get(key), old_value.get(key), f"{path}.{key}" if path else key)

    walk(schema, _jsonable(new), _jsonable(old), "")
    return errors


def _validate_object(value: Mapping[Any, Any], schema: Mapping[str, Any], path: str, root: bool) -> list[str]:
    errors = [f"{path or '<root>'}: missing required field {name!r}" for name in schema.get("required", ())
              if name not in value]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        sub_path = f"{path}.{key}" if path else str(key)
        if root and key == "metadata":
            continue  # ObjectMeta is validated by the server itself, not by the CRD schema
        if key in properties:
            errors.extend(validate(item, properties[key], sub_path, root=False))
        elif isinstance(extra, Mapping):
            errors.extend(validate(item, extra, sub_path, root=False))
        elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        elif not (root and key in ("apiVersion", "kind")):
            errors.append(f"{sub_path}: unknown field (the API server would drop it)")
    return errors


def _is_type(value: object, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise AssertionError(f"unknown type {kind}")


def _is_date_time(value: str) -> bool:
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def validate_object(obj: Mapping[str, Any]) -> list[str]:
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    schema = schemas().get(key)
    if schema is None:
        return [f"no CRD serves {key}"]
    label = f"{obj['kind']} {obj.get('metadata', {}).get('name')}"
    # YAML turns unquoted timestamps into datetimes; JSON (what the server gets) has strings
    return [f"{label}: {e}" for e in validate(_jsonable(obj), schema)]


def _jsonable(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


CRD_KINDS = {("scheduling.run.ai/v2", "Queue"), ("scheduling.run.ai/v2alpha2", "PodGroup"),
             ("kai.scheduler/v1alpha1", "Topology")}


def crd_objects(node: object) -> Iterator[Mapping[str, Any]]:
    """Every Queue/PodGroup/Topology inside a YAML structure (documents, lists, nested fields)."""
    if isinstance(node, Mapping):
        if (node.get("apiVersion"), node.get("kind")) in CRD_KINDS:
            yield node
            return
        for value in node.values():
            yield from crd_objects(value)
    elif isinstance(node, list):
        for item in node:
            yield from crd_objects(item)


def test_validator_rejects_what_the_schemas_forbid() -> None:
    queue: dict[str, Any] = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
             "spec": {"resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}}}
    assert validate_object(queue) == []
    cases: list[tuple[dict[str, Any], str]] = [
        ({"spec": {"resources": {"gpu": {"quota": "2"}}}}, "spec.resources.gpu.quota: must be number"),
        ({"spec": {"resources": {"gpu": {"deserved": 2}}}}, "spec.resources.gpu.deserved: unknown field"),
        ({"spec": {"parentQueue": "p"}}, "missing required field 'resources'"),
        ({"spec": {"resources": {}, "priority": 1.5}}, "spec.priority: must be integer"),
        ({"status": {"allocated": {"nvidia.com/gpu": 0.5}}}, "must be an integer or a string"),
        ({"status": {"allocated": {"cpu": "1.5x"}}}, "does not match"),
    ]
    for patch, message in cases:
        obj = {**queue, **patch}
        errors = validate_object(obj)
        assert any(message in e for e in errors), (patch, errors)
    assert validate_object({**queue, "status": {"allocated": {"nvidia.com/gpu": "500m", "cpu": 2}}}) == []

    pod_group: dict[str, Any] = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                 "metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 1, "queue": "q"}}
    assert validate_object(pod_group) == []
    pod_group_cases: list[tuple[dict[str, Any], str]] = [
        ({"minMember": 0}, "less than the minimum 1"),
        ({"preemptibility": "sometimes"}, "is not one of"),
        ({"subGroups": [{"minMember": 1}]}, "missing required field 'name'"),
        ({"subGroups": [{"name": "Workers_0"}]}, "does not match"),
        ({"subgroups": []}, "spec.subgroups: unknown field"),
        ({"markUnschedulable": "yes"}, "must be boolean"),
        ({"minMember": 2**31}, "int32"),
    ]
    for spec, message in pod_group_cases:
        errors = validate_object({**pod_group, "spec": {**pod_group["spec"], **spec}})
        assert any(message in e for e in errors), (spec, errors)

    topology: dict[str, Any] = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
                                "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"}]}}
    assert validate_object(topology) == []
    topology_cases: list[tuple[dict[str, Any], str]] = [
        ({"levels": []}, "fewer than 1 items"),
        ({"levels": [{"nodeLabel": f"example.com/l{i}"} for i in range(17)]}, "more than 16 items"),
        ({"levels": [{"nodeLabel": "not a label"}]}, "does not match"),
        ({}, "missing required field 'levels'"),
        ({"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "zone"}, {"nodeLabel": "rack"}]},
         "spec.levels: each level needs its own nodeLabel"),
        ({"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}]},
         "spec.levels: kubernetes.io/hostname can only be the last (lowest) level"),
    ]
    for spec, message in topology_cases:
        errors = validate_object({**topology, "spec": spec})
        assert any(message in e for e in errors), (spec, errors)
    hosts = {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"}, {"nodeLabel": "kubernetes.io/hostname"}]}
    assert validate_object({**topology, "spec": hosts}) == []


def test_pod_group_status_as_kai_writes_it_validates() -> None:
    quantities = {"nvidia.com/gpu": "1500m", "cpu": "2", "memory": "4Gi"}
    pod_group = {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"minMember": 2, "queue": "team-a", "markUnschedulable": True, "schedulingBackoff": -1},
        "status": {
            "schedulingConditions": [{
                "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable",
                "message": "Not enough resources", "transitionID": "3", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "reasons": [{"reason": "OverLimit", "message": "queue team-a is over its limit",
                             "details": {"queueDetails": {"name": "team-a", "queueResourceLimits": quantities,
                                                          "podGroupRequestedResources": quantities}}}],
            }],
            "resourcesStatus": {"allocated": quantities, "requested": quantities, "allocatedNonPreemptible": {}},
        },
    }
    assert validate_object(pod_group) == []


def test_example_objects_validate_against_the_crds() -> None:
    found: list[Mapping[str, Any]] = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in load_docs(path):
            found.extend(crd_objects(doc))
    kinds = {o["kind"] for o in found}
    assert {"Queue", "PodGroup"} <= kinds, "examples/ should hold queues and pod groups"
    errors = [e for o in found for e in validate_object(o)]
    assert errors == []


def test_conformance_objects_validate_against_the_crds() -> None:
    """Queues, PodGroups and Topologies of every KAI scenario, as the conformance harness writes them, and any
    such object in the raw scenario files."""
    from tests.conformance.harness import NOW0
    from tests.conformance.manifests import to_manifests
    from tests.conformance.scenario import conformance_dir, load_scenarios

    directory = conformance_dir()
    if not directory.is_dir():
        pytest.skip(f"KAI conformance scenarios not found at {directory}")
    found: list[Mapping[str, Any]] = []
    for path in sorted(directory.parent.rglob("*.yaml")):
        for doc in load_docs(path):
            found.extend(crd_objects(doc))
    for scenario in load_scenarios(directory):
        found.extend(crd_objects(to_manifests(scenario, NOW0)))
    counts = {kind: sum(o["kind"] == kind for o in found) for kind in ("Queue", "PodGroup", "Topology")}
    assert min(counts.values()) > 0, counts
    errors = [e for o in found for e in validate_object(o)]
    assert errors[:20] == []


def test_install_guide_objects_validate_against_the_crds() -> None:
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    objects = [d for block in blocks for d in yaml.load_all(block, Loader=_LOADER) if isinstance(d, dict)]
    assert objects and all("kind" in d for d in objects), "yaml blocks of the guide hold Kubernetes objects"
    found = [o for d in objects for o in crd_objects(d)]
    assert {o["kind"] for o in found} >= {"Queue"}
    assert [e for o in found for e in validate_object(o)] == []
    parsed = parse_objects(objects)
    assert parsed.errors == []
    assert len(parsed.pods) >= 2 and all(p.scheduler_name == c.SCHEDULER_NAME for p in parsed.pods)
    assert all(p.meta.labels.get(c.QUEUE_LABEL) for p in parsed.pods)


# ================================================================================================ RBAC

# (API group, resource, verb) the scheduler uses; the ClusterRole must grant exactly these.
_READ = ("get", "list", "watch")
SCHEDULER_PERMISSIONS: set[tuple[str, str, str]] = {
    *(("", r, v) for r in ("nodes", "pods", "configmaps") for v in _READ),
    ("", "pods", "patch"),  # pod-group-name, subgroup and GPU-sharing labels/annotations
    ("", "pods/binding", "create"),
    ("", "pods/status", "patch"),  # PodScheduled=False conditions
    ("", "pods/eviction", "create"),  # POST /api/v1/.../pods/<name>/eviction: core group for RBAC, not policy
    *((g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")),
    *(("scheduling.k8s.io", "priorityclasses", v) for v in _READ),
    *(("scheduling.run.ai", "queues", v) for v in _READ),
    ("scheduling.run.ai", "queues/status", "patch"),
    *(("scheduling.run.ai", "podgroups", v) for v in (*_READ, "create", "patch")),
    ("scheduling.run.ai", "podgroups/status", "patch"),
    *(("kai.scheduler", "topologies", v) for v in _READ),
    *(("kai.scheduler", r, "get") for r in ("schedulingshards", "configs")),  # KAI's shard, without --config
    # DRA: read the devices, classes and claims; patch a claim's finalizer, allocation and reservations
    *(("resource.k8s.io", r, v) for r in ("deviceclasses", "resourceslices", "resourceclaims",
                                          "resourceclaimtemplates") for v in _READ),
    ("resource.k8s.io", "resourceclaims", "patch"),
    ("resource.k8s.io", "resourceclaims/status", "patch"),
}

# workload kind (kaisched.k8s.constants.WORKLOAD_KINDS) -> plural resource the pod-grouper reads
WORKLOAD_RESOURCES: dict[str, str] = {
    "Job": "jobs", "CronJob": "cronjobs", "Deployment": "deployments", "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets", "TFJob": "tfjobs", "PyTorchJob": "pytorchjobs", "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs", "MPIJob": "mpijobs", "Notebook": "notebooks", "TrainJob": "trainjobs",
    "RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices", "Workflow": "workflows",
    "JobSet": "jobsets", "LeaderWorkerSet": "leaderworkersets", "Service": "services", "Revision": "revisions",
    "Configuration": "configurations", "PipelineRun": "pipelineruns", "TaskRun": "taskruns",
    "VirtualMachineInstance": "virtualmachineinstances", "VirtualMachine": "virtualmachines",
    "SeldonDeployment": "seldondeployments", "PodGang": "podgangs", "PodCliqueSet": "podcliquesets",
    "PodGangSet": "podgangsets", "PodClique": "podcliques", "PodCliqueScalingGroup": "podcliquescalinggroups",
    "ConfigMap": "configmaps",
}
EXTRA_OWNERS = {("kubeflow.org", "scheduledworkflows")}  # a KAI owner kind grouped by the default grouper


def owner_permissions() -> set[tuple[str, str, str]]:
    missing = set(c.WORKLOAD_KINDS) - set(WORKLOAD_RESOURCES)
    assert not missing, f"new workload kinds {sorted(missing)}: add their resources here and to the ClusterRole"
    out: set[tuple[str, str, str]] = set()
    for kind, api_versions in c.WORKLOAD_KINDS.items():
        for api_version in api_versions:
            group = api_version.rpartition("/")[0]
            out.update((group, WORKLOAD_RESOURCES[kind], verb) for verb in _READ)
    out.update((g, r, v) for g, r in EXTRA_OWNERS for v in _READ)
    return out


def granted(rules: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"a wildcard in {field}: {rule}"
        out.update((g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"])
    return out


def test_cluster_role_grants_exactly_what_the_scheduler_does() -> None:
    role = one(plain("rbac.yaml"), "ClusterRole")
    expected = SCHEDULER_PERMISSIONS | owner_permissions()
    have = granted(role["rules"])
    assert sorted(expected - have) == [], "missing permissions"
    assert sorted(have - expected) == [], "permissions the scheduler does not need"
    # writes are only the listed ones; owners are read-only
    writes = {p for p in have if p[2] not in _READ}
    assert {(g, r) for g, r, _ in writes} <= {
        ("", "pods"), ("", "pods/binding"), ("", "pods/status"), ("", "pods/eviction"), ("", "events"),
        ("events.k8s.io", "events"), ("scheduling.run.ai", "queues/status"), ("scheduling.run.ai", "podgroups"),
        ("scheduling.run.ai", "podgroups/status"), ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaims/status"),
    }
    assert not any(v in ("delete", "deletecollection", "update", "escalate", "bind", "impersonate") for *_, v in have)


def test_brief_owner_groups_are_readable() -> None:
    have = granted(one(plain("rbac.yaml"), "ClusterRole")["rules"])
    readable_groups = {g for g, _, v in have if v == "list"}
    assert readable_groups >= {"batch", "apps", "kubeflow.org", "ray.io", "jobset.x-k8s.io", "leaderworkerset.x-k8s.io",
                               "argoproj.io", "tekton.dev", "kubevirt.io", "serving.knative.dev",
                               "trainer.kubeflow.org", "grove.io", "scheduler.grove.io"}


def test_service_account_bindings_and_lease_role() -> None:
    docs = plain("rbac.yaml")
    sa = one(docs, "ServiceAccount", SERVICE_ACCOUNT)
    assert sa["metadata"]["namespace"] == NAMESPACE
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": one(docs, "ClusterRole")["metadata"]["name"]}
    assert binding["subjects"] == [subject]
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert granted(role["rules"]) == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    role_binding = one(docs, "RoleBinding")
    assert role_binding["metadata"]["namespace"] == NAMESPACE
    assert role_binding["roleRef"]["kind"] == "Role" and role_binding["roleRef"]["name"] == role["metadata"]["name"]
    assert role_binding["subjects"] == [subject]


# ======================================================================================= fencing policy
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


def covered(rules: Sequence[Mapping[str, Any]], group: str, resource: str, operation: str) -> bool:
    """Does one of a policy's ``resourceRules`` match ``operation`` on ``group``/``resource``?"""
    return any(group in r["apiGroups"] and resource in r["resources"] and operation in r["operations"]
               and r["apiVersions"] == ["*"] for r in rules)


def fencing_objects(docs: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    return one(docs, "ValidatingAdmissionPolicy", FENCING_POLICY), one(docs, "ValidatingAdmissionPolicyBinding",
                                                                        FENCING_POLICY)


def test_the_fencing_policy_fences_every_write_of_the_scheduler_and_nothing_else() -> None:
    docs = plain("fencing.yaml")
    assert len(docs) == 2
    policy, binding = fencing_objects(docs)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    spec = policy["spec"]
    assert spec["paramKind"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
    assert spec["failurePolicy"] == "Fail"
    # every write the ClusterRole allows (patch is an UPDATE for admission), and deletes; never a Lease
    rules = spec["matchConstraints"]["resourceRules"]
    writes = {(g, r, v) for g, r, v in granted(one(plain("rbac.yaml"), "ClusterRole")["rules"]) if v not in _READ}
    assert writes, "the ClusterRole grants no write?"
    operation = {"create": "CREATE", "patch": "UPDATE", "update": "UPDATE", "delete": "DELETE"}
    assert [w for w in sorted(writes) if not covered(rules, w[0], w[1], operation[w[2]])] == []
    assert all(covered(rules, g, r, "DELETE") for g, r, _ in writes)
    assert not any("coordination.k8s.io" in r["apiGroups"] or "leases" in r["resources"] or "*" in r["resources"]
                   for r in rules)
    # only the scheduler's ServiceAccount (other clients are never matched)
    assert spec["matchConditions"] == [{
        "name": "scheduler-service-account",
        "expression": f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}'"}]
    # the pod the token is bound to must be the one the Lease's holder names: kaisched's identity is
    # <pod>_<random> (kaisched.kube.leader.default_identity)
    variables = {v["name"]: " ".join(v["expression"].split()) for v in spec["variables"]}
    assert f"request.userInfo.extra['{POD_NAME_EXTRA}'][0]" in variables["pod"]
    assert "params.spec.holderIdentity" in variables["holder"]
    [validation] = spec["validations"]
    expression = " ".join(validation["expression"].split())
    assert expression == ("variables.pod != '' && (variables.holder == variables.pod || "
                          "variables.holder.startsWith(variables.pod + '_'))")
    assert validation["reason"] == "Forbidden"  # 403
    assert validation["messageExpression"].startswith(f"'{FENCING_POLICY}: ")  # what kaisched's writer recognises
    # bound to the Lease the Deployment contends for, in the scheduler's namespace; a missing Lease must not block
    # every other user (the server resolves the parameter before matchConditions)
    bspec = binding["spec"]
    assert bspec["policyName"] == FENCING_POLICY and bspec["validationActions"] == ["Deny"]
    args = one(plain("scheduler.yaml"), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert bspec["paramRef"] == {"name": args[args.index("--lease-name") + 1], "namespace": NAMESPACE,
                                 "parameterNotFoundAction": "Allow"}


# ========================================================================================= scheduler


def test_scheduler_deployment() -> None:
    docs = plain("scheduler.yaml")
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == NAMESPACE  # created first
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]
    assert all(pod["metadata"]["labels"].get(k) == v for k, v in spec["selector"]["matchLabels"].items())
    pod_spec = pod["spec"]
    assert pod_spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert "schedulerName" not in pod_spec, "the scheduler's own pods must be placed by the default scheduler"
    [container] = pod_spec["containers"]
    args = container["args"]
    assert args[:3] == ["run", "--config", CONFIG_PATH] and "--leader-elect" in args
    assert "command" not in container, "the image's entrypoint is kaisched"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    [port] = container["ports"]
    assert port["containerPort"] == METRICS_PORT
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": port["name"]}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True and pod_spec["securityContext"]["runAsUser"] > 0
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    config_volume = volumes[mounts[str(Path(CONFIG_PATH).parent)]]
    config_map = one(docs, "ConfigMap", config_volume["configMap"]["name"])
    assert config_map["metadata"]["namespace"] == NAMESPACE and Path(CONFIG_PATH).name in config_map["data"]
    assert "emptyDir" in volumes[mounts["/tmp"]], "a writable /tmp on a read-only root file system"


def test_metrics_service_selects_the_scheduler() -> None:
    docs = plain("scheduler.yaml")
    service = one(docs, "Service")
    pod = one(docs, "Deployment")["spec"]["template"]
    assert service["metadata"]["namespace"] == NAMESPACE
    assert all(pod["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())
    [port] = service["spec"]["ports"]
    assert port["port"] == METRICS_PORT and port["targetPort"] == pod["spec"]["containers"][0]["ports"][0]["name"]
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_shipped_config_is_kais_default_configuration() -> None:
    config_map = one(plain("scheduler.yaml"), "ConfigMap")
    raw = yaml.load(config_map["data"]["config.yaml"], Loader=_LOADER)
    config = SchedulerConfig.from_mapping(raw)
    assert config.actions == DEFAULT_ACTIONS
    assert config.plugins == DEFAULT_PLUGINS
    assert config.params == SchedulerParams()
    assert config.params.scheduler_name == c.SCHEDULER_NAME
    # KAI v0.17's search budgets, as its operator renders them (kaisched without the block: no budgets)
    assert config.search_budgets == SearchBudgets.kai_defaults()
    assert raw["scenarioSearchBudgets"] == SearchBudgets.kai_defaults().to_mapping()


# ========================================================================================== defaults

KAI_PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}  # spec 3.4


def test_default_priority_classes_are_kais() -> None:
    classes = find(plain("defaults.yaml"), "PriorityClass")
    assert {pc["metadata"]["name"]: pc["value"] for pc in classes} == KAI_PRIORITY_CLASSES
    assert dict(c.BUILTIN_PRIORITY_CLASSES) == KAI_PRIORITY_CLASSES
    assert all(pc["apiVersion"] == "scheduling.k8s.io/v1" and pc.get("globalDefault") is False for pc in classes)


def test_default_queues_are_kais() -> None:
    docs = plain("defaults.yaml")
    parent = one(docs, "Queue", c.DEFAULT_PARENT_QUEUE_NAME)
    leaf = one(docs, "Queue", c.DEFAULT_QUEUE_NAME)
    assert len(find(docs, "Queue")) == 2
    assert "parentQueue" not in parent["spec"]
    assert leaf["spec"]["parentQueue"] == c.DEFAULT_PARENT_QUEUE_NAME
    for queue in (parent, leaf):
        assert queue["spec"]["resources"] == {
            r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
        assert validate_object(queue) == []
    parsed = parse_objects(docs)
    assert parsed.errors == []
    assert {q.meta.name for q in parsed.queues} == {c.DEFAULT_PARENT_QUEUE_NAME, c.DEFAULT_QUEUE_NAME}
    assert {pc.meta.name: pc.value for pc in parsed.priority_classes} == KAI_PRIORITY_CLASSES


def test_namespaced_objects_live_in_the_kai_namespace() -> None:
    for name in ("rbac.yaml", "scheduler.yaml"):
        for doc in plain(name):
            if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                assert doc["metadata"]["namespace"] == NAMESPACE, (name, doc["kind"])
    for doc in plain("defaults.yaml"):
        assert "namespace" not in doc["metadata"], "queues and priority classes are cluster-scoped"


# ======================================================================================== Helm chart


def test_plain_crds_are_the_charts() -> None:
    chart = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    copies = {p.name: p.read_bytes() for p in PLAIN_CRDS.glob("*.yaml")}
    assert copies == chart, "deploy/crds is generated from the chart's crds/: run deploy/render.sh"


def test_chart_metadata_and_values() -> None:
    chart = load_docs(CHART / "Chart.yaml")[0]
    assert (chart["apiVersion"], chart["name"], chart["type"]) == ("v2", "kaisched", "application")
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["kubeVersion"] == ">=1.29.0-0"  # CEL validation rules GA (docs/install.md, supported versions)
    values = load_docs(CHART / "values.yaml")[0]
    assert values["namespace"] == NAMESPACE and values["replicas"] == 2 and values["leaderElection"]["enabled"]
    # the chart's default config is the one rendered into deploy/scheduler.yaml
    rendered = one(plain("scheduler.yaml"), "ConfigMap")["data"]["config.yaml"]
    assert yaml.load(rendered, Loader=_LOADER) == values["config"]


def test_every_value_the_templates_use_is_declared() -> None:
    values = load_docs(CHART / "values.yaml")[0]
    used: set[str] = set()
    for template in (CHART / "templates").glob("*"):
        used.update(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template.read_text(encoding="utf-8")))
    assert used, "templates read no values?"
    for dotted in sorted(used):
        node: Any = values
        for part in dotted.split("."):
            assert isinstance(node, Mapping) and part in node, f".Values.{dotted} is not in values.yaml"
            node = node[part]


def test_plain_manifests_say_they_are_generated() -> None:
    for name in ("rbac.yaml", "scheduler.yaml", "defaults.yaml", "fencing.yaml"):
        head = (DEPLOY / name).read_text(encoding="utf-8").splitlines()[0]
        assert head.startswith("# Generated by deploy/render.sh"), name


def find_helm() -> str | None:
    explicit = os.environ.get("KAISCHED_HELM")
    if explicit:
        return explicit
    try:
        out = subprocess.run([str(ROOT / "scripts" / "helm.sh"), "path"], capture_output=True, text=True, timeout=30)
    except OSError:
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip()
    return shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip("helm is not built: run scripts/helm.sh once (about 4 minutes) to enable the chart tests")
    return path


@cache
def kube_version_under_test() -> str:
    """The Kubernetes version the contract tier runs (``scripts/kube-apiserver.sh version``): the chart is
    rendered for it (``helm template`` would otherwise assume the version helm was built for)."""
    out = subprocess.run([str(ROOT / "scripts" / "kube-apiserver.sh"), "version"], capture_output=True, text=True,
                         timeout=30, check=True)
    return out.stdout.strip()


def helm_template(helm: str, *args: str, kube_version: str | None = None) -> list[dict[str, Any]]:
    out = run_helm_template(helm, *args, kube_version=kube_version)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.load_all(out.stdout, Loader=_LOADER) if d]


def run_helm_template(helm: str, *args: str, kube_version: str | None = None) -> subprocess.CompletedProcess[str]:
    version = kube_version or kube_version_under_test()
    return subprocess.run([helm, "template", "kaisched", str(CHART), "--kube-version", version, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_helm_lint(helm: str) -> None:
    out = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_plain_manifests_are_rendered_from_the_chart(helm: str, tmp_path: Path) -> None:
    out = subprocess.run([str(DEPLOY / "render.sh"), str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HELM": helm})
    assert out.returncode == 0, out.stderr
    for name in ("rbac.yaml", "scheduler.yaml", "defaults.yaml", "fencing.yaml",
                 *(f"crds/{p.name}" for p in CHART_CRDS.glob("*"))):
        stale = f"deploy/{name} is stale: run deploy/render.sh"
        assert (tmp_path / name).read_text() == (DEPLOY / name).read_text(), stale


def test_helm_install_renders_everything(helm: str) -> None:
    docs = helm_template(helm, "--include-crds")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("CustomResourceDefinition") == 3
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ConfigMap", "Deployment", "Service", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert kinds.count(kind) == 1, kind
    assert kinds.count("Queue") == 2 and kinds.count("PriorityClass") == 4


def test_helm_values_change_the_rendering(helm: str) -> None:
    docs = helm_template(helm, "--set", "namespace=gpu-sched", "--set", "createNamespace=false", "--set",
                         "image.repository=registry.example/kaisched", "--set", "image.tag=1.2.3", "--set",
                         "replicas=1", "--set", "leaderElection.enabled=false", "--set", "metrics.port=9090",
                         "--set", "defaults.queues=false", "--set", "resources.requests.cpu=2")
    assert not find(docs, "Namespace") and not find(docs, "Queue")
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"):
            assert doc["metadata"]["namespace"] == "gpu-sched", doc["kind"]
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "gpu-sched"
    deployment = one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 1
    assert container["image"] == "registry.example/kaisched:1.2.3"
    assert "--leader-elect" not in container["args"]
    assert container["args"][-2:] == ["--listen-address", ":9090"]
    assert container["ports"][0]["containerPort"] == 9090
    assert container["resources"]["requests"]["cpu"] == 2
    assert one(docs, "Service")["spec"]["ports"][0]["port"] == 9090
    assert not find(docs, "ValidatingAdmissionPolicy"), "no fencing policy without leader election"


def test_helm_refuses_two_replicas_without_leader_election(helm: str) -> None:
    out = run_helm_template(helm, "--set", "leaderElection.enabled=false")
    assert out.returncode != 0 and "leaderElection.enabled=true" in out.stderr


def test_helm_installs_on_the_supported_kubernetes_versions_only(helm: str) -> None:
    """1.29 and later (the CRDs' CEL rules are GA there; docs/install.md, supported versions)."""
    for version in ("1.29.0", "1.34.2", kube_version_under_test(), "1.36.0"):
        assert one(helm_template(helm, kube_version=version), "Deployment"), version
    out = run_helm_template(helm, kube_version="1.28.9")
    assert out.returncode != 0 and "chart requires kubeVersion: >=1.29.0-0" in out.stderr, out.stderr


def test_helm_fencing_policy_values(helm: str) -> None:
    """Rendered on 1.30+ (admissionregistration.k8s.io/v1 GA) with leader election; follows the namespace and the
    Lease name; can be turned off or set to failurePolicy Ignore."""
    docs = helm_template(helm, "--set", "namespace=gpu-sched", "--set", "leaderElection.leaseName=sched-lease",
                         "--set", "leaderElection.fencingPolicy.failurePolicy=Ignore")
    policy, binding = fencing_objects(docs)
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["matchConditions"][0]["expression"].endswith("'system:serviceaccount:gpu-sched:kaisched'")
    param = binding["spec"]["paramRef"]
    assert (param["name"], param["namespace"]) == ("sched-lease", "gpu-sched")
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--lease-name") + 1] == "sched-lease"
    off = helm_template(helm, "--set", "leaderElection.fencingPolicy.enabled=false")
    assert not find(off, "ValidatingAdmissionPolicy") and not find(off, "ValidatingAdmissionPolicyBinding")
    assert "--leader-elect" in one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not find(helm_template(helm, kube_version="1.29.9"), "ValidatingAdmissionPolicy")  # (v1beta1 only)
    assert fencing_objects(helm_template(helm, kube_version="1.30.0"))
    out = run_helm_template(helm, "--set", "leaderElection.fencingPolicy.failurePolicy=Deny")
    assert out.returncode != 0 and "must be Fail or Ignore" in out.stderr, out.stderr


def test_helm_config_values_reach_the_config_map(helm: str) -> None:
    docs = helm_template(helm, "--set", "config.params.max-consolidation-preemptees=4")
    raw = yaml.load(one(docs, "ConfigMap")["data"]["config.yaml"], Loader=_LOADER)
    assert SchedulerConfig.from_mapping(raw).params.max_consolidation_preemptees == 4


# ============================================================================================= image


def test_dockerfile_runs_kaisched_as_a_non_root_user() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    base = next(line.split("=", 1)[1] for line in lines if line.startswith("ARG BASE_IMAGE="))
    # every stage on one base, pinned by digest (the tag beside it for the reader)
    assert froms and all(f == "${BASE_IMAGE}" for f in froms)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?@sha256:[0-9a-f]{64}", base), base
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users, "no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root uid (runAsNonRoot can check it)"
    pod_spec = one(plain("scheduler.yaml"), "Deployment")["spec"]["template"]["spec"]
    assert pod_spec["securityContext"]["runAsUser"] == int(uid)
    assert 'ENTRYPOINT ["kaisched"]' in lines and 'CMD ["run"]' in lines
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^kaisched = "kaisched\.cli:main"$', pyproject, flags=re.M)
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "tests"} <= ignored
    assert not {"src", "pyproject.toml", "README.md"} & ignored, "the build copies these"


def _docker_ignores(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides; ``!`` re-includes."""
    parts = path.split("/")
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase("/".join(parts[:i]), glob) for i in range(1, len(parts) + 1)):
            ignored = not negated
    return ignored


def test_the_image_build_compiles_the_core() -> None:
    """The build stage builds kaisched's wheel with its core compiled by mypyc (hatch_build.py): it has the C
    compiler, and every file the wheel's build hook needs reaches it past .dockerignore."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    _, build_stage, runtime_stage = re.split(r"^FROM ", text, flags=re.M)
    assert re.search(r"apt-get install .*\bgcc\b", build_stage), "mypyc needs a C compiler in the build stage"
    copied = [w for line in build_stage.splitlines() if line.startswith("COPY ") for w in line.split()[1:-1]]
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")]
    for needed in ("hatch_build.py", "scripts/compiled.sh", "pyproject.toml", "src"):
        assert needed in copied, needed
        assert (ROOT / needed).exists(), needed
        assert not _docker_ignores(patterns, needed), f"{needed} is left out of the build context"
    assert _docker_ignores(patterns, "scripts/kube-apiserver.sh") and _docker_ignores(patterns, "build/compiled")
    # the wheel is built from the locked build tools, nothing resolved afresh
    assert "RUN pip install --require-hashes --no-deps -r requirements/dev.txt" in build_stage
    assert "RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels ." in build_stage
    assert "ARG KAISCHED_PURE_PYTHON" in build_stage  # the interpreted core on request
    assert "gcc" not in runtime_stage, "the runtime stage has no build tools"
