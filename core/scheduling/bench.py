"""Dispatch throughput benchmark: decisions per second with ~10k queued requests.

Invariant: the measured loop is exactly what a driver does per chunk (``schedule`` +
``complete``), on a backlog that stays at ``queued`` requests (re-queued chunks keep it full),
so the figure is the scheduler's own cost per decision, not the engine's.
Run: ``python -m core.scheduling.bench``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from core.engine.types import FinishReason
from core.scheduling.config import SchedulerConfig
from core.scheduling.policies import get_policy
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import GroupSpec, ReplicaSpec


@dataclass(frozen=True, slots=True)
class DispatchBench:
    policy: str
    decisions: int
    seconds: float
    queued_min: int

    @property
    def per_second(self) -> float:
        return self.decisions / self.seconds


def bench_dispatch(
    policy: str = "context",
    queued: int = 10_000,
    group_size: int = 16,
    replicas: int = 16,
    slots: int = 64,
    decisions: int = 50_000,
    seed: int = 0,
) -> DispatchBench:
    """Time ``decisions`` dispatches (+ their completions) with ``queued`` requests waiting."""
    rng = random.Random(seed)
    n_groups = (queued + replicas * slots) // group_size + 1
    groups = [
        GroupSpec(f"g{g}", tuple(f"g{g}-{i}" for i in range(group_size)), 1_000_000, 512)
        for g in range(n_groups)
    ]
    lengths = {r: rng.randint(1, 900_000) for g in groups for r in g.request_ids}
    plan = get_policy(policy, SchedulerConfig(chunk_tokens=256))
    reps = [ReplicaSpec(f"r{i}", 10**9, slots) for i in range(replicas)]
    s = Scheduler(plan.config, reps)
    s.submit(groups, oracle_lengths=lengths)
    inflight = s.schedule()
    done = 0
    queued_min = s.num_queued
    t0 = time.perf_counter()
    while done < decisions:
        rng.shuffle(inflight)
        half = len(inflight) // 2
        for d in inflight[:half]:
            left = lengths[d.request_id] - d.generated
            if left <= d.max_new_tokens:
                s.complete(d.request_id, left, FinishReason.STOP)
            else:
                s.complete(d.request_id, d.max_new_tokens, FinishReason.CHUNK)
        new = s.schedule()
        done += len(new)
        inflight = inflight[half:] + new
        queued_min = min(queued_min, s.num_queued)
    return DispatchBench(policy, done, time.perf_counter() - t0, queued_min)


def main() -> None:
    for policy in ("divided", "context", "context-hedge", "context-max", "oracle"):
        b = bench_dispatch(policy)
        print(
            f"{policy:12s} {b.per_second:9.0f} decisions/s "
            f"({b.decisions} in {b.seconds:.2f} s, >= {b.queued_min} queued)"
        )


if __name__ == "__main__":
    main()
