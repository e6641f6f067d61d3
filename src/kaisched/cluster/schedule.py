"""One scheduling cycle over a set of Kubernetes objects: the engine behind ``kaisched.schedule``
and ``kaisched schedule``."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kaisched.actions.registry import build_actions, validate_actions
from kaisched.cluster.incremental import IncrementalState
from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.workloads import PodLimit, expand_workloads
from kaisched.framework.config import SchedulerConfig
from kaisched.framework.result import CycleResult
from kaisched.framework.session import Session
from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects
from kaisched.model.snapshot import SnapshotOptions, build_snapshot, forget_cached_facts
from kaisched.model.usage import UsageTable
from kaisched.plugins.registry import build_plugins, validate_plugins
from kaisched.podgrouper import group_pods, kind_defaults


def compiled_core() -> bool:
    """This module, and with it the scheduling core, was imported compiled with mypyc (a wheel's core, or
    ``PYTHONPATH=build/compiled``: docs/performance.md), not from its sources."""
    return not __file__.endswith(".py")


def resolve_config(config: SchedulerConfig | Mapping[str, Any] | None) -> SchedulerConfig:
    """Accept a SchedulerConfig, a KAI-format mapping or None (KAI's defaults); validate names."""
    cfg = config if isinstance(config, SchedulerConfig) else SchedulerConfig.from_mapping(config)
    validate_actions(cfg)
    validate_plugins(cfg)
    return cfg


#: callers keeping long-lived objects frozen (freeze_long_lived): no_cyclic_gc then leaves the frozen set alone
_frozen_holders = 0


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic collector's reach (``gc.collect()``, ``gc.freeze()``):
    later full collections scan only what is created afterwards. For callers that keep many objects for a
    long time (the simulator's scenario, Kubernetes mode's initial lists); :func:`no_cyclic_gc` is told, so it
    does not unfreeze them. Undo with :func:`unfreeze_long_lived`."""
    global _frozen_holders
    gc.collect()
    gc.freeze()
    _frozen_holders += 1


def unfreeze_long_lived() -> None:
    """Give the objects frozen by :func:`freeze_long_lived` back to the collector (``gc.unfreeze()``)."""
    global _frozen_holders
    _frozen_holders = max(_frozen_holders - 1, 0)
    gc.unfreeze()


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """:func:`freeze_long_lived` for the block (the simulator's run, Kubernetes mode's scheduling loop)."""
    freeze_long_lived()
    try:
        yield
    finally:
        unfreeze_long_lived()


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one cycle.

    A cycle allocates hundreds of thousands of small objects that are freed by reference counting; the
    collector's passes over them in the middle of a cycle (and the full collections they trigger over a
    growing heap) cost 15-40 % of a large cycle and free nothing. Afterwards the collector runs again as
    usual, and what survived the cycle (cyclic garbage included) is collected by the next full collection.

    The survivors (a one-shot cycle's parsed objects and result: about a million objects at 5,000 nodes) are
    moved to the oldest generation at once, unscanned (``gc.freeze()`` then ``gc.unfreeze()``), instead of
    being left in the youngest, where the first allocation after the cycle would scan them all (0.2 s there)
    only to find them alive and move them one generation up. Not done while a caller keeps objects frozen
    (:func:`freeze_long_lived`): unfreezing would release those too. (Objects frozen by other means are
    released into the oldest generation: still never freed early, only scanned by full collections again.)
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if not _frozen_holders:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def run_cycle(parsed: ParsedObjects, config: SchedulerConfig, now: datetime) -> CycleResult:
    with no_cyclic_gc():
        return _run_cycle(parsed, config, now)


def prepare(parsed: ParsedObjects, config: SchedulerConfig, now: datetime, *,
            pod_limit: PodLimit | None = None) -> ParsedObjects:
    """The embedded cluster's controllers: workloads create their pods (at most ``pod_limit``: 1,000,000 by
    default; a workload over it is an input error), the pod-grouper groups every pod."""
    expanded = expand_workloads(parsed, now, limit=pod_limit)
    params = config.params
    errors = list(expanded.errors)
    defaults = kind_defaults(expanded, params.default_priorities_configmap_name,
                             params.default_priorities_configmap_namespace, errors)
    priority_classes = frozenset({*C.BUILTIN_PRIORITY_CLASSES, *(pc.meta.name for pc in expanded.priority_classes)})
    return group_pods(replace(expanded, errors=errors), scheduler_name=params.scheduler_name,
                      priority_classes=priority_classes, defaults=defaults, now=now)


def _run_cycle(parsed: ParsedObjects, config: SchedulerConfig, now: datetime) -> CycleResult:
    return run_prepared_cycle(prepare(parsed, config, now), config, now)


def run_prepared_cycle(parsed: ParsedObjects, config: SchedulerConfig, now: datetime,
                       memo: CycleMemo | None = None, usage: UsageTable | None = None,
                       options: SnapshotOptions | None = None, state: IncrementalState | None = None) -> CycleResult:
    """One cycle on objects whose workloads are already expanded and whose pods are grouped (the
    simulator prepares each arrival once, then runs cycle after cycle). With a ``memo`` (kept by the caller
    from cycle to cycle), a cycle over exactly the objects (and usage) of the previous one returns its result
    without running (:mod:`kaisched.cluster.memo`). ``usage``: each queue's historical usage (time-based fair
    share, made by a :mod:`kaisched.usage` source); None: weight-only division. ``options``: the snapshot's
    (default: the configuration's fairness and scheduler name, claims made from templates as the embedded
    cluster's resourceclaim controller would). ``state``: the snapshot model kept from the previous cycle
    (:mod:`kaisched.cluster.incremental`), updated with what changed instead of built afresh."""
    if memo is not None:
        known = memo.lookup(parsed, config, now, usage)
        if known is not None:
            return known
    opts = options or SnapshotOptions(full_hierarchy_fairness=config.params.full_hierarchy_fairness,
                                      scheduler_name=config.params.scheduler_name)
    snapshot = state.snapshot(parsed, now, opts) if state is not None else build_snapshot(parsed, now, opts)
    snapshot.usage = usage
    ssn = Session(snapshot, config, build_plugins(config.plugins))
    ssn.open()
    for action in build_actions(config):
        action.execute(ssn)
    result = ssn.close()
    if memo is not None:
        memo.record(parsed, config, now, result, ssn.valid_until, ssn.stamped, usage)
    ssn.discard()
    return result


def schedule(
    objects: Iterable[Mapping[str, Any]],
    config: SchedulerConfig | Mapping[str, Any] | None = None,
    now: datetime | None = None,
    usage: UsageTable | None = None,
) -> CycleResult:
    """Run exactly one scheduling cycle of the configured actions on the given objects.

    ``objects`` are Kubernetes objects as dicts (Node, Pod, Queue, PodGroup, PriorityClass, or
    ``kind: List``); they are never mutated. Invalid objects are reported in ``result.errors`` and the
    rest of the cluster is still scheduled. An unusable ``config`` raises :class:`ConfigError`. ``usage``: each
    queue's historical usage (time-based fair share, :class:`~kaisched.model.usage.UsageTable`); None: weight only.
    """
    cfg = resolve_config(config)
    when = now or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    forget_cached_facts()  # every object is parsed afresh: no fact kept from an earlier cycle can serve
    with no_cyclic_gc():
        parsed = parse_objects(objects)
        return run_prepared_cycle(prepare(parsed, cfg, when), cfg, when, usage=usage)
