"""Dispatch throughput benchmarks of the scheduler.

1. Decisions per second with ~10k queued requests. Invariant: the measured loop is exactly what
   a driver does per chunk (``schedule`` + ``complete``), on a backlog that stays at ``queued``
   requests (re-queued chunks keep it full), so the figure is the scheduler's own cost per
   decision, not the engine's.
2. Long run: one scheduler serves many rollouts in sequence, releasing each group when it is
   done (what the service does); decisions/s and memory at the end must match the start.

Run: ``python -m lab.bench.scheduler_dispatch`` (``--long-run`` for the second only).
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

from core.engine.types import FinishReason
from core.scheduling.base import BaseScheduler
from core.scheduling.config import SchedulerConfig
from core.scheduling.factory import make_scheduler
from core.scheduling.policies import get_policy
from core.scheduling.types import ChunkDecision, GroupSpec, ReplicaSpec


@dataclass(frozen=True, slots=True)
class DispatchBench:
    policy: str
    decisions: int
    seconds: float
    queued_min: int

    @property
    def per_second(self) -> float:
        return self.decisions / self.seconds


def _complete(s: BaseScheduler, chunks: list[ChunkDecision], lengths: dict[str, int]) -> None:
    """Report ``chunks`` as an engine would: stop at the true length, else a full chunk."""
    for d in chunks:
        left = lengths[d.request_id] - d.generated
        if left <= d.chunk_cap:
            s.complete(d.request_id, left, FinishReason.STOP)
        else:
            s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)


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
    s = make_scheduler(plan.config, reps)
    s.submit(groups, oracle_lengths=lengths)
    inflight = s.schedule()
    done = 0
    queued_min = s.num_queued
    t0 = time.perf_counter()
    while done < decisions:
        rng.shuffle(inflight)
        half = len(inflight) // 2
        _complete(s, inflight[:half], lengths)
        new = s.schedule()
        done += len(new)
        inflight = inflight[half:] + new
        queued_min = min(queued_min, s.num_queued)
    return DispatchBench(policy, done, time.perf_counter() - t0, queued_min)


@dataclass(frozen=True, slots=True)
class LongRunBench:
    """Decisions/s and traced memory over the first and the last ``window`` rollouts."""

    policy: str
    rollouts: int
    requests_per_rollout: int
    start_per_s: float
    end_per_s: float
    start_kib: float
    end_kib: float
    max_held: int

    @property
    def speed_ratio(self) -> float:
        return self.end_per_s / self.start_per_s


def _serve_rollouts(
    s: BaseScheduler,
    rollouts: int,
    groups: int,
    group_size: int,
    seed: int,
    on_rollout: Callable[[int], None],
) -> int:
    """Submit rollouts one at a time, each run to completion with its groups released when
    done; calls ``on_rollout(k)`` before rollout k. Returns the most request slots held."""
    rng = random.Random(seed)
    held = 0
    for k in range(rollouts):
        on_rollout(k)
        specs = [
            GroupSpec(f"j{k}g{g}", tuple(f"j{k}g{g}r{i}" for i in range(group_size)), 4096, 256)
            for g in range(groups)
        ]
        lengths = {r: rng.randint(1, 4096) for sp in specs for r in sp.request_ids}
        s.submit(specs, oracle_lengths=lengths)
        inflight = s.schedule()
        while inflight:
            held = max(held, s.num_held)
            half = max(1, len(inflight) // 2)
            _complete(s, inflight[:half], lengths)
            inflight = inflight[half:] + s.schedule()
        for sp in specs:
            s.release(sp.group_id)
    return held


def bench_long_run(
    policy: str = "context",
    rollouts: int = 1000,
    groups: int = 4,
    group_size: int = 16,
    replicas: int = 4,
    window: int = 100,
    seed: int = 0,
) -> LongRunBench:
    """``rollouts`` rollouts of ``groups`` x ``group_size`` requests through one scheduler, in
    sequence. Timed pass: decisions/s over the first and last ``window`` rollouts; a second,
    traced pass (tracemalloc): memory held after the first and the last ``window``."""

    def make() -> BaseScheduler:
        plan = get_policy(policy, SchedulerConfig(chunk_tokens=256))
        reps = [ReplicaSpec(f"r{i}", 10**7, 64) for i in range(replicas)]
        return make_scheduler(plan.config, reps)

    s = make()
    marks: dict[int, tuple[float, int]] = {}

    def mark(k: int) -> None:
        if k in (0, window, rollouts - window):
            marks[k] = (time.perf_counter(), s.num_dispatched)

    held = _serve_rollouts(s, rollouts, groups, group_size, seed, mark)
    end = (time.perf_counter(), s.num_dispatched)

    def rate(a: tuple[float, int], b: tuple[float, int]) -> float:
        return (b[1] - a[1]) / (b[0] - a[0])

    start_rate = rate(marks[0], marks[window])
    end_rate = rate(marks[rollouts - window], end)

    mem: dict[int, float] = {}
    tracemalloc.start()
    try:
        s2 = make()

        def snap(k: int) -> None:
            if k in (window, rollouts - 1):
                mem[k] = tracemalloc.get_traced_memory()[0] / 1024

        _serve_rollouts(s2, rollouts, groups, group_size, seed, snap)
    finally:
        tracemalloc.stop()
    return LongRunBench(
        policy,
        rollouts,
        groups * group_size,
        start_rate,
        end_rate,
        mem[window],
        mem[rollouts - 1],
        held,
    )


def main() -> None:
    if "--long-run" not in sys.argv:
        for policy in ("divided", "context", "context-hedge", "context-max", "oracle"):
            b = bench_dispatch(policy)
            print(
                f"{policy:12s} {b.per_second:9.0f} decisions/s "
                f"({b.decisions} in {b.seconds:.2f} s, >= {b.queued_min} queued)"
            )
    for policy in ("divided", "context"):
        lr = bench_long_run(policy)
        print(
            f"long run {policy:8s} {lr.rollouts} rollouts x {lr.requests_per_rollout} requests: "
            f"{lr.start_per_s:8.0f} -> {lr.end_per_s:8.0f} decisions/s "
            f"(end/start {lr.speed_ratio:.3f}); memory {lr.start_kib:.0f} -> {lr.end_kib:.0f} KiB; "
            f"at most {lr.max_held} request slots held"
        )


if __name__ == "__main__":
    main()
