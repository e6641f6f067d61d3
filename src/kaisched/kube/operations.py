"""What one scheduling cycle does to the cluster, as data: typed operations and the HTTP requests behind them.

Pure: nothing here does I/O. :class:`OperationPlanner` turns a :class:`~kaisched.framework.result.CycleResult`
and the cached API objects into an ordered list of :class:`Operation`; :class:`kaisched.kube.writer.ClusterWriter`
sends them. Each operation says which object it writes (its *lane*: writes to one object are applied in
order), which *slot* of that object it owns (a later operation on the same slot supersedes a queued earlier
one) and the requests that carry it out.

KAI's behaviour (spec 1.1, 1.2, 2.2, 3.3, 7.4, 11.2), with the project's decisions (binding through
``pods/binding``, evictions through the Eviction API):

* **Bind**: for a fractional pod the pod is first merge-patched with its GPU-group label(s)
  (``runai-gpu-group=<g>``, or ``runai-gpu-group/<g>=<g>`` per device for a multi-device fraction) and the
  annotation ``received-resource-type: Fraction`` (``MigInstance`` for MIG requests), then
  ``POST pods/{name}/binding`` (the answer is a ``Status``; it is never decoded as a Binding). A 409 saying the
  pod is already on the chosen node is success (a retried bind whose first answer was lost). Once bound, a
  Normal ``Scheduled`` event is recorded (``Bind.then``).
* **DRA claims** (kube-scheduler's DRA plugin at PreBind): before a pod's binding, each ResourceClaim of the cycle
  that lists the pod (:attr:`CycleResult.claims`) gets, in one merge patch of ``resourceclaims/{name}/status``
  guarded by the cached ``resourceVersion``, ``status.allocation`` (``devices.results``, ``devices.config`` from
  the DeviceClasses and the claim, and a ``nodeSelector`` on ``metadata.name`` for a node-local allocation) when
  the cycle allocated it, and the pod in ``status.reservedFor`` (existing entries kept). A claim being allocated
  first gets the finalizer ``resource.kubernetes.io/delete-protection``, as kube-scheduler does, so that the
  resourceclaim controller may deallocate it. The claim steps are the first steps of the pod's :class:`Bind`: a
  claim that cannot be written (gone, replaced, allocated elsewhere meanwhile, a 409 twice) fails the bind, which
  is reported like any failed bind (``FailedBinding``) and leaves the pod pending; a bind refused after its
  claims were written rolls the reservations back (:class:`ReleaseClaim`). A pod the cycle binds whose claims
  the cycle did not allocate is not bound. The requests themselves are sent by
  :class:`kaisched.kube.claims.ClaimStatusWriter`.
* **Evict**: ``POST pods/{name}/eviction`` with a ``policy/v1`` Eviction; a server without ``policy/v1``
  (1.20 answers 400 ``no kind "Eviction" is registered for version "policy/v1"``; others a bare 404) gets the
  same request with ``policy/v1beta1``. A 404 naming the pod means it is gone: done. Once evicted, the pod's
  PodGroup gets a Normal ``Evict`` event (``Evict.then``) with KAI's annotations (``num-evicted-pods``,
  ``evictor-action-type``, ``evictor-pod-group-name``, ``evictor-pod-group-namespace``).
* **Nominations** (kaisched; kube-scheduler's ``status.nominatedNodeName``): a pod the cycle pipelines is nominated
  to its node, and a pod of this scheduler whose nomination the cycle does not renew has it cleared
  (:attr:`CycleResult.nominations`): a merge patch of ``pods/{name}/status`` setting (or nulling)
  ``nominatedNodeName``, only when the cached value differs, and never on a pod going away (terminating, or evicted
  by the cycle: a moved victim). The next cycle reads it back from the pod: the pod
  keeps a claim on the node (:mod:`kaisched.plugins.nominated_pods`).
* **Pending jobs** (spec 11.2): a PodGroup not ready for scheduling gets a Normal ``NotReady`` event; otherwise
  every pending pod gets a Warning ``Unschedulable`` event and, unless ``spec.markUnschedulable`` is false,
  the condition ``PodScheduled=False/Unschedulable`` (strategic-merge patch of ``pods/{name}/status``, only when
  it differs); the PodGroup gets a Normal ``Unschedulable`` event and, while none of its pods is allocated, a
  ``status.schedulingConditions`` entry for its node pool (merge patch of ``podgroups/{name}/status``, only when
  type, node pool, reason, message or status of the newest condition differ). A PodGroup with neither pending
  nor gated pods, and no pod awaiting its bind, has its scheduling conditions cleared.
* **PodGroup annotations** ``kai.scheduler/last-start-timestamp`` and ``kai.scheduler/stale-podgroup-timestamp``
  (RFC 3339, seconds) are merge-patched on the PodGroup when they differ (removed when unset); a stale PodGroup
  gets a Normal ``StaleJob`` event.
* **Queue status** ``allocated``, ``requested``, ``allocatedNonPreemptible`` (when the cycle reports it) and
  ``childQueues``, as ResourceLists with the keys ``cpu`` (cores), ``memory`` (bytes) and ``nvidia.com/gpu``
  (devices, fractional allowed): merge patch of ``queues/{name}/status`` when a value differs numerically.
* **Events** are core/v1 Events with ``involvedObject``, ``count``, ``firstTimestamp``/``lastTimestamp`` and
  ``source.component: kai-scheduler``. An event whose (object uid, reason, message) was already planned in the
  previous cycle is not planned again; when it comes back after a gap the existing Event object's ``count``
  and ``lastTimestamp`` are patched (a new Event is created if the server has expired it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from kaisched.framework.result import (
    FAIR_SHARE,
    NON_PREEMPTIBLE_OVER_QUOTA,
    OVER_LIMIT,
    ClaimAllocation,
    CycleResult,
    Eviction,
    Placement,
    PodGroupStatus,
    QueueStatus,
)
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.quantity import QuantityError, parse_quantity
from kaisched.kube.api import JSON, ApiError
from kaisched.model.gpu import gpu_group_labels, is_gpu_group_label
from kaisched.model.victim_memory import VICTIMS_ANNOTATION

JSON_CONTENT = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

COMPONENT = "kai-scheduler"
#: client-go's prefix of an event that stands for several similar ones (same object, type and reason)
AGGREGATED_PREFIX = "(combined from similar events): "
DEFAULT_NODE_POOL = "default"  # KAI's node-pool name of objects without the node-pool label
EVENT_MESSAGE_LIMIT = 1024
GPU_RESOURCE_KEY = C.GPU_RESOURCE

# KAI's annotations on an Evict event (pkg/scheduler/cache/status_updater)
EVICTION_GANG_SIZE_ANNOTATION = "num-evicted-pods"
EVICTOR_ACTION_ANNOTATION = "evictor-action-type"
EVICTOR_POD_GROUP_NAME_ANNOTATION = "evictor-pod-group-name"
EVICTOR_POD_GROUP_NAMESPACE_ANNOTATION = "evictor-pod-group-namespace"

UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
#: the reason codes whose scheduling condition carries KAI's queueDetails
QUEUE_CODES = frozenset({OVER_LIMIT, NON_PREEMPTIBLE_OVER_QUOTA, FAIR_SHARE})
DEFAULT_POD_ERROR = "Unable to schedule pod"
DEFAULT_POD_GROUP_ERROR = "Unable to schedule podgroup"
POD_SCHEDULED = "PodScheduled"
POD_SCHEDULED_SLOT = f"condition:{POD_SCHEDULED}"
NOMINATION_SLOT = "status:nominatedNodeName"
RESOURCE_CLAIM_KIND = C.RESOURCE_CLAIM_KIND
#: set on a claim by the scheduler that allocates it; the resourceclaim controller removes it on deallocation
DRA_FINALIZER = "resource.kubernetes.io/delete-protection"

Lookup = Callable[[str, str], "Mapping[str, Any] | None"]
"""``lookup(kind, key)``: the cached object (decoded JSON as the API server returned it) or None. Kinds
``"Pod"``, ``"PodGroup"``, ``"Queue"``, ``"ResourceClaim"``, ``"DeviceClass"``; keys ``"<namespace>/<name>"`` or
``"<name>"`` for cluster-scoped kinds."""

DeviceSlice = Callable[[str, str, str], "Mapping[str, Any] | None"]
"""``device_slice(driver, pool, device)``: the cached ResourceSlice that publishes the device, or None."""


# ----------------------------------------------------------------------------------------- references
@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an operation writes or an Event is about."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def lane(self) -> str:
        return f"{self.kind}:{self.key}"

    def to_json(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out

    @staticmethod
    def pod(key: str, uid: str = "") -> ObjectRef:
        namespace, name = split_key(key)
        return ObjectRef(C.CORE_API_VERSION, C.POD_KIND, name, namespace, uid)

    @staticmethod
    def pod_group(key: str, uid: str = "") -> ObjectRef:
        namespace, name = split_key(key)
        return ObjectRef(C.POD_GROUP_API_VERSION, C.POD_GROUP_KIND, name, namespace, uid)

    @staticmethod
    def queue(name: str, uid: str = "") -> ObjectRef:
        return ObjectRef(C.QUEUE_API_VERSION, C.QUEUE_KIND, name, "", uid)

    @staticmethod
    def of(obj: Mapping[str, Any], api_version: str, kind: str) -> ObjectRef:
        meta = _mapping(obj.get("metadata"))
        return ObjectRef(str(obj.get("apiVersion") or api_version), str(obj.get("kind") or kind),
                         str(meta.get("name", "")), str(meta.get("namespace", "") or ""),
                         str(meta.get("uid", "") or ""))


def split_key(key: str) -> tuple[str, str]:
    """``"ns/name"`` -> ``("ns", "name")``; ``"name"`` -> ``("", "name")``."""
    namespace, _, name = key.rpartition("/")
    return namespace, name


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")


def pod_group_path(namespace: str, name: str = "", sub: str = "") -> str:
    base = f"/apis/{C.POD_GROUP_API_VERSION}/namespaces/{namespace}/podgroups"
    return base + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def queue_path(name: str, sub: str = "") -> str:
    return f"/apis/{C.QUEUE_API_VERSION}/queues/{name}" + (f"/{sub}" if sub else "")


def claim_path(api_version: str, namespace: str, name: str, sub: str = "") -> str:
    """A ResourceClaim (``api_version``: ``resource.k8s.io/<version>``, the version the server serves)."""
    return f"/apis/{api_version}/namespaces/{namespace}/resourceclaims/{name}" + (f"/{sub}" if sub else "")


def event_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/events" + (f"/{name}" if name else "")


def rfc3339(ts: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes serialises ``metav1.Time``."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------- requests
ErrorTest = Callable[[ApiError], bool]


def _never(_: ApiError) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class ClaimReservation:
    """Reserve a ResourceClaim for a pod before its binding, writing the allocation the cycle made.

    ``allocation``: the ``status.allocation`` to write when the claim has none (None: the cycle found the claim
    allocated, and it must still be, on ``devices``); ``devices``: (driver, pool, device) of the allocation the
    cycle counted the claim on."""

    claim: ObjectRef  # apiVersion resource.k8s.io/<served version>, kind ResourceClaim, uid as cached
    pod: ObjectRef  # with its uid (the reservedFor entry)
    allocation: Mapping[str, Any] | None
    devices: tuple[tuple[str, str, str], ...]

    def describe(self) -> str:
        return f"reserve ResourceClaim {self.claim.key} for pod {self.pod.key}"


@dataclass(frozen=True, slots=True)
class ClaimRelease:
    """Remove pods' entries from a ResourceClaim's ``status.reservedFor``; when none is left and the claim carries
    :data:`DRA_FINALIZER`, deallocate it too (clear ``status.allocation``, then the finalizer), as the
    resourceclaim controller does when it removes the last reservation.

    ``pods``: the entries to remove; those in ``unconfirmed`` (pods the cache does not hold) only after a GET
    says the pod is gone (404, another uid, or done)."""

    claim: ObjectRef
    pods: tuple[ObjectRef, ...]
    unconfirmed: frozenset[str] = frozenset()  # uids
    reason: str = "gone"  # gone | rollback

    def describe(self) -> str:
        return f"release ResourceClaim {self.claim.key} from pods {', '.join(p.key for p in self.pods)}"


ClaimStep = ClaimReservation | ClaimRelease


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request. ``fallback`` is sent instead when ``fallback_when`` says the server refused this one
    for a reason the fallback avoids; ``done_when`` says which refusals mean the goal is already reached.
    A request with a ``claim_step`` is carried out by the writer's
    :class:`~kaisched.kube.claims.ClaimStatusWriter` (read, compute, patch with optimistic concurrency)."""

    method: str
    path: str
    body: JSON = None
    content_type: str = JSON_CONTENT
    fallback: Request | None = None
    fallback_when: ErrorTest = field(default=_never, compare=False, repr=False)
    done_when: ErrorTest = field(default=_never, compare=False, repr=False)
    claim_step: ClaimStep | None = None


