"""A fake Ray dashboard (its job REST API) for KubeRay in the operator tier: no Ray runs here.

KubeRay talks to a Ray cluster's dashboard at ``http://<head service>.<namespace>.svc.cluster.local:8265``, a
name only cluster DNS resolves. The operator is started with ``HTTP_PROXY`` naming this server, so Go's HTTP
client sends it those requests (absolute URIs, as to a forward proxy); the API server, reached over HTTPS on
loopback, is not proxied. It answers the calls KubeRay makes for a RayJob in ``HTTPMode``:

- ``POST /api/jobs/``: a job submitted (``submission_id`` from the request), now ``RUNNING``;
- ``GET /api/jobs/<id>``: the job's status (404 for an unknown job, which makes KubeRay submit it);
- ``POST /api/jobs/<id>/stop``: stopped.

:meth:`FakeRayDashboard.finish` ends a job (``SUCCEEDED`` or ``FAILED``), as Ray would when its entrypoint exits.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

JOBS_PATH = "/api/jobs/"


class FakeRayDashboard:
    """The job API of every Ray dashboard KubeRay asks (one job table for all clusters)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []  # "METHOD host/path", in order
        self._lock = threading.Lock()
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def do_GET(self) -> None:
                dashboard._answer(self, "GET")

            def do_POST(self) -> None:
                dashboard._answer(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeRayDashboard:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-ray-dashboard", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    def __enter__(self) -> FakeRayDashboard:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def finish(self, submission_id: str, status: str = "SUCCEEDED") -> None:
        """End a submitted job with ``status`` (KeyError for a job never submitted)."""
        with self._lock:
            job = self.jobs[submission_id]
            job.update(status=status, end_time=int(time.time() * 1000), message=f"Job finished: {status}")

    def status(self, submission_id: str) -> str | None:
        with self._lock:
            job = self.jobs.get(submission_id)
            return None if job is None else str(job["status"])

    # ---------------------------------------------------------------- the API
    def _answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        path = url.path
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append(f"{method} {url.netloc}{path}")
            code, body = self._route(method, path, raw)
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        if not path.startswith(JOBS_PATH):
            return 404, {"error": f"no such endpoint {path}"}
        rest = path[len(JOBS_PATH):].strip("/")
        if method == "POST" and not rest:
            request = json.loads(raw or b"{}")
            sid = str(request.get("submission_id") or f"raysubmit_{len(self.jobs)}")
            self.jobs[sid] = {"status": "RUNNING", "job_id": sid, "submission_id": sid,
                              "entrypoint": request.get("entrypoint", ""), "message": "Job is running.",
                              "start_time": int(time.time() * 1000)}
            return 200, {"job_id": sid, "submission_id": sid}
        sid, _, action = rest.partition("/")
        job = self.jobs.get(sid)
        if job is None:
            return 404, {"error": f"Job {sid} does not exist"}
        if method == "POST" and action == "stop":
            job.update(status="STOPPED", end_time=int(time.time() * 1000))
            return 200, {"stopped": True}
        if method == "GET" and not action:
            return 200, dict(job)
        return 404, {"error": f"no such endpoint {method} {path}"}
