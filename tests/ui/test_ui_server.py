"""/ui over HTTP: the handler any server can mount, and the small threaded server."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.request
from http.client import HTTPResponse

import pytest

from scheduler.ui.server import serve_ui, ui_response
from scheduler.ui.view import DashboardView
from tests.ui.scenario import report_for, small_cluster


def _no_redirect() -> urllib.request.OpenerDirector:
    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    return urllib.request.build_opener(Keep)


def get(url: str, method: str = "GET") -> HTTPResponse:
    req = urllib.request.Request(url, method=method)
    try:
        resp: HTTPResponse = _no_redirect().open(req, timeout=10)
    except urllib.error.HTTPError as err:
        return err  # type: ignore[return-value]
    return resp


def test_ui_response_routes() -> None:
    _, sched = small_cluster()

    def source() -> DashboardView:
        from scheduler.ui import build_view

        return build_view(sched)

    assert ui_response("/metrics", source) is None
    assert ui_response("/uix", source) is None
    page = ui_response("/ui", source)
    assert page is not None and page.status == 200 and page.content_type.startswith("text/html")
    assert b'data-pod="team-a/half"' in page.body
    folded = ui_response("/ui?fold=on", source)
    assert folded is not None and b"nodes shown as" in folded.body
    data = ui_response("/ui/view.json", source)
    assert data is not None and json.loads(data.body)["totals"]["allocated_milli"] == 2750
    missing = ui_response("/ui/admin", source)
    assert missing is not None and missing.status == 404
    bad = ui_response("/ui?fold=maybe", source)
    assert bad is not None and bad.status == 400 and b"fold must be" in bad.body

    def broken() -> DashboardView:
        raise KeyError("node-7")

    err = ui_response("/ui", broken)
    assert err is not None and err.status == 500 and b"KeyError" in err.body


def test_server_serves_the_dashboard_locked_down() -> None:
    _, sched = small_cluster()
    with serve_ui(sched, "127.0.0.1", 0, reports=lambda: [report_for("a100-0", 4, used_mib=9000)]) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/ui")
        resp = get(srv.url)
        assert resp.status == 200
        body = resp.read().decode()
        assert 'data-pod="team-b/quarter"' in body and "NVML" in body
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        script = re.search(r"<script>(.*?)</script>", body, re.S)
        assert script is not None
        digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp  # the page's own script is the only one allowed to run
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        head = get(srv.url, "HEAD")
        assert head.status == 200 and head.read() == b""
        root = get(srv.url.removesuffix("/ui") + "/")
        assert root.status == 302 and root.headers["Location"] == "/ui"
        assert get(srv.url.removesuffix("/ui") + "/secrets").status == 404
        assert get(srv.url, "POST").status == 405  # read-only: no other method is served
    with pytest.raises(OSError):
        get(srv.url)


@pytest.mark.parametrize("locked", [True, False])
def test_pages_stay_whole_while_the_loop_runs(locked: bool) -> None:
    """The scheduling loop keeps changing the cache while pages are built from it in other threads."""
    import threading

    from scheduler.api.keys import GPU_FRACTION
    from tests.framework.helpers import pod

    sim, sched = small_cluster()
    lock = threading.Lock()
    stop = threading.Event()

    def loop() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            sim.submit_pod(
                pod(f"churn-{i}", "team-a", arrival_s=0, duration_s=1, annotations={GPU_FRACTION: "0.1"})
            )
            with lock:
                sim.advance(sim.now_s + 1)
                sched.run_cycle()

    worker = threading.Thread(target=loop, daemon=True)
    with serve_ui(sched, "127.0.0.1", 0, lock=lock if locked else None) as srv:
        worker.start()
        try:
            statuses = [get(srv.url).status for _ in range(15)]
        finally:
            stop.set()
            worker.join(timeout=10)
    assert statuses == [200] * 15
