import pytest

from node_agent.nvml import GPUEvent, open_backend
from node_agent.nvml.fake import FakeNVML


def test_devices_and_deterministic_uuids() -> None:
    a = FakeNVML("2xA100-40GB,1xT4-16GB", seed="node-a")
    again = FakeNVML("2xA100-40GB,1xT4-16GB", seed="node-a")
    other = FakeNVML("2xA100-40GB,1xT4-16GB", seed="node-b")
    devs = a.devices()
    assert [(d.index, d.name, d.memory_total_mib) for d in devs] == [
        (0, "NVIDIA A100-40GB", 40960),
        (1, "NVIDIA A100-40GB", 40960),
        (2, "NVIDIA T4-16GB", 16384),
    ]
    assert [d.uuid for d in devs] == [d.uuid for d in again.devices()]
    assert len({d.uuid for d in devs} | {d.uuid for d in other.devices()}) == 6
    assert all(d.uuid.startswith("GPU-") for d in devs)


def test_processes_drive_memory() -> None:
    nvml = FakeNVML("1xH100-80GB")
    nvml.add_process(0, 4242, 1000)
    nvml.add_process(0, 4243, 3000)
    sample = nvml.sample(0)
    assert (sample.memory_used_mib, sample.memory_free_mib) == (4000, 81920 - 4000)
    assert [(p.pid, p.used_mib) for p in sample.processes] == [(4242, 1000), (4243, 3000)]
    nvml.remove_process(4242)
    nvml.set_process_memory(4243, 500)
    nvml.set_utilization(0, 77)
    sample = nvml.sample(0)
    assert sample.memory_used_mib == 500 and sample.utilization_pct == 77
    nvml.set_memory_used(0, 9000)
    assert nvml.sample(0).memory_used_mib == 9000


def test_failures_are_per_device_and_per_call() -> None:
    nvml = FakeNVML("3xA100-40GB")
    nvml.fail(0, "power", "not_supported")
    nvml.fail(1, "utilization", "unknown")
    nvml.lose_gpu(2)
    s0, s1, s2 = (nvml.sample(i) for i in range(3))
    # NotSupported: the field is absent, the GPU is fine.
    assert s0.power_w is None and s0.errors == {} and s0.healthy and s0.temperature_c is not None
    # Another error: the field is absent and named in errors, the GPU stays healthy.
    assert s1.utilization_pct is None and "utilization" in s1.errors and s1.healthy
    assert s1.memory_used_mib == 0
    # Lost: unhealthy, and one `lost` event.
    assert not s2.healthy and s2.health_reason == "GPU is lost"
    assert nvml.poll_events() == [GPUEvent(2, "lost", message="GPU is lost")]
    nvml.sample(2)
    assert nvml.poll_events() == []
    nvml.clear_failures(1)
    assert nvml.sample(1).utilization_pct == 0.0


def test_xid_and_ecc_events() -> None:
    nvml = FakeNVML("3xH100-80GB")
    nvml.inject_xid(0, 13)  # application error: not the GPU's fault
    nvml.inject_xid(1, 79, "fallen off the bus")
    nvml.inject_ecc(2)
    events = nvml.poll_events()
    assert [(e.index, e.kind, e.code) for e in events] == [(0, "xid", 13), (1, "xid", 79), (2, "ecc", 2)]
    assert nvml.sample(0).healthy
    s1, s2 = nvml.sample(1), nvml.sample(2)
    assert not s1.healthy and s1.health_reason == "Xid 79: fallen off the bus"
    assert not s2.healthy and "ECC" in (s2.health_reason or "")


def test_bad_driving_is_rejected() -> None:
    nvml = FakeNVML("1xT4-16GB")
    with pytest.raises(IndexError, match="no GPU 3"):
        nvml.add_process(3, 1, 1)
    with pytest.raises(ValueError, match="unknown NVML call"):
        nvml.fail(0, "fan", "unknown")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown NVML error"):
        nvml.fail(0, "power", "melted")


def test_open_backend_fake() -> None:
    backend = open_backend("2xT4-16GB", seed="x")
    assert len(backend.devices()) == 2
    assert backend.driver_version()
