"""Makespan lower bounds: what no schedule beats, with and without speculation."""

from __future__ import annotations

import numpy as np
import pytest

import core.sim.instance as instance
from core.sim.acceptance import AcceptanceModel, paper_model
from core.sim.cost import QWEN2_VL_72B, CostModel
from core.sim.lower_bound import _accepted, draft_config, lower_bound, speculative_lower_bound
from core.sim.simulator import simulate
from core.sim.workload import PRESETS, Workload, WorkloadSpec, generate

COST = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, flops_eff=0.5, step_overhead_s=0.02,
                 verify_step_s=0.01)  # fmt: skip
# the same acceptance with or without sibling references: a policy can reach the best rate
FLAT = AcceptanceModel("flat", alpha_none=0.6, alpha_full=0.6, full_refs=15)


def uniform(requests: int, tokens: int) -> Workload:
    spec = WorkloadSpec("uniform", groups=max(1, requests // 8), group_size=min(8, requests),
                        mean_tokens=tokens, max_tokens=2 * tokens, instances=1,
                        length_sigma=0, within_sigma=0, outlier_frac=0.0)  # fmt: skip
    return generate(spec)


def test_accepted_tokens_fill_draft_positions_across_requests_first() -> None:
    acc = _accepted(0.5, budget=6, g_max=3)  # [draft tokens, requests drafting]
    assert acc[0, 0] == 0.0
    assert acc[3, 1] == pytest.approx(0.5 + 0.25 + 0.125)  # one request, positions 1-3
    assert acc[3, 2] == pytest.approx(2 * 0.5 + 0.25)  # two at position 1, one at 2
    assert acc[3, 3] == pytest.approx(3 * 0.5)
    assert acc[6, 2] == pytest.approx(2 * 0.875)
    assert np.isneginf(acc[6, 1])  # 6 tokens do not fit one request of g_max 3
    assert np.isneginf(acc[2, 3])  # 3 requests cannot all draft with 2 tokens


def test_without_acceptance_speculation_bound_is_the_plain_bound() -> None:
    w = uniform(64, 4000)
    none = AcceptanceModel("none", alpha_none=0.0, alpha_full=0.0, full_refs=1)
    assert speculative_lower_bound(w, COST, none) == pytest.approx(lower_bound(w, COST))
    assert speculative_lower_bound(w, COST, paper_model()) < lower_bound(w, COST)


def test_a_request_alone_decodes_at_its_speculative_bound() -> None:
    # batch 1: the adaptive policy picks the draft length the bound minimizes over
    # (told the true acceptance; learning it online costs the first steps at the prior's 0.3)
    w = uniform(1, 20_000)
    r = simulate(w, COST, "seer", acceptance=FLAT, known_acceptance=True)
    assert r.spec_lower_bound_s == pytest.approx(r.makespan_s, rel=0.01)
    assert r.makespan_s < 0.6 * r.lower_bound_s
    learned = simulate(w, COST, "seer", acceptance=FLAT)
    assert r.makespan_s < learned.makespan_s < 1.1 * r.makespan_s


def test_reused_draft_lengths_keep_the_step_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # 256 requests with one acceptance on one instance: the policy drafts 128 tokens, one for
    # half of them; between its runs the tied requests must not all take that one token
    totals: list[float] = []
    choose = instance.Instance._draft_lengths

    def record(self: instance.Instance, alphas: np.ndarray, ctx: float, n: int) -> np.ndarray:
        g = choose(self, alphas, ctx, n)
        totals.append(float(g.sum()))
        return g

    monkeypatch.setattr(instance.Instance, "_draft_lengths", record)
    w = uniform(256, 4000)
    r = simulate(w, COST, "seer", acceptance=FLAT)
    budget = draft_config(COST).step_token_budget
    assert len(totals) > 20 and max(totals) <= budget
    # while all 256 run, half of them draft one token a step (1 + 0.6 tokens): tau over the
    # drafting request-steps is at least 1.6, tau over all of them well below it
    assert r.drafting_acceptance_length >= 1.6
    assert r.mean_acceptance_length < r.drafting_acceptance_length - 0.2
    assert r.spec_lower_bound_s is not None
    assert r.spec_lower_bound_s <= r.makespan_s < 1.3 * r.spec_lower_bound_s


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_no_speculating_policy_beats_its_bound(name: str) -> None:
    p = PRESETS[name]
    w = generate(p.spec.scaled(0.05), seed=0)
    for policy in ("seer", "seer-paper"):
        r = simulate(w, p.cost, policy)
        assert r.spec_lower_bound_s is not None
        assert r.spec_lower_bound_s < r.lower_bound_s
        assert r.spec_lower_bound_s <= r.makespan_s < 3 * r.spec_lower_bound_s
