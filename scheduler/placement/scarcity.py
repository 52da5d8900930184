"""Model scarcity: how much of each GPU model the pods that accept only a few models will want.

When part of the workload constrains the GPU model (`gpu_spec`, the `gpuspec*` pod lists), capacity of
a model those pods need is worth more than capacity any pod can use: a pod that could run anywhere but
takes a T4 leaves a T4-only pod nowhere to go. With the typical workload's popularity p_m, GPU milli
per pod g_m (milli x devices) and acceptable models A_m, the constrained demand is split over A_m in
proportion to each model's GPUs, and the *pressure* of model c is the share of all GPU demand that
lands on c that way, over c's share of the cluster's GPUs:

    pressure_c = (sum_{m constrained, c in A_m} p_m g_m cap_c / cap(A_m)) / (sum_m p_m g_m)
                 / (cap_c / cap_total)

At 100% arrived (demand = capacity) pressure_c = 1 means the constrained pods alone fill model c. A
policy charges a placement on model c `pressure_c` x the milli it takes, as extra fragment (milli that
constrained pods will miss). Unconstrained workloads have pressure 0 everywhere: nothing changes.

Measured (unallocated GPU % at 100% arrived, gpuspec33, seed 42): see `fragfit.py`; `wastefit.py` also
charges a model past pressure 1 in its expected-waste currency (its docstring, "Overflow").
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.placement.policy import Array
from scheduler.placement.workload import TypicalWorkload
from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook
from scheduler.state.node_arrays import NodeArrays

PRESSURE_CAP = 2.0  # beyond twice a model's capacity, more pressure says nothing new


def model_pressure(workload: TypicalWorkload, gpus: Mapping[str, int]) -> dict[str, float]:
    """Pressure per model name (module docstring); `gpus` = GPUs of each model in the cluster."""
    total_cap = sum(gpus.values())
    demand = sum(
        p * t.gpu_milli * t.num_gpus for t, p in zip(workload.types, workload.popularity, strict=True)
    )
    if total_cap <= 0 or demand <= 0:
        return {}
    load = dict.fromkeys(gpus, 0.0)
    for t, p in zip(workload.types, workload.popularity, strict=True):
        if not t.models or not t.gpu_milli:
            continue
        allowed = [m for m in t.models if gpus.get(m, 0) > 0]
        cap = sum(gpus[m] for m in allowed)
        for m in allowed:
            load[m] += p * t.gpu_milli * t.num_gpus * gpus[m] / cap
    return {
        m: min(PRESSURE_CAP, (load[m] / demand) / (gpus[m] / total_cap))
        for m in gpus
        if gpus[m] > 0 and load[m]
    }


def gpus_per_model(state: NodeArrays) -> dict[str, int]:
    """Usable GPUs of each model in the cluster."""
    xp = state.xp
    usable = xp.sum(xp.astype(state.present & state.healthy, xp.int64), axis=1)
    out: dict[str, int] = {}
    for code in range(len(state.models)):
        n = int(xp.sum(xp.where(state.model == code, usable, xp.zeros_like(usable))))
        if n:
            out[state.models.name(code)] = n
    return out


def pressure_table(xp: ArrayNamespace, pressure: Mapping[str, float], models: Codebook) -> Array:
    """float64[models + 1]: entry c + 1 = pressure of model code c; entry 0 (no GPU) = 0."""
    values = [0.0] + [pressure.get(models.name(c), 0.0) for c in range(len(models))]
    return xp.asarray(values, dtype=xp.float64)
