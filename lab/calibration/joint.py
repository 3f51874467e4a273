"""Joint calibration on the paper's *baseline* only (issue 22, item 1).

Invariant: a preset's fitted constants are chosen from what the paper measured of veRL and of
divided rollout alone, never of the policies it claims (context-aware scheduling, Seer): veRL's
rollout time and tail time (Fig. 8), its preemption count where the paper gives one (Qwen2-VL),
and divided rollout's throughput over veRL (Table 4). The HBM bandwidth (spec sheet) and the
achieved fraction of it (``BW_EFF_PRIOR``) are fixed priors, the same for every preset; only
the parameters the paper gives no number for are free, each within documented bounds
(``FREE``): the groups' length dispersion (across groups, and within them on qwen2-vl), the
runaway share, the per-step overhead and the KV headroom. The objective is the sum over
targets of weight x log(ours / paper)^2 on the mean over ``FIT_SEEDS`` (``PRESET_SEEDS``
where a preset was fitted on fewer; the same drawn workloads at every point, so the objective
is deterministic); ``lab.calibration.search.compass`` (each free parameter +-step, steps halved when
nothing improves) minimises it. The fitted values are written into ``core.sim.workload.PRESETS``
by hand, each with its targets named, and re-checked by tests. Run: ``python -m
lab.calibration.joint [PRESET ...]`` (~2-10 min per preset on 2 cores, qwen2-vl ~10 min a sweep with
its five, kimi-k2 ~20 min a sweep); ``--fix NAME=VALUE`` holds a parameter and refits the rest
from the committed point (a profile: does the baseline identify it?), ``--seeds`` evaluates on
other seeds, ``--eval`` only evaluates the point.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from core.bounds import check_range
from core.sim.simulator import simulate
from core.sim.workload import Preset, generate, get_preset
from lab.calibration.search import Param, compass
from lab.calibration.seeds import over_seeds

# Achieved fraction of HBM bandwidth (and of peak FLOPs) in a decode step, the same for every
# preset: an assumption, not a figure of the paper. Moonlight (one GPU per instance, no
# collective in its step) had the old veRL-only fit at 0.686 with a 20 ms overhead, so 0.7 is
# what a single-GPU vLLM decode step achieves under our roofline; the multi-GPU presets differ
# from it by their communication, which is the overhead's job (fitted), not the bandwidth's.
BW_EFF_PRIOR = 0.7
# Twelve draws: on four, the fit followed those draws (moonlight's seeds 0-3 point, loss 0.0002
# there, has 0.0593 on seeds 8-11: veRL's tail -18%); on twelve the mean's seed noise is half.
FIT_SEEDS = tuple(range(12))
# Presets fitted on fewer seeds: kimi-k2's full-scale simulations take ~4x moonlight's, and
# its 800 requests per instance make it steady from draw to draw (its seeds 0-1 point has loss
# 0.0051 there and 0.0056 on seeds 2-3).
PRESET_SEEDS = {"kimi-k2": (0, 1)}
SPEC_FIELDS = ("length_sigma", "within_sigma", "outlier_frac", "runaway_groups")
COST_FIELDS = ("step_overhead_s", "mem_util", "bw_eff")


@dataclass(frozen=True, slots=True)
class Free(Param):
    """A fitted parameter: ``name`` a ``WorkloadSpec`` or ``CostModel`` field, searched as a
    ``lab.calibration.search.Param``."""

    def __post_init__(self) -> None:
        if self.name not in SPEC_FIELDS + COST_FIELDS:
            raise ValueError(f"unknown parameter {self.name!r}; valid: {SPEC_FIELDS + COST_FIELDS}")
        Param.__post_init__(self)


@dataclass(frozen=True, slots=True)
class Targets:
    """What the paper measured of the baseline on one workload (Fig. 8: veRL time and tail;
    Table 4: divided rollout x veRL; the preemption count where it gives one)."""

    verl_s: float
    verl_tail_s: float
    divided_x: float
    verl_preemptions: float | None = None


@dataclass(frozen=True, slots=True)
class Figures:
    """Ours, mean over seeds: verl makespan, tail and preemptions, divided x verl."""

    verl_s: float
    verl_tail_s: float
    divided_x: float
    verl_preemptions: float


# Weight of each target's squared log error. The preemption count is a count of events whose
# cost the time targets already carry, and it moves by ~30% from seed to seed: a quarter weight.
WEIGHTS = {"verl_s": 1.0, "verl_tail_s": 1.0, "divided_x": 1.0, "verl_preemptions": 0.25}

# Free parameters and their bounds. length_sigma: across-group log-length spread; outlier_frac:
# share of responses running to the cap; step_overhead_s: fixed time per step (launches,
# collectives: TP all-reduces, EP all-to-alls); mem_util: fraction of GPU memory for weights +
# KV (vLLM's gpu_memory_utilization), the KV headroom: free on moonlight (veRL's tail and the
# divided gain place it: fitted 0.725, where veRL preempts ~2,000 times) and on qwen2-vl (where
# the preemption count is also a target) and on kimi-k2 (a KV per DP32 rank, ~0.5 M tokens at
# 0.99; the pooled 16 M-token KV it replaced left nothing to fit: at 0.6 veRL took 25,597 s, 2x,
# with divided still x1.02, seed 0). within_sigma: the within-group log-length spread, which verl
# sees through the per-instance sums of whole groups (its imbalance and tail) and divided not at
# all; free on qwen2-vl, where the baseline places it (profile over the other four refitted on
# seeds 0-3: loss 0.0307 / 0.0259 / 0.0343 at 0.15 / 0.3 / 0.5), and on moonlight (seeds 0-11:
# 0.275; on seeds 0-3 it had looked like 0.5, loss 0.0002 vs 0.0006 at 0.3, a difference the
# next four seeds undo). It stays at the default 0.5 on kimi-k2 (refitted at 0.3 on seeds 0-1:
# 0.0134 after 23 points, stopped by hand; at 0.5 0.0051).
FREE: dict[str, tuple[Free, ...]] = {
    "moonlight": (
        Free("length_sigma", 0.2, 2.0, 0.825, 0.1),
        Free("within_sigma", 0.05, 1.0, 0.3, 0.05),
        Free("outlier_frac", 0.0, 0.05, 0.00125, 0.005),
        Free("step_overhead_s", 0.005, 0.3, 0.015, 0.005),
        Free("mem_util", 0.6, 0.95, 0.75, 0.05),
    ),
    "qwen2-vl": (
        Free("length_sigma", 0.2, 2.0, 0.775, 0.1),
        Free("outlier_frac", 0.0, 0.05, 0.0, 0.005),
        Free("step_overhead_s", 0.005, 0.3, 0.025, 0.005),
        Free("mem_util", 0.6, 0.95, 0.625, 0.025),
        Free("within_sigma", 0.05, 1.0, 0.3, 0.05),
    ),
    "kimi-k2": (
        Free("length_sigma", 0.2, 2.0, 0.55, 0.1),
        Free("outlier_frac", 0.0, 0.05, 0.02, 0.005),
        Free("step_overhead_s", 0.005, 0.3, 0.075, 0.01),
        Free("mem_util", 0.6, 0.99, 0.99, 0.02),
    ),
}


def fit_seeds(name: str) -> tuple[int, ...]:
    """The seeds preset ``name`` was fitted on."""
    return PRESET_SEEDS.get(name, FIT_SEEDS)


def targets_of(preset: Preset) -> Targets:
    return Targets(preset.paper_verl_s, preset.paper_verl_tail_s, preset.paper_divided_x,
                   preset.paper_verl_preemptions)  # fmt: skip


def apply(preset: Preset, values: dict[str, float]) -> Preset:
    """``preset`` with ``values`` (spec or cost fields); ``flops_eff`` follows ``bw_eff``."""
    spec_kw = {k: v for k, v in values.items() if k in SPEC_FIELDS}
    cost_kw = {k: v for k, v in values.items() if k in COST_FIELDS}
    if "bw_eff" in cost_kw:
        cost_kw["flops_eff"] = cost_kw["bw_eff"]
    return dataclasses.replace(
        preset,
        spec=dataclasses.replace(preset.spec, **spec_kw),  # type: ignore[arg-type]
        cost=dataclasses.replace(preset.cost, **cost_kw),  # type: ignore[arg-type]
    )


def _seed_figures(preset: Preset, seed: int) -> tuple[float, float, float, float]:
    """veRL's time, tail and preemptions and divided x veRL on the workload of ``seed``."""
    work = generate(preset.spec, seed)
    v = simulate(work, preset.cost, "verl")
    d = simulate(work, preset.cost, "divided")
    return v.makespan_s, v.tail_s, float(v.preemptions), v.makespan_s / d.makespan_s


