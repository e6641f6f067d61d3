"""Nomination claims (kaisched.plugins.nominated_pods) on random busy clusters whose pending pods are nominated to
random nodes (some gone) and some of whose running pods terminate:

* the claims hold: after a cycle, a node keeps free at least what its unplaced nominees claim, unless a pod that
  may take from one of them was placed there (or the node was claimed beyond what it had free to begin with);
* the victim search's shortcuts (proofs of failure, warm simulations) and the placement's shared failure keys
  decide exactly as without them, claims and all: what a claim hides depends on the session's state and on the
  task's fit class only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

import kaisched
from kaisched.actions import evicting, placement
from kaisched.framework.result import CycleResult
from kaisched.framework.session import Session
from kaisched.model.resources import GPU
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo
from kaisched.plugins.scoring import NominatedNodePlugin
from tests.property.test_fast_paths import shortcut_off
from tests.property.test_scenario_proofs import PROOF_SETTINGS, busy_clusters
from tests.unit.builders import NOW, Obj, open_session


@st.composite
def nominated_clusters(draw: st.DrawFn) -> list[Obj]:
    """A busy cluster; about a third of its pending pods nominated to a node (now and then one that is gone), about
    one running pod in six terminating."""
    objs = draw(busy_clusters())
    nodes = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
    for o in objs:
        if o["kind"] != "Pod":
            continue
        if o["spec"].get("nodeName"):
            if draw(st.integers(0, 5)) == 0:
                o["metadata"]["deletionTimestamp"] = "2025-01-01T11:59:00Z"
        elif draw(st.integers(0, 2)) == 0:
            o["status"]["nominatedNodeName"] = draw(st.sampled_from([*nodes, *nodes, "gone"]))
    return objs


def _schedule(objs: list[Obj]) -> CycleResult:
    return kaisched.schedule(objs, now=NOW)


# ------------------------------------------------------------------------------------------ the claims hold
def _whole_gpus(t: TaskInfo) -> float:
    return 0.0 if t.gpu.shared else float(t.req[GPU])


@PROOF_SETTINGS
@given(nominated_clusters())
def test_a_node_keeps_what_its_unplaced_nominees_claim(objs: list[Obj]) -> None:
    ssn: Session = open_session(objs)
    plugin = next(p for p in ssn.plugins if isinstance(p, NominatedNodePlugin))
    claims = plugin.claims
    assert claims is not None
    nodes = ssn.nodes
    free = (nodes.idle[GPU] + nodes.releasing[GPU]).tolist()
    nominees: dict[str, list[TaskInfo]] = {}
    for t in ssn.snapshot.nominated:
        j = nodes.by_name.get(t.pod.nominated_node_name, -1)
        if t.status is TaskStatus.PENDING and j >= 0 and nodes.schedulable[j] and _whole_gpus(t) <= float(
                nodes.allocatable[GPU, j]):
            nominees.setdefault(t.pod.nominated_node_name, []).append(t)
    tasks = {t.key: t for t in ssn.snapshot.tasks.values()}
    result = _schedule(objs)
    placed: dict[str, list[TaskInfo]] = {}
    for p in (*result.binds, *result.pipelined):
        placed.setdefault(p.node, []).append(tasks[p.pod])
    end = {n.name: n.idle + n.releasing for n in result.nodes}
    for name, claimed in nominees.items():
        j = nodes.by_name[name]
        if free[j] + 1e-9 < sum(_whole_gpus(t) for t in claimed):
            continue  # claimed beyond what it had free: closed to the pods that respect the claims
        here = {t.key for t in placed.get(name, [])}
        kept = [t for t in claimed if t.key not in {p.pod for p in (*result.binds, *result.pipelined)}
                and not any(claims.may_take(o, t) for o in placed.get(name, []))]
        want = sum(_whole_gpus(t) for t in kept)
        assert end.get(name, 0.0) + 1e-9 >= want, (
            f"{name}: {end.get(name)} GPUs free after the cycle, {want} claimed by {[t.key for t in kept]}; "
            f"placed there: {sorted(here)}")


# ----------------------------------------------------------------------------------- shortcuts decide alike
@PROOF_SETTINGS
@given(nominated_clusters())
def test_with_claims_proofs_decide_as_simulating_every_scenario(objs: list[Obj]) -> None:
    fast = _schedule(objs)
    with shortcut_off("prove_failures"):
        slow = _schedule(objs)
    assert fast.to_dict() == slow.to_dict()


@PROOF_SETTINGS
@given(nominated_clusters())
def test_with_claims_warm_simulations_decide_as_cold_ones(objs: list[Obj]) -> None:
    fast = _schedule(objs)
    with shortcut_off("warm_simulations"):
        slow = _schedule(objs)
    assert fast.to_dict() == slow.to_dict()


def _own_failure_key(ssn: Session, task: TaskInfo, pipeline_only: bool, explain: bool) -> tuple[Any, ...]:
    return (task.uid, pipeline_only, explain)  # no two tasks share a failure


def _never_recheck(ssn: Session, task: TaskInfo, known: placement.FitFailure) -> bool:
    return False


@contextmanager
def unshared_failures() -> Iterator[None]:
    with mock.patch.object(placement, "failure_key", _own_failure_key), \
            mock.patch.object(evicting, "failure_key", _own_failure_key), \
            mock.patch.object(placement, "recheck_failure", _never_recheck):
        yield


@PROOF_SETTINGS
@given(nominated_clusters())
def test_with_claims_shared_failure_keys_decide_as_one_per_task(objs: list[Obj]) -> None:
    fast = _schedule(objs)
    with unshared_failures():
        slow = _schedule(objs)
    assert fast.to_dict() == slow.to_dict()
