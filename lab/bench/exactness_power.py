"""Power of ``seer exactness``'s sampled check: how often it rejects each verification rule
at a given sample count (``python -m lab.bench.exactness_power``).

Protocol: ``--reps`` runs of ``app.exactness.collect`` (each: the spec engine under vLLM's own
rule and every broken rule, then the plain engine; ``--group`` sampled responses per setting,
one group, exactly as ``seer exactness --samples GROUP`` generates them; every run and rule
seeded apart) make a pool of ``reps x group`` responses per rule, setting and engine. For each
sample count n, ``--trials`` times: n responses drawn without replacement from a rule's pool and
n from the plain pool, judged by the check itself (``sampled_tests`` + Bonferroni
``rejected``). The rejection rate is the power against a broken rule and the false-positive rate
of vLLM's own. Trials drawn from one pool are not independent: keep n <= pool / 2 (the rates
then lean optimistic the closer n gets to it). The drafting conditions are those of a group of
``--group`` siblings, so sizes other than ``--group`` are an extrapolation.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import sys
import time
from typing import Any

from app.engines.chunked import ResponseRun
from app.exactness import ExactnessParams, collect, rejected, sampled_tests
from lab.engines.broken_verification import BROKEN_RULES, BrokenVerification, check_rule

#: seeds of run r start at r * this (each run's samples span < 2**22 seeds, see ``_run``)
_REP_SEEDS = 1 << 22


def _pools(
    p: ExactnessParams, rules: tuple[str | None, ...], reps: int, say: Any
) -> tuple[tuple[str | None, ...], list[list[list[ResponseRun]]], list[list[ResponseRun]]]:
    """(rules, spec[rule][setting] pool, plain[setting] pool)."""
    spec: list[list[list[ResponseRun]]] = [[] for _ in rules]
    plain: list[list[ResponseRun]] = []
    for rep in range(reps):
        say(f"run {rep + 1} of {reps} ...")
        rep_params = dataclasses.replace(p, seed=p.seed + rep * _REP_SEEDS)
        c = asyncio.run(
            collect(rep_params, rules, say, score=False, verification=BrokenVerification())
        )
        for i, run in enumerate(c.spec):
            if not spec[i]:
                spec[i] = [[] for _ in run.sampled]
            for s, rs in enumerate(run.sampled):
                spec[i][s] += rs
        if not plain:
            plain = [[] for _ in c.plain.sampled]
        for s, rs in enumerate(c.plain.sampled):
            plain[s] += rs
    return rules, spec, plain


def _write(
    path: str,
    rules: tuple[str | None, ...],
    spec: list[list[list[ResponseRun]]],
    plain: list[list[ResponseRun]],
) -> None:
    def runs(rs: list[ResponseRun]) -> list[dict[str, Any]]:
        return [dataclasses.asdict(r) for r in rs]

    data = {
        "rules": list(rules),
        "spec": [[runs(rs) for rs in per_rule] for per_rule in spec],
        "plain": [runs(rs) for rs in plain],
    }
    with open(path, "w") as f:
        json.dump(data, f)


def _read(
    path: str,
) -> tuple[tuple[str | None, ...], list[list[list[ResponseRun]]], list[list[ResponseRun]]]:
    with open(path) as f:
        data = json.load(f)

    def runs(rs: list[dict[str, Any]]) -> list[ResponseRun]:
        return [ResponseRun(**r) for r in rs]

    spec = [[runs(rs) for rs in per_rule] for per_rule in data["spec"]]
    return tuple(data["rules"]), spec, [runs(rs) for rs in data["plain"]]


def power(
    p: ExactnessParams,
    spec: list[list[ResponseRun]],
    plain: list[list[ResponseRun]],
    n: int,
    trials: int,
    rng: random.Random,
) -> float:
    """Share of ``trials`` subsamples of size ``n`` on which the sampled check rejects."""
    hits = 0
    for _ in range(trials):
        a = [rng.sample(pool, n) for pool in spec]
        b = [rng.sample(pool, n) for pool in plain]
        hits += bool(rejected(p, sampled_tests(p, a, b)))
    return hits / trials


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.bench.exactness_power", description=__doc__)
    ap.add_argument("--group", type=int, default=160, help="sampled responses per run and setting")
    ap.add_argument("--reps", type=int, default=4, help="collect runs making the pools (1..64)")
    ap.add_argument("--sizes", default="32,64,96,128,192,256", help="sample counts to judge")
    ap.add_argument("--trials", type=int, default=200, help="subsamples per size and rule")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--rules", default=",".join(BROKEN_RULES), help="broken rules to pool beside vLLM's own"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object")
    ap.add_argument("--save", help="write the pools to this JSON file (to judge them again)")
    ap.add_argument("--load", help="judge the pools of this file instead of generating them")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the figures
    sizes = [int(x) for x in args.sizes.split(",")]
    if not 1 <= args.reps <= 64:
        ap.error(f"--reps {args.reps}: need 1..64")
    for rule in args.rules.split(","):
        try:
            check_rule(rule)
        except ValueError as exc:
            ap.error(f"--rules: {exc}")
    pool = args.group * args.reps
    if any(not 2 <= n <= pool for n in sizes):
        ap.error(f"--sizes {args.sizes}: each must be in [2, {pool}] (the pool)")
    p = ExactnessParams(
        model=args.model, samples=args.group, max_tokens=args.max_tokens, seed=args.seed
    )

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    if args.load:
        rules, spec, plain = _read(args.load)
    else:
        rules, spec, plain = _pools(p, (None, *args.rules.split(",")), args.reps, say)
    if args.save:
        _write(args.save, rules, spec, plain)
    rng = random.Random(args.seed)
    rates = [
        {str(n): power(p, spec[i], plain, n, args.trials, rng) for n in sizes}
        for i in range(len(rules))
    ]
    rows = [{"rule": rule, "rejection_rate": r} for rule, r in zip(rules, rates, strict=True)]
    out = {
        "pool": pool,
        "group": args.group,
        "trials": args.trials,
        "alpha": p.alpha,
        "max_tokens": p.max_tokens,
        "positions": list(p.positions),
        "rules": rows,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.as_json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"rejection rate of the sampled check (pool {pool} per rule and setting, "
        f"{args.trials} subsamples per size, alpha {p.alpha})"
    )
    print(f"{'rule':<24}" + "".join(f"{'n=' + str(n):>8}" for n in sizes))
    for rule, rate in zip(rules, rates, strict=True):
        name = rule or "vLLM's own (false +)"
        print(f"{name:<24}" + "".join(f"{rate[str(n)]:>8.2f}" for n in sizes))
    print(f"({out['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
