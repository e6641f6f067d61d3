"""Find the commands, snippets and shown output in the user documentation (README.md and docs/*.md).

The rules (the test module's docstring says what is done with each piece):

* A fenced block whose info string is ``sh``, ``bash``, ``shell`` or ``console`` holds shell commands. Blank
  lines and lines whose first non-blank character is ``#`` are skipped; a line ending in ``\\`` continues on the
  next line; a trailing `` # comment`` (outside quotes) is not part of the command. In a ``console`` block the
  commands are the lines starting with ``$ ``, and the lines after a command, up to the next one, are its output.
* A ``python`` block is one snippet, run as a script.
* A ``text`` block that follows a command block with nothing but blank lines between them is the output of the
  block's last command (or of the snippet).
* An HTML comment on the lines just before a block sets markers for it: ``<!-- exit: 1 -->`` (every command of
  the block exits with that status), ``<!-- file: examples/x.yaml -->`` (a YAML block is the content of that
  file).
* Inline code spans in prose that start with ``kaisched `` (or ``.venv/bin/kaisched ``) and have arguments are
  commands too (``Try `kaisched schedule -f examples/reclaim.yaml```); a span of two words names a subcommand
  (`` `kaisched run` ``) and a span with a placeholder (``[``, ``<``, ``...``) is a synopsis: neither is run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^<!--\s*(?P<key>exit|file)\s*:\s*(?P<value>.*?)\s*-->\s*$")
SYNOPSIS_MARKS = ("[", "<", "...", "…")
INLINE_CODE = re.compile(r"(?<!`)`(?P<code>[^`\n]+)`(?!`)")


@dataclass(frozen=True)
class Block:
    """A fenced code block: ``line`` is the 1-based line of its opening fence."""

    page: Path
    line: int
    language: str
    lines: tuple[str, ...]
    markers: dict[str, str] = field(default_factory=dict)
    follows: Block | None = None  # the block just before this one, when only blank lines lie between them

    @property
    def text(self) -> str:
        return "".join(f"{line}\n" for line in self.lines)


@dataclass(frozen=True)
class Command:
    """One documented command (``kind`` ``shell``, or ``python`` for a snippet) and what the page says of it."""

    page: Path
    line: int
    kind: str
    source: str
    exit_status: int = 0
    output: tuple[str, ...] | None = None  # lines the page shows as its output, if it shows any
    inline: bool = False  # an inline code span in prose, not a fenced block


def read_blocks(page: Path) -> list[Block]:
    """Every fenced code block of a Markdown page, in order."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    last_end = -2  # index of the closing fence of the previous block
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        fence = match["fence"]
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        markers: dict[str, str] = {}
        above = start - 1
        while above >= 0 and (not lines[above].strip() or MARKER.match(lines[above].strip())):
            marker = MARKER.match(lines[above].strip())
            if marker is not None:
                markers.setdefault(marker["key"], marker["value"])
            above -= 1
        between = lines[last_end + 1:start] if last_end >= 0 else ["x"]
        follows = blocks[-1] if blocks and all(not line.strip() for line in between) else None
        blocks.append(Block(page, start + 1, match["info"].strip().split(" ")[0].lower(), tuple(body), markers,
                            follows))
        last_end = index
        index += 1
    return blocks


def strip_comment(line: str) -> str:
    """``line`` without a trailing shell comment (a ``#`` after white space, outside quotes)."""
    quote = ""
    for position, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position].rstrip()
    return line.rstrip()


def shell_commands(block: Block) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, command, output lines shown after it) for every command of a shell block."""
    console = block.language == "console"
    found: list[tuple[int, str, list[str]]] = []
    pending = ""
    pending_line = 0
    for offset, raw in enumerate(block.lines):
        number = block.line + 1 + offset
        if pending:
            text = raw.strip()
            if text.startswith("#"):  # a comment line inside a continuation: the command goes on after it
                continue
            if console and text.startswith("> "):
                text = text[2:]
        elif console:
            if not raw.startswith("$ "):
                if found and raw.strip():
                    found[-1][2].append(raw)
                continue
            text = raw[2:].strip()
            pending_line = number
        else:
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            pending_line = number
        code = strip_comment(text)
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        command = (pending + code).strip()
        pending = ""
        if command:
            found.append((pending_line, command, []))
    return [(line, command, tuple(output)) for line, command, output in found]


def inline_commands(page: Path) -> list[Command]:
    """``kaisched ...`` spans in the prose of ``page`` (outside fenced blocks)."""
    paragraphs: list[list[tuple[int, str]]] = [[]]  # prose lines (number, text); a span may cross a line break
    in_fence = ""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        match = FENCE.match(line)
        if match is not None:
            if not in_fence:
                in_fence = match["fence"]
            elif line.strip().startswith(in_fence):
                in_fence = ""
            paragraphs.append([])
        elif in_fence or not line.strip():
            paragraphs.append([])
        else:
            paragraphs[-1].append((number, line.strip()))
    commands: list[Command] = []
    for paragraph in paragraphs:
        text = " ".join(line for _, line in paragraph)
        starts = [0]
        for _, line in paragraph:
            starts.append(starts[-1] + len(line) + 1)
        for span in INLINE_CODE.finditer(text):
            code = " ".join(span["code"].split())
            words = code.split()
            if (words and words[0] in ("kaisched", ".venv/bin/kaisched") and len(words) > 2
                    and not any(mark in code for mark in SYNOPSIS_MARKS)):
                number = next(n for (n, _), end in zip(paragraph, starts[1:], strict=True) if span.start() < end)
                commands.append(Command(page, number, "shell", code, inline=True))
    return commands


def page_commands(page: Path) -> list[Command]:
    """Every command and snippet of a page with the exit status and output the page documents for it."""
    blocks = read_blocks(page)
    shown: dict[int, tuple[str, ...]] = {}
    for block in blocks:
        if block.language == "text" and block.follows is not None:
            shown[block.follows.line] = block.lines
    commands: list[Command] = []
    for block in blocks:
        status = int(block.markers.get("exit", "0"))
        if block.language in SHELL_LANGUAGES:
            found = shell_commands(block)
            for position, (line, source, output) in enumerate(found):
                expected: tuple[str, ...] | None = output or None
                if position == len(found) - 1 and block.line in shown:
                    expected = (*(expected or ()), *shown[block.line])
                commands.append(Command(page, line, "shell", source, status, expected))
        elif block.language == "python":
            commands.append(Command(page, block.line, "python", block.text, status, shown.get(block.line)))
    commands.extend(inline_commands(page))
    return sorted(commands, key=lambda command: command.line)
