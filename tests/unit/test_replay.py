"""``kaisched replay``: KAI's snapshot ZIP (v0.13 and v0.17 shapes) replayed with its own actions, tiers and params,
the node-pool partition, what kaisched does not use listed, and unreadable snapshots as errors naming the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.replay import load_replay, run_replay
from kaisched.k8s.kai_snapshot import SnapshotError, load_snapshot
from tests.unit import kai_snapshots as K

NOW = "2026-01-02T00:00:00Z"


def write(tmp_path: Path, data: bytes, name: str = "snapshot.zip") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def replay(tmp_path: Path, data: bytes, *args: str) -> Any:
    return CliRunner().invoke(cli, ["replay", write(tmp_path, data), "--now", NOW, *args])


def decisions(output: str) -> dict[str, Any]:
    data = json.loads(output)
    return {"binds": {b["pod"]: b["node"] for b in data["binds"]},
            "pipelined": {p["pod"]: p["node"] for p in data["pipelined"]},
            "evictions": sorted(e["pod"] for e in data["evictions"])}


@pytest.mark.parametrize("version", ["v0.13", "v0.17"])
def test_both_shapes_replay_the_gang(tmp_path: Path, version: str) -> None:
    result = replay(tmp_path, K.snapshot(version), "-o", "json")
    assert result.exit_code == 0, result.output
    assert decisions(result.stdout)["binds"] == {"team/train-0": "node-1", "team/train-1": "node-0"}
    assert f"KAI {version} shape, Kubernetes v1.33.1; 3 pods, 2 nodes, 3 queues, 2 podGroups" in result.stderr
    assert "Traceback" not in result.output


def test_table_and_yaml_print_the_same_cycle_result_as_schedule(tmp_path: Path) -> None:
    table = replay(tmp_path, K.snapshot(), "--quiet")
    assert table.exit_code == 0 and table.stderr == ""
    assert "2 binds, 0 pipelined, 0 evictions, 0 of 2 PodGroups pending" in table.stdout
    yaml_out = replay(tmp_path, K.snapshot(), "-o", "yaml", "-q")
    assert yaml_out.exit_code == 0 and "binds:\n- pod: team/train-0\n  node: node-1" in yaml_out.stdout


def test_the_snapshot_params_are_taken_go_durations_in_nanoseconds(tmp_path: Path) -> None:
    params = K.params_v013(globalDefaultStalenessGracePeriod=90_000_000_000, maxNumberConsolidationPreemptees=3)
    del params["fullHierarchyFairness"]  # omitempty: absent means false
    del params["allowConsolidatingReclaim"]
    rp = load_replay(write(tmp_path, K.snapshot(params=params)))
    p = rp.config.params
    assert p.default_staleness_grace_period == timedelta(seconds=90)
    assert p.max_consolidation_preemptees == 3
    assert not p.full_hierarchy_fairness and not p.allow_consolidating_reclaim
    assert rp.config.search_budgets is not None and rp.config.search_budgets.job_limit() == 240


def test_the_snapshot_actions_and_tiers_are_run_and_unimplemented_ones_listed(tmp_path: Path) -> None:
    tiers = [{"plugins": [{"name": "predicates"}, {"name": "proportion"}, {"name": "sla-plugin"},
                          {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "binpack"}}]}]
    config = {"actions": "allocate, backfill", "tiers": tiers}
    rp = load_replay(write(tmp_path, K.snapshot(config=config)))
    assert rp.config.actions == ("allocate",)
    assert [p.name for p in rp.config.plugins] == ["predicates", "proportion", "nodeplacement"]
    assert rp.config.plugin("nodeplacement").arguments == {"gpu": "spread", "cpu": "binpack"}  # type: ignore[union-attr]
    assert "config.actions: action 'backfill' is not implemented by kaisched; not run" in rp.warnings
    assert "config.tiers[0].plugins[2]: plugin 'sla-plugin' is not implemented by kaisched; not run" in rp.warnings
    result = replay(tmp_path, K.snapshot(config=config), "-o", "json")
    assert result.exit_code == 0
    assert "plugin 'sla-plugin' is not implemented by kaisched" in result.stderr
    # gpu: spread (binpack puts train-0 beside serve-0 on node-1)
    assert decisions(result.stdout)["binds"] == {"team/train-0": "node-0", "team/train-1": "node-0"}


def test_a_node_pool_partition_filters_nodes_queues_and_podgroups(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["nodes"] = [K.node("node-0", pool="pool-a"), K.node("node-1")]
    objects["queues"] = [K.queue("root", 16, pool="pool-a"), K.queue("team-a", 8, "root", pool="pool-a"),
                         K.queue("team-b", 8, "root")]
    objects["podGroups"] = [K.pod_group("train", "team-a", 2, pool="pool-a"), K.pod_group("serve", "team-b", 1)]
    params = K.params_v013(partitionParams={"NodePoolLabelKey": "kai.scheduler/node-pool",
                                            "NodePoolLabelValue": "pool-a"})
    result = replay(tmp_path, K.snapshot("v0.13", objects=objects, params=params), "-o", "json")
    assert result.exit_code == 0, result.output
    assert decisions(result.stdout)["binds"] == {"team/train-0": "node-0", "team/train-1": "node-0"}
    data = json.loads(result.stdout)
    assert [q["name"] for q in data["queues"]] == ["root", "team-a"]
    assert [g["name"] for g in data["podGroups"]] == ["team/train"]
    assert "partition: kai.scheduler/node-pool=pool-a" in result.stderr
    assert "partition kai.scheduler/node-pool=pool-a: 1 nodes, 1 queues, 1 podGroups outside it left out" in \
        result.stderr


def test_the_default_partition_leaves_out_labelled_objects(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["nodes"] = [K.node("node-0"), K.node("node-1", pool="other")]
    result = replay(tmp_path, K.snapshot(objects=objects), "-o", "json")
    # node-1 is another shard's: the gang fits on node-0 only; serve-0 runs there, outside this partition (an
    # object error: kaisched does not account a pod on a node outside the snapshot)
    assert result.exit_code == 1
    assert decisions(result.stdout)["binds"] == {"team/train-0": "node-0", "team/train-1": "node-0"}
    assert [e["object"] for e in json.loads(result.stdout)["errors"]] == ["Pod team/serve-0"]


def test_pods_as_kais_tool_sees_them(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["pods"] += [
        K.pod("loose", "team-a", 1, group=None),  # pending, no pod-group-name: never scheduled
        K.pod("loose-run", "team-a", 4, group=None, node_name="node-0", phase="Running"),  # counts on node-0
        K.pod("nophase", "team-b", 1, group="serve", phase=None),
    ]
    objects["bindRequests"] = [{"metadata": {"name": "br", "namespace": K.NS},
                                "spec": {"podName": "train-0", "selectedNode": "node-0"}}]
    rp = load_replay(write(tmp_path, K.snapshot(objects=objects)))
    names = {p.meta.name: p for p in rp.objects.pods}
    assert "loose" not in names
    assert names["loose-run"].scheduler_name != "kai-scheduler"
    assert names["nophase"].phase == "Unknown"
    assert names["train-0"].node_name == "node-0"
    text = "\n".join(rp.warnings)
    assert "1 pending pods of kai-scheduler have no pod-group-name annotation" in text
    assert "1 bound or running pods of kai-scheduler have no pod-group-name annotation" in text
    assert "1 pending pods with a BindRequest" in text
    result = run_replay(rp)
    # train-0 binds (BindRequest) on node-0 with loose-run: 8 GPUs; train-1 must go to node-1 beside serve-0
    assert {b.pod: b.node for b in result.binds} == {"team/train-1": "node-1"}


def test_unused_object_lists_and_params_are_listed(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["configMaps"] = [{"metadata": {"name": "gpu-env", "namespace": K.NS}}]
    objects["storageClasses"] = [{"metadata": {"name": "fast"}}]
    params = K.params_v013(scheduleCSIStorage=True, stuckInReleasingThreshold=5_000_000_000, futureKnob=1)
    result = replay(tmp_path, K.snapshot(objects=objects, params=params), "-o", "json")
    assert result.exit_code == 0
    for text in ("rawObjects.configMaps: 1 not used", "rawObjects.storageClasses: 1 not used",
                 "schedulerParams.scheduleCSIStorage: true, but kaisched does not schedule CSI storage",
                 "schedulerParams.stuckInReleasingThreshold: not implemented", "schedulerParams.futureKnob: unknown"):
        assert text in result.stderr


def test_a_kaisched_time_is_taken_from_the_snapshot_else_now(tmp_path: Path) -> None:
    doc = K.document()
    doc["kaisched"] = {"capturedAt": "2026-03-04T05:06:07Z"}
    rp = load_replay(write(tmp_path, K.zipped(doc)))
    assert rp.default_now().isoformat() == "2026-03-04T05:06:07+00:00"


def _zip(doc: object) -> bytes:
    return K.zipped(doc)


def _with(path: tuple[str, ...], value: object) -> bytes:
    doc = K.document()
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return _zip(doc)


GOOD = K.snapshot()
BAD: list[tuple[str, bytes, str]] = [
    ("not a zip", b"this is not a zip file at all", "not a ZIP archive (corrupt or truncated)"),
    ("truncated", GOOD[: len(GOOD) // 2], "corrupt or truncated"),
    ("empty", b"", "not a ZIP archive"),
    ("no snapshot.json", K.zip_bytes({"other.json": b"{}"}), "the ZIP has no snapshot.json (it holds other.json)"),
    ("invalid json", K.zip_bytes({"snapshot.json": b'{"config": '}), "snapshot.json: invalid JSON at line 1"),
    ("not utf-8", K.zip_bytes({"snapshot.json": b"\xff\xfe"}), "snapshot.json is not UTF-8 text"),
    ("a list", _zip([1, 2]), "expected a JSON object with config, schedulerParams, rawObjects, got a list"),
    ("no params", _zip({"config": {}, "rawObjects": {}}), "schedulerParams: missing"),
    ("no objects", _zip({"config": {}, "schedulerParams": K.params_v013()}), "rawObjects: missing"),
    ("duration string", _with(("schedulerParams", "globalDefaultStalenessGracePeriod"), "60s"),
     "schedulerParams.globalDefaultStalenessGracePeriod: expected integer nanoseconds"),
    ("bool as string", _with(("schedulerParams", "fullHierarchyFairness"), "true"),
     "schedulerParams.fullHierarchyFairness: expected a boolean, got the string 'true'"),
    ("partition value", _with(("schedulerParams", "partitionParams"), {"NodePoolLabelValue": 3}),
     "schedulerParams.partitionParams.NodePoolLabelValue: expected a string, got the number 3"),
    ("actions list", _with(("config", "actions"), ["allocate"]),
     "config.actions: expected a comma separated string, got a list"),
    ("tiers object", _with(("config", "tiers"), {"plugins": []}), "config.tiers: expected a list"),
    ("plugin name", _with(("config", "tiers"), [{"plugins": [{"name": 7}]}]),
     "config.tiers[0].plugins[0].name: expected a plugin name (a string), got the number 7"),
    ("plugin argument", _with(("config", "tiers"), [{"plugins": [{"name": "proportion",
                                                                  "arguments": {"kValue": 1.5}}]}]),
     "config.tiers[0].plugins[0].arguments.kValue: expected a string"),
    ("pods object", _with(("rawObjects", "pods"), {"a": 1}), "rawObjects.pods: expected a list of objects"),
    ("pod string", _with(("rawObjects", "pods"), ["pod-a"]), "rawObjects.pods[0]: expected an object"),
    ("pod spec", _with(("rawObjects", "pods"), [{"metadata": {"name": "a"}, "spec": []}]),
     "rawObjects.pods[0].spec: expected an object, got a list"),
    ("queue depth", _with(("config", "queueDepthPerAction"), {"allocate": "10"}),
     "config.queueDepthPerAction.allocate: expected an integer"),
    ("budgets", _with(("config", "scenarioSearchBudgets"), {"maxJobSearchDuration": 5}),
     "config: scenarioSearchBudgets.maxJobSearchDuration: must be a valid Go duration"),
    ("no action", _with(("config", "actions"), "backfill"),
     "config.actions: none of backfill is implemented by kaisched"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in BAD], ids=[n for n, _, _ in BAD])
def test_unreadable_snapshots_are_errors_naming_the_field(tmp_path: Path, data: bytes, message: str) -> None:
    result = replay(tmp_path, data)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stderr.startswith("kaisched replay: ")
    assert "Traceback" not in result.output and result.stdout == ""
    with pytest.raises(SnapshotError):
        load_replay(write(tmp_path, data, "again.zip"))


def test_a_missing_file_and_a_directory_are_usage_errors(tmp_path: Path) -> None:
    assert CliRunner().invoke(cli, ["replay", str(tmp_path / "nope.zip")]).exit_code == 2
    assert CliRunner().invoke(cli, ["replay", str(tmp_path)]).exit_code == 2


def test_the_size_limit_holds(tmp_path: Path) -> None:
    result = replay(tmp_path, K.snapshot(), "--max-input-bytes", "100")
    assert result.exit_code == 2 and "over the 100 byte limit" in result.stderr


def test_object_errors_are_listed_with_exit_status_1(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["pods"].append(K.pod("lost", "team-a", 1, group="no-such-group"))
    result = replay(tmp_path, K.snapshot(objects=objects), "-o", "json")
    assert result.exit_code == 1
    errors = json.loads(result.stdout)["errors"]
    assert any("no-such-group" in e["message"] for e in errors)


def test_a_go_encoder_newline_and_case_folded_partition_fields_are_read() -> None:
    doc = K.document("v0.13", params=K.params_v013(partitionParams={"nodepoollabelkey": "pool",
                                                                    "NODEPOOLLABELVALUE": "x"}))
    snap = load_snapshot(K.zipped(doc, version="v0.17"))
    assert (snap.partition_key, snap.partition_value) == ("pool", "x")


def test_a_snapshot_written_by_kaisched_replays_with_the_same_decisions(tmp_path: Path) -> None:
    from kaisched.cluster.replay import snapshot_zip
    from kaisched.cluster.schedule import run_prepared_cycle
    from kaisched.framework.config import SchedulerConfig
    from kaisched.k8s.parse import parse_objects

    objects = K.cluster()
    for p in objects["pods"]:
        del p["metadata"]["ownerReferences"]
    kinds = {"pods": ("Pod", "v1"), "nodes": ("Node", "v1"), "queues": ("Queue", "scheduling.run.ai/v2"),
             "podGroups": ("PodGroup", "scheduling.run.ai/v2alpha2")}
    docs = [{"kind": kinds[k][0], "apiVersion": kinds[k][1], **o} for k, items in objects.items() for o in items]
    config = SchedulerConfig.from_mapping({"actions": "allocate", "params": {"default-staleness-grace-period": "2m"},
                                           "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"},
                                                                  {"name": "nodeplacement",
                                                                   "arguments": {"gpu": "spread"}}]}]})
    when = datetime(2026, 1, 2, tzinfo=UTC)
    data = snapshot_zip(config, objects, when, schedule_period=1.0)
    rp = load_replay(write(tmp_path, data))
    assert K.without_generators(rp.config) == K.without_generators(config)
    assert rp.default_now() == when and rp.warnings == []
    assert [p.name for p in rp.config.plugins][-2:] == ["sg-nodelocalgreedy", "sg-multinodegang"]
    expected = run_prepared_cycle(parse_objects(docs), config, when, options=rp.options())
    assert run_replay(rp).to_dict() == expected.to_dict()
    doc = json.loads(zipfile_text(data))
    assert doc["schedulerParams"]["globalDefaultStalenessGracePeriod"] == 120_000_000_000


def zipfile_text(data: bytes) -> str:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.read("snapshot.json").decode()


# ------------------------------------------------------------------------------ --explain and --diff

ESC = "\x1b"


def kai_log(*lines: str) -> str:
    """A KAI scheduler log as a terminal shows it: zap's console lines with coloured levels."""
    return "".join(f"2026-01-02T00:00:00.000Z\t{ESC}[34mINFO{ESC}[0m\tframework/statement.go:1\t{line}\n"
                   for line in lines)


