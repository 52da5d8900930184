"""GPU identity has one source, the node agent's GPUNodeReport: UUIDs in assignments, memory for nodes
without GPU Feature Discovery's label, and health; nothing is invented while the report is missing.

The reports here are what the real agent publishes (node_agent.Agent on a FakeNVML), not typed by hand.
"""

from __future__ import annotations

from typing import Any

from node_agent.agent import Agent
from node_agent.nvml.fake import FakeNVML
from scheduler.api.keys import GPU_FRACTION, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL
from tests.framework.helpers import A100, assignment, cluster, node, phase, pod, run


def agent_report(node_name: str, spec: str, *, unhealthy: int | None = None) -> dict[str, Any]:
    nvml = FakeNVML(spec, seed=node_name)
    if unhealthy is not None:
        nvml.inject_xid(unhealthy, 79)
    report = Agent(node_name, nvml).tick()
    return report.model_dump(by_alias=True, exclude_none=True, mode="json")


def unlabelled(name: str, gpus: int) -> dict[str, Any]:
    """A GPU node as the kubelet registers it without GPU Feature Discovery: capacity, no GPU labels."""
    obj = node(name, A100, gpus, 32, 128)
    for key in (GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL):
        del obj["metadata"]["labels"][key]
    return obj


def half(name: str) -> dict[str, Any]:
    return pod(name, "default", arrival_s=0, duration_s=100, cpu="1", annotations={GPU_FRACTION: "0.5"})


def test_assignment_names_the_uuids_the_agent_reported():
    report = agent_report("n1", "2xA100-40GB")
    sim, sched = cluster([node("n1", A100, 2, 32, 128), half("p")])
    sim.add_object("GPUNodeReport", report)
    run(sim, sched)
    a = assignment(sim, "default/p")
    assert a is not None and phase(sim, "default/p") == "Running"
    (gpu,) = a.gpus
    assert gpu.uuid == report["spec"]["gpus"][gpu.index]["uuid"] and gpu.uuid.startswith("GPU-")


def test_without_a_report_the_gpu_is_named_by_index_only():
    sim, sched = cluster([node("n1", A100, 2, 32, 128), half("p")])
    run(sim, sched)
    a = assignment(sim, "default/p")
    assert a is not None and [(g.index, g.uuid) for g in a.gpus] == [(0, "")]


def test_memory_unknown_until_the_report_then_learned_from_it():
    sim, sched = cluster([unlabelled("n1", 2), half("p")])
    run(sim, sched)
    assert phase(sim, "default/p") == "Pending"  # a fraction cannot be converted to MiB yet
    (warning,) = [w for w in sched.warnings.values() if "GPUs of unknown memory" in w]
    assert "no GPUNodeReport yet" in warning
    report = agent_report("n1", "2xA100-40GB")
    sim.add_object("GPUNodeReport", report)
    run(sim, sched, cycles=2)
    # The warning says what is true now: once the report told the memory it is gone (the dashboard and
    # events are made from it), and it was never history in the error log.
    assert not [w for w in sched.warnings.values() if "unknown memory" in w]
    assert not [e for e in sched.cache.errors if "unknown memory" in e]
    a = assignment(sim, "default/p")
    assert a is not None and phase(sim, "default/p") == "Running"
    (gpu,) = a.gpus
    assert gpu.memory_mib == 20480 and gpu.uuid == report["spec"]["gpus"][gpu.index]["uuid"]
    (info,) = [n for n in sched.cache.state.nodes if n is not None]
    assert info.gpu_memory_mib == 40960 and info.gpu_model == report["spec"]["gpus"][0]["model"]


def test_report_before_its_node_and_node_updates_keep_what_it_said():
    report = agent_report("n1", "2xA100-40GB", unhealthy=0)
    sim, sched = cluster([])
    sim.add_object("GPUNodeReport", report)
    sim.add_object("Node", unlabelled("n1", 2))
    run(sim, sched)
    state = sched.cache.state
    row = state.row_of("n1")
    assert row is not None
    assert [bool(state.healthy[row, j]) for j in range(2)] == [False, True]  # the Xid'd GPU stays out
    uuids = tuple(g["uuid"] for g in report["spec"]["gpus"])
    assert sched.cache.state.nodes[row].gpu_uuids == uuids
    relabelled = unlabelled("n1", 2)
    relabelled["metadata"]["labels"]["team"] = "vision"
    sim.add_object("Node", relabelled)  # e.g. a label or a kubelet's status: the row is rewritten
    run(sim, sched)
    assert sched.cache.state.nodes[row].gpu_uuids == uuids
    assert [bool(state.healthy[row, j]) for j in range(2)] == [False, True]
