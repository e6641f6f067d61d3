"""Read Kubernetes objects from YAML and JSON files and directories.

Problems with a file (missing, unreadable, not valid YAML/JSON) become :class:`ObjectError` values
naming the file; the other files are still read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from kaisched.k8s.objects import ObjectError, ParsedObjects
from kaisched.k8s.parse import parse_objects

__all__ = ["OBJECT_FILE_SUFFIXES", "load_documents", "load_objects"]

OBJECT_FILE_SUFFIXES: Final = frozenset({".yaml", ".yml", ".json"})
_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_objects(paths: Iterable[str | Path]) -> ParsedObjects:
    """Read and parse every object in ``paths``; file errors come first in ``errors``."""
    docs, file_errors = load_documents(paths)
    parsed = parse_objects(docs)
    parsed.errors[:0] = file_errors
    return parsed


def load_documents(paths: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[ObjectError]]:
    """The documents (plain dicts) in ``paths``, in order, and the errors met reading them.

    A path is a file (read whatever its name) or a directory (every ``.yaml``/``.yml``/``.json`` file
    under it, recursively, sorted by path). YAML files may hold several documents; a document (or JSON
    file) that is a list contributes its items. Empty documents are skipped.
    """
    docs: list[dict[str, Any]] = []
    errors: list[ObjectError] = []
    for path in paths:
        for file in _files(Path(path), errors):
            _read_file(file, docs, errors)
    return docs, errors


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
    if path.suffix.lower() == ".json":
        _read_json(path, text, docs, errors)
    else:
        _read_yaml(path, text, docs, errors)


def _read_json(path: Path, text: str, docs: list[dict[str, Any]], errors: list[ObjectError]) -> None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        errors.append(_file_error(path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"))
        return
    _add_document(path, 1, value, docs, errors)


def _read_yaml(path: Path, text: str, docs: list[dict[str, Any]], errors: list[ObjectError]) -> None:
    number = 0
    try:
        for number, value in enumerate(yaml.load_all(text, Loader=_YAML_LOADER), start=1):
            _add_document(path, number, value, docs, errors)
    except yaml.YAMLError as exc:
        errors.append(_file_error(path, _yaml_error_text(exc, number + 1)))


def _add_document(
    path: Path, number: int, value: object, docs: list[dict[str, Any]], errors: list[ObjectError]
) -> None:
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
                errors.append(_file_error(path, message))
        return
    errors.append(_file_error(path, f"document {number}: expected an object (a mapping), got {_type_name(value)}"))


def _yaml_error_text(exc: yaml.YAMLError, document: int) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = ": ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1} (document {document}): {what}"
    return f"invalid YAML (document {document}): {exc}"


def _os_error_text(exc: OSError | UnicodeDecodeError) -> str:
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
