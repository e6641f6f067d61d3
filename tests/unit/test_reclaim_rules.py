"""The proportion plugin's reclaim rules (spec 5.5): the CanReclaimResources gate, the reclaim scenario
validator (strategies, elastic chunks, leveled queues, saturation, non-preemptible quota, moved victims)
and KAI's reclaim eviction message.

Scenarios are built by hand: the solution start is announced, victim tasks are evicted (and possibly
re-placed) with a Statement as the victim simulation would, then the validator runs. Pods here request
GPUs only (no CPU/memory) unless a test says otherwise, so that only GPUs are "involved"."""

from __future__ import annotations

import pytest

from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import ConfigError, SchedulerConfig, SchedulerParams
from kaisched.framework.scenario import Scenario
from kaisched.framework.session import Session
from kaisched.framework.statement import Statement
from kaisched.model.job import PodGroupInfo
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.proportion.plugin import ProportionPlugin
from kaisched.plugins.proportion.reclaim import ReclaimRules, humanize, resources_text, saturation_ratio
from tests.unit.builders import Obj, node, open_session, pod, pod_group, queue

# ------------------------------------------------------------------------------------------- helpers

def proportion(ssn: Session) -> ProportionPlugin:
    return next(p for p in ssn.plugins if isinstance(p, ProportionPlugin))


def rules(ssn: Session) -> ReclaimRules:
    return proportion(ssn).reclaim


def gpu(ssn: Session, queue_name: str, what: str) -> float:
    """GPU entry of a queue attribute vector (allocated, fair_share, deserved, alloc_share)."""
    vec: list[float] = getattr(proportion(ssn).queues[queue_name], what)
    return vec[0]


def the_job(ssn: Session, name: str) -> PodGroupInfo:
    return ssn.jobs[f"default/{name}"]


def the_task(ssn: Session, name: str) -> TaskInfo:
    return next(t for t in ssn.snapshot.tasks.values() if t.name == name)


def running_job(name: str, q: str, gpus: int, n: int = 1, *, min_member: int | None = None,
                node_name: str = "n1", preemptibility: str | None = None) -> list[Obj]:
    """A PodGroup with ``n`` running pods of ``gpus`` GPUs each on ``node_name``."""
    out = [pod_group(name, queue=q, min_member=n if min_member is None else min_member,
                     preemptibility=preemptibility)]
    out += [pod(f"{name}-{i}", group=name, gpus=gpus, cpu=0, memory=0, node=node_name) for i in range(n)]
    return out


def pending_job(name: str, q: str, gpus: int, n: int = 1, *, preemptibility: str | None = None) -> list[Obj]:
    out = [pod_group(name, queue=q, min_member=n, preemptibility=preemptibility)]
    out += [pod(f"{name}-{i}", group=name, gpus=gpus, cpu=0, memory=0) for i in range(n)]
    return out


def scenario(ssn: Session, preemptor: str, *victims: str, moved: dict[str, str] | None = None,
             stmt: Statement | None = None) -> Scenario:
    """Announce the solution start for ``preemptor``, then evict the named victim pods (in order) as the
    victim simulation would; ``moved`` maps victim pods that the simulation re-placed to their new node."""
    p = the_job(ssn, preemptor)
    for handler in ssn.job_solution_start_handlers:
        handler(p)
    sc = Scenario("reclaim", p, ssn.tasks_to_allocate(p))
    stmt = stmt or Statement(ssn)
    for name in victims:
        t = the_task(ssn, name)
        stmt.evict(t, action="reclaim", preemptor=p.key, message="")
        assert t.job is not None
        sc.add_victims(t.job, [t])
    for name, node_name in (moved or {}).items():
        stmt.pipeline(the_task(ssn, name), ssn.nodes.by_name[node_name])
    return sc


def validate(ssn: Session, sc: Scenario) -> bool:
    return rules(ssn).validate(sc)


