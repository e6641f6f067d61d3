"""Action names -> implementations."""

from __future__ import annotations

from collections.abc import Mapping

from kaisched.actions.allocate import AllocateAction
from kaisched.actions.base import Action
from kaisched.actions.evicting import ConsolidationAction, PreemptAction, ReclaimAction
from kaisched.actions.stalegangeviction import StaleGangEvictionAction
from kaisched.framework.config import ConfigError, SchedulerConfig

ACTIONS: Mapping[str, type[Action]] = {
    cls.name: cls
    for cls in (AllocateAction, ConsolidationAction, ReclaimAction, PreemptAction, StaleGangEvictionAction)
}
KAI_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


def configured_actions(config: SchedulerConfig) -> list[str]:
    if not config.actions_explicit:
        return [name for name in config.actions if name in ACTIONS]
    return list(config.actions)


def validate_actions(config: SchedulerConfig) -> None:
    for name in configured_actions(config):
        if name not in ACTIONS:
            if name in KAI_ACTIONS:
                raise ConfigError(f"actions: action {name!r} is not implemented in this version of kaisched "
                                  f"(available: {', '.join(ACTIONS)})")
            raise ConfigError(f"actions: unknown action {name!r} (available: {', '.join(ACTIONS)})")


def build_actions(config: SchedulerConfig) -> list[Action]:
    return [ACTIONS[name]() for name in configured_actions(config)]
