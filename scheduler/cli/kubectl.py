"""`kubectl-tessera`: Tessera as a kubectl plugin (`kubectl tessera nodes|queues|why POD|doctor`).

kubectl runs any `kubectl-<name>` on the PATH as `kubectl <name>`; the commands are those of `tessera`
that read a cluster, with kubectl's KUBECONFIG and current context.
"""

from __future__ import annotations

from scheduler.api.cli import VersionOption, new_app, run
from scheduler.cli import doctor, nodes, queues, why

app = new_app("Tessera for kubectl: GPUs, queues, why a pod waits, and a health check.", no_args_is_help=True)


@app.callback()
def _root(version: VersionOption = False) -> None:
    """Tessera for kubectl: GPUs, queues, why a pod waits, and a health check."""


for module in (nodes, queues, why, doctor):
    module.register(app)


def main() -> None:
    run(app, "kubectl tessera")


if __name__ == "__main__":
    main()
