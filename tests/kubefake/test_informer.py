"""kaisched.kube.informer against the fake API server: lists, watches, relists, backoff, restarts."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from kaisched.kube import resources as R
from kaisched.kube.api import ApiError, Response
from kaisched.kube.backoff import Backoff
from kaisched.kube.client import KubeClient
from kaisched.kube.informer import Informer, Store, WatchEvent, gc_paused
from tests.kubefake.conftest import wait_until
from tests.kubefake.server import FakeApiServer


def pod(name: str, ns: str = "ns", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": "kai-scheduler"}}


def add_pods(client: KubeClient, *names: str, ns: str = "ns", labels: dict[str, str] | None = None) -> None:
    for name in names:
        client.request("POST", R.POD.create_path(ns), body=pod(name, ns, labels))


class Recorder:
    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.lock = threading.Lock()

    def __call__(self, event: WatchEvent) -> None:
        with self.lock:
            self.events.append(event)

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(e.type, e.key) for e in self.events]


MakeInformer = Callable[..., Informer]


# -- listing ------------------------------------------------------------------------------------------


def test_initial_paged_list_fills_the_store(server: FakeApiServer, client: KubeClient,
                                            make_informer: MakeInformer) -> None:
    add_pods(client, *(f"p{i}" for i in range(7)))
    add_pods(client, "q", ns="other")
    server.clear_requests()
    rec = Recorder()
    inf = make_informer(R.POD, on_event=rec, page_size=3)
    assert inf.wait_synced(5)
    assert inf.has_synced and inf.lists == 1
    assert sorted(inf.store.keys()) == sorted([f"ns/p{i}" for i in range(7)] + ["other/q"])
    lists = server.requests_matching("GET", r"^/api/v1/pods", watch=False)
    assert [r.query.get("limit") for r in lists] == ["3", "3", "3"]
    assert "continue" not in lists[0].query and all("continue" in r.query for r in lists[1:])
    assert sorted(rec.seen()) == sorted(("ADDED", k) for k in inf.store)
    obj = inf.store.get("ns/p0")
    assert obj["kind"] == "Pod" and obj["apiVersion"] == "v1"  # filled in for list items
    assert inf.store.revision == 8
    assert server.wait_for_watches(1)
    watch = server.requests_matching("GET", r"^/api/v1/pods", watch=True)[0]
    assert watch.query["allowWatchBookmarks"] == "true"
    assert watch.query["resourceVersion"] == inf.resource_version
    assert 30 <= int(watch.query["timeoutSeconds"]) <= 60


def test_an_expired_continue_token_restarts_the_list(server: FakeApiServer, client: KubeClient,
                                                     make_informer: MakeInformer) -> None:
    add_pods(client, "a", "b", "c", "d", "e")
    server.clear_requests()
    server.fail_next("GET", r"/api/v1/pods\?.*continue=", 410, reason="Expired",
                     message="The provided continue parameter is too old")
    inf = make_informer(R.POD, page_size=2)
    assert inf.wait_synced(5)
    assert len(inf.store) == 5
    first_pages = [r for r in server.requests_matching("GET", r"^/api/v1/pods", watch=False)
                   if "continue" not in r.query]
    assert len(first_pages) == 2  # began again from the first page
    assert inf.errors == 0 and inf.relists == 0


def test_list_errors_back_off_and_retry(server: FakeApiServer, make_informer: MakeInformer) -> None:
    server.fail_next("GET", r"^/api/v1/nodes\?limit", 500, times=2)
    server.fail_next("GET", r"^/api/v1/nodes\?limit", 429, retry_after=0)
    inf = make_informer(R.NODE)
    assert inf.wait_synced(5)
    assert inf.errors == 3
    assert isinstance(inf.last_error, ApiError) and inf.last_error.status == 429


# -- watching -----------------------------------------------------------------------------------------


def test_watch_events_update_the_store(server: FakeApiServer, client: KubeClient,
                                       make_informer: MakeInformer) -> None:
    add_pods(client, "a")
    rec = Recorder()
    inf = make_informer(R.POD, on_event=rec)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    rev = inf.store.revision
    add_pods(client, "b")
    client.request("PATCH", R.POD.object_path("a", "ns"), body={"metadata": {"labels": {"x": "1"}}},
                   content_type="application/merge-patch+json")
    client.request("DELETE", R.POD.object_path("b", "ns"))
    assert wait_until(lambda: len(rec.events) >= 4)
    assert rec.seen() == [("ADDED", "ns/a"), ("ADDED", "ns/b"), ("MODIFIED", "ns/a"), ("DELETED", "ns/b")]
    modified = rec.events[2]
    assert modified.obj["metadata"]["labels"] == {"x": "1"} and modified.old["metadata"]["labels"] == {}
    assert inf.store.keys() == ["ns/a"]
    assert inf.store.revision == rev + 3
    assert inf.resource_version == str(server.resource_version)


def test_bookmarks_advance_the_resource_version(server: FakeApiServer, client: KubeClient,
                                                make_informer: MakeInformer) -> None:
    inf = make_informer(R.POD)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    before = inf.resource_version
    client.request("POST", R.NODE.create_path(), body={"apiVersion": "v1", "kind": "Node",
                                                        "metadata": {"name": "n1"}})
    server.bookmark_now()
    assert wait_until(lambda: inf.resource_version == str(server.resource_version))
    assert inf.resource_version != before
    assert len(inf.store) == 0


def test_selectors_and_namespace(server: FakeApiServer, client: KubeClient, make_informer: MakeInformer) -> None:
    add_pods(client, "a", labels={"app": "x"})
    add_pods(client, "b", labels={"app": "y"})
    add_pods(client, "c", ns="other", labels={"app": "x"})
    by_label = make_informer(R.POD, label_selector="app=x")
    in_ns = make_informer(R.POD, namespace="ns", field_selector="spec.nodeName=")
    assert by_label.wait_synced(5) and in_ns.wait_synced(5)
    assert sorted(by_label.store.keys()) == ["ns/a", "other/c"]
    assert sorted(in_ns.store.keys()) == ["ns/a", "ns/b"]
    assert server.wait_for_watches(2)
    client.request("POST", R.POD.subresource_path("binding", "a", "ns"),
                   body={"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}})
    assert wait_until(lambda: "ns/a" not in in_ns.store)  # no longer matches spec.nodeName=
    assert "ns/a" in by_label.store


def test_custom_and_cluster_scoped_kinds(server: FakeApiServer, client: KubeClient,
                                         make_informer: MakeInformer) -> None:
    client.request("POST", R.QUEUE.create_path(), body={"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                                         "metadata": {"name": "team-a"}, "spec": {}})
    client.request("POST", R.PODGROUP.create_path("ns"), body={
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg"},
        "spec": {"minMember": 2, "queue": "team-a"}})
    queues, groups = make_informer(R.QUEUE), make_informer(R.PODGROUP)
    assert queues.wait_synced(5) and groups.wait_synced(5)
    assert queues.store.keys() == ["team-a"]
    assert groups.store.keys() == ["ns/pg"]
    assert groups.store.get("ns/pg")["spec"]["minMember"] == 2


# -- 410s -----------------------------------------------------------------------------------------------


def test_in_stream_410_relists_without_spurious_events(server: FakeApiServer, client: KubeClient,
                                                       make_informer: MakeInformer) -> None:
    add_pods(client, "a", "b")
    rec = Recorder()
    inf = make_informer(R.POD, on_event=rec)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    server.expire_watches()
    assert wait_until(lambda: inf.lists == 2)
    assert inf.relists == 1 and inf.errors == 0
    assert rec.seen() == [("ADDED", "ns/a"), ("ADDED", "ns/b")]  # nothing changed: nothing reported
    assert server.wait_for_watches(1)
    add_pods(client, "c")
    assert wait_until(lambda: "ns/c" in inf.store)


def test_relist_after_410_reports_missed_deletions_by_diff(server: FakeApiServer, client: KubeClient,
                                                           make_informer: MakeInformer) -> None:
    add_pods(client, "a", "b", "c")
    rec = Recorder()
    inf = make_informer(R.POD, on_event=rec)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    gate = server.pause("GET", r"^/api/v1/pods\?.*watch=true")
    server.drop_connections()  # the watch breaks; its successor waits at the gate
    assert gate.wait_for(1, timeout=5)
    # meanwhile: b deleted, c changed, d added, and history compacted past the informer's resourceVersion
    server.delete_object("v1", "Pod", "b", "ns")
    client.request("PATCH", R.POD.object_path("c", "ns"), body={"metadata": {"labels": {"v": "2"}}},
                   content_type="application/merge-patch+json")
    add_pods(client, "d")
    server.compact()
    gate.release()
    assert wait_until(lambda: inf.relists == 1 and inf.lists == 2)
    assert sorted(inf.store.keys()) == ["ns/a", "ns/c", "ns/d"]
    assert sorted(rec.seen()[3:]) == [("ADDED", "ns/d"), ("DELETED", "ns/b"), ("MODIFIED", "ns/c")]
    deleted = next(e for e in rec.events if e.type == "DELETED")
    assert deleted.obj["metadata"]["name"] == "b"  # the last state the informer knew
    assert inf.errors >= 1  # the cut connection


def test_http_410_on_watch_relists(server: FakeApiServer, make_informer: MakeInformer) -> None:
    server.fail_next("GET", r"^/api/v1/nodes\?.*watch=true", 410, reason="Expired", message="too old")
    inf = make_informer(R.NODE)
    assert wait_until(lambda: inf.lists == 2 and server.open_watches == 1)
    assert inf.relists == 1 and inf.errors == 0


def test_persistent_410_does_not_spin(server: FakeApiServer, make_informer: MakeInformer) -> None:
    server.fail_next("GET", r"^/api/v1/nodes\?.*watch=true", 410, times=10_000)
    inf = make_informer(R.NODE, backoff=Backoff(0.1, 0.4, seed=1))
    time.sleep(1.5)
    requests = server.count("GET", r"^/api/v1/nodes")
    # without backoff this would be thousands; with it: list+watch every <= 0.48 s
    assert 4 <= requests <= 24, requests
    assert inf.relists >= 2


# -- errors, restarts ---------------------------------------------------------------------------------


def test_watch_5xx_and_429_back_off_and_resume_from_the_same_version(
        server: FakeApiServer, client: KubeClient, make_informer: MakeInformer) -> None:
    inf = make_informer(R.POD)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    rv = inf.resource_version
    server.fail_next("GET", r"^/api/v1/pods\?.*watch=true", 500, times=2)
    server.fail_next("GET", r"^/api/v1/pods\?.*watch=true", 429, retry_after=0)
    server.clear_requests()
    server.drop_connections()
    assert wait_until(lambda: server.count("GET", r"^/api/v1/pods", watch=True) == 4 and server.open_watches == 1)
    assert inf.errors == 4  # the cut, two 500s, one 429
    assert inf.relists == 0 and inf.lists == 1  # no relist for a transient error
    watches = server.requests_matching("GET", r"^/api/v1/pods", watch=True)
    assert len(watches) == 4
    assert {w.query["resourceVersion"] for w in watches} == {rv}
    gaps = [b.time - a.time for a, b in itertools.pairwise(watches)]
    assert all(g >= 0.04 for g in gaps), gaps  # backed off between tries
    add_pods(client, "late")
    assert wait_until(lambda: "ns/late" in inf.store)


def test_recovers_from_an_api_server_restart(server: FakeApiServer, client: KubeClient,
                                             make_informer: MakeInformer) -> None:
    add_pods(client, "a")
    rec = Recorder()
    inf = make_informer(R.POD, on_event=rec)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    server.stop()
    server.delete_object("v1", "Pod", "a", "ns")  # changes while the server is down
    server.seed(pod("b"))
    time.sleep(0.3)  # a few refused connections
    server.start()  # like kube-apiserver: a fresh watch cache, older resourceVersions answer 410
    assert wait_until(lambda: inf.store.keys() == ["ns/b"])
    assert sorted(rec.seen()[1:]) == [("ADDED", "ns/b"), ("DELETED", "ns/a")]  # found by the relist's diff
    assert inf.errors >= 2 and inf.relists == 1
    assert wait_until(lambda: server.open_watches == 1)
    add_pods(client, "c")
    assert wait_until(lambda: "ns/c" in inf.store)


def test_restart_that_keeps_watch_history_resumes_without_relisting(
        server: FakeApiServer, client: KubeClient, make_informer: MakeInformer) -> None:
    add_pods(client, "a")
    inf = make_informer(R.POD)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    server.stop()
    server.delete_object("v1", "Pod", "a", "ns")
    server.start(keep_watch_history=True)
    assert wait_until(lambda: len(inf.store) == 0)
    assert inf.relists == 0 and inf.lists == 1  # the DELETED event came through the resumed watch


def test_on_event_failures_do_not_stop_the_informer(server: FakeApiServer, client: KubeClient,
                                                    make_informer: MakeInformer,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    def boom(event: WatchEvent) -> None:
        raise RuntimeError("callback bug")

    inf = make_informer(R.POD, on_event=boom)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    add_pods(client, "a", "b")
    assert wait_until(lambda: len(inf.store) == 2)
    assert "callback bug" in caplog.text


def test_stop_ends_the_thread(server: FakeApiServer, make_informer: MakeInformer) -> None:
    inf = make_informer(R.POD)
    assert inf.wait_synced(5) and server.wait_for_watches(1)
    assert inf.stop(timeout=3)  # the server's bookmarks (every 0.2 s) wake the watch loop
    assert inf.stopped


# -- without a server ---------------------------------------------------------------------------------


class EmptyWatches:
    """An Api whose lists are empty and whose watches end at once without events."""

    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> Response:
        self.calls += 1
        return Response(200, {"metadata": {"resourceVersion": "5"}, "items": []})

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[Any]:
        self.calls += 1
        return iter(())


def test_watches_that_end_at_once_do_not_spin(make_informer: MakeInformer) -> None:
    api = EmptyWatches()
    inf = make_informer(R.NODE, api=api, backoff=Backoff(0.1, 0.2, seed=1))
    time.sleep(1.0)
    assert inf.has_synced
    assert 3 <= api.calls <= 15, api.calls


def test_store_semantics() -> None:
    store = Store(R.POD.key)
    a1 = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "1"}}
    a2 = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "2"}}
    assert store.apply("ADDED", a1) == WatchEvent("ADDED", "n/a", a1, None)
    assert store.apply("MODIFIED", a1) is None  # same version again
    change = store.apply("MODIFIED", a2)
    assert change is not None and change.old is a1
    assert store.revision == 2
    assert store.apply("DELETED", {"metadata": {"name": "zz", "namespace": "n"}}) is None
    rev, snap = store.versioned_snapshot()
    assert (rev, snap) == (2, [a2])
    snap.clear()
    assert len(store) == 1  # snapshots are copies
    b = {"metadata": {"name": "b", "namespace": "n", "resourceVersion": "3"}}
    events = store.replace([b])
    assert sorted((e.type, e.key) for e in events) == [("ADDED", "n/b"), ("DELETED", "n/a")]
    assert store.revision == 4 and store.get("n/a") is None and "n/b" in store


def test_gc_paused_nests_across_threads() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        inner_done = threading.Event()

        def inner() -> None:
            with gc_paused():
                assert not gc.isenabled()
            inner_done.set()

        t = threading.Thread(target=inner)
        t.start()
        t.join(5)
        assert inner_done.is_set()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_informer_rejects_bad_arguments(client: KubeClient) -> None:
    with pytest.raises(ValueError, match="page_size"):
        Informer(client, R.POD, page_size=-1)
    with pytest.raises(ValueError, match="watch_timeout"):
        Informer(client, R.POD, watch_timeout=0)
