"""KAI's SchedulingShard/Config rendered as KAI's operator renders them (kaisched.framework.kai_operator), and
``kaisched from-kai``: KAI's Helm values and objects as kaisched's Helm values or scheduler configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.framework.kai_operator import shard_config
from tests.kubefake.server import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
KAI_VALUES = ROOT / "examples" / "kai" / "kai-values.yaml"
CHART_VALUES = ROOT / "deploy" / "helm" / "kaisched" / "values.yaml"


def shard(spec: dict[str, Any] | None = None, name: str = "default") -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name},
            "spec": spec or {}}


def plugin_names(mapping: dict[str, Any]) -> list[str]:
    return [p["name"] for p in mapping["tiers"][0]["plugins"]]


def test_the_default_shard_is_kais_default_configuration() -> None:
    rendered = shard_config(shard())
    m = rendered.mapping
    assert m["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    assert plugin_names(m) == ["predicates", "proportion", "priority", "nodeavailability", "resourcetype",
                               "podaffinity", "elastic", "kubeflow", "ray", "subgrouporder", "taskorder",
                               "nominatednode", "dynamicresources", "minruntime", "topology", "snapshot",
                               "sg-nodelocalgreedy", "sg-multinodegang", "gpupack", "nodeplacement", "gpusharingorder"]
    assert m["tiers"][0]["plugins"][-2] == {"name": "nodeplacement", "arguments": {"gpu": "binpack", "cpu": "binpack"}}
    config = resolve_config(rendered.config())
    assert config.search_budgets is not None and config.search_budgets.job_limit() == 240
    assert rendered.notes == []


def test_spread_swaps_the_gpu_plugins_and_turns_consolidation_off() -> None:
    m = shard_config(shard({"placementStrategy": {"gpu": "spread"}})).mapping
    assert m["actions"] == "allocate, reclaim, preempt, stalegangeviction"
    names = plugin_names(m)
    assert "gpuspread" in names and "gpupack" not in names and "gpusharingorder" not in names
    assert m["tiers"][0]["plugins"][names.index("nodeplacement")]["arguments"] == {"gpu": "spread", "cpu": "binpack"}
    assert "consolidation" not in shard_config(shard({"placementStrategy": {"cpu": "spread"}})).mapping["actions"]


def test_overrides_merge_over_the_defaults() -> None:
    m = shard_config(shard({
        "kValue": 0.5, "minRuntime": {"preemptMinRuntime": "10m", "reclaimMinRuntime": "5m"},
        "queueDepthPerAction": {"allocate": 200},
        "plugins": {"elastic": {"enabled": False}, "taskorder": {"priority": 5000},
                    "nodeplacement": {"arguments": {"gpu": "spread"}}},
        "actions": {"consolidation": {"enabled": False}, "preempt": {"priority": 600}},
    })).mapping
    names = plugin_names(m)
    assert names[0] == "taskorder" and "elastic" not in names
    plugins = {p["name"]: p for p in m["tiers"][0]["plugins"]}
    assert plugins["proportion"]["arguments"] == {"kValue": "0.5"}
    assert plugins["minruntime"]["arguments"] == {"defaultPreemptMinRuntime": "10m", "defaultReclaimMinRuntime": "5m"}
    assert plugins["nodeplacement"]["arguments"] == {"gpu": "spread"}  # arguments replace the defaults wholesale
    assert m["actions"] == "preempt, allocate, reclaim, stalegangeviction"
    assert m["queueDepthPerAction"] == {"allocate": 200}
    resolve_config(SchedulerConfig.from_mapping(m))


def test_args_become_params_and_the_rest_is_listed() -> None:
    rendered = shard_config(shard({"args": {"detailed-fit-errors": "true", "v": "4", "schedule-period": "2s",
                                            "max-consolidation-preemptees": "8"}}),
                            {"kind": "Config", "metadata": {"name": "kai-config"},
                             "spec": {"global": {"schedulerName": "team-scheduler", "queueLabelKey": "team/queue"},
                                      "podGrouper": {"defaultPrioritiesConfigMapName": "prio",
                                                     "defaultPrioritiesConfigMapNamespace": "kai-scheduler"}}})
    params = rendered.config().params
    assert params.detailed_fit_errors and params.max_consolidation_preemptees == 8
    assert params.scheduler_name == "team-scheduler"
    assert (params.default_priorities_configmap_name, params.default_priorities_configmap_namespace) == (
        "prio", "kai-scheduler")
    assert rendered.notes == [
        "SchedulingShard default: spec.args.v: a KAI scheduler flag kaisched does not implement; ignored",
        "SchedulingShard default: spec.args.schedule-period: an option of kaisched run (--schedule-period); give it "
        "there, not applied",
        "Config kai-config: spec.global.queueLabelKey: 'team/queue' is not supported (kaisched uses "
        "kai.scheduler/queue)"]


@pytest.mark.parametrize(("spec", "message"), [
    ({"partitionLabelValue": "pool-a"}, "SchedulingShard default: spec.partitionLabelValue: 'pool-a': kaisched run "
                                        "schedules the whole cluster as one shard"),
    ({"placementStrategy": {"gpu": "pack"}}, "spec.placementStrategy.gpu: expected binpack or spread, got 'pack'"),
    ({"args": {"detailed-fit-errors": "maybe"}}, "spec.args.detailed-fit-errors: expected true or false"),
    ({"plugins": {"elastic": {"enabled": "no"}}}, "spec.plugins.elastic.enabled: expected true or false"),
    ({"kValue": "high"}, "spec.kValue: expected a number"),
    ({"plugins": []}, "spec.plugins: expected an object, got a list"),
])
def test_unusable_shards_are_errors_naming_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        shard_config(shard(spec))
    assert message in str(info.value)


def unknown_keys(values: dict[str, Any], chart: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of ``values`` the chart's values.yaml does not have (free-form maps, such as nodeSelector, not entered)."""
    out = []
    for key, value in values.items():
        if key not in chart:
            out.append(prefix + key)
        elif isinstance(value, dict) and isinstance(chart[key], dict) and chart[key] and key != "config":
            out += unknown_keys(value, chart[key], f"{prefix}{key}.")
    return out


