"""`tessera bench e2e`: scheduling throughput through a real kube-apiserver, Tessera or kube-scheduler.

Modelled on Kubernetes' scheduler_perf: etcd and kube-apiserver on loopback (no controller-manager, no
kubelets), Node objects with GPUs, pods created at a steady rate or in a burst, and the time from each pod's
creation to its `spec.nodeName`. The scheduler runs as a process of its own so its CPU is measured apart from
the API server's; API requests are counted by the API server itself (`apiserver_request_total`).
"""
