"""The long-lived dispatcher: one core scheduler for every rollout job, driven against the
engine replicas by one loop (plain asyncio; the ``SeerScheduler`` deployment wraps it).

Invariants:
- One loop owns the scheduler. It wakes only when a chunk completes, a job arrives or is
  cancelled, a replica changes state, or a housekeeping tick is due; it never sleep-polls.
- A request has at most one chunk in flight; a chunk's tokens are appended to its run before the
  scheduler hears of them, so the next chunk continues exactly where the last one stopped.
- Every request completes exactly once: a chunk lost to an unreachable replica is reported to
  the scheduler as aborted with no new tokens and re-dispatched to a live replica, continuing
  from the tokens its earlier chunks returned. A cancelled job reports no group; its partial
  answer holds what its chunks made, those its end aborted included (``settle``).
- Admission is global (the scheduler's KV reservations span every job), so concurrent jobs never
  oversubscribe a replica under the divided policies.
- Every call to a replica other than a running chunk (health probe, abort) is bounded by
  ``replica_call_timeout_s``: a dead replica is never waited for longer.
- A running chunk is waited for only while its replica is reachable: when a health probe finds
  the replica unreachable (or another of its chunks fails so), its chunks still out are
  reclaimed (cancelled, reported as aborted, re-dispatched). A chunk sent to a replica whose
  node just died may otherwise wait in Serve's router for a replica that never comes back.
- Events (``core.events``) go to the optional ``sink``: the scheduler emits chunk, request and
  group events, the dispatcher job, draft and replica-load events. A sink never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from app.api import (
    GroupResult,
    JobState,
    JobStatus,
    ReplicaHealth,
    ReplicaState,
    SpeculationState,
    WeightsState,
    WeightsUpdate,
)
from app.config import ServiceConfig
from app.rollout import JobPlan, RequestRun, assemble_group, seed_guarantee
from app.serve.detached import detached
from app.serve.scheduler.job_book import JobBook
from app.serve.scheduler.jobs import Job, JobError
from app.serve.scheduler.metrics import ServiceMetrics
from app.serve.scheduler.replica_pool import EngineLinks, Replica, ReplicaPool, ReplicaUnavailable
from app.serve.scheduler.speculation import SharedDrafts, SpeculationControl
from app.serve.scheduler.weight_updater import WeightUpdater
from app.store.keys import prompt_hash
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, FinishReason
from core.events import DraftStats, EventSink, GroupInfo, JobFinished, JobStarted
from core.events import ReplicaLoadSample as LoadSample
from core.scheduling.base import BaseScheduler
from core.scheduling.estimate import LengthPrior
from core.scheduling.factory import make_scheduler
from core.scheduling.policies import PolicyPlan
from core.scheduling.types import ChunkDecision, RequestPhase
from core.stats import tail_time

log = logging.getLogger("seer.dispatcher")


@dataclass
class _InFlight:
    decision: ChunkDecision
    job: Job
    run: RequestRun
    started: float
    restart: bool = False  # aborted for a weight update: its tokens are dropped
    task: asyncio.Future[None] | None = None
    reclaimed: str | None = None  # why its replica's call was cancelled (it became unreachable)


class Dispatcher:
    """Jobs in, chunks out to replicas, results back into jobs (see the module invariants)."""

    def __init__(
        self,
        links: EngineLinks,
        config: ServiceConfig,
        plan: PolicyPlan,
        metrics: ServiceMetrics | None = None,
        sink: EventSink | None = None,
        prior: LengthPrior | None = None,
        drafts: SharedDrafts | None = None,
    ) -> None:
        """``sink``: where events go (None: nowhere); ``prior``: recorded lengths for policies
        that use one (``context-prior``; None: those run without a prior); ``drafts``: the draft
        server (finished groups released there too, reset on new weights)."""
        self.links = links
        self.sink = sink
        self.prior = prior
        self.config = config
        self.metrics = metrics or ServiceMetrics()
        self.plan = plan
        self._pending_plan: PolicyPlan | None = None
        self.pool = ReplicaPool(links, config, self.metrics, listener=self)
        self.speculation = SpeculationControl(
            links, config.engine.speculation.settings, config.replica_call_timeout_s, sink, drafts
        )
        self.updater = WeightUpdater(links, self.pool, self.speculation, config, control=self)
        self.scheduler = self._new_scheduler(plan)
        self.book = JobBook(config.limits, config.job_ttl_s, config.request_timeout_s)
        self._inbox: deque[Job] = deque()
        self._completed: deque[tuple[_InFlight, ChunkResult | BaseException]] = deque()
        self._in_flight: dict[str, _InFlight] = {}  # request id -> its chunk
        self._request_job: dict[str, Job] = {}  # request id -> its job, while the job is open
        self._groups: set[str] = set()  # ids of the groups in the scheduler (not released)
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set while no job is open
        self._quiet = asyncio.Event()  # set while no chunk is in flight
        self.accepting = True
        self._paused = False  # no chunk is dispatched (a weight update is running)
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._health_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the dispatch loop and the health probes (call inside the event loop)."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._run())
            self._health_task = asyncio.create_task(self._probe_forever())

    async def close(self) -> None:
        # The flag, not only the cancel: on Python 3.11 ``wait_for`` drops a cancellation that
        # arrives as its awaited event fires, and the loop would then run on forever.
        self._closing = True
        self._wake.set()
        for task in (self._loop_task, self._health_task, *self._tasks):
            if task is not None:
                task.cancel()
        for task in (self._loop_task, self._health_task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _new_scheduler(self, plan: PolicyPlan) -> BaseScheduler:
        specs = [self.pool.spec(i) for i in range(len(self.pool))]
        prior = self.prior if plan.uses_prior else None
        s = make_scheduler(plan.config, specs, prior=prior, sink=self.sink, clock=time.time)
        for i, rep in enumerate(self.pool.replicas):
            if rep.state is not ReplicaState.HEALTHY:
                s.set_replica_available(i, False)
        s.set_policy_version(self.updater.version)
        return s

    @property
    def replicas(self) -> list[Replica]:
        return self.pool.replicas

    @property
    def weights(self) -> WeightsState:
        """The weights the service samples with."""
        return self.updater.state

    # ------------------------------------------------------------------ policy
    @property
    def next_plan(self) -> PolicyPlan:
        """The plan jobs submitted now run under: a pending switch, else the running one (they
        wait in the queue for a switch)."""
        return self._pending_plan or self.plan

    @property
    def wants_prior(self) -> bool:
        """Jobs submitted now run under a policy that reads the length prior."""
        return self.prior is not None and self.next_plan.uses_prior

    @property
    def policy(self) -> str:
        """The policy new jobs run under (a pending switch counts as running)."""
        return self.next_plan.name

    def set_policy(self, plan: PolicyPlan) -> None:
        """Switch policy: at once when no job is in the scheduler, else when the running jobs
        are done (jobs submitted meanwhile wait in the queue and run under the new policy)."""
        if plan == self.plan:
            self._pending_plan = None
            return
        self._pending_plan = plan
        self._wake.set()

    def _apply_pending_policy(self) -> None:
        if self._pending_plan is not None and self.scheduler.done and not self._in_flight:
            self.plan = self._pending_plan
            self._pending_plan = None
            self.scheduler = self._new_scheduler(self.plan)
            log.info("policy is now %s", self.plan.name)

    # ------------------------------------------------------------------ jobs
    def submit(self, plan: JobPlan) -> Job:
        """Accept a job or raise ``JobError`` (422 too large, 429 over a total, 503 closing)."""
        if not self.accepting:
            raise JobError(503, "the service is shutting down; not accepting rollouts")
        self._check_fits(plan)
        self.book.check(plan)  # 422 per-job limits, 409 id held, 429 open totals
        drafts = self.config.engines_draft(self.next_plan.speculate)
        job = Job(plan=plan, policy=self.policy, seed_guarantee=seed_guarantee(plan.seeded, drafts))
        self.book.add(job)
        self._idle.clear()
        self._inbox.append(job)
        self._wake.set()
        return job

    def _check_fits(self, plan: JobPlan) -> None:
        """422 for a response no replica can hold (prompt + max_tokens of KV), under every
        policy. Not for a group: verl runs a whole group on one replica, and a group's
        ``group_size x max_tokens`` routinely exceeds a replica's KV (the paper's Qwen2-VL
        setup: 16 x 40,960); vLLM then runs it in waves, as veRL's own engines do."""
        room = max(self.pool.spec(i).kv_capacity_tokens for i in range(len(self.pool)))
        need = max(len(g.prompt) for g in plan.groups) + plan.max_tokens
        if need > room:
            raise JobError(
                422,
                f"a response needs up to {need} KV tokens (prompt + max_tokens) but the "
                f"largest replica holds {room}",
            )

    def get(self, job_id: str) -> Job:
        return self.book.get(job_id)

    def status(self, job_id: str) -> JobStatus:
        return self.get(job_id).status(self.metrics.rate(time.time()))

    def cancel(self, job_id: str, error: str | None = None, digest: str | None = None) -> JobStatus:
        """Cancel a job: queued requests leave at once, running chunks are aborted on their
        replicas (their capacity is freed as the aborts report). Idempotent. With ``digest``
        (of the token a caller showed) it must be the job's own cancel digest, else 403; without,
        the caller is trusted (the operator, the service itself)."""
        job = self.get(job_id)
        if digest is not None:
            own = job.plan.cancel_digest
            if own is None or not hmac.compare_digest(own, digest):
                raise JobError(
                    403,
                    f"that token may not cancel job {job_id}: give the cancel_token its "
                    "submission returned, or the operator token",
                )
        self._end(job, JobState.CANCELLED, error)
        return self.status(job_id)

    def cancel_all(self, error: str) -> list[str]:
        """Cancel every open job (``/abort_request`` with ``abort_all``); returns their ids."""
        jobs = self.book.open_jobs()
        for job in jobs:
            self._end(job, JobState.CANCELLED, error)
        return sorted(j.id for j in jobs)

    def groups_so_far(self, job: Job) -> list[GroupResult]:
        """Every group of ``job`` in prompt order: finished ones as reported, the others as far
        as they got (unfinished responses with finish reason ``abort``)."""
        done = {g.prompt_index: g for g in job.results}
        return [
            done.get(g.prompt_index) or assemble_group(g, job.created_at, partial=True)
            for g in job.plan.groups
        ]

    async def stream(self, job_id: str) -> AsyncIterator[GroupResult]:
        """Every group of the job as it finishes, in completion order, until the job ends."""
        job = self.get(job_id)
        sent = 0
        while True:
            seen = job.version
            while sent < len(job.results):
                yield job.results[sent]
                sent += 1
            if job.state.terminal:
                return
            await job.changed(seen, self.config.request_timeout_s)

    async def settle(self, job: Job) -> None:
        """Until the chunks aborted when ``job`` ended have reported their tokens (bounded: an
        abort is bounded by ``replica_call_timeout_s``, its chunk answers right after)."""
        deadline = time.monotonic() + self.config.replica_call_timeout_s + 1.0
        while job.aborting and (left := deadline - time.monotonic()) > 0:
            await job.changed(job.version, left)

    async def wait(self, job_id: str) -> Job:
        """Until the job is terminal (bounded: a job is cancelled after request_timeout_s)."""
        job = self.get(job_id)
        while not job.state.terminal:
            await job.changed(job.version, self.config.request_timeout_s)
        return job

    def _end(self, job: Job, state: JobState, error: str | None) -> None:
        """Make ``job`` terminal; cancel its groups in the scheduler, abort its chunks."""
        if job.state.terminal:
            return
        aborting = 0
        if job in self._inbox:
            self._inbox.remove(job)
        elif job.state is JobState.RUNNING:
            held = [g.spec for g in job.plan.groups if g.spec.group_id in self._groups]
            rids = [rid for spec in held for rid in spec.request_ids]
            for rid in self.scheduler.cancel_requests(rids):
                self.spawn(self._abort(self._in_flight[rid]))
                job.aborting.add(rid)
                aborting += 1
            for spec in held:  # a joined group goes on while other jobs' requests are open
                if spec.group_id in self._groups and self.scheduler.group_done(spec.group_id):
                    self._release(spec.group_id)
        if state is not JobState.DONE:
            log.info(
                "job %s %s (%s): aborting %d running chunks", job.id, state.value, error, aborting
            )
        self._finish(job, state, error)

    def _finish(self, job: Job, state: JobState, error: str | None = None) -> None:
        job.finish(state, error)
        self.book.closed(job)
        for rid in job.plan.runs:
            self._request_job.pop(rid, None)
        self.metrics.jobs_total.labels(state.value).inc()
        if state is JobState.DONE:
            self.metrics.last_tail.set(tail_time(job.finish_times))
        if self.sink is not None and job.started_at is not None:
            self.sink.emit(
                JobFinished(
                    job.id,
                    time.time(),
                    state.value,
                    job.requests_done,
                    job.output_tokens,
                    job.error,
                )
            )
        if not self.book.open_count:
            self._idle.set()
        self._wake.set()

    def _release(self, group_id: str) -> None:
        self.scheduler.release(group_id)
        self._groups.discard(group_id)
        self.speculation.group_done(group_id)

    async def configure_speculation(
        self, settings: DraftSettings, who: str, reason: str | None = None
    ) -> SpeculationState:
        """New drafting settings for every replica, live (``app.serve.scheduler.speculation``)."""
        return await self.speculation.set(settings, who, reason, self.pool.live())

    async def update_speculation(
        self, patch: Mapping[str, Any], who: str, reason: str | None = None
    ) -> SpeculationState:
        """The current drafting settings with ``patch``'s fields changed, merged under the
        settings' lock (``PUT /v1/speculation``), for every replica, live."""
        return await self.speculation.update(patch, who, reason, self.pool.live())

    async def update_weights(
        self,
        path: str,
        version: int | None,
        abort_running: bool = False,
        digest: str | None = None,
    ) -> WeightsUpdate:
        """Load new policy weights into every replica between chunks (``app.api.operator``
        says what that promises, ``app.serve.scheduler.weight_updater`` how it is done)."""
        return await self.updater.update(path, version, abort_running, digest)

    # ------------------------------------------------------------------ DispatchControl
    async def quiesce(self, abort_running: bool, timeout_s: float) -> tuple[int, int]:
        """Pause dispatch (until ``resume``); abort the chunks in flight when asked (their
        tokens are dropped: the requests restart); wait at most ``timeout_s`` for none to be in
        flight. Returns (chunks aborted, chunks still in flight)."""
        self._paused = True
        aborted = 0
        if abort_running:
            for flight in self._in_flight.values():
                flight.restart = True
                aborted += 1
                self.spawn(self._abort(flight))
        if self._in_flight:
            self._quiet.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), timeout_s)
        return aborted, len(self._in_flight)

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def weights_loaded(self, version: int) -> None:
        self.scheduler.set_policy_version(version)

    def restart_partial(self) -> int:
        """Start over every unfinished request holding tokens (no chunk is in flight)."""
        n = 0
        for job in self.book.open_jobs():
            if job.state is not JobState.RUNNING:
                continue
            for rid, run in job.plan.runs.items():
                if (
                    run.finish is None
                    and run.tokens
                    and self.scheduler.request_phase(rid) is RequestPhase.QUEUED
                ):
                    self.scheduler.restart(rid)
                    job.output_tokens -= len(run.tokens)
                    run.restart()
                    n += 1
        return n

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        tick = min(self.config.health_period_s, 5.0)
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), tick)
            self._wake.clear()
            try:
                self._step()
            except Exception:  # a bug must not kill the service's only loop silently
                log.exception("dispatch step failed")
                for job in self.book.open_jobs():
                    self._end(job, JobState.FAILED, "internal dispatch error (logs)")

    def _step(self) -> None:
        now = time.time()
        while self._completed:
            flight, outcome = self._completed.popleft()
            self._on_chunk_done(flight, outcome, now)
        for job in self.book.expire(now):
            timeout = self.config.request_timeout_s
            self._end(job, JobState.CANCELLED, f"job exceeded request_timeout_s={timeout:g}")
        self._apply_pending_policy()
        if self._pending_plan is None:
            while self._inbox:
                self._admit(self._inbox.popleft(), now)
        if not self._paused:
            for d in self.scheduler.schedule():
                self._start_chunk(d, now)
        if self.speculation.wants_flush:
            self.spawn(self.speculation.flush(self.pool.live()))
        if self._in_flight:
            self._quiet.clear()
        else:
            self._quiet.set()

    @property
    def open_jobs(self) -> int:
        return self.book.open_count

    def _admit(self, job: Job, now: float) -> None:
        """Put the job's groups in the scheduler; a group whose id is open already (the same
        ``group_key``) takes the job's requests as siblings."""
        job.policy = self.plan.name
        new = []
        for g in job.plan.groups:
            spec = g.spec
            if spec.group_id in self._groups:
                self.scheduler.join(spec.group_id, spec.request_ids, spec.max_tokens)
            else:
                new.append(spec)
                self._groups.add(spec.group_id)
            for rid in spec.request_ids:
                self._request_job[rid] = job
        self.scheduler.submit(new)
        job.state = JobState.RUNNING
        job.started_at = now
        job.touch()
        if self.sink is not None:
            self.sink.emit(_job_started(job, now, self.updater.version))

    def _start_chunk(self, d: ChunkDecision, now: float) -> None:
        job = self._request_job[d.request_id]
        run = job.plan.runs[d.request_id]
        if d.generated == 0:
            run.policy_version = self.updater.version
        flight = _InFlight(d, job, run, now)
        self._in_flight[d.request_id] = flight
        self.metrics.decisions.inc()
        flight.task = self.spawn(self._chunk_task(flight, run.chunk(d, self.plan.speculate)))

    async def _chunk_task(self, flight: _InFlight, chunk: ChunkRequest) -> None:
        try:
            outcome: ChunkResult | BaseException = await self.links.run_chunk(
                flight.decision.replica, chunk
            )
        except asyncio.CancelledError:
            if flight.reclaimed is None:
                raise
            outcome = ReplicaUnavailable(flight.reclaimed)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which decides
            outcome = exc
        self._completed.append((flight, outcome))
        self._wake.set()

    def _on_chunk_done(
        self, flight: _InFlight, outcome: ChunkResult | BaseException, now: float
    ) -> None:
        d, job, run = flight.decision, flight.job, flight.run
        del self._in_flight[d.request_id]
        self.metrics.chunk_latency.observe(now - flight.started)
        if not isinstance(outcome, ChunkResult) and d.request_id in job.aborting:
            job.aborting.discard(d.request_id)  # nothing to keep, settled all the same
            job.touch()
        s = self.scheduler
        if isinstance(outcome, ReplicaUnavailable):
            self.metrics.chunks_lost.labels(self.pool[d.replica].replica_id).inc()
            self.pool.lost(d.replica, str(outcome), now)
            s.complete(d.request_id, 0, FinishReason.ABORT)
            run.failures += 1
            if job.state is JobState.RUNNING and run.failures > self.config.max_chunk_retries:
                self._end(
                    job,
                    JobState.FAILED,
                    f"request {d.request_id} lost {run.failures} chunks to failed replicas "
                    f"(last: {outcome})",
                )
            self._after_request(job, d, finished=False)
            return
        if isinstance(outcome, BaseException):
            s.complete(d.request_id, 0, FinishReason.ABORT)
            self._end(job, JobState.FAILED, f"engine error on request {d.request_id}: {outcome!r}")
            self._after_request(job, d, finished=False)
            return
        res = outcome
        rep_id = self.pool[d.replica].replica_id
        if job.state.terminal or flight.restart:  # cancelled, or cut by a weight update
            s.complete(d.request_id, 0, FinishReason.ABORT)
            if d.request_id in job.aborting and not flight.restart:
                self._keep_partial(job, run, rep_id, res)
            self._after_request(job, d, finished=False)
            return
        run.append(rep_id, res.token_ids, res.logprobs)
        if res.drafted_tokens:
            run.drafted += res.drafted_tokens
            run.accepted += res.accepted_tokens
            self.metrics.draft_tokens.labels(rep_id).inc(res.drafted_tokens)
            self.metrics.accepted_tokens.labels(rep_id).inc(res.accepted_tokens)
            if self.sink is not None:
                self.sink.emit(
                    DraftStats(
                        d.request_id,
                        d.group_id,
                        rep_id,
                        now,
                        res.drafted_tokens,
                        res.accepted_tokens,
                        res.engine_steps,
                    )
                )
        if res.finish_reason is FinishReason.ABORT:  # the engine gave up on it, unasked
            run.failures += 1
            if run.failures > self.config.max_chunk_retries:
                s.complete(d.request_id, len(res.token_ids), res.finish_reason, res.drafted_tokens)
                self._end(job, JobState.FAILED, f"request {d.request_id} aborted by {rep_id}")
                self._after_request(job, d, finished=False)
                return
        job.output_tokens += len(res.token_ids)
        self.metrics.add_tokens(now, len(res.token_ids))
        finished = s.complete(
            d.request_id, len(res.token_ids), res.finish_reason, res.drafted_tokens
        )
        if finished:
            run.finish = (
                FinishReason.STOP if res.finish_reason is FinishReason.STOP else FinishReason.LENGTH
            )
            job.requests_done += 1
            run.finished_at = now
            job.finish_times.append(now)
            self.metrics.requests_done.inc()
        self._after_request(job, d, finished)

    @staticmethod
    def _keep_partial(job: Job, run: RequestRun, replica_id: str, res: ChunkResult) -> None:
        """The tokens an aborted chunk of an ended job made before the abort: its partial
        response keeps them (one that reached its end says so; the others read abort)."""
        run.append(replica_id, res.token_ids, res.logprobs)
        job.output_tokens += len(res.token_ids)
        if res.finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
            run.finish = res.finish_reason
            run.finished_at = time.time()
        job.aborting.discard(res.request_id)
        job.touch()

    def _after_request(self, job: Job, d: ChunkDecision, finished: bool) -> None:
        """Release the scheduler group once all its requests (of every job that joined it) are
        terminal; report the job's group once all of the job's responses in it are finished."""
        gid = d.group_id
        if gid in self._groups and self.scheduler.group_done(gid):
            self._release(gid)
        if job.state.terminal or not finished:
            return
        group = job.plan.group(gid)
        if any(run.finish is None for run in group.runs):
            job.touch()
            return
        job.results.append(assemble_group(group, job.created_at))
        if len(job.results) == len(job.plan.groups):
            self._finish(job, JobState.DONE)
        else:
            job.touch()

    # ------------------------------------------------------------------ replicas
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``coro`` beside the loop, in no request's context: an abort spawned while the
        scheduler serves a request (a cancel) must outlive that request (``app.serve.detached``)."""
        task = detached(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ PoolListener
    def replica_changed(self, i: int, state: ReplicaState) -> None:
        """Keep the scheduler and the drafting settings in step with replica i's state."""
        healthy = state is ReplicaState.HEALTHY
        self.scheduler.set_replica_available(i, healthy, self.pool.spec(i) if healthy else None)
        if healthy:
            self.spawn(self.speculation.reapply(i))
        else:
            self.speculation.replica_lost(i)
        self._wake.set()

    def replica_unreachable(self, i: int, why: str) -> None:
        """Replica i is unreachable: cancel its chunks still out; each reports as lost."""
        for flight in self._in_flight.values():
            if flight.decision.replica == i and flight.reclaimed is None and flight.task:
                flight.reclaimed = f"{self.pool[i].replica_id} became unreachable: {why}"
                flight.task.cancel()

    async def _abort(self, flight: _InFlight) -> None:
        d = flight.decision
        try:
            await asyncio.wait_for(
                self.links.abort(d.replica, d.request_id, d.generated),
                self.config.replica_call_timeout_s,
            )
        except Exception as exc:  # noqa: BLE001 - the chunk reports back either way
            log.warning("abort of %s on replica %d failed: %r", d.request_id, d.replica, exc)

    async def probe(self, i: int) -> None:
        """One bounded health probe of replica i: it rejoins when it answers on the current
        weights (on others it loads them first: ``WeightUpdater.out_of_date``)."""
        load = await self.pool.probe(i)
        if load is None or self.updater.out_of_date(i, load.weights_version):
            return
        rep = self.pool[i]
        if self.sink is not None:
            self.sink.emit(
                LoadSample(
                    rep.replica_id,
                    time.time(),
                    load.running,
                    load.waiting,
                    load.chunks_in_flight,
                    load.kv_usage,
                    self.scheduler.loads()[i].reserved_kv_tokens,
                )
            )
        self.pool.set_state(i, ReplicaState.HEALTHY)

    async def probe_all(self) -> None:
        await asyncio.gather(*(self.probe(i) for i in range(len(self.pool))))

    async def _probe_forever(self) -> None:
        while not self._closing:
            await self.probe_all()
            await asyncio.sleep(self.config.health_period_s)

    def health(self) -> list[ReplicaHealth]:
        return self.pool.health([load.reserved_kv_tokens for load in self.scheduler.loads()])

    # ------------------------------------------------------------------ shutdown
    async def drain(self, grace_s: float) -> int:
        """Stop accepting; give open jobs ``grace_s`` to finish, cancel the rest and wait
        (bounded) for their aborted chunks to report. Returns how many jobs were cancelled."""
        self.accepting = False
        if self.book.open_count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace_s)
        left = self.book.open_jobs()
        for job in left:
            self._end(job, JobState.CANCELLED, "the service shut down")
        cancelled = len(left)
        self._quiet.clear()
        self._wake.set()
        if self._in_flight:  # aborted chunks report within the call timeout
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), self.config.replica_call_timeout_s + 1)
        return cancelled

    # ------------------------------------------------------------------ metrics
    def render_metrics(self) -> bytes:
        m = self.metrics
        states = {s: 0 for s in JobState}
        for job in self.book.jobs.values():
            states[job.state] += 1
        for state, n in states.items():
            m.jobs.labels(state.value).set(n)
        s = self.scheduler
        m.requests.labels("queued").set(s.num_queued + sum(j.plan.requests for j in self._inbox))
        m.requests.labels("running").set(s.num_running)
        m.tokens_per_s.set(m.rate(time.time()))
        loads = s.loads()
        for i, rep in enumerate(self.pool.replicas):
            m.replica_up.labels(rep.replica_id).set(1 if rep.state is ReplicaState.HEALTHY else 0)
            m.replica_reserved.labels(rep.replica_id).set(loads[i].reserved_kv_tokens)
            if rep.load is not None:
                m.replica_running.labels(rep.replica_id).set(rep.load.running)
                m.replica_waiting.labels(rep.replica_id).set(rep.load.waiting)
                m.replica_kv.labels(rep.replica_id).set(rep.load.kv_usage)
                m.draft_exchanges.labels(rep.replica_id, "ok").set(rep.load.draft_exchanges)
                m.draft_exchanges.labels(rep.replica_id, "failed").set(
                    rep.load.draft_exchange_failures
                )
        return m.render()


def _job_started(job: Job, now: float, version: int) -> JobStarted:
    plan = job.plan
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
        job_id=job.id,
        at=now,
        created_at=job.created_at,
        policy=job.policy,
        iteration=plan.iteration,
        max_tokens=plan.max_tokens,
        groups=groups,
        policy_version=version,
    )
