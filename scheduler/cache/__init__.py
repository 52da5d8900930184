"""What the scheduler keeps between cycles, and the cluster it is kept from.

`cluster.py` is the one interface the loop talks to (simulated or Kubernetes; KAI's cache plays the same
part). `cache.py` composes the parts: the mirror of the cluster (`mirror.py`, watch events in), the
ledger of who holds what (`ledger.py`, with reservations), the job index (`job_index.py`) and the binds in
flight (`inflight.py`). `containment.py` says how one bad object is kept from stopping the others.
"""
