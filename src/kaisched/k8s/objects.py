"""Typed, validated Kubernetes and KAI objects.

Everything here is produced by :mod:`kaisched.k8s.parse` from plain dicts. Quantities are already
converted to canonical units: CPU in millicores, memory and storage in bytes, everything else (GPUs,
pods, extended resources) in plain counts. Queue resources keep the CRD units (CPU millicores, memory
in megabytes = 10**6 bytes, GPU devices), exactly as the user wrote them; the model converts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# resource name -> amount in canonical units (cpu: millicores, memory: bytes, others: counts)
ResourceList = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = ""  # "" for cluster-scoped objects
    uid: str = ""  # defaulted by the parser to "<namespace>/<name>" when missing
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    owner_references: tuple[OwnerReference, ...] = ()


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches all effects
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()  # only metadata.name is meaningful


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    # None: no required terms; otherwise the node must match at least one term (ORed)
    required: tuple[NodeSelectorTerm, ...] | None = None
    preferred: tuple[PreferredSchedulingTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    topology_key: str
    label_selector: LabelSelector | None = None  # None selects nothing
    namespaces: tuple[str, ...] = ()  # empty + no namespace_selector: the pod's own namespace
    namespace_selector: LabelSelector | None = None  # {} (empty selector) = all namespaces


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Used for both podAffinity and podAntiAffinity."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class Affinity:
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


@dataclass(frozen=True, slots=True)
class ContainerPort:
    container_port: int
    host_port: int = 0  # 0: no host port
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    requests: ResourceList = field(default_factory=dict)
    limits: ResourceList = field(default_factory=dict)
    ports: tuple[ContainerPort, ...] = ()


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    status: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name, or a template to make one from."""

    name: str
    resource_claim_name: str = ""
    resource_claim_template_name: str = ""


@dataclass(frozen=True, slots=True)
class Pod:
    meta: ObjectMeta
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: ResourceList = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    priority_class_name: str = ""
    priority: int | None = None  # spec.priority
    scheduling_gates: tuple[str, ...] = ()
    nominated_node_name: str = ""
    conditions: tuple[PodCondition, ...] = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()
    # status.resourceClaimStatuses: pod claim name -> the ResourceClaim made for it ("": none is needed)
    resource_claim_statuses: Mapping[str, str] = field(default_factory=dict)

    @property
    def requests(self) -> dict[str, float]:
        """Effective request: max(sum of containers, each init container) + overhead.

        For every resource, a container without a request but with a limit requests its limit
        (Kubernetes defaulting).
        """
        if len(self.containers) == 1 and not self.init_containers and not self.overhead:
            return _effective(self.containers[0])  # (the common pod: its one container's requests)
        total: dict[str, float] = {}
        for c in self.containers:
            for name, value in _effective(c).items():
                total[name] = total.get(name, 0.0) + value
        for c in self.init_containers:
            for name, value in _effective(c).items():
                if value > total.get(name, 0.0):
                    total[name] = value
        for name, value in self.overhead.items():
            total[name] = total.get(name, 0.0) + value
        return total

    @property
    def host_ports(self) -> tuple[ContainerPort, ...]:
        if len(self.containers) == 1 and not self.containers[0].ports:  # (the common pod: one container, no ports)
            return ()
        return tuple(p for c in self.containers for p in c.ports if p.host_port)


def _effective(c: Container) -> dict[str, float]:
    out = dict(c.limits)
    out.update(c.requests)
    return out


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str  # Ready | MemoryPressure | DiskPressure | PIDPressure | NetworkUnavailable | ...
    status: str  # True | False | Unknown


@dataclass(frozen=True, slots=True)
class Node:
    meta: ObjectMeta
    allocatable: ResourceList = field(default_factory=dict)
    capacity: ResourceList = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    conditions: tuple[NodeCondition, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueResource:
    """One resource of a Queue in CRD units (GPU devices, CPU millicores, memory MB = 10**6 bytes).

    Omitted fields are 0, as in KAI (the CRD serializes them without omitempty); -1 = unlimited.
    """

    quota: float = 0.0
    over_quota_weight: float = 0.0
    limit: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueResources:
    gpu: QueueResource = field(default_factory=QueueResource)
    cpu: QueueResource = field(default_factory=QueueResource)
    memory: QueueResource = field(default_factory=QueueResource)


@dataclass(frozen=True, slots=True)
class Queue:
    meta: ObjectMeta
    resources: QueueResources = field(default_factory=QueueResources)
    parent_queue: str = ""
    priority: int = 100
    display_name: str = ""
    preempt_min_runtime: timedelta | None = None
    reclaim_min_runtime: timedelta | None = None


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    topology: str = ""
    required_level: str = ""
    preferred_level: str = ""


@dataclass(frozen=True, slots=True)
class SubGroup:
    name: str
    min_member: int = 1
    parent: str | None = None
    topology_constraint: TopologyConstraint | None = None


@dataclass(frozen=True, slots=True)
class PodGroup:
    meta: ObjectMeta
    queue: str = ""
    min_member: int = 1
    priority_class_name: str = ""
    preemptibility: str = ""  # "" | preemptible | non-preemptible
    sub_groups: tuple[SubGroup, ...] = ()
    topology_constraint: TopologyConstraint | None = None
    mark_unschedulable: bool = True
    scheduling_backoff: int = -1


@dataclass(frozen=True, slots=True)
class PriorityClass:
    meta: ObjectMeta
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class Topology:
    """``kai.scheduler/v1alpha1`` Topology: node labels from the widest level (zone) to the narrowest."""

    meta: ObjectMeta
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    """An object users submit instead of pods (Job, PyTorchJob, RayCluster, ...; spec 10.3), kept with its
    ``spec`` and ``status`` as plain data: the pod-grouper and the embedded controllers read the fields
    their kind has."""

    meta: ObjectMeta
    api_version: str
    kind: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    status: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)  # ConfigMap data

    @property
    def group(self) -> str:
        """The API group (``kubeflow.org``; "" for the core group)."""
        return self.api_version.rpartition("/")[0]


