import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from node_agent.bench import run_bench
from node_agent.cli import app
from node_agent.http import make_server, parse_listen, serve_in_background
from tests.agent.nvml_driver import driver_present

from .conftest import Scene


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_http_endpoints(scene: Scene) -> None:
    agent = scene.agent()
    server = serve_in_background(make_server(agent, "127.0.0.1", 0))
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(base + "/healthz")[0] == 503  # no round yet
        assert get(base + "/report")[0] == 503
        agent.tick()
        status, _, body = get(base + "/healthz")
        assert (status, body) == (200, "ok\n")
        status, ctype, body = get(base + "/report")
        assert status == 200 and ctype == "application/json"
        assert [g["uuid"] for g in json.loads(body)["spec"]["gpus"]] == [d.uuid for d in scene.nvml.devices()]
        status, ctype, body = get(base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain") and "DCGM_FI_DEV_FB_USED{" in body
        assert get(base + "/nope")[0] == 404
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0.0.0.0:9400", ("0.0.0.0", 9400)), (":9400", ("0.0.0.0", 9400)), ("[::1]:80", ("::1", 80))],
)
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["9400", "host:", "host:port", "h:70000"])
def test_parse_listen_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(value)


def test_once_prints_one_report(tmp_path: Path, scene: Scene) -> None:
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump({"kind": "PodList", "items": [scene.pod_dict("p", [(1, 400, 0)])]}))
    result = CliRunner().invoke(
        app, ["--fake-gpus", "2xA100-40GB", "--once", "--node", "gpu-node-1", "--pods-file", str(pods_file)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kind"] == "GPUNodeReport" and report["metadata"]["name"] == "gpu-node-1"
    gpus = report["spec"]["gpus"]
    assert [g["model"] for g in gpus] == ["NVIDIA A100-40GB"] * 2
    assert gpus[1]["assignedMilli"] == 400 and gpus[1]["shares"][0]["memoryLimitMiB"] == 16384


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fake-gpus", "8xH100", "--once"], "error: bad GPU spec item '8xH100'"),
        (
            ["--fake-gpus", "1xT4-16GB", "--enforce", "nuke"],
            "--enforce: 'nuke' is not one of off, report, kill",
        ),
        (["--fake-gpus", "1xT4-16GB", "--listen", "nope", "--no-cluster"], "--listen expects HOST:PORT"),
        (["--fake-gpus", "1xT4-16GB", "--once", "--pods-file", "/nonexistent.yaml"], "cannot read pods file"),
    ],
)
def test_bad_arguments_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2  # the user's mistake
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: ") and message in result.stderr


@pytest.mark.skipif(driver_present(), reason="this machine has an NVIDIA driver")
def test_no_driver_exits_nonzero_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "node_agent", "--once", "--node", "n1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: NVML unavailable: NVML Shared Library Not Found")
    assert "--fake-gpus" in proc.stderr  # says how to run without a GPU
    assert len(proc.stderr.strip().splitlines()) == 1


def test_agent_process_serves_and_stops_on_sigterm() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "node_agent",
        "--fake-gpus",
        "2xT4-16GB",
        "--no-cluster",
        "--node",
        "n1",
        "--listen",
        f"127.0.0.1:{port}",
        "--interval",
        "0.2",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline:
            try:
                status = get(f"http://127.0.0.1:{port}/healthz")[0]
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200
        body = get(f"http://127.0.0.1:{port}/metrics")[2]
        assert body.count("DCGM_FI_DEV_GPU_TEMP{") == 2
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_bench_measures_the_loop() -> None:
    result = run_bench("2xH100-80GB", seconds=1.0, interval=0.2, procs_per_gpu=2)
    assert result.gpus == 2 and result.processes == 4
    assert 4 <= result.rounds <= 6 and result.publishes >= 1
    assert 0 < result.cpu_percent_of_one_core < 100 and result.peak_rss_mib > 10
    assert json.loads(result.to_json())["rounds"] == result.rounds
