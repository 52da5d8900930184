"""What one scheduling cycle works with: the session (queue tree, fair shares, jobs, reasons), the
transaction actions try placements and evictions in (KAI's statement), the memo actions share, the
search budgets, and the scheduler's metrics. The loop itself is `scheduler/cycle.py`; the actions are
`scheduler/actions/`.
"""
