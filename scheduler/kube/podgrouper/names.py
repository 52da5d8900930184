"""Group names: DNS-1123 labels (at most 63 characters) that never lose the owner's UID.

KAI names a group `pg-<owner>-<uid>`. A workload deleted and re-created under the same name gets a new
UID, so the UID is what keeps the two apart: when the name is too long, the owner's name is shortened,
never the UID or a suffix such as LeaderWorkerSet's `-group-<i>`.
"""

from __future__ import annotations

import hashlib
import re

MAX_LEN = 63
PREFIX = "pg"


def _clean(raw: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", raw.lower())).strip("-")


def _digest(raw: str, length: int = 10) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()[:length]


def dns_label(raw: str) -> str:
    """`raw` as a DNS-1123 label; one too long is cut and ends with a digest of the whole, so two long
    names that share a prefix stay distinct."""
    name = _clean(raw) or "pg"
    if len(name) <= MAX_LEN:
        return name
    return f"{name[: MAX_LEN - 11].rstrip('-')}-{_digest(raw)}"


def group_name(owner: str, uid: str, suffix: str = "") -> str:
    """`pg-<owner>-<uid>[-<suffix>]`, the owner part shortened to fit; without a UID, a digest of the
    owner's name stands in for it."""
    tail = "-".join(p for p in (_clean(uid) or _digest(owner), _clean(suffix)) if p)
    if len(tail) > MAX_LEN - len(PREFIX) - 1:
        tail = _digest(tail, 16)
    room = MAX_LEN - len(PREFIX) - len(tail) - 2
    head = _clean(owner)[:room].rstrip("-") if room > 0 else ""
    return "-".join(p for p in (PREFIX, head, tail) if p)
