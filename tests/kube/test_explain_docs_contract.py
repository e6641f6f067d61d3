"""The live-cluster output docs/explain.md shows is real and current (issue 24, done-when).

The page's ``--kubeconfig`` commands need a cluster, so the docs suite does not run them (tests/docs lists them in
``NOT_RUN``): here ``examples/explain.yaml`` is loaded into a real kube-apiserver of this module's own, each such
command of the page is run on it (``~/.kube/config`` standing for the server's kubeconfig) and the output the page
shows must appear in the actual output, as the docs suite compares it. UIDs differ from one server to the next:
they are compared as ``<uid>``, and the ages ``kaisched get jobs`` prints as ``<age>``; the server's address is
printed as ``https://127.0.0.1:6443``.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from tests.docs.extract import Command, page_commands
from tests.docs.test_documented_commands import missing_lines
from tests.kube.apiserver import KubeApiServer
from tests.kube.contract_helpers import QUEUES, Kube, create_node, module_apiserver, pods_path

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explain.md"
EXAMPLE = ROOT / "examples" / "explain.yaml"
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
AGE = re.compile(r"(?<= )\d+[smhd](?= )")  # an AGE cell of kaisched get jobs (the objects are as old as the test)
#: the priority classes the example's pods name, as KAI's installation makes them
PRIORITY_CLASSES = {"build": 100, "train": 50, "inference": 125}


def _load_example(kube: Kube) -> None:
    """KAI's CRDs, then the example's objects as a cluster would hold them: the running pods bound and Running (the
    server sets creation times and UIDs itself)."""
    from tests.kube.contract_helpers import install_crds

    install_crds(kube)
    for name, value in PRIORITY_CLASSES.items():
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "preemptionPolicy": "PreemptLowerPriority"})
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        obj: dict[str, Any] = copy.deepcopy(doc)
        kind = obj["kind"]
        if kind == "Queue":
            kube.create(QUEUES, obj)
        elif kind == "Node":
            status = obj["status"]
            status.setdefault("capacity", status["allocatable"])
            create_node(kube, obj)
        elif kind == "Pod":
            obj["metadata"].pop("creationTimestamp", None)
            phase = obj.pop("status", {}).get("phase")
            namespace = obj["metadata"]["namespace"]
            kube.create(pods_path(namespace), obj)
            if phase == "Running":
                answer = kube.client.patch(f"{pods_path(namespace)}/{obj['metadata']['name']}/status",
                                           json={"status": {"phase": "Running"}},
                                           headers={"Content-Type": "application/merge-patch+json"})
                assert answer.status_code == 200, answer.text
        else:
            raise AssertionError(f"examples/explain.yaml: no loader for {kind}")


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    yield from module_apiserver(_load_example)


def _masked(line: str) -> str:
    """What differs from one server to the next as placeholders: UIDs, and the ages of a jobs table's rows."""
    line = UID.sub("<uid>", line)
    return AGE.sub("<age>", line) if line.startswith("default/pg-") else line


def _live_commands() -> list[Command]:
    return [c for c in page_commands(PAGE) if c.kind == "shell" and "--kubeconfig" in c.source and not c.inline]


def test_the_page_shows_the_live_commands_with_their_output() -> None:
    commands = _live_commands()
    subcommands = {tuple(shlex.split(c.source)[1:3]) for c in commands}
    assert {("explain", "big"), ("get", "queues"), ("get", "jobs"), ("schedule", "--kubeconfig")} <= subcommands, (
        subcommands)
    assert all(c.output for c in commands), [c.source for c in commands if not c.output]


@pytest.mark.parametrize("command", _live_commands(), ids=lambda c: f"{c.page.name}:{c.line}")
def test_the_live_output_shown_is_real(command: Command, kube_apiserver: KubeApiServer) -> None:
    argv = shlex.split(command.source.replace("~/.kube/config", str(kube_apiserver.kubeconfig_path)))
    assert argv[0] == "kaisched"
    result = CliRunner().invoke(cli, argv[1:], env={"COLUMNS": "120"})
    assert result.exit_code == command.exit_status, result.output
    printed = result.output.replace(kube_apiserver.url, "https://127.0.0.1:6443")
    shown = tuple(_masked(line) for line in command.output or ())
    missing = missing_lines(shown, "\n".join(_masked(line) for line in printed.splitlines()))
    assert not missing, f"{command.page.name}:{command.line}: not in the output: {missing}\nprinted:\n{printed}"
