"""Tessera node agent: NVML collector, GPUNodeReport publisher, metrics and per-pod limit enforcement."""
