"""``seer-lab replay``: acceptance length of drafting methods on recorded group rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from core.drafting.recorded import load_groups
from core.drafting.speculate import SpeculationParams
from lab.bench.draft_acceptance import DEFAULT_KS, DEFAULT_METHODS, ReplayReport, run_replay
from lab.bench.draft_replay import DEFAULT_SCORING, PROTOCOLS


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks:
        raise typer.BadParameter(f"--k needs at least one draft budget, got {text!r}")
    return ks


def report_json(file: str, report: ReplayReport) -> dict[str, object]:
    """The JSON object of the contract: file, protocol, methods -> k -> figures, speed."""
    methods = {
        label: {
            str(k): {
                "acceptance_length": t.acceptance_length,
                "draft_tokens_per_step": t.draft_tokens_per_step,
            }
            for k, t in row.items()
        }
        for label, row in report.table.items()
    }
    speed = {
        "append_us_per_token": report.speed.append_us_per_token,
        "speculate_us": report.speed.speculate_us,
    }
    return {"file": file, "protocol": report.protocol, "methods": methods, "speed": speed}


def report_table(file: str, report: ReplayReport) -> str:
    ks = sorted({k for row in report.table.values() for k in row})
    width = max(len(label) for label in report.table) + 2
    lines = [
        f"{file}  protocol={report.protocol}  min_token_prob={report.scoring.min_token_prob}"
        f"  backoff={report.scoring.backoff}  smoothing={report.scoring.smoothing}"
        f"  own_weight={report.scoring.own_weight}  own_boost={report.scoring.own_boost}"
        f"  sibling_discount={report.scoring.sibling_discount}",
        "acceptance length (output tokens / steps) | draft tokens per step",
        "method".ljust(width) + "".join(f"k={k}".rjust(18) for k in ks),
    ]
    for label, row in report.table.items():
        cells = "".join(
            f"{row[k].acceptance_length:8.3f} |{row[k].draft_tokens_per_step:6.2f}".rjust(18)
            for k in ks
        )
        lines.append(label.ljust(width) + cells)
    lines.append(
        f"speed on {report.largest_group} ({report.largest_group_tokens} tokens, "
        f"{report.speed_method}, k=8): append {report.speed.append_us_per_token:.2f} us/token"
        f", speculate {report.speed.speculate_us:.1f} us/draft"
    )
    return "\n".join(lines)


def replay(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="recorded rollouts, gzip JSONL (one group per line)"),
    ],
    k: Annotated[
        str, typer.Option("--k", help="comma-separated draft budgets (tokens per step)")
    ] = ", ".join(map(str, DEFAULT_KS)),
    methods: Annotated[
        str,
        typer.Option(
            help="comma-separated methods: none, ngram (prompt lookup, n 4..2), suffix-self "
            "(suffix automaton of the request's own text), grouped (all siblings), "
            "grouped-tree2 / grouped-tree4 (multi-path, width 2 / 4)"
        ),
    ] = ", ".join(DEFAULT_METHODS),
    protocol: Annotated[
        str,
        typer.Option(
            help="lockstep: siblings advance together (DESIGN.md); references: n finished "
            "siblings as references, n=0 and n=G-1 (paper Table 2), labels 'method@n=N'"
        ),
    ] = "lockstep",
    min_token_prob: Annotated[
        float,
        typer.Option(
            help="suffix methods stop a path below this probability "
            "(SuffixDecoding uses 0.1 on raw counts)"
        ),
    ] = DEFAULT_SCORING.min_token_prob,
    backoff: Annotated[
        int,
        typer.Option(help="shorter contexts blended into each estimate (0 = SuffixDecoding)"),
    ] = DEFAULT_SCORING.backoff,
    smoothing: Annotated[
        float, typer.Option(help="Witten-Bell escape weight per distinct continuation")
    ] = DEFAULT_SCORING.smoothing,
    own_weight: Annotated[
        float,
        typer.Option(
            help="grouped methods: weight of the request's own-text automaton in the ranking "
            "(0 = group automaton only)"
        ),
    ] = DEFAULT_SCORING.own_weight,
    own_boost: Annotated[
        float,
        typer.Option(
            help="grouped methods: rank a continuation the request's own text has shown after "
            "the matched context 1 + this times higher (0 = off)"
        ),
    ] = DEFAULT_SCORING.own_boost,
    sibling_discount: Annotated[
        float,
        typer.Option(
            help="grouped methods: factor on the probability of a continuation seen only in "
            "siblings, for the path probability that meets --min-token-prob (1 = off)"
        ),
    ] = DEFAULT_SCORING.sibling_discount,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Replay drafting methods on recorded group rollouts and print acceptance lengths.

    Acceptance length = output tokens / verification steps over all requests (1.0 = no
    speculation); a tree draft's accepted length is its longest path matching the recording.
    Speed (append us/token, speculate us/draft) is measured on the file's largest group.
    """
    ks = _parse_ks(k)
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if protocol not in PROTOCOLS:
        raise typer.BadParameter(f"--protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
    try:
        scoring = SpeculationParams(
            min_token_prob=min_token_prob,
            backoff=backoff,
            smoothing=smoothing,
            own_weight=own_weight,
            own_boost=own_boost,
            sibling_discount=sibling_discount,
        )
        groups = load_groups(file)
        report = run_replay(groups, names, ks, protocol, scoring)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report_json(str(file), report), indent=2))
    else:
        typer.echo(report_table(str(file), report))


def register(cli: typer.Typer) -> None:
    cli.command("replay")(replay)
