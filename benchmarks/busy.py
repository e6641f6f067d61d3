"""``python -m benchmarks.busy``: issue 21's eviction-heavy cycle on a busy shared cluster.

The cluster is :mod:`benchmarks.busy_cluster`'s (100 leaf queues under 10 departments, half the GPUs held by
running 2-GPU pods spread over every queue, 10 pending pods per node: 70 % single-pod jobs of 0.25-8 GPUs, 30 %
gangs of 4-64 pods). Each size runs one full cycle of KAI's five default actions on objects parsed and prepared
beforehand (snapshot to result, as Kubernetes mode runs it), in a fresh interpreter, twice side by side:

* **kaisched**: the victim search as shipped;
* **full search**: the same with ``kaisched.actions.solver.SHORTCUTS.prove_failures`` and ``validate_first``
  off — every scenario the filters let through is simulated in full (the reference the decisions must equal;
  skipped past ``--reference-up-to`` nodes).

It prints per size the cycle time, each action's time, what the searches cost per preemptor (simulations,
scenarios proved to fail, job placements tried in simulations), whether both decided identically, the
speed-up, and the growth exponent of the cycle time from the smallest to the largest size (``t ~ nodes^k``).
No scenario search budget is configured (KAI's budgets never bind here). Exit status 1 when a check fails
(over-commitment, a partly placed gang, decisions that differ from the full search).

    .venv/bin/python -m benchmarks.busy                  # 250, 500, 1,000, 5,000 nodes (the full search up to 1,000)
    .venv/bin/python -m benchmarks.busy --nodes 1000     # one size
    .venv/bin/python -m benchmarks.busy --smoke          # 40 nodes, a few seconds: what CI runs (make test)
    make compiled && PYTHONPATH=build/compiled .venv/bin/python -m benchmarks.busy   # the shipped (compiled) core
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Final

SIZES: Final = (250, 500, 1000, 5000)
SMOKE_SIZES: Final = (40,)
MODES: Final = ("kaisched", "full search")
#: targets on the compiled core (issue 21): whole cycle seconds per size
TARGETS: Final = {1000: 2.0, 5000: 10.0}


def _worker(nodes: int, mode: str) -> dict[str, Any]:
    from benchmarks import allocate as alloc
    from benchmarks.busy_cluster import BusySize, busy_cluster
    from benchmarks.scale import Census, check
    from kaisched.actions.solver import SHORTCUTS
    from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config
    from kaisched.k8s.parse import parse_objects
    from kaisched.kube.metrics import timed_cycle

    size = BusySize(nodes) if nodes >= 100 else BusySize(nodes, departments=4, teams=3)
    t0 = time.perf_counter()
    cluster = busy_cluster(size)
    gen_s = time.perf_counter() - t0
    cfg = resolve_config(None)
    parsed = prepare(parse_objects(cluster.objects), cfg, alloc.NOW)
    SHORTCUTS.prove_failures = SHORTCUTS.validate_first = mode == "kaisched"
    gc.collect()
    t0 = time.perf_counter()
    with no_cyclic_gc():
        result, timings = timed_cycle(parsed, cfg, alloc.NOW)
    cycle_s = time.perf_counter() - t0
    failures = check("scale-full", Census.of(cluster.objects), result)
    return {
        "nodes": nodes, "mode": mode, "description": cluster.description, "gen_s": gen_s, "cycle_s": cycle_s,
        "actions_ms": timings.actions_ms, "binds": len(result.binds), "pipelined": len(result.pipelined),
        "evictions": len(result.evictions), "search": {a: s.to_dict() for a, s in result.search_stats.items()},
        "decisions": json.dumps(result.to_dict(), sort_keys=True), "failures": failures,
        "compiled": _compiled(),
    }


def _compiled() -> bool:
    import kaisched.actions.solver as solver

    return not str(solver.__file__).endswith(".py")


def _run(nodes: int, mode: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.busy", "--worker", str(nodes), "--mode", mode]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy(), check=False)
    except subprocess.TimeoutExpired:
        return {"nodes": nodes, "mode": mode, "timeout": timeout}
    if done.returncode != 0:
        return {"nodes": nodes, "mode": mode, "error": done.stderr.strip().splitlines()[-1:] or ["exit status"]}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _per_preemptor(run: dict[str, Any]) -> str:
    search = run.get("search", {})
    pre = sum(s["preemptors"] for s in search.values())
    if not pre:
        return "no search"
    sims = sum(s["simulations"] for s in search.values())
    proved = sum(s["proved"] for s in search.values())
    everywhere = sum(s["proved_everywhere"] for s in search.values())
    placements = sum(s["placements"] for s in search.values())
    solved = sum(s["solved"] for s in search.values())
    refused = sum(s.get("refused_unplaced", 0) for s in search.values())
    return (f"{pre} preemptors ({solved} solved, {everywhere} proved hopeless at once): {sims / pre:.1f} "
            f"simulations, {proved / pre:.1f} scenarios proved to fail, {refused / pre:.1f} refused before placing, "
            f"{placements / pre:.1f} placements each")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.busy", description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="40 nodes only (CI)")
    p.add_argument("--nodes", type=int, action="append", metavar="N", help="these sizes (repeatable)")
    p.add_argument("--reference-up-to", type=int, default=1000, metavar="N",
                   help="run the full search beside kaisched up to N nodes (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="per run (default: %(default)s)")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, default="kaisched", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(_worker(args.worker, args.mode)))
        return 0
    sizes = tuple(args.nodes) if args.nodes else SMOKE_SIZES if args.smoke else SIZES
    runs: list[dict[str, Any]] = []
    failed = False
    for nodes in sizes:
        fast = _run(nodes, "kaisched", args.timeout)
        runs.append(fast)
        ref = _run(nodes, "full search", args.timeout) if nodes <= args.reference_up_to else None
        if ref is not None:
            runs.append(ref)
        failed |= _report(fast, ref)
    timed = [r for r in runs if r["mode"] == "kaisched" and "cycle_s" in r]
    if len(timed) >= 2:
        a, b = timed[0], timed[-1]
        k = math.log(b["cycle_s"] / a["cycle_s"]) / math.log(b["nodes"] / a["nodes"])
        print(f"growth: cycle time ~ nodes^{k:.2f} from {a['nodes']:,} to {b['nodes']:,} nodes")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([{k: v for k, v in r.items() if k != "decisions"} for r in runs], fh, indent=2)
    return 1 if failed else 0


def _report(fast: dict[str, Any], ref: dict[str, Any] | None) -> bool:
    """Print one size; True when a check failed."""
    nodes = fast["nodes"]
    if "cycle_s" not in fast:
        print(f"{nodes:,} nodes: kaisched {'timed out' if 'timeout' in fast else fast.get('error')}")
        return "error" in fast
    core = "compiled" if fast["compiled"] else "interpreted"
    print(f"\n{fast['description']} ({core} core)")
    for run in (fast, ref):
        if run is None:
            continue
        if "cycle_s" not in run:
            why = f"timed out after {run['timeout']:.0f} s" if "timeout" in run else f"failed: {run.get('error')}"
            print(f"  {run['mode']:>12}: {why}")
            continue
        parts = ", ".join(f"{a} {ms / 1000:.2f}" for a, ms in run["actions_ms"].items())
        print(f"  {run['mode']:>12}: cycle {run['cycle_s']:.2f} s ({parts}); {run['binds']:,} bound, "
              f"{run['pipelined']:,} pipelined, {run['evictions']:,} evicted")
        print(f"  {'':>12}  {_per_preemptor(run)}")
    bad = list(fast["failures"])
    if ref is not None and "cycle_s" in ref:
        same = ref["decisions"] == fast["decisions"]
        print(f"  decisions {'identical to' if same else 'DIFFER FROM'} the full search; "
              f"speed-up {ref['cycle_s'] / fast['cycle_s']:.1f}x")
        if not same:
            bad.append("decisions differ from the full search")
    target = TARGETS.get(nodes)
    if target is not None and fast["compiled"]:
        print(f"  target < {target:g} s: {'met' if fast['cycle_s'] < target else 'NOT met'}")
    for f in bad:
        print(f"  CHECK FAILED: {f}")
    return bool(bad)


if __name__ == "__main__":
    sys.exit(main())
