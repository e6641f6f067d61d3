"""Parse and validate Kubernetes/KAI objects given as plain dicts (``kubectl get -o yaml``, camelCase).

:func:`parse_objects` never raises on bad input. Every problem becomes an :class:`ObjectError` naming
the object (``"Pod ml/worker-0"``, ``"Queue team-a"``), the JSON path of the field
(``spec.containers[0].resources.requests.cpu``) and what is wrong; the broken object is left out and
everything else is still parsed. Only per-object validation happens here (plus duplicate detection);
relations between objects (queue tree, unknown queues, ...) are checked when the snapshot is built.

The per-pod path is kept lean: no copies of the input, no regular expression where a type check will
do, paths of fields are only formatted when there is an error to report.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final

from kaisched.k8s import constants as c
from kaisched.k8s.objects import (
    Affinity,
    ClaimConsumer,
    Container,
    ContainerPort,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestResult,
    DeviceSubRequest,
    KubeObject,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeCondition,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectError,
    ObjectMeta,
    OwnerReference,
    ParsedObjects,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodCondition,
    PodGroup,
    PodResourceClaim,
    PreferredSchedulingTerm,
    PriorityClass,
    Queue,
    QueueResource,
    QueueResources,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
    ResourceSlice,
    SubGroup,
    Taint,
    Toleration,
    Topology,
    TopologyConstraint,
    WeightedPodAffinityTerm,
    Workload,
)
from kaisched.k8s.quantity import QuantityError, parse_duration, parse_quantity, to_canonical

__all__ = ["parse_objects"]

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_RFC3339_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})", re.ASCII)
_INTEGER_RE: Final = re.compile(r"[+-]?\d+", re.ASCII)
_NUMBER_RE: Final = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_SEMVER_ID: Final = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER_RE: Final = re.compile(
    rf"(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-{_SEMVER_ID}(?:\.{_SEMVER_ID})*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?",
    re.ASCII,
)

_POD_PHASES: Final = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})
_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
_TOLERATION_OPERATORS: Final = frozenset({"Equal", "Exists"})
_PORT_PROTOCOLS: Final = frozenset({"TCP", "UDP", "SCTP"})
_NODE_SELECTOR_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_LABEL_SELECTOR_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_PREEMPTION_POLICIES: Final = frozenset({"PreemptLowerPriority", "Never"})
_QUEUE_RESOURCE_NAMES: Final = ("gpu", "cpu", "memory")
_MAX_PORT: Final = 65535
_MIN_WEIGHT: Final = 1
_MAX_WEIGHT: Final = 100
_ALLOCATION_MODES: Final = frozenset({c.ALLOCATION_MODE_EXACT_COUNT, c.ALLOCATION_MODE_ALL})
_ATTRIBUTE_KINDS: Final = ("int", "bool", "string", "version")  # DeviceAttribute: exactly one is set
# v1beta1 keeps these fields of an exact device request on the request itself (v1, v1beta2: under `exactly`)
_EXACT_REQUEST_FIELDS: Final = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess")


# ------------------------------------------------------------------------------------- entry point


def parse_objects(docs: Iterable[Mapping[str, Any]]) -> ParsedObjects:
    """Parse Kubernetes objects (dicts) into typed objects; never raises on bad input.

    ``*List`` documents with ``items`` are flattened. Broken objects are dropped and reported in
    :attr:`ParsedObjects.errors`; duplicates (same kind, namespace and name) are reported on the later
    one, the first is kept.
    """
    parser = _Parser()
    # Parsing allocates many small objects and frees none of them: the cyclic garbage collector would
    # only rescan the growing heap over and over (half of the run time for 50,000 pods).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index, doc in enumerate(docs, start=1):
            parser.add(doc, f"document {index}", "", "")
    finally:
        if gc_was_enabled:
            gc.enable()
    return parser.result


class _Ctx:
    """Error sink for one object; ``failed`` means the object must be dropped."""

    __slots__ = ("api_version", "errors", "failed", "label")

    def __init__(self, label: str, errors: list[ObjectError]) -> None:
        self.label = label
        self.errors = errors
        self.failed = False
        self.api_version = ""  # the object's (accepted) apiVersion, for kinds read in several versions

    def error(self, field: str, message: str) -> None:
        self.errors.append(ObjectError(self.label, field, message))
        self.failed = True


_ObjectParser = Callable[[_Ctx, Mapping[str, Any], ObjectMeta], KubeObject]


class _KindInfo:
    __slots__ = ("api_versions", "namespaced", "parse")

    def __init__(self, api_versions: Iterable[str], namespaced: bool, parse: _ObjectParser) -> None:
        self.api_versions = frozenset(api_versions)
        self.namespaced = namespaced
        self.parse = parse


class _Parser:
    __slots__ = ("result", "seen")

    def __init__(self) -> None:
        self.result = ParsedObjects()
        self.seen: set[tuple[str, str, str]] = set()

    def add(self, doc: object, where: str, default_kind: str, default_api_version: str) -> None:
        if type(doc) is not dict and not isinstance(doc, Mapping):
            message = f"expected a mapping (a Kubernetes object), got {_type_name(doc)}"
            self.result.errors.append(ObjectError(where, "", message))
            return
        kind = doc.get("kind") or default_kind
        if not isinstance(kind, str) or not kind:
            self.result.errors.append(ObjectError(where, "kind", _kind_message(kind)))
            return
        if kind == "List" or (kind.endswith("List") and "items" in doc):
            self._add_list(doc, kind, where)
            return
        info = _KINDS.get(kind)
        if info is None:
            info = self._workload_kind(doc, kind)
        if info is None:
            self._report_unsupported(doc, kind)
            return
        self._add_object(doc, kind, info, where, default_api_version)

    def _add_list(self, doc: Mapping[str, Any], kind: str, where: str) -> None:
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list | tuple):
            message = f"expected a list of objects, got {_type_name(items)}"
            self.result.errors.append(ObjectError(f"{kind} ({where})", "items", message))
            return
        item_kind = kind[: -len("List")] if kind != "List" else ""
        api_version = doc.get("apiVersion") if item_kind else ""
        item_api_version = api_version if isinstance(api_version, str) else ""
        for i, item in enumerate(items):
            self.add(item, f"{where}, items[{i}]", item_kind, item_api_version)

    @staticmethod
    def _workload_kind(doc: Mapping[str, Any], kind: str) -> _KindInfo | None:
        versions = c.WORKLOAD_KINDS.get(kind)
        api_version = doc.get("apiVersion")
        if versions is None or api_version not in versions:
            return None  # e.g. a core v1 Service, or a kind kaisched does not run
        return _KindInfo((str(api_version),), True, _parse_workload)

    def _report_unsupported(self, doc: Mapping[str, Any], kind: str) -> None:
        metadata = doc.get("metadata")
        name = namespace = ""
        if isinstance(metadata, Mapping):
            name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
        label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
        self.result.errors.append(ObjectError(label.rstrip(), "kind", f"unsupported kind {kind} (ignored)"))

    def _add_object(
        self, doc: Mapping[str, Any], kind: str, info: _KindInfo, where: str, default_api_version: str
    ) -> None:
        metadata = doc.get("metadata")
        if metadata is None:
            metadata = _EMPTY
        elif type(metadata) is not dict and not isinstance(metadata, Mapping):
            message = f"expected a mapping, got {_type_name(metadata)}"
            self.result.errors.append(ObjectError(f"{kind} ({where})", "metadata", message))
            return
        name = metadata.get("name")
        namespace = _namespace(metadata, info.namespaced)
        if not isinstance(name, str) or not name:
            self._report_unnamed(kind, name, where)
            return
        label = f"{kind} {namespace}/{name}" if info.namespaced else f"{kind} {name}"
        ctx = _Ctx(label, self.result.errors)
        api_version = doc.get("apiVersion") or default_api_version
        if not isinstance(api_version, str) or api_version not in info.api_versions:
            ctx.error("apiVersion", _api_version_message(api_version, kind, info.api_versions))
            return
        ctx.api_version = api_version
        key = (kind, namespace if isinstance(namespace, str) else "", name)
        if key in self.seen:
            ctx.error("metadata.name", f"duplicate {label}: only the first definition is used")
            return
        meta = _object_meta(ctx, metadata, name, namespace, info.namespaced)
        obj = info.parse(ctx, doc, meta)
        if not ctx.failed:
            self.seen.add(key)
            self._store(obj)

    def _report_unnamed(self, kind: str, name: object, where: str) -> None:
        label = f"{kind} ({where})"
        if name is None or name == "":
            message = "metadata.name is missing or empty"
        else:
            message = f"metadata.name must be a string, got {_type_name(name)}"
        self.result.errors.append(ObjectError(label, "metadata.name", message))

    def _store(self, obj: KubeObject) -> None:
        self.result.add(obj)


def _namespace(metadata: Mapping[str, Any], namespaced: bool) -> object:
    if not namespaced:
        return ""
    namespace = metadata.get("namespace")
    return c.DEFAULT_NAMESPACE if namespace is None or namespace == "" else namespace


def _kind_message(kind: object) -> str:
    if kind is None or kind == "":
        return "missing kind"
    return f"kind must be a string, got {_type_name(kind)}"


def _api_version_message(api_version: object, kind: str, versions: Iterable[str]) -> str:
    *others, last = sorted(versions)
    expected = f"{', '.join(others)} or {last}" if others else last
    if api_version is None or api_version == "":
        return f"missing apiVersion (expected {expected} for {kind})"
    return f"unsupported apiVersion {api_version!r} for {kind} (expected {expected})"


# ---------------------------------------------------------------------------------------- metadata


def _object_meta(ctx: _Ctx, metadata: Mapping[str, Any], name: str, namespace: object, namespaced: bool) -> ObjectMeta:
    if not isinstance(namespace, str):
        ctx.error("metadata.namespace", f"must be a string, got {_type_name(namespace)}")
        namespace = ""
    uid = _str(ctx, metadata, "uid", "metadata")
    if not uid:
        uid = f"{namespace}/{name}" if namespaced else name
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    created = metadata.get("creationTimestamp")
    deleted = metadata.get("deletionTimestamp")
    owners = metadata.get("ownerReferences")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        labels={} if labels is None else _str_map(ctx, labels, "metadata.labels"),
        annotations={} if annotations is None else _str_map(ctx, annotations, "metadata.annotations"),
        creation_timestamp=None if created is None else _timestamp(ctx, created, "metadata.creationTimestamp"),
        deletion_timestamp=None if deleted is None else _timestamp(ctx, deleted, "metadata.deletionTimestamp"),
        owner_references=() if owners is None else _owner_references(ctx, owners),
    )


def _owner_references(ctx: _Ctx, value: object) -> tuple[OwnerReference, ...]:
    refs: list[OwnerReference] = []
    for i, item in enumerate(_list(ctx, value, "metadata.ownerReferences")):
        if type(item) is dict:
            get = item.get
            api_version, kind, name, uid = get("apiVersion", ""), get("kind"), get("name"), get("uid", "")
            controller = get("controller", False)
            if (
                type(kind) is str and kind and type(name) is str and name and type(api_version) is str
                and type(uid) is str and type(controller) is bool
            ):  # fmt: skip
                refs.append(OwnerReference(api_version, kind, name, uid, controller))
                continue
        path = f"metadata.ownerReferences[{i}]"
        ref = _mapping(ctx, item, path)
        kind = _str(ctx, ref, "kind", path)
        name = _str(ctx, ref, "name", path)
        if not kind or not name:
            ctx.error(path, "an owner reference needs a kind and a name")
            continue
        refs.append(
            OwnerReference(
                api_version=_str(ctx, ref, "apiVersion", path),
                kind=kind,
                name=name,
                uid=_str(ctx, ref, "uid", path),
                controller=_bool(ctx, ref, "controller", path, False),
            )
        )
    return tuple(refs)


def _timestamp(ctx: _Ctx, value: object, field: str) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime (YAML may already have made it a datetime)."""
    if isinstance(value, str):
        if _RFC3339_RE.fullmatch(value) is not None:
            try:
                return datetime.fromisoformat(value).astimezone(UTC)
            except ValueError:
                pass
        ctx.error(field, f"invalid timestamp {value!r}: expected RFC 3339 like '2024-01-01T00:00:00Z'")
        return None
    if isinstance(value, datetime):
        # YAML timestamps without a zone are UTC (YAML 1.1 timestamp type)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        ctx.error(field, f"invalid timestamp {value.isoformat()!r}: a date without a time of day")
        return None
    ctx.error(field, f"invalid timestamp: expected an RFC 3339 string, got {_type_name(value)}")
    return None


