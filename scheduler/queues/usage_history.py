"""Queues' recent usage for time-based fair share (KAI Scheduler's time-based fairshare; docs/fairshare.md).

Every cycle the scheduler tells the history what each queue holds and what the cluster has; between two
cycles those amounts are integrated over time into buckets of `UsageParams.bucket_s` seconds. A queue's
usage is then, as KAI computes it from Prometheus,

    U'_q = sum_b w_b * A_q,b / sum_b w_b * C_b,      w_b = 0.5 ** ((now - t_b) / halfLife)

over the buckets b of the sliding window (`windowSize`), where A_q,b is what queue q held during bucket b
(resource-seconds), C_b the cluster's capacity during it, t_b the middle of the bucket's recorded span
(no half-life: w_b = 1). A bucket the window's start cuts through counts in proportion to the part
inside. U' is between 0 (used nothing) and 1 (held the whole cluster for the whole window), per resource.
`fairshare.py` lowers the over-quota share of queues with a high U' (kValue).

The history is persisted through a `UsageStore` (a ConfigMap in Kubernetes) so that a restarted or a new
leading scheduler continues it; it is never written before it was read, so a store that cannot be read
is never overwritten with an empty history.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from scheduler.api.usage import Amounts, UsageBucket, UsageHistoryRecord
from scheduler.model.resources import RESOURCE_NAMES, Resources
from scheduler.queues.usage_store import UsageStore, UsageStoreError

log = logging.getLogger(__name__)

BUCKETS_PER_WINDOW = 168  # default resolution: an hour per bucket of a one-week window
MAX_RECORD_BYTES = 700 * 1024  # a ConfigMap holds 1 MiB; beyond this, adjacent old buckets are merged


@dataclass(frozen=True)
class UsageParams:
    """KAI's usage parameters: windowSize (sliding), halfLifePeriod (None: no decay), kValue; plus how
    finely the window is kept (None: window / 168) and how often the leader saves it."""

    window_s: float = 7 * 86400.0
    half_life_s: float | None = None
    k_value: float = 1.0
    resolution_s: float | None = None
    persist_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"the usage window must be longer than 0, got {self.window_s:g}s")
        if self.half_life_s is not None and not self.half_life_s > 0:
            raise ValueError(f"the half-life must be longer than 0 (or unset), got {self.half_life_s:g}s")
        if not (self.k_value >= 0 and math.isfinite(self.k_value)):
            raise ValueError(f"kValue must be a finite number >= 0, got {self.k_value:g}")
        if self.resolution_s is not None and not self.resolution_s > 0:
            raise ValueError(f"the usage resolution must be longer than 0, got {self.resolution_s:g}s")

    @property
    def bucket_s(self) -> float:
        return self.resolution_s or max(self.window_s / BUCKETS_PER_WINDOW, 1.0)


def _vector(r: Resources) -> np.ndarray:
    return np.array([r.get(name) for name in RESOURCE_NAMES], dtype=np.float64)


class UsageHistory:
    """Buckets of integrated usage per queue and of capacity; `record` each cycle, `shares` for fair share."""

    def __init__(self, params: UsageParams) -> None:
        self.params = params
        self.columns: dict[str, int] = {}  # queue -> row of each bucket's `use`
        self.starts: list[float] = []
        self.lengths: list[float] = []
        self.covered: list[float] = []  # seconds integrated into each bucket so far
        self.capacity: list[np.ndarray] = []  # float64[3] per bucket
        self.use: list[np.ndarray] = []  # float64[queues, 3] per bucket
        self._last: tuple[float, np.ndarray, np.ndarray] | None = None  # (time, use[queues, 3], capacity[3])

    # ------------------------------------------------------------------------------------- recording
    def record(self, t: float, allocated: Mapping[str, Resources], capacity: Resources) -> None:
        """The queues hold `allocated` and the cluster has `capacity` from `t` on (what they held since
        the previous record is integrated up to `t`)."""
        for q in allocated:
            self._column(q)
        use = np.zeros((len(self.columns), len(RESOURCE_NAMES)))
        for q, r in allocated.items():
            use[self.columns[q]] = _vector(r)
        self.advance(t)
        self._last = (t, use, _vector(capacity))

    def advance(self, t: float) -> None:
        """Integrate what the queues held since the last record up to `t` (they still hold it)."""
        if self._last is not None and t > self._last[0]:
            t0, use, cap = self._last
            self._integrate(max(t0, t - self.params.window_s), t, use, cap)
            self._last = (t, use, cap)
        self._expire(t)

    def _column(self, queue: str) -> int:
        col = self.columns.get(queue)
        if col is None:
            col = self.columns[queue] = len(self.columns)
            self.use = [np.vstack([u, np.zeros((1, len(RESOURCE_NAMES)))]) for u in self.use]
        return col

    def _integrate(self, t0: float, t1: float, use: np.ndarray, cap: np.ndarray) -> None:
        res = self.params.bucket_s
        t = t0
        while t < t1 - 1e-6:
            last_end = self.starts[-1] + self.lengths[-1] if self.starts else -math.inf
            if t < last_end - 1e-6:
                i = len(self.starts) - 1  # still inside the latest bucket (it may have another length)
                end = last_end
            else:
                start = max(math.floor((t + 1e-6) / res) * res, last_end)
                self.starts.append(start)
                self.lengths.append(res)
                self.covered.append(0.0)
                self.capacity.append(np.zeros(len(RESOURCE_NAMES)))
                self.use.append(np.zeros((len(self.columns), len(RESOURCE_NAMES))))
                i, end = len(self.starts) - 1, start + res
            seg = min(t1, end) - t
            rows = use.shape[0]
            self.use[i][:rows] += use * seg
            self.capacity[i] += cap * seg
            self.covered[i] += seg
            t += seg

    def _expire(self, t: float) -> None:
        horizon = t - self.params.window_s
        drop = 0
        while drop < len(self.starts) and self.starts[drop] + self.lengths[drop] <= horizon:
            drop += 1
        if drop:
            for seq in (self.starts, self.lengths, self.covered, self.capacity, self.use):
                del seq[:drop]

    # --------------------------------------------------------------------------------------- reading
    def weights(self, t: float) -> np.ndarray:
        """float64[buckets]: each bucket's weight at time `t` (decay, times its share inside the window)."""
        if not self.starts:
            return np.zeros(0)
        starts, lengths = np.array(self.starts), np.array(self.lengths)
        covered = np.array(self.covered)
        inside = np.clip((starts + lengths - (t - self.params.window_s)) / lengths, 0.0, 1.0)
        h = self.params.half_life_s
        if h is None:
            return inside
        middle = starts + covered / 2
        return inside * np.power(0.5, np.maximum(t - middle, 0.0) / h)

    def shares(self, t: float) -> dict[str, Resources]:
        """Each queue's normalised recent usage U' (0..1 per resource) at time `t`, what they held up to
        `t` included."""
        self.advance(t)
        w = self.weights(t)
        if w.size == 0 or not self.columns:
            return {}
        cap = w @ np.stack(self.capacity)  # float64[3]
        use = np.tensordot(w, np.stack(self.use), axes=1)  # float64[queues, 3]
        safe = np.where(cap > 0, cap, 1.0)
        norm = np.where(cap > 0, use / safe, 0.0)
        return {q: Resources.of(dict(zip(RESOURCE_NAMES, map(float, norm[c]), strict=True)))
                for q, c in self.columns.items()}  # fmt: skip

    def series(self, queue: str, resource: str = "gpu") -> list[tuple[float, float]]:
        """(bucket start, share of the cluster's capacity the queue held during it) over the window."""
        col = self.columns.get(queue)
        k = RESOURCE_NAMES.index(resource)
        out = []
        for i, start in enumerate(self.starts):
            cap = float(self.capacity[i][k])
            held = float(self.use[i][col, k]) if col is not None else 0.0
            out.append((start, held / cap if cap > 0 else 0.0))
        return out

    # ---------------------------------------------------------------------------------- persistence
    def to_record(self, t: float) -> UsageHistoryRecord:
        """What is kept between runs; adjacent old buckets are merged until the record fits a ConfigMap."""
        self._expire(t)
        names = sorted(self.columns, key=self.columns.__getitem__)
        buckets = []
        for i, start in enumerate(self.starts):
            queues = {
                q: _amounts(self.use[i][self.columns[q]]) for q in names if self.use[i][self.columns[q]].any()
            }
            buckets.append(UsageBucket(start=start, seconds=max(self.covered[i], 1e-3) if i == len(self.starts) - 1
                                       else self.lengths[i], capacity=_amounts(self.capacity[i]), queues=queues))  # fmt: skip
        record = UsageHistoryRecord(saved_at=t, buckets=buckets)
        while len(_dump(record)) > MAX_RECORD_BYTES and len(record.buckets) > 1:
            record = UsageHistoryRecord(saved_at=t, buckets=_merge_oldest(record.buckets))
        return record

    def restore(self, record: UsageHistoryRecord, t: float) -> None:
        """Continue from a saved history (what this process recorded itself comes after it)."""
        mine = (self.starts, self.lengths, self.covered, self.capacity, self.use)
        saved = [b for b in record.buckets if not self.starts or b.start + b.seconds <= self.starts[0] + 1e-9]
        for b in saved:
            for q in b.queues:
                self._column(q)
        use = []
        for b in saved:
            u = np.zeros((len(self.columns), len(RESOURCE_NAMES)))
            for q, a in b.queues.items():
                u[self.columns[q]] = [a.gpu, a.cpu, a.memory]
            use.append(u)
        self.starts = [b.start for b in saved] + mine[0]
        self.lengths = [b.seconds for b in saved] + mine[1]
        self.covered = [b.seconds for b in saved] + mine[2]
        self.capacity = [np.array([b.capacity.gpu, b.capacity.cpu, b.capacity.memory]) for b in saved] + mine[
            3
        ]
        self.use = use + [np.vstack([u, np.zeros((len(self.columns) - u.shape[0], len(RESOURCE_NAMES)))])
                          for u in mine[4]]  # fmt: skip
        self._expire(t)


