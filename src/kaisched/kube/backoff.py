"""Exponential backoff with jitter, and a retry helper for API calls.

Everything that waits is injectable: the random source (seed it for reproducible delays), the sleep
(a ``threading.Event.wait`` makes a backoff interruptible by a stop signal) and the clock.

Hand-written on purpose, not ``tenacity`` or ``backoff`` (neither is a dependency; each would be one for about
twenty lines): a :class:`Backoff` is a state shared across calls, not a decorator around one. An informer keeps
one and waits its delays out itself on its stop event (``next_delay()``), a failure long after the
previous one starts over as client-go's backoff manager does (``reset_after``), a server's ``retryAfterSeconds``
is a lower bound of the next delay, and the jitter stretches the delay by up to a fraction from a seedable
per-instance random source (those libraries draw full or additive jitter from the global ``random`` module), so
tests and simulations replay the same delays.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kaisched.kube.api import ApiError

__all__ = ["Backoff", "call_with_retries", "retry_after_seconds"]

T = TypeVar("T")


class Backoff:
    """Delays ``initial * factor**n``, capped at ``maximum``, each stretched by up to ``jitter`` (a fraction).

    ``next_delay()`` returns the next delay and advances; ``sleep()`` also waits it out; ``reset()`` starts
    over (call it after a success). With ``reset_after`` set, a failure that comes more than that many
    seconds (by ``clock``) after the previous one starts over too, as client-go's backoff manager does.
    Thread-safe.
    """

    def __init__(
        self,
        initial: float = 0.5,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
        seed: int | None = None,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        reset_after: float | None = None,
    ) -> None:
        if initial <= 0:
            raise ValueError(f"backoff initial delay must be > 0, got {initial}")
        if maximum < initial:
            raise ValueError(f"backoff maximum ({maximum}) must be >= initial ({initial})")
        if factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {factor}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"backoff jitter must be within [0, 1], got {jitter}")
        if reset_after is not None and reset_after <= 0:
            raise ValueError(f"backoff reset_after must be > 0, got {reset_after}")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng if rng is not None else random.Random(seed)
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        self._attempts = 0
        self._last: float | None = None

    @property
    def attempts(self) -> int:
        """Delays handed out since the last reset."""
        return self._attempts

    def next_delay(self) -> float:
        """The delay to wait before the next try; advances the exponent."""
        with self._lock:
            now = self._clock()
            if self.reset_after is not None and self._last is not None and now - self._last > self.reset_after:
                self._attempts = 0
            self._last = now
            base = min(self.maximum, self.initial * self.factor ** min(self._attempts, 64))
            self._attempts += 1
            return min(self.maximum, base * (1.0 + self.jitter * self._rng.random()))

    def sleep(self, at_least: float = 0.0) -> float:
        """Wait for the next delay, or ``at_least`` (capped at ``maximum``) if longer; returns the time waited."""
        delay = max(self.next_delay(), min(at_least, self.maximum))
        self._sleep(delay)
        return delay

    def reset(self) -> None:
        with self._lock:
            self._attempts = 0
            self._last = None


def retry_after_seconds(error: ApiError) -> float:
    """The server's ``details.retryAfterSeconds`` in a 429/5xx ``Status``, or 0."""
    body = error.body
    if isinstance(body, dict):
        details = body.get("details")
        if isinstance(details, dict):
            value = details.get("retryAfterSeconds")
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return float(value)
    return 0.0


def call_with_retries(fn: Callable[[], T], attempts: int, backoff: Backoff) -> T:
    """Call ``fn`` up to ``attempts`` times, backing off between tries on a retryable :class:`ApiError`.

    Non-retryable errors (4xx other than 429) and the last retryable one propagate. A server's
    ``retryAfterSeconds`` is honoured as a lower bound of the delay. The backoff is reset on success.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            result = fn()
        except ApiError as err:
            if not err.retryable or attempt == attempts:
                raise
            backoff.sleep(retry_after_seconds(err))
        else:
            backoff.reset()
            return result
    raise AssertionError("unreachable")  # pragma: no cover
