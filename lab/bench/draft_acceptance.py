"""The ``replay`` benchmark over a whole recorded file: totals per (method, k) plus speed.

Invariant: every figure is a token-weighted total over all requests of all groups (output
tokens / verification steps), never a mean of per-group ratios; the speed figures come from the
file's largest group (prompt + outputs) run through the same grouped drafter the service uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.drafting.recorded import RecordedGroup
from core.drafting.speculate import SpeculationParams
from lab.bench.draft_methods import GROUPED_WIDTHS, METHODS, method_factory
from lab.bench.draft_replay import (
    DEFAULT_SCORING,
    PROTOCOLS,
    SpeedFigures,
    Tally,
    measure_speed,
    replay_lockstep,
    replay_references,
)

DEFAULT_KS = (4, 8, 16)
DEFAULT_METHODS = tuple(METHODS)
SPEED_K = 8


@dataclass(frozen=True, slots=True)
class ReplayReport:
    protocol: str
    scoring: SpeculationParams
    # method label -> k -> totals; labels are method names, or "name@n=N" for ``references``
    table: dict[str, dict[int, Tally]]
    speed: SpeedFigures  # of ``speed_method`` at k=8 on the largest group
    speed_method: str
    largest_group: str
    largest_group_tokens: int


def run_replay(
    groups: Sequence[RecordedGroup],
    methods: Sequence[str] = DEFAULT_METHODS,
    ks: Sequence[int] = DEFAULT_KS,
    protocol: str = "lockstep",
    scoring: SpeculationParams = DEFAULT_SCORING,
) -> ReplayReport:
    """Replay ``methods`` at every draft budget in ``ks`` on ``groups`` under ``protocol``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
    if not groups:
        raise ValueError("no groups to replay")
    if not methods:
        raise ValueError("no methods to replay")
    for name in methods:
        method_factory(name)  # raises listing the valid names
    if len(set(methods)) != len(methods):
        raise ValueError(f"duplicate methods: {list(methods)}")
    if not ks or any(not 1 <= k <= 64 for k in ks) or len(set(ks)) != len(ks):
        raise ValueError(f"ks must be distinct draft budgets in [1, 64], got {list(ks)}")
    table: dict[str, dict[int, Tally]] = {}

    def merge(label: str, part: dict[int, Tally]) -> None:
        row = table.setdefault(label, {k: Tally() for k in ks})
        for k in ks:
            row[k].add(part[k])

    if protocol == "lockstep":
        for g in groups:
            res = replay_lockstep(g, methods, ks, scoring)
            for name in methods:
                merge(name, res[name])
    else:
        g_max = max(len(g.outputs) for g in groups)
        for n in sorted({0, g_max - 1}):
            for g in groups:
                res = replay_references(g, methods, ks, min(n, len(g.outputs) - 1), scoring)
                for name in methods:
                    merge(f"{name}@n={n}", res[name])
    largest = max(groups, key=lambda g: g.num_tokens)
    # the service's drafter is always timed: the widest grouped method asked for (the slowest
    # to draft; the append cost is shared), or the single path when none was asked for
    grouped = [m for m in methods if m in GROUPED_WIDTHS] or ["grouped"]
    speed_method = max(grouped, key=GROUPED_WIDTHS.__getitem__)
    speed = measure_speed(largest, speed_method, SPEED_K, scoring)
    return ReplayReport(
        protocol=protocol,
        scoring=scoring,
        table=table,
        speed=speed,
        speed_method=speed_method,
        largest_group=largest.group_id,
        largest_group_tokens=largest.num_tokens,
    )
