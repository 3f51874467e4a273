"""Several RL epochs over the same prompts: what a length prior across iterations is worth.

Invariant: epoch 0 is the drawn workload itself; epoch e >= 1 keeps every group's latent log
length and draws fresh responses (``resample_same_prompts``, seed derived from ``seed`` and e);
a policy that ``uses_prior`` sees, in epoch e, exactly the lengths of epochs 0 .. e-1 of the same
prompt (what a store of earlier rollouts holds when epoch e starts), never epoch e's own. Every
policy of one epoch runs on the same workload, so their figures differ only by policy.

``python -m core.sim.epochs --workload qwen2-vl --epochs 4 --seed 0 --policies
context,context-prior,oracle`` prints one JSON list (makespan and tail per policy per epoch).
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
from core.sim.workload import Workload, generate, get_preset, resample_same_prompts


@dataclass(frozen=True, slots=True)
class EpochResult:
    """Figures of every policy in one epoch (``prior_lengths``: recorded lengths per prompt the
    prior held when the epoch started, 0 in epoch 0)."""

    epoch: int
    prior_lengths: int
    results: dict[str, PolicyResult]


def epoch_workload(first: Workload, epoch: int, seed: int) -> Workload:
    """The workload of ``epoch`` (0 = ``first`` itself) on the prompts of ``first``."""
    if epoch < 0:
        raise ValueError(f"epoch={epoch} < 0")
    if epoch == 0:
        return first
    return resample_same_prompts(first, seed=1_000_003 * (seed + 1) + epoch)


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


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="qwen2-vl", help="preset name")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply groups and instances")
    ap.add_argument("--instances", type=int, default=None, help="override the preset's")
    ap.add_argument("--policies", default="context,context-prior,oracle")
    args = ap.parse_args(argv)
    preset = get_preset(args.workload)
    spec = preset.spec
    if args.instances is not None:
        spec = dataclasses.replace(spec, instances=args.instances)
    if args.scale != 1.0:
        spec = spec.scaled(args.scale)
    first = generate(spec, args.seed)
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    rows = simulate_epochs(first, preset.cost, names, args.epochs, args.seed)
    print(
        json.dumps(
            [
                {
                    "epoch": r.epoch,
                    "policies": {
                        n: {"makespan_s": x.makespan_s, "tail_s": x.tail_s}
                        for n, x in r.results.items()
                    },
                }
                for r in rows
            ]
        )
    )


if __name__ == "__main__":
    main()
