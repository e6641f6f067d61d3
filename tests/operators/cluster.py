"""One operator test's objects and the users' manifests it submits.

:class:`OperatorCluster` extends the contract tier's :class:`~tests.kube.contract_helpers.ContractCluster`
(labelled nodes and queues, ``kaisched run`` processes) with the operators' custom resources: it creates them,
reads them back and removes them first at clean-up, so that no operator recreates a pod the clean-up deletes.

The manifest builders write what the operators' documentation shows (Kubeflow's ``pytorch-simple`` and
``tensorflow-mnist`` MPIJob, KubeRay's ``ray-cluster.sample`` and ``ray-job.sample``), with what KAI's
documentation adds: the ``kai.scheduler/queue`` label on the workload and ``schedulerName: kai-scheduler`` in
each pod template (KubeRay, run with ``--batch-scheduler=kai-scheduler``, sets the scheduler name itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.kube.contract_helpers import (
    GPU,
    JSON,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    WAIT_S,
    ContractCluster,
    KaischedProcess,
    Kube,
    create_node,
    node,
    node_of,
    pod_groups_path,
    pods_path,
    wait_until,
)

if TYPE_CHECKING:
    from tests.operators.conftest import OperatorStack

TEST_LABEL = "kaisched.test/operators"
KUBEFLOW = "/apis/kubeflow.org/v1"
RAY = "/apis/ray.io/v1"
#: the operators' resources a test may create, removed first at clean-up (plural paths under the group)
OPERATOR_RESOURCES = (f"{KUBEFLOW}/pytorchjobs", f"{KUBEFLOW}/mpijobs", f"{KUBEFLOW}/tfjobs",
                      f"{KUBEFLOW}/xgboostjobs", f"{KUBEFLOW}/mxjobs", f"{KUBEFLOW}/paddlejobs",
                      f"{RAY}/rayjobs", f"{RAY}/rayservices", f"{RAY}/rayclusters")
NODE_EPHEMERAL_STORAGE = "100Gi"
PYTORCH_IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
HOROVOD_IMAGE = "horovod/horovod:0.20.0-tf2.3.0-torch1.6.0-mxnet1.5.0-py3.7-cpu"
RAY_IMAGE = "rayproject/ray:2.46.0"


def ns_path(resource: str, namespace: str, name: str | None = None) -> str:
    """``/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>]`` from ``/apis/<group>/<version>/<plural>``."""
    base, plural = resource.rsplit("/", 1)
    return f"{base}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


class OperatorCluster(ContractCluster):
    """A test's namespace, nodes, queues, schedulers and operator resources on the session's server."""

    def __init__(self, stack: OperatorStack, kube: Kube, namespace: str, tmp_path: Path) -> None:
        super().__init__(stack.server, kube, namespace, tmp_path, TEST_LABEL)
        self.stack = stack

    # ---- objects
    def add_nodes(self, count: int, gpus: int = 8) -> list[str]:
        """Ready nodes with ``gpus`` GPUs each and, as a kubelet reports it, ephemeral storage (the MPIJob
        launcher's init container asks for some)."""
        names = [f"n{self.id}-{len(self.nodes) + i}" for i in range(count)]
        for name in names:
            manifest = node(name, gpus, labels=self.labels)
            for part in ("capacity", "allocatable"):
                manifest["status"][part]["ephemeral-storage"] = NODE_EPHEMERAL_STORAGE
            create_node(self.kube, manifest)
        self.nodes.extend(names)
        return names

    def create(self, resource: str, manifest: Mapping[str, Any]) -> JSON:
        """Create an operator resource (``resource`` as in :data:`OPERATOR_RESOURCES`) in the namespace."""
        return self.kube.create(ns_path(resource, self.ns), {**manifest, "metadata": {
            **manifest.get("metadata", {}), "namespace": self.ns}})

    def get(self, resource: str, name: str) -> JSON | None:
        return self.kube.get(ns_path(resource, self.ns, name))

    def patch(self, resource: str, name: str, patch: Mapping[str, Any]) -> JSON:
        answer = self.kube.client.patch(ns_path(resource, self.ns, name), json=dict(patch),
                                        headers={"Content-Type": "application/merge-patch+json"})
        if answer.status_code != 200:
            raise AssertionError(f"PATCH {resource} {name}: {answer.status_code} {answer.text[:500]}")
        patched: JSON = answer.json()
        return patched

    def pod_groups(self) -> dict[str, JSON]:
        return self.kube.pod_groups(self.ns)

    def live_pods(self, labels: Mapping[str, str] | None = None) -> dict[str, JSON]:
        """The namespace's pods that are not being deleted, optionally only those with ``labels``."""
        return {name: p for name, p in self.pods().items() if not p["metadata"].get("deletionTimestamp")
                and all(p["metadata"].get("labels", {}).get(k) == v for k, v in (labels or {}).items())}

    # ---- waits
    def wait_pods(self, count: int, what: str, labels: Mapping[str, str], timeout: float = WAIT_S) -> dict[str, JSON]:
        """Once exactly ``count`` live pods (with ``labels``) exist, those pods."""
        def enough() -> dict[str, JSON] | None:
            self.on_poll()
            pods = self.live_pods(labels)
            return pods if len(pods) == count else None
        return wait_until(enough, timeout, f"{count} pods of {what}",
                          describe=lambda: f"pods: {sorted(self.live_pods(labels))}\n{self.describe()}")

    def wait_all_bound(self, count: int, what: str, labels: Mapping[str, str],
                       timeout: float = WAIT_S) -> dict[str, str]:
        """Once exactly ``count`` live pods (with ``labels``) exist and each is bound: ``{pod: node}``."""
        def bound() -> dict[str, str] | None:
            self.on_poll()
            pods = self.live_pods(labels)
            placed = {n: node_of(p) for n, p in pods.items()}
            return placed if len(placed) == count and all(placed.values()) else None
        return wait_until(bound, timeout, f"{count} pods of {what} bound",
                          describe=lambda: f"pods: { {n: node_of(p) for n, p in self.live_pods(labels).items()} }"
                                           f"\n{self.describe()}")

    def wait_pod_group(self, name: str, timeout: float = WAIT_S) -> JSON:
        return wait_until(lambda: self.kube.pod_group(self.ns, name), timeout, f"PodGroup {name}",
                          describe=lambda: f"PodGroups: {sorted(self.pod_groups())}\n{self.describe()}")

    def wait_more_cycles(self, sched: KaischedProcess, count: int) -> None:
        """Wait until ``sched`` has run ``count`` cycles more than it has now (a pending gang has had that many
        chances to be bound)."""
        now = max((int(r.get("cycle", 0)) for r in sched.cycles()), default=0)
        sched.wait_cycle(now + count, timeout=WAIT_S)

    def describe(self) -> str:
        return "\n".join([super().describe(), self.stack.describe()])

    # ---- clean-up: the operators' resources first, so that no operator recreates what is deleted next
    def cleanup(self) -> None:
        for proc in self.processes:
            proc.kill()
        for resource in OPERATOR_RESOURCES:
            self.kube.delete_collection(ns_path(resource, self.ns))
        # finalizers (a RayJob's) are removed by the operator; wait a little for the objects to go
        wait_until(lambda: not any(self.kube.items(ns_path(r, self.ns)) for r in OPERATOR_RESOURCES), WAIT_S,
                   "the test's operator resources deleted", interval=0.2)
        super().cleanup()
        # no namespace controller runs: the namespace stays Terminating, empty
        self.kube.delete("/api/v1/namespaces/" + self.ns)
        leftover = self.kube.items(pods_path(self.ns))
        assert not leftover, f"pods left in {self.ns}: {[p['metadata']['name'] for p in leftover]}"


# ---------------------------------------------------------------------------------------------- manifests
def _gpu_container(name: str, image: str, gpus: int, command: list[str] | None = None) -> JSON:
    container: JSON = {"name": name, "image": image, "imagePullPolicy": "Always"}
    if command:
        container["command"] = command
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    return container


def pytorchjob(name: str, queue: str, workers: int, gpus: int = 1, *, elastic: tuple[int, int] | None = None,
               master: bool = True) -> JSON:
    """Kubeflow's ``pytorch-simple`` (a Master and ``workers`` Workers, ``gpus`` GPUs each) for KAI; with
    ``elastic=(min, max)`` the ``elasticPolicy`` of its elastic example (``rdzvBackend: c10d``)."""
    def replica(replicas: int) -> JSON:
        return {"replicas": replicas, "restartPolicy": "OnFailure",
                "template": {"spec": {"schedulerName": SCHEDULER_NAME, "containers": [_gpu_container(
                    "pytorch", PYTORCH_IMAGE, gpus, ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])]}}}
    specs: JSON = {"Worker": replica(workers)}
    if master:
        specs = {"Master": replica(1), **specs}
    spec: JSON = {"pytorchReplicaSpecs": specs}
    if elastic is not None:
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": elastic[0], "maxReplicas": elastic[1],
                                 "maxRestarts": 100}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}}, "spec": spec}


