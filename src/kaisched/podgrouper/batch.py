"""Groupers of the batch family and of the other single-pod kinds (spec 10.3).

* bare ``v1/Pod``: the default grouper; Spark driver and executor pods (labels ``spark-app-name`` and
  ``spark-app-selector``) share one PodGroup named by the value of ``spark-app-selector``;
* ``batch/v1 Job``: one PodGroup per pod, ``pg-<podName>-<jobUID>``;
* ``batch/v1 CronJob``: the default grouper applied to the pod's Job, ``pg-<jobName>-<jobUID>``;
* ``apps/v1 Deployment``: one PodGroup per pod, ``pg-<podName>-<podUID>`` owned by the pod, priority
  ``inference`` by default;
* ``serving.knative.dev/v1 Service``: grouped through the pod's Revision: in gang mode one PodGroup per
  Revision, ``pg-<revision>-<revisionUID>`` with minMember = the Revision's
  ``autoscaling.knative.dev/min-scale`` (default 1); a Revision whose pods already have one PodGroup each
  (or the non-gang mode) keeps one PodGroup per pod; priority ``inference`` by default.

StatefulSet, ReplicaSet, Tekton PipelineRun/TaskRun, KubeVirt VirtualMachineInstance and Seldon
SeldonDeployment use the default grouper (no entry here); Argo Workflows skip their top owner (registry),
so their step pods reach the ``v1/Pod`` grouper and get one PodGroup each.
"""

from __future__ import annotations

from kaisched.k8s import constants as C
from kaisched.podgrouper.base import (
    INFERENCE,
    GrouperError,
    GroupFn,
    GroupRequest,
    Owner,
    PodGroupPlan,
    default_plan,
    error,
    pg_name,
)

SPARK_APP_NAME_LABEL = "spark-app-name"
SPARK_APP_SELECTOR_LABEL = "spark-app-selector"
KNATIVE_REVISION_LABEL = "serving.knative.dev/revision"
KNATIVE_MIN_SCALE_ANNOTATION = "autoscaling.knative.dev/min-scale"
KNATIVE_GANG_SCHEDULE_DEFAULT = True  # KAI's --knative-gang-schedule


# ------------------------------------------------------------------------------------------- v1/Pod
def is_spark_pod(req: GroupRequest) -> bool:
    labels = req.pod.meta.labels
    return SPARK_APP_NAME_LABEL in labels and SPARK_APP_SELECTOR_LABEL in labels


