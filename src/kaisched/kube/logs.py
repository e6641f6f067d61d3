"""Structured logs for ``kaisched run``: one JSON object per line on stderr.

Each line has ``timestamp`` (ISO 8601, UTC), ``level``, ``event`` (the message), ``logger`` and the keyword
fields of the call::

    {"timestamp": "2026-01-01T00:00:00.000000Z", "level": "info", "logger": "kaisched.kube.run",
     "event": "cycle", "binds": 3, "evictions": 0, "pending": 2, "duration_ms": 12.5}

``configure(level, json=False)`` renders the same events as readable key=value lines instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from kaisched.framework.result import CycleResult

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
          "critical": logging.CRITICAL}


def configure(level: str = "info", json: bool = True, stream: TextIO | None = None) -> None:
    """Configure structlog for the process (idempotent; the last call wins). ``level``: debug, info, warning,
    error or critical. ``stream`` defaults to stderr (tests pass a StringIO)."""
    name = level.lower()
    if name not in LEVELS:
        raise ValueError(f"log level: expected one of {', '.join(LEVELS)}, got {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(sort_keys=False) if json
        else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[name]),
        logger_factory=_NamedPrintLoggerFactory(stream if stream is not None else sys.stderr),
        cache_logger_on_first_use=False,
    )
    # kaisched's modules that log through the standard library (informers, leader election, the cache) end
    # up in the same JSON lines
    std = logging.getLogger("kaisched")
    for handler in [h for h in std.handlers if isinstance(h, _ToStructlog)]:
        std.removeHandler(handler)
    std.addHandler(_ToStructlog())
    std.setLevel(LEVELS[name])
    std.propagate = False


class _ToStructlog(logging.Handler):
    """Hands standard-library log records to structlog (same renderer, level and stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            logger = structlog.get_logger(record.name)
            fields: dict[str, Any] = {}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            method = getattr(logger, record.levelname.lower(), logger.info)
            method(record.getMessage(), **fields)
        except Exception:  # a logging failure must never break the caller
            self.handleError(record)


def get_logger(name: str) -> Any:
    """A logger whose lines carry ``logger=<name>``. Lazy: safe at module level, it follows later
    :func:`configure` calls."""
    return structlog.get_logger(name)


class _NamedPrintLogger(structlog.PrintLogger):
    """A PrintLogger that knows the name it was asked for (``structlog.get_logger(name)``)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class _NamedPrintLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> _NamedPrintLogger:
        return _NamedPrintLogger(self._file, str(args[0]) if args else "")


def _add_logger_name(logger: Any, method_name: str, event_dict: structlog.typing.EventDict) -> (
        structlog.typing.EventDict):
    name = getattr(logger, "name", "")
    if name:
        event_dict.setdefault("logger", name)
    return event_dict


def cycle_summary(result: CycleResult, duration_s: float) -> dict[str, Any]:
    """The fields of a cycle's summary line."""
    pending = sum(1 for g in result.pod_groups if g.status == "Pending")
    return {
        "binds": len(result.binds),
        "pipelined": len(result.pipelined),
        "evictions": len(result.evictions),
        "pending": pending,
        "podGroups": len(result.pod_groups),
        "errors": len(result.errors),
        "duration_ms": round(duration_s * 1000.0, 3),
    }


def log_cycle(logger: Any, result: CycleResult, duration_s: float, **fields: Any) -> None:
    """One ``cycle`` line at info level: binds, pipelined, evictions, pending PodGroups, input errors and the
    duration, plus ``fields`` (e.g. the cycle number)."""
    logger.info("cycle", **cycle_summary(result, duration_s), **fields)