# ------------------------------------------------------------------------------------------- wiring
def test_rules_are_registered_on_the_session() -> None:
    ssn = open_session(node("n1", 8), queue("a"), queue("b"))
    r = rules(ssn)
    assert ssn.can_reclaim_resources == r.can_reclaim
    assert r.validate in ssn.reclaim_scenario_validators
    assert r.on_job_solution_start in ssn.job_solution_start_handlers
    assert r.allow_consolidating_reclaim is True
    assert r.saturation_multiplier == 1.0


def test_validator_needs_the_solution_start_copy() -> None:
    ssn = open_session(node("n1", 8), queue("a"), queue("b"), pending_job("p", "a", 1))
    with pytest.raises(AssertionError, match="on_job_solution_start"):
        rules(ssn).validate(Scenario("reclaim", the_job(ssn, "p"), []))


# ------------------------------------------------------------------------------------------- gate
def test_gate_true_when_the_leaf_stays_within_its_fair_share() -> None:
    ssn = open_session(
        node("n1", 8), queue("a", gpu=2), queue("b", gpu=2),
        running_job("b1", "b", 2), running_job("b2", "b", 2), running_job("b3", "b", 2),
        pending_job("p", "a", 2),
    )
    assert gpu(ssn, "a", "fair_share") == 2
    assert ssn.can_reclaim_resources is not None
    assert ssn.can_reclaim_resources(the_job(ssn, "p")) is True


def test_gate_false_when_the_leaf_would_exceed_its_fair_share() -> None:
    ssn = open_session(
        node("n1", 8), queue("a", gpu=2, gpu_weight=0), queue("b", gpu=2),
        running_job("a1", "a", 2), running_job("b1", "b", 4),
        pending_job("p", "a", 1),
    )
    assert gpu(ssn, "a", "fair_share") == 2  # weight 0: never beyond deserved
    assert gpu(ssn, "a", "allocated") == 2
    assert rules(ssn).can_reclaim(the_job(ssn, "p")) is False


def test_gate_non_preemptible_job_must_stay_within_deserved_quota() -> None:
    ssn = open_session(
        node("n1", 8), queue("a", gpu=2), queue("b", gpu=2),
        running_job("a1", "a", 2, preemptibility="non-preemptible"), running_job("b1", "b", 4),
        pending_job("np", "a", 1, preemptibility="non-preemptible"),
        pending_job("pp", "a", 1, preemptibility="preemptible"),
    )
    r = rules(ssn)
    assert gpu(ssn, "a", "fair_share") == 4
    assert proportion(ssn).queues["a"].allocated_non_preemptible[0] == 2
    assert r.can_reclaim(the_job(ssn, "pp")) is True  # 2 + 1 <= fair share 4
    assert r.can_reclaim(the_job(ssn, "np")) is False  # non-preemptible 2 + 1 > deserved 2


def test_gate_unknown_queue_is_false() -> None:
    ssn = open_session(node("n1", 8), queue("a"), pending_job("p", "a", 1))
    job = the_job(ssn, "p")
    job.queue = "nowhere"
    assert rules(ssn).can_reclaim(job) is False


# ----------------------------------------------------------------------------- MaintainFairShare
def _mfs_cluster(config: SchedulerConfig | None = None) -> Session:
    """a and b deserve 1 GPU each; b runs 6 GPUs in three 2-GPU jobs; a wants 4 (two 2-GPU jobs).
    Fair shares 4 / 4, so b is 2 GPUs above its allocatable share; a's 2-GPU job exceeds a's deserved
    quota, so GuaranteeDeservedQuota never applies."""
    return open_session(
        node("n1", 8), queue("a", gpu=1), queue("b", gpu=1),
        running_job("b1", "b", 2), running_job("b2", "b", 2), running_job("b3", "b", 2),
        pending_job("p", "a", 2), pending_job("p2", "a", 2),
        config=config,
    )


def test_maintain_fair_share_allows_taking_from_a_queue_above_its_allocatable_share() -> None:
    ssn = _mfs_cluster()
    assert (gpu(ssn, "a", "fair_share"), gpu(ssn, "b", "fair_share")) == (4, 4)
    assert gpu(ssn, "b", "alloc_share") == 4 and gpu(ssn, "b", "allocated") == 6
    assert validate(ssn, scenario(ssn, "p", "b1-0")) is True


