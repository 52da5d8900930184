"""The whole published workload study: every pod list of `cluster-trace-gpu-v2023/csv/` x policies x seeds.

`tessera replay --all-variants DIR` replays each pod list of DIR (`openb_pod_list_*.csv`: default, then
the `cpu*`, `gpushare*`, `gpuspec*` and `multigpu*` families) on the paper's cluster
(`openb_node_list_gpu_node.csv`) with every policy and seed, optionally with the LP bound of each seed
(`bound.py`) and the paper's published figures (`--reference`, the simulator's per-workload curves).
A cell is the mean unallocated GPU % at 100% arrived over the seeds, and its sd. Replays stop just past
bin 100 (`until_pct`), since nothing later is reported.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.replay.bound import arrived_at, lp_bound
from scheduler.replay.protocol import DEFAULT_TUNE, arrival_order, capacity_milli
from scheduler.replay.runner import run_policy
from scheduler.replay.trace import TraceError, TraceNode, TracePod, load_nodes, load_pods
from scheduler.state.backend import get_namespace

GPU_NODE_LIST = "openb_node_list_gpu_node.csv"
ALL_NODE_LIST = "openb_node_list_all_node.csv"
FAMILIES = ("default", "cpu", "gpushare", "gpuspec", "multigpu")
_NAME = re.compile(r"openb_pod_list_([a-z]+?)(\d*)\.csv")


def family(path: Path) -> str:
    m = _NAME.fullmatch(path.name)
    return m.group(1) if m else "other"


def workload_name(path: Path) -> str:
    return path.name.removesuffix(".csv")


def discover(directory: Path) -> list[Path]:
    """The pod lists of `directory`, ordered by family then by the number in the name."""
    found = [p for p in directory.glob("openb_pod_list_*.csv") if p.is_file()]
    if not found:
        raise TraceError(f"{directory}: no openb_pod_list_*.csv")

    def key(p: Path) -> tuple[int, int, str]:
        m = _NAME.fullmatch(p.name)
        fam = m.group(1) if m else "other"
        num = int(m.group(2)) if m and m.group(2) else -1
        return (FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES), num, p.name)

    return sorted(found, key=key)


@dataclass
class Cell:
    per_seed: list[float]
    elapsed_s: float = 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.per_seed)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.per_seed) if len(self.per_seed) > 1 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 4),
            "sd": round(self.sd, 4),
            "per_seed": [round(v, 4) for v in self.per_seed],
        }


@dataclass
class VariantRow:
    workload: str
    family: str
    pods: int
    gpu_request_pct: float  # of cluster capacity, before inflation
    cells: dict[str, Cell] = field(default_factory=dict)
    seconds_per_seed: dict[str, float] = field(default_factory=dict)
    bound: Cell | None = None
    published: dict[str, float] = field(default_factory=dict)  # paper label -> mean unallocated %

    def best(self, within: float = 0.0) -> list[str]:
        """Policies whose mean is within `within` points of the lowest."""
        if not self.cells:
            return []
        low = min(c.mean for c in self.cells.values())
        return [p for p, c in self.cells.items() if c.mean <= low + within + 1e-9]

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "family": self.family,
            "pods": self.pods,
            "gpu_request_pct": round(self.gpu_request_pct, 2),
            "unallocated_pct_at_100": {p: c.to_json() for p, c in self.cells.items()},
            "seconds_per_seed": {p: round(s, 3) for p, s in self.seconds_per_seed.items()},
            "bound": None if self.bound is None else self.bound.to_json(),
            "published": {k: round(v, 4) for k, v in self.published.items()},
            "best": self.best(),
            "best_within_0.1": self.best(0.1),
        }


@functools.lru_cache(maxsize=4)
def _load(nodes_csv: str, pods_csv: str) -> tuple[list[TraceNode], list[TracePod]]:
    """A worker loads each file once, not once per seed."""
    return load_nodes(nodes_csv).rows, load_pods(pods_csv).rows


def _run_unit(
    backend: str | None, nodes_csv: str, pods_csv: str, policy: str, seed: int, tune: float
) -> tuple[float, float]:
    """(unallocated %, seconds) of one seed."""
    nodes, pods = _load(nodes_csv, pods_csv)
    xp = get_namespace(backend, problem_gpus=capacity_milli(nodes) // 1000)
    result = run_policy(xp, nodes, pods, policy, [seed], tune=tune, until_pct=100)
    return result.unallocated[0], result.elapsed_s


def _bound_unit(nodes_csv: str, pods_csv: str, seed: int, tune: float) -> tuple[float, float]:
    """(certified lower bound, 0) of one seed."""
    nodes, pods = _load(nodes_csv, pods_csv)
    cap = capacity_milli(nodes)
    return lp_bound(nodes, arrived_at(arrival_order(pods, seed, tune, cap), cap), cap).unallocated_pct, 0.0


def run_variants(
    nodes_csv: Path,
    pod_lists: Sequence[Path],
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    tune: float = DEFAULT_TUNE,
    backend: str | None = None,
    with_bound: bool = False,
    jobs: int = 1,
    reference: dict[str, dict[str, float]] | None = None,
    on_done: Callable[[str, str], None] | None = None,
    units_dir: Path | None = None,
    policy_seeds: Mapping[str, Sequence[int]] | None = None,
) -> list[VariantRow]:
    """One row per pod list. A unit is one seed of a pod list x policy (or of its bound); units run in
    `jobs` processes, seed by seed (every cell has its first seeds before any has its last, so a table
    cut short is still a table of fewer seeds). `policy_seeds` gives a policy other seeds than `seeds`
    (the bound has the union). With `units_dir`, each finished unit is kept there as JSON and a rerun
    takes it from there (an interrupted table resumes, a table of more seeds reuses the fewer)."""
    nodes: list[TraceNode] = load_nodes(nodes_csv).rows
    cap = capacity_milli(nodes)
    rows: dict[str, VariantRow] = {}
    for path in pod_lists:
        pods: list[TracePod] = load_pods(path).rows
        rows[str(path)] = VariantRow(
            workload_name(path),
            family(path),
            len(pods),
            100.0 * sum(p.gpu_request_milli for p in pods) / cap,
            published=(reference or {}).get(workload_name(path), {}),
        )
    seeds_of = {p: list((policy_seeds or {}).get(p, seeds)) for p in policies}
    all_seeds = list(dict.fromkeys([*seeds, *(s for p in policies for s in seeds_of[p])]))
    seeds_of["bound"] = all_seeds
    got: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}

    def unit_path(pods_csv: str, what: str, seed: int) -> Path | None:
        name = f"{workload_name(Path(pods_csv))}__{what}__s{seed}_t{tune}.json"
        return None if units_dir is None else units_dir / name

    def done(pods_csv: str, what: str, seed: int, value: float, seconds: float) -> None:
        cell = got.setdefault((pods_csv, what), {})
        cell[seed] = (value, seconds)
        path = unit_path(pods_csv, what, seed)
        if path is not None and not path.exists():
            path.write_text(json.dumps({"value": value, "seconds": seconds}))
        if len(cell) == len(seeds_of[what]) and on_done is not None:
            on_done(workload_name(Path(pods_csv)), what)

    if units_dir is not None:
        units_dir.mkdir(parents=True, exist_ok=True)
    kinds = (["bound"] if with_bound else []) + list(policies)
    wanted = [
        (str(p), what, seed)
        for seed in all_seeds
        for what in kinds
        if seed in seeds_of[what]
        for p in pod_lists
    ]
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = []
        for pods_csv, what, seed in wanted:
            kept_at = unit_path(pods_csv, what, seed)
            if kept_at is not None and kept_at.is_file():
                kept = json.loads(kept_at.read_text())
                done(pods_csv, what, seed, kept["value"], kept["seconds"])
            elif what == "bound":
                unit = pool.submit(_bound_unit, str(nodes_csv), pods_csv, seed, tune)
                futures.append((pods_csv, what, seed, unit))
            else:
                unit = pool.submit(_run_unit, backend, str(nodes_csv), pods_csv, what, seed, tune)
                futures.append((pods_csv, what, seed, unit))
        for pods_csv, what, seed, fut in futures:
            done(pods_csv, what, seed, *fut.result())
    for (pods_csv, what), cell in got.items():
        values = [cell[s][0] for s in seeds_of[what]]
        if what == "bound":
            rows[pods_csv].bound = Cell(values)
        else:
            rows[pods_csv].cells[what] = Cell(values)
            rows[pods_csv].seconds_per_seed[what] = statistics.fmean(cell[s][1] for s in seeds_of[what])
    for row in rows.values():  # keep the policies in the order asked
        row.cells = {p: row.cells[p] for p in policies}
    return [rows[str(p)] for p in pod_lists]


def node_list_notes(directory: Path) -> list[str]:
    """What the two node lists are, and which one the table uses."""
    notes = []
    for name in (GPU_NODE_LIST, ALL_NODE_LIST):
        path = directory / name
        if not path.is_file():
            notes.append(f"{name}: absent")
            continue
        rows = load_nodes(path).rows
        gpu_nodes = sum(1 for n in rows if n.gpu)
        gpus = sum(n.gpu for n in rows)
        use = "the cluster of every row (as in the paper)" if name == GPU_NODE_LIST else "not replayed"
        notes.append(f"{name}: {len(rows)} nodes, {gpu_nodes} with GPUs, {gpus} GPUs; {use}")
    return notes
