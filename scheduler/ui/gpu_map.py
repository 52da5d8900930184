"""The cluster GPU map: a row per node (or per group of identical nodes), a cell per GPU, each cell
split by the fractions placed on it and coloured by queue. Details travel as one JSON blob that the
page's script reads on click, so the markup stays small at 1,000+ nodes."""

from __future__ import annotations

from html import escape
from typing import Any

from scheduler.ui.aggregate import AGGREGATE_ABOVE, NodeGroup, group_nodes
from scheduler.ui.fmt import attr, gpus, mib, script_json
from scheduler.ui.view import DashboardView, GPUCell, Measured, NodeRow

FREE_COLOR = "#e4e7eb"


def _measured_json(m: Measured | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "used": m.memory_used_mib, "total": m.memory_total_mib, "util": m.utilization_pct,
        "temp": m.temperature_c, "power": m.power_w, "at": m.observed_at,
        "pods": [[p.pod, p.used_mib, p.limit_mib, p.over_limit] for p in m.pods],
    }  # fmt: skip


def _cell_json(g: GPUCell) -> list[Any]:
    return [
        g.index, g.uuid, g.total_mib, g.free_milli, g.healthy, g.health_reason,
        [[s.pod, s.queue, s.milli, s.mib, s.gang, s.protected] for s in g.slices], _measured_json(g.measured),
    ]  # fmt: skip


def map_data(view: DashboardView, groups: list[NodeGroup]) -> dict[str, Any]:
    return {
        "groups": [
            {
                "members": list(g.members),
                "pool": g.rep.pool,
                "model": g.rep.model,
                "domains": [f"{t}: {path}" for t, path in g.rep.domains],
            }
            for g in groups
        ],
        "nodes": {n.name: [_cell_json(c) for c in n.gpus] for n in view.nodes},
        "colors": view.queue_colors,
    }


def _cell(g: GPUCell, group: int, count: int, colors: dict[str, str]) -> str:
    times = f" × {count} nodes" if count > 1 else ""
    parts = []
    for s in g.slices:
        who = s.pod if count == 1 else s.queue
        tip = f"{who} · queue {s.queue} · {gpus(s.milli)} GPU · {mib(s.mib)}{times}"
        if s.protected and count == 1:
            tip += f" · {s.protected}"
        parts.append(
            f'<span class="slice" style="width:{s.milli / 10:g}%;background:{attr(colors.get(s.queue, "#999"))}" '
            f'data-pod="{attr(s.pod if count == 1 else "")}" data-queue="{attr(s.queue)}" '
            f'data-milli="{s.milli}" title="{attr(tip)}"></span>'
        )
    if g.measured is not None and g.measured.memory_total_mib:
        pct = min(100.0, 100.0 * g.measured.memory_used_mib / g.measured.memory_total_mib)
        util = f", {g.measured.utilization_pct:g}% util" if g.measured.utilization_pct is not None else ""
        tip = f"NVML: {mib(g.measured.memory_used_mib)} used of {mib(g.measured.memory_total_mib)}{util}"
        parts.append(f'<span class="meas" style="width:{pct:.1f}%" title="{attr(tip)}"></span>')
    state = "" if g.healthy else " unhealthy"
    tip = f"GPU {g.index}: {gpus(g.used_milli)} of 1 GPU assigned, {gpus(g.free_milli)} free" + (
        "" if g.healthy else f" · UNHEALTHY{': ' + g.health_reason if g.health_reason else ''}"
    )
    return (
        f'<div class="gpu{state}" tabindex="0" data-g="{group}" data-i="{g.index}" '
        f'data-free="{g.free_milli}" title="{attr(tip)}">{"".join(parts)}</div>'
    )


