"""Contract test of fenced leadership (issue 23): a leader paused past its lease writes nothing once it resumes.

Two ``kaisched run`` replicas with short Lease timings (4 s lease, 3 s renew deadline, 500 ms retry) against a
real kube-apiserver of this module's own, which writes an **audit log** of every write request (who, what, when,
the answer). Each replica authenticates as a ServiceAccount of its own, so the audit log tells their writes
apart. The leader A is given a plan of 24 binds (one node with room for them all appears at once) and is
SIGSTOPped as soon as the first of those pods is bound: the rest of its plan is queued or on the wire. The standby
B takes the Lease over and binds the pods; then A gets SIGCONT.

What the server saw, from the audit log: after A resumed, no write from A except the requests that had already
passed its fence when it was stopped (client-side fencing cannot call those back; A logs each, there is at most
one per writer thread) and at most a Lease update refused with a 409; and every pod was bound exactly once (one
successful binding per pod, from A or from B). From A's own log: it dropped the writes of the plan it had
made under its lapsed lease and exited 1 (leadership lost). From the cluster: no node holds more GPUs than it has,
no ``FailedBinding``; B keeps scheduling.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.kube.apiserver import KUBE_VERSION, KubeApiServer, apiserver_binary, cache_dir
from tests.kube.contract_helpers import (
    JSON,
    WAIT_S,
    ContractCluster,
    KaischedProcess,
    Kube,
    create_node,
    gpus_of,
    install_crds,
    node,
    node_of,
    pod,
    pod_group,
    pod_groups_path,
    pods_path,
    wait_until,
)

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/fencing"
LEASE_ARGS = ("--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
              "--leader-elect-retry-period", "500ms")
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Metadata
"""
ON_THE_WIRE = "lease not held: a write that passed the fence was answered after the lease lapsed"
WORKERS = 16  # kaisched run's writer threads: at most one request each can be on the wire
WAVE = 60  # pods of the plan A is stopped in the middle of (with their events: some 150 writes); 1 CPU each,
# the node has 64


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.log"


