"""Embedded controllers of JobSet and LeaderWorkerSet: the objects and pods their controllers create.

* JobSet (``jobset.x-k8s.io/v1alpha2``): per replicatedJob ``replicas`` Indexed Jobs
  ``<jobset>-<replicatedJob>-<jobIndex>`` owned by the JobSet, and per Job ``min(parallelism, completions)``
  pods ``<job>-<completionIndex>-<suffix>`` owned by the Job, labelled (Job and pods) with
  ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``, ``job-global-index``,
  ``replicatedjob-replicas``, ``global-replicas``, ``restart-attempt`` and ``job-key``, and (pods) with the
  Job controller's ``job-name`` / ``controller-uid`` / ``batch.kubernetes.io/job-completion-index``; with DNS
  hostnames (the default) the pods get ``hostname: <job>-<index>`` and ``subdomain: <jobset>``. Under
  ``startupPolicyOrder: InOrder`` a replicatedJob's Jobs are only created once the previous one has
  started (``status.replicatedJobsStatus``): from the manifest alone, the first one. A suspended JobSet gets
  suspended Jobs and no pods.
* LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``): the leader StatefulSet ``<lws>`` and its pods
  ``<lws>-<group>`` (worker index 0), and per group the worker StatefulSet ``<lws>-<group>`` with pods
  ``<lws>-<group>-<i>`` (i = 1 .. size-1), labelled ``leaderworkerset.sigs.k8s.io/name``, ``group-index``,
  ``worker-index``, ``group-key`` (and ``subgroup-index`` / ``subgroup-key`` with a sub-group policy), annotated
  with ``leaderworkerset.sigs.k8s.io/size``. Under ``startupPolicy: LeaderReady`` the workers are created
  once the leader is ready: from the manifest alone, only the leaders. The real controller makes each
  worker StatefulSet owned by its leader pod; here it is owned by the LeaderWorkerSet (same top owner).

Grove (PodCliqueSet) has no embedded controller: give its PodGang and pods (a cluster snapshot).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from kaisched.cluster.workloads.base import ControllerFn, Emit, count, get, suffix
from kaisched.k8s.objects import Workload

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_PREFIX = "jobset.sigs.k8s.io/"
JOBSET_NAME = JOBSET_PREFIX + "jobset-name"
JOBSET_REPLICATED_JOB = JOBSET_PREFIX + "replicatedjob-name"
JOBSET_JOB_INDEX = JOBSET_PREFIX + "job-index"
JOBSET_JOB_GLOBAL_INDEX = JOBSET_PREFIX + "job-global-index"
JOBSET_REPLICATED_JOB_REPLICAS = JOBSET_PREFIX + "replicatedjob-replicas"
JOBSET_GLOBAL_REPLICAS = JOBSET_PREFIX + "global-replicas"
JOBSET_RESTARTS = JOBSET_PREFIX + "restart-attempt"
JOBSET_JOB_KEY = JOBSET_PREFIX + "job-key"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
LWS_NAME = LWS_PREFIX + "name"
LWS_GROUP_INDEX = LWS_PREFIX + "group-index"
LWS_WORKER_INDEX = LWS_PREFIX + "worker-index"
LWS_GROUP_KEY = LWS_PREFIX + "group-key"
LWS_SUBGROUP_INDEX = LWS_PREFIX + "subgroup-index"
LWS_SUBGROUP_KEY = LWS_PREFIX + "subgroup-key"
LWS_SIZE = LWS_PREFIX + "size"
LWS_REPLICAS = LWS_PREFIX + "replicas"
LWS_LEADER_NAME = LWS_PREFIX + "leader-name"
LWS_SUBGROUP_SIZE = LWS_PREFIX + "subgroup-size"
LWS_SUBGROUP_POLICY_TYPE = LWS_PREFIX + "subgroup-policy-type"


def valid_template(emit: Emit, template: object, field: str) -> bool:
    """A pod template's shape (metadata, labels and annotations, spec as mappings); errors emitted."""
    if not isinstance(template, Mapping):
        emit.error(field, "must be a pod template (a mapping with metadata and spec)")
        return False
    for key in ("metadata", "spec"):
        if template.get(key) is not None and not isinstance(template.get(key), Mapping):
            emit.error(f"{field}.{key}", "must be a mapping")
            return False
    meta = _mapping(template.get("metadata"))
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
            emit.error(f"{field}.metadata.{key}", "must map names to strings")
            return False
    return True


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# =========================================================================================== JobSet
class _ReplicatedJob:
    __slots__ = ("completions", "name", "parallelism", "replicas", "template")

    def __init__(self, name: str, replicas: int, template: Mapping[str, Any], parallelism: int,
                 completions: int) -> None:
        self.name, self.replicas, self.template = name, replicas, template
        self.parallelism, self.completions = parallelism, completions


