"""Taking over from KAI (docs/migrating-from-kai.md): ``kaisched run`` starts on the state KAI's scheduler and binder
left behind (pods bound with ``runai-gpu-group`` labels, a reservation pod per shared GPU in
``kai-resource-reservation``, BindRequests, GPU env ConfigMaps) and adopts the running pods with their GPU groups:
nothing is double-booked, nothing running is evicted, KAI's objects are left as they are."""

from __future__ import annotations

from typing import Any

from kaisched.framework.config import SchedulerConfig
from kaisched.kube.client import KubeClient
from kaisched.kube.runner import KubeScheduler, RunOptions
from tests.kubefake.server import FakeApiServer
from tests.kubefake.test_runner import NS, node, pod, pod_group, queue

RESERVATION_NS = "kai-resource-reservation"


def with_group(obj: dict[str, Any], group: str) -> dict[str, Any]:
    obj["metadata"]["labels"]["runai-gpu-group"] = group
    obj["metadata"]["annotations"]["runai/shared-gpu-configmap"] = f"{obj['metadata']['name']}-shared-gpu"
    return obj


def reservation_pod(name: str, node_name: str, group: str) -> dict[str, Any]:
    """KAI's binder's reservation pod: one whole GPU held for the fractional pods of GPU group ``group``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": RESERVATION_NS,
                         "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group}},
            "spec": {"nodeName": node_name, "schedulerName": "default-scheduler",
                     "containers": [{"name": "reservation", "image": "kai-resource-reservation",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def kai_left_behind(server: FakeApiServer) -> None:
    """node-0 full: seven whole GPUs in use and the eighth shared by two half-GPU pods (GPU group g-1, its
    reservation pod, its env ConfigMaps); node-1 empty; a BindRequest KAI's binder never carried out."""
    server.seed(node("node-0"))
    server.seed(node("node-1"))
    server.seed(queue("root", 16))
    server.seed(queue("team-a", 16, "root"))
    server.seed(pod_group("whole", "team-a", 1))
    server.seed(pod("whole-0", "team-a", 7, group="whole", node_name="node-0", phase="Running"))
    for name in ("half-a", "half-b"):
        server.seed(pod_group(name, "team-a", 1))
        server.seed(with_group(pod(name, "team-a", 0, group=name, node_name="node-0", phase="Running",
                                   fraction="0.5"), "g-1"))
        server.seed({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"{name}-shared-gpu", "namespace": NS},
                     "data": {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}})
    server.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RESERVATION_NS}})
    server.seed(reservation_pod("gpu-reservation-node-0-abcde", "node-0", "g-1"))
    server.seed(pod_group("late", "team-a", 1))
    server.seed(pod("late-0", "team-a", 1, group="late"))
    server.seed({"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                 "metadata": {"name": "late-0-xyz", "namespace": NS},
                 "spec": {"podName": "late-0", "selectedNode": "node-0", "receivedResourceType": "Regular"}})
    # new work arrives as kaisched takes over
    server.seed(pod_group("new-half", "team-a", 1))
    server.seed(pod("new-half-0", "team-a", 0, group="new-half", fraction="0.5"))
    server.seed(pod_group("new-whole", "team-a", 1))
    server.seed(pod("new-whole-0", "team-a", 1, group="new-whole"))


def test_kaisched_adopts_kais_running_pods_without_double_booking(server: FakeApiServer,
                                                                  client: KubeClient) -> None:
    kai_left_behind(server)
    sched = KubeScheduler(client, SchedulerConfig(), RunOptions(listen_port=None, schedule_period=0.05))
    try:
        sched.start()
        assert sched.wait_synced(10.0)
        result = sched.run_cycle()
        assert sched.writer is not None and sched.writer.drain(10.0)
    finally:
        sched.close()
    assert not result.evictions and not server.requests_matching("POST", r"/eviction")
    placed = {b.pod: b.node for b in result.binds}
    # node-0 has no GPU left (seven whole, the eighth shared by g-1 at 100 %): the new work and the pod whose
    # BindRequest KAI's binder never carried out all go to node-1
    assert placed == {f"{NS}/late-0": "node-1", f"{NS}/new-half-0": "node-1", f"{NS}/new-whole-0": "node-1"}
    half = server.get_object("v1", "Pod", "new-half-0", NS)
    assert half is not None and half["metadata"]["labels"]["runai-gpu-group"] != "g-1"
    # KAI's objects are left as they were: the BindRequest, the reservation pod, the env ConfigMaps
    assert server.get_object("scheduling.run.ai/v1alpha2", "BindRequest", "late-0-xyz", NS) is not None
    assert server.get_object("v1", "Pod", "gpu-reservation-node-0-abcde", RESERVATION_NS) is not None
    assert server.get_object("v1", "ConfigMap", "half-a-shared-gpu", NS) is not None
    node0 = next(n for n in result.nodes if n.name == "node-0")
    assert node0.idle == 0
    assert [sorted(g.to_dict()["pods"]) for g in node0.shared] == [[f"{NS}/half-a", f"{NS}/half-b"]]
