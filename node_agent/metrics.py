"""Prometheus metrics of the agent, with dcgm-exporter's names and labels for the device figures.

Device series (`DCGM_FI_DEV_*`) carry dcgm-exporter's labels `gpu`, `UUID`, `modelName`, `Hostname`,
`pod`, `namespace`, `container`. As in dcgm-exporter, one series per GPU: the pod labels name the pod
when exactly one pod is on the GPU and are empty when it is shared (per-pod use is in the
`tessera_pod_*` series, so sums over GPUs never double-count).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from node_agent.enforcer import Action
from node_agent.nvml import GPUEvent
from scheduler.api import GPUNodeReport, GPUReport

MIB = 1024 * 1024
DEVICE_LABELS = ["gpu", "UUID", "modelName", "Hostname", "pod", "namespace", "container"]
GPU_LABELS = ["gpu", "UUID", "modelName", "Hostname"]
POD_USED_LABELS = [*GPU_LABELS, "pod", "namespace", "container"]
POD_LIMIT_LABELS = [*GPU_LABELS, "pod", "namespace"]


def _single_pod(gpu: GPUReport) -> tuple[str, str, str]:
    """(pod, namespace, container) when exactly one pod is on the GPU, else empty labels."""
    pods = {(s.namespace, s.pod) for s in gpu.shares}
    pods |= {(p.namespace, p.pod) for p in gpu.processes if p.pod and p.namespace}
    if len(pods) != 1:
        return "", "", ""
    namespace, pod = next(iter(pods))
    containers = {p.container for p in gpu.processes if p.pod == pod and p.namespace == namespace}
    container = next(iter(containers)) if len(containers) == 1 else None
    return pod, namespace, container or ""


class _ReportCollector(Collector):
    """Renders the latest report at scrape time: series vanish with their GPU, pod or process."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname
        self._lock = threading.Lock()
        self._report: GPUNodeReport | None = None
        self._last_xid: dict[int, int] = {}

    def update(self, report: GPUNodeReport) -> None:
        with self._lock:
            self._report = report

    def xid(self, index: int, code: int) -> None:
        with self._lock:
            self._last_xid[index] = code

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            report, last_xid = self._report, dict(self._last_xid)
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=DEVICE_LABELS)
        fb_used = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=DEVICE_LABELS
        )
        fb_free = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=DEVICE_LABELS
        )
        temp = GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels=DEVICE_LABELS)
        power = GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=DEVICE_LABELS)
        xid = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=DEVICE_LABELS
        )
        allocated = GaugeMetricFamily(
            "tessera_gpu_allocated_milli", "Milli-GPUs the scheduler assigned on this GPU.", labels=GPU_LABELS
        )
        healthy = GaugeMetricFamily("tessera_gpu_healthy", "1 when the GPU is healthy.", labels=GPU_LABELS)
        pod_used = GaugeMetricFamily(
            "tessera_pod_gpu_memory_used_bytes",
            "GPU memory a pod's container uses on a GPU.",
            labels=POD_USED_LABELS,
        )
        pod_limit = GaugeMetricFamily(
            "tessera_pod_gpu_memory_limit_bytes",
            "A pod's assigned GPU memory share.",
            labels=POD_LIMIT_LABELS,
        )
        over = GaugeMetricFamily(
            "tessera_pod_gpu_memory_over_limit",
            "1 when a pod uses more than its share.",
            labels=POD_LIMIT_LABELS,
        )
        families = [util, fb_used, fb_free, temp, power, xid, allocated, healthy, pod_used, pod_limit, over]
        if report is None:
            yield from families
            return
        for gpu in report.spec.gpus:
            base = [str(gpu.index), gpu.uuid, gpu.model, self._hostname]
            device = [*base, *_single_pod(gpu)]
            if gpu.utilization_pct is not None:
                util.add_metric(device, gpu.utilization_pct)
            if gpu.health == "Healthy" or gpu.memory_used_mib:
                fb_used.add_metric(device, gpu.memory_used_mib)
                fb_free.add_metric(device, max(0, gpu.memory_total_mib - gpu.memory_used_mib))
            if gpu.temperature_c is not None:
                temp.add_metric(device, gpu.temperature_c)
            if gpu.power_w is not None:
                power.add_metric(device, gpu.power_w)
            xid.add_metric(device, last_xid.get(gpu.index, 0))
            allocated.add_metric(base, gpu.assigned_milli)
            healthy.add_metric(base, 1.0 if gpu.health == "Healthy" else 0.0)
            used: dict[tuple[str, str, str], int] = {}
            for proc in gpu.processes:
                if proc.pod and proc.namespace:
                    key = (proc.pod, proc.namespace, proc.container or "")
                    used[key] = used.get(key, 0) + proc.used_mib
            for (pod, namespace, container), mib in sorted(used.items()):
                pod_used.add_metric([*base, pod, namespace, container], mib * MIB)
            for share in gpu.shares:
                labels = [*base, share.pod, share.namespace]
                pod_limit.add_metric(labels, share.memory_limit_mib * MIB)
                over.add_metric(labels, 1.0 if share.over_limit else 0.0)
        yield from families


class AgentMetrics:
    """The agent's registry: report-derived gauges plus counters of what the agent did."""

    def __init__(self, hostname: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._report = _ReportCollector(hostname)
        self.registry.register(self._report)
        self.actions = Counter(
            "tessera_enforcement_actions",
            "Over-limit reports and kills by the watchdog.",
            ["action", "namespace", "pod"],
            registry=self.registry,
        )
        self.gpu_events = Counter(
            "tessera_gpu_events",
            "Xid, ECC and GPU-lost events seen by NVML.",
            ["gpu", "kind"],
            registry=self.registry,
        )
        self.publishes = Counter(
            "tessera_report_publishes", "GPUNodeReport writes to the API server.", registry=self.registry
        )
        self.collect_seconds = Gauge(
            "tessera_agent_collect_seconds", "Duration of the last collection round.", registry=self.registry
        )

    def update(self, report: GPUNodeReport) -> None:
        self._report.update(report)

    def event(self, event: GPUEvent) -> None:
        self.gpu_events.labels(gpu=str(event.index), kind=event.kind).inc()
        if event.kind == "xid":
            self._report.xid(event.index, event.code)

    def action(self, action: Action) -> None:
        self.actions.labels(action=action.kind, namespace=action.namespace, pod=action.pod).inc()
