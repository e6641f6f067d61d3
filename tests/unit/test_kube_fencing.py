"""Fenced leadership (issue 23): a replica writes only while its leadership term holds a Lease that is valid with
margin, and drops a plan made under a lease it no longer holds.

- The elector's fence (:meth:`LeaderElector.holds`) on a fake monotonic clock and an in-memory Lease: validity runs
  from when the last renewal was *sent*; a pause past the renew deadline lapses the term for good, with no Lease
  write after the pause; a Lease held by someone else in between (``leaseTransitions`` changed) ends the term.
- The writer (:class:`ClusterWriter` with a ``fence``): the fence is asked for each batch and before each request
  (retries and multi-step binds included); once it fails the rest of the plan is dropped, counted in
  ``kai_fenced_writes_dropped_total``, in-flight binds are forgotten, and nothing is written afterwards.
- The scheduling loop: no cycle under a term that does not hold its Lease, and the plan of a cycle whose term ended
  while it ran is not written.
- Server-side fencing (the chart's ValidatingAdmissionPolicy, ``FENCING_POLICY``): a write the API server refuses
  because of it is lost leadership: the writer drops the rest of the plan without failure reports and says so once
  (``on_denied``), the elector abandons the term, the loop stops as on a lost Lease. Other refusals stay failures.
  The identity in the Lease names the pod the policy compares with the token's (``<pod>_<random>``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.kube.api import ApiError, Response
from kaisched.kube.leader import FENCING_POLICY, LeaderElector, default_identity, identity_pod
from kaisched.kube.metrics import SchedulerMetrics
from kaisched.kube.operations import Bind, Event, ObjectRef
from kaisched.kube.runner import KubeScheduler, RunOptions
from kaisched.kube.writer import ClusterWriter, Failure, Fenced, FencedApi, is_fencing_denial

NS, NAME = "kai-scheduler", "kai-scheduler"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TIMINGS: dict[str, float] = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


# ------------------------------------------------------------------------------------------ test doubles
class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class LeaseApi:
    """One Lease in memory with resourceVersions and 409s, like the API server; records every request. A write
    (POST or PUT) takes ``write_seconds`` of the fake clock between sending and its answer, and ``during[n]`` runs
    while the n-th write is on the wire."""

    def __init__(self, clock: Clock, write_seconds: float = 0.0) -> None:
        self.clock = clock
        self.write_seconds = write_seconds
        self.during: dict[int, Callable[[], None]] = {}
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.calls: list[tuple[float, str, str]] = []  # (clock when sent, method, path)
        self.refusing = False

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> Response:
        self.calls.append((self.clock.now, method, path))
        if self.refusing:
            raise ApiError(503, "ServiceUnavailable", "etcd is down")
        if method == "GET" and path == LEASE_PATH:
            if self.lease is None:
                raise ApiError(404, "NotFound", "leases not found")
            return Response(200, copy.deepcopy(self.lease))
        self.clock.now += self.write_seconds
        hook = self.during.get(len(self.writes()))
        if hook is not None:
            hook()
        if method == "POST" and path == LEASES_PATH:
            if self.lease is not None:
                raise ApiError(409, "AlreadyExists", "exists")
            return Response(201, self._store(body))
        if method == "PUT" and path == LEASE_PATH:
            assert self.lease is not None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            return Response(200, self._store(body))
        raise AssertionError(f"unexpected request {method} {path}")

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.lease = stored
        return copy.deepcopy(stored)

    def taken_and_released_by_another(self) -> None:
        """Another replica acquired the Lease (leaseTransitions + 1) and released it (holder cleared)."""
        assert self.lease is not None
        spec = self.lease["spec"]
        self._store({**self.lease, "spec": {**spec, "holderIdentity": "",
                                            "leaseTransitions": spec["leaseTransitions"] + 1}})

    def writes(self) -> list[tuple[float, str, str]]:
        return [c for c in self.calls if c[1] != "GET"]

    def last_write_sent(self) -> float:
        return self.writes()[-1][0]


class Script:
    """The elector's ``sleep``: ``at[n]`` runs first on the n-th call (checks, changes to the Lease), then the fake
    clock advances by what was asked plus ``extra[n]`` (a pause: SIGSTOP, a frozen VM). At call ``stop_at`` the
    elector is told to stop (its loop ends at its next check)."""

    def __init__(self, clock: Clock, stop_at: int) -> None:
        self.clock = clock
        self.stop_at = stop_at
        self.extra: dict[int, float] = {}
        self.at: dict[int, Callable[[], None]] = {}
        self.calls = 0
        self.resumed: dict[int, tuple[float, int]] = {}  # call -> (clock, API calls so far) when it returned
        self.api: LeaseApi | None = None
        self.elector: LeaderElector | None = None
        self.done = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.calls += 1
        n = self.calls
        if n in self.at:
            self.at[n]()
        self.clock.now += seconds + self.extra.get(n, 0.0)
        self.resumed[n] = (self.clock.now, len(self.api.calls) if self.api is not None else 0)
        if n >= self.stop_at and self.elector is not None:
            self.elector._stop.set()  # (stop() would join this very thread)
            self.done.set()


class Record:
    """The elector's callbacks: ``(what, clock, API calls so far)``."""

    def __init__(self, clock: Clock, api: LeaseApi) -> None:
        self.clock = clock
        self.api = api
        self.events: list[tuple[str, float, int]] = []

    def started(self) -> None:
        self.events.append(("started", self.clock.now, len(self.api.calls)))

    def stopped(self) -> None:
        self.events.append(("stopped", self.clock.now, len(self.api.calls)))

    @property
    def log(self) -> list[str]:
        return [e[0] for e in self.events]


