"""End-to-end runs: set the world up once, then per scheduler start it, create the pods, wait until they are
bound, and report what was measured between the first pod's creation and the last pod's binding.

Measured: pods per second (bound pods over the time from the first create to the last bind), latency from
each pod's create request to the watch showing its node, the API server's requests per pod by verb and
resource (its own counters: the benchmark's creates and watches and the device-plugin stand-in's writes
included, and also reported apart), and CPU seconds of the scheduler, the API server, etcd and the benchmark
client (/proc) with pods per CPU-second. Setup (control plane, nodes, the scheduler's start and initial
lists) is not measured.

With `preload`, the pods are all created before the scheduler starts (a backlog): pods per second is then
measured from the first bind to the last, latency from the scheduler's start, and `startup_s` is the time
from the start to the first bind.

`run_compare` runs kube-scheduler and Tessera in turn on the same control plane and the same nodes (each run
in a namespace of its own, its pods deleted after it), alternating the order when repeated, and reports the
ratio of Tessera's pods/s to kube-scheduler's.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.bench.e2e.config import E2EConfig, SchedulerKind
from scheduler.bench.e2e.devices import DevicePluginStandIn
from scheduler.bench.e2e.load import BindWatch, Creator
from scheduler.bench.e2e.measure import api_requests, cpu_seconds, difference, memory_mib
from scheduler.bench.e2e.oracle_check import check_bound
from scheduler.bench.e2e.schedulers import SchedulerProcess
from scheduler.bench.e2e.world import BenchWorld
from scheduler.bench.runner import percentile

Say = Callable[[str], None]


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def open_world(cfg: E2EConfig, say: Say) -> BenchWorld:
    world = BenchWorld(cfg)
    try:
        say("starting the control plane" if cfg.kubeconfig is None else "connecting to the API server")
        world.start()
        world.install_tessera()
        say(f"creating {cfg.nodes} nodes")
        world.create_nodes(slices=cfg.fraction_share > 0)
    except BaseException:
        world.stop()
        raise
    return world


def run_e2e(cfg: E2EConfig, progress: Say | None = None) -> dict[str, Any]:
    """One run; a run of fractions is preceded by a run of as many whole-GPU pods on the same nodes (whole
    GPUs served by NVIDIA's plugin: they wait for no device plugin), its reference: `whole_gpu_run` and
    `fraction_to_whole` (the ratio of their pods/s)."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    world = open_world(cfg, say)
    try:
        setup_s = time.perf_counter() - t0
        if cfg.scheduler != "tessera" or cfg.fraction_share <= 0 or cfg.gang_size > 1:
            return measure(world, cfg, say, setup_s=setup_s)
        say("the whole-GPU reference first: as many pods of 1 GPU")
        whole = measure(world, dataclasses.replace(cfg, fraction_share=0.0, whole_gpu_plugin=False), say)
        out = measure(world, cfg, say, setup_s=setup_s)
        out["whole_gpu_run"] = {k: whole[k] for k in REFERENCE_KEYS if k in whole}
        out["fraction_to_whole"] = (
            round(out["pods_per_s"] / whole["pods_per_s"], 3) if whole["pods_per_s"] else None
        )
        return out
    finally:
        world.stop()


# What a fraction run reports of its whole-GPU reference.
REFERENCE_KEYS = ("pods_per_s", "latency_p50_s", "latency_p99_s", "api_requests_per_pod", "bind_requests_per_pod",
                  "scheduler_requests_per_pod", "cpu_s", "pods_per_scheduler_cpu_s", "packing", "bound")  # fmt: skip


def packing(assignments: dict[str, str]) -> dict[str, int]:
    """How the bound pods sit on the GPUs at the end: GPUs and nodes used, GPUs only partly used."""
    used: dict[tuple[str, int], int] = {}
    for raw in assignments.values():
        try:
            a = GPUAssignment.from_annotation(raw)
        except ValueError:
            continue
        for g in a.gpus:
            used[(a.node, g.index)] = used.get((a.node, g.index), 0) + g.milli
    return {
        "gpus_used": len(used),
        "nodes_used": len({node for node, _ in used}),
        "gpus_partly_used": sum(1 for milli in used.values() if milli < MILLI_PER_GPU),
    }


def run_compare(cfg: E2EConfig, repeat: int = 1, progress: Say | None = None) -> dict[str, Any]:
    """kube-scheduler and Tessera in turn on the same control plane and nodes; the ratio of their pods/s."""
    say = progress or (lambda _msg: None)
    world = open_world(cfg, say)
    runs: list[dict[str, Any]] = []
    try:
        for i in range(repeat):
            order: tuple[SchedulerKind, ...] = ("kube-scheduler", "tessera")
            for kind in order if i % 2 == 0 else order[::-1]:
                runs.append(measure(world, dataclasses.replace(cfg, scheduler=kind), say))
    finally:
        world.stop()

    def best(kind: str) -> dict[str, Any]:
        return max((r for r in runs if r["scheduler"] == kind), key=lambda r: r["pods_per_s"])

    tessera, kube = best("tessera"), best("kube-scheduler")
    return {
        "runs": runs,
        "tessera_pods_per_s": tessera["pods_per_s"],
        "kube_scheduler_pods_per_s": kube["pods_per_s"],
        "ratio_pods_per_s": round(tessera["pods_per_s"] / kube["pods_per_s"], 3)
        if kube["pods_per_s"]
        else None,
        "ratio_pods_per_scheduler_cpu_s": (
            round(tessera["pods_per_scheduler_cpu_s"] / kube["pods_per_scheduler_cpu_s"], 3)
            if tessera["pods_per_scheduler_cpu_s"] and kube["pods_per_scheduler_cpu_s"]
            else None
        ),
        "best_of": repeat,
        **({"tessera_oracle": tessera["oracle"]} if "oracle" in tessera else {}),
    }


def measure(world: BenchWorld, cfg: E2EConfig, say: Say, *, setup_s: float = 0.0) -> dict[str, Any]:
    """One run of `cfg.scheduler` in a fresh namespace of `world`; its pods are deleted afterwards."""
    t_setup = time.perf_counter()
    sched: SchedulerProcess | None = None
    watch: BindWatch | None = None
    devices: DevicePluginStandIn | None = None
    profiler: subprocess.Popen[bytes] | None = None
    world.create_namespace()
    try:
        watch = BindWatch(world.api_client(), world.namespace).start()
        if cfg.fraction_share > 0:
            devices = DevicePluginStandIn(world.api_client(), watch).start()
        creator = Creator(world.api_client(connections=cfg.creators + 4), world.namespace, cfg)
        how = (
            "before the scheduler starts" if cfg.preload else f"at {cfg.rate:g}/s" if cfg.rate else "at once"
        )
        if cfg.preload:
            say(f"creating {cfg.pods} pods ({cfg.kind_of_pods}) {how}")
            creator.run()
        say(f"starting {cfg.scheduler}")
        requests_before = api_requests(world.api)  # type: ignore[arg-type]
        started = time.perf_counter()
        sched = SchedulerProcess(cfg, world.kubeconfig_for(cfg.scheduler), world.workdir)
        sched.start()
        pids = {"scheduler": sched.pid, "apiserver": world.pid("kube-apiserver"), "etcd": world.pid("etcd")}
        setup_s += time.perf_counter() - t_setup
        if cfg.profile and cfg.scheduler == "tessera":
            profiler = _py_spy(cfg.profile, sched.pid)
        if not cfg.preload:  # the scheduler's start (its lists) is not measured
            requests_before = api_requests(world.api)  # type: ignore[arg-type]
        cpu_before = {
            k: 0.0 if cfg.preload and k == "scheduler" else cpu_seconds(pid) for k, pid in pids.items()
        }
        bench_before = _self_cpu()
        load_before = os.getloadavg()[0]
        if not cfg.preload:
            say(f"creating {cfg.pods} pods ({cfg.kind_of_pods}) {how}")
            creator.run()
        done_s = _wait_bound(watch, cfg, creator.first_s if not cfg.preload else started)
        if devices is not None:  # the last pods are marked after their binds: count those requests too
            devices.wait_idle(timeout_s=10.0)
        cpu_after = {k: cpu_seconds(pid) for k, pid in pids.items()}
        bench_cpu = _self_cpu() - bench_before
        requests = difference(api_requests(world.api), requests_before)  # type: ignore[arg-type]
        memory = memory_mib(sched.pid)
        if profiler is not None:
            _stop(profiler)
        report = _report(
            cfg, creator, watch, devices, requests, cpu_before, cpu_after, bench_cpu, memory, setup_s, done_s,
            (load_before, os.getloadavg()[0]), started,
        )  # fmt: skip
        if cfg.affinity:  # after the measurement: is every pod where kube-scheduler's filters allow it?
            say(f"checking the {report['bound']} pods bound by {cfg.scheduler} with kube-scheduler's filters")
            report["oracle"] = check_bound(
                watch.informer.snapshot(), watch.bound, world.node_objects(), world.namespace_objects()
            )
        return report
    finally:
        if profiler is not None:
            _stop(profiler)
        for part in (devices, watch, sched):
            if part is not None:
                part.stop()
        world.delete_pods()


def _wait_bound(watch: BindWatch, cfg: E2EConfig, since: float) -> float:
    """Until every pod that fits is bound, the timeout passes or nothing was bound for `stall_s`."""
    expected = min(cfg.pods, cfg.capacity())
    deadline = since + cfg.timeout_s
    last_count, last_change = -1, time.perf_counter()
    while watch.count() < expected and time.perf_counter() < deadline:
        n = watch.count()
        if n != last_count:
            last_count, last_change = n, time.perf_counter()
        elif time.perf_counter() - last_change > cfg.stall_s:
            break
        time.sleep(0.05)
    return time.perf_counter()


def _report(
    cfg: E2EConfig, creator: Creator, watch: BindWatch, devices: DevicePluginStandIn | None,
    requests: Any, cpu_before: dict[str, float | None], cpu_after: dict[str, float | None], bench_cpu: float,
    memory: dict[str, float] | None, setup_s: float, done_s: float, load: tuple[float, float], started: float,
) -> dict[str, Any]:  # fmt: skip
    bound = {n: t for n, t in watch.bound.items() if n in creator.created}
    n = len(bound)
    if cfg.preload:  # a backlog: its drain rate, and each pod's wait from the scheduler's start
        first = min(bound.values()) if bound else started
        span = (max(bound.values()) - first) if n > 1 else 0.0
        rate = (n - 1) / span if span > 0 else 0.0
        latencies = [t - started for t in bound.values()]
    else:
        span = (max(bound.values()) - creator.first_s) if bound else 0.0
        rate = n / span if span > 0 else 0.0
        latencies = [t - creator.created[name] for name, t in bound.items()]
    cpu: dict[str, float | None] = {}
    for k, before in cpu_before.items():
        after = cpu_after.get(k)
        cpu[k] = round(after - before, 3) if after is not None and before is not None else None
    cpu["bench"] = round(bench_cpu, 3)
    total = sum(requests.values())
    own = (0 if cfg.preload else creator.requests) + (devices.requests if devices else 0)
    sched_cpu = cpu.get("scheduler") or 0.0
    server_cpu = (cpu.get("apiserver") or 0.0) + (cpu.get("etcd") or 0.0)
    per_pod = {k: round(v / n, 3) for k, v in sorted(requests.items(), key=lambda kv: -kv[1])} if n else {}
    out: dict[str, Any] = {
        "config": cfg.to_dict(),
        "scheduler": cfg.scheduler,
        "pods": cfg.pods,
        "expected": min(cfg.pods, cfg.capacity()),
        "bound": n,
        "create_errors": creator.errors[:5],
        "pods_per_s": round(rate, 1),
        "create_pods_per_s": round(len(creator.created) / max(creator.last_s - creator.first_s, 1e-9), 1),
        "latency_p50_s": round(percentile(latencies, 50), 4),
        "latency_p90_s": round(percentile(latencies, 90), 4),
        "latency_p99_s": round(percentile(latencies, 99), 4),
        "latency_max_s": round(max(latencies), 4) if latencies else 0.0,
        "elapsed_s": round(done_s - (started if cfg.preload else creator.first_s), 3),
        "api_requests_per_pod": round(total / n, 3) if n else None,
        # What binding a pod costs, its hand-off to the device plugin included: the Binding, and the plugin's
        # mark where the pod waits for one (the floor: 1 and 2). The rest of api_requests_per_pod is other
        # work in the same time (the podgrouper's PodGroups, lists, the lease).
        "bind_requests_per_pod": round(sum(requests.get(k, 0) for k in BIND_REQUESTS) / n, 3) if n else None,
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
    if cfg.preload:
        out["startup_s"] = round((min(bound.values()) if bound else done_s) - started, 3)
    out["packing"] = packing({name: raw for name, raw in watch.assignments.items() if name in bound})
    if devices is not None:
        out["handoff"] = handoff_timeline(bound, watch.nodes, devices.marked)
    return out


def handoff_timeline(
    bound: dict[str, float], nodes: dict[str, str], marked: dict[str, float]
) -> dict[str, Any]:
    """Where a node's turns go when its pods wait for the device plugin one at a time: per pod followed by
    another on its node, from the watch showing it bound to its mark written (the plugin's request), and
    from that mark to the watch showing the node's next pod bound (the scheduler's watch and cycle, its
    bind queue, the Binding); p50 and p90 in seconds, and the most pods one node took in turn."""
    by_node: dict[str, list[tuple[float, str]]] = {}
    for name, t in bound.items():
        by_node.setdefault(nodes.get(name, ""), []).append((t, name))
    to_mark: list[float] = []
    to_next: list[float] = []
    for turns in by_node.values():
        turns.sort()
        for (t, name), (t_next, _) in pairwise(turns):
            if name in marked:
                to_mark.append(marked[name] - t)
                to_next.append(t_next - marked[name])

    def p(values: list[float], q: float) -> float:
        return round(percentile(values, q), 4)

    return {
        "turns_per_node_max": max((len(t) for t in by_node.values()), default=0),
        "bound_to_marked_p50_s": p(to_mark, 50), "bound_to_marked_p90_s": p(to_mark, 90),
        "marked_to_next_bound_p50_s": p(to_next, 50), "marked_to_next_bound_p90_s": p(to_next, 90),
    }  # fmt: skip


BIND_REQUESTS = ("POST pods/binding", "PATCH pods")  # the Binding; the device plugin's mark


def _py_spy(out: str, pid: int | None) -> subprocess.Popen[bytes] | None:
    """py-spy on the scheduler, GIL holders only (what Python time goes where); .txt: collapsed stacks."""
    exe = shutil.which("py-spy")
    if exe is None or pid is None:
        return None
    fmt = "raw" if out.endswith(".txt") else "speedscope" if out.endswith(".json") else "flamegraph"
    argv = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--output",
        out,
        "--rate",
        "200",
        "--format",
        fmt,
        "--threads",
        "--gil",
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
