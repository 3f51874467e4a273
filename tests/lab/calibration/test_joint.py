"""Joint calibration on the baseline (issue 22, item 1)."""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest

from core.sim.cost import QWEN2_VL_72B, CostModel, with_ranks
from core.sim.workload import PRESETS, Preset, WorkloadSpec
from lab.calibration.joint import (
    BW_EFF_PRIOR,
    FREE,
    Figures,
    Free,
    Targets,
    apply,
    baseline_figures,
    fit,
    loss,
    targets_of,
)

COST = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, flops_eff=0.5, step_overhead_s=0.02)


def tiny(**paper: float) -> Preset:
    spec = WorkloadSpec("t", groups=16, group_size=4, mean_tokens=3000, max_tokens=16384,
                        instances=2)  # fmt: skip
    kw = {"paper_verl_s": 1000.0, "paper_verl_tail_s": 300.0, "paper_divided_x": 1.2} | paper
    return Preset(spec, COST, paper_context_x=1.3, paper_seer_x=1.6, paper_tau=2.0, **kw)


def test_loss_is_zero_on_target_and_skips_what_the_paper_does_not_give() -> None:
    t = Targets(1000.0, 300.0, 1.2)
    assert loss(Figures(1000.0, 300.0, 1.2, 77.0), t) == 0.0  # no preemption target
    off = loss(Figures(2000.0, 300.0, 1.2, 77.0), t)
    assert off == pytest.approx(math.log(2) ** 2)
    with_pre = Targets(1000.0, 300.0, 1.2, verl_preemptions=100.0)
    assert loss(Figures(1000.0, 300.0, 1.2, 200.0), with_pre) == pytest.approx(
        0.25 * math.log(2) ** 2
    )


def test_every_preset_names_its_baseline_targets_and_keeps_the_bandwidth_prior() -> None:
    for name, p in PRESETS.items():
        t = targets_of(p)
        assert t.verl_s > t.verl_tail_s > 0 and t.divided_x > 1
        assert p.cost.bw_eff == p.cost.flops_eff == BW_EFF_PRIOR  # a prior, not fitted
        assert "bw_eff" not in {f.name for f in FREE[name]}
    assert targets_of(PRESETS["qwen2-vl"]).verl_preemptions == 13686


def test_apply_sets_spec_and_cost_fields_and_flops_follow_bandwidth() -> None:
    p = apply(tiny(), {"length_sigma": 1.1, "step_overhead_s": 0.03, "bw_eff": 0.6})
    assert p.spec.length_sigma == 1.1 and p.cost.step_overhead_s == 0.03
    assert p.cost.bw_eff == p.cost.flops_eff == 0.6
    with pytest.raises(ValueError, match="unknown parameter 'magic'"):
        Free("magic", 0, 1, 0.5, 0.1)
    with pytest.raises(ValueError, match=r"step_overhead_s.start=0.5 outside"):
        Free("step_overhead_s", 0, 0.3, 0.5, 0.1)


def test_fit_recovers_the_overhead_that_produced_the_targets() -> None:
    # targets made by the model itself at a known overhead: the search must come back to it
    truth = apply(tiny(), {"bw_eff": BW_EFF_PRIOR, "step_overhead_s": 0.04})
    f = baseline_figures(truth, seeds=(0,))
    p = tiny(paper_verl_s=f.verl_s, paper_verl_tail_s=f.verl_tail_s, paper_divided_x=f.divided_x)
    free = (Free("step_overhead_s", 0.005, 0.1, 0.02, 0.01),)
    vals, got = fit(p, free, seeds=(0,), sweeps=3)
    assert vals["step_overhead_s"] == pytest.approx(0.04, abs=0.003)
    assert got.verl_s == pytest.approx(f.verl_s, rel=0.05)


def test_kimi_k2_holds_a_kv_per_data_parallel_rank_and_its_fit_meets_the_baseline() -> None:
    # the preset is per rank (DP32 attention: each rank its own KV and 1/32 of the instance's
    # 1,024 slots); on seed 0 the fitted point lands on veRL's time and tail and on divided x
    # veRL within 10% (seeds 0-1: -5.3%, +2.1%, +4.2%), where the same constants with the
    # instance's KV pooled leave nothing to reorder: divided x1.0, a 14% miss
    p = PRESETS["kimi-k2"]
    pooled = dataclasses.replace(p, cost=with_ranks(p.cost, 1))
    assert (p.cost.ranks, p.cost.max_running, pooled.cost.max_running) == (32, 32, 1024)
    assert p.cost.kv_capacity_tokens == pooled.cost.kv_capacity_tokens // 32
    assert "mem_util" in {f.name for f in FREE["kimi-k2"]}
    f, t = baseline_figures(p, seeds=(0,)), targets_of(p)
    assert f.verl_s == pytest.approx(t.verl_s, rel=0.1)
    assert f.verl_tail_s == pytest.approx(t.verl_tail_s, rel=0.1)
    assert f.divided_x == pytest.approx(t.divided_x, rel=0.1)
    assert baseline_figures(pooled, seeds=(0,)).divided_x < 1.05


