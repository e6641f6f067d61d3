"""A real kube-apiserver (the version ``scripts/kube-apiserver.sh`` builds, 1.35) and etcd 3.4 on loopback,
for the contract tier (``-m kube``).

The binary is built and cached by ``scripts/kube-apiserver.sh build`` (``make kube-apiserver``); etcd comes
from Debian's ``etcd-server``. Each :class:`KubeApiServer` owns a temporary directory holding etcd's data,
the API server's self-signed certificates (``--cert-dir``), a token file (user ``admin`` in
``system:masters``), service-account keys made with openssl, a kubeconfig and both processes' logs.

From pytest, use the ``kube_apiserver`` fixture (``tests/kube/conftest.py``). From a script::

    with KubeApiServer() as server:
        print(server.url, server.kubeconfig_path)

or ``python -m tests.kube.apiserver`` to run one until interrupted.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx2
import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kube-apiserver.sh"


def _script_version() -> str:
    """The Kubernetes version ``scripts/kube-apiserver.sh`` builds (``kube-apiserver.sh version``): the cache
    directory's name and the ``/version`` the server reports come from it, so the two cannot disagree."""
    try:
        out = subprocess.run(["bash", str(SCRIPT), "version"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"`{SCRIPT} version` failed: {exc}") from exc
    version = out.stdout.strip()
    if not version or not all(part.isdigit() for part in version.split(".")):
        raise RuntimeError(f"`{SCRIPT} version` printed {out.stdout!r}, not a version such as 1.35.4")
    return version


KUBE_VERSION = _script_version()
STARTUP_TIMEOUT_S = 60.0
ETCD_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
# kube-apiserver on SIGTERM stops listening once its shutdown delay is over and may wait for open requests
# and watches to end before it exits: a graceful stop is bounded by this, then SIGKILL.
APISERVER_GRACE_S = 5.0
# The DRA versions the server serves: resource.k8s.io/v1 by default (GA in 1.34), the betas (off by default
# since then) turned on with --runtime-config.
DRA_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2")
RUNTIME_CONFIG = ",".join(f"{version}=true" for version in DRA_VERSIONS[1:])


class ApiServerError(RuntimeError):
    """etcd or kube-apiserver could not be started (the message carries the tail of the log)."""


def cache_dir() -> Path:
    """Where ``scripts/kube-apiserver.sh`` caches the build (``$KAISCHED_KUBE_CACHE`` or ``~/.cache/kaisched``)."""
    root = os.environ.get("KAISCHED_KUBE_CACHE") or str(Path.home() / ".cache" / "kaisched")
    return Path(root) / f"kube-apiserver-{KUBE_VERSION}"


def apiserver_binary() -> Path | None:
    """The cached kube-apiserver binary, or None when it has not been built.

    ``$KAISCHED_KUBE_APISERVER`` names another binary explicitly.
    """
    explicit = os.environ.get("KAISCHED_KUBE_APISERVER")
    path = Path(explicit) if explicit else cache_dir() / "kube-apiserver"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def etcd_binary() -> Path | None:
    found = shutil.which("etcd")
    return Path(found) if found else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the thread that started it dies (Linux only)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    # PDEATHSIG fires when the *thread* that forked dies, so only ask for it from the main thread.
    preexec = _die_with_parent if threading.current_thread() is threading.main_thread() else None
    log: IO[bytes]
    with open(log_path, "ab") as log:
        log.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec
        )


