"""What a pending pod counts for its queue before it is placed (quota, limit, fair-share demand).

A fraction or whole GPUs count as asked. A `gpu-memory` request is a share of whichever GPU the pod lands
on, unknown before placement: it counts as the largest share it could take, i.e. its MiB over the memory
of the smallest GPU that could hold it (of a model it accepts). KAI Scheduler does the same with the
smallest GPU memory of the cluster. Once placed, a pod counts its real share (`placement_usage`: the milli
written in its assignment on that GPU). Counting the largest share keeps a queue's limit and quota true
whatever GPU the pod gets: a memory-only queue cannot run past them, and it has a real demand for fair
share and reclaim (a token 0.001 GPU would give it neither).
"""

from __future__ import annotations

import math

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.resources import Resources
from scheduler.model.types import PodInfo
from scheduler.state.cluster_state import ClusterState


class GPUCharge:
    """`charge(pod)`: the resources a pending pod counts for its queue. Made per session; the smallest
    fitting GPU memory is found once per (MiB, models) and cached until the nodes change."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._epoch = -1
        self._smallest: dict[tuple[int, frozenset[str] | None], int | None] = {}

    def __call__(self, pod: PodInfo) -> Resources:
        req = pod.request
        if req.kind == "none":
            gpu = 0.0
        elif req.kind == "memory":
            gpu = req.num_devices * self.memory_share_milli(req.memory_mib, pod.gpu_models) / MILLI_PER_GPU
        else:
            gpu = req.num_devices * req.milli / MILLI_PER_GPU
        return Resources(gpu=gpu, cpu=pod.cpu_milli, memory=pod.memory_mib)

    def memory_share_milli(self, mib: int, models: frozenset[str] | None) -> int:
        """Milli of one GPU that `mib` takes on the smallest GPU that could hold it (a whole GPU when
        none could: the pod waits, and may not count for less than any GPU it could ever get)."""
        smallest = self.smallest_fitting_mib(mib, models)
        if smallest is None:
            return MILLI_PER_GPU
        return min(MILLI_PER_GPU, math.ceil(mib * MILLI_PER_GPU / smallest))

    def smallest_fitting_mib(self, mib: int, models: frozenset[str] | None) -> int | None:
        s = self.state
        if s.node_epoch != self._epoch:
            self._epoch = s.node_epoch
            self._smallest.clear()
        key = (mib, models)
        if key not in self._smallest:
            xp = s.xp
            rows = s.valid & (s.model >= 0)
            if models is not None:
                ok = xp.zeros(rows.shape, dtype=xp.bool)
                for code in (c for m in models if (c := s.models.get(m)) is not None):
                    ok = ok | (s.model == code)
                rows = rows & ok
            usable = s.present & rows[:, None] & (s.total_mib >= mib)
            big = xp.full(s.total_mib.shape, 1 << 62, dtype=xp.int64)
            least = int(xp.min(xp.where(usable, s.total_mib, big))) if s.capacity else 1 << 62
            self._smallest[key] = None if least >= 1 << 62 else least
        return self._smallest[key]
