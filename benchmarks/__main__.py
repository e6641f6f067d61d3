"""``python -m benchmarks``: time and sanity-check kaisched cycles on generated clusters.

Three suites:

* ``allocate`` (the default): one allocate cycle on 1,000-node clusters (``benchmarks/allocate.py``);
* ``actions``: KAI's action benchmark shapes, one action each on 10 to 1,000 nodes, and heavier
  variants of reclaim, preempt and consolidation that make the action evict (``benchmarks/actions.py``);
* ``scale``: issue 9's 5,000-node cluster, an allocate cycle, a full cycle and a steady-state cycle (nothing
  changed since the last one) (``benchmarks/scale.py``).

Each scenario (each shape and size) runs in a fresh interpreter (so that the process peak memory is its
own); the parent collects the figures and prints the tables. Exit status 1 when a sanity check fails,
whatever the speed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kaisched
from benchmarks import actions, scale
from benchmarks.allocate import (
    NOW,
    Inventory,
    Measurement,
    check,
    format_report,
    generate,
    measure,
    scheduler_config,
)
from benchmarks.clusters import SCENARIOS

_ROOT = Path(__file__).resolve().parent.parent
SUITES = ("allocate", "actions", "scale", "all")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time kaisched scheduling cycles on generated clusters and check that their outcome makes "
                    "sense. Suites: 'allocate' (one allocate cycle on 1,000 nodes x 8 GPUs), 'actions' (KAI's "
                    "action benchmark set-ups: allocate, reclaim-kai, preempt-kai, consolidation-kai, "
                    "reclaim-large-jobs; and the heavier, evicting variants reclaim, preempt, consolidation) and "
                    "'scale' (issue 9: 5,000 nodes x 8 GPUs, 50,000 pending pods: scale, scale-full, scale-steady). "
                    "Exits 1 when a check fails.",
    )
    p.add_argument("--suite", choices=SUITES,
                   help="what to run (default: 'allocate', with --smoke 'all'; --scenario implies its suite)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes for CI (20-node allocate scenarios, 10-node action shapes, 50-node scale "
                        "shapes): a few seconds")
    p.add_argument("--scenario", choices=(*SCENARIOS, *actions.SHAPES, *scale.SHAPES), action="append",
                   help="run only this scenario or action shape (repeatable)")
    p.add_argument("--nodes", type=int, action="append", metavar="N",
                   help="action shapes: run these node counts instead of the shape's sizes (repeatable)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="timed cycles per scenario (default: 3 for allocate, the best is reported; 5 for actions "
                        "and scale, 2 for scale with --smoke, the median is reported)")
    p.add_argument("--budget", type=float, default=120.0, metavar="S",
                   help="action and scale shapes: stop repeating once the cycles took S seconds (at least one "
                        "runs), and skip the traced cycle when it would take longer (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="action and scale shapes: give up on one size (shape) after S seconds in all (reported "
                        "as a timeout, not a failure; default: %(default)s)")
    p.add_argument("--actions", default="allocate",
                   help="allocate suite: 'allocate' (default: one allocate cycle), 'default' (KAI's default "
                        "action list) or a comma-separated list of actions")
    p.add_argument("--no-trace", action="store_true",
                   help="skip the extra tracemalloc cycle that measures Python allocation peak")
    p.add_argument("--in-process", action="store_true",
                   help="run every scenario in this process (the RSS column then is the running maximum)")
    p.add_argument("--markdown", action="store_true", help="print the action and scale tables as Markdown")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the figures as JSON to FILE ('-': stdout)")
    p.add_argument("--profile", choices=(*SCENARIOS, *actions.SHAPES, *scale.SHAPES), metavar="SCENARIO",
                   help="instead of timing, print the top cProfile entries of one cycle of SCENARIO (an action "
                        "shape on its --nodes, default 100, 10 with --smoke; scale-steady: the timed cycle only)")
    p.add_argument("--top", type=int, default=25, metavar="N", help="entries printed by --profile (default: 25)")
    p.add_argument("--sort", default="cumulative", choices=("cumulative", "tottime", "ncalls"),
                   help="order of --profile entries (default: %(default)s)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.top < 1:
        p.error("--top must be at least 1")
    if args.nodes and min(args.nodes) < 1:
        p.error("--nodes must be at least 1")
    large = "reclaim-large-jobs"
    if args.nodes and min(args.nodes) < 10 and (args.profile == large or large in selected(args)[1]):
        p.error(f"{large} needs --nodes of at least 10 (its job has nodes/10 pods)")
    if args.suite in ("allocate", "actions", "scale") and args.scenario:
        members = {"allocate": SCENARIOS, "actions": actions.SHAPES, "scale": scale.SHAPES}[args.suite]
        wrong = [s for s in args.scenario if s not in members]
        if wrong:
            p.error(f"--scenario {wrong[0]} is not in --suite {args.suite}")
    return args


def selected(args: argparse.Namespace) -> tuple[list[str], list[str], list[str]]:
    """The allocate scenarios, the action shapes and the scale shapes to run."""
    if args.scenario:
        return ([s for s in SCENARIOS if s in args.scenario], [s for s in actions.SHAPES if s in args.scenario],
                [s for s in scale.SHAPES if s in args.scenario])
    suite = args.suite or ("all" if args.smoke else "allocate")
    return (list(SCENARIOS) if suite in ("allocate", "all") else [],
            list(actions.SHAPES) if suite in ("actions", "all") else [],
            list(scale.SHAPES) if suite in ("scale", "all") else [])


def action_runs(args: argparse.Namespace, shapes: list[str]) -> list[tuple[str, int]]:
    return [(shape, n) for shape in shapes for n in (args.nodes or actions.sizes(shape, args.smoke))]


# ------------------------------------------------------------------------------------------ profile


def _profiled(run: Callable[[], kaisched.CycleResult], check: Callable[[kaisched.CycleResult], list[str]],
              args: argparse.Namespace) -> int:
    """Run one cycle under cProfile, say what it decided and whether its checks pass, print the profile."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    result = run()
    prof.disable()
    wall = time.perf_counter() - t0
    failures = check(result)
    print(f"{wall:.3f} s under cProfile; {len(result.binds):,} binds, {len(result.pipelined):,} pipelined, "
          f"{len(result.evictions):,} evictions; checks: {'ok' if not failures else 'FAIL'}")
    for f in failures:
        print(f"  FAIL {f}")
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 1 if failures else 0


