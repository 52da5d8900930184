"""End to end: the dashboard served on loopback from a simulated cluster, opened in headless Chromium.

Skipped (with the reason printed) only when Chromium, its driver or Selenium is not installed;
`scripts/install_browser.sh` installs the browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.keys import GPU_FRACTION
from scheduler.ui.replay_report import render_replay_report
from scheduler.ui.server import UIServer, serve_ui
from tests.framework.helpers import pod
from tests.ui import browser
from tests.ui.scenario import LONG, big_cluster, report_for, small_cluster

WHY = browser.missing()
if WHY:
    print(f"skipping the browser tests: {WHY}")
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"headless browser unavailable: {WHY}")


@pytest.fixture(scope="module")
def server() -> Iterator[UIServer]:
    _, sched = small_cluster()
    with serve_ui(sched, "127.0.0.1", 0, reports=lambda: [report_for("a100-0", 4, used_mib=18000)]) as srv:
        yield srv


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with browser.chromium() as d:
        yield d


@pytest.fixture
def page(driver: Any, server: UIServer) -> Iterator[Any]:
    driver.get(server.url)
    yield driver
    assert browser.console_errors(driver) == []


SLICE_GEOMETRY = """
const out = {};
document.querySelectorAll('.slice[data-pod]').forEach(s => {
  const cell = s.closest('.gpu').getBoundingClientRect();
  const r = s.getBoundingClientRect();
  if (s.dataset.pod) out[s.dataset.pod] = {
    frac: r.width / cell.width, left: (r.left - cell.left) / cell.width,
    color: getComputedStyle(s).backgroundColor, node: s.closest('.node').querySelector('.nname').textContent,
    gpu: Number(s.closest('.gpu').dataset.i)};
});
return out;
"""


def test_gpu_map_shows_the_fractions_of_known_pods(page: Any, tmp_path: Path) -> None:
    geo = page.execute_script(SLICE_GEOMETRY)
    half, quarter, whole = geo["team-a/half"], geo["team-b/quarter"], geo["team-a/whole2"]
    assert half["frac"] == pytest.approx(0.5, abs=0.02)
    assert quarter["frac"] == pytest.approx(0.25, abs=0.02)
    assert whole["frac"] == pytest.approx(1.0, abs=0.02)
    # both fractions on GPU 0 of a100-0, side by side; the last quarter stays free
    assert (half["node"], half["gpu"]) == (quarter["node"], quarter["gpu"]) == ("a100-0", 0)
    assert quarter["left"] == pytest.approx(0.5, abs=0.02)
    assert half["color"] == whole["color"] != quarter["color"]  # coloured by queue
    shot = tmp_path / "dashboard.png"
    browser.full_page_screenshot(page, str(shot))
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_clicking_a_gpu_shows_pods_and_nvml(page: Any) -> None:
    from selenium.webdriver.common.by import By

    page.find_element(By.CSS_SELECTOR, '.node[data-g="0"] .gpu[data-i="0"]').click()
    text = page.find_element(By.ID, "detail").text
    assert "a100-0 · GPU 0" in text
    assert "team-a/half" in text and "team-b/quarter" in text
    assert "team-a 0.5 20480" in text and "team-b 0.25 10240" in text  # shares in GPUs, not milli
    assert "0.75 of 1 GPU assigned, 0.25 free" in text
    assert "NVML: 17.6 GiB of 40.0 GiB used" in text and "87% util" in text


def test_filters_narrow_the_map(page: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def visible() -> list[str]:
        return [e.text for e in page.find_elements(By.CSS_SELECTOR, ".node:not([hidden]) .nname")]

    assert visible() == ["a100-0", "a100-1", "t4-0"]
    Select(page.find_element(By.ID, "f-queue")).select_by_value("team-b")
    assert visible() == ["a100-0"]
    dimmed = page.find_elements(By.CSS_SELECTOR, ".slice.dim")
    assert {e.get_attribute("data-queue") for e in dimmed} == {"team-a"}
    Select(page.find_element(By.ID, "f-queue")).select_by_value("")
    Select(page.find_element(By.ID, "f-model")).select_by_value("T4")
    assert visible() == ["t4-0"]
    Select(page.find_element(By.ID, "f-model")).select_by_value("")
    page.find_element(By.ID, "f-text").send_keys("quarter")
    assert visible() == ["a100-0"]
    assert "1 node match" in page.find_element(By.ID, "f-status").text


def test_queue_resource_tabs_and_pending(page: Any) -> None:
    from selenium.webdriver.common.by import By

    shown = [
        t.get_attribute("data-res")
        for t in page.find_elements(By.CSS_SELECTOR, "table.queues")
        if t.is_displayed()
    ]
    assert shown == ["gpu"]
    page.find_element(By.CSS_SELECTOR, 'input[name="q-res"][value="memory"]').click()
    shown = [
        t.get_attribute("data-res")
        for t in page.find_elements(By.CSS_SELECTOR, "table.queues")
        if t.is_displayed()
    ]
    assert shown == ["memory"]
    reasons = [e.get_attribute("data-reason") for e in page.find_elements(By.CSS_SELECTOR, "details.reason")]
    assert reasons == ["GangUnschedulable", "InvalidRequest", "Unschedulable"]


def test_the_page_refreshes_itself_and_keeps_the_users_view(driver: Any) -> None:
    """The served dashboard fetches itself again: new pods appear; filters, search, the chosen queue
    tab and the open GPU detail stay as the user left them. A saved report never refreshes."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tests.framework.helpers import run

    sim, sched = small_cluster()
    lock = threading.Lock()
    with serve_ui(sched, "127.0.0.1", 0, lock=lock) as srv:
        driver.get(srv.url)
        assert driver.find_element(By.ID, "live").is_displayed()
        Select(driver.find_element(By.ID, "f-model")).select_by_value("A100")
        driver.find_element(By.ID, "f-text").send_keys("a100-0")
        driver.find_element(By.CSS_SELECTOR, 'input[name="q-res"][value="cpu"]').click()
        driver.find_element(By.CSS_SELECTOR, '.node[data-g="0"] .gpu[data-i="1"]').click()
        with lock:  # the cluster moves on: a new pod lands on the node the user is looking at
            sim.submit_pod(
                pod("late", "team-a", arrival_s=0, duration_s=LONG, annotations={GPU_FRACTION: "0.5"})
            )
            run(sim, sched, cycles=2)
        driver.find_element(By.ID, "live-now").click()
        WebDriverWait(driver, 10).until(lambda d: "updated" in d.find_element(By.ID, "live-status").text)
        assert "team-a/late" in driver.page_source
        assert (
            Select(driver.find_element(By.ID, "f-model")).first_selected_option.get_attribute("value")
            == "A100"
        )
        assert driver.find_element(By.ID, "f-text").get_attribute("value") == "a100-0"
        visible = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".node:not([hidden]) .nname")]
        assert visible == ["a100-0"]
        shown = [
            t.get_attribute("data-res")
            for t in driver.find_elements(By.CSS_SELECTOR, "table.queues")
            if t.is_displayed()
        ]
        assert shown == ["cpu"]
        assert "a100-0 · GPU 1" in driver.find_element(By.ID, "detail").text
        assert browser.console_errors(driver) == []