# ---- Dynamic Resource Allocation (resource.k8s.io v1; v1beta1 and v1beta2 read into the same shapes) ----


@dataclass(frozen=True, slots=True)
class DeviceAttribute:
    """A typed device attribute: ``kind`` is ``int``, ``bool``, ``string`` or ``version`` (semver text)."""

    kind: str
    value: bool | int | str


@dataclass(frozen=True, slots=True)
class Device:
    """A device a ResourceSlice publishes. Attribute and capacity names are fully qualified
    (``gpu.nvidia.com/productName``: a name written without a domain gets the slice's driver as its domain);
    capacities are in base units (bytes for memory, counts otherwise)."""

    name: str
    attributes: Mapping[str, DeviceAttribute] = field(default_factory=dict)
    capacity: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    meta: ObjectMeta
    selectors: tuple[str, ...] = ()  # CEL expressions, all must be true


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """``spec.nodeName`` (node-local), ``spec.nodeSelector`` or ``spec.allNodes``: exactly one is set."""

    meta: ObjectMeta
    driver: str
    pool: str
    pool_generation: int = 0
    pool_slice_count: int = 1
    node_name: str = ""
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    """What a claim asks for one request (``exactly``) or one alternative of ``firstAvailable``."""

    name: str
    device_class_name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    allocation_mode: str = "ExactCount"  # ExactCount | All
    count: int = 1
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: DeviceSubRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()  # empty: every request of the claim
    match_attribute: str = ""  # fully qualified attribute name


@dataclass(frozen=True, slots=True)
class ResourceClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequestResult:
    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ClaimConsumer:
    """An entry of ``status.reservedFor``."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    meta: ObjectMeta
    spec: ResourceClaimSpec
    api_version: str = "resource.k8s.io/v1"
    allocation: tuple[DeviceRequestResult, ...] | None = None  # None: not allocated
    allocation_node_selector: tuple[NodeSelectorTerm, ...] | None = None
    reserved_for: tuple[ClaimConsumer, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    meta: ObjectMeta
    spec: ResourceClaimSpec
    claim_labels: Mapping[str, str] = field(default_factory=dict)  # spec.metadata.labels of the claims made
    claim_annotations: Mapping[str, str] = field(default_factory=dict)


DraObject = DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate
KubeObject = Node | Pod | Queue | PodGroup | PriorityClass | Topology | Workload | DraObject


@dataclass(frozen=True, slots=True)
class ObjectError:
    """A validation problem in one input object.

    ``object`` is ``"<Kind> <namespace>/<name>"`` (``"<Kind> <name>"`` for cluster-scoped kinds),
    ``field`` the JSON path inside the object (``spec.resources.gpu.quota``).
    """

    object: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.field}: {self.message}" if self.field else f"{self.object}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"object": self.object, "field": self.field, "message": self.message}


@dataclass(slots=True)
class ParsedObjects:
    """The result of parsing: valid objects by kind (input order) plus every error found."""

    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    pod_groups: list[PodGroup] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    device_classes: list[DeviceClass] = field(default_factory=list)
    resource_slices: list[ResourceSlice] = field(default_factory=list)
    resource_claims: list[ResourceClaim] = field(default_factory=list)
    resource_claim_templates: list[ResourceClaimTemplate] = field(default_factory=list)
    errors: list[ObjectError] = field(default_factory=list)

    def add(self, obj: KubeObject) -> None:
        """Append a parsed object to the list of its kind."""
        if isinstance(obj, Pod):
            self.pods.append(obj)
        elif isinstance(obj, Node):
            self.nodes.append(obj)
        elif isinstance(obj, PodGroup):
            self.pod_groups.append(obj)
        elif isinstance(obj, Queue):
            self.queues.append(obj)
        elif isinstance(obj, Topology):
            self.topologies.append(obj)
        elif isinstance(obj, Workload):
            self.workloads.append(obj)
        elif isinstance(obj, ResourceClaim):
            self.resource_claims.append(obj)
        elif isinstance(obj, ResourceSlice):
            self.resource_slices.append(obj)
        elif isinstance(obj, DeviceClass):
            self.device_classes.append(obj)
        elif isinstance(obj, ResourceClaimTemplate):
            self.resource_claim_templates.append(obj)
        else:
            self.priority_classes.append(obj)

    def relisted(self) -> ParsedObjects:
        """New lists of the same objects (what a caller builds for its next cycle when nothing changed)."""
        return ParsedObjects(nodes=list(self.nodes), pods=list(self.pods), queues=list(self.queues),
                             pod_groups=list(self.pod_groups), priority_classes=list(self.priority_classes),
                             topologies=list(self.topologies), workloads=list(self.workloads),
                             device_classes=list(self.device_classes), resource_slices=list(self.resource_slices),
                             resource_claims=list(self.resource_claims),
                             resource_claim_templates=list(self.resource_claim_templates), errors=list(self.errors))