def profile(args: argparse.Namespace) -> int:
    if args.profile in actions.SHAPES:
        return profile_action(args)
    if args.profile in scale.SHAPES:
        return profile_scale(args)
    cluster, gen_s = generate(args.profile, args.smoke)
    config = scheduler_config(args.actions)
    print(f"{args.profile}: {cluster.description}; {len(cluster.objects):,} objects generated in {gen_s:.3f} s")
    return _profiled(lambda: kaisched.schedule(cluster.objects, config, NOW),
                     lambda result: check(cluster, Inventory.of(cluster.objects), result), args)


def profile_action(args: argparse.Namespace) -> int:
    shape = args.profile
    nodes = args.nodes[0] if args.nodes else (actions.SMOKE_NODES if args.smoke else 100)
    cluster, gen_s = actions.generate(shape, nodes)
    print(f"{shape} ({cluster.action}), {nodes} nodes: {cluster.description}; {len(cluster.objects):,} objects "
          f"generated in {gen_s:.3f} s")
    return _profiled(lambda: kaisched.schedule(cluster.objects, cluster.config, NOW),
                     lambda result: actions.check(cluster, actions.Census.of(cluster.objects), result), args)


def profile_scale(args: argparse.Namespace) -> int:
    shape = args.profile
    t0 = time.perf_counter()
    cluster, census, cycle = scale.profile_cycle(shape, args.smoke)
    what = ("the cycle after cycle 2, on its objects (cycles 1 and 2 already done)" if shape == "scale-steady"
            else "one cycle")
    print(f"{shape} ({scale.ACTIONS[shape]}): {cluster.description}; {len(cluster.objects):,} objects; set-up "
          f"{time.perf_counter() - t0:.1f} s; profiling {what}")
    return _profiled(cycle, lambda result: scale.check(shape, census, result), args)


# ------------------------------------------------------------------------------------------- running


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _common_flags(args: argparse.Namespace, repeat: int) -> list[str]:
    flags = ["--repeat", str(repeat)]
    if args.smoke:
        flags.append("--smoke")
    if args.no_trace:
        flags.append("--no-trace")
    return flags


