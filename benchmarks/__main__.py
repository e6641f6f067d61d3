"""``python -m benchmarks``: time and sanity-check one allocate cycle on generated clusters.

Each scenario runs in a fresh interpreter (so that the process peak memory is its own); the parent
collects the figures and prints the table. Exit status 1 when a sanity check fails, whatever the speed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
from pathlib import Path

import kaisched
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time one kaisched allocate cycle on generated clusters (1,000 nodes x 8 GPUs) and check "
                    "that its outcome makes sense. Exits 1 when a check fails.",
    )
    p.add_argument("--smoke", action="store_true", help="tiny sizes (20 nodes) for CI: a few seconds in all")
    p.add_argument("--scenario", choices=SCENARIOS, action="append",
                   help="run only this scenario (repeatable; default: all of %(choices)s)")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="timed cycles per scenario; the best wall time is reported (default: %(default)s)")
    p.add_argument("--actions", default="allocate",
                   help="'allocate' (default: one allocate cycle), 'default' (KAI's default action list) "
                        "or a comma-separated list of actions")
    p.add_argument("--no-trace", action="store_true",
                   help="skip the extra tracemalloc cycle that measures Python allocation peak")
    p.add_argument("--in-process", action="store_true",
                   help="run every scenario in this process (the RSS column then is the running maximum)")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the figures as JSON to FILE ('-': stdout)")
    p.add_argument("--profile", choices=SCENARIOS, metavar="SCENARIO",
                   help="instead of timing, print the top cProfile entries of one cycle of SCENARIO")
    p.add_argument("--top", type=int, default=25, metavar="N", help="entries printed by --profile (default: 25)")
    p.add_argument("--sort", default="cumulative", choices=("cumulative", "tottime", "ncalls"),
                   help="order of --profile entries (default: %(default)s)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.top < 1:
        p.error("--top must be at least 1")
    return args


def profile(args: argparse.Namespace) -> int:
    cluster, gen_s = generate(args.profile, args.smoke)
    config = scheduler_config(args.actions)
    print(f"{args.profile}: {cluster.description}; {len(cluster.objects):,} objects generated in {gen_s:.3f} s")
    prof = cProfile.Profile()
    prof.enable()
    result = kaisched.schedule(cluster.objects, config, NOW)
    prof.disable()
    failures = check(cluster, Inventory.of(cluster.objects), result)
    print(f"{len(result.binds):,} binds; checks: {'ok' if not failures else 'FAIL'}")
    for f in failures:
        print(f"  FAIL {f}")
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 1 if failures else 0


def _run_one(args: argparse.Namespace, scenario: str) -> Measurement:
    return measure(scenario, smoke=args.smoke, repeat=args.repeat, actions=args.actions,
                   trace_memory=not args.no_trace)


def _run_isolated(args: argparse.Namespace, scenario: str) -> Measurement:
    """One scenario in a fresh interpreter, so that its ru_maxrss is its own."""
    cmd = [sys.executable, "-m", "benchmarks", "--worker", "--scenario", scenario, "--repeat", str(args.repeat),
           "--actions", args.actions]
    if args.smoke:
        cmd.append("--smoke")
    if args.no_trace:
        cmd.append("--no-trace")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"benchmark worker for {scenario!r} failed (exit {proc.returncode})")
    return Measurement.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        return profile(args)
    scenarios: list[str] = args.scenario or list(SCENARIOS)
    if args.worker:
        print(json.dumps(_run_one(args, scenarios[0]).to_dict()))
        return 0
    results: list[Measurement] = []
    for name in scenarios:
        print(f"running {name}{' (smoke)' if args.smoke else ''} ...", file=sys.stderr, flush=True)
        results.append(_run_one(args, name) if args.in_process else _run_isolated(args, name))
    print(format_report(results, args.repeat))
    if args.json is not None:
        text = json.dumps([m.to_dict() for m in results], indent=2)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n")
    return 0 if all(m.ok for m in results) else 1


if __name__ == "__main__":
    sys.exit(main())
