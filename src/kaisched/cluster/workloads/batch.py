"""Embedded controllers of the batch family and of the other single-pod kinds: the pods (and intermediate
objects) their real controllers create, with the names, labels and owner references those give them.

* ``batch/v1 Job`` (Kubernetes Job controller): ``parallelism`` pods (capped by the completions still
  to do), ``<job>-<suffix>``, or ``<job>-<index>-<suffix>`` with ``completionMode: Indexed``;
* ``batch/v1 CronJob``: the Job of one schedule, ``<cronjob>-<scheduled time in minutes>``, then its pods;
* ``apps/v1 Deployment`` / ``ReplicaSet`` / ``StatefulSet``: a ReplicaSet ``<deploy>-<pod-template-hash>``
  and ``<rs>-<suffix>`` pods; StatefulSet pods ``<sts>-<ordinal>`` (all at once);
* ``argoproj.io/v1alpha1 Workflow``: one pod per container step of the entry template (steps, DAG
  tasks, nested templates) once the steps before it finished (run again as the workflow's pods finish);
* ``serving.knative.dev/v1 Service``: Configuration, Revision ``<svc>-00001``, its Deployment and
  ReplicaSet, ``max(min-scale, initial-scale)`` pods with the ``queue-proxy`` sidecar;
* ``tekton.dev/v1 TaskRun`` (pod ``<taskrun>-pod``, one container per step) and ``PipelineRun`` (one
  TaskRun ``<pipelinerun>-<task>`` per pipeline task of an inline ``pipelineSpec``);
* ``kubevirt.io/v1 VirtualMachineInstance`` (pod ``virt-launcher-<vmi>-<suffix>``) and
  ``VirtualMachine`` (its VMI when it runs);
* ``machinelearning.seldon.io SeldonDeployment``: one Deployment per component spec of each predictor.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kaisched.cluster.workloads.base import SUFFIX_ALPHABET, ControllerFn, Emit, Obj, Parent, count, get, suffix
from kaisched.k8s.objects import Workload
from kaisched.k8s.quantity import QuantityError, parse_quantity


# ------------------------------------------------------------------------------------------ helpers
def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def template_hash(template: Mapping[str, Any]) -> str:
    """A ``pod-template-hash``-like value: FNV-32a of the template, safe-encoded as Kubernetes does."""
    digits = str(fnv32a(json.dumps(template, sort_keys=True, default=str)))
    return "".join(SUFFIX_ALPHABET[ord(c) % len(SUFFIX_ALPHABET)] for c in digits)


def child_name(parent: str, suffix_: str, longest: int = 63) -> str:
    """knative.dev/pkg ``kmeta.ChildName`` (Tekton's and Knative's child names): ``parent + suffix`` when it
    fits in ``longest`` characters, else the parent is cut and an MD5 of it inserted."""
    if len(parent) + len(suffix_) <= longest:
        return parent + suffix_
    head = longest - len(suffix_) - 32
    if head <= 0:
        return hashlib.md5((parent + suffix_).encode()).hexdigest()
    return parent[:head] + hashlib.md5(parent.encode()).hexdigest() + suffix_


def _template(meta: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> Obj:
    out: Obj = {"spec": dict(spec)}
    if meta:
        out["metadata"] = dict(meta)
    return out


def _with_labels(template: Mapping[str, Any], labels: Mapping[str, str],
                 annotations: Mapping[str, str] | None = None) -> Obj:
    """A copy of a pod template with more labels (and annotations) in its metadata."""
    out = copy.deepcopy(dict(template))
    meta = dict(_mapping(out.get("metadata")))
    meta["labels"] = {**_str_map(meta.get("labels")), **labels}
    if annotations:
        meta["annotations"] = {**_str_map(meta.get("annotations")), **annotations}
    out["metadata"] = meta
    return out


# --------------------------------------------------------------------------------------- batch/v1 Job
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CRONJOB_SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def _completed_indexes(text: object) -> list[tuple[int, int]]:
    """``status.completedIndexes`` (``"1,3-5,7"``) as sorted, disjoint ranges ``(first, last)``."""
    ranges: list[tuple[int, int]] = []
    if not isinstance(text, str):
        return ranges
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()) and int(hi or lo) >= int(lo):
            ranges.append((int(lo), int(hi or lo)))
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _pending_indexes(completions: int, done: Sequence[tuple[int, int]]) -> Iterator[int]:
    """The indexes ``0 .. completions-1`` not in ``done`` (:func:`_completed_indexes`), in order."""
    i = 0
    for lo, hi in done:
        if lo >= completions:
            break
        yield from range(i, lo)
        i = max(i, hi + 1)
    yield from range(i, completions)


def _pending_count(completions: int, done: Sequence[tuple[int, int]]) -> int:
    return completions - sum(min(hi, completions - 1) - lo + 1 for lo, hi in done if lo < completions)


def _job_finished(status: Mapping[str, Any]) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in _list(status.get("conditions")))


def job_pods(emit: Emit, job: Parent, spec: Mapping[str, Any], field: str,
             status: Mapping[str, Any] | None = None) -> None:
    """The pods the Job controller creates for a Job (``spec`` at ``field``) that has none yet."""
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        emit.error(f"{field}.template", "required: the Job's pod template (metadata and spec)")
        return
    parallelism = count(emit, spec.get("parallelism"), f"{field}.parallelism", 1)
    completions: int | None = None
    if spec.get("completions") is not None:
        completions = count(emit, spec.get("completions"), f"{field}.completions", 1)
        if completions is None:
            return
    indexed = spec.get("completionMode") == "Indexed"
    if parallelism is None:
        return
    if indexed and completions is None:
        emit.error(f"{field}.completions", "required when completionMode is Indexed")
        return
    status = status or {}
    if spec.get("suspend") is True or _job_finished(status):
        return
    labels: dict[str, str] = {}
    if spec.get("manualSelector") is not True:  # the API server adds the selector labels to the template
        labels = {CONTROLLER_UID_LABEL: job.uid, JOB_NAME_LABEL: job.name, LEGACY_CONTROLLER_UID_LABEL: job.uid,
                  LEGACY_JOB_NAME_LABEL: job.name}
    parallelism_field = f"{field}.parallelism"
    if indexed:
        assert completions is not None
        done = _completed_indexes(status.get("completedIndexes"))
        pending = _pending_count(completions, done)
        if not emit.expect(min(parallelism, pending), parallelism_field if parallelism <= pending else
                           f"{field}.completions", parallelism if parallelism <= pending else completions):
            return
        for index in itertools.islice(_pending_indexes(completions, done), parallelism):
            emit.pod(f"{job.name}-{index}-{suffix(f'{job.uid}/{index}')}", template, parent=job,
                     labels={**labels, JOB_COMPLETION_INDEX: str(index)},
                     annotations={JOB_COMPLETION_INDEX: str(index)}, hostname=f"{job.name}-{index}")
        return
    n = parallelism
    if completions is not None:
        succeeded = status.get("succeeded")
        done_count = succeeded if isinstance(succeeded, int) and not isinstance(succeeded, bool) else 0
        n = min(n, max(completions - done_count, 0))
    if not emit.expect(n, parallelism_field if n == parallelism else f"{field}.completions",
                       parallelism if n == parallelism else completions):
        return
    for i in range(n):
        emit.pod(f"{job.name}-{suffix(f'{job.uid}/{i}')}", template, parent=job, labels=labels)


def job_controller(w: Workload, emit: Emit) -> None:
    job_pods(emit, emit.parent, w.spec, "spec", w.status)


# ------------------------------------------------------------------------------------ batch/v1 CronJob
class CronError(ValueError):
    """A schedule the CronJob controller rejects."""


_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTH_NAMES = {n: i + 1 for i, n in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAY_NAMES = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_HORIZON_DAYS = 366 * 8 + 2  # a schedule that fires at all fires within 8 years (29 February)


def _cron_value(text: str, names: Mapping[str, int], what: str) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise CronError(f"invalid {what} value {text!r}")
    return int(text)


def _cron_field(text: str, lo: int, hi: int, what: str, names: Mapping[str, int] | None = None) -> \
        tuple[frozenset[int], bool]:
    """The values of one field and whether it is ``*``/``?`` (robfig/cron's star bit)."""
    values: set[int] = set()
    star = False
    for part in text.split(","):
        expr, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"invalid step {step_text!r} in {what} field {text!r}")
            step = int(step_text)
        if expr in ("*", "?"):
            first, last = lo, hi
            star = star or step == 1
        elif "-" in expr:
            a, _, b = expr.partition("-")
            first, last = _cron_value(a, names or {}, what), _cron_value(b, names or {}, what)
        else:
            first = _cron_value(expr, names or {}, what)
            last = hi if slash else first
        if not lo <= first <= last <= hi:
            raise CronError(f"{what} field {text!r} is out of range {lo}-{hi}")
        values.update(range(first, last + 1, step))
    return frozenset(values), star


