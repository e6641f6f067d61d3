"""Time-based fair share in Kubernetes mode against a real kube-apiserver (1.35) and a real Prometheus (issue 25,
item 2): Debian's ``prometheus`` scrapes ``kaisched run``'s ``/metrics`` every second (KAI's
``kai_queue_allocated_*`` series and kaisched's ``kai_cluster_capacity_*``), and kaisched fetches each queue's usage
from it with PromQL in the background.

* A queue that held the whole cluster yields to one that held nothing: with equal weights, weight-only division would
  give each 4 of the 8 GPUs; with the usage, the idle queue's fair share is all 8 and it reclaims more than half.
* A Prometheus that goes down never stalls a cycle: cycles go on, the last usage is used and, once older than
  ``stalenessPeriod``, said to be stale in a log line and ``kai_usage_db_stale``.
* A Prometheus that is not there at start-up: after ``waitTimeout`` the division is by weight only, said so, and
  pods are scheduled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.kube.apiserver import KubeApiServer, free_port
from tests.kube.contract_helpers import (
    JSON,
    ContractCluster,
    Kube,
    create_node,
    module_apiserver,
    node,
    pod,
    pods_path,
    wait_until,
)
from tests.kube.prometheus import PrometheusServer, require_prometheus

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/usage"
GPUS = 8


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    yield from module_apiserver()


def usage_config(path: Path, prometheus_url: str, *, wait_timeout: str = "20s") -> Path:
    """KAI's usageDBConfig for a short test: a 2-minute sliding window sampled every second, fetched every second,
    stale after 3 s; the capacity from kaisched's own gauges (no kube-state-metrics here)."""
    config = {"usageDBConfig": {
        "clientType": "prometheus", "connectionString": prometheus_url,
        "usageParams": {"windowType": "sliding", "windowSize": "2m", "fetchInterval": "1s", "stalenessPeriod": "3s",
                        "waitTimeout": wait_timeout,
                        "extraParams": {"queryResolution": "1s", "usageQueryTimeout": "2s",
                                        "gpuCapacityMetric": "sum(kai_cluster_capacity_gpus)",
                                        "cpuCapacityMetric": "sum(kai_cluster_capacity_cpu_cores)",
                                        "memoryCapacityMetric": "sum(kai_cluster_capacity_memory_bytes)"}}}}
    path.write_text(yaml.safe_dump(config))
    return path


