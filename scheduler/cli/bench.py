"""`tessera bench`: scheduler throughput on a synthetic cluster; `tessera bench events`: watch-event cost."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from scheduler.api.cli import check_choice, fail, new_app, output_console, warning_line
from scheduler.bench.events import EventsConfig, run_events
from scheduler.bench.runner import PHASES, BenchConfig, run_repeated
from scheduler.bench.topology import TopologySpec, run_with_peer
from scheduler.bench.workload import CORES_PER_GPU, mean_demand
from scheduler.cli import bench_e2e, bench_failover, bench_handoff
from scheduler.placement.registry import DEFAULT_POLICY, policy_names
from scheduler.state.backend import BACKENDS, BackendError

PODS_PER_NODE = 2  # the default load: 10,000 init and 10,000 measured pods on 5,000 nodes
MAX_FILL = 0.9  # init pods may ask for at most this share of the cluster's GPUs (and cores)


def _check_backend(backend: str | None) -> None:
    if backend is not None:
        check_choice(backend, BACKENDS, "--backend")


def _check_output(output: str) -> None:
    check_choice(output, ("table", "json"), "--output")


def sized_load(nodes: int, gpus_per_node: int, init_pods: int | None, pods: int | None) -> tuple[int, int]:
    """--init-pods and --pods: by default PODS_PER_NODE each per node (the 10,000 + 10,000 of 5,000
    nodes). Init pods that alone would ask the openb mix for more than MAX_FILL of the cluster's GPUs or
    cores are refused: the cluster would be full before measuring, and the benchmark would time failures."""
    init = PODS_PER_NODE * nodes if init_pods is None else init_pods
    measured = PODS_PER_NODE * nodes if pods is None else pods
    gpus_per_pod, cores_per_pod = mean_demand()
    gpus = nodes * gpus_per_node
    fit = int(MAX_FILL * min(gpus / gpus_per_pod, gpus * CORES_PER_GPU / cores_per_pod))
    if init > fit:
        raise typer.BadParameter(
            f"{init:,} init pods would ask for about {init * gpus_per_pod:,.0f} GPUs of a {gpus:,}-GPU cluster "
            f"(the openb mix averages {gpus_per_pod:.2f} GPU per pod), filling it before measuring; use at most "
            f"{fit:,}, or add --nodes (default: {PODS_PER_NODE} per node)",
            param_hint="--init-pods",
        )
    if init + measured > fit:
        warning_line(
            f"{init:,} init and {measured:,} measured pods ask for about {(init + measured) * gpus_per_pod:,.0f} "
            f"of {gpus:,} GPUs: expect unschedulable pods (they count in `unschedulable`, not in pods/s)"
        )
    return init, measured


def print_bench(console: Console, r: dict[str, Any]) -> None:
    c = r["config"]
    console.print(
        f"[bold]tessera bench[/]: {c['nodes']} nodes x {c['gpus_per_node']} GPUs, {c['init_pods']} init pods, "
        f"{c['pods']} measured pods, policy {c['policy']}, backend {r['backend']}"
    )
    w = r["pods_per_s_windows"]
    console.print(
        f"scheduled {r['scheduled']} ({r['unschedulable']} unschedulable) in {r['elapsed_s']:.3f} s: "
        f"[bold]{r['pods_per_s']:.0f} pods/s[/] average; 1 s windows p50 {w['p50']:.0f}, p90 {w['p90']:.0f}, "
        f"p99 {w['p99']:.0f} ({w['count']} windows)"
    )
    lat = r["cycle_latency_ms"]
    console.print(f"cycles: {r['cycles']}, latency p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms")
    t = Table(title="Where the time goes", title_justify="left")
    t.add_column("phase")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    for k in PHASES:
        t.add_row(k, f"{r['time_split_s'][k]:.3f}", f"{r['time_split_pct'][k]:.1f}%")
    console.print(t)
    console.print(
        f"CPU {r['cpu_s']:.3f} s ({r['pods_per_cpu_s']:.0f} pods per CPU second), load average "
        f"{r['load_avg_1m'][0]:.1f} -> {r['load_avg_1m'][1]:.1f}; peak RSS {r['peak_rss_mib']:.0f} MiB; "
        f"setup (cluster + init pods) {r['setup_s']:.1f} s"
    )
    if "topology" in r:
        t = r["topology"]
        console.print(
            f"topology {','.join(t['levels'])} (required {t['required']}, preferred {t['preferred']}): "
            f"[bold]{t['cost_ratio_cpu']:.2f}x[/] the CPU time per pod of the same gangs unconstrained "
            f"({t['peer']['pods_per_cpu_s']:.0f} pods per CPU second; wall {t['cost_ratio_wall']:.2f}x)"
        )
    if "anti_affinity" in r:
        a = r["anti_affinity"]
        console.print(
            f"anti-affinity (Deployments of {a['replicas']}, one replica per node): [bold]{a['cost_ratio_cpu']:.2f}x[/] "
            f"the CPU time per pod of the same pods without it ({a['peer']['pods_per_cpu_s']:.0f} pods per CPU "
            f"second; wall {a['cost_ratio_wall']:.2f}x)"
        )
    if "repeat" in r and r["repeat"]["runs"] > 1 and "pods_per_s_all" in r["repeat"]:
        rates = ", ".join(f"{x:.0f}" for x in r["repeat"]["pods_per_s_all"])
        console.print(f"best of {r['repeat']['runs']} runs shown; all averages (pods/s): {rates}")


def topology_report(
    spec: TopologySpec, gang_size: int, run: dict[str, Any], peer: dict[str, Any]
) -> dict[str, Any]:
    """The constrained run against its peer (same nodes and pods, no constraint), measured in one run."""

    def ratio(key: str) -> float:
        return round(peer[key] / run[key], 3) if run[key] else float("inf")

    return {
        "levels": [f"{n}:{c}" for n, c in spec.levels],
        "required": spec.required,
        "preferred": spec.preferred,
        "gang_size": gang_size,
        "peer": {k: peer[k] for k in ("scheduled", "unschedulable", "pods_per_s", "pods_per_cpu_s", "cpu_s")},
        # How many times the CPU (or wall) time per scheduled pod topology awareness costs.
        "cost_ratio_cpu": ratio("pods_per_cpu_s"),
        "cost_ratio_wall": ratio("pods_per_s"),
    }


def anti_affinity_report(replicas: int, run: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Plain pods with required anti-affinity against the same pods without (one run, interleaved)."""

    def ratio(key: str) -> float:
        return round(peer[key] / run[key], 3) if run[key] else float("inf")

    return {
        "replicas": replicas,
        "topology_key": "kubernetes.io/hostname",
        "peer": {k: peer[k] for k in ("scheduled", "unschedulable", "pods_per_s", "pods_per_cpu_s", "cpu_s")},
        # How many times the CPU (or wall) time per scheduled pod anti-affinity costs (the goal: at most 2).
        "cost_ratio_cpu": ratio("pods_per_cpu_s"),
        "cost_ratio_wall": ratio("pods_per_s"),
    }


