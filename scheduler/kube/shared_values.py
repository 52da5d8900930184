"""Equal values of many cached objects kept once (hash-consing), for the pod watch's cache.

The pods of one controller are alike: the same containers' resources, tolerations, labels, owner, affinity
and, once the per-pod timestamps are left out, the same conditions. A relist of 150,000 pods built each of
those lists and maps 150,000 times (a third of the watch cache's memory: `tessera bench events
--api-fields`). `SharedValues.share` hands back the first equal value it kept instead.

Sharing is safe because nothing writes into a cached object (informer.py: every write of the scheduler is
a patch, a Binding or an eviction built afresh); a kept value is promised never to change
(`model/frozen.py`: the parser then works out what it says once, for every pod holding it). Equal means
the same marshalled bytes (so `1`, `1.0` and `True`, equal in Python, are not confused), which are the
table's key: a value held by one pod alone costs its marshalled bytes besides (~100-300 bytes; the parts
shared are those controllers' pods have alike).
Values no cached object holds any more are dropped as the table grows (amortised: the table is swept
when it doubled since the last sweep).
"""

from __future__ import annotations

import marshal
import sys
from collections.abc import Callable
from typing import Any

from scheduler.model.frozen import freeze, thaw

_FIRST_SWEEP = 4096


def _same(value: Any) -> Any:
    return value


def _promise(value: Any, how: Callable[[object], None]) -> None:
    """Freeze (or thaw) a kept value and the lists and maps directly in it (a shared spec's containers)."""
    how(value)
    for part in value.values() if type(value) is dict else value if type(value) is list else ():
        if type(part) is dict or type(part) is list:
            how(part)


class SharedValues:
    def __init__(self) -> None:
        self._table: dict[bytes, Any] = {}
        self._sweep_at = _FIRST_SWEEP
        self.hits = 0  # values handed back shared (for the benchmarks and the tests)

    def __len__(self) -> int:
        return len(self._table)

    def share(self, value: Any, copy: Callable[[Any], Any] = _same) -> Any:
        """The value equal to `value` kept before, else `copy(value)`, kept from now on (the informer's
        interning copy: made only for a value not seen yet). A value marshal cannot write (not plain data)
        is copied, not kept."""
        try:
            key = marshal.dumps(value, 0)  # version 0: equal values give equal bytes
        except ValueError:
            return copy(value)
        table = self._table
        kept = table.get(key)
        if kept is not None:
            self.hits += 1
            return kept
        table[key] = value = copy(value)
        _promise(value, freeze)
        if len(table) >= self._sweep_at:
            self._sweep()
        return value

    def _sweep(self) -> None:
        """Forget the values no cached object holds any more, itself or a part of it (a pod's spec is a map
        of its own holding the shared spec's parts)."""
        table = self._table
        for key in [k for k in table if _unheld(table[k])]:
            _promise(table.pop(key), thaw)
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(table))


def _unheld(value: Any) -> bool:
    # getrefcount counts the table's reference (or, for a part, its value's), the promise's (model/frozen.py),
    # this frame's (`value`, `part`) and its own argument's: 4 when nothing else holds it.
    if sys.getrefcount(value) > 4:
        return False
    for part in value.values() if type(value) is dict else value if type(value) is list else ():
        if (type(part) is dict or type(part) is list) and sys.getrefcount(part) > 4:
            return False
    return True