def _amounts(v: np.ndarray) -> Amounts:
    return Amounts(gpu=float(v[0]), cpu=float(v[1]), memory=float(v[2]))


def _dump(record: UsageHistoryRecord) -> str:
    return json.dumps(record.model_dump(by_alias=True, mode="json"), separators=(",", ":"))


def _merge_oldest(buckets: list[UsageBucket]) -> list[UsageBucket]:
    """Halve the number of the older half's buckets by merging neighbours (the recent ones, which weigh
    most, keep their resolution)."""
    half = max(2, len(buckets) // 2)
    old, recent = buckets[:half], buckets[half:]
    merged = []
    for i in range(0, len(old), 2):
        pair = old[i : i + 2]
        a = pair[0]
        if len(pair) == 1:
            merged.append(a)
            continue
        b = pair[1]
        queues = {q: _sum(a.queues.get(q), b.queues.get(q)) for q in {*a.queues, *b.queues}}
        merged.append(UsageBucket(start=a.start, seconds=b.start + b.seconds - a.start,
                                  capacity=_sum(a.capacity, b.capacity), queues=queues))  # fmt: skip
    return merged + recent


def _sum(a: Amounts | None, b: Amounts | None) -> Amounts:
    a, b = a or Amounts(), b or Amounts()
    return Amounts(gpu=a.gpu + b.gpu, cpu=a.cpu + b.cpu, memory=a.memory + b.memory)


class TimeBasedFairShare:
    """What the cycle asks of time-based fair share: the usage to divide over-quota shares by (after the
    history was loaded), recording each cycle, saving every `persist_s` seconds."""

    def __init__(self, params: UsageParams, store: UsageStore) -> None:
        self.params = params
        self.store = store
        self.history = UsageHistory(params)
        self.loaded = False  # nothing is saved before the stored history was read (or known absent)
        self.saved_at = -math.inf
        self.last: dict[str, Resources] = {}  # the usage the latest cycle divided by (for the dashboard)
        self._retry_at = -math.inf  # after a failed read, the next one waits `persist_s` (and its warning)

    def shares(self, t: float) -> dict[str, Resources] | None:
        """Usage per queue for this cycle's fair share; None while the stored history cannot be read
        (fair share then ignores usage, as with the feature off, and says so in the log)."""
        if not self.loaded:
            if t < self._retry_at:
                return None
            try:
                record = self.store.load()
            except UsageStoreError as exc:
                self._retry_at = t + self.params.persist_s
                log.warning(
                    "time-based fair share: the usage history cannot be read (%s); fair share ignores usage "
                    "until it can (retried in %.0fs)", exc, self.params.persist_s,
                )  # fmt: skip
                return None
            if record is not None:
                self.history.restore(record, t)
            self.loaded = True
        self.last = self.history.shares(t)
        return self.last

    def observe(self, t: float, allocated: Mapping[str, Resources], capacity: Resources) -> None:
        self.history.record(t, allocated, capacity)
        if self.loaded and t - self.saved_at >= self.params.persist_s:
            self.save(t)

    def save(self, t: float) -> bool:
        """Write the history now (also when the scheduler stops); whether it was written."""
        if not self.loaded:
            return False
        try:
            self.store.save(self.history.to_record(t))
        except UsageStoreError as exc:
            log.warning("time-based fair share: the usage history could not be saved (%s); retried", exc)
            return False
        self.saved_at = t
        return True
