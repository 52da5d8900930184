"""Bind pods to the places reserved for them when consolidation moved them (run first by `allocate`)."""

from __future__ import annotations

from scheduler.cluster import Cluster
from scheduler.resources import placement_usage
from scheduler.session import Session
from scheduler.transaction import Transaction


def bind_reserved(session: Session, cluster: Cluster) -> None:
    cache = session.cache
    claimed = set(session.reserved.values())
    for key, old in list(cache.reservations.items()):
        if key not in claimed and old.expires_s <= session.now:
            cache.drop_reservation(key)
            session.charge(old.queue, placement_usage(old.placement), -1)
    if not session.reserved:
        return
    job_of = {p.uid: job for job in session.jobs for p in job.pending}
    for uid, key in session.reserved.items():
        pod, job = cache.pods.get(uid), job_of.get(uid)
        res = cache.reservations.get(key)
        if pod is None or job is None or res is None:
            continue
        cache.drop_reservation(key)
        session.charge(res.queue, placement_usage(res.placement), -1)
        tx = Transaction(session, "consolidate")
        tx.place(pod, job.queue, res.placement, f"moved here to make room for {res.beneficiary}")
        outcome = tx.commit(cluster)
        if outcome.bound:
            job.pending.remove(pod)
            job.running.append(pod)
            session.reasons.pop(uid, None)
    session.reserved.clear()
