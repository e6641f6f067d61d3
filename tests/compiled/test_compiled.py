"""The core compiled with mypyc (``scripts/compiled.sh``, docs/performance.md) decides exactly as the
interpreted sources do, and a wheel of kaisched (``hatch_build.py``) carries that compiled core. Marked
``compiled``: ``make test`` builds ``build/compiled``, runs this, then the whole suite on the compiled core
(``make unit-compiled``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
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


@pytest.fixture(scope="module")
def interpreted() -> dict[str, Any]:
    return _decisions([ROOT])


def test_the_compiled_core_decides_as_the_interpreted_sources(build: Path, interpreted: dict[str, Any]) -> None:
    compiled = _decisions([build, ROOT])
    assert interpreted["compiled"] is False
    assert compiled["compiled"] is True  # the extensions were loaded, not the copied sources
    decisions = compiled["decisions"]
    assert decisions["scale-allocate"][0]["binds"]  # the clusters are busy: something to decide
    assert decisions["reclaim-large-jobs"]["evictions"]
    assert decisions["simulation"]["jobs"]
    assert decisions == interpreted["decisions"]


def _wheel(out: Path, **env: str) -> Path:
    """Builds kaisched's wheel as ``pip wheel .`` does (the build hook is hatch_build.py), without build isolation:
    the development environment has the build tools (hatchling, mypy) and ``build/compiled`` is reused when it is
    up to date, so the wheel costs no second compilation."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(out), str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("kaisched-*.whl")
    return wheel


def test_a_wheel_carries_the_compiled_core(build: Path, interpreted: dict[str, Any], tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "dist")
    abi = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"kaisched-0.1.0-{abi}-{abi}-"), wheel.name  # tagged for this Python: not pure
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    extensions = {p.relative_to(build).as_posix() for p in build.rglob("*.so")}
    assert any("/" not in name for name in extensions), "mypyc's runtime library, at the top level"
    assert len(extensions) > 40 and extensions <= names  # every compiled module and mypyc's runtime library
    assert "kaisched/model/node.py" in names and "kaisched/k8s/parse.py" in names  # sources stay beside them
    assert not any(name.startswith("kaisched/k8s/parse.") and name.endswith(".so") for name in names)
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = _decisions([site, ROOT])
    assert installed["compiled"] is True  # the installed wheel's extensions were imported
    assert installed["decisions"] == interpreted["decisions"]


def test_a_pure_python_wheel_when_asked(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "dist", KAISCHED_PURE_PYTHON="1")
    assert wheel.name == "kaisched-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "kaisched/model/node.py" in names
    assert not [name for name in names if name.endswith((".so", ".pyd"))]
