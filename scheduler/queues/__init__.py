"""Hierarchical queues: the tree, fair share, and the order queues are served in."""

from scheduler.queues.fairshare import compute_fair_shares
from scheduler.queues.tree import QueueNode, QueueTree, QueueTreeError

__all__ = ["QueueNode", "QueueTree", "QueueTreeError", "compute_fair_shares"]