def test_a_saved_report_never_refreshes(driver: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from scheduler.ui import build_view, render_dashboard

    _, sched = small_cluster()
    path = tmp_path / "report.html"
    path.write_text(render_dashboard(build_view(sched)))
    driver.get(path.as_uri())
    assert not driver.find_element(By.ID, "live").is_displayed()
    assert browser.console_errors(driver) == []


def test_1200_nodes_page_and_fold(driver: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with serve_ui(big_cluster(1200), "127.0.0.1", 0) as srv:
        driver.get(srv.url + "?fold=off")
        info = driver.find_element(By.ID, "p-info")
        assert info.text == "rows 1–100 of 1200 · page 1 of 12"
        assert len(driver.find_elements(By.CSS_SELECTOR, ".node:not([hidden])")) == 100
        driver.find_element(By.ID, "p-next").click()
        assert info.text.startswith("rows 101–200 of 1200")
        Select(driver.find_element(By.ID, "f-model")).select_by_value("T4")
        assert driver.find_element(By.ID, "f-status").text == "400 nodes match"
        assert browser.console_errors(driver) == []
        driver.get(srv.url)  # auto: folded
        rows = driver.find_elements(By.CSS_SELECTOR, ".node:not([hidden])")
        assert len(rows) < 20
        counts = sum(int(r.get_attribute("data-count")) for r in rows)
        assert counts == 1200
        rows[0].find_element(By.CSS_SELECTOR, ".gpu").click()
        assert "nodes alike" in driver.find_element(By.ID, "detail").text
        assert browser.console_errors(driver) == []


def test_replay_report_renders_without_errors(driver: Any, tmp_path: Path) -> None:
    pts = [{"arrived_pct": a, "allocated_pct": min(a, 93.0)} for a in range(0, 131, 5)]
    html = render_replay_report([{"policy": "fgd", "curve": pts, "unallocated_pct_at_100": 7.0}])
    path = tmp_path / "replay.html"
    path.write_text(html)
    driver.get(path.as_uri())
    widths = driver.execute_script(
        "return Array.from(document.querySelectorAll('polyline')).map(p => p.getBoundingClientRect().width)"
    )
    assert len(widths) == 2 and all(w > 100 for w in widths)
    assert browser.console_errors(driver) == []
