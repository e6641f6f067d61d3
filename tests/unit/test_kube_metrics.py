"""KAI's metric names, labels and units on a private registry; the timed cycle; structured logs."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from kaisched.cluster.schedule import prepare, resolve_config, run_prepared_cycle
from kaisched.framework.result import CycleResult, Eviction, Placement, PodGroupStatus, QueueStatus
from kaisched.k8s.parse import parse_objects
from kaisched.kube import logs
from kaisched.kube.metrics import LATENCY_BUCKETS_MS, CycleTimings, SchedulerMetrics, timed_cycle
from kaisched.kube.operations import Bind, ObjectRef
from kaisched.kube.writer import ClusterWriter
from kaisched.model.usage import UsageTable
from tests.unit.test_kube_writer import Cache, RecordingApi, pod, pod_group

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


def samples(metrics: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for line in metrics.render().decode().splitlines():
        if line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, labels = name_labels.partition("{")
        pairs = tuple(tuple(p.split("=", 1)) for p in labels.rstrip("}").split(",")) if labels else ()
        out[(name, tuple((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def queue_status(name: str = "team-a") -> QueueStatus:
    return QueueStatus(name, None, deserved={"gpu": 4.0, "cpu": -1.0, "memory": 8e9},
                       fair_share={"gpu": 2.5, "cpu": 1500.0, "memory": 3e9},
                       allocated={"gpu": 1.5, "cpu": 2000.0, "memory": 1e9},
                       request={"gpu": 3.0, "cpu": 2000.0, "memory": 1e9}, limit={}, priority=100)


def test_cycle_metrics_have_kai_names_labels_and_units():
    m = SchedulerMetrics()
    cache = Cache(pod("ns/v", annotations={"pod-group-name": "victim"}),
                  pod_group("ns/victim", "uid-victim", labels={"kai.scheduler/node-pool": "pool-a"}))
    result = CycleResult(
        evictions=[Eviction("ns/v", "reclaim", "ns/hungry", "m")],
        pod_groups=[PodGroupStatus("ns/hungry", "q", "Allocated", None, None),
                    PodGroupStatus("ns/other", "q", "Pipelined", None, None),
                    PodGroupStatus("ns/waiting", "q", "Pending", "x", "y")],
        queues=[queue_status()])
    timings = CycleTimings(12.5, open_session_ms=3.0, close_session_ms=1.0, actions_ms={"allocate": 4.0},
                           plugins_open_ms={"proportion": 2.0}, plugins_close_ms={"proportion": 0.5})
    m.record_cycle(result, timings, cache.lookup, NOW)
    s = samples(m)
    assert s[("kai_e2e_scheduling_latency_milliseconds", ())] == 12.5
    assert s[("kai_open_session_latency_milliseconds", ())] == 3.0
    assert s[("kai_close_session_latency_milliseconds", ())] == 1.0
    assert s[("kai_action_scheduling_latency_milliseconds", (("action", "allocate"),))] == 4.0
    assert s[("kai_plugin_scheduling_latency_milliseconds", (("plugin", "proportion"),
                                                             ("OnSession", "OnSessionOpen")))] == 2.0
    assert s[("kai_plugin_scheduling_latency_milliseconds", (("plugin", "proportion"),
                                                             ("OnSession", "OnSessionClose")))] == 0.5
    assert s[("kai_podgroups_scheduled_by_action", (("action", "reclaim"),))] == 1.0
    assert s[("kai_podgroups_scheduled_by_action", (("action", "allocate"),))] == 1.0
    assert s[("kai_pod_group_evicted_pods_total", (("podgroup", "victim"), ("namespace", "ns"), ("uid", "uid-victim"),
                                                   ("nodepool", "pool-a"), ("action", "reclaim")))] == 1.0
    q = (("queue_name", "team-a"),)
    assert s[("kai_queue_fair_share_gpu", q)] == 2.5
    assert s[("kai_queue_fair_share_cpu_cores", q)] == 1.5
    assert s[("kai_queue_fair_share_memory_gb", q)] == 3.0
    assert s[("kai_queue_info", q)] == 1.0
    assert s[("kai_queue_deserved_gpus", q)] == 4.0
    assert s[("kai_queue_quota_cpu_cores", q)] == -1.0  # unlimited stays -1
    assert s[("kai_queue_quota_memory_bytes", q)] == 8e9
    assert s[("kai_queue_allocated_gpus", q)] == 1.5
    assert s[("kai_queue_allocated_cpu_cores", q)] == 2.0
    assert s[("kai_queue_allocated_memory_bytes", q)] == 1e9


def test_time_based_fair_share_metrics_capacity_usage_and_staleness():
    m = SchedulerMetrics()
    m.record_cycle(CycleResult(queues=[queue_status()], capacity={"gpu": 16.0, "cpu": 64000.0, "memory": 5e11}),
                   CycleTimings(1.0))
    m.record_usage(None, NOW)
    m.usage_fetched(False, 0.25)
    s = samples(m)
    assert s[("kai_cluster_capacity_gpus", ())] == 16.0
    assert s[("kai_cluster_capacity_cpu_cores", ())] == 64.0  # millicores as cores, as queue_allocated_cpu_cores
    assert s[("kai_cluster_capacity_memory_bytes", ())] == 5e11
    assert s[("kai_usage_db_data_age_seconds", ())] == -1.0  # no usage: weight-only division
    assert s[("kai_usage_db_fetches_total", (("result", "error"),))] == 1.0
    assert s[("kai_usage_query_latency_milliseconds_bucket", (("le", "160.0"),))] == 0.0
    assert s[("kai_usage_query_latency_milliseconds_bucket", (("le", "320.0"),))] == 1.0
    fetched = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    m.record_usage(UsageTable({"team-a": (0.24, 0.1, 0.0)}, "prometheus x", fetched, True), NOW)
    s = samples(m)
    assert s[("kai_usage_db_data_age_seconds", ())] == 300.0 and s[("kai_usage_db_stale", ())] == 1.0
    assert s[("kai_queue_gpu_usage", (("queue_name", "team-a"),))] == 0.24
    assert s[("kai_queue_cpu_usage", (("queue_name", "team-a"),))] == 0.1
    assert s[("kai_queue_memory_usage", (("queue_name", "team-a"),))] == 0.0
    m.record_usage(UsageTable({}, "prometheus x", NOW, False), NOW)  # a queue gone from the table: its series too
    assert not any(name.endswith("_usage") for name, _ in samples(m))


def test_exposition_keeps_go_counter_names_and_is_valid_text_format():
    m = SchedulerMetrics()
    m.record_cycle(CycleResult(pod_groups=[PodGroupStatus("ns/a", "q", "Allocated", None, None)]),
                   CycleTimings(1.0))
    text = m.render().decode()
    assert "# TYPE kai_podgroups_scheduled_by_action counter\n" in text
    assert 'kai_podgroups_scheduled_by_action{action="allocate"} 1.0\n' in text
    assert "# TYPE kai_pod_group_evicted_pods_total counter\n" in text
    assert "_created" not in text and "kai_podgroups_scheduled_by_action_total" not in text
    assert "# TYPE kai_task_bind_latency_milliseconds histogram\n" in text
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"kai_e2e_scheduling_latency_milliseconds", "kai_task_scheduling_latency_milliseconds"} <= families


def test_own_registry_and_configurable_prefix():
    before = {f.name for f in REGISTRY.collect()}
    m = SchedulerMetrics(namespace="custom")
    m.record_cycle(CycleResult(), CycleTimings(2.0))
    assert b"custom_e2e_scheduling_latency_milliseconds 2.0" in m.render()
    assert {f.name for f in REGISTRY.collect()} == before
    SchedulerMetrics()  # a second instance does not clash with the first
    SchedulerMetrics()


def test_task_latencies_use_kai_buckets():
    m = SchedulerMetrics()
    assert LATENCY_BUCKETS_MS == (5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0, 2560.0)
    cache = Cache(pod("ns/p", created="2026-01-01T00:04:59.97Z"))
    m.record_cycle(CycleResult(binds=[Placement("ns/p", "n")]), CycleTimings(1.0), cache.lookup, NOW)
    s = samples(m)
    assert s[("kai_task_scheduling_latency_milliseconds_bucket", (("le", "20.0"),))] == 0.0
    assert s[("kai_task_scheduling_latency_milliseconds_bucket", (("le", "40.0"),))] == 1.0
    assert s[("kai_task_scheduling_latency_milliseconds_count", ())] == 1.0


def test_writer_observes_bind_latency():
    m = SchedulerMetrics()
    clock = iter([10.0, 10.0, 10.03, 10.03, 10.03, 10.03])
    writer = ClusterWriter(RecordingApi(), workers=1, metrics=m, clock=lambda: next(clock, 10.03))
    try:
        writer.submit([Bind(ObjectRef.pod("ns/p"), "n")])
        assert writer.drain(5)
    finally:
        writer.close()
    s = samples(m)
    assert s[("kai_task_bind_latency_milliseconds_count", ())] == 1.0
    assert s[("kai_task_bind_latency_milliseconds_bucket", (("le", "20.0"),))] == 0.0
    assert s[("kai_task_bind_latency_milliseconds_bucket", (("le", "40.0"),))] == 1.0


def test_deleted_queue_series_are_dropped_and_label_children_are_reused():
    m = SchedulerMetrics()
    m.record_cycle(CycleResult(queues=[queue_status("a"), queue_status("b")]), CycleTimings(1.0))
    child = m._queue_children["a"]
    m.record_cycle(CycleResult(queues=[queue_status("a")]), CycleTimings(1.0))
    assert m._queue_children["a"] is child
    s = samples(m)
    assert ("kai_queue_info", (("queue_name", "a"),)) in s
    assert ("kai_queue_info", (("queue_name", "b"),)) not in s


def _cluster() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "110"}}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}}},
        *[{"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "labels": {"kai.scheduler/queue": "q"}},
           "spec": {"schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Pending"}} for i in range(3)],
    ]


def test_timed_cycle_gives_the_same_result_as_an_untimed_cycle_and_times_each_part():
    cfg = resolve_config(None)
    parsed = prepare(parse_objects(_cluster()), cfg, NOW)
    result, timings = timed_cycle(parsed, cfg, NOW)
    assert result.to_dict() == run_prepared_cycle(parsed, cfg, NOW).to_dict()
    assert len(result.binds) == 3
    assert tuple(timings.actions_ms) == tuple(cfg.actions)
    assert "proportion" in timings.plugins_open_ms and "proportion" in timings.plugins_close_ms
    assert timings.e2e_ms >= (timings.open_session_ms or 0) + sum(timings.actions_ms.values())


# ----------------------------------------------------------------------------------------------- logs
@pytest.fixture
def log_stream():
    stream = io.StringIO()
    logs.configure("info", json=True, stream=stream)
    yield stream
    structlog.reset_defaults()


def test_json_log_lines_carry_timestamp_level_logger_and_fields(log_stream):
    log = logs.get_logger("kaisched.kube.run")
    result = CycleResult(pod_groups=[PodGroupStatus("ns/a", "q", "Pending", "r", "m")])
    logs.log_cycle(log, result, 0.0125, cycle=7)
    log.debug("hidden")
    (line,) = log_stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["event"] == "cycle" and record["level"] == "info" and record["logger"] == "kaisched.kube.run"
    assert record["timestamp"].endswith("Z") and datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
    assert (record["binds"], record["evictions"], record["pending"], record["duration_ms"], record["cycle"]) == (
        0, 0, 1, 12.5, 7)


def test_console_logs_and_bad_level():
    stream = io.StringIO()
    try:
        logs.configure("debug", json=False, stream=stream)
        logs.get_logger("x").debug("hello", a=1)
        assert "hello" in stream.getvalue() and "a=1" in stream.getvalue()
    finally:
        structlog.reset_defaults()
    with pytest.raises(ValueError, match="log level"):
        logs.configure("loud")


def test_module_level_loggers_follow_a_later_configure():
    from kaisched.kube import writer as writer_module
    stream = io.StringIO()
    try:
        logs.configure("info", json=True, stream=stream)
        writer_module.log.warning("probe", x=1)
    finally:
        structlog.reset_defaults()
    record = json.loads(stream.getvalue())
    assert (record["event"], record["logger"], record["level"], record["x"]) == ("probe", "kaisched.kube.writer",
                                                                              "warning", 1)
