"""Where pods are, as inter-pod affinity, anti-affinity and topology spread count them.

A ledger listener: every holding that comes, goes or moves (a watch event, a placement of this cycle, its
rollback) updates, on its node's row, the count of every selector the pod matches (`counts`: int32[C] per
selector some pending pod asked about) and of every required anti-affinity term the pod carries
(`holders`: the existing pods' anti-affinity, which any incoming pod must respect). So a gang's members
placed earlier in the same transaction count for the next one, and a rollback takes them back out.
Per-domain figures are derived from these per-row counts by the kernels (`scheduler/placement/interpod.py`)
with the nodes' domain codes per key (`ClusterState.key_codes`).

Every holding counts: bound, assumed (bind in flight), reserved (a pod's planned place) and releasing (an
evicted or deleted pod still terminating: kube-scheduler counts it for affinity, not for spread). A
selector is a conjunction of term scopes (a pod's affinity counts pods matching all its terms); a pod's
matches are memoised by its namespace, labels and whether it terminates.

`checks(d)` answers, for a pod's demand, kube-scheduler's verdicts in its filter order (PodTopologySpread,
then InterPodAffinity: affinity, anti-affinity, existing pods' anti-affinity), each a bool[C] over the rows.

A holding that comes for a pod with no required anti-affinity of its own is counted when counts are next
read, not when it comes (`_unrecorded`): a relist brings 150,000 of them (a tenth of its time), and on a
cluster where no pod Tessera places has an inter-pod rule nothing ever reads them. Existing pods'
anti-affinity terms, which every pod is checked against, are always counted at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.cache.ledger import Holding, HoldKind
from scheduler.model.constraints import PodAffinityTerm, PodScope, SpreadConstraint
from scheduler.model.frozen import frozen_for_the_checker
from scheduler.model.selectors import LabelSelector
from scheduler.model.types import PodInfo
from scheduler.placement.interpod import (
    affinity_ok,
    domain_totals,
    in_domains,
    in_rows,
    occupied,
    read_back,
    spread_ok,
)
from scheduler.placement.node_rules import (
    FILTERED_EFFECTS,
    term_mask,
    terms_mask,
    untolerated,
    untolerated_count,
)
from scheduler.placement.preferences import WEIGHTS, fewer_is_better, min_max, more_is_better, spread_score
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

Array = Any
Labels = tuple[tuple[str, str], ...]
MAX_SELECTORS = 4096  # selectors kept counted; the least recently asked about goes first
MAX_MASKS = 64  # pods' masks kept between changes

SPREAD_MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
SPREAD = "node(s) didn't match pod topology spread constraints"
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True)
class Scope:
    """Pods one term reaches: in one of `namespaces` or a namespace `namespace_selector` picks (an empty
    one: every namespace), with labels `selector` matches (None: no pod)."""

    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    selector: LabelSelector | None

    def matches(self, namespace: str, ns_labels: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
        if self.selector is None or not self.selector.matches(labels):
            return False
        if namespace in self.namespaces:
            return True
        sel = self.namespace_selector
        if sel is None:
            return False
        if not sel.requirements:
            return True  # an empty namespace selector: every namespace
        return ns_labels is not None and sel.matches(ns_labels)

    @classmethod
    def of(cls, term: PodAffinityTerm) -> Scope:
        return cls(term.namespaces, term.namespace_selector, term.selector)


@dataclass(frozen=True)
class CountKey:
    """What a count counts: pods matching every scope (and, `live_only`, not terminating). Its hash is
    computed once (it keys every table here, and its scopes nest selectors)."""

    scopes: tuple[Scope, ...]
    live_only: bool = False
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.scopes, self.live_only)))

    def __hash__(self) -> int:
        return self._hash


@frozen_for_the_checker  # (model/frozen.py) slots: one per running pod
class _Record:
    """What was counted for one holding (so that it is uncounted exactly, whatever changed since)."""

    row: int
    namespace: str
    labels: Labels
    terminating: bool
    anti: tuple[PodAffinityTerm, ...]


PodLookup = Callable[[str, Holding], PodInfo | None]
Sparse = dict[int, int]  # row -> pods counted there (rows with none left out)


def _anchor(scopes: tuple[Scope, ...]) -> tuple[str, str] | None:
    """A label (key, value) every pod a selector matches must carry (an `In` of one value), to index the
    selector by; None when it has none (such selectors are tried on every pod)."""
    for scope in scopes:
        if scope.selector is None:
            continue
        for r in scope.selector.requirements:
            if r.operator == "In" and len(r.values) == 1:
                return (r.key, r.values[0])
    return None


class _Index:
    """Selectors (or terms) by their anchor label: the candidates a pod's labels can match."""

    def __init__(self) -> None:
        self.by_label: dict[tuple[str, str], set[Any]] = {}
        self.loose: set[Any] = set()

    def add(self, item: Any, anchor: tuple[str, str] | None) -> None:
        (self.by_label.setdefault(anchor, set()) if anchor is not None else self.loose).add(item)

    def remove(self, item: Any, anchor: tuple[str, str] | None) -> None:
        bucket = self.by_label.get(anchor) if anchor is not None else self.loose
        if bucket is not None:
            bucket.discard(item)
            if anchor is not None and not bucket:
                del self.by_label[anchor]

    def candidates(self, labels: Labels) -> set[Any]:
        found = set(self.loose)
        for pair in labels:
            found |= self.by_label.get(pair, set())
        return found


