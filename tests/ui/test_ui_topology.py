"""Topology domains on the GPU map: each node row names its domain, rows of a domain sit together (a rule
where the outermost domain changes), identical nodes fold only within a domain, and the domain filter
(any level: a zone, a rack, an NVLink domain) narrows the map in the browser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.ui import build_view, render_dashboard
from scheduler.ui.aggregate import group_nodes
from scheduler.ui.server import UIServer, serve_ui
from tests.topology.util import Gang, gpu_node, topology, world
from tests.ui import browser

RACK, CLIQUE = "example.com/rack", "nvidia.com/gpu.clique"


def topo_world() -> Any:
    nodes = [
        gpu_node(f"gpu-{r}{i}", 4, {"topology.kubernetes.io/zone": "zone-1", RACK: f"rack-{r}", CLIQUE: f"{r}{i // 2}"})
        for r in "ba" for i in range(4)
    ]  # fmt: skip
    nodes.append(gpu_node("cpu-0", 0, {}))  # outside the topology
    levels = ("topology.kubernetes.io/zone", RACK, CLIQUE)
    return world([topology("dc", *levels)], nodes, Gang(pods=4, required=RACK, preferred=CLIQUE))


def test_rows_carry_and_are_ordered_by_their_domain() -> None:
    view = build_view(topo_world().sched)
    rows = [(n.name, n.domain) for n in view.nodes]
    assert rows[0] == ("cpu-0", "")  # outside every topology: first
    assert rows[1:3] == [("gpu-a0", "zone-1/rack-a/a0"), ("gpu-a1", "zone-1/rack-a/a0")]
    assert [n.domain for n in view.nodes][1:] == sorted(n.domain for n in view.nodes[1:])
    assert view.nodes[1].domains == (("dc", "zone-1/rack-a/a0"),)
    # Nodes that look alike still fold only inside one domain.
    groups = group_nodes(view.nodes, aggregate=True)
    assert all(len({n.domain for n in view.nodes if n.name in g.members}) == 1 for g in groups)


def test_the_map_shows_domains_and_offers_them_as_a_filter() -> None:
    html = render_dashboard(build_view(topo_world().sched))
    assert 'data-domain="zone-1/rack-b/b1"' in html and '<span class="ndomain"' in html
    for option in ("zone-1", "zone-1/rack-a", "zone-1/rack-b/b0"):
        assert f'<option value="{option}">' in html
    assert html.count('class="node dstart"') == 1  # one zone: one rule, where the topology starts


@pytest.fixture(scope="module")
def served() -> Iterator[UIServer]:
    with serve_ui(topo_world().sched, "127.0.0.1", 0) as srv:
        yield srv


@pytest.mark.skipif(
    browser.missing() is not None, reason=f"headless browser unavailable: {browser.missing()}"
)
def test_the_domain_filter_narrows_the_map(served: UIServer) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with browser.chromium() as page:
        page.get(served.url)

        def visible() -> list[str]:
            return [
                e.text.split()[0] for e in page.find_elements(By.CSS_SELECTOR, ".node:not([hidden]) .nname")
            ]

        assert len(visible()) == 9
        Select(page.find_element(By.ID, "f-domain")).select_by_value("zone-1/rack-b")
        assert visible() == ["gpu-b0", "gpu-b1", "gpu-b2", "gpu-b3"]
        Select(page.find_element(By.ID, "f-domain")).select_by_value("zone-1/rack-b/b1")
        assert visible() == ["gpu-b2", "gpu-b3"]
        page.find_element(By.CSS_SELECTOR, ".node:not([hidden]) .gpu").click()
        assert "topology dc: zone-1/rack-b/b1" in page.find_element(By.ID, "detail").text
        assert browser.console_errors(page) == []