def setup(stop_at: int, write_seconds: float = 0.0, **timings: float
          ) -> tuple[Clock, LeaseApi, Script, Record, LeaderElector]:
    clock = Clock()
    api = LeaseApi(clock, write_seconds)
    script = Script(clock, stop_at)
    record = Record(clock, api)
    el = LeaderElector(api, NS, NAME, "me", clock=clock, sleep=script, seed=1, now=lambda: NOW,
                       on_started_leading=record.started, on_stopped_leading=record.stopped,
                       **{**TIMINGS, **timings})
    script.api, script.elector = api, el
    return clock, api, script, record, el


def run_loop(el: LeaderElector, script: Script) -> None:
    el.start()
    assert script.done.wait(10), "the scripted elector did not reach its last step"
    assert el.stop(timeout=10)


# ------------------------------------------------------------------------------------------ the elector's fence
def test_a_term_holds_from_its_lease_write_until_the_renew_deadline_without_any_api_call() -> None:
    _, api, script, record, el = setup(stop_at=10)
    seen: list[tuple[int, bool, float]] = []
    asked: list[int] = []

    def check() -> None:
        calls = len(api.calls)
        seen.append((el.term, el.holds(1), round(el.valid_for(), 3)))
        asked.append(len(api.calls) - calls)

    for n in range(1, 10):
        script.at[n] = check
    script.at[10] = lambda: seen.append((el.term, el.holds(0) or el.holds(2), el.margin))
    run_loop(el, script)
    # every 2 s a renewal; each check finds term 1 valid for the renew deadline (10 s) after the last one
    assert seen[:9] == [(1, True, 10.0)] * 9
    assert seen[9] == (1, False, 5.0)  # only the current term holds; the margin is lease - renew deadline
    assert asked == [0] * 9  # asking makes no API call
    assert record.log == ["started", "stopped"]  # (stopped: the test ends the loop)


def test_validity_runs_from_when_the_renewal_was_sent_not_from_its_answer() -> None:
    clock, api, script, _, el = setup(stop_at=2, write_seconds=3.0)  # each write answered 3 s after sent
    seen: list[tuple[str, bool, float]] = []

    def right_after_the_answer() -> None:
        seen.append(("answered", el.holds(1), el.valid_for()))  # 3 s of the 10 s are gone already

    def at_the_deadline() -> None:
        sent = api.last_write_sent()
        clock.now = sent + 9.99
        seen.append(("9.99 s after sending", el.holds(1), round(el.valid_for(), 3)))
        clock.now = sent + 10.0
        seen.append(("10 s after sending", el.holds(1), el.valid_for()))

    script.at[1] = right_after_the_answer
    script.at[2] = at_the_deadline
    run_loop(el, script)
    assert seen == [("answered", True, 7.0), ("9.99 s after sending", True, 0.01), ("10 s after sending", False, 0.0)]


