"""kaisched.kube.client (on httpx2.MockTransport), kaisched.kube.backoff and kaisched.kube.resources."""

from __future__ import annotations

import json
import random
import ssl
from pathlib import Path
from typing import Any

import httpx2
import pytest

from kaisched.kube import resources as R
from kaisched.kube.api import ApiError
from kaisched.kube.backoff import Backoff, call_with_retries, retry_after_seconds
from kaisched.kube.client import KubeClient, KubeConfigError

# -- helpers ----------------------------------------------------------------------------------------


class Recorder:
    """A MockTransport handler answering from a queue of (status, body | bytes | exception, headers)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else (200, {})
        if isinstance(answer, Exception):
            raise answer
        status, body, *rest = answer
        headers = rest[0] if rest else {}
        if isinstance(body, bytes | httpx2.SyncByteStream):
            if isinstance(body, bytes):
                return httpx2.Response(status, content=body, headers=headers)
            return httpx2.Response(status, stream=body, headers=headers)
        return httpx2.Response(status, json=body, headers=headers)


def client_for(handler: Recorder) -> KubeClient:
    return KubeClient.for_transport(httpx2.MockTransport(handler))


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class Lines(httpx2.SyncByteStream):
    """A response body that yields chunks, then optionally raises (a connection cut mid-stream)."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self.chunks = chunks
        self.error = error

    def __iter__(self):
        yield from self.chunks
        if self.error is not None:
            raise self.error


# -- request shapes and answers ----------------------------------------------------------------------


def test_get_sends_path_params_and_headers_and_decodes_json() -> None:
    rec = Recorder((200, {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []}))
    resp = client_for(rec).request("GET", "/api/v1/pods", params={"limit": "500", "labelSelector": "a in (b,c)"})
    assert resp.status == 200
    assert resp.body == {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []}
    req = rec.requests[0]
    assert req.method == "GET"
    assert req.url.path == "/api/v1/pods"
    assert dict(req.url.params) == {"limit": "500", "labelSelector": "a in (b,c)"}
    assert req.headers["accept"] == "application/json"
    assert req.headers["user-agent"].startswith("kaisched/")
    assert req.content == b""
    assert "content-type" not in req.headers


def test_patch_encodes_body_with_the_given_content_type() -> None:
    rec = Recorder((200, {"metadata": {"name": "p"}}))
    body = {"metadata": {"labels": {"runai-gpu-group": "g1"}, "annotations": {"x": None}}}
    client_for(rec).request("PATCH", "/api/v1/namespaces/ns/pods/p", body=body,
                            content_type="application/merge-patch+json")
    req = rec.requests[0]
    assert req.method == "PATCH"
    assert req.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(req.content) == body


def test_bind_answer_is_a_status_and_is_accepted() -> None:
    success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    rec = Recorder((201, success))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "ns"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    resp = client_for(rec).request("POST", R.POD.subresource_path("binding", "p", "ns"), body=binding)
    assert resp.status == 201
    assert resp.body == success
    assert rec.requests[0].url.path == "/api/v1/namespaces/ns/pods/p/binding"
    assert json.loads(rec.requests[0].content) == binding


def test_empty_answer_decodes_to_none_and_text_answer_to_text() -> None:
    rec = Recorder((200, b""), (200, b"ok", {"content-type": "text/plain"}))
    c = client_for(rec)
    assert c.request("DELETE", "/api/v1/nodes/n1").body is None
    assert c.request("GET", "/healthz").body == "ok"


def test_invalid_json_with_a_json_content_type_is_an_error() -> None:
    rec = Recorder((200, b"{not json", {"content-type": "application/json"}))
    with pytest.raises(ApiError) as exc:
        client_for(rec).request("GET", "/api/v1/nodes")
    assert exc.value.status == 0
    assert exc.value.reason == "InvalidResponse"


def test_status_errors_become_api_errors_with_reason_and_message() -> None:
    msg = 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    rec = Recorder((409, status_body(409, "Conflict", msg)))
    with pytest.raises(ApiError) as exc:
        client_for(rec).request("POST", "/api/v1/namespaces/ns/pods/p/binding", body={})
    err = exc.value
    assert (err.status, err.reason, err.message) == (409, "Conflict", msg)
    assert err.body["code"] == 409
    assert not err.retryable


@pytest.mark.parametrize(("status", "reason", "retryable"), [
    (404, "NotFound", False), (410, "Expired", False), (422, "Invalid", False), (429, "TooManyRequests", True),
    (500, "InternalError", True), (503, "ServiceUnavailable", True), (502, "InternalError", True),
])
def test_non_status_errors_get_the_conventional_reason(status: int, reason: str, retryable: bool) -> None:
    rec = Recorder((status, b"<html>proxy says no</html>", {"content-type": "text/html"}))
    with pytest.raises(ApiError) as exc:
        client_for(rec).request("GET", "/api/v1/nodes")
    err = exc.value
    assert (err.status, err.reason, err.retryable) == (status, reason, retryable)
    assert "proxy says no" in err.message
    assert "GET /api/v1/nodes" in err.message


