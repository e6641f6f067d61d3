"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's rules and timings.

* A candidate creates the Lease, or takes it over when its holder is empty or has not renewed it for
  ``leaseDurationSeconds``. As in client-go, "not renewed" is judged by when *this* process last saw the
  Lease change (its local monotonic clock), never by comparing the holder's ``renewTime`` with our wall
  clock: clocks of two machines may disagree, and a candidate therefore waits one full lease duration
  after it first sees a Lease before taking it over. A released Lease (empty ``holderIdentity``) is
  taken at once. A new holder sets ``acquireTime`` and increments ``leaseTransitions``.
* Every write is a PUT carrying the ``resourceVersion`` just read: a 409 means someone else wrote in
  between, and the next round reads again (optimistic concurrency; two candidates never both win).
* The leader renews every ``retry_period``; when no renewal has succeeded for ``renew_deadline``, or
  another holder shows up, it stops leading (``on_stopped_leading``) and becomes a candidate again.
* **Fencing** (terms): each acquisition starts a new *term* (:attr:`LeaderElector.term`, 1, 2, ...; the
  Lease's ``leaseTransitions`` is recorded with it). :meth:`LeaderElector.holds` ``(term)`` is True only while
  that term is the current one and its lease is *valid with margin*: the last successful write of the Lease in
  this term was **sent** less than ``renew_deadline`` ago (monotonic clock, read before the request goes out).
  Another replica may take over only ``lease_duration`` after it saw that write, which it cannot see before
  the write was sent, so every check that passes leaves at least ``lease_duration - renew_deadline`` (the
  margin) before anyone else may write. The check makes no API call: a process that was paused (SIGSTOP, a
  frozen VM, a long GC) resumes with the monotonic clock advanced and fails it at once. A term's validity,
  once lost, never comes back (the term is *lapsed*; the elector stops leading at its next round and a new
  acquisition is a new term), and a renewal that finds ``leaseTransitions`` changed (someone else held the
  Lease in between) ends the term too. :attr:`LeaderElector.is_leader` is ``holds(term)`` for the current
  term, so it turns False by itself even if the elector's thread is stuck.
* :meth:`LeaderElector.release` (on shutdown) clears ``holderIdentity`` so that a successor acquires at once.
* **Server-side fencing**: what the check above cannot call back is a request that had passed it when the process
  froze and reaches the server after it resumes. The Helm chart installs a ValidatingAdmissionPolicy
  (:data:`FENCING_POLICY`, ``deploy/helm/kaisched/templates/fencing.yaml``) with this Lease as its parameter: the API
  server denies every write of the scheduler's ServiceAccount (the Lease's own excepted) unless the pod its token
  is bound to (``authentication.kubernetes.io/pod-name``) is the one ``holderIdentity`` names (:func:`identity_pod`).
  A write refused by it ends the term (:meth:`LeaderElector.abandon`), as a lapse does.
* **Identity** (:func:`default_identity`): ``<pod>_<8 hex digits>``, ``<pod>`` being ``$POD_NAME`` (the chart sets it
  from the downward API), else the host name (a pod's host name is its name, unless it uses the host's network or
  sets ``hostname``); the random part makes it unique per process, so that two processes never both hold the Lease,
  not even a container restarted in the same pod. :func:`identity_pod` gives the pod back: the part before the
  first ``_``, which a pod name (a DNS subdomain) never contains; the fencing policy compares the same part.

Callbacks run on the elector's thread and must return quickly (start your own thread for real work).
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kaisched.kube.api import JSON, Api, ApiError
from kaisched.kube.resources import LEASE

__all__ = ["FENCING_POLICY", "JITTER_FACTOR", "LeaderElector", "default_identity", "identity_pod", "micro_time"]

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2  # client-go's JitterFactor for acquire retries
#: name of the chart's ValidatingAdmissionPolicy (and its binding) that fences the scheduler's writes server-side;
#: the API server names it in every denial, and the policy's own message starts with it
FENCING_POLICY = "kaisched-leader-fencing"


