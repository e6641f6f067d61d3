"""A fake kubelet for the contract tier: the API server alone never runs or finishes a pod.

A background thread lists and watches pods (one namespace, or all) and

- marks every pod that has ``spec.nodeName`` and is not yet Running/Succeeded/Failed as
  ``status.phase=Running`` with ``startTime``, Ready conditions and running container statuses (a
  strategic-merge patch of ``pods/{name}/status``);
- deletes, with ``gracePeriodSeconds=0`` and a uid precondition, every pod that has a
  ``metadata.deletionTimestamp``: without a kubelet an evicted or deleted pod that has run stays
  Terminating forever.

It relists after a 410, reconnects with a short backoff when the API server goes away (for example during
``KubeApiServer.restart_apiserver()``), and stops within a second of :meth:`FakeKubelet.stop`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2

JSON = dict[str, Any]
TERMINAL_OR_RUNNING = frozenset({"Running", "Succeeded", "Failed"})
WATCH_SECONDS = 30
REQUEST_TIMEOUT_S = 10.0
BACKOFF_S = (0.1, 0.2, 0.5, 1.0)


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): relist."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shutdown_socket(response: httpx2.Response) -> None:
    """Shut the response's socket down from another thread so that a blocked read returns at once.

    Closing the response from another thread does not unblock the read; shutting the socket down does. The
    plain ``socket.shutdown`` is called, not ``SSLSocket.shutdown``, which would drop the TLS state under the
    reading thread.
    """
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _key(pod: JSON) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class FakeKubelet:
    """Runs and reaps pods on an API server that has no kubelet. Use as a context manager or start()/stop()."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        ca_path: Path | str | None = None,
        namespace: str | None = None,
        run_pods: bool = True,
        reap_deleted: bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.namespace = namespace
        self.run_pods = run_pods
        self.reap_deleted = reap_deleted
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_path)) if ca_path else False
        self._client = httpx2.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            verify=verify,
            timeout=REQUEST_TIMEOUT_S,
            trust_env=False,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: httpx2.Response | None = None
        self._cond = threading.Condition()
        self._patched_uids: set[str] = set()
        self._deleted_uids: set[str] = set()
        self.marked_running: list[str] = []  # "namespace/name", in order
        self.deleted: list[str] = []
        self.errors: list[str] = []  # connection losses and refused writes, for diagnosis
        self.relists = 0

    @classmethod
    def for_server(cls, server: Any, **kwargs: Any) -> FakeKubelet:
        """Build one for a :class:`tests.kube.apiserver.KubeApiServer` (url, token, CA)."""
        return cls(server.url, server.token, ca_path=server.ca_path, **kwargs)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> FakeKubelet:
        if self._thread is not None:
            raise RuntimeError("FakeKubelet already started")
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            _shutdown_socket(response)  # unblocks the watch's read; the kubelet thread closes the response
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"fake kubelet did not stop within {timeout} s")
        self._client.close()

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- test helpers

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
        """Wait until ``predicate()`` (checked after each action of the kubelet) holds; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"fake kubelet: {what} not reached within {timeout} s "
                        f"(running={self.marked_running[-10:]}, deleted={self.deleted[-10:]}, "
                        f"errors={self.errors[-5:]})"
                    )
                self._cond.wait(min(left, 0.2))

    def wait_synced(self, timeout: float = 15.0) -> None:
        """Wait for the first list: from then on, every pod change reaches the kubelet."""
        self.wait_for(lambda: self.relists >= 1, timeout, "first pod list")

    def wait_running(self, namespace: str, name: str, timeout: float = 15.0) -> None:
        key = f"{namespace}/{name}"
        self.wait_for(lambda: key in self.marked_running, timeout, f"pod {key} marked Running")

    def wait_deleted(self, namespace: str, name: str, timeout: float = 15.0) -> None:
        key = f"{namespace}/{name}"
        self.wait_for(lambda: key in self.deleted, timeout, f"pod {key} deleted")

    def finish(self, namespace: str, name: str, phase: str = "Succeeded") -> None:
        """End a pod as a kubelet would when its containers exit (``Succeeded`` or ``Failed``)."""
        if phase not in ("Succeeded", "Failed"):
            raise ValueError(f"pod {namespace}/{name}: phase must be Succeeded or Failed, not {phase!r}")
        answer = self._client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        answer.raise_for_status()
        pod = answer.json()
        now = _now()
        exit_code = 0 if phase == "Succeeded" else 1
        statuses = [
            {
                "name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                         "startedAt": now, "finishedAt": now}},
            }
            for c in pod.get("spec", {}).get("containers", [])
        ]
        patch = {
            "status": {
                "phase": phase,
                "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "PodCompleted"},
                    {"type": "ContainersReady", "status": "False", "lastTransitionTime": now,
                     "reason": "PodCompleted"},
                ],
                "containerStatuses": statuses,
            }
        }
        self._patch_status(namespace, name, patch).raise_for_status()

    # ---------------------------------------------------------------- the loop

    def _pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods" if self.namespace else "/api/v1/pods"

    def _run(self) -> None:
        rv: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    with self._cond:
                        self.relists += 1
                        self._cond.notify_all()
                rv = self._watch(rv)
                failures = 0
            except _Expired:
                rv = None
            except Exception as exc:  # connection refused/reset while the server restarts, 5xx, ...
                if self._stop.is_set():
                    break
                self._note_error(f"{type(exc).__name__}: {exc}")
                self._stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
                failures += 1

    def _list(self) -> str:
        answer = self._client.get(self._pods_path(), params={"limit": "500"})
        answer.raise_for_status()
        body = answer.json()
        rv: str = body["metadata"]["resourceVersion"]
        items: list[JSON] = body.get("items") or []
        cont = body["metadata"].get("continue")
        while cont:
            answer = self._client.get(self._pods_path(), params={"limit": "500", "continue": cont})
            answer.raise_for_status()
            page = answer.json()
            items.extend(page.get("items") or [])
            cont = page["metadata"].get("continue")
        for pod in items:
            self._handle(pod)
        return rv

    def _watch(self, rv: str) -> str:
        params = {
            "watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS),
        }
        timeout = httpx2.Timeout(REQUEST_TIMEOUT_S, read=WATCH_SECONDS + REQUEST_TIMEOUT_S)
        with self._client.stream("GET", self._pods_path(), params=params, timeout=timeout) as response:
            self._response = response
            try:
                if self._stop.is_set():  # stop() may have looked for the response before it was set
                    return rv
                if response.status_code == 410:
                    raise _Expired()
                if response.status_code != 200:
                    response.read()
                    raise RuntimeError(f"watch answered {response.status_code}: {response.text[:300]}")
                for event in self._events(response):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Expired()
                        raise RuntimeError(f"watch error event: {obj}")
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if kind in ("ADDED", "MODIFIED"):
                        self._handle(obj)
            finally:
                self._response = None
        return rv

    def _events(self, response: httpx2.Response) -> Iterator[JSON]:
        for line in response.iter_lines():
            if self._stop.is_set():
                return
            if line.strip():
                yield json.loads(line)

    def _handle(self, pod: JSON) -> None:
        meta = pod.get("metadata", {})
        uid = meta.get("uid", "")
        if meta.get("deletionTimestamp"):
            if self.reap_deleted and uid not in self._deleted_uids:
                self._delete(pod)
            return
        phase = pod.get("status", {}).get("phase")
        if (
            self.run_pods
            and pod.get("spec", {}).get("nodeName")
            and phase not in TERMINAL_OR_RUNNING
            and uid not in self._patched_uids
        ):
            self._mark_running(pod)

    def _mark_running(self, pod: JSON) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        now = _now()
        ready = [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("Initialized", "ContainersReady", "Ready", "PodScheduled")
        ]
        statuses = [
            {
                "name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
                "restartCount": 0, "state": {"running": {"startedAt": now}},
            }
            for c in spec.get("containers", [])
        ]
        patch = {
            "status": {
                "phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                "conditions": ready, "containerStatuses": statuses,
            }
        }
        answer = self._patch_status(meta["namespace"], meta["name"], patch)
        if answer.status_code == 404:
            return
        if answer.status_code >= 300:
            self._note_error(f"status patch of pod {_key(pod)} answered {answer.status_code}: {answer.text[:300]}")
            return
        with self._cond:
            self._patched_uids.add(meta["uid"])
            self.marked_running.append(_key(pod))
            self._cond.notify_all()

    def _delete(self, pod: JSON) -> None:
        meta = pod["metadata"]
        body = {
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        answer = self._client.request(
            "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", json=body
        )
        if answer.status_code >= 300 and answer.status_code not in (404, 409):
            self._note_error(f"delete of pod {_key(pod)} answered {answer.status_code}: {answer.text[:300]}")
            return
        with self._cond:
            self._deleted_uids.add(meta["uid"])
            self.deleted.append(_key(pod))
            self._cond.notify_all()

    def _patch_status(self, namespace: str, name: str, patch: JSON) -> httpx2.Response:
        return self._client.patch(
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            content=json.dumps(patch).encode(),
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )

    def _note_error(self, message: str) -> None:
        with self._cond:
            self.errors.append(message)
            del self.errors[:-100]
