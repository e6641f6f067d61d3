"""Fixtures for the contract tier (marker ``kube``, deselected by default; ``make test`` runs ``-m kube``).

- ``kube_apiserver`` (session): a real kube-apiserver (``KUBE_VERSION``, 1.35) + etcd on loopback. Skips,
  saying how to build it, only when the binary is absent (``make kube-apiserver``); any other start failure
  is an error.
- ``kube_http`` (function): an httpx2 client on it with the admin token.
- ``kube_namespace`` (function): a fresh namespace, so tests sharing the session's server do not collide.
- ``fake_kubelet`` (function): a :class:`FakeKubelet` on that server, stopped after the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.kube.apiserver import KUBE_VERSION, KubeApiServer, apiserver_binary, cache_dir
from tests.kube.fake_kubelet import FakeKubelet

_HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/kube is a contract test: mark it ``kube`` before ``-m`` selects."""
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.kube)


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[KubeApiServer]:
    if apiserver_binary() is None:
        pytest.skip(
            f"kube-apiserver {KUBE_VERSION} is not built (expected at {cache_dir() / 'kube-apiserver'}); "
            "run `make kube-apiserver` (scripts/kube-apiserver.sh build, about 6 min) to enable the contract tier"
        )
    server = KubeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_http(kube_apiserver: KubeApiServer) -> Iterator[httpx2.Client]:
    with kube_apiserver.http_client() as client:
        yield client


@pytest.fixture
def kube_namespace(kube_http: httpx2.Client) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    answer = kube_http.post("/api/v1/namespaces", json=namespace)
    assert answer.status_code == 201, answer.text
    return name


@pytest.fixture
def fake_kubelet(kube_apiserver: KubeApiServer) -> Iterator[FakeKubelet]:
    with FakeKubelet.for_server(kube_apiserver) as kubelet:
        yield kubelet
