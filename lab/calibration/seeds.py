"""Work spread over seeds: the same function on each seed, in worker processes.

Invariant: the result is the list ``[fn(s) for s in seeds]`` in seed order, whatever the
number of workers; a simulation is deterministic per seed, so where it ran changes nothing.
The workers are spawned (never forked: the caller may hold Ray or event-loop threads), one per
core up to the number of seeds, once per process, and reused by every later call.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context
from typing import TypeVar

T = TypeVar("T")


@functools.cache
def _pool(workers: int) -> Executor:
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"))


def over_seeds(fn: Callable[[int], T], seeds: Sequence[int]) -> list[T]:
    """``fn`` on every seed; in parallel when there are several seeds and cores. ``fn`` must be
    picklable (a module-level function, or a ``functools.partial`` of one)."""
    workers = min(len(seeds), os.cpu_count() or 1)
    if workers <= 1:
        return [fn(s) for s in seeds]
    return list(_pool(workers).map(fn, seeds))
