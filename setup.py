"""Build hook (everything else is in pyproject.toml): an installed package needs, at run time, files that
live outside its Python packages. `tessera sandbox` applies the chart's rendered manifests and builds the
control plane with the build script and its Go modules; `build_py` copies them into the package as
`scheduler/sandbox/shipped/` (found there by `scheduler.sandbox.assets.shipped`). A source checkout or an
editable install reads them from where they are.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# source file or folder (relative to the repository) -> destination (relative to scheduler/sandbox/shipped)
SHIPPED = {
    "deploy/manifests": "manifests",
    "scripts/build_control_plane.sh": "build_control_plane.sh",
    "scripts/control_plane": "control_plane",
}


class BuildWithShippedData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the files from the checkout
        target = Path(self.build_lib) / "scheduler" / "sandbox" / "shipped"
        for src, dst in SHIPPED.items():
            out = target / dst
            out.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, out, dirs_exist_ok=True)
            else:
                shutil.copy2(ROOT / src, out)


setup(cmdclass={"build_py": BuildWithShippedData})
