"""`tessera bench`: scheduler throughput on a synthetic cluster (after Kubernetes' scheduler_perf)."""
