"""Packaging: ranges in pyproject.toml, lock files resolved from them (requirements/), no unused dependency.

kaisched is a library too, so pyproject.toml declares ranges; the image, CI and ``make`` install the lock files'
exact versions with hashes (requirements/lock.py, ``make lock``). The closure checks read each locked package's
requirements from the installed distributions, so they assume the environment was installed from
requirements/dev.txt (``make`` does it) and say so when it was not.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "kaisched"
RUNTIME_LOCK = ROOT / "requirements" / "lock.txt"
DEV_LOCK = ROOT / "requirements" / "dev.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
SIM = [Requirement(r) for r in EXTRAS["sim"]]
DEV = [Requirement(r) for r in EXTRAS["dev"]]
# calendar-versioned: a new year's release says nothing about breaking changes, so no upper bound
CALENDAR_VERSIONED = {"structlog"}
# the environment the lock files are resolved for (requirements/lock.py: CPython 3.11 on Linux)
LOCK_ENVIRONMENT = {
    "python_version": "3.11", "python_full_version": "3.11.7", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
    "os_name": "posix", "platform_machine": "x86_64",
}  # fmt: skip
_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def _lock_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kaisched_lock_tool", ROOT / "requirements" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Pin:
    version: Version
    hashes: int = 0


@dataclass
class Lock:
    path: Path
    text: str
    pins: dict[NormalizedName, Pin] = field(default_factory=dict)
    stray: list[str] = field(default_factory=list)  # requirement lines that are not `name==version`


def read_lock(path: Path) -> Lock:
    lock = Lock(path, path.read_text())
    current: Pin | None = None
    for raw in lock.text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash=sha256:"):
            assert current is not None, f"{path.name}: a hash before any requirement"
            current.hashes += 1
        elif raw[0].isspace():
            continue
        elif (match := _PIN.match(line)) is not None:
            current = lock.pins[canonicalize_name(match["name"])] = Pin(Version(match["version"]))
        else:
            lock.stray.append(line)
    return lock


def _applies(req: Requirement, extras: Iterable[str]) -> bool:
    """Whether ``req`` applies in the lock's environment, for any of ``extras`` ("" for none)."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**LOCK_ENVIRONMENT, "extra": extra}) for extra in extras)


def closure(lock: Lock, roots: list[Requirement]) -> tuple[set[NormalizedName], list[str]]:
    """Every package ``roots`` need, transitively (requirements read from the installed distributions), and what is
    wrong: a requirement the lock does not pin, or pins outside its range."""
    expanded: dict[NormalizedName, set[str]] = {}  # package -> the extras whose requirements were queued
    problems: list[str] = []
    queue = [(r, "pyproject.toml") for r in roots if _applies(r, [""])]
    while queue:
        req, needed_by = queue.pop()
        name = canonicalize_name(req.name)
        pin = lock.pins.get(name)
        if pin is None:
            problems.append(f"{req} (needed by {needed_by}) is not pinned")
            continue
        if not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{name}=={pin.version} is outside {req} (needed by {needed_by})")
        done = expanded.get(name)
        new = {"", *req.extras} - (done or set())
        if not new:
            continue
        if done is None:
            try:
                installed = Version(md.version(name))
            except md.PackageNotFoundError:
                pytest.fail(f"{name} is not installed: install the environment from {DEV_LOCK.name} (run make)")
            if installed != pin.version:
                pytest.fail(f"{name} {installed} is installed but {lock.path.name} pins {pin.version}: install "
                            f"the environment from {DEV_LOCK.name} (run make)")
        expanded[name] = (done or set()) | new
        queue.extend((sub, name) for sub in map(Requirement, md.requires(name) or []) if _applies(sub, new))
    return set(expanded), problems


# ------------------------------------------------------------------------------------------ pyproject.toml


@pytest.mark.parametrize("req", RUNTIME + SIM, ids=str)
def test_runtime_dependencies_are_ranges_not_pins(req: Requirement) -> None:
    operators = {spec.operator for spec in req.specifier}
    assert not operators & {"==", "==="}, f"{req}: a library's dependency needs a range, not a pin"
    assert operators & {">=", ">", "~="}, f"{req}: no lower bound"
    if canonicalize_name(req.name) not in CALENDAR_VERSIONED:
        assert operators & {"<", "~="}, f"{req}: no upper bound (the next major release)"


def test_matplotlib_is_in_the_sim_extra_only() -> None:
    assert "matplotlib" not in {canonicalize_name(r.name) for r in RUNTIME}
    assert "matplotlib" in {canonicalize_name(r.name) for r in SIM}


