"""kaisched.kube.leader: Lease-based leader election against the fake API server (short timings)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from kaisched.kube import resources as R
from kaisched.kube.client import KubeClient
from kaisched.kube.leader import LeaderElector
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer

FAST: dict[str, Any] = {"lease_duration": 1.0, "renew_deadline": 0.5, "retry_period": 0.1}
NS, NAME = "kai-scheduler", "kaisched"


class Calls:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.log: list[str] = []

    def on_started(self) -> None:
        self.log.append("started")
        self.started.set()

    def on_stopped(self) -> None:
        self.log.append("stopped")
        self.stopped.set()


@pytest.fixture
def electors(client: KubeClient) -> Iterator[Any]:
    made: list[LeaderElector] = []

    def make(identity: str, calls: Calls | None = None, start: bool = True, **kw: Any) -> LeaderElector:
        opts = {**FAST, **kw}
        if calls is not None:
            opts.update(on_started_leading=calls.on_started, on_stopped_leading=calls.on_stopped)
        el = LeaderElector(client, NS, NAME, identity, seed=len(made), **opts)
        made.append(el)
        if start:
            el.start()
        return el

    yield make
    for el in made:
        el.stop(timeout=3)


def lease(server: FakeApiServer) -> dict[str, Any]:
    obj = server.get_object("coordination.k8s.io/v1", "Lease", NAME, NS)
    assert obj is not None
    spec: dict[str, Any] = obj["spec"]
    return spec


def test_a_single_elector_creates_the_lease_and_leads(server: FakeApiServer, electors: Any) -> None:
    calls = Calls()
    a = electors("a", calls)
    assert calls.started.wait(3)
    assert a.is_leader and a.leader == "a" and a.terms == 1
    spec = lease(server)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"].endswith("Z") and "." in spec["renewTime"]
    first_renew = spec["renewTime"]
    assert wait_until(lambda: lease(server)["renewTime"] != first_renew, 2)  # keeps renewing
    assert lease(server)["acquireTime"] == spec["acquireTime"]


def test_only_one_of_two_leads(server: FakeApiServer, electors: Any) -> None:
    a_calls, b_calls = Calls(), Calls()
    a = electors("a", a_calls)
    b = electors("b", b_calls)
    assert wait_until(lambda: a.is_leader or b.is_leader, 3)
    end = time.monotonic() + 1.5  # longer than a lease: the follower never takes over a renewed lease
    while time.monotonic() < end:
        assert not (a.is_leader and b.is_leader)
        time.sleep(0.01)
    leader, follower = (a, b) if a.is_leader else (b, a)
    assert leader.is_leader and not follower.is_leader
    assert follower.leader == leader.identity
    assert lease(server)["leaseTransitions"] == 0
    assert len(a_calls.log) + len(b_calls.log) == 1


def test_takeover_after_the_leader_stops_renewing(server: FakeApiServer, electors: Any) -> None:
    a_calls, b_calls = Calls(), Calls()
    a = electors("a", a_calls)
    assert a_calls.started.wait(3)
    b = electors("b", b_calls)
    assert wait_until(lambda: b.leader == "a", 2)
    a.stop()  # crashed: no renewals, no release
    assert a_calls.stopped.wait(1) and not a.is_leader
    stopped_at = time.monotonic()
    assert b_calls.started.wait(4)
    waited = time.monotonic() - stopped_at
    assert waited >= 0.8, waited  # not before the lease expired (lease 1 s, seen renewed just before)
    spec = lease(server)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


def test_release_hands_over_at_once(server: FakeApiServer, electors: Any) -> None:
    a_calls, b_calls = Calls(), Calls()
    a = electors("a", a_calls, lease_duration=5.0, renew_deadline=3.0)
    assert a_calls.started.wait(3)
    b = electors("b", b_calls, lease_duration=5.0, renew_deadline=3.0)
    assert wait_until(lambda: b.leader == "a", 2)
    released_at = time.monotonic()
    assert a.release()
    assert a_calls.log == ["started", "stopped"] and not a.is_leader
    assert b_calls.started.wait(2)
    assert time.monotonic() - released_at < 1.5  # far below the 5 s lease
    spec = lease(server)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.release()  # not the holder any more: nothing to release


def test_losing_renewals_past_the_deadline_stops_leading(server: FakeApiServer, electors: Any) -> None:
    calls = Calls()
    a = electors("a", calls)
    assert calls.started.wait(3)
    server.fail_next("PUT", r"/leases/kaisched$", 500, times=10_000)
    failing_since = time.monotonic()
    assert calls.stopped.wait(3)
    assert time.monotonic() - failing_since >= 0.35  # kept trying about renew_deadline (0.5 s)
    assert not a.is_leader
    server.clear_faults()
    assert wait_until(lambda: a.is_leader, 3)  # a candidate again: the lease is still its own
    assert a.terms == 2 and calls.log == ["started", "stopped", "started"]


def test_a_409_on_renew_is_retried_not_fatal(server: FakeApiServer, electors: Any) -> None:
    calls = Calls()
    a = electors("a", calls)
    assert calls.started.wait(3)
    server.clear_requests()
    server.fail_next("PUT", r"/leases/kaisched$", 409, reason="Conflict")
    assert wait_until(lambda: server.count("PUT", r"/leases/kaisched$") >= 3, 3)
    assert a.is_leader and calls.log == ["started"]
    puts = server.requests_matching("PUT", r"/leases/kaisched$")
    assert [r.status for r in puts[:2]] == [409, 200]


def test_concurrent_acquire_only_one_wins(server: FakeApiServer, client: KubeClient, electors: Any) -> None:
    a = electors("a", start=False)
    b = electors("b", start=False)
    assert a.try_acquire_or_renew()
    assert a.release()  # holder now empty: both may acquire at once
    gate = server.pause("PUT", r"/leases/kaisched$")
    results: dict[str, bool] = {}
    threads = [threading.Thread(target=lambda e=e: results.__setitem__(e.identity, e.try_acquire_or_renew()))
               for e in (a, b)]
    for t in threads:
        t.start()
    assert gate.wait_for(2, timeout=3)  # both read the same resourceVersion and wrote
    gate.release()
    for t in threads:
        t.join(3)
    assert sorted(results.values()) == [False, True]
    winner = "a" if results["a"] else "b"
    assert lease(server)["holderIdentity"] == winner
    statuses = sorted(r.status for r in server.requests_matching("PUT", r"/leases/kaisched$")[-2:])
    assert statuses == [200, 409]


def test_takeover_is_judged_by_locally_observed_time(client: KubeClient, server: FakeApiServer) -> None:
    clock = [100.0]
    a = LeaderElector(client, NS, NAME, "a", clock=lambda: clock[0], **FAST)
    b = LeaderElector(client, NS, NAME, "b", clock=lambda: clock[0], **FAST)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # first sight of a's lease
    clock[0] += 0.9
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # a renews (at 100.9)
    clock[0] += 0.5
    assert not b.try_acquire_or_renew()  # b sees the new record at 101.4: its count starts again there
    clock[0] += 0.9
    assert not b.try_acquire_or_renew()  # 102.3: 0.9 s since b saw the renewal
    clock[0] += 0.2
    assert b.try_acquire_or_renew()  # 102.5: expired as far as b has seen
    assert lease(server)["holderIdentity"] == "b" and lease(server)["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a sees b now


def test_a_stale_renew_time_from_another_clock_is_not_trusted(client: KubeClient, server: FakeApiServer) -> None:
    old = "2000-01-01T00:00:00.000000Z"  # written by a machine whose clock is way behind
    client.request("POST", R.LEASE.create_path(NS), body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 1, "acquireTime": old, "renewTime": old,
                 "leaseTransitions": 4}})
    clock = [0.0]
    b = LeaderElector(client, NS, NAME, "b", clock=lambda: clock[0],
                      now=lambda: datetime(2030, 1, 1, tzinfo=UTC), **FAST)
    assert not b.try_acquire_or_renew()
    clock[0] = 1.01
    assert b.try_acquire_or_renew()
    spec = lease(server)
    assert spec["leaseTransitions"] == 5
    assert spec["renewTime"] == "2030-01-01T00:00:00.000000Z" == spec["acquireTime"]


def test_invalid_timings_are_refused(client: KubeClient) -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(client, NS, NAME, "a", lease_duration=5, renew_deadline=5)
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElector(client, NS, NAME, "a", lease_duration=5, renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(client, NS, NAME, "")
