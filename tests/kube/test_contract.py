"""Contract tests: ``kaisched run`` as a subprocess against a real kube-apiserver (1.35) + etcd.

The module runs its own API server (not the session's: the scheduler watches every namespace and every node,
so objects left by other test files would change its decisions), installs the CRDs from ``deploy/crds/`` once,
and each test builds its own nodes (GPU capacity in ``status.allocatable`` at create), queues (a parent and
leaves) and namespace, and removes them afterwards. The fake kubelet marks bound pods Running and deletes
evicted ones. Everything is asserted through the API (pods, PodGroups, Queues, Events, the Lease) and the
scheduler's JSON log. Each scheduler's log is in the test's tmp_path; its tail is printed at teardown
(shown by pytest when the test fails).

Covered: a gang (minMember 4) that waits for room, then binds whole; fractional pods and their GPU group;
reclaim between two queues (evictions through policy/v1, reaped by the kubelet); the pod-grouper's
``pg-<pod>-<uid>``; /metrics, /healthz, /readyz; the scheduler SIGKILLed mid-run and restarted; the API
server restarted under it; leader election between two processes (short Lease timings); every log line is
JSON; SIGTERM before the caches sync stops the process at once.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import kaisched
from kaisched.model.victim_memory import VICTIMS_ANNOTATION, parse_victims
from tests.kube.apiserver import KubeApiServer, free_port
from tests.kube.contract_helpers import (
    GPU,
    JSON,
    QUEUES,
    WAIT_S,
    ContractCluster,
    KaischedProcess,
    Kube,
    create_node,
    gpus_of,
    module_apiserver,
    node,
    node_of,
    pod,
    pod_group,
    pod_groups_path,
    pods_path,
    wait_until,
)
from tests.kube.fake_kubelet import FakeKubelet

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/contract"


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """This module's own API server, with KAI's CRDs installed (overrides the session fixture here)."""
    yield from module_apiserver()


class Cluster(ContractCluster):
    """One test's objects on the module's server; :meth:`cleanup` removes them and stops its schedulers."""

    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)

    # ---- objects
    def add_nodes(self, count: int, gpus: int = 8) -> list[str]:
        names = [f"n{self.id}-{len(self.nodes) + i}" for i in range(count)]
        for name in names:
            create_node(self.kube, node(name, gpus, labels=self.labels))
        self.nodes.extend(names)
        return names

    def pod(self, name: str, queue_name: str, gpus: int = 1, **kwargs: Any) -> JSON:
        return self.kube.create(pods_path(self.ns), pod(self.ns, name, queue_name, gpus, **kwargs))

    def gang(self, name: str, queue_name: str, size: int, gpus: int) -> list[str]:
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, size))
        pods = [f"{name}-{i}" for i in range(size)]
        for p in pods:
            self.pod(p, queue_name, gpus, group=name)
        return pods

    # ---- reads
    def wait_scheduled(self, pods: set[str] | list[str]) -> collections.Counter[str]:
        """The ``Scheduled`` counts once every pod in ``pods`` has one (events are written after the bind)."""
        def seen() -> collections.Counter[str] | None:
            counts = self.scheduled_counts()
            return counts if set(pods) <= set(counts) else None
        return wait_until(seen, WAIT_S, f"Scheduled events for {sorted(pods)}", describe=self.describe)

    def scheduled_counts(self) -> collections.Counter[str]:
        """Per pod, how many times kai-scheduler reported it ``Scheduled`` (events and their counts)."""
        counts: collections.Counter[str] = collections.Counter()
        for event in self.events("Scheduled"):
            if event["involvedObject"]["kind"] == "Pod" and event["source"].get("component") == "kai-scheduler":
                counts[event["involvedObject"]["name"]] += int(event.get("count") or 1)
        return counts


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str,
            tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def kubelet(kube_apiserver: KubeApiServer, cluster: Cluster) -> Iterator[FakeKubelet]:
    with FakeKubelet.for_server(kube_apiserver, namespace=cluster.ns) as fake:
        fake.wait_synced()
        yield fake


def gpus_per_node(pods: dict[str, JSON]) -> dict[str, int]:
    """Whole GPUs asked by the bound pods that are not terminating, per node."""
    used: collections.Counter[str] = collections.Counter()
    for p in pods.values():
        if node_of(p) and not p["metadata"].get("deletionTimestamp"):
            used[node_of(p)] += gpus_of(p)
    return dict(used)


# ------------------------------------------------------------------------------------------------ tests


def test_a_gang_waits_for_room_then_binds_all_four_with_events_and_podgroup_status(
    cluster: Cluster, kubelet: FakeKubelet
) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(16, {"a": 16, "b": 0})
    members = cluster.gang("gang", q["a"], 4, gpus=4)  # 16 GPUs: does not fit on one 8-GPU node
    sched = cluster.kaisched()

    def unschedulable() -> JSON | None:
        group = cluster.kube.pod_group(cluster.ns, "gang") or {}
        conditions = (group.get("status") or {}).get("schedulingConditions") or []
        return conditions[-1] if conditions else None

    condition = wait_until(unschedulable, WAIT_S, "PodGroup gang: a scheduling condition", describe=cluster.describe)
    assert condition["type"] == "UnschedulableOnNodePool"
    assert condition["status"] == "True" and condition["nodePool"] == "default"
    assert "4 are required for gang scheduling" in condition["message"]
    assert not cluster.bound(members[:1]), "no member of a gang that does not fit may be bound"
    assert all(not node_of(p) for p in cluster.pods().values())

    second = cluster.add_nodes(1)  # now 2 x 8 GPUs: the whole gang fits
    placed = cluster.wait_bound(members)
    assert set(placed.values()) == set(cluster.nodes), placed
    assert collections.Counter(placed.values()) == {cluster.nodes[0]: 2, second[0]: 2}
    for name in members:
        kubelet.wait_running(cluster.ns, name)

    counts = cluster.wait_scheduled(members)
    assert counts == dict.fromkeys(members, 1), counts
    scheduled = [e for e in cluster.events("Scheduled") if e["involvedObject"]["name"] in members]
    for event in scheduled:
        assert event["type"] == "Normal"
        assert event["source"]["component"] == "kai-scheduler"
        assert event["message"].startswith(f"Successfully assigned pod {cluster.ns}/{event['involvedObject']['name']}")
    # the PodGroup: its scheduling condition cleared once the gang runs, the start time annotated
    def cleared() -> JSON | None:
        group = cluster.kube.pod_group(cluster.ns, "gang")
        return group if group and not (group.get("status") or {}).get("schedulingConditions") else None

    group = wait_until(cleared, WAIT_S, "PodGroup gang: conditions cleared", describe=cluster.describe)
    assert group["metadata"].get("annotations", {}).get("kai.scheduler/last-start-timestamp")
    # the queue's status: 16 GPUs allocated to queue a
    def queue_status() -> JSON | None:
        status: JSON = (cluster.kube.queue(q["a"]) or {}).get("status") or {}
        return status if status.get("allocated", {}).get(GPU) == "16" else None

    status = wait_until(queue_status, WAIT_S, f"Queue {q['a']}: status.allocated 16 GPUs", describe=cluster.describe)
    assert status["requested"][GPU] == "16"
    # ... which `kubectl get queue` shows (the CRD's printer columns on the status kaisched wrote)
    _, [row] = cluster.kube.table(f"{QUEUES}/{q['a']}")
    shown = (row["Parent"], row["GPU Quota"], row["GPU Limit"], row["GPU Allocated"])
    assert shown == (f"p-{cluster.id}", 16, -1, "16"), row
    assert not cluster.events("FailedBinding")
    assert sched.running


def test_a_fractional_pod_is_bound_with_its_gpu_group_label(cluster: Cluster, kubelet: FakeKubelet) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 8, "b": 0})
    for name in ("half-0", "half-1"):
        cluster.kube.create(pod_groups_path(cluster.ns), pod_group(cluster.ns, name, q["a"], 1))
        cluster.pod(name, q["a"], 0, group=name, fraction="0.5")
    cluster.kaisched()
    cluster.wait_bound(["half-0", "half-1"])
    pods = cluster.pods()
    groups = []
    for name in ("half-0", "half-1"):
        meta = pods[name]["metadata"]
        assert meta["labels"].get("runai-gpu-group"), meta
        assert meta["annotations"].get("received-resource-type") == "Fraction", meta
        groups.append(meta["labels"]["runai-gpu-group"])
        kubelet.wait_running(cluster.ns, name)
    assert groups[0] == groups[1], "two halves of a GPU share one GPU group (bin-packed on one device)"


def test_a_queue_within_its_quota_reclaims_from_one_over_quota(cluster: Cluster, kubelet: FakeKubelet) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 4, "b": 4})
    b_pods = []
    for i in range(8):  # queue b takes all 8 GPUs while a is idle: 4 over its quota
        cluster.kube.create(pod_groups_path(cluster.ns), pod_group(cluster.ns, f"b-{i}", q["b"], 1))
        cluster.pod(f"b-{i}", q["b"], 1, group=f"b-{i}")
        b_pods.append(f"b-{i}")
    sched = cluster.kaisched()
    cluster.wait_bound(b_pods)
    for name in b_pods:
        kubelet.wait_running(cluster.ns, name)

    cluster.kube.create(pod_groups_path(cluster.ns), pod_group(cluster.ns, "a", q["a"], 1))
    cluster.pod("a-0", q["a"], 2, group="a")  # within a's quota of 4
    placed = cluster.wait_bound(["a-0"])
    assert placed["a-0"] == cluster.nodes[0]

    # exactly two of b's pods were evicted (through policy/v1 on this server) and reaped by the kubelet
    pods = cluster.pods()
    evicted = sorted(set(b_pods) - set(pods))
    assert len(evicted) == 2, (evicted, kubelet.deleted, cluster.describe())
    assert sorted(k.split("/")[1] for k in kubelet.deleted) == evicted
    evict_events = cluster.events("Evict")
    assert sorted(e["involvedObject"]["name"] for e in evict_events) == evicted  # on the victims' PodGroups
    assert all(e["involvedObject"]["kind"] == "PodGroup" for e in evict_events)
    assert all(e["source"]["component"] == "kai-scheduler" for e in evict_events)
    assert gpus_per_node(pods) == {cluster.nodes[0]: 8}
    assert sum(r.get("evictions", 0) for r in sched.cycles()) == 2, "each victim is evicted once"
    assert not [r for r in sched.records() if r.get("event") == "write failed"], cluster.describe()


def test_the_pods_evicted_for_a_job_are_remembered_on_its_podgroup(cluster: Cluster, kubelet: FakeKubelet) -> None:
    """docs/evictions.md, "A pod is evicted once for a preemptor": while the reclaimer still waits (a-1 asks for more
    than its queue may have), its PodGroup carries the pods evicted for it, and they are evicted once."""
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 4, "b": 4})
    b_pods = []
    for i in range(8):
        cluster.kube.create(pod_groups_path(cluster.ns), pod_group(cluster.ns, f"b-{i}", q["b"], 1))
        cluster.pod(f"b-{i}", q["b"], 1, group=f"b-{i}")
        b_pods.append(f"b-{i}")
    sched = cluster.kaisched()
    cluster.wait_bound(b_pods)
    for name in b_pods:
        kubelet.wait_running(cluster.ns, name)
    # a-1 a second after a-0: a job's pods are tried in creation order, then by uid (random), and creation times
    # have whole seconds, so created in the same second a-1 would come first half of the time and the job wait for
    # it. Their PodGroup comes last, so that the scheduler sees both pods at once (a pod waits for its PodGroup).
    cluster.pod("a-0", q["a"], 2, group="a")
    time.sleep(1.1)
    cluster.pod("a-1", q["a"], 8, group="a")  # never within a's share: a keeps waiting
    cluster.kube.create(pod_groups_path(cluster.ns), pod_group(cluster.ns, "a", q["a"], 1))
    cluster.wait_bound(["a-0"])
    evicted = sorted(set(b_pods) - set(cluster.pods()))
    assert len(evicted) == 2, (evicted, cluster.describe())

    def remembered() -> list[str]:
        group = cluster.kube.pod_group(cluster.ns, "a") or {}
        raw = (group.get("metadata", {}).get("annotations") or {}).get(VICTIMS_ANNOTATION)
        return sorted(key.split("/")[1] for key in parse_victims(raw)) if raw else []

    wait_until(lambda: remembered() == evicted, WAIT_S, f"{VICTIMS_ANNOTATION} on PodGroup a names {evicted}",
               describe=cluster.describe)
    sched.wait_cycle(max(int(r.get("cycle", 0)) for r in sched.cycles()) + 3)
    assert remembered() == evicted
    assert sum(r.get("evictions", 0) for r in sched.cycles()) == 2


def test_a_bare_pod_gets_its_podgroup_from_the_pod_grouper_and_is_bound(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 8, "b": 0})
    created = cluster.pod("solo", q["a"], 1)
    cluster.kaisched()
    cluster.wait_bound(["solo"])
    uid = created["metadata"]["uid"]
    expected = f"pg-solo-{uid}"
    groups = cluster.kube.pod_groups(cluster.ns)
    assert list(groups) == [expected]
    group = groups[expected]
    assert group["spec"]["queue"] == q["a"]
    assert group["spec"]["minMember"] == 1
    owners = group["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Pod", "solo", uid)]
    solo = cluster.kube.pod(cluster.ns, "solo")
    assert solo is not None and solo["metadata"]["annotations"]["pod-group-name"] == expected
    wait_until(lambda: cluster.scheduled_counts() == {"solo": 1}, WAIT_S, "one Scheduled event for solo",
               describe=cluster.describe)


def test_metrics_health_and_readiness_are_served(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 8, "b": 0})
    cluster.pod("m", q["a"], 1)
    port = free_port()
    sched = cluster.kaisched(listen=f"127.0.0.1:{port}")
    sched.wait_cycle(2)
    cluster.wait_bound(["m"])
    base = f"http://127.0.0.1:{port}"
    with httpx2.Client(base_url=base, timeout=5.0, trust_env=False) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.get("/nothing-here").status_code == 404

        def scraped() -> str | None:
            text = client.get("/metrics").text
            return text if "kai_queue_allocated_gpus" in text and f'queue_name="{q["a"]}"' in text else None

        metrics = wait_until(scraped, WAIT_S, "queue metrics on /metrics", describe=sched.describe)
    samples = {line.split(" ")[0]: line.rsplit(" ", 1)[1] for line in metrics.splitlines()
               if line and not line.startswith("#")}
    assert "kai_e2e_scheduling_latency_milliseconds" in samples
    assert float(samples["kai_e2e_scheduling_latency_milliseconds"]) > 0
    assert "kai_open_session_latency_milliseconds" in samples
    assert float(samples[f'kai_queue_allocated_gpus{{queue_name="{q["a"]}"}}']) == 1.0
    assert any(k.startswith("kai_task_bind_latency_milliseconds_count") for k in samples), sorted(samples)[:40]


def test_a_scheduler_killed_mid_run_and_restarted_binds_every_pod_exactly_once(
    cluster: Cluster, kubelet: FakeKubelet
) -> None:
    cluster.add_nodes(4)  # 32 GPUs
    q = cluster.queues(32, {"a": 16, "b": 16})
    first_wave = [f"w1-{i}" for i in range(20)]
    for i, name in enumerate(first_wave):
        cluster.pod(name, q["a" if i % 2 else "b"], 1)
    first = cluster.kaisched(name="first")
    wait_until(lambda: any(node_of(p) for p in cluster.pods().values()), WAIT_S, "a first bind", interval=0.002,
               describe=cluster.describe)
    first.kill()  # SIGKILL as soon as one pod is bound: its other binds and its events are in flight
    assert first.exit_code == -9
    time.sleep(0.5)  # requests the server had already received are finished
    bound_by_first = {n for n, p in cluster.pods().items() if node_of(p)}
    events_by_first = cluster.scheduled_counts()
    assert bound_by_first  # typically 10-18 of the 20: the others' binds died with the process

    second_wave = [f"w2-{i}" for i in range(12)]
    for i, name in enumerate(second_wave):
        cluster.pod(name, q["a" if i % 2 else "b"], 1)
    second = cluster.kaisched(name="second")
    everything = first_wave + second_wave
    cluster.wait_bound(everything)
    for name in everything:
        kubelet.wait_running(cluster.ns, name)
    second.wait_cycle(second.cycles()[-1]["cycle"] + 2)  # a few more cycles on the settled cluster

    pods = cluster.pods()
    assert gpus_per_node(pods) == dict.fromkeys(cluster.nodes, 8), "no node is over-committed"
    # the second scheduler bound exactly the pods the first had not, each once
    assert sum(r["binds"] for r in second.cycles()) == len(everything) - len(bound_by_first), second.describe()
    counts = cluster.wait_scheduled(set(everything) - bound_by_first)
    assert all(n == 1 for n in counts.values()), counts
    assert all(counts[n] == events_by_first[n] for n in bound_by_first), (counts, events_by_first)
    assert not cluster.events("FailedBinding"), cluster.events("FailedBinding")
    assert not [r for r in second.records() if r.get("event") == "write failed"], second.describe()
    # one PodGroup per pod, named after it, created once
    groups = cluster.kube.pod_groups(cluster.ns)
    assert sorted(groups) == sorted(f"pg-{n}-{pods[n]['metadata']['uid']}" for n in everything)


def test_the_api_server_restarting_mid_run_is_survived(cluster: Cluster, kubelet: FakeKubelet) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 8, "b": 0})
    cluster.pod("before", q["a"], 1)
    sched = cluster.kaisched()
    cluster.wait_bound(["before"])
    kubelet.wait_running(cluster.ns, "before")
    cycles = len(sched.cycles())
    # SIGKILL, then the same port, certificates and etcd: watches resumed from before get 410 and relist
    cluster.server.restart_apiserver()
    cluster.pod("after", q["a"], 2)
    placed = cluster.wait_bound(["after"])
    assert placed == {"after": cluster.nodes[0]}
    kubelet.wait_running(cluster.ns, "after")
    assert sched.running and len(sched.cycles()) > cycles
    assert cluster.wait_scheduled(["before", "after"]) == {"before": 1, "after": 1}
    assert gpus_per_node(cluster.pods()) == {cluster.nodes[0]: 3}
    assert not cluster.events("FailedBinding")


def unreachable_kaisched(cluster: Cluster, *args: str) -> KaischedProcess:
    """``kaisched run`` on a kubeconfig whose server refuses connections: its informers (and elector) retry
    and never sync. Started once its first log line (an informer's retry) shows the loop is up."""
    kubeconfig = cluster.tmp_path / "unreachable.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    proc = KaischedProcess(kubeconfig, cluster.tmp_path / "unreachable.log", ["--listen-address", "off", *args],
                           name="unreachable")
    cluster.processes.append(proc)
    proc.start()
    wait_until(lambda: len(proc.records()) >= 3, WAIT_S, "a few log lines", describe=proc.describe)
    return proc


