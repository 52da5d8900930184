"""Kubernetes resource quantities (`"500m"`, `"16Gi"`, `"1e3"`), accepted exactly as the API server does.

The grammar is apimachinery's `resource.Quantity`: an optional sign, ASCII digits with at most one
decimal point, then one suffix: binary (`Ki` .. `Ei`), decimal (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`,
`E`) or an exponent (`e3`, `E-2`). Python's own number parsers are wider (`Decimal("1_000")`,
`Decimal("٠.٥")`, `float("０.５")`, `"Infinity"`) and so is the Kubernetes client's `parse_quantity`
(which also takes `"1K"`), so the text is matched against the grammar and converted from the match: the
suffix table is the grammar's. (This package may not import the Kubernetes client: the node components
import it.) Numbers from YAML or JSON (`cpu: 4`, `cpu: 0.5`) are taken as they are when finite; booleans
are not numbers.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from scheduler.api.limits import MAX_NUMBER_CHARS

# Exponents are limited to three digits: nobody writes more, and it keeps every conversion cheap.
_GRAMMAR = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]{1,3})|(?P<binary>[KMGTPE])i|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)
_POWER = {"n": -3, "u": -2, "m": -1, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


class InvalidQuantity(ValueError):
    """Not a Kubernetes quantity, or out of its bound; the message is one line without the field name."""


def parse_quantity(raw: object, *, maximum: Decimal | int | None = None) -> Decimal:
    """The quantity `raw` as an exact Decimal, in [0, maximum]; InvalidQuantity with the reason if not."""
    value = _number(raw)
    if value < 0:
        raise InvalidQuantity(f"{_shown(raw)} must not be negative")
    if maximum is not None and value > maximum:
        raise InvalidQuantity(f"{_shown(raw)} is more than the largest value accepted ({maximum})")
    return value


def _number(raw: object) -> Decimal:
    if isinstance(raw, bool):
        raise InvalidQuantity(f"{raw!r} is not a quantity")
    if isinstance(raw, int):
        if raw.bit_length() > 4 * MAX_NUMBER_CHARS:
            raise InvalidQuantity("is not a valid Kubernetes quantity (too many digits)")
        return Decimal(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise InvalidQuantity(f"{raw!r} is not a finite quantity")
        return Decimal(raw)
    if isinstance(raw, Decimal):
        if not raw.is_finite():
            raise InvalidQuantity(f"{raw} is not a finite quantity")
        return raw
    if not isinstance(raw, str):
        raise InvalidQuantity(f"a {type(raw).__name__} is not a quantity")
    if len(raw) > MAX_NUMBER_CHARS:
        raise InvalidQuantity(
            f"is not a valid Kubernetes quantity (longer than {MAX_NUMBER_CHARS} characters)"
        )
    match = _GRAMMAR.fullmatch(raw)
    if match is None:
        raise InvalidQuantity(f"{raw!r} is not a valid Kubernetes quantity (e.g. 500m, 4, 16Gi)")
    number = Decimal(match["number"])
    if match["exponent"] is not None:
        return number.scaleb(int(match["exponent"]))
    if match["binary"] is not None:
        return number * (1024 ** _POWER[match["binary"]])
    if match["decimal"] is not None:
        return number.scaleb(3 * _POWER[match["decimal"]])
    return number


def _shown(raw: object) -> str:
    text = repr(raw) if isinstance(raw, str) else str(raw)
    return text if len(text) <= MAX_NUMBER_CHARS + 2 else text[:MAX_NUMBER_CHARS] + "..."