def baseline_figures(preset: Preset, seeds: tuple[int, ...] = FIT_SEEDS) -> Figures:
    """verl and divided on the full-scale workloads of ``seeds`` (one worker per core);
    divided x verl is the mean of the per-seed ratios (as Table 4 rows are read here)."""
    runs = over_seeds(functools.partial(_seed_figures, preset), seeds)
    verl, tail, pre, ratio = (list(col) for col in zip(*runs, strict=True))
    n = len(seeds)
    return Figures(sum(verl) / n, sum(tail) / n, sum(ratio) / n, sum(pre) / n)


def loss(fig: Figures, tgt: Targets) -> float:
    """Weighted sum of squared log errors over the targets the paper gives."""
    total = 0.0
    for name, w in WEIGHTS.items():
        want = getattr(tgt, name)
        if want is None:
            continue
        got = max(getattr(fig, name), 1.0 if name == "verl_preemptions" else 1e-9)
        total += w * math.log(got / want) ** 2
    return total


def evaluate(
    preset: Preset, values: dict[str, float], seeds: tuple[int, ...] = FIT_SEEDS
) -> tuple[float, Figures]:
    """(loss, figures) of ``preset`` with ``values`` applied and ``bw_eff`` at its prior."""
    fig = baseline_figures(apply(preset, {"bw_eff": BW_EFF_PRIOR, **values}), seeds)
    return loss(fig, targets_of(preset)), fig