def claim_request(step: ClaimStep) -> Request:
    """The request of a claim step (its path and body identify it; the claim writer sends the real ones)."""
    ref = step.claim
    if isinstance(step, ClaimReservation):
        body: JSON = {"reserve": step.pod.uid, "allocate": step.allocation is not None}
    else:
        body = {"release": sorted(p.uid for p in step.pods), "unconfirmed": sorted(step.unconfirmed)}
    return Request("PATCH", claim_path(ref.api_version, ref.namespace, ref.name, "status"), body, MERGE_PATCH,
                   claim_step=step)


def is_not_found(err: ApiError) -> bool:
    return err.status == 404


def is_conflict(err: ApiError) -> bool:
    return err.status == 409


def _status_details_kind(err: ApiError) -> str:
    body = err.body if isinstance(err.body, Mapping) else {}
    details = _mapping(body.get("details"))
    return str(details.get("kind", ""))


def policy_v1_missing(err: ApiError) -> bool:
    """The server does not serve ``policy/v1`` Evictions: a 1.20 server decodes the body with a scheme that
    lacks the version (400 ``no kind "Eviction" is registered for version "policy/v1"``); a server without the
    subresource answers 404 without naming the pod."""
    if err.status == 400:
        return "policy/v1" in err.message and "registered" in err.message
    return err.status == 404 and _status_details_kind(err) != "pods"


def pod_gone(err: ApiError) -> bool:
    return err.status == 404


# ----------------------------------------------------------------------------------------- operations
#: the writer sends urgent operations (what a pod waits for: its PodGroup, its bind, an eviction) before
#: background ones (status, conditions), which get a share of its concurrency while urgent ones wait, and events
#: last, a few at a time from a bounded queue (client-go's recorder: one writer per sink, 1,000 queued at most)
URGENT = 0
BACKGROUND = 1
EVENTS = 2


class Operation:
    """One write of a cycle. Subclasses are frozen dataclasses."""

    __slots__ = ()
    name: ClassVar[str] = "operation"
    failure_reason: ClassVar[str | None] = None  # reason of the Warning event when the operation fails
    priority: ClassVar[int] = BACKGROUND
    #: the operation creates its object: operations naming its lane in ``after`` wait until it is done
    creates: ClassVar[bool] = False

    @property
    def target(self) -> ObjectRef:
        raise NotImplementedError

    @property
    def lane(self) -> str:
        """Writes to one object are applied in submission order."""
        return self.target.lane

    @property
    def slot(self) -> str | None:
        """A queued operation on the same lane and slot is replaced by a later one; None: never coalesced."""
        return None

    @property
    def supersedes(self) -> frozenset[str]:
        """Slots of queued operations on the same lane that this one makes pointless."""
        return frozenset()

    @property
    def after(self) -> tuple[str, ...]:
        """Lanes of objects being created (an operation with ``creates``) that must exist before this one is sent;
        when such a creation failed for good, this operation fails too."""
        return ()

    def requests(self) -> tuple[Request, ...]:
        raise NotImplementedError

    def success_ops(self) -> tuple[Operation, ...]:
        """What to write once this operation succeeded (the events KAI records after a bind or eviction)."""
        return ()

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        """What to write when this operation finally failed at ``requests()[step]`` (KAI's reporting)."""
        if self.failure_reason is None or error.status == 404:
            return []  # the object is gone: an Event about it would be orphaned
        message = f"Failed to {self.describe()}: {_error_text(error)}"
        return [new_event(self.target, "Warning", self.failure_reason, message, now, seq)]

    def describe(self) -> str:
        return f"{self.name} {self.target.kind} {self.target.key}"


def pod_replaced(error: ApiError) -> bool:
    """The API server refused a write because the object under that name has another uid than the one the
    write named (a Binding: 409 ``Precondition failed: UID in precondition``; a patch: 422 ``metadata.uid ...
    field is immutable``): the object written for was deleted, another made under its name."""
    message = error.message
    return (error.status == 409 and "Precondition failed: UID in precondition" in message) or \
        (error.status == 422 and "metadata.uid" in message and "field is immutable" in message)


def _error_text(error: ApiError) -> str:
    return f"{error.status} {error.reason}: {error.message}" if error.status else f"no connection: {error.message}"


