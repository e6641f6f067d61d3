"""The victim memory (model/victim_memory.py, docs/evictions.md "A pod is evicted once for a preemptor"): the pods
evicted for a job are kept on its PodGroup, and a later search for the job leaves alone a victim job with such a pod
running again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kaisched.cluster.memo import CycleMemo
from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.cluster.store import EmbeddedCluster
from kaisched.framework.config import ConfigError, SchedulerConfig
from kaisched.framework.result import CycleResult, PodGroupStatus
from kaisched.k8s.parse import parse_objects
from kaisched.kube.operations import _Cycle
from kaisched.model.victim_memory import (
    MAX_ENTRIES,
    VICTIMS_ANNOTATION,
    VictimMemoryError,
    format_victims,
    parse_victims,
)
from tests.property.test_convergence import ELASTIC_RECLAIM_TAKES_A_REBOUND_VICTIM as CLUSTER
from tests.unit.builders import NOW

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------------------------------- the annotation
def test_the_annotation_is_a_sorted_json_object_of_pod_keys_and_times() -> None:
    value = format_victims({"ns/b": T0 + timedelta(seconds=1.7), "ns/a": T0})
    assert value == '{"ns/a":"2026-01-01T00:00:00Z","ns/b":"2026-01-01T00:00:01Z"}'
    assert parse_victims(value) == {"ns/a": T0, "ns/b": T0 + timedelta(seconds=1)}
    assert format_victims({}) is None


def test_the_annotation_keeps_the_newest_entries() -> None:
    victims = {f"ns/p{i:04d}": T0 + timedelta(seconds=i) for i in range(MAX_ENTRIES + 10)}
    kept = parse_victims(format_victims(victims) or "")
    assert len(kept) == MAX_ENTRIES
    assert min(kept) == "ns/p0010"


@pytest.mark.parametrize(("raw", "says"), [
    ("{", "not JSON"),
    ('["ns/a"]', "expected a JSON object"),
    ('{"a":"2026-01-01T00:00:00Z"}', "'a' is not a pod key"),
    ('{"ns/a":5}', "ns/a: expected an RFC3339 time, got 5"),
    ('{"ns/a":"yesterday"}', "ns/a: expected an RFC3339 time, got 'yesterday'"),
])
def test_a_malformed_annotation_says_what_is_wrong(raw: str, says: str) -> None:
    with pytest.raises(VictimMemoryError, match=says):
        parse_victims(raw)


def test_the_memory_is_a_duration_of_zero_or_more() -> None:
    assert SchedulerConfig.from_mapping({"params": {"victim-memory": "0s"}}).params.victim_memory == timedelta(0)
    assert SchedulerConfig.from_mapping({}).params.victim_memory == timedelta(minutes=10)
    with pytest.raises(ConfigError, match=r"params.victim-memory: expected a duration of 0 or more"):
        SchedulerConfig.from_mapping({"params": {"victim-memory": "-5m"}})
    with pytest.raises(ConfigError, match=r"params.victim-memory"):
        SchedulerConfig.from_mapping({"params": {"victim-memory": "soon"}})


# --------------------------------------------------------------------------------- cycles on the cluster
def _cluster(params: dict[str, Any] | None = None) -> tuple[EmbeddedCluster, SchedulerConfig]:
    raw: dict[str, Any] = CLUSTER.config()
    if params:
        raw["params"] = params
    cfg = resolve_config(raw)
    return EmbeddedCluster(prepare(parse_objects(CLUSTER.objects()), cfg, NOW)), cfg


def _cycle(store: EmbeddedCluster, cfg: SchedulerConfig, now: datetime) -> CycleResult:
    result = run_prepared_cycle(store.parsed(), cfg, now)
    store.apply(result, now)
    return result


def _remembered(store: EmbeddedCluster, job: str) -> dict[str, datetime]:
    raw = store.pod_groups[job].meta.annotations.get(VICTIMS_ANNOTATION)
    return parse_victims(raw) if raw else {}


def test_the_pods_evicted_for_a_job_are_kept_on_its_podgroup_and_spare_their_jobs() -> None:
    store, cfg = _cluster()
    first = _cycle(store, cfg, NOW)
    evicted = {e.pod for e in first.evictions if e.preemptor == "ns1/g3"}
    assert evicted == {"ns0/g0-0", "ns0/g0-1", "ns0/g2-1"}
    at = NOW.replace(microsecond=0)
    assert _remembered(store, "ns1/g3") == dict.fromkeys(evicted, at)
    _cycle(store, cfg, NOW + timedelta(seconds=1))  # allocate binds g2-1 again, on n0
    assert store.pods["ns0/g2-1"].node_name == "n0"
    later = _cycle(store, cfg, NOW + timedelta(seconds=2))
    assert later.evictions == []  # g2 has g2-1 running again: no victim of g3's
    assert _remembered(store, "ns1/g3") == dict.fromkeys(evicted, at)  # (kept: g3-3 still waits)
    # once the memory has passed, g3 reclaims again (by then g1's reclaim min-runtime has passed too), and only
    # those new victims are remembered
    expired = _cycle(store, cfg, NOW + timedelta(minutes=10, seconds=1))
    again = {e.pod for e in expired.evictions if e.preemptor == "ns1/g3"}
    assert again
    assert set(_remembered(store, "ns1/g3")) == again


def test_a_session_that_read_the_memory_holds_only_until_an_entry_expires() -> None:
    store, cfg = _cluster({"victim-memory": "20s"})
    _cycle(store, cfg, NOW)
    _cycle(store, cfg, NOW + timedelta(seconds=1))
    memo = CycleMemo()
    quiet = run_prepared_cycle(store.parsed(), cfg, NOW + timedelta(seconds=2), memo=memo)
    assert quiet.evictions == []
    assert run_prepared_cycle(store.parsed(), cfg, NOW + timedelta(seconds=19), memo=memo).evictions == []
    assert memo.hits == 1
    # the same objects once the memory ended (before any other time rule changes): not answered from the memo
    later = NOW + timedelta(seconds=21)
    after = run_prepared_cycle(store.parsed(), cfg, later, memo=memo)
    assert memo.hits == 1
    assert ("ns0/g2-1", "ns1/g3") in {(e.pod, e.preemptor) for e in after.evictions}
    assert after.evictions == run_prepared_cycle(store.parsed(), cfg, later).evictions


def test_without_the_memory_the_annotation_is_neither_written_nor_read() -> None:
    store, cfg = _cluster({"victim-memory": "0s"})
    _cycle(store, cfg, NOW)
    assert VICTIMS_ANNOTATION not in store.pod_groups["ns1/g3"].meta.annotations
    _cycle(store, cfg, NOW + timedelta(seconds=1))
    again = _cycle(store, cfg, NOW + timedelta(seconds=2))
    assert ("ns0/g2-1", "ns1/g3") in {(e.pod, e.preemptor) for e in again.evictions}


def test_the_annotation_is_removed_once_the_job_has_nothing_left_to_place() -> None:
    store, cfg = _cluster()
    _cycle(store, cfg, NOW)
    # g3's pending pod goes away (scaled down): nothing of g3 waits any more
    del store.pods["ns1/g3-3"]
    for i in range(1, 4):
        _cycle(store, cfg, NOW + timedelta(seconds=i))
    assert VICTIMS_ANNOTATION not in store.pod_groups["ns1/g3"].meta.annotations


def test_a_malformed_annotation_is_an_input_error_and_the_job_is_scheduled_without_it() -> None:
    store, cfg = _cluster()
    pg = store.pod_groups["ns1/g3"]
    store.pod_groups["ns1/g3"] = replace(pg, meta=replace(pg.meta, annotations={
        **pg.meta.annotations, VICTIMS_ANNOTATION: "not json"}))
    result = _cycle(store, cfg, NOW)
    errors = [e for e in result.errors if e.field == f"metadata.annotations.{VICTIMS_ANNOTATION}"]
    assert len(errors) == 1 and errors[0].object == "PodGroup ns1/g3" and "not JSON" in errors[0].message
    assert {e.pod for e in result.evictions if e.preemptor == "ns1/g3"} == {"ns0/g0-0", "ns0/g0-1", "ns0/g2-1"}


def test_kubernetes_mode_patches_the_annotation_only_when_it_changes() -> None:
    value = format_victims({"ns0/g2-1": T0})
    status = PodGroupStatus("ns1/g3", "q1", "Pending", None, None, victims=value)
    group = {"metadata": {"annotations": {}}}
    assert _Cycle.annotations_patch(status, group) == {VICTIMS_ANNOTATION: value}
    group = {"metadata": {"annotations": {VICTIMS_ANNOTATION: value}}}
    assert _Cycle.annotations_patch(status, group) == {}
    cleared = PodGroupStatus("ns1/g3", "q1", "Running", None, None)
    assert _Cycle.annotations_patch(cleared, group) == {VICTIMS_ANNOTATION: None}


def test_a_snapshot_keeps_a_memory_other_than_the_default_in_kaischeds_own_params() -> None:
    from kaisched.cluster.replay import kaisched_only_params
    from kaisched.framework.config import SchedulerParams

    assert "victim-memory" not in kaisched_only_params(SchedulerParams())
    off = SchedulerParams.from_mapping({"victim-memory": "0s"})
    assert kaisched_only_params(off)["victim-memory"] == "0s"
    assert SchedulerParams.from_mapping(kaisched_only_params(off)).victim_memory == timedelta(0)
