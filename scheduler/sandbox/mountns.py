"""A private mount namespace per real kubelet, so that several kubelets share one machine and leave it as
they found it.

A kubelet assumes it owns the machine: its device-plugin socket is fixed at
`/var/lib/kubelet/device-plugins/kubelet.sock` whatever `--root-dir` says, it creates `/var/log/containers`,
bind-mounts its root dir shared and mounts tmpfs for projected volumes, and at start it writes six kernel
tunables (`vm.overcommit_memory=1`, `kernel.panic=10`, ...). Each sandbox kubelet therefore runs under
`unshare -m --propagation private` (util-linux) with, in that namespace only:

- an empty tmpfs on `/var/lib`, and the node's own `device-plugins/` bound on
  `/var/lib/kubelet/device-plugins` (the device plugin, outside, serves `--plugin-dir=<node>/device-plugins`:
  Unix sockets work across the bind both ways);
- the node's `var-log/` bound on `/var/log`;
- each tunable's `/proc/sys` file bound from a copy in the node's `sysctl/` folder: the kubelet writes the
  copy, the host's value stays as it was;
- the working directory an empty folder (`kubelet-cwd/`).

Nothing propagates to the host, and every mount vanishes with the namespace when the kubelet exits. The
setup is a short `sh` script run by `unshare`, which then `exec`s the kubelet: the kubelet is the
namespace's one process, with the pid that was started.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

# What the kubelet's container manager writes at start (setupKernelTunables), as paths under /proc/sys.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)

# $1: the node's folder; the rest: the command to exec. `set -e`: a mount that fails stops the kubelet
# from starting rather than letting it write to the host.
_SETUP = """set -eu
node="$1"; shift
mount -t tmpfs -o mode=0755,size=64m tessera-var-lib /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$node/device-plugins" /var/lib/kubelet/device-plugins
mount --bind "$node/var-log" /var/log
for t in {tunables}; do
    copy="$node/sysctl/$(echo "$t" | tr / .)"
    cat "/proc/sys/$t" > "$copy"
    mount --bind "$copy" "/proc/sys/$t"
done
cd "$node/kubelet-cwd"
exec "$@"
"""


class NamespaceUnavailable(RuntimeError):
    """This machine cannot give a kubelet its own mount namespace; the message says why in one line."""


def prepare(node_dir: Path) -> None:
    """The node's folders the namespace binds (device-plugins/, var-log/, sysctl/, kubelet-cwd/)."""
    for sub in ("device-plugins", "var-log", "sysctl", "kubelet-cwd"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)


def wrap(node_dir: Path, argv: Sequence[str]) -> list[str]:
    """`argv` run in a private mount namespace set up for the node in `node_dir` (see the module doc)."""
    script = _SETUP.format(tunables=" ".join(KERNEL_TUNABLES))
    return ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script, "kubelet-ns",
            str(node_dir), *argv]  # fmt: skip


@functools.cache
def unavailable() -> str | None:
    """Why no private mount namespace can be made here (None when it can): not root, no `unshare`, or the
    kernel refuses (a container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return "real kubelets need root (a private mount namespace per kubelet); run as root or use --kubelet standin"
    for tool in ("unshare", "mount", "sh"):
        if shutil.which(tool) is None:
            return f"real kubelets need `{tool}` (util-linux) on PATH; or use --kubelet standin"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "--", "mount", "-t", "tmpfs", "probe", "/tmp"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        return f"no private mount namespace here ({why}); use --kubelet standin"
    return None


def require() -> None:
    reason = unavailable()
    if reason is not None:
        raise NamespaceUnavailable(reason)


def host_tunables() -> dict[str, str]:
    """The host's values of the tunables a kubelet would write (a test checks they never change)."""
    return {t: Path("/proc/sys", t).read_text().strip() for t in KERNEL_TUNABLES}


def tunables_seen_by(pid: int) -> dict[str, str]:
    """The tunables as the process `pid` sees them: inside a kubelet's namespace, its copies."""
    return {t: Path(f"/proc/{pid}/root/proc/sys", t).read_text().strip() for t in KERNEL_TUNABLES}


def mounts_of(pid: int | str = "self") -> list[str]:
    """The mount points of `pid`'s mount namespace (from /proc/<pid>/mountinfo)."""
    lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines]
