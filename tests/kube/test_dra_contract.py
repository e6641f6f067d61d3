"""Contract tests of DRA in Kubernetes mode: ``kaisched run`` against a real kube-apiserver (1.35, resource.k8s.io/v1).

A fake DRA driver: ResourceSlices the test creates (driver ``gpu.nvidia.com``, one pool per node, devices
``gpu-0..N`` with attributes and a memory capacity) and a DeviceClass selecting them. There is no
kube-controller-manager: where the resourceclaim controller would act (make a pod's claim from its template and
write ``status.resourceClaimStatuses``, delete the claim of a pod that is gone) the test does it. The fake kubelet
marks bound pods Running and deletes evicted ones.

Covered: (a) a templated claim made by "the controller" is allocated and reserved by kaisched before the pod is
bound; (b) a claim shared by two pods is allocated once and reserved for both, which run on its device's node;
(c) three one-device claims on two devices: two pods bound, the third pending with a PodGroup condition and events
about its claim, no device in two claims; (d) reclaim of DRA GPUs between two queues: one pod of the queue over
its share evicted, its reservation removed and its claim deallocated, the other queue's pod bound on the freed
device; (e) a pod whose claim write is refused (a ValidatingAdmissionPolicy on ``resourceclaims/status``) is not
bound, and is once the write is allowed; and kaisched with the shipped ClusterRole (deploy/rbac.yaml) as its only
permissions.
"""

from __future__ import annotations

import collections
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.kube.apiserver import KubeApiServer
from tests.kube.contract_helpers import (
    JSON,
    QUEUE_LABEL,
    ROOT,
    SCHEDULER_NAME,
    WAIT_S,
    ContractCluster,
    Kube,
    WaitTimeout,
    create_node,
    install_crds,
    module_apiserver,
    node,
    node_of,
    pod_group,
    pod_groups_path,
    pods_path,
    wait_until,
)
from tests.kube.fake_kubelet import FakeKubelet

pytestmark = pytest.mark.kube

TEST_LABEL = "kaisched.test/dra-contract"
DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
RESOURCE = "/apis/resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}


def _setup(kube: Kube) -> None:
    install_crds(kube)
    kube.create(f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})


@pytest.fixture(scope="module")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """This module's own API server (the scheduler sees every node and claim), KAI's CRDs and the DeviceClass."""
    yield from module_apiserver(_setup)


def claims_path(namespace: str) -> str:
    return f"{RESOURCE}/namespaces/{namespace}/resourceclaims"


def claim_spec(count: int = 1) -> JSON:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS, "count": count}}]}}


def devices_of(claim: JSON) -> list[tuple[str, str, str]]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def node_local(node_name: str) -> JSON:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": [node_name]}]}]}