# --------------------------------------------------------------------------------------------- pods


def _parse_pod(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> Pod:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    status = _mapping(ctx, doc.get("status"), "status")
    get = spec.get
    containers = get("containers")
    init_containers = get("initContainers")
    overhead = get("overhead")
    node_selector = get("nodeSelector")
    affinity = get("affinity")
    tolerations = get("tolerations")
    gates = get("schedulingGates")
    conditions = status.get("conditions")
    claims = get("resourceClaims")
    claim_statuses = status.get("resourceClaimStatuses")
    scheduler_name = get("schedulerName")
    if type(scheduler_name) is not str:
        scheduler_name = _str(ctx, spec, "schedulerName", "spec")
    node_name = get("nodeName", "")
    if type(node_name) is not str:
        node_name = _str(ctx, spec, "nodeName", "spec")
    phase = status.get("phase")
    if type(phase) is not str or phase not in _POD_PHASES:
        phase = _pod_phase(ctx, status)
    return Pod(
        meta=meta,
        scheduler_name=scheduler_name or c.DEFAULT_SCHEDULER_NAME,
        node_name=node_name,
        phase=phase,
        containers=() if containers is None else _containers(ctx, containers, "spec.containers"),
        init_containers=(() if init_containers is None else _containers(ctx, init_containers, "spec.initContainers")),
        overhead={} if overhead is None else _resource_list(ctx, overhead, "spec.overhead"),
        node_selector={} if node_selector is None else _str_map(ctx, node_selector, "spec.nodeSelector"),
        affinity=None if affinity is None else _affinity(ctx, affinity, "spec.affinity"),
        tolerations=() if tolerations is None else _tolerations(ctx, tolerations, "spec.tolerations"),
        priority_class_name=_str(ctx, spec, "priorityClassName", "spec"),
        priority=_optional_int(ctx, spec, "priority", "spec"),
        scheduling_gates=() if gates is None else _scheduling_gates(ctx, gates, "spec.schedulingGates"),
        nominated_node_name=_str(ctx, status, "nominatedNodeName", "status"),
        conditions=() if conditions is None else _pod_conditions(ctx, conditions, "status.conditions"),
        resource_claims=() if claims is None else _pod_resource_claims(ctx, claims, "spec.resourceClaims"),
        resource_claim_statuses=(
            {} if claim_statuses is None
            else _pod_claim_statuses(ctx, claim_statuses, "status.resourceClaimStatuses")
        ),
    )


def _pod_phase(ctx: _Ctx, status: Mapping[str, Any]) -> str:
    """``status.phase``, Pending when omitted."""
    phase = _str(ctx, status, "phase", "status") or "Pending"
    if phase not in _POD_PHASES:
        ctx.error("status.phase", f"unknown pod phase {phase!r} (expected one of {_one_of(_POD_PHASES)})")
    return phase


def _containers(ctx: _Ctx, value: object, field: str) -> tuple[Container, ...]:
    return tuple([_container(ctx, item, f"{field}[{i}]") for i, item in enumerate(_list(ctx, value, field))])


def _container(ctx: _Ctx, value: object, path: str) -> Container:
    container = _mapping(ctx, value, path)
    name = _str(ctx, container, "name", path)
    if not name:
        ctx.error(f"{path}.name", "a container needs a name")
    resources = container.get("resources")
    requests: dict[str, float] = {}
    limits: dict[str, float] = {}
    if resources is not None:
        resources = _mapping(ctx, resources, f"{path}.resources")
        raw_requests = resources.get("requests")
        raw_limits = resources.get("limits")
        if raw_requests is not None:
            requests = _resource_list(ctx, raw_requests, f"{path}.resources.requests")
        if raw_limits is not None:
            limits = _resource_list(ctx, raw_limits, f"{path}.resources.limits")
    ports = container.get("ports")
    return Container(
        name=name,
        requests=requests,
        limits=limits,
        ports=() if ports is None else _ports(ctx, ports, f"{path}.ports"),
    )


def _ports(ctx: _Ctx, value: object, field: str) -> tuple[ContainerPort, ...]:
    ports: list[ContainerPort] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        port = _mapping(ctx, item, path)
        container_port = _int(ctx, port, "containerPort", path, 0)
        host_port = _int(ctx, port, "hostPort", path, 0)
        protocol = _str(ctx, port, "protocol", path) or "TCP"
        if not 1 <= container_port <= _MAX_PORT:
            ctx.error(f"{path}.containerPort", f"must be a port number between 1 and {_MAX_PORT}")
        if not 0 <= host_port <= _MAX_PORT:
            ctx.error(f"{path}.hostPort", f"must be a port number between 0 and {_MAX_PORT}")
        if protocol not in _PORT_PROTOCOLS:
            ctx.error(f"{path}.protocol", f"unknown protocol {protocol!r} (expected {_one_of(_PORT_PROTOCOLS)})")
        ports.append(ContainerPort(container_port, host_port, protocol, _str(ctx, port, "hostIP", path)))
    return tuple(ports)


def _tolerations(ctx: _Ctx, value: object, field: str) -> tuple[Toleration, ...]:
    return tuple([_toleration(ctx, item, f"{field}[{i}]") for i, item in enumerate(_list(ctx, value, field))])


def _toleration(ctx: _Ctx, value: object, path: str) -> Toleration:
    if type(value) is dict:
        get = value.get
        key, operator, tol_value = get("key", ""), get("operator", "Equal"), get("value", "")
        effect, seconds = get("effect", ""), get("tolerationSeconds")
        well_typed = (
            type(key) is str and type(operator) is str and type(tol_value) is str and type(effect) is str
            and (seconds is None or type(seconds) is int)
        )  # fmt: skip
    else:
        well_typed = False
    if not well_typed:
        errors_before = len(ctx.errors)
        key, operator, tol_value, effect, seconds = _toleration_fields(ctx, _mapping(ctx, value, path), path)
        if len(ctx.errors) > errors_before:  # the pod is dropped; consistency checks would only add noise
            return Toleration(key, operator, tol_value, effect, seconds)
    if operator not in _TOLERATION_OPERATORS:
        ctx.error(f"{path}.operator", f"unknown operator {operator!r} (expected Equal or Exists)")
    elif operator == "Exists" and tol_value:
        ctx.error(f"{path}.value", "must be empty when operator is Exists")
    elif not key and operator != "Exists":
        ctx.error(f"{path}.operator", "must be Exists when key is empty")
    if effect and effect not in _TAINT_EFFECTS:
        ctx.error(f"{path}.effect", f"unknown effect {effect!r} (expected {_one_of(_TAINT_EFFECTS)})")
    if seconds is not None and effect != "NoExecute":
        ctx.error(f"{path}.tolerationSeconds", "only allowed with effect NoExecute")
    return Toleration(key, operator, tol_value, effect, seconds)


def _toleration_fields(ctx: _Ctx, toleration: Mapping[str, Any], path: str) -> tuple[str, str, str, str, int | None]:
    return (
        _str(ctx, toleration, "key", path),
        _str(ctx, toleration, "operator", path) or "Equal",
        _str(ctx, toleration, "value", path),
        _str(ctx, toleration, "effect", path),
        _optional_int(ctx, toleration, "tolerationSeconds", path),
    )


def _scheduling_gates(ctx: _Ctx, value: object, field: str) -> tuple[str, ...]:
    names: list[str] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        name = _str(ctx, _mapping(ctx, item, path), "name", path)
        if not name:
            ctx.error(f"{path}.name", "a scheduling gate needs a name")
        names.append(name)
    return tuple(names)


def _pod_conditions(ctx: _Ctx, value: object, field: str) -> tuple[PodCondition, ...]:
    conditions: list[PodCondition] = []
    for i, item in enumerate(_list(ctx, value, field)):
        if type(item) is dict:
            kind, status, reason = item.get("type"), item.get("status"), item.get("reason", "")
            if type(kind) is str and kind and type(status) is str and status and type(reason) is str:
                conditions.append(PodCondition(kind, status, reason))
                continue
        path = f"{field}[{i}]"
        condition = _mapping(ctx, item, path)
        conditions.append(
            PodCondition(
                type=_required_str(ctx, condition, "type", path),
                status=_required_str(ctx, condition, "status", path),
                reason=_str(ctx, condition, "reason", path),
            )
        )
    return tuple(conditions)


def _pod_resource_claims(ctx: _Ctx, value: object, field: str) -> tuple[PodResourceClaim, ...]:
    claims: list[PodResourceClaim] = []
    index_by_name: dict[str, int] = {}
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        claim = _mapping(ctx, item, path)
        errors_before = len(ctx.errors)
        name = _required_str(ctx, claim, "name", path)
        claim_name = _str(ctx, claim, "resourceClaimName", path)
        template_name = _str(ctx, claim, "resourceClaimTemplateName", path)
        if bool(claim_name) == bool(template_name) and len(ctx.errors) == errors_before:
            ctx.error(path, "exactly one of resourceClaimName, resourceClaimTemplateName must be set")
        if name in index_by_name:
            ctx.error(f"{path}.name", f"duplicate resource claim name {name!r} (also {field}[{index_by_name[name]}])")
        elif name:
            index_by_name[name] = i
        claims.append(PodResourceClaim(name, claim_name, template_name))
    return tuple(claims)


def _pod_claim_statuses(ctx: _Ctx, value: object, field: str) -> dict[str, str]:
    """Pod claim name -> the ResourceClaim made for it ("" when none is needed)."""
    statuses: dict[str, str] = {}
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        status = _mapping(ctx, item, path)
        name = _required_str(ctx, status, "name", path)
        if name in statuses:
            ctx.error(f"{path}.name", f"duplicate resource claim name {name!r}")
        statuses[name] = _str(ctx, status, "resourceClaimName", path)
    return statuses


# ----------------------------------------------------------------------------------------- affinity


def _affinity(ctx: _Ctx, value: object, field: str) -> Affinity | None:
    affinity = _mapping(ctx, value, field)
    node = affinity.get("nodeAffinity")
    pod = affinity.get("podAffinity")
    anti = affinity.get("podAntiAffinity")
    if node is None and pod is None and anti is None:
        return None
    return Affinity(
        node_affinity=None if node is None else _node_affinity(ctx, node, f"{field}.nodeAffinity"),
        pod_affinity=None if pod is None else _pod_affinity(ctx, pod, f"{field}.podAffinity"),
        pod_anti_affinity=None if anti is None else _pod_affinity(ctx, anti, f"{field}.podAntiAffinity"),
    )


def _node_affinity(ctx: _Ctx, value: object, field: str) -> NodeAffinity:
    affinity = _mapping(ctx, value, field)
    raw_required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    raw_preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    required: tuple[NodeSelectorTerm, ...] | None = None
    if raw_required is not None:
        required = _node_selector(ctx, raw_required, f"{field}.requiredDuringSchedulingIgnoredDuringExecution")
    if raw_preferred is None:
        return NodeAffinity(required=required)
    preferred: list[PreferredSchedulingTerm] = []
    preferred_field = f"{field}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_list(ctx, raw_preferred, preferred_field)):
        path = f"{preferred_field}[{i}]"
        weighted = _mapping(ctx, item, path)
        weight = _weight(ctx, weighted, path)
        preference = _node_selector_term(ctx, weighted.get("preference"), f"{path}.preference")
        preferred.append(PreferredSchedulingTerm(weight, preference))
    return NodeAffinity(required=required, preferred=tuple(preferred))


def _node_selector(ctx: _Ctx, value: object, field: str) -> tuple[NodeSelectorTerm, ...]:
    """A core NodeSelector: its terms (ORed), at least one."""
    terms_field = f"{field}.nodeSelectorTerms"
    raw_terms = _list(ctx, _mapping(ctx, value, field).get("nodeSelectorTerms"), terms_field)
    if not raw_terms:
        ctx.error(terms_field, "must contain at least one node selector term")
    return tuple([_node_selector_term(ctx, term, f"{terms_field}[{i}]") for i, term in enumerate(raw_terms)])


def _node_selector_term(ctx: _Ctx, value: object, path: str) -> NodeSelectorTerm:
    term = _mapping(ctx, value, path)
    expressions = term.get("matchExpressions")
    fields = term.get("matchFields")
    return NodeSelectorTerm(
        match_expressions=(
            () if expressions is None else _node_selector_requirements(ctx, expressions, f"{path}.matchExpressions")
        ),
        match_fields=() if fields is None else _node_selector_requirements(ctx, fields, f"{path}.matchFields"),
    )


def _node_selector_requirements(ctx: _Ctx, value: object, field: str) -> tuple[NodeSelectorRequirement, ...]:
    requirements: list[NodeSelectorRequirement] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        key, operator, values = _requirement_parts(ctx, item, path, _NODE_SELECTOR_OPERATORS)
        if operator in ("Gt", "Lt") and (len(values) != 1 or _INTEGER_RE.fullmatch(values[0]) is None):
            ctx.error(f"{path}.values", f"operator {operator} needs exactly one integer value")
        requirements.append(NodeSelectorRequirement(key, operator, values))
    return tuple(requirements)


def _requirement_parts(
    ctx: _Ctx, value: object, path: str, operators: frozenset[str]
) -> tuple[str, str, tuple[str, ...]]:
    requirement = _mapping(ctx, value, path)
    key = _required_str(ctx, requirement, "key", path)
    operator = _required_str(ctx, requirement, "operator", path)
    raw_values = requirement.get("values")
    values = () if raw_values is None else _str_list(ctx, raw_values, f"{path}.values")
    if operator not in operators:
        if operator:
            ctx.error(f"{path}.operator", f"unknown operator {operator!r} (expected {_one_of(operators)})")
    elif operator in ("In", "NotIn") and not values:
        ctx.error(f"{path}.values", f"operator {operator} needs at least one value")
    elif operator in ("Exists", "DoesNotExist") and values:
        ctx.error(f"{path}.values", f"must be empty when operator is {operator}")
    return key, operator, values


def _pod_affinity(ctx: _Ctx, value: object, field: str) -> PodAffinity:
    affinity = _mapping(ctx, value, field)
    required_field = f"{field}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred_field = f"{field}.preferredDuringSchedulingIgnoredDuringExecution"
    required = tuple(
        _pod_affinity_term(ctx, term, f"{required_field}[{i}]")
        for i, term in enumerate(
            _list(ctx, affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), required_field)
        )
    )
    preferred: list[WeightedPodAffinityTerm] = []
    for i, item in enumerate(
        _list(ctx, affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_field)
    ):
        path = f"{preferred_field}[{i}]"
        weighted = _mapping(ctx, item, path)
        weight = _weight(ctx, weighted, path)
        term = _pod_affinity_term(ctx, weighted.get("podAffinityTerm"), f"{path}.podAffinityTerm")
        preferred.append(WeightedPodAffinityTerm(weight, term))
    return PodAffinity(required=required, preferred=tuple(preferred))


