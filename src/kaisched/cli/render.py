"""Human-readable output of a cycle: decisions, queues, pending PodGroups, input errors, GPUs per node."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kaisched.framework.result import CycleResult, NodeGpuStatus, QueueStatus, SharedGpuStatus

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def _gpu(v: float) -> str:
    return "∞" if v == -1 else f"{v:g}"


def _cpu(v: float) -> str:
    return "∞" if v == -1 else f"{v / 1000:g}"


def _mem(v: float) -> str:
    return "∞" if v == -1 else f"{v / 2**30:.1f}"


def _triple(q: dict[str, float]) -> str:
    return f"{_gpu(q['gpu'])} / {_cpu(q['cpu'])} / {_mem(q['memory'])}"


def _group(name: str) -> str:
    """A GPU group's name for the table: UUIDs (groups kaisched names) shortened to 8 characters."""
    return name[:8] + "…" if _UUID.match(name) else name


def _groups(names: Iterable[str]) -> str:
    """The Detail of a bind or pipelined placement on shared GPUs."""
    short = [_group(n) for n in names]
    if not short:
        return ""
    return ("GPU group " if len(short) == 1 else "GPU groups ") + ", ".join(short)


def _pct(part: float, whole: float) -> str:
    if whole <= 0:
        return "?%"
    p = 100 * part / whole
    if 0 < p < 0.5:
        return "<1%"
    if 99.5 <= p < 100:
        return ">99%"
    return f"{p:.0f}%"


def _shared(g: SharedGpuStatus) -> Text:
    """One shared device: ``<group>: <used %>[, <releasing %> releasing] (<pods>)``."""
    text = Text(f"{_group(g.group)}: {_pct(g.used_mib, g.memory_mib)}")
    if g.releasing_mib > 0:
        text.append(", ")
        text.append(f"{_pct(g.releasing_mib, g.memory_mib)} releasing", style="yellow")
    if g.pods:
        text.append(f" ({', '.join(g.pods)})")
    return text


def _gpu_row(n: NodeGpuStatus) -> tuple[Text, ...]:
    releasing = Text(_gpu(n.releasing), style="yellow" if n.releasing > 0 else "")
    shared = Text("\n").join(_shared(g) for g in n.shared)
    return (Text(n.name), Text(_gpu(n.gpus)), Text(_gpu(n.idle)), releasing, Text("\n".join(n.whole_gpu_pods)),
            shared)


def _depth(q: QueueStatus, by_name: dict[str, QueueStatus]) -> int:
    d = 0
    cur = q
    while cur.parent is not None and cur.parent in by_name and d < 64:
        cur = by_name[cur.parent]
        d += 1
    return d


def render_table(result: CycleResult, now: datetime, *, max_rows: int = 50, console: Console | None = None) -> None:
    out = console or Console(width=160)
    pending = [g for g in result.pod_groups if g.status == "Pending"]
    out.print(
        f"[bold]kaisched cycle at {now.isoformat()}[/bold]: {len(result.binds)} binds, "
        f"{len(result.pipelined)} pipelined, {len(result.evictions)} evictions, "
        f"{len(pending)} of {len(result.pod_groups)} PodGroups pending"
    )

    rows: list[tuple[str, str, str, str]] = []
    rows += [("bind", b.pod, b.node, _groups(b.gpu_groups)) for b in result.binds]
    rows += [("pipeline", p.pod, p.node, _groups(p.gpu_groups)) for p in result.pipelined]
    rows += [("evict", e.pod, f"{e.action} by {e.preemptor}", e.message) for e in result.evictions]
    if rows:
        t = Table(title="Decisions", title_justify="left")
        for col in ("Decision", "Pod", "Node", "Detail"):
            t.add_column(col)
        shown = rows if max_rows <= 0 else rows[:max_rows]
        for row in shown:
            t.add_row(*row)
        out.print(t)
        if len(shown) < len(rows):
            out.print(f"... and {len(rows) - len(shown)} more decisions (use --max-rows 0 or -o json)")

    if result.queues:
        by_name = {q.name: q for q in result.queues}
        t = Table(title="Queues (GPUs / CPU cores / memory GiB)", title_justify="left")
        for col in ("Queue", "Priority", "Deserved", "Fair share", "Allocated", "Requested", "Limit"):
            t.add_column(col)
        for q in result.queues:
            name = "  " * _depth(q, by_name) + q.name
            t.add_row(name, str(q.priority), _triple(q.deserved), _triple(q.fair_share), _triple(q.allocated),
                      _triple(q.request), _triple(q.limit))
        out.print(t)

    waiting = [g for g in result.pod_groups if g.reason is not None]
    if waiting:
        t = Table(title="Pending PodGroups", title_justify="left")
        for col in ("PodGroup", "Queue", "Status", "Reason", "Message"):
            t.add_column(col, overflow="fold")
        for g in waiting[: max_rows if max_rows > 0 else None]:
            t.add_row(g.name, g.queue, g.status, g.reason or "", g.message or "")
        out.print(t)
        if max_rows > 0 and len(waiting) > max_rows:
            out.print(f"... and {len(waiting) - max_rows} more pending PodGroups")

    if result.errors:
        t = Table(title="Input errors", title_justify="left", style="red")
        for col in ("Object", "Field", "Message"):
            t.add_column(col, overflow="fold")
        for e in result.errors:
            t.add_row(e.object, e.field, e.message)
        out.print(t)

    gpu_nodes = [n for n in result.nodes if n.gpus > 0 or n.shared]
    if gpu_nodes:
        t = Table(title="GPUs (shared devices: GPU memory in use)", title_justify="left")
        t.add_column("Node", overflow="fold")
        for col in ("GPUs", "Idle", "Releasing"):
            t.add_column(col, justify="right")
        t.add_column("Whole-GPU pods", overflow="fold")
        t.add_column("Shared GPUs", overflow="fold")
        for n in gpu_nodes[: max_rows if max_rows > 0 else None]:
            t.add_row(*_gpu_row(n))
        out.print(t)
        if max_rows > 0 and len(gpu_nodes) > max_rows:
            out.print(f"... and {len(gpu_nodes) - max_rows} more GPU nodes (use --max-rows 0 or -o json)")
