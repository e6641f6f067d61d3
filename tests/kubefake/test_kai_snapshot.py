"""Kubernetes mode serves KAI's ``GET /get-snapshot`` on the plugin HTTP port, and the snapshot it serves replays in
``kaisched replay`` with the decisions the scheduler itself makes on that state (the round trip)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.replay import prepare_replay, run_replay
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.k8s.kai_snapshot import load_snapshot
from kaisched.kube.client import KubeClient
from kaisched.kube.kai_snapshot import PATH, parse_address, plugin_server, start_plugin_server
from kaisched.kube.runner import KubeScheduler, RunOptions
from tests.kubefake.server import FakeApiServer
from tests.kubefake.test_runner import node, pod, pod_group, queue
from tests.unit.kai_snapshots import without_generators

SPREAD = {"tiers": [{"plugins": [{"name": n} for n in ("predicates", "proportion", "priority", "elastic",
                                                      "gpusharingorder", "taskorder", "snapshot")]
                     + [{"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "binpack"}}]}],
          "params": {"default-staleness-grace-period": "90s", "max-evicted-gpus-ratio": 2}}


@pytest.fixture
def make_scheduler(client: KubeClient) -> Iterator[Any]:
    """``make_scheduler(config)``: a started, synced scheduler on the fake API (no cycle run), closed afterwards."""
    made: list[KubeScheduler] = []

    def make(config: SchedulerConfig) -> KubeScheduler:
        made.append(KubeScheduler(client, config, RunOptions(listen_port=None, schedule_period=0.05)))
        made[-1].start()
        assert made[-1].wait_synced(10.0)
        return made[-1]

    yield make
    for sched in made:
        sched.close()


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def decisions(result: CycleResult) -> dict[str, Any]:
    return {"binds": sorted((b.pod, b.node) for b in result.binds),
            "pipelined": sorted((p.pod, p.node) for p in result.pipelined),
            "evictions": sorted((e.pod, e.action, e.preemptor) for e in result.evictions),
            "pending": sorted((g.name, g.status) for g in result.pod_groups)}


def busy_cluster(server: FakeApiServer) -> None:
    """team-b runs over its quota; team-a's gang is pending (a reclaim); a free node for a spread placement."""
    for i in range(2):
        server.seed(node(f"node-{i}"))
    server.seed(queue("root", 16))
    server.seed(queue("team-a", 8, "root"))
    server.seed(queue("team-b", 4, "root"))
    for name, node_name in (("b-0", "node-0"), ("b-1", "node-0"), ("b-2", "node-1"), ("b-3", "node-1")):
        server.seed(pod_group(name, "team-b", 1))
        server.seed(pod(name, "team-b", 4, group=name, node_name=node_name, phase="Running"))
    server.seed(pod_group("train", "team-a", 2))
    for i in range(2):
        server.seed(pod(f"train-{i}", "team-a", 4, group="train"))
    server.seed(pod_group("small", "team-a", 1))
    server.seed(pod("small-0", "team-a", 0, group="small", fraction="0.5"))


@pytest.mark.parametrize("config", [SchedulerConfig(), SchedulerConfig.from_mapping(SPREAD)],
                         ids=["kai-defaults", "spread-and-params"])
def test_the_served_snapshot_replays_with_the_schedulers_decisions(server: FakeApiServer, make_scheduler: Any,
                                                                   config: SchedulerConfig, tmp_path: Path) -> None:
    busy_cluster(server)
    sched = make_scheduler(config)
    with plugin_server(sched, "127.0.0.1", 0).start() as plugin:
        status, content_type, body = get(f"{plugin.url}{PATH}")
    assert (status, content_type) == (200, "application/zip")
    ours = sched.run_cycle()  # the scheduler's own cycle on the state the snapshot holds
    assert sched.writer is not None and sched.writer.drain(10.0)
    snap = load_snapshot(body)
    replay = prepare_replay(snap)
    assert without_generators(replay.config) == without_generators(config)
    assert snap.captured_at is not None
    replayed = run_replay(replay)
    path = tmp_path / "snapshot.zip"
    path.write_bytes(body)
    cli_run = CliRunner().invoke(cli, ["replay", str(path), "-o", "json", "-q"])
    assert cli_run.exit_code == 0, cli_run.output
    assert json.loads(cli_run.stdout)["binds"] == [b.to_dict() for b in replayed.binds]
    assert decisions(replayed) == decisions(ours)
    assert replayed.evictions, "the scenario reclaims"