@functools.cache
def committed_figures(name: str, within: float | None = None) -> Figures:
    """The baseline figures of preset ``name`` on its fit seeds (within-group spread replaced
    where given); cached, since the full-scale baselines of twelve seeds take ~1 min."""
    p = PRESETS[name]
    return baseline_figures(p if within is None else apply(p, {"within_sigma": within}))


def test_moonlight_s_fitted_kv_headroom_meets_every_baseline_target() -> None:
    # the committed point of the moonlight fit (mem_util free): the mean of FIT_SEEDS lands on
    # veRL's time and tail and on divided x veRL within 3%, where the 0.9 prior (issue 22's
    # first fit) missed divided by +7%; the fitted KV is short enough that veRL preempts
    p = PRESETS["moonlight"]
    assert "mem_util" in {f.name for f in FREE["moonlight"]} and p.cost.mem_util < 0.9
    f = committed_figures("moonlight")
    t = targets_of(p)
    assert f.verl_s == pytest.approx(t.verl_s, rel=0.03)
    assert f.verl_tail_s == pytest.approx(t.verl_tail_s, rel=0.03)
    assert f.divided_x == pytest.approx(t.divided_x, rel=0.03)
    assert f.verl_preemptions > 1000


@pytest.mark.parametrize(("name", "bound", "margin"), [("moonlight", 0.001, 0.004),
                                                        ("qwen2-vl", 0.035, 0.007)])  # fmt: skip
def test_the_within_group_spread_is_placed_by_the_baseline(
    name: str, bound: float, margin: float
) -> None:
    # the within-group spread is free on moonlight and qwen2-vl: on the twelve fit seeds the
    # committed point (0.275 / 0.3) fits the baseline (loss 0.0002 / 0.0323) better than the
    # same constants with the default spread 0.5 put back (0.0056 / 0.0418: veRL slower, and on
    # qwen2-vl the divided gain lower)
    p = PRESETS[name]
    assert "within_sigma" in {f.name for f in FREE[name]} and p.spec.within_sigma < 0.5
    t = targets_of(p)
    fitted = loss(committed_figures(name), t)
    assert fitted < bound
    assert loss(committed_figures(name, 0.5), t) > fitted + margin


def test_a_profile_holds_the_fixed_parameters_and_refits_the_rest_from_the_committed_one() -> None:
    from lab.calibration.joint import profile

    committed = PRESETS["moonlight"]
    p, free = profile("moonlight", {"within_sigma": 0.3, "mem_util": 0.7})
    assert p.spec.within_sigma == 0.3 and p.cost.mem_util == 0.7
    assert [f.name for f in free] == ["length_sigma", "outlier_frac", "step_overhead_s"]
    start = {f.name: f.start for f in free}
    assert start["length_sigma"] == committed.spec.length_sigma
    assert start["step_overhead_s"] == committed.cost.step_overhead_s
    steps = {f.name: f.step for f in FREE["moonlight"]}
    assert all(f.step == steps[f.name] / 2 for f in free)
    with pytest.raises(ValueError, match="unknown parameter 'magic'"):
        profile("moonlight", {"magic": 1.0})
    with pytest.raises(ValueError, match=r"mem_util=0.3 outside"):
        profile("moonlight", {"mem_util": 0.3})  # outside its fit bounds
    with pytest.raises(ValueError, match=r"within_sigma=1.5 outside"):
        profile("moonlight", {"within_sigma": 1.5})  # outside its fit bounds, inside the spec's
    with pytest.raises(ValueError, match="runaway_groups"):
        profile("moonlight", {"runaway_groups": 2.0})  # not fitted: WorkloadSpec's own bounds


def test_the_cli_evaluates_a_held_point_on_given_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    from lab.calibration.joint import main

    with pytest.raises(SystemExit, match="expected NAME=NUMBER"):
        main(["moonlight", "--fix", "within_sigma"])
    with pytest.raises(SystemExit, match="unknown workload 'nope'"):
        main(["nope", "--eval"])
    main(["moonlight", "--eval", "--fix", "within_sigma=0.3", "--seeds", "5"])
    out = capsys.readouterr().out
    # one seed of the full-scale baseline at the held point: the figures and the loss
    assert out.startswith("moonlight: within_sigma=0.3 -> verl ") and " loss " in out
    assert "FITTED" not in out