class Cluster(ContractCluster):
    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)
        self.metrics_port = free_port()

    def setup(self) -> dict[str, str]:
        name = f"n{self.id}"
        create_node(self.kube, node(name, GPUS, labels=self.labels))
        self.nodes.append(name)
        return self.queues(GPUS, {"a": 0, "b": 0})  # both queues over quota: divided by weight (and usage)

    def submit(self, queue_name: str, prefix: str, count: int) -> list[str]:
        names = [f"{prefix}-{i}" for i in range(count)]
        for name in names:
            self.kube.create(pods_path(self.ns), pod(self.ns, name, queue_name, 1))
        return names

    def running_on(self, names: list[str]) -> int:
        pods = self.pods()
        return sum(1 for n in names if n in pods and pods[n]["spec"].get("nodeName")
                   and not pods[n]["metadata"].get("deletionTimestamp"))

    def metrics(self) -> str:
        with httpx2.Client(timeout=5.0) as client:
            return client.get(f"http://127.0.0.1:{self.metrics_port}/metrics").text


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in a /metrics text (None when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)$"
    for line in text.splitlines():
        match = re.match(pattern, line)
        if match:
            return float(match[1])
    return None


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str,
            tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def test_a_queue_that_used_the_cluster_yields_to_one_that_did_not(cluster: Cluster, fake_kubelet: object) -> None:
    binary = require_prometheus()
    q = cluster.setup()
    prometheus = PrometheusServer(binary, [f"127.0.0.1:{cluster.metrics_port}"]).start()
    try:
        config = usage_config(cluster.tmp_path / "config.yaml", prometheus.url)
        proc = cluster.kaisched("--config", str(config), listen=f"127.0.0.1:{cluster.metrics_port}")
        a_pods = cluster.submit(q["a"], "a", GPUS)
        cluster.wait_bound(a_pods)
        # Prometheus has scraped a holding all 8 GPUs; kaisched's usage of a follows
        wait_until(lambda: (prometheus.query(f'kai_queue_allocated_gpus{{queue_name="{q["a"]}"}}') or [({}, 0)])[0][1]
                   == GPUS or None, 30, "Prometheus scrapes queue a's 8 GPUs", describe=cluster.describe)

        def usage_of_a() -> float | None:
            value = sample(cluster.metrics(), "kai_queue_gpu_usage", queue_name=q["a"])
            return value if value is not None and value > 0.9 else None

        assert wait_until(usage_of_a, 30, "queue a's GPU usage from Prometheus > 0.9", describe=cluster.describe)
        text = cluster.metrics()
        assert sample(text, "kai_usage_db_stale") == 0.0
        assert (sample(text, "kai_usage_db_fetches_total", result="success") or 0) >= 1

        # queue b, which used nothing, asks for the whole cluster: by weight alone 4 + 4; with the usage all 8 are
        # b's fair share and b reclaims from a
        b_pods = cluster.submit(q["b"], "b", GPUS)

        def b_share() -> float | None:
            share = sample(cluster.metrics(), "kai_queue_fair_share_gpu", queue_name=q["b"])
            return share if share is not None and share > GPUS / 2 else None

        assert wait_until(b_share, 30, "queue b's fair share above half the cluster", describe=cluster.describe) \
            == GPUS
        wait_until(lambda: cluster.running_on(b_pods) > GPUS // 2 or None, 60, "queue b holds more than 4 GPUs",
                   describe=cluster.describe)
        assert cluster.running_on(a_pods) + cluster.running_on(b_pods) <= GPUS

        # Prometheus goes down: cycles go on with the last usage, said to be stale after stalenessPeriod (3 s)
        prometheus.stop()
        cycles_before = len(proc.cycles())
        stale = proc.wait_for_log(lambda r: "usage data is stale" in str(r.get("event", r.get("raw", ""))), 30,
                                  "the stale-usage log line")
        assert stale is not None
        wait_until(lambda: sample(cluster.metrics(), "kai_usage_db_stale") == 1.0 or None, 15,
                   "kai_usage_db_stale 1", describe=cluster.describe)
        wait_until(lambda: len(proc.cycles()) > cycles_before + 5 or None, 15, "cycles go on without Prometheus",
                   describe=cluster.describe)
        assert (sample(cluster.metrics(), "kai_usage_db_fetches_total", result="error") or 0) >= 1
        assert proc.running
    finally:
        prometheus.close()


def test_without_prometheus_at_start_up_the_division_is_by_weight_only(cluster: Cluster,
                                                                        fake_kubelet: object) -> None:
    q = cluster.setup()
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = usage_config(cluster.tmp_path / "config.yaml", nobody, wait_timeout="2s")
    proc = cluster.kaisched("--config", str(config), listen=f"127.0.0.1:{cluster.metrics_port}")
    said: JSON = proc.wait_for_log(lambda r: "after waitTimeout" in str(r.get("event", r.get("raw", ""))), 30,
                                   "the waitTimeout log line")
    assert "weight only" in str(said)
    a_pods = cluster.submit(q["a"], "a", 3)
    b_pods = cluster.submit(q["b"], "b", 3)
    cluster.wait_bound(a_pods + b_pods)
    text = cluster.metrics()
    assert sample(text, "kai_usage_db_data_age_seconds") == -1.0  # no usage: weight-only division
    assert sample(text, "kai_queue_fair_share_gpu", queue_name=q["a"]) == 3.0
