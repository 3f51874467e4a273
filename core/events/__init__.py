"""Typed events the rollout emits (scheduler, dispatcher, engines) for the history store.

Invariant: an event is an immutable record of something that already happened; emitting one
never changes what the emitter does next, and a sink must return at once (no I/O, no blocking):
the store's writer only enqueues. ``NULL_SINK`` is the default and costs one call.
"""

from core.events.sink import NULL_SINK, CollectingSink, EventSink, NullSink
from core.events.types import (
    ChunkDone,
    DraftStats,
    Event,
    GroupEstimate,
    GroupFinished,
    GroupInfo,
    JobFinished,
    JobStarted,
    ReplicaLoadSample,
    RequestFinished,
    SchedulerStarted,
    SpeculationConfigChanged,
)

__all__ = [
    "NULL_SINK",
    "ChunkDone",
    "CollectingSink",
    "DraftStats",
    "Event",
    "EventSink",
    "GroupEstimate",
    "GroupFinished",
    "GroupInfo",
    "JobFinished",
    "JobStarted",
    "NullSink",
    "ReplicaLoadSample",
    "RequestFinished",
    "SchedulerStarted",
    "SpeculationConfigChanged",
]