@pytest.fixture(scope="module")
def kube_apiserver(audit_log: Path) -> Iterator[KubeApiServer]:
    """This module's own API server (KAI's CRDs installed), writing every write request to ``audit_log``."""
    if apiserver_binary() is None:
        pytest.skip(f"kube-apiserver {KUBE_VERSION} is not built (expected at {cache_dir() / 'kube-apiserver'}); "
                    "run `make kube-apiserver` to enable the contract tier")
    policy = audit_log.parent / "policy.yaml"
    policy.write_text(AUDIT_POLICY)
    server = KubeApiServer(extra_args=[f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}"]).start()
    try:
        with server.http_client() as client:
            install_crds(Kube(client))
        yield server
    finally:
        server.stop()


class Cluster(ContractCluster):
    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path, audit: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)
        self.audit_path = audit
        self.bindings: list[str] = []

    def add_node(self, gpus: int) -> str:
        name = f"n{self.id}-{len(self.nodes)}"
        create_node(self.kube, node(name, gpus, labels=self.labels))
        self.nodes.append(name)
        return name

    def job(self, name: str, queue_name: str, gpus: int = 1) -> str:
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, 1))
        self.kube.create(pods_path(self.ns), pod(self.ns, name, queue_name, gpus, group=name))
        return name

    def replica_kubeconfig(self, name: str) -> tuple[Path, str]:
        """A kubeconfig whose user is the ServiceAccount ``name`` (cluster-admin): the audit log's username."""
        kube = self.kube
        kube.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": self.ns}})
        binding = f"fencing-{self.id}-{name}"
        kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": binding, "labels": self.labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.ns}]})
        self.bindings.append(binding)
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}
        token = kube.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts/{name}/token", request)["status"]["token"]
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": self.server.url,
                                                          "certificate-authority": str(self.server.ca_path)}}],
                  "users": [{"name": name, "user": {"token": token}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": name, "namespace": self.ns}}]}
        path = self.tmp_path / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

        def authorized() -> bool:  # (RBAC sees the new binding within moments)
            with httpx2.Client(base_url=self.server.url, verify=self.server.ssl_context(), timeout=5.0,
                               trust_env=False, headers={"Authorization": f"Bearer {token}"}) as client:
                return client.get("/api/v1/nodes", params={"limit": "1"}).status_code == 200

        wait_until(authorized, WAIT_S, f"ServiceAccount {name} authorized")
        return path, f"system:serviceaccount:{self.ns}:{name}"

    def stop_at_first_bind(self, proc: KaischedProcess, names: list[str], then: Callable[[], object]) -> float:
        """Watch this namespace's pods, call ``then()`` and SIGSTOP ``proc`` as soon as the server reports one of
        ``names`` bound (a watch reacts within milliseconds, a poll of a hundred pods would not). Returns
        ``time.monotonic()`` at the signal."""
        rv = self.kube.client.get(pods_path(self.ns), params={"limit": "1"}).json()["metadata"]["resourceVersion"]
        wanted = set(names)
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": str(int(WAIT_S))}
        timeout = httpx2.Timeout(10.0, read=WAIT_S + 10.0)
        with self.kube.client.stream("GET", pods_path(self.ns), params=params, timeout=timeout) as response:
            assert response.status_code == 200, response.read()
            then()
            for line in response.iter_lines():
                if not line.strip():
                    continue
                obj = json.loads(line).get("object") or {}
                if obj.get("metadata", {}).get("name") in wanted and node_of(obj):
                    assert proc.proc is not None
                    proc.proc.send_signal(signal.SIGSTOP)
                    return time.monotonic()
        raise AssertionError(f"no pod of {sorted(wanted)[:3]}... bound within {WAIT_S:.0f} s; {self.describe()}")

    def delete_own(self) -> None:
        for binding in self.bindings:
            self.kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")

    # ---- the audit log
    def audit(self) -> list[JSON]:
        """The server's audit events (writes only: the policy leaves reads out), in the order they were written."""
        return [json.loads(line) for line in self.audit_path.read_text().splitlines() if line.strip()]

    def writes(self, user: str, since: datetime | None = None) -> list[JSON]:
        """Every write request ``user`` sent (queues and other cluster-scoped objects included)."""
        return [e for e in self.audit() if e["user"]["username"] == user and e["verb"] in WRITE_VERBS
                and (since is None or _time(e["requestReceivedTimestamp"]) >= since)]

    def successful_bindings(self) -> list[tuple[str, str]]:
        """``(user, pod)`` of every binding of this test's pods the server accepted."""
        return [(e["user"]["username"], e["objectRef"]["name"]) for e in self.audit()
                if e["verb"] == "create" and e["objectRef"].get("subresource") == "binding"
                and e["objectRef"].get("namespace") == self.ns
                and (e.get("responseStatus") or {}).get("code", 0) < 300]


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _request(event: JSON) -> str:
    """``METHOD /path`` of an audit event's request, as kaisched's writer logs it."""
    ref = event.get("objectRef") or {}
    group, version = ref.get("apiGroup") or "", ref.get("apiVersion") or "v1"
    path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if ref.get("namespace"):
        path += f"/namespaces/{ref['namespace']}"
    path += f"/{ref.get('resource')}"
    if ref.get("name") and (event["verb"] != "create" or ref.get("subresource")):
        path += f"/{ref['name']}"
    if ref.get("subresource"):
        path += f"/{ref['subresource']}"
    method = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}.get(event["verb"], "?")
    return f"{method} {path}"


def _describe(event: JSON) -> str:
    ref = event.get("objectRef") or {}
    return (f"{event['requestReceivedTimestamp']} {event['verb']} {ref.get('resource')}/{ref.get('name')}"
            f"{'/' + ref['subresource'] if ref.get('subresource') else ''} -> "
            f"{(event.get('responseStatus') or {}).get('code')}")


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str, tmp_path: Path,
            audit_log: Path) -> Iterator[Cluster]:
    made = Cluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path, audit_log)
    try:
        yield made
    finally:
        for proc in made.processes:  # a stopped process must be able to die
            if proc.running:
                proc.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        made.cleanup()


