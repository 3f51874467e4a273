"""Speculation benchmark on one real vLLM engine: none vs ngram vs grouped, side by side.

``python -m lab.bench.speculation_methods [--model M] [--methods none,ngram,grouped] [--prompts N]
[--group-size G] [--max-tokens T] [--temperature X] [--json]``

Each method gets a fresh engine (one after the other, same machine, same run) and the same work:
the first N math prompts of the recorded rollouts (``data/rollouts``) as groups of G
responses at temperature X, chunked like the service chunks them, every chunk asking to draft
(what the ``seer`` policy does). Printed per method: output tokens/s, acceptance length (output
tokens per request-step: 1.0 = no speculation), draft tokens accepted / drafted, and for grouped
the drafting time as a share of step time and the step cost it learned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.data import SMOLLM2_T1
from app.engines.chunked import generate_response
from app.engines.config import EngineConfig, SpeculationConfig
from app.engines.vllm.engine import VllmEngine
from core.drafting.recorded import load_groups
from core.engine import SamplingParams

ROLLOUTS = SMOLLM2_T1


def math_prompts(path: Path = ROLLOUTS) -> list[list[int]]:
    """Prompt token ids of the recorded math groups (their prompts ask for 'Answer:')."""
    return [list(g.prompt) for g in load_groups(path) if "Answer:" in g.prompt_text]


@dataclass(frozen=True, slots=True)
class MethodResult:
    method: str
    seconds: float
    output_tokens: int
    tokens_per_s: float
    acceptance_length: float
    drafted: int
    accepted: int
    draft_time_share: float | None
    step_cost: list[float] | None  # (base, per request, per draft token) seconds, grouped only


async def run_method(method: str, p: argparse.Namespace) -> MethodResult:
    engine = VllmEngine(
        EngineConfig(
            model=p.model,
            max_num_seqs=max(64, p.prompts * p.group_size),
            speculation=SpeculationConfig(method=method),
        ),
        f"bench-{method}",
    )
    await engine.start()
    try:
        prompts = math_prompts()[: p.prompts]
        before = engine.load()
        t0 = time.perf_counter()
        out = await asyncio.gather(
            *(
                generate_response(
                    engine,
                    f"g{i}",
                    k,
                    prompt,
                    SamplingParams(temperature=p.temperature, seed=1000 * k + len(f"g{i}")),
                    p.max_tokens,
                    p.chunk_tokens,
                )
                for i, prompt in enumerate(prompts)
                for k in range(p.group_size)
            )
        )
        seconds = time.perf_counter() - t0
        after = engine.load()
        stats = await engine.speculation_stats()
    finally:
        await engine.shutdown()
    tokens = sum(len(r.tokens) for r in out)
    accepted = after.accepted_draft_tokens - before.accepted_draft_tokens
    drafted = after.draft_tokens - before.draft_tokens
    share = None
    if stats and stats.get("step_seconds"):
        share = stats["draft_seconds"] / stats["step_seconds"]
    return MethodResult(
        method=method,
        seconds=seconds,
        output_tokens=tokens,
        tokens_per_s=tokens / seconds,
        acceptance_length=tokens / max(tokens - accepted, 1),
        drafted=drafted,
        accepted=accepted,
        draft_time_share=share,
        step_cost=list(stats["step_cost"]) if stats else None,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--methods", default="none,ngram,grouped")
    ap.add_argument("--prompts", type=int, default=1)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--chunk-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    p = ap.parse_args(argv)
    results = []
    for method in [m.strip() for m in p.methods.split(",") if m.strip()]:
        print(f"{method}: running ...", file=sys.stderr, flush=True)
        results.append(asyncio.run(run_method(method, p)))
    if p.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    base = next((r.tokens_per_s for r in results if r.method == "none"), None)
    head = ("method", "tok/s", "vs none", "acc.len", "accepted/drafted", "draft%")
    print(f"{head[0]:8} {head[1]:>7} {head[2]:>7} {head[3]:>7} {head[4]:>17} {head[5]:>6}")
    for r in results:
        rel = f"{r.tokens_per_s / base:.2f}x" if base else "-"
        share = f"{100 * r.draft_time_share:.2f}" if r.draft_time_share is not None else "-"
        print(
            f"{r.method:8} {r.tokens_per_s:7.1f} {rel:>7} {r.acceptance_length:7.3f} "
            f"{f'{r.accepted}/{r.drafted}':>17} {share:>6}"
        )
        if r.step_cost:
            b, q, d = r.step_cost
            print(
                f"{'':8} learned step cost: {b:.4f} s + {q:.4f} s/request + {d:.4f} s/draft token"
            )


if __name__ == "__main__":
    main()
