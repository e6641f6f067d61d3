"""KAI Scheduler constants: names, labels, annotations, API groups and default values.

Values are copied verbatim from KAI (pkg/common/constants, the pod-grouper and the Helm chart) because
compatibility depends on them; see ``shared/spec/kai-spec.md`` sections 0, 2, 3 and 6.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

# ----------------------------------------------------------------------------------------- scheduler

SCHEDULER_NAME: Final = "kai-scheduler"
DEFAULT_SCHEDULER_NAME: Final = "default-scheduler"  # pod spec.schedulerName when omitted
KAI_NAMESPACE: Final = "kai-scheduler"
RESERVATION_NAMESPACE: Final = "kai-resource-reservation"
LEGACY_RESERVATION_NAMESPACE: Final = "runai-reservation"
RESERVATION_APP_LABEL_VALUE: Final = "kai-resource-reservation"  # label app=<this> on reservation pods
SCALE_ADJUST_NAMESPACE: Final = "kai-scale-adjust"
DEFAULT_NAMESPACE: Final = "default"  # namespace of namespaced objects that do not name one

# ----------------------------------------------------------------------------- labels set by users

QUEUE_LABEL: Final = "kai.scheduler/queue"
LEGACY_QUEUE_LABEL: Final = "runai/queue"
PROJECT_LABEL: Final = "project"  # queue fallback of the pod-grouper
DEFAULT_QUEUE_NAME: Final = "default-queue"
DEFAULT_PARENT_QUEUE_NAME: Final = "default-parent-queue"
PRIORITY_CLASS_LABEL: Final = "priorityClassName"
PREEMPTIBILITY_LABEL: Final = "kai.scheduler/preemptibility"
SUBGROUP_NAME_LABEL: Final = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL: Final = "kai.scheduler/task-priority"
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"
USER_LABEL: Final = "user"

# ------------------------------------------------------------------------ annotations set by users

POD_GROUP_NAME_ANNOTATION: Final = "pod-group-name"
# a pod the pod-grouper could not group points at this (never created) PodGroup, so it is not scheduled
UNGROUPED_POD_GROUP_PREFIX: Final = "kaisched-ungrouped-"
GPU_FRACTION_ANNOTATION: Final = "gpu-fraction"
GPU_MEMORY_ANNOTATION: Final = "gpu-memory"  # MiB, positive integer
GPU_FRACTION_NUM_DEVICES_ANNOTATION: Final = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER_NAME_ANNOTATION: Final = "gpu-fraction-container-name"
MPS_ANNOTATION: Final = "mps"
TOPOLOGY_ANNOTATION: Final = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE_ANNOTATION: Final = "kai.scheduler/segment-size"
SEGMENT_TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/segment-topology-required-placement"
SEGMENT_TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/segment-topology-preferred-placement"

# ------------------------------------------------------------------- labels/annotations set by KAI

RECEIVED_RESOURCE_TYPE_ANNOTATION: Final = "received-resource-type"  # Regular | Fraction | MigInstance
RECEIVED_RESOURCE_TYPE_REGULAR: Final = "Regular"
RECEIVED_RESOURCE_TYPE_FRACTION: Final = "Fraction"
RECEIVED_RESOURCE_TYPE_MIG_INSTANCE: Final = "MigInstance"
GPU_GROUP_LABEL: Final = "runai-gpu-group"  # multi-device fractions: "runai-gpu-group/<group>"
SHARED_GPU_CONFIGMAP_ANNOTATION: Final = "runai/shared-gpu-configmap"
LAST_START_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/last-start-timestamp"
STALE_PODGROUP_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/stale-podgroup-timestamp"
TOP_OWNER_METADATA_ANNOTATION: Final = "kai.scheduler/top-owner-metadata"

# ------------------------------------------------------------------------------- node labels read

GPU_MEMORY_NODE_LABEL: Final = "nvidia.com/gpu.memory"  # MiB per GPU
GPU_COUNT_NODE_LABEL: Final = "nvidia.com/gpu.count"
MIG_STRATEGY_NODE_LABEL: Final = "nvidia.com/mig.strategy"  # single | mixed
MIG_ENABLED_NODE_LABEL: Final = "node-role.kubernetes.io/mig-enabled"
GPU_WORKER_NODE_LABEL: Final = "node-role.kubernetes.io/gpu-worker"
CPU_WORKER_NODE_LABEL: Final = "node-role.kubernetes.io/cpu-worker"
DEFAULT_GPU_MEMORY_MIB: Final = 100  # used when the node has no gpu.memory label

# -------------------------------------------------------------------------------- resource names

GPU_RESOURCE: Final = "nvidia.com/gpu"
AMD_GPU_RESOURCE: Final = "amd.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

# ---------------------------------------------------------------------------- API groups/versions

CORE_API_VERSION: Final = "v1"
SCHEDULING_RUNAI_GROUP: Final = "scheduling.run.ai"
QUEUE_API_VERSION: Final = "scheduling.run.ai/v2"
POD_GROUP_API_VERSION: Final = "scheduling.run.ai/v2alpha2"
BIND_REQUEST_API_VERSION: Final = "scheduling.run.ai/v1alpha2"
PRIORITY_CLASS_API_VERSION: Final = "scheduling.k8s.io/v1"
TOPOLOGY_API_VERSION: Final = "kai.scheduler/v1alpha1"
KAI_CONFIG_API_VERSION: Final = "kai.scheduler/v1"

NODE_KIND: Final = "Node"
POD_KIND: Final = "Pod"
QUEUE_KIND: Final = "Queue"
POD_GROUP_KIND: Final = "PodGroup"
PRIORITY_CLASS_KIND: Final = "PriorityClass"
TOPOLOGY_KIND: Final = "Topology"

# Dynamic Resource Allocation: the same kinds are read in every version below (v1 first); v1beta1 nests
# a request's exact fields and a device's attributes/capacity differently
RESOURCE_V1_API_VERSION: Final = "resource.k8s.io/v1"
RESOURCE_V1BETA2_API_VERSION: Final = "resource.k8s.io/v1beta2"
RESOURCE_V1BETA1_API_VERSION: Final = "resource.k8s.io/v1beta1"
RESOURCE_API_VERSIONS: Final = (RESOURCE_V1_API_VERSION, RESOURCE_V1BETA2_API_VERSION, RESOURCE_V1BETA1_API_VERSION)
DEVICE_CLASS_KIND: Final = "DeviceClass"
RESOURCE_SLICE_KIND: Final = "ResourceSlice"
RESOURCE_CLAIM_KIND: Final = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE_KIND: Final = "ResourceClaimTemplate"
ALLOCATION_MODE_EXACT_COUNT: Final = "ExactCount"  # a device request's allocationMode (the default)
ALLOCATION_MODE_ALL: Final = "All"
MAX_TOPOLOGY_LEVELS: Final = 16
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# ------------------------------------------------------------------------ priority/preemptibility

DEFAULT_QUEUE_PRIORITY: Final = 100
DEFAULT_JOB_PRIORITY: Final = 50  # no matching PriorityClass and no globalDefault one
NON_PREEMPTIBLE_PRIORITY_THRESHOLD: Final = 100  # priority >= this => non-preemptible by default

PREEMPTIBLE: Final = "preemptible"
NON_PREEMPTIBLE: Final = "non-preemptible"
PREEMPTIBILITY_VALUES: Final = frozenset({"", PREEMPTIBLE, NON_PREEMPTIBLE})

TRAIN_PRIORITY_CLASS: Final = "train"
BUILD_PREEMPTIBLE_PRIORITY_CLASS: Final = "build-preemptible"
BUILD_PRIORITY_CLASS: Final = "build"
INFERENCE_PRIORITY_CLASS: Final = "inference"
TRAIN_PRIORITY: Final = 50
BUILD_PREEMPTIBLE_PRIORITY: Final = 75
BUILD_PRIORITY: Final = 100
INFERENCE_PRIORITY: Final = 125
BUILTIN_PRIORITY_CLASSES: Final[Mapping[str, int]] = MappingProxyType(
    {
        TRAIN_PRIORITY_CLASS: TRAIN_PRIORITY,
        BUILD_PREEMPTIBLE_PRIORITY_CLASS: BUILD_PREEMPTIBLE_PRIORITY,
        BUILD_PRIORITY_CLASS: BUILD_PRIORITY,
        INFERENCE_PRIORITY_CLASS: INFERENCE_PRIORITY,
    }
)

# ----------------------------------------------------------------------------------- queue values

UNLIMITED: Final = -1  # quota/limit value meaning "no bound"
QUEUE_MEMORY_UNIT_BYTES: Final = 1_000_000  # Queue memory quota/limit are in MB (10**6 bytes)

# ------------------------------------------------------------------------------- PodGroup values

DEFAULT_MIN_MEMBER: Final = 1
NO_SCHEDULING_BACKOFF: Final = -1

# ------------------------------------------------------------------ workloads (spec 10.3), by kind
# the apiVersions accepted for each workload kind the embedded cluster and the pod-grouper know
WORKLOAD_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "Job": ("batch/v1",),
    "CronJob": ("batch/v1",),
    "Deployment": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "TFJob": ("kubeflow.org/v1",),
    "PyTorchJob": ("kubeflow.org/v1",),
    "XGBoostJob": ("kubeflow.org/v1",),
    "JAXJob": ("kubeflow.org/v1",),
    "MPIJob": ("kubeflow.org/v1", "kubeflow.org/v2beta1"),
    "Notebook": ("kubeflow.org/v1", "kubeflow.org/v1beta1"),
    "TrainJob": ("trainer.kubeflow.org/v1alpha1",),
    "RayCluster": ("ray.io/v1", "ray.io/v1alpha1"),
    "RayJob": ("ray.io/v1", "ray.io/v1alpha1"),
    "RayService": ("ray.io/v1", "ray.io/v1alpha1"),
    "Workflow": ("argoproj.io/v1alpha1",),
    "JobSet": ("jobset.x-k8s.io/v1alpha2",),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1",),
    "Service": ("serving.knative.dev/v1",),  # Knative Service (a core v1 Service is not a workload)
    "Revision": ("serving.knative.dev/v1",),
    "Configuration": ("serving.knative.dev/v1",),
    "PipelineRun": ("tekton.dev/v1",),
    "TaskRun": ("tekton.dev/v1",),
    "VirtualMachineInstance": ("kubevirt.io/v1",),
    "VirtualMachine": ("kubevirt.io/v1",),
    "SeldonDeployment": ("machinelearning.seldon.io/v1", "machinelearning.seldon.io/v1alpha2"),
    "PodGang": ("scheduler.grove.io/v1alpha1",),
    "PodCliqueSet": ("grove.io/v1alpha1",),
    "PodGangSet": ("grove.io/v1alpha1",),
    "PodClique": ("grove.io/v1alpha1",),
    "PodCliqueScalingGroup": ("grove.io/v1alpha1",),
    "ConfigMap": ("v1",),  # the pod-grouper's optional per-kind defaults
}
