"""``seer exactness``: proof that grouped speculation keeps rollouts on-policy.

Two engines of one model run the same work, one after the other: ``spec`` (grouped drafting on
every chunk, fixed lengths: as much speculation as the group's text offers) and ``plain`` (no
speculation). Four checks:

(a) greedy: G responses per prompt at temperature 0, chunked like the service chunks them;
    every response must be identical token for token on both engines.
(b) sampled: M responses of one high-entropy prompt per sampling setting (T=1; T=0.7 with
    top_p=0.9), all in one batch (so rows of different temperatures verify side by side), each
    engine with its own seeds: independent samples. Per setting, the token distributions at
    positions 1, 4, 17, 20 (17 and 20 after a continuation chunk) are compared by a two-sample
    chi-square test (a response that ended before a position counts as "ended"), and the
    per-response mean logprob, which sums every position, by a two-sample Kolmogorov-Smirnov
    test. M = 160 by default, chosen from the measured power curve
    (``lab.bench.exactness_power``, docs/speculation.md).
(c) logprobs: the logprobs the spec engine returned for its tokens equal the target model's,
    scored by one plain prefill of the same tokens (under vLLM's own rule).
(d) the spec engine accepted draft tokens at all (otherwise nothing was tested).

The verdict is PASS when (a) holds, every p-value of (b) is at least ``alpha / tests``
(Bonferroni), (c) is within ``logprob_tol`` and (d) holds. The service's check runs vLLM's own
verification. A ``Verification`` (the laboratory's deliberately broken rules,
``lab.engines.broken_verification``) switches the spec engine's verification between runs, so
one pair of engines serves vLLM's own rule and every broken one (``collect``): a broken rule's
verdict must be FAIL; every rule but ``accept-all`` keeps greedy identical, so its FAIL must come
from (b).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.engines.chunked import ResponseRun, generate_response
from app.engines.config import EngineConfig, SpeculationConfig
from app.engines.vllm.engine import VllmEngine
from app.engines.vllm.grouped_proposer import WORKER_EXTENSION
from app.prompts import DEMO_PROMPTS
from core.drafting.step_drafter import DraftSettings
from core.engine import SamplingParams
from core.stats import two_sample_chi2, two_sample_ks

ENDED = -1  # the category of a response that ended before a tested position
SAMPLED_PROMPT = "Write a list of twenty random English words, separated by commas."
SAMPLED_SETTINGS: tuple[tuple[float, float], ...] = ((1.0, 1.0), (0.7, 0.9))  # (T, top_p)
_RULE_SEEDS = 1 << 26  # rule i's seeds start at i * this: independent across rules
_PLAIN_SEEDS = 1 << 31  # the plain engine's seeds start here: independent of the spec engine's


@dataclass(frozen=True, slots=True)
class ExactnessParams:
    model: str = "smollm2-135m-instruct"
    prompts: int = 4  # greedy prompts, 1..len(DEMO_PROMPTS)
    group_size: int = 4  # greedy responses per prompt, 2..64
    samples: int = 160  # sampled responses per engine and sampling setting, 16..4096
    max_tokens: int = 24  # tokens per response, 8..1024
    chunk_tokens: int = 16  # chunk budget (continuations are re-submitted), 1..max_tokens
    positions: tuple[int, ...] = (1, 4, 17, 20)  # tested positions, each < max_tokens
    alpha: float = 1e-3  # family-wise significance level of check (b)'s tests, (0, 0.5]
    logprob_tol: float = 1e-3  # largest allowed |returned - scored| logprob, (0, 1]
    num_speculative_tokens: int = 4  # K of the spec engine, 1..16
    seed: int = 0
    max_num_seqs: int = 64

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
            (1 <= self.num_speculative_tokens <= 16, "num_speculative_tokens in [1, 16]"),
        ]
        for ok, what in checks:
            if not ok:
                raise ValueError(f"exactness: need {what}; got {self}")


class Verification(Protocol):
    """How the spec engine verifies drafts under rule names other than None (vLLM's own): the
    worker extension it is built with, a check of a rule's name (ValueError naming it), and the
    switch to a rule before its run."""

    worker_extension: str

    def check(self, rule: str | None) -> None: ...

    async def use(self, engine: VllmEngine, rule: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class SampledTest:
    temperature: float
    top_p: float
    statistic: str  # "token" (chi-square at ``position``) or "mean_logprob" (KS)
    position: int | None
    p_value: float


@dataclass(slots=True)
class ExactnessReport:
    greedy_identical: bool
    greedy_pairs: int
    sampled_tests: list[SampledTest]
    logprob_max_abs_diff: float | None  # None: not scored (a broken rule's run)
    verdict: str
    sampled_verdict: str = "PASS"
    samples: int = 0  # sampled responses of the spec engine per setting
    plain_samples: int = 0  # and of the plain engine (its reference, shared by every rule)
    broken_rule: str | None = None
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "greedy_identical": self.greedy_identical,
            "greedy_pairs": self.greedy_pairs,
            "sampled_tests": [
                {
                    "temperature": t.temperature,
                    "top_p": t.top_p,
                    "statistic": t.statistic,
                    "position": t.position,
                    "p_value": t.p_value,
                }
                for t in self.sampled_tests
            ],
            "sampled_check": {
                "verdict": self.sampled_verdict,
                "p_values": [t.p_value for t in self.sampled_tests],
                "samples": self.samples,
                "plain_samples": self.plain_samples,
            },
            "broken_rule": self.broken_rule,
            "logprob_max_abs_diff": self.logprob_max_abs_diff,
            "verdict": self.verdict,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
        }


@dataclass(slots=True)
class Runs:
    """What one engine generated for one rule: the greedy responses (prompt-major) and, per
    ``SAMPLED_SETTINGS`` entry, the sampled ones."""

    greedy: list[ResponseRun]
    sampled: list[list[ResponseRun]]

    def responses(self) -> list[ResponseRun]:
        return self.greedy + [r for rs in self.sampled for r in rs]


@dataclass(slots=True)
class Collected:
    """Both engines' output: ``spec[i]`` under ``rules[i]``, ``plain`` once; ``scored[i]`` is the
    plain engine's logprob of every token of ``spec[i].responses()`` (one prefill each), for
    vLLM's own rule only (None for a broken one: its logprobs are not what is tested)."""

    rules: tuple[str | None, ...]
    spec: list[Runs]
    plain: Runs
    scored: list[list[list[float]] | None]


def _generate(
    engine: VllmEngine,
    p: ExactnessParams,
    group: str,
    index: int,
    prompt: list[int],
    sampling: SamplingParams,
) -> Coroutine[Any, Any, ResponseRun]:
    return generate_response(
        engine, group, index, prompt, sampling, p.max_tokens, p.chunk_tokens, speculate=True
    )


async def _run(
    engine: VllmEngine, p: ExactnessParams, prompts: list[list[int]], seeds: int, samples: int
) -> Runs:
    """The greedy groups and ``samples`` responses per sampled setting; sampled response j of
    setting s is seeded ``seeds + seed + 7919 (j + samples s)``, so disjoint ``seeds`` draw
    independently."""
    greedy = SamplingParams(temperature=0.0)
    jobs = [
        _generate(engine, p, f"greedy{i}", k, ids, greedy)
        for i, ids in enumerate(prompts)
        for k in range(p.group_size)
    ]
    sampled_prompt = engine.encode(SAMPLED_PROMPT, True)
    sampled = [
        _generate(
            engine,
            p,
            f"sampled{s}",
            j,
            sampled_prompt,
            SamplingParams(
                temperature=t,
                top_p=top_p,
                seed=(seeds + p.seed + 7919 * (j + samples * s)) % 2**32,
            ),
        )
        for s, (t, top_p) in enumerate(SAMPLED_SETTINGS)
        for j in range(samples)
    ]
    out = await asyncio.gather(*jobs, *sampled)
    rest = list(out[len(jobs) :])
    per_setting = [rest[s * samples : (s + 1) * samples] for s in range(len(SAMPLED_SETTINGS))]
    return Runs(greedy=list(out[: len(jobs)]), sampled=per_setting)


def _mean_logprob(r: ResponseRun) -> float:
    return sum(r.logprobs) / len(r.logprobs) if r.logprobs else 0.0


def _token_at(r: ResponseRun, pos: int) -> int:
    return r.tokens[pos] if pos < len(r.tokens) else ENDED


def sampled_tests(
    p: ExactnessParams, spec: list[list[ResponseRun]], plain: list[list[ResponseRun]]
) -> list[SampledTest]:
    """The tests of check (b): per sampling setting, chi-square per position and KS on the
    per-response mean logprob."""
    tests = []
    for (t, top_p), a, b in zip(SAMPLED_SETTINGS, spec, plain, strict=True):
        for pos in p.positions:
            chi2 = two_sample_chi2([_token_at(r, pos) for r in a], [_token_at(r, pos) for r in b])
            tests.append(SampledTest(t, top_p, "token", pos, chi2.p_value))
        ks = two_sample_ks([_mean_logprob(r) for r in a], [_mean_logprob(r) for r in b])
        tests.append(SampledTest(t, top_p, "mean_logprob", None, ks))
    return tests


def rejected(p: ExactnessParams, tests: list[SampledTest]) -> list[SampledTest]:
    """The tests whose p-value is below the Bonferroni level: check (b) fails iff any is."""
    level = bonferroni_level(p, tests)
    return [t for t in tests if t.p_value < level]


def bonferroni_level(p: ExactnessParams, tests: list[SampledTest]) -> float:
    """Each test's significance level: ``alpha`` spread over the family of ``tests``."""
    return p.alpha / len(tests)


def _engine_config(p: ExactnessParams, method: str) -> EngineConfig:
    settings = DraftSettings(adaptive=False, min_token_prob=0.0, max_draft=p.num_speculative_tokens)
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


def _rule_name(rule: str | None) -> str:
    return rule or "vLLM's own"


async def collect(
    p: ExactnessParams,
    rules: tuple[str | None, ...] = (None,),
    say: Callable[[str], None] = lambda _: None,
    score: bool = True,
    verification: Verification | None = None,
    samples: tuple[int, ...] | None = None,
) -> Collected:
    """Run the work on the spec engine once per rule (``None``: vLLM's own verification; the
    others are ``verification``'s, switched live between runs), then once on the plain engine,
    which also scores every token generated under vLLM's own rule (``score``). Rule i draws
    ``samples[i]`` sampled responses per setting (default ``p.samples``, at most it: the plain
    engine draws ``p.samples``), seeded apart from every other rule's and from the plain
    engine's."""
    if not rules:
        raise ValueError("exactness: need at least one rule")
    counts = samples if samples is not None else (p.samples,) * len(rules)
    if len(counts) != len(rules) or not all(16 <= n <= p.samples for n in counts):
        raise ValueError(
            f"exactness: samples {counts}: need one per rule of {rules}, each in [16, {p.samples}]"
        )
    for rule in rules:
        if verification is not None:
            verification.check(rule)
        elif rule is not None:
            raise ValueError(f"exactness: rule {rule!r} needs a Verification that provides it")
    extension = WORKER_EXTENSION if verification is None else verification.worker_extension
    spec = VllmEngine(_engine_config(p, "grouped"), "exactness-spec", extension)
    say(f"starting the speculating engine ({p.model}, grouped, K={p.num_speculative_tokens}) ...")
    await spec.start()
    prompts = [spec.encode(text, True) for text in DEMO_PROMPTS[: p.prompts]]
    runs = []
    try:
        for i, (rule, n) in enumerate(zip(rules, counts, strict=True)):
            say(
                f"spec, verification {_rule_name(rule)}: {p.prompts} prompts x {p.group_size} "
                f"greedy + {len(SAMPLED_SETTINGS)} x {n} sampled responses of "
                f"{p.max_tokens} tokens ..."
            )
            if verification is not None:
                await verification.use(spec, rule)
            runs.append(await _run(spec, p, prompts, _RULE_SEEDS * i, n))
    finally:
        await spec.shutdown()
    plain = VllmEngine(_engine_config(p, "none"), "exactness-plain")
    say("starting the plain engine (no speculation) ...")
    await plain.start()
    try:
        say("plain: the same responses, its own seeds ...")
        without = await _run(plain, p, prompts, _PLAIN_SEEDS, p.samples)
        scored: list[list[list[float]] | None] = []
        for rule, run in zip(rules, runs, strict=True):
            if rule is not None or not score:
                scored.append(None)
                continue
            say("scoring the spec engine's tokens with plain prefills ...")
            done = (plain.score(r.prompt, r.tokens) for r in run.responses() if r.tokens)
            scored.append(list(await asyncio.gather(*done)))
    finally:
        await plain.shutdown()
    return Collected(rules=tuple(rules), spec=runs, plain=without, scored=scored)


def judge(p: ExactnessParams, c: Collected, i: int, seconds: float = 0.0) -> ExactnessReport:
    """The report of rule ``c.rules[i]``: checks (a)-(c) and whether drafts were accepted."""
    run = c.spec[i]
    pairs = list(zip(run.greedy, c.plain.greedy, strict=True))
    identical = all(a.tokens == b.tokens for a, b in pairs)
    tests = sampled_tests(p, run.sampled, c.plain.sampled)
    returned = [r.logprobs for r in run.responses() if r.tokens]
    ref = c.scored[i]
    diff = (
        None
        if ref is None
        else max(
            (
                abs(a - b)
                for got, want in zip(returned, ref, strict=True)
                for a, b in zip(got, want, strict=True)
            ),
            default=0.0,
        )
    )
    responses = run.responses()
    drafted = sum(r.drafted for r in responses)
    accepted = sum(r.accepted for r in responses)
    failures = []
    if not identical:
        bad = sum(a.tokens != b.tokens for a, b in pairs)
        failures.append(f"{bad} of {len(pairs)} greedy responses differ with speculation")
    level = bonferroni_level(p, tests)
    failed = rejected(p, tests)
    for t in failed:
        what = f"position {t.position}" if t.position is not None else "mean logprob"
        failures.append(
            f"sampled check, T={t.temperature} top_p={t.top_p}, {what}: distributions "
            f"differ (p={t.p_value:.3g} < {level:.3g})"
        )
    if diff is not None and diff > p.logprob_tol:
        failures.append(f"returned logprobs differ from the target's by {diff:.3g}")
    if accepted == 0:
        failures.append("no draft token was accepted: speculation was not exercised")
    return ExactnessReport(
        greedy_identical=identical,
        greedy_pairs=len(pairs),
        sampled_tests=tests,
        logprob_max_abs_diff=diff,
        verdict="FAIL" if failures else "PASS",
        sampled_verdict="FAIL" if failed else "PASS",
        samples=len(run.sampled[0]),
        plain_samples=len(c.plain.sampled[0]),
        broken_rule=c.rules[i],
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        failures=failures,
        seconds=seconds,
    )


async def run_exactness(
    p: ExactnessParams,
    rules: tuple[str | None, ...] = (None,),
    say: Callable[[str], None] = lambda _: None,
    verification: Verification | None = None,
    samples: tuple[int, ...] | None = None,
) -> list[ExactnessReport]:
    """One report per rule (see ``collect``); ``seconds`` is the whole run's."""
    t0 = time.perf_counter()
    c = await collect(p, rules, say, verification=verification, samples=samples)
    seconds = time.perf_counter() - t0
    return [judge(p, c, i, seconds) for i in range(len(rules))]
