"""`tessera`: simulate, replay traces, benchmark, inspect and check a cluster."""

from __future__ import annotations

import logging
import os

from scheduler.api.cli import VersionOption, new_app, run
from scheduler.cli import bench, doctor, nodes, queues, replay, sandbox, simulate, why

app = new_app(
    "Tessera: a GPU-sharing batch scheduler for Kubernetes (fractional GPUs, gangs, fair-share queues).",
    name="tessera",
    no_args_is_help=True,
)


@app.callback()
def _root(version: VersionOption = False) -> None:
    """Tessera: a GPU-sharing batch scheduler for Kubernetes (fractional GPUs, gangs, fair-share queues).

    Try `tessera simulate` first: the real scheduler on a simulated cluster, no Kubernetes needed.
    """


for module in (simulate, replay, bench, nodes, queues, why, doctor, sandbox):
    module.register(app)


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("TESSERA_LOG_LEVEL", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
    )
    run(app, "tessera")


if __name__ == "__main__":
    main()
