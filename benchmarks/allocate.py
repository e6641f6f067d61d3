"""Measurements of one allocate cycle: wall time, memory, outcome, and sanity checks of the outcome.

Only ``kaisched.schedule(...)`` is timed; the objects are generated (and timed separately) before.
Peak memory is measured twice, differently:

* ``traced``: the peak of Python allocations made during one cycle, by ``tracemalloc``, in a run of its
  own after the timed runs (tracemalloc slows allocation down several times);
* ``rss``: the process's peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``) after the timed runs,
  which includes the interpreter, the imports and the generated objects (``rss_gen`` is the same
  figure read just before the first cycle). Meaningful per scenario only when each scenario runs in a
  fresh process, which ``python -m benchmarks`` does by default.
"""

from __future__ import annotations

import gc
import resource
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import kaisched
from benchmarks.clusters import FULL, SMOKE, Cluster, Obj

MIB: Final = 1024 * 1024
#: A fixed clock, so that every run (and every repetition) sees the same cycle.
NOW: Final = datetime(2026, 1, 1, tzinfo=UTC)
#: The issue measures one allocate cycle; ``--actions default`` runs KAI's whole default action list.
ALLOCATE_ONLY: Final[Mapping[str, Any]] = {"actions": "allocate"}
#: The target of the issue, per full-size scenario on the CI machine ...
TARGET_S: Final = 2.0
#: ... except where the issue sets another one for the scenario.
TARGETS_S: Final[Mapping[str, float]] = {"fractional": 3.0}
#: Slack of the sums of GPU fractions.
FRACTION_EPS: Final = 1e-9


def target_s(scenario: str) -> float:
    return TARGETS_S.get(scenario, TARGET_S)


def scheduler_config(actions: str) -> Mapping[str, Any] | None:
    """``"allocate"`` (the default), ``"default"`` (KAI's default list) or a comma-separated list."""
    if actions == "default":
        return None
    if actions == "allocate":
        return ALLOCATE_ONLY
    return {"actions": actions}


def generate(scenario: str, smoke: bool) -> tuple[Cluster, float]:
    """The scenario's cluster and the seconds it took to generate."""
    table = SMOKE if smoke else FULL
    t0 = time.perf_counter()
    cluster = table[scenario]()
    return cluster, time.perf_counter() - t0