def group_pod(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """A pod whose top owner is a pod (itself, or a Spark driver): the default grouper; all pods of one
    Spark application share the PodGroup named by their ``spark-app-selector``."""
    plan = default_plan(req)
    if is_spark_pod(req):
        selector = req.pod.meta.labels[SPARK_APP_SELECTOR_LABEL]
        if not selector:
            return error(req.top, f"metadata.labels[{SPARK_APP_SELECTOR_LABEL}]",
                         f"a Spark pod needs a non-empty {SPARK_APP_SELECTOR_LABEL} label (pod "
                         f"{req.pod.meta.namespace}/{req.pod.meta.name})")
        plan.name = selector
    return plan


# -------------------------------------------------------------------------------------- batch/v1 Job
def group_job(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """One PodGroup per pod of the Job: ``pg-<podName>-<jobUID>`` (default grouper otherwise)."""
    plan = default_plan(req)
    plan.name = pg_name(req.pod.meta.name, req.top.uid)
    return plan


def group_cronjob(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """The default grouper applied to the pod's Job (the CronJob's labels are not consulted)."""
    for i, owner in enumerate(req.chain):
        if owner.kind == "Job" and owner.group == "batch":
            return default_plan(GroupRequest(req.pod, req.chain[:i + 1], req.ctx))
    return error(req.top, "",
                 f"pod {req.pod.meta.namespace}/{req.pod.meta.name} has no owner reference of type 'Job'")


# ------------------------------------------------------------------------------- apps/v1 Deployment
def group_deployment(req: GroupRequest) -> PodGroupPlan | GrouperError:
    """One PodGroup per pod, owned by the pod: ``pg-<podName>-<podUID>``; priority ``inference`` unless a
    label names an existing class."""
    pod = Owner.of_pod(req.pod)
    plan = default_plan(req, default_priority=INFERENCE)
    plan.name = pg_name(pod.name, pod.uid)
    plan.owner = pod
    return plan


# ----------------------------------------------------------------------------------- Knative Service
def _revision_of(req: GroupRequest) -> int | GrouperError:
    """The index of the pod's Revision in its owner chain."""
    name = req.pod.meta.labels.get(KNATIVE_REVISION_LABEL)
    if not name:
        return error(req.top, f"metadata.labels[{KNATIVE_REVISION_LABEL}]",
                     f"revisionName not found for knative service pod {req.pod.meta.namespace}/{req.pod.meta.name}")
    for i, owner in enumerate(req.chain):
        if owner.kind == "Revision" and owner.group == "serving.knative.dev" and owner.name == name:
            return i
    return error(req.top, f"metadata.labels[{KNATIVE_REVISION_LABEL}]",
                 f"Revision {req.pod.meta.namespace}/{name} of pod {req.pod.meta.name} not found in its owners")


def min_scale(revision: Owner) -> int:
    """The Revision's ``autoscaling.knative.dev/min-scale`` (1 when absent, not an integer or negative)."""
    raw = revision.annotations.get(KNATIVE_MIN_SCALE_ANNOTATION, "").strip()
    try:
        value = int(raw)
    except ValueError:
        return 1
    return value if value >= 0 else 1


def _per_pod_revision(req: GroupRequest, revision: Owner) -> bool:
    """KAI keeps one PodGroup per pod for a Revision that was grouped that way before (backward
    compatibility): its pods already point at several PodGroups, or at a single one that is not the
    Revision's."""
    direct = req.chain[0] if req.chain else None
    if direct is None:
        return False
    groups: dict[str, int] = {}
    for pod in req.ctx.pods_of(direct):
        if pod.meta.labels.get(KNATIVE_REVISION_LABEL) != revision.name:
            continue
        name = pod.meta.annotations.get(C.POD_GROUP_NAME_ANNOTATION)
        if name:
            groups[name] = groups.get(name, 0) + 1
    if any(n > 1 for n in groups.values()):
        return False  # two pods share a PodGroup: a gang-scheduled Revision
    if len(groups) > 1:
        return True
    if len(groups) == 1:
        (name,) = groups
        return name != pg_name(revision.name, revision.uid)
    return False


def group_knative_service(req: GroupRequest, *, gang: bool = KNATIVE_GANG_SCHEDULE_DEFAULT) -> \
        PodGroupPlan | GrouperError:
    """Grouped through the pod's Revision (its labels, annotations and priority): gang mode → one PodGroup
    per Revision with minMember = min-scale; otherwise one PodGroup per pod, minMember 1."""
    index = _revision_of(req)
    if isinstance(index, GrouperError):
        return index
    revision = req.chain[index]
    sub = GroupRequest(req.pod, req.chain[:index + 1], req.ctx)
    if gang and not _per_pod_revision(req, revision):
        return default_plan(sub, default_priority=INFERENCE, min_member=min_scale(revision))
    pod = Owner.of_pod(req.pod)
    plan = default_plan(sub, default_priority=INFERENCE, name=pg_name(pod.name, pod.uid))
    plan.owner = pod
    return plan


def _group_knative(req: GroupRequest) -> PodGroupPlan | GrouperError:
    return group_knative_service(req)


GROUPERS: dict[tuple[str, str], GroupFn] = {
    ("", "Pod"): group_pod,
    ("batch", "Job"): group_job,
    ("batch", "CronJob"): group_cronjob,
    ("apps", "Deployment"): group_deployment,
    ("serving.knative.dev", "Service"): _group_knative,
}
