"""Online estimate of per-token draft acceptance, per group and by match length.

Invariant: an observation of a draft of g tokens of which x were accepted is x successes and
``x < g`` failures of the per-token acceptance trial (tokens after the first rejection were never
tried). Estimates are Beta-smoothed ratios of decayed successes/trials, backing off from
(group, match-length bucket) to the group, then to the global bucket, then to the prior, each
level serving as the prior of the one above it with weight ``prior_weight``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Match-length buckets: [0,1], [2,3], [4,7], [8,15], [16,31], [32, inf)
BUCKET_BOUNDS = (2, 4, 8, 16, 32)


def match_bucket(match_length: int) -> int:
    """Bucket index of a match length (0..len(BUCKET_BOUNDS))."""
    if match_length < 0:
        raise ValueError(f"match_length must be >= 0, got {match_length}")
    for b, bound in enumerate(BUCKET_BOUNDS):
        if match_length < bound:
            return b
    return len(BUCKET_BOUNDS)


@dataclass(slots=True)
class AcceptanceStats:
    """Decayed successes and trials of per-token acceptance."""

    successes: float = 0.0
    trials: float = 0.0

    def add(self, successes: int, trials: int, decay: float) -> None:
        self.successes = self.successes * decay + successes
        self.trials = self.trials * decay + trials

    def estimate(self, prior: float, prior_weight: float) -> float:
        return (self.successes + prior * prior_weight) / (self.trials + prior_weight)


@dataclass(slots=True)
class AcceptanceEstimator:
    """Per-token acceptance rate learned online from verification results."""

    prior: float = 0.3  # acceptance assumed before any observation, in [0, 1]
    prior_weight: float = 4.0  # pseudo-trials of each back-off level, > 0
    decay: float = 0.995  # per-observation decay of old evidence, in (0, 1]
    _global: dict[int, AcceptanceStats] = field(default_factory=dict)
    _groups: dict[str, dict[int, AcceptanceStats]] = field(default_factory=dict)
    _group_all: dict[str, AcceptanceStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {self.prior}")
        if not self.prior_weight > 0.0:
            raise ValueError(f"prior_weight must be > 0, got {self.prior_weight}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")

    def observe(self, group_id: str, match_length: int, drafted: int, accepted: int) -> None:
        """Record one verified draft: ``accepted`` of its ``drafted`` tokens were accepted."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(
                f"need 0 <= accepted <= drafted, got accepted={accepted}, drafted={drafted}"
            )
        if drafted == 0:
            return
        trials = accepted + (1 if accepted < drafted else 0)
        b = match_bucket(match_length)
        d = self.decay
        self._global.setdefault(b, AcceptanceStats()).add(accepted, trials, d)
        self._groups.setdefault(group_id, {}).setdefault(b, AcceptanceStats()).add(
            accepted, trials, d
        )
        self._group_all.setdefault(group_id, AcceptanceStats()).add(accepted, trials, d)

    def estimate(self, group_id: str, match_length: int) -> float:
        """Acceptance rate for a draft of ``group_id`` continued from a ``match_length`` match."""
        b = match_bucket(match_length)
        w = self.prior_weight
        a = self.prior
        g_stats = self._global.get(b)
        if g_stats is not None:
            a = g_stats.estimate(a, w)
        grp = self._group_all.get(group_id)
        if grp is not None:
            a = grp.estimate(a, w)
        cell = self._groups.get(group_id, {}).get(b)
        if cell is not None:
            a = cell.estimate(a, w)
        return a

    def forget_group(self, group_id: str) -> None:
        """Drop a released group's statistics (the global buckets keep what it taught)."""
        self._groups.pop(group_id, None)
        self._group_all.pop(group_id, None)
