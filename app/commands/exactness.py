"""``seer exactness``: check that grouped speculation in vLLM keeps rollouts on-policy.

The service's check runs vLLM's own verification. The proof that it notices a wrong one
(``--every-rule``, ``--broken-rule``) is the laboratory's: ``seer-lab exactness``, which takes
the same options (``ExactnessOptions``) and these flags besides.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from app.prompts import DEMO_PROMPTS

if TYPE_CHECKING:
    from app.exactness import ExactnessParams, ExactnessReport

_DEFAULTS = {"prompts": 4, "group_size": 4, "samples": 160, "max_tokens": 24}
_MOVED = "moved to the laboratory: run `seer-lab exactness {flag}`"

# The options of the check, shared with ``seer-lab exactness`` (one definition of each).
Model = Annotated[str, typer.Option(help="prepared model name or model folder")]
Prompts = Annotated[
    int, typer.Option(min=1, max=len(DEMO_PROMPTS), help="prompts of the greedy check")
]
GroupSize = Annotated[
    int, typer.Option(min=2, max=64, help="greedy responses per prompt (siblings draft)")
]
Samples = Annotated[
    int, typer.Option(min=16, max=4096, help="sampled responses per engine and sampling setting")
]
MaxTokens = Annotated[int, typer.Option(min=8, max=1024, help="tokens per response")]
Seed = Annotated[int, typer.Option(min=0, help="seed of the sampled responses")]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]


def print_report(report: ExactnessReport) -> None:
    rule = report.broken_rule or "vLLM's own"
    typer.echo(f"verification: {rule}")
    typer.echo(f"greedy: {report.greedy_pairs} responses, identical: {report.greedy_identical}")
    for t in report.sampled_tests:
        what = f"position {t.position:3d}" if t.position is not None else "mean logprob"
        typer.echo(f"sampled T={t.temperature} top_p={t.top_p}: {what}  p-value {t.p_value:.4g}")
    n, ref = report.samples, report.plain_samples
    per = f"{n} per engine" if n == ref else f"{n} speculating, {ref} plain"
    typer.echo(f"sampled check ({per}, per setting): {report.sampled_verdict}")
    if report.logprob_max_abs_diff is not None:
        typer.echo(f"logprobs: max |returned - target| = {report.logprob_max_abs_diff:.3g}")
    typer.echo(f"drafts: {report.accepted_tokens} of {report.drafted_tokens} draft tokens accepted")
    for f in report.failures:
        typer.echo(f"  - {f}")
    typer.echo(f"{report.verdict} ({report.seconds:.0f} s)")


def params_or_exit(**fields: object) -> ExactnessParams:
    """``ExactnessParams(**fields)``, or exit 2 saying which bound a value breaks."""
    # vLLM logs to stdout by default: keep stdout for the report (--json is parsed by tools)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from app.exactness import ExactnessParams

    try:
        return ExactnessParams(**fields)  # type: ignore[arg-type]
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def say(msg: str) -> None:
    """Progress on stderr (stdout is the report)."""
    print(msg, file=sys.stderr, flush=True)


def _moved(flag: str) -> Callable[[bool | str | None], None]:
    def refuse(value: bool | str | None) -> None:
        if value:
            typer.echo(f"error: {flag} " + _MOVED.format(flag=flag), err=True)
            raise typer.Exit(2)

    return refuse


def exactness(
    model: Model = "smollm2-135m-instruct",
    prompts: Prompts = _DEFAULTS["prompts"],
    group_size: GroupSize = _DEFAULTS["group_size"],
    samples: Samples = _DEFAULTS["samples"],
    max_tokens: MaxTokens = _DEFAULTS["max_tokens"],
    seed: Seed = 0,
    as_json: AsJson = False,
    every_rule: Annotated[
        bool, typer.Option("--every-rule", hidden=True, callback=_moved("--every-rule"))
    ] = False,
    broken_rule: Annotated[
        str | None, typer.Option("--broken-rule", hidden=True, callback=_moved("--broken-rule"))
    ] = None,
) -> None:
    """Run the same rollouts with grouped speculation on and off and compare them.

    Checks: greedy outputs identical token for token; sampled outputs (T=1, and T=0.7 with
    top_p 0.9, independent seeds per engine) by chi-square tests of the token distributions at
    positions 1, 4, 17, 20 and a Kolmogorov-Smirnov test of the per-response mean logprob;
    the returned logprobs equal to the target model's. Prints PASS or FAIL (exit status 1 on
    FAIL). Runs two vLLM engines one after the other: minutes on CPU.
    """
    del every_rule, broken_rule  # refused by their callbacks
    params = params_or_exit(
        model=model,
        prompts=prompts,
        group_size=group_size,
        samples=samples,
        max_tokens=max_tokens,
        seed=seed,
    )
    from app.exactness import run_exactness

    [report] = asyncio.run(run_exactness(params, (None,), say))
    answer(report, as_json)


def answer(report: ExactnessReport, as_json: bool) -> None:
    """Print ``report`` (one JSON object with ``as_json``); exit 1 unless it PASSed."""
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    if report.verdict != "PASS":
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("exactness")(exactness)