def _terminate(proc: subprocess.Popen[bytes] | None, *, graceful: bool = True, grace_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM and wait up to ``grace_s`` (when graceful), then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    if graceful:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait(timeout=STOP_TIMEOUT_S)


_LIVE: weakref.WeakSet[KubeApiServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()


class KubeApiServer:
    """etcd + kube-apiserver on free loopback ports; :meth:`start` returns once ``/readyz`` answers 200.

    Attributes available after start: ``url``, ``token`` (an admin bearer token, group ``system:masters``),
    ``kubeconfig_path`` (token auth, CA from the server's ``--cert-dir``), ``ca_path``, ``workdir``,
    ``etcd_url``, ``apiserver_log`` and ``etcd_log``.
    """

    def __init__(
        self,
        binary: Path | str | None = None,
        *,
        etcd: Path | str | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        extra_args: Sequence[str] = (),
        workdir_parent: Path | str | None = None,
    ) -> None:
        found = Path(binary) if binary is not None else apiserver_binary()
        if found is None:
            raise ApiServerError(
                f"no kube-apiserver binary at {cache_dir() / 'kube-apiserver'}; "
                "build it with `make kube-apiserver` (scripts/kube-apiserver.sh build)"
            )
        etcd_found = Path(etcd) if etcd is not None else etcd_binary()
        if etcd_found is None:
            raise ApiServerError("no `etcd` on PATH; install Debian's etcd-server (scripts/kube-apiserver.sh build)")
        self.binary = found
        self.etcd = etcd_found
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self._workdir_parent = workdir_parent
        self.token = secrets.token_hex(16)
        self.workdir = Path()
        self.url = ""
        self.etcd_url = ""
        self.port = 0
        self.kubeconfig_path = Path()
        self.ca_path = Path()
        self.apiserver_log = Path()
        self.etcd_log = Path()
        self._etcd_data = Path()
        self._etcd_proc: subprocess.Popen[bytes] | None = None
        self._api_proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self.start_seconds = 0.0  # wall time of the last apiserver start until /readyz

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> KubeApiServer:
        with self._lock:
            if self._etcd_proc is not None:
                raise ApiServerError("this KubeApiServer is already started")
            self.workdir = Path(tempfile.mkdtemp(prefix="kaisched-kube-", dir=self._workdir_parent))
            _LIVE.add(self)
            try:
                self._prepare_files()
                self._start_etcd()
                self._start_apiserver_first_time()
                self._write_kubeconfig()
            except ApiServerError as exc:
                self.stop()
                if os.environ.get("KAISCHED_KUBE_KEEP"):
                    raise
                raise ApiServerError(f"{exc}\n({self.workdir} was removed; KAISCHED_KUBE_KEEP=1 keeps it)") from None
            except BaseException:
                self.stop()
                raise
            return self

    def stop(self) -> None:
        """Stop both processes and remove the temporary directory (unless ``$KAISCHED_KUBE_KEEP`` is set)."""
        with self._lock:
            _terminate(self._api_proc, graceful=False)  # its data is thrown away: no drain needed
            self._api_proc = None
            _terminate(self._etcd_proc)
            self._etcd_proc = None
            _LIVE.discard(self)
            if not os.environ.get("KAISCHED_KUBE_KEEP"):
                for path in (self._etcd_data, self.workdir):
                    if path != Path() and path.exists():
                        shutil.rmtree(path, ignore_errors=True)

    def stop_apiserver(self, *, graceful: bool = False, grace_s: float = APISERVER_GRACE_S) -> None:
        """Stop the API server process only; etcd keeps running.

        By default a crash (SIGKILL): connections drop at once. ``graceful=True`` sends SIGTERM first: the
        server stops listening, may keep open requests and watches going until they end, and gets SIGKILL after
        ``grace_s``.
        """
        with self._lock:
            _terminate(self._api_proc, graceful=graceful, grace_s=grace_s)
            self._api_proc = None

    def start_apiserver(self, timeout: float | None = None) -> None:
        """Start the API server again on the same port, certificates, token and etcd; wait for ``/readyz``."""
        with self._lock:
            if self._api_proc is not None and self._api_proc.poll() is None:
                raise ApiServerError("kube-apiserver is already running")
            self._launch_apiserver(timeout if timeout is not None else self.startup_timeout)

    def restart_apiserver(
        self, *, graceful: bool = False, grace_s: float = APISERVER_GRACE_S, timeout: float | None = None
    ) -> None:
        """Stop and start the API server process only: same etcd (same data), same port, URL, token and CA.

        Its watch caches start afresh, so a watch resumed from a resourceVersion older than the restart
        gets a 410 (clients must relist). See :meth:`stop_apiserver` for ``graceful``.
        """
        with self._lock:
            self.stop_apiserver(graceful=graceful, grace_s=grace_s)
            self.start_apiserver(timeout)

    @property
    def running(self) -> bool:
        return self._api_proc is not None and self._api_proc.poll() is None

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- clients

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def http_client(self, *, timeout: float = 10.0) -> httpx2.Client:
        """A plain httpx2 client on :attr:`url` with the admin token, verifying the server's certificate."""
        return httpx2.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            verify=self.ssl_context(),
            timeout=timeout,
            trust_env=False,
        )

    def env(self) -> dict[str, str]:
        """Environment for a child process (kubectl, ``kaisched run``) that should talk to this server."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig_path)}

    # ---------------------------------------------------------------- internals

    def _prepare_files(self) -> None:
        w = self.workdir
        (w / "certs").mkdir()
        self.apiserver_log = w / "kube-apiserver.log"
        self.etcd_log = w / "etcd.log"
        (w / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        (w / "tokens.csv").chmod(0o600)
        try:
            subprocess.run(
                ["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"],
                check=True, capture_output=True, timeout=60,
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(w / "sa.key"), "-pubout", "-out", str(w / "sa.pub")],
                check=True, capture_output=True, timeout=60,
            )
        except FileNotFoundError as exc:
            raise ApiServerError("openssl is needed to make service-account keys and is not on PATH") from exc
        except subprocess.CalledProcessError as exc:
            detail = exc.stderr.decode(errors="replace")
            raise ApiServerError(f"openssl failed making service-account keys: {detail}") from exc
        # etcd fsyncs every write; on tmpfs that costs nothing.
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            self._etcd_data = Path(tempfile.mkdtemp(prefix="kaisched-etcd-", dir=shm))
        else:
            self._etcd_data = w / "etcd"
            self._etcd_data.mkdir()
        self._etcd_data.chmod(0o700)

    def _start_etcd(self) -> None:
        last_error = ""
        for _attempt in range(3):
            client_port, peer_port = free_port(), free_port()
            self.etcd_url = f"http://127.0.0.1:{client_port}"
            peer_url = f"http://127.0.0.1:{peer_port}"
            shutil.rmtree(self._etcd_data / "member", ignore_errors=True)
            self._etcd_proc = _spawn(
                [
                    str(self.etcd),
                    "--name=kaisched-test",
                    f"--data-dir={self._etcd_data}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=kaisched-test={peer_url}",
                    "--initial-cluster-state=new",
                ],
                self.etcd_log,
            )
            deadline = time.monotonic() + ETCD_TIMEOUT_S
            with httpx2.Client(timeout=2.0, trust_env=False) as client:
                while time.monotonic() < deadline:
                    if self._etcd_proc.poll() is not None:
                        break
                    with contextlib.suppress(httpx2.HTTPError):
                        answer = client.get(f"{self.etcd_url}/health")
                        if answer.status_code == 200 and answer.json().get("health") == "true":
                            return
                    time.sleep(0.1)
            code = self._etcd_proc.poll()
            _terminate(self._etcd_proc, graceful=False)
            self._etcd_proc = None
            tail = log_tail(self.etcd_log)
            last_error = (
                f"etcd {'exited with code ' + str(code) if code is not None else 'was not healthy'} "
                f"within {ETCD_TIMEOUT_S:.0f} s at {self.etcd_url}; log {self.etcd_log}:\n{tail}"
            )
            if "address already in use" not in tail:
                break
        raise ApiServerError(last_error)

    def _apiserver_argv(self) -> list[str]:
        w = self.workdir
        return [
            str(self.binary),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={w / 'certs'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            # Required since 1.20 (the TokenRequest API); the key pair is made with openssl per server.
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            # DRA: the beta versions kaisched also reads, next to the default v1, so tests can create objects in
            # each of them.
            f"--runtime-config={RUNTIME_CONFIG}",
            # No controller-manager: no `default` ServiceAccount, no PVC protection controller.
            "--disable-admission-plugins=ServiceAccount,StorageObjectInUseProtection",
            # The `kubernetes` Endpoints object rejects a loopback IP; without this the log repeats that error.
            "--endpoint-reconciler-type=none",
            *self.extra_args,
        ]

    def _start_apiserver_first_time(self) -> None:
        for attempt in range(3):
            self.port = free_port()
            self.url = f"https://127.0.0.1:{self.port}"
            self.ca_path = self.workdir / "certs" / "apiserver.crt"
            try:
                self._launch_apiserver(self.startup_timeout)
                return
            except ApiServerError as exc:
                if attempt == 2 or "address already in use" not in str(exc):
                    raise

    def _launch_apiserver(self, timeout: float) -> None:
        started = time.monotonic()
        self._api_proc = _spawn(self._apiserver_argv(), self.apiserver_log)
        deadline = started + timeout
        last = "no answer yet"
        # The certificate is self-signed at the first start, so the first polls cannot verify it.
        with httpx2.Client(
            verify=False, timeout=2.0, trust_env=False, headers={"Authorization": f"Bearer {self.token}"}
        ) as client:
            while time.monotonic() < deadline:
                code = self._api_proc.poll()
                if code is not None:
                    self._api_proc = None
                    raise ApiServerError(
                        f"kube-apiserver exited with code {code} during start-up; log {self.apiserver_log}:\n"
                        f"{log_tail(self.apiserver_log)}"
                    )
                try:
                    answer = client.get(f"{self.url}/readyz")
                    if answer.status_code == 200:
                        break
                    last = f"/readyz answered {answer.status_code}: {answer.text[-300:]}"
                except httpx2.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
            else:
                _terminate(self._api_proc, graceful=False)
                self._api_proc = None
                raise ApiServerError(
                    f"kube-apiserver was not ready within {timeout:.0f} s at {self.url} ({last}); "
                    f"log {self.apiserver_log}:\n{log_tail(self.apiserver_log)}"
                )
        self.start_seconds = time.monotonic() - started
        # From here on, everything verifies the self-signed certificate.
        with httpx2.Client(verify=self.ssl_context(), timeout=5.0, trust_env=False) as verified:
            try:
                verified.get(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            except httpx2.HTTPError as exc:
                raise ApiServerError(f"kube-apiserver's certificate {self.ca_path} does not verify: {exc}") from exc

    def _write_kubeconfig(self) -> None:
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kaisched-test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)}}
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "kaisched-test",
                    "context": {"cluster": "kaisched-test", "user": "admin", "namespace": "default"},
                }
            ],
            "current-context": "kaisched-test",
        }
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.kubeconfig_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig_path.chmod(0o600)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.kube.apiserver``: run a server until Ctrl-C / SIGTERM, printing how to reach it."""
    del argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    started = time.monotonic()
    try:
        server = KubeApiServer().start()
    except ApiServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"kube-apiserver {KUBE_VERSION} ready in {time.monotonic() - started:.1f} s at {server.url}")
        print(f"export KUBECONFIG={server.kubeconfig_path}")
        print(f"logs: {server.apiserver_log} {server.etcd_log}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while not stop.wait(1.0):
                pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
