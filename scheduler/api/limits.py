"""The bounds of every number Tessera parses from a Kubernetes object, in one place.

A value outside its bound is refused where it is parsed, with a one-line reason (the pod stays pending,
the node is unusable, the queue is invalid, the webhook refuses it), so no hostile or careless number
ever reaches the scheduling arrays: they hold int32 milli and int64 MiB and millicores, and every bound
below keeps the sum over a whole cluster far inside int64. The same table is in docs/limits.md.

The bounds are far above any real machine (the largest GPU today has 288 GB, the largest node a few
hundred cores and 16 GPUs) and far below anything that could overflow.
"""

from __future__ import annotations

from typing import Final

# One GPU (a GPU is 1000 milli: keys.MILLI_PER_GPU).
MAX_GPU_MEMORY_MIB: Final = 4 * 1024 * 1024  # 4 TiB per GPU: node label nvidia.com/gpu.memory, gpu-memory
MAX_GPUS_PER_NODE: Final = 64  # node nvidia.com/gpu capacity; per pod: nvidia.com/gpu, num-devices

# CPU and memory, of one pod (all containers) and of one node.
MAX_CPU_MILLI: Final = 1 << 30  # ~1 million cores
MAX_MEMORY_MIB: Final = 1 << 30  # 1 PiB
# Any other resource (ephemeral-storage and hugepages in bytes, extended resources in units), of one pod
# and of one node: 8 PiB of bytes. A node's pods never hold more than it has, so sums stay in int64.
MAX_SCALAR: Final = 1 << 53
# A node's `pods` allocatable (the kubelet's maxPods; 110 by default).
MAX_PODS_PER_NODE: Final = 1 << 20

# Queues (units as in the Queue CRD: GPUs, millicores, MiB); quota and limit may also be -1.
MAX_QUEUE_GPUS: Final = float(1 << 24)
MAX_QUEUE_CPU_MILLI: Final = float(1 << 40)
MAX_QUEUE_MEMORY_MIB: Final = float(1 << 40)
MAX_OVER_QUOTA_WEIGHT: Final = 1e6
# Priorities are int32 in Kubernetes (PriorityClass.value, Pod.spec.priority); queue priorities too.
MIN_PRIORITY: Final = -(1 << 31)
MAX_PRIORITY: Final = (1 << 31) - 1

# Gangs.
MAX_MIN_MEMBER: Final = 100_000
MAX_STALE_GRACE_S: Final = 100 * 365 * 24 * 3600.0  # "never" (KAI compatibility uses 10 years) fits

# The queue tree: levels from a top-level queue down to a leaf (the top level is 1). A queue deeper than
# this is invalid (its pods wait, told why), so every walk of the tree is bounded; real trees have 2-4.
MAX_QUEUE_DEPTH: Final = 32
# Queue spec.namespaces: how many namespaces one queue may name.
MAX_QUEUE_NAMESPACES: Final = 1024

# Queues' preemptMinRuntime / reclaimMinRuntime (a job younger than that is not a victim).
MAX_MIN_RUNTIME_S: Final = 365 * 24 * 3600.0

# Text: a number longer than this is refused before it is converted (no million-digit integers).
MAX_NUMBER_CHARS: Final = 64
