"""Replay KAI's snapshot ZIP as KAI's ``snapshot-tool`` does (one session with the snapshot's own actions, tiers and
params over its objects), and write kaisched's state as such a snapshot.

The ZIP and JSON are read and written by :mod:`kaisched.k8s.kai_snapshot`; this module decides what kaisched
runs of it (the action and plugin registries live above ``k8s``): an action or plugin kaisched does not implement
is listed in the replay's warnings and not run, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kaisched.actions.registry import ACTIONS, configured_actions
from kaisched.cluster.schedule import no_cyclic_gc, run_prepared_cycle
from kaisched.framework.config import ConfigError, SchedulerConfig, SchedulerParams
from kaisched.framework.result import CycleResult
from kaisched.k8s import constants as C
from kaisched.k8s.kai_snapshot import (
    MAX_SNAPSHOT_BYTES,
    KaiSnapshot,
    SnapshotError,
    nanoseconds,
    partition_params,
    read_snapshot,
    to_objects,
    write_snapshot,
)
from kaisched.k8s.objects import ParsedObjects
from kaisched.model.snapshot import SnapshotOptions, forget_cached_facts
from kaisched.model.usage import UsageTable
from kaisched.plugins.registry import ACCEPTED_WITHOUT_EFFECT, PLUGINS, SCENARIO_GENERATOR_PLUGINS


@dataclass(slots=True)
class Replay:
    """A snapshot ready to run: its configuration as kaisched runs it and its objects as KAI's tool sees them."""

    snapshot: KaiSnapshot
    config: SchedulerConfig
    objects: ParsedObjects

    @property
    def warnings(self) -> list[str]:
        return self.snapshot.warnings

    def options(self) -> SnapshotOptions:
        """The snapshot options of a replay: no claims made from templates (KAI's tool has no controllers)."""
        return SnapshotOptions(full_hierarchy_fairness=self.config.params.full_hierarchy_fairness,
                               scheduler_name=self.config.params.scheduler_name, make_template_claims=False)

    def default_now(self) -> datetime:
        """The time a replay runs at unless told: the capture time of a kaisched snapshot, else now (KAI's tool
        runs at the current time too)."""
        return self.snapshot.captured_at or datetime.now(UTC)


def replay_config(snap: KaiSnapshot) -> SchedulerConfig:
    """The snapshot's ``config`` and ``schedulerParams`` as a kaisched configuration. Actions and plugins kaisched
    does not implement are left out and listed in ``snap.warnings``; a value kaisched cannot use at all is a
    :class:`SnapshotError` naming its field."""
    warnings = snap.warnings
    mapping: dict[str, Any] = {"params": dict(snap.params), **snap.config}
    kept = [a for a in snap.actions if a in ACTIONS]
    for name in snap.actions:
        if name not in ACTIONS:
            warnings.append(f"config.actions: action {name!r} is not implemented by kaisched; not run")
    if snap.actions and not kept:
        raise SnapshotError(f"config.actions: none of {', '.join(snap.actions)} is implemented by kaisched "
                            f"(available: {', '.join(ACTIONS)})")
    if kept:
        mapping["actions"] = ", ".join(kept)
    else:
        warnings.append("config.actions: empty; KAI's default actions are run")
    tiers: list[dict[str, Any]] = []
    for tier in snap.tiers:
        plugins: list[dict[str, Any]] = []
        for entry in tier:
            if entry.name not in PLUGINS and entry.name not in ACCEPTED_WITHOUT_EFFECT:
                warnings.append(f"{entry.where}: plugin {entry.name!r} is not implemented by kaisched; not run")
                continue
            if entry.name in PLUGINS:
                try:
                    PLUGINS[entry.name](entry.arguments)
                except ConfigError as exc:
                    raise SnapshotError(f"{entry.where}.arguments (plugin {entry.name}): {exc}") from None
            plugins.append({"name": entry.name, "arguments": dict(entry.arguments)})
        tiers.append({"plugins": plugins})
    if any(t["plugins"] for t in tiers):
        mapping["tiers"] = tiers
    else:
        warnings.append("config.tiers: no plugin kaisched runs; KAI's default plugins are used")
    if "usageDBConfig" in snap.config:
        warnings.append("config.usageDBConfig: a snapshot holds no usage history; without --usage the queues are "
                        "divided by weight only")
    try:
        return SchedulerConfig.from_mapping(mapping)
    except ConfigError as exc:
        where = "schedulerParams" if str(exc).startswith("params.") else "config"
        raise SnapshotError(f"{where}: {exc}") from None


def load_replay(path: str | Path, max_bytes: int = MAX_SNAPSHOT_BYTES) -> Replay:
    """Read the snapshot ZIP at ``path`` and make it ready to run (:class:`SnapshotError` when it cannot be). The
    cyclic garbage collector is paused meanwhile: decoding makes a million small objects, all kept, and its passes
    over them would cost most of the time."""
    with no_cyclic_gc():
        return prepare_replay(read_snapshot(path, max_bytes))


def prepare_replay(snap: KaiSnapshot) -> Replay:
    config = replay_config(snap)
    forget_cached_facts()  # every object is parsed afresh
    objects = to_objects(snap, config.params.scheduler_name)
    return Replay(snap, config, objects)


