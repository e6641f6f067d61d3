"""Wheels of kaisched carry the scheduling core compiled with mypyc (docs/performance.md, "The compiled core").

hatchling runs this build hook for every wheel. For a standard wheel (``pip install .``, ``pip wheel .``, the
container image) it builds the core with ``scripts/compiled.sh`` — the same module list, mypyc and flags that
``make test`` builds and checks, into ``build/compiled`` (reused when it is already up to date with the sources,
so a wheel built after ``make test`` costs no second compilation) — and puts the extensions next to the sources
in the wheel, which is then tagged for this Python and platform. Editable installs (``pip install -e .``, the
development environment) stay interpreted: an edited source is never shadowed by an extension.

``KAISCHED_PURE_PYTHON=1`` builds the pure-Python wheel instead (no C compiler needed; the same decisions, about
half the speed). Without it a failed compilation fails the build, with mypyc's log, rather than shipping the slow
core silently.

What the compilation needs (:meth:`CompiledCoreHook.dependencies`: the runtime dependencies, the ``sim`` extra's and
the dev extra's mypy, stubs and setuptools) pip installs into an isolated build environment; ``make`` and the
image's build stage build without isolation instead, in an environment installed from requirements/dev.txt, so
the compiler and everything it checks against are the locked versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PURE_PYTHON_ENV = "KAISCHED_PURE_PYTHON"
# what mypyc needs on top of the project's own dependencies, as pinned in the dev extra: the compiler itself, the
# stubs it type-checks against, and setuptools (mypyc builds its C extensions with it)
DEV_BUILD_TOOLS = frozenset({"mypy", "types-pyyaml", "setuptools"})
# extras whose packages the compiled modules are type-checked against though a plain install lacks them: the
# simulator's report imports matplotlib (lazily, so a wheel without the sim extra still imports)
TYPE_CHECKED_EXTRAS = ("sim",)


class CompiledCoreHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def _pure(self) -> bool:
        return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() in {"1", "true", "yes"}

    def dependencies(self) -> list[str]:
        if self._pure():
            return []
        extras = self.metadata.core.optional_dependencies
        tools = [r for r in extras.get("dev", []) if canonicalize_name(Requirement(r).name) in DEV_BUILD_TOOLS]
        checked = [r for extra in TYPE_CHECKED_EXTRAS for r in extras.get(extra, [])]
        return [*self.metadata.core.dependencies, *checked, *tools]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable" or self._pure():
            return
        root = Path(self.root)
        out = root / "build" / "compiled"
        scripts = Path(sysconfig.get_path("scripts"))
        mypyc = scripts / "mypyc" if (scripts / "mypyc").is_file() else shutil.which("mypyc")
        if mypyc is None:
            raise RuntimeError(f"kaisched: mypyc not found to compile the core (or set {PURE_PYTHON_ENV}=1)")
        env = {**os.environ, "MYPYC": str(mypyc), "PYTHON_BIN": sys.executable}
        proc = subprocess.run(["bash", str(root / "scripts" / "compiled.sh"), "build"], cwd=root, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                "kaisched: compiling the scheduling core with mypyc failed (a C compiler and Python's headers are "
                f"needed; {PURE_PYTHON_ENV}=1 builds the pure-Python wheel instead):\n{proc.stderr[-4000:]}")
        extensions = sorted(p for p in out.rglob("*") if p.suffix in {".so", ".pyd"} and p.is_file())
        if not any(p.parent == out for p in extensions):
            raise RuntimeError(f"kaisched: {out} holds no mypyc runtime library after the build")
        for path in extensions:
            build_data["force_include"][str(path)] = path.relative_to(out).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