def test_kai_values_become_kaisched_values_the_chart_has() -> None:
    result = CliRunner().invoke(cli, ["from-kai", "--values", str(KAI_VALUES)])
    assert result.exit_code == 0, result.output
    values = yaml.safe_load(result.stdout)
    chart = yaml.safe_load(CHART_VALUES.read_text())
    assert unknown_keys(values, chart) == [], "every value written is one of kaisched's chart"
    assert values["image"] == {"repository": "registry.example.com/kai-scheduler/kaisched"}
    assert values["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert (values["namespace"], values["createNamespace"]) == ("kai-scheduler", False)
    assert values["leaderElection"] == {"enabled": True} and values["defaults"] == {"queues": False}
    config = resolve_config(SchedulerConfig.from_mapping(values["config"]))
    assert config.actions == ("allocate", "reclaim", "preempt")  # spread: no consolidation; stalegangeviction off
    assert config.plugin("proportion").arguments == {"kValue": "0.5"}  # type: ignore[union-attr]
    assert config.params.detailed_fit_errors
    for text in ("spec.args.v: a KAI scheduler flag kaisched does not implement",
                 "global.tag: 'v0.17.0' is KAI's version", "binder: not mapped"):
        assert text in result.stderr


def test_leader_election_off_means_one_replica_and_gpu_sharing_off_is_said(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"global": {"leaderElection": False, "gpuSharingMode": "Disabled"}}))
    result = CliRunner().invoke(cli, ["from-kai", "--values", str(path), "-n", "gpu-sched"])
    values = yaml.safe_load(result.stdout)
    assert values["replicas"] == 1 and values["leaderElection"] == {"enabled": False}
    assert values["namespace"] == "gpu-sched"
    assert "kaisched has no webhook and schedules gpu-fraction and gpu-memory pods" in result.stderr


def test_objects_from_files_and_unknown_plugins_listed(tmp_path: Path) -> None:
    path = tmp_path / "kai.yaml"
    path.write_text(yaml.safe_dump_all([
        shard({"plugins": {"sla": {"priority": 50}}, "actions": {"backfill": {}}}, name="gpu"),
        {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
         "spec": {"global": {"schedulerName": "other"}}}]))
    result = CliRunner().invoke(cli, ["from-kai", "-f", str(path), "--shard", "gpu", "-o", "config"])
    assert result.exit_code == 0, result.output
    config = resolve_config(SchedulerConfig.from_mapping(yaml.safe_load(result.stdout)))
    assert config.params.scheduler_name == "other" and "backfill" not in config.actions
    assert "plugin 'sla': not implemented by kaisched; left out" in result.stderr
    assert "action 'backfill': not implemented by kaisched; left out" in result.stderr
    missing = CliRunner().invoke(cli, ["from-kai", "-f", str(path)])
    assert missing.exit_code == 2 and "no SchedulingShard named 'default'" in missing.stderr


def test_bad_input_is_exit_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "shard.yaml"
    bad.write_text(yaml.safe_dump(shard({"partitionLabelValue": "a"})))
    result = CliRunner().invoke(cli, ["from-kai", "-f", str(bad)])
    assert result.exit_code == 2 and "spec.partitionLabelValue" in result.stderr and "Traceback" not in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("global: [\n")
    result = CliRunner().invoke(cli, ["from-kai", "--values", str(broken)])
    assert result.exit_code == 2 and "invalid YAML" in result.stderr
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"global": {"imagePullSecrets": "creds"}}))
    result = CliRunner().invoke(cli, ["from-kai", "--values", str(wrong)])
    assert result.exit_code == 2 and "global.imagePullSecrets: expected a list" in result.stderr


def test_the_shard_is_read_from_the_cluster(tmp_path: Path) -> None:
    server = FakeApiServer().start()
    try:
        server.seed(shard({"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "kValue": 2}))
        server.seed({"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
                     "spec": {"global": {"schedulerName": "kai-live"}}})
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        result = CliRunner().invoke(cli, ["from-kai", "--kubeconfig", str(kubeconfig), "-o", "config"])
        assert result.exit_code == 0, result.output
        config = resolve_config(SchedulerConfig.from_mapping(yaml.safe_load(result.stdout)))
        assert config.params.scheduler_name == "kai-live" and "consolidation" not in config.actions
        assert config.plugin("proportion").arguments == {"kValue": "2"}  # type: ignore[union-attr]
        absent = CliRunner().invoke(cli, ["from-kai", "--kubeconfig", str(kubeconfig), "--shard", "nope"])
        assert absent.exit_code == 0 and "the cluster has no SchedulingShard 'nope'" in absent.stderr
    finally:
        server.stop()
