"""Cost model, workload generator and acceptance model of the simulator."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.data import ROLLOUTS
from core.sim.acceptance import (
    PAPER_15_REFS,
    PAPER_15_REFS_4_PATHS,
    PAPER_NO_REFS,
    get_acceptance,
    paper_model,
    replay_model,
    tokens_per_step,
)
from core.sim.cost import H800, KIMI_K2, MOONLIGHT, QWEN2_VL_72B, CostModel, ModelShape
from core.sim.workload import (
    PRESETS,
    WorkloadSpec,
    generate,
    load_recorded,
    resample_same_prompts,
)


def test_step_time_roofline_shape() -> None:
    c = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, step_overhead_s=0.01)
    weights_s = 72.7e9 * 2 / (8 * H800.mem_bw * 0.5)
    assert c.step_time(1, 0) == pytest.approx(0.01 + weights_s, rel=1e-3)
    # more context = more KV bytes read; more tokens eventually compute-bound
    assert c.step_time(64, 1e6) > c.step_time(64, 1e5)
    assert c.step_time(1, 1e5, draft_tokens=8) >= c.step_time(1, 1e5)
    huge = c.step_time(100_000, 0)
    assert huge == pytest.approx(0.01 + 2 * 72.7e9 * 100_000 / (8 * H800.flops * 0.5), rel=1e-6)
    # throughput grows with batch (memory-bound decode)
    assert 64 / c.step_time(64, 64 * 5000) > 8 / c.step_time(8, 8 * 5000)


def test_verification_cost_only_on_steps_with_drafts() -> None:
    plain = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, step_overhead_s=0.01)
    c = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, step_overhead_s=0.01, verify_step_s=0.03)
    assert c.step_time(64, 1e5) == plain.step_time(64, 1e5)  # positional, as engines call it
    assert c.step_time(64, 1e5, 1) == pytest.approx(plain.step_time(64, 1e5, 1) + 0.03)
    assert c.step_time(64, 1e5, 512) == pytest.approx(plain.step_time(64, 1e5, 512) + 0.03)
    with pytest.raises(ValueError, match=r"verify_step_s=2 outside \[0, 1\]"):
        CostModel(QWEN2_VL_72B, gpus=8, verify_step_s=2)
    with pytest.raises(ValueError, match="draft_tokens=-1"):
        c.step_time(1, 0, -1)
    for name, preset in PRESETS.items():  # every preset carries its fitted verification cost
        assert 0 <= preset.cost.verify_step_s < 0.2, name
    # kimi-k2's speculation is budget-bound: its gain stays under Table 4's even when free (0)
    assert (
        PRESETS["moonlight"].cost.verify_step_s > 0 and PRESETS["qwen2-vl"].cost.verify_step_s > 0
    )


def test_data_parallel_ranks_split_kv_and_price_a_step_as_all_ranks_alike() -> None:
    agg = CostModel(KIMI_K2, gpus=32, bw_eff=0.5, step_overhead_s=0.06, max_running=1024)
    rank = dataclasses.replace(agg, ranks=32, max_running=32)
    assert rank.kv_capacity_tokens == agg.kv_capacity_tokens // 32
    # a rank with b requests steps like the instance with 32 x b (lockstep, shared experts)
    assert rank.step_time(20, 1e5) == pytest.approx(agg.step_time(640, 3.2e6))
    assert rank.step_time(20, 1e5, 40) == pytest.approx(agg.step_time(640, 3.2e6, 1280))
    assert rank.prefill_time(1000) == pytest.approx(agg.prefill_time(32_000))
    assert rank.step_time(20, 1e5) < agg.step_time(20, 1e5) * 32  # but far cheaper than serial
    with pytest.raises(ValueError, match="ranks=5 does not divide gpus=32"):
        dataclasses.replace(agg, ranks=5)
    with pytest.raises(ValueError, match=r"ranks=64 outside \[1, 32\]"):
        dataclasses.replace(agg, ranks=64)


def test_moe_touches_more_experts_with_more_tokens() -> None:
    c = CostModel(MOONLIGHT)
    assert c.step_time(1, 0) < c.step_time(64, 0) < c.step_time(4096, 0) * 1.01


def test_kv_capacity_from_memory_and_errors() -> None:
    c = CostModel(QWEN2_VL_72B, gpus=8)
    free = 8 * (80e9 * 0.9 - 4e9) - 72.7e9 * 2
    assert c.kv_capacity_tokens == int(free // (80 * 8 * 128 * 2 * 2))
    with pytest.raises(ValueError, match="does not fit on 1 x H800"):
        CostModel(QWEN2_VL_72B, gpus=1)
    with pytest.raises(ValueError, match=r"bw_eff=0 outside"):
        CostModel(MOONLIGHT, bw_eff=0)
    with pytest.raises(ValueError, match="active_params"):
        ModelShape("x", total_params=1, active_params=2, bytes_per_param=2, kv_bytes_per_token=1)


def test_workload_matches_mean_cap_and_group_correlation() -> None:
    spec = WorkloadSpec("t", groups=400, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=4, length_sigma=0.8, within_sigma=0.3)  # fmt: skip
    w = generate(spec, seed=3)
    lens = np.array(w.lengths, dtype=float)
    assert lens.shape == (400, 8)
    assert lens.min() >= 1 and lens.max() <= 16384
    assert abs(lens.mean() / 3000 - 1) < 0.06
    logs = np.log(lens)
    within = logs.var(axis=1, ddof=1).mean()
    between = logs.mean(axis=1).var(ddof=1)
    assert between > 2 * within  # group-correlated
    assert generate(spec, seed=3).lengths == w.lengths
    assert generate(spec, seed=4).lengths != w.lengths
    nxt = resample_same_prompts(w, seed=1)
    corr = np.corrcoef(np.log(np.array(nxt.lengths)).mean(axis=1), logs.mean(axis=1))[0, 1]
    assert corr > 0.8


def test_prompt_correlated_runaways_concentrate_in_prone_groups_that_stay_prone() -> None:
    spec = WorkloadSpec("t", groups=2000, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=4, length_sigma=0.3, within_sigma=0.3, outlier_frac=0.02,
                        runaway_groups=0.1)  # fmt: skip
    w = generate(spec, seed=5)
    assert w.runaway_prone is not None
    prone = np.array(w.runaway_prone)
    at_cap = np.array(w.lengths) == 16384
    assert abs(prone.mean() - 0.1) < 0.02
    assert abs(at_cap.mean() - 0.02) < 0.004  # the runaway share is outlier_frac's
    assert not at_cap[~prone].any()  # only prone groups run away, each response at 0.2
    assert abs(at_cap[prone].mean() - 0.2) < 0.03
    nxt = resample_same_prompts(w, seed=9)
    assert nxt.runaway_prone == w.runaway_prone  # a property of the prompt
    assert not (np.array(nxt.lengths) == 16384)[~prone].any()
    # runaway_groups 1 draws nothing more: the workloads drawn before the field existed
    alike = dataclasses.replace(spec, runaway_groups=1.0)
    old = generate(alike, seed=5)
    assert old.runaway_prone == [True] * 2000
    z = np.random.default_rng(5)
    z.standard_normal(2000)  # the latents, then the responses as before: noise, then runaways
    z.standard_normal((2000, 8))
    out = z.random((2000, 8)) < 0.02
    assert ((np.array(old.lengths) == 16384) >= out).all()
    with pytest.raises(ValueError, match="runaway_groups=0"):
        dataclasses.replace(spec, runaway_groups=0.0)
    with pytest.raises(ValueError, match="outlier_frac=0.02 cannot exceed runaway_groups=0.01"):
        dataclasses.replace(spec, runaway_groups=0.01)


def test_workload_spec_bounds_and_scaling() -> None:
    with pytest.raises(ValueError, match=r"mean_tokens=500 must be in \[1, max_tokens=400\)"):
        WorkloadSpec("t", groups=1, group_size=1, mean_tokens=500, max_tokens=400, instances=1)
    with pytest.raises(ValueError, match="within_sigma=6"):
        WorkloadSpec("t", 1, 1, 5, 10, 1, within_sigma=6)
    with pytest.raises(ValueError, match="mean_tokens=100 unreachable: outlier_frac=0.5"):
        WorkloadSpec("t", 1, 1, 100, 2000, 1, outlier_frac=0.5)
    s = PRESETS["qwen2-vl"].spec.scaled(0.125)
    assert (s.groups, s.instances, s.group_size) == (75, 2, 16)
    with pytest.raises(ValueError, match="scale=0"):
        s.scaled(0)


def test_presets_match_table3() -> None:
    shapes = {k: (p.spec.requests, p.spec.group_size, p.spec.max_tokens, p.spec.mean_tokens,
                  p.spec.instances, p.cost.gpus) for k, p in PRESETS.items()}  # fmt: skip
    assert shapes == {
        "moonlight": (3200, 8, 65536, 22386, 32, 1),
        "qwen2-vl": (9600, 16, 40960, 7615, 16, 8),
        "kimi-k2": (6400, 8, 98304, 38959, 8, 32),
    }


def test_paper_acceptance_reproduces_table2_at_budget_8() -> None:
    one = paper_model(multi_path=False)
    four = paper_model(multi_path=True)
    assert tokens_per_step(one.alpha(0), 8) == pytest.approx(PAPER_NO_REFS, abs=1e-6)
    assert tokens_per_step(one.alpha(15), 8) == pytest.approx(PAPER_15_REFS, abs=1e-6)
    assert tokens_per_step(four.alpha(15), 8) == pytest.approx(PAPER_15_REFS_4_PATHS, abs=1e-6)
    alphas = [one.alpha(n) for n in range(20)]
    assert alphas == sorted(alphas) and alphas[15] == alphas[19]
    with pytest.raises(ValueError, match="unknown acceptance calibration 'magic'"):
        get_acceptance("magic")
    assert (one.paths, four.paths) == (1, 4)
    assert get_acceptance("paper-1path") == one and get_acceptance("paper") == four
    with pytest.raises(ValueError, match="paths=0"):
        dataclasses.replace(one, paths=0)


def test_replay_acceptance_fit(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    rows = {
        "suffix-self": {"8": {"acceptance_length": 1.2}},
        "grouped": {"8": {"acceptance_length": 1.5}},
    }
    path.write_text(json.dumps({"file": "x", "protocol": "lockstep", "methods": rows}))
    m = replay_model(path, group_size=16)
    assert m.source == "replay:r.json:grouped"
    assert tokens_per_step(m.alpha(0), 8) == pytest.approx(1.2, abs=1e-6)
    assert tokens_per_step(m.alpha(15), 8) == pytest.approx(1.5, abs=1e-6)
    rows["grouped-tree4"] = {"4": {"acceptance_length": 1.9}, "8": {"acceptance_length": 1.7}}
    path.write_text(json.dumps({"methods": rows}))
    m = replay_model(path, group_size=16)  # the best grouped method, at budget 8
    assert tokens_per_step(m.alpha(15), 8) == pytest.approx(1.7, abs=1e-6)
    refs = {"grouped@n=0": rows["suffix-self"], "grouped@n=7": rows["grouped"]}
    path.write_text(json.dumps({"methods": refs}))
    assert replay_model(path).full_refs == 7
    path.write_text(json.dumps({"methods": {"ngram": rows["grouped"]}}))
    with pytest.raises(ValueError, match="needs rows"):
        replay_model(path)
    path.write_text("[")
    with pytest.raises(ValueError, match="not the JSON of `seer-lab replay --json`"):
        get_acceptance(f"replay:{path}")


def test_load_recorded(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        for g in range(3):
            samples = [{"output_token_ids": [1] * (10 + g + i), "finish_reason": "stop"}
                       for i in range(4)]  # fmt: skip
            fh.write(json.dumps({"prompt_token_ids": [5] * 7, "max_tokens": 64,
                                 "samples": samples}) + "\n")  # fmt: skip
    w = load_recorded(path, instances=2)
    assert w.lengths[2] == [12, 13, 14, 15]
    assert (w.spec.groups, w.spec.group_size, w.spec.max_tokens, w.spec.instances) == (3, 4, 64, 2)
    assert w.prompt_tokens == [7, 7, 7]
    assert w.spec.within_sigma > 0 and w.spec.length_sigma > 0 and w.spec.outlier_frac == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"samples": 3}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: not a recorded group"):
        load_recorded(bad)


def test_load_shared_recorded_rollouts() -> None:
    w = load_recorded(ROLLOUTS / "smollm2-public.jsonl.gz")
    assert (w.spec.groups, w.spec.group_size, w.spec.max_tokens) == (16, 16, 512)
    assert w.total_tokens == 77677
    assert math.isclose(w.spec.mean_tokens, 77677 / 256)
    # the README's ICC of 0.19: siblings vary more than groups do
    assert w.spec.within_sigma > w.spec.length_sigma


def test_a_sum_roofline_pays_memory_and_compute_and_prefill_has_its_own_efficiency() -> None:
    from core.sim.cost import VLLM_CPU

    mx = dataclasses.replace(VLLM_CPU, roofline="max", step_overhead_s=0.0)
    sm = dataclasses.replace(mx, roofline="sum")
    t_mem = mx.weight_bytes / (mx.hardware.mem_bw * mx.bw_eff)  # batch 1, no context
    t_cmp = 2 * mx.model.active_params / (mx.hardware.flops * mx.flops_eff)
    assert mx.step_time(1, 0) == pytest.approx(max(t_mem, t_cmp))
    assert sm.step_time(1, 0) == pytest.approx(t_mem + t_cmp)
    assert VLLM_CPU.prefill_flops_eff is not None
    work = 2 * mx.model.active_params * 1000
    assert mx.prefill_time(1000) == pytest.approx(
        work / (mx.hardware.flops * VLLM_CPU.prefill_flops_eff)
    )
    assert dataclasses.replace(mx, prefill_flops_eff=None).prefill_time(1000) == pytest.approx(
        work / (mx.hardware.flops * mx.flops_eff)
    )
    with pytest.raises(ValueError, match="roofline='min'"):
        dataclasses.replace(mx, roofline="min")
    with pytest.raises(ValueError, match="prefill_flops_eff"):
        dataclasses.replace(mx, prefill_flops_eff=1.5)


def test_the_cpu_preset_holds_the_kv_vllm_gives_its_engine_and_round_trips_as_json() -> None:
    import json

    from core.sim.cost import VLLM_CPU, VLLM_CPU_KV_TOKENS, cost_from_json, cost_to_json
    from core.sim.workload import get_cost, get_preset

    assert VLLM_CPU.kv_capacity_tokens == VLLM_CPU_KV_TOKENS
    assert cost_from_json(json.loads(json.dumps(cost_to_json(VLLM_CPU)))) == VLLM_CPU
    assert get_cost("vllm-cpu") is VLLM_CPU
    assert get_cost("kimi-k2") is get_preset("kimi-k2").cost
    with pytest.raises(ValueError, match="unknown cost model 'h100'"):
        get_cost("h100")
    with pytest.raises(ValueError, match="not a cost model"):
        cost_from_json({"gpus": 1})
