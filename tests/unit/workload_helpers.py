"""Helpers shared by the workload tests (tests/unit/test_workloads_*.py): load a fixture manifest from
``tests/fixtures/workloads``, run the embedded cluster's controllers and pod-grouper (``prepared``) or a
whole scheduling cycle (``run``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kaisched import schedule
from kaisched.cluster.schedule import prepare
from kaisched.framework.config import SchedulerConfig
from kaisched.k8s.loader import load_documents
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects

from .builders import NOW

Obj = dict[str, Any]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"
PG_ANNOTATION = "pod-group-name"
SUBGROUP = "kai.scheduler/subgroup-name"


def fixture(name: str) -> list[Obj]:
    docs, errors = load_documents([FIXTURES / name])
    assert not errors, errors
    return docs


def workload(name: str) -> Obj:
    (doc,) = fixture(name)
    return doc


def flat(objs: tuple[Obj | Iterable[Obj], ...]) -> list[Obj]:
    out: list[Obj] = []
    for o in objs:
        out.extend([o] if isinstance(o, dict) else o)
    return out


def prepared(*objs: Obj | Iterable[Obj]) -> ParsedObjects:
    return prepare(parse_objects(flat(objs)), SchedulerConfig.from_mapping(None), NOW)


def run(*objs: Obj | Iterable[Obj]) -> Any:
    return schedule(flat(objs), None, NOW)
