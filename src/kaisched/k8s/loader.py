"""Read Kubernetes objects from YAML and JSON files, directories and standard input.

Problems with a file (missing, unreadable, not valid YAML/JSON) become :class:`ObjectError` values
naming the file; the other files are still read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

import yaml

from kaisched.k8s.objects import ObjectError, ParsedObjects
from kaisched.k8s.parse import parse_objects

__all__ = ["OBJECT_FILE_SUFFIXES", "STDIN", "STDIN_LABEL", "load_documents", "load_objects"]

OBJECT_FILE_SUFFIXES: Final = frozenset({".yaml", ".yml", ".json"})
#: the path that stands for standard input (as in ``kubectl apply -f -``)
STDIN: Final = "-"
#: how errors name standard input
STDIN_LABEL: Final = "standard input"
_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_objects(paths: Iterable[str | Path], *, stdin: TextIO | None = None) -> ParsedObjects:
    """Read and parse every object in ``paths`` (``-``: standard input); file errors come first in
    ``errors``."""
    docs, file_errors = load_documents(paths, stdin=stdin)
    parsed = parse_objects(docs)
    parsed.errors[:0] = file_errors
    return parsed


def load_documents(
    paths: Iterable[str | Path], *, stdin: TextIO | None = None
) -> tuple[list[dict[str, Any]], list[ObjectError]]:
    """The documents (plain dicts) in ``paths``, in order, and the errors met reading them.

    A path is a file (read whatever its name), a directory (every ``.yaml``/``.yml``/``.json`` file
    under it, recursively, sorted by path) or ``-``: standard input (``stdin``, default ``sys.stdin``),
    read to its end the first time it is named, as YAML, or as JSON when it starts with ``{`` or ``[``
    and is valid JSON. YAML may hold several documents; a document (or JSON file) that is a list, or a
    ``kind: List``, contributes its items. Empty documents are skipped.
    """
    docs: list[dict[str, Any]] = []
    errors: list[ObjectError] = []
    for path in paths:
        if str(path) == STDIN:
            _read_stdin(stdin if stdin is not None else sys.stdin, docs, errors)
            continue
        for file in _files(Path(path), errors):
            _read_file(file, docs, errors)
    return docs, errors


def _read_stdin(stream: TextIO, docs: list[dict[str, Any]], errors: list[ObjectError]) -> None:
    try:
        # the bytes, decoded strictly as files are (a text stream could turn bad bytes into surrogates)
        raw: BinaryIO | None = getattr(stream, "buffer", None)
        text = raw.read().decode("utf-8") if raw is not None else stream.read()
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, a closed stream
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


def _files(path: Path, errors: list[ObjectError]) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.suffix.lower() in OBJECT_FILE_SUFFIXES and p.is_file())
    elif path.exists():
        yield path
    else:
        errors.append(_file_error(path, "no such file or directory"))


def _read_file(path: Path, docs: list[dict[str, Any]], errors: list[ObjectError]) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(_file_error(path, f"cannot read file: {_os_error_text(exc)}"))
        return
    source = f"file {path}"
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
