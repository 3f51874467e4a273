"""``seer simulate``: the cluster simulator on Table 3-shaped workloads (the ``simulate`` bench)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.scheduling.policies import listed_by_kind

if TYPE_CHECKING:
    from core.sim.report import SimulationReport

DEFAULT_POLICIES = "verl, divided, context, seer, oracle"


def simulate(
    workload: Annotated[
        str,
        typer.Option(
            help="preset: moonlight, qwen2-vl, kimi-k2 (paper Table 3), or replay:FILE "
            "(lengths of recorded rollouts, gzip JSONL, on the qwen2-vl cost model)"
        ),
    ] = "qwen2-vl",
    groups: Annotated[int | None, typer.Option(help="prompt groups (overrides the preset)")] = None,
    group_size: Annotated[int | None, typer.Option(help="responses per group G")] = None,
    mean_tokens: Annotated[float | None, typer.Option(help="mean output tokens (capped)")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="generation cap per response")] = None,
    instances: Annotated[int | None, typer.Option(help="engine instances")] = None,
    length_sigma: Annotated[
        float | None, typer.Option(help="std-dev of the groups' latent log length")
    ] = None,
    within_sigma: Annotated[
        float | None, typer.Option(help="std-dev of log length among siblings of a group")
    ] = None,
    outlier_frac: Annotated[
        float | None,
        typer.Option(help="fraction of responses that run to the cap (runaway generations)"),
    ] = None,
    runaway_groups: Annotated[
        float | None,
        typer.Option(
            help="share of groups (prompts) prone to runaways, (0, 1]: the runaway fraction is "
            "concentrated in them (1 = every response alike)"
        ),
    ] = None,
    scale: Annotated[
        float,
        typer.Option(help="multiply groups and instances by this (same load per instance)"),
    ] = 1.0,
    policies: Annotated[
        str,
        typer.Option(
            help="comma-separated, any of (by kind) " + listed_by_kind() + " (docs/scheduling.md)"
        ),
    ] = DEFAULT_POLICIES,
    seed: Annotated[int, typer.Option(help="seed of the workload's lengths")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(help="write per-instance activity over time per policy to this PNG"),
    ] = None,
    chunk_tokens: Annotated[
        int | None, typer.Option(help="chunk size of divided rollout (default: scheduler's)")
    ] = None,
    acceptance: Annotated[
        str,
        typer.Option(
            help="acceptance calibration for seer: paper-1path (Table 2, one linear draft "
            "path, what vLLM 0.32 verifies), paper (Table 2's 4 paths, charged 4 x the draft "
            "tokens), or replay:FILE (JSON of `seer-lab replay --json`)"
        ),
    ] = "paper-1path",
    ranks: Annotated[
        int | None,
        typer.Option(
            help="data-parallel attention ranks per instance (>= 1): each rank holds its own "
            "KV, batch (max running / ranks) and draft budget; 1 pools an instance's KV; "
            "default: the cost model's own (kimi-k2: 32, its DP32 attention; others 1; "
            "docs/simulator.md)"
        ),
    ] = None,
    cost: Annotated[
        str | None,
        typer.Option(
            help="cost model: a preset's (moonlight, qwen2-vl, kimi-k2), vllm-cpu (the CPU "
            "service's engine, fitted to measured step times), or fit:FILE (the cost.json "
            "`seer-lab sim-vs-real` writes); default: the workload's (qwen2-vl for replay:FILE)"
        ),
    ] = None,
) -> None:
    """Simulate one rollout iteration on N engine instances in virtual time and compare
    policies: throughput (output tokens/s), makespan, tail (time spent on the last 10% of
    requests) and the lower bound max(total work / instances, longest request alone); a
    policy that speculates is held to the same bound with speculation at its best.

    The simulator drives the same core.scheduling scheduler the service runs; each preset's
    cost model is calibrated on the paper's veRL baseline and divided rollout, never on the
    policies it claims (docs/simulator.md, "How it is calibrated").
    """
    from core.sim.report import SimulationRequest, run_simulation

    names = [p.strip() for p in policies.split(",") if p.strip()]
    overrides = {
        "groups": groups,
        "group_size": group_size,
        "mean_tokens": mean_tokens,
        "max_tokens": max_tokens,
        "instances": instances,
        "length_sigma": length_sigma,
        "within_sigma": within_sigma,
        "outlier_frac": outlier_frac,
        "runaway_groups": runaway_groups,
    }
    try:
        req = SimulationRequest(
            workload=workload,
            overrides={k: v for k, v in overrides.items() if v is not None},
            scale=scale,
            policies=tuple(names),
            seed=seed,
            chunk_tokens=chunk_tokens,
            acceptance=acceptance,
            trace=plot is not None,
            ranks=ranks,
            cost=cost,
        )
        report = run_simulation(req) if as_json else _run_with_progress(req)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if plot is not None:
        from core.sim.plot import plot_activity

        try:
            plot_activity(report, plot)
        except ImportError as exc:
            typer.echo(f"error: --plot needs matplotlib ({exc})", err=True)
            raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report.to_json()))
    else:
        typer.echo(report.table())
        if plot is not None:
            typer.echo(f"plot: {plot}")


def _run_with_progress(req: object) -> SimulationReport:
    from core.sim.report import SimulationRequest, run_simulation

    assert isinstance(req, SimulationRequest)
    n = len(req.policies)
    with typer.progressbar(length=100 * n, label="simulating", file=sys.stderr) as bar:
        done = [0]

        def tick(policy_index: int, fraction: float) -> None:
            target = int(100 * policy_index + 100 * fraction)
            if target > done[0]:
                bar.update(target - done[0])
                done[0] = target

        report = run_simulation(dataclasses.replace(req, trace=req.trace), progress=tick)
    return report


def register(cli: typer.Typer) -> None:
    cli.command("simulate")(simulate)
