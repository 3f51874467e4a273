"""Issue 22, item 2's next model for Kimi-K2: a KV per data-parallel attention rank.

Invariant: the candidate differs from the ``kimi-k2`` preset only in its KV model (``ranks`` =
32 engines per instance, each with its own KV and 1/32 of the instance's ``max_running``, as
DP32 attention holds it) and in the baseline constants refitted for it on the baseline only
(``core.sim.joint.fit``: veRL time and tail, divided x veRL; seeds 0-1) and its verification
cost refitted to the 1.5x speculative step (``core.sim.calibrate.fit_verify_to_step_ratio``, as
every preset's). ``check`` measures the Table 4 rows on it with ``core.sim.table4``, validated
rows (context-max, seer-paper, Seer's tail) never fitted. Run: ``python -m core.sim.per_rank
fit`` (~20 min on 2 cores), ``... step`` (~3 min), ``... check`` (~4 min). Results:
docs/simulator.md, "Kimi-K2 with a KV per rank".
"""

from __future__ import annotations

import dataclasses
import sys

from core.sim import joint
from core.sim.cost import with_ranks
from core.sim.workload import Preset, get_preset

RANKS = 32
SEEDS = (0, 1)
# The joint fit (``fit``: 38 points, 2 sweeps, from the first fit's best point, which had stopped
# at two bounds: sigma 0.2, mem_util 0.95, loss 0.0747): verl 11,561 s (paper 12,202), tail
# 3,211 s (3,144), divided x1.209 (1.16), loss 0.0051 (the pooled preset's fit: 0.0203), seeds 0-1.
FITTED = {"length_sigma": 0.55, "outlier_frac": 0.02, "step_overhead_s": 0.075, "mem_util": 0.99}
# verify_step_s at which seer's speculative step costs 1.5x a plain one on this candidate
# (``step``: quarter scale, seeds 0-1, ratio 1.50, drafting tau 1.89); the preset's 52.3 ms was
# fitted on the pooled model.
VERIFY_STEP_S = 0.0462
FREE = (
    joint.Free("length_sigma", 0.0, 2.0, 0.2, 0.1),
    joint.Free("outlier_frac", 0.0, 0.05, 0.02, 0.005),
    joint.Free("step_overhead_s", 0.005, 0.3, 0.065, 0.01),
    joint.Free("mem_util", 0.6, 0.99, 0.95, 0.02),
)


def per_rank(preset: Preset, ranks: int = RANKS) -> Preset:
    """``preset`` with a KV per rank: ``ranks`` engines per instance sharing its slots."""
    return dataclasses.replace(preset, cost=with_ranks(preset.cost, ranks))


def baseline_candidate() -> Preset:
    """The per-rank model with the baseline constants fitted, the preset's verification cost."""
    return joint.apply(per_rank(get_preset("kimi-k2")), FITTED)


def candidate() -> Preset:
    p = baseline_candidate()
    return dataclasses.replace(p, cost=dataclasses.replace(p.cost, verify_step_s=VERIFY_STEP_S))


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    if what == "fit":

        def show(v: dict[str, float], f: joint.Figures, loss: float) -> None:
            print(v, f, f"loss {loss:.4f}", flush=True)

        vals, fig = joint.fit(per_rank(get_preset("kimi-k2")), FREE, SEEDS, sweeps=2, report=show)
        print("FITTED", vals, fig)
        return
    if what == "step":
        from core.sim.calibrate import fit_verify_to_step_ratio

        def seen(v: float, ratio: float, tau: float) -> None:
            print(f"verify_step_s={v:.4f} step ratio={ratio:.3f} tau={tau:.2f}", flush=True)

        v = fit_verify_to_step_ratio(baseline_candidate(), report=seen)
        print(f"FITTED verify_step_s={v:.4f}")
        return
    from core.sim.table4 import POLICIES, measure_preset, render

    print(render(measure_preset("kimi-k2 per-rank", candidate(), POLICIES, SEEDS)))


if __name__ == "__main__":
    main()
