"""Inter-pod affinity, anti-affinity and topology spread as array programs over per-node pod counts.

Inputs are integer arrays over the node rows: `codes` (int32[C], a node's domain for one topology key,
-1 where it lacks the label: `ClusterState.key_codes`) and `counts` (int[C], the pods on each node that a
selector matches: `scheduler/cache/pod_topology.py` keeps them as pods come and go). A domain's figure is a
segment sum of the rows' counts by code; a row's answer reads its own domain's figure back. So a pod's
constraints cost a few passes over the rows, whatever the number of pods. The rules are kube-scheduler's
(InterPodAffinity and PodTopologySpread Filter plugins):

- affinity: every term's topology key on the node, and, in that domain, pods matching all the terms;
  unless no such pod exists anywhere (on nodes with the keys) and the pod matches its own terms: the first
  pod of a group that wants to be together goes anywhere with the keys;
- anti-affinity, the pod's own terms: no pod matching a term in the node's domain of that term's key (a
  node without the key is fine);
- existing pods' anti-affinity: no pod whose term matches the incoming pod in that term's domain;
- spread (`DoNotSchedule`): the node has the key, and the pods matching the selector in its domain, plus
  one if the pod matches it itself, exceed the smallest domain's count by at most `maxSkew`; domains are
  those of the eligible nodes (with every constraint's key, and the node affinity and taints the
  policies honour); fewer than `minDomains` of them make the smallest count 0.
"""

from __future__ import annotations

from typing import Any

from scheduler.placement.topology import segment_sum
from scheduler.state.backend import ArrayNamespace

Array = Any


def domain_totals(xp: ArrayNamespace, codes: Array, values: Array, size: int) -> Array:
    """int64[size]: the sum of `values` (int[C]) over the rows of each domain code (negative codes count
    nowhere). numpy and CuPy have bincount; elsewhere a sort and cumulative sum (topology.segment_sum)."""
    if size == 0:
        return xp.zeros((0,), dtype=xp.int64)
    values = xp.astype(values, xp.int64)
    bincount = getattr(xp, "bincount", None)
    if bincount is not None:
        inside = codes >= 0
        totals = bincount(codes[inside], weights=values[inside], minlength=size)
        return xp.astype(xp.round(totals), xp.int64)  # exact: counts are far below 2**53
    return segment_sum(xp, codes, values, size)


def read_back(xp: ArrayNamespace, codes: Array, totals: Array) -> Array:
    """int64[C]: each row's domain figure (0 where the row has no domain)."""
    if totals.shape[0] == 0:
        return xp.zeros(codes.shape, dtype=xp.int64)
    safe = xp.clip(xp.astype(codes, xp.int64), 0, totals.shape[0] - 1)
    return xp.where(codes >= 0, xp.take(totals, safe), xp.zeros(codes.shape, dtype=xp.int64))


def in_occupied_domain(xp: ArrayNamespace, codes: Array, counts: Array, size: int) -> Array:
    """bool[C]: rows whose domain holds at least one counted pod."""
    return read_back(xp, codes, domain_totals(xp, codes, counts, size)) > 0


def affinity_ok(
    xp: ArrayNamespace, term_codes: list[tuple[Array, int]], counts: Array, matches_itself: bool
) -> Array:
    """bool[C] for the pod's required affinity terms (each (codes, domains) of its topology key); `counts`:
    pods matching every term, per row."""
    has_keys = term_codes[0][0] >= 0
    for codes, _ in term_codes[1:]:
        has_keys = has_keys & (codes >= 0)
    ok = has_keys
    anywhere = 0
    for codes, size in term_codes:
        totals = domain_totals(xp, codes, counts, size)
        anywhere += int(xp.sum(totals))
        ok = ok & (read_back(xp, codes, totals) > 0)
    if anywhere == 0 and matches_itself:  # the first of a group: anywhere with the keys
        return has_keys
    return ok


def spread_ok(
    xp: ArrayNamespace,
    codes: Array,
    size: int,
    counts: Array,
    eligible: Array,
    *,
    max_skew: int,
    min_domains: int,
    self_match: bool,
) -> Array:
    """bool[C] for one DoNotSchedule constraint: `codes` of its key, `counts` per row (pods of the pod's
    namespace matching the selector, not terminating), `eligible` bool[C] the rows whose domains count."""
    zero = xp.zeros(counts.shape, dtype=xp.int64)
    totals = domain_totals(xp, codes, xp.where(eligible, xp.astype(counts, xp.int64), zero), size)
    present = domain_totals(xp, codes, xp.astype(eligible, xp.int64), size) > 0
    n_domains = int(xp.sum(xp.astype(present, xp.int64)))
    if n_domains < min_domains:
        smallest = 0
    else:
        big = xp.full(totals.shape, 1 << 62, dtype=xp.int64)
        smallest = int(xp.min(xp.where(present, totals, big)))
    skew = read_back(xp, codes, totals) + int(self_match) - smallest
    return (codes >= 0) & (skew <= max_skew)
