"""Ordering policies: which queued (non-probe) request gets the next free slot.

Invariant: an ordering is a pure function of the scheduler's state and one request index,
returning a key; the queued request with the *smallest* key is dispatched next, ties broken by
submission order. Keys are recomputed whenever their inputs change (the request is re-queued, a
sibling finishes, population statistics are refreshed), so a stale key is never used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from core.scheduling.estimate import PopulationStats, context_remaining

if TYPE_CHECKING:  # config.py checks ordering names against ORDERINGS: no import back
    from core.scheduling.config import SchedulerConfig
    from core.scheduling.tables import GroupTable, RequestTable


class OrderingState(Protocol):
    """The part of the scheduler state an ordering may read (of the tables: a request's
    ``generated`` tokens and ``group``, a group's ``stats``)."""

    config: SchedulerConfig
    requests: RequestTable
    groups: GroupTable
    population: PopulationStats
    oracle_lengths: Sequence[int] | None


OrderingFn = Callable[[OrderingState, int], float]


def fifo_key(state: OrderingState, r: int) -> float:
    """``divided``: submission order; a re-queued request keeps its place in line."""
    return float(r)


def context_max_key(state: OrderingState, r: int) -> float:
    """Paper's Algorithm 2: largest estimated group length first, estimate = max finished
    sibling (the cap until one finishes), raised by the furthest sibling progress."""
    return -float(state.groups.stats[state.requests.group[r]].paper_estimate())


def context_hedge_key(state: OrderingState, r: int) -> float:
    """``context-hedge``: largest hedged estimate of the request's own *total* length first
    (group evidence + prior + its own progress; see ``core.scheduling.estimate``). A request
    that keeps running only climbs, so chunk boundaries do not shuffle running requests."""
    g = state.groups.stats[state.requests.group[r]]
    y = state.requests.generated[r]
    return -(context_remaining(g, state.population, y, state.config.hedge_quantile) + y)


def breadth_first_key(state: OrderingState, r: int) -> float:
    """Least attained service first: the request with the fewest generated tokens (ties by
    submission order). Every request gets its first chunk before any gets a second, and so on:
    all requests progress together, so runaway responses are running from the start."""
    return float(state.requests.generated[r])


def context_key(state: OrderingState, r: int) -> float:
    """Ours (the ``context`` policy's order): breadth-first, except that a request whose hedged
    total length (``context_hedge_key``'s estimate) reaches ``promote_fraction`` of the cap goes
    first, longest first (ties by submission order). In practice the promoted ones are the
    requests of groups with no finished sibling yet (the estimate starts at the cap) and of
    groups whose evidence says they run to the cap; everything else progresses together, so
    no request, a runaway response included, is left unstarted until late."""
    g = state.groups.stats[state.requests.group[r]]
    y = state.requests.generated[r]
    total = y + context_remaining(g, state.population, y, state.config.hedge_quantile)
    if total >= state.config.promote_fraction * g.cap:
        return -total
    return float(y)


def oracle_cap_key(state: OrderingState, r: int) -> float:
    """``context`` whose promotion knows the truth: exactly the requests whose true length
    reaches ``promote_fraction`` of the cap go first (longest true remaining first); every other
    request breadth-first. A yardstick (needs the true lengths): how much of the gap between
    ``context`` and ``oracle`` is identifying the long responses."""
    if state.oracle_lengths is None:
        raise ValueError("ordering 'oracle-cap' needs oracle_lengths (the true output lengths)")
    cap = state.groups.stats[state.requests.group[r]].cap
    true = state.oracle_lengths[r]
    y = state.requests.generated[r]
    if true >= state.config.promote_fraction * cap:
        return -float(cap + true - y)
    return float(y)


def oracle_key(state: OrderingState, r: int) -> float:
    """Longest true remaining length first (needs the true lengths; a yardstick, not a policy
    a real service can run)."""
    if state.oracle_lengths is None:
        raise ValueError("ordering 'oracle' needs oracle_lengths (the true output lengths)")
    return -float(state.oracle_lengths[r] - state.requests.generated[r])


def oracle_group_key(state: OrderingState, r: int) -> float:
    """Longest true *group* length first (max over the group's true lengths), the best any
    group-level estimate can reach: the yardstick that separates what context can learn from
    within-group noise no context can (a yardstick too)."""
    if state.oracle_lengths is None:
        raise ValueError("ordering 'oracle-group' needs oracle_lengths (the true output lengths)")
    lens = state.oracle_lengths
    return -float(max(lens[m] for m in state.groups.stats[state.requests.group[r]].members))


ORDERINGS: dict[str, OrderingFn] = {
    "fifo": fifo_key,
    "context-hedge": context_hedge_key,
    "context-max": context_max_key,
    "context": context_key,
    "breadth-first": breadth_first_key,
    "oracle": oracle_key,
    "oracle-group": oracle_group_key,
    "oracle-cap": oracle_cap_key,
}


#: Orderings whose keys never depend on sibling evidence (no re-keying when a sibling reports).
STATIC_ORDERINGS = frozenset({"fifo", "breadth-first", "oracle", "oracle-group", "oracle-cap"})

#: Orderings whose key depends on a request only through its group and its generated tokens
#: (re-keying computes each such pair once).
GROUP_KEYED_ORDERINGS = frozenset({"context", "context-hedge", "context-max", "breadth-first"})

#: Yardstick orderings that need the true lengths (``Scheduler.submit``'s ``oracle_lengths``).
ORACLE_ORDERINGS = frozenset({"oracle", "oracle-group", "oracle-cap"})


def get_ordering(name: str) -> OrderingFn:
    try:
        return ORDERINGS[name]
    except KeyError:
        raise ValueError(f"unknown ordering {name!r}; valid: {sorted(ORDERINGS)}") from None
