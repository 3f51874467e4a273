"""The long-lived dispatcher: one core scheduler for every rollout job, driven against the
engine replicas by one loop (plain asyncio; the ``SeerScheduler`` deployment wraps it).

Invariants:
- One loop owns the scheduler. It wakes only when a chunk completes, a job arrives or is
  cancelled, a replica changes state, or a housekeeping tick is due; it never sleep-polls.
- A chunk's tokens are appended to its response before the scheduler hears of them, so the next
  chunk continues exactly where the last one stopped (``app.serve.scheduler.flights``: at most
  one chunk in flight per request, each ending in exactly one outcome).
- Every request completes exactly once: a chunk lost to an unreachable replica, or run on other
  weights than its response's ``policy_version`` (its replica leaves rotation), is reported to the
  scheduler as aborted with no new tokens and re-dispatched, continuing from the tokens its earlier
  chunks returned. A cancelled job reports no group; its partial answer holds what its chunks made,
  those its end aborted included.
- Admission is global (the scheduler's KV reservations span every job), so concurrent jobs never
  oversubscribe a replica under the divided policies.
- Every call to a replica other than a running chunk (probe, abort) is bounded by
  ``replica_call_timeout_s``. Events (``core.events``) go to the optional ``sink``, which never
  blocks: the scheduler emits chunk, request and group events, the dispatcher job, draft and
  replica-load events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

from app.api import JobState, ReplicaState
from app.config import ServiceConfig
from app.serve.detached import detached
from app.serve.scheduler.desk import JobDesk
from app.serve.scheduler.flights import Flight, Flights, Outcome
from app.serve.scheduler.jobs import Job
from app.serve.scheduler.metrics import ServiceMetrics
from app.serve.scheduler.policy_switch import PolicySwitch
from app.serve.scheduler.probes import ReplicaProbes
from app.serve.scheduler.replica_pool import EngineLinks, ReplicaPool, ReplicaUnavailable
from app.serve.scheduler.speculation import SharedDrafts, SpeculationControl
from app.serve.scheduler.weight_updater import WeightUpdater
from core.engine import ChunkResult, FinishReason
from core.events import DraftStats, EventSink
from core.scheduling.base import BaseScheduler
from core.scheduling.estimate import LengthPrior
from core.scheduling.factory import make_scheduler
from core.scheduling.policies import PolicyPlan
from core.scheduling.types import ChunkDecision
from core.stats import tail_time

log = logging.getLogger("seer.dispatcher")


class Dispatcher(JobDesk):
    """Jobs in, chunks out to replicas, results back into jobs (see the module invariants)."""

    def __init__(
        self,
        links: EngineLinks,
        config: ServiceConfig,
        policy: PolicyPlan,
        metrics: ServiceMetrics | None = None,
        sink: EventSink | None = None,
        prior: LengthPrior | None = None,
        drafts: SharedDrafts | None = None,
    ) -> None:
        """``sink``: where events go (None: nowhere); ``prior``: recorded lengths for policies
        that use one (``context-prior``; None: those run without a prior); ``drafts``: the draft
        server (finished groups released there too, reset on new weights)."""
        super().__init__(config)
        self.links = links
        self.sink = sink
        self.prior = prior
        self.config = config
        self.metrics = metrics or ServiceMetrics()
        self.policies = PolicySwitch(policy)
        self.pool = ReplicaPool(links, config, self.metrics, listener=self)
        self.speculation = SpeculationControl(
            links, config.engine.speculation.settings, config.replica_call_timeout_s, sink, drafts
        )
        self.updater = WeightUpdater(links, self.pool, self.speculation, config, control=self)
        self.probes = ReplicaProbes(
            self.pool, self.updater, config.health_period_s, self._reserved, sink
        )
        self.scheduler = self._new_scheduler(policy)
        self._completed: deque[tuple[Flight, Outcome]] = deque()
        self._in_flight = Flights(links, config.replica_call_timeout_s, self.spawn, self._landed)
        self._request_job: dict[str, Job] = {}  # request id -> its job, while the job is open
        self._groups: set[str] = set()  # ids of the groups in the scheduler (not released)
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._quiet = asyncio.Event()  # set while no chunk is in flight
        self._paused = False  # no chunk is dispatched (a weight update is running)
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._health_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the dispatch loop and the health probes (call inside the event loop)."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._run())
            self._health_task = asyncio.create_task(self.probes.forever())

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

    def _reserved(self) -> list[int]:
        return [load.reserved_kv_tokens for load in self.scheduler.loads()]

    def _new_scheduler(self, policy: PolicyPlan) -> BaseScheduler:
        specs = [self.pool.spec(i) for i in range(len(self.pool))]
        prior = self.prior if policy.uses_prior else None
        s = make_scheduler(policy.config, specs, prior=prior, sink=self.sink, clock=time.time)
        for i, rep in enumerate(self.pool.replicas):
            if rep.state is not ReplicaState.HEALTHY:
                s.set_replica_available(i, False)
        s.set_policy_version(self.updater.version)
        return s

    # ------------------------------------------------------------------ policy
    @property
    def wants_prior(self) -> bool:
        """Jobs submitted now run under a policy that reads the length prior."""
        return self.prior is not None and self.policies.next.uses_prior

    def set_policy(self, policy: PolicyPlan) -> None:
        """Switch policy when the running jobs are done (``PolicySwitch``)."""
        if self.policies.request(policy):
            self._wake.set()

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
                self._in_flight.abort(self._in_flight[rid])
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
            self.sink.emit(job.finished_event(time.time()))
        if not self.book.open_count:
            self._idle.set()
        self._wake.set()

    def _release(self, group_id: str) -> None:
        self.scheduler.release(group_id)
        self._groups.discard(group_id)
        self.speculation.group_done(group_id)

    # ------------------------------------------------------------------ DispatchControl
    async def quiesce(self, abort_running: bool, timeout_s: float) -> tuple[int, int]:
        """Pause dispatch (until ``resume``); abort the chunks in flight when asked (their
        tokens are dropped: the requests restart); wait at most ``timeout_s`` for none to be in
        flight. Returns (chunks aborted, chunks still in flight)."""
        self._paused = True
        aborted = 0
        if abort_running:
            for flight in self._in_flight:
                flight.restart = True
                aborted += 1
                self._in_flight.abort(flight)
        await self._chunks_reported(timeout_s)
        return aborted, len(self._in_flight)

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def weights_loaded(self, version: int) -> None:
        self.scheduler.set_policy_version(version)

    def restart_partial(self) -> int:
        """Start over every unfinished request holding tokens (no chunk is in flight)."""
        s = self.scheduler
        jobs = [j for j in self.book.open_jobs() if j.state is JobState.RUNNING]
        return sum(job.restart_partial(s.request_phase, s.restart) for job in jobs)

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
        policy = self.policies.due(self.scheduler.done and not self._in_flight)
        if policy is not None:
            self.scheduler = self._new_scheduler(policy)
            log.info("policy is now %s", policy.name)
        if self.policies.pending is None:
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

    def _admit(self, job: Job, now: float) -> None:
        """Put the job's groups in the scheduler; a group whose id is open already (the same
        ``group_key``) takes the job's requests as siblings."""
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
        job.start(self.policies.running.name, now)
        if self.sink is not None:
            self.sink.emit(job.started_event(now, self.updater.version))

    def _start_chunk(self, d: ChunkDecision, now: float) -> None:
        job = self._request_job[d.request_id]
        run = job.plan.runs[d.request_id]
        if d.generated == 0:
            run.policy_version = self.updater.version
        self.metrics.decisions.inc()
        chunk = run.chunk(d, self.policies.running.speculate)
        self._in_flight.start(Flight(d, job, run, now), chunk)

    def _landed(self, flight: Flight, outcome: Outcome) -> None:
        self._completed.append((flight, outcome))
        self._wake.set()

    def _on_chunk_done(self, flight: Flight, outcome: Outcome, now: float) -> None:
        d, job, run = flight.decision, flight.job, flight.run
        self._in_flight.landed(flight)
        self.metrics.chunk_latency.observe(now - flight.started)
        if not isinstance(outcome, ChunkResult) and d.request_id in job.aborting:
            job.abort_settled(d.request_id)  # nothing to keep, settled all the same
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
                job.keep_partial(run, rep_id, res)
            self._after_request(job, d, finished=False)
            return
        if res.policy_version != run.policy_version:  # ran on other weights: never kept
            why = f"ran a chunk on weights v{res.policy_version}, not v{run.policy_version}"
            self.pool.set_state(d.replica, ReplicaState.STALE, why)  # out until it syncs
            s.complete(d.request_id, 0, FinishReason.ABORT)  # re-dispatched from its tokens
            self._after_request(job, d, finished=False)
            return
        run.take(rep_id, res)
        if res.drafted_tokens:
            self.metrics.drafted(rep_id, res.drafted_tokens, res.accepted_tokens)
            if self.sink is not None:
                counts = (res.drafted_tokens, res.accepted_tokens, res.engine_steps)
                self.sink.emit(DraftStats(d.request_id, d.group_id, rep_id, now, *counts))
        if res.finish_reason is FinishReason.ABORT:  # the engine gave up on it, unasked
            run.failures += 1
            if run.failures > self.config.max_chunk_retries:
                s.complete(d.request_id, len(res.token_ids), res.finish_reason, res.drafted_tokens)
                self._end(job, JobState.FAILED, f"request {d.request_id} aborted by {rep_id}")
                self._after_request(job, d, finished=False)
                return
        job.add_tokens(len(res.token_ids))
        self.metrics.add_tokens(now, len(res.token_ids))
        finished = s.complete(
            d.request_id, len(res.token_ids), res.finish_reason, res.drafted_tokens
        )
        if finished:
            job.request_done(run, res.finish_reason, now)
            self.metrics.requests_done.inc()
        self._after_request(job, d, finished)

    def _after_request(self, job: Job, d: ChunkDecision, finished: bool) -> None:
        """Release the scheduler group once all its requests (of every job that joined it) are
        terminal; report the job's group once all of the job's responses in it are finished."""
        gid = d.group_id
        if gid in self._groups and self.scheduler.group_done(gid):
            self._release(gid)
        if not job.state.terminal and finished and job.report(gid):
            self._finish(job, JobState.DONE)

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
        self._in_flight.reclaim(i, f"{self.pool[i].replica_id} became unreachable: {why}")

    async def probe(self, i: int) -> None:
        """``DispatchControl.probe``: one health probe of replica i (``ReplicaProbes``)."""
        await self.probes.probe(i)

    async def _chunks_reported(self, bound_s: float) -> None:
        self._quiet.clear()
        self._wake.set()
        if self._in_flight:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), bound_s)

    # ------------------------------------------------------------------ metrics
    def render_metrics(self) -> bytes:
        s = self.scheduler
        queued = s.num_queued + sum(j.plan.requests for j in self._inbox)
        jobs = self.book.jobs.values()
        replicas = self.pool.replicas
        self.metrics.set_state(jobs, queued, s.num_running, self._reserved(), replicas, time.time())
        return self.metrics.render()
