"""The trace-replay report: allocation curves of several placement policies in one self-contained page,
optionally with the paper's published curves and the cluster as the replay left it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from html import escape
from typing import Any

from scheduler.ui.chart import Series, legend, line_chart
from scheduler.ui.colors import PALETTE
from scheduler.ui.page import dashboard_body, page
from scheduler.ui.replay_curves import ReplayCurve, parse_curves, policy_key
from scheduler.ui.view import DashboardView


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _unallocated(c: ReplayCurve) -> tuple[tuple[float, float], ...]:
    """The curve as the table reports it: GPU share left unallocated, against arrived demand."""
    return tuple((p.arrived_pct, max(0.0, 100.0 - p.allocated_pct)) for p in c.curve)


def _series(curves: list[ReplayCurve], reference: list[ReplayCurve]) -> list[Series]:
    colors: dict[str, str] = {}
    for c in [*curves, *reference]:
        colors.setdefault(policy_key(c.policy), PALETTE[len(colors) % len(PALETTE)])
    out = [Series(c.policy, _unallocated(c), colors[policy_key(c.policy)]) for c in curves]
    out += [
        Series(f"{c.policy} (published)", _unallocated(c), colors[policy_key(c.policy)], dashed=True)
        for c in reference
    ]
    return out


def _results_table(curves: list[ReplayCurve], reference: list[ReplayCurve]) -> str:
    ref = {policy_key(c.policy): c for c in reference}
    mine = {policy_key(c.policy) for c in curves}
    rows = []
    ranked = sorted(curves, key=lambda c: (c.unallocated_at_100() is None, c.unallocated_at_100() or 0.0))
    for c in ranked:
        r = ref.get(policy_key(c.policy))
        rows.append(
            f'<tr data-policy="{escape(c.policy)}"><td>{escape(c.policy)}</td>'
            f'<td class="num">{_num(c.unallocated_at_100())}</td>'
            f'<td class="num">{_num(r.unallocated_at_100() if r else None)}</td></tr>'
        )
    for c in reference:
        if policy_key(c.policy) not in mine:
            rows.append(
                f'<tr class="muted"><td>{escape(c.policy)} (published only)</td><td class="num">–</td>'
                f'<td class="num">{_num(c.unallocated_at_100())}</td></tr>'
            )
    if not reference:  # no published column to compare with: drop it
        rows = [r.rsplit("<td", 1)[0] + "</tr>" for r in rows]
    ref_head = "<th>published</th>" if reference else ""
    return (
        '<table class="results"><thead><tr><th>policy</th><th>unallocated GPU % at arrived = 100%</th>'
        f"{ref_head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render_replay_report(
    curves: Iterable[Mapping[str, Any]],
    *,
    title: str = "Tessera trace replay",
    subtitle: str = "",
    reference: Iterable[Mapping[str, Any]] | list[ReplayCurve] = (),
    view: DashboardView | None = None,
) -> str:
    """One self-contained HTML page.

    `curves`: what `tessera replay` measured, a list of
    {policy, curve: [{arrived_pct, allocated_pct}], unallocated_pct_at_100} (bad entries are skipped and
    listed on the page). `reference`: published curves to draw dashed (see `load_reference_curves`).
    `view`: the cluster at the end of the replay, drawn below with the dashboard's panels.
    """
    mine, errors = parse_curves(curves)
    ref_list = list(reference)
    if ref_list and all(isinstance(r, ReplayCurve) for r in ref_list):
        ref = [r for r in ref_list if isinstance(r, ReplayCurve)]
    else:
        ref, ref_errors = parse_curves([r for r in ref_list if isinstance(r, Mapping)])
        errors += ref_errors
    series = _series(mine, ref)
    x_hi = max((p.arrived_pct for c in [*mine, *ref] for p in c.curve), default=100.0)
    marker = [(100.0, "arrived = capacity")]
    full = line_chart(
        series, x_label="arrived GPU demand (% of capacity)", y_label="GPUs unallocated (% of capacity)",
        x_max=max(x_hi, 100.0), y_max=100, v_markers=marker, width=700,
        title="unallocated GPUs vs arrived demand",
    )  # fmt: skip
    zoom_lo = 70.0
    tail = [y for s in series for x, y in s.points if x >= zoom_lo]
    y_hi = min(100.0, (max(tail, default=25.0) // 5) * 5 + 5)
    zoom = line_chart(
        series, x_label="arrived GPU demand (% of capacity)", y_label="GPUs unallocated (%)",
        x_min=zoom_lo, x_max=max(x_hi, 100.0), y_min=0, y_max=y_hi, v_markers=marker, x_step=10,
        width=700, title="unallocated GPUs vs arrived demand, the tail",
    )  # fmt: skip
    body = [
        '<section id="results"><h2>Results</h2><p class="muted">Pods arrive one by one and never leave; a pod '
        "that fits nowhere fails. The lower the unallocated share once the demand that arrived equals the "
        "cluster's capacity, the less the policy fragmented the GPUs.</p>",
        _results_table(mine, ref),
        "</section>",
        f'<section id="curves"><h2>Unallocated GPUs as demand arrives</h2><p class="muted">What the table '
        "reports, at every point of the replay: the share of GPU capacity left unallocated. It falls as pods "
        "arrive; where a policy's curve stays high past 100% arrived, fragments are stranding GPUs.</p>"
        f'{legend(series)}<div class="charts">{full}{zoom}</div></section>',
    ]
    if errors:
        items = "".join(f"<li>{escape(e)}</li>" for e in errors[:50])
        body.append(
            f'<section id="warnings"><h2>Skipped input</h2><ul class="warnings">{items}</ul></section>'
        )
    nav = [("results", "Results"), ("curves", "Curves")]
    if view is not None:
        body.append('<h2 id="cluster">Cluster at the end of the replay</h2>')
        body.append(dashboard_body(view))
        nav += [("map", "GPU map"), ("queues", "Queues"), ("pending", "Pending")]
    return page(
        title=title,
        subtitle=subtitle or f"{len(mine)} polic{'y' if len(mine) == 1 else 'ies'} replayed",
        nav=nav,
        body="".join(body),
        generated=view.generated_at if view else datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