def run_replay(replay: Replay, now: datetime | None = None, usage: UsageTable | None = None) -> CycleResult:
    """One session of the snapshot's actions over its objects, as KAI's snapshot-tool runs it (``usage``: the
    queues' historical usage for time-based fair share; None: weight-only division)."""
    when = now or replay.default_now()
    with no_cyclic_gc():
        return run_prepared_cycle(replay.objects, replay.config, when, usage=usage, options=replay.options())


# ------------------------------------------------------------------------------------------- writing


def kai_config_document(config: SchedulerConfig) -> dict[str, Any]:
    """``config`` of a snapshot: the configuration in KAI's SchedulerConfiguration shape (resolved, as KAI's
    ``ResolveConfigurationFromFile`` leaves it: the actions run and every tier), with KAI v0.16+'s scenario generator
    plugins (``sg-nodelocalgreedy``, ``sg-multinodegang``) named, so that KAI's snapshot-tool searches for evictions
    as kaisched does."""
    tiers = [[{"name": p.name, "arguments": dict(p.arguments)} if p.arguments else {"name": p.name} for p in tier]
             for tier in config.tiers]
    named = {p.name for p in config.plugins}
    if tiers:  # KAI v0.16+ searches for eviction scenarios only with these plugins; kaisched's search is built in
        tiers[-1] += [{"name": g} for g in SCENARIO_GENERATOR_PLUGINS if g not in named]
    doc: dict[str, Any] = {
        "actions": ", ".join(configured_actions(config)),
        "tiers": [{"plugins": plugins} for plugins in tiers],
    }
    if config.queue_depth_per_action:
        doc["queueDepthPerAction"] = dict(config.queue_depth_per_action)
    if config.usage_db is not None:
        usage = config.usage_db
        usage_doc: dict[str, Any] = {"clientType": usage.client_type}
        if usage.connection_string:
            usage_doc["connectionString"] = usage.connection_string
        if usage.connection_string_env_var:
            usage_doc["connectionStringEnvVar"] = usage.connection_string_env_var
        doc["usageDBConfig"] = usage_doc
    if config.search_budgets is not None:
        doc["scenarioSearchBudgets"] = config.search_budgets.to_mapping()
    return doc


def kai_scheduler_params(params: SchedulerParams, *, schedule_period: float | None = None,
                         partition: tuple[str, str] = (C.NODE_POOL_LABEL, "")) -> dict[str, Any]:
    """``schedulerParams`` of a snapshot: Go field names in Go struct order, ``omitempty`` (false, 0 and "" left
    out), durations as integer nanoseconds, ``partitionParams`` always present (KAI's tool needs it)."""
    from datetime import timedelta

    values: list[tuple[str, Any]] = [
        ("schedulerName", params.scheduler_name),
        ("restrictSchedulingNodes", params.restrict_node_scheduling),
        ("partitionParams", partition_params(*partition)),
        ("maxNumberConsolidationPreemptees", params.max_consolidation_preemptees),
        ("useSchedulingSignatures", params.use_scheduling_signatures),
        ("fullHierarchyFairness", params.full_hierarchy_fairness),
        ("allowConsolidatingReclaim", params.allow_consolidating_reclaim),
        ("globalDefaultStalenessGracePeriod", nanoseconds(params.default_staleness_grace_period)),
        ("schedulePeriod", nanoseconds(timedelta(seconds=schedule_period)) if schedule_period else 0),
        ("detailedFitErrors", params.detailed_fit_errors),
        ("updatePodEvictionCondition", params.update_pod_eviction_condition),
        ("queueLabelKey", C.QUEUE_LABEL),
    ]
    return {k: v for k, v in values if v or k == "partitionParams"}


def kaisched_only_params(params: SchedulerParams) -> dict[str, Any]:
    """kaisched's parameters KAI has no field for, when not at their defaults (by flag name)."""
    out: dict[str, Any] = {}
    if params.max_evicted_gpus_ratio:
        out["max-evicted-gpus-ratio"] = params.max_evicted_gpus_ratio
    if params.victim_memory != SchedulerParams().victim_memory:
        out["victim-memory"] = f"{params.victim_memory.total_seconds():g}s"
    if params.default_priorities_configmap_name:
        out["default-priorities-configmap-name"] = params.default_priorities_configmap_name
    if params.default_priorities_configmap_namespace:
        out["default-priorities-configmap-namespace"] = params.default_priorities_configmap_namespace
    return out


def snapshot_zip(config: SchedulerConfig, raw_objects: Mapping[str, Sequence[Mapping[str, Any]]], now: datetime, *,
                 schedule_period: float | None = None, discovery: Mapping[str, Any] | None = None) -> bytes:
    """kaisched's state as KAI's snapshot ZIP: the configuration and params in KAI's format, the raw objects by
    rawObjects key, ``discovery`` (``serverVersion``, ``resources``: what KAI's tool fakes the server's discovery
    with), and (in kaisched's own key) the capture time and the parameters KAI has no field for."""
    own: dict[str, Any] = {"capturedAt": now.astimezone(UTC).isoformat().replace("+00:00", "Z")}
    extra = kaisched_only_params(config.params)
    if extra:
        own["params"] = extra
    return write_snapshot(kai_config_document(config), kai_scheduler_params(config.params,
                                                                             schedule_period=schedule_period),
                          raw_objects, discovery=discovery, kaisched=own)