def test_every_line_kaisched_run_writes_is_a_json_object(cluster: Cluster) -> None:
    proc = unreachable_kaisched(cluster, "--leader-elect", "--lease-namespace", cluster.ns)
    proc.kill()
    records = proc.records()
    assert records
    assert not [r["raw"] for r in records if "raw" in r], proc.tail(10)


def test_sigterm_before_the_caches_sync_stops_the_process_promptly(cluster: Cluster) -> None:
    proc = unreachable_kaisched(cluster)
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGTERM)
    try:
        code = proc.proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"kaisched run still running 5 s after SIGTERM; {proc.describe()}") from None
    assert code == 0


def test_leader_election_only_the_leader_binds_and_a_standby_takes_over_when_it_dies(
    cluster: Cluster, kubelet: FakeKubelet
) -> None:
    cluster.add_nodes(1)
    q = cluster.queues(8, {"a": 8, "b": 0})
    args = ("--leader-elect", "--lease-namespace", cluster.ns, "--lease-name", "kai-scheduler",
            "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
            "--leader-elect-retry-period", "500ms")
    leader = cluster.kaisched(*args, name="replica-a", env={"POD_NAME": "replica-a"})
    leading = leader.wait_for_log(lambda r: r.get("event") == "leading: scheduling starts", WAIT_S, "leading")
    assert leading["core"] == ("compiled" if kaisched.compiled() else "interpreted")  # as this process imports
    standby = cluster.kaisched(*args, name="replica-b", env={"POD_NAME": "replica-b"})
    standby.wait_for_log(lambda r: r.get("event") == "caches synced", WAIT_S, "caches synced")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{cluster.ns}/leases/kai-scheduler"

    before = [f"l1-{i}" for i in range(3)]
    for name in before:
        cluster.pod(name, q["a"], 1)
    cluster.wait_bound(before)
    # (events are written after the binds, as client-go's recorder does: a leader killed before they are sent takes
    # them with it, and the standby does not report pods it did not bind)
    cluster.wait_scheduled(before)
    lease = cluster.kube.get(lease_path)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith("replica-a_"), lease
    assert not standby.cycles(), "the standby must not run cycles"
    assert not standby.events("leading: scheduling starts")

    leader.kill()  # no release: the standby takes over once the lease (15 s) expires
    after = [f"l2-{i}" for i in range(3)]
    for name in after:
        cluster.pod(name, q["a"], 1)
    cluster.wait_bound(after, timeout=40.0)
    lease = cluster.kube.get(lease_path)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith("replica-b_"), lease
    assert lease["spec"].get("leaseTransitions", 0) >= 1
    assert standby.cycles()
    counts = cluster.wait_scheduled(before + after)
    assert counts == dict.fromkeys(before + after, 1), counts
    assert not cluster.events("FailedBinding")
