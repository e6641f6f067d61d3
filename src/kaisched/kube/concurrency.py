"""How many writes the :class:`~kaisched.kube.writer.ClusterWriter` keeps in flight: a limit that adapts to the
API server's answers (additive increase, multiplicative decrease, as TCP's congestion window and Netflix's
concurrency-limits do).

* every answer in time (a success, or a refusal that is not the server pushing back) raises the limit by
  ``1 / limit``: one more request in flight per full window of answers, up to ``maximum``;
* answers that queue lower it by ``latency_decrease``: the recent latency (a moving average of the last answers)
  above ``tolerance`` times the baseline (the lowest recent latency seen, drifting up slowly so that it follows a
  server that became slower for good), or above ``latency_target`` outright. Once the server is saturated, more
  requests in flight only wait longer in its queues (measured on the contract tier's server: 48 in flight bound
  no faster than 16, each waiting four times as long), so the limit settles near the knee instead of at the
  maximum. Latency never takes the limit below ``initial`` (a server slowed down by other clients' load is not
  helped by fewer of our requests: only its pushback, below, goes lower), nor counts below ``latency_floor``
  (a fast local server's jitter);
* a **429** (the server's priority-and-fairness or max-in-flight limit) or a **503**/**504** halves it
  (``decrease``), and when the answer carries ``Retry-After`` no new request is let out before that many
  seconds have passed (capped at ``max_pause``);
* a decrease is applied once per window: an answer to a request that was sent before the last decrease says
  nothing new (its fate was sealed under the old limit), so a volley of 429s halves the limit once, not to 1.

:meth:`AdaptiveLimit.acquire` blocks a writer thread until a request may go (fewer than ``limit`` in flight and
no Retry-After pause); :meth:`AdaptiveLimit.release` reports how it went. Pure apart from the lock and the
clock (injected): the unit tests drive it with a fake clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kaisched.kube.api import ApiError

__all__ = ["AdaptiveLimit", "Ticket", "is_pushback"]


def is_pushback(error: ApiError | None) -> bool:
    """The server asks for fewer requests: 429 Too Many Requests, 503 Service Unavailable or 504 (a timeout of
    the server's own handling)."""
    return error is not None and error.status in (429, 503, 504)


class Ticket:
    """One request let out by :meth:`AdaptiveLimit.acquire` (when it left, under which decrease epoch)."""

    __slots__ = ("epoch", "started")

    def __init__(self, started: float, epoch: int) -> None:
        self.started = started
        self.epoch = epoch


class AdaptiveLimit:
    def __init__(self, initial: int = 16, *, minimum: int = 1, maximum: int = 64, latency_target: float = 1.0,
                 decrease: float = 0.5, latency_decrease: float = 0.9, tolerance: float = 2.0,
                 latency_floor: float = 0.05, max_pause: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        refusals = (
            (minimum < 1, f"minimum: must be at least 1, got {minimum}"),
            (maximum < minimum, f"maximum: must be at least minimum ({minimum}), got {maximum}"),
            (not minimum <= initial <= maximum,
             f"initial: must be between minimum ({minimum}) and maximum ({maximum}), got {initial}"),
            (not 0 < decrease < 1, f"decrease: must be between 0 and 1, got {decrease}"),
            (not 0 < latency_decrease < 1, f"latency_decrease: must be between 0 and 1, got {latency_decrease}"),
            (latency_target <= 0, f"latency_target: must be > 0 seconds, got {latency_target}"),
            (tolerance <= 1, f"tolerance: must be > 1, got {tolerance}"),
        )
        for refused, message in refusals:
            if refused:
                raise ValueError(message)
        self.minimum = minimum
        self.maximum = maximum
        self.initial = initial
        self.latency_target = latency_target
        self.decrease = decrease
        self.latency_decrease = latency_decrease
        self.tolerance = tolerance
        self.latency_floor = latency_floor
        self.max_pause = max_pause
        self._recent: float | None = None  # moving average of the last answers' latencies
        self._baseline: float | None = None  # the lowest recent latency, drifting up
        self._clock = clock
        self._limit = float(initial)
        self._in_flight = 0
        self._epoch = 0  # bumped at every decrease
        self._paused_until = 0.0
        self._closed = False
        self._cond = threading.Condition()
        self.pushbacks = 0  # answers that asked for fewer requests (429/503/504)
        self.slow = 0  # answers slower than latency_target
        self.peak = 0  # most requests in flight at once

    # ---- state ------------------------------------------------------------------------------------
    @property
    def limit(self) -> int:
        """Requests allowed in flight now."""
        with self._cond:
            return self._whole()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def paused_for(self) -> float:
        """Seconds until the server's Retry-After pause ends (0: not paused)."""
        with self._cond:
            return max(0.0, self._paused_until - self._clock())

    def _whole(self) -> int:
        return max(self.minimum, min(self.maximum, int(self._limit)))

    # ---- the gate ---------------------------------------------------------------------------------
    def try_acquire(self) -> Ticket | None:
        """A ticket when a request may leave now, else None (never blocks)."""
        with self._cond:
            return self._take()

    def _take(self) -> Ticket | None:  # with the lock held
        now = self._clock()
        if not self._closed and (self._in_flight >= self._whole() or now < self._paused_until):
            return None
        self._in_flight += 1
        self.peak = max(self.peak, self._in_flight)
        return Ticket(now, self._epoch)

    def acquire(self, poll: float = 0.05) -> Ticket:
        """Wait until a request may leave (fewer than :attr:`limit` in flight, no pause); after :meth:`close`,
        at once."""
        with self._cond:
            while True:
                ticket = self._take()
                if ticket is not None:
                    return ticket
                self._cond.wait(poll)

    def cancel(self, ticket: Ticket) -> None:
        """The request of ``ticket`` was not sent after all (nothing learnt)."""
        with self._cond:
            self._in_flight = max(0, self._in_flight - 1)
            self._cond.notify_all()

    def release(self, ticket: Ticket, error: ApiError | None = None) -> None:
        """The answer to the request of ``ticket`` came (``error``: the refusal, None on success)."""
        with self._cond:
            now = self._clock()
            self._in_flight = max(0, self._in_flight - 1)
            latency = now - ticket.started
            current = ticket.epoch == self._epoch  # sent under the current limit
            if is_pushback(error):
                self.pushbacks += 1
                assert error is not None
                if error.retry_after is not None:
                    self._paused_until = max(self._paused_until, now + min(error.retry_after, self.max_pause))
                if current:
                    self._cut(self.decrease)
            elif error is not None and error.status == 0:
                pass  # a lost connection says nothing about the server's queues
            elif self._queueing(latency):
                self.slow += 1
                if current:
                    self._cut(self.latency_decrease, floor=self.initial)
            else:
                self._limit = min(float(self.maximum), self._limit + 1.0 / max(self._limit, 1.0))
            self._cond.notify_all()

    def _queueing(self, latency: float) -> bool:  # with the lock held: one more answer; is the server queueing?
        recent = latency if self._recent is None else self._recent + 0.1 * (latency - self._recent)
        self._recent = recent
        baseline = recent if self._baseline is None else min(self._baseline * 1.002, recent)
        self._baseline = baseline
        if latency > self.latency_target:
            return True
        return recent > self.latency_floor and recent > self.tolerance * max(baseline, self.latency_floor / 2)

    def _cut(self, factor: float, floor: float | None = None) -> None:  # with the lock held
        lowest = float(self.minimum) if floor is None else max(float(self.minimum), floor)
        if self._limit <= lowest:
            return
        self._limit = max(lowest, self._limit * factor)
        self._epoch += 1

    def close(self) -> None:
        """Let every waiting and later :meth:`acquire` through at once (the writer is closing)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def stats(self) -> dict[str, float | int]:
        with self._cond:
            return {"limit": self._whole(), "inFlight": self._in_flight, "peak": self.peak,
                    "pushbacks": self.pushbacks, "slow": self.slow,
                    "recentLatencyMs": round((self._recent or 0.0) * 1000, 1),
                    "baselineLatencyMs": round((self._baseline or 0.0) * 1000, 1),
                    "pausedFor": round(max(0.0, self._paused_until - self._clock()), 3)}
