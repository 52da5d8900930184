"""What each queue held over a simulation, per period (GPU-hours by day): how `tessera simulate` shows time-based
fair share at work, teams alternating and the allocation correcting itself over simulated days."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.cycle import Scheduler

DAY_S = 86400.0


@dataclass
class QueueTimeline:
    """Leaf queues' GPUs after every cycle, as a step function of simulated time."""

    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self, t: float, scheduler: Scheduler) -> None:
        session = scheduler.last_session
        if session is None:
            return
        held = {n: node.allocated.gpu for n, node in session.tree.nodes.items() if node.is_leaf}
        self.samples.append((t, held))

    def gpu_hours(self, period_s: float, end_s: float) -> list[dict[str, Any]]:
        """Per period [k*period, (k+1)*period) up to `end_s`: GPU-hours each queue held."""
        periods = max(1, -(-int(end_s) // int(period_s))) if end_s > 0 else 1
        out: list[dict[str, float]] = [{} for _ in range(periods)]
        for i, (t, held) in enumerate(self.samples):
            t_next = self.samples[i + 1][0] if i + 1 < len(self.samples) else end_s
            t_next = min(t_next, end_s)
            while t < t_next:
                k = int(t // period_s)
                seg = min(t_next, (k + 1) * period_s) - t
                if k < periods:
                    for q, g in held.items():
                        out[k][q] = out[k].get(q, 0.0) + g * seg / 3600
                t += seg
        return [
            {"start_s": k * period_s, "gpu_hours": {q: round(v, 2) for q, v in sorted(p.items())}}
            for k, p in enumerate(out)
        ]