def test_maintain_fair_share_forbids_taking_from_a_queue_at_its_allocatable_share() -> None:
    ssn = _mfs_cluster()
    # first chunk: b at 6 > 4, fine; second chunk: b at 4 <= 4 and a is over its deserved quota
    assert validate(ssn, scenario(ssn, "p", "b1-0", "b2-0")) is False


def test_validator_uses_the_copy_from_solution_start_not_the_live_state() -> None:
    ssn = _mfs_cluster()
    sc = scenario(ssn, "p", "b1-0")
    assert gpu(ssn, "b", "allocated") == 4  # live state after the virtual eviction
    assert validate(ssn, sc) is True  # the copy still says 6
    # a later solution start sees committed state: b now at 4, taking 2 more is not allowed
    Statement(ssn).evict(the_task(ssn, "b2-0"), action="reclaim", preemptor="", message="")
    assert validate(ssn, scenario(ssn, "p2", "b3-0")) is False


# ------------------------------------------------------------------------------ GuaranteeDeservedQuota
def _gdq_cluster(a_deserved: int) -> Session:
    """b deserves 2 and runs 6 (three 2-GPU jobs) = its fair share; a wants one 2-GPU job."""
    return open_session(
        node("n1", 8), queue("a", gpu=a_deserved), queue("b", gpu=2),
        running_job("b1", "b", 2), running_job("b2", "b", 2), running_job("b3", "b", 2),
        pending_job("p", "a", 2),
    )


def test_guarantee_deserved_quota_lets_a_starved_queue_take_from_one_above_its_deserved_quota() -> None:
    ssn = _gdq_cluster(a_deserved=4)
    assert gpu(ssn, "b", "fair_share") == 6 and gpu(ssn, "b", "allocated") == 6  # within its fair share
    assert validate(ssn, scenario(ssn, "p", "b1-0")) is True


def test_guarantee_deserved_quota_needs_the_reclaimer_within_its_deserved_quota() -> None:
    ssn = _gdq_cluster(a_deserved=1)
    assert gpu(ssn, "b", "fair_share") == 6
    assert validate(ssn, scenario(ssn, "p", "b1-0")) is False  # a: 0 + 2 > 1, b not above its share


def test_guarantee_deserved_quota_stops_at_the_victims_deserved_quota() -> None:
    ssn = _gdq_cluster(a_deserved=4)
    # b: 6 -> 4 -> 2; the third chunk would start with b at its deserved quota (2)
    assert validate(ssn, scenario(ssn, "p", "b1-0", "b2-0")) is True
    ssn = _gdq_cluster(a_deserved=4)
    assert validate(ssn, scenario(ssn, "p", "b1-0", "b2-0", "b3-0")) is False


# ------------------------------------------------------------------------------------------ saturation
def _saturation_cluster(config: SchedulerConfig | None = None) -> Session:
    """12 GPUs, three departments with fair share 4 each (dept-c only has a pending 4-GPU job).
    dept-a/q1 wants 1 GPU (fair share 1) while its sibling q1b runs 4: dept-a ends at 5/4 = 1.25.
    dept-b/q2 runs 8 single-GPU jobs: 8/4 = 2."""
    objs: list[object] = [
        node("n1", 12),
        queue("dept-a", gpu=0), queue("dept-b", gpu=0), queue("dept-c", gpu=0),
        queue("q1", "dept-a", gpu=0), queue("q1b", "dept-a", gpu=0, gpu_weight=0),
        queue("q2", "dept-b", gpu=0), queue("q3", "dept-c", gpu=0),
        running_job("a-run", "q1b", 1, 4, min_member=1), pending_job("p", "q1", 1), pending_job("c", "q3", 4),
    ]
    objs += [running_job(f"b{i}", "q2", 1) for i in range(8)]
    return open_session(*objs, config=config)


