"""``seer exactness``: check that grouped speculation in vLLM keeps rollouts on-policy."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.engines.vllm.broken_acceptance import BROKEN_RULES, PROOF_RULES, check_rule
from app.prompts import DEMO_PROMPTS

if TYPE_CHECKING:
    from app.exactness import ExactnessReport

# help texts: typer evaluates the (stringified) annotations, where f-strings cannot stand
_BROKEN_HELP = (
    "TEST ONLY: verify drafts by a deliberately wrong rule; the verdict must then be FAIL: "
    + " | ".join(BROKEN_RULES)
)
_EVERY_HELP = (
    f"run vLLM's own rule and then each broken rule of the proof ({', '.join(PROOF_RULES)}) "
    "on one pair of engines; exit 0 iff the own rule PASSes and every broken one FAILs "
    '(--json: {"proof": PASS|FAIL, "reports": [...]})'
)
_DEFAULTS = {"prompts": 4, "group_size": 4, "samples": 160, "max_tokens": 24}


def _print_report(report: ExactnessReport) -> None:
    rule = report.broken_rule or "vLLM's own"
    typer.echo(f"verification: {rule}")
    typer.echo(f"greedy: {report.greedy_pairs} responses, identical: {report.greedy_identical}")
    for t in report.sampled_tests:
        what = f"position {t.position:3d}" if t.position is not None else "mean logprob"
        typer.echo(f"sampled T={t.temperature} top_p={t.top_p}: {what}  p-value {t.p_value:.4g}")
    typer.echo(f"sampled check ({report.samples} per engine and setting): {report.sampled_verdict}")
    if report.logprob_max_abs_diff is not None:
        typer.echo(f"logprobs: max |returned - target| = {report.logprob_max_abs_diff:.3g}")
    typer.echo(f"drafts: {report.accepted_tokens} of {report.drafted_tokens} draft tokens accepted")
    for f in report.failures:
        typer.echo(f"  - {f}")
    typer.echo(f"{report.verdict} ({report.seconds:.0f} s)")


def proof_holds(reports: list[ExactnessReport]) -> bool:
    """vLLM's own rule PASSes and every broken rule FAILs; a rule that keeps greedy exact
    (all but ``accept-all``) must FAIL on the sampled check with greedy identical."""
    for r in reports:
        if r.broken_rule is None:
            ok = r.verdict == "PASS"
        elif r.broken_rule == "accept-all":
            ok = r.verdict == "FAIL"
        else:
            ok = r.verdict == "FAIL" and r.sampled_verdict == "FAIL" and r.greedy_identical
        if not ok:
            return False
    return True


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
        typer.Option(min=16, max=4096, help="sampled responses per engine and sampling setting"),
    ] = _DEFAULTS["samples"],
    max_tokens: Annotated[
        int, typer.Option(min=8, max=1024, help="tokens per response")
    ] = _DEFAULTS["max_tokens"],
    seed: Annotated[int, typer.Option(min=0, help="seed of the sampled responses")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    broken_rule: Annotated[
        str | None,
        typer.Option(
            "--broken-rule",
            help=_BROKEN_HELP,
        ),
    ] = None,
    every_rule: Annotated[
        bool,
        typer.Option(
            "--every-rule",
            help=_EVERY_HELP,
        ),
    ] = False,
) -> None:
    """Run the same rollouts with grouped speculation on and off and compare them.

    Checks: greedy outputs identical token for token; sampled outputs (T=1, and T=0.7 with
    top_p 0.9, independent seeds per engine) by chi-square tests of the token distributions at
    positions 1, 4, 17, 20 and a Kolmogorov-Smirnov test of the per-response mean logprob;
    the returned logprobs equal to the target model's. Prints PASS or FAIL (exit status 1 on
    FAIL). Runs two vLLM engines one after the other: minutes on CPU.
    """
    # vLLM logs to stdout by default: keep stdout for the report (--json is parsed by tools)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from app.exactness import ExactnessParams, run_exactness

    if broken_rule is not None and every_rule:
        typer.echo("error: --broken-rule and --every-rule exclude each other", err=True)
        raise typer.Exit(2)
    try:
        check_rule(broken_rule)
    except ValueError as exc:
        typer.echo(f"error: --broken-rule: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        params = ExactnessParams(
            model=model,
            prompts=prompts,
            group_size=group_size,
            samples=samples,
            max_tokens=max_tokens,
            seed=seed,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    rules: tuple[str | None, ...] = (None, *PROOF_RULES) if every_rule else (broken_rule,)
    reports = asyncio.run(run_exactness(params, rules, say))
    if every_rule:
        holds = proof_holds(reports)
        if as_json:
            out: dict[str, Any] = {
                "proof": "PASS" if holds else "FAIL",
                "reports": [r.to_json() for r in reports],
            }
            typer.echo(json.dumps(out, indent=2))
        else:
            for r in reports:
                _print_report(r)
                typer.echo("")
            typer.echo(f"proof: {'PASS' if holds else 'FAIL'}")
        if not holds:
            raise typer.Exit(1)
        return
    report = reports[0]
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report)
    if report.verdict != "PASS":
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("exactness")(exactness)
