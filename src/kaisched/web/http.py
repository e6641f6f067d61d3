"""The dashboard's HTTP routes (stdlib only): ``/`` (the page), ``/api/dashboard`` (the data document) and
``/api/explain?job=NAMESPACE/NAME``. Bad requests get a 400 or 404 with a sentence, never a traceback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlsplit

from kaisched.web.model import Dashboard, NotFound, NotReady

#: (status, content type, body)
Response = tuple[int, str, bytes]
JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"

_PAGE: bytes | None = None


def page() -> bytes:
    """The page (a package resource: inline CSS, JS and SVG; nothing fetched from elsewhere)."""
    global _PAGE
    if _PAGE is None:
        _PAGE = resources.files("kaisched.web").joinpath("page.html").read_bytes()
    return _PAGE


def _error(status: int, message: str) -> Response:
    return status, JSON, json.dumps({"error": message}).encode()


def handle(dashboard: Dashboard, target: str) -> Response | None:
    """The response to ``GET target`` when it is a dashboard route, else None (another handler's path)."""
    try:
        parts = urlsplit(target)
    except ValueError:
        return _error(400, f"malformed request target {target!r}")
    path = parts.path
    if path in ("/", "/dashboard", "/dashboard/"):
        return 200, HTML, page()
    if not path.startswith("/api/"):
        return None
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query), max_num_fields=20)
    except ValueError as exc:
        return _error(400, f"malformed query {parts.query!r}: {exc}")
    if path == "/api/dashboard":
        if query:
            return _error(400, f"/api/dashboard takes no parameters, got {', '.join(sorted(query))}")
        body = dashboard.data()
        if body is None:
            return _error(503, "no scheduling cycle has run yet; try again in a moment")
        return 200, JSON, body
    if path == "/api/explain":
        jobs = query.get("job", [])
        unknown = sorted(set(query) - {"job"})
        if unknown or len(jobs) != 1 or not jobs[0].strip():
            return _error(400, "expected exactly one parameter job=NAMESPACE/NAME (a PodGroup or a pod)")
        job = jobs[0].strip()
        if "/" not in job:
            return _error(400, f"job {job!r}: expected NAMESPACE/NAME")
        try:
            return 200, JSON, json.dumps(dashboard.explain(job)).encode()
        except NotFound as exc:
            return _error(404, str(exc))
        except NotReady as exc:
            return _error(503, str(exc))
    return _error(404, f"no such dashboard endpoint {path!r} (try /api/dashboard or /api/explain?job=NS/NAME)")


def reply(request: BaseHTTPRequestHandler, response: Response) -> None:
    status, content_type, body = response
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.send_header("Cache-Control", "no-store")
    request.end_headers()
    request.wfile.write(body)


class DashboardServer:
    """The dashboard alone on an HTTP server (``kaisched dashboard``); ``port=0`` picks a free port."""

    def __init__(self, dashboard: Dashboard, host: str = "127.0.0.1", port: int = 8765) -> None:
        self.dashboard = dashboard
        board = dashboard

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    response = handle(board, self.path) or (404, TEXT, b"not found\n")
                except Exception as exc:  # an internal error is a 500 with a sentence, never a traceback
                    response = _error(500, f"internal error: {type(exc).__name__}: {exc}")
                reply(self, response)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}/"

    def start(self) -> DashboardServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="kaisched-dashboard",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5.0)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
