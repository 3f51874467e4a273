"""Lower bounds of a rollout's makespan under the cost model: no schedule can finish sooner
(up to the one approximation below).

Invariant: each bound is max(total work / the best rate every engine could sustain, the longest
request at the best per-token speed it could ever get); both sides take every favourable
assumption, so a simulated makespan below its bound is a bug in the simulator. Both use one
approximation: every running request sits at the workload's token-weighted mean context
(prompt + half the request's own length, averaged per token). Without speculation the KV read
this implies is exact over a rollout (a request's steps read prompt + position: summed, its
tokens x its mean context), a batch of KV capacity / mean context is the fewest steps that KV
read allows, and a uniform batch's max(memory, compute) roofline is at most the real steps'
sum; a speculative step reads a request's context once for all the tokens it yields, counted
the same way.

- ``lower_bound``: no speculation; the best rate is the cost model's peak decode rate (a full
  batch), the longest request runs alone at batch 1.
- ``speculative_lower_bound``: a policy that speculates with the adaptive draft policy's
  limits (``AdaptiveDraftConfig``: at most ``g_max`` draft tokens per request and
  ``step_token_budget`` per step and engine) and an acceptance model: every draft token is
  accepted at the model's best rate ``alpha_full`` (all references present), a step's drafts go
  where they yield most, each drafted request pays ``draft_s_per_request`` and the step pays
  ``verify_step_s`` and the drafts' roofline; the best over every batch size and draft count.
  Without speculation (``g = 0``) among its options, it never exceeds ``lower_bound``.
"""

from __future__ import annotations

import math

import numpy as np

from core.drafting.adaptive import AdaptiveDraftConfig
from core.sim.acceptance import AcceptanceModel, tokens_per_step
from core.sim.cost import CostModel
from core.sim.workload import Workload

__all__ = ["draft_config", "lower_bound", "speculative_lower_bound"]


def draft_config(cost: CostModel) -> AdaptiveDraftConfig:
    """The adaptive draft policy's settings in the simulator (the engines' defaults, with the
    cost model's ``draft_budget`` per step and drafting priced at ``draft_s_per_request``): one
    place for the chooser and the bound."""
    return AdaptiveDraftConfig(
        draft_time_s=cost.draft_s_per_request, step_token_budget=cost.draft_budget
    )


def _shape(work: Workload) -> tuple[float, float, int, int]:
    """(total output tokens, token-weighted mean context, longest request, mean prompt)."""
    lens = [x for g in work.lengths for x in g]
    total = float(sum(lens))
    prompt = sum(work.prompt_tokens) / len(work.prompt_tokens)
    mean_ctx = prompt + sum(x * x for x in lens) / (2.0 * total)
    return total, mean_ctx, max(lens), round(prompt)


def lower_bound(work: Workload, cost: CostModel) -> float:
    """max(total work / engines at the peak decode rate, longest request alone), no
    speculation."""
    total, mean_ctx, longest, prompt = _shape(work)
    engines = work.spec.instances * cost.ranks
    work_s = total / (engines * cost.peak_tokens_per_s(mean_ctx))
    return max(work_s, cost.time_alone(longest, prompt))


def _accepted(a: float, budget: int, g_max: int) -> np.ndarray:
    """``[d, m]``: most expected accepted tokens from ``d`` draft tokens spread over ``m``
    requests (at most ``g_max`` each) at per-token acceptance ``a``; -inf where they do not
    fit. The k-th draft position of a request yields a^k, so the best spread fills position 1
    of every request, then position 2, ..."""
    d = np.arange(budget + 1)[:, None]
    m = np.arange(budget + 1)[None, :]
    full, rest = np.divmod(d, np.maximum(m, 1))
    powers = np.concatenate(([0.0], np.cumsum(a ** np.arange(1, g_max + 2))))  # sum_{k<=j} a^k
    acc = m * powers[np.minimum(full, g_max + 1)] + rest * a ** (full + 1)
    fits = (m >= 1) & (d <= m * g_max) & (m <= d) | (d == 0) & (m == 0)
    return np.where(fits, acc, -np.inf)


def speculative_lower_bound(
    work: Workload,
    cost: CostModel,
    acceptance: AcceptanceModel,
    draft: AdaptiveDraftConfig | None = None,
) -> float:
    """The makespan bound of a speculating policy (module docstring); <= ``lower_bound``."""
    cfg = draft or draft_config(cost)
    total, mean_ctx, longest, prompt = _shape(work)
    ctx = max(mean_ctx, 1.0)
    a = acceptance.alpha_full
    paths = acceptance.paths
    draft_s = cfg.draft_time_s
    batch_max = max(1, min(cost.max_running, math.floor(cost.kv_capacity_tokens / ctx)))
    budget = min(cfg.step_token_budget, cfg.g_max * batch_max)
    accepted = _accepted(a, budget, cfg.g_max)  # [draft tokens, requests drafting]
    drafting_s = np.arange(budget + 1) * draft_s
    best_rate = 0.0
    for batch in range(1, batch_max + 1):
        n = min(budget, cfg.g_max * batch)
        step = np.array([cost.step_time(batch, batch * ctx, d * paths) for d in range(n + 1)])
        m = min(n, batch) + 1
        rate = (batch + accepted[: n + 1, :m]) / (step[:, None] + drafting_s[None, :m])
        best_rate = max(best_rate, float(rate.max()))
    engines = work.spec.instances * cost.ranks
    work_s = total / (engines * best_rate)
    mid = prompt + (longest - 1) / 2.0
    per_token = min(
        (cost.step_time(1, mid, g * paths) + (draft_s if g else 0.0)) / tokens_per_step(a, g)
        for g in range(0, min(cfg.g_max, cfg.step_token_budget) + 1)
    )
    return max(work_s, cost.prefill_time(prompt) + longest * per_token)
