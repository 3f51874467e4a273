"""Fit a cost model's speed constants to step times measured on a real engine.

Invariant: a fit changes only the ``FREE`` constants of the ``CostModel`` it starts from (the
hardware's nominal peaks, the model's shape, the KV capacity and the batch limit stay as given),
each within its bounds, and minimises the mean squared log error of the model's price of every
sample: a decode step is ``CostModel.step_time(batch, context_tokens, draft_tokens)``, a
prefill-only step ``step_overhead_s + CostModel.prefill_time(prefill_tokens)``. A step that
both decodes and prefills is not priced by the cost model (the simulator charges prefills as
stalls of their own) and is left out of the fit, counted in ``FitResult.skipped``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from core.bounds import check_range
from core.sim.cost import CostModel
from lab.calibration.search import Param, compass

StepKind = Literal["decode", "prefill", "mixed"]


@dataclass(frozen=True, slots=True)
class StepSample:
    """One engine step as measured: ``batch`` requests decoding (verifying ``draft_tokens``
    drafts in all) whose contexts total ``context_tokens``, and ``prefill_tokens`` prompt tokens
    computed, in ``seconds`` (> 0)."""

    kind: StepKind
    batch: int
    context_tokens: int
    draft_tokens: int
    prefill_tokens: int
    seconds: float

    def __post_init__(self) -> None:
        if self.kind not in ("decode", "prefill", "mixed"):
            raise ValueError(f"kind={self.kind!r} not decode, prefill or mixed")
        for f in ("batch", "context_tokens", "draft_tokens", "prefill_tokens"):
            check_range(f, getattr(self, f), 0)
        check_range("seconds", self.seconds, 0, lo_open=True)
        if self.kind == "decode" and self.batch < 1:
            raise ValueError("a decode sample needs batch >= 1")
        if self.kind == "prefill" and self.prefill_tokens < 1:
            raise ValueError("a prefill sample needs prefill_tokens >= 1")


def price(cost: CostModel, s: StepSample) -> float:
    """The cost model's seconds for ``s`` (decode or prefill samples only)."""
    if s.kind == "decode":
        return cost.step_time(s.batch, s.context_tokens, s.draft_tokens)
    if s.kind == "prefill":
        return cost.step_overhead_s + cost.prefill_time(s.prefill_tokens)
    raise ValueError("a mixed step is not priced by the cost model")


# The constants a fit moves, with their bounds (CostModel's own) and first steps.
FREE: tuple[Param, ...] = (
    Param("bw_eff", 0.01, 1.0, 0.5, 0.2),
    Param("flops_eff", 0.01, 1.0, 0.5, 0.2),
    Param("prefill_flops_eff", 0.01, 1.0, 0.5, 0.2),
    Param("step_overhead_s", 0.0, 1.0, 0.01, 0.01),
    Param("verify_step_s", 0.0, 1.0, 0.0, 0.01),
)


@dataclass(frozen=True, slots=True)
class FitResult:
    """The fitted cost model; its root-mean-square log error per sample kind (exp of it - 1 is
    the typical relative error) and sample counts; ``skipped``: mixed steps left out."""

    cost: CostModel
    rms_log_error: dict[str, float]
    samples: dict[str, int]
    skipped: int

    def to_json(self) -> dict[str, object]:
        return {
            "constants": {p.name: getattr(self.cost, p.name) for p in FREE},
            "rms_log_error": self.rms_log_error,
            "samples": self.samples,
            "skipped_mixed_steps": self.skipped,
        }


def _rms(cost: CostModel, samples: Sequence[StepSample]) -> float:
    if not samples:
        return 0.0
    return math.sqrt(sum(math.log(price(cost, s) / s.seconds) ** 2 for s in samples) / len(samples))


def fit_step_costs(samples: Iterable[StepSample], start: CostModel, sweeps: int = 8) -> FitResult:
    """See the module invariant. ``verify_step_s`` stays at ``start``'s where no sample drafted,
    ``prefill_flops_eff`` where none prefilled (nothing identifies them)."""
    all_s = list(samples)
    used = [s for s in all_s if s.kind != "mixed"]
    if not any(s.kind == "decode" for s in used):
        raise ValueError("no decode step among the samples: nothing to fit")
    drafted = any(s.draft_tokens > 0 for s in used if s.kind == "decode")
    prefilled = any(s.kind == "prefill" for s in used)
    if start.prefill_flops_eff is None:
        start = dataclasses.replace(start, prefill_flops_eff=start.flops_eff)
    params = tuple(
        dataclasses.replace(p, start=min(p.hi, max(p.lo, getattr(start, p.name) or p.start)))
        for p in FREE
        if (drafted or p.name != "verify_step_s") and (prefilled or p.name != "prefill_flops_eff")
    )

    def objective(vals: dict[str, float]) -> float:
        return _rms(dataclasses.replace(start, **vals), used)  # type: ignore[arg-type]

    best, _ = compass(objective, params, sweeps)
    cost = dataclasses.replace(start, **best)  # type: ignore[arg-type]
    kinds: dict[str, list[StepSample]] = {}
    for s in used:
        kinds.setdefault(s.kind, []).append(s)
    if drafted:
        kinds["decode, drafting"] = [s for s in kinds["decode"] if s.draft_tokens > 0]
    return FitResult(
        cost=cost,
        rms_log_error={k: _rms(cost, v) for k, v in kinds.items()},
        samples={k: len(v) for k, v in kinds.items()},
        skipped=len(all_s) - len(used),
    )