def test_saturation_reclaimer_above_fair_share_must_stay_less_saturated() -> None:
    ssn = _saturation_cluster()
    assert [gpu(ssn, q, "fair_share") for q in ("dept-a", "dept-b", "dept-c", "q1")] == [4, 4, 4, 1]
    assert rules(ssn).can_reclaim(the_job(ssn, "p")) is True
    # dept-a 5/4 = 1.25 < dept-b 7/4 = 1.75
    assert validate(ssn, scenario(ssn, "p", "b0-0")) is True


def test_saturation_equal_ratios_are_rejected() -> None:
    ssn = _saturation_cluster()
    # dept-b 8 -> 5 (still above its share of 4 before each chunk): 5/4 = 1.25, not more than dept-a's 1.25
    assert validate(ssn, scenario(ssn, "p", "b0-0", "b1-0")) is True
    ssn = _saturation_cluster()
    assert validate(ssn, scenario(ssn, "p", "b0-0", "b1-0", "b2-0")) is False


def test_saturation_multiplier_makes_the_check_stricter() -> None:
    ssn = _saturation_cluster()
    strict = ReclaimRules(proportion(ssn).queues, proportion(ssn).total, 1.5, ssn)
    ssn.job_solution_start_handlers.append(strict.on_job_solution_start)
    sc = scenario(ssn, "p", "b0-0")
    assert validate(ssn, sc) is True
    assert strict.validate(sc) is False  # 1.25 * 1.5 = 1.875 >= 1.75


def test_saturation_multiplier_argument_reaches_the_rules() -> None:
    cfg = resolve_config({"tiers": [{"plugins": [{"name": "proportion",
                                                  "arguments": {"relcaimerSaturationMultiplier": "1.5"}}]}]})
    ssn = _saturation_cluster(cfg)
    assert rules(ssn).saturation_multiplier == 1.5
    assert validate(ssn, scenario(ssn, "p", "b0-0")) is False


def test_saturation_ratio_edge_cases() -> None:
    assert saturation_ratio(2, 4) == 0.5
    assert saturation_ratio(1, 0) == float("inf")
    assert saturation_ratio(0, 0) == 0
    assert saturation_ratio(5, -1) == 0


# --------------------------------------------------------------------------------------- elastic chunks
def _elastic_cluster() -> Session:
    """b (deserved 1) runs one elastic job of 6 one-GPU pods with minAvailable 4; a (deserved 1) wants
    two 2-GPU jobs. Fair shares 4 / 4."""
    return open_session(
        node("n1", 8), queue("a", gpu=1), queue("b", gpu=1),
        running_job("el", "b", 1, 6, min_member=4),
        pending_job("p", "a", 2), pending_job("p2", "a", 2),
    )


def test_elastic_victim_loses_surplus_pods_without_failing() -> None:
    ssn = _elastic_cluster()
    assert gpu(ssn, "b", "alloc_share") == 4
    # the two surplus pods are two chunks: 6 > 4, then 5 > 4
    assert validate(ssn, scenario(ssn, "p", "el-5", "el-4")) is True


def test_elastic_core_chunk_fails_where_the_surplus_passed() -> None:
    ssn = _elastic_cluster()
    sc = scenario(ssn, "p", "el-5", "el-4", "el-3", "el-2", "el-1", "el-0")
    # two elastic chunks of 1 GPU, then the core (the 4 pods that kept the job at its minimum)
    assert rules(ssn).victim_chunks(sc.victims["default/el"]) == [[1, 0, 0], [1, 0, 0], [4, 0, 0]]
    assert validate(ssn, sc) is False  # b is at 4 <= 4 before the core chunk


def test_elastic_surplus_is_counted_from_the_solution_start() -> None:
    ssn = _elastic_cluster()
    stmt = Statement(ssn)
    # an earlier reclaim committed one surplus pod: at the next solution start the job has 5 pods
    stmt.evict(the_task(ssn, "el-5"), action="reclaim", preemptor="", message="")
    stmt.commit()
    sc = scenario(ssn, "p", "el-4", "el-3", "el-2", "el-1", "el-0")
    assert rules(ssn).victim_chunks(sc.victims["default/el"]) == [[1, 0, 0], [4, 0, 0]]