def _row(i: int, grp: NodeGroup, colors: dict[str, str], after: NodeRow | None) -> str:
    n = grp.rep
    queues = sorted({s.queue for c in n.gpus for s in c.slices})
    used = sum(c.used_milli for c in n.gpus)
    name = escape(n.name) if grp.count == 1 else f"{escape(n.name)} <span class=count>+{grp.count - 1}</span>"
    names_tip = ", ".join(grp.members[:40]) + (" …" if grp.count > 40 else "")
    cordon = (
        ""
        if n.schedulable
        else ' <span class="cordon" title="unschedulable: no new pods land here">cordoned</span>'
    )
    cells = "".join(_cell(c, i, grp.count, colors) for c in n.gpus) or '<span class="nogpu">no GPUs</span>'
    # The node's topology domain under its model; a row starting a new outermost domain draws a rule.
    top = n.domain.split("/", 1)[0]
    starts = bool(n.domain) and (after is None or after.domain.split("/", 1)[0] != top)
    where = "; ".join(f"topology {t}: {path}" for t, path in n.domains)
    domain = f'<span class="ndomain" title="{attr(where)}">{escape(n.domain)}</span>' if n.domain else ""
    return (
        f'<div class="node{" dstart" if starts else ""}" data-g="{i}" data-pool="{attr(n.pool)}" '
        f'data-model="{attr(n.model)}" data-domain="{attr(n.domain)}" '
        f'data-queues="{attr(" ".join(queues))}" data-count="{grp.count}">'
        f'<div class="nname" title="{attr(names_tip)}">{name}{cordon}</div>'
        f'<div class="nmodel" title="pool {attr(n.pool)}">{escape(n.model)}{domain}</div>'
        f'<div class="gpus">{cells}</div>'
        f'<div class="nsum">{gpus(used, 2)}/{len(n.gpus)}</div></div>'
    )


def _options(values: list[str], label: str, ident: str) -> str:
    opts = "".join(f'<option value="{attr(v)}">{escape(v)}</option>' for v in values)
    return f'<label>{escape(label)} <select id="{ident}"><option value="">all</option>{opts}</select></label>'


def legend(view: DashboardView) -> str:
    used = {s.queue for n in view.nodes for c in n.gpus for s in c.slices}
    items = [
        f'<span class="legend-item"><span class="swatch" style="background:{attr(c)}"></span>{escape(q)}</span>'
        for q, c in view.queue_colors.items()
        if q in used
    ]
    items.append(
        f'<span class="legend-item"><span class="swatch" style="background:{FREE_COLOR}"></span>free</span>'
    )
    items.append('<span class="legend-item"><span class="swatch bad"></span>unhealthy GPU</span>')
    if any(c.measured for n in view.nodes for c in n.gpus):
        items.append('<span class="legend-item"><span class="swatch meas"></span>NVML memory used</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def render_gpu_map(view: DashboardView, *, aggregate: bool | None = None) -> str:
    """The map section. `aggregate`: fold identical nodes (default: when there are many nodes)."""
    fold = len(view.nodes) > AGGREGATE_ABOVE if aggregate is None else aggregate
    groups = group_nodes(view.nodes, aggregate=fold)
    colors = view.queue_colors
    rows = "".join(_row(i, g, colors, groups[i - 1].rep if i else None) for i, g in enumerate(groups))
    pools = sorted({n.pool for n in view.nodes})
    # Every domain at every level (each prefix of a path): choosing one shows the nodes inside it.
    domains = sorted({"/".join(parts[: k + 1]) for n in view.nodes if n.domain
                      for parts in [n.domain.split("/")] for k in range(len(parts))})  # fmt: skip
    domain_filter = _options(domains, "domain", "f-domain") if domains else ""
    models = sorted({n.model for n in view.nodes})
    queues = [q for q in colors if any(s.queue == q for n in view.nodes for c in n.gpus for s in c.slices)]
    folded = (
        f'<p class="note">{len(view.nodes)} nodes shown as {len(groups)} rows: nodes that look the same '
        f"(pool, model, and the same queues and sizes on every GPU) share a row; "
        f"<span class=count>+N</span> counts the others.</p>"
        if fold
        else ""
    )
    return f"""
<section id="map"><h2>GPU map</h2>
<div class="filters">{_options(pools, "pool", "f-pool")}{_options(models, "model", "f-model")}
{domain_filter}{_options(queues, "queue", "f-queue")}
<label>find <input id="f-text" type="search" placeholder="node or pod name"></label>
<label>rows per page <select id="f-page-size"><option>50</option><option selected>100</option>
<option>250</option><option value="0">all</option></select></label>
<span id="f-status" class="muted"></span></div>
{legend(view)}{folded}
<div class="map-wrap"><div id="gpu-map" class="map">{rows}</div>
<aside id="detail" class="detail"><p class="muted">Click a GPU to see its pods, their share, and what NVML
measured.</p></aside></div>
<div class="pager"><button id="p-prev" type="button">‹ prev</button><span id="p-info"></span>
<button id="p-next" type="button">next ›</button></div>
<script type="application/json" id="map-data">{script_json(map_data(view, groups))}</script>
</section>"""
