"""The dashboard's data: one cycle's queue tree, pending jobs and explanations, plus a short history.

Built from a cycle's :class:`~kaisched.framework.result.CycleResult` and the snapshot's jobs through the rows and
explanations of :mod:`kaisched.explain` (never a second scheduler); the JSON document is serialised once per cycle,
so a request only copies bytes."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kaisched import explain
from kaisched.framework.result import CycleResult

#: pending jobs listed in the data document (the total is always given)
MAX_PENDING_LISTED = 500
#: decisions kept in the history (the newest first in the document)
MAX_DECISIONS = 200
#: utilisation samples kept, at most one per ``sample_interval`` seconds (6 h at one a minute)
MAX_SAMPLES = 360


class NotFound(Exception):
    """A job the dashboard does not know (a sentence naming it)."""


class NotReady(Exception):
    """No view of a recent cycle yet: one is built after the next cycle (a sentence saying so)."""


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Sample:
    at: datetime
    used: float
    total: float


class History:
    """Recent decisions (binds, evictions with their reason) and GPU utilisation, kept by the process
    (thread-safe, bounded)."""

    def __init__(self, max_decisions: int = MAX_DECISIONS, max_samples: int = MAX_SAMPLES,
                 sample_interval: float = 60.0) -> None:
        self._lock = threading.Lock()
        self.decisions: deque[dict[str, Any]] = deque(maxlen=max_decisions)
        self.samples: deque[Sample] = deque(maxlen=max_samples)
        self.sample_interval = sample_interval
        self._previous: set[tuple[str, str, str]] = set()

    def record(self, result: CycleResult, now: datetime) -> None:
        at = _rfc3339(now)
        used = total = 0.0
        for n in result.nodes:
            total += n.gpus
            used += n.gpus - n.idle
        made = {("bind", b.pod, b.node): b for b in result.binds}
        evicted = {("evict", e.pod, e.preemptor): e for e in result.evictions}
        with self._lock:
            # a decision repeated from the previous cycle is not new (the files of `kaisched dashboard -f` are
            # scheduled again and again, their decisions never applied)
            for key, b in made.items():
                if key not in self._previous:
                    self.decisions.append({"at": at, "kind": "bind", "pod": b.pod, "node": b.node, "reason": ""})
            for key, e in evicted.items():
                if key not in self._previous:
                    self.decisions.append({"at": at, "kind": "evict", "pod": e.pod, "node": "", "action": e.action,
                                           "preemptor": e.preemptor, "reason": e.message})
            self._previous = {*made, *evicted}
            last = self.samples[-1] if self.samples else None
            if last is not None and (now - last.at).total_seconds() < self.sample_interval:
                self.samples[-1] = Sample(last.at, used, total)  # the latest value of the current interval
            else:
                self.samples.append(Sample(now, used, total))

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"decisions": list(reversed(self.decisions)),
                    "utilisation": [{"at": _rfc3339(s.at), "used": s.used, "total": s.total} for s in self.samples]}


@dataclass(slots=True)
class View:
    """One cycle as the dashboard shows it: the JSON document, and what explanations are made from."""

    body: bytes
    jobs: dict[str, Any]
    result: CycleResult
    pod_keys: dict[str, str]  # pod key -> its job's key
    at: datetime  # the time of the cycle


def build_document(jobs: dict[str, Any], result: CycleResult, now: datetime, history: History,
                   source: str = "") -> tuple[dict[str, Any], CycleResult]:
    """The data document of one cycle (what ``/api/dashboard`` returns)."""
    indexed = result  # (CycleResult is compiled in the shipped core: it is not subclassed here)
    queues = explain.queue_rows(jobs, indexed)
    rows = explain.job_rows(jobs, indexed, now)
    pending = [r for r in rows if r["state"] == "Pending"]
    for r in pending[:MAX_PENDING_LISTED]:
        st = indexed.pod_group(r["name"])
        r["message"] = (st.message if st else None) or ""
    running = sum(1 for r in rows if r["state"] in ("Running", "Allocated"))
    gpus = sum(n.gpus for n in result.nodes)
    idle = sum(n.idle for n in result.nodes)
    doc = {
        "generatedAt": _rfc3339(now),
        "source": source,
        "summary": {"nodes": len(result.nodes), "gpus": gpus, "gpusUsed": gpus - idle, "jobs": len(rows),
                    "runningJobs": running, "pendingJobs": len(pending), "binds": len(result.binds),
                    "evictions": len(result.evictions), "errors": len(result.errors)},
        "queues": queues,
        "pending": pending[:MAX_PENDING_LISTED],
        "pendingTotal": len(pending),
        "errors": [e.to_dict() for e in result.errors[:50]],
        **history.to_dict(),
    }
    return doc, indexed


class Dashboard:
    """The dashboard's state: the latest cycle's view and the history (thread-safe). ``update`` is called once
    per cycle (``cycle`` alone for a cycle whose view is not built); ``data`` and ``explain`` answer requests.

    ``max_view_age`` (seconds; None: any age): an explanation is never from a view built that long before a newer
    cycle ran (``kaisched run`` builds views only while watched: an explain request is a look, and the next cycle
    builds one); until then ``explain`` raises NotReady."""

    def __init__(self, history: History | None = None, source: str = "",
                 clock: Callable[[], float] = time.monotonic, max_view_age: float | None = None) -> None:
        self.history = history or History()
        self.source = source
        self._lock = threading.Lock()
        self._view: View | None = None
        self._clock = clock
        self._requested = -1e18  # clock time of the latest request (kube mode builds views only while watched)
        self._built = -1e18
        self._cycled = -1e18  # clock time of the latest cycle
        self.max_view_age = max_view_age

    def cycle(self, result: CycleResult, now: datetime) -> None:
        """A new cycle whose view is not built (yet): its decisions into the history."""
        self.history.record(result, now)
        self._cycled = self._clock()

    def update(self, jobs: dict[str, Any], result: CycleResult, now: datetime, *, record: bool = True) -> None:
        """A new cycle: its decisions into the history, its view built."""
        if record:
            self.history.record(result, now)
        doc, indexed = build_document(jobs, result, now, self.history, self.source)
        pod_keys = {t.key: key for key, job in jobs.items() for t in job.tasks}
        view = View(json.dumps(doc, separators=(",", ":")).encode(), jobs, indexed, pod_keys, now)
        with self._lock:
            self._view = view
            self._built = self._cycled = self._clock()

    def watched(self, within: float) -> bool:
        """Someone asked for the data within the last ``within`` seconds."""
        return self._clock() - self._requested <= within

    def data_stale(self, seconds: float) -> bool:
        """The view is older than ``seconds`` (or there is none)."""
        return self._clock() - self._built >= seconds

    def has_view(self) -> bool:
        with self._lock:
            return self._view is not None

    def data(self) -> bytes | None:
        """The latest document (None before the first cycle)."""
        self._requested = self._clock()
        with self._lock:
            return None if self._view is None else self._view.body

    def explain(self, job: str) -> dict[str, Any]:
        """The explanation of job (``namespace/name`` of a PodGroup or of one of its pods) in the latest cycle."""
        self._requested = self._clock()
        with self._lock:
            view = self._view
        if view is None:
            raise NotReady("no view of a scheduling cycle yet; one is built after the next cycle")
        built = self._built
        if self.max_view_age is not None and self._cycled > built and self._clock() - built > self.max_view_age:
            raise NotReady(f"the latest view is {self._clock() - built:.0f} s old and newer cycles ran; "
                           "one is built after the next cycle")
        key = job if job in view.jobs else view.pod_keys.get(job)
        if key is None:
            raise NotFound(f"no job or pod {job!r} in the latest cycle")
        return {**explain_key(key, view.jobs, view.result).to_dict(), "cycle": _rfc3339(view.at)}


def explain_key(key: str, jobs: dict[str, Any], result: CycleResult) -> explain.Explanation:
    """The explanation of the snapshot job ``key`` from this cycle's data (no new cycle): the explain module's
    own builder (its public name when it has one)."""
    public: Callable[[str, dict[str, Any], CycleResult], explain.Explanation] | None = getattr(
        explain, "explain_key", None)
    builder = public if public is not None else explain._explain
    return builder(key, jobs, result)