@dataclass(frozen=True, slots=True)
class Cron:
    """A standard five-field schedule (robfig/cron's ``ParseStandard``, as the CronJob controller uses)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    tz: tzinfo

    @staticmethod
    def parse(schedule: str, time_zone: str | None = None) -> Cron:
        text = schedule.strip()
        for prefix in ("CRON_TZ=", "TZ="):
            if text.startswith(prefix):
                zone, _, text = text[len(prefix):].partition(" ")
                time_zone = time_zone or zone
                text = text.strip()
        text = _MACROS.get(text, text)
        fields = text.split()
        if len(fields) != 5:
            raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
        tz: tzinfo = UTC
        if time_zone:
            try:
                tz = ZoneInfo(time_zone)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise CronError(f"unknown time zone {time_zone!r}") from exc
        minutes, _ = _cron_field(fields[0], 0, 59, "minute")
        hours, _ = _cron_field(fields[1], 0, 23, "hour")
        doms, dom_star = _cron_field(fields[2], 1, 31, "day-of-month")
        months, _ = _cron_field(fields[3], 1, 12, "month", _MONTH_NAMES)
        dows, dow_star = _cron_field(fields[4], 0, 6, "day-of-week", _DAY_NAMES)
        return Cron(minutes, hours, doms, months, dows, dom_star, dow_star, tz)

    def _day_matches(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        dom, dow = d.day in self.doms, d.isoweekday() % 7 in self.dows
        return (dom and dow) if self.dom_star or self.dow_star else (dom or dow)

    def _times(self) -> list[tuple[int, int]]:
        return sorted((h, m) for h in self.hours for m in self.minutes)

    def _days(self, start: date, step: int) -> Iterator[date]:
        for k in range(_HORIZON_DAYS):
            d = start + timedelta(days=k * step)
            if self._day_matches(d):
                yield d

    def last_at_or_before(self, t: datetime) -> datetime | None:
        times = self._times()[::-1]
        for d in self._days(t.astimezone(self.tz).date(), -1):
            for h, m in times:
                cand = datetime(d.year, d.month, d.day, h, m, tzinfo=self.tz)
                if cand <= t:
                    return cand
        return None

    def next_after(self, t: datetime) -> datetime | None:
        times = self._times()
        for d in self._days(t.astimezone(self.tz).date(), 1):
            for h, m in times:
                cand = datetime(d.year, d.month, d.day, h, m, tzinfo=self.tz)
                if cand > t:
                    return cand
        return None


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def scheduled_time(cron: Cron, w: Workload, now: datetime | None) -> datetime | None:
    """The schedule whose Job the embedded controller creates: with a clock, the latest schedule time up
    to now (the next one when the CronJob was created after it); without, ``status.lastScheduleTime``, else
    the first schedule time after the CronJob's creation (after the Unix epoch without one)."""
    creation = w.meta.creation_timestamp
    if now is not None:
        t = cron.last_at_or_before(now)
        if t is None or (creation is not None and t < creation):
            t = cron.next_after(creation or now)
        return t
    last = _timestamp(w.status.get("lastScheduleTime"))
    if last is not None:
        return last
    return cron.next_after(creation or EPOCH)


def cronjob_controller(w: Workload, emit: Emit) -> None:
    spec = w.spec
    if spec.get("suspend") is True:
        return
    schedule = spec.get("schedule")
    if not isinstance(schedule, str) or not schedule.strip():
        emit.error("spec.schedule", "required: a cron schedule")
        return
    zone = spec.get("timeZone")
    if zone is not None and not isinstance(zone, str):
        emit.error("spec.timeZone", f"expected a time zone name, got {zone!r}")
        return
    try:
        cron = Cron.parse(schedule, zone)
    except CronError as exc:
        emit.error("spec.timeZone" if exc.args[0].startswith("unknown time zone") and zone else "spec.schedule",
                   str(exc))
        return
    job_template = spec.get("jobTemplate")
    job_spec = _mapping(job_template).get("spec")
    if not isinstance(job_spec, Mapping):
        emit.error("spec.jobTemplate.spec", "required: the Job to create")
        return
    now = emit.now  # the cycle's clock
    when = scheduled_time(cron, w, now if isinstance(now, datetime) else None)
    if when is None:
        emit.error("spec.schedule", f"{schedule!r} never fires")
        return
    jt_meta = _mapping(_mapping(job_template).get("metadata"))
    # the Job's labels: the job template's, else (API defaulting) its pod template's
    labels = _str_map(jt_meta.get("labels")) or _str_map(get(job_spec, "template", "metadata", "labels"))
    annotations = {**_str_map(jt_meta.get("annotations")),
                   CRONJOB_SCHEDULED_TIMESTAMP: when.astimezone(cron.tz).isoformat()}
    name = f"{w.meta.name}-{int(when.timestamp()) // 60}"
    job = emit.child("batch/v1", "Job", name, job_spec, labels=labels, annotations=annotations)
    job_pods(emit, job, job_spec, "spec.jobTemplate.spec")


# ------------------------------------------------------------------- apps/v1 Deployment, ReplicaSet, ...
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"


def replicaset_pods(emit: Emit, rs: Parent, template: Mapping[str, Any], replicas: int) -> None:
    for i in range(replicas):
        emit.pod(f"{rs.name}-{suffix(f'{rs.uid}/{i}')}", template, parent=rs)


def deployment_pods(emit: Emit, deployment: Parent, template: Mapping[str, Any], replicas: int) -> None:
    """What the Deployment controller creates: ReplicaSet ``<deploy>-<pod-template-hash>``, then the
    ReplicaSet controller's ``<rs>-<suffix>`` pods."""
    h = template_hash(template)
    rs_template = _with_labels(template, {POD_TEMPLATE_HASH_LABEL: h})
    labels = _str_map(rs_template["metadata"].get("labels"))
    rs = emit.child("apps/v1", "ReplicaSet", f"{deployment.name}-{h}",
                    {"replicas": replicas, "selector": {"matchLabels": labels}, "template": rs_template},
                    parent=deployment, labels=labels,
                    annotations={"deployment.kubernetes.io/revision": "1",
                                 "deployment.kubernetes.io/desired-replicas": str(replicas)})
    replicaset_pods(emit, rs, rs_template, replicas)


def _pod_template(emit: Emit, spec: Mapping[str, Any], field: str = "spec.template") -> Mapping[str, Any] | None:
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        emit.error(field, "required: the pod template (metadata and spec)")
        return None
    return template


def _replicas(emit: Emit, spec: Mapping[str, Any], field: str = "spec.replicas") -> int | None:
    """``spec.replicas`` (default 1), checked against the pod limit (None after an error)."""
    replicas = count(emit, spec.get("replicas"), field, 1)
    if replicas is None or not emit.expect(replicas, field):
        return None
    return replicas


