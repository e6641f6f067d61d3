"""KAI's decisions as its scheduler log states them, compared with a kaisched cycle's (``kaisched replay --diff``).

KAI's statement logs each committed operation at verbosity 4 (framework/statement.go ``Commit``):
``Allocating task: <ns>/<name>``, ``Pipelining task: <ns>/<name>``, ``Evicting task: <ns>/<name>``. At verbosity 6
it also logs the node of each tentative operation (``Statement allocated task: <ns/name> to node: <node>``,
``Statement pipelined task: <ns/name> to node: <node>, ...``, ``Statement evicted task: <ns/name> from node:
<node>``); the last one before a commit names the committed node. Colour codes (a terminal's log) are stripped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from kaisched.framework.result import CycleResult

ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_COMMIT: Final = re.compile(r"\b(Allocating|Pipelining|Evicting) task: <?([^\s/<>]+)/([^\s<>]+?)>?(?=[\s,]|$)")
_TENTATIVE: Final = re.compile(
    r"\bStatement (allocated|pipelined|evicted) task: <([^\s/<>]+)/([^\s<>]+)> (?:to|from) node: <([^\s<>]*)>")
ACTIONS: Final = {"Allocating": "bind", "Pipelining": "pipeline", "Evicting": "evict",
                  "allocated": "bind", "pipelined": "pipeline", "evicted": "evict"}


@dataclass(frozen=True, slots=True)
class Decision:
    """One committed decision: ``bind``, ``pipeline`` or ``evict`` of pod ``<ns>/<name>`` (on or from ``node``, ""
    when the log does not say)."""

    action: str
    pod: str
    node: str = ""

    def text(self) -> str:
        where = {"bind": " on ", "pipeline": " on ", "evict": " from "}[self.action]
        return f"{self.action} {self.pod}{where + self.node if self.node else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "pod": self.pod, "node": self.node or None}


@dataclass(slots=True)
class KaiLog:
    decisions: list[Decision] = field(default_factory=list)
    lines: int = 0


def read_kai_log(text: str) -> KaiLog:
    """The committed decisions of a KAI scheduler log (``snapshot-tool --verbosity 4`` or more), in log order."""
    out = KaiLog()
    tentative: dict[tuple[str, str], str] = {}
    for raw in text.splitlines():
        out.lines += 1
        line = ANSI.sub("", raw)
        if "task: " not in line:
            continue
        match = _TENTATIVE.search(line)
        if match:
            tentative[(ACTIONS[match[1]], f"{match[2]}/{match[3]}")] = match[4]
            continue
        match = _COMMIT.search(line)
        if match:
            action, pod = ACTIONS[match[1]], f"{match[2]}/{match[3]}"
            out.decisions.append(Decision(action, pod, tentative.pop((action, pod), "")))
    return out


def cycle_decisions(result: CycleResult) -> list[Decision]:
    """A kaisched cycle's decisions (binds, pipelined placements, evictions)."""
    return ([Decision("bind", b.pod, b.node) for b in result.binds]
            + [Decision("pipeline", p.pod, p.node) for p in result.pipelined]
            + [Decision("evict", e.pod) for e in result.evictions])


@dataclass(slots=True)
class DecisionDiff:
    """What both schedulers decided (``same``; ``moved``: the same action on another node), and what only one did."""

    same: list[Decision] = field(default_factory=list)
    moved: list[tuple[Decision, Decision]] = field(default_factory=list)  # (KAI's, kaisched's)
    only_kai: list[Decision] = field(default_factory=list)
    only_kaisched: list[Decision] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.moved or self.only_kai or self.only_kaisched)

    def to_dict(self) -> dict[str, Any]:
        return {"same": [d.to_dict() for d in self.same],
                "differentNode": [{"action": k.action, "pod": k.pod, "kaiNode": k.node, "kaischedNode": o.node}
                                  for k, o in self.moved],
                "onlyKai": [d.to_dict() for d in self.only_kai],
                "onlyKaisched": [d.to_dict() for d in self.only_kaisched]}

    def lines(self) -> list[str]:
        out = [f"both:          {d.text()}" for d in self.same]
        out += [f"other node:    {k.action} {k.pod}: KAI {k.node}, kaisched {o.node}" for k, o in self.moved]
        out += [f"only KAI:      {d.text()}" for d in self.only_kai]
        out += [f"only kaisched: {d.text()}" for d in self.only_kaisched]
        out.append(f"{len(self.same)} the same, {len(self.moved)} on another node, {len(self.only_kai)} only in "
                   f"KAI's log, {len(self.only_kaisched)} only in kaisched's cycle")
        return out


def compare(kai: list[Decision], ours: list[Decision]) -> DecisionDiff:
    """Pair the decisions by (action, pod), in KAI's log order, then kaisched's; a node compares only when both
    name one (KAI names it at verbosity 6 only)."""
    diff = DecisionDiff()
    mine: dict[tuple[str, str], Decision] = {}
    for d in ours:
        mine.setdefault((d.action, d.pod), d)
    seen: set[tuple[str, str]] = set()
    for k in kai:
        key = (k.action, k.pod)
        if key in seen:
            continue  # KAI committed it twice (two statements): one decision
        seen.add(key)
        o = mine.pop(key, None)
        if o is None:
            diff.only_kai.append(k)
        elif k.node and o.node and k.node != o.node:
            diff.moved.append((k, o))
        else:
            diff.same.append(o if o.node else k)
    diff.only_kaisched.extend(mine.values())
    return diff
