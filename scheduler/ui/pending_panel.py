"""Pending pods and gangs, grouped by reason, then by message (many pods usually share one story)."""

from __future__ import annotations

from html import escape

from scheduler.model.reasons import Reason
from scheduler.ui.fmt import attr, duration
from scheduler.ui.view import PendingEntry, PendingGroup, PendingSubject

SUBJECTS_SHOWN = 60  # per message; the rest are counted


def reason_help(reason: str) -> str:
    """What a pending reason means, from the scheduler's `Reason` (empty for a code it does not know)."""
    try:
        return Reason(reason).meaning
    except ValueError:
        return ""


def _subject(s: PendingSubject) -> str:
    wait = f" · waiting {duration(s.waiting_s)}" if s.waiting_s is not None else ""
    wait += f" · {escape(s.note)}" if s.note else ""
    label = f"gang {escape(s.key)}" if s.kind == "gang" else escape(s.key)
    return (
        f'<li class="subject {s.kind}" data-key="{attr(s.key)}"><b>{label}</b> '
        f'<span class="muted">· {escape(s.request)} · queue {escape(s.queue)}{wait}</span></li>'
    )


def _entry(e: PendingEntry) -> str:
    shown = "".join(_subject(s) for s in e.subjects[:SUBJECTS_SHOWN])
    more = len(e.subjects) - SUBJECTS_SHOWN
    rest = f'<li class="muted">… and {more} more</li>' if more > 0 else ""
    n = e.pods
    return (
        f'<div class="entry"><p class="msg">{escape(e.message) or "<i>no message</i>"} '
        f'<span class="pill">{n} pod{"s" if n != 1 else ""}</span></p><ul>{shown}{rest}</ul></div>'
    )


def render_pending(groups: tuple[PendingGroup, ...]) -> str:
    if not groups:
        return '<section id="pending"><h2>Pending</h2><p class="muted">Nothing is pending.</p></section>'
    blocks = []
    for g in groups:
        help_ = reason_help(g.reason)
        blocks.append(
            f'<details class="reason" open data-reason="{attr(g.reason)}"><summary><b>{escape(g.reason)}</b> '
            f'<span class="pill">{g.pods} pod{"s" if g.pods != 1 else ""}</span> '
            f'<span class="muted">{escape(help_)}</span></summary>{"".join(_entry(e) for e in g.entries)}</details>'
        )
    total = sum(g.pods for g in groups)
    return (
        f'<section id="pending"><h2>Pending <span class="pill">{total}</span></h2>{"".join(blocks)}</section>'
    )