def test_each_surplus_pod_is_checked_on_its_own() -> None:
    # b at 5 with allocatable share 4: the first surplus pod passes (5 > 4), the second starts at 4
    ssn = open_session(
        node("n1", 8), queue("a", gpu=1), queue("b", gpu=1),
        running_job("el", "b", 1, 5, min_member=2),
        pending_job("p", "a", 2), pending_job("p2", "a", 2), pending_job("p3", "a", 1),
    )
    assert gpu(ssn, "b", "alloc_share") == 4
    assert validate(ssn, scenario(ssn, "p", "el-4", "el-3")) is False


# ---------------------------------------------------------------------------------------- leveled queues
def test_leveled_queues_compare_departments_not_leaves_victim_leaf_above_but_department_not() -> None:
    ssn = open_session(
        node("n1", 8),
        queue("dept-a", gpu=4), queue("dept-b", gpu=4),
        queue("q1", "dept-a"), queue("q2", "dept-b", gpu=1), queue("q2b", "dept-b", gpu=3),
        running_job("b1", "q2", 1, 4, min_member=4), pending_job("b2", "q2b", 1, 4),
        pending_job("p", "q1", 2),
    )
    assert gpu(ssn, "q2", "allocated") == 4 and gpu(ssn, "q2", "alloc_share") == 2  # the leaf is above
    assert gpu(ssn, "dept-b", "allocated") == 4 and gpu(ssn, "dept-b", "alloc_share") == 6  # its dept is not
    assert gpu(ssn, "dept-b", "deserved") == 4  # and within its deserved quota
    r = rules(ssn)
    a_lvl, b_lvl = r.leveled(proportion(ssn).queues["q1"], proportion(ssn).queues["q2"])
    assert (a_lvl.name, b_lvl.name) == ("dept-a", "dept-b")
    assert validate(ssn, scenario(ssn, "p", "b1-0", "b1-1", "b1-2", "b1-3")) is False


def test_leveled_queues_compare_departments_not_leaves_department_above_but_victim_leaf_not() -> None:
    ssn = open_session(
        node("n1", 8),
        queue("dept-a", gpu=2), queue("dept-b", gpu=2, gpu_weight=0),
        queue("q1", "dept-a", gpu=0), queue("q2", "dept-b", gpu=6),
        running_job("b1", "q2", 2), running_job("b2", "q2", 2), running_job("b3", "q2", 2),
        pending_job("p", "q1", 2),
    )
    assert gpu(ssn, "q2", "allocated") == 6 and gpu(ssn, "q2", "alloc_share") == 6  # the leaf is not above
    assert gpu(ssn, "dept-b", "alloc_share") == 2  # its department is
    assert rules(ssn).can_reclaim(the_job(ssn, "p")) is True
    assert validate(ssn, scenario(ssn, "p", "b1-0")) is True


def test_leveled_pairs() -> None:
    ssn = open_session(
        node("n1", 8), queue("top"), queue("other"), queue("mid", "top"), queue("x", "mid"), queue("y", "mid"),
        queue("z", "top"),
    )
    qs = proportion(ssn).queues
    r = rules(ssn)

    def names(a: str, b: str) -> tuple[str, str]:
        la, lb = r.leveled(qs[a], qs[b])
        return la.name, lb.name

    assert names("x", "y") == ("x", "y")  # siblings
    assert names("x", "z") == ("mid", "z")  # LCA "top"
    assert names("x", "other") == ("top", "other")  # different top-level queues
    assert names("x", "mid") == ("mid", "mid")  # one path is a prefix of the other


# ------------------------------------------------------------------------------------ non-preemptible
def _non_preemptible_cluster() -> Session:
    """dept-a deserves 2 and runs a non-preemptible 2-GPU job in q1 (which deserves 4); dept-b/q2 runs
    five 1-GPU jobs above dept-b's share."""
    objs: list[object] = [
        node("n1", 8),
        queue("dept-a", gpu=2), queue("dept-b", gpu=1), queue("q1", "dept-a", gpu=4), queue("q2", "dept-b", gpu=1),
        running_job("a1", "q1", 2, preemptibility="non-preemptible"),
        pending_job("np", "q1", 1, preemptibility="non-preemptible"),
        pending_job("pp", "q1", 1, preemptibility="preemptible"),
    ]
    objs += [running_job(f"b{i}", "q2", 1) for i in range(5)]
    return open_session(*objs)


