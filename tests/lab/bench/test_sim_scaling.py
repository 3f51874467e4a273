"""``python -m lab.bench.sim_scaling``: the scaling table's rows and columns (behaviour, not
timing)."""

from __future__ import annotations

import json

import pytest

from core.sim.report import SimulationRequest, run_simulation
from lab.bench.sim_scaling import COLUMNS, format_table, main, run_bench


def test_rows_are_the_simulations_they_time() -> None:
    rows = run_bench([0.02, 0.04], ["verl", "context"], workload="qwen2-vl", seed=1)
    assert [(r.scale, r.policy) for r in rows] == [
        (0.02, "verl"),
        (0.02, "context"),
        (0.04, "verl"),
        (0.04, "context"),
    ]
    # scale multiplies the groups (600 x 16 requests at full scale) and the instances
    assert [r.requests for r in rows] == [192, 192, 384, 384]
    assert all(r.instances == 1 for r in rows)
    ref = run_simulation(SimulationRequest(scale=0.04, policies=("context",), seed=1))
    assert rows[3].makespan_s == ref.results["context"].makespan_s
    assert rows[3].chunks == ref.results["context"].chunks > rows[3].requests
    assert rows[2].chunks == rows[2].requests  # verl: one chunk per request
    for r in rows:
        assert r.wall_s > 0 and r.cpu_s > 0 and r.tokens > r.requests
        assert r.us_per_request == pytest.approx(1e6 * r.wall_s / r.requests)
        assert r.us_per_request_instance == pytest.approx(r.us_per_request / r.instances)
        assert r.ns_per_token == pytest.approx(1e9 * r.wall_s / r.tokens)


def test_table_and_json_have_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_bench([0.02], ["divided"])
    lines = format_table(rows).splitlines()
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |"
    assert len(lines) == 3 and lines[2].startswith("| 0.02 | 192 | 1 | divided |")
    main(["--scales", "0.02", "--policies", "verl,seer", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert [d["policy"] for d in data] == ["verl", "seer"]
    for d in data:
        assert set(COLUMNS) <= set(d)
        assert d["scale"] == 0.02 and d["requests"] == 192


def test_bad_input_is_refused_before_running() -> None:
    with pytest.raises(ValueError, match="unknown policies"):
        main(["--scales", "0.02", "--policies", "nope"])
    with pytest.raises(ValueError, match="scale"):
        main(["--scales", "0", "--policies", "verl"])
    with pytest.raises(ValueError, match="at least one scale"):
        run_bench([], ["verl"])
