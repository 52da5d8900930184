"""GPU memory per model for the openb trace (MiB), as the FGD paper's simulator assumes.

The trace gives models only; GPU memory matters here because a NodeInfo carries it and a fraction's
memory share is derived from it. G1/G2/G3 are the trace's anonymised models.
"""

from __future__ import annotations

GPU_MEMORY_MIB: dict[str, int] = {
    "P4": 7611,
    "2080": 11019,
    "1080": 11178,
    "M40": 11448,
    "T4": 15109,
    "V100M16": 16160,
    "P100": 16280,
    "A10": 22731,
    "3090": 24268,
    "V100M32": 32510,
    "A100": 81251,
    "G1": 10000,
    "G2": 20000,
    "G3": 30000,
}

# An unknown model still gets a node (with a warning): fractions are accounted in milli, so only the
# memory shown in reports depends on this.
DEFAULT_GPU_MEMORY_MIB = 16384


def gpu_memory_mib(model: str) -> int | None:
    return GPU_MEMORY_MIB.get(model)
