"""The tables of ``kaisched schedule``: drawn to the terminal's width, every pending PodGroup listed, evictions
in columns of their own. The tables are read back from the text, column by column."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from kaisched.cli import cli
from kaisched.cli.render import DEFAULT_WIDTH, MIN_WIDTH, InputFacts, output_width, render_table
from kaisched.framework.result import (
    CycleResult,
    Eviction,
    NodeGpuStatus,
    Placement,
    PodGroupStatus,
    QueueStatus,
)
from kaisched.k8s.objects import ObjectError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECLAIM = EXAMPLES / "reclaim.yaml"
NOW = "2026-01-01T02:00:00Z"
WIDTHS = (80, 100, 200)
HEADERS = {
    "Decisions": ["Decision", "Pod", "Node", "Detail"],
    "Evictions": ["Pod", "Node", "Action", "By", "Message"],
    "Queues": ["Queue", "Priority", "Deserved", "Fair share", "Allocated", "Requested", "Limit"],
    "Input errors": ["Object", "Field", "Message"],
    "GPUs": ["Node", "GPUs", "Idle", "Releasing", "Whole-GPU pods", "Shared GPUs"],
}
PENDING_HEADERS = (["PodGroup", "Queue", "Status", "Reason", "Message"],
                   ["PodGroup", "Queue", "Status", "Reason: message"])


@dataclass
class Drawn:
    """One table as printed: its title, its header (the words of each column's header lines joined) and its rows
    (each column's lines)."""

    title: str
    lines: list[str]
    header: list[str] = field(default_factory=list)
    rows: list[list[list[str]]] = field(default_factory=list)

    def column(self, name: str) -> int:
        return self.header.index(name)

    def first_lines(self, name: str) -> list[str]:
        i = self.column(name)
        return [row[i][0] for row in self.rows]

    def text(self, row: list[list[str]], name: str, sep: str = " ") -> str:
        return sep.join(part for part in row[self.column(name)] if part)


def _cells(line: str, bar: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split(bar)]


def tables(out: str) -> list[Drawn]:
    """The tables of an output, checked to be drawn whole: every line of a table as wide as its top border,
    with a column border wherever the top border has one."""
    lines = out.splitlines()
    found: list[Drawn] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("┏"):
            i += 1
            continue
        top = lines[i]
        end = next(j for j in range(i, len(lines)) if lines[j].startswith("└"))
        body = lines[i:end + 1]
        table = Drawn(lines[i - 1].strip(), body)
        joints = [k for k, ch in enumerate(top) if ch == "┳"]
        for line in body:
            assert len(line) == len(top), f"a line of table {table.title!r} is not as wide as the table:\n{line}"
            assert all(line[k] in "┃│╇┴┳" for k in joints), f"a column border of {table.title!r} moved:\n{line}"
        header_lines = [_cells(line, "┃") for line in body if line.startswith("┃")]
        table.header = [" ".join(part for part in col if part) for col in zip(*header_lines, strict=True)]
        for line in body:
            if not line.startswith("│"):
                continue
            cells = _cells(line, "│")
            if cells[0] or not table.rows:  # a row starts where its first column (a name) is written
                table.rows.append([[c] for c in cells])
            else:
                for col, c in zip(table.rows[-1], cells, strict=True):
                    col.append(c)
        found.append(table)
        i = end + 1
    return found


def by_title(drawn: list[Drawn]) -> dict[str, Drawn]:
    return {t.title.split(":")[0].split(" (")[0]: t for t in drawn}


def schedule(*args: str, columns: int | None = None, stdin: str | None = None) -> Any:
    env = {"COLUMNS": str(columns)} if columns is not None else {"COLUMNS": ""}
    return CliRunner().invoke(cli, ["schedule", *args], env=env, input=stdin)


def example_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(schedule("-f", str(path), "--now", NOW, "-o", "json").stdout)
    return data


def waiting_names(data: dict[str, Any]) -> list[str]:
    return [g["name"] for g in data["podGroups"] if g["status"] == "Pending" or g["reason"] is not None]


EXAMPLE_FILES = ["cluster.yaml", "reclaim.yaml", "gpu-sharing.yaml", "dra-gpus.yaml"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_tables_fit_the_width_and_keep_headers_and_names_whole(name: str, width: int) -> None:
    path = EXAMPLES / name
    data = example_json(path)
    result = schedule("-f", str(path), "--now", NOW, "--max-rows", "0", columns=width)
    assert result.exit_code == (1 if data["errors"] else 0), result.output
    out = result.stdout
    assert max(len(line) for line in out.splitlines()) <= width
    drawn = by_title(tables(out))
    for title, headers in HEADERS.items():
        if title in drawn:
            assert drawn[title].header == headers, (title, width)
    pending = drawn["Pending PodGroups"] if waiting_names(data) else None
    if pending is not None:
        assert pending.header in PENDING_HEADERS
        assert pending.first_lines("PodGroup") == waiting_names(data)
    placements = [p["pod"] for p in data["binds"]] + [p["pod"] for p in data["pipelined"]]
    if placements:
        decisions = drawn["Decisions"]
        assert decisions.first_lines("Pod") == placements
        assert decisions.first_lines("Node") == [p["node"] for p in data["binds"] + data["pipelined"]]
    if data["evictions"]:
        assert drawn["Evictions"].first_lines("Pod") == [e["pod"] for e in data["evictions"]]
    assert [n.strip() for n in drawn["Queues"].first_lines("Queue")] == [q["name"] for q in data["queues"]]
    gpu_nodes = [n["name"] for n in data["nodes"] if n["gpus"] > 0 or n["sharedGpus"]]
    assert drawn["GPUs"].first_lines("Node") == gpu_nodes
    if data["errors"]:
        assert drawn["Input errors"].first_lines("Object") == [e["object"] for e in data["errors"]]


def test_the_table_width_follows_columns() -> None:
    widths = {}
    for width in WIDTHS:
        out = schedule("-f", str(RECLAIM), "--now", NOW, columns=width).stdout
        widths[width] = max(len(line) for line in out.splitlines())
    assert widths[80] <= 80 < widths[100] <= 100 < widths[200] <= 200  # the long messages use what there is
    default = schedule("-f", str(RECLAIM), "--now", NOW).stdout  # not a terminal, COLUMNS unset
    assert 100 < max(len(line) for line in default.splitlines()) <= DEFAULT_WIDTH


def test_output_width() -> None:
    buffer = io.StringIO()  # not a terminal
    assert output_width(buffer, {"COLUMNS": "100"}) == 100
    assert output_width(buffer, {"COLUMNS": " 200 "}) == 200
    assert output_width(buffer, {}) == DEFAULT_WIDTH
    assert output_width(buffer, {"COLUMNS": ""}) == DEFAULT_WIDTH
    assert output_width(buffer, {"COLUMNS": "wide"}) == DEFAULT_WIDTH
    assert output_width(buffer, {"COLUMNS": "0"}) == DEFAULT_WIDTH
    assert output_width(buffer, {"COLUMNS": "12"}) == MIN_WIDTH


def _reclaim_tables(width: int = 200) -> tuple[str, dict[str, Drawn]]:
    result = schedule("-f", str(RECLAIM), "--now", NOW, columns=width)
    assert result.exit_code == 0, result.output
    return result.stdout, by_title(tables(result.stdout))


def test_reclaim_lists_every_pending_pod_group_the_summary_counts() -> None:
    data = example_json(RECLAIM)
    out, drawn = _reclaim_tables()
    summary = out.splitlines()[0]
    match = re.search(r"(\d+) of (\d+) PodGroups pending, (\d+) pipelined", summary)
    assert match, summary
    pending, total, pipelined = map(int, match.groups())
    assert (pending, total, pipelined) == (5, 10, 2)
    table = drawn["Pending PodGroups"]
    assert table.title == "Pending PodGroups: 5 pending, 2 pipelined"
    statuses = table.first_lines("Status")
    assert statuses.count("Pending") == pending == sum(g["status"] == "Pending" for g in data["podGroups"])
    assert statuses.count("Pipelined") == pipelined
    assert len(table.rows) == pending + pipelined
    # the groups whose pods were evicted back to Pending this cycle, with why
    rows = {row[0][0]: row for row in table.rows}
    evicted = {e["pod"]: e for e in data["evictions"]}
    for group in ("ml/sweep-3", "ml/sweep-4", "ml/sweep-5", "ml/sweep-6", "ml/sweep-7"):
        row = rows[group]
        assert table.text(row, "Status") == "Pending"
        assert table.text(row, "Reason") == "Evicted"
        eviction = evicted[f"{group}-0"]
        assert table.text(row, "Message") == (
            f"{group}-0 evicted by {eviction['action']} for {eviction['preemptor']} in this cycle")
    assert table.text(rows["ml/finetune"], "Reason") == "WaitingForVictims"


def test_evictions_have_columns_of_their_own() -> None:
    data = example_json(RECLAIM)
    _, drawn = _reclaim_tables()
    table = drawn["Evictions"]
    assert table.header == ["Pod", "Node", "Action", "By", "Message"]
    got = [(table.text(r, "Pod"), table.text(r, "Node"), table.text(r, "Action"), table.text(r, "By"))
           for r in table.rows]
    assert got == [*((f"ml/sweep-{i}-0", "node-1", "reclaim", "ml/finetune") for i in (7, 6, 5, 4)),
                   ("ml/sweep-3-0", "node-0", "preempt", "ml/hotfix-eval")]
    for row, e in zip(table.rows, data["evictions"], strict=True):
        assert table.text(row, "Message").split() == e["message"].split()  # whole, wrapped at spaces
    decisions = drawn["Decisions"]
    assert set(decisions.first_lines("Decision")) == {"pipeline"}  # evictions are no decisions rows any more
    assert all(" by " not in node for node in decisions.first_lines("Node"))


def _render(result: CycleResult, width: int, facts: InputFacts | None = None, max_rows: int = 50) -> str:
    buf = io.StringIO()
    render_table(result, datetime(2026, 1, 1, tzinfo=UTC), max_rows=max_rows, facts=facts,
                 console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


LONG = "ml-platform-team/very-long-distributed-training-job-name-0"


def _crowded() -> CycleResult:
    message = ("Resources were not found for pod " + LONG + " due to: no nodes with enough resources were "
               "found: 12 node(s) didn't have enough resources: GPUs, a-very-long-unbreakable-token-"
               "that-is-longer-than-any-column-could-be-at-this-width-xxxxxxxxxxxxxxxxxxxx")
    amounts = {"gpu": 1234.5, "cpu": 96000.0, "memory": 2.0**40}
    return CycleResult(
        binds=[Placement(LONG, "dgx-a100-rack-07-node-0042", ("3f2a9c1e-0000-5000-8000-000000000001",))],
        evictions=[Eviction("ml/victim-0", "stalegangeviction", "", "gang below its minimum for 60s"),
                   Eviction("ml/gpu-victim-0", "reclaim", "ml-platform-team/very-long-distributed-training-job-name",
                            message)],
        pod_groups=[PodGroupStatus("ml-platform-team/very-long-distributed-training-job-name", "ml-platform-team",
                                   "Pending", "PodSchedulingErrors", message),
                    PodGroupStatus("ml/victim", "q", "Pending", None, None),
                    PodGroupStatus("ml/gpu-victim", "q", "Pending", None, None),
                    PodGroupStatus("ml/elastic", "q", "Running", "OverLimit", "2 pods over the limit")],
        queues=[QueueStatus("ml-platform-team", None, amounts, amounts, amounts, amounts, amounts, 100)],
        errors=[ObjectError("Pod ml/" + "x" * 40, "spec.containers[0].resources.requests.nvidia.com/gpu",
                            "must be a whole number or a fraction with gpu-fraction")],
        nodes=[NodeGpuStatus("dgx-a100-rack-07-node-0042", 8, 0, 0, (LONG, "ml/gpu-victim-0"), ())],
    )


@pytest.mark.parametrize("width", (60, *WIDTHS))
def test_long_names_and_words_never_break_the_layout(width: int) -> None:
    out = _render(_crowded(), width, InputFacts(node_of={"ml/victim-0": "cpu-3"},
                                                group_of={"ml/victim-0": "ml/victim"}))
    assert max(len(line) for line in out.splitlines()) <= width
    drawn = by_title(tables(out))  # every table whole
    assert set(drawn) == {"Decisions", "Evictions", "Queues", "Pending PodGroups", "Input errors", "GPUs"}
    names = {("Decisions", "Pod"): [LONG], ("Decisions", "Node"): ["dgx-a100-rack-07-node-0042"],
             ("GPUs", "Node"): ["dgx-a100-rack-07-node-0042"],
             ("Pending PodGroups", "PodGroup"): [LONG[: -len("-0")], "ml/victim", "ml/gpu-victim", "ml/elastic"],
             ("Evictions", "Pod"): ["ml/victim-0", "ml/gpu-victim-0"]}
    for (title, column), expected in names.items():
        got = drawn[title].first_lines(column)
        if width == 200:  # room for every name: whole, on one line
            assert got == expected
        else:
            assert len(got) == len(expected)
            assert all(map(whole_or_cut, got, expected)), (title, got)
    if width in WIDTHS:  # (at 60 columns not even the header words of the queues fit)
        for title, headers in HEADERS.items():
            assert drawn[title].header == headers, (title, width)
        assert drawn["Pending PodGroups"].header in PENDING_HEADERS
    pending = drawn["Pending PodGroups"]
    assert pending.title == "Pending PodGroups: 3 pending, 1 running with pods pending"
    evictions = drawn["Evictions"]
    stale, reclaimed = evictions.rows
    assert whole_or_cut(evictions.text(stale, "Node"), "cpu-3")  # from the input
    assert evictions.text(stale, "By") == "-"  # a stale gang: no preemptor
    assert whole_or_cut(evictions.text(reclaimed, "Node"), "dgx-a100-rack-07-node-0042")  # from the GPU listing


def whole_or_cut(cell: str, name: str) -> bool:
    """A name is whole, or cut with an ellipsis: never wrapped onto another line."""
    return cell == name or (cell.endswith("…") and name.startswith(cell[:-1]))


def test_the_widths_give_names_and_numbers_room_first() -> None:
    out = _render(_crowded(), 100)
    queues = by_title(tables(out))["Queues"]
    row = queues.rows[0]
    assert queues.text(row, "Queue") == "ml-platform-team"
    assert queues.text(row, "Priority") == "100"
    assert queues.text(row, "Deserved") == "1234.5 / 96 / 1024.0"  # wrapped at spaces, never cut


def test_evicted_groups_without_facts_keep_an_empty_reason() -> None:
    out = _render(_crowded(), 200)  # no facts: the PodGroup of an evicted pod is not known
    pending = by_title(tables(out))["Pending PodGroups"]
    rows = {r[0][0]: r for r in pending.rows}
    assert pending.text(rows["ml/victim"], "Reason") == ""
    with_facts = _render(_crowded(), 200, InputFacts(group_of={"ml/victim-0": "ml/victim"}))
    pending = by_title(tables(with_facts))["Pending PodGroups"]
    rows = {r[0][0]: r for r in pending.rows}
    assert pending.text(rows["ml/victim"], "Reason") == "Evicted"
    assert pending.text(rows["ml/victim"], "Message") == "ml/victim-0 evicted by stalegangeviction in this cycle"


def test_max_rows_limits_the_evictions_and_pending_tables() -> None:
    result = schedule("-f", str(RECLAIM), "--now", NOW, "--max-rows", "2", columns=200)
    drawn = by_title(tables(result.stdout))
    assert len(drawn["Evictions"].rows) == 2
    assert "... and 3 more evictions" in result.stdout
    assert len(drawn["Pending PodGroups"].rows) == 2
    assert "... and 5 more pending PodGroups" in result.stdout
    assert drawn["Pending PodGroups"].title == "Pending PodGroups: 5 pending, 2 pipelined"  # counts all of them


def test_names_are_printed_as_written_never_as_markup() -> None:
    result = CycleResult(pod_groups=[PodGroupStatus("ns/[bold]odd[/bold]", "q", "Pending", "R", "[red]x[/red]")])
    out = _render(result, 100)
    pending = by_title(tables(out))["Pending PodGroups"]
    assert pending.first_lines("PodGroup") == ["ns/[bold]odd[/bold]"]
    assert "[red]x[/red]" in out