def test_diff_of_the_same_decisions(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_text(kai_log("Committing operations ...",
                           "Statement allocated task: <team/train-0> to node: <node-1>",
                           "Statement allocated task: <team/train-1> to node: <node-0>",
                           f"Allocating task: {ESC}[1mteam/train-0{ESC}[0m", "Allocating task: team/train-1"))
    result = replay(tmp_path, K.snapshot(), "--diff", str(log), "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["both:          bind team/train-0 on node-1",
                                          "both:          bind team/train-1 on node-0",
                                          "2 the same, 0 on another node, 0 only in KAI's log, 0 only in kaisched's "
                                          "cycle"]


def test_diff_lists_what_only_one_did_and_other_nodes(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_text(kai_log("Statement allocated task: <team/train-0> to node: <node-0>",
                           "Statement evicted task: <team/serve-0> from node: <node-1>",
                           "Evicting task: team/serve-0", "Allocating task: team/train-0",
                           "Allocating task: team/train-0"))  # a second statement committing it again
    result = replay(tmp_path, K.snapshot(), "--diff", str(log), "-o", "json", "-q")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "same": [],
        "differentNode": [{"action": "bind", "pod": "team/train-0", "kaiNode": "node-0", "kaischedNode": "node-1"}],
        "onlyKai": [{"action": "evict", "pod": "team/serve-0", "node": "node-1"}],
        "onlyKaisched": [{"action": "bind", "pod": "team/train-1", "node": "node-0"}]}
    text = replay(tmp_path, K.snapshot(), "--diff", str(log), "-q")
    assert "other node:    bind team/train-0: KAI node-0, kaisched node-1" in text.stdout
    assert "only KAI:      evict team/serve-0 from node-1" in text.stdout


def test_diff_at_verbosity_4_compares_pods_only(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_text(kai_log("Allocating task: team/train-0", "Pipelining task: team/train-1"))
    result = replay(tmp_path, K.snapshot(), "--diff", str(log), "-o", "yaml", "-q")
    assert result.exit_code == 1
    assert "same:\n- action: bind\n  pod: team/train-0\n  node: node-1" in result.stdout
    assert "onlyKai:\n- action: pipeline\n  pod: team/train-1\n  node: null" in result.stdout


def test_diff_with_a_log_without_decisions_says_so(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_text("I1201 scheduler started\n")
    result = replay(tmp_path, K.snapshot(), "--diff", str(log), "-q")
    assert result.exit_code == 1
    assert "no 'Allocating task', 'Pipelining task' or 'Evicting task' line in 1 lines" in result.stderr
    assert "only kaisched: bind team/train-0 on node-1" in result.stdout


def test_diff_of_an_unreadable_log_is_exit_2(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_bytes(b"\xff\xfe\x00")
    result = replay(tmp_path, K.snapshot(), "--diff", str(log))
    assert result.exit_code == 2 and "not a text file" in result.stderr


def test_explain_a_pending_pod_of_the_snapshot(tmp_path: Path) -> None:
    objects = K.cluster()
    objects["pods"][:2] = [K.pod("train-0", "team-a", 8, group="train"), K.pod("train-1", "team-a", 8, group="train")]
    result = replay(tmp_path, K.snapshot(objects=objects), "--explain", "train-0", "-n", "team", "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Job:       team/train (")
    as_json = replay(tmp_path, K.snapshot(objects=objects), "--explain", "train", "-n", "team", "-o", "json", "-q")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["job"] == "team/train"
    missing = replay(tmp_path, K.snapshot(objects=objects), "--explain", "nope", "-n", "team", "-q")
    assert missing.exit_code == 1 and "no pod or PodGroup 'nope' in namespace 'team'" in missing.stderr


def test_explain_and_diff_together_is_a_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "kai.log"
    log.write_text("")
    result = replay(tmp_path, K.snapshot(), "--explain", "x", "--diff", str(log))
    assert result.exit_code == 2 and "give one of them" in result.output


def test_kais_reservation_pods_hold_nothing_twice(tmp_path: Path) -> None:
    """A shared GPU as KAI's binder leaves it: two half-GPU pods in GPU group g-1 and the group's reservation pod
    (one whole GPU, in kai-resource-reservation): the device is held once, by its group."""
    objects = K.cluster()
    objects["pods"] = [p for p in objects["pods"] if p["metadata"]["name"] != "serve-0"]
    for name in ("half-a", "half-b"):
        half = K.pod(name, "team-b", 0, group="serve", node_name="node-1", phase="Running")
        del half["spec"]["containers"][0]["resources"]["limits"]
        half["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
        half["metadata"]["annotations"]["gpu-fraction"] = "0.5"
        half["metadata"]["labels"]["runai-gpu-group"] = "g-1"
        objects["pods"].append(half)
    reservation = K.pod("gpu-reservation-node-1", "team-b", 1, group=None, node_name="node-1", phase="Running")
    reservation["metadata"].update(namespace="kai-resource-reservation",
                                   labels={"app": "kai-resource-reservation", "runai-gpu-group": "g-1"})
    objects["pods"].append(reservation)
    rp = load_replay(write(tmp_path, K.snapshot(objects=objects)))
    assert not any("pod-group-name" in w for w in rp.warnings)
    result = run_replay(rp, datetime(2026, 1, 2, tzinfo=UTC))
    assert not result.errors
    assert {b.pod: b.node for b in result.binds} == {"team/train-0": "node-1", "team/train-1": "node-0"}
    node1 = next(n for n in result.nodes if n.name == "node-1")
    assert node1.idle == 3  # 8 GPUs: g-1 holds one (not two: the reservation pod is not counted), train-0 four


def test_a_snapshot_with_dra_objects_allocates_the_claim(tmp_path: Path) -> None:
    """resourceClaims, resourceSlices and deviceClasses as KAI's informers list them (no apiVersion or kind: the
    rawObjects key decides, resource.k8s.io/v1)."""
    from tests.unit import test_cluster_dra as D

    def bare(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}

    p = D.pod("p", claims={"gpu": "c1"})
    p["metadata"]["annotations"] = {"pod-group-name": "pg"}
    objects = {"nodes": [bare(D.node("node-0"))], "queues": [bare(D.queue())],
               "podGroups": [{"metadata": {"name": "pg", "namespace": "ml"},
                              "spec": {"queue": "team", "minMember": 1, "priorityClassName": "train"}}],
               "pods": [bare(p)], "deviceClasses": [bare(D.gpu_class())],
               "resourceSlices": [bare(D.gpu_slice("node-0", 2))], "resourceClaims": [bare(D.shared_claim("c1"))]}
    rp = load_replay(write(tmp_path, K.snapshot(objects=objects)))
    assert rp.objects.errors == [] and rp.warnings == []
    result = run_replay(rp, datetime(2026, 1, 2, tzinfo=UTC))
    assert [(b.pod, b.node) for b in result.binds] == [("ml/p", "node-0")]
    assert [c.to_dict()["claim"] for c in result.claims] == ["ml/c1"]


def test_only_the_first_json_value_is_read_as_gos_decoder_does() -> None:
    text = json.dumps(K.document()) + "\n{\"more\": true}\n"
    snap = load_snapshot(K.zip_bytes({"snapshot.json": text.encode()}))
    assert snap.counts()["pods"] == 3


def test_usage_history_for_time_based_fair_share(tmp_path: Path) -> None:
    """The snapshot has usageDBConfig but no history: --usage gives one, as for kaisched schedule."""
    config = {"actions": K.ACTIONS, "tiers": K.TIERS,
              "usageDBConfig": {"clientType": "prometheus", "connectionString": "http://prometheus:9090"}}
    data = K.snapshot(config=config)
    usage = tmp_path / "usage.yaml"
    usage.write_text("queues:\n  team-a: {gpu: 0.1}\n  team-b: {gpu: 0.6}\n")
    plain = replay(tmp_path, data, "-o", "json")
    assert plain.exit_code == 0 and "without --usage the queues are divided by weight only" in plain.stderr
    assert all(not q.get("usage") for q in json.loads(plain.stdout)["queues"])
    given = replay(tmp_path, data, "-o", "json", "--usage", str(usage))
    assert given.exit_code == 0, given.output
    queues = {q["name"]: q for q in json.loads(given.stdout)["queues"]}
    assert queues["team-b"]["usage"]["gpu"] > queues["team-a"]["usage"]["gpu"]
    explained = replay(tmp_path, data, "--explain", "train", "-n", "team", "--usage", str(usage), "-o", "json", "-q")
    assert explained.exit_code == 0 and json.loads(explained.stdout)["job"] == "team/train"
    bad = replay(tmp_path, data, "--usage", str(tmp_path / "missing.yaml"))
    assert bad.exit_code == 2


@pytest.mark.parametrize("command", ["replay", "from-kai"])
def test_help_examples_run_as_written(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples of ``kaisched replay --help`` and ``kaisched from-kai --help`` run from the repository root
    (those that need a cluster, ``--kubeconfig``, are left out)."""
    import shlex

    from tests.unit.test_cli_help import examples

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    found = [c for c in examples([command]) if "--kubeconfig" not in c]
    assert found
    for line in found:
        words = shlex.split(line)
        assert words[:2] == ["kaisched", command]
        result = CliRunner().invoke(cli, words[1:], env={"COLUMNS": "120"})
        assert result.exit_code == 0, (line, result.output)


def test_real_kai_snapshot_tool_logs_are_read() -> None:
    """examples/kai/*.log are KAI's own snapshot-tool (main branch, d5bc503a) at --verbosity 6 on the ZIPs beside
    them: colour codes, the statement's node lines, the committed lines. Its decisions are kaisched's, node for
    node: a reclaim (two victims, the gang pipelined) and a gang with a fractional pod."""
    from kaisched.cluster.kai_log import Decision, compare, cycle_decisions, read_kai_log

    root = Path(__file__).resolve().parents[2] / "examples" / "kai"
    cases = {
        "snapshot": [Decision("evict", "team-b/serve-3-0", "node-1"), Decision("evict", "team-b/serve-2-0", "node-1"),
                     Decision("pipeline", "team-a/train-0", "node-1"),
                     Decision("pipeline", "team-a/train-1", "node-1")],
        "gang": [Decision("bind", "team/notebook-0", "node-1"), Decision("bind", "team/train-0", "node-0"),
                 Decision("bind", "team/train-1", "node-0")],
    }
    for name, expected in cases.items():
        log = read_kai_log((root / ("snapshot-tool.log" if name == "snapshot" else f"{name}-snapshot-tool.log"))
                           .read_text())
        assert sorted(log.decisions, key=str) == sorted(expected, key=str), name
        rp = load_replay(root / f"{name}.zip")
        assert rp.snapshot.kai_version == "v0.17" and rp.warnings == []
        diff = compare(log.decisions, cycle_decisions(run_replay(rp, datetime(2026, 1, 2, tzinfo=UTC))))
        assert diff.identical and len(diff.same) == len(expected), name