def test_a_pause_past_the_renew_deadline_lapses_the_term_and_nothing_is_written_before_it_stops_leading() -> None:
    _, api, script, record, el = setup(stop_at=6)
    checks: dict[str, Any] = {}
    script.at[3] = lambda: checks.setdefault("before the pause", el.holds(1))
    script.extra[3] = 25.0  # SIGSTOP for 25 s during the third sleep
    script.at[6] = lambda: checks.update(term=el.term, holds_1=el.holds(1), holds_2=el.holds(2),
                                         transitions=(api.lease or {})["spec"]["leaseTransitions"])
    run_loop(el, script)
    resumed_at, calls_at_resume = script.resumed[3]
    # on resumption the elector stopped leading before it sent anything: the lapsed term is not renewed
    stopped = record.events[1]
    assert stopped[0] == "stopped" and stopped[2] == calls_at_resume, (record.events, api.calls)
    # then it contended again (the Lease is still its own: nobody else runs here) and that is a new term
    assert record.log == ["started", "stopped", "started", "stopped"]
    assert checks == {"before the pause": True, "term": 2, "holds_1": False, "holds_2": True, "transitions": 0}
    assert resumed_at == 1000.0 + 3 * 2.0 + 25.0


def test_a_lapsed_term_stays_lapsed_when_a_renewal_sent_before_the_lapse_is_answered_after_it() -> None:
    clock, api, script, record, el = setup(stop_at=3)
    seen: list[tuple[str, bool]] = []

    def stalled_on_the_wire() -> None:  # the first renewal (write 2) is answered 9 s after it was sent
        clock.now += 9.0
        seen.append(("on the wire, 11 s after the last renewal", el.holds(1)))

    api.during[2] = stalled_on_the_wire
    script.at[2] = lambda: seen.append(("after the late answer", el.holds(1)))
    run_loop(el, script)
    # the late answer would make the term look valid again (its renewal was sent 9 s ago), but a term that was
    # once found lapsed has already dropped its writes: it never holds again, and the elector stops leading
    assert seen == [("on the wire, 11 s after the last renewal", False), ("after the late answer", False)]
    assert record.log[:2] == ["started", "stopped"]


def test_a_lease_held_by_another_replica_in_between_ends_the_term() -> None:
    _, api, script, record, el = setup(stop_at=5)
    script.at[2] = api.taken_and_released_by_another  # (while this replica's process was paused or cut off)
    checks: dict[str, Any] = {}
    script.at[5] = lambda: checks.update(term=el.term, holds_1=el.holds(1), holds_2=el.holds(2))
    run_loop(el, script)
    # the next round finds the Lease released and takes it: leaseTransitions moved on, so a new term begins and the
    # old term's writes stay fenced
    assert record.log == ["started", "stopped", "started", "stopped"]
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 2
    assert checks == {"term": 2, "holds_1": False, "holds_2": True}


def test_failing_renewals_keep_the_term_until_the_renew_deadline_only() -> None:
    clock, api, script, record, el = setup(stop_at=9)
    states: list[tuple[float, bool]] = []
    renewed: list[float] = []

    def break_api() -> None:
        renewed.append(api.last_write_sent())
        api.refusing = True

    script.at[2] = break_api
    for n in range(3, 9):
        script.at[n] = lambda: states.append((clock.now - renewed[0], el.holds(1)))
    run_loop(el, script)
    assert [h for age, h in states if age < 10.0] == [True, True, True, True]
    assert [h for age, h in states if age >= 10.0] == [False, False]
    assert record.log == ["started", "stopped"]


def test_an_abandoned_term_ends_like_a_lapsed_one() -> None:
    _, api, script, record, el = setup(stop_at=5)
    checks: dict[str, Any] = {}

    def denied_by_the_server() -> None:  # the fencing policy refused a write of term 1
        checks["stale term"] = el.abandon(7, "not this term")
        checks["abandoned"] = el.abandon(1, "the API server refused a write")
        checks["again"] = el.abandon(1, "once is enough")
        checks["holds"] = (el.holds(1), el.is_leader, el.valid_for())

    script.at[2] = denied_by_the_server
    run_loop(el, script)
    assert checks["stale term"] is False and checks["abandoned"] is True and checks["again"] is False
    assert checks["holds"] == (False, False, 0.0)  # (so the scheduler's shutdown does not release the Lease)
    # it stopped leading right after that sleep, before it sent anything: the abandoned term is not renewed...
    stopped = record.events[1]
    assert stopped[0] == "stopped" and stopped[2] == script.resumed[2][1], (record.events, api.calls)
    # ...then contended again (the Lease is still its own: nobody else runs here): a new term
    assert record.log == ["started", "stopped", "started", "stopped"]
    assert el.terms == 2


