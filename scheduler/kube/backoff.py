"""Exponential backoff with jitter for reconnecting to the API server."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_s: float = 0.2
    max_s: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    _next: float = field(default=0.0, init=False)

    def next_delay(self) -> float:
        """The delay before the next attempt; grows with each consecutive failure."""
        self._next = self.initial_s if self._next == 0 else min(self.max_s, self._next * self.factor)
        return self._next * (1 + random.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self._next = 0.0
