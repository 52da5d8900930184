import pytest

from node_agent.report import report_json
from scheduler.api import GPUNodeReport

from .conftest import NODE, Scene


def test_report_content(scene: Scene) -> None:
    small = scene.add_pod("small", [(0, 250, 0)])  # a quarter of a 40 GiB GPU: 10240 MiB
    big = scene.add_pod("big", [(0, 500, 8192)])  # explicit memory share
    whole = scene.add_pod("whole", [(1, 1000, 0)], namespace="team-b")
    scene.run_process(small, 0, 101, 4000)
    scene.run_process(big, 0, 102, 6000)
    scene.run_process(big, 0, 103, 3000)
    scene.run_process(whole, 1, 104, 30000)
    scene.run_process(None, 1, 105, 500)  # outside any pod
    scene.nvml.set_utilization(0, 63)
    report = scene.agent().tick()

    assert report.metadata.name == NODE and report.spec.node == NODE
    assert report.spec.driver_version and report.spec.observed_at.endswith("Z")
    g0, g1 = report.spec.gpus
    devices = scene.nvml.devices()
    assert (g0.uuid, g0.model, g0.memory_total_mib, g0.memory_used_mib) == (
        devices[0].uuid,
        "NVIDIA A100-40GB",
        40960,
        13000,
    )
    assert g0.utilization_pct == 63 and g0.health == "Healthy"
    assert g0.assigned_milli == 750 and g1.assigned_milli == 1000
    procs = {p.pid: p for p in g0.processes}
    assert (procs[101].pod, procs[101].namespace, procs[101].container, procs[101].pod_uid) == (
        "small",
        "team-a",
        "main",
        small.uid,
    )
    shares = {s.pod: s for s in g0.shares}
    assert (
        shares["small"].memory_limit_mib,
        shares["small"].memory_used_mib,
        shares["small"].over_limit,
    ) == (
        10240,
        4000,
        False,
    )
    assert (shares["big"].milli, shares["big"].memory_limit_mib, shares["big"].memory_used_mib) == (
        500,
        8192,
        9000,
    )
    assert shares["big"].over_limit
    host = next(p for p in g1.processes if p.pid == 105)
    assert host.pod is None and host.pod_uid is None
    # The JSON form is the CRD's (camelCase) and round-trips through the shared model.
    again = GPUNodeReport.model_validate_json(report_json(report))
    assert again == report
    assert '"memoryLimitMiB":8192' in report_json(report)


def test_unreadable_or_foreign_assignment_gives_no_share(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    broken = scene.add_pod("broken", annotation="{not json")
    other_node = scene.add_pod(
        "elsewhere", annotation='{"node": "gpu-node-9", "gpus": [{"index": 0, "milli": 500}]}'
    )
    by_index = scene.add_pod(
        "by-index", annotation='{"node": "gpu-node-1", "gpus": [{"index": 1, "milli": 300}]}'
    )
    wrong_uuid = scene.add_pod(
        "wrong-uuid",
        annotation='{"node": "gpu-node-1", "gpus": [{"index": 0, "uuid": "GPU-nope", "milli": 300}]}',
    )
    assert broken.assignment is None and "malformed" in (broken.assignment_error or "")
    scene.run_process(broken, 0, 200, 1000)
    scene.run_process(other_node, 0, 201, 1000)
    scene.run_process(wrong_uuid, 0, 202, 1000)
    agent = scene.agent()
    report = agent.tick()
    agent.tick()
    g0, g1 = report.spec.gpus
    assert g0.shares == [] and g0.assigned_milli == 0
    warnings = sorted(r.getMessage() for r in caplog.records if "share not enforced" in r.getMessage())
    assert len(warnings) == 3  # once per pod, not once per round
    assert (
        "team-a/broken: share not enforced: annotation tessera.dev/gpu-assignment is malformed" in warnings[0]
    )
    assert "names node 'gpu-node-9'" in warnings[1] and "GPUs not on this node: GPU-nope" in warnings[2]
    assert [p.pod for p in g0.processes] == ["broken", "elsewhere", "wrong-uuid"]
    assert [(s.pod, s.milli, s.memory_limit_mib) for s in g1.shares] == [("by-index", 300, 12288)]
    assert by_index.assignment is not None


def test_xid_marks_gpu_unhealthy_in_report(scene: Scene) -> None:
    agent = scene.agent()
    scene.nvml.inject_xid(1, 79)
    scene.nvml.inject_xid(0, 13)  # the application's fault: GPU stays healthy
    report = agent.tick()
    assert [g.health for g in report.spec.gpus] == ["Healthy", "Unhealthy"]
    assert report.spec.gpus[1].health_reason == "Xid 79"
    assert agent.tick().spec.gpus[1].health == "Unhealthy"  # sticky


def test_nvml_failing_on_one_device_only(scene: Scene) -> None:
    pod = scene.add_pod("p", [(0, 500, 0)])
    scene.run_process(pod, 0, 300, 1000)
    scene.nvml.lose_gpu(1)
    scene.nvml.fail(0, "power", "not_supported")
    report = scene.agent().tick()
    g0, g1 = report.spec.gpus
    assert g0.health == "Healthy" and g0.power_w is None and g0.memory_used_mib == 1000 and g0.shares
    assert g1.health == "Unhealthy" and g1.health_reason == "GPU is lost" and g1.utilization_pct is None