def test_non_preemptible_reclaimer_must_fit_the_deserved_quota_at_every_level() -> None:
    ssn = _non_preemptible_cluster()
    r = rules(ssn)
    assert r.can_reclaim(the_job(ssn, "np")) is True  # the leaf: 2 + 1 <= 4
    assert validate(ssn, scenario(ssn, "np", "b0-0")) is False  # dept-a: 2 + 1 > 2


def test_preemptible_reclaimer_is_not_bound_by_the_non_preemptible_rule() -> None:
    ssn = _non_preemptible_cluster()
    assert validate(ssn, scenario(ssn, "pp", "b0-0")) is True


# ------------------------------------------------------------------------------------------ moved victims
def _moved_cluster(config: SchedulerConfig | None = None) -> Session:
    """b (deserved 1) runs three 2-GPU jobs on n1; n2 has 2 idle GPUs. Fair shares a 5 / b 5."""
    return open_session(
        node("n1", 8), node("n2", 2), queue("a", gpu=1), queue("b", gpu=1),
        running_job("b1", "b", 2), running_job("b2", "b", 2), running_job("b3", "b", 2),
        pending_job("p", "a", 2), pending_job("p2", "a", 2), pending_job("p3", "a", 2),
        config=config,
    )


def test_moved_victims_do_not_count_with_allow_consolidating_reclaim() -> None:
    ssn = _moved_cluster()
    assert gpu(ssn, "b", "alloc_share") == 5
    sc = scenario(ssn, "p", "b1-0", "b2-0", moved={"b2-0": "n2"})
    assert the_task(ssn, "b2-0").status is TaskStatus.PIPELINED and sc.moved(the_task(ssn, "b2-0"))
    assert sc.evicted_tasks() == [the_task(ssn, "b1-0")]
    assert validate(ssn, sc) is True  # only b1 is taken: 6 > 5


def test_evicted_victims_all_count() -> None:
    ssn = _moved_cluster()
    assert validate(ssn, scenario(ssn, "p", "b1-0", "b2-0")) is False  # 6 > 5, then 4 <= 5


def test_moved_victims_count_without_allow_consolidating_reclaim() -> None:
    ssn = _moved_cluster(SchedulerConfig(params=SchedulerParams(allow_consolidating_reclaim=False)))
    assert rules(ssn).allow_consolidating_reclaim is False
    sc = scenario(ssn, "p", "b1-0", "b2-0", moved={"b2-0": "n2"})
    assert validate(ssn, sc) is False


# ------------------------------------------------------------------------------------------------ message
def test_reclaim_message_for_sibling_queues() -> None:
    ssn = open_session(
        node("n1", 8), queue("a", gpu=2, display_name="team-a"), queue("b", gpu=2, cpu=4000, memory=8000),
        pod_group("b1", queue="b"),
        pod("b1-0", group="b1", gpus=4, cpu="1500m", memory="1Gi", node="n1"),
        pending_job("p", "a", 2),
    )
    msg = rules(ssn).reclaim_message(the_task(ssn, "b1-0"), the_job(ssn, "b1"), the_job(ssn, "p"))
    assert msg.split("\n") == [
        "Pod default/b1-0 was preempted by workload default/p.",
        "b uses <GPU: 4, CPU: 1.5 (cores), memory: 1.073 (GB)> with a quota of "
        "<GPU: 2, CPU: 4 (cores), memory: 8 (GB)>, fair-share of <GPU: 4, CPU: 1.5 (cores), memory: 1.073 (GB)> "
        "and queue priority of <100>.",
        "team-a uses <GPU: 0, CPU: 0 (cores), memory: 0 (GB)> with a quota of "
        "<GPU: 2, CPU: Unlimited (cores), memory: Unlimited (GB)>, fair-share of <GPU: 2, CPU: 0 (cores), "
        "memory: 0 (GB)> and queue priority of <100>.",
    ]


