"""Epochs over the same prompts: the prior holds exactly the earlier epochs' lengths."""

from __future__ import annotations

import dataclasses
import json

import pytest

import lab.calibration.epochs as ep
from core.scheduling import LengthPrior
from core.sim.cost import CostModel
from core.sim.simulator import PolicyResult
from core.sim.workload import Workload, epoch_workload, generate, get_preset


def _small() -> tuple[Workload, CostModel]:
    preset = get_preset("qwen2-vl")
    spec = dataclasses.replace(preset.spec, groups=6, instances=1, max_tokens=4096, mean_tokens=800)
    return generate(spec, 0), preset.cost


def test_epoch_workloads_keep_prompts_and_redraw_responses() -> None:
    first, _ = _small()
    assert epoch_workload(first, 0, 0) is first
    e1 = epoch_workload(first, 1, 0)
    assert e1.group_log_means == first.group_log_means
    assert e1.lengths != first.lengths
    assert epoch_workload(first, 1, 0).lengths == e1.lengths  # deterministic
    with pytest.raises(ValueError, match="epoch=-1"):
        epoch_workload(first, -1, 0)


def test_prior_policies_see_exactly_the_earlier_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    first, cost = _small()
    seen: list[tuple[str, list[int] | None]] = []
    real = ep.simulate

    def spy(
        work: Workload, cost: CostModel, name: str, prior: LengthPrior | None = None
    ) -> PolicyResult:
        seen.append((name, None if prior is None else prior.lengths("p2")))
        return real(work, cost, name, prior=prior)

    monkeypatch.setattr(ep, "simulate", spy)
    rows = ep.simulate_epochs(first, cost, ["context", "context-prior"], epochs=3)
    assert [r.epoch for r in rows] == [0, 1, 2]
    assert [r.prior_lengths for r in rows] == [0, 16, 32]
    e1 = epoch_workload(first, 1, 0)
    assert seen[0] == ("context", None) and seen[2] == ("context", None)
    assert seen[1] == ("context-prior", [])
    assert seen[3] == ("context-prior", first.lengths[2])
    assert seen[5] == ("context-prior", first.lengths[2] + e1.lengths[2])
    for r in rows:
        assert set(r.results) == {"context", "context-prior"}
        assert all(x.makespan_s > 0 for x in r.results.values())


def test_bad_arguments() -> None:
    first, cost = _small()
    with pytest.raises(ValueError, match="epochs=0"):
        ep.simulate_epochs(first, cost, ["context"], epochs=0)
    with pytest.raises(ValueError, match="unknown policy"):
        ep.simulate_epochs(first, cost, ["nope"], epochs=1)


def test_versus_reports_throughput_over_a_policy_per_epoch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ep.main(["--workload", "qwen2-vl", "--scale", "0.05", "--epochs", "3",
             "--policies", "context-max,context-prior", "--versus", "context-max"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["versus"] == "context-max"
    rows = out["epochs"]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    for r in rows:
        pol = r["policies"]
        assert pol["context-max"]["x_versus"] == 1.0
        want = pol["context-max"]["makespan_s"] / pol["context-prior"]["makespan_s"]
        assert pol["context-prior"]["x_versus"] == pytest.approx(want)
    mean = out["mean_x_versus_with_prior"]
    with_prior = [r["policies"]["context-prior"]["x_versus"] for r in rows[1:]]
    assert mean["context-prior"] == pytest.approx(sum(with_prior) / 2)  # epoch 0 has no prior
    assert rows[0]["policies"]["context-prior"]["x_versus"] != pytest.approx(mean["context-prior"])
    with pytest.raises(SystemExit):
        ep.main(["--policies", "context", "--versus", "oracle"])
    assert "--versus 'oracle' is not one of --policies" in capsys.readouterr().err
