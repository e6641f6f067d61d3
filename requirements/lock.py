"""Regenerate kaisched's lock files from pyproject.toml: ``make lock`` (or ``python requirements/lock.py``).

pyproject.toml declares ranges (kaisched is also a library); the lock files pin what the container image, CI and
``make`` install, exactly and with hashes, resolved by ``uv pip compile`` for CPython 3.11 on Linux:

* ``requirements/dev.txt``: the runtime dependencies with the ``dev`` and ``sim`` extras (``make``, CI, and the
  image's build stage, which compiles the core with mypyc);
* ``requirements/lock.txt``: the runtime dependencies alone, at the same versions (the image; no matplotlib).

Each file's header records a digest of pyproject.toml's dependency lists (:func:`dependency_digest`), which
tests/unit/test_packaging.py compares with the current one: a dependency changed without a re-lock fails there.

Arguments are passed on to both ``uv pip compile`` runs: the existing pins are kept where they still fit, so
``make lock`` after an edit changes as little as it can; ``make lock UPGRADE=1`` (``--upgrade``) moves everything to
the newest versions within the ranges, ``--upgrade-package NAME`` one package.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
PYPROJECT: Final = ROOT / "pyproject.toml"
DEV_LOCK: Final = ROOT / "requirements" / "dev.txt"
RUNTIME_LOCK: Final = ROOT / "requirements" / "lock.txt"
DIGEST_KEY: Final = "pyproject-dependencies-sha256"
PYTHON_VERSION: Final = "3.11"
# markers are evaluated for x86-64 Linux; the hashes cover every file of each pinned version, so an arm64 image
# installs the same pins
PLATFORM: Final = "x86_64-unknown-linux-gnu"

_HEADER: Final = """\
# {what}
# Exact versions with hashes, for CPython {python} on Linux. Generated from pyproject.toml by `make lock`
# (requirements/lock.py runs `uv pip compile --generate-hashes`); do not edit by hand. After changing a dependency
# in pyproject.toml, run `make lock` (newest versions within the ranges: `make lock UPGRADE=1`).
# {install}
# {key}: {digest}
"""


def dependency_digest(pyproject: dict[str, Any]) -> str:
    """A digest of what the lock files are resolved from: requires-python, the dependencies and every extra."""
    project = pyproject["project"]
    declared = {
        "requires-python": project.get("requires-python", ""),
        "dependencies": sorted(project.get("dependencies", [])),
        "optional-dependencies": {k: sorted(v) for k, v in project.get("optional-dependencies", {}).items()},
    }
    return hashlib.sha256(json.dumps(declared, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def recorded_digest(lock_text: str) -> str | None:
    """The digest a lock file's header records, or None."""
    prefix = f"# {DIGEST_KEY}:"
    for line in lock_text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise SystemExit("lock.py: uv not found (it is in the dev extra: run `make` first)")
    return found


def _compile(uv: str, out: Path, extra_args: list[str], header: str) -> None:
    cmd = [uv, "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--python-version", PYTHON_VERSION,
           "--python-platform", PLATFORM, "--output-file", str(out.relative_to(ROOT)), *extra_args,
           str(PYPROJECT.relative_to(ROOT))]
    subprocess.run(cmd, cwd=ROOT, check=True)
    out.write_text(header + out.read_text())


def main(argv: list[str]) -> None:
    digest = dependency_digest(tomllib.loads(PYPROJECT.read_text()))
    uv = _uv()
    _compile(uv, DEV_LOCK, ["--extra", "dev", "--extra", "sim", *argv], _HEADER.format(
        what="kaisched's development lock: the runtime dependencies with the dev and sim extras (make, CI, the "
             "image's build stage).",
        python=PYTHON_VERSION,
        install="Install: pip install --require-hashes --no-deps -r requirements/"
                "dev.txt && pip install --no-deps -e .",
        key=DIGEST_KEY, digest=digest))
    # the runtime lock takes dev.txt's versions: the image runs exactly what CI tested
    _compile(uv, RUNTIME_LOCK, ["--constraint", str(DEV_LOCK.relative_to(ROOT)), *argv], _HEADER.format(
        what="kaisched's runtime lock: the dependencies of `kaisched` without extras (the container image).",
        python=PYTHON_VERSION,
        install="Install: pip install --require-hashes --no-deps -r requirements/"
                "lock.txt && pip install --no-deps kaisched",
        key=DIGEST_KEY, digest=digest))


if __name__ == "__main__":
    main(sys.argv[1:])