def test_the_identity_names_the_pod_and_is_unique_per_process() -> None:
    first = default_identity({"POD_NAME": "kaisched-7d9f8c6b5-x2x4q"}, hostname="ignored")
    second = default_identity({"POD_NAME": "kaisched-7d9f8c6b5-x2x4q"})
    for identity in (first, second):
        pod, _, suffix = identity.partition("_")
        assert pod == "kaisched-7d9f8c6b5-x2x4q" and len(suffix) == 8 and int(suffix, 16) >= 0
        assert identity_pod(identity) == "kaisched-7d9f8c6b5-x2x4q"
    assert first != second  # a restarted container is a new process: it never renews its predecessor's term
    assert identity_pod(default_identity({}, hostname="node-a")) == "node-a"  # no POD_NAME: the host name
    assert identity_pod("one") == "one"
    assert RunOptions(identity="explicit").resolved_identity() == "explicit"


# ------------------------------------------------------------------------------------------ the writer's fence
STATUS_SUCCESS = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}


class RecordingApi:
    """Records every request; ``hooks[(method, path)]`` runs before the request is answered (or raises)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.hooks: dict[tuple[str, str], list[Callable[[], None]]] = {}
        self._lock = threading.Lock()

    def on(self, method: str, path: str, *hooks: Callable[[], None]) -> None:
        self.hooks.setdefault((method, path), []).extend(hooks)

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> Response:
        with self._lock:
            self.calls.append((method, path))
            queue = self.hooks.get((method, path))
            hook = queue.pop(0) if queue else None
        if hook is not None:
            hook()
        if path.endswith("/binding"):
            return Response(201, dict(STATUS_SUCCESS))
        return Response(200, body)

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[Any]:
        return iter(())

    def writes(self) -> list[tuple[str, str]]:
        with self._lock:
            return [c for c in self.calls if c[0] != "GET"]


class Switch:
    """A fence the test turns off."""

    def __init__(self) -> None:
        self.on = True
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.on


def binding(pod: str) -> tuple[str, str]:
    return ("POST", f"/api/v1/namespaces/ns/pods/{pod}/binding")


def bind(pod: str, **kwargs: Any) -> Bind:
    event = Event(ObjectRef.pod(f"ns/{pod}"), "Normal", "Scheduled", f"assigned {pod}", f"{pod}.1", NOW, NOW)
    return Bind(ObjectRef.pod(f"ns/{pod}"), "n1", then=(event,), **kwargs)


def fenced_total(metrics: SchedulerMetrics, operation: str) -> float:
    for line in metrics.render().decode().splitlines():
        if line.startswith(f'kai_fenced_writes_dropped_total{{operation="{operation}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def api() -> RecordingApi:
    return RecordingApi()


def test_the_rest_of_a_plan_is_dropped_once_the_fence_fails(api: RecordingApi) -> None:
    fence = Switch()
    metrics = SchedulerMetrics()
    writer = ClusterWriter(api, workers=1, fence=fence, metrics=metrics, sleep=lambda s: None)
    gate, release = threading.Event(), threading.Event()

    def first_bind_in_flight() -> None:
        gate.set()
        assert release.wait(5)

    api.on(*binding("p0"), first_bind_in_flight)
    try:
        assert writer.submit([bind(f"p{i}") for i in range(5)]) == 5
        assert gate.wait(5)
        with structlog.testing.capture_logs() as logs:
            fence.on = False  # the lease lapses while p0's bind is on the wire (it cannot be called back)
            release.set()
            assert writer.drain(5)
        on_the_wire = [e for e in logs if e["event"].endswith("answered after the lease lapsed")]
        assert [e["request"] for e in on_the_wire] == ["POST /api/v1/namespaces/ns/pods/p0/binding"]
        dropped = [e for e in logs if e["event"] == "lease not held: writes of a plan made under it dropped"]
        assert [(e["count"], e["binds"]) for e in dropped] == [(4, 4)]
        assert api.writes() == [binding("p0")]  # nothing after: not p1..p4, not even p0's Scheduled event
        assert writer.fenced and writer.fenced_drops == 5  # p1..p4 and p0's event
        assert writer.in_flight_binds() == {"ns/p0": "n1"}  # sent: the cache will show where it went
        assert fenced_total(metrics, "Bind") == 4 and fenced_total(metrics, "Event") == 1
        # a later plan (the next cycle) is dropped on arrival, even if the fence were to answer True again
        fence.on = True
        assert writer.submit([bind("p9")]) == 0
        assert writer.drain(5) and api.writes() == [binding("p0")]
        assert "ns/p9" not in writer.in_flight_binds()
        assert writer.stats()["fencedDrops"] == 6
    finally:
        writer.close(timeout=5)


def test_a_batch_submitted_after_the_lease_lapsed_is_never_queued(api: RecordingApi) -> None:
    fence = Switch()
    fence.on = False
    writer = ClusterWriter(api, workers=2, fence=fence)
    try:
        assert writer.submit([bind("a"), bind("b")]) == 0
        assert writer.drain(5)
        assert api.calls == [] and writer.in_flight_binds() == {} and writer.fenced_drops == 2
    finally:
        writer.close(timeout=5)


def test_the_fence_is_asked_before_each_request_of_a_multi_step_bind(api: RecordingApi) -> None:
    fence = Switch()
    writer = ClusterWriter(api, workers=1, fence=fence)
    patch = ("PATCH", "/api/v1/namespaces/ns/pods/frac")

    def lapse() -> None:
        fence.on = False  # the lease lapses between the GPU-group label and the binding

    api.on(*patch, lapse)
    try:
        writer.submit([bind("frac", gpu_groups=("g1",), labels={"runai-gpu-group": "g1"})])
        assert writer.drain(5)
        assert api.writes() == [patch]  # the binding itself was never sent
        assert writer.in_flight_binds() == {}  # the pod is not shown bound to the next cycle
    finally:
        writer.close(timeout=5)


def test_a_retry_after_a_backoff_is_fenced_and_no_failure_is_reported(api: RecordingApi) -> None:
    fence = Switch()
    failures: list[Any] = []

    def unavailable() -> None:
        raise ApiError(503, "ServiceUnavailable", "busy")

    def paused_in_backoff(seconds: float) -> None:
        fence.on = False  # the process was stopped while it waited to retry

    api.on(*binding("p"), unavailable)
    writer = ClusterWriter(api, workers=1, fence=fence, sleep=paused_in_backoff, on_failure=failures.append)
    try:
        writer.submit([bind("p")])
        assert writer.drain(5)
        assert api.writes() == [binding("p")]  # the first attempt only: no retry, no FailedBinding event
        assert failures == [] and writer.failures == 0 and writer.fenced_drops == 1
    finally:
        writer.close(timeout=5)


def test_fenced_api_refuses_writes_and_passes_reads(api: RecordingApi) -> None:
    fence = Switch()
    fenced = FencedApi(api, fence)
    fenced.request("PATCH", "/x", body={})
    fence.on = False
    fenced.request("GET", "/x")
    with pytest.raises(Fenced, match="PUT /y: not sent"):
        fenced.request("PUT", "/y", body={})
    assert api.calls == [("PATCH", "/x"), ("GET", "/x")]


def test_a_writer_without_a_fence_writes_as_before(api: RecordingApi) -> None:
    writer = ClusterWriter(api, workers=1)
    try:
        writer.submit([bind("p")])
        assert writer.drain(5)
        assert api.writes() == [binding("p"), ("POST", "/api/v1/namespaces/ns/events")]
        assert not writer.fenced
    finally:
        writer.close(timeout=5)


def denial(status: int = 403, pod: str = "ns/p0") -> ApiError:
    """The API server's answer when the fencing policy refuses a write (403), or finds no Lease to check (422)."""
    name = pod.rpartition("/")[2]
    if status == 403:
        detail = (f"{FENCING_POLICY}: pod replica-a does not hold the leader-election Lease kai-scheduler/"
                  "kai-scheduler (holder: replica-b_0f3c9a1d)")
    else:
        detail = "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    return ApiError(status, "Forbidden" if status == 403 else "Invalid",
                    f'pods "{name}" is forbidden: ValidatingAdmissionPolicy \'{FENCING_POLICY}\' with binding '
                    f"'{FENCING_POLICY}' denied request: {detail}")


