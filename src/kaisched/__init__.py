"""kaisched: a KAI-compatible GPU cluster scheduler.

The shortest useful example::

    import kaisched
    result = kaisched.schedule(kaisched.load_documents(["cluster.yaml"])[0])
    print(result.to_dict()["binds"])
"""

from kaisched.actions.registry import ACTIONS as _ACTIONS
from kaisched.cluster.schedule import compiled_core, schedule
from kaisched.framework.config import ConfigError, SchedulerConfig, SchedulerParams, SearchBudgets
from kaisched.framework.result import CycleResult
from kaisched.k8s.loader import load_documents, load_objects
from kaisched.k8s.objects import ObjectError, ParsedObjects
from kaisched.sim import Scenario, ScenarioError, SimResult, SimulationError, simulate

ACTIONS: tuple[str, ...] = tuple(_ACTIONS)


def compiled() -> bool:
    """The scheduling core was imported compiled with mypyc (a wheel's core, or ``PYTHONPATH=build/compiled``:
    docs/performance.md), not from its sources."""
    return compiled_core()


__all__ = [
    "ACTIONS",
    "ConfigError",
    "CycleResult",
    "ObjectError",
    "ParsedObjects",
    "Scenario",
    "ScenarioError",
    "SchedulerConfig",
    "SchedulerParams",
    "SearchBudgets",
    "SimResult",
    "SimulationError",
    "compiled",
    "load_documents",
    "load_objects",
    "schedule",
    "simulate",
]
