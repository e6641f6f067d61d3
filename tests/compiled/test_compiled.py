"""The core compiled with mypyc (``scripts/compiled.sh``, docs/performance.md) decides exactly as the
interpreted sources do. Marked ``compiled``: ``make test`` builds ``build/compiled``, runs this, then the whole
suite on the compiled core (``make unit-compiled``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.compiled

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "compiled"


def _run(path: list[Path], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def build() -> Path:
    current = subprocess.run([str(ROOT / "scripts" / "compiled.sh"), "path"], cwd=ROOT, capture_output=True,
                             text=True, check=False)
    if current.returncode != 0:
        pytest.fail("build/compiled is missing or older than the sources: run scripts/compiled.sh (make compiled)")
    return BUILD


def _decisions(path: list[Path]) -> dict[str, Any]:
    proc = _run(path, "-m", "tests.compiled.decisions")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_the_compiled_core_decides_as_the_interpreted_sources(build: Path) -> None:
    interpreted = _decisions([ROOT])
    compiled = _decisions([build, ROOT])
    assert interpreted["compiled"] is False
    assert compiled["compiled"] is True  # the extensions were loaded, not the copied sources
    decisions = compiled["decisions"]
    assert decisions["scale-allocate"][0]["binds"]  # the clusters are busy: something to decide
    assert decisions["reclaim-large-jobs"]["evictions"]
    assert decisions["simulation"]["jobs"]
    assert decisions == interpreted["decisions"]
