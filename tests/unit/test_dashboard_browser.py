"""The dashboard in a real headless browser: Debian's chromium driven by chromedriver over the W3C WebDriver
protocol (plain HTTP with httpx2). ``scripts/chromium.sh build`` (``make chromium``, a prerequisite of
``make test``) installs both; without them this test says so and is skipped."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from kaisched.cli.dashboard import files_source, refresh_once
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import SchedulerConfig
from kaisched.web import Dashboard, DashboardServer

CLUSTER = Path(__file__).with_name("dashboard_cluster.yaml")
CHROMIUM = os.environ.get("KAISCHED_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KAISCHED_CHROMEDRIVER", "/usr/bin/chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """A WebDriver session: just the commands this test needs."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=60)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1366,900"]}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        r = self.http.request(method, path, json=body if body is not None else ({} if method == "POST" else None))
        value = r.json()["value"]
        if r.status_code != 200:
            raise AssertionError(f"WebDriver {method} {path}: {value}")
        return value

    def cmd(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self.cmd("POST", "/url", {"url": url})

    def js(self, script: str, *args: Any) -> Any:
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        return str(self.cmd("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def click(self, css: str, attempts: int = 5) -> None:
        for attempt in range(attempts):  # the page may re-render the element between finding and clicking it
            try:
                self.cmd("POST", f"/element/{self.find(css)}/click")
                return
            except AssertionError as exc:
                if "stale element" not in str(exc) or attempt == attempts - 1:
                    raise

    def screenshot(self) -> bytes:
        return base64.b64decode(self.cmd("GET", "/screenshot"))

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self.cmd("DELETE", "")
        finally:
            self.http.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(f"no headless browser: {CHROMIUM} or {CHROMEDRIVER} missing (run scripts/chromium.sh build)")
    port = _free_port()
    driver = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/status", timeout=2).json()["value"]["ready"]:
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            if time.monotonic() > deadline or driver.poll() is not None:
                pytest.fail("chromedriver did not start")
            time.sleep(0.1)
        b = Browser(base)
        try:
            yield b
        finally:
            b.close()
    finally:
        driver.terminate()
        driver.wait(10)


def test_dashboard_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(CLUSTER, cluster)
    config = resolve_config(SchedulerConfig())
    read = files_source((str(cluster),), None)
    board = Dashboard(source="cluster.yaml")
    assert refresh_once(board, read, config) is None
    with DashboardServer(board, "127.0.0.1", 0) as server:
        browser.get(server.url + "?refresh=0.3")
        browser.wait("the queue row", lambda: browser.js(
            "return document.querySelector('tr.queue[data-name=\"team-a\"]') !== null"))
        # the bars: deserved 4 and fair share 4 fill the scale, allocated 2 is half of it
        widths = browser.js("""const r = document.querySelector('tr.queue[data-name="team-a"]');
            return ['deserved', 'fair', 'alloc'].map(c => r.querySelector('.bar .' + c).style.width);""")
        assert widths == ["100%", "100%", "50%"]
        cells = browser.js("""const r = document.querySelector('tr.queue[data-name="team-a"]');
            return ['deserved', 'fair', 'allocated', 'pending'].map(c => r.querySelector('td.' + c).textContent);""")
        assert cells == ["4", "4", "2", "1"]
        row = browser.js("return document.querySelector('tr.job').textContent")
        assert "PodSchedulingErrors" in row and "requires 8 GPUs" in row
        assert browser.js("return document.querySelector('#util-chart polyline') !== null")
        assert "ml/small" in browser.js("return document.getElementById('decisions').textContent")
        browser.click("tr.job")
        text = browser.wait("the explanation", lambda: browser.js(
            "const e = document.getElementById('explanation'); return e && e.textContent"))
        assert "fits nowhere" in text and "needs 8 GPUs on one node; the most free on any node is 2" in text
        shot = os.environ.get("KAISCHED_DASHBOARD_SCREENSHOT")
        (Path(shot) if shot else tmp_path / "dashboard.png").write_bytes(browser.screenshot())
        # the data change (the huge pod now asks 4 GPUs: it is pending behind nothing but the bound one's 2)
        cluster.write_text(cluster.read_text().replace('nvidia.com/gpu: "8"', 'nvidia.com/gpu: "1"'))
        assert refresh_once(board, read, config) is None
        browser.wait("the refreshed page", lambda: browser.js(
            "return document.getElementById('pending').textContent.includes('no pending jobs')"))
        assert browser.js("""return document.querySelector('tr.queue[data-name="team-a"] td.allocated')
            .textContent""") == "3"
