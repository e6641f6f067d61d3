"""The narrow seam between kaisched and an API server: one request, one answer.

Everything in :mod:`kaisched.kube` that talks to Kubernetes does it through an :class:`Api`; the real one
is :class:`kaisched.kube.client.KubeClient`, tests pass fakes. Bodies are JSON-compatible values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

JSON = Any


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: JSON  # decoded JSON (a dict for Kubernetes objects and Status), or None


class ApiError(Exception):
    """A request the server refused (4xx/5xx) or could not be sent (``status == 0``)."""

    def __init__(self, status: int, reason: str, message: str, body: JSON = None, *,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        #: seconds the server asked the client to wait (its ``Retry-After`` header on a 429 or 5xx), if any
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Worth retrying after a backoff: throttled, a server error, or no connection."""
        return self.status in (0, 429) or self.status >= 500


class Api(Protocol):
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: JSON = None,
        content_type: str = "application/json",
    ) -> Response:
        """Send one request; raise :class:`ApiError` when the answer is not 2xx."""
        ...

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[JSON]:
        """A watch: yield each decoded JSON line until the server ends the stream."""
        ...