def _replicated_jobs(w: Workload, emit: Emit) -> list[_ReplicatedJob] | None:
    rjobs = w.spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        emit.error("spec.replicatedJobs", "a JobSet needs at least one replicated job")
        return None
    out: list[_ReplicatedJob] = []
    names: set[str] = set()
    for i, rj in enumerate(rjobs):
        field = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, Mapping):
            emit.error(field, "must be a replicated job (a mapping)")
            return None
        name = rj.get("name")
        if not isinstance(name, str) or not name:
            emit.error(f"{field}.name", "a replicated job needs a name")
            return None
        if name in names:
            emit.error(f"{field}.name", f"duplicate replicated job name '{name}'")
            return None
        names.add(name)
        replicas = count(emit, rj.get("replicas"), f"{field}.replicas", 1)
        template = rj.get("template")
        job_spec = _mapping(template).get("spec")
        if not isinstance(job_spec, Mapping) or not isinstance(job_spec.get("template"), Mapping):
            emit.error(f"{field}.template.spec.template", "a replicated job needs a Job template with a pod template")
            return None
        if not valid_template(emit, template, f"{field}.template") or \
                not valid_template(emit, job_spec.get("template"), f"{field}.template.spec.template"):
            return None
        parallelism = count(emit, job_spec.get("parallelism"), f"{field}.template.spec.parallelism", 1)
        completions = count(emit, job_spec.get("completions"), f"{field}.template.spec.completions",
                            parallelism if parallelism is not None else 1)
        if replicas is None or parallelism is None or completions is None:
            return None
        assert isinstance(template, Mapping)
        out.append(_ReplicatedJob(name, replicas, template, parallelism, completions))
    return out


def _started(status: Mapping[str, Any], rj: _ReplicatedJob) -> bool:
    """JobSet's replicatedJobsStarted: every Job of the replicated job is ready, succeeded or failed."""
    for entry in status.get("replicatedJobsStatus") or []:
        if isinstance(entry, Mapping) and entry.get("name") == rj.name:
            done = sum(int(entry.get(k) or 0) for k in ("ready", "succeeded", "failed")
                       if isinstance(entry.get(k) or 0, int))
            return done == rj.replicas
    return False


def _expect_jobs(emit: Emit, rjobs: Sequence[_ReplicatedJob], suspended: bool, in_order: bool,
                 status: Mapping[str, Any]) -> bool:
    """The Jobs and pods the replicated jobs make now, against the limit (False after an error)."""
    jobs = pods = 0
    for i, rj in enumerate(rjobs):
        field = f"spec.replicatedJobs[{i}]"
        if not emit.expect(rj.replicas, f"{field}.replicas", before=jobs, what="Jobs"):
            return False
        jobs += rj.replicas
        each = 0 if suspended else min(rj.parallelism, rj.completions)
        if rj.replicas == 1:
            which = "parallelism" if rj.parallelism <= rj.completions else "completions"
            ok = emit.expect(each, f"{field}.template.spec.{which}", before=pods)
        else:
            ok = emit.expect(rj.replicas * each, f"{field}.replicas", f"{rj.replicas} Jobs of {each:,} pods",
                             before=pods)
        if not ok:
            return False
        pods += rj.replicas * each
        if in_order and not _started(status, rj):
            break
    return True


