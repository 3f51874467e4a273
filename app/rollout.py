"""Rollout jobs as plain data: group expansion, per-response seeds, response assembly (no Ray).

Invariant: a job of P prompts x G responses is P groups of G requests; request ``(i, j)`` is
response j of prompt i, id ``{job}-g{i}-r{j}``, in group ``{job}-g{i}`` (or ``key:{group_key}``,
shared with every job naming that key while the group is open); its tokens are the
concatenation of its chunks in order (a chunk continues exactly where the last one stopped).
A seeded job gives response k = i * G + j the seed ``seed + k * (max_tokens + 1)`` (mod
2**32); chunk c of it is seeded at its position (``SamplingParams.chunk_seed``), so every chunk
of every response of a job has its own seed as long as ``P * G * (max_tokens + 1) <= 2**32``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.api import GroupResult, Response, RolloutRequest, RolloutStats, SeedGuarantee
from app.store.keys import prompt_key
from core.engine import ChunkRequest, ChunkResult, FinishReason, SamplingParams
from core.engine.types import SEED_SPACE, LogprobsMode
from core.scheduling.types import ChunkDecision, GroupSpec


def response_seed(seed: int, k: int, max_tokens: int) -> int:
    """Seed of response ``k`` of a job seeded with ``seed`` (see the module invariant)."""
    return (seed + k * (max_tokens + 1)) % SEED_SPACE


@dataclass
class RequestRun:
    """One response being generated: its inputs and what its chunks produced so far."""

    group_id: str
    index: int  # response position in its group
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    logprobs: bool
    tokens: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    replicas: list[str] = field(default_factory=list)  # one entry per chunk, in order
    failures: int = 0  # chunks lost to a failed replica
    finished_at: float = 0.0  # time.time() of its last token
    drafted: int = 0  # draft tokens verified for it
    accepted: int = 0  # of those, accepted
    policy_version: int = 0  # weights version that sampled its tokens (set at its first chunk)
    restarts: int = 0  # times it started over from its prompt (a weight update cut it)
    logprobs_mode: LogprobsMode = "raw"  # what the engines' logprobs are (the service's mode)

    def chunk(self, decision: ChunkDecision, speculate: bool = False) -> ChunkRequest:
        """The engine request of the chunk ``decision`` asks for, continuing this response;
        ``speculate``: the running policy drafts (engines that speculate then draft for it)."""
        if decision.generated != len(self.tokens):
            raise ValueError(
                f"request {decision.request_id}: scheduler continues at {decision.generated} "
                f"tokens but {len(self.tokens)} were generated"
            )
        return ChunkRequest(
            request_id=decision.request_id,
            group_id=self.group_id,
            response_index=self.index,
            prompt_token_ids=self.prompt,
            generated_token_ids=list(self.tokens),
            chunk_cap=decision.chunk_cap,
            max_tokens=self.max_tokens,
            sampling=self.sampling,
            logprobs=self.logprobs,
            priority=decision.priority,
            is_probe=decision.is_probe,
            speculate=speculate,
        )

    def restart(self) -> None:
        """Forget every token generated so far: the response starts over from its prompt."""
        self.tokens = []
        self.token_logprobs = []
        self.replicas = []
        self.drafted = self.accepted = 0
        self.restarts += 1

    def append(self, replica: str, tokens: Sequence[int], logprobs: Sequence[float] | None) -> None:
        self.tokens += tokens
        if logprobs is not None:
            self.token_logprobs += logprobs
        self.replicas.append(replica)

    def take(self, replica: str, result: ChunkResult) -> None:
        """A chunk run on ``replica`` came back: its tokens and draft counts are this
        response's."""
        self.append(replica, result.token_ids, result.logprobs)
        self.drafted += result.drafted_tokens
        self.accepted += result.accepted_tokens

    def finish_as(self, reason: FinishReason, now: float) -> None:
        """The response ended at ``now``: ``stop`` for EOS, else ``length`` (its cap)."""
        self.finish = FinishReason.STOP if reason is FinishReason.STOP else FinishReason.LENGTH
        self.finished_at = now


@dataclass
class GroupRun:
    spec: GroupSpec
    prompt_index: int
    prompt_id: str | None
    prompt: list[int]
    runs: list[RequestRun]


@dataclass(frozen=True)
class IdempotentCall:
    """A submission under an ``Idempotency-Key``: the same key sent to the same endpoint within
    ``job_ttl_s`` of its job's end names that job again (``app.serve.ingress.idempotency``)."""

    endpoint: str  # "/v1/rollouts", "/v1/completions", "/generate": keys are per endpoint
    key: str
    body_digest: str  # sha256 of the request as parsed: another body under the key is a 422
    cancel_token: str | None = None  # a 202's, given again to a repeat of the call


