"""`seer e2e`: the real Serve app with sim replicas under two policies in one run, beside the
simulator (a small workload; the figures for the issue come from the full command)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def test_e2e_runs_each_policy_and_reports_both_sides() -> None:
    exe = shutil.which("seer") or str(Path(sys.executable).parent / "seer")
    out = subprocess.run(
        [exe, "e2e", "--replicas", "2", "--scale", "0.005", "--time-scale", "0.002",
         "--policies", "verl,context", "--port", str(free_port()), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["requests"] == 48 and data["replicas"] == 2
    assert list(data["policies"]) == ["verl", "context"]
    for row in data["policies"].values():
        for key in ("throughput_tok_s", "makespan_s", "tail_s", "sim_throughput_tok_s"):
            assert row[key] > 0, key
        assert row["requests"] == 48 and row["tail_s"] <= row["makespan_s"]
        # wall figures converted by time_scale land near the simulator's virtual ones
        assert 0.5 < row["virtual_throughput_tok_s"] / row["sim_throughput_tok_s"] < 2.0
    assert data["policies"]["verl"]["x_verl"] == 1.0
    assert data["policies"]["verl"]["output_tokens"] == data["policies"]["context"]["output_tokens"]


def test_e2e_rejects_a_policy_the_service_cannot_run() -> None:
    exe = shutil.which("seer") or str(Path(sys.executable).parent / "seer")
    out = subprocess.run(
        [exe, "e2e", "--policies", "verl,oracle"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "unknown policy 'oracle'" in out.stderr
