"""Human-readable output of a cycle: decisions, evictions, queues, pending PodGroups, input errors, GPUs
per node.

The tables fit the output's width (:func:`output_width`): the columns that name things (pods, PodGroups,
nodes, queues) are never wrapped, the others wrap (long words fold), and only when even the names do not
fit are cells cut, with an ellipsis.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TextIO, TypeVar

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kaisched.framework.result import CycleResult, Eviction, NodeGpuStatus, PodGroupStatus, QueueStatus, SharedGpuStatus
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects

#: the width when the output is not a terminal and ``COLUMNS`` is not set
DEFAULT_WIDTH = 120
#: narrower than this, tables cannot keep their names whole: ``COLUMNS`` below it counts as this
MIN_WIDTH = 40

_T = TypeVar("_T")

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


@dataclass(frozen=True, slots=True)
class InputFacts:
    """What the tables know of the input beyond the result: the node each pod runs on (the node an evicted
    pod is evicted from) and each pod's PodGroup, both by ``<namespace>/<name>``."""

    node_of: Mapping[str, str] = field(default_factory=dict)
    group_of: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, parsed: ParsedObjects) -> InputFacts:
        """The facts of objects whose pods are grouped (``kaisched.cluster.schedule.prepare``)."""
        node_of: dict[str, str] = {}
        group_of: dict[str, str] = {}
        for pod in parsed.pods:
            meta = pod.meta
            key = f"{meta.namespace}/{meta.name}"
            if pod.node_name:
                node_of[key] = pod.node_name
            group = meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION)
            if group:
                group_of[key] = f"{meta.namespace}/{group}"
        return cls(node_of, group_of)


