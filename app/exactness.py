"""``seer exactness``: proof that grouped speculation keeps rollouts on-policy.

Two engines of one model run the same work, one after the other: ``spec`` (grouped drafting on
every chunk, fixed lengths, every path kept: speculation as aggressive as it gets) and ``plain``
(no speculation). Three checks:

(a) greedy: G responses per prompt at temperature 0, chunked like the service chunks them;
    every response must be identical token for token on both engines.
(b) sampled: M responses of one prompt at temperature 1 with fixed seeds; at several positions
    the token distributions of the two engines are compared by a two-sample chi-square test
    (a response that ended before a position counts as the category "ended").
(c) logprobs: the logprobs the spec engine returned for its tokens equal the target model's,
    scored by one plain prefill of the same tokens.

The verdict is PASS when (a) holds, every p-value is at least ``alpha / positions``
(Bonferroni), the largest logprob difference is within ``logprob_tol``, and the spec engine
accepted draft tokens at all (otherwise nothing was tested). ``accept_all_drafts`` breaks the
spec engine's verification on purpose (test-only): the verdict must then be FAIL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from app.engines.chunked import ResponseRun, generate_response
from app.engines.config import EngineConfig, SpeculationConfig
from app.engines.vllm_engine import VllmEngine
from app.prompts import DEMO_PROMPTS
from core.drafting.step_drafter import DraftSettings
from core.engine import SamplingParams
from core.stats import two_sample_chi2

ENDED = -1  # the category of a response that ended before a tested position


@dataclass(frozen=True, slots=True)
class ExactnessParams:
    model: str = "smollm2-135m-instruct"
    prompts: int = 4  # greedy prompts, 1..len(DEMO_PROMPTS)
    group_size: int = 4  # greedy responses per prompt, 2..64
    samples: int = 200  # sampled responses per engine, 16..4096
    max_tokens: int = 48  # tokens per response, 8..1024
    chunk_tokens: int = 16  # chunk budget (continuations are re-submitted), 1..max_tokens
    positions: tuple[int, ...] = (1, 2, 4, 8)  # tested positions, each < max_tokens
    alpha: float = 1e-3  # family-wise significance level of the chi-square tests, (0, 0.5]
    logprob_tol: float = 1e-3  # largest allowed |returned - scored| logprob, (0, 1]
    num_speculative_tokens: int = 8  # K of the spec engine, 1..16
    seed: int = 0
    max_num_seqs: int = 64
    accept_all_drafts: bool = False  # test-only: break verification on purpose

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.prompts <= len(DEMO_PROMPTS), f"prompts in [1, {len(DEMO_PROMPTS)}]"),
            (2 <= self.group_size <= 64, "group_size in [2, 64]"),
            (16 <= self.samples <= 4096, "samples in [16, 4096]"),
            (8 <= self.max_tokens <= 1024, "max_tokens in [8, 1024]"),
            (1 <= self.chunk_tokens <= self.max_tokens, "chunk_tokens in [1, max_tokens]"),
            (
                bool(self.positions) and all(0 <= p < self.max_tokens for p in self.positions),
                "positions non-empty, each in [0, max_tokens)",
            ),
            (0 < self.alpha <= 0.5, "alpha in (0, 0.5]"),
            (0 < self.logprob_tol <= 1, "logprob_tol in (0, 1]"),
        ]
        for ok, what in checks:
            if not ok:
                raise ValueError(f"exactness: need {what}; got {self}")


@dataclass(frozen=True, slots=True)
class SampledTest:
    position: int
    p_value: float


@dataclass(slots=True)
class ExactnessReport:
    greedy_identical: bool
    greedy_pairs: int
    sampled_tests: list[SampledTest]
    logprob_max_abs_diff: float
    verdict: str
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "greedy_identical": self.greedy_identical,
            "greedy_pairs": self.greedy_pairs,
            "sampled_tests": [
                {"position": t.position, "p_value": t.p_value} for t in self.sampled_tests
            ],
            "logprob_max_abs_diff": self.logprob_max_abs_diff,
            "verdict": self.verdict,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
        }


@dataclass(slots=True)
class _Run:
    greedy: list[ResponseRun]
    sampled: list[ResponseRun]


def _generate(
    engine: VllmEngine,
    p: ExactnessParams,
    group_id: str,
    index: int,
    prompt: list[int],
    sampling: SamplingParams,
) -> Coroutine[Any, Any, ResponseRun]:
    return generate_response(
        engine, group_id, index, prompt, sampling, p.max_tokens, p.chunk_tokens
    )


async def _run(engine: VllmEngine, p: ExactnessParams, prompts: list[list[int]]) -> _Run:
    greedy = SamplingParams(temperature=0.0)
    jobs = [
        _generate(engine, p, f"greedy{i}", k, ids, greedy)
        for i, ids in enumerate(prompts)
        for k in range(p.group_size)
    ]
    sampled = [
        _generate(
            engine,
            p,
            "sampled",
            j,
            prompts[0],
            SamplingParams(temperature=1.0, seed=(p.seed + 7919 * j) % 2**32),
        )
        for j in range(p.samples)
    ]
    out = await asyncio.gather(*jobs, *sampled)
    return _Run(greedy=list(out[: len(jobs)]), sampled=list(out[len(jobs) :]))


def _engine_config(p: ExactnessParams, method: str) -> EngineConfig:
    settings = DraftSettings(adaptive=False, min_token_prob=0.0)
    return EngineConfig(
        backend="vllm",
        model=p.model,
        max_num_seqs=p.max_num_seqs,
        seed=p.seed,
        speculation=SpeculationConfig(
            method=method,
            num_speculative_tokens=p.num_speculative_tokens,
            settings=settings,
        ),
    )


def _token_at(r: ResponseRun, pos: int) -> int:
    return r.tokens[pos] if pos < len(r.tokens) else ENDED


async def run_exactness(
    p: ExactnessParams, say: Callable[[str], None] = lambda _: None
) -> ExactnessReport:
    t0 = time.perf_counter()
    spec = VllmEngine(
        _engine_config(p, "grouped"), "exactness-spec", accept_all_drafts=p.accept_all_drafts
    )
    say(f"starting the speculating engine ({p.model}, grouped, K={p.num_speculative_tokens}) ...")
    await spec.start()
    prompts = [spec.encode(text, True) for text in DEMO_PROMPTS[: p.prompts]]
    try:
        say(
            f"spec: {p.prompts} prompts x {p.group_size} greedy + {p.samples} sampled responses "
            f"of {p.max_tokens} tokens ..."
        )
        with_spec = await _run(spec, p, prompts)
    finally:
        await spec.shutdown()
    plain = VllmEngine(_engine_config(p, "none"), "exactness-plain")
    say("starting the plain engine (no speculation) ...")
    await plain.start()
    try:
        say("plain: the same responses ...")
        without = await _run(plain, p, prompts)
        say("scoring the spec engine's tokens with plain prefills ...")
        scored = await asyncio.gather(
            *(
                plain.score(r.prompt, r.tokens)
                for r in with_spec.greedy + with_spec.sampled
                if r.tokens
            )
        )
    finally:
        await plain.shutdown()

    pairs = list(zip(with_spec.greedy, without.greedy, strict=True))
    identical = all(a.tokens == b.tokens for a, b in pairs)
    tests = [
        SampledTest(
            pos,
            two_sample_chi2(
                [_token_at(r, pos) for r in with_spec.sampled],
                [_token_at(r, pos) for r in without.sampled],
            ).p_value,
        )
        for pos in p.positions
    ]
    returned = [r.logprobs for r in with_spec.greedy + with_spec.sampled if r.tokens]
    diff = max(
        (
            abs(a - b)
            for got, ref in zip(returned, scored, strict=True)
            for a, b in zip(got, ref, strict=True)
        ),
        default=0.0,
    )
    responses = with_spec.greedy + with_spec.sampled
    drafted = sum(r.drafted for r in responses)
    accepted = sum(r.accepted for r in responses)
    failures = []
    if not identical:
        bad = sum(a.tokens != b.tokens for a, b in pairs)
        failures.append(f"{bad} of {len(pairs)} greedy responses differ with speculation")
    level = p.alpha / len(tests)
    for t in tests:
        if t.p_value < level:
            failures.append(
                f"position {t.position}: token distributions differ (p={t.p_value:.3g} < "
                f"{level:.3g})"
            )
    if diff > p.logprob_tol:
        failures.append(f"returned logprobs differ from the target's by {diff:.3g}")
    if accepted == 0:
        failures.append("no draft token was accepted: speculation was not exercised")
    return ExactnessReport(
        greedy_identical=identical,
        greedy_pairs=len(pairs),
        sampled_tests=tests,
        logprob_max_abs_diff=diff,
        verdict="FAIL" if failures else "PASS",
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        failures=failures,
        seconds=time.perf_counter() - t0,
    )
