"""A gang whose binds fail part-way is undone at once (issue 14): the members bound in the same cycle are
evicted and their places leave the plan in that cycle, so the gang never runs below its minMember (it
ran one member alone, holding its GPU, until the stale-gang eviction 60 s later, and the GPU went to
another pod meanwhile)."""

from __future__ import annotations

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import POD_GROUP
from scheduler.cache.cluster import BindError, BindResult
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.types import PodInfo
from scheduler.sim.cluster import DEFAULT_GRACE_S, SimCluster
from scheduler.sim.loader import Manifests
from tests.framework.helpers import A100, assert_arrays_match_world, node, phase, pod, podgroup, run


class FailsOneBind(SimCluster):
    """The simulated cluster, failing the `nth` bind it is asked for (a conflict, an API error)."""

    nth = 2
    calls = 0

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        self.calls += 1
        if self.calls == self.nth:
            raise BindError(f"Operation cannot be fulfilled on pods {pod.name!r}: conflict")
        return super().bind(pod, assignment)


def _scene(members: int, min_member: int) -> tuple[FailsOneBind, Scheduler]:
    m = Manifests()
    m.objects["Node"].append(node("n0", A100, 4, 64, 512))
    m.objects["PodGroup"].append(podgroup("g", "default", "default", min_member))
    for i in range(members):
        m.objects["Pod"].append(
            pod(f"w{i}", "default", arrival_s=0, duration_s=10_000, gpus=1, annotations={POD_GROUP: "g"})
        )
    sim = FailsOneBind.from_manifests(m)
    assert isinstance(sim, FailsOneBind)
    return sim, Scheduler(sim, SchedulerConfig(policy="binpack", backend="numpy"))


def _live_bound(sim: SimCluster) -> list[str]:
    return sorted(k for k, r in sim.pods.items()
                  if r.obj["spec"].get("nodeName") and not r.obj["metadata"].get("deletionTimestamp"))  # fmt: skip


def test_a_gang_whose_second_bind_fails_is_undone_in_the_same_cycle() -> None:
    sim, sched = _scene(members=3, min_member=3)
    run(sim, sched)
    assert _live_bound(sim) == []  # the member bound before the failure is being deleted
    (undone,) = [k for k, r in sim.pods.items() if r.obj["metadata"].get("deletionTimestamp")]
    deleting = sim.pods[undone].deleting
    assert deleting is not None and "default/g is bound whole or not at all" in deleting[1], deleting
    state = sched.cache.state
    assert sum(int(m) for m in state.free_milli[0, :4]) == 4000  # its place left the plan this cycle
    assert_arrays_match_world(sim, sched)
    run(sim, sched, cycles=3, dt=DEFAULT_GRACE_S)  # it terminates and is recreated; the binds succeed
    assert len(_live_bound(sim)) == 3 and all(phase(sim, k) == "Running" for k in _live_bound(sim))
    assert_arrays_match_world(sim, sched)


def test_an_elastic_gangs_extra_member_failing_keeps_the_others() -> None:
    """minMember 1 of 3: the member bound before the failure runs the gang at its minMember; it stays."""
    sim, sched = _scene(members=3, min_member=1)
    run(sim, sched)
    assert len(_live_bound(sim)) >= 1
    assert not any(r.obj["metadata"].get("deletionTimestamp") for r in sim.pods.values())
    assert_arrays_match_world(sim, sched)
