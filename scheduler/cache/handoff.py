"""Pods bound and waiting for the device plugin's `Allocate`: at most one per node (DESIGN.md step 3).

The kubelet does not tell the device plugin which pod it admits; the plugin finds it among the pods bound
to its node that wait for it. The scheduler keeps that choice easy: at most one of its pods per node is
bound and not yet allocated for a resource Tessera's device plugin serves, and the next such pod goes to the
best other node instead of waiting behind it (`Session.excluded` masks the nodes listed here for it; the
members of one job placed together may share a node, the plugin then asks the kubelet which one it admits),
unless every other place would start an unused GPU while one in use there can take it: then it queues
there, its place reserved and nothing bound until the pod waiting is allocated (`Session.fill_first`).

Known from the pods' state in the cache, nothing else: a pod of ours that asks for GPUs Tessera's plugin
serves there (a fraction always; whole GPUs where the plugin serves them too, `HandoffRule.whole_gpus`, on
a node that runs it: it advertises `tessera.dev/gpu-slice`), placed on its node (the ledger holds it: bound
by us, the bind in flight or answered, or seen bound from the watch), still Pending, not being deleted and
not marked `tessera.dev/gpu-allocated` yet. The plugin writes that mark once the kubelet holds the pod's
devices; a pod that runs, ends or goes is past `Allocate` whatever the mark says. The simulated cluster has
no device plugin (no rule, nothing waits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.cache.ledger import HoldKind, Ledger
from scheduler.model.types import NodeInfo, PodInfo, PodPhase

WAITING_PHASES = (PodPhase.PENDING, PodPhase.BOUND)


@dataclass(frozen=True)
class HandoffRule:
    """Which pods wait for Tessera's device plugin after their bind."""

    whole_gpus: bool = (
        True  # Tessera's plugin serves whole GPUs too (the chart's devicePlugin.wholeGPUResource)
    )

    def served(self, pod: PodInfo, node: NodeInfo | None) -> bool:
        """Whether the kubelet asks Tessera's device plugin for this pod's GPUs on `node`."""
        if not pod.ours or pod.error or pod.request.kind == "none":
            return False
        if pod.request.is_fractional:
            return True
        return self.whole_gpus and node is not None and node.gpu_plugin


class Handoff:
    """The pods waiting for `Allocate`, by uid, with the node row each waits on."""

    def __init__(self, ledger: Ledger, rule: HandoffRule | None) -> None:
        self.ledger = ledger
        self.rule = rule
        self.waiting: dict[str, int] = {}  # pod uid -> node row
        self.version = 0  # bumped on every change
        self._count: dict[int, int] = {}  # row -> pods waiting there
        self._mask: Any = None  # bool[C] rows with a pod waiting, in the state's array namespace (lazily)

    def refresh(self, pod: PodInfo | None, uid: str | None = None) -> None:
        """Look again at pod `uid` (`pod`: as the cache knows it now, None when it is gone)."""
        if self.rule is None:
            return
        key = pod.uid if pod is not None else uid
        if key is None:
            return
        row = self._waits_on(pod) if pod is not None else None
        old = self.waiting.get(key)
        if old == row:
            return
        if old is not None:
            del self.waiting[key]
            self._count[old] -= 1
            if not self._count[old]:
                del self._count[old]
                self._set(old, False)
        if row is not None:
            self.waiting[key] = row
            self._count[row] = self._count.get(row, 0) + 1
            if self._count[row] == 1:
                self._set(row, True)
        self.version += 1

    def _set(self, row: int, value: bool) -> None:
        if self._mask is not None and row < self._mask.shape[0]:
            self._mask[row] = value

    def mask(self) -> Any:
        """bool[C]: rows where a pod waits (kept current; read it, do not keep it). None when none does."""
        if not self._count:
            return None
        state = self.ledger.state
        if self._mask is None or self._mask.shape[0] != state.capacity:
            xp = state.xp
            self._mask = xp.zeros((state.capacity,), dtype=xp.bool)
            for row in self._count:
                self._mask[row] = True
        return self._mask

    def _waits_on(self, pod: PodInfo) -> int | None:
        assert self.rule is not None
        if pod.phase not in WAITING_PHASES or pod.terminating or pod.allocated:  # (a running pod: most)
            return None
        held = self.ledger.pods.get(pod.uid)
        if held is None or held.kind not in (HoldKind.BOUND, HoldKind.ASSUMED):
            return None
        row = held.placement.node
        return row if self.rule.served(pod, self.ledger.state.nodes[row]) else None

    def rows(self) -> dict[int, str]:
        """Node rows with a pod waiting, and one such pod's uid each."""
        return {row: uid for uid, row in self.waiting.items()}

    def forget_row(self, row: int) -> None:
        """The node is gone: nothing waits on it any more."""
        for uid in [uid for uid, r in self.waiting.items() if r == row]:
            self.refresh(None, uid)
