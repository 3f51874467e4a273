"""`seer-lab compare`: a Serve config's app under two policies side by side, same seeds, in one
run (fake engine replicas here; the README's figures come from the shipped vllm-cpu config)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def _config(tmp_path: Path) -> Path:
    doc = yaml.safe_load(Path("serve_config.yaml").read_text())
    args = doc["applications"][0]["args"]
    args.update(num_replicas=2, replica_num_cpus=0.25, chunk_tokens=16)
    args["store"] = {"enabled": False}
    args["engine"] = {"backend": "fake", "max_model_len": 1024, "fake_step_s": 0.001}
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_compare_runs_each_policy_on_the_same_seeds(tmp_path: Path) -> None:
    exe = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
    out = subprocess.run(
        [exe, "compare", "--config", str(_config(tmp_path)), "--policies", "verl,context",
         "--repeats", "2", "--chunk-tokens", "8", "--port", str(free_port()), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["backend"] == "fake" and data["replicas"] == 2 and data["repeats"] == 2
    assert data["chunk_tokens"] == 8  # the override over the file's 16
    assert list(data["workloads"]) == ["demo", "long-tail"]
    for w in data["workloads"].values():
        verl, context = w["policies"]["verl"], w["policies"]["context"]
        assert verl["speedup_vs_verl"] == 1.0 and context["speedup_vs_verl"] > 0
        # seeded per response and chunk position: both policies generate the same tokens
        assert verl["output_tokens"] == context["output_tokens"]
        for r in (verl, context):
            assert len(r["makespan_s"]) == 2 and 0 <= r["median_tail_s"] <= r["median_makespan_s"]
    assert "repeat 1 long-tail verl" in out.stderr  # progress, on stderr


def test_compare_refuses_an_unknown_policy_before_starting_anything(tmp_path: Path) -> None:
    exe = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
    out = subprocess.run(
        [exe, "compare", "--config", str(_config(tmp_path)), "--policies", "verl,fastest"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "unknown policy 'fastest'" in out.stderr, out.stderr[-2000:]
    assert "starting" not in out.stderr
