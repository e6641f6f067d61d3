"""Placement asks binpack for its first node directly when every other node scorer is neutral for the task
(``Session.ranked_node``, ``NodePlacementPlugin.first_ranked``): it must be the node that scoring every candidate
and taking the first maximum of the sum chooses, and the shortcut must stand aside whenever another scorer could
change the winner."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from kaisched import schedule
from kaisched.framework.plugin import BoolArray, NodeCandidates
from kaisched.framework.session import Session
from kaisched.model.node import all_true
from kaisched.model.task import TaskInfo
from tests.unit.builders import NOW, flatten, node, open_session, pipelined, pod, pod_group, queue, tiers


def scored_choice(ssn: Session, task: TaskInfo, fit: BoolArray) -> int:
    """Placement's plain path: every scorer on every candidate, the first maximum of the sum."""
    indices = fit.nonzero()[0]
    if len(indices) == 0:
        return -1
    cands = NodeCandidates(indices, all_true(len(indices)), True)
    scores: Any = None
    for scorer in ssn.node_scorers:
        score = scorer(task, cands)
        if score is not None:
            scores = score if scores is None else scores + score
    return int(indices[int(scores.argmax()) if scores is not None else 0])


def random_cluster(rng: random.Random) -> list[object]:
    objs: list[object] = [queue("q")]
    for n in range(rng.randint(1, 12)):
        gpus = rng.choice([4, 8, 8])
        objs.append(node(f"n{n:02d}", gpus, cpu=rng.choice([32, 64, 96])))
        for p in range(rng.randint(0, 3)):
            name = f"run-{n}-{p}"
            objs += [pod_group(name, min_member=1),
                     pod(name, group=name, gpus=rng.randint(0, 2), cpu=rng.randint(1, 8), node=f"n{n:02d}",
                         phase="Running")]
    return objs


def pending_task(ssn: Session) -> TaskInfo:
    return next(t for t in ssn.snapshot.tasks.values() if t.name == "p")


def amended(obj: dict[str, Any], *, annotations: dict[str, str] | None = None,
            status: dict[str, str] | None = None) -> dict[str, Any]:
    out = {**obj, "metadata": dict(obj["metadata"]), "status": {**obj["status"], **(status or {})}}
    out["metadata"]["annotations"] = {**out["metadata"].get("annotations", {}), **(annotations or {})}
    return out


def test_the_ranked_node_is_the_scored_choice() -> None:
    rng = random.Random(20261130)
    ranked_somewhere = 0
    for _ in range(150):
        gpus = rng.randint(1, 6)
        ssn = open_session(*random_cluster(rng), pod_group("p", min_member=1),
                           pod("p", group="p", gpus=gpus, cpu=rng.randint(1, 40)))
        task = pending_task(ssn)
        fit = ssn.nodes.fits_task(task, with_releasing=True)
        ranked = ssn.ranked_node(task, fit)
        assert ranked is not None, "a whole-GPU pod with every other scorer neutral: binpack ranks alone"
        assert ranked == scored_choice(ssn, task, fit)
        ranked_somewhere += ranked >= 0 and int(fit.sum()) > 1
    assert ranked_somewhere > 50  # mostly a real choice between several nodes


def test_ties_go_to_the_first_node() -> None:
    ssn = open_session(queue("q"), node("a", 8), node("b", 8), node("c", 8), pod_group("p", min_member=1),
                       pod("p", group="p", gpus=1))
    task = pending_task(ssn)
    fit = ssn.nodes.fits_task(task, with_releasing=True)
    assert ssn.ranked_node(task, fit) == scored_choice(ssn, task, fit) == 0
    fit[0] = False
    assert ssn.ranked_node(task, fit) == 1
    assert ssn.ranked_node(task, np.zeros(3, dtype=np.bool_)) == -1  # nothing fits


def test_the_shortcut_stands_aside_when_another_scorer_could_change_the_winner() -> None:
    base = (queue("q"), node("a", 8), node("b", 8, cpu=32))
    cases = {
        "a CPU-only pod (resourcetype scores nodes without GPUs)": (
            (pod_group("p", min_member=1), pod("p", group="p", gpus=0)), None),
        "a nominated node": (
            (pod_group("p", min_member=1), amended(pod("p", group="p", gpus=1),
                                                   status={"nominatedNodeName": "b"})), None),
        "a preferred node affinity": (
            (pod_group("p", min_member=1), pod("p", group="p", gpus=1, affinity={
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b"]}]}}]}})), None),
        "a shared GPU (gpusharingorder scores devices)": (
            (pod_group("p", min_member=1), amended(pod("p", group="p"), annotations={"gpu-fraction": "0.5"})),
            None),
        "a node releasing resources (nodeavailability prefers nodes where the pod fits at once)": (
            (pod_group("p", min_member=1), pod("p", group="p", gpus=1), pod_group("old", min_member=1),
             pod("old", group="old", gpus=8, node="a", deleting=True)), None),
        "spread": ((pod_group("p", min_member=1), pod("p", group="p", gpus=1)),
                   {"tiers": tiers(nodeplacement={"gpu": "spread", "cpu": "spread"})}),
    }
    for what, (objs, config) in cases.items():
        ssn = open_session(*base, *objs, config=config)
        task = pending_task(ssn)
        fit = ssn.nodes.fits_task(task, with_releasing=True)
        assert fit.any(), what
        assert ssn.ranked_node(task, fit) is None, what


def test_consolidation_ties_on_free_gpus_go_to_the_node_where_the_pod_fits_now() -> None:
    """Consolidation moves w and v off c-full to make room for p (2 GPUs). a-idle (one idle GPU) and b-releasing (one
    GPU of a terminating pod) tie for binpack, which counts idle and releasing GPUs together (KAI's
    NonAllocatedResource, spec 8.1); nodeavailability's +100 for a node where the pod fits on idle resources breaks
    the tie, as KAI's summed scores do: w, placed first (the older job), goes to a-idle, v to b-releasing."""
    objs = flatten(
        queue("q"), node("a-idle", 2), node("b-releasing", 2), node("c-full", 2),
        pod_group("x", queue="q", priority_class="build"), pod("x-0", group="x", gpus=1, node="a-idle"),
        pod_group("y", queue="q", priority_class="build"), pod("y-0", group="y", gpus=1, node="b-releasing"),
        pod_group("d", queue="q", priority_class="build"),
        pod("d-0", group="d", gpus=1, node="b-releasing", deleting=True),
        pod_group("w", queue="q", created="2026-01-01T00:00:00Z"), pod("w-0", group="w", gpus=1, node="c-full"),
        pod_group("v", queue="q", created="2026-01-01T00:05:00Z"), pod("v-0", group="v", gpus=1, node="c-full"),
        pod_group("p", queue="q", created="2026-01-01T00:10:00Z"), pod("p-0", group="p", gpus=2),
    )
    result = schedule(objs, None, NOW)
    assert sorted(e.pod for e in result.evictions) == ["default/v-0", "default/w-0"]
    assert pipelined(result) == {"default/p-0": "c-full", "default/w-0": "a-idle", "default/v-0": "b-releasing"}
