"""A real Prometheus server (Debian's ``prometheus`` package, ``scripts/prometheus.sh``) on loopback for the contract
tier: it scrapes the targets it is given every second into a fresh TSDB of its own and answers PromQL over HTTP."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.kube.apiserver import _spawn, _terminate, free_port, log_tail

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "prometheus.sh"
START_TIMEOUT_S = 60.0


def prometheus_binary() -> Path | None:
    try:
        out = subprocess.run([str(SCRIPT), "path"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None
    return path if path is not None and path.exists() else None


def require_prometheus() -> Path:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("Prometheus is not installed; run `make prometheus` (scripts/prometheus.sh build: Debian's "
                    "prometheus package) to enable the time-based fair-share contract test")
    return binary


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port`` of ``/metrics``) every second; :meth:`start` returns once
    ``/-/ready`` answers. :meth:`stop` kills it (a Prometheus that is down); :meth:`start` again restarts it on the
    same port and data."""

    def __init__(self, binary: Path, targets: list[str], *, port: int | None = None) -> None:
        self.binary = binary
        self.targets = targets
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = Path(tempfile.mkdtemp(prefix="kaisched-prometheus-"))
        self.log_path = self.workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": "kaisched", "static_configs": [{"targets": targets}]}]}
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))

    def start(self) -> PrometheusServer:
        self.proc = _spawn([str(self.binary), f"--config.file={self.workdir / 'prometheus.yml'}",
                            f"--storage.tsdb.path={self.workdir / 'data'}",
                            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"], self.log_path)
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx2.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{log_tail(self.log_path)}")
                try:
                    if client.get(f"{self.url}/-/ready").status_code == 200:
                        return self
                except httpx2.HTTPError:
                    pass
                time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {START_TIMEOUT_S:g}s:\n{log_tail(self.log_path)}")

    def stop(self) -> None:
        _terminate(self.proc, graceful=False)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query now: ``(labels, value)`` per series."""
        with httpx2.Client(timeout=5.0) as client:
            answer = client.get(f"{self.url}/api/v1/query", params={"query": promql})
        answer.raise_for_status()
        data = answer.json()["data"]
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]
