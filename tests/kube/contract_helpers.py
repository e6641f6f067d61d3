"""Helpers for the contract tests (``tests/kube/test_contract.py``, ``test_crds.py``) and ``benchmarks/kube_scale.py``.

- :func:`install_crds`: apply ``deploy/crds/*.yaml`` to a real API server and wait until each is Established.
- Manifests: :func:`node`, :func:`queue`, :func:`pod`, :func:`pod_group`, :func:`priority_class`.
- :class:`Kube`: a few typed calls on an ``httpx2.Client`` (create, get, list with paging, delete, the table
  ``kubectl get`` prints) that fail with the path and the server's answer.
- :class:`KaischedProcess`: ``kaisched run`` as a subprocess, its stderr (JSON log lines) in a file, with
  waits on its log, SIGKILL/SIGTERM, and its peak RSS read from ``/proc``.
- :func:`wait_until`: every wait is bounded and says what it waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx2
import pytest
import yaml

from tests.kube.apiserver import KUBE_VERSION, KubeApiServer, apiserver_binary, cache_dir

JSON = dict[str, Any]
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
GPU = "nvidia.com/gpu"
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
PODGROUPS = "/apis/scheduling.run.ai/v2alpha2"
QUEUES = "/apis/scheduling.run.ai/v2/queues"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: what kubectl asks for to print a table (the server applies the CRDs' additionalPrinterColumns)
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"
#: how a child runs the ``kaisched`` console script with this interpreter (the venv's)
KAISCHED_ARGV: tuple[str, ...] = (sys.executable, "-c", "from kaisched.cli import main; main()")


class WaitTimeout(AssertionError):
    """A bounded wait ran out (the message says what was awaited and what was seen last)."""


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str, *, interval: float = 0.1,
               describe: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); :class:`WaitTimeout` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f"; {describe()}" if describe is not None else ""
            raise WaitTimeout(f"{what}: not reached within {timeout:.0f} s{detail}")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------- API calls


class Kube:
    """Thin JSON calls on an authenticated ``httpx2.Client`` whose base URL is the API server."""

    def __init__(self, client: httpx2.Client) -> None:
        self.client = client

    def create(self, path: str, body: Mapping[str, Any], *, ok: Sequence[int] = (201,)) -> JSON:
        answer = self.client.post(path, json=dict(body))
        if answer.status_code not in ok:
            raise AssertionError(f"POST {path} ({_name(body)}): {answer.status_code} {answer.text[:500]}")
        created: JSON = answer.json()
        return created

    def get(self, path: str) -> JSON | None:
        answer = self.client.get(path)
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise AssertionError(f"GET {path}: {answer.status_code} {answer.text[:500]}")
        got: JSON = answer.json()
        return got

    def items(self, path: str, *, params: Mapping[str, str] | None = None, limit: int = 500) -> list[JSON]:
        items: list[JSON] = []
        query = {**(params or {}), "limit": str(limit)}
        while True:
            answer = self.client.get(path, params=query)
            if answer.status_code != 200:
                raise AssertionError(f"GET {path}: {answer.status_code} {answer.text[:500]}")
            body = answer.json()
            items.extend(body.get("items") or [])
            cont = (body.get("metadata") or {}).get("continue")
            if not cont:
                return items
            query["continue"] = cont

    def delete(self, path: str, *, grace_seconds: int | None = None) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds  # type: ignore[assignment]
        answer = self.client.request("DELETE", path, json=body)
        if answer.status_code not in (200, 202, 404):
            raise AssertionError(f"DELETE {path}: {answer.status_code} {answer.text[:500]}")

    def delete_collection(self, path: str, *, label_selector: str | None = None,
                          grace_seconds: int | None = None) -> None:
        params = {"labelSelector": label_selector} if label_selector else {}
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds  # type: ignore[assignment]
        answer = self.client.request("DELETE", path, params=params, json=body)
        if answer.status_code not in (200, 404):
            raise AssertionError(f"DELETE {path} (collection): {answer.status_code} {answer.text[:500]}")

    def table(self, path: str, *, params: Mapping[str, str] | None = None) -> tuple[list[JSON], list[JSON]]:
        """What ``kubectl get`` shows for ``path``: the server's Table (``Accept: ...;as=Table``). Returns the
        column definitions and one ``{column name: cell}`` per row (the Name column included)."""
        answer = self.client.get(path, headers={"Accept": TABLE_ACCEPT}, params=dict(params or {}))
        if answer.status_code != 200:
            raise AssertionError(f"GET {path} (as Table): {answer.status_code} {answer.text[:500]}")
        body = answer.json()
        if (body.get("kind"), body.get("apiVersion")) != ("Table", "meta.k8s.io/v1"):
            raise AssertionError(f"GET {path} (as Table): not a Table: {str(body)[:500]}")
        columns: list[JSON] = body["columnDefinitions"]
        names = [col["name"] for col in columns]
        return columns, [dict(zip(names, row["cells"], strict=True)) for row in body["rows"]]

    # ---- shortcuts
    def pods(self, namespace: str) -> dict[str, JSON]:
        return {p["metadata"]["name"]: p for p in self.items(f"/api/v1/namespaces/{namespace}/pods")}

    def pod(self, namespace: str, name: str) -> JSON | None:
        return self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def events(self, namespace: str, reason: str | None = None) -> list[JSON]:
        events = self.items(f"/api/v1/namespaces/{namespace}/events")
        return [e for e in events if reason is None or e.get("reason") == reason]

    def pod_groups(self, namespace: str) -> dict[str, JSON]:
        return {g["metadata"]["name"]: g for g in self.items(f"{PODGROUPS}/namespaces/{namespace}/podgroups")}

    def pod_group(self, namespace: str, name: str) -> JSON | None:
        return self.get(f"{PODGROUPS}/namespaces/{namespace}/podgroups/{name}")

    def queue(self, name: str) -> JSON | None:
        return self.get(f"{QUEUES}/{name}")


def _name(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{body.get('kind', '?')} {ns + '/' if ns else ''}{meta.get('name', '?')}"


def install_crds(kube: Kube, crd_dir: Path = CRD_DIR, timeout: float = 30.0) -> list[str]:
    """Create every CustomResourceDefinition in ``crd_dir`` (an existing one is left as it is) and wait until
    the server reports each Established and serves its resource. Returns their names."""
    names: list[str] = []
    paths: list[str] = []
    for file in sorted(crd_dir.glob("*.yaml")):
        # libyaml's loader: an operator's CRDs (tests/operators) are megabytes of YAML
        for doc in yaml.load_all(file.read_text(), Loader=yaml.CSafeLoader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            kube.create(CRD_PATH, doc, ok=(201, 409))
            names.append(doc["metadata"]["name"])
            spec = doc["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            paths.append(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}")
    if not names:
        raise AssertionError(f"no CustomResourceDefinition found in {crd_dir}")

    def established() -> bool:
        for name in names:
            crd = kube.get(f"{CRD_PATH}/{name}") or {}
            conditions = {c.get("type"): c.get("status") for c in (crd.get("status") or {}).get("conditions") or ()}
            if conditions.get("Established") != "True":
                return False
        return all(kube.client.get(path, params={"limit": "1"}).status_code == 200 for path in paths)

    wait_until(established, timeout, f"CRDs {', '.join(names)} established and served", interval=0.2)
    return names


# ---------------------------------------------------------------------------------------------- manifests


def node(name: str, gpus: int = 8, *, labels: Mapping[str, str] | None = None) -> JSON:
    """A Ready node with ``gpus`` whole GPUs (80 GiB each) in ``status.allocatable``, set at create."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920",
                                              "nvidia.com/gpu.product": "H100", **(labels or {})}},
        "status": {"capacity": resources, "allocatable": resources,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def queue(name: str, gpu_quota: float, *, parent: str | None = None, labels: Mapping[str, str] | None = None) -> JSON:
    spec: JSON = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}


