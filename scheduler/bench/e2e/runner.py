"""One end-to-end run: set the world up, start the scheduler, create the pods, wait until they are bound,
and report what was measured between the first pod's creation and the last pod's binding.

Measured: pods per second (bound pods over the time from the first create to the last bind), latency from
each pod's create request to the watch showing its node, the API server's requests per pod by verb and
resource (its own counters; the benchmark's creates and watches and the device-plugin stand-in's writes
included, and also reported apart), and CPU seconds of the scheduler, the API server, etcd and the benchmark
client (/proc) with pods per CPU-second. Setup (control plane, nodes, the scheduler's start and initial
lists) is not measured.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from typing import Any

from scheduler.bench.e2e.config import E2EConfig
from scheduler.bench.e2e.devices import DevicePluginStandIn
from scheduler.bench.e2e.load import BindWatch, Creator
from scheduler.bench.e2e.measure import api_requests, cpu_seconds, difference, memory_mib, percentile
from scheduler.bench.e2e.schedulers import SchedulerProcess
from scheduler.bench.e2e.world import BenchWorld


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_e2e(cfg: E2EConfig, progress: Any = None) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    t_setup = time.perf_counter()
    world = BenchWorld(cfg)
    sched: SchedulerProcess | None = None
    watch: BindWatch | None = None
    devices: DevicePluginStandIn | None = None
    profiler: subprocess.Popen[bytes] | None = None
    try:
        say("starting the control plane" if cfg.kubeconfig is None else "connecting to the API server")
        world.start()
        if cfg.scheduler == "tessera":
            world.install_tessera()
        world.create_namespace()
        say(f"creating {cfg.nodes} nodes")
        fractions = cfg.fraction_share > 0
        world.create_nodes(slices=fractions)
        say(f"starting {cfg.scheduler}")
        sched = SchedulerProcess(cfg, world.kubeconfig_for(cfg.scheduler), world.workdir).start()
        watch = BindWatch(world.api_client(), world.namespace).start()
        if fractions:
            devices = DevicePluginStandIn(world.api_client(), watch, set(world.node_names)).start()
        pids = {"scheduler": sched.pid, "apiserver": world.pid("kube-apiserver"), "etcd": world.pid("etcd")}
        setup_s = time.perf_counter() - t_setup
        if cfg.profile and cfg.scheduler == "tessera":
            profiler = _py_spy(cfg.profile, sched.pid)

        say(
            f"creating {cfg.pods} pods ({cfg.kind_of_pods}) {'at ' + str(cfg.rate) + '/s' if cfg.rate else 'at once'}"
        )
        requests_before = api_requests(world.api)  # type: ignore[arg-type]
        cpu_before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        bench_before = _self_cpu()
        load_before = os.getloadavg()[0]
        creator = Creator(world.api_client(connections=cfg.creators + 4), world.namespace, cfg)
        creator.run()
        expected = min(cfg.pods, cfg.capacity())
        deadline = creator.first_s + cfg.timeout_s
        last_count, last_change = -1, time.perf_counter()
        while watch.count() < expected and time.perf_counter() < deadline:
            n = watch.count()
            if n != last_count:
                last_count, last_change = n, time.perf_counter()
            elif time.perf_counter() - last_change > cfg.stall_s:
                break
            time.sleep(0.05)
        done_s = time.perf_counter()
        cpu_after = {k: cpu_seconds(pid) for k, pid in pids.items()}
        bench_cpu = _self_cpu() - bench_before
        requests = difference(api_requests(world.api), requests_before)  # type: ignore[arg-type]
        memory = memory_mib(sched.pid)
        if profiler is not None:
            _stop(profiler)
        return _report(cfg, creator, watch, devices, requests, cpu_before, cpu_after, bench_cpu, memory,
                       setup_s, done_s, (load_before, os.getloadavg()[0]), sched)  # fmt: skip
    finally:
        if profiler is not None:
            _stop(profiler)
        for part in (devices, watch, sched):
            if part is not None:
                part.stop()
        world.stop()


def _report(
    cfg: E2EConfig, creator: Creator, watch: BindWatch, devices: DevicePluginStandIn | None,
    requests: Any, cpu_before: dict[str, float | None], cpu_after: dict[str, float | None], bench_cpu: float,
    memory: dict[str, float] | None, setup_s: float, done_s: float, load: tuple[float, float],
    sched: SchedulerProcess,
) -> dict[str, Any]:  # fmt: skip
    bound = {n: t for n, t in watch.bound.items() if n in creator.created}
    latencies = [t - creator.created[n] for n, t in bound.items()]
    span = (max(bound.values()) - creator.first_s) if bound else 0.0
    cpu: dict[str, float | None] = {}
    for k, before in cpu_before.items():
        after = cpu_after.get(k)
        cpu[k] = round(after - before, 3) if after is not None and before is not None else None
    cpu["bench"] = round(bench_cpu, 3)
    n = len(bound)
    total = sum(requests.values())
    own = creator.requests + (devices.requests if devices else 0)
    sched_cpu = cpu.get("scheduler") or 0.0
    server_cpu = (cpu.get("apiserver") or 0.0) + (cpu.get("etcd") or 0.0)
    per_pod = {k: round(v / n, 3) for k, v in sorted(requests.items(), key=lambda kv: -kv[1])} if n else {}
    return {
        "config": cfg.to_dict(),
        "scheduler": cfg.scheduler,
        "pods": cfg.pods,
        "expected": min(cfg.pods, cfg.capacity()),
        "bound": n,
        "create_errors": creator.errors[:5],
        "pods_per_s": round(n / span, 1) if span > 0 else 0.0,
        "create_pods_per_s": round(len(creator.created) / max(creator.last_s - creator.first_s, 1e-9), 1),
        "latency_p50_s": round(percentile(latencies, 50), 4),
        "latency_p90_s": round(percentile(latencies, 90), 4),
        "latency_p99_s": round(percentile(latencies, 99), 4),
        "latency_max_s": round(max(latencies), 4) if latencies else 0.0,
        "elapsed_s": round(done_s - creator.first_s, 3),
        "api_requests_per_pod": round(total / n, 3) if n else None,
        "api_requests": per_pod,
        "scheduler_requests_per_pod": round((total - own) / n, 3) if n else None,
        "client_requests": {
            "bench": creator.requests,
            "device_plugin_standin": devices.requests if devices else 0,
        },
        "cpu_s": cpu,
        "pods_per_scheduler_cpu_s": round(n / sched_cpu, 1) if sched_cpu else None,
        "pods_per_cpu_s": round(n / (sched_cpu + server_cpu), 1) if sched_cpu + server_cpu else None,
        "scheduler_memory_mib": memory,
        "load_avg_1m": [round(x, 2) for x in load],
        "setup_s": round(setup_s, 2),
    }


def _py_spy(out: str, pid: int | None) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy")
    if exe is None or pid is None:
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--output", out, "--rate", "100", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
