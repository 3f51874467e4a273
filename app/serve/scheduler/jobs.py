"""Rollout jobs inside the scheduler deployment: state, progress, results, waiting for them.

Invariants:
- A job's state changes only in its own methods: QUEUED -> RUNNING (``start``) -> a terminal
  state (``finish``); a terminal job never changes again but for the tokens of the chunks its
  end aborted (``keep_partial``, ``abort_settled``), which its partial answer keeps.
- ``results`` only grow, one ``GroupResult`` per finished group in completion order
  (``report``); every change bumps ``version`` and wakes the waiters (no polling), so a
  streaming reader sees every group exactly once.
- Its counts follow its responses: ``output_tokens`` is the tokens its responses hold,
  ``requests_done`` the responses finished, each once (``request_done``).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from app.api import GroupResult, JobProgress, JobState, JobStatus, SeedGuarantee
from app.rollout import JobPlan, RequestRun, assemble_group
from app.store.keys import prompt_hash
from core.engine import ChunkResult, FinishReason
from core.events import GroupInfo, JobFinished, JobStarted
from core.scheduling.types import RequestPhase


class JobError(Exception):
    """A request about a job that cannot be served; ``status`` is the HTTP code to answer;
    ``loc``: what a 422 is about, FastAPI's way (``("body",)``, ``("header", NAME)``)."""

    def __init__(
        self,
        status: int,
        message: str,
        retry_after_s: float | None = None,
        loc: tuple[str, ...] = ("body",),
    ) -> None:
        super().__init__(status, message, retry_after_s, loc)  # all args: it pickles across Ray
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s
        self.loc = loc

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Refusal:
    """A ``JobError`` as the scheduler deployment's answer, not its exception: an expected
    refusal (404, 409, 429, ...) is then one INFO line, where Serve logs every exception a
    deployment raises at ERROR with its traceback. The ingress raises it as its HTTP error."""

    status: int
    message: str
    retry_after_s: float | None = None
    loc: tuple[str, ...] = ("body",)

    @classmethod
    def of(cls, exc: JobError) -> Refusal:
        return cls(exc.status, exc.message, exc.retry_after_s, exc.loc)