def test_reclaim_message_compares_the_leveled_queues_across_departments() -> None:
    ssn = open_session(
        node("n1", 8),
        queue("dept-a", gpu=2, priority=200), queue("dept-b", gpu=2, gpu_weight=0),
        queue("q1", "dept-a", gpu=0), queue("q2", "dept-b", gpu=6),
        running_job("b1", "q2", 2), running_job("b2", "q2", 2), running_job("b3", "q2", 2),
        pending_job("p", "q1", 2),
    )
    msg = rules(ssn).reclaim_message(the_task(ssn, "b1-0"), the_job(ssn, "b1"), the_job(ssn, "p"))
    assert msg.split("\n")[1:] == [
        "dept-b uses <GPU: 6, CPU: 0 (cores), memory: 0 (GB)> with a quota of "
        "<GPU: 2, CPU: Unlimited (cores), memory: Unlimited (GB)>, fair-share of <GPU: 2, CPU: 0 (cores), "
        "memory: 0 (GB)> and queue priority of <100>.",
        "dept-a uses <GPU: 0, CPU: 0 (cores), memory: 0 (GB)> with a quota of "
        "<GPU: 2, CPU: Unlimited (cores), memory: Unlimited (GB)>, fair-share of <GPU: 2, CPU: 0 (cores), "
        "memory: 0 (GB)> and queue priority of <200>.",
    ]


def test_humanize_like_kai() -> None:
    assert humanize(-1, 1000) == "Unlimited"
    assert humanize(2, 1) == "2"
    assert humanize(1500, 1000) == "1.5"
    assert humanize(1073741824, 1e9) == "1.073"  # truncated, not rounded
    assert humanize(2 / 3, 1) == "0.666"
    assert humanize(0, 1) == "0"
    assert humanize(100, 1) == "100"
    assert resources_text([0.5, 250, 2e9]) == "GPU: 0.5, CPU: 0.25 (cores), memory: 2 (GB)"


# ------------------------------------------------------------------------------------------ loop guard
def _head_job_cluster(*, gang: bool) -> Session:
    """One GPU, held by q0's job a (q0: deserved 0, priority 100); q1 (deserved 2, priority 50) wants 1 GPU for
    its job small, behind a gang of three 1-GPU pods that never fits (``gang``) or alone."""
    objs: list[object] = [node("n1", 1), queue("q0", gpu=0, priority=100), queue("q1", gpu=2, priority=50),
                          running_job("a", "q0", 1)]
    if gang:
        objs.append(pod_group("gang", queue="q1", min_member=3, created="2025-01-01T10:00:00Z"))
        objs += [pod(f"gang-{i}", group="gang", gpus=1, cpu=0, memory=0) for i in range(3)]
    objs.append(pod_group("small", queue="q1", min_member=1, created="2025-01-01T11:00:00Z"))
    objs.append(pod("small-0", group="small", gpus=1, cpu=0, memory=0))
    return open_session(*objs)


def test_loop_guard_refuses_a_reclaim_the_next_allocate_would_hand_back() -> None:
    """q1's head job is the gang: with it q1 is not starved (3 > 2), so allocate orders q0 (priority 100)
    first and would bind a again on the freed GPU."""
    ssn = _head_job_cluster(gang=True)
    r = rules(ssn)
    sc = scenario(ssn, "small", "a-0")
    assert r.can_reclaim(the_job(ssn, "small")) is True
    assert r.allocate_would_undo(sc, proportion(ssn).queues["q1"], [1.0, 0.0, 0.0], r._allocated or {}) is True
    assert validate(ssn, sc) is False


def test_loop_guard_lets_a_starved_queue_reclaim() -> None:
    """Without the gang, small heads q1, which is starved with it (1 <= 2): q1 goes first, the reclaim holds."""
    ssn = _head_job_cluster(gang=False)
    assert validate(ssn, scenario(ssn, "small", "a-0")) is True


