"""Where the control-plane binaries are: `KUBEBUILDER_ASSETS`, or the folder the build script fills.

The folder is in envtest layout (one folder holding `etcd`, `kube-apiserver`, ...). The build script
(`scripts/build_control_plane.sh`) prints it as its last line; this module finds it without running it
when it is already complete, and runs it (with its progress on stderr) when asked to build.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
# envtest's own folders (setup-envtest) hold the first three; the sandbox and benchmarks need all five.
ENVTEST_BINARIES = ("etcd", "kube-apiserver", "kubectl")
ALL_BINARIES = (*ENVTEST_BINARIES, "kube-controller-manager", "kube-scheduler")

REPO_ROOT = Path(__file__).resolve().parents[2]
# What an installed package carries from outside its Python packages (setup.py copies it at build time):
# the build script with its Go modules, and the rendered manifests.
SHIPPED = Path(__file__).resolve().parent / "shipped"


def shipped(name: str, *, source: str) -> Path:
    """`name` under the installed package's shipped data, else `source` in the source checkout."""
    packaged = SHIPPED / name
    return packaged if packaged.exists() else REPO_ROOT / source


BUILD_SCRIPT = shipped("build_control_plane.sh", source="scripts/build_control_plane.sh")


class AssetsMissing(RuntimeError):
    """The control-plane binaries are not there (and could not be built)."""


def default_dir() -> Path:
    explicit = os.environ.get("TESSERA_CONTROL_PLANE_DIR")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tessera" / "control-plane" / f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}"


def missing(folder: Path, needed: tuple[str, ...] = ALL_BINARIES) -> list[str]:
    return [b for b in needed if not os.access(folder / b, os.X_OK)]


def find(needed: tuple[str, ...] = ALL_BINARIES) -> Path | None:
    """The first folder holding every binary in `needed`: `KUBEBUILDER_ASSETS`, then the build's folder."""
    candidates = [Path(p) for p in (os.environ.get("KUBEBUILDER_ASSETS"),) if p] + [default_dir()]
    for folder in candidates:
        if not missing(folder, needed):
            return folder
    return None


def build() -> Path:
    """Run the build script (cached: seconds when up to date) and return its folder."""
    if not BUILD_SCRIPT.exists():
        raise AssetsMissing(f"{BUILD_SCRIPT} is not there (the build script ships with the source tree)")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise AssetsMissing(f"{BUILD_SCRIPT.name} failed (exit {proc.returncode}); see its output above")
    return Path(lines[-1])


def require(needed: tuple[str, ...] = ALL_BINARIES, *, build_if_missing: bool = False) -> Path:
    folder = find(needed)
    if folder is None and build_if_missing:
        folder = build()
    if folder is None or missing(folder, needed):
        where = os.environ.get("KUBEBUILDER_ASSETS") or str(default_dir())
        raise AssetsMissing(
            f"control-plane binaries not found in {where} (missing {', '.join(missing(Path(where), needed))}); "
            f"run scripts/build_control_plane.sh (needs Go) or set KUBEBUILDER_ASSETS"
        )
    return folder