def mpijob(name: str, queue: str, workers: int, gpus: int = 1) -> JSON:
    """The Training Operator's ``tensorflow-mnist`` MPIJob (Horovod) for KAI: a launcher without GPUs and
    ``workers`` workers with ``gpus`` each."""
    command = ["mpirun", "--allow-run-as-root", "-np", str(workers), "-bind-to", "none", "-map-by", "slot",
               "python", "/examples/tensorflow2_mnist.py"]
    def replica(replicas: int, container: JSON) -> JSON:
        return {"replicas": replicas,
                "template": {"spec": {"schedulerName": SCHEDULER_NAME, "containers": [container]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                     "mpiReplicaSpecs": {
                         "Launcher": replica(1, _gpu_container("mpi", HOROVOD_IMAGE, 0, command)),
                         "Worker": replica(workers, _gpu_container("mpi", HOROVOD_IMAGE, gpus))}}}


def ray_cluster_spec(groups: Mapping[str, tuple[int, int, int]], gpus: int = 1, *,
                     scheduler_name: str | None = None) -> JSON:
    """KubeRay's ``ray-cluster.sample`` spec: a head (no GPU) and one worker group per ``{name: (replicas,
    minReplicas, maxReplicas)}``, each worker with ``gpus`` GPUs; ``schedulerName`` in the templates when
    given (KubeRay run with ``--batch-scheduler=kai-scheduler`` sets it itself)."""
    def container(name: str, worker_gpus: int) -> JSON:
        resources: JSON = {"limits": {"cpu": "1", "memory": "2G"}, "requests": {"cpu": "1", "memory": "2G"}}
        if worker_gpus:
            resources["limits"][GPU] = str(worker_gpus)
            resources["requests"][GPU] = str(worker_gpus)
        return {"name": name, "image": RAY_IMAGE, "resources": resources}
    def template(first: JSON) -> JSON:
        spec: JSON = {"containers": [first]}
        if scheduler_name:
            spec = {"schedulerName": scheduler_name, **spec}
        return {"spec": spec}
    head = container("ray-head", 0)
    head["ports"] = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                     {"containerPort": 10001, "name": "client"}]
    return {
        "rayVersion": "2.46.0",
        "headGroupSpec": {"rayStartParams": {}, "template": template(head)},
        "workerGroupSpecs": [
            {"groupName": group, "replicas": replicas, "minReplicas": low, "maxReplicas": high,
             "rayStartParams": {}, "template": template(container("ray-worker", gpus))}
            for group, (replicas, low, high) in groups.items()],
    }


