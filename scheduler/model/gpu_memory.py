"""GPU memory of a node whose `nvidia.com/gpu.memory` label is missing, from its product name.

NVIDIA's GPU feature discovery sets both `nvidia.com/gpu.product` and `nvidia.com/gpu.memory`; clusters
labelled by hand often have only the product (or nothing). The scheduler needs MiB per GPU to turn
`gpu-memory` requests into shares, so rather than drop such a node it takes the memory from the product
name: an explicit size (`NVIDIA-A100-SXM4-40GB` -> 40 GiB), else this table of models that come in one
size, with the memory NVML reports where it is below the nominal size. The node then carries a warning
(an Event, and a line in `tessera doctor`) asking for the label, which is always more exact.
"""

from __future__ import annotations

import re

# Product-name token -> MiB per GPU, for models sold with one memory size. Matched as a whole token of
# the product name (split at '-', '_' and spaces), case-insensitively.
KNOWN_MODELS_MIB: dict[str, int] = {
    "T4": 15360,
    "L4": 23034,
    "A10": 23028,
    "A10G": 23028,
    "A16": 15360,
    "A30": 24576,
    "A40": 46068,
    "L40": 46068,
    "L40S": 46068,
    "A2": 15360,
    "A6000": 49140,
    "H100": 81559,
    "H200": 143771,
    "B200": 183359,
    "P4": 7680,
    "P40": 24576,
    "P100": 16384,
    "K80": 12288,
    "4090": 24564,
    "3090": 24576,
}
_SIZE = re.compile(r"(?<![0-9])([0-9]{1,4})\s*(GB|GIB)(?![A-Z0-9])", re.IGNORECASE)


def memory_from_product(product: str) -> int | None:
    """MiB per GPU for a product label, or None when it cannot be told."""
    if not product:
        return None
    size = _SIZE.search(product)
    if size:
        return int(size.group(1)) * 1024
    tokens = [t.upper() for t in re.split(r"[-_\s]+", product) if t]
    for token in tokens:
        if token in KNOWN_MODELS_MIB:
            return KNOWN_MODELS_MIB[token]
    return None