def test_fencing_denials_are_told_apart_from_other_refusals() -> None:
    assert is_fencing_denial(denial(403)) and is_fencing_denial(denial(422))
    assert not is_fencing_denial(ApiError(403, "Forbidden", 'pods "p" is forbidden: User "x" cannot create resource'))
    assert not is_fencing_denial(ApiError(409, "Conflict", f"{FENCING_POLICY} in some other message"))
    other_policy = "ValidatingAdmissionPolicy 'quota' with binding 'quota' denied request: too many pods"
    assert not is_fencing_denial(ApiError(403, "Forbidden", other_policy))


@pytest.mark.parametrize("status", [403, 422])
def test_a_write_the_fencing_policy_refuses_is_lost_leadership(api: RecordingApi, status: int) -> None:
    fence = Switch()  # the client-side fence still holds: only the server knows better
    metrics = SchedulerMetrics()
    failures: list[Failure] = []
    told: list[ApiError] = []
    writer = ClusterWriter(api, workers=1, fence=fence, metrics=metrics, on_failure=failures.append,
                           on_denied=told.append, sleep=lambda s: None)

    def refused() -> None:
        raise denial(status)

    api.on(*binding("p0"), refused)
    try:
        with structlog.testing.capture_logs() as logs:
            assert writer.submit([bind(f"p{i}") for i in range(4)]) == 4
            assert writer.drain(5)
        assert api.writes() == [binding("p0")]  # refused once, never retried; nothing after it
        assert [e.status for e in told] == [status]  # told once
        assert failures == [] and writer.failures == 0  # no FailedBinding report: it would be refused alike
        assert writer.fenced and writer.stats()["deniedByPolicy"] is True
        assert writer.in_flight_binds() == {}  # the refused bind did not happen either
        assert writer.fenced_drops == 4 and fenced_total(metrics, "Bind") == 4
        refusals = [e for e in logs if e["event"].endswith("denied by the fencing policy")]
        assert [(e["request"], e["status"]) for e in refusals] == [("POST /api/v1/namespaces/ns/pods/p0/binding",
                                                                     status)]
        assert FENCING_POLICY in refusals[0]["message"]
        # the next cycle's plan is dropped on arrival, and nobody is told twice
        assert writer.submit([bind("p9")]) == 0
        assert writer.drain(5) and api.writes() == [binding("p0")] and len(told) == 1
    finally:
        writer.close(timeout=5)