def _run_allocate(args: argparse.Namespace, scenario: str, repeat: int) -> Measurement:
    if args.in_process:
        return measure(scenario, smoke=args.smoke, repeat=repeat, actions=args.actions,
                       trace_memory=not args.no_trace)
    # one scenario in a fresh interpreter, so that its ru_maxrss is its own
    cmd = [sys.executable, "-m", "benchmarks", "--worker", "--scenario", scenario, "--actions", args.actions,
           *_common_flags(args, repeat)]
    proc = subprocess.run(cmd, env=_worker_env(), stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"benchmark worker for {scenario!r} failed (exit {proc.returncode})")
    return Measurement.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _run_action(args: argparse.Namespace, shape: str, nodes: int, repeat: int) -> actions.ActionMeasurement:
    if args.in_process:
        return actions.measure(shape, nodes, smoke=args.smoke, repeat=repeat, budget_s=args.budget,
                               trace_memory=not args.no_trace)
    cmd = [sys.executable, "-m", "benchmarks", "--worker", "--scenario", shape, "--nodes", str(nodes),
           "--budget", str(args.budget), *_common_flags(args, repeat)]
    try:
        proc = subprocess.run(cmd, env=_worker_env(), stdout=subprocess.PIPE, text=True, check=False,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return actions.ActionMeasurement.timed_out(shape, nodes, args.smoke, args.timeout)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"benchmark worker for {shape!r} on {nodes} nodes failed (exit {proc.returncode})")
    return actions.ActionMeasurement.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _run_scale(args: argparse.Namespace, shape: str, repeat: int) -> scale.ScaleMeasurement:
    if args.in_process:
        return scale.measure(shape, smoke=args.smoke, repeat=repeat, budget_s=args.budget,
                             trace_memory=not args.no_trace, log=_log)
    cmd = [sys.executable, "-m", "benchmarks", "--worker", "--scenario", shape, "--budget", str(args.budget),
           *_common_flags(args, repeat)]
    try:
        proc = subprocess.run(cmd, env=_worker_env(), stdout=subprocess.PIPE, text=True, check=False,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return scale.ScaleMeasurement.timed_out(shape, args.smoke, args.timeout)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"benchmark worker for {shape!r} failed (exit {proc.returncode})")
    return scale.ScaleMeasurement.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def worker(args: argparse.Namespace) -> int:
    scenario = args.scenario[0]
    if scenario in scale.SHAPES:
        m: Measurement | actions.ActionMeasurement | scale.ScaleMeasurement = scale.measure(
            scenario, smoke=args.smoke, repeat=args.repeat or (scale.SMOKE_REPEAT if args.smoke else 5),
            budget_s=args.budget, trace_memory=not args.no_trace, log=_log)
    elif scenario in actions.SHAPES:
        nodes = args.nodes[0] if args.nodes else actions.sizes(scenario, args.smoke)[0]
        m = actions.measure(
            scenario, nodes, smoke=args.smoke, repeat=args.repeat or 5, budget_s=args.budget,
            trace_memory=not args.no_trace)
    else:
        m = measure(scenario, smoke=args.smoke, repeat=args.repeat or 3, actions=args.actions,
                    trace_memory=not args.no_trace)
    print(json.dumps(m.to_dict()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        return profile(args)
    if args.worker:
        return worker(args)
    scenarios, shapes, scale_shapes = selected(args)
    alloc_repeat = args.repeat or 3
    action_repeat = args.repeat or 5
    scale_repeat = args.repeat or (scale.SMOKE_REPEAT if args.smoke else 5)
    smoke = " (smoke)" if args.smoke else ""

    allocate_results: list[Measurement] = []
    for name in scenarios:
        print(f"running {name}{smoke} ...", file=sys.stderr, flush=True)
        allocate_results.append(_run_allocate(args, name, alloc_repeat))
    action_results: list[actions.ActionMeasurement] = []
    for shape, nodes in action_runs(args, shapes):
        print(f"running {shape} on {nodes} nodes{smoke} ...", file=sys.stderr, flush=True)
        action_results.append(_run_action(args, shape, nodes, action_repeat))
    scale_results: list[scale.ScaleMeasurement] = []
    for shape in scale_shapes:
        print(f"running {shape}{smoke} ...", file=sys.stderr, flush=True)
        scale_results.append(_run_scale(args, shape, scale_repeat))

    reports: list[str] = []
    if allocate_results:
        reports.append(format_report(allocate_results, alloc_repeat))
    if action_results:
        reports.append(actions.format_report(action_results, action_repeat, args.markdown))
    if scale_results:
        reports.append(scale.format_report(scale_results, scale_repeat, args.markdown))
    print("\n\n".join(reports))
    if args.json is not None:
        records: list[dict[str, Any]] = [m.to_dict() for m in allocate_results]
        records += [m.to_dict() for m in action_results]
        records += [m.to_dict() for m in scale_results]
        text = json.dumps(records, indent=2)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n")
    ok = (all(m.ok for m in allocate_results) and all(m.ok for m in action_results)
          and all(m.ok for m in scale_results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