def fit(
    preset: Preset,
    free: tuple[Free, ...],
    seeds: tuple[int, ...] = FIT_SEEDS,
    sweeps: int = 4,
    report: Callable[[dict[str, float], Figures, float], None] | None = None,
) -> tuple[dict[str, float], Figures]:
    """Compass search over ``free`` (``bw_eff`` fixed at ``BW_EFF_PRIOR``); ``sweeps``
    halvings of the steps. Returns the best values and their figures."""
    cache: dict[tuple[float, ...], tuple[float, Figures]] = {}

    def cached(vals: dict[str, float]) -> tuple[float, Figures]:
        key = tuple(round(vals[f.name], 6) for f in free)
        if key not in cache:
            cache[key] = evaluate(preset, vals, seeds)
            if report is not None:
                report(vals, cache[key][1], cache[key][0])
        return cache[key]

    cur, _ = compass(lambda vals: cached(vals)[0], free, sweeps)
    return cur, cached(cur)[1]


def profile(preset_name: str, fixed: dict[str, float]) -> tuple[Preset, tuple[Free, ...]]:
    """A profile of ``preset_name``'s fit along ``fixed``: the committed preset with these
    parameters held at the given values, and its other free parameters (``FREE``), each
    searched from the committed value with half its first step (the committed point is near
    the optimum). Answers whether the baseline identifies a parameter: refit the rest with it
    held elsewhere and compare the loss (``python -m lab.calibration.joint moonlight --fix
    within_sigma=0.3``)."""
    preset = get_preset(preset_name)
    bounds = {f.name: f for f in FREE[preset_name]}
    for k, v in fixed.items():
        if k not in SPEC_FIELDS + COST_FIELDS:
            raise ValueError(f"unknown parameter {k!r}; valid: {SPEC_FIELDS + COST_FIELDS}")
        if k in bounds:
            check_range(k, v, bounds[k].lo, bounds[k].hi)
    p = apply(preset, fixed)
    free = []
    for f in FREE[preset_name]:
        if f.name in fixed:
            continue
        now = getattr(p.spec if f.name in SPEC_FIELDS else p.cost, f.name)
        free.append(dataclasses.replace(f, start=min(max(now, f.lo), f.hi), step=f.step / 2))
    return p, tuple(free)


def _parse_fixed(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key] = float(value)
        except ValueError:
            raise SystemExit(f"--fix {item!r}: expected NAME=NUMBER") from None
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lab.calibration.joint", description=__doc__)
    ap.add_argument("presets", nargs="*", default=["moonlight", "qwen2-vl", "kimi-k2"])
    ap.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                    help="hold a parameter at VALUE and refit the others from the committed "
                         "point (a profile; repeatable)")  # fmt: skip
    ap.add_argument("--seeds", help="comma-separated seeds (default: the preset's fit seeds)")
    ap.add_argument(
        "--eval",
        action="store_true",
        help="no search: the baseline figures and loss of the point as given",
    )
    args = ap.parse_args(argv)
    fixed = _parse_fixed(args.fix)
    for name in args.presets:
        try:
            if fixed or args.eval:
                p, free = profile(name, fixed)
            else:
                p, free = get_preset(name), FREE[name]
            seeds = tuple(int(x) for x in args.seeds.split(",")) if args.seeds else fit_seeds(name)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        tgt = targets_of(p)

        def show(vals: dict[str, float], f: Figures, val: float, name: str = name) -> None:
            v = " ".join(f"{k}={x:.4g}" for k, x in vals.items())
            print(f"{name}: {v} -> verl {f.verl_s:.0f} s tail {f.verl_tail_s:.0f} s divided "
                  f"x{f.divided_x:.3f} preempt {f.verl_preemptions:.0f} loss {val:.4f}",
                  flush=True)  # fmt: skip

        if args.eval:
            val, f = evaluate(p, {}, seeds)
            show(fixed, f, val)
            continue
        vals, f = fit(p, free, seeds, report=show)
        print(f"{name}: FITTED {vals} fixed {fixed} bw_eff={BW_EFF_PRIOR} seeds {seeds} -> {f} "
              f"loss {loss(f, tgt):.4f} (paper {tgt})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
