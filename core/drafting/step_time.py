"""Verification step time of one engine, learned online from measured steps.

Invariant: the model is the least-squares fit of ``t = base + per_request * batch +
per_draft_token * draft_tokens`` over exponentially decayed observations (weight ``decay^age``),
so it tracks the engine as load and sequence lengths drift. It is ``ready`` only once it has seen
steps with and without draft tokens (otherwise the draft-token slope is not identifiable), and
every prediction is clamped to at least ``floor_s`` so callers can divide by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class StepTimeModel:
    """Online linear model of step seconds vs (batch size, draft tokens verified)."""

    decay: float = 0.99  # weight of an observation one step older, in (0, 1]
    min_samples: int = 4  # decayed observations needed on each side (with / without drafts)
    floor_s: float = 1e-5  # smallest predicted step time, > 0
    _s: list[float] = field(default_factory=lambda: [0.0] * 10)
    _with_drafts: float = 0.0
    _without_drafts: float = 0.0
    _coef: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")
        if self.min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {self.min_samples}")
        if not self.floor_s > 0.0:
            raise ValueError(f"floor_s must be > 0, got {self.floor_s}")

    def observe(self, batch: int, draft_tokens: int, seconds: float) -> None:
        """One measured step that decoded ``batch`` requests and verified ``draft_tokens``."""
        if batch < 1 or draft_tokens < 0:
            raise ValueError(f"need batch >= 1 and draft_tokens >= 0, got {batch}, {draft_tokens}")
        if not (seconds > 0.0) or math.isinf(seconds):
            raise ValueError(f"step seconds must be finite and > 0, got {seconds}")
        d = self.decay
        s = self._s
        b, k, t = float(batch), float(draft_tokens), seconds
        # sums of 1, b, k, b*b, b*k, k*k, t, b*t, k*t, t*t (weights decayed)
        for i, v in enumerate((1.0, b, k, b * b, b * k, k * k, t, b * t, k * t, t * t)):
            s[i] = s[i] * d + v
        self._with_drafts = self._with_drafts * d + (1.0 if draft_tokens else 0.0)
        self._without_drafts = self._without_drafts * d + (0.0 if draft_tokens else 1.0)
        self._coef = None

    @property
    def ready(self) -> bool:
        return min(self._with_drafts, self._without_drafts) >= self.min_samples

    @property
    def samples_with_drafts(self) -> float:
        return self._with_drafts

    @property
    def samples_without_drafts(self) -> float:
        return self._without_drafts

    def coefficients(self) -> tuple[float, float, float]:
        """(base, per_request, per_draft_token) seconds; zeros before any observation."""
        if self._coef is None:
            self._coef = self._fit()
        return self._coef

    def _fit(self) -> tuple[float, float, float]:
        n, sb, sk, sbb, sbk, skk, st, sbt, skt, _ = self._s
        if n <= 0.0:
            return (0.0, 0.0, 0.0)
        mean_t = st / n
        # Ridge on the slopes (tiny, relative to the data's scale) keeps a batch size that never
        # varied, or drafts never tried, from making the normal equations singular.
        ridge = 1e-9 * (sbb + skk + 1.0)
        a = [
            [n, sb, sk],
            [sb, sbb + ridge, sbk],
            [sk, sbk, skk + ridge],
        ]
        y = [st, sbt, skt]
        sol = _solve3(a, y)
        if sol is None:
            return (mean_t, 0.0, 0.0)
        return (sol[0], sol[1], sol[2])

    def predict(self, batch: int, draft_tokens: int) -> float:
        """Predicted seconds of a step (>= ``floor_s``)."""
        base, per_req, per_draft = self.coefficients()
        return max(self.floor_s, base + per_req * batch + per_draft * draft_tokens)

    def draft_token_cost(self, batch: int) -> float:
        """Marginal cost of one draft token relative to a plain step of ``batch`` requests."""
        return self.coefficients()[2] / self.predict(batch, 0)


def _solve3(a: list[list[float]], y: list[float]) -> list[float] | None:
    """Solve a 3x3 linear system by Gaussian elimination with partial pivoting."""
    m = [row[:] + [y[i]] for i, row in enumerate(a)]
    for c in range(3):
        p = max(range(c, 3), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(3):
            if r != c:
                f = m[r][c] / m[c][c]
                for j in range(c, 4):
                    m[r][j] -= f * m[c][j]
    return [m[i][3] / m[i][i] for i in range(3)]
