"""Property: whatever arrives, completes or is deleted, no GPU is ever over-committed (compute or memory),
the arrays always equal what the pods hold, and no gang is ever partly placed."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.keys import MILLI_PER_GPU, POD_GROUP
from scheduler.model.types import PodPhase
from tests.framework.helpers import cluster, node, pod, podgroup
from tests.property.world import request_annotations

MODELS = [("A100", 40960), ("H100", 81920), ("T4", 15360)]

pod_kinds = st.one_of(
    st.tuples(
        st.just("fraction"), st.sampled_from(["0.1", "0.25", "0.3", "0.5", "0.7", "0.9"]), st.integers(1, 2)
    ),
    st.tuples(st.just("memory"), st.sampled_from(["4000", "10000", "16000", "30000"]), st.integers(1, 2)),
    st.tuples(st.just("whole"), st.just(""), st.integers(1, 4)),
    st.tuples(st.just("cpu"), st.just(""), st.just(0)),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), pod_kinds, st.integers(1, 60)),
        st.tuples(st.just("gang"), pod_kinds, st.integers(2, 4)),
        st.tuples(st.just("delete"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("tick"), st.integers(1, 40), st.just(0)),
    ),
    min_size=5,
    max_size=40,
)


def check_invariants(sched, sim, gangs: dict[str, int]) -> None:
    state = sched.cache.state
    used_milli: dict[tuple[int, int], int] = {}
    used_mib: dict[tuple[int, int], int] = {}
    ledger = sched.cache.ledger
    for pl in [
        h.placement for h in (*ledger.pods.values(), *ledger.reserved.values())
    ]:  # pods and reserved places
        for g in pl.gpus:
            used_milli[(pl.node, g.slot)] = used_milli.get((pl.node, g.slot), 0) + g.milli
            used_mib[(pl.node, g.slot)] = used_mib.get((pl.node, g.slot), 0) + g.mib
    for row in range(state.num_rows):
        for slot in range(state.max_gpus):
            if not bool(state.present[row, slot]):
                continue
            milli, mib = used_milli.get((row, slot), 0), used_mib.get((row, slot), 0)
            total = int(state.total_mib[row, slot])
            assert milli <= MILLI_PER_GPU and mib <= total, (
                f"GPU {row}/{slot} over-committed: {milli} milli {mib} MiB"
            )
            assert int(state.free_milli[row, slot]) == MILLI_PER_GPU - milli
            assert int(state.free_mib[row, slot]) == total - mib
        assert int(state.free_cpu[row]) >= 0 and int(state.free_mem[row]) >= 0
    for group, min_member in gangs.items():
        members = [p for p in sched.cache.pods.values() if p.group == group]
        if (
            any(p.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED) for p in members)
            or len(members) < min_member
        ):
            continue  # a finished or deleted member may legitimately leave fewer running
        running = sum(1 for p in members if sched.cache.ledger.on_node(p))
        assert running == 0 or running >= min_member, f"gang {group} partly placed: {running}/{min_member}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(
        st.tuples(st.sampled_from(MODELS), st.integers(1, 8), st.integers(8, 64)), min_size=1, max_size=5
    ),
    script=ops,
    policy=st.sampled_from(["binpack", "spread"]),
)
def test_no_overcommit_no_partial_gang(nodes, script, policy):
    objs = [node(f"n{i}", model, gpus, cpu, 512) for i, (model, gpus, cpu) in enumerate(nodes)]
    sim, sched = cluster(objs, policy=policy)
    gangs: dict[str, int] = {}
    seq = 0
    for op, arg, extra in script:
        if op == "submit":
            ann, whole = request_annotations(arg)
            sim.submit_pod(
                pod(f"p{seq}", "default", arrival_s=0, duration_s=extra, cpu="2", annotations=ann, gpus=whole)
            )
            seq += 1
        elif op == "gang":
            ann, whole = request_annotations(arg)
            name = f"g{seq}"
            sim.add_object("PodGroup", podgroup(name, "default", "default", extra))
            gangs[f"default/{name}"] = extra
            for w in range(extra):
                sim.submit_pod(pod(f"{name}-{w}", "default", arrival_s=0, duration_s=30, cpu="2",
                                   annotations={**ann, POD_GROUP: name}, gpus=whole))  # fmt: skip
            seq += 1
        elif op == "delete" and sim.pods:
            key = sorted(sim.pods)[arg % len(sim.pods)]
            rec = sim.pods[key]
            if rec.obj["metadata"].get("uid"):
                info = sched.cache.pods.get(rec.obj["metadata"]["uid"])
                if info is not None:
                    sim.evict(info, action="test", message="deleted by the test")
                    if info.group in gangs:
                        gangs.pop(info.group)  # a deleted member is the user's doing, not the scheduler's
        sim.advance(sim.now_s + (arg if op == "tick" else 1))
        sched.run_cycle()
        check_invariants(sched, sim, gangs)


state_ops = st.lists(
    st.tuples(
        st.sampled_from(["place", "gang", "remove"]),
        st.sampled_from(
            [
                (1, 100, 0),
                (1, 250, 0),
                (1, 700, 0),
                (2, 500, 0),
                (1, 0, 12000),
                (2, 0, 30000),
                (1, 1000, 0),
                (2, 1000, 0),
                (4, 1000, 0),
                (0, 0, 0),
            ]
        ),
        st.integers(1, 5),
    ),
    min_size=20,
    max_size=200,
)


@settings(max_examples=40, deadline=None)
@given(script=state_ops, backend=st.sampled_from(["numpy", "strict"]))
def test_state_place_remove_sequences_never_overcommit(script, backend):
    """Thousands of place / gang / remove steps straight on the arrays (gangs via checkpoint/rollback)."""
    from scheduler.model.types import NodeInfo
    from scheduler.placement import make_policy, place_one
    from scheduler.state import ClusterState, PodDemand
    from scheduler.state.backend import get_namespace

    state = ClusterState(get_namespace(backend), max_gpus=8, capacity=2)
    for i, (model, mem) in enumerate(MODELS * 2):
        state.add_node(NodeInfo(f"n{i}", 64000, 524288, 2 + 2 * (i % 3), model, mem))
    policy = make_policy("binpack")
    held: list = []
    gangs: list[list] = []
    for op, (n, milli, mib), size in script:
        d = PodDemand(cpu_milli=4000, memory_mib=8192, num_gpus=n, gpu_milli=milli, gpu_mib=mib)
        if op == "place":
            pl = place_one(state, policy, d)
            if pl is not None:
                state.place(pl)
                held.append(pl)
        elif op == "gang":
            cp, members = state.checkpoint(), []
            for _ in range(size):
                pl = place_one(state, policy, d)
                if pl is None:
                    break
                state.place(pl)
                members.append(pl)
            if len(members) < size:
                state.rollback(cp)
            else:
                gangs.append(members)
            state.commit()
        elif held:
            state.release(held.pop(size % len(held)))
        live = held + [pl for g in gangs for pl in g]
        milli_used: dict[tuple[int, int], int] = {}
        for pl in live:
            for g in pl.gpus:
                milli_used[(pl.node, g.slot)] = milli_used.get((pl.node, g.slot), 0) + g.milli
        free = state.host(state.free_milli)
        assert (free >= 0).all() and (state.host(state.free_mib) >= 0).all()
        for row in range(state.num_rows):
            for slot in range(state.max_gpus):
                if bool(state.present[row, slot]):
                    assert int(free[row, slot]) == MILLI_PER_GPU - milli_used.get((row, slot), 0)
