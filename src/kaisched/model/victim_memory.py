"""Victims remembered across cycles: the pods evicted for a job, kept on the job's PodGroup (docs/evictions.md,
"A pod is evicted once for a preemptor").

KAI grows an elastic job one pod per cycle, and a reclaim that evicts a gang frees more than its preemptor takes: the
rest goes back to whoever allocate orders first, often the victim's own pods. The next cycle's search for the same job
may then evict a pod it evicted before, which has been bound again in between: that pod's work is killed twice for one
preemptor, and the loop can repeat while the job grows. A cycle only sees the cluster as it is now, so the memory of
what was evicted for whom lives in the cluster, on the preemptor's PodGroup: the annotation
``kaisched.io/victims`` maps each pod evicted for the job (``namespace/name``) to when it was evicted, as a JSON object
with sorted keys. An entry lasts ``params.victim-memory`` (default 10 minutes; 0 turns the memory off, KAI's
behaviour) and only while the job has pods waiting; the annotation keeps the ``MAX_ENTRIES`` newest entries.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final

from kaisched.k8s.times import format_rfc3339, parse_rfc3339

#: the PodGroup annotation that holds the job's remembered victims
VICTIMS_ANNOTATION: Final = "kaisched.io/victims"
#: at most this many entries are kept (the newest; among those evicted at the same time, the smallest keys)
MAX_ENTRIES: Final = 512


class VictimMemoryError(ValueError):
    """The annotation's value is not a JSON object of pod keys to RFC3339 times."""


def parse_victims(raw: str) -> dict[str, datetime]:
    """The remembered victims of an annotation's value; :class:`VictimMemoryError` says what is wrong with it."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise VictimMemoryError(f"not JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise VictimMemoryError("expected a JSON object of pod keys (namespace/name) to RFC3339 times")
    return {key: _when(key, when) for key, when in value.items()}


def _when(key: object, when: object) -> datetime:
    if not isinstance(key, str) or key.count("/") != 1 or not all(key.split("/")):
        raise VictimMemoryError(f"{key!r} is not a pod key (namespace/name)")
    if isinstance(when, str):
        try:
            return parse_rfc3339(when)
        except ValueError:
            pass
    raise VictimMemoryError(f"{key}: expected an RFC3339 time, got {when!r}")


def format_victims(victims: dict[str, datetime]) -> str | None:
    """The annotation's value for ``victims`` (None when there are none: the annotation is removed). Deterministic:
    sorted keys, whole seconds; the ``MAX_ENTRIES`` newest are kept, ties by key."""
    if not victims:
        return None
    kept = sorted(victims.items(), key=lambda kv: (-kv[1].timestamp(), kv[0]))[:MAX_ENTRIES]
    return json.dumps({k: format_rfc3339(t) for k, t in sorted(kept)}, separators=(",", ":"))