class DraCluster(ContractCluster):
    """One test's nodes, slices, queues, claims and pods on the module's server; :meth:`cleanup` removes them."""

    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(server, kube, namespace, tmp_path, TEST_LABEL)
        self.seen_twice: list[tuple[str, str, str]] = []

    # ---- objects
    def add_node(self, gpus: int) -> str:
        """A node whose GPUs are DRA devices only (none in ``status.allocatable``), with its ResourceSlice."""
        name = f"n{self.id}-{len(self.nodes)}"
        create_node(self.kube, node(name, 0, labels=self.labels))
        devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "productName": {"string": "H100"},
                                                       "uuid": {"string": f"GPU-{self.id}-{len(self.nodes)}-{i}"}},
                    "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
        self.kube.create(f"{RESOURCE}/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{DRIVER}", "labels": self.labels},
            "spec": {"driver": DRIVER, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "nodeName": name, "devices": devices}})
        self.nodes.append(name)
        return name

    def claim(self, name: str, queue_name: str, count: int = 1, labels: dict[str, str] | None = None) -> JSON:
        """A claim pods name directly (its GPUs need the queue label: shared only within the queue)."""
        return self.kube.create(claims_path(self.ns), {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": self.ns, "labels": {QUEUE_LABEL: queue_name, **(labels or {})}},
            "spec": claim_spec(count)})

    def template(self, name: str, count: int = 1) -> JSON:
        return self.kube.create(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": self.ns}, "spec": {"spec": claim_spec(count)}})

    def pod(self, name: str, queue_name: str, *, claim: str | None = None, template: str | None = None) -> JSON:
        """A pod in a PodGroup of its own (same name) whose container uses one DRA claim ``gpu``."""
        self.kube.create(pod_groups_path(self.ns), pod_group(self.ns, name, queue_name, 1))
        entry = {"name": "gpu", **({"resourceClaimName": claim} if claim else {}),
                 **({"resourceClaimTemplateName": template} if template else {})}
        return self.kube.create(pods_path(self.ns), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": {QUEUE_LABEL: queue_name},
                         "annotations": {"pod-group-name": name}},
            "spec": {"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 30, "resourceClaims": [entry],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                   "claims": [{"name": "gpu"}]}}]}})

    def make_claim(self, pod_name: str, template: str, count: int = 1) -> str:
        """What the resourceclaim controller does for a pod's templated claim: the claim, owned by the pod and
        annotated with the pod's claim name, then ``status.resourceClaimStatuses`` of the pod."""
        pod = self.kube.pod(self.ns, pod_name)
        assert pod is not None, pod_name
        name = f"{pod_name}-gpu-{secrets.token_hex(3)[:5]}"
        self.kube.create(claims_path(self.ns), {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": self.ns,
                         "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                                              "uid": pod["metadata"]["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": claim_spec(count)})
        self._patch(f"{pods_path(self.ns)}/{pod_name}/status",
                    {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": name}]}}, STRATEGIC)
        return name

    def delete_claim(self, name: str) -> None:
        """The controller's part when a claim's pod is gone: the claim is deleted (its finalizer, if the claim
        were still allocated, is the controller's to remove once it deallocated it)."""
        self.kube.delete(f"{claims_path(self.ns)}/{name}")

    def _patch(self, path: str, body: JSON, headers: dict[str, str]) -> JSON:
        answer = self.kube.client.patch(path, json=body, headers=headers)
        if answer.status_code != 200:
            raise AssertionError(f"PATCH {path}: {answer.status_code} {answer.text[:500]}")
        patched: JSON = answer.json()
        return patched

    # ---- reads
    def claims(self) -> dict[str, JSON]:
        return {c["metadata"]["name"]: c for c in self.kube.items(claims_path(self.ns))}

    def claim_of(self, name: str) -> JSON:
        got = self.kube.get(f"{claims_path(self.ns)}/{name}")
        assert got is not None, f"ResourceClaim {self.ns}/{name}"
        return got

    def check_no_device_twice(self) -> None:
        """Records any device found in the allocations of two claims (checked at every poll of a wait)."""
        held = collections.Counter(d for c in self.claims().values() for d in devices_of(c))
        self.seen_twice.extend(d for d, n in held.items() if n > 1)

    def on_poll(self) -> None:
        self.check_no_device_twice()

    def stays_unbound(self, name: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_no_device_twice()
            assert not node_of(self.kube.pod(self.ns, name)), f"pod {name} was bound; {self.describe()}"
            time.sleep(0.2)

    def delete_own(self) -> None:
        kube = self.kube
        for name, claim in self.claims().items():
            if claim["metadata"].get("finalizers"):
                self._patch(f"{claims_path(self.ns)}/{name}", {"metadata": {"finalizers": None}}, MERGE)
        kube.delete_collection(claims_path(self.ns))
        kube.delete_collection(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates")
        kube.delete_collection(f"{RESOURCE}/resourceslices", label_selector=f"{TEST_LABEL}={self.id}")


@pytest.fixture
def cluster(kube_apiserver: KubeApiServer, kube_http: httpx2.Client, kube_namespace: str,
            tmp_path: Path) -> Iterator[DraCluster]:
    made = DraCluster(kube_apiserver, Kube(kube_http), kube_namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def kubelet(kube_apiserver: KubeApiServer, cluster: DraCluster) -> Iterator[FakeKubelet]:
    with FakeKubelet.for_server(kube_apiserver, namespace=cluster.ns) as fake:
        fake.wait_synced()
        yield fake


# ------------------------------------------------------------------------------------------------ tests


def test_a_templated_claim_is_allocated_and_reserved_before_its_pod_is_bound(
        cluster: DraCluster, kubelet: FakeKubelet) -> None:
    home = cluster.add_node(2)
    q = cluster.queues(2, {"a": 2})
    cluster.template("one-gpu")
    created = cluster.pod("p", q["a"], template="one-gpu")
    sched = cluster.kaisched()
    sched.wait_cycle(3)
    cluster.stays_unbound("p", 1.0)  # no claim yet: kaisched waits for the resourceclaim controller
    assert cluster.claims() == {}, "kaisched never makes claims itself in Kubernetes mode"

    name = cluster.make_claim("p", "one-gpu")
    assert cluster.wait_bound(["p"]) == {"p": home}
    claim = cluster.claim_of(name)
    allocation = claim["status"]["allocation"]
    assert allocation["devices"]["results"] == [{"request": "gpu", "driver": DRIVER, "pool": home, "device": "gpu-0"}]
    assert allocation["nodeSelector"] == node_local(home)
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": created["metadata"]["uid"]}]
    assert FINALIZER in claim["metadata"]["finalizers"]
    kubelet.wait_running(cluster.ns, "p")
    assert cluster.events("Scheduled", "p")
    assert not cluster.events("FailedBinding")
    assert not [r for r in sched.records() if r.get("event") == "write failed"], cluster.describe()


def test_a_shared_claim_is_allocated_once_and_both_pods_run_on_its_node(
        cluster: DraCluster, kubelet: FakeKubelet) -> None:
    cluster.add_node(1)
    cluster.add_node(1)
    q = cluster.queues(2, {"a": 2})
    cluster.claim("shared", q["a"])
    pods = [cluster.pod(f"s{i}", q["a"], claim="shared") for i in range(2)]
    cluster.kaisched()
    placed = cluster.wait_bound(["s0", "s1"])
    claim = cluster.claim_of("shared")
    [(_, home, device)] = devices_of(claim)
    assert set(placed.values()) == {home}, placed
    assert claim["status"]["allocation"]["nodeSelector"] == node_local(home)
    assert sorted(e["uid"] for e in claim["status"]["reservedFor"]) == sorted(p["metadata"]["uid"] for p in pods)
    assert device == "gpu-0"
    for name in ("s0", "s1"):
        kubelet.wait_running(cluster.ns, name)
    assert not cluster.seen_twice


def test_three_one_device_claims_on_two_devices_bind_two_pods_and_explain_the_third(
        cluster: DraCluster, kubelet: FakeKubelet) -> None:
    home = cluster.add_node(2)
    q = cluster.queues(3, {"a": 3})
    names = [f"c{i}" for i in range(3)]
    for i, claim_name in enumerate(names):
        cluster.claim(claim_name, q["a"])
        cluster.pod(f"p{i}", q["a"], claim=claim_name)
    cluster.kaisched()

    def two_bound() -> list[str] | None:
        cluster.check_no_device_twice()
        pods = cluster.pods()
        bound = sorted(n for n, p in pods.items() if node_of(p))
        return bound if len(bound) == 2 else None

    bound = wait_until(two_bound, WAIT_S, "two pods bound", describe=cluster.describe)
    [left] = sorted({"p0", "p1", "p2"} - set(bound))
    cluster.stays_unbound(left, 2.0)
    claims = cluster.claims()
    allocated = sorted(d for c in claims.values() for d in devices_of(c))
    assert allocated == [(DRIVER, home, "gpu-0"), (DRIVER, home, "gpu-1")]
    assert not devices_of(claims[f"c{left[1]}"]), "the pending pod's claim is not allocated"
    assert not cluster.seen_twice

    def condition() -> JSON | None:
        group = cluster.kube.pod_group(cluster.ns, left) or {}
        conditions = (group.get("status") or {}).get("schedulingConditions") or []
        return conditions[-1] if conditions else None

    found = wait_until(condition, WAIT_S, f"PodGroup {left}: a scheduling condition", describe=cluster.describe)
    assert found["type"] == "UnschedulableOnNodePool" and found["status"] == "True"
    # the fit error names the claim's devices (its request: 1 x the DeviceClass)
    assert "ResourceClaim" in found["message"] and f"gpu (1 x {DEVICE_CLASS})" in found["message"], found
    events = wait_until(lambda: cluster.events("Unschedulable", left), WAIT_S, f"Unschedulable events of {left}")
    assert all("ResourceClaim" in e["message"] for e in events)
    for name in bound:
        kubelet.wait_running(cluster.ns, name)


def test_a_queue_below_its_share_reclaims_a_dra_gpu_from_a_queue_over_it(
        cluster: DraCluster, kubelet: FakeKubelet) -> None:
    home = cluster.add_node(2)
    q = cluster.queues(2, {"a": 1, "b": 1})
    cluster.template("one-gpu")
    b_claims = {}
    for i in range(2):  # queue b takes both GPUs while a is idle: one over its quota
        cluster.pod(f"b{i}", q["b"], template="one-gpu")
        b_claims[f"b{i}"] = cluster.make_claim(f"b{i}", "one-gpu")
    sched = cluster.kaisched()
    cluster.wait_bound(["b0", "b1"])
    for name in ("b0", "b1"):
        kubelet.wait_running(cluster.ns, name)
    held = {pod: devices_of(cluster.claim_of(claim)) for pod, claim in b_claims.items()}
    assert sorted(d for devs in held.values() for d in devs) == [(DRIVER, home, "gpu-0"), (DRIVER, home, "gpu-1")]

    cluster.pod("a0", q["a"], template="one-gpu")
    a_claim = cluster.make_claim("a0", "one-gpu")

    # one of b's pods is evicted and reaped by the kubelet; kaisched removes its reservation and deallocates its
    # claim (what the resourceclaim controller does when it removes the last reservation)
    def evicted() -> str | None:
        cluster.check_no_device_twice()
        pods = cluster.pods()
        gone = [p for p in ("b0", "b1") if p not in pods]
        return gone[0] if gone else None

    victim = wait_until(evicted, WAIT_S, "one of b's pods evicted", describe=cluster.describe)

    def released() -> JSON | None:
        cluster.check_no_device_twice()
        claim = cluster.claim_of(b_claims[victim])
        status = claim.get("status") or {}
        finalizers = claim["metadata"].get("finalizers") or ()
        # (two writes: the status, then the finalizer once the claim is deallocated)
        return claim if not status.get("reservedFor") and not status.get("allocation") and \
            FINALIZER not in finalizers else None

    wait_until(released, WAIT_S, f"the claim of {victim} released and its finalizer removed",
               describe=cluster.describe)
    cluster.delete_claim(b_claims[victim])  # the controller deletes the claim of a pod that is gone

    assert cluster.wait_bound(["a0"]) == {"a0": home}
    assert devices_of(cluster.claim_of(a_claim)) == held[victim], "a's claim got the device the victim freed"
    survivor = "b1" if victim == "b0" else "b0"
    assert node_of(cluster.kube.pod(cluster.ns, survivor)) == home
    assert devices_of(cluster.claim_of(b_claims[survivor])) == held[survivor]
    assert [e["involvedObject"]["name"] for e in cluster.events("Evict")] == [victim]
    assert sum(r.get("evictions", 0) for r in sched.cycles()) == 1, "one victim, evicted once"
    assert not cluster.seen_twice
    kubelet.wait_running(cluster.ns, "a0")


DENY_POLICY = "kaisched-test-deny-claim-status"


def deny_claim_status(kube: Kube, label: str) -> None:
    """A ValidatingAdmissionPolicy refusing every status write of the claims labelled ``label=true``."""
    kube.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": DENY_POLICY},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                                                         "operations": ["UPDATE"],
                                                         "resources": ["resourceclaims/status"]}]},
                 "validations": [{"expression": "false", "message": "claim status writes are refused by the test"}]}})
    kube.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": DENY_POLICY},
        "spec": {"policyName": DENY_POLICY, "validationActions": ["Deny"],
                 "matchResources": {"objectSelector": {"matchLabels": {label: "true"}}}}})


def allow_claim_status(kube: Kube) -> None:
    kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{DENY_POLICY}")
    kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{DENY_POLICY}")


def test_a_pod_whose_claim_cannot_be_written_is_not_bound(cluster: DraCluster, kubelet: FakeKubelet) -> None:
    home = cluster.add_node(1)
    q = cluster.queues(1, {"a": 1})
    label = f"kaisched.test/deny-{cluster.id}"
    cluster.claim("denied", q["a"], labels={label: "true"})
    deny_claim_status(cluster.kube, label)
    try:
        def refused() -> bool:  # the policy is in force once the server refuses a status write of the claim
            answer = cluster.kube.client.patch(f"{claims_path(cluster.ns)}/denied/status",
                                               params={"dryRun": "All"}, json={"status": {}}, headers=MERGE)
            return answer.status_code in (403, 422)
        wait_until(refused, WAIT_S, "the ValidatingAdmissionPolicy in force")
        cluster.pod("p", q["a"], claim="denied")
        cluster.kaisched()
        failed = wait_until(lambda: cluster.events("FailedBinding", "p"), WAIT_S, "a FailedBinding event of p",
                            describe=cluster.describe)
        assert "ResourceClaim" in failed[0]["message"] and "denied" in failed[0]["message"], failed
        cluster.stays_unbound("p", 2.0)
        assert not devices_of(cluster.claim_of("denied"))
        pod = cluster.kube.pod(cluster.ns, "p") or {}
        conditions = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or ()}
        assert conditions["PodScheduled"]["status"] == "False"
    finally:
        allow_claim_status(cluster.kube)
    # allowed again: a later cycle writes the claim, then binds the pod
    assert cluster.wait_bound(["p"]) == {"p": home}
    claim = cluster.claim_of("denied")
    assert devices_of(claim) == [(DRIVER, home, "gpu-0")]
    assert [e["name"] for e in claim["status"]["reservedFor"]] == ["p"]


