"""DRA ResourceClaims in Kubernetes mode: which ``resource.k8s.io`` version to read, the claim writes that come
before a pod's binding, the reservations of pods that are gone, and the claims as the next cycle must see them.

* :func:`discover_dra_version` asks the server once (``GET /apis/resource.k8s.io``) which version it serves:
  ``v1``, else ``v1beta2``, else ``v1beta1``; None when it serves none (no DRA informers then).
* :class:`ClaimStatusWriter` carries out the claim steps of the :class:`~kaisched.kube.writer.ClusterWriter`'s
  operations (:class:`~kaisched.kube.operations.ClaimReservation` before a binding,
  :class:`~kaisched.kube.operations.ClaimRelease` for pods gone or a bind rolled back). Every write is a merge
  patch carrying the ``resourceVersion`` (and ``uid``) it was computed from: a claim changed meanwhile answers
  409, is read again and the write computed again, once; a second conflict fails the step (the pod is not bound
  this cycle). Writes to one claim are serialised in the process, and the answer of the last write is used
  before the cache has caught up with it. What a reservation checks: the claim is the one the cycle saw (same
  uid), not being deleted, not allocated to other devices meanwhile (an allocation whose reservations are only
  this pod's, or none, is a stale one of an earlier failed bind: it is cleared and written again), and has room
  for one more consumer (256).
* Deallocation is the resourceclaim controller's (kube-controller-manager): it removes the reservations of pods
  that no longer exist or are done and, when it removes the last one of a claim carrying
  ``resource.kubernetes.io/delete-protection`` (set by the scheduler that allocated it), clears
  ``status.allocation`` and the finalizer; it deletes the claims it made from templates once their pod is done.
  kaisched removes those reservations too (its cycle would otherwise count the devices as held by a pod it does
  not know), and then does exactly what the controller does on that transition, so the outcome is the same
  whichever of the two gets there first (the controller only deallocates on a removal it makes itself). It
  never deletes claims.
* :meth:`ClaimStatusWriter.overlay`: claims whose reservation is queued or in flight are shown allocated and
  reserved for their pod (like pods with a bind in flight are shown bound), so the next cycle neither counts
  their devices free nor allocates them again; an overlay ends when the cache shows the reservation, when the
  bind fails, or after ``settle_timeout``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaisched.k8s import constants as C
from kaisched.kube.api import JSON, Api, ApiError
from kaisched.kube.logs import get_logger
from kaisched.kube.operations import (
    DRA_FINALIZER,
    MERGE_PATCH,
    RESOURCE_CLAIM_KIND,
    ClaimRelease,
    ClaimReservation,
    ClaimStep,
    Lookup,
    ObjectRef,
    Operation,
    ReleaseClaim,
    claim_path,
    pod_path,
)
from kaisched.kube.resources import DRA_GROUP, DRA_VERSIONS

__all__ = ["MAX_CONSUMERS", "ClaimStatusWriter", "discover_dra_version", "held_devices", "pod_is_done",
           "stale_reservations"]

log = get_logger("kaisched.kube.claims")

#: Kubernetes' limit on ``status.reservedFor`` (ResourceClaimReservedForMaxSize)
MAX_CONSUMERS = 256

Json = Mapping[str, Any]


def discover_dra_version(api: Api) -> str | None:
    """The ``resource.k8s.io`` version to list and watch: the first of ``v1``, ``v1beta2``, ``v1beta1`` the server
    serves; None when it serves the group in none of them (404: the server predates DRA or disables it).
    Other refusals raise :class:`ApiError`."""
    try:
        body = api.request("GET", f"/apis/{DRA_GROUP}").body
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    served = set()
    for item in (body.get("versions") if isinstance(body, Mapping) else None) or ():
        if isinstance(item, Mapping) and item.get("version"):
            served.add(str(item["version"]))
    return next((v for v in DRA_VERSIONS if v in served), None)


# ------------------------------------------------------------------------------------------- reading
def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _meta(obj: Json | None) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata")) if obj is not None else {}


def _status(obj: Json | None) -> Mapping[str, Any]:
    return _mapping(obj.get("status")) if obj is not None else {}


def _rv(obj: Json | None) -> str:
    return str(_meta(obj).get("resourceVersion", "") or "")


def _reserved(obj: Json | None) -> list[dict[str, Any]]:
    return [dict(_mapping(e)) for e in _status(obj).get("reservedFor") or ()]


def _is_pod_entry(entry: Mapping[str, Any]) -> bool:
    return entry.get("resource") == "pods" and not entry.get("apiGroup")


def _devices(allocation: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    results = _mapping(allocation.get("devices")).get("results") or ()
    return {(str(_mapping(r).get("driver", "")), str(_mapping(r).get("pool", "")), str(_mapping(r).get("device", "")))
            for r in results}


def held_devices(claims: Iterable[tuple[str, Json]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the key of the claim whose ``status.allocation`` holds the device."""
    out: dict[tuple[str, str, str], str] = {}
    for key, claim in claims:
        allocation = _status(claim).get("allocation")
        if isinstance(allocation, Mapping):
            for device in _devices(allocation):
                out.setdefault(device, key)
    return out


