"""KAI's scenario harness (corpus README section 1) and matcher (section 3), over ``schedule()``.

This module never imports ``kaisched``: the scheduling function is passed in, so the harness itself
can be tested with a fake (``test_manifests.py``).

Unit scenarios: one session running only the scenario's actions, then MATCH on that session.
Integration scenarios: ``rounds_until_match`` rounds, each followed by the write-back of README 1.3;
MATCH on the rebuilt state; then ``rounds_after_match`` more rounds, each followed by MATCH.

The after-match rounds are matched against the *post-action* state of the round (README 1.3: a job
expected Pending must not be bound or pipelined in those rounds). KAI's own Go harness
(``integration_tests_utils.runRoundsAfterAndMatch``) matches the state *rebuilt* after the
write-back instead, which is more lenient only for a job that is pipelined every round. Set
``KAISCHED_CONFORMANCE_AFTER_MATCH=rebuilt`` to get KAI's behaviour; a failure under the default mode
says when the rebuilt state would have matched.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from .manifests import auto_gpu_group, job_last_start, parse_rfc3339, to_manifests
from .scenario import (
    ACTIVE_USED,
    ALL_ACTIONS,
    ALLOCATED,
    Expectation,
    Job,
    Node,
    Scenario,
    Task,
)

NOW0 = datetime(2026, 1, 1, tzinfo=UTC)
ROUND_STEP = timedelta(seconds=1)

AFTER_MATCH_ENV = "KAISCHED_CONFORMANCE_AFTER_MATCH"
POST_ACTION = "post-action"
REBUILT = "rebuilt"

# integration scenarios tagged with one of these need every action of the round implemented
NEEDS_ALL_ACTIONS_TAGS = ("reclaim", "preempt", "consolidation", "stalegangeviction", "deletion")

ScheduleFn = Callable[..., Any]


class HarnessError(AssertionError):
    """A scenario did not conform; the message is the readable report."""


# ------------------------------------------------------------------------------------------------
# Scope


def plan(s: Scenario, implemented: Iterable[str]) -> tuple[tuple[str, ...], str | None]:
    """The actions to run for a scenario, or a skip reason."""
    impl = set(implemented)
    if s.bind_always_fails:
        return (), "needs-mock: every Bind() fails in the source test (a mocked cache, not scenario data)"
    if s.is_unit:
        for a in s.actions:
            if a not in impl:
                return (), f"needs action {a} (not implemented yet)"
        return s.actions, None
    run = tuple(a for a in ALL_ACTIONS if a in impl)
    if "allocate" in s.tags:
        if "allocate" not in impl:
            return (), "needs action allocate (not implemented yet)"
        return run, None
    if any(tag in s.tags for tag in NEEDS_ALL_ACTIONS_TAGS):
        for a in ALL_ACTIONS:
            if a not in impl:
                return (), f"needs action {a} (not implemented yet)"
    return run, None


# ------------------------------------------------------------------------------------------------
# Applying a result


def _index(state: Scenario) -> dict[str, tuple[Job, Task]]:
    return {j.pod_key(t): (j, t) for j, t in state.iter_tasks()}


def apply_result(state: Scenario, d: Mapping[str, Any]) -> tuple[Scenario, list[str]]:
    """The post-action state: bound -> Binding, pipelined -> Pipelined, evicted -> Releasing.

    A victim that is also pipelined (consolidation moves it) ends Pipelined on its new node.
    Returns the state and the problems found (pods the result names that the scenario lacks).
    """
    index = _index(state)
    updates: dict[str, Task] = {}
    problems: list[str] = []

    def current(pod: str, kind: str) -> Task | None:
        jt = index.get(pod)
        if jt is None:
            problems.append(f"result.{kind} names a pod that is not in the scenario: {pod!r}")
            return None
        return updates.get(jt[1].id, jt[1])

    for ev in d.get("evictions") or []:
        t = current(ev.get("pod", ""), "evictions")
        if t is not None:
            updates[t.id] = replace(t, status="Releasing")
    for kind, status in (("pipelined", "Pipelined"), ("binds", "Binding")):
        for b in d.get(kind) or []:
            t = current(b.get("pod", ""), kind)
            if t is not None:
                groups = tuple(str(g) for g in b.get("gpuGroups") or ()) or t.gpu_groups
                updates[t.id] = replace(t, status=status, node=b.get("node") or "", gpu_groups=groups)
    return state.with_tasks(updates), problems


def write_back_claims(state: Scenario, d: Mapping[str, Any]) -> Scenario:
    """The DRA claims' status after a round, as KAI's harness copies it back: a claim the round allocated gets
    its allocation and its pods' reservations; an evicted pod's reservations go, and a claim no pod reserves any
    more is deallocated (the resourceclaim controller's part)."""
    if not state.dra:
        return state
    claims = [dict(c) for c in state.dra.get("resource_claims") or []]
    by_key = {f"{c.get('namespace') or 'default'}/{c['name']}": c for c in claims}
    for alloc in d.get("claims") or []:
        c = by_key.get(alloc["claim"])
        if c is None or not alloc.get("new"):
            continue
        status = dict(c.get("claim_status") or {})
        status["allocation"] = {"devices": {"results": list(alloc["devices"])}}
        pods = [p.split("/", 1)[1] for p in alloc["pods"]]
        status["reserved_for"] = [{"resource": "pods", "name": p, "uid": p} for p in pods]
        status.pop("reserved_for_generated", None)
        c["claim_status"] = status
    evicted = {e["pod"].split("/", 1)[1] for e in d.get("evictions") or []}
    for c in claims:
        status = c.get("claim_status")
        if not status or not evicted:
            continue
        reserved = [r for r in status.get("reserved_for") or [] if r.get("uid") not in evicted]
        if len(reserved) != len(status.get("reserved_for") or []):
            status = dict(status, reserved_for=reserved)
            if not reserved:
                status.pop("allocation", None)
            c["claim_status"] = status
    return replace(state, dra={**state.dra, "resource_claims": claims})


def write_back(pre: Scenario, post: Scenario) -> Scenario:
    """The next round's input (README 1.3 table; KAI's ``runSchedulerOneRound``)."""
    pre_tasks = {t.id: t for _, t in pre.iter_tasks()}
    updates: dict[str, Task] = {}
    for j, t in post.iter_tasks():
        old = pre_tasks[t.id]
        if t.status == "Binding":
            updates[t.id] = replace(t, status="Running")
        elif t.status == "Pipelined" or (t.status == "Releasing" and not j.delete_job_in_test):
            # the pipelined placement is dropped / the evicted pod is recreated; the harness keeps
            # the task's previous GPU groups
            updates[t.id] = replace(t, status="Pending", node="", gpu_groups=old.gpu_groups)
    return post.with_tasks(updates)


# ------------------------------------------------------------------------------------------------
# Observations and MATCH


@dataclass(frozen=True, slots=True)
class Observation:
    """What MATCH looks at: task states plus the jobs' last-start times and fit messages."""

    state: Scenario
    now: datetime
    last_start: Mapping[str, datetime | None]  # job name -> last start
    messages: Mapping[str, str | None] = field(default_factory=dict)  # job name -> fit message


def _pod_groups(state: Scenario, d: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    by_key = {pg.get("name"): pg for pg in d.get("podGroups") or []}
    return {j.name: by_key[j.key] for j in state.jobs if j.key in by_key}


def observe_result(state: Scenario, d: Mapping[str, Any], now: datetime) -> Observation:
    pgs = _pod_groups(state, d)
    last: dict[str, datetime | None] = {}
    for j in state.jobs:
        ts = (pgs.get(j.name) or {}).get("lastStartTimestamp")
        last[j.name] = parse_rfc3339(ts) if ts else None
    return Observation(state, now, last, messages_of(state, d))


def observe_rebuilt(state: Scenario, now: datetime, messages: Mapping[str, str | None]) -> Observation:
    """A session built from the data with no action run: last start as the harness sets it."""
    return Observation(state, now, {j.name: job_last_start(j, now) for j in state.jobs}, messages)


def messages_of(state: Scenario, d: Mapping[str, Any]) -> dict[str, str | None]:
    """Each job's fit message in KAI's detailed job-message form (what ``error_message`` holds): a line with
    the reason, then the message, each ending with a period."""
    out: dict[str, str | None] = {}
    for name, pg in _pod_groups(state, d).items():
        reason, message = pg.get("reason"), pg.get("message")
        out[name] = f"\n{reason}.\n{message}." if reason and message else message
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _fmt(x: float) -> str:
    return f"{x:g}"


def _where(t: Task) -> str:
    return f"{t.status}@{t.node}" if t.node else t.status


def _check(label: str, j: Job, tasks: Sequence[Task], e: Expectation, obs: Observation) -> list[str]:
    out: list[str] = []
    if any(t.status != e.status for t in tasks):
        got = ", ".join(f"{t.id}={_where(t)}" for t in tasks)
        out.append(f"{label}: status expected {e.status}, got {got}")
    if e.node and any(t.node != e.node for t in tasks):
        got = ", ".join(f"{t.id}={t.node or '-'}" for t in tasks)
        out.append(f"{label}: node expected {e.node}, got {got}")
    required = sum(j.gpus_required(t) for t in tasks)
    if not _close(required, e.gpus_required):
        out.append(
            f"{label}: gpus_required expected {_fmt(e.gpus_required)}, the scenario model gives "
            f"{_fmt(required)} (a harness modelling problem)"
        )
    # README 6.4: KAI leaves the accepted GPUs of a gang attempt it rolled back on the pending pods (an
    # artifact of its in-memory test session, invisible in a cluster); GPUs are only "accepted" by a pod
    # that holds them, so the expectation is checked for placed pods
    if e.gpus_accepted and any(t.status in ACTIVE_USED for t in tasks):
        accepted = sum(j.gpus_accepted(t, obs.state.node(t.node) if t.status in ACTIVE_USED else None) for t in tasks)
        if not _close(accepted, e.gpus_accepted):
            out.append(f"{label}: gpus_accepted expected {_fmt(e.gpus_accepted)}, got {_fmt(accepted)}")
    if e.milli_cpu_required:
        cpu = sum(j.milli_cpu(t) for t in tasks)
        if not _close(cpu, e.milli_cpu_required):
            out.append(f"{label}: milli_cpu_required expected {_fmt(e.milli_cpu_required)}, model {cpu}")
    if e.memory_required:
        mem = sum(j.memory(t) for t in tasks)
        if not _close(mem, e.memory_required):
            out.append(f"{label}: memory_required expected {_fmt(e.memory_required)}, model {mem}")
    last = obs.last_start.get(j.name)
    if e.status in ALLOCATED and last is None:
        out.append(f"{label}: status {e.status} needs a lastStartTimestamp on PodGroup {j.key}, got none")
    if e.last_start_older_than_seconds is not None:
        limit = e.last_start_older_than_seconds
        if last is None or (obs.now - last).total_seconds() < limit:
            age = "none" if last is None else f"{(obs.now - last).total_seconds():g}s old"
            out.append(f"{label}: lastStartTimestamp must be at least {limit:g}s old, got {age}")
    if e.error_message is not None:
        msg = obs.messages.get(j.name)
        expected = e.error_message
        if not j.namespace:  # the scenario's empty namespace is written as "default" (manifests.py)
            expected = expected.replace(f"</{j.name}>", f"<{j.k8s_namespace}/{j.name}>")
        if msg != expected:
            out.append(f"{label}: fit message expected {expected!r}, got {msg!r}")
    return out


def node_gpus(state: Scenario, n: Node) -> tuple[float, float]:
    """(idle, releasing) GPUs of a node as KAI's NodeInfo counts them.

    Active-used tasks take GPUs from idle; Releasing ones also count as releasing; Pipelined ones
    consume releasing GPUs. A shared GPU (one GPU group) is one device: releasing when every
    non-pipelined task on it is releasing.
    """
    used = releasing = pipelined = 0.0
    groups: dict[str, list[str]] = {}
    for j, t in state.iter_tasks():
        if t.node != n.name or t.status not in ACTIVE_USED:
            continue
        if j.is_shared_gpu(t):
            for g in t.gpu_groups or (auto_gpu_group(t),):
                groups.setdefault(g, []).append(t.status)
            continue
        held = j.gpu_devices_held(t)
        if t.status == "Pipelined":
            pipelined += held
        else:
            used += held
            if t.status == "Releasing":
                releasing += held
    for statuses in groups.values():
        placed = [s for s in statuses if s != "Pipelined"]
        if not placed:
            pipelined += 1
            continue
        used += 1
        if all(s == "Releasing" for s in placed):
            releasing += 1
    return n.gpu_devices - used, releasing - pipelined


def match(s: Scenario, obs: Observation) -> list[str]:
    """Every mismatch between the scenario's expectations and an observation."""
    out: list[str] = []
    for name, e in s.expected.jobs.items():
        j = obs.state.job(name)
        if j is None:
            out.append(f"expected.jobs names a job the scenario lacks: {name!r}")
            continue
        out.extend(_check(f"job {name}", j, j.tasks, e, obs))
    tasks = {t.id: (j, t) for j, t in obs.state.iter_tasks()}
    for tid, e in s.expected.tasks.items():
        if tid in s.dead_expectation_keys:
            continue  # names no pod; KAI never checks it
        if tid not in tasks:
            out.append(f"expected.tasks names a pod the scenario lacks: {tid!r}")
            continue
        j, t = tasks[tid]
        out.extend(_check(f"task {tid}", j, [t], e, obs))
    for node_name, ne in s.expected.nodes.items():
        n = obs.state.node(node_name)
        if n is None:
            out.append(f"expected.nodes names a node the scenario lacks: {node_name!r}")
            continue
        idle, rel = node_gpus(obs.state, n)
        if not _close(idle, ne.idle_gpus) or not _close(rel, ne.releasing_gpus):
            out.append(
                f"node {node_name}: expected idle {_fmt(ne.idle_gpus)} / releasing "
                f"{_fmt(ne.releasing_gpus)} GPUs, got idle {_fmt(idle)} / releasing {_fmt(rel)}"
            )
    return out


def check_round(s: Scenario, d: Mapping[str, Any]) -> list[str]:
    """Per-session checks: no input errors, and the Bind/Evict/Pipeline call limits."""
    out: list[str] = []
    for err in d.get("errors") or []:
        out.append(f"input error: {err.get('object')}: {err.get('field')}: {err.get('message')}")
    limits = (
        ("binds", s.expected.binds),
        ("evictions", s.expected.evictions),
        ("pipelined", s.expected.pipelined),
    )
    for kind, limit in limits:
        entries = d.get(kind) or []
        if len(entries) > limit:
            pods = ", ".join(str(x.get("pod")) for x in entries)
            allowed = "none allowed" if limit == 0 else f"at most {limit} allowed"
            out.append(f"{len(entries)} {kind} in one session, {allowed}: {pods}")
    return out


# ------------------------------------------------------------------------------------------------
# Reports


def _expectation_of(s: Scenario, j: Job, t: Task) -> Expectation | None:
    e = s.expected.tasks.get(t.id)
    return e if e is not None else s.expected.jobs.get(j.name)


def _task_rows(s: Scenario, input_state: Scenario, observed: Scenario) -> list[str]:
    inputs = {t.id: t for _, t in input_state.iter_tasks()}
    rows = [("", "task", "input", "expected", "actual")]
    for j, t in observed.iter_tasks():
        e = _expectation_of(s, j, t)
        if e is None:
            want, flag = "-", ""
        else:
            want = f"{e.status}@{e.node}" if e.node else e.status
            flag = "!" if t.status != e.status or (e.node and t.node != e.node) else ""
        rows.append((flag, t.id, _where(inputs[t.id]), want, _where(t)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _result_summary(d: Mapping[str, Any] | None) -> list[str]:
    if d is None:
        return []
    lines = []
    for kind in ("binds", "pipelined"):
        for b in d.get(kind) or []:
            groups = f" gpuGroups={b.get('gpuGroups')}" if b.get("gpuGroups") else ""
            lines.append(f"  {kind[:-1] if kind == 'binds' else kind}: {b.get('pod')} -> {b.get('node')}{groups}")
    for ev in d.get("evictions") or []:
        why = f"{ev.get('action')}, preemptor {ev.get('preemptor')}"
        lines.append(f"  evict: {ev.get('pod')} ({why}): {ev.get('message')}")
    for pg in d.get("podGroups") or []:
        if pg.get("status") == "Pending" and pg.get("message"):
            lines.append(f"  pending {pg.get('name')}: {pg.get('reason')}: {pg.get('message')}")
    return lines


def report(
    s: Scenario,
    where: str,
    problems: Sequence[str],
    input_state: Scenario,
    observed: Scenario | None,
    d: Mapping[str, Any] | None,
    extra: Sequence[str] = (),
) -> str:
    lines = [
        f"scenario {s.id}: {s.name}",
        f"  {s.harness} harness, {where}",
        f"  source: {s.source}",
        "mismatches:",
        *(f"  - {p}" for p in problems),
        *extra,
    ]
    if observed is not None:
        lines.append("tasks (! = differs from the expectation):")
        lines.extend(_task_rows(s, input_state, observed))
    summary = _result_summary(d)
    if summary:
        lines.append("scheduler result of this round:")
        lines.extend(summary)
    if s.note:
        lines.append(f"note: {s.note}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Runners


def _schedule(schedule: ScheduleFn, s: Scenario, state: Scenario, actions: Sequence[str], now: datetime) -> Any:
    result = schedule(to_manifests(state, now), config=s.config(actions), now=now)
    return result.to_dict()


def run_scenario(s: Scenario, schedule: ScheduleFn, actions: Sequence[str], *, after_match: str | None = None) -> None:
    """Run one scenario; raise :class:`HarnessError` with a readable report on the first failure."""
    if s.is_unit:
        run_unit(s, schedule, actions)
    else:
        run_integration(s, schedule, actions, after_match=after_match)


def run_unit(s: Scenario, schedule: ScheduleFn, actions: Sequence[str]) -> None:
    now = NOW0
    d = _schedule(schedule, s, s, actions, now)
    where = f"round 1/1, actions: {', '.join(actions)}"
    problems = check_round(s, d)
    post, unknown = apply_result(s, d)
    problems += unknown
    problems += match(s, observe_result(post, d, now))
    if problems:
        raise HarnessError(report(s, where, problems, s, post, d))


def run_integration(
    s: Scenario, schedule: ScheduleFn, actions: Sequence[str], *, after_match: str | None = None
) -> None:
    mode = after_match or os.environ.get(AFTER_MATCH_ENV, POST_ACTION)
    if mode not in (POST_ACTION, REBUILT):
        raise ValueError(f"{AFTER_MATCH_ENV} must be {POST_ACTION!r} or {REBUILT!r}, not {mode!r}")
    total = s.rounds_until_match + s.rounds_after_match
    acts = ", ".join(actions)
    state = s
    d: Mapping[str, Any] | None = None
    for r in range(s.rounds_until_match):
        now = NOW0 + r * ROUND_STEP
        d = _schedule(schedule, s, state, actions, now)
        post, unknown = apply_result(state, d)
        problems = check_round(s, d) + unknown
        if problems:
            where = f"round {r + 1}/{total} (before the first match), actions: {acts}"
            raise HarnessError(report(s, where, problems, state, post, d))
        state = write_back_claims(write_back(state, post), d)

    now = NOW0 + s.rounds_until_match * ROUND_STEP
    messages = messages_of(state, d) if d is not None else {}
    problems = match(s, observe_rebuilt(state, now, messages))
    if problems:
        where = f"first match, on the state rebuilt after {s.rounds_until_match} round(s), actions: {acts}"
        raise HarnessError(report(s, where, problems, s, state, d))

    for k in range(s.rounds_after_match):
        r = s.rounds_until_match + k
        now = NOW0 + r * ROUND_STEP
        d = _schedule(schedule, s, state, actions, now)
        post, unknown = apply_result(state, d)
        rebuilt = write_back_claims(write_back(state, post), d)
        problems = check_round(s, d) + unknown
        where = f"round {r + 1}/{total} (after-match round {k + 1}/{s.rounds_after_match}), actions: {acts}"
        if problems:
            raise HarnessError(report(s, where, problems, state, post, d))
        msgs = messages_of(post, d)
        if mode == POST_ACTION:
            problems = match(s, observe_result(post, d, now))
            if problems:
                extra = []
                if not match(s, observe_rebuilt(rebuilt, now, msgs)):
                    extra = [
                        "  (the state rebuilt after this round's write-back does match: KAI's own harness,"
                        f" which matches that state, would pass; {AFTER_MATCH_ENV}={REBUILT} selects it)"
                    ]
                raise HarnessError(report(s, where + ", post-action state", problems, state, post, d, extra))
        else:
            problems = match(s, observe_rebuilt(rebuilt, now, msgs))
            if problems:
                raise HarnessError(report(s, where + ", rebuilt state", problems, state, rebuilt, d))
        state = rebuilt