def default_identity(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> str:
    """This process's identity in the Lease: ``<pod>_<8 hex digits>``, ``<pod>`` being ``$POD_NAME``, else the host
    name (see the module docstring: the fencing policy admits the writes of the pod named before the ``_``)."""
    env = os.environ if environ is None else environ
    pod = env.get("POD_NAME") or hostname or socket.gethostname()
    return f"{pod}_{uuid.uuid4().hex[:8]}"


def identity_pod(identity: str) -> str:
    """The pod an identity of :func:`default_identity` names (the identity itself when it has no ``_``)."""
    return identity.partition("_")[0]


def micro_time(moment: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Contend for the Lease ``namespace/name`` as ``identity`` (unique per process: :func:`default_identity`)."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        seed: int | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election: identity must not be empty")
        if not namespace or not name:
            raise ValueError("leader election: the Lease needs a namespace and a name")
        if retry_period <= 0:
            raise ValueError(f"leader election: retry_period must be > 0, got {retry_period}")
        if not lease_duration > renew_deadline:
            raise ValueError(f"leader election: lease_duration ({lease_duration}) must be greater than "
                             f"renew_deadline ({renew_deadline})")
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError(f"leader election: renew_deadline ({renew_deadline}) must be greater than "
                             f"{JITTER_FACTOR} x retry_period ({retry_period})")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.lease_duration_seconds = max(1, math.ceil(lease_duration))
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep if sleep is not None else self._stop.wait
        self._now = now
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = 0.0
        self._observed_rv: str | None = None
        self._leading = False
        self._last_renew = -math.inf  # clock() when the last successful write of the Lease was sent
        self._lapsed = False  # the current term's lease validity ran out (never valid again)
        self._abandoned: str | None = None  # why the current term was abandoned (abandon()), if it was
        self._term_transitions: int | None = None  # the Lease's leaseTransitions when the term began
        self._last_leader: str | None = None
        #: times this elector became leader (the number of the current or last term)
        self.terms = 0

    # -- state --------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Leading, and the current term's lease is valid with margin (:meth:`holds`)."""
        with self._lock:
            return self._holds(self.terms)

    @property
    def term(self) -> int:
        """The current term (1 for the first acquisition, then 2, ...); 0 while not leading."""
        with self._lock:
            return self.terms if self._leading else 0

    @property
    def margin(self) -> float:
        """Seconds left, at least, between the end of a term's validity and the moment another replica may
        take the Lease over: ``lease_duration - renew_deadline``."""
        return self.lease_duration - self.renew_deadline

    def holds(self, term: int) -> bool:
        """True while ``term`` is the current term and its lease is valid with margin: the last successful write
        of the Lease in this term was sent less than ``renew_deadline`` ago. No API call; cheap enough to ask
        before every write. Once False for a term, it stays False."""
        with self._lock:
            return self._holds(term)

    def valid_for(self) -> float:
        """Seconds of validity the current term has left (0 when not leading or lapsed)."""
        with self._lock:
            if not self._holds(self.terms):
                return 0.0
            return max(0.0, self._last_renew + self.renew_deadline - self._clock())

    def abandon(self, term: int, reason: str) -> bool:
        """End ``term`` as if its lease had lapsed: the API server refused one of its writes because it does not see
        this replica as the holder (the fencing policy, :data:`FENCING_POLICY`). :meth:`holds` and :attr:`is_leader` are
        False for it from now on (so the scheduler's shutdown does not release the Lease) and the elector stops leading
        at its next round, without renewing it. True when ``term`` was the current, unlapsed term."""
        with self._lock:
            if not self._leading or term != self.terms or self._lapsed:
                return False
            self._lapsed = True
            self._abandoned = reason
        log.warning("leader election: %s abandons term %d of Lease %s/%s: %s", self.identity, term, self.namespace,
                    self.name, reason)
        return True

    def _holds(self, term: int) -> bool:  # with the lock held
        if not self._leading or term != self.terms or term <= 0 or self._lapsed:
            return False
        if self._clock() - self._last_renew < self.renew_deadline:
            return True
        self._lapsed = True  # from now on this term never writes again
        return False

    @property
    def leader(self) -> str | None:
        """The holder seen in the Lease last time it was read (None: nobody)."""
        with self._lock:
            holder = (self._observed_spec or {}).get("holderIdentity")
            return holder or None

    @property
    def lease_path(self) -> str:
        return LEASE.object_path(self.name, self.namespace)

    # -- one round ----------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: True when we hold the Lease afterwards."""
        now = micro_time(self._now())
        try:
            lease = self.api.request("GET", self.lease_path).body
        except ApiError as err:
            if err.status != 404:
                log.warning("leader election: reading Lease %s/%s: %s", self.namespace, self.name, err)
                return False
            return self._create(now)
        if not isinstance(lease, dict):
            log.warning("leader election: Lease %s/%s is not an object", self.namespace, self.name)
            return False
        spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        meta = lease.get("metadata") if isinstance(lease.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        self._observe(spec, meta.get("resourceVersion"))
        holder = spec.get("holderIdentity") or ""
        duration = _positive_int(spec.get("leaseDurationSeconds")) or self.lease_duration_seconds
        if holder and holder != self.identity:
            with self._lock:
                if self._observed_time + duration > self._clock():
                    return False  # held by someone else, and not expired as far as we have seen
        new_spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "renewTime": now,
        }
        if holder == self.identity:
            new_spec["acquireTime"] = spec.get("acquireTime") or now
            new_spec["leaseTransitions"] = _positive_int(spec.get("leaseTransitions")) or 0
        else:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = (_positive_int(spec.get("leaseTransitions")) or 0) + 1
        body = dict(lease)
        body["metadata"] = dict(meta)
        body["spec"] = {**spec, **new_spec}
        sent_at = self._clock()  # before the request: the server cannot have the write any earlier
        try:
            updated = self.api.request("PUT", self.lease_path, body=body).body
        except ApiError as err:
            if err.status == 409:
                log.info("leader election: Lease %s/%s changed meanwhile; reading it again", self.namespace,
                         self.name)
            else:
                log.warning("leader election: updating Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        self._accept(updated, body["spec"], sent_at)
        return True

    def _create(self, now: str) -> bool:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_seconds,
                "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
        body = {"apiVersion": LEASE.api_version, "kind": LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        sent_at = self._clock()
        try:
            created = self.api.request("POST", LEASE.create_path(self.namespace), body=body).body
        except ApiError as err:
            if err.status != 409:
                log.warning("leader election: creating Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        self._accept(created, spec, sent_at)
        return True

    def _accept(self, written: JSON, spec: dict[str, Any], sent_at: float) -> None:
        rv = None
        if isinstance(written, dict) and isinstance(written.get("metadata"), dict):
            rv = written["metadata"].get("resourceVersion")
        self._observe(spec, rv)
        with self._lock:
            self._last_renew = sent_at

    def _observe(self, spec: dict[str, Any], rv: Any) -> None:
        holder = spec.get("holderIdentity") or ""
        with self._lock:
            if spec != self._observed_spec:
                self._observed_spec = dict(spec)
                self._observed_time = self._clock()
            self._observed_rv = rv if isinstance(rv, str) else None
            changed = holder != (self._last_leader or "")
            self._last_leader = holder or None
        if changed and holder and self.on_new_leader is not None:
            self._call(self.on_new_leader, holder)

    # -- the loop -----------------------------------------------------------------------------------

    def start(self) -> LeaderElector:
        if self._thread is not None:
            raise RuntimeError("leader elector already started")
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop contending and renewing (without releasing the Lease); True when the thread has ended."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def release(self, timeout: float = 5.0) -> bool:
        """Stop, and if we hold the Lease, clear its holder so a successor takes it at once.
        True when the Lease was released."""
        self.stop(timeout)
        self._stop_leading()
        try:
            lease = self.api.request("GET", self.lease_path).body
        except ApiError as err:
            log.warning("leader election: release: reading Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        if not isinstance(lease, dict) or not isinstance(lease.get("spec"), dict):
            return False
        spec = lease["spec"]
        if spec.get("holderIdentity") != self.identity:
            return False
        now = micro_time(self._now())
        body = dict(lease)
        body["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now,
                        "renewTime": now}
        try:
            self.api.request("PUT", self.lease_path, body=body)
        except ApiError as err:
            log.warning("leader election: release of Lease %s/%s failed: %s", self.namespace, self.name, err)
            return False
        log.info("leader election: %s released Lease %s/%s", self.identity, self.namespace, self.name)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._acquire():
                break
            self._start_leading()
            self._renew()
            self._stop_leading()

    def _acquire(self) -> bool:
        while not self._stop.is_set():
            if self._round():
                return not self._stop.is_set()
            self._sleep(self.retry_period * (1.0 + JITTER_FACTOR * self._rng.random()))
        return False

    def _renew(self) -> None:
        while not self._stop.is_set():
            self._sleep(self.retry_period)
            if self._stop.is_set():
                return
            with self._lock:
                term = self.terms
                lapsed = not self._holds(term)
                abandoned = self._abandoned is not None
            if abandoned:  # (abandon() logged why)
                return
            if lapsed:  # the process was paused, or the thread starved, past the renew deadline
                log.warning("leader election: %s's lease on %s/%s lapsed (no renewal sent for %.1fs, the renew "
                            "deadline): term %d ends, nothing more is written in it", self.identity,
                            self.namespace, self.name, self.renew_deadline, term)
                return
            if self._round():
                with self._lock:
                    transitions = _positive_int((self._observed_spec or {}).get("leaseTransitions"))
                    same_term = transitions == self._term_transitions
                if same_term:
                    continue
                log.warning("leader election: Lease %s/%s was held by another replica since term %d began "
                            "(leaseTransitions %s, was %s): the term ends", self.namespace, self.name, term,
                            transitions, self._term_transitions)
                return
            with self._lock:
                holder = (self._observed_spec or {}).get("holderIdentity")
                expired = self._clock() - self._last_renew >= self.renew_deadline
            if holder and holder != self.identity:
                log.warning("leader election: %s lost Lease %s/%s to %s", self.identity, self.namespace,
                            self.name, holder)
                return
            if expired:
                log.warning("leader election: %s could not renew Lease %s/%s within %.1fs", self.identity,
                            self.namespace, self.name, self.renew_deadline)
                return

    def _round(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception:  # never let the elector thread die
            log.exception("leader election: unexpected error")
            return False

    def _start_leading(self) -> None:
        with self._lock:
            self._leading = True
            self._lapsed = False
            self._abandoned = None
            self.terms += 1
            term = self.terms
            self._term_transitions = _positive_int((self._observed_spec or {}).get("leaseTransitions"))
            transitions = self._term_transitions
        log.info("leader election: %s leads Lease %s/%s (term %d, leaseTransitions %s)", self.identity,
                 self.namespace, self.name, term, transitions)
        if self.on_started_leading is not None:
            self._call(self.on_started_leading)

    def _stop_leading(self) -> None:
        with self._lock:
            was, self._leading = self._leading, False
        if was and self.on_stopped_leading is not None:
            self._call(self.on_stopped_leading)

    @staticmethod
    def _call(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("leader election: callback %r failed", fn)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 0 else None
