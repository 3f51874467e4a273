"""Compass search: the derivative-free minimiser the calibrations share.

Invariant: every point evaluated lies inside its parameters' bounds; a step of a parameter is
taken (first improvement, +step before -step, parameters in the order given) only when it lowers
the objective by more than 1e-9, and all steps halve when a full pass improves nothing; after
``sweeps`` halvings the best point seen is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.bounds import check_range


@dataclass(frozen=True, slots=True)
class Param:
    """One searched parameter: in [``lo``, ``hi``], from ``start``, first step ``step`` > 0."""

    name: str
    lo: float
    hi: float
    start: float
    step: float

    def __post_init__(self) -> None:
        check_range(f"{self.name}.start", self.start, self.lo, self.hi)
        check_range(f"{self.name}.step", self.step, 0, lo_open=True)


def compass(
    objective: Callable[[dict[str, float]], float],
    params: tuple[Param, ...],
    sweeps: int = 4,
) -> tuple[dict[str, float], float]:
    """Minimise ``objective`` over ``params`` (see the module invariant); returns the best
    point and its value."""
    check_range("sweeps", sweeps, 1)
    cur = {p.name: p.start for p in params}
    best = objective(cur)
    steps: Mapping[str, float] = {p.name: p.step for p in params}
    for _ in range(sweeps):
        improved = True
        while improved:
            improved = False
            for p in params:
                for sign in (1.0, -1.0):
                    trial = dict(cur)
                    trial[p.name] = min(p.hi, max(p.lo, cur[p.name] + sign * steps[p.name]))
                    if trial[p.name] == cur[p.name]:
                        continue
                    val = objective(trial)
                    if val < best - 1e-9:
                        cur, best, improved = trial, val, True
                        break
        steps = {k: v / 2 for k, v in steps.items()}
    return cur, best
