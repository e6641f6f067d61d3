"""Nomination claims (kaisched.plugins.nominated_pods): a pod a cycle pipelines is nominated to its node and keeps a
claim on it in the next cycle, hidden from the pods it does not outrank, visible to those of its queue with a higher
priority; the claim ends when the pod is placed, when its node is gone or no longer admits it, and one cycle after the
last cycle that pipelined it there."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import kaisched
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster
from kaisched.framework.config import DEFAULT_PLUGINS, ConfigError
from kaisched.framework.statement import Statement
from kaisched.k8s.parse import parse_objects
from kaisched.model.status import TaskStatus
from kaisched.plugins.nominated_pods import CLAIMED, NominationClaims
from kaisched.plugins.scoring import NominatedNodePlugin
from tests.unit.builders import NOW, binds, flatten, job, node, open_session, pipelined, pod, pod_group, queue, status


def nominated(name: str, node_name: str, *, gpus: int = 4, queue_name: str = "q",
              priority_class: str = "build-preemptible",
              created: str = "2025-01-01T11:00:00Z", **pod_kwargs: Any) -> list[dict[str, Any]]:
    """A one-pod PodGroup whose pending pod is nominated to ``node_name``."""
    objs = [pod_group(name, "default", queue_name, 1, priority_class, created=created),
            pod(f"{name}-0", "default", name, gpus, created=created, **pod_kwargs)]
    objs[1]["status"]["nominatedNodeName"] = node_name
    return objs


def pending(name: str, *, gpus: int = 4, queue_name: str = "q", priority_class: str = "build-preemptible",
            created: str = "2025-01-01T10:00:00Z", **pod_kwargs: Any) -> list[dict[str, Any]]:
    """A one-pod PodGroup whose pod is pending (created before the nominated ones: ordered first among equals)."""
    return [pod_group(name, "default", queue_name, 1, priority_class, created=created),
            pod(f"{name}-0", "default", name, gpus, created=created, **pod_kwargs)]


def full(name: str, node_name: str, gpus: int = 4) -> list[dict[str, Any]]:
    """A running pod that fills ``node_name``."""
    return [pod_group(name, "default", "q", 1, "inference"), pod(f"{name}-0", "default", name, gpus, node=node_name)]


def claims_config(value: str) -> dict[str, Any]:
    plugins = [{"name": p.name, **({"arguments": dict(p.arguments)} if p.arguments else {})} for p in DEFAULT_PLUGINS]
    for p in plugins:
        if p["name"] == "nominatednode":
            p["arguments"] = {"claims": value}
    return {"tiers": [{"plugins": plugins}]}


def run(*parts: Any, config: Any = None) -> kaisched.CycleResult:
    return kaisched.schedule(flatten(*parts), config=config, now=NOW)


def nominations(result: kaisched.CycleResult) -> dict[str, str]:
    return {n.pod: n.node for n in result.nominations}


# ------------------------------------------------------------------------------------------------ who sees it
def test_a_claim_is_hidden_from_a_pod_of_equal_priority_ordered_before_its_nominee():
    # "early" is ordered first (same priority, older) and would take n1; the claim keeps it out
    result = run(node("n1", 4), node("n2", 4), queue("q"), full("r", "n2"), pending("early"),
                 nominated("nom", "n1"))
    assert binds(result) == {"default/nom-0": "n1"}
    assert CLAIMED in (status(result, "early").message or "")
    assert nominations(result) == {"default/nom-0": ""}  # bound: its nomination is cleared


def test_a_claim_is_hidden_from_another_queue_whatever_its_priority():
    # q2 goes first (queue priority), and its pod has an equal, lower or higher priority than the nominee: kept out
    for priority_class in ("build", "train", "inference"):
        result = run(node("n1", 4), node("n2", 4), queue("q"), queue("q2", priority=200), full("r", "n2"),
                     pending("other", queue_name="q2", priority_class=priority_class), nominated("nom", "n1"))
        assert binds(result) == {"default/nom-0": "n1"}, priority_class


def test_a_claim_is_visible_to_a_higher_priority_pod_of_its_queue():
    result = run(node("n1", 4), node("n2", 4), queue("q"), full("r", "n2"),
                 pending("urgent", priority_class="inference"), nominated("nom", "n1"))
    assert binds(result) == {"default/urgent-0": "n1"}
    assert nominations(result) == {"default/nom-0": ""}  # not placed: the claim ends with this cycle


def test_a_nominee_that_could_not_be_preempted_once_bound_is_outranked_by_nobody():
    # non-preemptible (build, priority 100): the inference pod of its queue could not preempt it, nor take its claim
    result = run(node("n1", 4), node("n2", 4), queue("q"), full("r", "n2"),
                 pending("urgent", priority_class="inference"), nominated("nom", "n1", priority_class="build"))
    assert binds(result) == {"default/nom-0": "n1"}
    # preemptible, but its queue's preemptMinRuntime would protect it once it starts
    protected = queue("q")
    protected["spec"]["preemptMinRuntime"] = "5m"
    result = run(node("n1", 4), node("n2", 4), protected, full("r", "n2"),
                 pending("urgent", priority_class="inference"), nominated("nom", "n1"))
    assert binds(result) == {"default/nom-0": "n1"}


def test_only_what_the_nominee_asks_is_claimed():
    # n1 has 8 GPUs, the nominee claims 4: a pod of 4 fits beside it, one of 5 does not
    result = run(node("n1", 8), queue("q"), pending("four"), pending("five", gpus=5, created="2025-01-01T10:30:00Z"),
                 nominated("nom", "n1"))
    assert binds(result) == {"default/four-0": "n1", "default/nom-0": "n1"}


def test_claims_false_keeps_kais_behaviour():
    config = claims_config("false")
    result = run(node("n1", 4), node("n2", 4), queue("q"), full("r", "n2"), pending("early"),
                 nominated("nom", "n1"), config=config)
    assert binds(result) == {"default/early-0": "n1"}
    assert result.nominations == []


def test_the_claims_argument_is_validated():
    with pytest.raises(ConfigError, match="nominatednode: argument claims: expected true or false"):
        NominatedNodePlugin({"claims": "maybe"})


# ----------------------------------------------------------------------------------------------- its end
def test_a_nomination_to_a_node_that_is_gone_claims_nothing():
    result = run(node("n1", 4), queue("q"), pending("early"), nominated("nom", "n9"))
    assert binds(result) == {"default/early-0": "n1"}
    assert nominations(result) == {"default/nom-0": ""}


def test_a_node_that_no_longer_admits_the_nominee_is_not_claimed():
    taint = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    tolerate = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    result = run(node("n1", 4, taints=[taint]), queue("q"), pending("early", tolerations=tolerate),
                 nominated("nom", "n1"))
    assert binds(result) == {"default/early-0": "n1"}


def test_a_nominee_too_large_for_its_node_claims_nothing():
    result = run(node("n1", 4), queue("q"), pending("early"), nominated("nom", "n1", gpus=8))
    assert binds(result) == {"default/early-0": "n1"}


# ------------------------------------------------------------------------------------- nomination reports
def test_a_pipelined_pod_is_nominated_and_a_renewed_nomination_is_not_reported_again():
    releasing = [pod_group("old", "default", "q", 1, "train"), pod("old-0", "default", "old", 4, node="n1",
                                                                    deleting=True)]
    fresh = run(node("n1", 4), queue("q"), releasing, pending("p"))
    assert pipelined(fresh) == {"default/p-0": "n1"}
    assert nominations(fresh) == {"default/p-0": "n1"}
    again = run(node("n1", 4), queue("q"), releasing, nominated("p", "n1"))
    assert pipelined(again) == {"default/p-0": "n1"}
    assert again.nominations == []
    assert again.to_dict()["nominations"] == []
    assert fresh.to_dict()["nominations"] == [{"pod": "default/p-0", "node": "n1"}]


def test_a_pod_of_another_scheduler_keeps_its_nomination():
    other = pod("x", "default", None, 1, scheduler="default-scheduler")
    other["status"]["nominatedNodeName"] = "n1"
    result = run(node("n1", 4), queue("q"), other, pending("p", gpus=4))
    assert binds(result) == {"default/p-0": "n1"}  # (nor does it claim anything)
    assert result.nominations == []


# ------------------------------------------------------------------------------------------ the predicate
def session_with(*objs: Any) -> tuple[Any, NominationClaims]:
    ssn = open_session(*objs)
    plugin = next(p for p in ssn.plugins if isinstance(p, NominatedNodePlugin))
    assert plugin.claims is not None
    return ssn, plugin.claims


def task(ssn: Any, key: str) -> Any:
    return next(t for t in ssn.snapshot.tasks.values() if t.key == key)


def test_the_claim_is_free_to_its_nominee_and_gone_once_it_is_placed():
    ssn, claims = session_with(node("n1", 4), node("n2", 4), queue("q"), pending("same"),
                               pending("urgent", priority_class="inference"), nominated("nom", "n1"))
    n1 = ssn.nodes.by_name["n1"]
    nom, same, urgent = task(ssn, "default/nom-0"), task(ssn, "default/same-0"), task(ssn, "default/urgent-0")
    code = ssn.reason_code(CLAIMED)
    codes = claims.predicate(same)
    assert codes is not None and int(codes[n1]) == code and int(np.count_nonzero(codes)) == 1
    assert claims.predicate(urgent) is None  # it outranks the nominee
    assert claims.predicate(nom) is None  # its own claim
    stmt = Statement(ssn)
    stmt.allocate(nom, n1)
    assert nom.status is TaskStatus.ALLOCATED
    assert claims.predicate(same) is None  # placed: the claim is gone (n1 is full anyway)
    stmt.discard()
    codes = claims.predicate(same)
    assert codes is not None and int(codes[n1]) == code  # undone: the claim is back
    # the fit shapes tell them apart: the nominee, the pods that outrank it, the others
    assert len({claims.fit_class(t) for t in (nom, same, urgent)}) == 3


def test_a_node_claimed_beyond_what_it_has_free_is_closed_to_the_pods_that_respect_the_claim():
    ssn, claims = session_with(node("n1", 4), queue("q"), pending("small", gpus=1),
                               pending("urgent", gpus=2, priority_class="inference"), nominated("nom", "n1"))
    n1 = ssn.nodes.by_name["n1"]
    small, urgent = task(ssn, "default/small-0"), task(ssn, "default/urgent-0")
    assert claims.predicate(small) is not None  # 4 free, 4 claimed
    stmt = Statement(ssn)
    stmt.allocate(urgent, n1)  # the outranking pod takes 2 of the 4 claimed GPUs
    codes = claims.predicate(small)
    assert codes is not None and int(codes[n1]) == ssn.reason_code(CLAIMED)
    stmt.discard()


def test_a_session_without_nominations_registers_nothing():
    ssn = open_session(node("n1", 4), queue("q"), pending("p"))
    assert not ssn.fit_key_parts


# --------------------------------------------------------------------------------------- across cycles
def test_embedded_cluster_keeps_the_preemptors_claim_across_cycles():
    """Cycle 0: preempt evicts "low" (train) on n1 for "high" (build, 4 GPUs), pipelined and nominated there. The
    embedded cluster recreates "low" pending at once (it would fit on n1 again) and "other" (queue q2, ordered
    first) waits too. Cycle 1: the claim keeps both out, "high" is bound on n1 and its nomination cleared; then
    the cluster is quiet."""
    objs = flatten(node("n1", 4), queue("q", priority=100), queue("q2", priority=200),
                   pod_group("low", "default", "q", 1, "train"), pod("low-0", "default", "low", 4, node="n1"),
                   job("high", 1, gpus=4, priority_class="build", created="2025-01-01T11:00:00Z"),
                   job("other", 1, gpus=4, queue="q2", priority_class="train", created="2025-01-01T11:30:00Z"))
    cfg = resolve_config({"actions": "allocate, preempt"})
    store = EmbeddedCluster(prepare(parse_objects(objs), cfg, NOW))
    results = []
    for i in range(4):
        now = NOW + timedelta(seconds=i)
        result = run_prepared_cycle(store.parsed(), cfg, now)
        store.apply(result, now)
        results.append(result)
    first, second = results[0], results[1]
    assert [(e.pod, e.preemptor) for e in first.evictions] == [("default/low-0", "default/high")]
    assert pipelined(first) == {"default/high-0": "n1"}
    assert nominations(first) == {"default/high-0": "n1"}
    assert binds(second) == {"default/high-0": "n1"}
    assert CLAIMED in (status(second, "other").message or "")
    assert nominations(second) == {"default/high-0": ""}
    assert all(not (r.binds or r.pipelined or r.evictions) for r in results[2:])
    assert store.pods["default/high-0"].node_name == "n1"
    assert not any(p.nominated_node_name for p in store.pods.values())


def test_without_claims_the_next_cycle_gives_the_preemptors_room_away():
    objs = flatten(node("n1", 4), queue("q", priority=100), queue("q2", priority=200),
                   pod_group("low", "default", "q", 1, "train"), pod("low-0", "default", "low", 4, node="n1"),
                   job("high", 1, gpus=4, priority_class="build", created="2025-01-01T11:00:00Z"),
                   job("other", 1, gpus=4, queue="q2", priority_class="train", created="2025-01-01T11:30:00Z"))
    raw = claims_config("false")
    raw["actions"] = "allocate, preempt"
    cfg = resolve_config(raw)
    store = EmbeddedCluster(prepare(parse_objects(objs), cfg, NOW))
    first = run_prepared_cycle(store.parsed(), cfg, NOW)
    store.apply(first, NOW)
    second = run_prepared_cycle(store.parsed(), cfg, NOW + timedelta(seconds=1))
    assert pipelined(first) == {"default/high-0": "n1"}
    assert binds(second) == {"default/other-0": "n1"}  # (KAI: the preemptor's room goes to another queue)


def test_embedded_cluster_clears_a_nomination_the_cycle_does_not_renew():
    store = EmbeddedCluster(prepare(parse_objects(flatten(node("n1", 4), queue("q"), nominated("nom", "n1"),
                                                          full("r", "n1"))), resolve_config(None), NOW))
    result = run_prepared_cycle(store.parsed(), resolve_config(None), NOW)
    assert not result.binds and nominations(result) == {"default/nom-0": ""}  # n1 is full: not placed
    store.apply(result, NOW)
    assert store.pods["default/nom-0"].nominated_node_name == ""


def test_a_victim_put_back_does_not_hand_its_preemptor_a_claim_it_outranks():
    # n1: 1 GPU idle, claimed by nom-0 (of a gang that cannot start yet); v-0 outranks nom-0 (its queue, a higher
    # priority). Consolidation could evict v-0, pipeline p-0 (another queue) into its place and put v-0 back on
    # the claimed GPU: p-0 would hold the claimed GPU with no pod evicted. A victim respects every claim.
    nom = [pod_group("nom", "default", "q2", 2, "train", created="2025-01-01T11:00:00Z"),
           pod("nom-0", "default", "nom", 1, created="2025-01-01T11:00:00Z"),
           pod("nom-1", "default", "nom", 1, created="2025-01-01T11:00:00Z")]
    nom[1]["status"]["nominatedNodeName"] = "n1"
    objs = flatten(
        node("n1", 4), node("n2", 4), queue("q"), queue("q2"), full("r", "n2"),
        [pod_group("v", "default", "q2", 1, "build-preemptible"), pod("v-0", "default", "v", 2, node="n1")],
        [pod_group("w", "default", "q", 1, "inference"), pod("w-0", "default", "w", 1, node="n1")],
        pending("p", gpus=1, priority_class="train"), nom)
    ssn, claims = session_with(*objs)
    v, n1 = task(ssn, "default/v-0"), ssn.nodes.by_name["n1"]
    assert claims.may_take(v, task(ssn, "default/nom-0"))  # it outranks the nominee, as a pending pod would
    stmt = Statement(ssn)
    stmt.evict(v, action="consolidation", preemptor="default/p", message="")
    stmt.pipeline(task(ssn, "default/p-0"), n1)
    codes = claims.predicate(v)
    assert codes is not None and int(codes[n1]) == ssn.reason_code(CLAIMED)  # but not as a victim put back
    stmt.discard()
    result = kaisched.schedule(objs, now=NOW)
    assert pipelined(result) == {} and binds(result) == {} and not result.evictions
    n1_end = next(n for n in result.nodes if n.name == "n1")
    assert (n1_end.idle, n1_end.releasing) == (1.0, 0.0)
