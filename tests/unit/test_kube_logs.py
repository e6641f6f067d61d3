"""Standard-library log records of kaisched's modules come out as the same JSON lines as structlog's."""

from __future__ import annotations

import io
import json
import logging

from kaisched.kube.logs import configure, get_logger


def test_stdlib_records_are_json_lines_with_level_and_logger() -> None:
    out = io.StringIO()
    configure("info", stream=out)
    try:
        logging.getLogger("kaisched.kube.informer").warning("informer-pods: %d errors", 3)
        logging.getLogger("kaisched.kube.leader").debug("not shown at info")
        get_logger("kaisched.kube.runner").info("cycle", binds=2)
    finally:
        configure("info")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["level"], r["logger"], r["event"]) for r in lines] == [
        ("warning", "kaisched.kube.informer", "informer-pods: 3 errors"),
        ("info", "kaisched.kube.runner", "cycle"),
    ]
    assert lines[1]["binds"] == 2 and lines[0]["timestamp"].endswith("Z")


def test_configuring_twice_does_not_duplicate_lines() -> None:
    out = io.StringIO()
    configure("debug", stream=out)
    configure("debug", stream=out)
    try:
        logging.getLogger("kaisched.kube.cache").info("once")
    finally:
        configure("info")
    assert len(out.getvalue().splitlines()) == 1
