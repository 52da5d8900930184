"""Unallocated GPU % against arrived workload, per policy, like fig. 9(a) of the FGD paper."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from scheduler.replay.curve import Curve


def plot_unallocated(
    path: str | Path,
    curves: Mapping[str, Curve],
    reference: Mapping[str, Curve] | None = None,
    title: str = "openb trace replay",
) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = list(range(len(next(iter(curves.values())).allocated_pct))) if curves else list(range(131))
    ax.plot(x, [max(0.0, 100.0 - a) for a in x], color="black", linestyle=":", linewidth=1.2, label="ideal")
    for name, curve in curves.items():
        ax.plot(x, [100.0 - c for c in curve.allocated_pct], linewidth=1.6, label=name)
    for name, curve in (reference or {}).items():
        rx = list(range(len(curve.allocated_pct)))
        ax.plot(
            rx,
            [100.0 - c for c in curve.allocated_pct],
            linestyle="--",
            linewidth=1.0,
            alpha=0.7,
            label=f"{name} (paper)",
        )
    ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.set_xlim(0, max(x) if x else 130)
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(str(path), dpi=130)
    plt.close(fig)
