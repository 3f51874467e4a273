"""Building the scheduler a config asks for: the one place that reads ``config.divided``.

Invariant: ``make_scheduler`` returns a ``VerlScheduler`` exactly when ``config.divided`` is
False, else the divided ``Scheduler``; both take the same arguments and have the same public
API (``BaseScheduler``), so a caller holds a ``BaseScheduler`` and never tests the flag again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from core.events import EventSink
from core.scheduling.base import DEFAULT_COMPACT_AFTER, BaseScheduler
from core.scheduling.config import SchedulerConfig
from core.scheduling.estimate import LengthPrior
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import ReplicaSpec
from core.scheduling.verl import VerlScheduler


def make_scheduler(
    config: SchedulerConfig,
    replicas: Sequence[ReplicaSpec],
    prior: LengthPrior | None = None,
    compact_after: int = DEFAULT_COMPACT_AFTER,
    sink: EventSink | None = None,
    clock: Callable[[], float] = time.time,
) -> BaseScheduler:
    """The scheduler of ``config`` (a policy's ``PolicyPlan.config``) over ``replicas``; the
    other arguments as ``BaseScheduler`` takes them."""
    cls: type[BaseScheduler] = Scheduler if config.divided else VerlScheduler
    return cls(config, replicas, prior, compact_after, sink, clock)
