"""``seer simulate``: the CLI contract (flags, JSON shape) on scaled-down workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()
SMALL = ["--groups", "16", "--group-size", "4", "--mean-tokens", "2000", "--max-tokens", "8192",
         "--instances", "2"]  # fmt: skip


def test_json_contract() -> None:
    # groups of 16: siblings' text makes speculation pay under the fitted verification cost
    res = runner.invoke(cli, ["simulate", "--workload", "qwen2-vl", *SMALL, "--group-size", "16",
                              "--length-sigma", "0.5", "--within-sigma", "0.2",
                              "--outlier-frac", "0.05", "--seed", "3", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data) == {"workload", "policies"}
    w = data["workload"]
    assert (w["groups"], w["group_size"], w["mean_tokens"], w["max_tokens"], w["instances"]) == (
        16, 16, 2000, 8192, 2)  # fmt: skip
    assert (w["length_sigma"], w["within_sigma"], w["outlier_frac"], w["seed"]) == (
        0.5,
        0.2,
        0.05,
        3,
    )
    assert list(data["policies"]) == ["verl", "divided", "context", "seer", "oracle"]
    for name, fig in data["policies"].items():
        assert set(fig) == {"throughput_tok_s", "makespan_s", "tail_s", "lower_bound_s",
                            "spec_lower_bound_s", "preemptions", "mean_acceptance_length",
                            "drafting_acceptance_length", "spec_step_cost_ratio",
                            "spec_step_share"}  # fmt: skip
        assert isinstance(fig["preemptions"], int)
        assert fig["throughput_tok_s"] > 0 and fig["makespan_s"] > fig["tail_s"] >= 0
        if name != "seer":  # no speculation: one token per step, no speculative steps
            assert fig["mean_acceptance_length"] == pytest.approx(1.0)
            assert (fig["spec_step_cost_ratio"], fig["spec_step_share"]) == (1.0, 0.0)
            assert fig["spec_lower_bound_s"] is None
            assert fig["drafting_acceptance_length"] == 1.0
    seer = data["policies"]["seer"]
    assert seer["lower_bound_s"] > seer["spec_lower_bound_s"] > 0
    assert seer["mean_acceptance_length"] > 1.05
    assert seer["drafting_acceptance_length"] > 1.5
    # tau over the request-steps that drafted: at least tau over all of them
    assert seer["drafting_acceptance_length"] >= seer["mean_acceptance_length"]
    assert 0 < seer["spec_step_share"] <= 1
    # the fitted verification cost of the qwen2-vl preset makes a speculative step dearer
    assert seer["spec_step_cost_ratio"] > 1.05
    assert w["acceptance"] == "paper-1path"  # the default: one linear draft path (vLLM 0.32)


def test_runaway_groups_concentrates_the_runaways_and_bad_values_name_the_field() -> None:
    args = ["simulate", "--workload", "qwen2-vl", *SMALL, "--policies", "verl", "--json",
            "--groups", "200", "--outlier-frac", "0.02"]  # fmt: skip
    res = runner.invoke(cli, [*args, "--runaway-groups", "0.1"])
    assert res.exit_code == 0, res.output
    w = json.loads(res.stdout)["workload"]
    assert (w["outlier_frac"], w["runaway_groups"]) == (0.02, 0.1)
    alike = json.loads(runner.invoke(cli, args).stdout)["workload"]
    assert alike["runaway_groups"] == 1.0  # the default: every response alike
    assert w["total_tokens"] != alike["total_tokens"]  # the runaways fell elsewhere
    bad = runner.invoke(cli, [*args, "--runaway-groups", "0.01"])
    assert bad.exit_code == 2
    assert "outlier_frac=0.02 cannot exceed runaway_groups=0.01" in bad.output


def test_json_reports_preemptions_of_verl_under_kv_pressure() -> None:
    # 8 groups x 16 requests of ~15k tokens on one qwen2-vl instance (1.25M KV tokens) overflow
    # the KV under verl (everything admitted up front); divided admission never preempts
    res = runner.invoke(cli, ["simulate", "--workload", "qwen2-vl", "--groups", "8",
                              "--group-size", "16", "--mean-tokens", "15000", "--max-tokens",
                              "20000", "--instances", "1", "--outlier-frac", "0",
                              "--length-sigma", "0", "--within-sigma", "0.1",
                              "--policies", "verl,divided", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    pol = json.loads(res.stdout)["policies"]
    assert pol["verl"]["preemptions"] > 0
    assert pol["divided"]["preemptions"] == 0


def test_acceptance_flag_selects_the_multi_path_calibration() -> None:
    res = runner.invoke(cli, ["simulate", *SMALL, "--group-size", "16", "--policies", "seer",
                              "--acceptance", "paper", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["workload"]["acceptance"] == "paper"
    assert data["policies"]["seer"]["drafting_acceptance_length"] > 1.5


def test_scale_and_policies() -> None:
    res = runner.invoke(cli, ["simulate", "--workload", "moonlight", "--scale", "0.0625",
                              "--policies", "verl,oracle", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["workload"]["groups"], data["workload"]["instances"]) == (25, 2)
    assert list(data["policies"]) == ["verl", "oracle"]


def test_table_has_ratios_vs_verl() -> None:
    res = runner.invoke(cli, ["simulate", *SMALL, "--policies", "verl,divided,oracle"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert any(line.startswith("verl") and " 1.00 " in line for line in lines)
    assert "x verl" in res.stdout and "tail/verl" in res.stdout


def test_bad_inputs_exit_2_naming_the_value() -> None:
    res = runner.invoke(cli, ["simulate", "--policies", "verl,warp", "--json"])
    assert res.exit_code == 2 and "'warp'" in res.output
    res = runner.invoke(cli, ["simulate", "--workload", "gpt5", "--json"])
    assert res.exit_code == 2 and "'gpt5'" in res.output
    res = runner.invoke(cli, ["simulate", "--scale", "0", "--json"])
    assert res.exit_code == 2 and "scale=0" in res.output


def test_plot_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "a.png"
    res = runner.invoke(cli, ["simulate", *SMALL, "--policies", "verl,context", "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_documents_every_flag() -> None:
    res = runner.invoke(cli, ["simulate", "--help"])
    assert res.exit_code == 0
    for flag in ("--workload", "--groups", "--group-size", "--mean-tokens", "--max-tokens",
                 "--instances", "--length-sigma", "--within-sigma", "--scale", "--policies",
                 "--seed", "--json", "--plot", "--acceptance", "--ranks", "--cost"):  # fmt: skip
        assert flag in res.stdout


def test_ranks_split_an_instance_into_data_parallel_engines() -> None:
    # kimi-k2's own model is per rank (DP32); --ranks 1 pools the instance's KV, --ranks N
    # splits any preset's
    args = ["simulate", "--workload", "kimi-k2", "--groups", "8", "--instances", "1",
            "--policies", "verl,divided", "--json"]  # fmt: skip
    own = json.loads(runner.invoke(cli, args).stdout)["workload"]
    res = runner.invoke(cli, [*args, "--ranks", "1"])
    assert res.exit_code == 0, res.output
    pooled = json.loads(res.stdout)["workload"]
    assert (pooled["ranks_per_instance"], own["ranks_per_instance"]) == (1, 32)
    assert own["max_running"] == pooled["max_running"] // 32
    assert own["kv_capacity_tokens"] == pooled["kv_capacity_tokens"] // 32
    qwen = [*args[:2], "qwen2-vl", *args[3:]]
    assert json.loads(runner.invoke(cli, qwen).stdout)["workload"]["ranks_per_instance"] == 1
    res = runner.invoke(cli, [*qwen, "--ranks", "8"])
    assert json.loads(res.stdout)["workload"]["ranks_per_instance"] == 8
    for bad, msg in (("5", "ranks=5 does not divide gpus=32"), ("0", "ranks=0 < 1")):
        res = runner.invoke(cli, [*args, "--ranks", bad])
        assert res.exit_code == 2 and msg in res.output


def test_the_committed_real_engine_point_is_reproduced_by_simulate() -> None:
    """data/sim-vs-real: what `seer-lab sim-vs-real` measured and wrote on 2026-12-05; its simulated
    column is `seer simulate` on the observed rollout with the fitted cost model."""
    from app.data import ROOT

    folder = ROOT / "data" / "sim-vs-real"
    report = json.loads((folder / "report.json").read_text())
    assert report["same_lengths"] is True  # one observed rollout serves every policy
    res = runner.invoke(cli, ["simulate", "--workload", f"replay:{folder / 'observed.jsonl.gz'}",
                              "--cost", f"fit:{folder / 'cost.json'}", "--instances", "2",
                              "--chunk-tokens", "512", "--policies", "verl,divided,context",
                              "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["workload"]["max_running"] == report["setup"]["max_num_seqs"] == 16
    for name, row in report["policies"].items():
        assert got["policies"][name]["makespan_s"] == row["simulated"]["makespan_s"]
        assert got["policies"][name]["tail_s"] == row["simulated"]["tail_s"]


def test_cost_names_a_preset_the_cpu_engine_or_a_file() -> None:
    base = ["simulate", *SMALL, "--policies", "verl", "--json"]
    cpu = runner.invoke(cli, [*base, "--cost", "vllm-cpu", "--max-tokens", "1024",
                              "--mean-tokens", "300"])  # fmt: skip
    assert cpu.exit_code == 0, cpu.output
    w = json.loads(cpu.stdout)["workload"]
    assert w["model"] == "SmolLM2-135M-Instruct" and w["paper_verl_s"] is None
    res = runner.invoke(cli, [*base, "--cost", "h100"])
    assert res.exit_code == 2 and "unknown cost model 'h100'" in res.output
    res = runner.invoke(cli, [*base, "--cost", "fit:/nonexistent/cost.json"])
    assert res.exit_code == 2 and "fit:/nonexistent/cost.json" in res.output
