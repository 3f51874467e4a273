"""Online length estimates for context-aware ordering.

Invariant: a group's evidence only accumulates. ``GroupStats`` counts finished siblings (their
log lengths), the furthest progress of any sibling (a lower bound on the group's length), and an
optional prior from earlier iterations of the same prompt; nothing is ever forgotten, so the
paper's estimate ``max(finished)`` never shrinks and the progress bound never shrinks.

Model behind the ``context`` estimate: log L = mu_g + eps, eps ~ N(0, s_w^2) among siblings of a
group, L capped at max_tokens. mu_g is the (prior-weighted) mean of the observed log lengths,
raised to the log of the furthest progress of an unfinished sibling; with no observation it is
log(cap) (the paper's "start at the cap"). A request that has already generated y tokens is
ranked by y + a quantile of its remaining length min(L, cap) - y given L > y, so a request that
keeps running only climbs (the lognormal's decreasing hazard), unlike the group-level max of
Algorithm 2, under which long requests of groups whose probe was short sink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Protocol

_STD = NormalDist()


class LengthPrior(Protocol):
    """Recorded output lengths of a prompt from earlier RL iterations (None if unseen)."""

    def lengths(self, prompt_key: str) -> list[int] | None: ...


@dataclass(frozen=True, slots=True)
class DictLengthPrior:
    """A ``LengthPrior`` backed by a mapping prompt_key -> recorded lengths (each >= 1)."""

    table: dict[str, list[int]]

    def __post_init__(self) -> None:
        for key, lens in self.table.items():
            bad = [x for x in lens if x < 1]
            if bad:
                raise ValueError(f"prior for {key!r} has lengths < 1: {bad[:5]}")

    def lengths(self, prompt_key: str) -> list[int] | None:
        return self.table.get(prompt_key)


@dataclass(slots=True)
class GroupStats:
    """Evidence about one group's output lengths (see module invariant)."""

    cap: int
    n_finished: int = 0
    sum_log: float = 0.0
    sumsq_log: float = 0.0
    max_finished: int = 0
    max_progress: int = 0
    running_max: int = 0
    prior_weight: float = 0.0
    prior_sum_log: float = 0.0
    members: list[int] = field(default_factory=list)

    def observe_finished(self, length: int) -> None:
        x = math.log(max(length, 1))
        self.n_finished += 1
        self.sum_log += x
        self.sumsq_log += x * x
        self.max_finished = max(self.max_finished, length)
        self.max_progress = max(self.max_progress, length)

    def set_running_max(self, generated: int) -> None:
        """Furthest progress among the group's *unfinished* requests (0 if none)."""
        self.running_max = generated

    def observe_progress(self, generated: int) -> None:
        self.max_progress = max(self.max_progress, generated)
        self.running_max = max(self.running_max, generated)

    def seed_prior(self, lengths: list[int], weight_each: float) -> None:
        if not lengths or weight_each <= 0.0:
            return
        self.prior_weight += weight_each * len(lengths)
        self.prior_sum_log += weight_each * sum(math.log(max(x, 1)) for x in lengths)

    def paper_estimate(self) -> int:
        """Algorithm 2: max finished sibling length (cap before any finishes), raised by the
        furthest sibling progress."""
        if self.n_finished == 0:
            return self.cap
        return max(self.max_finished, self.max_progress)

    def log_mean(self) -> tuple[float, float]:
        """(mu_g, evidence weight); mu_g = log(cap) with no evidence."""
        w = self.n_finished + self.prior_weight
        if w <= 0.0:
            return math.log(self.cap), 0.0
        mu = (self.sum_log + self.prior_sum_log) / w
        if self.running_max > 0:
            mu = max(mu, math.log(self.running_max))
        return mu, w


@dataclass(slots=True)
class PopulationStats:
    """Pooled within-group spread of log lengths, learned online from finished siblings."""

    prior_sigma: float
    prior_dof: float = 32.0
    sigma: float = 0.0
    ss: float = 0.0  # running within-group sum of squares of log lengths, every group seen
    dof: int = 0

    def __post_init__(self) -> None:
        self.sigma = self.prior_sigma

    @staticmethod
    def _spread(g: GroupStats) -> tuple[float, int]:
        if g.n_finished < 2:
            return 0.0, 0
        return g.sumsq_log - g.sum_log * g.sum_log / g.n_finished, g.n_finished - 1

    def observe_finished(self, g: GroupStats, length: int) -> None:
        """``g.observe_finished(length)``, and its change of spread added to the running sums
        (so the pool keeps what released groups taught, in the order it was learned)."""
        ss0, dof0 = self._spread(g)
        g.observe_finished(length)
        ss1, dof1 = self._spread(g)
        self.ss += ss1 - ss0
        self.dof += dof1 - dof0

    def refresh(self) -> None:
        """Re-estimate ``sigma`` from the running sums (the scheduler does it periodically)."""
        var = (self.prior_sigma**2 * self.prior_dof + self.ss) / (self.prior_dof + self.dof)
        self.sigma = math.sqrt(max(var, 1e-6))


def remaining_quantile(mu: float, sigma: float, cap: int, generated: int, q: float) -> float:
    """q-quantile of min(L, cap) - generated for log L ~ N(mu, sigma^2), given L > generated."""
    if generated >= cap:
        return 0.0
    p0 = _STD.cdf((math.log(generated) - mu) / sigma) if generated > 0 else 0.0
    p = p0 + q * (1.0 - p0)
    if p >= 1.0 - 1e-12:
        return float(cap - generated)
    length = math.exp(mu + sigma * _STD.inv_cdf(max(p, 1e-12)))
    return max(min(length, float(cap)) - generated, 0.0)


def context_remaining(
    g: GroupStats, pop: PopulationStats, generated: int, hedge_quantile: float
) -> float:
    """Hedged estimate of one request's remaining tokens (the ``context`` ordering key)."""
    mu, w = g.log_mean()
    s = pop.sigma
    sigma = math.sqrt(s * s * (1.0 + 1.0 / w)) if w > 0 else s
    return remaining_quantile(mu, sigma, g.cap, generated, hedge_quantile)
