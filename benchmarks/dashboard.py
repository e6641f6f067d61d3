"""``python -m benchmarks.dashboard``: the dashboard's data endpoint on issue 21's busy cluster.

One allocate cycle on :mod:`benchmarks.busy_cluster`'s cluster (5,000 nodes: 50,000 pending and 10,000 running pods;
``--smoke``: 40 nodes), then, timed: building the dashboard's view of that cycle (the snapshot's jobs, the explain
module's rows, the JSON document: done once per cycle, off the request path) and ``GET /api/dashboard`` and
``GET /api/explain`` over HTTP (best of ``--repeat``). Target (issue 24): the data endpoint under 200 ms at 5,000
nodes. Exit status 1 when the endpoint misses it (not checked at the smoke size) or answers wrongly.

    .venv/bin/python -m benchmarks.dashboard            # 5,000 nodes
    .venv/bin/python -m benchmarks.dashboard --smoke    # 40 nodes, seconds
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from urllib.request import urlopen

TARGET_S = 0.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--smoke", action="store_true", help="40 nodes (what CI runs)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    nodes = 40 if args.smoke else args.nodes

    import json

    from benchmarks import allocate as alloc
    from benchmarks.busy_cluster import BusySize, busy_cluster
    from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
    from kaisched.k8s.parse import parse_objects
    from kaisched.model.snapshot import SnapshotOptions, build_snapshot
    from kaisched.web import Dashboard, DashboardServer

    size = BusySize(nodes) if nodes >= 100 else BusySize(nodes, departments=4, teams=3)
    cluster = busy_cluster(size)
    cfg = resolve_config({"actions": "allocate"})
    with no_cyclic_gc():
        prepared = prepare(parse_objects(cluster.objects), cfg, alloc.NOW)
        result = run_prepared_cycle(prepared, cfg, alloc.NOW)
    print(f"cluster: {cluster.description}")
    board = Dashboard(source="benchmark")
    build: list[float] = []
    for _ in range(max(1, min(args.repeat, 3))):
        gc.collect()
        t0 = time.perf_counter()
        with no_cyclic_gc():
            jobs = dict(build_snapshot(prepared, alloc.NOW, SnapshotOptions()).jobs)
            board.update(jobs, result, alloc.NOW)
        build.append(time.perf_counter() - t0)
    failures: list[str] = []
    with DashboardServer(board, "127.0.0.1", 0) as server:
        data: list[float] = []
        explain: list[float] = []
        doc: dict[str, object] = {}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            with urlopen(server.url + "api/dashboard") as r:
                body = r.read()
            data.append(time.perf_counter() - t0)
            doc = json.loads(body)
        pending = doc.get("pending")
        job = pending[0]["name"] if isinstance(pending, list) and pending else None
        if job is None or not doc.get("queues"):
            failures.append("the data document has no queues or no pending job")
        else:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                with urlopen(server.url + f"api/explain?job={job}") as r:
                    if json.loads(r.read())["job"] != job:
                        failures.append(f"/api/explain answered for another job than {job}")
                explain.append(time.perf_counter() - t0)
    print(f"view built per cycle (snapshot jobs + rows + JSON): {min(build) * 1000:.0f} ms (best of {len(build)})")
    print(f"GET /api/dashboard: {min(data) * 1000:.1f} ms (best of {len(data)}, {len(body) / 1e6:.2f} MB); "
          f"target < {TARGET_S * 1000:.0f} ms")
    if explain:
        print(f"GET /api/explain: {min(explain) * 1000:.1f} ms (best of {len(explain)})")
    if not args.smoke and min(data) >= TARGET_S:
        failures.append(f"/api/dashboard took {min(data) * 1000:.0f} ms (target {TARGET_S * 1000:.0f} ms)")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