def pod(namespace: str, name: str, queue_name: str, gpus: int = 1, *, group: str | None = None,
        fraction: str | None = None, labels: Mapping[str, str] | None = None, cpu: str = "1",
        memory: str = "1Gi") -> JSON:
    """A pod for kaisched: ``schedulerName: kai-scheduler``, the queue label, ``gpus`` whole GPUs (or a
    ``gpu-fraction`` annotation), optionally in the PodGroup ``group`` (annotation ``pod-group-name``)."""
    annotations: dict[str, str] = {}
    if group:
        annotations["pod-group-name"] = group
    if fraction:
        annotations["gpu-fraction"] = fraction
    resources: JSON = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus and not fraction:
        resources["limits"] = {GPU: str(gpus)}
        resources["requests"][GPU] = str(gpus)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue_name, **(labels or {})},
                     "annotations": annotations},
        "spec": {"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def pod_group(namespace: str, name: str, queue_name: str, min_member: int, priority_class: str = "train") -> JSON:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"queue": queue_name, "minMember": min_member, "priorityClassName": priority_class}}


def create_node(kube: Kube, manifest: Mapping[str, Any]) -> JSON:
    """Create a node and clear its taints, as the node lifecycle controller does once the kubelet reports Ready.

    The API server's ``TaintNodesByCondition`` admission adds ``node.kubernetes.io/not-ready:NoSchedule`` to
    every new node; the contract tier runs no controller-manager to lift it.
    """
    created = kube.create("/api/v1/nodes", manifest)
    name = created["metadata"]["name"]
    answer = kube.client.patch(f"/api/v1/nodes/{name}", content=b'{"spec":{"taints":null}}',
                               headers={"Content-Type": "application/merge-patch+json"})
    if answer.status_code != 200:
        raise AssertionError(f"PATCH node {name} (taints): {answer.status_code} {answer.text[:500]}")
    patched: JSON = answer.json()
    return patched


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def pod_groups_path(namespace: str) -> str:
    return f"{PODGROUPS}/namespaces/{namespace}/podgroups"


def node_of(pod_obj: Mapping[str, Any] | None) -> str:
    return str(((pod_obj or {}).get("spec") or {}).get("nodeName") or "")


def gpus_of(pod_obj: Mapping[str, Any]) -> int:
    total = 0
    for container in (pod_obj.get("spec") or {}).get("containers") or ():
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(GPU, 0))
    return total