@cache
def _imported_modules() -> frozenset[str]:
    """Every absolute import in src/kaisched: ``import a.b`` gives a.b; ``from a.b import c`` gives a.b and a.b.c."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _provided_modules(distribution: str) -> set[str]:
    """The importable modules and packages a distribution installs (from its RECORD)."""
    modules: set[str] = set()
    for file in md.distribution(distribution).files or []:
        parts = file.parts
        if not parts or parts[0] == ".." or ".dist-info" in parts[0] or "__pycache__" in parts:
            continue
        stem = parts[-1].split(".")[0]
        if parts[-1].endswith((".py", ".so", ".pyd")):
            dotted = [*parts[:-1], stem] if stem != "__init__" else list(parts[:-1])
            if dotted:
                modules.add(".".join(dotted))
    return modules


@pytest.mark.parametrize("req", RUNTIME + SIM, ids=lambda r: r.name)
def test_every_declared_dependency_is_imported_in_src(req: Requirement) -> None:
    provided = _provided_modules(req.name)
    assert provided, f"{req.name} provides no module (is it installed?)"
    assert provided & _imported_modules(), f"{req.name} is declared but src/kaisched imports none of its modules"


def test_every_third_party_import_in_src_is_declared() -> None:
    declared = {canonicalize_name(r.name) for r in RUNTIME + SIM}
    providers = md.packages_distributions()
    undeclared: dict[str, list[str]] = {}
    for name in _imported_modules():
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in {"kaisched", "__future__"} or top not in providers:
            continue
        dists = {canonicalize_name(d) for d in providers[top]}
        if not dists & declared:
            undeclared[top] = sorted(dists)
    assert not undeclared, f"src/kaisched imports packages pyproject.toml does not declare: {undeclared}"


# ------------------------------------------------------------------------------------------ the lock files


@pytest.mark.parametrize("path", [RUNTIME_LOCK, DEV_LOCK], ids=lambda p: p.name)
def test_lock_is_resolved_from_the_current_pyproject(path: Path) -> None:
    tool = _lock_tool()
    assert tool.recorded_digest(path.read_text()) == tool.dependency_digest(PYPROJECT), (
        f"{path.relative_to(ROOT)} was not resolved from the current pyproject.toml: run `make lock`")


@pytest.mark.parametrize("path", [RUNTIME_LOCK, DEV_LOCK], ids=lambda p: p.name)
def test_lock_pins_exact_versions_with_hashes(path: Path) -> None:
    lock = read_lock(path)
    assert lock.pins and not lock.stray, f"{path.name}: not `name==version` lines: {lock.stray}"
    unhashed = sorted(name for name, pin in lock.pins.items() if pin.hashes == 0)
    assert not unhashed, f"{path.name}: pins without hashes: {unhashed}"
    assert lock.text.startswith("# ") and "`make lock`" in lock.text[:1000], f"{path.name}: no header"


def test_runtime_lock_is_the_dev_lock_without_the_extras() -> None:
    runtime, dev = read_lock(RUNTIME_LOCK), read_lock(DEV_LOCK)
    assert "matplotlib" not in runtime.pins, "the image must not install the simulator's plotting"
    differing = {n: (str(p.version), str(dev.pins[n].version) if n in dev.pins else None)
                 for n, p in runtime.pins.items() if n not in dev.pins or dev.pins[n].version != p.version}
    assert not differing, f"lock.txt and dev.txt pin different versions (lock.txt, dev.txt): {differing}"


@pytest.mark.parametrize(
    ("path", "roots"), [(RUNTIME_LOCK, RUNTIME), (DEV_LOCK, RUNTIME + SIM + DEV)], ids=["lock.txt", "dev.txt"]
)
def test_lock_pins_the_whole_closure_within_the_ranges(path: Path, roots: list[Requirement]) -> None:
    lock = read_lock(path)
    needed, problems = closure(lock, roots)
    assert not problems, f"{path.name}: " + "; ".join(problems)
    assert set(lock.pins) == needed, (
        f"{path.name} pins packages nothing needs: {sorted(set(lock.pins) - needed)}: run `make lock`")


# ------------------------------------------------------------------------------------------ who installs them


def test_the_image_and_make_install_from_the_locks() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    bases = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.MULTILINE))
    images = [bases.get(m[2:-1], m) if m.startswith("${") else m
              for m in re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)]
    assert images and all(re.fullmatch(r"[\w./:-]+@sha256:[0-9a-f]{64}", i) for i in images), images
    assert "pip install --require-hashes --no-deps -r /tmp/lock.txt" in dockerfile
    assert "COPY requirements/lock.txt " in dockerfile and "--no-deps" in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert "install --quiet --require-hashes --no-deps -r $(DEV_LOCK)" in makefile
    assert "DEV_LOCK := requirements/dev.txt" in makefile
