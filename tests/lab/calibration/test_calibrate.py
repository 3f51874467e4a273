"""``lab.calibration.calibrate``: the draft-budget fit picks the budget nearest the paper's tau."""

from __future__ import annotations

from core.sim.cost import QWEN2_VL_72B, CostModel
from core.sim.workload import WorkloadSpec

COST = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, flops_eff=0.5, step_overhead_s=0.02)


def test_draft_budget_fit_picks_the_budget_whose_drafting_tau_is_nearest_the_paper() -> None:
    from core.sim.workload import Preset
    from lab.calibration.calibrate import fit_draft_budget

    spec = WorkloadSpec("t", groups=24, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=2)  # fmt: skip
    seen: dict[int, tuple[float, float]] = {}

    def fit(paper_tau: float) -> tuple[int, float]:
        p = Preset(spec, COST, paper_verl_s=1.0, paper_context_x=1.0, paper_seer_x=1.2,
                   paper_tau=paper_tau)  # fmt: skip
        return fit_draft_budget(p, budgets=(4, 64), seeds=(0,), scale=1.0,
                                report=lambda b, v, tau: seen.__setitem__(b, (v, tau)))  # fmt: skip

    low = fit(1.0)
    assert seen[4][1] < seen[64][1]  # a larger budget drafts more per drafting request-step
    assert low == (4, seen[4][0])
    assert fit(3.0) == (64, seen[64][0])
