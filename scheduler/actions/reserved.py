"""`bind_reserved`: bind pods to the places reserved for them when consolidation moved them.

First in the pipeline: a recreated pod takes its reserved place before anything else could; a reservation
nobody claimed in time is given back. The binds are consolidation's moves, and are reported as such.
"""

from __future__ import annotations

from scheduler.cluster import Cluster
from scheduler.session import Session
from scheduler.transaction import Transaction


class BindReserved:
    name = "bind_reserved"

    def execute(self, session: Session, cluster: Cluster) -> None:
        ledger = session.ledger
        claimed = set(session.reserved.values())
        for key, held in list(ledger.reserved.items()):
            res = held.reservation
            if key not in claimed and res is not None and res.expires_s <= session.now:
                ledger.unreserve(key)
        if not session.reserved:
            return
        job_of = {p.uid: job for job in session.jobs for p in job.pending}
        for uid, key in session.reserved.items():
            pod, job = session.cache.pods.get(uid), job_of.get(uid)
            res = ledger.reservations().get(key)
            if pod is None or job is None or res is None:
                continue
            ledger.unreserve(key)
            tx = Transaction(session, "consolidate")
            tx.place(pod, job, res.placement, f"moved here to make room for {res.beneficiary}")
            outcome = tx.commit(cluster)
            if outcome.bound:
                job.pending.remove(pod)
                job.running.append(pod)
                session.reasons.pop(uid, None)
        session.reserved.clear()
