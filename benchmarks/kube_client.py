"""``python -m benchmarks.kube_client``: the Kubernetes client's CPU per request, its two paths side by side.

The writer of ``kaisched run`` sends one request per PodGroup, bind and event; on a small machine shared with the
API server, the client's own CPU per request decides how many it can send (docs/performance.md, "The Kubernetes
write path", second round). This sends the same ``POST .../binding`` (a small JSON body, a small JSON answer) to a
local HTTP/1.1 server in another process, ``--requests`` times per path, from one thread, alternating the paths
``--repeat`` times, and prints the client process's CPU time per request (``time.process_time``: user and system)
of each path and their ratio:

* **httpx2**: :class:`kaisched.kube.client.KubeClient` on its ``httpx2.Client`` (what watches, custom transports,
  proxies and exec credential plugins use);
* **lean**: the same client's lean path (:mod:`kaisched.kube.lean_http`: ``http.client``, one persistent
  connection per thread), what every other request uses.

Both answers are decoded as the client decodes them; the server is the same for both, so its cost is not counted
(another process). ``--smoke``: 200 requests, 1 repetition (CI).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kaisched.kube.client import KubeClient

ANSWER = (b'{"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}')
BODY = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": "0f3c"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-00001"}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(port: Any) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port.value = server.server_address[1]
    server.serve_forever()


def cpu_per_request(send: Callable[[], object], requests: int) -> float:
    """Microseconds of this process's CPU per request (after one warm-up request)."""
    send()
    start = time.process_time()
    for _ in range(requests):
        send()
    return (time.process_time() - start) / requests * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kube_client", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="200 requests, 1 repetition (CI)")
    args = parser.parse_args(argv)
    requests, repeat = (200, 1) if args.smoke else (args.requests, args.repeat)
    port = multiprocessing.Value("i", 0)
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    try:
        deadline = time.monotonic() + 10
        while not port.value and time.monotonic() < deadline:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port.value}"
        path = "/api/v1/namespaces/team/pods/p/binding"
        with KubeClient.from_url(url, token="t0ken", trust_env=False) as client:
            lean = client._lean
            if lean is None:
                raise SystemExit("kube_client: the lean path is not available for a plain local server")
            figures: dict[str, list[float]] = {"httpx2": [], "lean": []}
            for _ in range(repeat):
                client._lean = None  # the httpx2 path
                figures["httpx2"].append(cpu_per_request(lambda: client.request("POST", path, body=BODY), requests))
                client._lean = lean
                figures["lean"].append(cpu_per_request(lambda: client.request("POST", path, body=BODY), requests))
    finally:
        server.terminate()
        server.join(5)
    slow, fast = statistics.median(figures["httpx2"]), statistics.median(figures["lean"])
    print(f"kube_client: {requests} POSTs per path, {repeat} repetition(s), one thread, a local HTTP/1.1 server")
    for name, median in (("httpx2", slow), ("lean", fast)):
        runs = ", ".join(f"{x:.0f}" for x in figures[name])
        print(f"  {name + ' path':<12} {median:7.0f} µs of CPU per request (runs: {runs})")
    print(f"  httpx2 / lean  {slow / fast:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
