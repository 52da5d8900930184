"""kube-scheduler's default scores where users notice them, blended with the placement policy's score.

The preferences a pod states (and the taints a node prefers to keep pods off) rank the nodes that pass
every filter, as kube-scheduler's score plugins do, each normalised to [0, 1] over those nodes:

| score | kube-scheduler plugin (weight) | raw score per node |
|---|---|---|
| taints | TaintToleration (3) | untolerated PreferNoSchedule taints; fewer is better |
| node affinity | NodeAffinity (2) | sum of the weights of the preferred terms it matches |
| spread | PodTopologySpread (2) | ScheduleAnyway constraints: pods matching the selector in its domain; the emptiest domain best |

| pod affinity | InterPodAffinity (2) | preferred terms' weight x pods they match in its domain, anti-affinity's subtracted |

Their weighted mean is the pod's preference in [0, 1]. The placement policy's score (also over the nodes
that pass, min-max normalised) is blended with it by `BLEND`: the policy stays the main signal for GPU pods
(where fragmentation is the cost), preferences lead for pods without GPUs (as kube-scheduler's scores, where
its resource scores weigh 1 and 2 against the preferences' 7 to 9). Pods without any preference, on nodes
without PreferNoSchedule taints, are placed by the policy alone and pay nothing for this.
"""

from __future__ import annotations

from typing import Any

from scheduler.state.backend import ArrayNamespace

Array = Any

WEIGHTS = {"taints": 3.0, "node_affinity": 2.0, "spread": 2.0, "pod_affinity": 2.0}
# (policy, preference) weights of the final score, for pods with GPUs and pods without: for a pod without
# GPUs its preferences decide and the policy breaks their ties (kube-scheduler's default resource score
# spreads; a packing policy must not undo what users asked for); for a GPU pod the policy decides and
# preferences break its near-ties.
BLEND = {"gpu": (1.0, 0.25), "cpu": (1.0, 10.0)}


def _masked(xp: ArrayNamespace, raw: Array, mask: Array, fill: float) -> Array:
    return xp.where(mask, xp.astype(raw, xp.float64), xp.full(raw.shape, fill, dtype=xp.float64))


def more_is_better(xp: ArrayNamespace, raw: Array, mask: Array) -> Array:
    """raw / max over `mask` (kube-scheduler's DefaultNormalizeScore); all 0 when the max is 0."""
    top = float(xp.max(_masked(xp, raw, mask, 0.0))) if bool(xp.any(mask)) else 0.0
    return xp.astype(raw, xp.float64) / top if top > 0 else xp.zeros(raw.shape, dtype=xp.float64)


def fewer_is_better(xp: ArrayNamespace, raw: Array, mask: Array) -> Array:
    """1 - raw / max over `mask` (DefaultNormalizeScore reversed); all 1 when the max is 0."""
    return 1.0 - more_is_better(xp, raw, mask)


def spread_score(xp: ArrayNamespace, raw: Array, mask: Array) -> Array:
    """(max + min - raw) / max over `mask` (PodTopologySpread's normalisation: the emptiest domain
    scores 1); all 1 when the max is 0."""
    if not bool(xp.any(mask)):
        return xp.ones(raw.shape, dtype=xp.float64)
    raw = xp.astype(raw, xp.float64)
    hi = float(xp.max(_masked(xp, raw, mask, -float("inf"))))
    lo = float(xp.min(_masked(xp, raw, mask, float("inf"))))
    if hi <= 0:
        return xp.ones(raw.shape, dtype=xp.float64)
    return xp.clip((hi + lo - raw) / hi, 0.0, 1.0)


def min_max(xp: ArrayNamespace, raw: Array, mask: Array) -> Array:
    """(raw - min) / (max - min) over `mask`; all 0 where they are equal (InterPodAffinity, policies)."""
    if not bool(xp.any(mask)):
        return xp.zeros(raw.shape, dtype=xp.float64)
    raw = xp.astype(raw, xp.float64)
    lo = float(xp.min(_masked(xp, raw, mask, float("inf"))))
    hi = float(xp.max(_masked(xp, raw, mask, -float("inf"))))
    if hi <= lo:
        return xp.zeros(raw.shape, dtype=xp.float64)
    return xp.clip((raw - lo) / (hi - lo), 0.0, 1.0)


def blend(xp: ArrayNamespace, policy: Array, preference: Array, mask: Array, *, gpu: bool) -> Array:
    """float64[C]: the final score, -inf outside `mask`."""
    wp, wk = BLEND["gpu" if gpu else "cpu"]
    score = wp * min_max(xp, policy, mask) + wk * preference
    return xp.where(mask, score, xp.full(score.shape, -float("inf"), dtype=xp.float64))
