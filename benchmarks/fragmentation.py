"""The cost of fragmentation-aware placement (issue 26): one allocate cycle with KAI's default placement and with
``examples/config/fragmentation-aware.yaml``, on the same generated cluster, side by side in one run, and their
ratio. The shapes are the allocate benchmark's (benchmarks/clusters.py): ``mixed`` (whole GPUs, singles and gangs)
and ``fractional`` (shares of GPUs), at ``--nodes`` nodes with ten pods per node. With ``--repeat N`` each placement
runs N times, alternating, and the fastest of each is kept (on a machine shared with other work, one slow run
would otherwise decide the ratio).

    .venv/bin/python -m benchmarks.fragmentation --nodes 1000 --nodes 5000 --repeat 3
    .venv/bin/python -m benchmarks.fragmentation --smoke
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

import kaisched
from benchmarks.allocate import NOW
from benchmarks.clusters import Cluster, fractional, mixed

CONFIG: Final = Path(__file__).resolve().parents[1] / "examples" / "config" / "fragmentation-aware.yaml"
SHAPES: Final[Mapping[str, Callable[[int], Cluster]]] = {
    "mixed": lambda n: mixed(nodes=n, singles=3 * n, gangs4=n // 2, gangs8=n // 8),
    "fractional": lambda n: fractional(nodes=n, pods=10 * n),
}


def allocate_only(config: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**(config or {}), "actions": "allocate"}


def timed(cluster: Cluster, config: Mapping[str, Any]) -> tuple[float, kaisched.CycleResult]:
    t0 = time.perf_counter()
    result = kaisched.schedule(cluster.objects, config=config, now=NOW)
    return time.perf_counter() - t0, result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fragmentation", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, action="append", help="cluster sizes (repeatable; default 1000)")
    p.add_argument("--smoke", action="store_true", help="20 nodes: a few seconds")
    p.add_argument("--repeat", type=int, default=1, help="runs of each placement, alternating; the fastest kept")
    args = p.parse_args(argv)
    sizes = [20] if args.smoke else (args.nodes or [1000])
    aware = allocate_only(yaml.safe_load(CONFIG.read_text()))
    default = allocate_only(None)
    print(f"{'shape':<11}{'nodes':>7}{'pods':>8}{'binpack s':>11}{'aware s':>9}{'ratio':>7}{'binds':>14}")
    failed = False
    for nodes in sizes:
        for name, make in SHAPES.items():
            cluster = make(nodes)
            pods = sum(1 for o in cluster.objects if o.get("kind") == "Pod")
            base_s, base = timed(cluster, default)
            aware_s, result = timed(cluster, aware)
            for _ in range(max(args.repeat, 1) - 1):
                base_s = min(base_s, timed(cluster, default)[0])
                aware_s = min(aware_s, timed(cluster, aware)[0])
            if result.errors or base.errors:
                failed = True
            print(f"{name:<11}{nodes:>7,}{pods:>8,}{base_s:>11.2f}{aware_s:>9.2f}{aware_s / base_s:>7.2f}"
                  f"{len(base.binds):>7,}/{len(result.binds):<6,}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
