"""``seer demo``: send one demo rollout to a running service and summarize it."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.prompts import DEMO_PROMPTS


def demo(
    url: Annotated[str, typer.Option(help="base URL of the service")] = "http://127.0.0.1:8000",
    prompts: Annotated[
        int, typer.Option(min=1, max=len(DEMO_PROMPTS), help="how many built-in prompts")
    ] = 8,
    group_size: Annotated[int, typer.Option(min=1, max=256, help="responses per prompt (G)")] = 4,
    max_tokens: Annotated[int, typer.Option(min=1, help="cap on tokens per response")] = 64,
    temperature: Annotated[float, typer.Option(min=0.0, help="0 = greedy")] = 1.0,
    policy: Annotated[
        str | None,
        typer.Option(help="policy the service must be running (422 otherwise; default: any)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the stats as JSON")] = False,
) -> None:
    """Send PROMPTS prompts x GROUP_SIZE responses x MAX_TOKENS to POST /v1/rollouts and print
    throughput, lengths and one sample."""
    import httpx

    body: dict[str, object] = {
        "prompts": DEMO_PROMPTS[:prompts],
        "group_size": group_size,
        "max_tokens": max_tokens,
        "sampling": {"temperature": temperature},
        "wait": True,
    }
    if policy is not None:
        body["policy"] = policy
    try:
        r = httpx.post(f"{url.rstrip('/')}/v1/rollouts", json=body, timeout=3600)
    except httpx.HTTPError as exc:
        typer.echo(f"error: cannot reach {url}: {exc}", err=True)
        raise typer.Exit(1) from None
    if r.status_code != 200:
        typer.echo(f"error: HTTP {r.status_code}: {r.text[:2000]}", err=True)
        raise typer.Exit(1)
    out = r.json()
    stats = out["stats"]
    lengths = [resp["length"] for g in out["groups"] for resp in g["responses"]]
    if as_json:
        typer.echo(json.dumps({**stats, "max_length": max(lengths), "policy": out["policy"]}))
        return
    typer.echo(
        f"rollout {out['id']} ({out['model']}, policy {out['policy']}): "
        f"{len(out['groups'])} groups x {group_size} = {stats['requests']} responses, "
        f"{stats['output_tokens']} tokens in {stats['elapsed_s']:.2f} s "
        f"= {stats['tokens_per_s']:.1f} tok/s; lengths min {min(lengths)} max {max(lengths)}"
    )
    first = out["groups"][0]["responses"][0]
    typer.echo(f"sample [{DEMO_PROMPTS[0]!r}] -> {first['text'][:200]!r}")


def register(cli: typer.Typer) -> None:
    cli.command("demo")(demo)
