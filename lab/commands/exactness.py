"""``seer-lab exactness``: the service's exactness check (``seer exactness``) and the proof that
it notices a wrong verification: each deliberately broken rule of
``lab.engines.broken_verification`` must FAIL where vLLM's own PASSes."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.commands.exactness import (
    _DEFAULTS,
    AsJson,
    GroupSize,
    MaxTokens,
    Model,
    Prompts,
    Samples,
    Seed,
    answer,
    params_or_exit,
    print_report,
    say,
)
from lab.engines.broken_verification import (
    BROKEN_RULES,
    PROOF_RULES,
    PROOF_SAMPLES,
    check_rule,
)

if TYPE_CHECKING:
    from app.exactness import ExactnessReport

# help texts: typer evaluates the (stringified) annotations, where f-strings cannot stand
_BROKEN_HELP = (
    "verify drafts by a deliberately wrong rule; the verdict must then be FAIL: "
    + " | ".join(BROKEN_RULES)
)
_EVERY_HELP = (
    f"run vLLM's own rule and then each broken rule of the proof ({', '.join(PROOF_RULES)}, "
    "each on as many samples as it needs, at most --samples) on one pair of engines; exit 0 "
    "iff the own rule PASSes and every broken one FAILs "
    '(--json: {"proof": PASS|FAIL, "reports": [...]})'
)


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
    model: Model = "smollm2-135m-instruct",
    prompts: Prompts = _DEFAULTS["prompts"],
    group_size: GroupSize = _DEFAULTS["group_size"],
    samples: Samples = _DEFAULTS["samples"],
    max_tokens: MaxTokens = _DEFAULTS["max_tokens"],
    seed: Seed = 0,
    as_json: AsJson = False,
    broken_rule: Annotated[str | None, typer.Option("--broken-rule", help=_BROKEN_HELP)] = None,
    every_rule: Annotated[bool, typer.Option("--every-rule", help=_EVERY_HELP)] = False,
) -> None:
    """`seer exactness` (greedy identical, sampled distributions equal, logprobs the target's)
    under vLLM's own verification, a deliberately broken one (`--broken-rule`), or all of them
    in turn on one pair of engines (`--every-rule`, the proof). Prints PASS or FAIL (exit status
    1 on FAIL; with `--every-rule` 1 unless the proof holds)."""
    if broken_rule is not None and every_rule:
        typer.echo("error: --broken-rule and --every-rule exclude each other", err=True)
        raise typer.Exit(2)
    try:
        check_rule(broken_rule)
    except ValueError as exc:
        typer.echo(f"error: --broken-rule: {exc}", err=True)
        raise typer.Exit(2) from None
    params = params_or_exit(
        model=model,
        prompts=prompts,
        group_size=group_size,
        samples=samples,
        max_tokens=max_tokens,
        seed=seed,
    )
    from app.exactness import run_exactness
    from lab.engines.broken_verification import BrokenVerification

    rules: tuple[str | None, ...] = (None, *PROOF_RULES) if every_rule else (broken_rule,)
    counts = (  # the proof: vLLM's own rule at --samples, each broken one at what it needs
        (params.samples, *(min(params.samples, PROOF_SAMPLES[r]) for r in PROOF_RULES))
        if every_rule
        else None
    )
    reports = asyncio.run(run_exactness(params, rules, say, BrokenVerification(), counts))
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
                print_report(r)
                typer.echo("")
            typer.echo(f"proof: {'PASS' if holds else 'FAIL'}")
        if not holds:
            raise typer.Exit(1)
        return
    answer(reports[0], as_json)


def register(cli: typer.Typer) -> None:
    cli.command("exactness")(exactness)