def run_jobset(w: Workload, emit: Emit) -> None:
    rjobs = _replicated_jobs(w, emit)
    if rjobs is None:
        return
    spec, meta = w.spec, w.meta
    suspended = spec.get("suspend") is True
    in_order = get(spec, "startupPolicy", "startupPolicyOrder") == "InOrder"
    if not _expect_jobs(emit, rjobs, suspended, in_order, w.status):
        return
    dns = get(spec, "network", "enableDNSHostnames")
    subdomain = (get(spec, "network", "subdomain") or meta.name) if dns is not False else ""
    restarts = w.status.get("restarts") if isinstance(w.status.get("restarts"), int) else 0
    global_replicas = sum(rj.replicas for rj in rjobs)
    global_index = 0
    for rj in rjobs:
        for job_index in range(rj.replicas):
            job_name = f"{meta.name}-{rj.name}-{job_index}"
            stamp = {
                JOBSET_NAME: meta.name, JOBSET_REPLICATED_JOB: rj.name, JOBSET_RESTARTS: str(restarts),
                JOBSET_REPLICATED_JOB_REPLICAS: str(rj.replicas), JOBSET_GLOBAL_REPLICAS: str(global_replicas),
                JOBSET_JOB_INDEX: str(job_index), JOBSET_JOB_KEY: _sha1(f"{meta.namespace}/{job_name}"),
                JOBSET_JOB_GLOBAL_INDEX: str(global_index),
            }
            global_index += 1
            _emit_job(emit, rj, job_name, stamp, str(subdomain or ""), suspended)
        if in_order and not _started(w.status, rj):
            break  # the next replicated job waits until this one has started


def _emit_job(emit: Emit, rj: _ReplicatedJob, job_name: str, stamp: Mapping[str, str], subdomain: str,
              suspended: bool) -> None:
    template = rj.template
    tmeta = _mapping(template.get("metadata"))
    job_spec = dict(_mapping(template.get("spec")))
    pod_template = dict(_mapping(job_spec.get("template")))
    pmeta = dict(_mapping(pod_template.get("metadata")))
    pmeta["labels"] = {**_mapping(pmeta.get("labels")), **stamp}
    pmeta["annotations"] = {**_mapping(pmeta.get("annotations")), **stamp}
    pod_spec = dict(_mapping(pod_template.get("spec")))
    if subdomain:
        pod_spec["subdomain"] = subdomain
    pod_template.update(metadata=pmeta, spec=pod_spec)
    job_spec.update(template=pod_template, suspend=suspended)
    job_spec.setdefault("completionMode", "Indexed")
    job = emit.child("batch/v1", "Job", job_name, job_spec, labels={**_mapping(tmeta.get("labels")), **stamp},
                     annotations={**_mapping(tmeta.get("annotations")), **stamp})
    if suspended:
        return
    for index in range(min(rj.parallelism, rj.completions)):
        labels = {"batch.kubernetes.io/controller-uid": job.uid, "batch.kubernetes.io/job-name": job_name,
                  "controller-uid": job.uid, "job-name": job_name, COMPLETION_INDEX: str(index)}
        emit.pod(f"{job_name}-{index}-{suffix(f'{job.uid}/{index}')}", pod_template, parent=job, labels=labels,
                 annotations={COMPLETION_INDEX: str(index)},
                 hostname=f"{job_name}-{index}" if subdomain else None)


# ================================================================================== LeaderWorkerSet
def _lws_subgroup_index(worker_index: int, size: int, subgroup: int) -> int:
    if (size - 1) % subgroup == 0:
        return 0 if worker_index == 0 else (worker_index - 1) // subgroup
    return worker_index // subgroup