def test_a_leader_paused_past_its_lease_writes_nothing_after_it_resumes(cluster: Cluster) -> None:
    started = time.monotonic()
    q = cluster.queues(200, {"a": 200, "b": 0})["a"]
    cluster.add_node(8)
    a_config, a_user = cluster.replica_kubeconfig("replica-a")
    b_config, b_user = cluster.replica_kubeconfig("replica-b")
    args = ("--leader-elect", "--lease-namespace", cluster.ns, "--lease-name", "kai-scheduler", *LEASE_ARGS)
    a = cluster.kaisched(*args, name="replica-a", env={"POD_NAME": "replica-a"}, kubeconfig=a_config)
    a.wait_for_log(lambda r: r.get("event") == "leading: scheduling starts", WAIT_S, "leading")
    b = cluster.kaisched(*args, name="replica-b", env={"POD_NAME": "replica-b"}, kubeconfig=b_config)
    b.wait_for_log(lambda r: r.get("event") == "caches synced", WAIT_S, "caches synced")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{cluster.ns}/leases/kai-scheduler"

    # A schedules: a job that fills the first node, then a wave of jobs that waits for room
    cluster.job("warm-up", q, gpus=8)
    cluster.wait_bound(["warm-up"])
    wave = [cluster.job(f"w-{i}", q) for i in range(WAVE)]
    a.wait_for_log(lambda r: r.get("event") == "cycle" and r.get("pending", 0) >= WAVE, WAIT_S,
                   "a cycle that sees the whole wave pending")
    # one node with room for the whole wave (and 4 more): A's next cycle plans 60 binds (and their events) at
    # once; A is stopped (a VM freeze, a long GC) as soon as the first of them is bound, in the middle of its plan
    stopped_at = cluster.stop_at_first_bind(a, wave, lambda: cluster.add_node(WAVE + 4))
    assert a.proc is not None
    bound_by_a = {n for n, p in cluster.pods().items() if n in wave and node_of(p)}
    assert len(bound_by_a) < WAVE, "A finished its plan before it was stopped: nothing left to fence"

    # B sees A's Lease go unrenewed for 4 s, takes it over and binds the rest
    def held_by_b() -> bool:
        lease = cluster.kube.get(lease_path) or {}
        return str((lease.get("spec") or {}).get("holderIdentity", "")).startswith("replica-b_")

    wait_until(held_by_b, WAIT_S, "replica B holds the Lease", describe=cluster.describe)
    assert time.monotonic() - stopped_at >= 3.0  # not before A's lease could have expired
    cluster.wait_bound(wave)
    paused = time.monotonic() - stopped_at

    resumed = datetime.now(UTC)
    a.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not a.running, WAIT_S, "replica A exits after it resumes", describe=a.describe)
    assert a.proc.returncode == 1, a.describe()  # leadership lost: Kubernetes restarts it as a standby

    # B goes on scheduling
    late = [cluster.job(f"late-{i}", q) for i in range(2)]
    cluster.wait_bound(late)

    # what the API server saw: nothing written by A after it resumed (a refused Lease update at most)
    wait_until(lambda: {p for _, p in cluster.successful_bindings()} >= set(late), WAIT_S,
               "the late bindings in the audit log")
    # except the requests that had passed the fence when A was stopped and left once it resumed: client-side
    # fencing cannot call those back; A logs each of them, and there is at most one per writer thread
    records = a.records()
    on_the_wire = {str(r.get("request")) for r in records if r.get("event") == ON_THE_WIRE}
    after = cluster.writes(a_user, since=resumed)
    unexpected = [e for e in after if _request(e) not in on_the_wire
                  and not (e["objectRef"].get("resource") == "leases"
                           and (e.get("responseStatus") or {}).get("code") == 409)]
    assert not unexpected, "A wrote after it resumed:\n" + "\n".join(_describe(e) for e in unexpected)
    assert len(after) <= WORKERS + 1, [_describe(e) for e in after]
    assert cluster.writes(a_user), "the audit log shows A's writes from before the pause"
    # every pod bound exactly once, by whichever replica held the Lease
    bindings = cluster.successful_bindings()
    per_pod = collections.Counter(p for _, p in bindings)
    assert per_pod == dict.fromkeys(["warm-up", *wave, *late], 1), per_pod
    by_a = {p for u, p in bindings if u == a_user}
    by_b = {p for u, p in bindings if u == b_user}
    assert by_a >= bound_by_a and by_a <= {"warm-up", *wave}
    assert by_b >= set(late)

    # what A said: its lease lapsed and the writes of the plan made under it were dropped, unsent
    assert any("lapsed" in str(r.get("event")) or r.get("event", "").startswith("lease not held") for r in records), \
        a.tail(40)
    dropped = sum(int(r.get("count", 0)) for r in records
                  if str(r.get("event", "")).startswith("lease not held: ") and "dropped" in str(r.get("event")))
    assert dropped >= 1, a.tail(40)

    # the cluster: no node over-committed, no failed bind, the Lease with B
    pods = cluster.pods()
    used: collections.Counter[str] = collections.Counter()
    for p in pods.values():
        used[node_of(p)] += gpus_of(p)
    assert used == {cluster.nodes[0]: 8, cluster.nodes[1]: WAVE + len(late)}, used
    assert not cluster.events("FailedBinding"), [e["message"] for e in cluster.events("FailedBinding")]
    lease = cluster.kube.get(lease_path)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith("replica-b_")
    assert lease["spec"].get("leaseTransitions", 0) >= 1
    assert b.running
    print(f"fencing contract: A paused {paused:.1f} s; A bound {len(by_a & set(wave))} of the wave before, B "
          f"{len(by_b & set(wave))}; A dropped {dropped} writes unsent, {len(after)} left on the wire after it "
          f"resumed ({len(on_the_wire)} logged); the test took {time.monotonic() - started:.1f} s")
