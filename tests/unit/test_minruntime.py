"""The minruntime plugin (spec 6.3): resolving the min-runtime through the queue tree, protection,
the victim filters and the scenario validators of reclaim and preempt."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import kaisched
from kaisched import ConfigError
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.scenario import Scenario
from kaisched.framework.session import Session, rfc3339
from kaisched.framework.statement import Statement
from kaisched.k8s.parse import parse_objects
from kaisched.model.job import PodGroupInfo
from kaisched.model.snapshot import build_snapshot
from kaisched.plugins.minruntime import MinRuntimePlugin, MinRuntimeResolver
from kaisched.plugins.registry import ACCEPTED_WITHOUT_EFFECT, PLUGINS, build_plugins
from tests.unit.builders import NOW, flatten, node, pod, pod_group, queue, tiers

LAST_START = "kai.scheduler/last-start-timestamp"
SUBGROUP = "kai.scheduler/subgroup-name"
M = timedelta(minutes=1)


def q(name: str, parent: str | None = None, *, preempt: str | None = None, reclaim: str | None = None
      ) -> dict[str, Any]:
    out = queue(name, parent)
    if preempt is not None:
        out["spec"]["preemptMinRuntime"] = preempt
    if reclaim is not None:
        out["spec"]["reclaimMinRuntime"] = reclaim
    return out


def tree() -> list[dict[str, Any]]:
    """top-a (reclaim 1h)
         dept-a1 (preempt 5m, reclaim 10m) -> leaf-a1x, leaf-a1y (reclaim 2m)
         dept-a2 -> leaf-a2x (preempt 1m)
       top-b -> leaf-bx
    """
    return [
        q("top-a", reclaim="1h"),
        q("dept-a1", "top-a", preempt="5m", reclaim="10m"),
        q("leaf-a1x", "dept-a1"),
        q("leaf-a1y", "dept-a1", reclaim="2m"),
        q("dept-a2", "top-a"),
        q("leaf-a2x", "dept-a2", preempt="1m"),
        q("top-b"),
        q("leaf-bx", "top-b"),
    ]


def running_job(name: str, queue_name: str, n: int = 1, *, min_member: int | None = None,
                started_ago: timedelta | None = None, releasing: int = 0) -> list[dict[str, Any]]:
    """A job of ``n`` running pods (the last ``releasing`` of them being deleted)."""
    pg = pod_group(name, queue=queue_name, min_member=n if min_member is None else min_member)
    if started_ago is not None:
        pg["metadata"]["annotations"] = {LAST_START: rfc3339(NOW - started_ago)}
    return [pg] + [pod(f"{name}-{i}", group=name, node="n1", deleting=i >= n - releasing) for i in range(n)]


def pending_job(name: str, queue_name: str) -> list[dict[str, Any]]:
    return [pod_group(name, queue=queue_name), pod(f"{name}-0", group=name)]


def open_session(*objs: object, args: dict[str, str] | None = None) -> Session:
    cfg = resolve_config({"actions": "allocate", "tiers": tiers(minruntime=args or {})})
    snap = build_snapshot(parse_objects(flatten(*objs)), NOW)  # type: ignore[arg-type]
    ssn = Session(snap, cfg, build_plugins(cfg.plugins))
    ssn.open()
    return ssn


def plugin_of(ssn: Session) -> MinRuntimePlugin:
    return next(p for p in ssn.plugins if isinstance(p, MinRuntimePlugin))


def resolver(args: dict[str, str] | None = None) -> MinRuntimeResolver:
    return plugin_of(open_session(node("n1"), tree(), args=args)).resolver


# --------------------------------------------------------------------------------------- registration
def test_plugin_is_registered_and_no_longer_without_effect() -> None:
    assert PLUGINS["minruntime"] is MinRuntimePlugin
    assert "minruntime" not in ACCEPTED_WITHOUT_EFFECT


def test_hooks_are_registered_in_the_session() -> None:
    ssn = open_session(node("n1"), tree())
    p = plugin_of(ssn)
    assert p.preempt_filter in ssn.preempt_victim_filters
    assert p.reclaim_filter in ssn.reclaim_victim_filters
    assert p.preempt_validator in ssn.preempt_scenario_validators
    assert p.reclaim_validator in ssn.reclaim_scenario_validators


# ------------------------------------------------------------------------------------------- arguments
def test_defaults_are_zero_and_lca() -> None:
    p = MinRuntimePlugin({})
    assert (p.default_preempt, p.default_reclaim, p.method) == (timedelta(0), timedelta(0), "lca")


def test_arguments_are_go_durations() -> None:
    p = MinRuntimePlugin({"defaultPreemptMinRuntime": "10m", "defaultReclaimMinRuntime": "1h30m",
                          "reclaimResolveMethod": "queue"})
    assert (p.default_preempt, p.default_reclaim, p.method) == (10 * M, 90 * M, "queue")


def test_negative_defaults_count_as_zero() -> None:
    p = MinRuntimePlugin({"defaultPreemptMinRuntime": "-5m", "defaultReclaimMinRuntime": "-1s"})
    assert (p.default_preempt, p.default_reclaim) == (timedelta(0), timedelta(0))


@pytest.mark.parametrize("arg", ["defaultPreemptMinRuntime", "defaultReclaimMinRuntime"])
def test_bad_duration_is_a_config_error_naming_the_argument(arg: str) -> None:
    with pytest.raises(ConfigError, match=arg):
        MinRuntimePlugin({arg: "ten minutes"})
    with pytest.raises(ConfigError, match=arg):  # through the public entry point too
        kaisched.schedule([], config={"tiers": tiers(minruntime={arg: "10"})}, now=NOW)


def test_bad_resolve_method_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="reclaimResolveMethod"):
        MinRuntimePlugin({"reclaimResolveMethod": "LCA"})


# ------------------------------------------------------------------------------------------ resolution
def test_preempt_walks_up_from_the_victims_leaf_queue() -> None:
    r = resolver({"defaultPreemptMinRuntime": "3m"})
    assert r.preempt("leaf-a2x") == 1 * M  # its own value
    assert r.preempt("leaf-a1x") == 5 * M  # inherited from dept-a1
    assert r.preempt("leaf-a1y") == 5 * M  # a reclaim value does not count
    assert r.preempt("leaf-bx") == 3 * M  # nothing set on the way up: default


def test_reclaim_queue_method_walks_up_from_the_victims_leaf_queue() -> None:
    r = resolver({"reclaimResolveMethod": "queue", "defaultReclaimMinRuntime": "7m"})
    assert r.reclaim("leaf-bx", "leaf-a1y") == 2 * M
    assert r.reclaim("leaf-a1y", "leaf-a1x") == 10 * M
    assert r.reclaim("leaf-bx", "leaf-a2x") == 60 * M  # top-a
    assert r.reclaim("leaf-a1x", "leaf-bx") == 7 * M  # default


def test_reclaim_lca_method() -> None:
    r = resolver({"defaultReclaimMinRuntime": "7m", "defaultPreemptMinRuntime": "3m"})
    # different top-level queues: the victim's top-level queue decides
    assert r.reclaim("leaf-bx", "leaf-a1y") == 60 * M
    assert r.reclaim("leaf-a1x", "leaf-bx") == 7 * M  # top-b has nothing: default
    # siblings under dept-a1: the child of the LCA on the victim's side is the victim's leaf
    assert r.reclaim("leaf-a1x", "leaf-a1y") == 2 * M
    assert r.reclaim("leaf-a1y", "leaf-a1x") == 10 * M  # leaf-a1x has nothing: up to dept-a1
    # LCA top-a: dept-a1 (victim side) decides, not the victim leaf's 2m
    assert r.reclaim("leaf-a2x", "leaf-a1y") == 10 * M
    assert r.reclaim("leaf-a1x", "leaf-a2x") == 60 * M  # dept-a2 has nothing: up to top-a


def test_reclaim_lca_default_is_the_reclaim_default() -> None:
    objs = [node("n1"), q("top"), q("x", "top"), q("y", "top")]
    r = plugin_of(open_session(objs, args={"defaultReclaimMinRuntime": "7m", "defaultPreemptMinRuntime": "3m"}))
    assert r.resolver.reclaim("x", "y") == 7 * M


def test_resolved_durations_are_cached_per_session() -> None:
    ssn = open_session(node("n1"), tree())
    r = plugin_of(ssn).resolver
    assert r.preempt("leaf-a1x") == 5 * M
    ssn.queues.queues["dept-a1"].preempt_min_runtime = 50 * M  # a change in the session is not seen
    assert r.preempt("leaf-a1x") == 5 * M
    fresh = plugin_of(open_session(node("n1"), tree())).resolver
    assert fresh.preempt("leaf-a1x") == 5 * M


# ------------------------------------------------------------------------------------------ protection
def jobs_session(*objs: object, args: dict[str, str] | None = None) -> tuple[Session, MinRuntimePlugin]:
    ssn = open_session(node("n1", 8, cpu=64), tree(), *objs, args=args)
    return ssn, plugin_of(ssn)


def test_protected_iff_started_less_than_min_runtime_ago() -> None:
    ssn, p = jobs_session(
        running_job("young", "leaf-a1x", started_ago=4 * M),
        running_job("exact", "leaf-a1x", started_ago=5 * M),
        running_job("old", "leaf-a1x", started_ago=6 * M),
        running_job("never", "leaf-a1x"),
    )
    j = ssn.jobs
    assert p.is_preempt_protected(j["default/young"])
    assert not p.is_preempt_protected(j["default/exact"])  # now < lastStart + 5m is false
    assert not p.is_preempt_protected(j["default/old"])
    assert not p.is_preempt_protected(j["default/never"])  # no last-start time


def test_zero_min_runtime_protects_nothing() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-bx", started_ago=timedelta(0)))
    assert not p.is_preempt_protected(ssn.jobs["default/v"])


def test_reclaim_protection_depends_on_the_reclaimer() -> None:
    ssn, p = jobs_session(
        running_job("v", "leaf-a1x", started_ago=30 * M),
        pending_job("from-b", "leaf-bx"),
        pending_job("from-a1y", "leaf-a1y"),
    )
    v = ssn.jobs["default/v"]
    assert p.is_reclaim_protected(ssn.jobs["default/from-b"], v)  # top-a: 1h
    assert not p.is_reclaim_protected(ssn.jobs["default/from-a1y"], v)  # dept-a1: 10m


# --------------------------------------------------------------------------------------------- filters
def test_filters_drop_protected_non_elastic_victims_only() -> None:
    ssn, p = jobs_session(
        running_job("gang", "leaf-a1x", 2, started_ago=1 * M),
        running_job("elastic", "leaf-a1x", 3, min_member=1, started_ago=1 * M),
        running_job("old", "leaf-a1x", 2, started_ago=60 * M),
        pending_job("pre", "leaf-a1x"),
        pending_job("rec", "leaf-bx"),
    )
    j = ssn.jobs
    for pending, fn in ((j["default/pre"], p.preempt_filter), (j["default/rec"], p.reclaim_filter)):
        assert not fn(pending, j["default/gang"])
        assert fn(pending, j["default/elastic"])
        assert fn(pending, j["default/old"])


def test_reclaim_filter_uses_the_reclaim_resolution() -> None:
    ssn, p = jobs_session(
        running_job("v", "leaf-a1x", 2, started_ago=30 * M),  # preempt 5m, reclaim from top-b: 1h
        pending_job("pre", "leaf-a1x"),
        pending_job("rec", "leaf-bx"),
    )
    j = ssn.jobs
    assert p.preempt_filter(j["default/pre"], j["default/v"])
    assert not p.reclaim_filter(j["default/rec"], j["default/v"])


# ------------------------------------------------------------------------------------------ validators
def scenario(ssn: Session, action: str, preemptor: str, victims: dict[str, list[int]]) -> Scenario:
    s = Scenario(action, ssn.jobs[f"default/{preemptor}"], [])
    for name, indices in victims.items():
        job = ssn.jobs[f"default/{name}"]
        s.add_victims(job, [job.tasks[i] for i in indices])
    return s


def test_elastic_protected_victim_may_lose_only_its_surplus() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 4, min_member=2, started_ago=1 * M),
                          pending_job("pre", "leaf-a1x"), pending_job("rec", "leaf-bx"))
    for action, pending, validate in (("preempt", "pre", p.preempt_validator),
                                      ("reclaim", "rec", p.reclaim_validator)):
        assert validate(scenario(ssn, action, pending, {"v": [3]}))
        assert validate(scenario(ssn, action, pending, {"v": [3, 2]}))
        assert not validate(scenario(ssn, action, pending, {"v": [3, 2, 1]}))
        assert not validate(scenario(ssn, action, pending, {"v": [0, 1, 2, 3]}))


def test_unprotected_victims_may_lose_everything() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 4, min_member=2, started_ago=60 * M),
                          pending_job("pre", "leaf-a1x"), pending_job("rec", "leaf-bx"))
    assert p.preempt_validator(scenario(ssn, "preempt", "pre", {"v": [0, 1, 2, 3]}))
    # 60m old: not protected against reclaim from top-b either (1h: now < start + 1h is false)
    assert p.reclaim_validator(scenario(ssn, "reclaim", "rec", {"v": [0, 1, 2, 3]}))


def test_validator_uses_the_reclaimers_queue() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 3, min_member=2, started_ago=30 * M),
                          pending_job("from-b", "leaf-bx"), pending_job("from-a1y", "leaf-a1y"))
    take_two = {"v": [1, 2]}
    assert not p.reclaim_validator(scenario(ssn, "reclaim", "from-b", take_two))  # 1h: protected
    assert p.reclaim_validator(scenario(ssn, "reclaim", "from-a1y", take_two))  # 10m: not protected


def test_validator_counts_kept_pods_whether_or_not_the_simulation_is_applied() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 4, min_member=2, started_ago=1 * M),
                          pending_job("pre", "leaf-a1x"))
    for victims, ok in (([3, 2], True), ([3, 2, 1], False)):
        s = scenario(ssn, "preempt", "pre", {"v": victims})
        stmt = Statement(ssn)
        for t in s.victim_tasks:  # the simulated evictions: the victims are Releasing now
            stmt.evict(t, action="preempt", preemptor="default/pre", message="")
        assert p.preempt_validator(s) is ok
        stmt.discard()
        assert p.preempt_validator(s) is ok


def test_releasing_pods_of_the_victim_count_as_kept() -> None:
    # 4 pods, the last one already terminating (Releasing): it still counts as active-used (spec 6.3)
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 4, min_member=2, started_ago=1 * M, releasing=1),
                          pending_job("pre", "leaf-a1x"))
    assert p.preempt_validator(scenario(ssn, "preempt", "pre", {"v": [0, 1]}))
    assert not p.preempt_validator(scenario(ssn, "preempt", "pre", {"v": [0, 1, 2]}))


def subgroup_victim(started_ago: timedelta) -> list[dict[str, Any]]:
    pg = pod_group("sg", queue="leaf-a1x", min_member=3)
    pg["spec"]["subGroups"] = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 1}]
    pg["metadata"]["annotations"] = {LAST_START: rfc3339(NOW - started_ago)}
    pods = [pod(f"sg-a{i}", group="sg", node="n1", labels={SUBGROUP: "a"}) for i in range(3)]
    pods += [pod(f"sg-b{i}", group="sg", node="n1", labels={SUBGROUP: "b"}) for i in range(2)]
    return [pg, *pods]


def test_validator_checks_every_pod_set() -> None:
    ssn, p = jobs_session(subgroup_victim(1 * M), pending_job("pre", "leaf-a1x"))
    v = ssn.jobs["default/sg"]
    a = [t for t in v.tasks if t.pod_set == "a"]
    b = [t for t in v.tasks if t.pod_set == "b"]

    def ok(tasks: list[Any]) -> bool:
        s = Scenario("preempt", ssn.jobs["default/pre"], [])
        s.add_victims(v, tasks)
        return p.preempt_validator(s)

    assert ok([a[2], b[1]])  # one surplus pod from each pod set
    assert not ok([a[2], a[1]])  # pod set a would fall below 2
    assert not ok([b[1], b[0]])  # pod set b would fall below 1


def test_a_scenario_with_several_victims_fails_if_any_protected_one_loses_too_much() -> None:
    ssn, p = jobs_session(running_job("young", "leaf-a1x", 3, min_member=2, started_ago=1 * M),
                          running_job("old", "leaf-a1x", 3, min_member=2, started_ago=60 * M),
                          pending_job("pre", "leaf-a1x"))
    assert p.preempt_validator(scenario(ssn, "preempt", "pre", {"young": [2], "old": [0, 1, 2]}))
    assert not p.preempt_validator(scenario(ssn, "preempt", "pre", {"young": [1, 2], "old": [2]}))


def victim(ssn: Session, name: str) -> PodGroupInfo:
    return ssn.jobs[f"default/{name}"]


def test_protection_is_cached_per_session() -> None:
    ssn, p = jobs_session(running_job("v", "leaf-a1x", 2, started_ago=1 * M), pending_job("pre", "leaf-a1x"))
    v = victim(ssn, "v")
    assert p.is_preempt_protected(v)
    v.last_start = None  # cached: the first answer stands for the session
    assert p.is_preempt_protected(v)


# ------------------------------------------------------------------------------ nothing to protect
def flat_queues() -> list[dict[str, Any]]:
    """Queues without any min-runtime of their own."""
    return [q("top"), q("leaf-x", "top"), q("leaf-y", "top")]


def test_with_every_min_runtime_zero_no_victim_is_asked_about() -> None:
    """The default configuration: the hooks answer without resolving anything per job."""
    ssn = open_session(node("n1", 8, cpu=64), flat_queues(), running_job("v", "leaf-x", 4, min_member=4,
                                                                         started_ago=1 * M),
                       pending_job("rec", "leaf-y"), pending_job("pre", "leaf-x"))
    p = plugin_of(ssn)
    take_all = {"v": [0, 1, 2, 3]}
    assert p.reclaim_validator(scenario(ssn, "reclaim", "rec", take_all))
    assert p.preempt_validator(scenario(ssn, "preempt", "pre", take_all))
    assert p.reclaim_filter(ssn.jobs["default/rec"], ssn.jobs["default/v"])
    assert p.preempt_filter(ssn.jobs["default/pre"], ssn.jobs["default/v"])
    assert p._reclaim_protected == {} and p._preempt_protected == {}  # nothing was resolved


def test_a_start_in_the_future_is_protected_even_with_zero_min_runtime() -> None:
    """(now < lastStart + 0s): the shortcut for "nothing to protect" must not apply."""
    ssn = open_session(node("n1", 8, cpu=64), flat_queues(), running_job("v", "leaf-x", 2, min_member=2,
                                                                         started_ago=-5 * M),
                       pending_job("rec", "leaf-y"))
    p = plugin_of(ssn)
    assert not p.reclaim_validator(scenario(ssn, "reclaim", "rec", {"v": [0]}))
    assert not p.reclaim_filter(ssn.jobs["default/rec"], ssn.jobs["default/v"])


def test_a_queue_min_runtime_alone_keeps_the_checks() -> None:
    """No default, but one queue sets reclaimMinRuntime: its recently started victims stay protected."""
    queues = [q("top", reclaim="10m"), q("leaf-x", "top"), q("other"), q("leaf-y", "other")]
    ssn = open_session(node("n1", 8, cpu=64), queues, running_job("v", "leaf-x", 2, min_member=2,
                                                                  started_ago=1 * M),
                       pending_job("rec", "leaf-y"))
    p = plugin_of(ssn)
    assert not p.reclaim_validator(scenario(ssn, "reclaim", "rec", {"v": [0]}))