def run_lws(w: Workload, emit: Emit) -> None:
    spec, meta = w.spec, w.meta
    replicas = count(emit, spec.get("replicas"), "spec.replicas", 1)
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, Mapping):
        emit.error("spec.leaderWorkerTemplate", "a LeaderWorkerSet needs a leaderWorkerTemplate")
        return
    raw_size = lwt.get("size")
    size = 1 if raw_size is None else raw_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        emit.error("spec.leaderWorkerTemplate.size", f"must be an integer >= 1, got {raw_size!r}")
        return
    worker = lwt.get("workerTemplate")
    if not isinstance(worker, Mapping):
        emit.error("spec.leaderWorkerTemplate.workerTemplate", "a LeaderWorkerSet needs a worker pod template")
        return
    leader = lwt.get("leaderTemplate")
    if leader is not None and not valid_template(emit, leader, "spec.leaderWorkerTemplate.leaderTemplate"):
        return
    if not valid_template(emit, worker, "spec.leaderWorkerTemplate.workerTemplate"):
        return
    leader = leader if isinstance(leader, Mapping) else worker
    policy = spec.get("startupPolicy") or "LeaderCreated"
    if policy not in ("LeaderCreated", "LeaderReady"):
        emit.error("spec.startupPolicy", f"unknown startup policy {policy!r} (LeaderCreated or LeaderReady)")
        return
    sub_policy = _mapping(lwt.get("subGroupPolicy"))
    subgroup: int | None = None
    if sub_policy.get("subGroupSize") is not None:
        subgroup = count(emit, sub_policy.get("subGroupSize"), "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize")
        if subgroup is None:
            return
        if subgroup < 1 or subgroup > size or (size % subgroup and (size - 1) % subgroup):
            emit.error("spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                       f"must be between 1 and size ({size}), with size or size-1 divisible by it, got {subgroup}")
            return
    sub_type = str(sub_policy.get("subGroupPolicyType") or "LeaderWorker")
    if replicas is None:
        return
    per_group = 1 if policy == "LeaderReady" else size  # (the workers come once the leader is ready)
    if replicas == 1:
        fits = emit.expect(per_group, "spec.leaderWorkerTemplate.size", size)
    else:
        fits = emit.expect(replicas * per_group, "spec.replicas",
                           f"{replicas} groups of {per_group:,} pods" if per_group > 1 else replicas)
    if not fits:
        return
    unique_subdomains = get(spec, "networkConfig", "subdomainPolicy") == "UniquePerReplica"
    annotations: dict[str, str] = {LWS_SIZE: str(size)}
    if subgroup is not None:
        annotations[LWS_SUBGROUP_SIZE] = str(subgroup)
        if sub_policy.get("subGroupPolicyType"):
            annotations[LWS_SUBGROUP_POLICY_TYPE] = sub_type
    name = meta.name
    leader_sts = emit.child("apps/v1", "StatefulSet", name, {
        "replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {LWS_NAME: name, LWS_WORKER_INDEX: "0"}}, "template": leader,
    }, labels={LWS_NAME: name}, annotations={**meta.annotations, LWS_REPLICAS: str(replicas)})
    for g in range(replicas):
        leader_name = f"{name}-{g}"
        group_key = _sha1(f"{meta.namespace}/{leader_name}")
        subdomain = leader_name if unique_subdomains else name
        labels = {LWS_NAME: name, LWS_GROUP_INDEX: str(g), LWS_WORKER_INDEX: "0", LWS_GROUP_KEY: group_key,
                  "apps.kubernetes.io/pod-index": str(g), "statefulset.kubernetes.io/pod-name": leader_name}
        if subgroup is not None and sub_type != "LeaderExcluded":
            labels[LWS_SUBGROUP_INDEX] = "0"
            labels[LWS_SUBGROUP_KEY] = _sha1(f"{leader_name}/0")
        leader_pod = emit.pod(leader_name, leader, parent=leader_sts, labels=labels, annotations=annotations,
                              hostname=leader_name)
        leader_pod["spec"]["subdomain"] = subdomain
        if policy == "LeaderReady":
            continue  # the workers' StatefulSet is created once the leader is ready
        group_labels = {LWS_NAME: name, LWS_GROUP_INDEX: str(g), LWS_GROUP_KEY: group_key}
        worker_sts = emit.child("apps/v1", "StatefulSet", leader_name, {
            "replicas": size - 1, "serviceName": subdomain, "podManagementPolicy": "Parallel",
            "ordinals": {"start": 1}, "selector": {"matchLabels": dict(group_labels)}, "template": worker,
        }, labels=group_labels, annotations=meta.annotations)
        for i in range(1, size):
            pod_name = f"{leader_name}-{i}"
            wlabels = {**group_labels, LWS_WORKER_INDEX: str(i), "apps.kubernetes.io/pod-index": str(i),
                       "statefulset.kubernetes.io/pod-name": pod_name}
            if subgroup is not None:
                index = str(_lws_subgroup_index(i, size, subgroup))
                wlabels[LWS_SUBGROUP_INDEX] = index
                wlabels[LWS_SUBGROUP_KEY] = _sha1(f"{leader_name}/{index}")
            worker_pod = emit.pod(pod_name, worker, parent=worker_sts, labels=wlabels,
                                  annotations={**annotations, LWS_LEADER_NAME: leader_name}, hostname=pod_name)
            worker_pod["spec"]["subdomain"] = subdomain


CONTROLLERS: dict[tuple[str, str], ControllerFn] = {
    (JOBSET_GROUP, "JobSet"): run_jobset,
    (LWS_GROUP, "LeaderWorkerSet"): run_lws,
}
