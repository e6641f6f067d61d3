"""Fixtures: a fake API server per test, a KubeClient on it, and informers that are always stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kaisched.kube.backoff import Backoff
from kaisched.kube.client import KubeClient
from kaisched.kube.informer import Informer
from tests.kubefake.server import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer(bookmark_interval=0.2).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: FakeApiServer) -> Iterator[KubeClient]:
    c = KubeClient.from_url(server.url, timeout=5.0, trust_env=False)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def make_informer(client: KubeClient) -> Iterator[Callable[..., Informer]]:
    """``make_informer(kind, **kwargs)``: a started informer with fast backoff, stopped after the test."""
    started: list[Informer] = []

    def make(kind: Any, *, start: bool = True, api: Any = None, **kwargs: Any) -> Informer:
        kwargs.setdefault("watch_timeout", 30.0)
        kwargs.setdefault("seed", 7)
        kwargs.setdefault("backoff", Backoff(0.05, 0.4, seed=1))
        inf = Informer(api or client, kind, **kwargs)
        started.append(inf)
        if start:
            inf.start()
        return inf

    yield make
    for inf in started:
        inf.stop()
    for inf in started:
        inf.stop(timeout=5.0)


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` passes (every wait in these tests is bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
