"""Adaptive draft length: the paper's marginal-benefit policy, as pure functions.

Invariant: with per-token acceptance a, draft length g, draft time D and target step time T, a
request's expected time per output token is (1-a)(D+T)/(1-a^(g+1)) (a step yields
(1-a^(g+1))/(1-a) tokens on average). ``choose_draft_lengths`` hands out draft tokens one at a
time to the request with the largest weighted marginal gain (a^(g+1), times ``probe_priority``
for probes), keeps the prefix of those hand-outs that maximizes the batch's weighted tokens per
second under ``step_time(batch, draft_tokens)``, and returns all zeros when that best prefix
gains less than ``min_gain`` over not speculating. Ties go to probes, then to input order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.drafting.acceptance import AcceptanceEstimator, AcceptanceStats

__all__ = [
    "AcceptanceEstimator",
    "AcceptanceStats",
    "AdaptiveDraftConfig",
    "DraftCandidate",
    "StepTime",
    "choose_draft_lengths",
    "expected_time_per_token",
    "expected_tokens_per_step",
]

# step_time(batch_size, total_draft_tokens) -> seconds of one verification step
StepTime = Callable[[int, int], float]


def _check_acceptance(a: float) -> None:
    if not (0.0 <= a <= 1.0) or math.isnan(a):
        raise ValueError(f"acceptance must be in [0, 1], got {a}")


def expected_tokens_per_step(a: float, g: int) -> float:
    """Expected tokens one verification step yields: 1 + a + ... + a^g (bonus token included)."""
    _check_acceptance(a)
    if g < 0:
        raise ValueError(f"draft length g must be >= 0, got {g}")
    if a >= 1.0:
        return float(g + 1)
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def expected_time_per_token(a: float, g: int, draft_time_s: float, target_time_s: float) -> float:
    """(1-a)(D+T)/(1-a^(g+1)); g=0 means no speculation, so no draft time: T per token."""
    if draft_time_s < 0 or math.isnan(draft_time_s):
        raise ValueError(f"draft_time_s must be >= 0, got {draft_time_s}")
    if target_time_s <= 0 or math.isnan(target_time_s):
        raise ValueError(f"target_time_s must be > 0, got {target_time_s}")
    tokens = expected_tokens_per_step(a, g)
    if g == 0:
        return target_time_s
    return (draft_time_s + target_time_s) / tokens


@dataclass(frozen=True, slots=True)
class AdaptiveDraftConfig:
    """Knobs of the draft-length policy (defaults: the paper's g_max 8, probe priority 2)."""

    g_max: int = 8  # longest draft of one request, 1..64
    probe_priority: float = 2.0  # weight of a probe request's tokens, >= 1.0
    step_token_budget: int = 128  # draft tokens in one verification step, all requests, >= 0
    min_gain: float = 0.02  # relative throughput gain needed to speculate at all, in [0, 1)
    draft_time_s: float = 50e-6  # drafting cost per drafted request per step, in [0, 1] s
    min_acceptance: float = 0.0  # requests with an estimate below this never draft, in [0, 1]

    def __post_init__(self) -> None:
        if not 1 <= self.g_max <= 64:
            raise ValueError(f"g_max must be in [1, 64], got {self.g_max}")
        if not self.probe_priority >= 1.0:
            raise ValueError(f"probe_priority must be >= 1.0, got {self.probe_priority}")
        if self.step_token_budget < 0:
            raise ValueError(f"step_token_budget must be >= 0, got {self.step_token_budget}")
        if not 0.0 <= self.min_gain < 1.0:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        if not 0.0 <= self.draft_time_s <= 1.0:
            raise ValueError(f"draft_time_s must be in [0, 1] s, got {self.draft_time_s}")
        if not 0.0 <= self.min_acceptance <= 1.0:
            raise ValueError(f"min_acceptance must be in [0, 1], got {self.min_acceptance}")


@dataclass(frozen=True, slots=True)
class DraftCandidate:
    """One running request that could speculate this step."""

    request_id: str
    acceptance: float  # estimated per-token acceptance rate, in [0, 1]
    is_probe: bool = False
    max_length: int = 64  # draft tokens actually on offer (g never exceeds it), 0..64

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        if not 0 <= self.max_length <= 64:
            raise ValueError(
                f"max_length of {self.request_id!r} must be in [0, 64], got {self.max_length}"
            )
        if not (0.0 <= self.acceptance <= 1.0) or math.isnan(self.acceptance):
            raise ValueError(
                f"acceptance of {self.request_id!r} must be in [0, 1], got {self.acceptance}"
            )


def choose_draft_lengths(
    candidates: Sequence[DraftCandidate],
    step_time: StepTime,
    config: AdaptiveDraftConfig | None = None,
) -> dict[str, int]:
    """Per-request draft lengths for one verification step (0 = do not speculate).

    The result has one entry per candidate, probes first, then the others in input order.
    """
    cfg = config or AdaptiveDraftConfig()
    ids = [c.request_id for c in candidates]
    if len(set(ids)) != len(ids):
        dup = sorted({r for r in ids if ids.count(r) > 1})
        raise ValueError(f"duplicate request ids among candidates: {dup[:5]}")
    order = sorted(range(len(candidates)), key=lambda i: (not candidates[i].is_probe, i))
    lengths = {candidates[i].request_id: 0 for i in order}
    batch = len(candidates)
    if batch == 0:
        return lengths
    base_time = step_time(batch, 0)
    if not base_time > 0:
        raise ValueError(f"step_time({batch}, 0) must be > 0 s, got {base_time}")
    weights = [cfg.probe_priority if c.is_probe else 1.0 for c in candidates]
    base_tokens = sum(weights)  # every request yields its bonus token
    base_rate = base_tokens / base_time
    # heap of (-weighted marginal gain, probe-last flag, input index, next g)
    heap: list[tuple[float, bool, int, int]] = []
    for i in order:
        c = candidates[i]
        if c.acceptance > 0.0 and c.acceptance >= cfg.min_acceptance and c.max_length > 0:
            heap.append((-weights[i] * c.acceptance, not c.is_probe, i, 1))
    heapq.heapify(heap)
    budget = min(cfg.step_token_budget, batch * cfg.g_max)
    given = [0] * batch
    tokens = base_tokens
    drafted = 0  # requests with g >= 1 (each costs draft_time_s)
    best_rate = base_rate
    best_given: list[int] = [0] * batch
    total = 0
    while heap and total < budget:
        neg_gain, not_probe, i, g = heapq.heappop(heap)
        tokens -= neg_gain
        total += 1
        given[i] = g
        if g == 1:
            drafted += 1
        t = step_time(batch, total)
        if not t > 0:
            raise ValueError(f"step_time({batch}, {total}) must be > 0 s, got {t}")
        rate = tokens / (t + drafted * cfg.draft_time_s)
        if rate > best_rate:
            best_rate = rate
            best_given = list(given)
        if g < min(cfg.g_max, candidates[i].max_length):
            a = candidates[i].acceptance
            heapq.heappush(heap, (-weights[i] * a ** (g + 1), not_probe, i, g + 1))
    if best_rate < base_rate * (1.0 + cfg.min_gain):
        return lengths
    for i in order:
        lengths[candidates[i].request_id] = best_given[i]
    return lengths
