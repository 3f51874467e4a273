"""``seer exactness``, the service's own check: vLLM's own verification on SmolLM2, at a small
sample count (the proof at the default count, with the broken rules, is the lab's:
``tests/lab/test_exactness.py``); the proof's flags point at ``seer-lab``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def exactness_cli(
    *args: str, timeout: float, cli: str = "app.cli"
) -> subprocess.CompletedProcess[str]:
    """``exactness ARGS`` of the command line in module ``cli`` (``app.cli``: ``seer``;
    ``lab.cli``: ``seer-lab``), run from this checkout."""
    return subprocess.run(
        [sys.executable, "-c", f"from {cli} import main; main()", "exactness", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_s_own_verification_passes_the_service_s_check() -> None:
    proc = exactness_cli(
        "--json", "--prompts", "1", "--group-size", "2", "--samples", "16", timeout=900
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)  # stdout is the report alone
    assert report["verdict"] == "PASS" and proc.returncode == 0, report["failures"]
    assert report["broken_rule"] is None and report["greedy_pairs"] == 2
    assert report["sampled_check"]["samples"] == 16 and report["accepted_tokens"] > 0
    assert report["logprob_max_abs_diff"] <= 1e-3


@pytest.mark.parametrize("flag", [["--every-rule"], ["--broken-rule", "accept-all"]])
def test_the_proof_s_flags_say_where_they_went(flag: list[str]) -> None:
    proc = exactness_cli(*flag, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"moved to the laboratory: run `seer-lab exactness {flag[0]}`" in proc.stderr