def pod_is_done(pod: Json) -> bool:
    """The resourceclaim controller's test: a pod that will not use its claims any more (Succeeded or Failed,
    or deleted before it was scheduled)."""
    phase = _status(pod).get("phase")
    spec = _mapping(pod.get("spec"))
    return phase in ("Succeeded", "Failed") or (bool(_meta(pod).get("deletionTimestamp")) and not spec.get("nodeName"))


def stale_reservations(claims: Iterable[tuple[str, Json]], pods: Iterable[tuple[str, Json]],
                       api_version: str = C.RESOURCE_V1_API_VERSION) -> list[Operation]:
    """A :class:`~kaisched.kube.operations.ReleaseClaim` for every claim reserved for pods that are gone: done
    (:func:`pod_is_done`), replaced (another uid under the name), or not in the cache (then confirmed with a
    GET before the entry is removed). ``claims`` and ``pods``: (key, object) pairs of the caches."""
    reserved = [(c, entries) for _, c in claims if (entries := [e for e in _reserved(c) if _is_pod_entry(e)])]
    if not reserved:
        return []
    by_uid: dict[str, Json] = {}
    by_key: dict[str, Json] = {}
    for key, obj in pods:
        by_key[key] = obj
        uid = _meta(obj).get("uid")
        if uid:
            by_uid[str(uid)] = obj
    out: list[Operation] = []
    for claim, entries in reserved:
        namespace = str(_meta(claim).get("namespace", ""))
        gone: list[ObjectRef] = []
        unconfirmed: set[str] = set()
        for entry in entries:
            uid, name = str(entry.get("uid", "")), str(entry.get("name", ""))
            pod = by_uid.get(uid)
            if pod is not None:
                if pod_is_done(pod):
                    gone.append(ObjectRef.pod(f"{namespace}/{name}", uid))
                continue
            if f"{namespace}/{name}" not in by_key:  # (a pod of that name with another uid: replaced, gone)
                unconfirmed.add(uid)
            gone.append(ObjectRef.pod(f"{namespace}/{name}", uid))
        if gone:
            ref = ObjectRef.of(claim, api_version, RESOURCE_CLAIM_KIND)
            out.append(ReleaseClaim(ClaimRelease(ref, tuple(gone), frozenset(unconfirmed))))
    return out


# ------------------------------------------------------------------------------------------- writing
class _Refused(ApiError):
    """The claim is not in a state the step can write (409 Conflict: the pod is not bound this cycle)."""

    def __init__(self, claim: str, message: str) -> None:
        super().__init__(409, "Conflict", f"ResourceClaim {claim}: {message}")


@dataclass(slots=True)
class _Planned:
    reservation: ClaimReservation
    since: float


