"""Inter-pod affinity, anti-affinity and topology spread as array programs over per-node pod counts.

Inputs are the nodes' domain codes for one topology key (int32[C], -1 where a node lacks the label:
`ClusterState.key_codes`) and the pods a selector matches per node (`scheduler/cache/pod_topology.py`
keeps them as pods come and go): sparse ({row: pods}) for affinity and anti-affinity, where a selector
matches a few pods (a Deployment's replicas): the occupied domains become a lookup table gathered by row;
dense (int[C]) for spread, summed per domain (bincount, or a sort and cumulative sum) and read back per
row. So a pod's constraints cost a few passes over the rows, whatever the number of pods. The rules are kube-scheduler's
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


# Sparse counts: most selectors match a few pods (a Deployment's replicas), so their counts are kept as
# {row: pods} and a domain's verdict is a lookup table over the domain codes, gathered by row.
def occupied(codes_host: list[int], rows: dict[int, int]) -> list[int]:
    """The domain codes of the rows where counted pods are (rows without the label count nowhere)."""
    return sorted(
        {codes_host[r] for r, n in rows.items() if n > 0 and r < len(codes_host) and codes_host[r] >= 0}
    )


def in_domains(xp: ArrayNamespace, codes: Array, domains: list[int], size: int) -> Array:
    """bool[C]: rows whose domain code is one of `domains` (codes below `size`)."""
    if not domains:
        return xp.zeros(codes.shape, dtype=xp.bool)
    if hasattr(xp, "bincount"):  # numpy and CuPy: one scatter
        table = xp.zeros((size,), dtype=xp.bool)
        table[xp.asarray(domains, dtype=xp.int64)] = True
    else:  # the array API has no scatter: the table is built on the host
        flags = [False] * size
        for code in domains:
            flags[code] = True
        table = xp.asarray(flags, dtype=xp.bool)

    safe = xp.clip(xp.astype(codes, xp.int64), 0, max(size - 1, 0))
    return (codes >= 0) & xp.take(table, safe)


def affinity_ok(
    xp: ArrayNamespace, terms: list[tuple[Array, list[int], int]], rows: dict[int, int], matches_itself: bool
) -> Array:
    """bool[C] for the pod's required affinity terms: `terms` are (codes, host codes, domains) of each
    term's key, `rows` the pods matching every term, per row (sparse)."""
    has_keys = terms[0][0] >= 0
    for codes, _, _ in terms[1:]:
        has_keys = has_keys & (codes >= 0)
    ok = has_keys
    anywhere = False
    for codes, host, size in terms:
        domains = occupied(host, rows)
        anywhere = anywhere or bool(domains)
        ok = ok & in_domains(xp, codes, domains, size)
    if not anywhere and matches_itself:
        return has_keys
    return ok


def in_rows(xp: ArrayNamespace, size: int, rows: list[int]) -> Array:
    """bool[size]: True on `rows` (the nodes of a few occupied domains)."""
    if hasattr(xp, "bincount"):  # numpy and CuPy: one scatter
        out = xp.zeros((size,), dtype=xp.bool)
        if rows:
            out[xp.asarray(rows, dtype=xp.int64)] = True
        return out
    flags = [False] * size
    for r in rows:
        flags[r] = True
    return xp.asarray(flags, dtype=xp.bool)
