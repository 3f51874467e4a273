"""Where events go: the ``EventSink`` protocol, a no-op default and an in-memory collector."""

from __future__ import annotations

from typing import Protocol

from core.events.types import Event


class EventSink(Protocol):
    """Receives events. ``emit`` must not block nor raise (a sink that can fail counts its
    failures itself): it is called on the scheduler's hot path."""

    def emit(self, event: Event) -> None: ...


class NullSink:
    """Drops every event (the default: emitters skip building events when given it)."""

    def emit(self, event: Event) -> None:
        return None


NULL_SINK = NullSink()


class CollectingSink:
    """Keeps every event in order (tests, the simulator's reports)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Event]) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]