@pytest.mark.parametrize(("error", "reason"), [
    (httpx2.ConnectError("connection refused"), "ConnectionError"),
    (httpx2.RemoteProtocolError("server disconnected"), "ConnectionError"),
    (httpx2.ReadTimeout("timed out"), "Timeout"),
    (httpx2.ConnectTimeout("timed out"), "Timeout"),
])
def test_transport_failures_are_status_zero(error: Exception, reason: str) -> None:
    with pytest.raises(ApiError) as exc:
        client_for(Recorder(error)).request("GET", "/api/v1/pods")
    assert exc.value.status == 0
    assert exc.value.reason == reason
    assert exc.value.retryable
    assert "GET /api/v1/pods" in exc.value.message


# -- watch streams -----------------------------------------------------------------------------------


def test_stream_adds_watch_and_yields_decoded_lines() -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "2"}}},
              {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}]
    raw = [json.dumps(events[0]).encode()[:10], json.dumps(events[0]).encode()[10:] + b"\n\n",
           json.dumps(events[1]).encode() + b"\n"]
    rec = Recorder((200, Lines(raw)))
    got = list(client_for(rec).stream("/api/v1/pods", params={"resourceVersion": "1"}, timeout=5))
    assert got == events
    assert dict(rec.requests[0].url.params) == {"resourceVersion": "1", "watch": "true"}
    assert rec.requests[0].extensions["timeout"]["read"] == 5


def test_stream_error_before_streaming_is_an_api_error() -> None:
    rec = Recorder((410, status_body(410, "Expired", "too old resource version: 1 (5)")))
    with pytest.raises(ApiError) as exc:
        list(client_for(rec).stream("/api/v1/pods"))
    assert exc.value.status == 410
    assert exc.value.reason == "Expired"


def test_stream_cut_midway_raises_status_zero_after_the_lines_received() -> None:
    line = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode() + b"\n"
    rec = Recorder((200, Lines([line], httpx2.RemoteProtocolError("peer closed connection"))))
    got = []
    with pytest.raises(ApiError) as exc:
        for event in client_for(rec).stream("/api/v1/pods"):
            got.append(event)
    assert len(got) == 1
    assert exc.value.status == 0


def test_stream_with_an_undecodable_line_fails_clearly() -> None:
    rec = Recorder((200, Lines([b"{oops\n"])))
    with pytest.raises(ApiError) as exc:
        list(client_for(rec).stream("/api/v1/pods"))
    assert exc.value.reason == "InvalidResponse"
    assert "{oops" in exc.value.message


# -- configuration through lightkube -----------------------------------------------------------------


def test_from_url_goes_through_lightkube_and_sends_the_bearer_token() -> None:
    rec = Recorder((200, {"kind": "NodeList", "items": []}))
    c = KubeClient.from_url("https://10.0.0.1:6443", token="s3cret", transport=httpx2.MockTransport(rec),
                            namespace="kai")
    c.request("GET", "/api/v1/nodes")
    req = rec.requests[0]
    assert str(req.url) == "https://10.0.0.1:6443/api/v1/nodes"
    assert req.headers["authorization"] == "Bearer s3cret"
    assert c.namespace == "kai"


def test_base_url_path_prefix_is_kept() -> None:
    rec = Recorder((200, {}))
    c = KubeClient.from_url("https://proxy.example/k8s/clusters/c-1", transport=httpx2.MockTransport(rec))
    c.request("GET", "/api/v1/nodes")
    assert rec.requests[0].url.path == "/k8s/clusters/c-1/api/v1/nodes"
    assert "authorization" not in rec.requests[0].headers


def write_kubeconfig(path: Path, server: str = "http://127.0.0.1:1", *, token: str | None = "t",
                     contexts: tuple[str, ...] = ("one",), current: str | None = "one") -> Path:
    conf: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token} if token else {}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u", "namespace": f"ns-{n}"}} for n in contexts],
    }
    if current:
        conf["current-context"] = current
    path.write_text(json.dumps(conf))
    return path


