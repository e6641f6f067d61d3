"""The simulator (issue 7): the real scheduler on a simulated clock, driven by a scenario file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kaisched.sim import engine
from kaisched.sim.engine import Progress, ProgressInfo, SimulationError
from kaisched.sim.model import Arrival, Scenario, SimResult
from kaisched.sim.scenario import ScenarioError, load_scenario, scenario_from_mapping


def simulate(scenario: Scenario | str | Path | Mapping[str, Any], *, seed: int | None = None,
             progress: Progress | None = None) -> SimResult:
    """Simulate a scenario (a :class:`Scenario`, a scenario file, or its content as a mapping) to its end.

    Raises :class:`ScenarioError` for an unusable scenario file and :class:`SimulationError` when the
    cluster's objects have errors; the same scenario and seed always give the same result."""
    if isinstance(scenario, str | Path):
        scenario = load_scenario(scenario, seed=seed)
    elif isinstance(scenario, Mapping):
        doc = scenario
        scenario = scenario_from_mapping(doc, seed=seed)
        scenario.text = yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True)
    return engine.simulate(scenario, progress=progress)


__all__ = ["Arrival", "Progress", "ProgressInfo", "Scenario", "ScenarioError", "SimResult", "SimulationError",
           "load_scenario", "scenario_from_mapping", "simulate"]