class PodTopology:
    def __init__(
        self, state: ClusterState, lookup: PodLookup, namespaces: Mapping[str, Mapping[str, str]]
    ) -> None:
        self.state = state
        self.lookup = lookup  # the pod a holding is of (the mirror knows)
        self.namespaces = namespaces  # namespace -> labels (the mirror keeps them from the watch)
        self.records: dict[str, _Record] = {}
        # Holdings told of, not counted yet (their pods carry no required anti-affinity): each key is in
        # `records` or here, never both; counted by `_settle` before any count is read.
        self._unrecorded: dict[str, Holding] = {}
        self._by_label: dict[tuple[str, str], set[str]] = {}  # label pair -> keys of the records carrying it
        self.counts: dict[CountKey, Sparse] = {}
        self.holders: dict[PodAffinityTerm, Sparse] = {}  # existing pods' required anti-affinity terms
        self._holder_totals: dict[PodAffinityTerm, int] = {}
        self._count_index = _Index()  # the selectors counted, by anchor label
        self._holder_index = _Index()  # the existing pods' anti-affinity terms, by anchor label
        self._matched: dict[tuple[str, Labels, bool], tuple[CountKey, ...]] = {}
        self._threats: dict[tuple[str, Labels], tuple[PodAffinityTerm, ...]] = {}
        self._used: OrderedDict[CountKey, None] = OrderedDict()  # least recently asked about first
        self._masks: dict[tuple[PodScope, Any], tuple[tuple[int, int], list[tuple[str, Array]]]] = {}
        self._eligibles: dict[tuple[PodScope, Any], tuple[int, list[Array]]] = {}

        self.version = 0  # bumped on every change of a count

    # ---------------------------------------------------------------------------------- the listener
    def moved(self, key: str, old: Holding | None, new: Holding | None) -> None:
        if self._unrecorded.pop(key, None) is not None or key not in self.records:  # nothing counted for it
            if new is not None and self._defer(key, new):
                return
            before = None
        else:
            before = self.records.pop(key)
        after = self._record(key, new) if new is not None else None
        if before == after:
            if after is not None:
                self.records[key] = after
            return
        if before is not None:
            self._count(before, -1)
            for pair in before.labels:
                bucket = self._by_label.get(pair)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._by_label[pair]
        if after is not None:
            self.records[key] = after
            self._count(after, +1)
            for pair in after.labels:
                self._by_label.setdefault(pair, set()).add(key)
        self.version += 1

    def arrived(self, items: list[tuple[str, Holding]]) -> None:
        """`moved(key, None, h)` for each (a relist's holdings): deferred, but those of pods with
        anti-affinity."""
        unrecorded, records, lookup = self._unrecorded, self.records, self.lookup
        for key, holding in items:
            if key in records or key in unrecorded:
                self.moved(key, None, holding)
                continue
            pod = lookup(key, holding)
            if pod is not None and pod.constraints.anti_affinity:
                self.moved(key, None, holding)
            else:
                unrecorded[key] = holding
        self.version += 1

    def _defer(self, key: str, holding: Holding) -> bool:
        """Leave `key`'s holding to be counted later, unless its pod's own anti-affinity must be known now
        (the existing pods' terms every pod is checked against). The counts read later take it into account
        (`version` moves: masks kept from before are made again)."""
        pod = self.lookup(key, holding)
        if pod is not None and pod.constraints.anti_affinity:
            return False
        self._unrecorded[key] = holding
        self.version += 1
        return True

    def _settle(self) -> None:
        """Count the holdings left to be counted."""
        if not self._unrecorded:
            return
        waiting, self._unrecorded = self._unrecorded, {}
        for key, holding in waiting.items():
            rec = self._record(key, holding)
            if rec is None:
                continue
            self.records[key] = rec
            self._count(rec, +1)
            for pair in rec.labels:
                self._by_label.setdefault(pair, set()).add(key)
        self.version += 1

    def recorded(self) -> dict[str, _Record]:
        """What is counted for each holding, once every holding left to count is counted."""
        self._settle()
        return dict(self.records)

    def refresh(self, key: str, holding: Holding | None) -> None:
        """The pod of `key` changed (its labels): count it again."""
        self.moved(key, holding, holding)

    def namespaces_changed(self) -> None:
        """A namespace's labels changed: every selector with a namespace selector may count otherwise."""
        self._settle()
        self._matched.clear()
        self._threats.clear()
        keys = list(self.counts)
        self.counts.clear()
        self._used.clear()

        self._count_index = _Index()
        for ck in keys:
            self._counted(ck)
        self.version += 1

    def _record(self, key: str, holding: Holding) -> _Record | None:
        pod = self.lookup(key, holding)
        if pod is None:
            return None
        terminating = holding.kind is HoldKind.RELEASING or pod.terminating
        labels = tuple(sorted(pod.labels.items()))
        return _Record(
            holding.placement.node, pod.namespace, labels, terminating, pod.constraints.anti_affinity
        )

    def _count(self, rec: _Record, sign: int) -> None:
        for ck in self._matching(rec.namespace, rec.labels, rec.terminating):
            _add(self.counts[ck], rec.row, sign)
        for term in rec.anti:
            held = self.holders.get(term)
            if held is None:
                held = self.holders[term] = {}
                self._holder_index.add(term, _anchor((Scope.of(term),)))
                self._threats.clear()
            _add(held, rec.row, sign)
            total = self._holder_totals.get(term, 0) + sign
            if total <= 0:
                del self.holders[term], self._holder_totals[term]
                self._holder_index.remove(term, _anchor((Scope.of(term),)))
                self._threats.clear()
            else:
                self._holder_totals[term] = total

    def _matching(self, namespace: str, labels: Labels, terminating: bool) -> tuple[CountKey, ...]:
        memo = (namespace, labels, terminating)
        found = self._matched.get(memo)
        if found is None:
            label_map, ns_labels = dict(labels), self.namespaces.get(namespace)
            found = self._matched[memo] = tuple(
                ck for ck in self._count_index.candidates(labels)
                if not (ck.live_only and terminating)
                and all(s.matches(namespace, ns_labels, label_map) for s in ck.scopes)
            )  # fmt: skip
        return found

    def _counted(self, ck: CountKey) -> Sparse:
        """The sparse per-row counts of `ck`, counted from every holding the first time it is asked for."""
        self._settle()
        found = self.counts.get(ck)
        if found is not None:
            self._used.move_to_end(ck)
            return found
        if len(self.counts) >= MAX_SELECTORS:
            oldest, _ = self._used.popitem(last=False)
            del self.counts[oldest]
            self._count_index.remove(oldest, _anchor(oldest.scopes))
            self._matched.clear()
        self._used[ck] = None

        rows: Sparse = {}
        anchor = _anchor(ck.scopes)
        keys = self._by_label.get(anchor, set()) if anchor is not None else self.records.keys()
        for rec in (self.records[k] for k in keys):
            ns_labels = self.namespaces.get(rec.namespace)
            if not (ck.live_only and rec.terminating) and all(
                s.matches(rec.namespace, ns_labels, dict(rec.labels)) for s in ck.scopes
            ):
                _add(rows, rec.row, 1)
        self.counts[ck] = rows
        self._count_index.add(ck, anchor)
        self._matched.clear()  # memoised matches do not know the new selector (re-made from the index)
        return rows

    def _dense(self, rows: Sparse) -> Array:
        xp, capacity = self.state.xp, self.state.capacity
        if hasattr(xp, "bincount"):  # numpy and CuPy: one scatter
            arr = xp.zeros((capacity,), dtype=xp.int32)
            if rows:
                arr[xp.asarray(list(rows), dtype=xp.int64)] = xp.asarray(list(rows.values()), dtype=xp.int32)
            return arr
        values = [0] * capacity
        for r, n in rows.items():
            values[r] = n
        return xp.asarray(values, dtype=xp.int32)

    def _dense_counted(self, ck: CountKey) -> Array:
        """int32[C]: the counts of `ck` on every row (for the kernels that sum over many domains)."""
        return self._dense(self._counted(ck))

    def _threatening(self, namespace: str, labels: Labels) -> tuple[PodAffinityTerm, ...]:
        """The existing pods' anti-affinity terms that match a pod of `namespace` with `labels`."""
        memo = (namespace, labels)
        found = self._threats.get(memo)
        if found is None:
            label_map, ns_labels = dict(labels), self.namespaces.get(namespace)
            found = self._threats[memo] = tuple(
                t for t in self._holder_index.candidates(labels)
                if Scope.of(t).matches(namespace, ns_labels, label_map)
            )  # fmt: skip
        return found

    # ------------------------------------------------------------------------------------- queries
    def applies(self, d: PodDemand) -> bool:
        """Whether any inter-pod rule can restrict `d` (its own, or an existing pod's anti-affinity)."""
        scope = d.scope
        if scope is None:
            return False
        c = scope.constraints
        if c.affinity or c.anti_affinity or any(s.hard for s in c.spread):
            return True
        return bool(self.holders) and bool(self._threatening(scope.namespace, scope.labels))

    def mask(self, d: PodDemand) -> Array | None:
        """bool[C]: the rows every inter-pod rule allows for `d`; None when no rule applies."""
        checks = self.checks(d)
        if not checks:
            return None
        ok = checks[0][1]
        for _, m in checks[1:]:
            ok = ok & m
        return ok

    def checks(self, d: PodDemand) -> list[tuple[str, Array]]:
        """(kube-scheduler's reason, bool[C] rows that pass) for each rule that applies to `d`, in its
        filter order."""
        scope = d.scope
        if scope is None or not self.applies(d):
            return []
        self._settle()  # before the stamp: what is counted now is what the masks below are made of
        stamp = (self.version, self.state.node_epoch)
        memo = (scope, d.tolerations)  # spread's taint policy reads the tolerations
        kept = self._masks.get(memo)
        if (
            kept is not None
            and kept[0] == stamp
            and kept[1]
            and kept[1][0][1].shape[0] == self.state.capacity
        ):
            return kept[1]
        out = self._spread(d, scope) + self._affinity(scope)
        if len(self._masks) >= MAX_MASKS:
            self._masks.clear()
        self._masks[memo] = (stamp, out)
        return out

    def _affinity(self, scope: PodScope) -> list[tuple[str, Array]]:
        s, xp = self.state, self.state.xp
        c = scope.constraints
        labels = scope.label_map
        out: list[tuple[str, Array]] = []
        if c.affinity:
            rows = self._counted(CountKey(tuple(Scope.of(t) for t in c.affinity)))
            ns_labels = self.namespaces.get(scope.namespace)
            itself = all(Scope.of(t).matches(scope.namespace, ns_labels, labels) for t in c.affinity)
            terms = [self._key(t.topology_key) for t in c.affinity]
            out.append((AFFINITY, affinity_ok(xp, terms, rows, itself)))
        if c.anti_affinity:
            ok = xp.ones((s.capacity,), dtype=xp.bool)
            for t in c.anti_affinity:
                ok = ok & ~self._occupied(t.topology_key, self._counted(CountKey((Scope.of(t),))))
            out.append((ANTI_AFFINITY, ok))
        threats = self._threatening(scope.namespace, scope.labels) if self.holders else ()
        if threats:
            ok = xp.ones((s.capacity,), dtype=xp.bool)
            for term in threats:
                ok = ok & ~self._occupied(term.topology_key, self.holders[term])

            out.append((EXISTING_ANTI_AFFINITY, ok))
        return out

    def _key(self, topology_key: str) -> tuple[Array, list[int], int]:
        """(codes, host codes, domains) of a topology key."""
        s = self.state
        return s.key_codes(topology_key), s.key_codes_host(topology_key), s.key_domains.size(topology_key)

    def _occupied(self, topology_key: str, rows: Sparse) -> Array:
        """bool[C]: rows whose domain of `topology_key` holds a pod of `rows`."""
        s = self.state
        codes, host, size = self._key(topology_key)
        domains = occupied(host, rows)
        members = s.key_domains.members(topology_key, domains)
        if members is not None:  # few nodes in those domains (hostnames, racks): set them one by one
            return in_rows(s.xp, s.capacity, members)
        return in_domains(s.xp, codes, domains, size)

    def _spread(self, d: PodDemand, scope: PodScope) -> list[tuple[str, Array]]:
        hard = [c for c in scope.constraints.spread if c.hard]
        if not hard:
            return []
        s, xp = self.state, self.state.xp
        codes = {c.topology_key: s.key_codes(c.topology_key) for c in hard}
        eligibles = self._eligible(d, scope, hard, codes)
        labels = scope.label_map
        ok = xp.ones((s.capacity,), dtype=xp.bool)
        missing = xp.ones((s.capacity,), dtype=xp.bool)
        for c, eligible in zip(hard, eligibles, strict=True):
            sel = c.selector
            if sel is None or not sel.requirements:  # kube-scheduler counts no pod for an empty selector
                counts = xp.zeros((s.capacity,), dtype=xp.int32)
            else:
                counts = self._dense_counted(
                    CountKey((Scope(frozenset({scope.namespace}), None, sel),), live_only=True)
                )
            key_codes = codes[c.topology_key]
            missing = missing & (key_codes >= 0)
            ok = ok & spread_ok(
                xp, key_codes, s.key_domains.size(c.topology_key), counts, eligible,
                max_skew=c.max_skew, min_domains=c.min_domains or 1,
                self_match=sel is not None and sel.matches(labels),
            )  # fmt: skip
        return [(SPREAD_MISSING, missing), (SPREAD, ok | ~missing)]

    # --------------------------------------------------------------------------------- preferences
    def preference(self, d: PodDemand, mask: Array) -> Array | None:
        """float64[C] in [0, 1]: how much the pod prefers each row, by kube-scheduler's default scores
        (`scheduler/placement/preferences.py`), normalised over `mask` (the rows that pass every filter);
        None when it states no preference and no node has a PreferNoSchedule taint."""
        s, xp = self.state, self.state.xp
        scope = d.scope
        parts: list[tuple[float, Array]] = []
        if any(eff == "PreferNoSchedule" for _, _, eff in s.taints.parsed):
            untolerated = untolerated_count(s, d.tolerations, "PreferNoSchedule")
            if bool(xp.any(untolerated > 0)):
                parts.append((WEIGHTS["taints"], fewer_is_better(xp, untolerated, mask)))
        if scope is not None:
            c = scope.constraints
            if c.preferred_nodes:
                raw = xp.zeros((s.capacity,), dtype=xp.int64)
                for weight, term in c.preferred_nodes:
                    raw = raw + weight * xp.astype(term_mask(s, term), xp.int64)
                parts.append((WEIGHTS["node_affinity"], more_is_better(xp, raw, mask)))
            soft = [sc for sc in c.spread if not sc.hard]
            if soft:
                raw = xp.zeros((s.capacity,), dtype=xp.int64)
                for sc in soft:
                    if sc.selector is None or not sc.selector.requirements:
                        continue
                    key = CountKey((Scope(frozenset({scope.namespace}), None, sc.selector),), live_only=True)
                    raw = raw + self._in_domain(key, sc.topology_key)
                parts.append((WEIGHTS["spread"], spread_score(xp, raw, mask)))
            if c.preferred_affinity or c.preferred_anti_affinity:
                raw = xp.zeros((s.capacity,), dtype=xp.int64)
                for sign, terms in ((1, c.preferred_affinity), (-1, c.preferred_anti_affinity)):
                    for wt in terms:
                        key = CountKey((Scope.of(wt.term),))
                        raw = raw + sign * wt.weight * self._in_domain(key, wt.term.topology_key)
                parts.append((WEIGHTS["pod_affinity"], min_max(xp, raw, mask)))
        if not parts:
            return None
        total = sum(w for w, _ in parts)
        out = xp.zeros((s.capacity,), dtype=xp.float64)
        for w, p in parts:
            out = out + (w / total) * p
        return out

    def _in_domain(self, key: CountKey, topology_key: str) -> Array:
        """int64[C]: the pods `key` counts in each row's domain of `topology_key` (0 without the label)."""
        s = self.state
        codes = s.key_codes(topology_key)
        totals = domain_totals(s.xp, codes, self._dense_counted(key), s.key_domains.size(topology_key))
        return read_back(s.xp, codes, totals)

    def _eligible(
        self, d: PodDemand, scope: PodScope, hard: list[SpreadConstraint], codes: dict[str, Array]
    ) -> list[Array]:
        """Per constraint, bool[C]: the rows whose domains count (every constraint's key, and the node
        affinity and taints its policies honour). Nodes only: kept until a node changes."""
        memo = (scope, d.tolerations)
        kept = self._eligibles.get(memo)
        if kept is not None and kept[0] == self.state.node_epoch:
            return kept[1]
        s = self.state
        has_keys = s.valid | s.cordoned
        for k in codes.values():
            has_keys = has_keys & (k >= 0)
        affinity: Array | None = None
        taints: Array | None = None
        out = []
        for c in hard:
            eligible = has_keys
            if c.honor_node_affinity:
                if affinity is None:
                    affinity = self._node_affinity(scope)
                eligible = eligible & affinity
            if c.honor_node_taints:
                if taints is None:
                    taints = ~untolerated(s, d.tolerations, FILTERED_EFFECTS)
                eligible = eligible & taints
            out.append(eligible)
        if len(self._eligibles) >= MAX_MASKS:
            self._eligibles.clear()
        self._eligibles[memo] = (s.node_epoch, out)
        return out

    def _node_affinity(self, scope: PodScope) -> Array:
        """bool[C]: nodes the pod's node selector and required node affinity allow (spread's
        nodeAffinityPolicy: Honor)."""
        s, xp = self.state, self.state.xp
        ok = xp.ones((s.capacity,), dtype=xp.bool)
        for k, v in scope.node_selector:
            col = s.labels.get(f"{k}={v}")
            ok = ok & (s.label_matrix[:, col] if col is not None else xp.zeros_like(ok))
        terms = scope.constraints.required_nodes
        if terms is not None:
            ok = ok & terms_mask(s, terms)
        return ok


def _add(rows: Sparse, row: int, sign: int) -> None:
    n = rows.get(row, 0) + sign
    if n:
        rows[row] = n
    else:
        rows.pop(row, None)
