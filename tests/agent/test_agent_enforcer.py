import signal

import pytest

from node_agent.cgroup import ContainerRef
from node_agent.enforcer import KILL_HOLDOFF_S, Watchdog
from node_agent.events import PodRef

from .conftest import Scene


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[PodRef, str, str]] = []
        self.kills: list[tuple[int, int]] = []

    def emit(self, pod: PodRef, reason: str, message: str, *, warning: bool = True) -> None:
        self.events.append((pod, reason, message))

    def kill(self, pid: int, sig: int) -> None:
        self.kills.append((pid, sig))


def setup_over_and_within(scene: Scene) -> tuple[str, str]:
    greedy = scene.add_pod("greedy", [(0, 250, 0)])  # share 10240 MiB
    polite = scene.add_pod("polite", [(0, 250, 0)])
    scene.run_process(greedy, 0, 500, 9000)
    scene.run_process(greedy, 0, 501, 4000)  # greedy: 13000 MiB, over its 10240
    scene.run_process(polite, 0, 502, 10000)  # polite: within
    scene.run_process(None, 0, 503, 30000)  # a host process: never touched
    return greedy.uid, polite.uid


def test_report_mode_events_once_and_metric(scene: Scene) -> None:
    rec = Recorder()
    setup_over_and_within(scene)
    agent = scene.agent(watchdog=Watchdog("report", events=rec, kill=rec.kill))
    agent.tick()
    agent.tick()
    assert rec.kills == []
    assert [(e[0].name, e[1]) for e in rec.events] == [("greedy", "GPUMemoryOverLimit")]
    assert "13000 MiB" in rec.events[0][2] and "10240 MiB" in rec.events[0][2]
    sample = agent.metrics.registry.get_sample_value
    assert (
        sample(
            "tessera_enforcement_actions_total", {"action": "report", "namespace": "team-a", "pod": "greedy"}
        )
        == 1
    )
    # Back under, then over again: a new episode, a new event.
    scene.nvml.set_process_memory(501, 100)
    agent.tick()
    scene.nvml.set_process_memory(501, 4000)
    agent.tick()
    assert len(rec.events) == 2


def test_kill_mode_kills_largest_until_within_share(scene: Scene) -> None:
    rec = Recorder()
    setup_over_and_within(scene)
    agent = scene.agent(watchdog=Watchdog("kill", events=rec, kill=rec.kill))
    agent.tick()
    # Killing PID 500 (9000 MiB) leaves 4000 <= 10240: 501, the polite pod and the host process live on.
    assert rec.kills == [(500, signal.SIGKILL)]
    assert [e[1] for e in rec.events] == ["GPUMemoryOverLimit", "GPUProcessKilled"]
    # NVML still lists the dying process for a moment: no second signal.
    agent.tick()
    assert rec.kills == [(500, signal.SIGKILL)]
    scene.nvml.remove_process(500)
    agent.tick()
    assert len(rec.kills) == 1


def test_kill_never_touches_pods_without_a_readable_assignment(scene: Scene) -> None:
    rec = Recorder()
    broken = scene.add_pod("broken", annotation='{"node": 1}')
    unassigned = scene.add_pod("unassigned")
    scene.run_process(broken, 0, 600, 40000)
    scene.run_process(unassigned, 1, 601, 40000)
    agent = scene.agent(watchdog=Watchdog("kill", events=rec, kill=rec.kill))
    agent.tick()
    assert rec.kills == [] and rec.events == []


def test_off_mode_does_nothing(scene: Scene) -> None:
    rec = Recorder()
    setup_over_and_within(scene)
    scene.agent(watchdog=Watchdog("off", events=rec, kill=rec.kill)).tick()
    assert rec.kills == [] and rec.events == []


def test_kill_failures_are_survived(scene: Scene) -> None:
    rec = Recorder()

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    setup_over_and_within(scene)
    agent = scene.agent(watchdog=Watchdog("kill", events=rec, kill=refuse))
    report = agent.tick()
    assert [e[1] for e in rec.events] == ["GPUMemoryOverLimit"]
    assert report.spec.gpus[0].shares[0].over_limit


def test_holdoff_expires(scene: Scene) -> None:
    rec = Recorder()
    now = [0.0]
    setup_over_and_within(scene)
    agent = scene.agent(watchdog=Watchdog("kill", events=rec, kill=rec.kill, clock=lambda: now[0]))
    agent.tick()
    now[0] = KILL_HOLDOFF_S + 1
    agent.tick()
    assert [k[0] for k in rec.kills] == [500, 500]


def test_unknown_mode_rejected() -> None:
    with pytest.raises(ValueError, match="unknown enforcement mode 'nuke'"):
        Watchdog("nuke")  # type: ignore[arg-type]


def test_reused_pid_is_not_killed(scene: Scene) -> None:
    rec = Recorder()
    setup_over_and_within(scene)
    # Between NVML's read and the kill, PID 500 exited and the PID now belongs to a host process.
    agent = scene.agent(watchdog=Watchdog("kill", events=rec, kill=rec.kill))
    real_resolve = agent.resolver.resolve
    calls: list[int] = []

    def resolve_then_reuse(pid: int) -> ContainerRef | None:
        calls.append(pid)
        if pid == 500 and calls.count(500) > 1:
            (scene.proc_root / "500" / "cgroup").write_text("0::/system.slice/cron.service\n")
        return real_resolve(pid)

    agent.resolver.resolve = resolve_then_reuse  # type: ignore[method-assign]
    agent.tick()
    assert rec.kills == []
