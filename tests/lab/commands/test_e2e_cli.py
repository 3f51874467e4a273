"""`seer-lab e2e`: the real Serve app with sim replicas under two policies in one run, beside the
simulator (a small workload; the figures for the issue come from the full command)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def test_e2e_runs_each_policy_and_reports_both_sides() -> None:
    exe = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
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
        # wall figures are converted to the simulator's virtual time by time_scale (how close
        # they land is a speed figure: the benchmark reports it, a loaded machine stretches it)
        virtual = row["throughput_tok_s"] * 0.002
        assert math.isclose(row["virtual_throughput_tok_s"], virtual, rel_tol=1e-9), row
    assert data["policies"]["verl"]["x_verl"] == 1.0
    assert data["policies"]["verl"]["output_tokens"] == data["policies"]["context"]["output_tokens"]


def test_e2e_iterations_feed_the_length_prior_from_the_store() -> None:
    """Two iterations of the same prompts: context-prior's second one looked its prompts up in
    the store and found every one with the first iteration's lengths (the service's own
    counter, so it fails if the prior is not wired); context never looks."""
    exe = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
    out = subprocess.run(
        [exe, "e2e", "--replicas", "2", "--scale", "0.005", "--time-scale", "0.001",
         "--policies", "context,context-prior", "--iterations", "2",
         "--port", str(free_port()), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert list(data["policies"]) == ["context", "context-prior"]  # existing keys: iteration 0
    its = data["iterations"]
    assert [it["iteration"] for it in its] == [0, 1]
    groups = data["requests"] // 16
    for it in its:
        assert list(it["policies"]) == ["context", "context-prior"]
        for row in it["policies"].values():
            for key in ("makespan_s", "tail_s", "sim_makespan_s", "sim_tail_s"):
                assert row[key] > 0, key
            assert row["requests"] == data["requests"]
            assert "x_verl" not in row  # no verl in this run
    first, second = its[0]["policies"], its[1]["policies"]
    for name in ("context", "context-prior"):
        assert first[name]["recorded_prompts"] == 0 and first[name]["prior_found"] == 0
        assert second[name]["recorded_prompts"] == groups  # iteration 0's rows are in the store
        assert second[name]["prior_lengths"] == 16.0
    assert second["context-prior"]["prior_found"] == groups  # the prior returned their lengths
    assert second["context"]["prior_found"] == 0
    # the sim engines redraw lengths per iteration: same prompts, other lengths
    assert first["context"]["output_tokens"] == first["context-prior"]["output_tokens"]
    assert second["context"]["output_tokens"] == second["context-prior"]["output_tokens"]
    assert first["context"]["output_tokens"] != second["context"]["output_tokens"]


def test_e2e_rejects_a_policy_the_service_cannot_run() -> None:
    exe = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
    out = subprocess.run(
        [exe, "e2e", "--policies", "verl,oracle"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "unknown policy 'oracle'" in out.stderr
