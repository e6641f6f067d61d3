"""Human-readable output of a cycle: decisions, queues, pending PodGroups, input errors."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table

from kaisched.framework.result import CycleResult, QueueStatus


def _gpu(v: float) -> str:
    return "∞" if v == -1 else f"{v:g}"


def _cpu(v: float) -> str:
    return "∞" if v == -1 else f"{v / 1000:g}"


def _mem(v: float) -> str:
    return "∞" if v == -1 else f"{v / 2**30:.1f}"


def _triple(q: dict[str, float]) -> str:
    return f"{_gpu(q['gpu'])} / {_cpu(q['cpu'])} / {_mem(q['memory'])}"


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
    rows += [("bind", b.pod, b.node, ",".join(b.gpu_groups)) for b in result.binds]
    rows += [("pipeline", p.pod, p.node, ",".join(p.gpu_groups)) for p in result.pipelined]
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
