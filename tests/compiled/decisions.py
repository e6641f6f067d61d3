"""Decisions of a few busy clusters as JSON (run by ``test_compiled.py`` once interpreted and once with the
compiled core on ``PYTHONPATH``): the scale shape at smoke size (allocate alone and the five actions, two cycles
each, the second on the first one's outcome) and ReclaimLargeJobs, every field of every result; and the
simulation of ``examples/simulation/three-teams.yaml`` (every job's record and sample, its wall time left out)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import allocate as alloc
from benchmarks.actions import reclaim_large_jobs_cluster
from benchmarks.scale import SMOKE_SIZE, STEADY_PERIOD, apply_result, scale_cluster

import kaisched
from kaisched.cluster.schedule import no_cyclic_gc, prepare, resolve_config, run_prepared_cycle
from kaisched.k8s.parse import parse_objects
from kaisched.sim import simulate

THREE_TEAMS = Path(__file__).resolve().parents[2] / "examples" / "simulation" / "three-teams.yaml"


def decisions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    cluster = scale_cluster(SMOKE_SIZE)
    for actions in ("allocate", None):
        config = resolve_config({"actions": actions} if actions else None)
        parsed = prepare(parse_objects(cluster.objects), config, alloc.NOW)
        with no_cyclic_gc():
            first = run_prepared_cycle(parsed, config, alloc.NOW)
        then = apply_result(parsed, first, alloc.NOW)
        with no_cyclic_gc():
            second = run_prepared_cycle(then, config, alloc.NOW + STEADY_PERIOD)
        out[f"scale-{actions or 'default'}"] = [first.to_dict(), second.to_dict()]
    rlj = reclaim_large_jobs_cluster(20)
    out["reclaim-large-jobs"] = kaisched.schedule(rlj.objects, {"actions": rlj.action}, now=alloc.NOW).to_dict()
    simulated = asdict(simulate(THREE_TEAMS))
    del simulated["summary"]["wall_seconds"]
    out["simulation"] = simulated
    return out


def main() -> None:
    print(json.dumps({"compiled": kaisched.compiled(), "decisions": decisions()}, sort_keys=True,
                     default=str))


if __name__ == "__main__":
    main()
    sys.exit(0)
