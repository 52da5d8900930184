"""The benchmark's topology workload: nodes labelled into a tree of domains, a Topology, constrained gangs.

`--topology zone:2,block:4,rack:8,nvlink:4` splits the nodes into 2 zones, each into 4 blocks, each into
8 racks, each into 4 NVLink domains (256 leaves; consecutive nodes share a leaf, as racks are filled in
order). The measured gangs then require one domain of the second-lowest level and prefer the lowest
(`--topology-required`, `--topology-preferred` name others). The same run also measures the same
workload with the constraints left off (the peer), so the cost of topology awareness is a ratio of two
runs on the same machine, nodes and pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
LABEL_PREFIX = "bench.tessera.dev/"
TOPOLOGY_NAME = "bench"


@dataclass(frozen=True)
class TopologySpec:
    levels: tuple[tuple[str, int], ...]  # (name, fan-out under its parent), outermost first
    required: str | None = None
    preferred: str | None = None

    @classmethod
    def parse(cls, text: str, required: str | None = None, preferred: str | None = None) -> TopologySpec:
        """`zone:2,block:4,...`; raises ValueError with what is wrong."""
        levels: list[tuple[str, int]] = []
        for part in text.split(","):
            name, sep, count = part.strip().partition(":")
            if not sep or not name or not count.isdigit() or int(count) < 1:
                raise ValueError(f"{part.strip()!r} is not LEVEL:COUNT (e.g. rack:8)")
            if any(name == n for n, _ in levels):
                raise ValueError(f"level {name} is given twice")
            levels.append((name, int(count)))
        names = [n for n, _ in levels]
        req = required if required is not None else (names[-2] if len(names) > 1 else names[-1])
        pref = preferred if preferred is not None else (names[-1] if len(names) > 1 else None)
        for what, level in (("--topology-required", req), ("--topology-preferred", pref)):
            if level is not None and level not in names:
                raise ValueError(f"{what} {level} is not one of the levels {', '.join(names)}")
        return cls(tuple(levels), req, pref)

    @property
    def leaves(self) -> int:
        n = 1
        for _, count in self.levels:
            n *= count
        return n

    def labels(self, index: int, nodes: int) -> dict[str, str]:
        """Labels of node `index` of `nodes`: consecutive nodes share a leaf domain."""
        leaf = index * self.leaves // max(nodes, 1)
        out: dict[str, str] = {}
        below = self.leaves
        for name, count in self.levels:
            below //= count
            out[LABEL_PREFIX + name] = f"{name}-{(leaf // below) % count}"
        return out

    def topology(self) -> Obj:
        return {
            "apiVersion": "scheduling.tessera.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": TOPOLOGY_NAME},
            "spec": {"levels": [{"nodeLabel": LABEL_PREFIX + n, "alias": n} for n, _ in self.levels]},
        }

    def constraint(self) -> Obj:
        c: Obj = {"topology": TOPOLOGY_NAME}
        if self.required:
            c["requiredTopologyLevel"] = self.required
        if self.preferred:
            c["preferredTopologyLevel"] = self.preferred
        return c


def label_nodes(nodes: list[Obj], spec: TopologySpec) -> None:
    for i, node in enumerate(nodes):
        node["metadata"]["labels"].update(spec.labels(i, len(nodes)))


def constrain(podgroups: list[Obj], spec: TopologySpec) -> None:
    for pg in podgroups:
        pg["spec"]["topologyConstraint"] = spec.constraint()


def run_with_peer(cfg: Any, repeat: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The constrained workload and its unconstrained peer, `repeat` times each, interleaved (peer,
    constrained, peer...) so that a machine growing busier slows both alike; of each, the run that took
    the least CPU time (other processes only ever add to it). Returns (constrained, peer) reports."""
    from dataclasses import replace

    from scheduler.bench.runner import run_bench

    runs: dict[bool, list[Any]] = {True: [], False: []}
    for _ in range(max(1, repeat)):
        for constrained in (False, True):
            runs[constrained].append(run_bench(replace(cfg, constrained=constrained)))

    def best(results: list[Any]) -> dict[str, Any]:
        top = min(results, key=lambda r: r.cpu_s / max(r.scheduled, 1))
        out: dict[str, Any] = top.to_dict()
        rates = sorted(r.to_dict()["pods_per_cpu_s"] for r in results)
        out["repeat"] = {"runs": len(results), "pods_per_cpu_s_all": rates, "chosen": "least CPU per pod"}
        return out

    return best(runs[True]), best(runs[False])
