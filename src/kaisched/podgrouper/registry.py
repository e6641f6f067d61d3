"""Which grouper groups the pods of a top owner (spec 10.3): by API group and kind (any version)."""

from __future__ import annotations

from kaisched.podgrouper import batch, kubeflow, others, ray
from kaisched.podgrouper.base import GroupFn

GROUPERS: dict[tuple[str, str], GroupFn] = {**batch.GROUPERS, **kubeflow.GROUPERS, **ray.GROUPERS, **others.GROUPERS}

# kinds whose pods are grouped by the second-highest owner's grouper (with the top owner's labels and
# annotations): Argo Workflows, Kubeflow Trainer TrainJobs, Run:ai workloads, Dynamo graphs
SKIP_TOP_OWNER: frozenset[tuple[str, str]] = frozenset({
    ("argoproj.io", "Workflow"),
    ("trainer.kubeflow.org", "TrainJob"),
    ("run.ai", "TrainingWorkload"),
    ("run.ai", "InteractiveWorkload"),
    ("run.ai", "DistributedWorkload"),
    ("run.ai", "InferenceWorkload"),
    ("run.ai", "DistributedInferenceWorkload"),
    ("nvidia.com", "DynamoGraphDeployment"),
})


def grouper_for(group: str, kind: str) -> GroupFn | None:
    """The grouper of a top owner's kind, None for the default grouper."""
    return GROUPERS.get((group, kind))
