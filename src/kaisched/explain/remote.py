"""``kaisched explain --scheduler URL``: the explanation a running scheduler gives from its own latest cycle.

``kaisched run`` (and ``kaisched dashboard``) serve ``/api/explain?job=NAMESPACE/NAME`` beside the dashboard
(docs/dashboard.md): the explanation of the job in the cycle the scheduler last ran, built from that cycle's result
(:func:`kaisched.explain.explain_key`), so asking costs one lookup, not a cycle over the whole cluster. The answer
names the time of its cycle (``cycle``). A scheduler that has no view of a recent cycle yet answers 503 and builds one
after its next cycle: the client asks again until ``timeout``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from kaisched.explain import ExplainError, Explanation

#: seconds between two asks while the scheduler answers 503 (no view of a recent cycle yet)
RETRY_EVERY = 0.5
#: the largest answer read (an explanation is a few kilobytes)
MAX_ANSWER_BYTES = 4 << 20


class SchedulerUnreachable(Exception):
    """The scheduler's address cannot be asked, or it gave no usable answer in time (a sentence naming it)."""


@dataclass(slots=True)
class RemoteExplanation:
    explanation: Explanation
    cycle: str  # RFC3339 time of the scheduler's cycle the explanation is from ("" when it does not say)


def explain_url(base: str, namespace: str, name: str) -> str:
    """``base`` (``http[s]://host:port[/prefix]``) joined with the explain route for ``namespace/name``."""
    parts = urllib.parse.urlsplit(base.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SchedulerUnreachable(f"--scheduler {base!r}: expected http://HOST:PORT (the scheduler's metrics "
                                   f"address, where it serves the dashboard)")
    path = parts.path.rstrip("/") + "/api/explain"
    query = urllib.parse.urlencode({"job": f"{namespace}/{name}"})
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def explain_from_scheduler(base: str, namespace: str, name: str, *, timeout: float = 30.0,
                           clock: Callable[[], float] = time.monotonic,
                           sleep: Callable[[float], None] = time.sleep) -> RemoteExplanation:
    """Ask the scheduler at ``base`` to explain PodGroup or pod ``name`` in ``namespace``.

    ExplainError: the scheduler does not know the job (its 404 sentence). SchedulerUnreachable: a bad address,
    a refused or failed connection, an answer that is not an explanation, or still no view after ``timeout``."""
    url = explain_url(base, namespace, name)
    deadline = clock() + max(timeout, 0.0)
    while True:
        left = max(deadline - clock(), 0.1)
        try:
            with urllib.request.urlopen(url, timeout=left) as response:
                body = response.read(MAX_ANSWER_BYTES + 1)
            return _parse(url, body)
        except urllib.error.HTTPError as exc:
            message = _error_sentence(exc)
            if exc.code == 404:
                raise ExplainError(message) from None
            if exc.code != 503:
                raise SchedulerUnreachable(f"{url}: HTTP {exc.code}: {message}") from None
            if clock() + RETRY_EVERY > deadline:
                raise SchedulerUnreachable(f"{url}: no answer within {timeout:g} s ({message})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchedulerUnreachable(f"{url}: cannot be asked: {reason}") from None
        sleep(RETRY_EVERY)


def _parse(url: str, body: bytes) -> RemoteExplanation:
    if len(body) > MAX_ANSWER_BYTES:
        raise SchedulerUnreachable(f"{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise SchedulerUnreachable(f"{url}: the answer is not JSON ({exc})") from None
    try:
        explanation = Explanation.from_dict(data)
    except ExplainError as exc:
        raise SchedulerUnreachable(f"{url}: not an explanation: {exc}") from None
    cycle = data.get("cycle") if isinstance(data, dict) else None
    return RemoteExplanation(explanation, cycle if isinstance(cycle, str) else "")


def _error_sentence(exc: urllib.error.HTTPError) -> str:
    """The ``error`` sentence of a dashboard error answer (the status line otherwise)."""
    try:
        data = json.loads(exc.read(64 << 10) or b"{}")
    except (ValueError, OSError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return str(exc.reason)