# ---------------------------------------------------------------------------------------------- kaisched run


class KaischedProcess:
    """``kaisched run --kubeconfig KUBECONFIG ARGS...`` as a child process; stdout and stderr go to ``log_path``.

    The log is JSON lines (structlog); :meth:`records` parses them (other lines, e.g. a traceback, are kept as
    ``{"raw": line}``).
    """

    def __init__(self, kubeconfig: Path | str, log_path: Path, args: Iterable[str] = (), *,
                 env: Mapping[str, str] | None = None, name: str = "kaisched") -> None:
        self.kubeconfig = str(kubeconfig)
        self.log_path = log_path
        self.args = list(args)
        self.env = {**os.environ, "KAISCHED_DEBUG": "1", **(env or {})}
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() just before the fork
        self.exit_code: int | None = None
        self._log: IO[bytes] | None = None

    @property
    def argv(self) -> list[str]:
        return [*KAISCHED_ARGV, "run", "--kubeconfig", self.kubeconfig, *self.args]

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.proc.pid

    def start(self) -> KaischedProcess:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is already running")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in _closed)
        self._log.write(f"==== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.env, cwd=str(ROOT))
        self.exit_code = None
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash: no lease release, no drain of queued writes)."""
        self._signal(signal.SIGKILL, 10.0)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: int, timeout: float) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10.0)
        self.exit_code = proc.returncode
        self.proc = None
        self._closed()

    def _closed(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def peak_rss_kib(self) -> int | None:
        """``VmHWM`` of the running process (its peak resident set), in KiB; None once it has exited."""
        if not self.running:
            return None
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    # ---- the log
    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def records(self) -> list[JSON]:
        out: list[JSON] = []
        for line in self.text().splitlines():
            if not line.strip() or line.startswith("===="):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                out.append({"raw": line})
                continue
            out.append(record if isinstance(record, dict) else {"raw": line})
        return out

    def events(self, event: str) -> list[JSON]:
        return [r for r in self.records() if r.get("event") == event]

    def cycles(self) -> list[JSON]:
        return self.events("cycle")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def describe(self) -> str:
        state = "running" if self.running else f"exited ({self.exit_code if self.proc is None else self.proc.poll()})"
        return f"{self.name} {state}; log {self.log_path}, last lines:\n{self.tail(25)}"

    def wait_for_log(self, predicate: Callable[[JSON], bool], timeout: float, what: str) -> JSON:
        """The first log record matching ``predicate``; fails early when the process exits."""
        def found() -> JSON | None:
            for record in self.records():
                if predicate(record):
                    return record
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode} before {what}; "
                                     f"{self.describe()}")
            return None
        return wait_until(found, timeout, f"{self.name}: {what}", interval=0.05, describe=self.describe)

    def wait_cycle(self, number: int = 1, timeout: float = 30.0) -> JSON:
        return self.wait_for_log(lambda r: r.get("event") == "cycle" and int(r.get("cycle", 0)) >= number, timeout,
                                 f"cycle {number}")


# ------------------------------------------------------------------------------- a test's cluster objects
#: the schedule period and the wait of the contract tests that run ``kaisched run``
PERIOD = "0.2"
WAIT_S = 30.0


def module_apiserver(setup: Callable[[Kube], object] = install_crds) -> Iterator[KubeApiServer]:
    """The body of a module's own ``kube_apiserver`` fixture: a server of its own (the scheduler sees every
    node, so objects left by other test files would change its decisions), ``setup`` run once on it (KAI's CRDs
    by default). Skips, saying how to build it, when the binary is absent."""
    if apiserver_binary() is None:
        pytest.skip(f"kube-apiserver {KUBE_VERSION} is not built (expected at {cache_dir() / 'kube-apiserver'}); "
                    "run `make kube-apiserver` to enable the contract tier")
    server = KubeApiServer().start()
    try:
        with server.http_client() as client:
            setup(Kube(client))
        yield server
    finally:
        server.stop()


class ContractCluster:
    """One test's objects on its module's server, labelled ``label=<id>``, and the kaisched processes it starts;
    :meth:`cleanup` stops them and removes the objects (subclasses add theirs in :meth:`delete_own`)."""

    def __init__(self, server: KubeApiServer, kube: Kube, namespace: str, tmp_path: Path, label: str) -> None:
        self.server = server
        self.kube = kube
        self.ns = namespace
        self.tmp_path = tmp_path
        self.id = uuid.uuid4().hex[:6]
        self.label = label
        self.labels = {label: self.id}
        self.processes: list[KaischedProcess] = []
        self.nodes: list[str] = []

    def queues(self, parent_quota: float, leaves: dict[str, float]) -> dict[str, str]:
        """A parent queue and leaves under it; returns the leaves' actual (unique) names by short name."""
        parent = f"p-{self.id}"
        self.kube.create(QUEUES, queue(parent, parent_quota, labels=self.labels))
        names = {}
        for short, quota in leaves.items():
            names[short] = f"{short}-{self.id}"
            self.kube.create(QUEUES, queue(names[short], quota, parent=parent, labels=self.labels))
        return names

    def kaisched(self, *args: str, name: str = "kaisched", env: dict[str, str] | None = None,
                 listen: str = "off", kubeconfig: Path | None = None) -> KaischedProcess:
        log = self.tmp_path / f"{name}-{len(self.processes)}.log"
        proc = KaischedProcess(kubeconfig or self.server.kubeconfig_path, log,
                               ["--schedule-period", PERIOD, "--listen-address", listen, *args], env=env, name=name)
        self.processes.append(proc)
        return proc.start()

    def describe(self) -> str:
        return "\n".join(p.describe() for p in self.processes)

    def pods(self) -> dict[str, JSON]:
        return self.kube.pods(self.ns)

    def on_poll(self) -> None:
        """Called at every poll of a wait (a subclass checks an invariant there)."""

    def bound(self, names: list[str]) -> dict[str, str] | None:
        """``{pod: node}`` once every pod in ``names`` has a node, else None."""
        self.on_poll()
        pods = self.pods()
        placed = {n: node_of(pods.get(n)) for n in names}
        return placed if all(placed.values()) else None

    def wait_bound(self, names: list[str], timeout: float = WAIT_S) -> dict[str, str]:
        def state() -> str:
            pods = self.pods()
            return f"unbound: {sorted(n for n in names if not node_of(pods.get(n)))}\n{self.describe()}"
        return wait_until(lambda: self.bound(names), timeout, f"pods {names} bound", describe=state)

    def events(self, reason: str, name: str | None = None) -> list[JSON]:
        return [e for e in self.kube.events(self.ns, reason) if name is None or e["involvedObject"]["name"] == name]

    def delete_own(self) -> None:
        """Remove what a subclass made besides pods, PodGroups, nodes and queues (after the pods are gone)."""

    def cleanup(self) -> None:
        for proc in self.processes:
            proc.kill()
        for proc in self.processes:
            print(f"---- {proc.name} ({proc.log_path}) exit {proc.exit_code}, last lines:\n{proc.tail(30)}")
        kube = self.kube
        kube.delete_collection(pods_path(self.ns), grace_seconds=0)
        kube.delete_collection(pod_groups_path(self.ns))
        self.delete_own()
        kube.delete_collection("/api/v1/nodes", label_selector=f"{self.label}={self.id}")
        kube.delete_collection(QUEUES, label_selector=f"{self.label}={self.id}")
