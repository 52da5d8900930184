"""The scheduler's Kubernetes side: watch caches, binder, evictor, status writers, leader election,
podgrouper and the cluster adapter that lets the scheduling cycle run against a real API server."""
