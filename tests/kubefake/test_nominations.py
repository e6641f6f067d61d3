"""Nominations in Kubernetes mode, against the fake API server: a reclaimer pipelined onto the GPUs its victims
free gets ``status.nominatedNodeName``; while they terminate it is pipelined again and nothing is rewritten; once
they are gone it is bound there and its nomination cleared."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kaisched.framework.config import SchedulerConfig
from kaisched.kube.client import KubeClient
from kaisched.kube.runner import KubeScheduler, RunOptions
from tests.kubefake.server import FakeApiServer
from tests.kubefake.test_runner import NS, base_cluster, cycle, get_pod, pod, pod_group, queue, settle

NOMINATION_PATCH = r"/pods/a-0/status$"


@pytest.fixture
def scheduler(server: FakeApiServer) -> Iterator[KubeScheduler]:
    api = KubeClient.from_url(server.url, timeout=5.0, trust_env=False)
    sched = KubeScheduler(api, SchedulerConfig(), RunOptions(listen_port=None, schedule_period=0.05))
    try:
        yield sched
    finally:
        sched.close()
        api.close()


def test_a_reclaimer_is_nominated_and_bound_where_it_was_pipelined(server: FakeApiServer,
                                                                   scheduler: KubeScheduler) -> None:
    base_cluster(server, nodes=1)
    server.seed(queue("root", 8))
    server.seed(queue("team-a", 4, "root"))
    server.seed(queue("team-b", 4, "root"))
    for i in range(8):  # team-b runs on all 8 GPUs, 4 over its quota
        server.seed(pod_group(f"b-{i}", "team-b", 1))
        server.seed(pod(f"b-{i}", "team-b", 1, group=f"b-{i}", node_name="node-0", phase="Running"))
    server.seed(pod_group("a", "team-a", 1))
    server.seed(pod("a-0", "team-a", 2, group="a"))
    sched = scheduler
    sched.start()
    assert sched.wait_synced(10.0)
    cycle(sched)
    evicted = [p["metadata"]["name"] for p in server.list_objects("v1", "Pod", NS) if
               p["metadata"].get("deletionTimestamp")]
    assert len(evicted) == 2
    reclaimer = get_pod(server, "a-0")
    assert not reclaimer["spec"].get("nodeName")
    assert reclaimer["status"].get("nominatedNodeName") == "node-0"
    writes = len(server.requests_matching("PATCH", NOMINATION_PATCH))
    settle(sched, server)
    cycle(sched)  # the victims still terminate: pipelined again, the nomination is not rewritten
    assert get_pod(server, "a-0")["status"].get("nominatedNodeName") == "node-0"
    assert len(server.requests_matching("PATCH", NOMINATION_PATCH)) == writes
    for name in evicted:  # the kubelet finishes them
        server.delete_object("v1", "Pod", name, NS)
    settle(sched, server)
    cycle(sched)
    assert get_pod(server, "a-0")["spec"].get("nodeName") == "node-0"
    settle(sched, server)
    assert not get_pod(server, "a-0")["status"].get("nominatedNodeName")
