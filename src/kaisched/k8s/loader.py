"""Read Kubernetes objects from YAML and JSON files, directories and standard input.

Problems with a file (missing, unreadable, not valid YAML/JSON) become :class:`ObjectError` values
naming the file; the other files are still read.

Reading is bounded (:class:`InputLimits`): at most ``max_bytes`` are read over all the paths of one call
(default 1 GiB; ``KAISCHED_MAX_INPUT_BYTES``), in chunks, whatever the file is (a regular file, a FIFO, a
character device such as ``/dev/zero``, standard input); a FIFO nobody writes to is waited for at most
``wait_seconds`` (default 10 s; ``KAISCHED_INPUT_TIMEOUT``). Either limit raises :class:`InputLimitError`:
the input cannot be used as a whole.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

import yaml

from kaisched.k8s.objects import ObjectError, ParsedObjects
from kaisched.k8s.parse import parse_objects
from kaisched.k8s.quantity import QuantityError, parse_quantity

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "DEFAULT_WAIT_SECONDS", "MAX_INPUT_BYTES_ENV", "OBJECT_FILE_SUFFIXES", "STDIN",
           "STDIN_LABEL", "WAIT_SECONDS_ENV", "InputLimitError", "InputLimits", "InputReadError", "load_documents",
           "load_objects",
           "parse_byte_size", "read_text", "read_text_reasoned"]

OBJECT_FILE_SUFFIXES: Final = frozenset({".yaml", ".yml", ".json"})
#: the path that stands for standard input (as in ``kubectl apply -f -``)
STDIN: Final = "-"
#: how errors name standard input
STDIN_LABEL: Final = "standard input"
_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DEFAULT_MAX_INPUT_BYTES: Final = 1 << 30  # 1 GiB over all the inputs of one read
DEFAULT_WAIT_SECONDS: Final = 10.0  # for a FIFO's first writer
MAX_INPUT_BYTES_ENV: Final = "KAISCHED_MAX_INPUT_BYTES"
WAIT_SECONDS_ENV: Final = "KAISCHED_INPUT_TIMEOUT"
_CHUNK: Final = 1 << 20


class InputLimitError(ValueError):
    """Input that cannot be used as a whole: larger than :attr:`InputLimits.max_bytes`, or a FIFO with no
    writer for :attr:`InputLimits.wait_seconds`. The message names the file (or standard input)."""


def parse_byte_size(value: object, what: str) -> int:
    """A positive number of bytes: an integer or a quantity (``512Mi``, ``2G``); ``what`` names it in the
    error (a :class:`ValueError`)."""
    amount = math.nan
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(QuantityError, ValueError):
            amount = parse_quantity(value.strip() if isinstance(value, str) else value)
    if not (math.isfinite(amount) and amount >= 1):
        raise ValueError(f"{what}: expected a number of bytes >= 1 like 1073741824 or 1Gi, got {value!r}")
    return int(amount)


def _wait_seconds(value: object, what: str) -> float:
    try:
        seconds = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else math.nan
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{what}: expected a number of seconds > 0 like 10, got {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds on reading input: ``max_bytes`` over all the paths of one read (a file larger than what is left
    is refused), ``wait_seconds`` for a FIFO's first writer."""

    max_bytes: int = DEFAULT_MAX_INPUT_BYTES
    wait_seconds: float = DEFAULT_WAIT_SECONDS

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise ValueError(f"max_bytes: expected a number of bytes >= 1, got {self.max_bytes!r}")
        if not isinstance(self.wait_seconds, int | float) or isinstance(self.wait_seconds, bool):
            raise ValueError(f"wait_seconds: expected a number of seconds > 0, got {self.wait_seconds!r}")
        _wait_seconds(self.wait_seconds, "wait_seconds")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, max_bytes: int | None = None) -> InputLimits:
        """The defaults, or ``KAISCHED_MAX_INPUT_BYTES`` (bytes, or a quantity like ``2Gi``) and
        ``KAISCHED_INPUT_TIMEOUT`` (seconds) when set; ``max_bytes`` (a command-line option) wins over the
        environment. Raises :class:`ValueError` naming the variable."""
        env = os.environ if environ is None else environ
        raw_bytes, raw_wait = env.get(MAX_INPUT_BYTES_ENV, ""), env.get(WAIT_SECONDS_ENV, "")
        if max_bytes is None:
            max_bytes = parse_byte_size(raw_bytes, MAX_INPUT_BYTES_ENV) if raw_bytes else DEFAULT_MAX_INPUT_BYTES
        wait = _wait_seconds(raw_wait, WAIT_SECONDS_ENV) if raw_wait else DEFAULT_WAIT_SECONDS
        return cls(max_bytes, wait)


