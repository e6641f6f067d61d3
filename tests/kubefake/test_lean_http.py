"""The lean request path of :class:`~kaisched.kube.client.KubeClient` (kaisched.kube.lean_http): one persistent
connection per thread, the client's headers and authentication, errors as the httpx2 path reports them, a connection
the server closed meanwhile replaced once, and the clients it must not serve."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest

from kaisched.kube.api import ApiError
from kaisched.kube.client import USER_AGENT, KubeClient
from kaisched.kube.lean_http import LeanHttp


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, tuple[str, int], dict[str, str], bytes]] = []
        self.answers: list[tuple[int, dict[str, str], bytes]] = []  # served first, in order
        self.close_after = False  # close each connection after answering (without saying so)
        self.delay = 0.0


@pytest.fixture
def http_server() -> Iterator[tuple[str, _Recorder]]:
    rec = _Recorder()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with rec.lock:
                headers = {k.lower(): v for k, v in self.headers.items()}  # (names are case-insensitive)
                rec.seen.append((self.command, self.path, self.client_address, headers, body))
                status, headers, content = rec.answers.pop(0) if rec.answers else (
                    200, {"Content-Type": "application/json"}, b'{"kind": "Pod", "metadata": {"name": "p"}}')
            if rec.delay:
                threading.Event().wait(rec.delay)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)
            self.wfile.flush()
            if rec.close_after:
                self.close_connection = True

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", rec
    finally:
        server.shutdown()
        server.server_close()


def test_requests_reuse_one_connection_per_thread_and_carry_the_clients_headers(
        http_server: tuple[str, _Recorder]) -> None:
    url, rec = http_server
    with KubeClient.from_url(url, token="s3cret", trust_env=False) as client:
        assert client._lean is not None
        for i in range(3):
            answer = client.request("POST", f"/api/v1/namespaces/ns/pods/p{i}/binding", body={"n": i})
            assert answer.status == 200 and answer.body == {"kind": "Pod", "metadata": {"name": "p"}}
        other = threading.Thread(target=lambda: client.request("GET", "/api/v1/nodes", params={"limit": "5"}))
        other.start()
        other.join()
    assert [(m, p) for m, p, *_ in rec.seen] == [
        ("POST", "/api/v1/namespaces/ns/pods/p0/binding"), ("POST", "/api/v1/namespaces/ns/pods/p1/binding"),
        ("POST", "/api/v1/namespaces/ns/pods/p2/binding"), ("GET", "/api/v1/nodes?limit=5")]
    ports = [addr[1] for _, _, addr, _, _ in rec.seen]
    assert ports[0] == ports[1] == ports[2] != ports[3]  # one persistent connection per thread
    headers = rec.seen[0][3]
    assert headers["authorization"] == "Bearer s3cret" and headers["user-agent"] == USER_AGENT
    assert headers["content-type"] == "application/json" and headers["accept"] == "application/json"
    assert rec.seen[0][4] == b'{"n":0}'


def test_refusals_and_retry_after_read_as_on_the_httpx2_path(http_server: tuple[str, _Recorder]) -> None:
    url, rec = http_server
    status = (b'{"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "message": "slow down",'
              b' "code": 429}')
    rec.answers = [(429, {"Content-Type": "application/json", "Retry-After": "2"}, status),
                   (500, {"Content-Type": "text/plain"}, b"boom")]
    with KubeClient.from_url(url, trust_env=False) as client:
        with pytest.raises(ApiError) as first:
            client.request("POST", "/api/v1/namespaces/ns/events", body={})
        with pytest.raises(ApiError) as second:
            client.request("GET", "/api/v1/pods")
        assert client.request("GET", "/api/v1/pods").status == 200  # the connection is still good
    assert (first.value.status, first.value.reason, first.value.message, first.value.retry_after) == (
        429, "TooManyRequests", "slow down", 2.0)
    assert second.value.status == 500 and "boom" in second.value.message
    assert "authorization" not in rec.seen[0][3]


def test_a_connection_the_server_closed_is_replaced_once(http_server: tuple[str, _Recorder]) -> None:
    url, rec = http_server
    rec.close_after = True  # every connection closed after its first answer, without a Connection: close
    with KubeClient.from_url(url, trust_env=False) as client:
        for i in range(4):
            assert client.request("PATCH", f"/api/v1/namespaces/ns/pods/p{i}", body={"a": i}).status == 200
    assert len(rec.seen) == 4  # each request sent once, the ones after the first on a new connection
    assert len({addr for _, _, addr, _, _ in rec.seen}) == 4


def test_no_answer_in_time_is_a_timeout_and_no_server_a_connection_error(http_server: tuple[str, _Recorder]) -> None:
    url, rec = http_server
    rec.delay = 1.0
    with KubeClient.from_url(url, trust_env=False, timeout=0.2) as client, pytest.raises(ApiError) as slow:
        client.request("GET", "/api/v1/pods")
    assert slow.value.status == 0 and slow.value.reason == "Timeout"
    with (KubeClient.from_url("http://127.0.0.1:1", trust_env=False, timeout=1.0) as client,
          pytest.raises(ApiError) as refused):
        client.request("GET", "/api/v1/pods")
    assert refused.value.status == 0 and refused.value.reason == "ConnectionError"


def test_clients_it_must_not_serve_stay_on_httpx2() -> None:
    mocked = httpx2.Client(transport=httpx2.MockTransport(lambda r: httpx2.Response(200)), base_url="http://x")
    assert LeanHttp.of(mocked) is None  # a custom transport (tests, proxies) decides what is sent
    proxied = httpx2.Client(base_url="https://kube.test", mounts={"all://": httpx2.HTTPTransport()})
    assert LeanHttp.of(proxied) is None

    class ExecAuth(httpx2.Auth):  # may run again on a 401: not one step
        def auth_flow(self, request: httpx2.Request) -> Iterator[httpx2.Request]:
            yield request

    assert LeanHttp.of(httpx2.Client(base_url="https://kube.test", auth=ExecAuth())) is None
    assert LeanHttp.of(httpx2.Client(base_url="https://kube.test", auth=("u", "p"))) is not None
    for client in (mocked, proxied):
        client.close()
