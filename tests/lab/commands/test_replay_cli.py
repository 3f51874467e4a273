from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from app.data import ROLLOUTS
from lab.commands import replay

DATA = ROLLOUTS


def _cli() -> typer.Typer:
    cli = typer.Typer()

    @cli.callback()
    def _root() -> None:
        """test root"""

    replay.register(cli)
    return cli


def _tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.jsonl.gz"
    group = {
        "group_id": "twins",
        "prompt_token_ids": [7],
        "samples": [{"output_token_ids": [1, 2, 3, 4]}, {"output_token_ids": [1, 2, 3, 4]}],
    }
    with gzip.open(p, "wt") as fh:
        fh.write(json.dumps(group) + "\n")
    return p


def test_json_contract_shape(tmp_path: Path):
    p = _tiny(tmp_path)
    res = CliRunner().invoke(_cli(), ["replay", str(p), "--k", "2,4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"file", "protocol", "methods", "speed"}
    assert out["file"] == str(p) and out["protocol"] == "lockstep"
    assert set(out["methods"]) == {
        "none",
        "ngram",
        "suffix-self",
        "grouped",
        "grouped-tree2",
        "grouped-tree4",
    }
    for row in out["methods"].values():
        assert set(row) == {"2", "4"}
        for cell in row.values():
            assert set(cell) == {"acceptance_length", "draft_tokens_per_step"}
    assert out["methods"]["none"]["4"] == {"acceptance_length": 1.0, "draft_tokens_per_step": 0.0}
    assert set(out["speed"]) == {"append_us_per_token", "speculate_us"}
    assert out["speed"]["append_us_per_token"] > 0


def test_defaults_print_a_table(tmp_path: Path):
    p = _tiny(tmp_path)
    res = CliRunner().invoke(_cli(), ["replay", str(p)])
    assert res.exit_code == 0, res.output
    header = next(ln for ln in res.output.splitlines() if ln.startswith("method"))
    assert header.split()[1:] == ["k=4", "k=8", "k=16"]
    for name in ("none", "ngram", "suffix-self", "grouped", "grouped-tree2", "grouped-tree4"):
        assert any(ln.split()[0] == name for ln in res.output.splitlines() if ln.strip())
    assert "min_token_prob=0.01" in res.output
    assert "own_boost=2.0  sibling_discount=0.6" in res.output


def test_references_protocol_and_table(tmp_path: Path):
    p = _tiny(tmp_path)
    res = CliRunner().invoke(
        _cli(), ["replay", str(p), "--k", "4", "--methods", "grouped", "--protocol", "references"]
    )
    assert res.exit_code == 0, res.output
    assert "protocol=references" in res.output and "backoff=1" in res.output
    lines = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.startswith("grouped")}
    assert "4.000" in lines["grouped@n=1"]  # the finished twin predicts everything
    assert "speed on twins" in res.output


def test_bad_arguments(tmp_path: Path):
    p = _tiny(tmp_path)
    runner = CliRunner()
    res = runner.invoke(_cli(), ["replay", str(p), "--methods", "magic"])
    assert res.exit_code == 2 and "unknown drafting method 'magic'" in res.output
    res = runner.invoke(_cli(), ["replay", str(p), "--k", "x"])
    assert res.exit_code == 2 and "comma-separated integers" in res.output
    res = runner.invoke(_cli(), ["replay", str(p), "--protocol", "nope"])
    assert res.exit_code == 2 and "nope" in res.output
    res = runner.invoke(_cli(), ["replay", str(tmp_path / "missing.gz")])
    assert res.exit_code == 2 and "not found" in res.output
    res = runner.invoke(_cli(), ["replay", str(p), "--backoff", "99"])
    assert res.exit_code == 2 and "backoff must be in [0, 8], got 99" in res.output
    res = runner.invoke(_cli(), ["replay", "--help"])
    assert res.exit_code == 0 and "acceptance length" in res.output.lower()


@pytest.mark.slow
def test_real_file_grouped_beats_suffix_self():
    res = CliRunner().invoke(
        _cli(),
        [
            "replay",
            str(DATA / "smollm2-t07-public.jsonl.gz"),
            "--k",
            "8",
            "--json",
            "--methods",
            "none,suffix-self,grouped,grouped-tree4",
        ],
    )
    assert res.exit_code == 0, res.output
    m = json.loads(res.output)["methods"]
    al = {name: m[name]["8"]["acceptance_length"] for name in m}
    assert al["none"] == 1.0
    assert al["grouped-tree4"] > al["grouped"] > al["suffix-self"] > 1.0


def test_own_weight_option(tmp_path: Path):
    p = _tiny(tmp_path)
    runner = CliRunner()
    res = runner.invoke(
        _cli(),
        [
            "replay",
            str(p),
            "--k",
            "4",
            "--methods",
            "grouped",
            "--own-weight",
            "0.5",
            "--protocol",
            "references",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "own_weight=0.5" in res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("grouped@n=1"))
    assert "4.000" in line  # the finished twin still predicts everything
    res = runner.invoke(_cli(), ["replay", str(p), "--own-weight", "2"])
    assert res.exit_code == 2 and "own_weight must be in [0, 1], got 2.0" in res.output
