"""Parse fake-GPU specs such as `8xH100-80GB` or `2xA100-40GB,1xT4-16GB`."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The count is optional (`H100-80GB` means one GPU); the model is a product name without spaces.
_ITEM = re.compile(
    r"^(?:(?P<count>\d+)\s*[xX]\s*)?(?P<model>[A-Za-z0-9][A-Za-z0-9_.]*(?:-[A-Za-z0-9_.]+)*?)"
    r"-(?P<mem>\d+)\s*(?P<unit>GB|GiB|G|MB|MiB|M)$"
)
MAX_GPUS = 64
EXAMPLE = "8xH100-80GB or 2xA100-40GB,1xT4-16GB"


class GPUSpecError(ValueError):
    """A fake-GPU spec is malformed. The message is one line and names the bad part."""


@dataclass(frozen=True)
class GPUModelSpec:
    """`count` GPUs of one model."""

    count: int
    model: str
    memory_mib: int

    @property
    def name(self) -> str:
        """The product name the fake backend reports, in NVML's style."""
        return f"NVIDIA {self.model}-{self.memory_mib // 1024}GB"


def parse_gpu_spec(spec: str) -> list[GPUModelSpec]:
    """Parse a comma-separated list of `[COUNTx]MODEL-MEM{GB|MiB}` items, in GPU index order."""
    if not spec or not spec.strip():
        raise GPUSpecError(f"empty GPU spec; expected e.g. {EXAMPLE}")
    items: list[GPUModelSpec] = []
    for raw in spec.split(","):
        part = raw.strip()
        match = _ITEM.match(part)
        if match is None:
            raise GPUSpecError(
                f"bad GPU spec item {part!r} in {spec!r}; expected [COUNTx]MODEL-MEMGB, e.g. {EXAMPLE}"
            )
        count = int(match["count"]) if match["count"] is not None else 1
        if count < 1:
            raise GPUSpecError(f"bad GPU spec item {part!r}: count must be at least 1")
        mem = int(match["mem"])
        memory_mib = mem * 1024 if match["unit"] in ("GB", "GiB", "G") else mem
        if memory_mib < 1 or memory_mib > 1024 * 1024:
            raise GPUSpecError(f"bad GPU spec item {part!r}: memory must be between 1 MiB and 1024 GB")
        items.append(GPUModelSpec(count=count, model=match["model"], memory_mib=memory_mib))
    total = sum(item.count for item in items)
    if total > MAX_GPUS:
        raise GPUSpecError(f"GPU spec {spec!r} describes {total} GPUs; at most {MAX_GPUS} per node")
    return items