def test_from_kubeconfig_selects_current_or_named_context(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://api.example:6443", contexts=("one", "two"))
    c = KubeClient.from_kubeconfig(path)
    assert c.namespace == "ns-one"
    assert c.base_url.startswith("https://api.example:6443")
    assert c.http.auth is not None
    assert KubeClient.from_kubeconfig(path, context="two").namespace == "ns-two"


def test_kubeconfig_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="no such file"):
        KubeClient.from_kubeconfig(tmp_path / "missing")
    path = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(KubeConfigError, match="nope"):
        KubeClient.from_kubeconfig(path, context="nope")
    no_current = write_kubeconfig(tmp_path / "kc2", current=None)
    with pytest.raises(KubeConfigError, match="context"):
        KubeClient.from_kubeconfig(no_current)
    garbage = tmp_path / "kc3"
    garbage.write_text("clusters: [\n")
    with pytest.raises(KubeConfigError, match="malformed"):
        KubeClient.from_kubeconfig(garbage)


def test_context_without_user_means_no_auth(tmp_path: Path) -> None:
    conf = {"clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c"}}], "current-context": "x"}
    path = tmp_path / "kc"
    path.write_text(json.dumps(conf))
    c = KubeClient.from_kubeconfig(path)
    assert c.namespace == "default"


def _service_account(tmp_path: Path) -> Path:
    cafile = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    if not Path(cafile).is_file():
        pytest.skip("no CA bundle on this machine to stand in for the service account's ca.crt")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "namespace").write_text("kai-scheduler")
    (sa / "ca.crt").write_bytes(Path(cafile).read_bytes())
    return sa


def test_from_env_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _service_account(tmp_path)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    write_kubeconfig(home / ".kube" / "config", "https://home.example", contexts=("home",), current="home")
    env_kc = write_kubeconfig(tmp_path / "env-kc", "https://env.example", contexts=("env",), current="env")
    explicit = write_kubeconfig(tmp_path / "explicit", "https://explicit.example", contexts=("x",), current="x")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{env_kc}")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")

    assert KubeClient.from_env(explicit, service_account_dir=sa).namespace == "ns-x"
    assert KubeClient.from_env(service_account_dir=sa).namespace == "ns-env"
    monkeypatch.delenv("KUBECONFIG")
    in_cluster = KubeClient.from_env(service_account_dir=sa)
    assert in_cluster.namespace == "kai-scheduler"
    assert in_cluster.base_url.startswith("https://10.96.0.1:6443")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert KubeClient.from_env(service_account_dir=sa).namespace == "ns-home"
    (home / ".kube" / "config").unlink()
    with pytest.raises(KubeConfigError, match="no Kubernetes configuration"):
        KubeClient.from_env(service_account_dir=sa)