@dataclass
class Job:
    plan: JobPlan
    policy: str
    seed_guarantee: SeedGuarantee = "none"
    created_at: float = field(default_factory=time.time)
    state: JobState = JobState.QUEUED
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    results: list[GroupResult] = field(default_factory=list)
    requests_done: int = 0
    output_tokens: int = 0
    finish_times: list[float] = field(default_factory=list)  # of requests, for the tail time
    # requests whose chunk was aborted when the job ended, until that chunk reports back (with
    # the tokens it made before the abort: a cancelled job's partial responses keep them)
    aborting: set[str] = field(default_factory=set)
    version: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.plan.job_id

    def touch(self) -> None:
        """Something changed: wake every waiter."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    def check_cancel(self, digest: str) -> None:
        """403 unless ``digest`` (of the token a caller showed) is the job's own cancel digest."""
        own = self.plan.cancel_digest
        if own is None or not hmac.compare_digest(own, digest):
            raise JobError(
                403,
                f"that token may not cancel job {self.id}: give the cancel_token its "
                "submission returned, or the operator token",
            )

    def start(self, policy: str, now: float) -> None:
        """Its groups entered the scheduler, which runs ``policy``."""
        self.policy = policy
        self.state = JobState.RUNNING
        self.started_at = now
        self.touch()

    def finish(self, state: JobState, error: str | None = None) -> None:
        if self.state.terminal:
            return
        self.state = state
        self.error = error
        self.finished_at = time.time()
        self.touch()

    # ------------------------------------------------------------------ responses
    def add_tokens(self, n: int) -> None:
        """``n`` more tokens of its responses were kept."""
        self.output_tokens += n

    def request_done(self, run: RequestRun, reason: FinishReason, now: float) -> None:
        """Response ``run`` reached its end (``reason``: the last chunk's stop or length)."""
        run.finish_as(reason, now)
        self.requests_done += 1
        self.finish_times.append(now)

    def report(self, group_id: str) -> bool:
        """One of the group's responses finished: report the group once all of its responses
        (of this job) have; True when that was the job's last group."""
        group = self.plan.group(group_id)
        if any(run.finish is None for run in group.runs):
            self.touch()
            return False
        self.results.append(assemble_group(group, self.created_at))
        if len(self.results) == len(self.plan.groups):
            return True
        self.touch()
        return False

    def keep_partial(self, run: RequestRun, replica_id: str, res: ChunkResult) -> None:
        """The tokens an aborted chunk of this ended job made before the abort: its partial
        response keeps them (one that reached its end says so; the others read abort)."""
        run.append(replica_id, res.token_ids, res.logprobs)
        self.output_tokens += len(res.token_ids)
        if res.finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
            run.finish_as(res.finish_reason, time.time())
        self.abort_settled(res.request_id)

    def abort_settled(self, request_id: str) -> None:
        """The chunk of ``request_id`` that its end aborted has reported back."""
        self.aborting.discard(request_id)
        self.touch()

    def restart_partial(
        self, phase: Callable[[str], RequestPhase], restart: Callable[[str], None]
    ) -> int:
        """Start over every unfinished response holding tokens whose request is queued
        (``phase``), telling the scheduler (``restart``); returns how many."""
        n = 0
        for rid, run in self.plan.runs.items():
            if run.finish is None and run.tokens and phase(rid) is RequestPhase.QUEUED:
                restart(rid)
                self.output_tokens -= len(run.tokens)
                run.restart()
                n += 1
        return n

    def groups_so_far(self) -> list[GroupResult]:
        """Every group in prompt order: finished ones as reported, the others as far as they
        got (unfinished responses with finish reason ``abort``)."""
        done = {g.prompt_index: g for g in self.results}
        return [
            done.get(g.prompt_index) or assemble_group(g, self.created_at, partial=True)
            for g in self.plan.groups
        ]

    # ------------------------------------------------------------------ waiting

    async def changed(self, seen: int, timeout: float) -> bool:
        """Wait until ``version`` passes ``seen`` (True) or ``timeout`` seconds pass (False)."""
        if self.version != seen:
            return True
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def stream(self, bound_s: float) -> AsyncIterator[GroupResult]:
        """Every group as it finishes, in completion order, until the job ends (each wait for
        a change bounded by ``bound_s``)."""
        sent = 0
        while True:
            seen = self.version
            while sent < len(self.results):
                yield self.results[sent]
                sent += 1
            if self.state.terminal:
                return
            await self.changed(seen, bound_s)

    async def wait(self, bound_s: float) -> None:
        """Until the job is terminal (each wait bounded by ``bound_s``: an open job is
        cancelled after ``request_timeout_s``, so this ends)."""
        while not self.state.terminal:
            await self.changed(self.version, bound_s)

    async def settle(self, bound_s: float) -> None:
        """Until the chunks aborted when the job ended have reported their tokens, at most
        ``bound_s`` (an abort is bounded by ``replica_call_timeout_s``, its chunk answers right
        after)."""
        deadline = time.monotonic() + bound_s
        while self.aborting and (left := deadline - time.monotonic()) > 0:
            await self.changed(self.version, left)

    # ------------------------------------------------------------------ reports
    def started_event(self, now: float, policy_version: int) -> JobStarted:
        plan = self.plan
        groups = tuple(
            GroupInfo(
                group_id=g.spec.group_id,
                prompt_key=g.spec.prompt_key or g.spec.group_id,
                prompt_hash=prompt_hash(g.prompt),
                prompt_id=g.prompt_id,
                group_size=len(g.runs),
                max_tokens=g.spec.max_tokens,
                prompt_tokens=g.spec.prompt_tokens,
            )
            for g in plan.groups
        )
        return JobStarted(
            job_id=self.id,
            at=now,
            created_at=self.created_at,
            policy=self.policy,
            iteration=plan.iteration,
            max_tokens=plan.max_tokens,
            groups=groups,
            policy_version=policy_version,
        )

    def finished_event(self, now: float) -> JobFinished:
        return JobFinished(
            self.id,
            now,
            self.state.value,
            self.requests_done,
            self.output_tokens,
            self.error,
        )

    def status(self, tokens_per_s: float) -> JobStatus:
        now = time.time()
        end = self.finished_at or now
        return JobStatus(
            id=self.id,
            state=self.state,
            policy=self.policy,
            seed_guarantee=self.seed_guarantee,
            error=self.error,
            created_at=self.created_at,
            finished_at=self.finished_at,
            progress=JobProgress(
                groups=len(self.plan.groups),
                groups_done=len(self.results),
                requests=self.plan.requests,
                requests_done=self.requests_done,
                output_tokens=self.output_tokens,
                elapsed_s=end - self.created_at,
                estimated_remaining_s=self._remaining(tokens_per_s),
            ),
        )

    def _remaining(self, tokens_per_s: float) -> float | None:
        """Tokens still expected (unfinished requests at the mean finished length, or at least
        what they have generated) at the service's current token rate."""
        if self.state.terminal:
            return 0.0
        if self.requests_done == 0 or tokens_per_s <= 0:
            return None
        mean = self.output_tokens_finished / self.requests_done
        left = 0.0
        for run in self.plan.runs.values():
            if run.finish is None:
                left += max(mean, len(run.tokens) * 1.1) - len(run.tokens)
        return max(left, 0.0) / tokens_per_s

    @property
    def output_tokens_finished(self) -> int:
        return sum(len(r.tokens) for r in self.plan.runs.values() if r.finish is not None)
