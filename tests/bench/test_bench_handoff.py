"""`tessera bench handoff`: a burst of fractions through the device plugin's hand-off is placed turn by turn
(never two pods waiting for `Allocate` on a node), packed as whole GPUs would be, and costs the scheduler
more cycles than the same burst of whole GPUs (one cycle). Figures are not judged here."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from scheduler.bench.handoff import HandoffConfig, PluginCluster, run_handoff
from scheduler.cli.main import app

SMALL = HandoffConfig(nodes=6, gpus_per_node=2, pods=12, fraction=0.5, marks_per_cycle=2)


def test_the_fraction_burst_takes_turns_per_node_and_packs_as_whole_gpus() -> None:
    r = run_handoff(SMALL)
    frac, whole = r["fractions"], r["whole_gpus"]
    assert frac["bound"] == whole["bound"] == 12
    assert frac["most_waiting_on_a_node"] == 1  # one pod per node waits for the plugin at a time
    assert frac["gpus_used"] == 6 and frac["gpus_partly_used"] == 0  # halves two to a GPU
    assert whole["cycles"] == 1 and whole["most_waiting_on_a_node"] == 0  # NVIDIA's plugin serves them
    assert frac["cycles"] >= 12 // 2  # at most 2 marks per cycle: at least a cycle per 2 pods
    assert r["fraction_to_whole_cpu"] > 0


def test_the_plugin_marks_the_oldest_waiting_pods_and_the_kubelet_starts_them() -> None:
    r = run_handoff(HandoffConfig(nodes=2, gpus_per_node=1, pods=2, fraction=0.5, marks_per_cycle=1))
    assert r["fractions"]["gpus_used"] == 1
    cluster = PluginCluster()
    cluster.waiting = ["ns/a", "ns/b"]
    cluster.pods = {
        k: {"metadata": {"name": k, "annotations": {}}, "spec": {}, "status": {}} for k in cluster.waiting
    }
    assert cluster.mark(1) == 1 and cluster.waiting == ["ns/b"]
    (event,) = cluster.drain_events()
    assert (
        event.obj["status"]["phase"] == "Running"
        and "tessera.dev/gpu-allocated" in event.obj["metadata"]["annotations"]
    )


def test_the_command_prints_json_and_refuses_a_burst_that_cannot_fit() -> None:
    args = [
        "bench",
        "handoff",
        "--nodes",
        "4",
        "--gpus-per-node",
        "2",
        "--pods",
        "8",
        "--marks-per-cycle",
        "2",
    ]
    out = CliRunner().invoke(app, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["fractions"]["bound"] == 8 and r["config"]["marks_per_cycle"] == 2
    refused = CliRunner().invoke(
        app, ["bench", "handoff", "--nodes", "1", "--gpus-per-node", "2", "--pods", "3"]
    )
    assert refused.exit_code == 2 and "do not fit" in refused.output