class _Budget:
    """What is left of the byte limit of one read, over all its inputs."""

    __slots__ = ("left", "limits", "used")

    def __init__(self, limits: InputLimits) -> None:
        self.limits = limits
        self.left = limits.max_bytes
        self.used = 0

    def refuse(self, source: str) -> InputLimitError:
        limit = self.limits.max_bytes
        whole = f"{source}: larger than {limit:,} bytes" if self.used == 0 else (
            f"{source}: the input is larger than {limit:,} bytes in total ({self.used:,} read before it)")
        return InputLimitError(f"{whole} (the input limit: --max-input-bytes or {MAX_INPUT_BYTES_ENV})")

    def take(self, n: int) -> None:
        self.left -= n
        self.used += n


def read_text(path: str | Path, limits: InputLimits | None = None, *, source: str | None = None) -> str:
    """The UTF-8 text of one file, read within ``limits`` (default :meth:`InputLimits.from_env`); raises
    :class:`InputLimitError`, :class:`OSError` or :class:`UnicodeDecodeError`."""
    budget = _Budget(limits if limits is not None else InputLimits.from_env())
    return _read_path(Path(path), budget, source or f"file {path}").decode("utf-8")


class InputReadError(ValueError):
    """A file that could not be read as text within the input limits; the message names the file and why."""


def read_text_reasoned(path: str | Path, limits: InputLimits | None = None, *, source: str | None = None) -> str:
    """:func:`read_text`, every failure an :class:`InputReadError` with one message: the input limit's own
    (:class:`InputLimitError`), a malformed ``KAISCHED_MAX_INPUT_BYTES`` / ``KAISCHED_INPUT_TIMEOUT``, or
    ``<source>: cannot read: <why>`` (a missing file, a directory, not UTF-8)."""
    what = source or f"file {path}"
    try:
        return read_text(path, limits, source=what)
    except UnicodeDecodeError:
        raise InputReadError(f"{what}: cannot read: not a text file (UTF-8)") from None
    except OSError as exc:
        raise InputReadError(f"{what}: cannot read: {_os_error_text(exc)}") from None
    except ValueError as exc:  # the input limit, or its environment variables malformed
        raise InputReadError(str(exc)) from None


def load_objects(paths: Iterable[str | Path], *, stdin: TextIO | None = None,
                 limits: InputLimits | None = None) -> ParsedObjects:
    """Read and parse every object in ``paths`` (``-``: standard input); file errors come first in
    ``errors``. Raises :class:`InputLimitError` when the input is over ``limits``."""
    docs, file_errors = load_documents(paths, stdin=stdin, limits=limits)
    parsed = parse_objects(docs)
    parsed.errors[:0] = file_errors
    return parsed


def load_documents(
    paths: Iterable[str | Path], *, stdin: TextIO | None = None, limits: InputLimits | None = None
) -> tuple[list[dict[str, Any]], list[ObjectError]]:
    """The documents (plain dicts) in ``paths``, in order, and the errors met reading them.

    A path is a file (read whatever its name), a directory (every ``.yaml``/``.yml``/``.json`` file
    under it, recursively, sorted by path) or ``-``: standard input (``stdin``, default ``sys.stdin``),
    read to its end the first time it is named, as YAML, or as JSON when it starts with ``{`` or ``[``
    and is valid JSON. YAML may hold several documents; a document (or JSON file) that is a list, or a
    ``kind: List``, contributes its items. Empty documents are skipped.

    At most ``limits.max_bytes`` are read over all the paths (default :meth:`InputLimits.from_env`), and a
    FIFO is waited for at most ``limits.wait_seconds``: beyond, :class:`InputLimitError` is raised.
    """
    budget = _Budget(limits if limits is not None else InputLimits.from_env())
    docs: list[dict[str, Any]] = []
    errors: list[ObjectError] = []
    for path in paths:
        if str(path) == STDIN:
            _read_stdin(stdin if stdin is not None else sys.stdin, docs, errors, budget)
            continue
        for file in _files(Path(path), errors):
            _read_file(file, docs, errors, budget)
    return docs, errors


def _read_stdin(stream: TextIO, docs: list[dict[str, Any]], errors: list[ObjectError], budget: _Budget) -> None:
    try:
        # the bytes, decoded strictly as files are (a text stream could turn bad bytes into surrogates)
        raw: BinaryIO | None = getattr(stream, "buffer", None)
        text = _read_stream(raw, budget).decode("utf-8") if raw is not None else _read_text_stream(stream, budget)
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, a closed stream
        if isinstance(exc, InputLimitError):
            raise
        errors.append(ObjectError(STDIN_LABEL, "", f"cannot read: {_os_error_text(exc)}"))
        return
    if text.lstrip()[:1] not in ("{", "["):
        _read_yaml(STDIN_LABEL, text, docs, errors)
        return
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        json_error = _json_error_text(exc)
    else:
        _add_document(STDIN_LABEL, 1, value, docs, errors)
        return
    # not JSON: flow-style YAML, or broken JSON (then the JSON error says more than YAML's would)
    yaml_docs: list[dict[str, Any]] = []
    yaml_errors: list[ObjectError] = []
    if _read_yaml(STDIN_LABEL, text, yaml_docs, yaml_errors):
        docs.extend(yaml_docs)
        errors.extend(yaml_errors)
    else:
        errors.append(ObjectError(STDIN_LABEL, "", json_error))