def output_width(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The width tables are drawn to: ``COLUMNS`` when set to a number, else the terminal's width when
    ``stream`` (default: standard output) is a terminal, else :data:`DEFAULT_WIDTH`; never below
    :data:`MIN_WIDTH`."""
    env = os.environ if environ is None else environ
    out = sys.stdout if stream is None else stream
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    try:
        if out.isatty():
            return max(os.get_terminal_size(out.fileno()).columns, MIN_WIDTH)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's buffer), a closed stream
        pass
    return DEFAULT_WIDTH


def output_console(stream: TextIO | None = None) -> Console:
    """A console writing to ``stream`` (default: standard output) at :func:`output_width`, colours only on a
    terminal, no markup or highlighting guessed in the text."""
    out = sys.stdout if stream is None else stream
    return Console(file=out, width=output_width(out), highlight=False, markup=False, emoji=False, soft_wrap=False)


#: what a column holds: ``key`` a name (never wrapped), ``num`` a number (right-aligned, never wrapped),
#: ``text`` words (wrapped at spaces, long words fold)
Kind = Literal["key", "num", "text"]
#: the width a text column keeps before the names are cut (when its text is wider)
_ROOMY = 16


class _Grid:
    """The rows of one table, drawn to a width; its columns are ``(header, kind)`` (:data:`Kind`).

    The widths are chosen here rather than by rich, so that names stay whole and no header word is split:
    every column gets its natural width when they all fit; else the names and numbers keep theirs and the
    text columns share the rest, the widest cut first, each keeping its longest word whole if the rest
    allows, else at least ``_ROOMY`` wide; else the text columns keep that and the names are cut (the
    widest first, with an ellipsis, never below their header's longest word); else the text columns too
    come down to their header's longest word. Narrower still, rich shrinks every column as it can.
    """

    def __init__(self, title: str, *columns: tuple[str, Kind], plain: bool = False) -> None:
        self.title = title
        self.columns = columns
        self.plain = plain  # borderless (``plain_table``): two spaces between columns, none at the edges
        self.rows: list[tuple[Text, ...]] = []

    def add_row(self, *cells: Text) -> None:
        self.rows.append(cells)

    def natural(self) -> list[int]:
        """Each column's width when nothing wraps."""
        out = [cell_len(header) for header, _ in self.columns]
        for row in self.rows:
            for i, cell in enumerate(row):
                out[i] = max(out[i], *(cell_len(line) for line in cell.plain.split("\n")))
        return out

    def _longest_words(self) -> list[int]:
        out = [0] * len(self.columns)
        for row in self.rows:
            for i, cell in enumerate(row):
                out[i] = max(out[i], max(map(cell_len, cell.plain.split()), default=0))
        return out

    def widths(self, width: int) -> list[int] | None:
        """The content width of each column in a table ``width`` wide, or None when not even the header
        words fit (rich then shrinks every column)."""
        if self.plain:
            available = width - 2 * (len(self.columns) - 1)  # the padding between columns
        else:
            available = width - 3 * len(self.columns) - 1  # a border before each column and after the last, padding
        natural = self.natural()
        if sum(natural) <= available:
            return natural
        text = [kind == "text" for _, kind in self.columns]
        names = [not wraps for wraps in text]
        header_words = [max(map(cell_len, header.split()), default=1) for header, _ in self.columns]
        roomy = [max(h, min(n, _ROOMY)) for h, n in zip(header_words, natural, strict=True)]
        words = [max(h, w) for h, w in zip(header_words, self._longest_words(), strict=True)]
        # (the columns that give way, the least width of each column), the first that fits wins: the names whole and
        # the text wrapped at spaces, then with long words split, then the names cut (the widest first)
        attempts = [
            (text, [w if wraps else n for w, n, wraps in zip(words, natural, text, strict=True)]),
            (text, [r if wraps else n for r, n, wraps in zip(roomy, natural, text, strict=True)]),
            (names, [r if wraps else h for r, h, wraps in zip(roomy, header_words, text, strict=True)]),
            (names, header_words),
        ]
        if self.plain:  # (kaisched get: the names stay whole while the text can wrap down to its header's words)
            attempts.insert(2, (text, [h if wraps else n for h, n, wraps in zip(header_words, natural, text,
                                                                                 strict=True)]))
        for shrink, least in attempts:
            out = _level(natural, least, shrink, available)
            if out is not None:
                return out
        return None

    def table(self, width: int, widths: list[int] | None = None, *, plain: bool = False) -> Table:
        """The table at ``width``; ``plain``: without borders or title (kubectl's and squeue's look)."""
        chosen = self.widths(width) if widths is None else widths
        t = (Table(box=None, pad_edge=False, show_edge=False) if plain
             else Table(title=self.title, title_justify="left"))
        for i, (header, kind) in enumerate(self.columns):
            fixed = None if chosen is None else chosen[i]
            if kind == "text":
                t.add_column(header, overflow="fold", width=fixed)
            else:
                t.add_column(header, no_wrap=True, overflow="ellipsis", width=fixed,
                             justify="right" if kind == "num" else "left")
        for row in self.rows:
            t.add_row(*row)
        return t


def plain_table(columns: list[tuple[str, Kind]], rows: list[list[str]], width: int | None = None) -> Table:
    """A borderless table (``kaisched get``) that fits ``width`` (default :func:`output_width`) as the cycle's tables
    do: names and numbers whole, text wrapped."""
    grid = _Grid("", *columns, plain=True)
    for row in rows:
        grid.add_row(*map(Text, row))
    return grid.table(output_width() if width is None else width, plain=True)


def _level(natural: list[int], least: list[int], shrink: list[bool], available: int) -> list[int] | None:
    """Widths within ``available``: the columns that ``shrink`` cut to one level (the widest first), never below
    their ``least``; the others at their ``least`` (their natural width when smaller)."""
    fixed = [min(n, m) for n, m in zip(natural, least, strict=True)]

    def at(level: int) -> list[int]:
        return [min(n, max(m, level)) if s else f for n, m, s, f in zip(natural, least, shrink, fixed, strict=True)]

    if sum(at(0)) > available:
        return None
    low, high = 0, max(natural)  # the highest level that fits: at(low) always does
    while low < high:
        mid = (low + high + 1) // 2
        if sum(at(mid)) <= available:
            low = mid
        else:
            high = mid - 1
    out = at(low)
    spare = available - sum(out)
    for i, s in enumerate(shrink):  # the columns cut at the level share what is left, left to right
        if spare and s and out[i] < natural[i]:
            out[i] += 1
            spare -= 1
    return out


def _pending_grid(title: str, rows: list[tuple[str, str, str, str, str]], width: int) -> Table:
    """The pending PodGroups: the reason in a column of its own when it fits whole, else above the message."""
    grid = _Grid(title, ("PodGroup", "key"), ("Queue", "key"), ("Status", "key"), ("Reason", "text"),
                 ("Message", "text"))
    for row in rows:
        grid.add_row(*map(Text, row))
    widths = grid.widths(width)
    if widths is not None and widths[3] == grid.natural()[3]:
        return grid.table(width, widths)
    merged = _Grid(title, ("PodGroup", "key"), ("Queue", "key"), ("Status", "key"), ("Reason: message", "text"))
    for name, queue, status, reason, message in rows:
        why = Text(reason, style="bold")
        if message:
            why.append(f": {message}" if reason else message, style="")
        merged.add_row(Text(name), Text(queue), Text(status), why)
    return merged.table(width)


def _limit(rows: list[_T], max_rows: int) -> list[_T]:
    return rows if max_rows <= 0 else rows[:max_rows]


def _eviction_node(e: Eviction, facts: InputFacts, gpu_node_of: Mapping[str, str]) -> str:
    return facts.node_of.get(e.pod) or gpu_node_of.get(e.pod, "")


def _evicted_reason(g: PodGroupStatus, evicted: Mapping[str, list[Eviction]]) -> tuple[str, str] | None:
    """The reason and message of a PodGroup pending because its pods were evicted this cycle."""
    mine = evicted.get(g.name)
    if not mine:
        return None
    by: dict[tuple[str, str], list[str]] = {}
    for e in mine:
        by.setdefault((e.action, e.preemptor), []).append(e.pod)
    parts = []
    for (action, preemptor), pods in by.items():
        who = f" for {preemptor}" if preemptor else ""
        parts.append(f"{', '.join(pods)} evicted by {action}{who}")
    return "Evicted", "; ".join(parts) + " in this cycle"


def _status_counts(groups: list[PodGroupStatus], total: int | None = None) -> str:
    """``5 pending, 2 pipelined`` (``5 of 10 PodGroups pending, ...`` given the ``total``): the PodGroups of
    the pending table by status, pending first."""
    counts: dict[str, int] = {"Pending": 0}
    for g in groups:
        counts[g.status] = counts.get(g.status, 0) + 1
    pending = counts.pop("Pending")
    parts = [f"{pending} pending" if total is None else f"{pending} of {total} PodGroups pending"]
    if "Pipelined" in counts:
        parts.append(f"{counts.pop('Pipelined')} pipelined")
    parts += [f"{n} {status.lower()} with pods pending" for status, n in sorted(counts.items())]
    return ", ".join(parts)


def _depth(q: QueueStatus, by_name: dict[str, QueueStatus]) -> int:
    d = 0
    cur = q
    while cur.parent is not None and cur.parent in by_name and d < 64:
        cur = by_name[cur.parent]
        d += 1
    return d


def waiting_pod_groups(result: CycleResult) -> list[PodGroupStatus]:
    """The PodGroups of the pending table: every Pending one, and the others that say why they wait
    (pipelined ones waiting for their victims, running ones with pods still pending), in the result's order."""
    return [g for g in result.pod_groups if g.status == "Pending" or g.reason is not None]


def render_table(result: CycleResult, now: datetime, *, max_rows: int = 50, console: Console | None = None,
                 facts: InputFacts | None = None) -> None:
    """Print the tables of ``result`` (at most ``max_rows`` rows each, 0: all) to ``console`` (default:
    :func:`output_console`), fitted to its width. ``facts`` (of the input) name the node each evicted pod
    leaves and the PodGroup it belongs to."""
    out = console or output_console()
    width = out.width
    known = facts or InputFacts()
    waiting = waiting_pod_groups(result)
    out.print(Text.assemble(
        (f"kaisched cycle at {now.isoformat()}", "bold"),
        f": {len(result.binds)} binds, {len(result.pipelined)} pipelined, {len(result.evictions)} evictions, "
        f"{_status_counts(waiting, len(result.pod_groups))}",
    ))

    placements = [("bind", b) for b in result.binds] + [("pipeline", p) for p in result.pipelined]
    if placements:
        grid = _Grid("Decisions", ("Decision", "key"), ("Pod", "key"), ("Node", "key"), ("Detail", "text"))
        shown = _limit(placements, max_rows)
        for decision, p in shown:
            grid.add_row(Text(decision), Text(p.pod), Text(p.node), Text(_groups(p.gpu_groups)))
        out.print(grid.table(width))
        if len(shown) < len(placements):
            out.print(Text(f"... and {len(placements) - len(shown)} more decisions (use --max-rows 0 or -o json)"))

    if result.evictions:
        gpu_node_of = {pod: n.name for n in result.nodes for pod in n.whole_gpu_pods}
        gpu_node_of.update((pod, n.name) for n in result.nodes for g in n.shared for pod in g.pods)
        grid = _Grid("Evictions", ("Pod", "key"), ("Node", "key"), ("Action", "key"), ("By", "key"),
                     ("Message", "text"))
        shown_evictions = _limit(result.evictions, max_rows)
        for e in shown_evictions:
            grid.add_row(Text(e.pod), Text(_eviction_node(e, known, gpu_node_of) or "-"), Text(e.action),
                         Text(e.preemptor or "-"), Text(e.message))
        out.print(grid.table(width))
        if len(shown_evictions) < len(result.evictions):
            out.print(Text(f"... and {len(result.evictions) - len(shown_evictions)} more evictions "
                           "(use --max-rows 0 or -o json)"))

    if result.queues:
        by_name = {q.name: q for q in result.queues}
        grid = _Grid("Queues (GPUs / CPU cores / memory GiB)", ("Queue", "key"), ("Priority", "num"),
                     *((col, "text") for col in ("Deserved", "Fair share", "Allocated", "Requested", "Limit")))
        for q in result.queues:
            name = "  " * _depth(q, by_name) + q.name
            grid.add_row(Text(name), Text(str(q.priority)), *(Text(_triple(v)) for v in (
                q.deserved, q.fair_share, q.allocated, q.request, q.limit)))
        out.print(grid.table(width))

    if waiting:
        evicted: dict[str, list[Eviction]] = {}
        for e in result.evictions:
            group = known.group_of.get(e.pod)
            if group is not None:
                evicted.setdefault(group, []).append(e)
        rows: list[tuple[str, str, str, str, str]] = []
        for g in _limit(waiting, max_rows):
            reason, message = g.reason or "", g.message or ""
            if g.reason is None and (derived := _evicted_reason(g, evicted)) is not None:
                reason, message = derived
            rows.append((g.name, g.queue, g.status, reason, message))
        out.print(_pending_grid(f"Pending PodGroups: {_status_counts(waiting)}", rows, width))
        if max_rows > 0 and len(waiting) > max_rows:
            out.print(Text(f"... and {len(waiting) - max_rows} more pending PodGroups (use --max-rows 0 or -o json)"))

    if result.errors:
        grid = _Grid("Input errors", ("Object", "key"), ("Field", "text"), ("Message", "text"))
        for err in result.errors:
            grid.add_row(Text(err.object), Text(err.field), Text(err.message))
        t = grid.table(width)
        t.style = "red"
        out.print(t)

    gpu_nodes = [n for n in result.nodes if n.gpus > 0 or n.shared]
    if gpu_nodes:
        grid = _Grid("GPUs (shared devices: GPU memory in use)", ("Node", "key"), ("GPUs", "num"), ("Idle", "num"),
                     ("Releasing", "num"), ("Whole-GPU pods", "text"), ("Shared GPUs", "text"))
        for n in _limit(gpu_nodes, max_rows):
            grid.add_row(*_gpu_row(n))
        out.print(grid.table(width))
        if max_rows > 0 and len(gpu_nodes) > max_rows:
            out.print(Text(f"... and {len(gpu_nodes) - max_rows} more GPU nodes (use --max-rows 0 or -o json)"))
