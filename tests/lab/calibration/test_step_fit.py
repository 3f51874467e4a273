"""Fitting a cost model to measured step times (lab.calibration.step_fit) and the search it uses."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from core.sim.cost import VLLM_CPU, CostModel
from lab.calibration.search import Param, compass
from lab.calibration.step_fit import StepSample, fit_step_costs, price

TRUE = dataclasses.replace(
    VLLM_CPU, bw_eff=0.45, flops_eff=0.3, prefill_flops_eff=0.7, step_overhead_s=0.006,
    verify_step_s=0.004, max_running=16,
)  # fmt: skip


def _samples(cost: CostModel, noise: float = 0.0, seed: int = 0) -> list[StepSample]:
    rng = random.Random(seed)
    out = []
    for batch in (1, 2, 4, 8, 16):
        for ctx in (64, 256, 768):
            for drafts in (0, 8 * batch):
                for k in range(4):
                    s = StepSample("decode", batch, batch * (ctx + k), drafts, 0, 1.0)
                    t = price(cost, s) * math.exp(rng.gauss(0, noise))
                    out.append(dataclasses.replace(s, seconds=t))
    for tokens in (64, 256, 1024, 2048):
        s = StepSample("prefill", 0, 0, 0, tokens, 1.0)
        out.append(dataclasses.replace(s, seconds=price(cost, s)))
    out.append(StepSample("mixed", 3, 300, 0, 500, 99.0))  # would wreck the fit if used
    return out


def test_the_fit_recovers_the_constants_that_made_the_step_times() -> None:
    res = fit_step_costs(_samples(TRUE), VLLM_CPU, sweeps=14)
    for name in ("bw_eff", "flops_eff", "prefill_flops_eff", "step_overhead_s", "verify_step_s"):
        assert getattr(res.cost, name) == pytest.approx(getattr(TRUE, name), rel=0.03, abs=3e-4)
    assert max(res.rms_log_error.values()) < 0.01
    assert res.skipped == 1 and res.samples["prefill"] == 4 and res.samples["decode"] == 120
    assert res.samples["decode, drafting"] == 60
    # what it does not fit stays as given
    assert res.cost.max_running == VLLM_CPU.max_running
    assert res.cost.kv_capacity_tokens == VLLM_CPU.kv_capacity_tokens
    assert res.cost.roofline == "sum"


def test_noisy_step_times_still_give_the_constants_and_report_the_noise() -> None:
    res = fit_step_costs(_samples(TRUE, noise=0.1), VLLM_CPU, sweeps=12)
    assert res.cost.bw_eff == pytest.approx(TRUE.bw_eff, rel=0.15)
    assert res.cost.flops_eff == pytest.approx(TRUE.flops_eff, rel=0.15)
    assert 0.07 < res.rms_log_error["decode"] < 0.13


def test_unidentified_constants_keep_their_start_values() -> None:
    only_plain = [s for s in _samples(TRUE) if s.kind == "decode" and s.draft_tokens == 0]
    res = fit_step_costs(only_plain, dataclasses.replace(VLLM_CPU, verify_step_s=0.123))
    assert res.cost.verify_step_s == 0.123
    assert res.cost.prefill_flops_eff == VLLM_CPU.prefill_flops_eff
    assert "prefill" not in res.samples and "decode, drafting" not in res.samples


def test_no_decode_step_is_an_error() -> None:
    with pytest.raises(ValueError, match="no decode step"):
        fit_step_costs([s for s in _samples(TRUE) if s.kind != "decode"], VLLM_CPU)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "decoding"}, "kind"),
        ({"seconds": 0.0}, "seconds"),
        ({"batch": -1}, "batch"),
        ({"kind": "decode", "batch": 0}, "batch >= 1"),
        ({"kind": "prefill", "prefill_tokens": 0}, "prefill_tokens >= 1"),
    ],
)
def test_a_bad_sample_is_refused_naming_its_field(kwargs: dict[str, object], field: str) -> None:
    base: dict[str, object] = dict(kind="decode", batch=1, context_tokens=10, draft_tokens=0,
                                   prefill_tokens=0, seconds=0.01)  # fmt: skip
    with pytest.raises(ValueError, match=field):
        StepSample(**{**base, **kwargs})  # type: ignore[arg-type]


def test_a_mixed_step_has_no_price() -> None:
    with pytest.raises(ValueError, match="mixed"):
        price(VLLM_CPU, StepSample("mixed", 1, 10, 0, 10, 0.1))


def test_compass_finds_the_minimum_and_never_leaves_the_bounds() -> None:
    seen: list[dict[str, float]] = []

    def f(v: dict[str, float]) -> float:
        seen.append(v)
        return (v["x"] - 0.3) ** 2 + (v["y"] - 2.0) ** 2  # y's optimum is outside its bounds

    best, val = compass(f, (Param("x", 0, 1, 0.9, 0.25), Param("y", -1, 1.5, 0, 0.5)), sweeps=10)
    assert best["x"] == pytest.approx(0.3, abs=1e-3) and best["y"] == 1.5
    assert val == pytest.approx(0.25, abs=1e-5)
    assert all(0 <= v["x"] <= 1 and -1 <= v["y"] <= 1.5 for v in seen)
    with pytest.raises(ValueError, match="x.start"):
        Param("x", 0, 1, 2, 0.1)


def _committed_samples() -> list[StepSample]:
    import json

    from app.data import ROOT

    doc = json.loads((ROOT / "data" / "sim-vs-real" / "steps.json").read_text())
    return [StepSample(**s) for m in doc for s in m["samples"]]


def test_the_cpu_preset_is_what_its_committed_measurement_fits() -> None:
    from core.sim.cost import VLLM_CPU_FIT_START

    samples = _committed_samples()
    # what seer-lab sim-vs-real fitted from: the start, at the run's max_num_seqs 16
    res = fit_step_costs(samples, dataclasses.replace(VLLM_CPU_FIT_START, max_running=16))
    for name in ("bw_eff", "flops_eff", "prefill_flops_eff", "step_overhead_s", "verify_step_s"):
        assert getattr(res.cost, name) == pytest.approx(getattr(VLLM_CPU, name), rel=1e-9)
    assert res.samples == {"decode": 450, "prefill": 30} and res.skipped == 26
    assert res.rms_log_error["decode"] < 0.1 and res.rms_log_error["prefill"] < 0.15


def test_on_cpu_memory_and_compute_add_up_rather_than_overlap() -> None:
    """Why VLLM_CPU has roofline "sum": on the measured decode steps it fits with 0.71 of the
    error of the GPU-style max (rms log error 0.082 vs 0.115)."""
    samples = _committed_samples()
    add = fit_step_costs(samples, VLLM_CPU)
    overlap = fit_step_costs(samples, dataclasses.replace(VLLM_CPU, roofline="max"))
    assert add.rms_log_error["decode"] < 0.8 * overlap.rms_log_error["decode"]