@dataclass
class JobPlan:
    """A job expanded into scheduler groups and per-request runs."""

    job_id: str
    groups: list[GroupRun]
    runs: dict[str, RequestRun]
    max_tokens: int
    iteration: int | None = None  # the trainer's RL iteration, when given
    # sha256 of the token its submitter may cancel it with (``app.serve.ingress.auth``); None: only
    # the operator (and the service itself, for a caller that went away) may
    cancel_digest: str | None = None
    # the ``rid`` a ``/generate`` caller submitted it under (its id): ``/abort_request`` may end
    # this job by it; None for every other job (only its cancel token or the operator may)
    rid: str | None = None
    idempotent: IdempotentCall | None = None  # submitted under an Idempotency-Key
    _by_id: dict[str, GroupRun] = field(default_factory=dict, repr=False)

    def group(self, group_id: str) -> GroupRun:
        if not self._by_id:
            self._by_id.update((g.spec.group_id, g) for g in self.groups)
        return self._by_id[group_id]

    @property
    def specs(self) -> list[GroupSpec]:
        return [g.spec for g in self.groups]

    @property
    def requests(self) -> int:
        return len(self.runs)

    @property
    def seeded(self) -> bool:
        """The caller gave a seed (every response then has its own)."""
        return any(r.sampling.seed is not None for r in self.runs.values())

    @property
    def token_budget(self) -> int:
        """Most tokens the job can generate: requests x max_tokens."""
        return len(self.runs) * self.max_tokens


def expand(
    job_id: str,
    req: RolloutRequest,
    prompts: Sequence[list[int]],
    logprobs_mode: LogprobsMode = "raw",
) -> JobPlan:
    """Groups and runs of a job whose prompts are already tokenized (``prompts[i]`` is prompt
    i's ids), on engines whose logprobs are ``logprobs_mode``; group i's ``prompt_key`` (the
    length prior's key across iterations) is the caller's prompt id when given, else a hash of
    its token ids."""
    groups: list[GroupRun] = []
    runs: dict[str, RequestRun] = {}
    seed = req.sampling.seed
    G = req.group_size
    for i, prompt in enumerate(prompts):
        gid = f"{job_id}-g{i}" if req.group_key is None else group_of_key(req.group_key)
        ids = tuple(f"{job_id}-g{i}-r{j}" for j in range(G))
        pid = req.prompt_ids[i] if req.prompt_ids is not None else None
        spec = GroupSpec(gid, ids, req.max_tokens, len(prompt), prompt_key=prompt_key(pid, prompt))
        group_runs = []
        for j, rid in enumerate(ids):
            sampling = req.sampling
            if seed is not None:
                sampling = sampling.model_copy(
                    update={"seed": response_seed(seed, i * G + j, req.max_tokens)}
                )
            run = RequestRun(
                gid,
                j,
                list(prompt),
                req.max_tokens,
                sampling,
                req.logprobs,
                logprobs_mode=logprobs_mode,
            )
            runs[rid] = run
            group_runs.append(run)
        groups.append(GroupRun(spec, i, pid, list(prompt), group_runs))
    return JobPlan(job_id, groups, runs, req.max_tokens, iteration=req.iteration)


def seed_guarantee(seeded: bool, drafts: bool) -> SeedGuarantee:
    """What the seed of a job promises (``app.api.SeedGuarantee``) when its chunks may carry
    draft tokens (``drafts``) or not."""
    if not seeded:
        return "none"
    return "distribution" if drafts else "identical"


def group_of_key(group_key: str) -> str:
    """Scheduler group id of the requests that carry ``group_key``."""
    return f"key:{group_key}"


def assemble_group(
    group: GroupRun,
    started: float,
    text: Callable[[list[int]], str] | None = None,
    partial: bool = False,
) -> GroupResult:
    """The API result of a finished group of a job accepted at ``started`` (``time.time()``);
    ``text`` detokenizes (``""`` when not given: the ingress fills it in with its own
    tokenizer). ``partial``: the job was cancelled; unfinished responses are reported with what
    they generated and finish reason ``abort``."""
    responses = []
    for run in group.runs:
        if run.finish is None and not partial:
            raise ValueError(f"group {group.spec.group_id}: response {run.index} is not finished")
        finish = run.finish.value if run.finish is not None else FinishReason.ABORT.value
        responses.append(
            Response(
                index=run.index,
                token_ids=list(run.tokens),
                text=text(run.tokens) if text is not None else "",
                logprobs=list(run.token_logprobs) if run.logprobs else None,
                logprobs_mode=run.logprobs_mode,
                finish_reason=finish,
                length=len(run.tokens),
                chunks=len(run.replicas),
                replicas=list(run.replicas),
                finished_after_s=max(run.finished_at - started, 0.0),
                drafted_tokens=run.drafted,
                accepted_tokens=run.accepted,
                policy_version=run.policy_version,
            )
        )
    return GroupResult(
        group_id=group.spec.group_id,
        prompt_index=group.prompt_index,
        prompt_id=group.prompt_id,
        prompt_token_ids=list(group.prompt),
        responses=responses,
    )


def with_text(group: GroupResult, decode: Callable[[list[int]], str]) -> GroupResult:
    """``group`` with every response's text decoded from its tokens."""
    return group.model_copy(
        update={
            "responses": [
                r.model_copy(update={"text": decode(r.token_ids)}) for r in group.responses
            ]
        }
    )


def rollout_stats(groups: Sequence[GroupResult], started: float) -> RolloutStats:
    """Stats of a finished rollout (``started``: its ``time.time()`` at acceptance)."""
    elapsed = max(time.time() - started, 1e-9)
    out = sum(r.length for g in groups for r in g.responses)
    return RolloutStats(
        elapsed_s=elapsed,
        output_tokens=out,
        tokens_per_s=out / elapsed,
        requests=sum(len(g.responses) for g in groups),
        chunks=sum(r.chunks for g in groups for r in g.responses),
        drafted_tokens=sum(r.drafted_tokens for g in groups for r in g.responses),
        accepted_tokens=sum(r.accepted_tokens for g in groups for r in g.responses),
    )