@dataclass(frozen=True, slots=True)
class Bind(Operation):
    """Bind a pod to a node (spec 1.2 steps 3, 5, 6 without a BindRequest; spec 7.4 labels)."""

    name: ClassVar[str] = "bind"
    failure_reason: ClassVar[str | None] = "FailedBinding"
    priority: ClassVar[int] = URGENT
    pod: ObjectRef
    node: str
    gpu_groups: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # merge-patched before the binding
    annotations: Mapping[str, str] = field(default_factory=dict)  # on the Binding (with the labels when patched)
    then: tuple[Operation, ...] = ()  # written once bound (the Scheduled event)
    claims: tuple[ClaimReservation, ...] = ()  # written first, in order (DRA PreBind)
    pod_group: str = ""  # lane of the pod's PodGroup: a creation of it in flight is waited for

    @property
    def target(self) -> ObjectRef:
        return self.pod

    @property
    def after(self) -> tuple[str, ...]:
        return (self.pod_group,) if self.pod_group else ()

    def success_ops(self) -> tuple[Operation, ...]:
        return self.then

    @property
    def supersedes(self) -> frozenset[str]:
        return frozenset({POD_SCHEDULED_SLOT})  # KAI drops pending pod status updates at PreBind

    @property
    def patch_body(self) -> dict[str, Any] | None:
        """The labels (and then the annotations too) to merge-patch first; with the pod's uid, which the API server
        checks (a pod recreated under the same name is refused with 422, never patched). None when there are no
        labels: the annotations ride on the Binding, which the API server copies onto the pod as it binds it."""
        if not self.labels:
            return None
        meta: dict[str, Any] = {"labels": dict(self.labels)}
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        if self.pod.uid:
            meta["uid"] = self.pod.uid
        return {"metadata": meta}

    @property
    def binding_body(self) -> dict[str, Any]:
        """The Binding, with the pod's uid as kube-scheduler's binder sends it: the API server binds only that
        pod (another of the same name, made by a controller since the snapshot, is refused with 409). Without
        labels to patch, it carries the annotations (one request instead of a patch and a binding)."""
        meta: dict[str, Any] = {"name": self.pod.name, "namespace": self.pod.namespace}
        if self.pod.uid:
            meta["uid"] = self.pod.uid
        if self.annotations and not self.labels:
            meta["annotations"] = dict(self.annotations)
        return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}

    def requests(self) -> tuple[Request, ...]:
        node = self.node

        def already_here(err: ApiError) -> bool:  # "pod x is already assigned to node \"<node>\""
            return err.status == 409 and f'"{node}"' in err.message

        binding = Request("POST", pod_path(self.pod.namespace, self.pod.name, "binding"), self.binding_body,
                          done_when=already_here)
        claims = tuple(claim_request(c) for c in self.claims)
        patch = self.patch_body
        if patch is None:
            return (*claims, binding)
        return (*claims, Request("PATCH", pod_path(self.pod.namespace, self.pod.name), patch, MERGE_PATCH), binding)

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        n_claims = len(self.claims)
        if step < n_claims:  # a claim could not be written: the pod stays pending, nothing of it was written
            claim = self.claims[step].claim
            message = (f"Failed to bind pod {self.pod.namespace}/{self.pod.name} to node {self.node}: "
                       f"ResourceClaim {claim.key} could not be reserved for it. {_error_text(error)}")
            return [*release_claims(self.pod, self.claims[:step]),
                    new_event(self.pod, "Warning", "FailedBinding", message, now, seq),
                    PodCondition(self.pod, pod_scheduled_condition("BindingError", message, now))]
        # the claims are reserved: roll them back unless the outcome is unknown (the pod may be bound after all)
        out: list[Operation] = []
        if 400 <= error.status < 500:
            out.extend(release_claims(self.pod, self.claims))
        if error.status == 404 or pod_replaced(error):
            return out  # the pod was deleted meanwhile (and maybe made anew: not the pod this bind was for)
        message = (f"Failed to bind pod {self.pod.namespace}/{self.pod.name} to node {self.node}. "
                   f"{_error_text(error)}")
        out.append(new_event(self.pod, "Warning", "FailedBinding", message, now, seq))
        if error.status != 409:  # 409: the pod is bound elsewhere; its scheduling condition is not ours
            out.append(PodCondition(self.pod, pod_scheduled_condition("BindingError", message, now)))
            gpu_labels = {k: None for k in self.labels if is_gpu_group_label(k)}
            if gpu_labels and step > n_claims:  # the labels were written: roll them back, as KAI's binder does
                out.append(PodMetadataPatch(self.pod, labels=gpu_labels, purpose="rollback"))
        return out


def release_claims(pod: ObjectRef, reservations: Iterable[ClaimReservation]) -> list[Operation]:
    """Roll back the reservations of ``pod`` (a bind that failed after its claims were written)."""
    return [ReleaseClaim(ClaimRelease(r.claim, (pod,), reason="rollback")) for r in reservations]


@dataclass(frozen=True, slots=True)
class ReleaseClaim(Operation):
    """Remove reservations from a ResourceClaim (pods gone, or a bind rolled back): see :class:`ClaimRelease`."""

    name: ClassVar[str] = "release"
    priority: ClassVar[int] = URGENT
    release: ClaimRelease

    @property
    def target(self) -> ObjectRef:
        return self.release.claim

    @property
    def slot(self) -> str | None:
        return "release:" + ",".join(sorted(p.uid for p in self.release.pods))

    def requests(self) -> tuple[Request, ...]:
        return (claim_request(self.release),)

    def describe(self) -> str:
        return self.release.describe()


@dataclass(frozen=True, slots=True)
class Evict(Operation):
    """Evict a pod through the Eviction API (``policy/v1``, falling back to ``policy/v1beta1``)."""

    name: ClassVar[str] = "evict"
    failure_reason: ClassVar[str | None] = "EvictionFailed"
    priority: ClassVar[int] = URGENT
    pod: ObjectRef
    action: str
    preemptor: str  # "<ns>/<podgroup>" or ""
    message: str
    then: tuple[Operation, ...] = ()  # written once evicted (the PodGroup's Evict event)

    @property
    def target(self) -> ObjectRef:
        return self.pod

    def success_ops(self) -> tuple[Operation, ...]:
        return self.then

    def eviction_body(self, api_version: str) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": "Eviction",
                "metadata": {"name": self.pod.name, "namespace": self.pod.namespace}}

    def requests(self) -> tuple[Request, ...]:
        path = pod_path(self.pod.namespace, self.pod.name, "eviction")
        v1beta1 = Request("POST", path, self.eviction_body("policy/v1beta1"), done_when=pod_gone)
        return (Request("POST", path, self.eviction_body("policy/v1"), fallback=v1beta1,
                        fallback_when=policy_v1_missing, done_when=pod_gone),)


