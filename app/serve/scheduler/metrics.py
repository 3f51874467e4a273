"""Prometheus metrics of the scheduler deployment (its own registry; ``GET /metrics``).

Counters and histograms are updated as events happen; gauges that describe current state
(jobs and requests by state, replica load) are set (``set_state``) when the page is read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.api import JobState, ReplicaState

if TYPE_CHECKING:
    from app.api import WriterStats
    from app.serve.scheduler.jobs import Job
    from app.serve.scheduler.replica_pool import Replica
    from core.drafting.shared import SharedStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServiceMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.jobs = Gauge("seer_jobs", "rollout jobs held, by state", ["state"], registry=r)
        self.jobs_total = Counter(
            "seer_jobs_finished", "jobs that ended, by final state", ["state"], registry=r
        )
        self.requests = Gauge("seer_requests", "open requests by phase", ["phase"], registry=r)
        self.requests_done = Counter(
            "seer_requests_finished", "requests finished (stop or length)", registry=r
        )
        self.tokens = Counter("seer_output_tokens", "tokens generated", registry=r)
        self.tokens_per_s = Gauge(
            "seer_tokens_per_second", "tokens generated per second, last 10 s", registry=r
        )
        self.decisions = Counter(
            "seer_dispatch_decisions", "chunks dispatched by the scheduler", registry=r
        )
        self.chunk_latency = Histogram(
            "seer_chunk_seconds",
            "time from dispatch to result of one chunk",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.replica_failures = Counter(
            "seer_replica_failures",
            "times the replica was lost (unreachable: died, restarting, timed out), one per "
            "incident however many of its chunks were out",
            ["replica"],
            registry=r,
        )
        self.chunks_lost = Counter(
            "seer_chunks_lost",
            "chunks that ended on a lost replica (re-dispatched from the tokens already returned)",
            ["replica"],
            registry=r,
        )
        self.replica_up = Gauge(
            "seer_replica_healthy", "1 if the replica is in rotation", ["replica"], registry=r
        )
        self.replica_running = Gauge(
            "seer_replica_running", "sequences decoding", ["replica"], registry=r
        )
        self.replica_waiting = Gauge(
            "seer_replica_waiting", "sequences queued in the engine", ["replica"], registry=r
        )
        self.replica_kv = Gauge(
            "seer_replica_kv_usage", "fraction of KV blocks in use", ["replica"], registry=r
        )
        self.replica_reserved = Gauge(
            "seer_replica_reserved_kv_tokens",
            "KV tokens the scheduler has reserved on the replica",
            ["replica"],
            registry=r,
        )
        self.draft_tokens = Counter(
            "seer_draft_tokens", "draft tokens verified by the engines", ["replica"], registry=r
        )
        self.accepted_tokens = Counter(
            "seer_accepted_draft_tokens", "draft tokens accepted", ["replica"], registry=r
        )
        self.last_tail = Gauge(
            "seer_last_job_tail_seconds",
            "time spent on the last 10% of requests of the last finished job",
            registry=r,
        )
        self.store_events = Gauge(
            "seer_store_events",
            "history store writer: events accepted, written, rejected (bad data), dropped "
            "(backlog full) and pending, since start",
            ["kind"],
            registry=r,
        )
        self.store_failed_writes = Gauge(
            "seer_store_failed_writes", "history store write attempts that failed", registry=r
        )
        self.prior_prompts = Counter(
            "seer_length_prior_prompts",
            "length prior (context-prior, store on): prompts of submitted jobs looked up, and "
            "those found with recorded lengths of earlier iterations",
            ["result"],
            registry=r,
        )
        self.draft_server = Gauge(
            "seer_draft_server",
            "draft server (DGDS): groups and tokens held; pushes, applied tokens, rejected "
            "pushes, released and evicted groups, exchanges since start",
            ["kind"],
            registry=r,
        )
        self.draft_exchanges = Gauge(
            "seer_draft_exchanges",
            "a replica's exchanges with the draft server since it started, by result",
            ["replica", "result"],
            registry=r,
        )
        self._window: deque[tuple[float, int]] = deque()

    def set_draft_server(self, stats: SharedStats | None) -> None:
        """The draft server's figures (None: it did not answer; the gauges are cleared)."""
        if stats is None:
            self.draft_server.clear()
            return
        for kind, value in stats.model_dump().items():
            self.draft_server.labels(kind).set(value)

    def set_store(self, stats: WriterStats) -> None:
        for kind in ("accepted", "written", "rejected", "dropped", "pending"):
            self.store_events.labels(kind).set(getattr(stats, kind))
        self.store_failed_writes.set(stats.failed_writes)

    def drafted(self, replica_id: str, drafted: int, accepted: int) -> None:
        """A chunk on ``replica_id`` verified ``drafted`` draft tokens, ``accepted`` of them."""
        self.draft_tokens.labels(replica_id).inc(drafted)
        self.accepted_tokens.labels(replica_id).inc(accepted)

    def add_tokens(self, now: float, n: int) -> None:
        self.tokens.inc(n)
        self._window.append((now, n))

    def rate(self, now: float, window_s: float = 10.0) -> float:
        """Tokens per second over the last ``window_s`` seconds."""
        while self._window and self._window[0][0] < now - window_s:
            self._window.popleft()
        return sum(n for _, n in self._window) / window_s

    def set_state(
        self,
        jobs: Iterable[Job],
        queued: int,
        running: int,
        reserved: Sequence[int],
        replicas: Sequence[Replica],
        now: float,
    ) -> None:
        """The gauges of current state: jobs by state, requests ``queued`` (waiting jobs'
        included) and ``running``, tokens/s, and per replica whether it is up, the KV tokens
        the scheduler ``reserved`` on it and its last reported load."""
        states = {s: 0 for s in JobState}
        for job in jobs:
            states[job.state] += 1
        for state, n in states.items():
            self.jobs.labels(state.value).set(n)
        self.requests.labels("queued").set(queued)
        self.requests.labels("running").set(running)
        self.tokens_per_s.set(self.rate(now))
        for rep, kv in zip(replicas, reserved, strict=True):
            rid = rep.replica_id
            self.replica_up.labels(rid).set(1 if rep.state is ReplicaState.HEALTHY else 0)
            self.replica_reserved.labels(rid).set(kv)
            if rep.load is not None:
                self.replica_running.labels(rid).set(rep.load.running)
                self.replica_waiting.labels(rid).set(rep.load.waiting)
                self.replica_kv.labels(rid).set(rep.load.kv_usage)
                self.draft_exchanges.labels(rid, "ok").set(rep.load.draft_exchanges)
                self.draft_exchanges.labels(rid, "failed").set(rep.load.draft_exchange_failures)

    def render(self) -> bytes:
        return generate_latest(self.registry)