class ClaimStatusWriter:
    """Sends the claim steps (see the module docstring). Thread-safe: the cluster writer's workers call
    :meth:`run`; the scheduling loop calls :meth:`settle` and :meth:`overlay`. ``lookup(kind, key)`` reads the
    informers' caches."""

    def __init__(self, api: Api, lookup: Lookup | None = None, *, clock: Callable[[], float] = time.monotonic,
                 settle_timeout: float = 60.0, answer_ttl: float = 5.0) -> None:
        self._api = api
        self._lookup = lookup
        self._clock = clock
        self.settle_timeout = settle_timeout
        self.answer_ttl = answer_ttl  # how long our own write's answer is preferred to a cache that lags
        self._lock = threading.Lock()
        self._claim_locks: dict[str, threading.Lock] = {}
        self._answers: dict[str, tuple[JSON, float]] = {}  # claim key -> our last write's answer, when
        self._planned: dict[str, dict[str, _Planned]] = {}  # claim key -> pod uid -> the reservation
        #: claim writes sent (patches), for tests and logs
        self.writes = 0

    # ---- the overlay ---------------------------------------------------------------------------------
    def planned(self, reservations: Iterable[ClaimReservation]) -> None:
        """Reservations queued (a Bind submitted): shown by :meth:`overlay` until settled."""
        now = self._clock()
        with self._lock:
            for r in reservations:
                self._planned.setdefault(r.claim.key, {})[r.pod.uid] = _Planned(r, now)

    def dropped(self, reservations: Iterable[ClaimReservation]) -> None:
        """Reservations that will not happen (their bind failed or was dropped)."""
        with self._lock:
            for r in reservations:
                pods = self._planned.get(r.claim.key)
                if pods is not None and pods.get(r.pod.uid) is not None and pods[r.pod.uid].reservation is r:
                    del pods[r.pod.uid]
                    if not pods:
                        del self._planned[r.claim.key]

    def in_flight(self) -> dict[str, tuple[str, ...]]:
        """Claim key -> uids of the pods whose reservation is planned and not yet seen in the cache."""
        with self._lock:
            return {k: tuple(sorted(v)) for k, v in self._planned.items()}

    def settle(self, lookup: Lookup | None = None) -> None:
        """Forget planned reservations the cache shows (or whose claim is gone), those older than
        ``settle_timeout``, and answers of writes the cache has caught up with."""
        lookup = lookup or self._lookup
        now = self._clock()
        with self._lock:
            for key in list(self._planned):
                cached = lookup(RESOURCE_CLAIM_KIND, key) if lookup is not None else None
                pods = self._planned[key]
                for uid in list(pods):
                    planned = pods[uid]
                    shown = cached is not None and any(e.get("uid") == uid for e in _reserved(cached))
                    replaced = cached is not None and planned.reservation.claim.uid and \
                        _meta(cached).get("uid") != planned.reservation.claim.uid
                    if cached is None or shown or replaced or now - planned.since >= self.settle_timeout:
                        del pods[uid]
                if not pods:
                    del self._planned[key]
            for key in list(self._answers):
                answer, when = self._answers[key]
                cached = lookup(RESOURCE_CLAIM_KIND, key) if lookup is not None else None
                if cached is None or _rv(cached) == _rv(answer) or now - when >= self.answer_ttl:
                    del self._answers[key]

    def overlay(self, claims: Iterable[tuple[str, Json]]) -> list[tuple[str, Json]]:
        """The claims as the next cycle must see them: those with a planned reservation allocated (when the cache
        has no allocation yet) and reserved for the pod. Others are passed through unchanged (same dict)."""
        with self._lock:
            planned = {k: list(v.values()) for k, v in self._planned.items()}
        if not planned:
            return list(claims)
        out: list[tuple[str, Json]] = []
        for key, claim in claims:
            mine = planned.get(key)
            if mine:
                claim = _overlaid(claim, [p.reservation for p in mine])
            out.append((key, claim))
        return out

    # ---- steps ---------------------------------------------------------------------------------------
    def run(self, step: ClaimStep) -> None:
        """Carry out one step; raises :class:`ApiError` when it cannot (retryable ones are retried by the
        cluster writer: every step is idempotent)."""
        key = step.claim.key
        with self._lock:
            lock = self._claim_locks.setdefault(key, threading.Lock())
        with lock:
            if isinstance(step, ClaimReservation):
                self._reserve(step)
            else:
                self._release(step)

    def _current(self, ref: ObjectRef) -> Json | None:
        """Our last write's answer, else the cached claim, else None (read it from the API)."""
        with self._lock:
            answer = self._answers.get(ref.key)
        if answer is not None and self._clock() - answer[1] < self.answer_ttl:
            return answer[0]  # type: ignore[no-any-return]
        cached = self._lookup(RESOURCE_CLAIM_KIND, ref.key) if self._lookup is not None else None
        return cached

    def _get(self, ref: ObjectRef) -> Json:
        body = self._api.request("GET", claim_path(ref.api_version, ref.namespace, ref.name)).body
        if not isinstance(body, Mapping):
            raise ApiError(0, "InvalidResponse", f"GET ResourceClaim {ref.key}: not an object")
        return body

    def _patch(self, ref: ObjectRef, obj: Json, body: dict[str, Any], sub: str = "") -> Json:
        meta = _meta(obj)
        body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": _rv(obj),
                                     "uid": meta.get("uid")}}
        with self._lock:
            self.writes += 1
        answer = self._api.request("PATCH", claim_path(ref.api_version, ref.namespace, ref.name, sub), body=body,
                                   content_type=MERGE_PATCH).body
        if not isinstance(answer, Mapping):
            raise ApiError(0, "InvalidResponse", f"PATCH ResourceClaim {ref.key}: not an object")
        with self._lock:
            self._answers[ref.key] = (answer, self._clock())
        return answer

    def _with_retry(self, ref: ObjectRef, attempt: Callable[[Json], None]) -> None:
        """``attempt(claim)`` on the claim as we know it; on a conflict once more on the claim read again."""
        obj = self._current(ref)
        if obj is None:
            obj = self._get(ref)
        try:
            attempt(obj)
            return
        except ApiError as err:
            if err.status != 409:
                raise
            log.info("claim write conflict: reading it again", claim=ref.key, message=err.message)
        attempt(self._get(ref))

    def _reserve(self, r: ClaimReservation) -> None:
        self._with_retry(r.claim, lambda obj: self._reserve_on(r, obj))

    def _reserve_on(self, r: ClaimReservation, obj: Json) -> None:
        key = r.claim.key
        meta = _meta(obj)
        if r.claim.uid and meta.get("uid") != r.claim.uid:
            raise _Refused(key, f"it was replaced (uid {meta.get('uid')}, the cycle saw {r.claim.uid})")
        if meta.get("deletionTimestamp"):
            raise _Refused(key, "it is being deleted")
        status = _status(obj)
        allocation = status.get("allocation")
        reserved = _reserved(obj)
        mine = any(e.get("uid") == r.pod.uid for e in reserved)
        new_allocation: Mapping[str, Any] | None = None
        if isinstance(allocation, Mapping):
            if _devices(allocation) != set(r.devices):
                others = [e for e in reserved if e.get("uid") != r.pod.uid]
                if r.allocation is None or others:
                    raise _Refused(key, f"it is allocated to other devices ({_describe_devices(allocation)}) "
                                   f"than the cycle counted ({', '.join('/'.join(d) for d in sorted(r.devices))})")
                # a stale allocation of an earlier bind that failed: clear it (an allocation is immutable)
                obj = self._patch(r.claim, obj, {"status": {"reservedFor": None, "allocation": None}}, "status")
                reserved, mine, new_allocation = [], False, r.allocation
        elif r.allocation is None:
            raise _Refused(key, "it is not allocated any more")
        else:
            new_allocation = r.allocation
        if mine and new_allocation is None:
            return  # (written before: a retried step)
        if not mine and len(reserved) >= MAX_CONSUMERS:
            raise _Refused(key, f"it is reserved for {MAX_CONSUMERS} consumers already")
        if new_allocation is not None and DRA_FINALIZER not in (_meta(obj).get("finalizers") or ()):
            finalizers = [*(_meta(obj).get("finalizers") or ()), DRA_FINALIZER]
            obj = self._patch(r.claim, obj, {"metadata": {"finalizers": finalizers}})
        patch: dict[str, Any] = {}
        if not mine:
            entry = {"resource": "pods", "name": r.pod.name, "uid": r.pod.uid}
            patch["reservedFor"] = [*reserved, entry]
        if new_allocation is not None:
            patch["allocation"] = dict(new_allocation)
        self._patch(r.claim, obj, {"status": patch}, "status")
        log.debug("claim reserved", claim=key, pod=r.pod.key, allocated=new_allocation is not None)

    def _release(self, r: ClaimRelease) -> None:
        confirmed: set[str] = {p.uid for p in r.pods if p.uid not in r.unconfirmed}
        for pod in r.pods:
            if pod.uid in r.unconfirmed and self._pod_gone(pod):
                confirmed.add(pod.uid)
        if not confirmed:
            return
        deallocated: list[Json] = []
        self._with_retry(r.claim, lambda obj: self._release_on(r, obj, confirmed, deallocated))
        if deallocated:  # the finalizer has done its work
            self._with_retry(r.claim, self._drop_finalizer(r.claim))

    def _pod_gone(self, pod: ObjectRef) -> bool:
        try:
            body = self._api.request("GET", pod_path(pod.namespace, pod.name)).body
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return not isinstance(body, Mapping) or str(_meta(body).get("uid", "")) != pod.uid or pod_is_done(body)

    def _release_on(self, r: ClaimRelease, obj: Json, uids: set[str], deallocated: list[Json]) -> None:
        meta = _meta(obj)
        if r.claim.uid and meta.get("uid") != r.claim.uid:
            return  # replaced: the reservations were the old claim's
        reserved = _reserved(obj)
        kept = [e for e in reserved if not (_is_pod_entry(e) and e.get("uid") in uids)]
        if len(kept) == len(reserved):
            return
        status: dict[str, Any] = {"reservedFor": kept or None}
        deallocate = not kept and DRA_FINALIZER in (meta.get("finalizers") or ()) and \
            _status(obj).get("allocation") is not None
        if deallocate:
            status["allocation"] = None
        answer = self._patch(r.claim, obj, {"status": status}, "status")
        log.info("claim reservations removed", claim=r.claim.key, reason=r.reason,
                 pods=sorted(p.key for p in r.pods if p.uid in uids), deallocated=deallocate)
        if deallocate:
            deallocated.append(answer)

    def _drop_finalizer(self, ref: ObjectRef) -> Callable[[Json], None]:
        def attempt(obj: Json) -> None:
            finalizers = list(_meta(obj).get("finalizers") or ())
            if DRA_FINALIZER not in finalizers or _status(obj).get("allocation") is not None:
                return
            finalizers.remove(DRA_FINALIZER)
            try:
                self._patch(ref, obj, {"metadata": {"finalizers": finalizers or None}})
            except ApiError as err:
                if err.status != 404:
                    raise
        return attempt


def _describe_devices(allocation: Mapping[str, Any]) -> str:
    return ", ".join("/".join(d) for d in sorted(_devices(allocation)))


def _overlaid(claim: Json, reservations: list[ClaimReservation]) -> Json:
    meta = _meta(claim)
    status = dict(_status(claim))
    reserved = _reserved(claim)
    uids = {str(e.get("uid")) for e in reserved}
    changed = False
    for r in sorted(reservations, key=lambda r: r.pod.uid):
        if r.claim.uid and meta.get("uid") != r.claim.uid:
            continue  # another claim of that name: the write will fail
        if status.get("allocation") is None:
            if r.allocation is None:
                continue  # (deallocated meanwhile: the write will fail)
            status["allocation"] = dict(r.allocation)
            changed = True
        if r.pod.uid not in uids:
            reserved.append({"resource": "pods", "name": r.pod.name, "uid": r.pod.uid})
            uids.add(r.pod.uid)
            changed = True
    if not changed:
        return claim
    status["reservedFor"] = reserved
    tag = ",".join(sorted(r.pod.uid for r in reservations))
    return {**claim, "metadata": {**meta, "resourceVersion": f"{meta.get('resourceVersion', '')}+reserve:{tag}"},
            "status": status}
