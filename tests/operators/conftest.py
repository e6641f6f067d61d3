"""Fixtures for the operator tier (marker ``operators``, deselected by default; ``make test`` runs
``-m operators``): the real Kubeflow Training Operator and KubeRay operator on a real kube-apiserver, with
``kaisched run`` scheduling what they create.

- ``operator_stack`` (session): one API server (the contract tier's, ``scripts/kube-apiserver.sh``) with KAI's
  CRDs and the operators' CRDs (from their cached module versions) installed, both operators running
  (:mod:`tests.operators.operators`), a fake kubelet for every namespace, a stand-in garbage collector and a
  fake Ray dashboard that KubeRay reaches through ``HTTP_PROXY`` (:mod:`tests.operators.fake_ray`).
  Skips, saying how to build them, only when the API server or an operator is not built; any other start
  failure is an error.
- ``cluster`` (function): a fresh namespace, nodes and queues labelled for this test, and ``kaisched run``
  started on demand (:meth:`OperatorCluster.kaisched`); everything the test made is removed afterwards, the
  operators' objects first so that they do not recreate pods.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.kube.apiserver import KUBE_VERSION, KubeApiServer, apiserver_binary, cache_dir
from tests.kube.contract_helpers import Kube, install_crds
from tests.kube.fake_kubelet import FakeKubelet
from tests.operators.cluster import OperatorCluster
from tests.operators.fake_ray import FakeRayDashboard
from tests.operators.operators import (
    KAI_BATCH_SCHEDULER,
    KUBERAY_OPERATOR,
    TRAINING_OPERATOR,
    GarbageCollector,
    OperatorBuild,
    OperatorProcess,
    cached_build,
)

_HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/operators is an operator test: mark it ``operators`` before ``-m`` selects."""
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.operators)


@dataclass
class OperatorStack:
    """The session's API server, operators, kubelet, garbage collector and Ray dashboard."""

    server: KubeApiServer
    builds: dict[str, OperatorBuild]
    operators: dict[str, OperatorProcess]
    kubelet: FakeKubelet
    gc: GarbageCollector
    ray_dashboard: FakeRayDashboard
    logs: Path
    crds: list[str] = field(default_factory=list)

    def kuberay_env(self) -> dict[str, str]:
        """KubeRay reaches the (fake) Ray dashboards through ``HTTP_PROXY``; the API server directly."""
        return kuberay_env(self.ray_dashboard)

    def restart_kuberay(self, batch_scheduler: str | None) -> OperatorProcess:
        """Stop the running KubeRay operator and start it again with this ``--batch-scheduler`` (None: none)."""
        old = self.operators[KUBERAY_OPERATOR]
        old.stop()
        log = self.logs / f"{KUBERAY_OPERATOR}-{len(list(self.logs.glob(KUBERAY_OPERATOR + '*.log')))}.log"
        new = OperatorProcess(old.build, self.server, log, env=self.kuberay_env(), batch_scheduler=batch_scheduler)
        with self.server.http_client(timeout=30.0) as client:
            self.operators[KUBERAY_OPERATOR] = new.start(Kube(client))
        return new

    def describe(self) -> str:
        gc = f"garbage collector: deleted {self.gc.deleted[-10:]}, errors {self.gc.errors[-5:]}"
        kubelet = f"kubelet: errors {self.kubelet.errors[-5:]}"
        return "\n".join([gc, kubelet, *(op.describe() for op in self.operators.values())])


def kuberay_env(dashboard: FakeRayDashboard) -> dict[str, str]:
    return {"HTTP_PROXY": dashboard.proxy_url, "http_proxy": dashboard.proxy_url,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture(scope="session")
def operator_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorStack]:
    if apiserver_binary() is None:
        pytest.skip(f"kube-apiserver {KUBE_VERSION} is not built (expected at {cache_dir() / 'kube-apiserver'}); "
                    "run `make kube-apiserver` to enable the operator tier")
    builds: dict[str, OperatorBuild] = {}
    for name in (TRAINING_OPERATOR, KUBERAY_OPERATOR):
        build = cached_build(name)
        if build is None:
            pytest.skip(f"{name} is not built; run `make operators` (scripts/operators.sh build) to enable the "
                        "operator tier")
        builds[name] = build
    logs = tmp_path_factory.mktemp("operators")
    server = KubeApiServer().start()
    operators: dict[str, OperatorProcess] = {}
    kubelet: FakeKubelet | None = None
    gc: GarbageCollector | None = None
    dashboard = FakeRayDashboard().start()
    try:
        with server.http_client(timeout=30.0) as client:
            kube = Kube(client)
            crds = install_crds(kube)
            for build in builds.values():
                crds += install_crds(kube, build.crd_dir, timeout=60.0)
            for name, build in builds.items():
                env = kuberay_env(dashboard) if name == KUBERAY_OPERATOR else None
                operators[name] = OperatorProcess(build, server, logs / f"{name}.log", env=env).start(kube)
        kubelet = FakeKubelet.for_server(server).start()
        kubelet.wait_synced()
        gc = GarbageCollector(server).start()
        yield OperatorStack(server, builds, operators, kubelet, gc, dashboard, logs, crds)
    finally:
        for operator in operators.values():
            print(f"---- {operator.describe()}")
            operator.stop()
        if gc is not None:
            gc.stop()
        if kubelet is not None:
            kubelet.stop()
        dashboard.stop()
        server.stop()


@pytest.fixture
def cluster(operator_stack: OperatorStack, tmp_path: Path) -> Iterator[OperatorCluster]:
    server = operator_stack.server
    with server.http_client(timeout=30.0) as client:
        kube = Kube(client)
        namespace = f"t-{uuid.uuid4().hex[:10]}"
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        made = OperatorCluster(operator_stack, kube, namespace, tmp_path)
        try:
            yield made
        finally:
            made.cleanup()


@pytest.fixture
def kuberay_without_batch_scheduler(operator_stack: OperatorStack) -> Iterator[OperatorProcess]:
    """KubeRay restarted without ``--batch-scheduler`` for one test (its KAI plugin refuses RayJobs); the
    session's KubeRay, with the plugin, is back afterwards."""
    yield operator_stack.restart_kuberay(None)
    operator_stack.restart_kuberay(KAI_BATCH_SCHEDULER)