def deployment_controller(w: Workload, emit: Emit) -> None:
    template = _pod_template(emit, w.spec)
    replicas = _replicas(emit, w.spec)
    if template is None or replicas is None:
        return
    deployment_pods(emit, emit.parent, template, replicas)


def replicaset_controller(w: Workload, emit: Emit) -> None:
    template = _pod_template(emit, w.spec)
    replicas = _replicas(emit, w.spec)
    if template is None or replicas is None:
        return
    replicaset_pods(emit, emit.parent, template, replicas)


STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
STS_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
CONTROLLER_REVISION_HASH_LABEL = "controller-revision-hash"


def statefulset_controller(w: Workload, emit: Emit) -> None:
    """Pods ``<sts>-<ordinal>`` (ordinals from ``spec.ordinals.start``), all at once (as with
    ``podManagementPolicy: Parallel``; OrderedReady would create each after the previous is Ready)."""
    template = _pod_template(emit, w.spec)
    replicas = _replicas(emit, w.spec)
    start = count(emit, get(w.spec, "ordinals", "start"), "spec.ordinals.start", 0)
    if template is None or replicas is None or start is None:
        return
    name = w.meta.name
    revision = f"{name}-{template_hash(template)}"
    service = w.spec.get("serviceName")
    for ordinal in range(start, start + replicas):
        pod_name = f"{name}-{ordinal}"
        pod_template = copy.deepcopy(dict(template))
        if isinstance(service, str) and service:
            pod_template["spec"] = {**pod_template["spec"], "subdomain": service}
        emit.pod(pod_name, pod_template, labels={STS_POD_NAME_LABEL: pod_name, STS_POD_INDEX_LABEL: str(ordinal),
                                                 CONTROLLER_REVISION_HASH_LABEL: revision},
                 hostname=pod_name)


# -------------------------------------------------------------------------------- Argo Workflow
ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
ARGO_COMPLETED_LABEL = "workflows.argoproj.io/completed"
ARGO_NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
ARGO_EXEC_IMAGE = "quay.io/argoproj/argoexec:latest"
ARGO_MAX_DEPTH = 10
ARGO_MAX_PODS = 10_000
_POD_NAME_MAX = 253
_ARGO_HASH_LENGTH = 10


@dataclass(frozen=True, slots=True)
class _ArgoLeaf:
    node_name: str
    template_name: str
    template: Mapping[str, Any]


def argo_pod_name(workflow: str, node_name: str, template_name: str) -> str:
    """Argo's pod names (``POD_NAMES=v2``): the workflow's name for its root node, else
    ``<workflow>-<template>-<fnv32a(node name)>``."""
    if node_name == workflow:
        return workflow
    prefix = f"{workflow}-{template_name}"[:_POD_NAME_MAX - _ARGO_HASH_LENGTH - 1]
    return f"{prefix}-{fnv32a(node_name)}"


def _argo_items(step: Mapping[str, Any], field: str, emit: Emit) -> list[str] | None:
    """The loop labels of a step/task (``(0:a)``, ...), [""] without a loop, None after an error."""
    items = step.get("withItems")
    if isinstance(items, list):
        return [f"({i}:{json.dumps(v, sort_keys=True, separators=(',', ':')) if isinstance(v, dict | list) else v})"
                for i, v in enumerate(items)]
    seq = step.get("withSequence")
    if isinstance(seq, Mapping):
        try:
            start = int(seq.get("start", 0))
            end = int(seq["end"]) if "end" in seq else start + int(seq.get("count", 0)) - 1
        except (TypeError, ValueError):
            emit.error(f"{field}.withSequence", "expected integer start/end/count")
            return None
        if end - start + 1 > ARGO_MAX_PODS:
            emit.error(f"{field}.withSequence", f"{end - start + 1:,} items: the embedded controller expands at most "
                       f"{ARGO_MAX_PODS:,}")
            return None
        return [f"({i}:{v})" for i, v in enumerate(range(start, end + 1))]
    if "withParam" in step:
        emit.error(f"{field}.withParam", "a loop over a parameter cannot be expanded before the workflow runs; "
                   "use withItems or withSequence")
        return None
    return [""]


# states of a workflow node (a pod, a step, a DAG task, a template), as far as the embedded controller follows
ARGO_SUCCEEDED = "Succeeded"
ARGO_FAILED = "Failed"
ARGO_OMITTED = "Omitted"  # a DAG task whose dependencies ruled it out: it never runs
ARGO_RUNNING = "Running"  # running, or waiting for what it depends on
_ARGO_RESULTS = ("Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned", "AnySucceeded", "AllFailed")
_ARGO_TOKEN = re.compile(r"\s*(&&|\|\||!|\(|\)|[A-Za-z0-9_][A-Za-z0-9_.\-]*)")


def _argo_combine(states: Sequence[str]) -> str:
    """The state of nodes run together (a step group, a DAG, a loop's items): running while one is; then failed
    if one failed; else succeeded (omitted tasks count as done)."""
    if ARGO_RUNNING in states:
        return ARGO_RUNNING
    return ARGO_FAILED if ARGO_FAILED in states else ARGO_SUCCEEDED


def _continues_on_failure(step: Mapping[str, Any]) -> bool:
    return get(step, "continueOn", "failed") is True


