"""Plain requests (not watches) to the API server over one persistent HTTP/1.1 connection per thread.

The writer sends a request per PodGroup, bind and event, from up to 64 threads; through ``httpx2`` each costs about
1.2 ms of CPU on the client (its request and response models, the connection pool's lock and per-connection checks,
h11), which the scheduler's process spends under the GIL while the API server, on the same small machine, waits for
work. :class:`LeanHttp` sends the same requests with the standard library's ``http.client`` (about 0.5 ms each;
``python -m benchmarks.kube_client`` measures the two side by side: 1.5-2.3x less CPU per request): each thread
keeps its own connection, so no pool is shared or locked, and a connection is reused for as long as the server
keeps it open.

It is used only where it sends exactly what the ``httpx2.Client`` would (:meth:`LeanHttp.of` says no otherwise):
the client's own transport (no mocked or custom transport, no proxy mounts), and an authentication that sets the
same headers on every request (none, a bearer token, a token file read again as it rotates, basic). An exec
credential plugin, which may have to run again on a 401, stays on ``httpx2``. TLS uses the client's own
``SSLContext`` (its CA, client certificate and verification settings).

A request on a reused connection that the server had closed meanwhile (no answer at all: the connection was reset
or closed before a status line arrived) is sent once more on a new connection, as ``httpcore`` does; anything else
is the caller's to retry (:class:`~kaisched.kube.writer.ClusterWriter` retries what is worth retrying).
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlencode

import httpx2

__all__ = ["LeanAnswer", "LeanHttp", "LeanTransportError"]

#: authentication classes whose flow sets the request's headers in one step, the same way every time
_ONE_STEP_AUTH = ("BearerAuth", "BearerTokenFileAuth", "BasicAuth")
#: how long the headers the authentication set are reused (a token file is read again after that: client-go reads
#: a rotated service-account token within a minute)
AUTH_HEADERS_TTL = 10.0


def _closed_by_server(conn: http.client.HTTPConnection) -> bool:
    """An idle connection the server has closed (or sent something unasked on): readable with nothing pending."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class LeanTransportError(Exception):
    """No answer: the connection failed or timed out (``timeout`` says which)."""

    def __init__(self, message: str, *, timeout: bool) -> None:
        super().__init__(message)
        self.timeout = timeout


class LeanAnswer:
    """A status, the headers the caller reads (lower-cased names) and the body."""

    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status = status
        self.headers = headers
        self.content = content


class LeanHttp:
    """Requests over one persistent connection per thread (module docstring); make one with :meth:`of`."""

    def __init__(self, client: httpx2.Client, host: str, port: int, context: ssl.SSLContext | None,
                 prefix: str, timeout: float | None) -> None:
        self._http = client  # its headers and auth are read per request: what it would send is what we send
        self._host = host
        self._port = port
        self._context = context
        self._prefix = prefix  # the base URL's path ("" for most servers)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conns: dict[threading.Thread, http.client.HTTPConnection] = {}  # one per thread
        self._used: set[threading.Thread] = set()  # threads whose connection carried a request
        self._headers_at = -AUTH_HEADERS_TTL  # (monotonic) when _base_headers were made
        self._base_headers: dict[str, str] = {}

    @classmethod
    def of(cls, client: httpx2.Client) -> LeanHttp | None:
        """The lean path for ``client``'s plain requests, or None where it would not send what ``client`` sends."""
        transport = getattr(client, "_transport", None)
        if type(transport) is not httpx2.HTTPTransport or getattr(client, "_mounts", None):
            return None
        auth = client.auth
        if auth is not None and type(auth).__name__ not in _ONE_STEP_AUTH:
            return None
        url = client.base_url
        if url.scheme not in ("http", "https") or not url.host:
            return None
        context: ssl.SSLContext | None = None
        if url.scheme == "https":
            pool = getattr(transport, "_pool", None)
            context = getattr(pool, "_ssl_context", None)
            if not isinstance(context, ssl.SSLContext):
                return None
        port = url.port or (443 if url.scheme == "https" else 80)
        read = client.timeout.read
        return cls(client, url.host, port, context, url.path.rstrip("/"), read)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection (made now if it has none) and whether it carried a request before."""
        me = threading.current_thread()
        with self._lock:
            held = self._conns.get(me)
            if held is not None and not _closed_by_server(held):
                return held, me in self._used
            if held is not None:  # the server closed it while it was idle: a new one (as httpcore checks)
                self._conns.pop(me).close()
                self._used.discard(me)
            for thread in [t for t in self._conns if not t.is_alive()]:  # a thread that ended: its connection too
                self._conns.pop(thread).close()
                self._used.discard(thread)
            conn: http.client.HTTPConnection
            if self._context is not None:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                                   context=self._context)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._conns[me] = conn
            return conn, False

    def _done(self, *, keep: bool) -> None:
        """The request on this thread's connection is over: keep the connection for the next, or close it."""
        me = threading.current_thread()
        with self._lock:
            if keep:
                self._used.add(me)
                return
            conn = self._conns.pop(me, None)
            self._used.discard(me)
        if conn is not None:
            conn.close()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        """The client's headers and what its authentication adds (made again every ``AUTH_HEADERS_TTL``),
        without ``Accept-Encoding`` (answers come uncompressed) and with ``content_type``."""
        now = time.monotonic()
        with self._lock:
            if now - self._headers_at >= AUTH_HEADERS_TTL:
                request = httpx2.Request("GET", self._http.base_url, headers=self._http.headers)
                auth = self._http.auth
                if auth is not None:
                    request = next(auth.sync_auth_flow(request))
                self._base_headers = {k: v for k, v in request.headers.items()
                                      if k.lower() not in ("accept-encoding", "host", "content-length")}
                self._headers_at = now
            headers = dict(self._base_headers)
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                content: bytes | None = None, content_type: str | None = None) -> LeanAnswer:
        """Send one request and read its whole answer; :class:`LeanTransportError` when none came."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = self._headers(content_type if content is not None else None)
        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=content, headers=headers)
                answer = conn.getresponse()
                body = answer.read()
            except TimeoutError as exc:
                self._done(keep=False)
                raise LeanTransportError(f"timed out: {exc}", timeout=True) from exc
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError) as exc:
                self._done(keep=False)
                if reused and attempt == 0:
                    continue  # the server closed the idle connection before we wrote: once more, on a new one
                raise LeanTransportError(str(exc) or type(exc).__name__, timeout=False) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._done(keep=False)
                raise LeanTransportError(str(exc) or type(exc).__name__, timeout=False) from exc
            self._done(keep=not answer.will_close)
            return LeanAnswer(answer.status, {k.lower(): v for k, v in answer.getheaders()}, body)
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def close(self) -> None:
        """Close every connection (a request still on one fails with a transport error)."""
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
            self._used.clear()
        for conn in conns:
            conn.close()