def service_account_kubeconfig(server: KubeApiServer, kube: Kube, tmp_path: Path) -> Path:
    """The shipped RBAC (deploy/rbac.yaml: ServiceAccount, ClusterRole and its binding) applied, and a kubeconfig
    with a token of that ServiceAccount."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if isinstance(d, dict)]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    namespace = sa["metadata"]["namespace"]
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                ok=(201, 409))
    paths = {"ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
             "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
             "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}
    for doc in docs:
        if doc["kind"] in paths:
            kube.create(paths[doc["kind"]], doc, ok=(201, 409))
    answer = kube.client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa['metadata']['name']}/token",
                              json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                    "spec": {"expirationSeconds": 3600}})
    assert answer.status_code == 201, answer.text
    token = answer.json()["status"]["token"]
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
              "clusters": [{"name": "c", "cluster": {"server": server.url,
                                                     "certificate-authority": str(server.ca_path)}}],
              "users": [{"name": "sa", "user": {"token": token}}],
              "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": namespace}}]}
    path = tmp_path / "sa-kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def refusals(records: list[JSON]) -> list[JSON]:
    """The log records that tell of a refused request (403 / Forbidden), judged without the timestamp, whose
    digits can read 403 by chance."""
    def refused(record: JSON) -> bool:
        text = str({k: v for k, v in record.items() if k != "timestamp"})
        return re.search(r"\b403\b", text) is not None or "forbidden" in text.lower()
    return [r for r in records if refused(r)]


def test_the_shipped_cluster_role_is_enough_for_dra(cluster: DraCluster, kubelet: FakeKubelet) -> None:
    home = cluster.add_node(1)
    q = cluster.queues(1, {"a": 1})
    cluster.template("one-gpu")
    created = cluster.pod("p", q["a"], template="one-gpu")
    name = cluster.make_claim("p", "one-gpu")
    sched = cluster.kaisched(kubeconfig=service_account_kubeconfig(cluster.server, cluster.kube, cluster.tmp_path))
    try:
        assert cluster.wait_bound(["p"]) == {"p": home}
    except WaitTimeout:
        raise AssertionError(f"not bound with the shipped ClusterRole; {cluster.describe()}") from None
    claim = cluster.claim_of(name)
    assert devices_of(claim) == [(DRIVER, home, "gpu-0")]
    assert claim["status"]["reservedFor"][0]["uid"] == created["metadata"]["uid"]
    kubelet.wait_running(cluster.ns, "p")
    forbidden = refusals(sched.records())
    assert not forbidden, forbidden[:5]
    # the reservation of a pod that is gone is removed with those permissions too
    cluster.kube.delete(f"{pods_path(cluster.ns)}/p", grace_seconds=0)

    def released() -> JSON | None:
        got = cluster.claim_of(name)
        return got if not (got.get("status") or {}).get("reservedFor") else None

    wait_until(released, WAIT_S, "the deleted pod's reservation removed", describe=cluster.describe)
    forbidden = refusals(sched.records())
    assert not forbidden, forbidden[:5]