def max_rss_mib() -> float:
    """The process's peak resident set so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / MIB if sys.platform == "darwin" else rss / 1024


# ---------------------------------------------------------------------------------------- inventory


def _int(quantity: Any) -> int:
    """The generators write plain integer quantities ("8"), so nothing more is needed here."""
    return int(str(quantity))


@dataclass(slots=True)
class Inventory:
    """What the checks need to know about the cluster, read off the generated objects."""

    node_gpus: dict[str, int] = field(default_factory=dict)
    node_pod_cap: dict[str, int] = field(default_factory=dict)
    used_gpus: Counter[str] = field(default_factory=Counter)  # node -> GPUs of Running pods
    used_pods: Counter[str] = field(default_factory=Counter)  # node -> Running pods
    pending_pods: dict[str, tuple[str, int]] = field(default_factory=dict)  # "ns/pod" -> ("ns/group", GPUs)
    # "ns/pod" -> gpu-fraction of the pending pods that ask for a share of one GPU (their GPUs above are 0)
    pending_fractions: dict[str, float] = field(default_factory=dict)
    group_pods: Counter[str] = field(default_factory=Counter)  # "ns/group" -> pending pods
    group_min: dict[str, int] = field(default_factory=dict)  # "ns/group" -> minMember
    group_queue: dict[str, str] = field(default_factory=dict)  # "ns/group" -> queue
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    topologies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # Topology -> level labels, widest first
    # "ns/group" -> (Topology, level) of its spec.topologyConstraint.requiredTopologyLevel
    group_required: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: list[Obj]) -> Inventory:
        inv = cls()
        for obj in objects:
            kind, meta = obj["kind"], obj["metadata"]
            if kind == "Node":
                alloc = obj["status"]["allocatable"]
                inv.node_gpus[meta["name"]] = _int(alloc.get("nvidia.com/gpu", 0))
                inv.node_pod_cap[meta["name"]] = _int(alloc.get("pods", 110))
                inv.node_labels[meta["name"]] = dict(meta.get("labels", {}))
            elif kind == "Topology":
                inv.topologies[meta["name"]] = tuple(level["nodeLabel"] for level in obj["spec"]["levels"])
            elif kind == "PodGroup":
                key = f"{meta['namespace']}/{meta['name']}"
                inv.group_min[key] = int(obj["spec"].get("minMember", 1))
                inv.group_queue[key] = obj["spec"]["queue"]
                constraint = obj["spec"].get("topologyConstraint") or {}
                if constraint.get("requiredTopologyLevel"):
                    inv.group_required[key] = (constraint["topology"], constraint["requiredTopologyLevel"])
            elif kind == "Pod":
                requests = obj["spec"]["containers"][0]["resources"]["requests"]
                gpus = _int(requests.get("nvidia.com/gpu", 0))
                node_name = obj["spec"].get("nodeName")
                if node_name:
                    inv.used_gpus[node_name] += gpus
                    inv.used_pods[node_name] += 1
                else:
                    key = f"{meta['namespace']}/{meta['name']}"
                    group = f"{meta['namespace']}/{meta['annotations']['pod-group-name']}"
                    inv.pending_pods[key] = (group, gpus)
                    inv.group_pods[group] += 1
                    fraction = meta["annotations"].get("gpu-fraction")
                    if fraction is not None:
                        inv.pending_fractions[key] = float(fraction)
        return inv

    def domain(self, node: str, topology: str, level: str) -> str | None:
        """The node's domain at ``level`` of ``topology`` (its level labels' values down to that level, joined
        by ``.``, spec 9.1); None when the node is not in the topology (lacks a level label), or there is no
        such topology or level (a PodGroup bound under such a constraint then counts as spread)."""
        levels = self.topologies.get(topology, ())
        labels = self.node_labels[node]
        if level not in levels or any(label not in labels for label in levels):
            return None
        return ".".join(labels[label] for label in levels[: levels.index(level) + 1])

    @property
    def total_gpus(self) -> int:
        return sum(self.node_gpus.values())

    @property
    def free_gpus(self) -> int:
        return self.total_gpus - sum(self.used_gpus.values())


# ------------------------------------------------------------------------------------------- checks


def _first(items: list[str], limit: int = 3) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def check(cluster: Cluster, inv: Inventory, result: kaisched.CycleResult) -> list[str]:
    """Everything that is wrong with ``result`` as an outcome on ``cluster``; empty when it makes sense."""
    failures: list[str] = []
    if result.errors:
        failures.append(f"{len(result.errors)} object errors, e.g. {result.errors[0].to_dict()}")

    # every bind is a distinct pending pod on a known node; a fractional pod joins exactly one GPU group,
    # a whole-GPU pod none
    seen: set[str] = set()
    bad: list[str] = []
    wrong_groups: list[str] = []
    node_gpus: Counter[str] = Counter()  # node -> whole GPUs bound
    node_pods: Counter[str] = Counter()
    group_binds: Counter[str] = Counter()
    group_nodes: dict[str, set[str]] = {}  # "ns/group" -> nodes its pods are bound to
    shares: dict[tuple[str, str], float] = {}  # (node, GPU group) -> sum of the fractions bound to it
    share_pods: dict[str, dict[str, set[str]]] = {}  # node -> GPU group -> fractional pods bound to it
    for b in result.binds:
        if b.pod in seen:
            bad.append(f"{b.pod} bound twice")
        seen.add(b.pod)
        entry = inv.pending_pods.get(b.pod)
        if entry is None:
            bad.append(f"{b.pod} is not a pending pod")
            continue
        if b.node not in inv.node_gpus:
            bad.append(f"{b.pod} bound to unknown node {b.node}")
            continue
        group, gpus = entry
        fraction = inv.pending_fractions.get(b.pod)
        if fraction is None:
            if b.gpu_groups:
                wrong_groups.append(f"{b.pod} (whole GPU) with gpuGroups {list(b.gpu_groups)}")
        elif len(b.gpu_groups) != 1:
            wrong_groups.append(f"{b.pod} (gpu-fraction {fraction:g}) with gpuGroups {list(b.gpu_groups)}")
        else:
            key = (b.node, b.gpu_groups[0])
            shares[key] = shares.get(key, 0.0) + fraction
            share_pods.setdefault(b.node, {}).setdefault(b.gpu_groups[0], set()).add(b.pod)
        node_gpus[b.node] += gpus
        node_pods[b.node] += 1
        group_binds[group] += 1
        group_nodes.setdefault(group, set()).add(b.node)
    if bad:
        failures.append(f"bad binds: {_first(bad)}")
    if wrong_groups:
        failures.append(f"{len(wrong_groups)} binds with the wrong number of gpuGroups: {_first(wrong_groups)}")

    # GPU devices the binds take: the whole GPUs, plus one per distinct shared GPU group (which also takes
    # one pod slot, for KAI's reservation pod)
    node_groups: Counter[str] = Counter(n for n, _ in shares)
    node_devices = node_gpus + node_groups
    whole_gpus, shared_gpus = sum(node_gpus.values()), len(shares)
    bound_gpus = whole_gpus + shared_gpus
    if bound_gpus > inv.free_gpus:
        failures.append(f"{bound_gpus} GPUs bound ({whole_gpus} whole + {shared_gpus} shared) but only "
                        f"{inv.free_gpus} were free")
    if cluster.expected_binds is not None and len(result.binds) != cluster.expected_binds:
        failures.append(f"{len(result.binds)} binds, expected exactly {cluster.expected_binds}")
    if cluster.expected_gpus_used is not None and bound_gpus != cluster.expected_gpus_used:
        failures.append(f"{bound_gpus} GPUs used by the binds ({whole_gpus} whole + {shared_gpus} shared groups), "
                        f"expected exactly {cluster.expected_gpus_used}")

    # no node over-committed: Running + bound GPUs (whole and shared groups) and pods within what the node
    # has; no shared GPU holds more than one whole GPU's worth of fractions
    over = [f"{n}: {inv.used_gpus[n]}+{node_gpus[n]}+{node_groups[n]} GPUs > {inv.node_gpus[n]}"
            for n, g in node_devices.items() if inv.used_gpus[n] + g > inv.node_gpus[n]]
    over += [f"{n}: {inv.used_pods[n]}+{p}+{node_groups[n]} pods > {inv.node_pod_cap[n]}"
             for n, p in node_pods.items() if inv.used_pods[n] + p + node_groups[n] > inv.node_pod_cap[n]]
    over += [f"{n} GPU group {g}: fractions sum to {f:.4f}" for (n, g), f in shares.items() if f > 1 + FRACTION_EPS]
    if over:
        failures.append(f"{len(over)} node over-commitments: {_first(over)}")

    # the node report agrees with the binds: idle GPUs and the members of each shared GPU
    failures += _check_node_report(inv, result, node_devices, share_pods)

    # gangs: a PodGroup is bound whole (all of its pods, at least minMember) or not at all
    partial = [f"{g}: {n} of {inv.group_pods[g]} pods (minMember {inv.group_min[g]})"
               for g, n in group_binds.items() if n < inv.group_min[g] or n != inv.group_pods[g]]
    if partial:
        failures.append(f"{len(partial)} gangs partly bound: {_first(partial)}")
    if cluster.expected_bound_groups is not None and len(group_binds) != cluster.expected_bound_groups:
        failures.append(f"{len(group_binds)} PodGroups bound, expected exactly {cluster.expected_bound_groups}")

    # topology constraints: in one domain of the required level, or pending for want of room, saying so
    failures += _check_topology(inv, result, group_nodes, node_devices)

    # the reported PodGroup statuses agree with the binds
    status = {g.name: g.status for g in result.pod_groups}
    missing = [g for g in inv.group_pods if g not in status]
    if missing:
        failures.append(f"{len(missing)} pending PodGroups missing from the result: {_first(missing)}")
    wrong = [f"{g} bound but {status[g]}" for g in group_binds if status.get(g, "Allocated") != "Allocated"]
    wrong += [f"{g} unbound but {status[g]}" for g in inv.group_pods
              if g not in group_binds and status.get(g, "Pending") != "Pending"]
    if wrong:
        failures.append(f"{len(wrong)} PodGroup statuses disagree with the binds: {_first(wrong)}")

    # nothing to pipeline onto or evict: no pod is releasing resources and every queue is within its share
    if result.pipelined:
        failures.append(f"{len(result.pipelined)} pods pipelined, expected none")
    if result.evictions:
        failures.append(f"{len(result.evictions)} evictions, expected none")

    # work conservation: limits are unlimited and nothing else constrains a single pod (1 GPU or a fraction
    # of one), and the room left only shrinks during the cycle, so a 1-GPU single pod may be left pending
    # only when no GPU is left free, a fractional one only when, besides, no shared GPU has its fraction free
    left = inv.free_gpus - bound_gpus
    waiting: list[str] = []
    waiting_fractions: list[tuple[float, str]] = []
    for p, (pg, _) in inv.pending_pods.items():
        if pg not in group_binds and inv.group_pods[pg] == 1 and inv.group_min[pg] == 1:
            fraction = inv.pending_fractions.get(p)
            waiting.append(p)
            if fraction is not None:
                waiting_fractions.append((fraction, p))
    if left > 0 and waiting:
        failures.append(f"{len(waiting)} single pods left pending with {left} GPUs free, e.g. {waiting[0]}")
    if waiting_fractions and shares:
        smallest, pod_name = min(waiting_fractions)
        room, (room_node, room_group) = max((1 - f, key) for key, f in shares.items())
        if room >= smallest - FRACTION_EPS:
            failures.append(f"{len(waiting_fractions)} fractional pods left pending, e.g. {pod_name} "
                            f"(gpu-fraction {smallest:g}), while GPU group {room_group} on {room_node} has "
                            f"{room:.2f} free")

    # equal queues (same quota, weight and demand) come out equal, within one gang
    if cluster.balanced_queues:
        per_queue: Counter[str] = Counter(dict.fromkeys(inv.group_queue.values(), 0))
        for g, n in group_binds.items():
            per_queue[inv.group_queue[g]] += n
        biggest = max((inv.group_min[g] for g in inv.group_pods), default=1)
        if per_queue and max(per_queue.values()) - min(per_queue.values()) > biggest:
            failures.append(f"unequal shares of equal queues: binds per queue range "
                            f"{min(per_queue.values())}..{max(per_queue.values())}")
    return failures


def _check_topology(inv: Inventory, result: kaisched.CycleResult, group_nodes: dict[str, set[str]],
                    node_devices: Counter[str]) -> list[str]:
    """PodGroups with a required topology level (spec 9.3): every bound one has all its pods in a single
    domain of that level; every pending one has a reason and a message that names the topology and the
    level; and one is left pending only when no domain of its level has room left for all its pods (whole
    GPUs only; CPU, memory and pod slots never run out in these scenarios; the room left only shrinks during
    an allocate cycle)."""
    if not inv.group_required:
        return []
    failures: list[str] = []
    spread: list[str] = []
    for g, nodes in group_nodes.items():
        required = inv.group_required.get(g)
        if required is not None:
            used = {inv.domain(n, *required) for n in nodes}
            if len(used) != 1 or None in used:
                spread.append(f"{g} on {len(nodes)} nodes in {sorted(str(d) for d in used)}")
    if spread:
        failures.append(f"{len(spread)} PodGroups not within one domain of their required level: {_first(spread)}")

    status = {g.name: g for g in result.pod_groups}
    pending = [g for g in inv.group_required if g not in group_nodes]
    silent: list[str] = []
    for g in pending:
        st = status.get(g)
        if st is None:
            continue  # reported missing by check()
        name, level = inv.group_required[g]
        message = st.message or ""
        if not st.reason or f"topology {name}" not in message or level not in message:
            silent.append(f"{g}: reason {st.reason!r}, message {st.message!r}")
    if silent:
        failures.append(f"{len(silent)} pending PodGroups without a topology reason: {_first(silent)}")

    # GPUs left free per node, and the pending GPU asks (all whole GPUs) per constrained PodGroup
    free = {n: gpus - inv.used_gpus[n] - node_devices[n] for n, gpus in inv.node_gpus.items()}
    asks: dict[str, list[int]] = {}
    for p, (g, gpus) in inv.pending_pods.items():
        if g in inv.group_required and p not in inv.pending_fractions:
            asks.setdefault(g, []).append(gpus)
    domains: dict[tuple[str, str], dict[str, list[str]]] = {}  # (topology, level) -> domain -> nodes
    roomy: list[str] = []
    for g in pending:
        required = inv.group_required[g]
        largest = max(asks.get(g, [0]))
        if required[0] not in inv.topologies or largest <= 0 or len(asks[g]) != inv.group_pods[g]:
            continue
        per_domain = domains.get(required)
        if per_domain is None:
            per_domain = domains[required] = {}
            for n in inv.node_gpus:
                d = inv.domain(n, *required)
                if d is not None:
                    per_domain.setdefault(d, []).append(n)
        for d, members in sorted(per_domain.items()):
            copies = sum(max(free[n], 0) // largest for n in members)
            if copies >= inv.group_pods[g]:
                roomy.append(f"{g} ({inv.group_pods[g]} pods of {largest} GPUs) while {d} has room for {copies}")
                break
    if roomy:
        failures.append(f"{len(roomy)} PodGroups left pending although a domain of their level has room: "
                        f"{_first(roomy)}")
    return failures


def _check_node_report(inv: Inventory, result: kaisched.CycleResult, node_devices: Counter[str],
                       share_pods: dict[str, dict[str, set[str]]]) -> list[str]:
    """``result.nodes`` against the binds: per GPU node, idle GPUs = GPUs - Running - bound (whole and
    shared groups), and the shared GPUs are exactly the GPU groups of the binds, with exactly their pods
    (no Running pod shares a GPU in these scenarios)."""
    reported = {n.name: n for n in result.nodes}
    wrong: list[str] = []
    for n, gpus in inv.node_gpus.items():
        if gpus <= 0:
            continue
        status = reported.get(n)
        if status is None:
            wrong.append(f"{n} missing")
            continue
        idle = gpus - inv.used_gpus[n] - node_devices[n]
        if status.idle != idle:
            wrong.append(f"{n}: {status.idle:g} idle GPUs reported, {idle} expected")
        shared = {g.group: set(g.pods) for g in status.shared}
        bound = share_pods.get(n, {})
        differ = [g for g in sorted(shared.keys() | bound.keys()) if shared.get(g) != bound.get(g)]
        if differ:
            g = differ[0]
            wrong.append(f"{n} GPU group {g}: pods {sorted(shared.get(g, ()))} reported, "
                         f"{sorted(bound.get(g, ()))} bound")
    return [f"{len(wrong)} nodes reported unlike the binds: {_first(wrong)}"] if wrong else []


# -------------------------------------------------------------------------------------- measurement


@dataclass(slots=True)
class Measurement:
    scenario: str
    description: str
    smoke: bool
    actions: str
    nodes: int
    gpus: int
    free_gpus: int
    pods: int  # every pod in the cluster
    pending_pods: int  # the pods the cycle has to place
    pending_groups_before: int
    objects: int
    gen_s: float
    walls_s: list[float]
    binds: int
    pending_groups: int  # PodGroups still Pending after the cycle
    traced_peak_mib: float | None
    rss_gen_mib: float
    rss_peak_mib: float
    failures: list[str]

    @property
    def best_s(self) -> float:
        return min(self.walls_s)

    @property
    def pods_per_s(self) -> float:
        return self.pending_pods / self.best_s if self.best_s > 0 else float("inf")

    @property
    def binds_per_s(self) -> float:
        return self.binds / self.best_s if self.best_s > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(best_s=self.best_s, pods_per_s=self.pods_per_s, binds_per_s=self.binds_per_s)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def _binds_key(result: kaisched.CycleResult) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(b.pod, b.node, b.gpu_groups) for b in result.binds]


def traced_peak_mib(objects: list[Obj], config: Mapping[str, Any] | None) -> float:
    """Peak of the Python allocations made during one cycle (objects generated before are not counted)."""
    gc.collect()
    tracemalloc.start()
    try:
        kaisched.schedule(objects, config, NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / MIB


def measure(scenario: str, *, smoke: bool = False, repeat: int = 3, actions: str = "allocate",
            trace_memory: bool = True) -> Measurement:
    """Generate the scenario, time ``repeat`` cycles (keeping the best), check the outcome, and measure
    the memory of one more, traced, cycle."""
    config = scheduler_config(actions)
    cluster, gen_s = generate(scenario, smoke)
    inv = Inventory.of(cluster.objects)
    rss_gen = max_rss_mib()

    walls: list[float] = []
    failures: list[str] = []
    first: list[tuple[str, str, tuple[str, ...]]] | None = None
    result: kaisched.CycleResult | None = None
    for _ in range(max(1, repeat)):
        result = None  # let the previous cycle's result go before the next one runs
        gc.collect()
        t0 = time.perf_counter()
        result = kaisched.schedule(cluster.objects, config, NOW)
        walls.append(time.perf_counter() - t0)
        key = _binds_key(result)
        if first is None:
            first = key
        elif key != first:
            failures.append("binds differ between repetitions of the same cycle")
    assert result is not None
    rss_peak = max_rss_mib()

    failures += check(cluster, inv, result)
    pending_after = sum(1 for g in result.pod_groups if g.status == "Pending")
    binds = len(result.binds)
    result = None
    traced = traced_peak_mib(cluster.objects, config) if trace_memory else None
    return Measurement(
        scenario=scenario,
        description=cluster.description,
        smoke=smoke,
        actions=actions,
        nodes=len(inv.node_gpus),
        gpus=inv.total_gpus,
        free_gpus=inv.free_gpus,
        pods=len(inv.pending_pods) + sum(inv.used_pods.values()),
        pending_pods=len(inv.pending_pods),
        pending_groups_before=len(inv.group_pods),
        objects=len(cluster.objects),
        gen_s=gen_s,
        walls_s=walls,
        binds=binds,
        pending_groups=pending_after,
        traced_peak_mib=traced,
        rss_gen_mib=rss_gen,
        rss_peak_mib=rss_peak,
        failures=failures,
    )


# --------------------------------------------------------------------------------------- reporting


COLUMNS: Final = ("scenario", "nodes", "GPUs", "pods", "pending", "gen s", "wall s", "binds", "pending PG",
                  "traced MiB", "RSS MiB", "pods/s", "binds/s", "check")


def table_rows(results: list[Measurement]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for m in results:
        rows.append((
            m.scenario,
            f"{m.nodes:,}",
            f"{m.gpus:,}",
            f"{m.pods:,}",
            f"{m.pending_pods:,}",
            f"{m.gen_s:.3f}",
            f"{m.best_s:.3f}",
            f"{m.binds:,}",
            f"{m.pending_groups:,}",
            "-" if m.traced_peak_mib is None else f"{m.traced_peak_mib:.1f}",
            f"{m.rss_peak_mib:.1f}",
            f"{m.pods_per_s:,.0f}",
            f"{m.binds_per_s:,.0f}",
            "ok" if m.ok else "FAIL",
        ))
    return rows


def format_table(results: list[Measurement]) -> str:
    rows = [COLUMNS, *table_rows(results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    out = [line(rows[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows[1:]]
    return "\n".join(out)


def format_report(results: list[Measurement], repeat: int) -> str:
    lines = [format_table(results), ""]
    lines.append(f"wall s: best of {repeat} calls of kaisched.schedule(); gen s: building the object list; "
                 "pending PG: PodGroups still Pending after the cycle;")
    lines.append("traced MiB: tracemalloc peak of one cycle; RSS MiB: process peak (ru_maxrss); "
                 "pods/s: pending pods / wall s.")
    for m in results:
        lines.append(f"  {m.scenario}: {m.description}")
        for f in m.failures:
            lines.append(f"    FAIL {f}")
    full = [m for m in results if not m.smoke]
    if full:
        slow = ", ".join(f"{m.scenario} {m.best_s:.2f} s" for m in full if m.best_s >= target_s(m.scenario))
        verdict = "NOT met" if slow else "met"
        own = ", ".join(f"{s} < {t:g} s" for s, t in TARGETS_S.items() if any(m.scenario == s for m in full))
        lines.append(f"target < {TARGET_S:g} s per full-size cycle" + (f" ({own})" if own else "") + f": {verdict}"
                     + (f" ({slow})" if slow else ""))
    return "\n".join(lines)
