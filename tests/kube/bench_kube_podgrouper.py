"""Cost of the podgrouper's decisions (walk + rule + bookkeeping), without the API: pod events per
CPU-second for workloads of each shape, objects as their controllers make them, kept in memory.

    python -m tests.kube.bench_kube_podgrouper [pods] [events per drain]

Prints JSON: per shape, the pods, the events observed (each pod added, then seen Running; the groups
decided after every `events per drain` events, as the adapter does once per drain) and the events per
CPU-second. The owners are in memory here; in the scheduler they come from watch caches, as cheap.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.kube import workloads as wl
from tests.kube.podgrouper_store import Store

RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def bare(k: Store, n: int) -> list[dict[str, Any]]:
    return [k.add(wl.pod(f"p-{i}")) for i in range(n)]


def deployment(k: Store, n: int) -> list[dict[str, Any]]:
    rs = k.add(wl.replicaset(k.add(wl.deployment("web", n))))
    return [k.add(wl.replicaset_pod(rs, f"x{i}")) for i in range(n)]


def jobset_in_order(k: Store, n: int) -> list[dict[str, Any]]:
    js = k.add(wl.jobset("js", [wl.replicated_job("a", 1), wl.replicated_job("b", n // 8, 8)], in_order=True))
    out = []
    for i in range(n // 8):
        j = k.add(wl.jobset_job(js, "b", i))
        out += [k.add(wl.job_pod(j, x)) for x in range(8)]
    return out


def lws(k: Store, n: int) -> list[dict[str, Any]]:
    lw = k.add(wl.lws("llm", size=8, replicas=n // 8, leader_ready=True))
    sts = k.add(wl.lws_leader_statefulset(lw))
    out = []
    for i in range(n // 8):
        leader = k.add(wl.lws_leader_pod(sts, i))
        workers = k.add(wl.lws_worker_statefulset(lw, leader))
        out += [leader, *(k.add(wl.lws_worker_pod(workers, j)) for j in range(1, 8))]
    return out


def run(make: Callable[[Store, int], list[dict[str, Any]]], n: int, per_drain: int) -> dict[str, Any]:
    k = Store()
    pods = make(k, n)
    events = [*pods, *(k.update(p, status=RUNNING) for p in pods)]
    t0 = time.process_time()
    for i, p in enumerate(events, 1):
        k.book.observe(p)
        if i % per_drain == 0:
            k.book.take_pending()
    k.book.take_pending()
    cpu = time.process_time() - t0
    return {"shape": make.__name__, "pods": len(pods), "events": len(events), "per_drain": per_drain,
            "cpu_s": round(cpu, 3), "events_per_cpu_s": round(len(events) / cpu)}  # fmt: skip


def main(n: int = 4000, per_drain: int = 100) -> None:
    shapes = (bare, deployment, jobset_in_order, lws)
    print(json.dumps([run(make, n, per_drain) for make in shapes], indent=1))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