def test_loop_guard_does_not_count_moved_victims() -> None:
    """A victim moved to another node frees nothing for the next allocate: no loop to guard against."""
    ssn = open_session(
        node("n1", 2), node("n2", 2), queue("q0", gpu=0, priority=100), queue("q1", gpu=2, priority=50),
        running_job("a", "q0", 1, node_name="n1"),
        pod_group("gang", queue="q1", min_member=3, created="2025-01-01T10:00:00Z"),
        *[pod(f"gang-{i}", group="gang", gpus=2, cpu=0, memory=0) for i in range(3)],
        pod_group("small", queue="q1", min_member=1, created="2025-01-01T11:00:00Z"),
        pod("small-0", group="small", gpus=1, cpu=0, memory=0),
    )
    r = rules(ssn)
    sc = scenario(ssn, "small", "a-0", moved={"a-0": "n2"})
    assert r.allocate_would_undo(sc, proportion(ssn).queues["q1"], [1.0, 0.0, 0.0], r._allocated or {}) is False
    sc = scenario(ssn, "small", "a-0")
    assert r.allocate_would_undo(sc, proportion(ssn).queues["q1"], [1.0, 0.0, 0.0], r._allocated or {}) is True


# ------------------------------------------------------------------------------------- storm guard
@pytest.mark.parametrize("value, expected", [(2, 2.0), ("1.5", 1.5), (0, 0.0), ("0", 0.0)])
def test_storm_guard_ratio_is_read_from_params(value: object, expected: float) -> None:
    assert SchedulerParams.from_mapping({"max-evicted-gpus-ratio": value}).max_evicted_gpus_ratio == expected
    assert SchedulerParams().max_evicted_gpus_ratio == 0.0  # off by default


@pytest.mark.parametrize("value", [-1, "-0.5", "lots", True, "inf", None, [2]])
def test_storm_guard_ratio_must_be_a_number_not_below_zero(value: object) -> None:
    with pytest.raises(ConfigError, match=r"params\.max-evicted-gpus-ratio: expected a number >= 0"):
        SchedulerConfig.from_mapping({"params": {"max-evicted-gpus-ratio": value}})


def _storm_objects() -> list[Obj]:
    """q0 (deserved 0) runs a 4-GPU gang of two 2-GPU pods on the only node; q1 (deserved 4) wants 1 GPU: the
    only way is to evict the whole gang, 4 GPUs for 1."""
    return [node("n1", 4), queue("q0", gpu=0), queue("q1", gpu=4),
            *running_job("g", "q0", 2, 2), *pending_job("p", "q1", 1)]


def test_storm_guard_refuses_a_scenario_evicting_too_many_gpus_per_gpu_gained() -> None:
    from kaisched import schedule
    from tests.unit.builders import NOW

    unguarded = schedule(_storm_objects(), now=NOW)
    assert sorted(e.pod for e in unguarded.evictions) == ["default/g-0", "default/g-1"]
    guarded = schedule(_storm_objects(), config={"params": {"max-evicted-gpus-ratio": 3}}, now=NOW)
    assert guarded.evictions == [] and guarded.pipelined == []
    enough = schedule(_storm_objects(), config={"params": {"max-evicted-gpus-ratio": 4}}, now=NOW)
    assert enough.to_dict()["evictions"] == unguarded.to_dict()["evictions"]


def test_storm_guard_counts_only_evicted_gpus() -> None:
    from kaisched.actions.evicting import within_eviction_ratio

    ssn = open_session(node("n1", 4), node("n2", 4), queue("q0", gpu=0), queue("q1", gpu=4),
                       *running_job("g", "q0", 2, 2), *pending_job("p", "q1", 1))
    sc = scenario(ssn, "p", "g-0", "g-1")
    assert within_eviction_ratio(sc, 3.9) is False  # 4 GPUs evicted for 1
    assert within_eviction_ratio(sc, 4.0) is True
    ssn = open_session(node("n1", 4), node("n2", 4), queue("q0", gpu=0), queue("q1", gpu=4),
                       *running_job("g", "q0", 2, 2), *pending_job("p", "q1", 1))
    sc = scenario(ssn, "p", "g-0", "g-1", moved={"g-0": "n2", "g-1": "n2"})
    assert within_eviction_ratio(sc, 0.5) is True  # moved pods keep their GPUs
