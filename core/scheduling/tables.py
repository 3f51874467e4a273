"""The scheduler's per-request and per-group state, one column (a plain list) per field.

Invariant: every column of a table holds exactly one entry per slot, slot k being the k-th
request (group) added and not yet compacted away; ``index`` maps the id of every slot still
known (not released) to its slot. A field is declared once, as a ``column`` with the value a new
slot starts from (or none: ``add`` is given it), and ``add`` and ``compact`` iterate the
declared columns. Columns are rewritten in place, never replaced, so a reference to one held
for a hot loop stays valid across a compaction. Plain lists (not numpy): the scheduler reads and
writes single entries, which lists do fastest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from core.scheduling.estimate import GroupStats
from core.scheduling.types import RequestPhase

_INITIAL = "initial"
_GIVEN = object()  # marks a column whose value ``add`` is given


def column(initial: object = _GIVEN) -> Any:
    """Declare a column; ``initial`` (immutable): the value of a new slot, none: given to
    ``add``."""
    return field(default_factory=list, metadata={_INITIAL: initial})


_Layout = tuple[tuple[str, ...], tuple[tuple[str, object], ...]]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    """(every column, (column, initial value) of those ``add`` is not given) of a table class."""
    found = _LAYOUTS.get(cls)
    if found is None:
        cols = [f for f in fields(cls) if _INITIAL in f.metadata]
        found = _LAYOUTS[cls] = (
            tuple(f.name for f in cols),
            tuple(
                (f.name, f.metadata[_INITIAL]) for f in cols if f.metadata[_INITIAL] is not _GIVEN
            ),
        )
    return found


class _Table:
    """What both tables share: starting a slot's initial columns, compaction, the size."""

    __slots__ = ()

    def _start_slot(self) -> None:
        """Append the initial value of every column that ``add`` is not given."""
        for name, value in _layout(type(self))[1]:
            getattr(self, name).append(value)

    def _keep(self, keep: Sequence[int]) -> None:
        """Keep only the slots ``keep`` (ascending), renumbered 0.. in that order, in place."""
        for name in _layout(type(self))[0]:
            col = getattr(self, name)
            col[:] = [col[i] for i in keep]

    def columns(self) -> dict[str, list[Any]]:
        """Every column by name (checks, debugging)."""
        return {name: getattr(self, name) for name in _layout(type(self))[0]}


@dataclass(slots=True, eq=False)
class RequestTable(_Table):
    """Per-request state of the scheduler, by slot (submission order)."""

    # given when the request is added
    request_id: list[str] = column()
    group: list[int] = column()  # slot in the group table
    max_tokens: list[int] = column()
    prompt: list[int] = column()  # prompt tokens
    is_probe: list[bool] = column()  # the group's probe, until it finishes
    oracle: list[int] = column()  # true length (oracle orderings), else max_tokens
    # scheduler state, from these initial values
    generated: list[int] = column(0)
    phase: list[RequestPhase] = column(RequestPhase.QUEUED)
    version: list[int] = column(0)  # bumped on every change: identifies live queue entries
    stamp: list[int] = column(0)  # times enqueued: identifies the live FIFO entry
    kv_replica: list[int] = column(-1)  # replica holding its KV (-1: none)
    chunk_replica: list[int] = column(-1)  # replica of its chunk in flight
    chunk_budget: list[int] = column(0)  # new tokens that chunk may generate
    chunk_reserve: list[int] = column(0)  # KV tokens reserved for that chunk
    key: list[float] = column(0.0)  # ordering key of a queued non-probe request, as pushed
    cancelled: list[bool] = column(False)  # cancelled one by one (``cancel_requests``)
    index: dict[str, int] = field(default_factory=dict)

    def add(
        self, request_id: str, group: int, max_tokens: int, prompt: int, probe: bool, oracle: int
    ) -> int:
        """Append a request (phase QUEUED, nothing generated, in no queue); returns its slot."""
        r = len(self.request_id)
        self.request_id.append(request_id)
        self.group.append(group)
        self.max_tokens.append(max_tokens)
        self.prompt.append(prompt)
        self.is_probe.append(probe)
        self.oracle.append(oracle)
        self._start_slot()
        self.index[request_id] = r
        return r

    def compact(self, keep: Sequence[int], new_group: dict[int, int]) -> None:
        """Keep the slots ``keep`` (ascending; every known request among them), their groups
        renumbered by ``new_group``."""
        self._keep(keep)
        self.group[:] = [new_group[g] for g in self.group]
        self.index = {rid: k for k, rid in enumerate(self.request_id)}

    def __len__(self) -> int:
        return len(self.request_id)


@dataclass(slots=True, eq=False)
class GroupTable(_Table):
    """Per-group state of the scheduler, by slot (submission order)."""

    # given when the group is added
    group_id: list[str] = column()
    stats: list[GroupStats] = column()  # length evidence; ``members``: its request slots
    open: list[int] = column()  # members not yet terminal
    # scheduler state, from these initial values
    replica: list[int] = column(-1)  # veRL: the replica running the whole group
    cancelled: list[bool] = column(False)
    released: list[bool] = column(False)
    index: dict[str, int] = field(default_factory=dict)

    def add(self, group_id: str, stats: GroupStats, members: int) -> int:
        """Append a group of ``members`` open requests (added to the request table apart);
        returns its slot."""
        gi = len(self.group_id)
        self.group_id.append(group_id)
        self.stats.append(stats)
        self.open.append(members)
        self._start_slot()
        self.index[group_id] = gi
        return gi

    def compact(self, keep: Sequence[int], new_request: dict[int, int]) -> None:
        """Keep the slots ``keep`` (ascending; every known group among them), their members
        renumbered by ``new_request``."""
        self._keep(keep)
        for g in self.stats:
            g.members = [new_request[r] for r in g.members]
        self.index = {gid: k for k, gid in enumerate(self.group_id)}

    def __len__(self) -> int:
        return len(self.group_id)