def raycluster(name: str, queue: str, groups: Mapping[str, tuple[int, int, int]], gpus: int = 1) -> JSON:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}}, "spec": ray_cluster_spec(groups, gpus)}


def rayjob(name: str, queue: str, groups: Mapping[str, tuple[int, int, int]], gpus: int = 1, *,
           scheduler_name: str | None = None) -> JSON:
    """KubeRay's ``ray-job.sample``: a RayCluster made for the job and deleted when it ends
    (``shutdownAfterJobFinishes``, ``ttlSecondsAfterFinished: 0``)."""
    spec: JSON = {"entrypoint": "python /home/ray/samples/sample_code.py", "shutdownAfterJobFinishes": True,
                  "ttlSecondsAfterFinished": 0,
                  "rayClusterSpec": ray_cluster_spec(groups, gpus, scheduler_name=scheduler_name)}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}}, "spec": spec}


def rayservice(name: str, queue: str, groups: Mapping[str, tuple[int, int, int]], gpus: int = 1, *,
               scheduler_name: str | None = None) -> JSON:
    """KubeRay's ``ray-service.sample``: a Serve application on a RayCluster the RayService makes."""
    serve = ("applications:\n  - name: fruit_app\n    import_path: fruit.deployment_graph\n"
             "    route_prefix: /fruit\n")
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"serveConfigV2": serve,
                     "rayClusterConfig": ray_cluster_spec(groups, gpus, scheduler_name=scheduler_name)}}


__all__ = ["KUBEFLOW", "RAY", "OperatorCluster", "mpijob", "ns_path", "pod_groups_path", "pods_path", "pytorchjob",
           "raycluster", "rayjob", "rayservice"]
