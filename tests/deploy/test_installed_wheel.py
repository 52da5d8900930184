"""What `pip install .` gives a user runs from its own files, not from a source tree.

Every other test imports the checkout, where files outside the Python packages (the rendered chart, the
control-plane build script and its Go modules, KAI's CRDs for `sandbox up --kai-compat`, the dashboard's
page) sit where the code looks first; an installed package has only what the wheel shipped. Here a wheel is
built from a copy of the checkout, installed into a fresh virtualenv (its dependencies borrowed from this
one, so nothing is downloaded), and run from a folder that is not the repository:

- every shipped asset the package reads is found inside the installed package and loads
  (`tessera sandbox`'s manifests, KAI stand-ins, build script and Go modules);
- `tessera bench e2e` at a tiny size binds its pods through the real API server (it applies the chart's
  CRDs and RBAC from the shipped manifests);
- `tessera simulate --report` writes the dashboard page (its HTML, CSS and JS are package data).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.controlplane.fixtures import _assets

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
# Not part of what a user builds from: the test suite, caches, this checkout's own builds and virtualenv.
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv", "venv", "tests", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "out"
)

# Run inside the installed package: where each asset was found, and that it loads.
PROBE = textwrap.dedent(
    """
    import json, scheduler
    from pathlib import Path
    from scheduler.sandbox import assets, manifests
    package = Path(scheduler.__file__).parent
    found = {
        "package": str(package),
        "build_script": str(assets.BUILD_SCRIPT),
        "go_modules": [str(p) for p in sorted((assets.SHIPPED / "control_plane").rglob("go.mod"))],
        "manifests": str(manifests.manifest_dir()),
        "kai_crds": str(manifests.KAI_CRDS),
        "kai_queues": str(manifests.KAI_QUEUES),
        "loaded": {
            "crds": len(manifests.crds()),
            "chart": len(manifests.chart_objects()),
            "chart_kai": len(manifests.chart_objects(kai_compat=True)),
            "kai_crds": len(manifests.kai_crds()),
            "kai_queues": len(manifests.kai_queues()),
        },
    }
    print(json.dumps(found))
    """
)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.timeout(600)
def test_the_installed_wheel_runs_from_its_own_files(tmp_path: Path) -> None:
    control_plane = _assets()
    source, dist, venv, elsewhere = (tmp_path / d for d in ("source", "dist", "venv", "elsewhere"))
    shutil.copytree(ROOT, source, ignore=LEFT_OUT, symlinks=True)
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # The wheel, as `pip install .` builds it (setuptools of this environment: no download).
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
          str(source)], tmp_path, env)  # fmt: skip
    (wheel,) = dist.glob("tessera-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          str(wheel)], tmp_path, env)  # fmt: skip
    # Its dependencies from this environment's site-packages, added after its own (a directory named in a
    # .pth file joins the path, but its own .pth files, this checkout's editable install, are not read).
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        elsewhere, env).strip())  # fmt: skip
    (purelib / "borrowed-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {**env, "KUBEBUILDER_ASSETS": str(control_plane), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"}

    found = json.loads(_run([str(python), "-c", PROBE], elsewhere, env))
    package = Path(found["package"])
    assert package.is_relative_to(purelib), f"imported {package}, not the installed package"
    shipped = package / "sandbox" / "shipped"
    for key in ("build_script", "manifests"):
        assert Path(found[key]).is_relative_to(shipped), (key, found[key])
    # Every Go module the build script builds from ships (the control plane's, fakecri's...).
    in_checkout = {p.parent.name for p in (ROOT / "scripts" / "control_plane").glob("*/go.mod")}
    assert {Path(p).parent.name for p in found["go_modules"]} == in_checkout
    assert all(Path(found[k]).is_relative_to(package) for k in ("kai_crds", "kai_queues"))
    loaded = found["loaded"]
    assert loaded["crds"] == 4 and loaded["chart"] == loaded["chart_kai"] > 10
    assert (loaded["kai_crds"], loaded["kai_queues"]) == (2, 2)

    bench = _run(["tessera", "bench", "e2e", "--nodes", "2", "--gpus-per-node", "2", "--pods", "4",
                  "--timeout", "120", "-o", "json"], elsewhere, env)  # fmt: skip
    result = json.loads(bench[bench.index("{") :])
    assert result["bound"] == 4 and result["scheduler"] == "tessera"

    _run(["tessera", "simulate", "--until", "1m", "--report", "report.html"], elsewhere, env)
    page = (elsewhere / "report.html").read_text()
    assert "<style>" in page and "<script>" in page and "$style" not in page
