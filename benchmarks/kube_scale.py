"""``python -m benchmarks.kube_scale``: ``kaisched run`` against a real kube-apiserver (1.35) at scale.

Starts the contract tier's API server and etcd (``tests/kube/apiserver.py``, so the cached binary from
``make kube-apiserver`` is needed), installs the CRDs from ``deploy/crds/``, then creates, with a pool of
concurrent requests:

* ``--nodes`` Ready nodes of 8 GPUs (taints lifted, as the node lifecycle controller would);
* a parent queue and 4 leaf queues, each deserving a quarter of the GPUs;
* ``--pods`` existing pods: ``--pending`` of them (default 10 %) pending, each with its own PodGroup, and
  the rest already bound (``spec.nodeName`` at create) and ``Running`` (status patched), spread round-robin
  over the nodes, one PodGroup per node holding them; as many of them ask 1 GPU as leaves room for the
  pending pods and the burst, the others are CPU-only.

Then it starts ``kaisched run`` as a subprocess (JSON logs to a file) and measures

1. **first cycle**: from the fork to the start of cycle 1 (the ``cycle`` log line's timestamp minus its
   ``duration_ms``); target **≤ 10 s**. Also: when the caches synced, the first cycle's duration and binds,
   and when every pending pod was bound;
2. **burst**: ``--burst`` single-GPU pods without a PodGroup (the pod-grouper creates theirs), created at
   once by the request pool; from the first create until a pod watch has seen every one of them bound;
   target **≤ 30 s**; its rate (pods / that time) is compared with the plain client's (4.);
3. **steady arrival**: single-GPU pods without a PodGroup created at ``--steady-rate`` pods/s (default 100) for
   ``--steady-seconds``, each create sent at its time by the request pool; each pod's create-to-bind latency
   (from the moment its create was sent until the watch saw it bound): p50, p99, max; target **p99 ≤ 2 s**;
4. the scheduler's **peak RSS** (``VmHWM`` from ``/proc/<pid>/status``, read just before it is stopped);
5. then, with ``kaisched run`` stopped, the **plain client**: a fresh set of ``--burst`` pods created the same way
   (the same pool, all at once), each bound as soon as its create is answered by a plain binder (a
   ``POST pods/binding`` per pod, round-robin over the nodes, ``--plain-connections`` threads (32) on one client
   keeping as many persistent connections): no PodGroup, no annotation, no event, no decision. Its rate is
   measured as kaisched's burst is (pods / time from the first create until the watch saw the last bound);
   target: kaisched's burst rate **≥ 0.6** of it (judged from a burst of 500 pods: a smaller one is over within a
   cycle period or two). Its binds alone (first bind sent to last answered) are reported too.

Exit status 1 when a target is missed or something never completes (bounded by ``--max-wait``). ``--smoke``:
50 nodes, 200 pods, a burst of 50, 2 s of steady arrival at 25 pods/s (a few seconds once the server is up).
No kubelet runs: bound pods stay ``Pending`` in ``status.phase`` (kaisched counts a pod with a node as allocated
either way). Run it from the repository root: it imports ``tests.kube`` (the harness is test code, not part of
the ``kaisched`` package).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
from tests.kube.apiserver import ApiServerError, KubeApiServer
from tests.kube.contract_helpers import (
    JSON,
    QUEUES,
    KaischedProcess,
    Kube,
    WaitTimeout,
    create_node,
    install_crds,
    node,
    pod,
    pod_group,
    pod_groups_path,
    pods_path,
    queue,
)

NAMESPACE = "scale"
GPUS_PER_NODE = 8
LEAVES = 4
FIRST_CYCLE_TARGET_S = 10.0
BURST_TARGET_S = 30.0
RATIO_TARGET = 0.6  # kaisched's burst rate / the plain client's
RATIO_MIN_BURST = 500  # the ratio is judged from this burst size on
STEADY_P99_TARGET_S = 2.0
BURST_LABEL = "kaisched.bench/burst"
STEADY_LABEL = "kaisched.bench/steady"
PLAIN_LABEL = "kaisched.bench/plain"
PLAIN_SCHEDULER = "plain-binder"  # the plain client's pods: no scheduler but it looks at them


@dataclass
class Figures:
    nodes: int
    pods: int
    running: int
    running_gpu: int
    pending: int
    burst: int
    steady: int = 0
    steady_rate: float = 0.0
    apiserver_start_s: float = 0.0
    setup_s: float = 0.0
    setup_requests: int = 0
    synced_s: float | None = None
    first_cycle_start_s: float | None = None
    first_cycle_end_s: float | None = None
    first_cycle_ms: float | None = None
    first_cycle_binds: int | None = None
    pending_bound_s: float | None = None
    burst_created_s: float | None = None
    burst_bound_s: float | None = None
    burst_bound: int = 0
    burst_placed_s: float | None = None  # the end of the cycle that planned the burst's last bind
    burst_rate: float | None = None  # pods/s: burst / burst_bound_s
    steady_sent_s: float | None = None  # how long sending the steady arrivals took (should be steady / rate)
    steady_bound: int = 0
    steady_p50_s: float | None = None
    steady_p99_s: float | None = None
    steady_max_s: float | None = None
    plain_created_s: float | None = None
    plain_bound_s: float | None = None  # from the first create until the watch saw the last bound
    plain_bound: int = 0
    plain_rate: float | None = None
    plain_bind_only_rate: float | None = None  # binds / (last bind answered - first bind sent)
    ratio: float | None = None  # burst_rate / plain_rate
    quiet_cycle_ms: list[float] = field(default_factory=list)
    cycles: int = 0
    cycle_ms_median: float | None = None
    cycle_ms_max: float | None = None
    peak_rss_mib: float | None = None
    write_failures: int = 0
    log: str = ""
    targets: dict[str, bool] = field(default_factory=dict)


def _parse_ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Requests:
    """A pool of concurrent JSON requests on one httpx2 client (its connection pool sized to the pool)."""

    def __init__(self, server: KubeApiServer, workers: int) -> None:
        limits = httpx2.Limits(max_connections=workers + 4, max_keepalive_connections=workers + 4)
        self.client = httpx2.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                                    verify=server.ssl_context(), timeout=60.0, trust_env=False, limits=limits)
        self.kube = Kube(self.client)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench-request")
        self.count = 0
        self._lock = threading.Lock()

    def map(self, fn: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> None:
        """``fn(*item)`` for every item, concurrently; the first failure is raised (it names its object)."""
        futures = [self.pool.submit(fn, *item) for item in items]
        for future in futures:
            future.result()
        with self._lock:
            self.count += len(futures)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.client.close()


def plan(nodes: int, pods: int, pending: int | None, burst: int, steady: int = 0, steady_rate: float = 0.0) -> Figures:
    pending_n = pods // 10 if pending is None else pending
    if not 0 <= pending_n <= pods:
        raise SystemExit(f"error: --pending must be between 0 and --pods ({pods}), got {pending_n}")
    running = pods - pending_n
    free_needed = pending_n + burst + steady
    gpus = nodes * GPUS_PER_NODE
    if free_needed > gpus:
        raise SystemExit(f"error: {pending_n} pending + {burst} burst + {steady} steady pods need more GPUs than "
                         f"{nodes} nodes x {GPUS_PER_NODE} have ({gpus}); lower --steady-seconds or --burst")
    running_gpu = min(running, gpus - free_needed)
    if running > nodes * 100:
        raise SystemExit(f"error: {running} running pods do not fit {nodes} nodes of 110 pods")
    return Figures(nodes=nodes, pods=pods, running=running, running_gpu=running_gpu, pending=pending_n, burst=burst,
                   steady=steady, steady_rate=steady_rate)


def populate(req: Requests, fig: Figures) -> None:
    kube = req.kube
    ns = NAMESPACE
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    total_gpus = fig.nodes * GPUS_PER_NODE
    kube.create(QUEUES, queue("scale-root", total_gpus))
    leaves = [f"scale-q{i}" for i in range(LEAVES)]
    for name in leaves:
        kube.create(QUEUES, queue(name, total_gpus / LEAVES, parent="scale-root"))
    node_names = [f"node-{i:05d}" for i in range(fig.nodes)]
    req.map(lambda n: create_node(kube, node(n, GPUS_PER_NODE)), ((n,) for n in node_names))

    # running pods: pod j on node j % N; the first running_gpu ask 1 GPU; one PodGroup per node
    per_node: dict[str, list[int]] = {}
    for j in range(fig.running):
        per_node.setdefault(node_names[j % fig.nodes], []).append(j)
    groups = [(n, leaves[i % LEAVES]) for i, n in enumerate(node_names) if n in per_node]
    req.map(lambda n, q: kube.create(pod_groups_path(ns), pod_group(ns, f"run-{n}", q, 1)), groups)
    queue_of = dict(groups)

    def running_pod(j: int, node_name: str) -> None:
        name = f"run-{j:05d}"
        manifest = pod(ns, name, queue_of[node_name], 1 if j < fig.running_gpu else 0, group=f"run-{node_name}")
        manifest["spec"]["nodeName"] = node_name
        kube.create(pods_path(ns), manifest)
        body = json.dumps({"status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "conditions": [
            {"type": t, "status": "True"} for t in ("Initialized", "ContainersReady", "Ready", "PodScheduled")]}})
        answer = kube.client.patch(f"{pods_path(ns)}/{name}/status", content=body.encode(),
                                   headers={"Content-Type": "application/strategic-merge-patch+json"})
        if answer.status_code != 200:
            raise AssertionError(f"PATCH pod {ns}/{name} status: {answer.status_code} {answer.text[:300]}")

    req.map(running_pod, ((j, n) for n, js in per_node.items() for j in js))
    req.count += fig.running  # the status patches

    def pending_pod(i: int) -> None:
        name = f"pending-{i:05d}"
        kube.create(pod_groups_path(ns), pod_group(ns, name, leaves[i % LEAVES], 1))
        kube.create(pods_path(ns), pod(ns, name, leaves[i % LEAVES], 1, group=name))

    req.map(pending_pod, ((i,) for i in range(fig.pending)))
    req.count += fig.pending


class BoundWatch:
    """Watches the pods labelled ``selector`` from ``resource_version`` and records when each gets a node."""

    def __init__(self, server: KubeApiServer, selector: str, resource_version: str) -> None:
        self.server = server
        self.selector = selector
        self.rv = resource_version
        self.bound: dict[str, float] = {}
        self.error: str | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> BoundWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.bound) < count:
                left = deadline - time.monotonic()
                if left <= 0 or self.error is not None:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def _run(self) -> None:
        params = {"watch": "1", "labelSelector": self.selector, "resourceVersion": self.rv,
                  "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        with self.server.http_client(timeout=330.0) as client:
            while not self._stop.is_set():
                params["resourceVersion"] = self.rv
                try:
                    with client.stream("GET", pods_path(NAMESPACE), params=params) as answer:
                        if answer.status_code != 200:
                            raise RuntimeError(f"watch answered {answer.status_code}")
                        for line in answer.iter_lines():
                            if self._stop.is_set():
                                return
                            if line.strip():
                                self._event(json.loads(line))
                except Exception as exc:  # reported through wait()
                    with self._cond:
                        self.error = f"{type(exc).__name__}: {exc}"
                        self._cond.notify_all()
                    return

    def _event(self, event: JSON) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise RuntimeError(f"watch error: {obj.get('message')}")
        self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
        if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
            with self._cond:
                self.bound.setdefault(obj["metadata"]["name"], time.monotonic())
                self._cond.notify_all()


def measure(server: KubeApiServer, req: Requests, fig: Figures, args: argparse.Namespace, workdir: Path) -> None:
    ns = NAMESPACE
    log = workdir / "kaisched-run.log"
    fig.log = str(log)
    sched = KaischedProcess(server.kubeconfig_path, log, ["--schedule-period", str(args.period),
                                                          "--listen-address", "off"], name="kaisched run")
    # the pending pods, watched from before the scheduler starts
    rv = req.kube.client.get(pods_path(ns), params={"limit": "1"}).json()["metadata"]["resourceVersion"]
    pending_watch = BoundWatch(server, "!" + BURST_LABEL, rv).start()  # sees binds, not the running pods
    started_wall = time.time()
    sched.start()
    started = sched.started_at
    try:
        synced = sched.wait_for_log(lambda r: r.get("event") == "caches synced", args.max_wait, "caches synced")
        fig.synced_s = _parse_ts(synced["timestamp"]) - started_wall
        first = sched.wait_cycle(1, args.max_wait)
        end = _parse_ts(first["timestamp"]) - started_wall
        fig.first_cycle_end_s = end
        fig.first_cycle_ms = float(first["duration_ms"])
        fig.first_cycle_start_s = end - fig.first_cycle_ms / 1000.0
        fig.first_cycle_binds = int(first["binds"])
        if fig.pending and pending_watch.wait(fig.pending, args.max_wait):
            fig.pending_bound_s = max(pending_watch.bound.values()) - started
        pending_watch.stop()

        # the burst
        rv = req.kube.client.get(pods_path(ns), params={"limit": "1"}).json()["metadata"]["resourceVersion"]
        burst_watch = BoundWatch(server, BURST_LABEL, rv).start()
        leaves = [f"scale-q{i}" for i in range(LEAVES)]
        t0 = time.monotonic()
        t0_wall = time.time()
        req.map(lambda i: req.kube.create(pods_path(ns), pod(ns, f"burst-{i:05d}", leaves[i % LEAVES], 1,
                                                             labels={BURST_LABEL: "1"})),
                ((i,) for i in range(fig.burst)))
        fig.burst_created_s = time.monotonic() - t0
        done = burst_watch.wait(fig.burst, args.max_wait)
        fig.burst_bound = len(burst_watch.bound)
        if done:
            fig.burst_bound_s = max(burst_watch.bound.values()) - t0
        burst_watch.stop()
        if burst_watch.error:
            print(f"warning: burst watch: {burst_watch.error}", file=sys.stderr)
        fig.burst_placed_s = _placed_at(sched.cycles(), fig.pending + fig.burst, t0_wall)
        if done:  # a few cycles on the settled cluster: nothing to place, nothing to write
            fig.burst_rate = fig.burst / max(fig.burst_bound_s or 0.0, 1e-9)
            last = sched.cycles()[-1]["cycle"]
            sched.wait_cycle(last + 4, args.max_wait)
            fig.quiet_cycle_ms = [float(c["duration_ms"]) for c in sched.cycles()[last + 1:]]
            if fig.steady:
                steady_arrival(server, req, fig, args.max_wait)
        rss = sched.peak_rss_kib()
        fig.peak_rss_mib = rss / 1024.0 if rss is not None else None
    except WaitTimeout as exc:
        print(f"error: {exc}", file=sys.stderr)
    finally:
        sched.terminate()
    cycles = sched.cycles()
    fig.cycles = len(cycles)
    if cycles:
        durations = sorted(float(c["duration_ms"]) for c in cycles)
        fig.cycle_ms_median = durations[len(durations) // 2]
        fig.cycle_ms_max = durations[-1]
    fig.write_failures = len(sched.events("write failed"))
    if fig.burst_rate is not None:  # the plain client, on the same server, kaisched stopped
        plain_client(server, req, fig, args.plain_connections, args.max_wait)


def _resource_version(req: Requests) -> str:
    return str(req.kube.client.get(pods_path(NAMESPACE), params={"limit": "1"}).json()["metadata"]["resourceVersion"])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def steady_arrival(server: KubeApiServer, req: Requests, fig: Figures, max_wait: float) -> None:
    """``fig.steady`` single-GPU pods, one every ``1 / fig.steady_rate`` s (each create sent at its time by the
    request pool); each pod's latency from its create being sent until the watch saw it bound."""
    watch = BoundWatch(server, STEADY_LABEL, _resource_version(req)).start()
    leaves = [f"scale-q{i}" for i in range(LEAVES)]
    sent: dict[str, float] = {}
    lock = threading.Lock()

    def create(i: int) -> None:
        name = f"steady-{i:05d}"
        with lock:
            sent[name] = time.monotonic()
        req.kube.create(pods_path(NAMESPACE), pod(NAMESPACE, name, leaves[i % LEAVES], 1, labels={STEADY_LABEL: "1"}))

    t0 = time.monotonic()
    futures = []
    for i in range(fig.steady):
        delay = t0 + i / fig.steady_rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        futures.append(req.pool.submit(create, i))
    for future in futures:
        future.result()
    req.count += fig.steady
    fig.steady_sent_s = time.monotonic() - t0
    watch.wait(fig.steady, max_wait)
    watch.stop()
    if watch.error:
        print(f"warning: steady watch: {watch.error}", file=sys.stderr)
    latencies = [watch.bound[n] - sent[n] for n in sent if n in watch.bound]
    fig.steady_bound = len(latencies)
    if latencies and fig.steady_bound == fig.steady:
        fig.steady_p50_s = _percentile(latencies, 0.50)
        fig.steady_p99_s = _percentile(latencies, 0.99)
        fig.steady_max_s = max(latencies)