def _pod_affinity_term(ctx: _Ctx, value: object, path: str) -> PodAffinityTerm:
    term = _mapping(ctx, value, path)
    topology_key = _str(ctx, term, "topologyKey", path)
    if not topology_key:
        ctx.error(f"{path}.topologyKey", "must not be empty")
    selector = term.get("labelSelector")
    namespaces = term.get("namespaces")
    namespace_selector = term.get("namespaceSelector")
    return PodAffinityTerm(
        topology_key=topology_key,
        label_selector=None if selector is None else _label_selector(ctx, selector, f"{path}.labelSelector"),
        namespaces=() if namespaces is None else _str_list(ctx, namespaces, f"{path}.namespaces"),
        namespace_selector=(
            None
            if namespace_selector is None
            else _label_selector(ctx, namespace_selector, f"{path}.namespaceSelector")
        ),
    )


def _label_selector(ctx: _Ctx, value: object, field: str) -> LabelSelector:
    selector = _mapping(ctx, value, field)
    match_labels = selector.get("matchLabels")
    expressions: list[LabelSelectorRequirement] = []
    expressions_field = f"{field}.matchExpressions"
    for i, item in enumerate(_list(ctx, selector.get("matchExpressions"), expressions_field)):
        key, operator, values = _requirement_parts(ctx, item, f"{expressions_field}[{i}]", _LABEL_SELECTOR_OPERATORS)
        expressions.append(LabelSelectorRequirement(key, operator, values))
    return LabelSelector(
        match_labels={} if match_labels is None else _str_map(ctx, match_labels, f"{field}.matchLabels"),
        match_expressions=tuple(expressions),
    )


