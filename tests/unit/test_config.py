"""Scheduler configuration in KAI's format (spec 4.1): actions, tiers/plugins and their arguments,
KAI's command-line parameters, and loading from files."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

import kaisched
from kaisched import ConfigError, SchedulerConfig, SchedulerParams
from kaisched.framework.config import DEFAULT_ACTIONS, DEFAULT_PLUGINS, PluginOption
from tests.unit.builders import NOW, binds, flatten, job, node, queue, tiers

KAI_DEFAULT_PLUGIN_NAMES = [
    "predicates", "proportion", "priority", "elastic", "kubeflow", "ray", "nodeavailability", "gpusharingorder",
    "gpupack", "resourcetype", "subgrouporder", "taskorder", "nominatednode", "dynamicresources", "nodeplacement",
    "minruntime", "topology", "snapshot",
]


def small_cluster():
    return flatten(node("n1", 8), queue("q"), job("j", 1, gpus=1))


# ----------------------------------------------------------------------------------------- defaults
def test_defaults_are_kais_built_in_configuration():
    cfg = SchedulerConfig.from_mapping(None)
    assert cfg.actions == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    assert not cfg.actions_explicit
    assert [p.name for p in cfg.plugins] == KAI_DEFAULT_PLUGIN_NAMES
    assert cfg.plugin("nodeplacement") == PluginOption("nodeplacement", {"cpu": "binpack", "gpu": "binpack"})
    assert cfg.plugin("podaffinity") is None  # KAI's built-in default lacks it
    assert cfg.queue_depth_per_action == {}
    assert cfg.params == SchedulerParams()
    assert SchedulerConfig.from_mapping({}) == cfg


def test_default_config_schedules_with_only_the_implemented_actions():
    result = kaisched.schedule(small_cluster(), now=NOW)
    assert binds(result) == {"default/j-0": "n1"}


def test_scheduler_params_defaults_match_kai_flags():
    p = SchedulerParams()
    assert p.max_consolidation_preemptees == 16
    assert p.allow_consolidating_reclaim is True
    assert p.default_staleness_grace_period == timedelta(seconds=60)
    assert p.full_hierarchy_fairness is True
    assert p.use_scheduling_signatures is True
    assert p.detailed_fit_errors is False
    assert p.scheduler_name == "kai-scheduler"


# ------------------------------------------------------------------------------------------ actions
def test_actions_string_is_split_and_trimmed():
    cfg = SchedulerConfig.from_mapping({"actions": " allocate ,  reclaim,preempt "})
    assert cfg.actions == ("allocate", "reclaim", "preempt")
    assert cfg.actions_explicit


def test_explicit_allocate_only_runs():
    result = kaisched.schedule(small_cluster(), config={"actions": "allocate"}, now=NOW)
    assert binds(result) == {"default/j-0": "n1"}


def test_unknown_action_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="'bogus'"):
        kaisched.schedule(small_cluster(), config={"actions": "allocate, bogus"}, now=NOW)


def test_every_kai_action_is_available_and_runs_in_the_configured_order():
    assert kaisched.ACTIONS == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    result = kaisched.schedule(small_cluster(), config={"actions": "preempt, reclaim, consolidation, allocate"},
                               now=NOW)
    assert result.errors == []


def test_actions_must_be_a_string():
    with pytest.raises(ConfigError, match="actions"):
        SchedulerConfig.from_mapping({"actions": 5})


def test_empty_actions_string_does_not_silently_disable_scheduling():
    try:
        cfg = SchedulerConfig.from_mapping({"actions": ""})
    except ConfigError:
        return  # KAI's loadSchedulerConf rejects it: acceptable
    assert cfg.actions == DEFAULT_ACTIONS  # the spec's reading: the missing part takes the default


def test_unknown_top_level_field():
    with pytest.raises(ConfigError, match="bogus"):
        SchedulerConfig.from_mapping({"bogus": 1})


def test_config_must_be_a_mapping():
    with pytest.raises(ConfigError):
        SchedulerConfig.from_mapping(["allocate"])  # type: ignore[arg-type]


def test_queue_depth_per_action():
    cfg = SchedulerConfig.from_mapping({"queueDepthPerAction": {"allocate": "2"}})
    assert cfg.queue_depth_per_action == {"allocate": 2}
    with pytest.raises(ConfigError, match=r"queueDepthPerAction\.allocate"):
        SchedulerConfig.from_mapping({"queueDepthPerAction": {"allocate": -1}})
    with pytest.raises(ConfigError, match="queueDepthPerAction"):
        SchedulerConfig.from_mapping({"queueDepthPerAction": [1]})


def test_queue_depth_limits_jobs_considered_per_queue():
    objs = flatten(node("n1", 8), queue("q"),
                   job("a-first", 1, gpus=16, created="2025-01-01T00:00:00Z"),  # never fits
                   job("b-second", 1, gpus=1, created="2025-01-01T01:00:00Z"))
    assert binds(kaisched.schedule(objs, now=NOW)) == {"default/b-second-0": "n1"}
    result = kaisched.schedule(objs, config={"queueDepthPerAction": {"allocate": 1}}, now=NOW)
    assert result.binds == []


# ------------------------------------------------------------------------------------------ plugins
def test_unknown_plugin_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="'gang'"):
        kaisched.schedule(small_cluster(), config={"tiers": [{"plugins": [{"name": "gang"}]}]}, now=NOW)


def test_kai_plugins_without_effect_here_are_accepted():
    config = {"tiers": tiers()}
    config["tiers"][0]["plugins"].append({"name": "podaffinity"})
    result = kaisched.schedule(small_cluster(), config=config, now=NOW)
    assert binds(result) == {"default/j-0": "n1"}


@pytest.mark.parametrize("arguments", [{"gpu": "tight"}, {"cpu": "random"}])
def test_bad_nodeplacement_argument(arguments):
    with pytest.raises(ConfigError, match="nodeplacement"):
        kaisched.schedule(small_cluster(), config={"tiers": tiers(nodeplacement=arguments)}, now=NOW)


def test_bad_proportion_argument():
    with pytest.raises(ConfigError, match="kValue"):
        kaisched.schedule(small_cluster(), config={"tiers": tiers(proportion={"kValue": "lots"})}, now=NOW)


def test_tiers_are_flattened_in_order():
    cfg = SchedulerConfig.from_mapping({"tiers": [
        {"plugins": [{"name": "predicates"}, {"name": "proportion"}]},
        {"plugins": [{"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": 1}}]},
    ]})
    assert [p.name for p in cfg.plugins] == ["predicates", "proportion", "nodeplacement"]
    assert cfg.plugin("nodeplacement").arguments == {"gpu": "spread", "cpu": "1"}  # arguments are strings


@pytest.mark.parametrize("tiers_value", ["predicates", [{"plugins": "predicates"}], [{"plugins": [{"args": 1}]}],
                                         [{"plugins": [{"name": "x", "arguments": [1]}]}]])
def test_malformed_tiers(tiers_value):
    with pytest.raises(ConfigError, match="tiers"):
        SchedulerConfig.from_mapping({"tiers": tiers_value})


def test_empty_tiers_take_kais_default_plugins():
    assert SchedulerConfig.from_mapping({"tiers": []}).tiers == (DEFAULT_PLUGINS,)
    objs = flatten(node("n1", 8, unschedulable=True), queue("q"), job("j", 1, gpus=1))
    assert kaisched.schedule(objs, config={"tiers": []}, now=NOW).binds == []


# ------------------------------------------------------------------------------------------- params
def test_params_by_flag_name():
    cfg = SchedulerConfig.from_mapping({"params": {
        "max-consolidation-preemptees": "8",
        "allow-consolidating-reclaim": "false",
        "default-staleness-grace-period": "2m30s",
        "full-hierarchy-fairness": False,
        "use-scheduling-signatures": "False",
        "detailed-fit-errors": True,
        "scheduler-name": "my-sched",
    }})
    p = cfg.params
    assert p.max_consolidation_preemptees == 8
    assert p.allow_consolidating_reclaim is False
    assert p.default_staleness_grace_period == timedelta(minutes=2, seconds=30)
    assert p.full_hierarchy_fairness is False
    assert p.use_scheduling_signatures is False
    assert p.detailed_fit_errors is True
    assert p.scheduler_name == "my-sched"


def test_duration_param_accepts_seconds_as_number():
    cfg = SchedulerConfig.from_mapping({"params": {"default-staleness-grace-period": 90}})
    assert cfg.params.default_staleness_grace_period == timedelta(seconds=90)


def test_unknown_param_is_an_error_listing_known_ones():
    with pytest.raises(ConfigError, match=r"params\.bogus-flag.*max-consolidation-preemptees"):
        SchedulerConfig.from_mapping({"params": {"bogus-flag": 1}})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max-consolidation-preemptees", "many"),
        ("max-consolidation-preemptees", True),
        ("allow-consolidating-reclaim", "yes"),
        ("default-staleness-grace-period", "soon"),
        ("default-staleness-grace-period", True),
        ("scheduler-name", ""),
    ],
)
def test_bad_param_values_name_the_param(name, value):
    with pytest.raises(ConfigError, match=re.escape(f"params.{name}")):
        SchedulerConfig.from_mapping({"params": {name: value}})


def test_full_hierarchy_fairness_off_flattens_the_queue_tree():
    # with the hierarchy, the parent's limit of 2 GPUs applies; flattened, parents are ignored
    objs = flatten(node("n1", 8), queue("dept", gpu_limit=2), queue("team", "dept"),
                   job("j", 1, queue="team", gpus=4))
    assert kaisched.schedule(objs, now=NOW).binds == []
    result = kaisched.schedule(objs, config={"params": {"full-hierarchy-fairness": False}}, now=NOW)
    assert binds(result) == {"default/j-0": "n1"}


# -------------------------------------------------------------------------------------------- files
def test_load_yaml_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        'actions: "allocate"\n'
        "tiers:\n"
        "- plugins:\n"
        "  - name: predicates\n"
        "  - name: proportion\n"
        "    arguments: {kValue: \"0.5\"}\n"
        "  - name: nodeplacement\n"
        "    arguments: {gpu: spread, cpu: binpack}\n"
        "queueDepthPerAction: {allocate: 10}\n"
        "params:\n"
        "  max-consolidation-preemptees: 4\n"
    )
    cfg = SchedulerConfig.load(path)
    assert cfg.actions == ("allocate",)
    assert [p.name for p in cfg.plugins] == ["predicates", "proportion", "nodeplacement"]
    assert cfg.plugin("proportion").arguments == {"kValue": "0.5"}
    assert cfg.plugin("nodeplacement").arguments == {"gpu": "spread", "cpu": "binpack"}
    assert cfg.queue_depth_per_action == {"allocate": 10}
    assert cfg.params.max_consolidation_preemptees == 4
    assert cfg.params.detailed_fit_errors is False


def test_load_empty_file_gives_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert SchedulerConfig.load(path) == SchedulerConfig()
    path.write_text("# only a comment\n")
    assert SchedulerConfig.load(str(path)) == SchedulerConfig()


def test_load_missing_file_is_a_config_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.load(missing)
    assert str(missing) in str(info.value)
    assert "No such file" in str(info.value)
    assert info.value.__cause__ is None  # no chained traceback for users
    assert info.value.__suppress_context__


def test_load_invalid_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("actions: allocate\ntiers: [\n")
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.load(path)
    assert str(path) in str(info.value)
    assert "line 3" in str(info.value)


def test_load_file_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- allocate\n")
    with pytest.raises(ConfigError, match="mapping"):
        SchedulerConfig.load(path)


def test_config_object_is_accepted_by_schedule():
    cfg = SchedulerConfig.from_mapping({"actions": "allocate", "tiers": tiers(nodeplacement={"gpu": "spread"})})
    objs = flatten(node("a", 8), node("b", 8), queue("q"), job("j", 2, gpus=1))
    assert sorted(binds(kaisched.schedule(objs, config=cfg, now=NOW)).values()) == ["a", "b"]
