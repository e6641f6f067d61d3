"""kaisched: a KAI-compatible GPU cluster scheduler.

The shortest useful example::

    import kaisched
    result = kaisched.schedule(kaisched.load_documents(["cluster.yaml"])[0])
    print(result.to_dict()["binds"])
"""

from kaisched.actions import allocate as _a_core_module
from kaisched.actions.registry import ACTIONS as _ACTIONS
from kaisched.cluster.schedule import schedule
from kaisched.framework.config import ConfigError, SchedulerConfig, SchedulerParams
from kaisched.framework.result import CycleResult
from kaisched.k8s.loader import load_documents, load_objects
from kaisched.k8s.objects import ObjectError, ParsedObjects
from kaisched.sim import Scenario, ScenarioError, SimResult, SimulationError, simulate

ACTIONS: tuple[str, ...] = tuple(_ACTIONS)


def compiled() -> bool:
    """The scheduling core was imported compiled with mypyc (``PYTHONPATH=build/compiled``,
    docs/performance.md), not from its sources."""
    return not (_a_core_module.__file__ or "").endswith(".py")


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
    "SimResult",
    "SimulationError",
    "compiled",
    "load_documents",
    "load_objects",
    "schedule",
    "simulate",
]
