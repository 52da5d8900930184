"""The cyclic garbage collector paused over bulk work of the cache (a relist, the first session after it).

Applying 150,000 pod events makes a million objects that live on (pods, their maps, holdings, jobs); while
they are made, every 700 allocations start a collection and each older generation that fills up is
scanned again, all of the cache's objects with it: 28% of a relist's time (2.2 of 7.7 s). None of these
objects form reference cycles, so reference counting frees them as before; the collector only resumes
afterwards (a cycle made meanwhile waits until then). Small batches are left alone: collections amortise.

When it resumes, what the batch made is promoted to the oldest generation at once (`gc.freeze` then
`gc.unfreeze`: two list splices), instead of being scanned as young objects by the first collection after
it (0.25 s of the relist above), then again as middle-aged ones. Nothing is left frozen: a cycle among them
that becomes garbage is found by the next full collection, as any long-lived object's is.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

BULK = 2000  # objects (events, jobs) from which a batch is bulk


@contextmanager
def paused_gc(count: int) -> Iterator[None]:
    """Without the cyclic collector while a batch of `count` things is handled, if it is bulk."""
    if count < BULK or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # every tracked object, out of the generations...
        gc.unfreeze()  # ...back into the oldest one: no young collection scans the batch's objects
        gc.enable()
