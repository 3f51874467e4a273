"""Several RL epochs over the same prompts: what a length prior across iterations is worth.

Invariant: epoch 0 is the drawn workload itself; epoch e >= 1 keeps every group's latent log
length and draws fresh responses (``resample_same_prompts``, seed derived from ``seed`` and e);
a policy that ``uses_prior`` sees, in epoch e, exactly the lengths of epochs 0 .. e-1 of the same
prompt (what a store of earlier rollouts holds when epoch e starts), never epoch e's own. Every
policy of one epoch runs on the same workload, so their figures differ only by policy.

``python -m lab.calibration.epochs --workload qwen2-vl --epochs 4 --seed 0 --policies
context,context-prior,oracle`` prints one JSON list (makespan and tail per policy per epoch);
with ``--versus context`` one object: that list with each policy's throughput over
``context`` per epoch (``x_versus``), and its mean over the epochs that had a prior.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

from core.scheduling import DictLengthPrior, get_policy
from core.sim.cost import CostModel
from core.sim.simulator import PolicyResult, simulate
from core.sim.workload import Workload, epoch_workload, generate, get_preset


@dataclass(frozen=True, slots=True)
class EpochResult:
    """Figures of every policy in one epoch (``prior_lengths``: recorded lengths per prompt the
    prior held when the epoch started, 0 in epoch 0)."""

    epoch: int
    prior_lengths: int
    results: dict[str, PolicyResult]


def simulate_epochs(
    first: Workload, cost: CostModel, policies: Sequence[str], epochs: int, seed: int = 0
) -> list[EpochResult]:
    """Run ``policies`` on ``epochs`` successive epochs of the prompts of ``first``."""
    if epochs < 1:
        raise ValueError(f"epochs={epochs} < 1")
    if not policies:
        raise ValueError("no policies to simulate")
    plans = {name: get_policy(name) for name in policies}  # unknown names fail before any run
    out: list[EpochResult] = []
    history: list[Workload] = []
    for e in range(epochs):
        work = epoch_workload(first, e, seed)
        seen = range(len(work.lengths))
        prior = DictLengthPrior({f"p{g}": [x for w in history for x in w.lengths[g]] for g in seen})
        results = {
            name: simulate(work, cost, name, prior=prior if plan.uses_prior else None)
            for name, plan in plans.items()
        }
        out.append(EpochResult(e, len(first.lengths[0]) * len(history), results))
        history.append(work)
    return out


def gains(rows: Sequence[EpochResult], versus: str) -> dict[str, list[float]]:
    """Per policy, ``versus``'s makespan / the policy's in each epoch of ``rows`` (> 1: the
    policy is faster than ``versus`` on the same workload)."""
    if not rows or versus not in rows[0].results:
        raise ValueError(f"versus={versus!r} is not one of the simulated policies")
    return {
        name: [r.results[versus].makespan_s / r.results[name].makespan_s for r in rows]
        for name in rows[0].results
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="qwen2-vl", help="preset name")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply groups and instances")
    ap.add_argument("--instances", type=int, default=None, help="override the preset's")
    ap.add_argument("--policies", default="context,context-prior,oracle")
    ap.add_argument(
        "--versus",
        help="one of --policies: add each policy's throughput over it per epoch (x_versus) and "
        "its mean over the epochs that had a prior (epoch >= 1)",
    )
    args = ap.parse_args(argv)
    preset = get_preset(args.workload)
    spec = preset.spec
    if args.instances is not None:
        spec = dataclasses.replace(spec, instances=args.instances)
    if args.scale != 1.0:
        spec = spec.scaled(args.scale)
    first = generate(spec, args.seed)
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.versus is not None and args.versus not in names:
        ap.error(f"--versus {args.versus!r} is not one of --policies {names}")
    rows = simulate_epochs(first, preset.cost, names, args.epochs, args.seed)
    x = gains(rows, args.versus) if args.versus is not None else {}
    epochs = [
        {
            "epoch": r.epoch,
            "policies": {
                n: {"makespan_s": v.makespan_s, "tail_s": v.tail_s}
                | ({"x_versus": x[n][i]} if x else {})
                for n, v in r.results.items()
            },
        }
        for i, r in enumerate(rows)
    ]
    if not x:
        print(json.dumps(epochs))
        return
    with_prior = {n: g[1:] for n, g in x.items()}
    mean = {n: sum(g) / len(g) for n, g in with_prior.items() if g}
    print(json.dumps({"versus": args.versus, "epochs": epochs, "mean_x_versus_with_prior": mean}))


if __name__ == "__main__":
    main()
