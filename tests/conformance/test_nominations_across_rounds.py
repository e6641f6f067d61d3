"""KAI's integration scenarios with the nominations carried from round to round, as the embedded cluster and
Kubernetes mode carry them (KAI's harness drops a pipelined placement at its write-back, and so does ours: the
other conformance tests are KAI's behaviour within each round). Every scenario still reaches KAI's expected state
but one, ``integration_reclaim#40``, where the reclaimer's gang is bound where it was pipelined: its two pods on the
other two nodes than KAI's expectation (docs/compatibility.md, "Nominated pods keep a claim across cycles")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pytest

from kaisched import ACTIONS, CycleResult, schedule

from .expected_failures import DELIBERATE_DIFFERENCES, EXPECTED_FAILURES, INEXPRESSIBLE
from .harness import HarnessError, plan, run_scenario
from .scenario import ENV_DIR, conformance_dir, load_scenarios

if not conformance_dir().is_dir():
    pytest.skip(f"KAI conformance scenarios not found at {conformance_dir()} (set ${ENV_DIR})", allow_module_level=True)

#: the scenarios whose expected state differs once nominations are carried across rounds
DIFFER_ACROSS_ROUNDS = {"integration_reclaim#40"}


class NominatingCluster:
    """``schedule`` with the pods' nominations kept from one round to the next (set on the pods still pending)."""

    def __init__(self) -> None:
        self.nominated: dict[str, str] = {}

    def __call__(self, objects: Sequence[dict[str, Any]], config: Mapping[str, Any] | None = None,
                 now: datetime | None = None) -> CycleResult:
        for obj in objects:
            if obj.get("kind") == "Pod" and not obj["spec"].get("nodeName"):
                meta = obj["metadata"]
                node = self.nominated.get(f"{meta.get('namespace') or 'default'}/{meta['name']}")
                if node:
                    obj["status"]["nominatedNodeName"] = node
        result = schedule(objects, config=config, now=now)
        for n in result.nominations:
            if n.node:
                self.nominated[n.pod] = n.node
            else:
                self.nominated.pop(n.pod, None)
        return result


def test_kai_integration_scenarios_with_nominations_carried_across_rounds() -> None:
    known = {*DELIBERATE_DIFFERENCES, *INEXPRESSIBLE, *EXPECTED_FAILURES}
    differ: dict[str, str] = {}
    ran = 0
    for scenario in load_scenarios():
        if scenario.is_unit or scenario.id in known:
            continue
        actions, skip = plan(scenario, ACTIONS)
        if skip is not None:
            continue
        ran += 1
        try:
            run_scenario(scenario, NominatingCluster(), actions)
        except HarnessError as e:
            differ[scenario.id] = str(e)
    assert ran > 50
    assert set(differ) == DIFFER_ACROSS_ROUNDS, "\n\n".join(differ.values())
    report = differ["integration_reclaim#40"]
    assert "pending-job-0: node expected node0, got pending-job-0=node1" in report
    assert "pending-job-1: node expected node1, got pending-job-1=node0" in report
