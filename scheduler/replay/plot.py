"""Unallocated GPU % against arrived workload, per policy, like fig. 9(a) of the FGD paper: the whole
range on the left, the region where policies part (80..130% arrived) zoomed on the right. Published
curves (`--reference`) are drawn dashed in the colour of the matching policy."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.replay.curve import Curve

# Paper labels (fgd_allocation_curves.csv, "06-FGD" -> "FGD") -> our policy names.
PAPER_TO_POLICY = {
    "Random": "random",
    "DotProd": "dotprod",
    "GpuPacking": "packing",
    "BestFit": "bestfit",
    "FGD": "fgd",
}


def _draw(
    ax: Any, curves: Mapping[str, Curve], reference: Mapping[str, Curve], colors: dict[str, Any]
) -> None:
    n = max((len(c.allocated_pct) for c in curves.values()), default=131)
    x = list(range(n))
    ax.plot(x, [max(0.0, 100.0 - a) for a in x], color="black", linestyle=":", linewidth=1.2, label="ideal")
    for name, curve in curves.items():
        (line,) = ax.plot(
            range(len(curve.allocated_pct)), [100.0 - c for c in curve.allocated_pct], linewidth=1.6
        )
        line.set_label(name)
        colors[name] = line.get_color()
    for label, curve in reference.items():
        color = colors.get(PAPER_TO_POLICY.get(label, ""), "grey")
        ys = [100.0 - c for c in curve.allocated_pct]
        ax.plot(
            range(len(ys)),
            ys,
            linestyle="--",
            linewidth=1.0,
            alpha=0.8,
            color=color,
            label=f"{label} (paper)",
        )
    ax.grid(alpha=0.3)
    ax.set_xlabel("arrived workload (% of cluster GPU capacity)")


def plot_unallocated(
    path: str | Path,
    curves: Mapping[str, Curve],
    reference: Mapping[str, Curve] | None = None,
    title: str = "openb trace replay",
    bound: float | None = None,
) -> None:
    """`bound`: the certified LP lower bound at 100% arrived (mean over seeds), drawn as a marker."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    fig, (full, zoom) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors: dict[str, Any] = {}
    _draw(full, curves, reference or {}, colors)
    _draw(zoom, curves, reference or {}, colors)
    if bound is not None:
        for ax in (full, zoom):
            ax.plot(
                [100], [bound], marker="v", color="black", linestyle="none", label=f"LP bound {bound:.2f}%"
            )
    full.set_xlim(0, 130)
    full.set_ylim(0, 100)
    full.set_ylabel("unallocated GPU (%)")
    full.set_title(title)
    zoom.set_xlim(80, 130)
    zoom.set_ylim(0, 22)
    zoom.set_title("80-130% arrived")
    zoom.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(str(path), dpi=130)
    plt.close(fig)
