"""The real workload operators for the operator tier (``tests/operators``, marker ``operators``).

``scripts/operators.sh build`` builds and caches the Kubeflow Training Operator and KubeRay's ray-operator
from the Go module proxy, with the CRDs of the same module versions. This module starts them against a
:class:`~tests.kube.apiserver.KubeApiServer` as their Deployments would run them in a cluster, minus what a
single test machine cannot give:

- the kubeconfig of the test server (admin token), leader election off, the metrics and health endpoints on
  free loopback ports; each operator's output goes to a log file;
- Training Operator v1.8.1 always runs its validating webhook server behind a certificate rotator (no flag
  turns it off): the rotator fills an (initially empty) Secret in the operator's namespace and waits for the
  certificate to appear in ``/tmp/k8s-webhook-server/serving-certs``, where the Deployment mounts that Secret.
  :class:`OperatorProcess` creates the Secret and plays the kubelet's part of writing its files there. No
  ValidatingWebhookConfiguration is installed, so the API server never calls the webhook (as
  ``--webhook-server-port`` cannot choose its address, it listens on a free port on all interfaces);
- KubeRay v1.5.0 runs without webhooks (its default) and with ``--batch-scheduler=kai-scheduler``, as the Ray
  documentation's KAI guide installs it: KubeRay then stamps ``schedulerName: kai-scheduler`` and the
  RayCluster's ``kai.scheduler/queue`` label on the pods it creates, and leaves grouping to the pod-grouper.
  That plugin refuses every RayJob (``currently only RayCluster is supported, got *v1.RayJob``: the job stays
  Initializing and gets no cluster), so RayJobs run on a KubeRay started without it, their pod templates
  naming ``schedulerName: kai-scheduler`` themselves (``batch_scheduler=None``).

Neither runs a kube-controller-manager: :class:`GarbageCollector` stands in for its garbage collector (pods
whose controlling owner is gone are deleted), as the fake kubelet stands in for the kubelet.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx2

from tests.kube.apiserver import KubeApiServer, free_port, log_tail
from tests.kube.contract_helpers import JSON, Kube, wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "operators.sh"
TRAINING_OPERATOR = "training-operator"
KUBERAY_OPERATOR = "kuberay-operator"
#: where Training Operator's webhook server reads its certificate (a constant in the operator)
WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
WEBHOOK_SECRET = "training-operator-webhook-cert"
OPERATOR_NAMESPACE = "kubeflow"
#: KubeRay's batch-scheduler plugin for KAI (stamps schedulerName and the queue label on a RayCluster's pods)
KAI_BATCH_SCHEDULER = "kai-scheduler"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0


class OperatorError(RuntimeError):
    """An operator could not be started (the message carries the tail of its log)."""


@dataclass(frozen=True, slots=True)
class OperatorBuild:
    """One cached operator build: its name, Go module, version, binary and the folder of its CRDs."""

    name: str
    module: str
    version: str
    binary: Path
    crd_dir: Path
    build_seconds: int | None


def _script(*args: str) -> str:
    out = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0:
        raise OperatorError(out.stderr.strip() or f"`{SCRIPT} {' '.join(args)}` exited {out.returncode}")
    return out.stdout.strip()


def versions() -> dict[str, tuple[str, str]]:
    """``{name: (module, version)}`` as ``scripts/operators.sh version`` prints them."""
    found: dict[str, tuple[str, str]] = {}
    for line in _script("version").splitlines():
        name, module, version = line.split()
        found[name] = (module, version)
    return found


def cached_build(name: str) -> OperatorBuild | None:
    """The cached build of operator ``name``, or None when ``scripts/operators.sh build`` has not made it."""
    module, version = versions()[name]
    try:
        binary = Path(_script("path", name))
    except OperatorError:
        return None
    seconds_file = binary.parent / "build-seconds"
    seconds = int(seconds_file.read_text().strip()) if seconds_file.is_file() else None
    return OperatorBuild(name, module, version, binary, binary.parent / "crds", seconds)


class OperatorProcess:
    """One operator binary running against ``server``; :meth:`start` returns once its ``/readyz`` answers."""

    def __init__(self, build: OperatorBuild, server: KubeApiServer, log_path: Path, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, *, batch_scheduler: str | None = KAI_BATCH_SCHEDULER) -> None:
        self.build = build
        self.batch_scheduler = batch_scheduler  # KubeRay's --batch-scheduler (None: not given)
        self.server = server
        self.log_path = log_path
        self.metrics_port = free_port()
        self.probe_port = free_port()
        self.extra_args = list(args)
        self.env = {**server.env(), **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def name(self) -> str:
        return self.build.name

    def argv(self) -> list[str]:
        binary = str(self.build.binary)
        if self.name == TRAINING_OPERATOR:
            return [binary, f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                    f"--health-probe-bind-address=127.0.0.1:{self.probe_port}", "--leader-elect=false",
                    f"--webhook-server-port={free_port()}", f"--webhook-secret-name={WEBHOOK_SECRET}",
                    "--zap-log-level=info", *self.extra_args]
        batch = [f"--batch-scheduler={self.batch_scheduler}"] if self.batch_scheduler else []
        return [binary, f"--metrics-addr=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}", "--enable-leader-election=false",
                *batch, "--log-stdout-encoder=console", *self.extra_args]

    def start(self, kube: Kube) -> OperatorProcess:
        if self.proc is not None:
            raise OperatorError(f"{self.name} is already started")
        started = time.monotonic()
        if self.name == TRAINING_OPERATOR:
            self._prepare_webhook_secret(kube)
            self.env["MY_POD_NAMESPACE"] = OPERATOR_NAMESPACE
        argv = self.argv()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self._log.write(f"==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.env, cwd=str(self.log_path.parent))
        try:
            if self.name == TRAINING_OPERATOR:
                self._mount_webhook_certificate(kube)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def describe(self) -> str:
        state = "running" if self.running else "not running"
        return f"{self.name} {self.build.version} {state}; log {self.log_path}:\n{self.tail()}"

    # ---------------------------------------------------------------- internals
    def _wait_ready(self) -> None:
        url = f"http://127.0.0.1:{self.probe_port}/readyz"
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer yet"
        with httpx2.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise OperatorError(f"{self.name} exited with {code} during start-up; {self.describe()}")
                try:
                    answer = client.get(url)
                    if answer.status_code == 200:
                        return
                    last = f"/readyz answered {answer.status_code}"
                except httpx2.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
        raise OperatorError(f"{self.name} was not ready within {START_TIMEOUT_S:.0f} s ({last}); {self.describe()}")

    def _prepare_webhook_secret(self, kube: Kube) -> None:
        """The namespace and the empty Secret the operator's certificate rotator fills (its manifests ship
        both); a certificate left by an earlier run in the fixed directory is removed first."""
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": OPERATOR_NAMESPACE}}, ok=(201, 409))
        path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets"
        kube.delete(f"{path}/{WEBHOOK_SECRET}", grace_seconds=0)
        kube.create(path, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                           "metadata": {"name": WEBHOOK_SECRET, "namespace": OPERATOR_NAMESPACE}})
        for name in ("tls.crt", "tls.key", "ca.crt", "ca.key"):
            with contextlib.suppress(FileNotFoundError):
                (WEBHOOK_CERT_DIR / name).unlink()

    def _mount_webhook_certificate(self, kube: Kube) -> None:
        """What the kubelet's secret volume does: the Secret's keys as files in the certificate directory."""
        path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{WEBHOOK_SECRET}"

        def filled() -> JSON | None:
            if self.proc is None or self.proc.poll() is not None:
                raise OperatorError(f"{self.name} exited before filling its webhook Secret; {self.describe()}")
            data = (kube.get(path) or {}).get("data") or {}
            return data if data.get("tls.crt") and data.get("tls.key") else None

        data = wait_until(filled, START_TIMEOUT_S, f"{self.name}: webhook Secret {path} filled",
                          interval=0.2, describe=self.describe)
        WEBHOOK_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            target = WEBHOOK_CERT_DIR / key
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(base64.b64decode(value))
            os.replace(tmp, target)


# ------------------------------------------------------------------------------------ garbage collector
#: the API path of each owner kind whose dependents the collector may delete
OWNER_PATHS: Mapping[str, str] = {
    "ray.io/v1/RayCluster": "/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}",
    "ray.io/v1/RayJob": "/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}",
    "kubeflow.org/v1/PyTorchJob": "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}",
    "kubeflow.org/v1/MPIJob": "/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs/{name}",
    "kubeflow.org/v1/TFJob": "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs/{name}",
    "batch/v1/Job": "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
}


class GarbageCollector:
    """kube-controller-manager's garbage collector, for pods only: every ``interval`` seconds, a pod whose
    controlling owner (of a kind in :data:`OWNER_PATHS`) no longer exists, or exists with another uid, is
    deleted (background propagation, as the collector does: the fake kubelet then reaps it)."""

    def __init__(self, server: KubeApiServer, interval: float = 0.5) -> None:
        self.server = server
        self.interval = interval
        self.deleted: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GarbageCollector:
        self._thread = threading.Thread(target=self._run, name="fake-gc", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    def _run(self) -> None:
        with self.server.http_client() as client:
            kube = Kube(client)
            while not self._stop.wait(self.interval):
                try:
                    self.collect(kube)
                except (httpx2.HTTPError, AssertionError) as exc:
                    self.errors.append(str(exc)[:300])

    def collect(self, kube: Kube) -> None:
        owners: dict[tuple[str, str, str], str | None] = {}
        for pod in kube.items("/api/v1/pods"):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            ref = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
            if ref is None:
                continue
            template = OWNER_PATHS.get(f"{ref['apiVersion']}/{ref['kind']}")
            if template is None:
                continue
            key = (meta["namespace"], template, ref["name"])
            if key not in owners:
                owner: Any = kube.get(template.format(ns=meta["namespace"], name=ref["name"]))
                owners[key] = owner["metadata"]["uid"] if isinstance(owner, dict) else None
            if owners[key] != ref["uid"]:
                name = f"{meta['namespace']}/{meta['name']}"
                kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
                self.deleted.append(name)
