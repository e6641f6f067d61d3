"""``python -m benchmarks.replay``: ``kaisched replay`` of a KAI snapshot of issue 21's busy cluster.

:mod:`benchmarks.busy_cluster`'s cluster (5,000 nodes: 50,000 pending and 10,000 running pods, 100 queues;
``--smoke``: 40 nodes) is written once as KAI's snapshot ZIP (:func:`kaisched.cluster.replay.snapshot_zip`, KAI's
default configuration); then, timed (best of ``--repeat``), what ``kaisched replay`` does: the ZIP read and its
JSON checked (``load_snapshot``), the objects filtered and parsed as KAI's tool sees them (``prepare_replay``) and
one cycle of the snapshot's actions (``run_replay``). The decisions must be those of the same cycle run on the
objects directly (exit status 1 otherwise).

    .venv/bin/python -m benchmarks.replay            # 5,000 nodes
    .venv/bin/python -m benchmarks.replay --smoke    # 40 nodes, seconds
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from datetime import UTC, datetime
from typing import Any

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
KEYS = {"Pod": "pods", "Node": "nodes", "Queue": "queues", "PodGroup": "podGroups"}


def _decisions(result: Any) -> tuple[list[Any], list[Any], list[Any]]:
    return (sorted((b.pod, b.node) for b in result.binds), sorted((p.pod, p.node) for p in result.pipelined),
            sorted((e.pod, e.action) for e in result.evictions))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--smoke", action="store_true", help="40 nodes (what CI runs)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    nodes = 40 if args.smoke else args.nodes

    from benchmarks.busy_cluster import BusySize, busy_cluster
    from kaisched.cluster.replay import prepare_replay, run_replay, snapshot_zip
    from kaisched.cluster.schedule import no_cyclic_gc, resolve_config, run_prepared_cycle
    from kaisched.k8s.kai_snapshot import load_snapshot
    from kaisched.k8s.parse import parse_objects
    from kaisched.model.snapshot import forget_cached_facts

    size = BusySize(nodes) if nodes >= 100 else BusySize(nodes, departments=4, teams=3)
    cluster = busy_cluster(size)
    raw: dict[str, list[dict[str, Any]]] = {}
    for i, obj in enumerate(cluster.objects):
        obj.setdefault("metadata", {}).setdefault("uid", f"uid-{i}")  # KAI keys pods by uid
        raw.setdefault(KEYS[obj["kind"]], []).append(obj)
    config = resolve_config(None)  # KAI's default configuration, as a real KAI snapshot has it
    data = snapshot_zip(config, raw, NOW)
    print(f"cluster: {cluster.description}")
    print(f"snapshot: {len(data) / 1e6:.1f} MB ZIP")

    times: dict[str, list[float]] = {"read": [], "prepare": [], "cycle": []}
    result = None
    for _ in range(args.repeat):
        gc.collect()
        t0 = time.perf_counter()
        with no_cyclic_gc():  # as kaisched replay reads (cluster.replay.load_replay)
            snap = load_snapshot(data)
            t1 = time.perf_counter()
            replay = prepare_replay(snap)
        t2 = time.perf_counter()
        result = run_replay(replay, NOW)
        t3 = time.perf_counter()
        for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            times[key].append(value)
        del snap, replay
    assert result is not None
    best = {k: min(v) for k, v in times.items()}
    total = min(sum(x) for x in zip(*times.values(), strict=True))
    print(f"replay (best of {args.repeat}): read {best['read']:.2f} s, prepare {best['prepare']:.2f} s, "
          f"cycle {best['cycle']:.2f} s, total {total:.2f} s")
    print(f"decisions: {len(result.binds)} binds, {len(result.pipelined)} pipelined, {len(result.evictions)} "
          f"evictions")
    forget_cached_facts()
    with no_cyclic_gc():
        direct = run_prepared_cycle(parse_objects(cluster.objects), config, NOW)
    if _decisions(direct) != _decisions(result):
        print("FAIL: the replay's decisions differ from the same cycle run on the objects", file=sys.stderr)
        return 1
    print("the same decisions as the cycle on the objects themselves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