def _weight(ctx: _Ctx, weighted: Mapping[str, Any], path: str) -> int:
    weight = _int(ctx, weighted, "weight", path, 0)
    if not _MIN_WEIGHT <= weight <= _MAX_WEIGHT:
        ctx.error(f"{path}.weight", f"must be between {_MIN_WEIGHT} and {_MAX_WEIGHT}, got {weight}")
    return weight


# -------------------------------------------------------------------------------------------- nodes


def _parse_node(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> Node:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    status = _mapping(ctx, doc.get("status"), "status")
    raw_capacity = status.get("capacity")
    raw_allocatable = status.get("allocatable")
    capacity = {} if raw_capacity is None else _resource_list(ctx, raw_capacity, "status.capacity")
    if raw_allocatable is None:
        allocatable = dict(capacity)
    else:
        allocatable = _resource_list(ctx, raw_allocatable, "status.allocatable")
    taints = spec.get("taints")
    conditions = status.get("conditions")
    return Node(
        meta=meta,
        allocatable=allocatable,
        capacity=capacity,
        taints=() if taints is None else _taints(ctx, taints, "spec.taints"),
        unschedulable=_bool(ctx, spec, "unschedulable", "spec", False),
        conditions=() if conditions is None else _node_conditions(ctx, conditions, "status.conditions"),
    )


def _taints(ctx: _Ctx, value: object, field: str) -> tuple[Taint, ...]:
    taints: list[Taint] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        taint = _mapping(ctx, item, path)
        key = _required_str(ctx, taint, "key", path)
        effect = _required_str(ctx, taint, "effect", path)
        if effect and effect not in _TAINT_EFFECTS:
            ctx.error(f"{path}.effect", f"unknown effect {effect!r} (expected {_one_of(_TAINT_EFFECTS)})")
        taints.append(Taint(key, _str(ctx, taint, "value", path), effect))
    return tuple(taints)


def _node_conditions(ctx: _Ctx, value: object, field: str) -> tuple[NodeCondition, ...]:
    conditions: list[NodeCondition] = []
    for i, item in enumerate(_list(ctx, value, field)):
        if type(item) is dict:
            kind, status = item.get("type"), item.get("status")
            if type(kind) is str and kind and type(status) is str and status:
                conditions.append(NodeCondition(kind, status))
                continue
        path = f"{field}[{i}]"
        condition = _mapping(ctx, item, path)
        conditions.append(
            NodeCondition(
                type=_required_str(ctx, condition, "type", path),
                status=_required_str(ctx, condition, "status", path),
            )
        )
    return tuple(conditions)


# ------------------------------------------------------------------------------------------- queues


def _parse_queue(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> Queue:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    raw_resources = spec.get("resources")
    if raw_resources is None:
        ctx.error("spec.resources", "is required (KAI's admission webhook rejects queues without it)")
        resources = QueueResources()
    else:
        resources = _queue_resources(ctx, raw_resources, "spec.resources")
    return Queue(
        meta=meta,
        resources=resources,
        parent_queue=_str(ctx, spec, "parentQueue", "spec"),
        priority=_int(ctx, spec, "priority", "spec", c.DEFAULT_QUEUE_PRIORITY),
        display_name=_str(ctx, spec, "displayName", "spec"),
        preempt_min_runtime=_duration(ctx, spec, "preemptMinRuntime", "spec"),
        reclaim_min_runtime=_duration(ctx, spec, "reclaimMinRuntime", "spec"),
    )


def _queue_resources(ctx: _Ctx, value: object, field: str) -> QueueResources:
    resources = _mapping(ctx, value, field)
    for name in resources:
        if name not in _QUEUE_RESOURCE_NAMES:
            ctx.error(_join(field, name), f"unknown queue resource {name!r} (expected gpu, cpu or memory)")
    return QueueResources(
        gpu=_queue_resource(ctx, resources.get("gpu"), f"{field}.gpu"),
        cpu=_queue_resource(ctx, resources.get("cpu"), f"{field}.cpu"),
        memory=_queue_resource(ctx, resources.get("memory"), f"{field}.memory"),
    )


def _queue_resource(ctx: _Ctx, value: object, path: str) -> QueueResource:
    if value is None:
        return QueueResource()
    resource = _mapping(ctx, value, path)
    quota = _queue_number(ctx, resource, "quota", path)
    limit = _queue_number(ctx, resource, "limit", path)
    for key, amount in (("quota", quota), ("limit", limit)):
        if amount < 0 and amount != c.UNLIMITED:
            ctx.error(f"{path}.{key}", f"must be >= 0 or -1 (unlimited), got {amount:g}")
    weight = _queue_number(ctx, resource, "overQuotaWeight", path)
    if weight < 0 and weight != c.UNLIMITED:  # (-1: what KAI's own test harness gives its implicit department)
        ctx.error(f"{path}.overQuotaWeight", f"must be >= 0 (0: no share of what is left over quotas), got {weight:g}")
    return QueueResource(quota=quota, over_quota_weight=weight, limit=limit)


def _queue_number(ctx: _Ctx, resource: Mapping[str, Any], key: str, path: str) -> float:
    """A Queue amount: a number or a numeric string; omitted means 0 (KAI semantics)."""
    value = resource.get(key)
    if value is None:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
    elif isinstance(value, str) and _NUMBER_RE.fullmatch(value) is not None:
        return float(value)
    ctx.error(f"{path}.{key}", f"must be a number, got {_describe(value)}")
    return 0.0


def _duration(ctx: _Ctx, spec: Mapping[str, Any], key: str, prefix: str) -> timedelta | None:
    value = spec.get(key)
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        ctx.error(f"{prefix}.{key}", str(exc))
        return None


# ---------------------------------------------------------------------------------------- podgroups


def _parse_pod_group(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> PodGroup:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    min_member = _int(ctx, spec, "minMember", "spec", c.DEFAULT_MIN_MEMBER)
    if min_member < 0:
        ctx.error("spec.minMember", f"must be >= 0, got {min_member}")
    preemptibility = _str(ctx, spec, "preemptibility", "spec")
    if preemptibility not in c.PREEMPTIBILITY_VALUES:
        ctx.error(
            "spec.preemptibility",
            f"invalid value {preemptibility!r} (expected preemptible, non-preemptible or empty)",
        )
    constraint = spec.get("topologyConstraint")
    sub_groups = spec.get("subGroups")
    return PodGroup(
        meta=meta,
        queue=_str(ctx, spec, "queue", "spec"),
        min_member=min_member,
        priority_class_name=_str(ctx, spec, "priorityClassName", "spec"),
        preemptibility=preemptibility,
        sub_groups=() if sub_groups is None else _sub_groups(ctx, sub_groups, "spec.subGroups"),
        topology_constraint=(
            None if constraint is None else _topology_constraint(ctx, constraint, "spec.topologyConstraint")
        ),
        mark_unschedulable=_bool(ctx, spec, "markUnschedulable", "spec", True),
        scheduling_backoff=_int(ctx, spec, "schedulingBackoff", "spec", c.NO_SCHEDULING_BACKOFF),
    )


def _sub_groups(ctx: _Ctx, value: object, field: str) -> tuple[SubGroup, ...]:
    sub_groups: list[SubGroup] = []
    index_by_name: dict[str, int] = {}
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        sub_group = _sub_group(ctx, item, path)
        if sub_group.name in index_by_name:
            first = index_by_name[sub_group.name]
            ctx.error(f"{path}.name", f"duplicate subgroup name {sub_group.name!r} (also {field}[{first}])")
        elif sub_group.name:
            index_by_name[sub_group.name] = i
        sub_groups.append(sub_group)
    _check_sub_group_parents(ctx, sub_groups, index_by_name, field)
    return tuple(sub_groups)


def _sub_group(ctx: _Ctx, value: object, path: str) -> SubGroup:
    sub_group = _mapping(ctx, value, path)
    name = _str(ctx, sub_group, "name", path)
    if not name:
        ctx.error(f"{path}.name", "a subgroup needs a name")
    elif name.lower() != name:
        ctx.error(f"{path}.name", f"subgroup name {name!r} must be lowercase")
    min_member = _int(ctx, sub_group, "minMember", path, c.DEFAULT_MIN_MEMBER)
    if min_member < 0:
        ctx.error(f"{path}.minMember", f"must be >= 0, got {min_member}")
    parent = sub_group.get("parent")
    if parent is not None and not isinstance(parent, str):
        ctx.error(f"{path}.parent", f"must be a string, got {_type_name(parent)}")
        parent = None
    constraint = sub_group.get("topologyConstraint")
    return SubGroup(
        name=name,
        min_member=min_member,
        parent=parent,
        topology_constraint=(
            None if constraint is None else _topology_constraint(ctx, constraint, f"{path}.topologyConstraint")
        ),
    )


def _check_sub_group_parents(
    ctx: _Ctx, sub_groups: Sequence[SubGroup], index_by_name: Mapping[str, int], field: str
) -> None:
    parents = {sg.name: sg.parent for sg in sub_groups if sg.name}
    for i, sub_group in enumerate(sub_groups):
        if sub_group.parent is not None and sub_group.parent not in index_by_name:
            ctx.error(
                f"{field}[{i}].parent",
                f"parent subgroup {sub_group.parent!r} of {sub_group.name!r} does not exist",
            )
    reported: set[str] = set()
    for i, sub_group in enumerate(sub_groups):
        cycle = _parent_cycle(sub_group.name, parents)
        if cycle and not reported.intersection(cycle):
            reported.update(cycle)
            ctx.error(f"{field}[{i}].parent", "cycle in subgroup parents: " + " -> ".join(cycle))


def _parent_cycle(start: str, parents: Mapping[str, str | None]) -> list[str]:
    """The cycle reached by following parents from ``start`` (``[a, b, a]``), or ``[]``."""
    path: list[str] = []
    position: dict[str, int] = {}
    current: str | None = start
    while current is not None and current in parents:
        if current in position:
            return [*path[position[current] :], current]
        position[current] = len(path)
        path.append(current)
        current = parents[current]
    return []


def _topology_constraint(ctx: _Ctx, value: object, path: str) -> TopologyConstraint:
    constraint = _mapping(ctx, value, path)
    return TopologyConstraint(
        topology=_str(ctx, constraint, "topology", path),
        required_level=_str(ctx, constraint, "requiredTopologyLevel", path),
        preferred_level=_str(ctx, constraint, "preferredTopologyLevel", path),
    )


# ---------------------------------------------------------------------------------------- workloads


def _plain(value: object) -> Any:
    """A deep copy of JSON-like data as plain dicts and lists (never shared with the caller's input)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _parse_workload(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> Workload:
    kind = str(doc.get("kind"))
    spec = doc.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        ctx.error("spec", f"expected a mapping, got {_type_name(spec)}")
    status = doc.get("status")
    data = doc.get("data")
    return Workload(meta=meta, api_version=str(doc.get("apiVersion")), kind=kind,
                    spec=_plain(spec) if isinstance(spec, Mapping) else {},
                    status=_plain(status) if isinstance(status, Mapping) else {},
                    data=_plain(data) if isinstance(data, Mapping) else {})


# --------------------------------------------------------------------------------------- topologies


def _parse_topology(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> Topology:
    """Levels from the widest to the narrowest (spec 2.4): 1-16 node labels, unique, the hostname label
    only as the last one."""
    spec = _mapping(ctx, doc.get("spec"), "spec")
    items = _list(ctx, spec.get("levels"), "spec.levels")
    levels: list[str] = []
    for i, item in enumerate(items):
        path = f"spec.levels[{i}]"
        label = _str(ctx, _mapping(ctx, item, path), "nodeLabel", path)
        if not label:
            ctx.error(f"{path}.nodeLabel", "must name a node label")
        elif label in levels:
            ctx.error(f"{path}.nodeLabel", f"duplicate level {label!r}")
        levels.append(label)
    if not items:
        ctx.error("spec.levels", "a topology needs at least one level")
    elif len(items) > c.MAX_TOPOLOGY_LEVELS:
        ctx.error("spec.levels", f"at most {c.MAX_TOPOLOGY_LEVELS} levels, got {len(items)}")
    if c.HOSTNAME_LABEL in levels[:-1]:
        ctx.error("spec.levels", f"{c.HOSTNAME_LABEL} may only be the last (narrowest) level")
    return Topology(meta=meta, levels=tuple(levels))


# ---------------------------------------------------------------------------------- priorityclasses


def _parse_priority_class(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> PriorityClass:
    value = _optional_int(ctx, doc, "value", "")
    if value is None:
        if doc.get("value") is None:
            ctx.error("value", "is required (the priority of this class, an integer)")
        value = 0
    policy = _str(ctx, doc, "preemptionPolicy", "") or "PreemptLowerPriority"
    if policy not in _PREEMPTION_POLICIES:
        ctx.error("preemptionPolicy", f"unknown policy {policy!r} (expected PreemptLowerPriority or Never)")
    return PriorityClass(
        meta=meta,
        value=value,
        global_default=_bool(ctx, doc, "globalDefault", "", False),
        preemption_policy=policy,
    )


# -------------------------------------------------------------------- dynamic resource allocation
# resource.k8s.io v1, v1beta2 and v1beta1 are read into the same shapes; v1beta1 keeps a request's exact
# fields on the request (v1: under `exactly`) and a device's attributes and capacity under `basic`.


def _parse_device_class(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> DeviceClass:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    return DeviceClass(meta=meta, selectors=_selectors(ctx, spec.get("selectors"), "spec.selectors"))


def _selectors(ctx: _Ctx, value: object, field: str) -> tuple[str, ...]:
    """``[{cel: {expression}}]`` as the expressions (compiled elsewhere, only required to be non-empty here)."""
    expressions: list[str] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        if type(item) is not dict and not isinstance(item, Mapping):
            ctx.error(path, f"expected a mapping ({{cel: {{expression: ...}}}}), got {_type_name(item)}")
            continue
        cel = item.get("cel")
        if cel is None:
            ctx.error(f"{path}.cel", "is required (a CEL selector: cel.expression)")
            continue
        if type(cel) is not dict and not isinstance(cel, Mapping):
            ctx.error(f"{path}.cel", f"expected a mapping ({{expression: ...}}), got {_type_name(cel)}")
            continue
        expression = cel.get("expression")
        if type(expression) is not str or not expression.strip():
            ctx.error(f"{path}.cel.expression", f"must be a non-empty CEL expression, got {_describe(expression)}")
            continue
        expressions.append(expression)
    return tuple(expressions)


def _parse_resource_slice(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> ResourceSlice:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    driver = _required_str(ctx, spec, "driver", "spec")
    pool = _mapping(ctx, spec.get("pool"), "spec.pool")
    generation = _int(ctx, pool, "generation", "spec.pool", 0)
    slice_count = _int(ctx, pool, "resourceSliceCount", "spec.pool", 1)
    if generation < 0:
        ctx.error("spec.pool.generation", f"must be >= 0, got {generation}")
    if slice_count < 1:
        ctx.error("spec.pool.resourceSliceCount", f"must be >= 1, got {slice_count}")
    node_name = _str(ctx, spec, "nodeName", "spec")
    raw_selector = spec.get("nodeSelector")
    node_selector = None if raw_selector is None else _node_selector(ctx, raw_selector, "spec.nodeSelector")
    if node_selector is not None and len(node_selector) > 1:
        ctx.error("spec.nodeSelector.nodeSelectorTerms", f"must contain exactly one term, got {len(node_selector)}")
    all_nodes = _bool(ctx, spec, "allNodes", "spec", False)
    if _bool(ctx, spec, "perDeviceNodeSelection", "spec", False):
        ctx.error("spec.perDeviceNodeSelection",
                  "not supported: set nodeName, nodeSelector or allNodes on the slice instead of on each device")
    elif bool(node_name) + (node_selector is not None) + all_nodes != 1:
        ctx.error("spec", "exactly one of nodeName, nodeSelector, allNodes must be set")
    return ResourceSlice(
        meta=meta,
        driver=driver,
        pool=_required_str(ctx, pool, "name", "spec.pool"),
        pool_generation=generation,
        pool_slice_count=slice_count,
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        devices=_devices(ctx, spec.get("devices"), "spec.devices", driver),
    )


def _devices(ctx: _Ctx, value: object, field: str, driver: str) -> tuple[Device, ...]:
    devices: list[Device] = []
    index_by_name: dict[str, int] = {}
    beta1 = ctx.api_version == c.RESOURCE_V1BETA1_API_VERSION
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        device = _mapping(ctx, item, path)
        name = _required_str(ctx, device, "name", path)
        if name in index_by_name:
            ctx.error(f"{path}.name", f"duplicate device name {name!r} (also {field}[{index_by_name[name]}])")
        elif name:
            index_by_name[name] = i
        if beta1:
            misplaced = [key for key in ("attributes", "capacity") if device.get(key) is not None]
            if misplaced:
                ctx.error(f"{path}.{misplaced[0]}",
                          f"in {ctx.api_version} the attributes and capacity of a device sit under basic")
            fields, fields_path = _mapping(ctx, device.get("basic"), f"{path}.basic"), f"{path}.basic"
        else:
            if device.get("basic") is not None:
                ctx.error(f"{path}.basic", f"not a field in {ctx.api_version}: attributes and capacity sit directly "
                                           f"on the device (basic is the {c.RESOURCE_V1BETA1_API_VERSION} layout)")
            fields, fields_path = device, path
        attributes = fields.get("attributes")
        capacity = fields.get("capacity")
        devices.append(Device(
            name=name,
            attributes={} if attributes is None else _device_attributes(ctx, attributes, f"{fields_path}.attributes",
                                                                         driver),
            capacity={} if capacity is None else _device_capacity(ctx, capacity, f"{fields_path}.capacity", driver),
        ))  # fmt: skip
    return tuple(devices)


def _qualified_name(ctx: _Ctx, key: object, field: str, driver: str) -> str:
    """An attribute or capacity name with its domain (the driver's when written without one); "" if invalid."""
    if type(key) is not str:
        ctx.error(f"{field}[{key!r}]", f"names must be strings, got {_describe(key)}")
        return ""
    domain, slash, name = key.rpartition("/")
    if (slash and not domain) or _IDENTIFIER_RE.fullmatch(name) is None:
        ctx.error(_join(field, key), "invalid name: expected an identifier like productName, optionally with a "
                                     "domain (gpu.example.com/productName)")
        return ""
    return key if slash else f"{driver}/{key}"


def _device_attributes(ctx: _Ctx, value: object, field: str, driver: str) -> dict[str, DeviceAttribute]:
    attributes: dict[str, DeviceAttribute] = {}
    for key, raw in _mapping(ctx, value, field).items():
        name = _qualified_name(ctx, key, field, driver)
        if not name:
            continue
        path = _join(field, key)
        if name in attributes:
            ctx.error(path, f"duplicate attribute {name!r} (a name without a domain gets the driver's, {driver})")
        attribute = _device_attribute(ctx, raw, path)
        if attribute is not None:
            attributes[name] = attribute
    return attributes


def _device_attribute(ctx: _Ctx, value: object, path: str) -> DeviceAttribute | None:
    if type(value) is not dict and not isinstance(value, Mapping):
        ctx.error(path, f"expected a mapping with one of int, bool, string, version, got {_type_name(value)}")
        return None
    kinds = [kind for kind in _ATTRIBUTE_KINDS if value.get(kind) is not None]
    if len(kinds) != 1:
        ctx.error(path, "exactly one of int, bool, string, version must be set")
        return None
    kind = kinds[0]
    raw = value[kind]
    if kind == "int":
        number = _optional_int(ctx, value, kind, path)
        return None if number is None else DeviceAttribute(kind, number)
    if kind == "bool":
        ok = isinstance(raw, bool)
        expected = "must be true or false"
    elif kind == "string":
        ok = isinstance(raw, str)
        expected = "must be a string"
    else:
        ok = isinstance(raw, str) and _SEMVER_RE.fullmatch(raw) is not None
        expected = "must be a semantic version like 1.2.3"
    if not ok:
        ctx.error(f"{path}.{kind}", f"{expected}, got {_describe(raw)}")
        return None
    return DeviceAttribute(kind, raw)


def _device_capacity(ctx: _Ctx, value: object, field: str, driver: str) -> dict[str, float]:
    """Capacity name -> amount in base units (``{value: 80Gi}`` -> bytes)."""
    capacity: dict[str, float] = {}
    for key, raw in _mapping(ctx, value, field).items():
        name = _qualified_name(ctx, key, field, driver)
        if not name:
            continue
        path = _join(field, key)
        if name in capacity:
            ctx.error(path, f"duplicate capacity {name!r} (a name without a domain gets the driver's, {driver})")
        if type(raw) is not dict and not isinstance(raw, Mapping):
            ctx.error(path, f"expected a mapping ({{value: <quantity>}}), got {_type_name(raw)}")
            continue
        amount = raw.get("value")
        if amount is None:
            ctx.error(f"{path}.value", "is required (a quantity like 80Gi or 1)")
            continue
        try:
            capacity[name] = parse_quantity(amount)
        except QuantityError as exc:
            ctx.error(f"{path}.value", str(exc))
            continue
        if capacity[name] < 0:
            ctx.error(f"{path}.value", f"must not be negative, got {amount!r}")
    return capacity


def _parse_resource_claim(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> ResourceClaim:
    spec = _claim_spec(ctx, doc.get("spec"), "spec")
    status = _mapping(ctx, doc.get("status"), "status")
    raw_allocation = status.get("allocation")
    reserved_for = status.get("reservedFor")
    allocation: tuple[DeviceRequestResult, ...] | None = None
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    if raw_allocation is not None:
        allocation_map = _mapping(ctx, raw_allocation, "status.allocation")
        devices = _mapping(ctx, allocation_map.get("devices"), "status.allocation.devices")
        allocation = _allocation_results(ctx, devices.get("results"), "status.allocation.devices.results")
        raw_selector = allocation_map.get("nodeSelector")
        if raw_selector is not None:
            node_selector = _node_selector(ctx, raw_selector, "status.allocation.nodeSelector")
    return ResourceClaim(
        meta=meta,
        spec=spec,
        api_version=ctx.api_version,
        allocation=allocation,
        allocation_node_selector=node_selector,
        reserved_for=() if reserved_for is None else _claim_consumers(ctx, reserved_for, "status.reservedFor"),
    )


def _allocation_results(ctx: _Ctx, value: object, field: str) -> tuple[DeviceRequestResult, ...]:
    results: list[DeviceRequestResult] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        result = _mapping(ctx, item, path)
        results.append(DeviceRequestResult(
            request=_required_str(ctx, result, "request", path),
            driver=_required_str(ctx, result, "driver", path),
            pool=_required_str(ctx, result, "pool", path),
            device=_required_str(ctx, result, "device", path),
        ))  # fmt: skip
    return tuple(results)


def _claim_consumers(ctx: _Ctx, value: object, field: str) -> tuple[ClaimConsumer, ...]:
    consumers: list[ClaimConsumer] = []
    for i, item in enumerate(_list(ctx, value, field)):
        path = f"{field}[{i}]"
        consumer = _mapping(ctx, item, path)
        consumers.append(ClaimConsumer(
            resource=_required_str(ctx, consumer, "resource", path),
            name=_required_str(ctx, consumer, "name", path),
            uid=_required_str(ctx, consumer, "uid", path),
            api_group=_str(ctx, consumer, "apiGroup", path),
        ))  # fmt: skip
    return tuple(consumers)


def _parse_resource_claim_template(ctx: _Ctx, doc: Mapping[str, Any], meta: ObjectMeta) -> ResourceClaimTemplate:
    spec = _mapping(ctx, doc.get("spec"), "spec")
    metadata = _mapping(ctx, spec.get("metadata"), "spec.metadata")
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    return ResourceClaimTemplate(
        meta=meta,
        spec=_claim_spec(ctx, spec.get("spec"), "spec.spec"),
        claim_labels={} if labels is None else _str_map(ctx, labels, "spec.metadata.labels"),
        claim_annotations={} if annotations is None else _str_map(ctx, annotations, "spec.metadata.annotations"),
    )


def _claim_spec(ctx: _Ctx, value: object, field: str) -> ResourceClaimSpec:
    devices = _mapping(ctx, _mapping(ctx, value, field).get("devices"), f"{field}.devices")
    requests: list[DeviceRequest] = []
    index_by_name: dict[str, int] = {}
    requests_field = f"{field}.devices.requests"
    errors_before = len(ctx.errors)
    for i, item in enumerate(_list(ctx, devices.get("requests"), requests_field)):
        path = f"{requests_field}[{i}]"
        request = _device_request(ctx, item, path)
        if request.name in index_by_name:
            first = index_by_name[request.name]
            ctx.error(f"{path}.name", f"duplicate request name {request.name!r} (also {requests_field}[{first}])")
        elif request.name:
            index_by_name[request.name] = i
        requests.append(request)
    known: set[str] | None = None  # request names constraints may use (None: unknown, the requests are broken)
    if len(ctx.errors) == errors_before:
        known = set(index_by_name)
        known.update(f"{r.name}/{sub.name}" for r in requests for sub in r.first_available)
    constraints: list[DeviceConstraint] = []
    constraints_field = f"{field}.devices.constraints"
    for i, item in enumerate(_list(ctx, devices.get("constraints"), constraints_field)):
        constraints.append(_device_constraint(ctx, item, f"{constraints_field}[{i}]", known))
    return ResourceClaimSpec(requests=tuple(requests), constraints=tuple(constraints))


def _device_request(ctx: _Ctx, value: object, path: str) -> DeviceRequest:
    request = _mapping(ctx, value, path)
    name = _required_str(ctx, request, "name", path)
    raw_first = request.get("firstAvailable")
    exactly: DeviceSubRequest | None = None
    if ctx.api_version == c.RESOURCE_V1BETA1_API_VERSION:
        if request.get("exactly") is not None:
            ctx.error(f"{path}.exactly", f"not a field in {ctx.api_version}: deviceClassName, selectors, "
                                         "allocationMode, count and adminAccess sit directly on the request")
        elif raw_first is None:
            exactly = _sub_request(ctx, request, path, name, admin_access=True)
        elif any(request.get(key) is not None for key in _EXACT_REQUEST_FIELDS):
            ctx.error(path, f"firstAvailable excludes {', '.join(_EXACT_REQUEST_FIELDS)}")
    else:
        raw_exactly = request.get("exactly")
        misplaced = [key for key in _EXACT_REQUEST_FIELDS if request.get(key) is not None]
        if misplaced:
            ctx.error(f"{path}.{misplaced[0]}", f"not a field in {ctx.api_version}: {', '.join(misplaced)} sit "
                      f"under exactly (on the request itself only in {c.RESOURCE_V1BETA1_API_VERSION})")
        elif (raw_exactly is None) == (raw_first is None):
            ctx.error(path, "exactly one of exactly, firstAvailable must be set")
        elif raw_exactly is not None:
            exact_path = f"{path}.exactly"
            exactly = _sub_request(ctx, _mapping(ctx, raw_exactly, exact_path), exact_path, name, admin_access=True)
    if raw_first is None:
        return DeviceRequest(name=name, exactly=exactly)
    first_field = f"{path}.firstAvailable"
    items = _list(ctx, raw_first, first_field)
    if not items:
        ctx.error(first_field, "must contain at least one subrequest")
    subs: list[DeviceSubRequest] = []
    index_by_name: dict[str, int] = {}
    for i, item in enumerate(items):
        sub_path = f"{first_field}[{i}]"
        sub_map = _mapping(ctx, item, sub_path)
        sub = _sub_request(ctx, sub_map, sub_path, _required_str(ctx, sub_map, "name", sub_path), admin_access=False)
        if sub.name in index_by_name:
            ctx.error(f"{sub_path}.name",
                      f"duplicate subrequest name {sub.name!r} (also {first_field}[{index_by_name[sub.name]}])")
        elif sub.name:
            index_by_name[sub.name] = i
        subs.append(sub)
    return DeviceRequest(name=name, exactly=exactly, first_available=tuple(subs))


def _sub_request(ctx: _Ctx, m: Mapping[str, Any], path: str, name: str, admin_access: bool) -> DeviceSubRequest:
    """An exact request (``admin_access``: it may ask for admin access) or one alternative of firstAvailable."""
    class_name = _required_str(ctx, m, "deviceClassName", path)
    selectors = m.get("selectors")
    mode = _str(ctx, m, "allocationMode", path) or c.ALLOCATION_MODE_EXACT_COUNT
    count = _optional_int(ctx, m, "count", path)
    if mode not in _ALLOCATION_MODES:
        ctx.error(f"{path}.allocationMode", f"unknown allocation mode {mode!r} (expected {_one_of(_ALLOCATION_MODES)})")
    elif mode == c.ALLOCATION_MODE_ALL and count is not None:
        ctx.error(f"{path}.count", f"must not be set when allocationMode is {c.ALLOCATION_MODE_ALL}")
    elif count is not None and count < 1:
        ctx.error(f"{path}.count", f"must be >= 1, got {count}")
    return DeviceSubRequest(
        name=name,
        device_class_name=class_name,
        selectors=() if selectors is None else _selectors(ctx, selectors, f"{path}.selectors"),
        allocation_mode=mode,
        count=1 if count is None else count,
        admin_access=_bool(ctx, m, "adminAccess", path, False) if admin_access else False,
    )


def _device_constraint(ctx: _Ctx, value: object, path: str, requests: set[str] | None) -> DeviceConstraint:
    constraint = _mapping(ctx, value, path)
    if constraint.get("distinctAttribute") is not None:
        ctx.error(f"{path}.distinctAttribute", "not supported (only matchAttribute constraints are)")
    names = _str_list(ctx, constraint.get("requests"), f"{path}.requests")
    for i, name in enumerate(names):
        if requests is not None and type(name) is str and name not in requests:
            ctx.error(f"{path}.requests[{i}]", f"unknown request {name!r} (expected the name of a request of "
                                               "this claim, or <request>/<subrequest>)")
    attribute = _required_str(ctx, constraint, "matchAttribute", path)
    domain, _, attribute_name = attribute.rpartition("/")
    if attribute and (not domain or _IDENTIFIER_RE.fullmatch(attribute_name) is None):
        ctx.error(f"{path}.matchAttribute", f"must be a fully qualified attribute name like "
                                            f"gpu.example.com/productName, got {attribute!r}")
    return DeviceConstraint(requests=names, match_attribute=attribute)


_KINDS: Final[Mapping[str, _KindInfo]] = MappingProxyType(
    {
        c.POD_KIND: _KindInfo((c.CORE_API_VERSION,), True, _parse_pod),
        c.NODE_KIND: _KindInfo((c.CORE_API_VERSION,), False, _parse_node),
        c.QUEUE_KIND: _KindInfo((c.QUEUE_API_VERSION,), False, _parse_queue),
        c.POD_GROUP_KIND: _KindInfo((c.POD_GROUP_API_VERSION,), True, _parse_pod_group),
        c.PRIORITY_CLASS_KIND: _KindInfo((c.PRIORITY_CLASS_API_VERSION,), False, _parse_priority_class),
        c.TOPOLOGY_KIND: _KindInfo((c.TOPOLOGY_API_VERSION,), False, _parse_topology),
        c.DEVICE_CLASS_KIND: _KindInfo(c.RESOURCE_API_VERSIONS, False, _parse_device_class),
        c.RESOURCE_SLICE_KIND: _KindInfo(c.RESOURCE_API_VERSIONS, False, _parse_resource_slice),
        c.RESOURCE_CLAIM_KIND: _KindInfo(c.RESOURCE_API_VERSIONS, True, _parse_resource_claim),
        c.RESOURCE_CLAIM_TEMPLATE_KIND: _KindInfo(c.RESOURCE_API_VERSIONS, True, _parse_resource_claim_template),
    }
)


# -------------------------------------------------------------------------------- field primitives


def _mapping(ctx: _Ctx, value: object, field: str) -> Mapping[str, Any]:
    """``value`` as a mapping; absent (None) is empty, anything else is an error."""
    if type(value) is dict or isinstance(value, Mapping):
        return value
    if value is not None:
        ctx.error(field, f"expected a mapping, got {_type_name(value)}")
    return _EMPTY


def _list(ctx: _Ctx, value: object, field: str) -> Sequence[Any]:
    if type(value) is list or isinstance(value, tuple):
        return value
    if value is not None:
        ctx.error(field, f"expected a list, got {_type_name(value)}")
    return ()


def _str(ctx: _Ctx, m: Mapping[str, Any], key: str, prefix: str) -> str:
    """``m[key]`` as a string; absent is ""."""
    value = m.get(key)
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, str):
        return str(value)
    ctx.error(_join(prefix, key), f"must be a string, got {_describe(value)}")
    return ""


def _required_str(ctx: _Ctx, m: Mapping[str, Any], key: str, prefix: str) -> str:
    value = m.get(key)
    if value is None or value == "":
        ctx.error(_join(prefix, key), "is required")
        return ""
    return _str(ctx, m, key, prefix)


def _int(ctx: _Ctx, m: Mapping[str, Any], key: str, prefix: str, default: int) -> int:
    value = _optional_int(ctx, m, key, prefix)
    return default if value is None else value


def _optional_int(ctx: _Ctx, m: Mapping[str, Any], key: str, prefix: str) -> int | None:
    value = m.get(key)
    if type(value) is int or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    ctx.error(_join(prefix, key), f"must be an integer, got {_describe(value)}")
    return None


def _bool(ctx: _Ctx, m: Mapping[str, Any], key: str, prefix: str, default: bool) -> bool:
    value = m.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    ctx.error(_join(prefix, key), f"must be true or false, got {_describe(value)}")
    return default


def _str_map(ctx: _Ctx, value: object, field: str) -> dict[str, str]:
    """A string -> string map (labels, annotations, node selectors), copied."""
    mapping = _mapping(ctx, value, field)
    for key, item in mapping.items():
        if type(key) is not str:
            ctx.error(f"{field}[{key!r}]", f"keys must be strings, got {_describe(key)}{_quote_hint(key)}")
        elif type(item) is not str:
            ctx.error(_join(field, key), f"must be a string, got {_describe(item)}{_quote_hint(item)}")
    return dict(mapping)


def _quote_hint(value: object) -> str:
    return " (quote it in YAML)" if isinstance(value, bool | int | float) else ""


def _str_list(ctx: _Ctx, value: object, field: str) -> tuple[str, ...]:
    items = _list(ctx, value, field)
    for i, item in enumerate(items):
        if type(item) is not str:
            ctx.error(f"{field}[{i}]", f"must be a string, got {_describe(item)}")
    return tuple(items)


def _resource_list(ctx: _Ctx, value: object, field: str) -> dict[str, float]:
    """A ResourceList in canonical units (cpu: millicores, others: base units)."""
    resources = _mapping(ctx, value, field)
    out: dict[str, float] = {}
    for name, quantity in resources.items():
        if type(name) is not str:
            ctx.error(f"{field}[{name!r}]", f"resource names must be strings, got {_describe(name)}")
            continue
        try:
            amount = to_canonical(name, quantity)
        except QuantityError as exc:
            ctx.error(_join(field, name), str(exc))
            continue
        if amount < 0:
            ctx.error(_join(field, name), f"must not be negative, got {quantity!r}")
        out[name] = amount
    return out


def _join(prefix: str, key: str) -> str:
    """The JSON path of ``key`` under ``prefix``; keys with dots or slashes are bracketed."""
    if _IDENTIFIER_RE.fullmatch(key) is None:
        return f"{prefix}[{key!r}]"
    return f"{prefix}.{key}" if prefix else key


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _describe(value: object) -> str:
    """Type and, for scalars, the value: ``an integer (5)``."""
    name = _type_name(value)
    if isinstance(value, bool | int | float | str):
        return f"{name} ({value!r})"
    return name


def _one_of(values: Iterable[str]) -> str:
    return ", ".join(sorted(values))
