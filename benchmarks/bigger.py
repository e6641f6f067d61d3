"""Issue 28, item 4: the scale shape at 1,000 to 15,000 nodes — a full cycle's time and the process's peak memory,
and how both grow with the cluster.

Each size is the scale shapes' cluster (:func:`benchmarks.scale.scale_cluster`: nodes x 8 GPUs, 100 leaf queues under
10 parents, half of the GPUs running, 10 pending pods per node: 15,000 nodes x 8 GPUs = 120,000 GPUs with 150,000
pending pods), measured in a fresh interpreter of its own (so that its peak memory is its own): the objects are
generated, parsed and prepared (``prepare``: workloads expanded, pods grouped), then one full cycle of KAI's five
actions on them (``run_prepared_cycle``, snapshot to result, as ``scale-full``'s cycle time) is timed ``--repeat``
times (median). **peak RSS** is the process's ``ru_maxrss`` after the cycles: interpreter, the generated manifests,
the parsed objects and the cycles. The growth is the least-squares slope of log(value) over log(nodes)
(value ~ nodes^k).

    make compiled && PYTHONPATH=build/compiled .venv/bin/python -m benchmarks.bigger          # 1k ... 15k nodes
    .venv/bin/python -m benchmarks.bigger --nodes 200 --nodes 400                              # quick, interpreted

``--search-stats`` also prints, per size, what the eviction actions' victim searches cost in the last cycle
(``CycleResult.search_stats``: jobs searched, solved, scenarios simulated, refused before placing, seconds).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Final

from benchmarks import allocate as alloc
from benchmarks import scale

SIZES: Final = (1000, 2000, 5000, 10000, 15000)
#: the eviction actions whose victim searches ``--search-stats`` prints, and what of each
SEARCH_ACTIONS: Final = ("consolidation", "reclaim", "preempt")
SEARCH_FIELDS: Final = ("preemptors", "solved", "simulations", "refused_unplaced", "seconds")
#: issue 28's targets at 15,000 nodes (compiled)
TARGET_S: Final = 5.0
TARGET_RSS_GIB: Final = 4.0


def worker(nodes: int, repeat: int) -> dict[str, float]:
    from kaisched.cluster.schedule import compiled_core, no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
    from kaisched.k8s.parse import parse_objects

    t0 = time.perf_counter()
    cluster = scale.scale_cluster(replace(scale.FULL_SIZE, nodes=nodes, pending_pods=10 * nodes))
    config = resolve_config(None)
    with no_cyclic_gc():
        parsed = prepare(parse_objects(cluster.objects), config, alloc.NOW)
    prepare_s = time.perf_counter() - t0
    del cluster
    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times: list[float] = []
    binds = 0
    searches: dict[str, float] = {}
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        with no_cyclic_gc():
            result = run_prepared_cycle(parsed, config, alloc.NOW)
        times.append(time.perf_counter() - t)
        binds = len(result.binds)
        searches = {f"{action}.{name}": float(stats.to_dict()[name]) for action, stats in result.search_stats.items()
                    for name in SEARCH_FIELDS}
    return {"nodes": nodes, "pods": len(parsed.pods), "cycle_s": statistics.median(times), "prepare_s": prepare_s,
            "rss_before_mib": rss_before, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "binds": binds, "compiled": float(compiled_core()), **searches}


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log(y) over log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bigger", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help=f"sizes (default {', '.join(map(str, SIZES))})")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--search-stats", action="store_true",
                        help="also print what each eviction action's victim searches cost in the last cycle")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat)))
        return 0
    rows: list[dict[str, float]] = []
    print(f"{'nodes':>7} {'pods':>9} {'prepare s':>10} {'cycle s':>8} {'binds':>7} {'RSS before MiB':>15} "
          f"{'peak RSS MiB':>13}", flush=True)
    for n in args.nodes or SIZES:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.bigger", "--worker", str(n), "--repeat",
                               str(args.repeat)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{n:>7}: the worker failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['nodes']:>7,.0f} {row['pods']:>9,.0f} {row['prepare_s']:>10.1f} {row['cycle_s']:>8.2f} "
              f"{row['binds']:>7,.0f} {row['rss_before_mib']:>15,.0f} {row['peak_rss_mib']:>13,.0f}", flush=True)
        if args.search_stats:
            for action in SEARCH_ACTIONS:
                if f"{action}.preemptors" in row:
                    print(f"{'':>7} {action}: " + ", ".join(
                        f"{row[f'{action}.{name}']:,.1f} {name}" if name == "seconds"
                        else f"{row[f'{action}.{name}']:,.0f} {name}" for name in SEARCH_FIELDS), flush=True)
    core = "compiled" if rows and rows[0]["compiled"] else "interpreted"
    if len(rows) > 1:
        xs = [r["nodes"] for r in rows]
        print(f"growth ({core}): cycle time ~ nodes^{slope(xs, [r['cycle_s'] for r in rows]):.2f}, peak RSS ~ "
              f"nodes^{slope(xs, [r['peak_rss_mib'] for r in rows]):.2f}")
    big = [r for r in rows if r["nodes"] == 15000]
    if big:
        r = big[0]
        print(f"targets at 15,000 nodes ({core}): cycle {r['cycle_s']:.2f} s (< {TARGET_S:g} s: "
              f"{'met' if r['cycle_s'] < TARGET_S else 'NOT met'}), peak RSS {r['peak_rss_mib'] / 1024:.2f} GiB "
              f"(< {TARGET_RSS_GIB:g} GiB: {'met' if r['peak_rss_mib'] / 1024 < TARGET_RSS_GIB else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
