"""``seer exactness`` on the tiny model: PASS as built, FAIL with the broken acceptance rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

KEYS = {"greedy_identical", "greedy_pairs", "sampled_tests", "logprob_max_abs_diff", "verdict"}


def _exactness(tiny_model: Path, *extra: str) -> tuple[int, dict]:
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "exactness"]
    cmd += ["--model", str(tiny_model), "--prompts", "3", "--samples", "48", "--max-tokens", "16"]
    proc = subprocess.run(
        [*cmd, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)  # stdout is the report alone


def test_exactness_passes(tiny_model: Path) -> None:
    rc, report = _exactness(tiny_model)
    assert report.keys() >= KEYS
    assert report["verdict"] == "PASS", report["failures"]
    assert rc == 0
    assert report["greedy_identical"] and report["greedy_pairs"] == 3 * 4
    assert [t["position"] for t in report["sampled_tests"]] == [1, 2, 4, 8]
    assert report["accepted_tokens"] > 0  # speculation was exercised
    assert report["logprob_max_abs_diff"] <= 1e-3


def test_exactness_fails_when_acceptance_is_broken(tiny_model: Path) -> None:
    rc, report = _exactness(tiny_model, "--accept-all-drafts")
    assert report["verdict"] == "FAIL" and rc == 1
    assert report["accepted_tokens"] == report["drafted_tokens"] > 0
    assert (
        not report["greedy_identical"] or min(t["p_value"] for t in report["sampled_tests"]) < 1e-6
    )