def test_a_refusal_by_anything_else_is_an_ordinary_failure(api: RecordingApi) -> None:
    failures: list[Failure] = []
    told: list[ApiError] = []
    writer = ClusterWriter(api, workers=1, fence=Switch(), on_failure=failures.append, on_denied=told.append)

    def rbac() -> None:
        raise ApiError(403, "Forbidden", 'pods "p0" is forbidden: User "system:serviceaccount:kai-scheduler:kaisched" '
                                         'cannot create resource "pods/binding"')

    api.on(*binding("p0"), rbac)
    try:
        writer.submit([bind("p0"), bind("p1")])
        assert writer.drain(5)
        assert [f.error.status for f in failures] == [403] and told == []
        assert not writer.fenced
        assert binding("p1") in api.writes()  # the rest of the plan goes on
        assert ("POST", "/api/v1/namespaces/ns/events") in api.writes()  # the FailedBinding report
    finally:
        writer.close(timeout=5)


# ------------------------------------------------------------------------------------------ the scheduling loop
class FakeElector:
    """What the runner asks of its elector: the current term and whether a term holds."""

    def __init__(self) -> None:
        self.current = 1
        self.valid = True
        self.abandoned: list[tuple[int, str]] = []

    @property
    def term(self) -> int:
        return self.current

    def holds(self, term: int) -> bool:
        return self.valid and term == self.current

    def abandon(self, term: int, reason: str) -> bool:
        self.abandoned.append((term, reason))
        self.valid = False
        return True


def cluster_objects() -> dict[str, list[dict[str, Any]]]:
    resources = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": resources, "capacity": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}

    def queue(name: str, parent: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"resources": {r: {"quota": 8 if r == "gpu" else -1, "limit": -1,
                                                  "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}}
        if parent:
            spec["parentQueue"] = parent
        return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}

    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "ns", "uid": "g-uid"},
             "spec": {"queue": "team", "minMember": 1, "priorityClassName": "train"}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid", "labels": {"kai.scheduler/queue": "team"},
                        "annotations": {"pod-group-name": "g"}, "creationTimestamp": "2026-12-01T11:00:00Z"},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "resources": {
               "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
               "limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Pending"}}
    return {"Node": [node], "Queue": [queue("root"), queue("team", "root")], "PodGroup": [group], "Pod": [pod]}