def test_the_snapshot_is_in_kais_format(server: FakeApiServer, make_scheduler: Any) -> None:
    busy_cluster(server)
    sched = make_scheduler(SchedulerConfig.from_mapping(SPREAD))
    with plugin_server(sched, "127.0.0.1", 0).start() as plugin:
        _, _, body = get(f"{plugin.url}{PATH}")
    with zipfile.ZipFile(BytesIO(body)) as archive:
        assert archive.namelist() == ["snapshot.json"]
        assert archive.getinfo("snapshot.json").compress_type == zipfile.ZIP_DEFLATED
        text = archive.read("snapshot.json").decode()
    assert text.endswith("}\n") and "\n" not in text[:-1]  # compact, as Go's json.Encoder writes it
    doc = json.loads(text)
    assert list(doc["rawObjects"]) == ["pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses",
                                       "configMaps", "persistentVolumes", "persistentVolumeClaims",
                                       "csiStorageCapacities", "storageClasses", "csiDrivers", "resourceClaims",
                                       "resourceSlices", "deviceClasses", "topologies", "nodeResourceTopologies"]
    assert doc["rawObjects"]["bindRequests"] is None and len(doc["rawObjects"]["pods"]) == 7
    params = doc["schedulerParams"]
    assert params["globalDefaultStalenessGracePeriod"] == 90_000_000_000  # time.Duration: nanoseconds
    assert params["schedulePeriod"] == 50_000_000
    assert params["partitionParams"] == {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""}
    assert params["schedulerName"] == "kai-scheduler" and "detailedFitErrors" not in params  # omitempty
    assert doc["config"]["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    assert {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "binpack"}} in \
        doc["config"]["tiers"][0]["plugins"]
    assert doc["kaisched"]["params"] == {"max-evicted-gpus-ratio": 2.0}  # no KAI field for it
    version = doc["discovery"]["serverVersion"]
    assert version["gitVersion"] and load_snapshot(body).server_version == version["gitVersion"]
    assert "resources" not in doc["discovery"]  # the fake server serves no resource.k8s.io


def test_the_plugin_server_serves_the_snapshot_only(server: FakeApiServer, make_scheduler: Any) -> None:
    sched = make_scheduler(SchedulerConfig())
    with plugin_server(sched, "127.0.0.1", 0).start() as plugin:
        assert get(f"{plugin.url}/metrics")[0] == 404
        assert get(f"{plugin.url}/healthz")[0] == 404
        assert get(f"{plugin.url}{PATH}?x=1")[0] == 200


def test_the_address_is_configurable_and_a_busy_port_is_not_fatal(server: FakeApiServer,
                                                                  make_scheduler: Any) -> None:
    assert parse_address("off") is None
    assert parse_address(":9081") == ("0.0.0.0", 9081)
    assert parse_address("127.0.0.1:8081") == ("127.0.0.1", 8081)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address("8081")
    sched = make_scheduler(SchedulerConfig())
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert start_plugin_server(sched, ("127.0.0.1", port)) is None
    started = start_plugin_server(sched, ("127.0.0.1", 0))
    assert started is not None
    try:
        assert get(f"{started.url}{PATH}")[0] == 200
    finally:
        started.stop()
    without = make_scheduler(SchedulerConfig.from_mapping({"tiers": [{"plugins": [{"name": "predicates"},
                                                                                  {"name": "proportion"}]}]}))
    assert start_plugin_server(without, ("127.0.0.1", 0)) is None  # no snapshot plugin: not served, as in KAI


def test_run_refuses_a_bad_plugin_server_address() -> None:
    result = CliRunner().invoke(cli, ["run", "--plugin-server-address", "nope"])
    assert result.exit_code == 2 and "--plugin-server-address" in result.output


def test_a_dra_cluster_says_so_in_the_discovery() -> None:
    """KAI's snapshot-tool turns DRA on from the resource.k8s.io resources of the snapshot's discovery."""
    from tests.kubefake.test_dra_runner import dra_resources

    srv = FakeApiServer(bookmark_interval=0.2)
    for res in dra_resources("v1"):
        srv.register(res)
    srv.start()
    client = KubeClient.from_url(srv.url, timeout=5.0, trust_env=False)
    sched = KubeScheduler(client, SchedulerConfig(), RunOptions(listen_port=None, dra_version="v1"))
    try:
        sched.start()
        assert sched.wait_synced(10.0)
        with plugin_server(sched, "127.0.0.1", 0).start() as plugin:
            _, _, body = get(f"{plugin.url}{PATH}")
    finally:
        sched.close()
        client.close()
        srv.stop()
    with zipfile.ZipFile(BytesIO(body)) as archive:
        doc = json.loads(archive.read("snapshot.json"))
    (resources,) = doc["discovery"]["resources"]
    assert resources["groupVersion"] == "resource.k8s.io/v1"
    assert {r["name"] for r in resources["resources"]} == {"resourceclaims", "resourceslices", "deviceclasses"}
