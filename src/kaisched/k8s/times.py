"""RFC 3339 times as Kubernetes writes them (``2026-01-01T00:00:00Z``)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_rfc3339(text: str) -> datetime:
    """The time ``text`` names, in UTC when it has no zone; ValueError when it is not an RFC 3339 time."""
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def format_rfc3339(ts: datetime) -> str:
    """``ts`` in UTC, to the second, with ``Z``: the form Kubernetes' metav1.Time writes."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
