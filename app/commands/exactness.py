"""``seer exactness``: check that grouped speculation in vLLM keeps rollouts on-policy."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated

import typer

from app.prompts import DEMO_PROMPTS

_DEFAULTS = {"prompts": 4, "group_size": 4, "samples": 200, "max_tokens": 48}


def exactness(
    model: Annotated[
        str, typer.Option(help="prepared model name or model folder")
    ] = "smollm2-135m-instruct",
    prompts: Annotated[
        int,
        typer.Option(min=1, max=len(DEMO_PROMPTS), help="prompts of the greedy check"),
    ] = _DEFAULTS["prompts"],
    group_size: Annotated[
        int, typer.Option(min=2, max=64, help="greedy responses per prompt (siblings draft)")
    ] = _DEFAULTS["group_size"],
    samples: Annotated[
        int,
        typer.Option(min=16, max=4096, help="sampled (T=1) responses per engine"),
    ] = _DEFAULTS["samples"],
    max_tokens: Annotated[
        int, typer.Option(min=8, max=1024, help="tokens per response")
    ] = _DEFAULTS["max_tokens"],
    seed: Annotated[int, typer.Option(min=0, help="seed of the sampled responses")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    accept_all_drafts: Annotated[
        bool,
        typer.Option(
            "--accept-all-drafts",
            hidden=True,
            help="TEST ONLY: break verification on purpose; the verdict must be FAIL",
        ),
    ] = False,
) -> None:
    """Run the same rollouts with grouped speculation on and off and compare them.

    Checks: greedy outputs identical token for token; token distributions at positions
    1, 2, 4, 8 of T=1 samples (chi-square test, p-value per position); the returned logprobs
    equal to the target model's. Prints PASS or FAIL (exit status 1 on FAIL). Runs two vLLM
    engines one after the other: minutes on CPU.
    """
    # vLLM logs to stdout by default: keep stdout for the report (--json is parsed by tools)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from app.exactness import ExactnessParams, run_exactness

    try:
        params = ExactnessParams(
            model=model,
            prompts=prompts,
            group_size=group_size,
            samples=samples,
            max_tokens=max_tokens,
            seed=seed,
            accept_all_drafts=accept_all_drafts,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report = asyncio.run(run_exactness(params, say))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(f"greedy: {report.greedy_pairs} responses, identical: {report.greedy_identical}")
        for t in report.sampled_tests:
            typer.echo(f"sampled: position {t.position:3d}  p-value {t.p_value:.4g}")
        typer.echo(f"logprobs: max |returned - target| = {report.logprob_max_abs_diff:.3g}")
        typer.echo(
            f"drafts: {report.accepted_tokens} of {report.drafted_tokens} draft tokens accepted"
        )
        for f in report.failures:
            typer.echo(f"  - {f}")
        typer.echo(f"{report.verdict} ({report.seconds:.0f} s)")
    if report.verdict != "PASS":
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("exactness")(exactness)
