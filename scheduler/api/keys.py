"""Annotation, label and resource names: the user-facing API (compatible with KAI Scheduler's)."""

from typing import Final

GROUP = "scheduling.tessera.dev"
VERSION = "v1alpha1"
API_VERSION: Final = "scheduling.tessera.dev/v1alpha1"  # GROUP/VERSION, spelled out for typing
SCHEDULER_NAME = "tessera"

# What a user writes on a pod.
QUEUE_LABEL = "tessera.dev/queue"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
DEFAULT_QUEUE = "default"
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_FRACTION_NUM_DEVICES = "gpu-fraction-num-devices"
POD_GROUP = "tessera.dev/pod-group"
KAI_POD_GROUP = "pod-group-name"

# KAI Scheduler's own Queue and PodGroup kinds, read with --kai-compat (docs/kai-compat.md).
KAI_GROUP = "scheduling.run.ai"
KAI_QUEUE_VERSION = "v2"
KAI_PODGROUP_VERSION = "v2alpha2"
KAI_SCHEDULER_NAME = "kai-scheduler"
# On a Queue or PodGroup translated from KAI's: the apiVersion of the object it was read from.
TRANSLATED_FROM = "tessera.dev/translated-from"

# What the scheduler and the webhook write.
# Label on the PodGroup the podgrouper writes for a bare pod (as KAI's podgrouper does, for tools): the pod
# is its own job, so the scheduler's own PodGroup watch leaves these out (`!tessera.dev/pod-record`).
POD_RECORD_LABEL = "tessera.dev/pod-record"
GPU_ASSIGNMENT = "tessera.dev/gpu-assignment"
GPU_SLICE_RESOURCE = "tessera.dev/gpu-slice"
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
# Set by the device plugin once the kubelet holds the devices it answered the pod's Allocate with: which
# GPUs it gave (scheduler/api/allocation.py; DESIGN.md, hand-off step 3).
GPU_ALLOCATED = "tessera.dev/gpu-allocated"

# Node labels (as published by NVIDIA's GPU feature discovery).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"

# Simulation-only pod annotations.
SIM_ARRIVAL = "tessera.dev/sim-arrival"
SIM_DURATION = "tessera.dev/sim-duration"

MILLI_PER_GPU = 1000