class _ArgoDepends:
    """A DAG task's ``depends`` expression (Argo's enhanced depends logic): task names, ``<task>.<result>``,
    ``&&``, ``||``, ``!`` and parentheses; a bare name means ``(<task>.Succeeded || <task>.Skipped ||
    <task>.Daemoned)``."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _ARGO_TOKEN.match(text, pos)
            if m is None or not m.group(1):
                raise ValueError(f"unexpected {text[pos:].strip()[:20]!r}")
            self.tokens.append(m.group(1))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.names: set[str] = set()
        self._pos = 0
        self.tree = self._or()
        if self._pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self._pos]!r}")

    # parsing: a tree of tuples ("or"/"and", left, right), ("not", x), ("is", task, result)
    def _peek(self) -> str | None:
        return self.tokens[self._pos] if self._pos < len(self.tokens) else None

    def _or(self) -> tuple[Any, ...]:
        left = self._and()
        while self._peek() == "||":
            self._pos += 1
            left = ("or", left, self._and())
        return left

    def _and(self) -> tuple[Any, ...]:
        left = self._not()
        while self._peek() == "&&":
            self._pos += 1
            left = ("and", left, self._not())
        return left

    def _not(self) -> tuple[Any, ...]:
        token = self._peek()
        if token == "!":
            self._pos += 1
            return ("not", self._not())
        if token == "(":
            self._pos += 1
            inner = self._or()
            if self._peek() != ")":
                raise ValueError("a parenthesis is not closed")
            self._pos += 1
            return inner
        if token is None or token in ("&&", "||", ")"):
            raise ValueError("a task name is missing")
        self._pos += 1
        task, dot, result = token.rpartition(".")
        if not dot or result not in _ARGO_RESULTS:
            task, result = token, ""
        self.names.add(task)
        return ("is", task, result)

    def holds(self, states: Mapping[str, list[str]]) -> bool:
        """Whether the expression holds for the tasks' states (per task, its items' states; all finished)."""
        return self._eval(self.tree, states)

    def _eval(self, node: tuple[Any, ...], states: Mapping[str, list[str]]) -> bool:
        op = node[0]
        if op == "or":
            return self._eval(node[1], states) or self._eval(node[2], states)
        if op == "and":
            return self._eval(node[1], states) and self._eval(node[2], states)
        if op == "not":
            return not self._eval(node[1], states)
        items = states.get(node[1], [])
        state = _argo_combine(items) if items else ARGO_SUCCEEDED
        if all(s == ARGO_OMITTED for s in items) and items:
            state = ARGO_OMITTED
        result = node[2]
        if result in ("", "Succeeded"):
            return state == ARGO_SUCCEEDED
        if result == "Failed":
            return state == ARGO_FAILED
        if result == "Omitted":
            return state == ARGO_OMITTED
        if result == "AnySucceeded":
            return ARGO_SUCCEEDED in items
        if result == "AllFailed":
            return bool(items) and all(s == ARGO_FAILED for s in items)
        return False  # Errored, Skipped (``when`` is taken as true), Daemoned: never here


class _ArgoWalk:
    """Argo's controller over a workflow's node tree as it stands: the pods to create now (``leaves``) are
    those of the container nodes every node before them has finished for — the step groups before theirs
    succeeded, the DAG tasks they depend on finished as their ``dependencies`` / ``depends`` require — and that
    do not exist yet (``phases``: the workflow's pods by name, and by ``node:<node name>``, with their phase).
    Nodes that are not reached yet are walked too (``live`` False), so that every error of the workflow is
    reported at once."""

    def __init__(self, emit: Emit, templates: Mapping[str, Mapping[str, Any]], workflow: str,
                 phases: Mapping[str, str]) -> None:
        self.emit, self.templates, self.workflow, self.phases = emit, templates, workflow, phases
        self.leaves: list[_ArgoLeaf] = []
        self.pods = 0  # container nodes seen (the workflow's size)

    def node(self, name: str, node: str, field: str, depth: int, live: bool) -> str | None:
        """The state of the node ``node`` running template ``name`` (None after an error)."""
        emit = self.emit
        if depth > ARGO_MAX_DEPTH:
            emit.error(field, f"templates nest deeper than {ARGO_MAX_DEPTH} levels (a recursive workflow?): the "
                       "embedded controller cannot expand it")
            return None
        t = self.templates.get(name)
        if t is None:
            emit.error(field, f"template {name!r} is not defined in spec.templates")
            return None
        if "steps" in t:
            return self._steps(t, node, field, depth, live)
        if "dag" in t:
            return self._dag(t, node, field, depth, live)
        if not any(k in t for k in ("container", "script", "containerSet", "resource")):
            return ARGO_SUCCEEDED if live else ARGO_RUNNING  # suspend, http, plugin, data: no pod
        self.pods += 1
        if self.pods > ARGO_MAX_PODS:
            emit.error(field, f"the workflow expands to more than {ARGO_MAX_PODS} pods")
            return None
        phase = self.phases.get(argo_pod_name(self.workflow, node, name)) or self.phases.get(f"node:{node}")
        if phase is None:
            if live:
                self.leaves.append(_ArgoLeaf(node, name, t))
            return ARGO_RUNNING
        return ARGO_SUCCEEDED if phase == "Succeeded" else ARGO_FAILED if phase == "Failed" else ARGO_RUNNING

    def _child(self, step: Mapping[str, Any], prefix: str, field: str, depth: int, live: bool) -> list[str] | None:
        """The states of a step's or task's nodes (one per loop item)."""
        if "templateRef" in step:
            self.emit.error(f"{field}.templateRef", "a WorkflowTemplate reference cannot be resolved by the embedded "
                            "controller: define the template in spec.templates")
            return None
        target = step.get("template")
        if not isinstance(target, str):
            self.emit.error(f"{field}.template", "required: the name of a template")
            return None
        items = _argo_items(step, field, self.emit)
        if items is None:
            return None
        states: list[str] = []
        for item in items:
            state = self.node(target, prefix + item, field, depth + 1, live)
            if state is None:
                return None
            states.append(state)
        return states

    def _steps(self, t: Mapping[str, Any], node: str, field: str, depth: int, live: bool) -> str | None:
        """Step groups run one after the other, each once the one before succeeded (its steps with
        ``continueOn.failed`` may fail); the steps of a group run together."""
        state = ARGO_SUCCEEDED
        for i, group in enumerate(_list(t.get("steps"))):
            states: list[str] = []
            for j, raw in enumerate([group] if isinstance(group, Mapping) else _list(group)):
                step = _mapping(raw)
                got = self._child(step, f"{node}[{i}].{step.get('name', '')}", f"{field}.steps[{i}][{j}]", depth,
                                  live and state == ARGO_SUCCEEDED)
                if got is None:
                    return None
                group_state = _argo_combine(got)
                states.append(ARGO_SUCCEEDED if group_state == ARGO_FAILED and _continues_on_failure(step)
                              else group_state)
            if state == ARGO_SUCCEEDED:
                state = _argo_combine(states)
        return state if live else ARGO_RUNNING

    def _dag(self, t: Mapping[str, Any], node: str, field: str, depth: int, live: bool) -> str | None:
        """A DAG task runs once the tasks it depends on have finished and its condition holds: every task of
        ``dependencies`` succeeded (or failed with ``continueOn.failed``), or its ``depends`` expression; a task
        whose condition fails is omitted. Tasks without either run at once."""
        emit = self.emit
        tasks: dict[str, tuple[Mapping[str, Any], str]] = {}
        for i, raw in enumerate(_list(get(t, "dag", "tasks"))):
            task = _mapping(raw)
            task_field = f"{field}.dag.tasks[{i}]"
            task_name = task.get("name")
            if not isinstance(task_name, str) or not task_name:
                emit.error(f"{task_field}.name", "required: the task's name")
                return None
            if task_name in tasks:
                emit.error(f"{task_field}.name", f"task {task_name!r} is defined twice")
                return None
            tasks[task_name] = (task, task_field)
        conditions: dict[str, _ArgoDepends | None] = {}  # None: ``dependencies`` (all succeeded)
        needs: dict[str, list[str]] = {}
        for task_name, (task, task_field) in tasks.items():
            depends = task.get("depends")
            if isinstance(depends, str) and depends.strip():
                try:
                    parsed = _ArgoDepends(depends)
                except ValueError as e:
                    emit.error(f"{task_field}.depends", f"cannot be read: {e}")
                    return None
                conditions[task_name], needs[task_name] = parsed, sorted(parsed.names)
                where = f"{task_field}.depends"
            else:
                conditions[task_name] = None
                needs[task_name] = [str(d) for d in _list(task.get("dependencies"))]
                where = f"{task_field}.dependencies"
            unknown = [d for d in needs[task_name] if d not in tasks]
            if unknown:
                emit.error(where, f"names no task of the DAG: {', '.join(unknown)}")
                return None
        order = self._topological(tasks, needs, field)
        if order is None:
            return None
        states: dict[str, list[str]] = {}
        for task_name in order:
            task, task_field = tasks[task_name]
            deps = needs[task_name]
            waiting = not live or any(_argo_combine(states[d]) == ARGO_RUNNING for d in deps)
            runs = not waiting and self._holds(conditions[task_name], deps, states, tasks)
            got = self._child(task, f"{node}.{task_name}", task_field, depth, runs)
            if got is None:
                return None
            states[task_name] = got if runs or waiting else [ARGO_OMITTED]
        if not live:
            return ARGO_RUNNING
        return _argo_combine([_argo_combine(s) for s in states.values()])

    @staticmethod
    def _holds(condition: _ArgoDepends | None, deps: list[str], states: Mapping[str, list[str]],
               tasks: Mapping[str, tuple[Mapping[str, Any], str]]) -> bool:
        if condition is not None:
            return condition.holds(states)
        for d in deps:
            state = _argo_combine(states[d])
            if all(s == ARGO_OMITTED for s in states[d]):
                return False
            if state == ARGO_FAILED and not _continues_on_failure(tasks[d][0]):
                return False
        return True

    def _topological(self, tasks: Mapping[str, Any], needs: Mapping[str, list[str]], field: str) -> list[str] | None:
        """The tasks in an order where each comes after those it depends on (else in their order); None (and
        an error) when the dependencies form a cycle."""
        names = list(tasks)
        index = {name: i for i, name in enumerate(names)}
        waits = {name: len(set(needs[name])) for name in names}
        dependents: dict[str, list[str]] = {}
        for name in names:
            for d in set(needs[name]):
                dependents.setdefault(d, []).append(name)
        ready = [index[name] for name in names if not waits[name]]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for after in dependents.get(name, ()):
                waits[after] -= 1
                if not waits[after]:
                    heapq.heappush(ready, index[after])
        if len(order) < len(names):
            stuck = next(name for name in names if waits[name])
            self.emit.error(f"{field}.dag.tasks", f"the dependencies form a cycle through task {stuck!r}")
            return None
        return order


def _argo_containers(t: Mapping[str, Any]) -> list[Obj]:
    if isinstance(t.get("container"), Mapping):
        main = {**t["container"], "name": "main"}
        return [main, {"name": "wait", "image": ARGO_EXEC_IMAGE}]
    if isinstance(t.get("script"), Mapping):
        script = {k: v for k, v in t["script"].items() if k != "source"}
        return [{**script, "name": "main"}, {"name": "wait", "image": ARGO_EXEC_IMAGE}]
    if isinstance(t.get("containerSet"), Mapping):
        return [dict(c) for c in _list(t["containerSet"].get("containers")) if isinstance(c, Mapping)] + \
            [{"name": "wait", "image": ARGO_EXEC_IMAGE}]
    return [{"name": "main", "image": ARGO_EXEC_IMAGE}]  # resource template: argoexec applies the manifest


def _argo_pod_spec(wf: Mapping[str, Any], t: Mapping[str, Any]) -> Obj:
    spec: Obj = {"containers": _argo_containers(t), "restartPolicy": "Never"}
    node_selector = {**_str_map(wf.get("nodeSelector")), **_str_map(t.get("nodeSelector"))}
    if node_selector:
        spec["nodeSelector"] = node_selector
    for key, wf_key in (("tolerations", "tolerations"), ("affinity", "affinity"), ("schedulerName", "schedulerName"),
                        ("priorityClassName", "podPriorityClassName"), ("securityContext", "securityContext"),
                        ("serviceAccountName", "serviceAccountName"), ("hostNetwork", "hostNetwork"),
                        ("dnsPolicy", "dnsPolicy"), ("imagePullSecrets", "imagePullSecrets")):
        value = t.get(key, wf.get(wf_key))
        if value is not None:
            spec[key] = copy.deepcopy(value)
    volumes = _list(wf.get("volumes")) + _list(t.get("volumes"))
    if volumes:
        spec["volumes"] = copy.deepcopy(volumes)
    return spec


def workflow_controller(w: Workload, emit: Emit, phases: Mapping[str, str] | None = None) -> None:
    """The pods Argo's controller creates for the workflow as it stands (``phases``: its pods that exist, by name,
    with their phase): one per container node it has reached, a step group once the one before succeeded, a DAG
    task once the tasks it depends on finished (:class:`_ArgoWalk`); ``when`` conditions are taken as true. Run
    again as its pods finish (``RECONCILERS``), it creates the next ones."""
    spec = w.spec
    if "workflowTemplateRef" in spec:
        emit.error("spec.workflowTemplateRef", "a WorkflowTemplate reference cannot be resolved by the embedded "
                   "controller: give the templates inline in spec.templates")
        return
    entry = spec.get("entrypoint")
    if not isinstance(entry, str) or not entry:
        emit.error("spec.entrypoint", "required: the name of the template to run")
        return
    templates: dict[str, Mapping[str, Any]] = {}
    for t in _list(spec.get("templates")):
        if isinstance(t, Mapping) and isinstance(t.get("name"), str):
            templates[t["name"]] = t
    name = w.meta.name
    walk = _ArgoWalk(emit, templates, name, phases or {})
    if walk.node(entry, name, "spec.entrypoint", 0, True) is None:
        return
    if not emit.expect(len(walk.leaves), "spec.entrypoint"):  # (the pods due now)
        return
    pod_meta = _mapping(spec.get("podMetadata"))
    for leaf in walk.leaves:
        t_meta = _mapping(leaf.template.get("metadata"))
        labels = {**_str_map(pod_meta.get("labels")), **_str_map(t_meta.get("labels")),
                  ARGO_WORKFLOW_LABEL: name, ARGO_COMPLETED_LABEL: "false"}
        annotations = {**_str_map(pod_meta.get("annotations")), **_str_map(t_meta.get("annotations")),
                       ARGO_NODE_NAME_ANNOTATION: leaf.node_name}
        emit.pod(argo_pod_name(name, leaf.node_name, leaf.template_name),
                 _template(None, _argo_pod_spec(spec, leaf.template)), labels=labels, annotations=annotations)


# --------------------------------------------------------------------------------- Knative Service
KNATIVE_SERVICE_LABEL = "serving.knative.dev/service"
KNATIVE_SERVICE_UID_LABEL = "serving.knative.dev/serviceUID"
KNATIVE_CONFIGURATION_LABEL = "serving.knative.dev/configuration"
KNATIVE_CONFIGURATION_UID_LABEL = "serving.knative.dev/configurationUID"
KNATIVE_CONFIGURATION_GENERATION_LABEL = "serving.knative.dev/configurationGeneration"
KNATIVE_REVISION_LABEL = "serving.knative.dev/revision"
KNATIVE_REVISION_UID_LABEL = "serving.knative.dev/revisionUID"
KNATIVE_ROUTING_STATE_LABEL = "serving.knative.dev/routingState"
KNATIVE_MIN_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale")
KNATIVE_INITIAL_SCALE = ("autoscaling.knative.dev/initial-scale", "autoscaling.knative.dev/initialScale")
KNATIVE_QUEUE_PROXY = {"name": "queue-proxy", "image": "gcr.io/knative-releases/knative.dev/serving/cmd/queue",
                       "resources": {"requests": {"cpu": "25m"}}}
# Revision fields that are not pod fields
_KNATIVE_ONLY = ("containerConcurrency", "timeoutSeconds", "responseStartTimeoutSeconds", "idleTimeoutSeconds")


def _scale(emit: Emit, annotations: Mapping[str, str], keys: Sequence[str], default: int) -> int | None:
    for key in keys:
        if key in annotations:
            raw = annotations[key].strip()
            if not raw.lstrip("-").isdigit() or int(raw) < 0:
                emit.error(f"spec.template.metadata.annotations[{key}]",
                           f"must be a non-negative integer, got {annotations[key]!r}")
                return None
            return int(raw)
    return default


def knative_service_controller(w: Workload, emit: Emit) -> None:
    """Configuration ``<svc>``, Revision ``<svc>-00001`` (or the template's name), the Revision's Deployment
    ``<revision>-deployment`` and ReplicaSet, and ``max(min-scale, initial-scale)`` pods (initial scale 1 by
    default), each with Knative's ``queue-proxy`` sidecar."""
    template = w.spec.get("template")
    t_spec = _mapping(template).get("spec")
    if not isinstance(t_spec, Mapping) or not _list(t_spec.get("containers")):
        emit.error("spec.template.spec.containers", "required: the revision's containers")
        return
    t_meta = _mapping(_mapping(template).get("metadata"))
    t_annotations = _str_map(t_meta.get("annotations"))
    min_scale = _scale(emit, t_annotations, KNATIVE_MIN_SCALE, 0)
    initial = _scale(emit, t_annotations, KNATIVE_INITIAL_SCALE, 1)
    if min_scale is None or initial is None:
        return
    keys = KNATIVE_MIN_SCALE if min_scale >= initial else KNATIVE_INITIAL_SCALE
    key = next((k for k in keys if k in t_annotations), keys[0])
    if not emit.expect(max(min_scale, initial), f"spec.template.metadata.annotations[{key}]"):
        return
    svc = emit.parent
    config = emit.child("serving.knative.dev/v1", "Configuration", svc.name, {"template": copy.deepcopy(template)},
                        labels={**w.meta.labels, KNATIVE_SERVICE_LABEL: svc.name, KNATIVE_SERVICE_UID_LABEL: svc.uid},
                        annotations=w.meta.annotations)
    revision_name = t_meta.get("name") if isinstance(t_meta.get("name"), str) else child_name(svc.name, "-00001")
    revision_labels = {**_str_map(t_meta.get("labels")), KNATIVE_CONFIGURATION_LABEL: config.name,
                       KNATIVE_CONFIGURATION_GENERATION_LABEL: "1", KNATIVE_CONFIGURATION_UID_LABEL: config.uid,
                       KNATIVE_SERVICE_LABEL: svc.name, KNATIVE_SERVICE_UID_LABEL: svc.uid,
                       KNATIVE_ROUTING_STATE_LABEL: "active"}
    revision = emit.child("serving.knative.dev/v1", "Revision", str(revision_name), t_spec, parent=config,
                          labels=revision_labels, annotations=t_annotations)
    pod_labels = {**{k: v for k, v in revision_labels.items() if k != KNATIVE_ROUTING_STATE_LABEL},
                  KNATIVE_REVISION_LABEL: revision.name, KNATIVE_REVISION_UID_LABEL: revision.uid,
                  "app": revision.name}
    containers = []
    for i, c in enumerate(_list(t_spec.get("containers"))):
        container = dict(_mapping(c))
        container.setdefault("name", "user-container" if i == 0 else f"user-container-{i}")
        containers.append(container)
    pod_spec = {**{k: copy.deepcopy(v) for k, v in t_spec.items() if k not in _KNATIVE_ONLY},
                "containers": [*containers, copy.deepcopy(KNATIVE_QUEUE_PROXY)]}
    pod_template = _template({"labels": pod_labels, "annotations": t_annotations}, pod_spec)
    replicas = max(min_scale, initial)
    deployment = emit.child("apps/v1", "Deployment", child_name(revision.name, "-deployment"),
                            {"replicas": replicas,
                             "selector": {"matchLabels": {KNATIVE_REVISION_UID_LABEL: revision.uid}},
                             "template": pod_template},
                            parent=revision, labels=pod_labels, annotations=t_annotations)
    deployment_pods(emit, deployment, pod_template, replicas)


# ------------------------------------------------------------------------------------------- Tekton
TEKTON_MANAGED_BY = {"app.kubernetes.io/managed-by": "tekton-pipelines"}
TEKTON_TASKRUN_LABEL = "tekton.dev/taskRun"
TEKTON_TASKRUN_UID_LABEL = "tekton.dev/taskRunUID"
TEKTON_PIPELINE_LABEL = "tekton.dev/pipeline"
TEKTON_PIPELINERUN_LABEL = "tekton.dev/pipelineRun"
TEKTON_PIPELINERUN_UID_LABEL = "tekton.dev/pipelineRunUID"
TEKTON_PIPELINE_TASK_LABEL = "tekton.dev/pipelineTask"
TEKTON_MEMBER_OF_LABEL = "tekton.dev/memberOf"
_TEKTON_STEP_ONLY = ("computeResources", "resources", "script", "onError", "timeout", "ref", "params", "results",
                     "stdoutConfig", "stderrConfig", "when", "displayName")
_TEKTON_POD_FIELDS = ("schedulerName", "nodeSelector", "tolerations", "affinity", "priorityClassName",
                      "securityContext", "runtimeClassName", "hostNetwork", "imagePullSecrets", "dnsPolicy",
                      "dnsConfig", "hostAliases", "topologySpreadConstraints", "enableServiceLinks",
                      "automountServiceAccountToken")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _tekton_container(prefix: str, index: int, item: Mapping[str, Any], template: Mapping[str, Any],
                      override: Mapping[str, Any] | None) -> Obj:
    merged = {**template, **item}
    resources = _mapping(merged.get("computeResources") or merged.get("resources"))
    if override is not None and isinstance(override.get("computeResources"), Mapping):
        resources = override["computeResources"]
    container = {k: copy.deepcopy(v) for k, v in merged.items() if k not in _TEKTON_STEP_ONLY}
    container["name"] = f"{prefix}-{merged.get('name') or f'unnamed-{index}'}"
    if "script" in merged and "command" not in container:
        container["command"] = ["/tekton/scripts/" + container["name"]]
    if resources:
        container["resources"] = copy.deepcopy(dict(resources))
    return container


def taskrun_pod(emit: Emit, taskrun: Parent, spec: Mapping[str, Any], field: str, labels: Mapping[str, str],
                annotations: Mapping[str, str]) -> None:
    """The TaskRun's pod ``<taskrun>-pod``: one ``step-<name>`` container per step (and ``sidecar-<name>``),
    the TaskRun's labels and annotations plus Tekton's, the fields of ``spec.podTemplate``."""
    task = spec.get("taskSpec")
    if not isinstance(task, Mapping):
        if "taskRef" in spec:
            emit.error(f"{field}.taskRef", "a referenced Task cannot be resolved by the embedded controller: give "
                       "its steps inline in taskSpec")
        else:
            emit.error(f"{field}.taskSpec", "required: the task's steps")
        return
    steps = _list(task.get("steps"))
    if not steps:
        emit.error(f"{field}.taskSpec.steps", "required: at least one step")
        return
    step_template = _mapping(task.get("stepTemplate"))
    step_specs = {str(s.get("name")): s for s in _list(spec.get("stepSpecs")) if isinstance(s, Mapping)}
    sidecar_specs = {str(s.get("name")): s for s in _list(spec.get("sidecarSpecs")) if isinstance(s, Mapping)}
    containers = [_tekton_container("step", i, _mapping(s), step_template, step_specs.get(str(_mapping(s).get("name"))))
                  for i, s in enumerate(steps)]
    task_resources = _mapping(spec.get("computeResources"))
    if task_resources:  # task-level compute resources: the pod asks for them (kept on the first step)
        requests, limits = _mapping(task_resources.get("requests")), _mapping(task_resources.get("limits"))
        for i, c in enumerate(containers):
            res: Obj = {}
            if requests and i == 0:
                res["requests"] = dict(requests)
            if limits:
                res["limits"] = dict(limits)
            c["resources"] = res
    containers += [_tekton_container("sidecar", i, _mapping(s), {}, sidecar_specs.get(str(_mapping(s).get("name"))))
                   for i, s in enumerate(_list(task.get("sidecars")))]
    pod_template = _mapping(spec.get("podTemplate"))
    pod_spec: Obj = {"containers": containers, "restartPolicy": "Never"}
    for key in _TEKTON_POD_FIELDS:
        if key in pod_template:
            pod_spec[key] = copy.deepcopy(pod_template[key])
    if isinstance(spec.get("serviceAccountName"), str):
        pod_spec["serviceAccountName"] = spec["serviceAccountName"]
    volumes = _list(task.get("volumes")) + _list(pod_template.get("volumes"))
    if volumes:
        pod_spec["volumes"] = copy.deepcopy(volumes)
    pod_labels = {**labels, **TEKTON_MANAGED_BY, TEKTON_TASKRUN_LABEL: taskrun.name,
                  TEKTON_TASKRUN_UID_LABEL: taskrun.uid}
    pod_annotations = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    emit.pod(child_name(taskrun.name, "-pod"), _template(None, pod_spec), parent=taskrun, labels=pod_labels,
             annotations=pod_annotations)


def taskrun_controller(w: Workload, emit: Emit) -> None:
    taskrun_pod(emit, emit.parent, w.spec, "spec", {**w.meta.labels, **_str_map(get(w.spec, "taskSpec", "metadata",
                                                                                         "labels"))},
                w.meta.annotations)


def pipelinerun_controller(w: Workload, emit: Emit) -> None:
    """One TaskRun ``<pipelinerun>-<task>`` per task of the inline ``pipelineSpec`` (all at once: ``runAfter``
    is not waited on; ``finally`` tasks, which run after the others, are not created; a ``matrix`` is not
    fanned out), then each TaskRun's pod."""
    spec = w.spec
    pipeline = spec.get("pipelineSpec")
    if not isinstance(pipeline, Mapping):
        if "pipelineRef" in spec:
            emit.error("spec.pipelineRef", "a referenced Pipeline cannot be resolved by the embedded controller: give "
                       "its tasks inline in spec.pipelineSpec")
        else:
            emit.error("spec.pipelineSpec", "required: the pipeline's tasks")
        return
    tasks = _list(pipeline.get("tasks"))
    if not tasks:
        emit.error("spec.pipelineSpec.tasks", "required: at least one task")
        return
    run_template = _mapping(spec.get("taskRunTemplate"))
    pod_template = _mapping(run_template.get("podTemplate") or spec.get("podTemplate"))
    service_account = run_template.get("serviceAccountName") or spec.get("serviceAccountName")
    overrides = {str(s.get("pipelineTaskName")): s for s in _list(spec.get("taskRunSpecs")) if isinstance(s, Mapping)}
    pr = emit.parent
    base_labels = {**w.meta.labels, **TEKTON_MANAGED_BY, TEKTON_PIPELINE_LABEL: pr.name,
                   TEKTON_PIPELINERUN_LABEL: pr.name, TEKTON_PIPELINERUN_UID_LABEL: pr.uid,
                   TEKTON_MEMBER_OF_LABEL: "tasks"}
    annotations = {k: v for k, v in w.meta.annotations.items() if k != _LAST_APPLIED}
    for i, t in enumerate(tasks):
        task = _mapping(t)
        name = task.get("name")
        field = f"spec.pipelineSpec.tasks[{i}]"
        if not isinstance(name, str) or not name:
            emit.error(f"{field}.name", "required")
            return
        if not isinstance(task.get("taskSpec"), Mapping):
            if "taskRef" in task:
                emit.error(f"{field}.taskRef", "a referenced Task cannot be resolved by the embedded controller: "
                           "give its steps inline in taskSpec")
            else:
                emit.error(f"{field}.taskSpec", "required: the task's steps")
            return
        override = _mapping(overrides.get(name))
        tr_spec: Obj = {"taskSpec": copy.deepcopy(task["taskSpec"])}
        tr_pod_template = {**pod_template, **_mapping(override.get("podTemplate"))}
        if tr_pod_template:
            tr_spec["podTemplate"] = copy.deepcopy(tr_pod_template)
        account = override.get("serviceAccountName") or service_account
        if isinstance(account, str):
            tr_spec["serviceAccountName"] = account
        for key in ("computeResources", "stepSpecs", "sidecarSpecs"):
            if key in override:
                tr_spec[key] = copy.deepcopy(override[key])
        labels = {**base_labels, **_str_map(get(task, "taskSpec", "metadata", "labels")),
                  TEKTON_PIPELINE_TASK_LABEL: name}
        task_annotations = {**annotations, **_str_map(get(task, "taskSpec", "metadata", "annotations"))}
        taskrun = emit.child("tekton.dev/v1", "TaskRun", child_name(pr.name, f"-{name}"), tr_spec, labels=labels,
                             annotations=task_annotations)
        taskrun_pod(emit, taskrun, tr_spec, field, labels, task_annotations)


# ------------------------------------------------------------------------------------------- KubeVirt
KUBEVIRT_LABEL = "kubevirt.io"
KUBEVIRT_CREATED_BY_LABEL = "kubevirt.io/created-by"
KUBEVIRT_VM_NAME_LABEL = "vm.kubevirt.io/name"
KUBEVIRT_DOMAIN_ANNOTATION = "kubevirt.io/domain"
KUBEVIRT_LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:latest"
MIB = 1 << 20
_VMI_POD_FIELDS = ("schedulerName", "nodeSelector", "tolerations", "affinity", "priorityClassName",
                   "topologySpreadConstraints", "hostname", "subdomain", "dnsPolicy", "dnsConfig")
_VM_RUNNING = ("Always", "RerunOnFailure", "Once")


def _vcpus(domain: Mapping[str, Any]) -> int:
    cpu = _mapping(domain.get("cpu"))
    n = 1
    for key in ("sockets", "cores", "threads"):
        value = cpu.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            n *= value
    return n


def memory_overhead(guest_bytes: float, vcpus: int, graphics: bool) -> int:
    """An approximation of KubeVirt's virt-launcher memory overhead: its processes (virt-launcher, its
    monitor, virtqemud, virtlogd, QEMU: about 210Mi), the guest's page tables (1/512 of its memory), 8Mi per
    vCPU, 8Mi for the IO thread and 32Mi for the video device."""
    return int(210 * MIB + guest_bytes / 512 + 8 * MIB * vcpus + 8 * MIB + (32 * MIB if graphics else 0))


def _vmi_compute_resources(emit: Emit, vmi_spec: Mapping[str, Any], field: str) -> Obj | None:
    domain = _mapping(vmi_spec.get("domain"))
    resources = _mapping(domain.get("resources"))
    requests = dict(_mapping(resources.get("requests")))
    limits = dict(_mapping(resources.get("limits")))
    guest = requests.get("memory") or get(domain, "memory", "guest") or limits.get("memory")
    if guest is None:
        emit.error(f"{field}.domain.resources.requests.memory", "required: the guest's memory (or "
                   "domain.memory.guest)")
        return None
    try:
        guest_bytes = parse_quantity(guest)
        vcpus = _vcpus(domain)
        graphics = get(domain, "devices", "autoattachGraphicsDevice") is not False
        overhead = memory_overhead(guest_bytes, vcpus, graphics)
        requests["memory"] = str(int(guest_bytes) + overhead)
        if "memory" in limits:
            limits["memory"] = str(int(parse_quantity(limits["memory"])) + overhead)
        if "cpu" not in requests:  # 1/10 of a core per vCPU (KubeVirt's default cpuAllocationRatio)
            limit_cpu = limits.get("cpu")
            requests["cpu"] = limit_cpu if limit_cpu is not None else f"{100 * vcpus}m"
    except QuantityError as exc:
        emit.error(f"{field}.domain.resources", str(exc))
        return None
    for i, gpu in enumerate(_list(get(domain, "devices", "gpus")) + _list(get(domain, "devices", "hostDevices"))):
        device = _mapping(gpu).get("deviceName")
        if not isinstance(device, str) or not device:
            emit.error(f"{field}.domain.devices", f"device {i}: deviceName is required")
            return None
        held = str(requests.get(device, 0))
        requests[device] = str((int(held) if held.isdigit() else 0) + 1)
        limits[device] = requests[device]
    out: Obj = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def vmi_pod(emit: Emit, vmi: Parent, spec: Mapping[str, Any], labels: Mapping[str, str], field: str) -> None:
    """virt-controller's launcher pod ``virt-launcher-<vmi>-<suffix>``: the ``compute`` container asks for the
    guest's CPU and memory (plus the launcher's overhead) and its GPUs and host devices."""
    resources = _vmi_compute_resources(emit, spec, field)
    if resources is None:
        return
    pod_spec: Obj = {"containers": [{"name": "compute", "image": KUBEVIRT_LAUNCHER_IMAGE, "resources": resources}],
                     "restartPolicy": "Never"}
    for key in _VMI_POD_FIELDS:
        if key in spec:
            pod_spec[key] = copy.deepcopy(spec[key])
    pod_labels = {**labels, KUBEVIRT_LABEL: "virt-launcher", KUBEVIRT_CREATED_BY_LABEL: vmi.uid,
                  KUBEVIRT_VM_NAME_LABEL: vmi.name}
    emit.pod(f"virt-launcher-{vmi.name}-{suffix(vmi.uid)}", _template(None, pod_spec), parent=vmi,
             labels=pod_labels, annotations={KUBEVIRT_DOMAIN_ANNOTATION: vmi.name,
                                             "kubectl.kubernetes.io/default-container": "compute"})


def vmi_controller(w: Workload, emit: Emit) -> None:
    vmi_pod(emit, emit.parent, w.spec, w.meta.labels, "spec")


def vm_controller(w: Workload, emit: Emit) -> None:
    """A VirtualMachine that runs (``runStrategy`` Always / RerunOnFailure / Once, or ``running: true``) gets
    its VirtualMachineInstance (same name), then the VMI's launcher pod; a halted one gets nothing."""
    strategy = w.spec.get("runStrategy")
    running = w.spec.get("running") is True if strategy is None else strategy in _VM_RUNNING
    if not running:
        return
    template = w.spec.get("template")
    vmi_spec = _mapping(template).get("spec")
    if not isinstance(vmi_spec, Mapping):
        emit.error("spec.template.spec", "required: the VirtualMachineInstance to run")
        return
    t_meta = _mapping(_mapping(template).get("metadata"))
    labels = _str_map(t_meta.get("labels"))
    vmi = emit.child("kubevirt.io/v1", "VirtualMachineInstance", w.meta.name, vmi_spec, labels=labels,
                     annotations=_str_map(t_meta.get("annotations")))
    vmi_pod(emit, vmi, vmi_spec, labels, "spec.template.spec")


# --------------------------------------------------------------------------------------------- Seldon
SELDON_ID_LABEL = "seldon-deployment-id"
SELDON_APP_LABEL = "seldon-app"
SELDON_MANAGED_BY = {"app.kubernetes.io/managed-by": "seldon-core"}
SELDON_ENGINE = "seldon-container-engine"
SELDON_ENGINE_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}