def test_in_cluster_uses_the_service_account_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _service_account(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    c = KubeClient.in_cluster(sa)
    rec = Recorder((200, {}))
    # same auth object, a mock transport: the token file is read and sent
    mocked = httpx2.Client(transport=httpx2.MockTransport(rec), base_url=c.base_url, auth=c.http.auth)
    mocked.get("/api/v1/nodes")
    assert rec.requests[0].headers["authorization"] == "Bearer sa-token"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        KubeClient.in_cluster(sa)
    with pytest.raises(KubeConfigError, match="in-cluster"):
        KubeClient.in_cluster(tmp_path / "nowhere")


# -- backoff ------------------------------------------------------------------------------------------


def test_backoff_grows_exponentially_with_bounded_jitter_and_cap() -> None:
    b = Backoff(0.1, 1.0, factor=2.0, jitter=0.5, seed=3)
    delays = [b.next_delay() for _ in range(8)]
    bases = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for d, base in zip(delays, bases, strict=True):
        assert base <= d <= min(1.0, base * 1.5) + 1e-12
    assert b.attempts == 8
    b.reset()
    assert 0.1 <= b.next_delay() <= 0.15


def test_backoff_is_reproducible_with_a_seed_and_sleeps_through_the_injected_sleep() -> None:
    slept: list[float] = []
    a = Backoff(0.5, 30, seed=42, sleep=slept.append)
    b = Backoff(0.5, 30, rng=random.Random(42))
    waited = [a.sleep() for _ in range(5)]
    assert waited == [b.next_delay() for _ in range(5)]
    assert slept == waited
    assert a.sleep(at_least=100) == 30  # at_least is capped at maximum


def test_backoff_resets_after_a_quiet_period() -> None:
    now = [0.0]
    b = Backoff(1, 60, jitter=0, clock=lambda: now[0], reset_after=10)
    assert [b.next_delay() for _ in range(3)] == [1, 2, 4]
    now[0] = 5
    assert b.next_delay() == 8
    now[0] = 100
    assert b.next_delay() == 1


def test_backoff_rejects_nonsense() -> None:
    for kwargs in ({"initial": 0}, {"initial": 2, "maximum": 1}, {"factor": 0.5}, {"jitter": 2}):
        with pytest.raises(ValueError):
            Backoff(**kwargs)


def test_call_with_retries_retries_only_retryable_errors() -> None:
    slept: list[float] = []
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ApiError(0, "ConnectionError", "refused")
        if len(calls) == 2:
            raise ApiError(429, "TooManyRequests", "slow down",
                           {"kind": "Status", "details": {"retryAfterSeconds": 3}})
        return "ok"

    b = Backoff(0.1, 10, jitter=0, sleep=slept.append)
    assert call_with_retries(flaky, 5, b) == "ok"
    assert slept == [0.1, 3.0]  # the server's retryAfterSeconds is a floor
    assert b.attempts == 0  # reset on success

    def conflict() -> None:
        raise ApiError(409, "Conflict", "bound")

    with pytest.raises(ApiError, match="409"):
        call_with_retries(conflict, 5, Backoff(sleep=slept.append))

    def down() -> None:
        raise ApiError(503, "ServiceUnavailable", "down")

    slept.clear()
    with pytest.raises(ApiError, match="503"):
        call_with_retries(down, 3, Backoff(0.1, 10, jitter=0, sleep=slept.append))
    assert slept == [0.1, 0.2]
    with pytest.raises(ValueError):
        call_with_retries(down, 0, Backoff())


def test_retry_after_seconds_reads_the_status_details() -> None:
    assert retry_after_seconds(ApiError(429, "x", "y", {"details": {"retryAfterSeconds": 2}})) == 2
    assert retry_after_seconds(ApiError(429, "x", "y", {"details": {"retryAfterSeconds": "2"}})) == 0
    assert retry_after_seconds(ApiError(500, "x", "y", None)) == 0


# -- resources ----------------------------------------------------------------------------------------


def test_resource_paths() -> None:
    assert R.POD.list_path() == "/api/v1/pods"
    assert R.POD.list_path("ns") == "/api/v1/namespaces/ns/pods"
    assert R.POD.object_path("p", "ns") == "/api/v1/namespaces/ns/pods/p"
    assert R.POD.subresource_path("binding", "p", "ns") == "/api/v1/namespaces/ns/pods/p/binding"
    assert R.POD.subresource_path("eviction", "p", "ns") == "/api/v1/namespaces/ns/pods/p/eviction"
    assert R.POD.subresource_path("status", "p", "ns") == "/api/v1/namespaces/ns/pods/p/status"
    assert R.NODE.object_path("n1") == "/api/v1/nodes/n1"
    assert R.PODGROUP.list_path() == "/apis/scheduling.run.ai/v2alpha2/podgroups"
    assert R.PODGROUP.subresource_path("status", "pg", "ns") == \
        "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg/status"
    assert R.QUEUE.object_path("q") == "/apis/scheduling.run.ai/v2/queues/q"
    assert R.QUEUE.create_path() == "/apis/scheduling.run.ai/v2/queues"
    assert R.PRIORITY_CLASS.list_path() == "/apis/scheduling.k8s.io/v1/priorityclasses"
    assert R.TOPOLOGY.list_path() == "/apis/kai.scheduler/v1alpha1/topologies"
    assert R.LEASE.object_path("kai", "kube-system") == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kai"
    assert R.EVENT.create_path("ns") == "/api/v1/namespaces/ns/events"
    assert R.CONFIGMAP.object_path("c", "ns") == "/api/v1/namespaces/ns/configmaps/c"
    assert R.POD.api_version == "v1" and R.PODGROUP.api_version == "scheduling.run.ai/v2alpha2"
    assert R.PODGROUP.qualified_plural == "podgroups.scheduling.run.ai"
    assert set(R.KINDS) == {"Node", "Pod", "PodGroup", "Queue", "PriorityClass", "Topology", "ConfigMap", "Lease",
                            "Event"}


def test_resource_path_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="namespaced"):
        R.POD.object_path("p")
    with pytest.raises(ValueError, match="cluster-scoped"):
        R.NODE.object_path("n", "ns")
    with pytest.raises(ValueError, match="no subresource 'binding'"):
        R.NODE.subresource_path("binding", "n")
    with pytest.raises(ValueError, match="contains '/'"):
        R.POD.object_path("a/b", "ns")
    with pytest.raises(ValueError, match="unknown resource kind 'Job'"):
        R.kind_for("Job")
    assert R.kind_for("Queue") is R.QUEUE


def test_cache_keys() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}}
    assert R.POD.key(pod) == "ns/p"
    assert R.object_key(pod) == "ns/p"
    assert R.NODE.key({"metadata": {"name": "n1"}}) == "n1"
    assert R.QUEUE.key({"metadata": {"name": "q", "namespace": "ignored"}}) == "q"
    assert R.key_for(None, "n") == "n" and R.key_for("ns", "p") == "ns/p"
    with pytest.raises(ValueError, match=r"metadata\.name"):
        R.object_key({"metadata": {}})
    with pytest.raises(ValueError, match=r"without metadata\.namespace"):
        R.POD.key({"metadata": {"name": "p"}})
