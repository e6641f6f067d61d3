"""Job, task and pod-set ordering plugins (spec 4.5): priority, elastic, kubeflow, ray, taskorder,
subgrouporder."""

from __future__ import annotations

from kaisched.framework.plugin import Plugin
from kaisched.framework.session import Session
from kaisched.model.job import PodGroupInfo, PodSetInfo
from kaisched.model.task import TaskInfo

KUBEFLOW_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"


class PriorityPlugin(Plugin):
    """Higher PodGroup priority first."""

    name = "priority"

    def on_session_open(self, ssn: Session) -> None:
        ssn.job_order_keys.append(_neg_priority)


def _neg_priority(job: PodGroupInfo) -> int:
    return -job.priority


class ElasticPlugin(Plugin):
    """Jobs below their minimum first, then jobs exactly at it, then jobs above it."""

    name = "elastic"

    def on_session_open(self, ssn: Session) -> None:
        ssn.job_order_keys.append(PodGroupInfo.elastic_rank)


class KubeflowPlugin(Plugin):
    """Kubeflow master/launcher pods before workers."""

    name = "kubeflow"

    def on_session_open(self, ssn: Session) -> None:
        ssn.task_order_keys.append(_kubeflow_rank)


def _kubeflow_rank(task: TaskInfo) -> int:
    return 0 if task.labels.get(KUBEFLOW_ROLE_LABEL) in ("master", "launcher") else 1


class RayPlugin(Plugin):
    """Ray head pods before workers."""

    name = "ray"

    def on_session_open(self, ssn: Session) -> None:
        ssn.task_order_keys.append(_ray_rank)


def _ray_rank(task: TaskInfo) -> int:
    return 0 if task.labels.get(RAY_NODE_TYPE_LABEL) == "head" else 1


class TaskOrderPlugin(Plugin):
    """Pods with ``kai.scheduler/task-priority`` before pods without; higher values first."""

    name = "taskorder"

    def on_session_open(self, ssn: Session) -> None:
        ssn.task_order_keys.append(_task_priority_key)


def _task_priority_key(task: TaskInfo) -> tuple[int, int]:
    tp = task.task_priority
    return (0, -tp) if tp is not None else (1, 0)


class SubGroupOrderPlugin(Plugin):
    """Pod sets below their minimum first, then the lowest allocated/minimum ratio."""

    name = "subgrouporder"

    def on_session_open(self, ssn: Session) -> None:
        ssn.pod_set_order_keys.append(_pod_set_key)


def _pod_set_key(ps: PodSetInfo) -> tuple[int, float]:
    a = ps.active_allocated
    if a < ps.min_available:
        return (0, 0.0)
    return (1, a / max(ps.min_available, 1))
