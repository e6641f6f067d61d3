"""``/metrics``, ``/healthz`` and ``/readyz`` on one small HTTP server (stdlib, in a daemon thread).

* ``/metrics``: the Prometheus text exposition of :class:`~kaisched.kube.metrics.SchedulerMetrics` (KAI serves
  it on ``:8080``).
* ``/healthz`` (liveness): 200 while every loop registered with :meth:`Health.register_loop` has reported
  (:meth:`Health.beat`) within its allowed silence; 503 naming the stalled loops otherwise, so the kubelet
  restarts a process whose scheduling or watch loop hung.
* ``/readyz`` (readiness): 200 once :meth:`Health.set_synced` was called (the caches completed their first
  list) and until :meth:`Health.set_synced` is called with False; 503 before. Readiness does **not** depend on
  leadership: a standby replica with synced caches is ready (it can take over within one lease period), so a
  rolling update is not blocked by the replicas that are not leading, and ``/metrics`` stays scrapeable through
  the Service on every replica. Whether a replica leads is visible in its Lease, not its readiness.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kaisched.kube.metrics import CONTENT_TYPE

Renderer = Callable[[], bytes]
#: an extra route: ``GET target`` -> (status, content type, body), or None when the path is not its own (the
#: dashboard's routes, added by ``kaisched run``: kube/ itself knows no dashboard)
Route = Callable[[str], "tuple[int, str, bytes] | None"]


class Health:
    """Liveness and readiness state, updated by the process's loops (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._loops: dict[str, tuple[float, float]] = {}  # name -> (max silence s, last beat)
        self._synced = False

    def register_loop(self, name: str, max_silence: float) -> None:
        """A loop that must :meth:`beat` at least every ``max_silence`` seconds (counted from now)."""
        with self._lock:
            self._loops[name] = (max_silence, self._clock())

    def unregister_loop(self, name: str) -> None:
        """A loop that ended on purpose (it no longer counts for liveness)."""
        with self._lock:
            self._loops.pop(name, None)

    def beat(self, name: str) -> None:
        with self._lock:
            entry = self._loops.get(name)
            if entry is not None:
                self._loops[name] = (entry[0], self._clock())

    def set_synced(self, synced: bool = True) -> None:
        with self._lock:
            self._synced = synced

    def stalled(self) -> list[str]:
        """Loops silent for longer than they may be, sorted."""
        now = self._clock()
        with self._lock:
            return sorted(n for n, (limit, last) in self._loops.items() if now - last > limit)

    def live(self) -> bool:
        return not self.stalled()

    def ready(self) -> bool:
        with self._lock:
            return self._synced


class HealthServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz``. ``port=0`` picks a free port (see :attr:`port`)."""

    def __init__(self, health: Health, metrics: Renderer, host: str = "0.0.0.0", port: int = 8080,
                 routes: Sequence[Route] = (), *, builtin: bool = True) -> None:
        """``builtin=False``: serve the ``routes`` only (KAI's plugin server: ``/get-snapshot``)."""
        self.health = health
        self._builtin = builtin
        self._metrics = metrics
        self._routes = routes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return  # no access log on stderr (probes hit these every few seconds)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    def start(self) -> HealthServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="kaisched-health",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0] if self._builtin else ""
        if path == "/metrics":
            try:
                body = self._metrics()
            except Exception as exc:  # a broken collector must not take the endpoint down silently
                self._reply(request, 500, f"metrics unavailable: {exc}\n".encode())
                return
            self._reply(request, 200, body, CONTENT_TYPE)
        elif path in ("/healthz", "/livez"):
            stalled = self.health.stalled()
            if stalled:
                self._reply(request, 503, f"stalled: {', '.join(stalled)}\n".encode())
            else:
                self._reply(request, 200, b"ok\n")
        elif path == "/readyz":
            if self.health.ready():
                self._reply(request, 200, b"ok\n")
            else:
                self._reply(request, 503, b"caches not synced\n")
        else:
            for route in self._routes:
                try:
                    answer = route(request.path)
                except Exception as exc:  # a broken route answers 500 with a sentence, never a traceback
                    answer = (500, "text/plain; charset=utf-8",
                              f"internal error: {type(exc).__name__}: {exc}\n".encode())
                if answer is not None:
                    self._reply(request, answer[0], answer[2], answer[1])
                    return
            self._reply(request, 404, b"not found\n")

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, body: bytes,
               content_type: str = "text/plain; charset=utf-8") -> None:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
