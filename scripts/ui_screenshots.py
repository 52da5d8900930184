"""Render the README's screenshots: docs/img/dashboard.png and docs/img/replay-report.png.

    /work/venv/bin/python scripts/ui_screenshots.py [--reference ../shared/reference/fgd_allocation_curves.csv]

The dashboard is the built-in demo (`tessera simulate`) at its busiest moment, served on loopback and
opened in headless Chromium. The simulator has no GPUs, so the NVML readings on the h100-0x nodes are
made up here, for the picture only (a fixed share of each pod's assigned memory; one GPU reported
unhealthy). The replay report draws the FGD paper's published curves, read from the CSV at render time.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.api.report import GPUNodeReport
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.builtin import BUILTIN_UNTIL_S, builtin_manifests
from scheduler.sim.cluster import SimCluster
from scheduler.sim.runner import run_simulation
from scheduler.ui.build import build_view
from scheduler.ui.replay_curves import load_reference_curves
from scheduler.ui.replay_report import render_replay_report
from scheduler.ui.server import UIServer, scheduler_view_source
from scheduler.ui.view import DashboardView
from tests.ui import browser


def demo_reports(sched: Scheduler, nodes: list[str]) -> list[GPUNodeReport]:
    """Pretend NVML readings for `nodes`: each pod uses 55-95% of its assigned memory (fixed per pod)."""
    view = build_view(sched)
    out = []
    for row in (n for n in view.nodes if n.name in nodes):
        gpus: list[dict[str, Any]] = []
        for g in row.gpus:
            shares: list[dict[str, Any]] = []
            for s in g.slices:
                ns, name = s.pod.split("/", 1)
                used = int(s.mib * (55 + zlib.crc32(s.pod.encode()) % 41) / 100)
                shares.append({"pod": name, "namespace": ns, "milli": s.milli, "memoryLimitMiB": s.mib,
                               "memoryUsedMiB": used})  # fmt: skip
            bad = row.name == nodes[0] and g.index == 5
            gpus.append({
                "index": g.index, "uuid": g.uuid, "model": row.model, "memoryTotalMiB": g.total_mib,
                "memoryUsedMiB": sum(int(sh["memoryUsedMiB"]) for sh in shares),
                "utilizationPct": float(min(100, 12 * len(shares) + zlib.crc32(g.uuid.encode()) % 40)),
                "temperatureC": 55.0, "powerW": 410.0, "health": "Unhealthy" if bad else "Healthy",
                "healthReason": "Xid 79: GPU has fallen off the bus" if bad else None, "shares": shares,
            })  # fmt: skip
        out.append(GPUNodeReport.model_validate(
            {"metadata": {"name": row.name}, "spec": {"node": row.name, "observedAt": "2026-01-01T00:40:00Z", "gpus": gpus}}
        ))  # fmt: skip
    return out


def dashboard(out: Path) -> None:
    sim = SimCluster.from_manifests(builtin_manifests(7))
    sched = Scheduler(sim, SchedulerConfig(backend="numpy", expected_nodes=56))
    result = run_simulation(sim, sched, until_s=BUILTIN_UNTIL_S)
    reports = demo_reports(sched, [f"h100-{i:02d}" for i in range(8)])
    source = scheduler_view_source(sched, reports=lambda: reports, title="Tessera cluster (built-in demo)")

    def with_timeline() -> DashboardView:
        return dataclasses.replace(source(), timeline=tuple(result.timeline), source="simulated, t=40m")

    from selenium.webdriver.common.by import By

    with UIServer(with_timeline, "127.0.0.1", 0) as srv, browser.chromium(1500, 1000) as d:
        d.get(srv.url)
        d.find_element(By.CSS_SELECTOR, '.node[data-g="0"] .gpu[data-i="0"]').click()
        errors = browser.console_errors(d)
        if errors:
            raise SystemExit(f"console errors: {errors}")
        browser.full_page_screenshot(d, str(out), max_height=4200)
    print(f"wrote {out}")


def replay(out: Path, reference: Path) -> None:
    curves, errors = load_reference_curves(reference)
    if errors or not curves:
        raise SystemExit(f"cannot read {reference}: {errors[:3]}")
    html = render_replay_report(
        [c.model_dump() for c in curves],
        title="Trace replay report: openb default trace (1213 nodes, 6212 GPUs)",
        subtitle="curves: the FGD paper's published results, mean of seeds 42-51, read from "
        f"{reference.name} at render time",
    )
    page = out.with_suffix(".html")
    page.write_text(html, encoding="utf-8")
    try:
        with browser.chromium(1500, 1000) as d:
            d.get(page.resolve().as_uri())
            errs = browser.console_errors(d)
            if errs:
                raise SystemExit(f"console errors: {errs}")
            browser.full_page_screenshot(d, str(out))
    finally:
        page.unlink()
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--out", type=Path, default=root / "docs" / "img")
    ap.add_argument(
        "--reference", type=Path, default=root.parent / "shared" / "reference" / "fgd_allocation_curves.csv"
    )
    args = ap.parse_args()
    if (why := browser.missing()) is not None:
        raise SystemExit(why)
    args.out.mkdir(parents=True, exist_ok=True)
    dashboard(args.out / "dashboard.png")
    replay(args.out / "replay-report.png", args.reference)


if __name__ == "__main__":
    main()
