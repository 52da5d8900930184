"""The variant table as JSON, markdown and a figure (`tessera replay --all-variants`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler.replay.variants import FAMILIES, VariantRow

PAPER_FGD = "FGD"
TIE = 0.1  # points: "tied-best"


def to_json(
    rows: Sequence[VariantRow],
    policies: Sequence[str],
    seeds: Sequence[int],
    tune: float,
    notes: Sequence[str],
) -> dict[str, Any]:
    return {
        "policies": list(policies),
        "seeds": list(seeds),
        "tune": tune,
        "metric": "unallocated GPU % at 100% arrived (mean and sd over seeds)",
        "node_lists": list(notes),
        "rows": [r.to_json() for r in rows],
        "best_or_tied_everywhere": [p for p in policies if all(p in r.best(TIE) for r in rows)],
    }


def _cell(mean: float, sd: float, bold: bool) -> str:
    text = f"{mean:.2f} ({sd:.2f})"
    return f"**{text}**" if bold else text


def to_markdown(rows: Sequence[VariantRow], policies: Sequence[str], notes: Sequence[str]) -> str:
    """One line per pod list; the best mean (and those within 0.1 point of it) in bold."""
    has_bound = any(r.bound is not None for r in rows)
    has_paper = any(PAPER_FGD in r.published for r in rows)
    head = ["pod list", *policies]
    head += ["LP bound"] if has_bound else []
    head += ["paper FGD", "paper best of 6"] if has_paper else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        tied = set(r.best(TIE))
        cells = [r.workload.removeprefix("openb_pod_list_")]
        cells += [_cell(r.cells[p].mean, r.cells[p].sd, p in tied) for p in policies]
        if has_bound:
            cells.append("-" if r.bound is None else f"{r.bound.mean:.2f} ({r.bound.sd:.2f})")
        if has_paper:
            cells.append(f"{r.published[PAPER_FGD]:.2f}" if PAPER_FGD in r.published else "-")
            if r.published:
                label = min(r.published, key=lambda k: r.published[k])
                cells.append(f"{r.published[label]:.2f} ({label})")
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += family_summary(rows, policies)
    lines.append("")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def family_summary(rows: Sequence[VariantRow], policies: Sequence[str]) -> list[str]:
    """Markdown lines: per family, each policy's mean over the family's pod lists, the bound's, and the
    paper's FGD over the pod lists it published (the policies' mean over those same lists beside it)."""
    head = ["family", "pod lists", *policies, "LP bound", "paper FGD (same lists: best policy)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fam in FAMILIES:
        group = [r for r in rows if r.family == fam]
        if not group:
            continue
        means = {p: sum(r.cells[p].mean for r in group) / len(group) for p in policies}
        low = min(means.values())
        cells = [fam, str(len(group))]
        cells += [f"**{means[p]:.2f}**" if means[p] <= low + TIE else f"{means[p]:.2f}" for p in policies]
        bounded = [r.bound.mean for r in group if r.bound is not None]
        cells.append(f"{sum(bounded) / len(bounded):.2f}" if bounded else "-")
        published = [r for r in group if PAPER_FGD in r.published]
        if published:
            paper = sum(r.published[PAPER_FGD] for r in published) / len(published)
            best = min(policies, key=lambda p: sum(r.cells[p].mean for r in published))
            ours = sum(r.cells[best].mean for r in published) / len(published)
            cells.append(f"{paper:.2f} ({len(published)} lists; {best} {ours:.2f})")
        else:
            cells.append("-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def write_all(
    prefix: Path,
    rows: Sequence[VariantRow],
    policies: Sequence[str],
    seeds: Sequence[int],
    tune: float,
    notes: Sequence[str],
) -> list[Path]:
    """PREFIX.json, PREFIX.md and PREFIX.png; returns the paths written."""
    doc = to_json(rows, policies, seeds, tune, notes)
    out_json = prefix.with_suffix(".json")
    out_md = prefix.with_suffix(".md")
    out_png = prefix.with_suffix(".png")
    out_json.write_text(json.dumps(doc, indent=2) + "\n")
    out_md.write_text(to_markdown(rows, policies, notes))
    plot_variants(out_png, rows, policies)
    return [out_json, out_md, out_png]


def plot_variants(path: Path, rows: Sequence[VariantRow], policies: Sequence[str]) -> None:
    """Unallocated % per pod list (x), one marker line per policy; the LP bound as a grey band from 0,
    the paper's FGD as black crosses; families separated by vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(10.0, 0.55 * len(rows) + 3), 5.2))
    x = list(range(len(rows)))
    for p in policies:
        ys = [r.cells[p].mean for r in rows]
        errs = [r.cells[p].sd for r in rows]
        ax.errorbar(x, ys, yerr=errs, marker="o", markersize=3.5, linewidth=1.0, capsize=2, label=p)
    if any(r.bound is not None for r in rows):
        bx = [i for i, r in enumerate(rows) if r.bound is not None]
        by = [r.bound.mean for r in rows if r.bound is not None]
        ax.fill_between(
            bx, [0.0] * len(by), by, color="grey", alpha=0.25, step="mid", label="below the LP bound"
        )
    paper = [(i, r.published[PAPER_FGD]) for i, r in enumerate(rows) if PAPER_FGD in r.published]
    if paper:
        ax.scatter(
            [i for i, _ in paper],
            [v for _, v in paper],
            marker="x",
            color="black",
            zorder=5,
            label="FGD (paper)",
        )
    for i in range(1, len(rows)):
        if rows[i].family != rows[i - 1].family:
            ax.axvline(i - 0.5, color="black", linewidth=0.6, alpha=0.5)
    ax.set_xticks(x)
    ax.set_xticklabels([r.workload.removeprefix("openb_pod_list_") for r in rows], rotation=60, ha="right")
    ax.set_ylabel("unallocated GPU % at 100% arrived")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(
        "openb workload variants (" + ", ".join(f for f in FAMILIES if any(r.family == f for r in rows)) + ")"
    )
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(str(path), dpi=130)
    plt.close(fig)