def _read_stream(raw: BinaryIO, budget: _Budget) -> bytearray:
    buf = bytearray()
    while chunk := raw.read(min(_CHUNK, budget.left + 1)):
        buf += chunk
        if len(buf) > budget.left:
            raise budget.refuse(STDIN_LABEL)
    budget.take(len(buf))
    return buf


def _read_text_stream(stream: TextIO, budget: _Budget) -> str:
    parts: list[str] = []
    size = 0
    while chunk := stream.read(min(_CHUNK, budget.left + 1)):
        parts.append(chunk)
        size += len(chunk.encode("utf-8", "surrogatepass"))
        if size > budget.left:
            raise budget.refuse(STDIN_LABEL)
    budget.take(size)
    return "".join(parts)


def _read_path(path: Path, budget: _Budget, source: str) -> bytearray:
    """The bytes of one file within the budget: a regular file is refused from its size, anything else
    (a FIFO, a character device) is read in chunks up to the limit; a FIFO waits for a writer for
    ``wait_seconds`` at most."""
    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode):
        buf = _read_fifo(path, budget, source)
    else:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size if stat.S_ISREG(mode) else 0
            if size > budget.left:
                raise budget.refuse(source)
            buf = bytearray()
            if size:
                buf += f.read(size)
            while chunk := f.read(min(_CHUNK, budget.left + 1 - len(buf))):  # (a file that grows, a device)
                buf += chunk
                if len(buf) > budget.left:
                    raise budget.refuse(source)
    budget.take(len(buf))
    return buf


def _read_fifo(path: Path, budget: _Budget, source: str) -> bytearray:
    """A FIFO, opened without waiting for a writer: its first writer is waited for ``wait_seconds`` at most;
    once one came, reading goes on until the last writer closes it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        buf = bytearray()
        writer = False  # a writer has opened it
        while True:
            try:
                chunk = os.read(fd, min(_CHUNK, budget.left + 1 - len(buf)))
            except BlockingIOError:  # a writer that has written nothing yet: it is waited for
                writer = True
                poller.poll()
                continue
            if chunk:
                writer = True
                buf += chunk
                if len(buf) > budget.left:
                    raise budget.refuse(source)
            elif writer:
                return buf  # the last writer closed it
            elif poller.poll(budget.limits.wait_seconds * 1000):
                writer = True  # data, or a writer that came and went
            else:
                wait = budget.limits.wait_seconds
                raise InputLimitError(f"{source}: a FIFO that no program writes to: nothing came in {wait:g} s "
                                      f"(start the writer first, or wait longer with {WAIT_SECONDS_ENV}=SECONDS)")
    finally:
        os.close(fd)


def _files(path: Path, errors: list[ObjectError]) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.suffix.lower() in OBJECT_FILE_SUFFIXES and p.is_file())
    elif path.exists():
        yield path
    else:
        errors.append(_file_error(path, "no such file or directory"))


def _read_file(path: Path, docs: list[dict[str, Any]], errors: list[ObjectError], budget: _Budget) -> None:
    source = f"file {path}"
    try:
        text = _read_path(path, budget, source).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(_file_error(path, f"cannot read file: {_os_error_text(exc)}"))
        return
    if path.suffix.lower() == ".json":
        _read_json(source, text, docs, errors)
    else:
        _read_yaml(source, text, docs, errors)


def _read_json(source: str, text: str, docs: list[dict[str, Any]], errors: list[ObjectError]) -> None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        errors.append(ObjectError(source, "", _json_error_text(exc)))
        return
    _add_document(source, 1, value, docs, errors)


def _read_yaml(source: str, text: str, docs: list[dict[str, Any]], errors: list[ObjectError]) -> bool:
    """Add the documents of ``text``; False when it is not valid YAML (the documents before the error are
    added all the same)."""
    number = 0
    try:
        for number, value in enumerate(yaml.load_all(text, Loader=_YAML_LOADER), start=1):
            _add_document(source, number, value, docs, errors)
    except yaml.YAMLError as exc:
        errors.append(ObjectError(source, "", _yaml_error_text(exc, number + 1)))
        return False
    return True


def _add_document(source: str, number: int, value: object, docs: list[dict[str, Any]],
                  errors: list[ObjectError]) -> None:
    if value is None:
        return
    if isinstance(value, dict):
        docs.append(value)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                docs.append(item)
            elif item is not None:
                message = f"document {number}, item {i}: expected an object (a mapping), got {_type_name(item)}"
                errors.append(ObjectError(source, "", message))
        return
    message = f"document {number}: expected an object (a mapping), got {_type_name(value)}"
    errors.append(ObjectError(source, "", message))


def _json_error_text(exc: json.JSONDecodeError) -> str:
    return f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"


def _yaml_error_text(exc: yaml.YAMLError, document: int) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = ": ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1} (document {document}): {what}"
    return f"invalid YAML (document {document}): {exc}"


def _os_error_text(exc: OSError | ValueError) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _file_error(path: Path, message: str) -> ObjectError:
    return ObjectError(f"file {path}", "", message)


def _type_name(value: object) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