def seldon_deployment_name(sdep: str, predictor: str, index: int, component: Mapping[str, Any]) -> str:
    """Seldon Core's ``GetDeploymentName``: ``<sdep>-<predictor>-<index>-<containers or metadata.name>``,
    ``seldon-<md5>`` beyond 63 characters."""
    meta_name = get(component, "metadata", "name")
    tail = meta_name if isinstance(meta_name, str) and meta_name else \
        "-".join(str(_mapping(c).get("name", "")) for c in _list(get(component, "spec", "containers")))
    name = f"{sdep}-{predictor}-{index}-{tail}"
    return name if len(name) <= 63 else "seldon-" + hashlib.md5(name.encode()).hexdigest()


def _seldon_replicas(emit: Emit, candidates: Sequence[tuple[object, str]], before: int) -> int | None:
    """The first count given (default 1), checked against the pod limit with the ``before`` pods of the
    components before."""
    for value, field in candidates:
        if value is not None:
            n = count(emit, value, field, 1)
            return n if n is not None and emit.expect(n, field, before=before) else None
    return 1


def seldon_controller(w: Workload, emit: Emit) -> None:
    """One Deployment per component spec of each predictor (replicas: the component's, else the predictor's,
    else the SeldonDeployment's, else 1), the service orchestrator container added to the pods that serve
    the graph's root (unless ``seldon.io/no-engine`` or ``seldon.io/engine-separate-pod``)."""
    predictors = _list(w.spec.get("predictors"))
    if not predictors:
        emit.error("spec.predictors", "required: at least one predictor")
        return
    sdep = w.meta.name
    planned: list[tuple[str, Obj, int]] = []
    for p_index, p in enumerate(predictors):
        predictor = _mapping(p)
        field = f"spec.predictors[{p_index}]"
        p_name = predictor.get("name")
        if not isinstance(p_name, str) or not p_name:
            emit.error(f"{field}.name", "required")
            return
        components = _list(predictor.get("componentSpecs"))
        if not components:
            emit.error(f"{field}.componentSpecs", "required by the embedded controller: the pod spec of the model "
                       "server (prepackaged servers without componentSpecs are not expanded)")
            return
        annotations = {**_str_map(w.spec.get("annotations")), **_str_map(predictor.get("annotations"))}
        engine = annotations.get("seldon.io/no-engine") != "true" and \
            annotations.get("seldon.io/engine-separate-pod") != "true"
        root = get(predictor, "graph", "name")
        engine_index = next((i for i, c in enumerate(components)
                             if any(_mapping(x).get("name") == root for x in _list(get(c, "spec", "containers")))), 0)
        for c_index, c in enumerate(components):
            component = _mapping(c)
            c_field = f"{field}.componentSpecs[{c_index}]"
            c_spec = component.get("spec")
            if not isinstance(c_spec, Mapping) or not _list(c_spec.get("containers")):
                emit.error(f"{c_field}.spec.containers", "required: the model server's containers")
                return
            replicas = _seldon_replicas(emit, [(component.get("replicas"), f"{c_field}.replicas"),
                                               (predictor.get("replicas"), f"{field}.replicas"),
                                               (w.spec.get("replicas"), "spec.replicas")],
                                        sum(n for _, _, n in planned))
            if replicas is None:
                return
            name = seldon_deployment_name(sdep, p_name, c_index, component)
            c_meta = _mapping(component.get("metadata"))
            labels = {**_str_map(c_meta.get("labels")), **_str_map(predictor.get("labels")), **SELDON_MANAGED_BY,
                      SELDON_ID_LABEL: sdep, "app": name, "fluentd": "true"}
            pod_spec = copy.deepcopy(dict(c_spec))
            if engine and c_index == engine_index:
                resources = get(predictor, "svcOrchSpec", "resources") or SELDON_ENGINE_RESOURCES
                pod_spec["containers"] = [*pod_spec["containers"],
                                          {"name": SELDON_ENGINE, "image": "seldonio/seldon-core-executor",
                                           "resources": copy.deepcopy(resources)}]
                labels[SELDON_APP_LABEL] = child_name(sdep, f"-{p_name}")
            planned.append((name, _template({"labels": labels, "annotations": _str_map(c_meta.get("annotations"))},
                                            pod_spec), replicas))
    for name, template, replicas in planned:
        labels = _str_map(template["metadata"].get("labels"))
        deployment = emit.child("apps/v1", "Deployment", name,
                                {"replicas": replicas,
                                 "selector": {"matchLabels": {SELDON_ID_LABEL: sdep, "app": name}},
                                 "template": template}, labels=labels)
        deployment_pods(emit, deployment, template, replicas)


CONTROLLERS: dict[tuple[str, str], ControllerFn] = {
    ("batch", "Job"): job_controller,
    ("batch", "CronJob"): cronjob_controller,
    ("apps", "Deployment"): deployment_controller,
    ("apps", "ReplicaSet"): replicaset_controller,
    ("apps", "StatefulSet"): statefulset_controller,
    ("argoproj.io", "Workflow"): workflow_controller,
    ("serving.knative.dev", "Service"): knative_service_controller,
    ("tekton.dev", "TaskRun"): taskrun_controller,
    ("tekton.dev", "PipelineRun"): pipelinerun_controller,
    ("kubevirt.io", "VirtualMachineInstance"): vmi_controller,
    ("kubevirt.io", "VirtualMachine"): vm_controller,
    ("machinelearning.seldon.io", "SeldonDeployment"): seldon_controller,
}

#: controllers run again on a workload whose pods exist, given those pods' phases by name: they create the pods
#: that are due now (Argo creates a workflow's pods as the steps before them finish)
RECONCILERS: dict[tuple[str, str], Callable[[Workload, Emit, Mapping[str, str]], None]] = {
    ("argoproj.io", "Workflow"): workflow_controller,
}
