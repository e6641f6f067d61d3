"""Kubernetes mode's nominations: the planner patches ``status.nominatedNodeName`` of the pods a cycle nominates
(and nulls it for those it clears) only when the cached value differs, the writer sends one merge patch of the
status subresource, and the next snapshot reads the value back (the pod's claim)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import kaisched
from kaisched.framework.result import CycleResult, Eviction, Nomination, Placement
from kaisched.k8s.parse import parse_objects
from kaisched.kube.operations import ObjectRef, OperationPlanner, PodNomination
from kaisched.kube.writer import ClusterWriter
from tests.unit import builders as b
from tests.unit.test_kube_writer import NOW, Cache, Gate, RecordingApi, pod

MERGE = "application/merge-patch+json"


@pytest.fixture
def api() -> RecordingApi:
    return RecordingApi()


@pytest.fixture
def writer(api: RecordingApi) -> Iterator[ClusterWriter]:
    w = ClusterWriter(api, workers=2, sleep=lambda _: None, now=lambda: NOW)
    yield w
    w.close(timeout=5)


def nominated_pod(key: str, node: str) -> dict[str, Any]:
    out = pod(key)
    out["status"]["nominatedNodeName"] = node
    return out


def plan(result: CycleResult, cache: Cache) -> list[Any]:
    return [op for op in OperationPlanner().plan(result, cache.lookup, NOW) if isinstance(op, PodNomination)]


def test_a_nomination_is_one_merge_patch_of_the_pods_status(api, writer):
    cache = Cache(pod("ns/p", "u1"))
    result = CycleResult(pipelined=[Placement("ns/p", "n1")], nominations=[Nomination("ns/p", "n1")])
    ops = plan(result, cache)
    assert [(op.pod.key, op.pod.uid, op.node) for op in ops] == [("ns/p", "u1", "n1")]
    writer.submit(ops)
    assert writer.drain(5)
    (call,) = api.find("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert (call.content_type, call.body) == (MERGE, {"status": {"nominatedNodeName": "n1"}})


def test_a_cleared_nomination_nulls_the_field(api, writer):
    cache = Cache(nominated_pod("ns/p", "n1"))
    writer.submit(plan(CycleResult(nominations=[Nomination("ns/p", "")]), cache))
    assert writer.drain(5)
    (call,) = api.find("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert call.body == {"status": {"nominatedNodeName": None}}


def test_nothing_is_written_when_the_cache_already_shows_it_or_the_pod_is_gone():
    cache = Cache(nominated_pod("ns/p", "n1"), pod("ns/q"))
    result = CycleResult(nominations=[Nomination("ns/p", "n1"), Nomination("ns/q", ""), Nomination("ns/gone", "n2")])
    assert plan(result, cache) == []


def test_a_pod_going_away_is_not_nominated():
    terminating = pod("ns/t", deleting=True)
    cache = Cache(pod("ns/moved"), terminating, nominated_pod("ns/old", "n1"))
    cache.get("Pod", "ns/old")["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    result = CycleResult(evictions=[Eviction("ns/moved", "consolidation", "ns/p", "m")],
                         pipelined=[Placement("ns/moved", "n2"), Placement("ns/t", "n1")],
                         nominations=[Nomination("ns/moved", "n2"), Nomination("ns/t", "n1"), Nomination("ns/old", "")])
    assert plan(result, cache) == []


def test_a_queued_nomination_is_replaced_by_a_later_one(api, writer):
    path = "/api/v1/namespaces/ns/pods/p/status"
    gate = Gate()
    api.fail("PATCH", path, gate)  # the first write blocks: the next ones queue behind it on the pod's lane
    ref = ObjectRef.pod("ns/p", "u1")
    writer.submit([PodNomination(ref, "n1")])
    assert gate.started.wait(5)
    writer.submit([PodNomination(ref, "n2")])
    writer.submit([PodNomination(ref, "")])
    gate.release.set()
    assert writer.drain(5)
    assert [c.body for c in api.find("PATCH", path)] == [{"status": {"nominatedNodeName": "n1"}},
                                                         {"status": {"nominatedNodeName": None}}]


def test_the_written_nomination_is_read_back_and_claims_the_node():
    """Cycle 1 pipelines p onto n1 (a terminating pod holds it); the patch the planner writes, applied to the pod as
    the API server would, gives a pod the next snapshot reads as nominated to n1 — and "early" (same queue and
    priority, ordered first) is kept out of the room it is waiting for."""
    objs = b.flatten(b.node("n1", 4), b.queue("q"), b.pod_group("old", "default", "q", 1, "train"),
                     b.pod("old-0", "default", "old", 4, node="n1", deleting=True),
                     b.pod_group("p", "default", "q", 1, "build", created="2025-01-01T11:00:00Z"),
                     b.pod("p-0", "default", "p", 4, created="2025-01-01T11:00:00Z"))
    first = kaisched.schedule(objs, now=b.NOW)
    assert b.pipelined(first) == {"default/p-0": "n1"}
    cache = Cache(*[o for o in objs if o["kind"] == "Pod"])
    (op,) = plan(first, cache)
    (request,) = op.requests()
    assert (request.method, request.path, request.content_type) == (
        "PATCH", "/api/v1/namespaces/default/pods/p-0/status", MERGE)
    patched = cache.get("Pod", "default/p-0")
    patched["status"].update(request.body["status"])  # (the server's merge patch)
    (parsed,) = parse_objects([patched]).pods
    assert parsed.nominated_node_name == "n1"
    # the old pod is gone: n1 is free, "early" is ordered before p, and p's claim keeps it out
    later = [o for o in objs if o["metadata"]["name"] not in ("old", "old-0")] + [patched]
    later += [b.pod_group("early", "default", "q", 1, "build", created="2025-01-01T10:00:00Z"),
              b.pod("early-0", "default", "early", 4, created="2025-01-01T10:00:00Z")]
    second = kaisched.schedule(later, now=b.NOW)
    assert b.binds(second) == {"default/p-0": "n1"}
    cache.put(patched)
    (clear,) = plan(second, cache)
    assert (clear.pod.key, clear.node) == ("default/p-0", "")
