"""The convergence figures of issue 23: ``python -m tests.property.convergence_figures [N]`` draws N random eviction
clusters (fresh examples, the generator of ``test_convergence``), runs each to its fixed point on the embedded
cluster and prints: how many reached one and at which cycle, per cycle the GPUs evicted for good over the GPUs given to
pipelined preemptors, and how many pods were evicted twice for the same preemptor."""

from __future__ import annotations

import statistics
import sys
import warnings
from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings

from tests.property.test_convergence import evicted_and_gained, run_cycles
from tests.property.test_eviction_invariants import Cluster, eviction_clusters

Run = tuple[int | None, float, int, int, int]


def collect(n: int) -> list[Run]:
    runs: list[Run] = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(eviction_clusters(boundaries=False))
    def one(cluster: Cluster) -> None:
        run = run_cycles(cluster)
        ratios: list[float] = []
        evicted_total = gained_total = 0
        for result in run.results:
            evicted, gained = evicted_and_gained(cluster, result)
            evicted_total += evicted
            gained_total += gained
            if evicted:
                ratios.append(evicted / gained if gained else float("inf"))
        pairs = Counter((e.pod, e.preemptor) for r in run.results for e in r.evictions if e.preemptor)
        twice = sum(1 for n in pairs.values() if n > 1)
        runs.append((run.quiet_at, max(ratios, default=0.0), evicted_total, gained_total, twice))

    one()
    return runs


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")
    runs = collect(int(argv[0]) if argv else 1000)
    quiet = [r[0] for r in runs if r[0] is not None]
    print(f"runs: {len(runs)}; reached a fixed point: {len(quiet)}")
    print(f"first quiet cycle: median {statistics.median(quiet)}, max {max(quiet)}, "
          f"histogram {sorted(Counter(quiet).items())}")
    ratios = [r[1] for r in runs if r[2]]
    if ratios:
        print(f"runs with evictions: {len(ratios)}; per-cycle evicted/gained GPUs: median "
              f"{statistics.median(ratios):.2f}, max {max(ratios):.2f}")
    print(f"over all runs: {sum(r[2] for r in runs)} GPUs evicted for good, "
          f"{sum(r[3] for r in runs)} GPUs given to pipelined preemptors")
    print(f"pods evicted twice for the same preemptor: {sum(r[4] for r in runs)} "
          f"(in {sum(1 for r in runs if r[4])} runs)")


if __name__ == "__main__":
    main(sys.argv[1:])