def plain_client(server: KubeApiServer, req: Requests, fig: Figures, connections: int, max_wait: float) -> None:
    """A fresh set of ``fig.burst`` pods created as the burst was (the same pool, at once), each bound by a plain
    binder as soon as its create is answered: ``connections`` threads sharing one client that keeps as many
    persistent connections, one ``POST pods/binding`` per pod, round-robin over the nodes."""
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    binder = httpx2.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                           verify=server.ssl_context(), timeout=60.0, trust_env=False, limits=limits)
    pool = ThreadPoolExecutor(max_workers=connections, thread_name_prefix="bench-plain")
    watch = BoundWatch(server, PLAIN_LABEL, _resource_version(req)).start()
    leaves = [f"scale-q{i}" for i in range(LEAVES)]
    node_names = [f"node-{i:05d}" for i in range(fig.nodes)]
    answered: list[tuple[float, float]] = []
    lock = threading.Lock()

    def bind(name: str, uid: str, node_name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
        started = time.monotonic()
        answer = binder.post(f"{pods_path(NAMESPACE)}/{name}/binding", content=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
        if answer.status_code != 201:
            raise AssertionError(f"plain bind of {name}: {answer.status_code} {answer.text[:300]}")
        with lock:
            answered.append((started, time.monotonic()))

    def create_then_bind(i: int) -> Any:
        name = f"plain-{i:05d}"
        manifest = pod(NAMESPACE, name, leaves[i % LEAVES], 1, labels={PLAIN_LABEL: "1"})
        manifest["spec"]["schedulerName"] = PLAIN_SCHEDULER
        created = req.kube.create(pods_path(NAMESPACE), manifest)
        return pool.submit(bind, name, created["metadata"]["uid"], node_names[i % len(node_names)])

    try:
        t0 = time.monotonic()
        creates = [req.pool.submit(create_then_bind, i) for i in range(fig.burst)]
        binds = [c.result() for c in creates]
        fig.plain_created_s = time.monotonic() - t0
        for b in binds:
            b.result()
        done = watch.wait(fig.burst, max_wait)
        fig.plain_bound = len(watch.bound)
        if done:
            fig.plain_bound_s = max(watch.bound.values()) - t0
            fig.plain_rate = fig.burst / max(fig.plain_bound_s, 1e-9)
            first = min(s for s, _ in answered)
            last = max(e for _, e in answered)
            fig.plain_bind_only_rate = len(answered) / max(last - first, 1e-9)
            if fig.burst_rate is not None:
                fig.ratio = fig.burst_rate / fig.plain_rate
    finally:
        watch.stop()
        pool.shutdown(wait=True)
        binder.close()
        req.count += 2 * fig.burst


def _placed_at(cycles: list[JSON], binds: int, since_wall: float) -> float | None:
    """When (seconds after ``since_wall``) the cycle that brought the binds to ``binds`` ended."""
    total = 0
    for record in cycles:
        total += int(record.get("binds", 0))
        if total >= binds:
            return _parse_ts(record["timestamp"]) - since_wall
    return None


def _fmt(value: float | None, unit: str = " s", digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def report(fig: Figures) -> bool:
    first_ok = fig.first_cycle_start_s is not None and fig.first_cycle_start_s <= FIRST_CYCLE_TARGET_S
    burst_ok = fig.burst_bound_s is not None and fig.burst_bound_s <= BURST_TARGET_S
    fig.targets = {"first_cycle": first_ok, "burst": burst_ok}
    judge_ratio = fig.burst >= RATIO_MIN_BURST
    ratio_ok = fig.ratio is not None and (fig.ratio >= RATIO_TARGET or not judge_ratio)
    fig.targets["ratio"] = ratio_ok
    steady_ok = not fig.steady or (fig.steady_p99_s is not None and fig.steady_p99_s <= STEADY_P99_TARGET_S)
    if fig.steady:
        fig.targets["steady_p99"] = steady_ok

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    gpus = fig.nodes * GPUS_PER_NODE
    print(f"kube_scale: {fig.nodes} nodes ({gpus} GPUs), {fig.pods} pods ({fig.running} running of which "
          f"{fig.running_gpu} on 1 GPU, {fig.pending} pending), burst of {fig.burst}")
    print(f"  setup: API server ready in {fig.apiserver_start_s:.1f} s; {fig.setup_requests} requests in "
          f"{fig.setup_s:.1f} s ({fig.setup_requests / max(fig.setup_s, 1e-9):.0f}/s)")
    print(f"  caches synced            {_fmt(fig.synced_s)} after the fork")
    print(f"  first cycle started      {_fmt(fig.first_cycle_start_s)} after the fork "
          f"(target <= {FIRST_CYCLE_TARGET_S:.0f} s: {verdict(first_ok)}); it took {_fmt(fig.first_cycle_ms, ' ms', 0)}"
          f" and bound {fig.first_cycle_binds if fig.first_cycle_binds is not None else 'n/a'} pods")
    print(f"  pending pods all bound   {_fmt(fig.pending_bound_s)} after the fork")
    print(f"  burst of {fig.burst} bound       {_fmt(fig.burst_bound_s)} after its first create "
          f"(target <= {BURST_TARGET_S:.0f} s: {verdict(burst_ok)}); created in {_fmt(fig.burst_created_s)}; "
          f"{fig.burst_bound}/{fig.burst} bound")
    print(f"    (its last pod placed by a cycle ending {_fmt(fig.burst_placed_s)} after the first create; the rest "
          "is the writer's PodGroup creations and binds, which carry the pods' grouping annotations)")
    print(f"    rate {_fmt(fig.burst_rate, ' pods/s', 0)}; the plain client (kaisched stopped): "
          f"{_fmt(fig.plain_rate, ' pods/s', 0)} ({fig.plain_bound}/{fig.burst} bound {_fmt(fig.plain_bound_s)} after "
          f"its first create; created in {_fmt(fig.plain_created_s)}; its binds alone "
          f"{_fmt(fig.plain_bind_only_rate, ' pods/s', 0)})")
    target = f">= {RATIO_TARGET}: {verdict(ratio_ok)}" if judge_ratio else f"judged from a burst of {RATIO_MIN_BURST}"
    print(f"  kaisched / plain client  {_fmt(fig.ratio, '', 3)} (target {target})")
    if fig.steady:
        print(f"  steady arrival of {fig.steady} pods at {fig.steady_rate:g}/s (sent in {_fmt(fig.steady_sent_s)}): "
              f"{fig.steady_bound}/{fig.steady} bound; create-to-bind p50 {_fmt(fig.steady_p50_s)}, "
              f"p99 {_fmt(fig.steady_p99_s)} (target <= {STEADY_P99_TARGET_S:g} s: {verdict(steady_ok)}), "
              f"max {_fmt(fig.steady_max_s)}")
    quiet = ", ".join(f"{ms:.0f}" for ms in fig.quiet_cycle_ms) or "n/a"
    print(f"  cycles on the settled cluster: {quiet} ms")
    print(f"  cycles: {fig.cycles}, median {_fmt(fig.cycle_ms_median, ' ms', 0)}, "
          f"max {_fmt(fig.cycle_ms_max, ' ms', 0)}; write failures: {fig.write_failures}")
    print(f"  peak RSS of kaisched run {_fmt(fig.peak_rss_mib, ' MiB', 1)} (VmHWM)")
    return first_ok and burst_ok and ratio_ok and steady_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kube_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000, help="existing pods (running + pending)")
    parser.add_argument("--pending", type=int, default=None, help="of --pods, how many are pending (default 10%%)")
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--steady-rate", type=float, default=100.0, help="pods/s of the steady arrival")
    parser.add_argument("--steady-seconds", type=float, default=10.0,
                        help="how long the steady arrival lasts (0: none)")
    parser.add_argument("--plain-connections", type=int, default=32,
                        help="the plain client's binding threads and persistent connections")
    parser.add_argument("--smoke", action="store_true",
                        help="50 nodes, 200 pods, a burst of 50, 2 s of steady arrival at 25 pods/s")
    parser.add_argument("--workers", type=int, default=24, help="concurrent requests while populating")
    parser.add_argument("--period", type=float, default=1.0, help="kaisched's --schedule-period")
    parser.add_argument("--max-wait", type=float, default=180.0, help="bound of every wait, seconds")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the scheduler's log directory")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.pods, args.burst, args.steady_rate, args.steady_seconds = 50, 200, 50, 25.0, 2.0
    if min(args.nodes, args.burst, args.workers, args.plain_connections) < 1 or args.pods < 0:
        parser.error("--nodes, --burst, --workers and --plain-connections must be >= 1, --pods >= 0")
    if args.steady_rate <= 0 or args.steady_seconds < 0:
        parser.error("--steady-rate must be > 0 and --steady-seconds >= 0")
    fig = plan(args.nodes, args.pods, args.pending, args.burst, round(args.steady_rate * args.steady_seconds),
               args.steady_rate)
    workdir = Path(tempfile.mkdtemp(prefix="kaisched-kube-scale-"))
    t0 = time.monotonic()
    try:
        server = KubeApiServer().start()
    except ApiServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    fig.apiserver_start_s = time.monotonic() - t0
    req = Requests(server, args.workers)
    try:
        t0 = time.monotonic()
        install_crds(req.kube)
        populate(req, fig)
        fig.setup_s = time.monotonic() - t0
        fig.setup_requests = req.count + fig.nodes  # the nodes' taint patches
        print(f"populated in {fig.setup_s:.1f} s; starting kaisched run", file=sys.stderr, flush=True)
        measure(server, req, fig, args, workdir)
    finally:
        req.close()
        server.stop()
    ok = report(fig)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(fig), indent=2) + "\n")
    if args.keep or not ok:
        print(f"  scheduler log: {fig.log}")
    else:
        for path in workdir.iterdir():
            path.unlink()
        workdir.rmdir()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
