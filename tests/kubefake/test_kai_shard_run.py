"""``kaisched run`` without ``--config`` takes the configuration KAI's operator renders from the cluster's
SchedulingShard (``--shard``, ``default``) and the ``kai-config`` Config, when the cluster still has them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kaisched.cli import cli
from tests.kubefake.server import FakeApiServer
from tests.kubefake.test_runner import NS, node, pod, pod_group, queue


def run_once(server: FakeApiServer, tmp_path: Path, *args: str) -> Result:
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(cli, ["run", "--kubeconfig", str(kubeconfig), "--max-cycles", "1",
                                    "--schedule-period", "0.05", "--listen-address", "off",
                                    "--plugin-server-address", "off", "--log-level", "info", *args])


def two_pods(server: FakeApiServer) -> None:
    """Two 1-GPU pods of two jobs on two empty nodes: binpack puts them on one node, spread on two."""
    for i in range(2):
        server.seed(node(f"node-{i}"))
    server.seed(queue("root", 16))
    server.seed(queue("team-a", 16, "root"))
    for name in ("a", "b"):
        server.seed(pod_group(name, "team-a", 1))
        server.seed(pod(f"{name}-0", "team-a", 1, group=name))


def nodes_used(server: FakeApiServer) -> set[str]:
    out = set()
    for name in ("a-0", "b-0"):
        obj = server.get_object("v1", "Pod", name, NS)
        assert obj is not None and obj["spec"].get("nodeName"), name
        out.add(obj["spec"]["nodeName"])
    return out


def shard(spec: dict[str, Any], name: str = "default") -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name}, "spec": spec}


def test_the_default_shard_configures_the_scheduler(server: FakeApiServer, tmp_path: Path) -> None:
    two_pods(server)
    server.seed(shard({"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "args": {"v": "4"}}))
    result = run_once(server, tmp_path)
    assert result.exit_code == 0, result.output
    assert len(nodes_used(server)) == 2  # spread
    assert "configuration from KAI's SchedulingShard" in result.output
    assert "spec.args.v: a KAI scheduler flag kaisched does not implement" in result.output


@pytest.mark.parametrize("args", [(), ("--shard", "")], ids=["no-shard", "not-looked-at"])
def test_without_a_shard_kais_defaults(server: FakeApiServer, tmp_path: Path, args: tuple[str, ...]) -> None:
    two_pods(server)
    if args:
        server.seed(shard({"placementStrategy": {"gpu": "spread"}}))
    result = run_once(server, tmp_path, *args)
    assert result.exit_code == 0, result.output
    assert len(nodes_used(server)) == 1  # binpack
    assert "configuration from KAI's SchedulingShard" not in result.output


def test_a_named_shard(server: FakeApiServer, tmp_path: Path) -> None:
    two_pods(server)
    server.seed(shard({"placementStrategy": {"gpu": "spread"}}, name="gpu"))
    server.seed({"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
                 "spec": {"global": {"schedulerName": "kai-scheduler"}}})
    result = run_once(server, tmp_path, "--shard", "gpu")
    assert result.exit_code == 0, result.output
    assert len(nodes_used(server)) == 2 and "configuration from KAI's SchedulingShard" in result.output


def test_a_config_file_wins_over_the_shard(server: FakeApiServer, tmp_path: Path) -> None:
    two_pods(server)
    server.seed(shard({"placementStrategy": {"gpu": "spread"}}))
    config = tmp_path / "config.yaml"
    config.write_text("actions: allocate\n")
    result = run_once(server, tmp_path, "--config", str(config))
    assert result.exit_code == 0, result.output
    assert len(nodes_used(server)) == 1 and "configuration from KAI's SchedulingShard" not in result.output


def test_a_shard_kaisched_cannot_use_is_a_usage_error(server: FakeApiServer, tmp_path: Path) -> None:
    server.seed(shard({"partitionLabelValue": "pool-a"}))
    result = run_once(server, tmp_path)
    assert result.exit_code == 2
    assert "SchedulingShard default: spec.partitionLabelValue: 'pool-a'" in result.output