def register(app: typer.Typer) -> None:
    bench_app = new_app("Benchmark the scheduler (modelled on Kubernetes' scheduler_perf).")
    short = "Benchmark the scheduler (like scheduler_perf)."

    @bench_app.callback(invoke_without_command=True)
    def bench(
        ctx: typer.Context,
        nodes: Annotated[int, typer.Option(min=1, help="GPU nodes in the synthetic cluster.")] = 5000,
        gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
        init_pods: Annotated[
            int | None,
            typer.Option(min=0, show_default="2 per node", help="Pods placed before measuring."),
        ] = None,
        pods: Annotated[
            int | None, typer.Option(min=1, show_default="2 per node", help="Measured pods (openb mix).")
        ] = None,
        policy: Annotated[
            str, typer.Option(metavar="NAME", help=f"Placement policy: {', '.join(policy_names())}.")
        ] = DEFAULT_POLICY,
        gangs: Annotated[
            float, typer.Option(min=0.0, max=1.0, help="Share of measured pods that are gang members.")
        ] = 0.05,
        batch: Annotated[int, typer.Option(min=1, help="Pods arriving between two cycles.")] = 1000,
        seed: Annotated[int, typer.Option(help="Workload seed.")] = 1,
        repeat: Annotated[
            int, typer.Option(min=1, help="Runs; the best is reported (all averages too).")
        ] = 1,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
        backend: Annotated[
            str | None, typer.Option(metavar="NAME", help=f"Array backend: {', '.join(BACKENDS)}.")
        ] = None,
        gang_size: Annotated[
            int, typer.Option(min=0, help="Pods per gang, 1 GPU each (0: a mix of 2x8, 4x1 and 8x1 GPUs).")
        ] = 0,
        topology: Annotated[
            str | None,
            typer.Option(
                metavar="SPEC",
                help="Label the nodes into topology domains, e.g. zone:2,block:4,rack:8,nvlink:4 (fan-out "
                "per level), constrain the gangs, and also measure them unconstrained (the ratio is reported).",
            ),
        ] = None,
        topology_required: Annotated[
            str | None, typer.Option(metavar="LEVEL", help="Required level (default: the second-lowest).")
        ] = None,
        topology_preferred: Annotated[
            str | None, typer.Option(metavar="LEVEL", help="Preferred level (default: the lowest).")
        ] = None,
        anti_affinity: Annotated[
            int,
            typer.Option(
                metavar="REPLICAS",
                min=0,
                help="Measure plain pods in Deployments of REPLICAS, each with required anti-affinity on the "
                "hostname, and the same pods without it (the ratio is reported). 0: the openb mix.",
            ),
        ] = 0,
    ) -> None:
        """Schedule --pods pods on a synthetic cluster with the real cycle and report the throughput.

        Report pods per CPU-second (`pods_per_cpu_s`) when comparing machines: pods per second depend on
        what else the machine runs."""
        if ctx.invoked_subcommand is not None:
            return
        _check_output(output)
        _check_backend(backend)
        check_choice(policy, policy_names(), "--policy")
        init, measured = sized_load(nodes, gpus_per_node, init_pods, pods)
        spec = None
        if topology is not None:
            try:
                spec = TopologySpec.parse(topology, topology_required, topology_preferred)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--topology") from None
        if spec is not None and anti_affinity:
            raise typer.BadParameter(
                "measure either --topology or --anti-affinity", param_hint="--anti-affinity"
            )
        cfg = BenchConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, init_pods=init, pods=measured, policy=policy,
            gangs=gangs, batch=batch, backend=backend, seed=seed, gang_size=gang_size, topology=spec,
            anti_affinity=anti_affinity,
        )  # fmt: skip
        try:
            if spec is not None or anti_affinity:  # and the same pods unconstrained, in the same run
                result, peer = run_with_peer(cfg, repeat)
            else:
                result, peer = run_repeated(cfg, repeat), None
        except BackendError as exc:
            raise fail(str(exc)) from None
        if spec is not None and peer is not None:
            result["topology"] = topology_report(spec, gang_size, result, peer)
        elif anti_affinity and peer is not None:
            result["anti_affinity"] = anti_affinity_report(anti_affinity, result, peer)
        if output == "json":
            typer.echo(json.dumps(result, indent=2))
        else:
            print_bench(output_console(), result)

    @bench_app.command("events")
    def events(
        nodes: Annotated[int, typer.Option(min=1, help="Nodes (each also updated once).")] = 5000,
        gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
        pods: Annotated[
            int, typer.Option(min=1, help="Pod events (running pods, as after a relist).")
        ] = 150_000,
        seed: Annotated[int, typer.Option(help="Workload seed.")] = 1,
        api_fields: Annotated[
            bool,
            typer.Option(
                help="Pods as the API server returns them (service account volume, default tolerations, "
                "owner reference, times); default: the bare pods."
            ),
        ] = False,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
        backend: Annotated[
            str | None, typer.Option(metavar="NAME", help=f"Array backend: {', '.join(BACKENDS)}.")
        ] = None,
    ) -> None:
        """Apply --pods pod events and one update per node to the scheduler's state; report the time."""
        _check_output(output)
        _check_backend(backend)
        cfg = EventsConfig(nodes=nodes, gpus_per_node=gpus_per_node, pods=pods, backend=backend, seed=seed,
                           api_fields=api_fields)  # fmt: skip
        try:
            r = run_events(cfg)
        except BackendError as exc:
            raise fail(str(exc)) from None
        if output == "json":
            typer.echo(json.dumps(r, indent=2))
            return
        console = output_console()
        console.print(
            f"[bold]tessera bench events[/]: {r['pod_events']} pod events, {r['node_updates']} node updates, "
            f"{nodes} nodes, backend {r['backend']}"
        )
        console.print(f"state (array updates of the events): [bold]{r['state_apply_s']:.3f} s[/]")
        console.print(
            f"cache (parse + validate + account): {r['cache_apply_s']:.3f} s "
            f"({r['cache_events_per_s']:.0f} events/s); node updates: {r['node_updates_s']:.3f} s"
        )
        if r["watch_decode_cpu_s"] is not None:
            console.print(
                f"pod watch (decode the list's pages, keep what is read): {r['watch_decode_cpu_s']:.3f} s CPU"
            )
        if r["rss_before_apply_mib"] is not None:
            console.print(f"memory: {r['rss_before_apply_mib']:.0f} MiB before the pod events, "
                          f"{r['rss_after_apply_mib']:.0f} MiB after")  # fmt: skip
        if r["errors"]:
            console.print(f"[yellow]{r['errors']} events could not be applied[/]")

    @bench_app.command("allocate")
    def allocate(
        pods: Annotated[
            int, typer.Option(min=1, help="Pods allocated on the node, one after another.")
        ] = 100,
        gpus: Annotated[str, typer.Option(help="Fake GPUs of the node.")] = "2xA100-80GB",
        kubeconfig: Annotated[
            str | None,
            typer.Option(help="Kubeconfig of the API server; default: a throw-away local control plane."),
        ] = None,
        node_name: Annotated[str, typer.Option(help="Node to create and allocate on.")] = "bench-node",
    ) -> None:
        """The device plugin's Allocate latency (gRPC round trip, the pod found in its watch); prints JSON."""
        from scheduler.bench.allocate import run_allocate_bench

        try:
            result = run_allocate_bench(pods=pods, gpu_spec=gpus, kubeconfig=kubeconfig, node_name=node_name)
        except (RuntimeError, ValueError) as exc:
            raise fail(f"bench failed: {str(exc).splitlines()[0] if str(exc) else exc!r}", code=1) from None
        typer.echo(json.dumps(result, indent=2))

    bench_e2e.register(bench_app)
    bench_failover.register(bench_app)
    bench_handoff.register(bench_app)
    app.add_typer(bench_app, name="bench", short_help=short)
