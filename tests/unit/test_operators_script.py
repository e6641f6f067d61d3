"""scripts/operators.sh: the operator versions it builds are the ones docs/workloads.md says are tested."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "operators.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False)


def test_the_versions_built_are_the_versions_documented() -> None:
    out = run("version")
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert [name for name, _, _ in lines] == ["training-operator", "kuberay-operator"]
    docs = (ROOT / "docs" / "workloads.md").read_text()
    for _, module, version in lines:
        assert f"| `{module}` | **{version}** |" in docs, f"docs/workloads.md does not say {module} {version} is tested"


def test_an_unknown_operator_or_command_is_refused() -> None:
    unknown = run("path", "no-such-operator")
    assert unknown.returncode == 1 and "unknown operator 'no-such-operator'" in unknown.stderr
    usage = run("frobnicate")
    assert usage.returncode == 2 and "usage:" in usage.stderr
