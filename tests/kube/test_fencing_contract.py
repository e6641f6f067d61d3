"""Contract test of fenced leadership (issue 23): a leader paused past its lease writes nothing once it resumes.

Two ``kaisched run`` replicas with short Lease timings (4 s lease, 3 s renew deadline, 500 ms retry) against a
real kube-apiserver of this module's own, which writes an **audit log** of every write request (who, what, when,
the answer). The replicas are installed as production installs them: the chart's RBAC and its server-side fencing
policy (``templates/rbac.yaml`` and ``templates/fencing.yaml``, rendered with helm for a namespace of this test),
one ServiceAccount ``kaisched``, and for each replica a Pod object and a ServiceAccount token bound to it (the
TokenRequest API with a ``boundObjectRef``, as the kubelet's projected token is), so the API server authenticates
each replica with the ``authentication.kubernetes.io/pod-name`` extra and the audit log tells their writes apart.
Each replica runs with ``POD_NAME`` set to its pod, as the chart's Deployment does.

The leader A is given a plan of 60 binds (one node with room for them all appears at once) and is frozen as soon as
the first of those pods is bound: A reaches the API server through a proxy of this test (:class:`HoldingProxy`),
which first holds what A sends (a frozen machine's socket buffers: requests that passed A's client-side check), and
50 ms later A is SIGSTOPped; the rest of its plan is queued or on the wire. The standby B takes the Lease over and
binds the pods; then the proxy lets A's held requests go and A gets SIGCONT.

What the server saw, from the audit log: no write of A that the server received after B's takeover was admitted:
the held requests arrived then and each was denied by the fencing policy (403), the Lease excepted, where A sent at
most an update refused with a 409 (without the policy the server admits them: bindings of pods B has bound since
then get a 409, any other write goes through); none of B's writes was denied; every pod was bound exactly once (one
successful binding per pod, from A or from B). From A's own log: it dropped the writes of the plan it had made under
its lapsed lease, took the denials as lost leadership, and exited 1. A write sent with A's token afterwards is
refused, naming the policy, and changes nothing. From the cluster: no node holds more GPUs than it has, no
``FailedBinding``; B keeps scheduling.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest
import yaml

from kaisched.kube.leader import FENCING_POLICY
from tests.kube.apiserver import KUBE_VERSION, KubeApiServer, apiserver_binary, cache_dir
from tests.kube.contract_helpers import (
    JSON,
    ROOT,
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
LEASE_NAME = "kai-scheduler"
SERVICE_ACCOUNT = "kaisched"  # the chart's
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
CHART = ROOT / "deploy" / "helm" / "kaisched"
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
DENIED = "lease not held as the API server sees it: a write was denied by the fencing policy"
WORKERS = 16  # kaisched run's writer threads: at most one request each can be on the wire
WAVE = 60  # pods of the plan A is stopped in the middle of (with their events: some 150 writes); 1 CPU each,
# the node has 64
# (plural, namespaced) of the kinds the chart's RBAC and fencing templates render
KINDS = {"ServiceAccount": ("serviceaccounts", True), "ClusterRole": ("clusterroles", False),
         "ClusterRoleBinding": ("clusterrolebindings", False), "Role": ("roles", True),
         "RoleBinding": ("rolebindings", True),
         "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
         "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False)}


def find_helm() -> str | None:
    """helm as the chart tests find it: ``$KAISCHED_HELM``, else ``scripts/helm.sh path``, else ``helm`` on PATH."""
    explicit = os.environ.get("KAISCHED_HELM")
    if explicit:
        return explicit
    out = subprocess.run([str(ROOT / "scripts" / "helm.sh"), "path"], capture_output=True, text=True, timeout=30,
                         check=False)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip()
    return shutil.which("helm")


def render_chart(namespace: str) -> list[JSON]:
    """The chart's RBAC and fencing policy for a scheduler installed in ``namespace``."""
    helm = find_helm()
    if helm is None:
        pytest.skip("helm is not built: run scripts/helm.sh once (about 4 minutes); this test installs the chart's "
                    "fencing policy")
    out = subprocess.run([helm, "template", "kaisched", str(CHART), "--kube-version", KUBE_VERSION,
                          "--set", f"namespace={namespace}", "--set", "createNamespace=false",
                          "--set", f"leaderElection.leaseName={LEASE_NAME}",
                          "--show-only", "templates/rbac.yaml", "--show-only", "templates/fencing.yaml"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def object_path(doc: JSON) -> str:
    """The collection path ``doc`` is created at."""
    group, _, version = doc["apiVersion"].rpartition("/")
    plural, namespaced = KINDS[doc["kind"]]
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespaced:
        path += f"/namespaces/{doc['metadata']['namespace']}"
    return f"{path}/{plural}"


class HoldingProxy:
    """A TCP proxy on loopback in front of the API server (TLS passes through untouched) that can *hold* what the
    client sends: while held, bytes from the client wait in the proxy (and the kernel's buffers), answers still flow
    back. It stands for a frozen machine's socket buffers: requests that had passed kaisched's client-side check and
    were written to the socket when the process froze, and leave once it resumes."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self._open = threading.Event()
        self._open.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="holding-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self._open.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.upstream)
            except OSError:
                return
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, held: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if held:
                    self._open.wait()
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


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
        self.sched_ns = f"kaisched-{self.id}"  # the scheduler's namespace: its ServiceAccount, pods and Lease
        self.installed: list[str] = []  # paths of the cluster-scoped objects of the chart
        self.user = f"system:serviceaccount:{self.sched_ns}:{SERVICE_ACCOUNT}"
        self.tokens: dict[str, str] = {}
        self.proxy = HoldingProxy(server.port)  # the leader A's way to the API server

    @property
    def lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.sched_ns}/leases/{LEASE_NAME}"

    def add_node(self, gpus: int) -> str:
        name = f"n{self.id}-{len(self.nodes)}"
        create_node(self.kube, node(name, gpus, labels=self.labels))
        self.nodes.append(name)
        return name

    def job(self, name: str, queue_name: str, gpus: int = 1) -> str:
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, 1))
        self.kube.create(pods_path(self.ns), pod(self.ns, name, queue_name, gpus, group=name))
        return name

    # ---- the installation
    def install(self) -> None:
        """The scheduler's namespace, the chart's RBAC and fencing policy in it; returns once the policy is in
        force (a write of the ServiceAccount is refused: nobody holds the Lease yet)."""
        self.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": self.sched_ns}})
        docs = render_chart(self.sched_ns)
        assert {d["kind"] for d in docs} == set(KINDS), sorted(d["kind"] for d in docs)
        for doc in docs:
            path = object_path(doc)
            self.kube.create(path, doc)
            if not KINDS[doc["kind"]][1]:
                self.installed.append(f"{path}/{doc['metadata']['name']}")

    def replica(self, name: str, server_url: str | None = None) -> Path:
        """A Pod ``name`` of the ServiceAccount and a kubeconfig with a token bound to it (what the kubelet mounts
        into a pod): the API server authenticates it as the ServiceAccount with the pod-name extra ``name``."""
        created = self.kube.create(pods_path(self.sched_ns), {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.sched_ns},
            # not kaisched's to schedule, and never placed: no other scheduler runs here
            "spec": {"serviceAccountName": SERVICE_ACCOUNT, "schedulerName": "default-scheduler",
                     "containers": [{"name": "scheduler", "image": "kaisched"}]}})
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                       "apiVersion": "v1", "kind": "Pod", "name": name, "uid": created["metadata"]["uid"]}}}
        token = self.kube.create(f"/api/v1/namespaces/{self.sched_ns}/serviceaccounts/{SERVICE_ACCOUNT}/token",
                                 request)["status"]["token"]
        self.tokens[name] = token
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": server_url or self.server.url,
                                                          "certificate-authority": str(self.server.ca_path)}}],
                  "users": [{"name": name, "user": {"token": token}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": name, "namespace": self.sched_ns}}]}
        path = self.tmp_path / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def as_replica(self, name: str) -> httpx2.Client:
        return httpx2.Client(base_url=self.server.url, verify=self.server.ssl_context(), timeout=5.0,
                             trust_env=False, headers={"Authorization": f"Bearer {self.tokens[name]}"})

    def probe_event(self, name: str) -> httpx2.Response:
        """Create an Event in this test's namespace as replica ``name`` (the chart's RBAC allows it)."""
        event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "fencing-probe-"},
                 "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": self.ns},
                 "reason": "FencingProbe", "message": "probe", "type": "Normal"}
        with self.as_replica(name) as client:
            return client.post(f"/api/v1/namespaces/{self.ns}/events", json=event)

    def wait_policy_in_force(self, name: str) -> None:
        """The Lease, released (nobody holds it: a replica takes it at once); once the chart's RBAC lets ``name``
        read, its writes are refused by the policy. (Without a Lease the policy admits them: a missing parameter
        must not block every other user's writes, see templates/fencing.yaml.)"""
        self.kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{self.sched_ns}/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": self.sched_ns},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})

        last: list[str] = ["no answer"]

        def refused() -> bool:
            with self.as_replica(name) as client:
                read = client.get("/api/v1/nodes", params={"limit": "1"})
            if read.status_code != 200:
                last[0] = f"GET nodes: {read.status_code} {read.text[:300]}"
                return False  # RBAC has not caught up yet
            answer = self.probe_event(name)
            last[0] = f"POST event: {answer.status_code} {answer.text[:500]}"
            return answer.status_code == 403 and "(holder: none)" in answer.text and FENCING_POLICY in answer.text

        wait_until(refused, WAIT_S, f"the fencing policy refuses {name}'s writes while nobody holds the Lease",
                   describe=lambda: last[0])

    def stop_at_first_bind(self, proc: KaischedProcess, names: list[str], then: Callable[[], object],
                           before_stop: Callable[[], object]) -> float:
        """Watch this namespace's pods, call ``then()``, and as soon as the server reports one of ``names`` bound (a
        watch reacts within milliseconds, a poll of a hundred pods would not) call ``before_stop()`` and SIGSTOP
        ``proc``. Returns ``time.monotonic()`` at the signal."""
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
                    before_stop()
                    proc.proc.send_signal(signal.SIGSTOP)
                    return time.monotonic()
        raise AssertionError(f"no pod of {sorted(wanted)[:3]}... bound within {WAIT_S:.0f} s; {self.describe()}")

    def delete_own(self) -> None:
        self.kube.delete_collection(pods_path(self.sched_ns), grace_seconds=0)
        for path in reversed(self.installed):
            self.kube.delete(path)

    # ---- the audit log
    def audit(self) -> list[JSON]:
        """The server's audit events (writes only: the policy leaves reads out), in the order they were written."""
        return [json.loads(line) for line in self.audit_path.read_text().splitlines() if line.strip()]

    def writes(self, replica: str) -> list[JSON]:
        """Every write request replica ``replica`` sent (as the ServiceAccount, from its pod)."""
        return [e for e in self.audit() if e["verb"] in WRITE_VERBS and _replica(e, self.user) == replica]

    def successful_bindings(self) -> list[tuple[str, str]]:
        """``(replica, pod)`` of every binding of this test's pods the server accepted."""
        return [(_replica(e, self.user), e["objectRef"]["name"]) for e in self.audit()
                if e["verb"] == "create" and e["objectRef"].get("subresource") == "binding"
                and e["objectRef"].get("namespace") == self.ns and _code(e) < 300]


def _replica(event: JSON, user: str) -> str:
    """The pod whose ServiceAccount token sent the request ("" for any other user)."""
    who = event.get("user") or {}
    if who.get("username") != user:
        return ""
    return str(((who.get("extra") or {}).get(POD_NAME_EXTRA) or [""])[0])


def _code(event: JSON) -> int:
    return int((event.get("responseStatus") or {}).get("code") or 0)


def _is_lease(event: JSON) -> bool:
    return (event.get("objectRef") or {}).get("resource") == "leases"


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _describe(event: JSON) -> str:
    ref = event.get("objectRef") or {}
    status = event.get("responseStatus") or {}
    return (f"{event['requestReceivedTimestamp']} {event['verb']} {ref.get('resource')}/{ref.get('name')}"
            f"{'/' + ref['subresource'] if ref.get('subresource') else ''} -> {status.get('code')} "
            f"{str(status.get('message', ''))[:160]}")


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
        made.proxy.release()
        made.cleanup()
        made.proxy.close()


def test_a_leader_paused_past_its_lease_writes_nothing_after_it_resumes(cluster: Cluster) -> None:
    started = time.monotonic()
    q = cluster.queues(200, {"a": 200, "b": 0})["a"]
    cluster.add_node(8)
    cluster.install()
    a_config, b_config = cluster.replica("replica-a", cluster.proxy.url), cluster.replica("replica-b")
    cluster.wait_policy_in_force("replica-a")
    args = ("--leader-elect", "--lease-namespace", cluster.sched_ns, "--lease-name", LEASE_NAME, *LEASE_ARGS)
    a = cluster.kaisched(*args, name="replica-a", env={"POD_NAME": "replica-a"}, kubeconfig=a_config)
    a.wait_for_log(lambda r: r.get("event") == "leading: scheduling starts", WAIT_S, "leading")
    b = cluster.kaisched(*args, name="replica-b", env={"POD_NAME": "replica-b"}, kubeconfig=b_config)
    b.wait_for_log(lambda r: r.get("event") == "caches synced", WAIT_S, "caches synced")

    # A schedules (its writes are admitted: it holds the Lease): a job that fills the first node, then a wave of
    # jobs that waits for room
    cluster.job("warm-up", q, gpus=8)
    cluster.wait_bound(["warm-up"])
    wave = [cluster.job(f"w-{i}", q) for i in range(WAVE)]
    a.wait_for_log(lambda r: r.get("event") == "cycle" and r.get("pending", 0) >= WAVE, WAIT_S,
                   "a cycle that sees the whole wave pending")
    # one node with room for the whole wave (and 4 more): A's next cycle plans 60 binds (and their events) at
    # once; A is frozen (a VM freeze) as soon as the first of them is bound, in the middle of its plan: first what
    # it sends is held (its socket buffers), then, 50 ms later, the process is stopped
    def freeze() -> None:
        cluster.proxy.hold()
        time.sleep(0.05)

    stopped_at = cluster.stop_at_first_bind(a, wave, lambda: cluster.add_node(WAVE + 4), freeze)
    assert a.proc is not None
    bound_by_a = {n for n, p in cluster.pods().items() if n in wave and node_of(p)}
    assert len(bound_by_a) < WAVE, "A finished its plan before it was stopped: nothing left to fence"

    # B sees A's Lease go unrenewed for 4 s, takes it over and binds the rest
    def held_by_b() -> bool:
        lease = cluster.kube.get(cluster.lease_path) or {}
        return str((lease.get("spec") or {}).get("holderIdentity", "")).startswith("replica-b_")

    wait_until(held_by_b, WAIT_S, "replica B holds the Lease", describe=cluster.describe)
    assert time.monotonic() - stopped_at >= 3.0  # not before A's lease could have expired
    cluster.wait_bound(wave)
    paused = time.monotonic() - stopped_at

    resumed = datetime.now(UTC)
    cluster.proxy.release()  # the frozen machine resumes: what it had sent leaves now, after the takeover
    a.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: not a.running, WAIT_S, "replica A exits after it resumes", describe=a.describe)
    assert a.proc.returncode == 1, a.describe()  # leadership lost: Kubernetes restarts it as a standby

    # B goes on scheduling
    late = [cluster.job(f"late-{i}", q) for i in range(2)]
    cluster.wait_bound(late)
    wait_until(lambda: {p for _, p in cluster.successful_bindings()} >= set(late), WAIT_S,
               "the late bindings in the audit log")

    # A's token, used again now: every write is refused by the policy, naming it, and changes nothing
    probes_from = datetime.now(UTC)
    probe = cluster.probe_event("replica-a")
    assert probe.status_code == 403 and FENCING_POLICY in probe.text, probe.text
    assert "pod replica-a does not hold the leader-election Lease" in probe.text, probe.text
    stray = cluster.job("stray", q)
    with cluster.as_replica("replica-a") as client:
        answer = client.post(f"{pods_path(cluster.ns)}/stray/binding", json={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "stray"},
            "target": {"kind": "Node", "name": cluster.nodes[1]}})
    assert answer.status_code == 403 and FENCING_POLICY in answer.text, answer.text
    cluster.wait_bound([stray])  # by B, to whichever node it chooses
    assert cluster.probe_event("replica-b").status_code == 201  # the holder's writes are admitted

    # what the API server saw
    audit = cluster.audit()
    takeover = min(_time(e["stageTimestamp"]) for e in audit
                   if _replica(e, cluster.user) == "replica-b" and _is_lease(e) and _code(e) < 300)
    a_writes = cluster.writes("replica-a")
    assert a_writes, "the audit log shows A's writes from before the pause"
    # nothing A sent that reached the server after B took the Lease over was admitted (the Lease excepted: there
    # only a stale update, refused by optimistic concurrency)
    late_a = [e for e in a_writes if _time(e["requestReceivedTimestamp"]) >= takeover]
    admitted = [e for e in late_a if not (_code(e) in (403, 422) and FENCING_POLICY in str(
        (e.get("responseStatus") or {}).get("message", ""))) and not (_is_lease(e) and _code(e) == 409)]
    assert not admitted, "A's writes admitted after the takeover:\n" + "\n".join(_describe(e) for e in admitted)
    after_resume = [e for e in a_writes if _time(e["requestReceivedTimestamp"]) >= resumed]
    assert len(after_resume) <= WORKERS + 1 + 2, [_describe(e) for e in after_resume]  # (+ the 2 probes above)
    assert all(_code(e) >= 400 for e in after_resume), [_describe(e) for e in after_resume]
    # the new leader's writes were all admitted
    refused_b = [e for e in cluster.writes("replica-b") if _code(e) in (403, 422)]
    assert not refused_b, "B's writes refused:\n" + "\n".join(_describe(e) for e in refused_b)
    # every pod bound exactly once, by whichever replica held the Lease
    bindings = cluster.successful_bindings()
    per_pod = collections.Counter(p for _, p in bindings)
    assert per_pod == dict.fromkeys(["warm-up", *wave, *late, stray], 1), per_pod
    by_a = {p for r, p in bindings if r == "replica-a"}
    by_b = {p for r, p in bindings if r == "replica-b"}
    assert by_a >= bound_by_a and by_a <= {"warm-up", *wave}
    assert by_b >= {*late, stray}

    # what A said: its lease lapsed and the writes of the plan made under it were dropped, unsent; a write the
    # server refused was taken as lost leadership
    records = a.records()
    assert any("lapsed" in str(r.get("event")) or str(r.get("event", "")).startswith("lease not held")
               for r in records), a.tail(40)
    dropped = sum(int(r.get("count", 0)) for r in records
                  if str(r.get("event", "")).startswith("lease not held: ") and "dropped" in str(r.get("event")))
    assert dropped >= 1, a.tail(40)
    # the writes A had sent when it froze reached the server after the takeover: all refused (above), and A took
    # the refusal as lost leadership
    on_the_wire = [e for e in late_a if not _is_lease(e) and _time(e["requestReceivedTimestamp"]) < probes_from]
    assert on_the_wire, "no write of A was held until after the takeover: the test did not exercise the policy"
    logged = [r for r in records if r.get("event") == DENIED]
    assert logged, a.tail(40)
    assert all(FENCING_POLICY in str(r.get("message")) for r in logged), logged

    # the cluster: no node over-committed, no failed bind, the Lease with B
    used: collections.Counter[str] = collections.Counter()
    for p in cluster.pods().values():
        used[node_of(p)] += gpus_of(p)
    assert used == {cluster.nodes[0]: 8, cluster.nodes[1]: WAVE + len(late) + 1}, used
    assert not cluster.events("FailedBinding"), [e["message"] for e in cluster.events("FailedBinding")]
    lease = cluster.kube.get(cluster.lease_path)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith("replica-b_")
    assert lease["spec"].get("leaseTransitions", 0) >= 1
    assert b.running
    print(f"fencing contract: A paused {paused:.1f} s; A bound {len(by_a & set(wave))} of the wave before, B "
          f"{len(by_b & set(wave))}; A dropped {dropped} writes unsent; after the takeover the server refused "
          f"{len(on_the_wire)} writes A had on the wire ({len(logged)} logged by A); the test took "
          f"{time.monotonic() - started:.1f} s")