@pytest.fixture
def scheduler(api: RecordingApi) -> Iterator[tuple[KubeScheduler, FakeElector]]:
    sched = KubeScheduler(api, SchedulerConfig(), RunOptions(listen_port=None, dra_version="off", leader_elect=True),
                          now=lambda: NOW)
    for kind, objects in cluster_objects().items():
        sched.informers[kind].store.replace(objects)
    elector = FakeElector()
    sched.elector = elector  # type: ignore[assignment]
    try:
        yield sched, elector
    finally:
        sched.elector = None
        sched.close()


def test_a_cycle_under_a_term_that_holds_binds(api: RecordingApi,
                                               scheduler: tuple[KubeScheduler, FakeElector]) -> None:
    sched, _ = scheduler
    result = sched.run_cycle()
    assert [b.pod for b in result.binds] == ["ns/p"]
    assert sched.writer is not None and sched.writer.drain(5)
    assert binding("p") in api.writes()


def test_no_cycle_runs_while_the_lease_is_not_held(api: RecordingApi,
                                                   scheduler: tuple[KubeScheduler, FakeElector]) -> None:
    sched, elector = scheduler
    elector.valid = False
    assert sched.run_cycle() == CycleResult()
    assert api.calls == [] and sched.cycles == 0


def test_the_plan_of_a_cycle_whose_term_ended_while_it_ran_is_not_written(
    api: RecordingApi, scheduler: tuple[KubeScheduler, FakeElector], monkeypatch: pytest.MonkeyPatch
) -> None:
    sched, elector = scheduler
    cycle = sched._cycle

    def slow_cycle(*args: Any, **kwargs: Any) -> Any:
        out = cycle(*args, **kwargs)
        elector.current = 2  # lost and won again while the cycle computed: the plan belongs to term 1
        return out

    monkeypatch.setattr(sched, "_cycle", slow_cycle)
    result = sched.run_cycle()
    assert [b.pod for b in result.binds] == ["ns/p"]  # planned...
    assert sched.writer is not None and sched.writer.drain(5)
    assert api.writes() == []  # ...and never written
    assert sched.writer.fenced and sched.writer.fenced_drops >= 1
    monkeypatch.undo()
    sched.run_cycle()  # the next cycle belongs to term 2: a writer of its own
    assert sched.writer.drain(5)
    assert binding("p") in api.writes()


def test_the_loop_stops_as_on_a_lost_lease_when_the_fence_fails(
    api: RecordingApi, scheduler: tuple[KubeScheduler, FakeElector]
) -> None:
    sched, elector = scheduler
    sched.options.schedule_period = 0.01
    sched._leading.set()
    lapse_after = 3
    cycle = sched.run_cycle

    def counting_cycle() -> CycleResult:
        out = cycle()
        if sched.cycles >= lapse_after:
            elector.valid = False  # paused past its lease after its third cycle
        return out

    sched.run_cycle = counting_cycle  # type: ignore[method-assign]
    assert sched._schedule_while_leading() == 1
    assert sched.cycles == lapse_after


def test_the_loop_stops_as_on_a_lost_lease_when_the_server_refuses_a_write(
    api: RecordingApi, scheduler: tuple[KubeScheduler, FakeElector]
) -> None:
    sched, elector = scheduler
    sched.options.schedule_period = 0.01
    sched._leading.set()

    def refused() -> None:
        raise denial(403, "ns/p")

    api.on(*binding("p"), refused)
    cycle = sched.run_cycle

    def cycle_then_wait_for_the_writer() -> CycleResult:
        out = cycle()
        assert sched.writer is not None and sched.writer.drain(5)
        return out

    sched.run_cycle = cycle_then_wait_for_the_writer  # type: ignore[method-assign]
    assert sched._schedule_while_leading() == 1  # exit 1: leadership lost, a standby takes over
    assert sched.cycles == 1
    assert [(term, FENCING_POLICY in reason) for term, reason in elector.abandoned] == [(1, True)]
    assert api.writes().count(binding("p")) == 1  # no second attempt, no FailedBinding event
    assert ("POST", "/api/v1/namespaces/ns/events") not in api.writes()
