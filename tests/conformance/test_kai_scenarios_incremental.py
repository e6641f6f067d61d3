"""KAI's own scenarios on the incremental path (issue 28, item 5): every cycle from a snapshot model kept from the
cycle before (:class:`kaisched.cluster.incremental.IncrementalState`) and updated with what changed, and compared,
result for result, with a full rebuild of the same objects.

Each scenario keeps one state over its rounds. Its first cycle is an update: the state is first given the
scenario's cluster without its pending pods (a cycle on those objects), so the first round adds the pending pods to
a kept model, as a live cluster's next cycle does after pods arrive. Later rounds go through the same state (the
harness makes their objects afresh at each round's clock, so the model builds them in full: see the last test).
The harness then judges the incremental results as it judges rebuilt ones (``test_kai_scenarios.py``), with the
same expected failures; a cycle whose incremental result differs from the rebuilt one fails the test whatever the
scenario expects.

    .venv/bin/pytest tests/conformance/test_kai_scenarios_incremental.py -q
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pytest

from kaisched import ACTIONS
from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
from kaisched.framework.result import CycleResult
from kaisched.k8s.parse import parse_objects

from .harness import HarnessError, plan, run_scenario
from .scenario import Scenario
from .test_kai_scenarios import _params


class IncrementalMismatch(Exception):
    """An incremental cycle decided unlike a full rebuild of the same objects (never an expected failure)."""


class Tally:
    """Cycles run on the incremental path over the whole module, and how many were answered by an update."""

    cycles = 0
    updates = 0
    scenarios = 0
    first_updates = 0  # scenarios whose first cycle was an update


def _is_pending_pod(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Pod" and not (obj.get("spec") or {}).get("nodeName")


class IncrementalSchedule:
    """``kaisched.schedule``'s signature, on one :class:`IncrementalState` kept across a scenario's rounds."""

    def __init__(self) -> None:
        self.state = IncrementalState()
        self.cycles = 0

    def __call__(self, objects: Iterable[Mapping[str, Any]], config: Any = None,
                 now: datetime | None = None) -> CycleResult:
        assert now is not None
        cfg = resolve_config(config)
        manifests = list(objects)
        with no_cyclic_gc():
            if self.cycles == 0:  # the cluster before its pending pods arrived: kept, then updated below
                seed = [o for o in manifests if not _is_pending_pod(o)]
                run_prepared_cycle(prepare(parse_objects(seed), cfg, now), cfg, now, state=self.state)
            updates = self.state.updates
            result = run_prepared_cycle(prepare(parse_objects(manifests), cfg, now), cfg, now, state=self.state)
            rebuilt = run_prepared_cycle(prepare(parse_objects(manifests), cfg, now), cfg, now)
        self.cycles += 1
        Tally.cycles += 1
        Tally.updates += self.state.updates - updates
        if self.cycles == 1 and self.state.updates > updates:
            Tally.first_updates += 1
        if result.to_dict() != rebuilt.to_dict():
            raise IncrementalMismatch(
                f"cycle {self.cycles} at {now.isoformat()}: the incremental result differs from the rebuilt one\n"
                f"incremental: {result.to_dict()}\nrebuilt:     {rebuilt.to_dict()}")
        return result


@pytest.mark.parametrize("scenario", _params(raises=pytest.fail.Exception))
def test_kai_scenario_on_the_incremental_path(scenario: Scenario) -> None:
    actions, skip = plan(scenario, ACTIONS)
    assert skip is None
    Tally.scenarios += 1
    try:
        run_scenario(scenario, IncrementalSchedule(), actions)
    except HarnessError as e:
        report = str(e)
    else:
        return
    pytest.fail(report, pytrace=False)  # outside the except: no chained traceback


def test_the_incremental_path_answered_the_first_cycles_by_updates() -> None:
    """Not vacuous: over the whole corpus, the first cycle of most scenarios was an update of the kept model (a full
    build answers only where an update may not: kaisched.model.kept's docstring, e.g. DRA objects). The harness
    makes every later round's objects afresh at that round's clock (each queue's and job's creation time moves with
    it, as KAI's harness rebuilds each round), so the model rightly refuses to update those rounds and builds in
    full: the multi-cycle updates are the property suites' (tests/property/test_convergence.py) and
    tests/unit/test_kept_snapshot.py's."""
    if Tally.scenarios < 50:
        pytest.skip("judged over the whole corpus (run the module, not a selection)")
    assert Tally.first_updates >= 0.8 * Tally.scenarios, (Tally.first_updates, Tally.scenarios)
