"""The Kubernetes write path (issue 28) against the fake API server over HTTP: the adaptive concurrency (a 429 with
Retry-After backs off, successes recover), the write order (a pod's PodGroup before its bind; the grouping annotation
on the Binding), priorities (binds before events), and the event recorder's aggregation and spam filter."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import SchedulerConfig
from kaisched.kube.api import ApiError
from kaisched.kube.client import KubeClient
from kaisched.kube.concurrency import AdaptiveLimit
from kaisched.kube.operations import (
    AGGREGATED_PREFIX,
    Bind,
    CreatePodGroup,
    Event,
    EventMemory,
    ObjectRef,
    PodMetadataPatch,
    fold_grouping,
    new_event,
)
from kaisched.kube.runner import KubeScheduler, RunOptions
from kaisched.kube.writer import ClusterWriter, Failure
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer

NS = "team"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def seed_pods(server: FakeApiServer, count: int) -> dict[str, str]:
    """``count`` pending pods p0..; returns name -> uid."""
    server.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                 "status": {"allocatable": {"cpu": "64", "pods": "110"}}})
    uids = {}
    for i in range(count):
        obj = server.seed({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": NS},
                           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}})
        uids[f"p{i}"] = obj["metadata"]["uid"]
    return uids


def bind(name: str, uid: str, *, group: str = "", annotations: dict[str, str] | None = None) -> Bind:
    return Bind(ObjectRef.pod(f"{NS}/{name}", uid), "n1", annotations=annotations or {},
                pod_group=ObjectRef.pod_group(f"{NS}/{group}").lane if group else "")


def create_group(name: str, pod_name: str = "") -> CreatePodGroup:
    body = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS}, "spec": {"minMember": 1, "queue": "q"}}
    return CreatePodGroup(body, for_pod=ObjectRef.pod(f"{NS}/{pod_name}") if pod_name else None)


@pytest.fixture
def failures() -> list[Failure]:
    return []


@pytest.fixture
def make_writer(client: KubeClient, failures: list[Failure]) -> Iterator[Any]:
    made: list[ClusterWriter] = []

    def make(**kwargs: Any) -> ClusterWriter:
        kwargs.setdefault("on_failure", failures.append)
        kwargs.setdefault("backoff_base", 0.01)
        writer = ClusterWriter(client, **kwargs)
        made.append(writer)
        return writer

    yield make
    for writer in made:
        writer.close(timeout=5.0)


# ------------------------------------------------------------------------------------------ adaptive concurrency
def test_a_429_with_retry_after_halves_the_limit_once_and_holds_requests_back_then_successes_recover(
        server: FakeApiServer, make_writer: Any, failures: list[Failure]) -> None:
    uids = seed_pods(server, 24)
    # (latency never lowers this limit: a loaded test machine's slow answers must not hide what the 429s do)
    steady = AdaptiveLimit(8, maximum=16, latency_target=3600.0, tolerance=1e6)
    writer: ClusterWriter = make_writer(workers=8, max_workers=16, limiter=steady)
    assert writer.limiter.limit == 8
    server.fail_next("POST", r"/pods/p[0-9]+/binding$", 429, times=3, retry_after=1)
    assert writer.submit([bind(f"p{i}", uids[f"p{i}"]) for i in range(8)]) == 8
    assert writer.drain(15)
    assert failures == []  # retried after the pause: every pod bound
    binds = server.requests_matching("POST", r"/binding$")
    refused = [r for r in binds if r.status == 429]
    assert len(refused) == 3
    # the volley of 429s (all sent under the first limit) halved it once, not three times
    assert writer.limiter.pushbacks == 3
    after_429 = [r for r in binds if r.status == 201 and r.time > refused[0].time]
    # nothing was let out within the Retry-After second that followed the first refusal (but the requests already
    # on the wire with it)
    assert all(r.time >= refused[0].time + 0.9 for r in after_429 if r.time > refused[-1].time + 0.05)
    low = writer.limiter.limit
    assert low <= 5  # 8 halved, then a few answers in time
    # successes raise it again, additively
    assert writer.submit([bind(f"p{i}", uids[f"p{i}"]) for i in range(8, 24)]) == 16
    assert writer.drain(15)
    assert writer.limiter.limit > low
    assert writer.stats()["concurrency"]["pushbacks"] == 3


def test_the_client_reads_retry_after_into_the_error(server: FakeApiServer, client: KubeClient) -> None:
    server.fail_next("GET", r"/api/v1/nodes$", 429, retry_after=3)
    with pytest.raises(ApiError) as caught:
        client.request("GET", "/api/v1/nodes")
    assert (caught.value.status, caught.value.retry_after, caught.value.retryable) == (429, 3.0, True)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_adaptive_limit_backs_off_on_pushback_pauses_for_retry_after_and_recovers() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, maximum=32, clock=clock)
    maybe = [limit.try_acquire() for _ in range(16)]
    tickets = [t for t in maybe if t is not None]
    assert len(tickets) == 16 and limit.try_acquire() is None  # 16 in flight: the 17th waits
    clock.t += 0.01
    limit.release(tickets[0], ApiError(429, "TooManyRequests", "slow down", retry_after=2))
    assert limit.limit == 8 and limit.paused_for() == pytest.approx(2.0)
    for t in tickets[1:4]:  # the rest of the volley, sent under the old limit: no further cut
        limit.release(t, ApiError(429, "TooManyRequests", "slow down"))
    assert limit.limit == 8
    for t in tickets[4:]:
        limit.release(t)
    assert limit.try_acquire() is None  # paused: nothing leaves before Retry-After
    clock.t += 2.0
    ticket = limit.try_acquire()
    assert ticket is not None
    limit.release(ticket)
    before = limit.limit
    for _ in range(200):  # answers in time: one more in flight per window of answers
        each = limit.try_acquire()
        assert each is not None
        clock.t += 0.01
        limit.release(each)
    assert before < limit.limit <= 32
    for _ in range(2000):
        more = limit.try_acquire()
        assert more is not None
        limit.release(more)
    assert limit.limit == 32  # never above the maximum


def test_adaptive_limit_sheds_concurrency_that_only_queues_but_never_below_its_initial_value() -> None:
    clock = Clock()
    limit = AdaptiveLimit(4, maximum=64, latency_floor=0.02, clock=clock)

    def answer(latency: float, n: int) -> None:
        for _ in range(n):
            t = limit.try_acquire()
            assert t is not None
            clock.t += latency
            limit.release(t)

    answer(0.01, 400)  # a fast server: grows
    grown = limit.limit
    assert grown > 20
    answer(0.2, 50)  # the same server now queues our requests (20x the baseline): the extra concurrency goes
    assert limit.limit < grown
    answer(0.2, 500)
    assert limit.limit == 4  # ... down to where it started, not lower
    answer(5.0, 5)  # beyond the absolute target: still not below the initial value
    assert limit.limit == 4
    assert limit.stats()["slow"] > 0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"initial": 0}, "initial"), ({"minimum": 0}, "minimum"), ({"maximum": 2, "initial": 4}, "initial"),
    ({"decrease": 1.5}, "decrease"), ({"latency_target": 0}, "latency_target"), ({"tolerance": 1.0}, "tolerance"),
])
def test_adaptive_limit_refuses_bad_settings_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    args = {"initial": 4, **kwargs}
    initial = args.pop("initial")
    with pytest.raises(ValueError, match=field):
        AdaptiveLimit(initial, **args)


# --------------------------------------------------------------------------------------------------- write order
def test_a_bind_waits_for_its_pod_groups_creation_and_carries_the_grouping_annotation(
        server: FakeApiServer, make_writer: Any) -> None:
    uids = seed_pods(server, 2)
    writer: ClusterWriter = make_writer(workers=4)
    gate = server.pause("POST", r"/podgroups$")
    grouping = [PodMetadataPatch(ObjectRef.pod(f"{NS}/p{i}", uids[f"p{i}"]),
                                 annotations={"pod-group-name": f"pg-{i}"}) for i in range(2)]
    binds = [bind("p0", uids["p0"], group="pg-0")]  # p1 is not bound this cycle: its patch stays a patch
    ops = fold_grouping(grouping, binds)
    assert [type(op).__name__ for op in ops] == ["PodMetadataPatch", "Bind"]
    writer.submit([create_group("pg-0", "p0"), create_group("pg-1", "p1")])
    writer.submit(ops)
    assert gate.wait_for(2, 5)  # both creations on the wire, held by the server
    assert wait_until(lambda: server.count("PATCH", r"/pods/p1$") == 1)  # in parallel with the creations
    assert server.count("POST", r"/binding$") == 0
    assert writer.stats()["parked"] == 1  # the bind waits without holding a thread
    assert writer.in_flight_binds() == {f"{NS}/p0": "n1"}
    gate.release()
    assert writer.drain(10)
    order = [(r.method, r.path) for r in server.requests if r.method == "POST"]
    assert order.index(("POST", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{NS}/podgroups")) < \
        order.index(("POST", f"/api/v1/namespaces/{NS}/pods/p0/binding"))
    assert server.count("PATCH", r"/pods/p0$") == 0  # no patch: the annotation rode on the Binding


def test_a_bind_whose_pod_group_could_not_be_created_is_not_sent(server: FakeApiServer, make_writer: Any,
                                                                 failures: list[Failure]) -> None:
    uids = seed_pods(server, 1)
    writer: ClusterWriter = make_writer(workers=2, max_attempts=1)
    server.fail_next("POST", r"/podgroups$", 422, message="spec.queue: Required value")
    writer.submit([create_group("pg-0", "p0"), bind("p0", uids["p0"], group="pg-0")])
    assert writer.drain(10)
    assert server.count("POST", r"/binding$") == 0
    assert [type(f.operation).__name__ for f in failures] == ["CreatePodGroup", "Bind"]
    assert "could not be created" in failures[1].error.message and "spec.queue" in failures[1].error.message
    assert writer.in_flight_binds() == {}  # the next cycle may place the pod again
    # a later creation that succeeds lets a later bind through
    writer.submit([create_group("pg-0", "p0"), bind("p0", uids["p0"], group="pg-0")])
    assert writer.drain(10)
    assert server.count("POST", r"/binding$") == 1


def test_binding_annotations_reach_the_pod(server: FakeApiServer, client: KubeClient, make_writer: Any) -> None:
    uids = seed_pods(server, 1)
    writer: ClusterWriter = make_writer(workers=2)
    (op,) = fold_grouping([PodMetadataPatch(ObjectRef.pod(f"{NS}/p0", uids["p0"]),
                                            annotations={"pod-group-name": "pg-0"})],
                          [bind("p0", uids["p0"])])
    writer.submit([op])
    assert writer.drain(10)
    assert [r.method for r in server.requests_matching(path_regex=r"/pods/p0")] == ["POST"]  # one request
    pod = client.request("GET", f"/api/v1/namespaces/{NS}/pods/p0").body
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"]["pod-group-name"] == "pg-0"


def test_fold_grouping_drops_the_patch_of_a_pod_whose_bind_is_in_flight_and_keeps_label_patches() -> None:
    ref = ObjectRef.pod(f"{NS}/p0", "u0")
    only_annotation = PodMetadataPatch(ref, annotations={"pod-group-name": "pg"})
    with_label = PodMetadataPatch(ObjectRef.pod(f"{NS}/p1", "u1"), labels={"kai.scheduler/subgroup-name": "w"},
                                  annotations={"pod-group-name": "pg"})
    b1 = Bind(ObjectRef.pod(f"{NS}/p1", "u1"), "n1")
    assert fold_grouping([only_annotation, with_label], [b1], binding={f"{NS}/p0"}) == [with_label, b1]


def test_urgent_writes_go_before_queued_events(server: FakeApiServer, make_writer: Any) -> None:
    uids = seed_pods(server, 3)
    writer: ClusterWriter = make_writer(workers=1)
    gate = server.pause("POST", r"/pods/p0/binding$")
    writer.submit([bind("p0", uids["p0"])])  # holds the only slot
    assert gate.wait_for(1, 5)
    events = [new_event(ObjectRef.pod(f"{NS}/p{i}", uids[f"p{i}"]), "Normal", "Note", f"m{i}", NOW, i)
              for i in range(3)]
    writer.submit(events)
    writer.submit([bind("p1", uids["p1"]), bind("p2", uids["p2"])])
    gate.release()
    assert writer.drain(10)
    posts = [r.path.rsplit("/", 2)[-2] if r.path.endswith("binding") else "event"
             for r in server.requests_matching("POST")]
    assert posts == ["p0", "p1", "p2", "event", "event", "event"]


# ------------------------------------------------------------------------------------------------ event recorder
def pod_ref(i: int = 0) -> ObjectRef:
    return ObjectRef.pod(f"{NS}/p{i}", f"uid-{i}")


def test_similar_events_are_combined_into_one_event_whose_count_grows() -> None:
    memory = EventMemory(aggregate_after=3)
    written: list[Event] = []
    for i in range(6):  # one cycle each, a new message every time
        memory.begin()
        ev = memory.event(pod_ref(), "Warning", "FailedBinding", f"attempt {i} failed", NOW + timedelta(seconds=i))
        memory.end(NOW + timedelta(seconds=i))
        assert ev is not None
        written.append(ev)
    assert [e.message for e in written[:2]] == ["attempt 0 failed", "attempt 1 failed"]
    combined = written[2:]
    assert all(e.message.startswith(AGGREGATED_PREFIX) for e in combined)
    assert len({e.event_name for e in combined}) == 1 and [e.count for e in combined] == [1, 2, 3, 4]
    (patch,) = combined[-1].requests()
    assert patch.method == "PATCH" and patch.body == {"count": 4, "lastTimestamp": "2026-01-01T00:00:05Z",
                                                      "message": AGGREGATED_PREFIX + "attempt 5 failed"}
    assert memory.filtered["aggregated"] == 4
    # another reason on the same object, or the same reason on another object, is not combined
    memory.begin()
    other = memory.event(pod_ref(), "Warning", "Unschedulable", "no nodes", NOW)
    elsewhere = memory.event(pod_ref(1), "Warning", "FailedBinding", "attempt 9 failed", NOW)
    assert other is not None and elsewhere is not None
    assert not other.message.startswith(AGGREGATED_PREFIX) and not elsewhere.message.startswith(AGGREGATED_PREFIX)


def test_an_object_over_its_event_rate_gets_no_more_events_until_its_bucket_refills() -> None:
    filtered: list[str] = []
    memory = EventMemory(burst=3, refill_seconds=60.0, aggregate_after=100, on_filtered=filtered.append)

    def emit(i: int, at: datetime, ref: ObjectRef | None = None) -> Event | None:
        memory.begin()
        ev = memory.event(ref or pod_ref(), "Normal", "Reason", f"message {i}", at)
        memory.end(at)
        return ev

    assert all(emit(i, NOW) is not None for i in range(3))
    assert emit(3, NOW + timedelta(seconds=1)) is None  # the burst is spent
    assert emit(4, NOW + timedelta(seconds=2), pod_ref(1)) is not None  # a bucket per object
    assert emit(5, NOW + timedelta(seconds=61)) is not None  # one token back after refill_seconds
    assert emit(6, NOW + timedelta(seconds=62)) is None
    assert filtered == ["spam", "spam"] and memory.filtered["spam"] == 2


@pytest.mark.parametrize(("kwargs", "field"), [({"burst": 0}, "burst"), ({"refill_seconds": 0}, "refill_seconds"),
                                               ({"aggregate_after": 1}, "aggregate_after")])
def test_event_memory_refuses_bad_settings_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        EventMemory(**kwargs)


def test_events_queue_is_bounded_like_client_gos_recorder(server: FakeApiServer, make_writer: Any) -> None:
    uids = seed_pods(server, 1)
    writer: ClusterWriter = make_writer(workers=4, event_workers=1, max_queued_events=2)
    gate = server.pause("POST", r"/events$")
    ref = ObjectRef.pod(f"{NS}/p0", uids["p0"])
    writer.submit([new_event(ref, "Normal", "Note", "first", NOW, 0)])
    assert gate.wait_for(1, 5)  # the one event lane is on the wire
    assert writer.submit([new_event(ref, "Normal", "Note", f"m{i}", NOW, i + 1) for i in range(4)]) == 2
    assert writer.stats()["eventsDropped"] == 2 and writer.stats()["eventsQueued"] == 2
    writer.submit([bind("p0", uids["p0"])])  # other writes are not held back by the event lane
    assert wait_until(lambda: server.count("POST", r"/binding$") == 1)
    gate.release()
    assert writer.drain(10)
    assert server.count("POST", r"/events$") == 3 and writer.stats()["eventsQueued"] == 0


def test_kaisched_run_schedules_with_a_short_gil_switch_interval_and_restores_it(client: KubeClient) -> None:
    seen: list[float] = []
    before = sys.getswitchinterval()
    scheduler = KubeScheduler(client, resolve_config(SchedulerConfig()),
                              RunOptions(listen_port=None, max_cycles=1, dra_version="off", sync_timeout=10))
    scheduler.cycle_listeners.append(lambda *_: seen.append(sys.getswitchinterval()))
    scheduler.start()
    try:
        assert scheduler.run() == 0
    finally:
        scheduler.close()
    assert seen == [pytest.approx(0.0005)]  # while the cycles run: writer threads get the GIL back sooner
    assert sys.getswitchinterval() == before


def test_filtered_events_and_the_writers_limit_are_exported_as_metrics(client: KubeClient) -> None:
    scheduler = KubeScheduler(client, resolve_config(SchedulerConfig()), RunOptions(listen_port=None))
    memory = scheduler.planner.events
    memory.burst = 1
    memory.begin()
    assert memory.event(pod_ref(), "Normal", "Reason", "one", NOW) is not None
    assert memory.event(pod_ref(), "Normal", "Reason", "two", NOW) is None  # over the object's rate
    memory.end(NOW)
    scheduler.metrics.observe_write(24, True)
    text = scheduler.metrics.render().decode()
    assert 'kai_events_filtered_total{reason="spam"} 1.0' in text
    assert "kai_write_concurrency_limit 24.0" in text and "kai_write_pushbacks_total 1.0" in text


def test_a_failed_creation_stops_failing_binds_once_the_cache_shows_the_pod_group(
        server: FakeApiServer, make_writer: Any, failures: list[Failure]) -> None:
    uids = seed_pods(server, 2)
    writer: ClusterWriter = make_writer(workers=2, max_attempts=1)
    server.fail_next("POST", r"/podgroups$", 422, message="spec.queue: Required value")
    writer.submit([create_group("pg-0", "p0"), bind("p0", uids["p0"], group="pg-0")])
    assert writer.drain(10) and len(failures) == 2
    cached: dict[str, Any] = {}
    writer.settle(lambda kind, key: cached.get(f"{kind}:{key}"))
    writer.submit([bind("p1", uids["p1"], group="pg-0")])  # still failing: nothing shows the PodGroup
    assert writer.drain(10) and len(failures) == 3 and server.count("POST", r"/binding$") == 0
    cached[f"PodGroup:{NS}/pg-0"] = {"metadata": {"name": "pg-0", "namespace": NS}}  # a user made it meanwhile
    writer.settle(lambda kind, key: cached.get(f"{kind}:{key}"))
    writer.submit([bind("p1", uids["p1"], group="pg-0")])
    assert writer.drain(10) and len(failures) == 3 and server.count("POST", r"/binding$") == 1


def test_events_wait_while_binds_wait_for_their_pod_groups_but_are_never_starved(
        server: FakeApiServer, make_writer: Any) -> None:
    uids = seed_pods(server, 3)
    events = [new_event(ObjectRef.pod(f"{NS}/p{i}", uids[f"p{i}"]), "Normal", "Note", f"m{i}", NOW, i)
              for i in range(3)]
    writer: ClusterWriter = make_writer(workers=4, event_hold=30.0)
    gate = server.pause("POST", r"/podgroups$")
    writer.submit([create_group("pg-0", "p0"), bind("p0", uids["p0"], group="pg-0")])
    assert gate.wait_for(1, 5)
    assert wait_until(lambda: writer.stats()["parked"] == 1)  # the bind waits for its PodGroup's creation
    writer.submit(events)
    # the bind waits for its PodGroup: one event may start (none started for event_hold), the others wait
    assert wait_until(lambda: server.count("POST", r"/events$") == 1)
    assert not wait_until(lambda: server.count("POST", r"/events$") > 1, timeout=0.5)
    gate.release()
    assert writer.drain(10)
    assert server.count("POST", r"/events$") == 3 and server.count("POST", r"/binding$") == 1

    # a creation that never ends does not starve the events: one starts every event_hold seconds
    starved: ClusterWriter = make_writer(workers=4, event_hold=0.2)
    gate = server.pause("POST", r"/podgroups$")
    starved.submit([create_group("pg-1", "p1"), bind("p1", uids["p1"], group="pg-1")])
    assert gate.wait_for(1, 5) and wait_until(lambda: starved.stats()["parked"] == 1)
    before = server.count("POST", r"/events$")
    starved.submit([new_event(ObjectRef.pod(f"{NS}/p2", uids["p2"]), "Normal", "Note", f"n{i}", NOW, i + 10)
                    for i in range(3)])
    assert wait_until(lambda: server.count("POST", r"/events$") == before + 3, timeout=5)
    assert server.count("POST", r"/binding$") == 1  # (p1's bind still waits for its PodGroup)
    gate.release()
    assert starved.drain(10)


def test_event_hold_must_not_be_negative(client: KubeClient) -> None:
    with pytest.raises(ValueError, match="event_hold"):
        ClusterWriter(client, event_hold=-1)