def pod_scheduled_condition(reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {"type": POD_SCHEDULED, "status": "False", "reason": reason, "message": message,
            "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}


@dataclass(frozen=True, slots=True)
class PodCondition(Operation):
    """Set one pod condition (strategic merge patch of the status subresource: merged by ``type``)."""

    name: ClassVar[str] = "update condition of"
    failure_reason: ClassVar[str | None] = "StatusUpdateFailed"
    pod: ObjectRef
    condition: Mapping[str, Any]

    @property
    def target(self) -> ObjectRef:
        return self.pod

    @property
    def slot(self) -> str | None:
        return f"condition:{self.condition.get('type')}"

    def requests(self) -> tuple[Request, ...]:
        body = {"status": {"conditions": [dict(self.condition)]}}
        return (Request("PATCH", pod_path(self.pod.namespace, self.pod.name, "status"), body, STRATEGIC_MERGE_PATCH,
                        done_when=is_not_found),)


@dataclass(frozen=True, slots=True)
class PodNomination(Operation):
    """Set or clear a pod's ``status.nominatedNodeName`` (merge patch of the status subresource; ``node`` "" clears
    it): the node a cycle pipelined the pod onto, where it keeps a claim in the next cycle
    (:mod:`kaisched.plugins.nominated_pods`)."""

    name: ClassVar[str] = "update nominated node of"
    failure_reason: ClassVar[str | None] = "StatusUpdateFailed"
    pod: ObjectRef
    node: str

    @property
    def target(self) -> ObjectRef:
        return self.pod

    @property
    def slot(self) -> str | None:
        return NOMINATION_SLOT

    def requests(self) -> tuple[Request, ...]:
        body = {"status": {"nominatedNodeName": self.node or None}}
        return (Request("PATCH", pod_path(self.pod.namespace, self.pod.name, "status"), body, MERGE_PATCH,
                        done_when=is_not_found),)


@dataclass(frozen=True, slots=True)
class PodMetadataPatch(Operation):
    """Merge-patch a pod's labels/annotations (None values remove a key): the pod-grouper's
    ``pod-group-name`` annotation and subgroup label, or the rollback of GPU-group labels."""

    name: ClassVar[str] = "patch"
    failure_reason: ClassVar[str | None] = "PodGrouperWarning"
    priority: ClassVar[int] = URGENT
    pod: ObjectRef
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    purpose: str = "grouping"

    @property
    def target(self) -> ObjectRef:
        return self.pod

    @property
    def slot(self) -> str | None:
        return f"metadata:{self.purpose}"

    def requests(self) -> tuple[Request, ...]:
        meta: dict[str, Any] = {}
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return (Request("PATCH", pod_path(self.pod.namespace, self.pod.name), {"metadata": meta}, MERGE_PATCH,
                        done_when=is_not_found),)

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        if self.purpose != "grouping":
            return []
        return Operation.failure_ops(self, error, step, now, seq)


@dataclass(frozen=True, slots=True)
class CreatePodGroup(Operation):
    """Create a PodGroup the pod-grouper planned (409 AlreadyExists: someone created it: done)."""

    name: ClassVar[str] = "create"
    failure_reason: ClassVar[str | None] = "PodGrouperWarning"
    priority: ClassVar[int] = URGENT
    creates: ClassVar[bool] = True
    body: Mapping[str, Any]
    for_pod: ObjectRef | None = None  # where a failure is reported

    @property
    def target(self) -> ObjectRef:
        meta = _mapping(self.body.get("metadata"))
        return ObjectRef(C.POD_GROUP_API_VERSION, C.POD_GROUP_KIND, str(meta.get("name", "")),
                         str(meta.get("namespace", "")))

    @property
    def slot(self) -> str | None:
        return "create"

    def requests(self) -> tuple[Request, ...]:
        return (Request("POST", pod_group_path(self.target.namespace), dict(self.body), done_when=is_conflict),)

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        if self.for_pod is None:
            return []
        message = f"Failed to create PodGroup {self.target.key}: {_error_text(error)}"
        return [new_event(self.for_pod, "Warning", "PodGrouperWarning", message, now, seq)]


@dataclass(frozen=True, slots=True)
class PodGroupSpecPatch(Operation):
    """Merge-patch the fields of a PodGroup's spec that the pod-grouper computes (minMember, subGroups,
    priorityClassName, preemptibility, topologyConstraint; None removes one), as KAI's pod-grouper updates
    the PodGroup of a workload that changed. Never the queue."""

    name: ClassVar[str] = "update"
    failure_reason: ClassVar[str | None] = "PodGrouperWarning"
    priority: ClassVar[int] = URGENT
    pod_group: ObjectRef
    spec: Mapping[str, Any]
    for_pod: ObjectRef | None = None  # where a failure is reported

    @property
    def target(self) -> ObjectRef:
        return self.pod_group

    @property
    def slot(self) -> str | None:
        return "spec"

    def requests(self) -> tuple[Request, ...]:
        return (Request("PATCH", pod_group_path(self.pod_group.namespace, self.pod_group.name),
                        {"spec": dict(self.spec)}, MERGE_PATCH, done_when=is_not_found),)

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        if self.for_pod is None:
            return []
        message = f"Failed to update PodGroup {self.pod_group.key}: {_error_text(error)}"
        return [new_event(self.for_pod, "Warning", "PodGrouperWarning", message, now, seq)]


@dataclass(frozen=True, slots=True)
class PodGroupStatusPatch(Operation):
    """Merge-patch ``status`` of a PodGroup (``schedulingConditions``)."""

    name: ClassVar[str] = "update status of"
    failure_reason: ClassVar[str | None] = "StatusUpdateFailed"
    pod_group: ObjectRef
    status: Mapping[str, Any]

    @property
    def target(self) -> ObjectRef:
        return self.pod_group

    @property
    def slot(self) -> str | None:
        return "status"

    def requests(self) -> tuple[Request, ...]:
        return (Request("PATCH", pod_group_path(self.pod_group.namespace, self.pod_group.name, "status"),
                        {"status": dict(self.status)}, MERGE_PATCH, done_when=is_not_found),)


@dataclass(frozen=True, slots=True)
class PodGroupAnnotations(Operation):
    """Merge-patch KAI's timestamp annotations of a PodGroup (None removes one)."""

    name: ClassVar[str] = "update annotations of"
    failure_reason: ClassVar[str | None] = "StatusUpdateFailed"
    pod_group: ObjectRef
    annotations: Mapping[str, str | None]

    @property
    def target(self) -> ObjectRef:
        return self.pod_group

    @property
    def slot(self) -> str | None:
        return "annotations"

    def requests(self) -> tuple[Request, ...]:
        return (Request("PATCH", pod_group_path(self.pod_group.namespace, self.pod_group.name),
                        {"metadata": {"annotations": dict(self.annotations)}}, MERGE_PATCH, done_when=is_not_found),)


@dataclass(frozen=True, slots=True)
class QueueStatusPatch(Operation):
    """Merge-patch ``status`` of a Queue (``allocated``, ``requested``, ``allocatedNonPreemptible``,
    ``childQueues``)."""

    name: ClassVar[str] = "update status of"
    failure_reason: ClassVar[str | None] = "StatusUpdateFailed"
    queue: ObjectRef
    status: Mapping[str, Any]

    @property
    def target(self) -> ObjectRef:
        return self.queue

    @property
    def slot(self) -> str | None:
        return "status"

    def requests(self) -> tuple[Request, ...]:
        return (Request("PATCH", queue_path(self.queue.name, "status"), {"status": dict(self.status)}, MERGE_PATCH,
                        done_when=is_not_found),)


@dataclass(frozen=True, slots=True)
class Event(Operation):
    """A core/v1 Event. ``count == 1``: created; ``count > 1``: the existing Event ``event_name`` gets its
    count and lastTimestamp patched (created again if the server expired it)."""

    name: ClassVar[str] = "record event"
    priority: ClassVar[int] = EVENTS
    involved: ObjectRef
    type: str  # Normal | Warning
    reason: str
    message: str
    event_name: str
    first: datetime
    last: datetime
    count: int = 1
    annotations: Mapping[str, str] = field(default_factory=dict)
    component: str = COMPONENT

    @property
    def namespace(self) -> str:
        return self.involved.namespace or C.DEFAULT_NAMESPACE

    @property
    def target(self) -> ObjectRef:
        return ObjectRef("v1", "Event", self.event_name, self.namespace)

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.event_name, "namespace": self.namespace}
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {
            "apiVersion": "v1", "kind": "Event", "metadata": meta,
            "involvedObject": self.involved.to_json(),
            "reason": self.reason, "message": self.message, "type": self.type,
            "count": self.count, "firstTimestamp": rfc3339(self.first), "lastTimestamp": rfc3339(self.last),
            "source": {"component": self.component}, "reportingComponent": self.component,
        }

    def requests(self) -> tuple[Request, ...]:
        create = Request("POST", event_path(self.namespace), self.body())
        if self.count <= 1:
            return (create,)
        patch: dict[str, Any] = {"count": self.count, "lastTimestamp": rfc3339(self.last)}
        if self.message.startswith(AGGREGATED_PREFIX):  # an aggregate carries the latest of its messages
            patch["message"] = self.message
        return (Request("PATCH", event_path(self.namespace, self.event_name), patch, MERGE_PATCH, fallback=create,
                        fallback_when=is_not_found),)

    def failure_ops(self, error: ApiError, step: int, now: datetime, seq: int) -> list[Operation]:
        return []  # never report a failed Event with another Event

    def describe(self) -> str:
        return f"record event {self.reason} on {self.involved.kind} {self.involved.key}"


def event_name(object_name: str, now: datetime, seq: int) -> str:
    """Like client-go: ``<object>.<hex nanoseconds>`` (plus ``seq`` so names planned at one instant differ)."""
    stamp = int(now.timestamp() * 1_000_000) * 1000 + seq
    return f"{object_name[:200]}.{stamp:x}"


def new_event(involved: ObjectRef, type_: str, reason: str, message: str, now: datetime, seq: int,
              annotations: Mapping[str, str] | None = None, component: str = COMPONENT) -> Event:
    return Event(involved, type_, reason, message[:EVENT_MESSAGE_LIMIT], event_name(involved.name, now, seq), now, now,
                 1, dict(annotations or {}), component)


# --------------------------------------------------------------------------------------------- helpers
def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata")) if obj is not None else {}


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(_meta(obj).get("labels"))


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(_meta(obj).get("annotations"))


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(obj.get("spec")) if obj is not None else {}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(obj.get("status")) if obj is not None else {}


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(_meta(obj).get("uid", "") or "")


def _is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def pod_is_pending(pod: Mapping[str, Any]) -> bool:
    """Pending, unbound, not being deleted and not gated: a pod the scheduler still has to place."""
    phase = _status(pod).get("phase") or "Pending"
    spec = _spec(pod)
    return phase == "Pending" and not spec.get("nodeName") and not _is_deleting(pod) and not spec.get("schedulingGates")


def pod_is_gated(pod: Mapping[str, Any]) -> bool:
    phase = _status(pod).get("phase") or "Pending"
    spec = _spec(pod)
    return phase == "Pending" and not spec.get("nodeName") and bool(spec.get("schedulingGates"))


def pod_is_placed(pod: Mapping[str, Any]) -> bool:
    """On a node and alive (Bound, Running or Releasing: KAI's active-used pods)."""
    phase = _status(pod).get("phase") or "Pending"
    return bool(_spec(pod).get("nodeName")) and phase in ("Pending", "Running")


def node_pool_of(obj: Mapping[str, Any] | None, label_key: str = C.NODE_POOL_LABEL) -> str:
    return str(_labels(obj).get(label_key) or DEFAULT_NODE_POOL)


def pod_claim_keys(pod: Mapping[str, Any]) -> tuple[set[str], str]:
    """The keys of the ResourceClaims a pod uses (``spec.resourceClaims``, templated ones by the name the
    resourceclaim controller gave them in ``status.resourceClaimStatuses``), or why they are not known yet."""
    namespace = str(_meta(pod).get("namespace", "") or "")
    made: dict[str, str | None] = {}
    for item in _status(pod).get("resourceClaimStatuses") or ():
        entry = _mapping(item)
        name = entry.get("resourceClaimName")
        made[str(entry.get("name", ""))] = str(name) if name else None
    keys: set[str] = set()
    for item in _spec(pod).get("resourceClaims") or ():
        entry = _mapping(item)
        pod_claim = str(entry.get("name", ""))
        if entry.get("resourceClaimName"):
            keys.add(f"{namespace}/{entry['resourceClaimName']}")
        elif entry.get("resourceClaimTemplateName"):
            if pod_claim not in made:
                return set(), (f"the resourceclaim controller has not made the ResourceClaim of "
                               f"spec.resourceClaims[{pod_claim}] yet")
            claim = made[pod_claim]
            if claim:
                keys.add(f"{namespace}/{claim}")
    return keys, ""


def _sub_request(claim: Mapping[str, Any], request: str) -> Mapping[str, Any]:
    """The (sub)request a result names (``req`` or ``req/sub``), in any served version (v1beta1 keeps the
    fields of an exact request on the request itself)."""
    base, _, sub = request.partition("/")
    devices = _mapping(_spec(claim).get("devices"))
    for item in devices.get("requests") or ():
        req = _mapping(item)
        if req.get("name") != base:
            continue
        if sub:
            for alt in req.get("firstAvailable") or ():
                if _mapping(alt).get("name") == sub:
                    return _mapping(alt)
            return {}
        exactly = req.get("exactly")
        return _mapping(exactly) if isinstance(exactly, Mapping) else req
    return {}


def node_local_selector(node: str) -> dict[str, Any]:
    """The allocation's node selector of devices local to one node (as kube-scheduler's allocator writes it)."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def allocation_node_selector(claim: ClaimAllocation, device_slice: DeviceSlice | None) -> dict[str, Any] | None:
    """``status.allocation.nodeSelector``: the node of node-local devices; else the requirements of the
    devices' slices' node selectors together; None when every device is reachable from all nodes."""
    if claim.node:
        return node_local_selector(claim.node)
    fields: list[Any] = []
    expressions: list[Any] = []
    for d in claim.devices:
        spec = _spec(device_slice(d.driver, d.pool, d.device) if device_slice is not None else None)
        if spec.get("nodeName"):
            return node_local_selector(str(spec["nodeName"]))
        terms = _mapping(spec.get("nodeSelector")).get("nodeSelectorTerms") or ()
        if terms:
            term = _mapping(terms[0])
            fields.extend(r for r in term.get("matchFields") or () if r not in fields)
            expressions.extend(r for r in term.get("matchExpressions") or () if r not in expressions)
    if not fields and not expressions:
        return None
    term_out: dict[str, Any] = {}
    if expressions:
        term_out["matchExpressions"] = expressions
    if fields:
        term_out["matchFields"] = fields
    return {"nodeSelectorTerms": [term_out]}


def allocation_body(claim: ClaimAllocation, obj: Mapping[str, Any], lookup: Lookup,
                    device_slice: DeviceSlice | None = None) -> dict[str, Any]:
    """``status.allocation`` of a claim the cycle allocated, as kube-scheduler's allocator writes it: the device
    results, the configuration of their DeviceClasses (``FromClass``) then of the claim (``FromClaim``), and the
    node selector."""
    results: list[dict[str, Any]] = []
    for d in claim.devices:
        result: dict[str, Any] = {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
        if _sub_request(obj, d.request).get("adminAccess") is True:
            result["adminAccess"] = True
        results.append(result)
    config: list[dict[str, Any]] = []
    for request in dict.fromkeys(d.request for d in claim.devices):
        class_name = str(_sub_request(obj, request).get("deviceClassName", ""))
        device_class = lookup(C.DEVICE_CLASS_KIND, class_name) if class_name else None
        for item in _spec(device_class).get("config") or ():
            config.append({"source": "FromClass", "requests": [request], **_mapping(item)})
    for item in _mapping(_spec(obj).get("devices")).get("config") or ():
        config.append({"source": "FromClaim", **_mapping(item)})
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    out: dict[str, Any] = {"devices": devices}
    selector = allocation_node_selector(claim, device_slice)
    if selector is not None:
        out["nodeSelector"] = selector
    return out


def pods_by_group(parsed: ParsedObjects) -> dict[str, list[str]]:
    """PodGroup key ``"<ns>/<name>"`` -> the keys of its pods (by their ``pod-group-name`` annotation), from
    the objects a cycle ran on (after :func:`kaisched.cluster.schedule.prepare`, so grouped pods count even
    before the API shows their annotation)."""
    out: dict[str, list[str]] = {}
    for pod in parsed.pods:
        group = pod.meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION)
        if group:
            out.setdefault(f"{pod.meta.namespace}/{group}", []).append(f"{pod.meta.namespace}/{pod.meta.name}")
    return out


def _requests_mig(pod: Mapping[str, Any]) -> bool:
    for c in _spec(pod).get("containers") or ():
        res = _mapping(_mapping(c).get("resources"))
        for part in ("limits", "requests"):
            if any(str(k).startswith(C.MIG_RESOURCE_PREFIX) for k in _mapping(res.get(part))):
                return True
    return False


# ---------------------------------------------------------------------------------- queue quantities
def format_quantity(resource: str, value: float) -> str:
    """A ResourceList quantity: ``cpu`` from millicores, ``memory`` from bytes, GPUs in devices."""
    if resource == "cpu":
        millis = round(value)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    if resource == "memory":
        return str(round(value))
    millis = round(value * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def resource_list(values: Mapping[str, float]) -> dict[str, str]:
    """Queue resources of a cycle result (``gpu`` devices, ``cpu`` millicores, ``memory`` bytes) as a
    Kubernetes ResourceList."""
    out: dict[str, str] = {}
    if "cpu" in values:
        out["cpu"] = format_quantity("cpu", values["cpu"])
    if "memory" in values:
        out["memory"] = format_quantity("memory", values["memory"])
    if "gpu" in values:
        out[GPU_RESOURCE_KEY] = format_quantity("gpu", values["gpu"])
    return out


def _quota_list(values: Mapping[str, float]) -> dict[str, str]:
    """:func:`resource_list` with KAI's ``-1`` (unlimited) for negative values."""
    out = resource_list({k: v for k, v in values.items() if v >= 0})
    for key, name in (("cpu", "cpu"), ("memory", "memory"), ("gpu", GPU_RESOURCE_KEY)):
        if values.get(key, 0.0) < 0:
            out[name] = "-1"
    return out


def _same_resource_list(current: object, wanted: Mapping[str, str]) -> bool:
    cur = _mapping(current)
    if set(cur) != set(wanted):
        return False
    for key, value in wanted.items():
        try:
            a, b = parse_quantity(str(cur[key])), parse_quantity(value)
        except QuantityError:
            return False
        if abs(a - b) > 1e-6 * max(1.0, abs(b)):
            return False
    return True


# ------------------------------------------------------------------------------------------- planner
@dataclass(frozen=True, slots=True)
class PlannerOptions:
    component: str = COMPONENT
    node_pool_label_key: str = C.NODE_POOL_LABEL
    node_pool: str = ""  # this shard's node-pool value: bound pods lacking the label get it (spec 1.1)
    event_memory: timedelta = timedelta(hours=1)  # how long an Event object is reused for a recurring event


@dataclass(slots=True)
class _EventRecord:
    name: str
    first: datetime
    last: datetime
    count: int


#: client-go's event spam filter: a token bucket per object, this many events at once ...
EVENT_BURST = 25
#: ... refilled with one token every this many seconds
EVENT_REFILL_SECONDS = 300.0
#: client-go's event aggregator: this many distinct messages of one (object, type, reason) ...
EVENT_AGGREGATE_AFTER = 10
#: ... within this interval make the later ones one combined Event
EVENT_AGGREGATE_INTERVAL = timedelta(minutes=10)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime


@dataclass(slots=True)
class _Similar:
    messages: dict[str, datetime] = field(default_factory=dict)  # distinct messages -> last seen
    record: _EventRecord | None = None  # the combined Event, once there is one


class EventMemory:
    """Which events were planned, so that an unchanged one is not recorded every cycle, and the event recorder's
    correlation (client-go's ``EventCorrelator``: aggregation, deduplication and a spam filter).

    Between :meth:`begin` and :meth:`end` (one cycle), :meth:`event` returns the Event to write, or None when

    * an event with the same (object uid, reason, message) was already planned in this cycle or the previous one;
    * the object is over its event rate: each object has a token bucket of ``burst`` events refilled with one
      every ``refill_seconds`` (client-go: 25, one per 5 minutes), so a pod that keeps failing in new ways
      cannot flood the API server with events.

    An event that comes back after a gap of at least one cycle reuses its Event object (count + 1) for up to
    ``memory``; after that it is a new Event. Similar events, the same object, type and reason with
    ``aggregate_after`` distinct messages within ``aggregate_interval``, are combined, as client-go's aggregator
    does: from then on they are one Event whose message is ``(combined from similar events): <the latest>`` and
    whose count grows (a patch, not a new object). ``on_filtered(reason)`` is told of every event not written
    (``spam``) or combined (``aggregated``).
    """

    def __init__(self, component: str = COMPONENT, memory: timedelta = timedelta(hours=1), *,
                 burst: int = EVENT_BURST, refill_seconds: float = EVENT_REFILL_SECONDS,
                 aggregate_after: int = EVENT_AGGREGATE_AFTER,
                 aggregate_interval: timedelta = EVENT_AGGREGATE_INTERVAL,
                 on_filtered: Callable[[str], None] | None = None) -> None:
        if burst < 1:
            raise ValueError(f"burst: must be at least 1, got {burst}")
        if refill_seconds <= 0:
            raise ValueError(f"refill_seconds: must be > 0, got {refill_seconds}")
        if aggregate_after < 2:
            raise ValueError(f"aggregate_after: must be at least 2, got {aggregate_after}")
        self.component = component
        self.memory = memory
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.aggregate_after = aggregate_after
        self.aggregate_interval = aggregate_interval
        self.on_filtered = on_filtered
        self._records: dict[tuple[str, str, str], _EventRecord] = {}
        self._active: set[tuple[str, str, str]] = set()
        self._seen: set[tuple[str, str, str]] = set()
        self._buckets: dict[str, _Bucket] = {}
        self._similar: dict[tuple[str, str, str], _Similar] = {}
        self._seq = 0
        self.filtered: dict[str, int] = {"spam": 0, "aggregated": 0}

    def begin(self) -> None:
        self._seen = set()
        self._seq = 0

    def end(self, now: datetime) -> None:
        self._active = self._seen
        self._seen = set()
        horizon = now - self.memory
        self._records = {k: r for k, r in self._records.items() if r.last >= horizon or k in self._active}
        full = timedelta(seconds=self.burst * self.refill_seconds)
        self._buckets = {k: b for k, b in self._buckets.items() if now - b.at < full}  # the others are full again
        recent = now - self.aggregate_interval
        for key in list(self._similar):
            similar = self._similar[key]
            similar.messages = {m: t for m, t in similar.messages.items() if t >= recent}
            if not similar.messages and (similar.record is None or similar.record.last < horizon):
                del self._similar[key]

    def _filtered(self, reason: str) -> None:
        self.filtered[reason] += 1
        if self.on_filtered is not None:
            self.on_filtered(reason)

    def _take_token(self, obj: str, now: datetime) -> bool:
        bucket = self._buckets.get(obj)
        if bucket is None:
            bucket = self._buckets[obj] = _Bucket(float(self.burst), now)
        else:
            refill = max((now - bucket.at).total_seconds(), 0.0) / self.refill_seconds
            bucket.tokens = min(float(self.burst), bucket.tokens + refill)
            bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def event(self, involved: ObjectRef, type_: str, reason: str, message: str, now: datetime,
              annotations: Mapping[str, str] | None = None) -> Event | None:
        self._seq += 1
        message = message[:EVENT_MESSAGE_LIMIT]
        obj = involved.uid or involved.lane
        key = (obj, reason, message)
        if key in self._seen or key in self._active:
            self._seen.add(key)
            return None
        self._seen.add(key)
        similar = self._similar.setdefault((obj, type_, reason), _Similar())
        recent = now - self.aggregate_interval
        similar.messages = {m: t for m, t in similar.messages.items() if t >= recent}
        similar.messages[message] = now
        aggregate = len(similar.messages) >= self.aggregate_after
        if not self._take_token(obj, now):
            self._filtered("spam")
            return None
        if aggregate:  # one Event for all of them: the combined one
            self._filtered("aggregated")
            message = (AGGREGATED_PREFIX + message)[:EVENT_MESSAGE_LIMIT]
            record = similar.record
        else:
            record = self._records.get(key)
        if record is not None and now - record.last < self.memory:
            record.count += 1
            record.last = now
            return Event(involved, type_, reason, message, record.name, record.first, now, record.count,
                         dict(annotations or {}), self.component)
        event = new_event(involved, type_, reason, message, now, self._seq, annotations, self.component)
        fresh = _EventRecord(event.event_name, now, now, 1)
        if aggregate:
            similar.record = fresh
        else:
            self._records[key] = fresh
        return event


class OperationPlanner:
    """Plans the operations of each cycle. Pure (no I/O); its :class:`EventMemory` keeps an unchanged event
    (same object uid, reason and message as in the previous cycle) from being planned again."""

    def __init__(self, options: PlannerOptions | None = None) -> None:
        self.options = options or PlannerOptions()
        self.events = EventMemory(self.options.component, self.options.event_memory)

    def plan(self, result: CycleResult, lookup: Lookup, now: datetime,
             group_pods: Mapping[str, Sequence[str]] | None = None,
             settling: Collection[str] = (), device_slice: DeviceSlice | None = None,
             held_devices: Mapping[tuple[str, str, str], str] | None = None) -> list[Operation]:
        """The operations of one cycle, in order: binds (each with the DRA claims it reserves first),
        evictions, nominated nodes, pod conditions, PodGroup annotations and status, Queue status, events.

        ``group_pods`` maps a PodGroup key to its pod keys (see :func:`pods_by_group`); without it pending
        pods are not explained. ``settling``: pods with a bind or eviction still in flight (the writer's),
        never treated as pending. ``device_slice`` finds the ResourceSlice of an allocated device (the node
        selector of an allocation whose devices are not node-local). ``held_devices``: (driver, pool, device) ->
        the key of the claim whose ``status.allocation`` holds it in the cache; a pod whose new allocation takes
        a device another claim still holds is not bound before that claim is deallocated (the cycle counts the
        devices of a claim no live pod reserves as free; the API must never show one device in two claims).
        """
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        self.events.begin()
        ops = _Cycle(self, result, lookup, now, group_pods or {}, settling, device_slice, held_devices or {}).run()
        self.events.end(now)
        return ops


class _Cycle:
    """The planning of one cycle (state shared by its steps)."""

    def __init__(self, planner: OperationPlanner, result: CycleResult, lookup: Lookup, now: datetime,
                 group_pods: Mapping[str, Sequence[str]], settling: Collection[str],
                 device_slice: DeviceSlice | None = None,
                 held_devices: Mapping[tuple[str, str, str], str] | None = None) -> None:
        self.planner = planner
        self.device_slice = device_slice
        self.held_devices = held_devices or {}
        self.claims_of: dict[str, list[ClaimAllocation]] = {}
        for claim in result.claims:
            for pod_key in claim.pods:
                self.claims_of.setdefault(pod_key, []).append(claim)
        self.options = planner.options
        self.result = result
        self.lookup = lookup
        self.now = now
        self.group_pods = group_pods
        self.group_of: dict[str, str] = {p: g for g, pods in group_pods.items() for p in pods}
        self.bound = {p.pod for p in result.binds}
        self.pipelined = {p.pod for p in result.pipelined}
        self.settling = set(settling)
        self.events: list[Event] = []

    # ---- helpers -----------------------------------------------------------------------------------
    def pod(self, key: str) -> Mapping[str, Any] | None:
        return self.lookup(C.POD_KIND, key)

    def group_key_of_pod(self, key: str, pod: Mapping[str, Any] | None) -> str | None:
        group = self.group_of.get(key)
        if group is not None:
            return group
        name = _annotations(pod).get(C.POD_GROUP_NAME_ANNOTATION)
        return f"{split_key(key)[0]}/{name}" if name else None

    def event(self, involved: ObjectRef, type_: str, reason: str, message: str,
              annotations: Mapping[str, str] | None = None) -> None:
        ev = self.planner.events.event(involved, type_, reason, message, self.now, annotations)
        if ev is not None:
            self.events.append(ev)

    # ---- steps -------------------------------------------------------------------------------------
    def run(self) -> list[Operation]:
        ops: list[Operation] = []
        ops.extend(self.binds())
        ops.extend(self.evictions())
        ops.extend(self.nominations())
        for placement in self.result.pipelined:
            self.pipelined_event(placement)
        conditions, groups = self.pod_groups()
        ops.extend(conditions)
        ops.extend(groups)
        ops.extend(self.queues())
        ops.extend(self.events)
        return ops

    def binds(self) -> list[Operation]:
        out: list[Operation] = []
        for placement in self.result.binds:
            pod = self.pod(placement.pod)
            if pod is None:
                continue  # deleted since the snapshot
            ref = ObjectRef.pod(placement.pod, _uid(pod))
            claims, problem = self.claim_reservations(placement, pod, ref)
            if problem:  # never bind a pod whose claims would not be written: it stays pending
                self.bound.discard(placement.pod)
                self.event(ref, "Warning", "FailedBinding",
                           f"Not binding pod {ref.key} to node {placement.node}: {problem}")
                continue
            labels, annotations = self.bind_metadata(placement, pod)
            group_key = self.group_key_of_pod(placement.pod, pod) or ""
            group = self.lookup(C.POD_GROUP_KIND, group_key)
            pool = node_pool_of(group, self.options.node_pool_label_key)
            scheduled = self.planner.events.event(
                ref, "Normal", "Scheduled",
                f"Successfully assigned pod {ref.namespace}/{ref.name} to node {placement.node} at node-pool {pool}",
                self.now)
            out.append(Bind(ref, placement.node, placement.gpu_groups, labels, annotations,
                            then=(scheduled,) if scheduled is not None else (), claims=claims,
                            pod_group=ObjectRef.pod_group(group_key).lane if group_key else ""))
        return out

    def claim_reservations(self, placement: Placement, pod: Mapping[str, Any], ref: ObjectRef
                           ) -> tuple[tuple[ClaimReservation, ...], str]:
        """The claim writes that must precede the pod's binding, or why the pod must not be bound."""
        allocations = self.claims_of.get(placement.pod, [])
        expected, problem = pod_claim_keys(pod)
        if problem:
            return (), problem
        if not expected and not allocations:
            return (), ""
        if not ref.uid:
            return (), "the pod has no metadata.uid to reserve its ResourceClaims with"
        missing = sorted(expected - {a.claim for a in allocations})
        if missing:
            return (), f"the cycle allocated no devices for its ResourceClaim {', '.join(missing)}"
        out: list[ClaimReservation] = []
        for a in allocations:
            if a.template:
                return (), (f"ResourceClaim {a.claim} would be made from ResourceClaimTemplate {a.template} by the "
                            "scheduler; in Kubernetes the resourceclaim controller makes it")
            claim = self.lookup(RESOURCE_CLAIM_KIND, a.claim)
            if claim is None:
                return (), f"ResourceClaim {a.claim} does not exist any more"
            cref = ObjectRef.of(claim, C.RESOURCE_V1_API_VERSION, RESOURCE_CLAIM_KIND)
            devices = tuple((d.driver, d.pool, d.device) for d in a.devices)
            if a.new:
                for device in devices:
                    holder = self.held_devices.get(device)
                    if holder is not None and holder != a.claim:
                        return (), (f"device {'/'.join(device)} of ResourceClaim {a.claim} is still allocated to "
                                    f"ResourceClaim {holder}: waiting for its deallocation")
            allocation = allocation_body(a, claim, self.lookup, self.device_slice) if a.new else None
            out.append(ClaimReservation(cref, ref, allocation, devices))
        return tuple(out), ""

    def bind_metadata(self, placement: Placement, pod: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """The labels and annotations KAI's binder and scheduler put on a pod they bind, minus those it has."""
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        groups = placement.gpu_groups
        if groups:
            labels.update(gpu_group_labels(groups))
            annotations[C.RECEIVED_RESOURCE_TYPE_ANNOTATION] = C.RECEIVED_RESOURCE_TYPE_FRACTION
        elif _requests_mig(pod):
            annotations[C.RECEIVED_RESOURCE_TYPE_ANNOTATION] = C.RECEIVED_RESOURCE_TYPE_MIG_INSTANCE
        if self.options.node_pool:
            labels[self.options.node_pool_label_key] = self.options.node_pool
        have_labels, have_annotations = _labels(pod), _annotations(pod)
        labels = {k: v for k, v in labels.items() if have_labels.get(k) != v}
        annotations = {k: v for k, v in annotations.items() if have_annotations.get(k) != v}
        return labels, annotations

    def evictions(self) -> list[Operation]:
        """One Evict per evicted pod; the first eviction of each PodGroup and message carries KAI's ``Evict``
        event on the PodGroup, recorded once the eviction succeeded."""
        victims: list[tuple[Eviction, ObjectRef, str | None]] = []
        gang: dict[str, int] = {}
        for ev in self.result.evictions:
            pod = self.pod(ev.pod)
            if pod is None:
                continue  # already gone
            group_key = self.group_key_of_pod(ev.pod, pod)
            victims.append((ev, ObjectRef.pod(ev.pod, _uid(pod)), group_key))
            if group_key is not None:
                gang[group_key] = gang.get(group_key, 0) + 1
        out: list[Operation] = []
        for ev, ref, group_key in victims:
            group = self.lookup(C.POD_GROUP_KIND, group_key) if group_key is not None else None
            then: tuple[Operation, ...] = ()
            if group is not None and group_key is not None:
                annotations = {EVICTION_GANG_SIZE_ANNOTATION: str(gang[group_key]),
                               EVICTOR_ACTION_ANNOTATION: ev.action}
                if ev.preemptor:
                    ns, name = split_key(ev.preemptor)
                    annotations[EVICTOR_POD_GROUP_NAME_ANNOTATION] = name
                    annotations[EVICTOR_POD_GROUP_NAMESPACE_ANNOTATION] = ns
                event = self.planner.events.event(ObjectRef.pod_group(group_key, _uid(group)), "Normal", "Evict",
                                                  ev.message, self.now, annotations)
                then = (event,) if event is not None else ()
            out.append(Evict(ref, ev.action, ev.preemptor, ev.message, then=then))
        return out

    def nominations(self) -> list[Operation]:
        """``status.nominatedNodeName`` of the pods whose nomination the cycle changes, for those whose cached
        value differs. Not for a pod that is going away (deleted meanwhile, terminating, or evicted by this cycle: a
        moved victim's pod is deleted, the pod its controller makes in its place is a new object)."""
        out: list[Operation] = []
        evicted = {e.pod for e in self.result.evictions}
        for n in self.result.nominations:
            pod = self.pod(n.pod)
            if pod is None or n.pod in evicted or _is_deleting(pod):
                continue
            if str(_status(pod).get("nominatedNodeName") or "") != n.node:
                out.append(PodNomination(ObjectRef.pod(n.pod, _uid(pod)), n.node))
        return out

    def pipelined_event(self, placement: Placement) -> None:
        pod = self.pod(placement.pod)
        if pod is None:
            return
        group_key = self.group_key_of_pod(placement.pod, pod)
        status = self.result.pod_group(group_key) if group_key else None
        message = status.message if status is not None and status.status == "Pipelined" and status.message else (
            f"Pipelined to node {placement.node}: waiting for resources being released")
        self.event(ObjectRef.pod(placement.pod, _uid(pod)), "Normal", "Pipelined", message)

    def pod_groups(self) -> tuple[list[Operation], list[Operation]]:
        conditions: list[Operation] = []
        groups: list[Operation] = []
        for status in self.result.pod_groups:
            group = self.lookup(C.POD_GROUP_KIND, status.name)
            pods = [(k, self.pod(k)) for k in self.group_pods.get(status.name, ())]
            live = [(k, p) for k, p in pods if p is not None]
            ref = ObjectRef.pod_group(status.name, _uid(group)) if group is not None else None
            if ref is not None and group is not None:
                ann = self.annotations_patch(status, group)
                if ann:
                    groups.append(PodGroupAnnotations(ref, ann))
                if status.stale_since is not None:
                    self.event(ref, "Normal", "StaleJob", self.stale_message(group, live))
            awaiting_keys = self.bound | self.pipelined | self.settling
            pending = [(k, p) for k, p in live if k not in awaiting_keys and pod_is_pending(p)]
            gated = any(pod_is_gated(p) for _, p in live)
            awaiting = any(k in awaiting_keys for k, _ in live)
            new_conditions: list[dict[str, Any]] | None = None
            if status.reason == "NotReady":
                if ref is not None and group is not None:
                    message = status.tiered_message() or "Job is not ready for scheduling."
                    self.event(ref, "Normal", "NotReady", message)
                    new_conditions = self.scheduling_conditions(group, status, self.prefixed(group, message))
            elif status.status == "Pipelined":
                # placed, waiting for its victims (or terminating pods) to go: the condition says so at once
                if ref is not None and group is not None and status.reason is not None:
                    message = self.prefixed(group, status.tiered_message() or "")
                    new_conditions = self.scheduling_conditions(group, status, message)
            elif status.status in ("Allocated", "Running") and not pending and group is not None:
                if _status(group).get("schedulingConditions"):  # scheduled: cleared at once (KAI keeps it)
                    new_conditions = []
            elif status.reason is not None and (pending or not live):
                message = self.prefixed(group, status.message or "")
                pod_message = message or self.prefixed(group, DEFAULT_POD_ERROR)
                mark = _spec(group).get("markUnschedulable") is not False
                for key, pod in pending:
                    pod_ref = ObjectRef.pod(key, _uid(pod))
                    self.event(pod_ref, "Warning", "Unschedulable", pod_message)
                    if mark and self.condition_differs(pod, "Unschedulable", pod_message):
                        conditions.append(PodCondition(pod_ref, pod_scheduled_condition(
                            "Unschedulable", pod_message, self.now)))
                if ref is not None and group is not None:
                    tiered = self.prefixed(group, status.tiered_message() or "")
                    group_message = tiered or self.prefixed(group, DEFAULT_POD_GROUP_ERROR)
                    self.event(ref, "Normal", "Unschedulable", group_message)
                    allocated = any(k in awaiting_keys or pod_is_placed(p) for k, p in live)
                    if not allocated:
                        new_conditions = self.scheduling_conditions(group, status, group_message)
            elif (not pending and not gated and not awaiting and group is not None
                  and _status(group).get("schedulingConditions")):
                new_conditions = []
            if new_conditions is not None and ref is not None:
                groups.append(PodGroupStatusPatch(ref, {"schedulingConditions": new_conditions or None}))
        return conditions, groups

    def prefixed(self, group: Mapping[str, Any] | None, message: str) -> str:
        """KAI prefixes messages with the node pool when the PodGroup's ``schedulingBackoff`` is 1."""
        if message and group is not None and _spec(group).get("schedulingBackoff") == 1:
            return f"Node-Pool '{node_pool_of(group, self.options.node_pool_label_key)}': {message}"
        return message

    @staticmethod
    def condition_differs(pod: Mapping[str, Any], reason: str, message: str) -> bool:
        for item in _status(pod).get("conditions") or ():
            cond = _mapping(item)
            if cond.get("type") == POD_SCHEDULED:
                return not (cond.get("status") == "False" and cond.get("reason") == reason
                            and cond.get("message") == message)
        return True

    def scheduling_conditions(self, group: Mapping[str, Any], status: PodGroupStatus,
                              message: str) -> list[dict[str, Any]] | None:
        """The PodGroup's new ``schedulingConditions`` (None: unchanged). One condition per node pool, the
        newest last, transition IDs counting up from the newest existing one."""
        existing = [dict(_mapping(c)) for c in _status(group).get("schedulingConditions") or ()]
        pool = node_pool_of(group, self.options.node_pool_label_key)
        last = existing[-1] if existing else None
        if (last is not None and last.get("type") == UNSCHEDULABLE_ON_NODE_POOL and last.get("nodePool") == pool
                and last.get("reason") == "Unschedulable" and last.get("message") == message
                and last.get("status") == "True"):
            return None
        try:
            last_id = int(str(last.get("transitionID", "0"))) if last is not None else 0
        except ValueError:
            last_id = 0
        reason: dict[str, Any] = {"reason": status.reason or "Unschedulable", "message": status.message or message}
        details = self.queue_details(status)
        if details is not None:
            reason["details"] = {"queueDetails": details}
        condition = {
            "type": UNSCHEDULABLE_ON_NODE_POOL, "nodePool": pool, "reason": "Unschedulable", "message": message,
            "reasons": [reason],
            "transitionID": str(max(last_id, 0) + 1), "lastTransitionTime": rfc3339(self.now), "status": "True",
        }
        return [c for c in existing if c.get("nodePool") != pool] + [condition]

    def queue_details(self, status: PodGroupStatus) -> dict[str, Any] | None:
        """KAI's ``queueDetails`` of a reason about the queue's shares (over its limit, non-preemptible over quota,
        waiting for fair share): the queue's deserved, allocated and requested resources and its limits."""
        if status.code not in QUEUE_CODES:
            return None
        queue = next((q for q in self.result.queues if q.name == status.queue), None)
        if queue is None:
            return None
        return {"name": queue.name, "queueDeservedResources": _quota_list(queue.deserved),
                "queueAllocatedResources": _quota_list(queue.allocated),
                "queueRequestedResources": _quota_list(queue.request),
                "queueResourceLimits": _quota_list(queue.limit)}

    @staticmethod
    def annotations_patch(status: PodGroupStatus, group: Mapping[str, Any]) -> dict[str, str | None]:
        have = _annotations(group)
        out: dict[str, str | None] = {}
        for key, value in status.annotations().items():
            current = have.get(key)
            if key == VICTIMS_ANNOTATION:  # (a JSON value the session formats deterministically)
                if value != current:
                    out[key] = value
                continue
            wanted = _seconds(value)
            if wanted is None:
                if current is not None:
                    out[key] = None
            elif current is None or _seconds(str(current)) != wanted:
                out[key] = wanted
        return out

    def stale_message(self, group: Mapping[str, Any], pods: list[tuple[str, Mapping[str, Any]]]) -> str:
        """KAI's StaleJob text: active pods against minMember, then each unsatisfied subgroup."""
        spec = _spec(group)
        active: dict[str, int] = {}
        for key, pod in pods:
            if key in self.bound or key in self.pipelined or pod_is_placed(pod):
                leaf_name = str(_labels(pod).get(C.SUBGROUP_NAME_LABEL, ""))
                active[leaf_name] = active.get(leaf_name, 0) + 1
        sub_groups = [_mapping(s) for s in spec.get("subGroups") or ()]
        parents = {str(s.get("parent")) for s in sub_groups if s.get("parent")}
        leaves = [s for s in sub_groups if str(s.get("name")) not in parents]
        total_active = sum(active.values())
        if not leaves:
            minimum = max(_int(spec.get("minMember"), 1), 1)
            return f"Job is stale. {total_active} pods are active, minMember is {minimum}"
        parts: list[str] = []
        total_min = 0
        for leaf in leaves:
            name = str(leaf.get("name"))
            minimum = max(_int(leaf.get("minMember"), 1), 1)
            total_min += minimum
            have = active.get(name, 0)
            if have < minimum:
                parts.append(f", subGroup {name} minMember is {minimum} and {have} pods are active")
        return f"Job is stale. {total_active} pods are active, minMember is {total_min}" + "".join(parts)

    def queues(self) -> list[Operation]:
        out: list[Operation] = []
        children: dict[str, list[str]] = {}
        for q in self.result.queues:
            if q.parent:
                children.setdefault(q.parent, []).append(q.name)
        for q in self.result.queues:
            queue = self.lookup(C.QUEUE_KIND, q.name)
            if queue is None:
                continue  # a synthetic queue (flattened hierarchy) or one deleted meanwhile
            patch = queue_status_patch(q, sorted(children.get(q.name, ())), _status(queue))
            if patch:
                out.append(QueueStatusPatch(ObjectRef.queue(q.name, _uid(queue)), patch))
        return out


def queue_status_patch(q: QueueStatus, children: list[str], current: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Queue's status that differ from ``current`` (empty: nothing to write)."""
    wanted: dict[str, Any] = {"allocated": resource_list(q.allocated), "requested": resource_list(q.request)}
    non_preemptible = getattr(q, "allocated_non_preemptible", None)  # reported by newer cycle results
    if isinstance(non_preemptible, Mapping):
        wanted["allocatedNonPreemptible"] = resource_list(non_preemptible)
    out: dict[str, Any] = {}
    for key, value in wanted.items():
        if not _same_resource_list(current.get(key), value):
            out[key] = value
    if sorted(str(c) for c in current.get("childQueues") or ()) != children:
        out["childQueues"] = children or None
    return out


def _seconds(value: str | None) -> str | None:
    """An RFC 3339 timestamp at second precision (None when absent or unparsable)."""
    if not value:
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return rfc3339(ts)


def _int(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return default


def fold_grouping(grouping: Iterable[Operation], ops: Sequence[Operation],
                  binding: Collection[str] = ()) -> list[Operation]:
    """The pod-grouper's pod patches (``grouping``) folded into the cycle's ``ops``: a pod the cycle binds gets its
    grouping annotations on its Binding (the API server writes them as it binds the pod: one request, not two);
    the annotation-only patch of a pod in ``binding`` (a bind of an earlier cycle in flight, which carries them) is
    dropped. A patch that also sets labels, and the patches of other pods, are kept, ahead of the cycle's
    operations (on the pod's lane a patch is sent before the bind). Returns what to submit, in order."""
    binds = {op.pod.key: i for i, op in enumerate(ops) if isinstance(op, Bind)}
    out: list[Operation] = list(ops)
    kept: list[Operation] = []
    for patch in grouping:
        foldable = (isinstance(patch, PodMetadataPatch) and not patch.labels and patch.purpose == "grouping"
                    and all(v is not None for v in patch.annotations.values()))
        i = binds.get(patch.target.key) if foldable else None
        if i is None:
            if not (foldable and patch.target.key in binding):
                kept.append(patch)
            continue
        assert isinstance(patch, PodMetadataPatch)
        bind = out[i]
        assert isinstance(bind, Bind)
        annotations = {k: v for k, v in patch.annotations.items() if v is not None}
        out[i] = replace(bind, annotations={**annotations, **bind.annotations})
    return [*kept, *out]


def operations_of(ops: Iterable[Operation], kind: type[Operation]) -> list[Operation]:
    """The operations of one type, in order (a convenience for callers and tests)."""
    return [op for op in ops if isinstance(op, kind)]
