"""The jobs the service holds: admission limits, lookup, expiry (no Ray, no event loop).

Invariants:
- A job is *open* from ``add`` until ``closed``; it is *held* (readable by id) from ``add``
  until ``job_ttl_s`` after it ended, then ``expire`` drops it (404 from then on).
- ``check`` refuses a job before anything of it exists: 422 for one larger than a per-job limit or
  with a response no replica can hold, 409 for an id held already, 429 (with ``retry_after_s``) when
  adding it would take an open total (jobs, requests, requests x max_tokens) past its limit. So the
  open totals never exceed their limits.
- An ``Idempotency-Key`` names its job on its endpoint while the job is held: ``repeat_of``
  gives that job to a call with the same key and body, and a 422 to one with another body.
- ``expire`` scans at most once per ``scan_period_s``; it returns the open jobs older than
  ``request_timeout_s`` for the caller to cancel (ending a job is the dispatcher's: it holds
  the scheduler and the chunks).
"""

from __future__ import annotations

from app.config import ServiceLimits
from app.rollout import JobPlan
from app.serve.scheduler.jobs import Job, JobError


class JobBook:
    """Held and open jobs, see the module invariants."""

    def __init__(
        self,
        limits: ServiceLimits,
        job_ttl_s: float,
        request_timeout_s: float,
        scan_period_s: float = 1.0,
    ) -> None:
        self.limits = limits
        self.job_ttl_s = job_ttl_s
        self.request_timeout_s = request_timeout_s
        self.scan_period_s = scan_period_s
        self.jobs: dict[str, Job] = {}  # held, by id
        self._open: dict[str, Job] = {}  # open, in submission order
        self._next_scan = 0.0
        self._keys: dict[tuple[str, str], str] = {}  # (endpoint, Idempotency-Key) -> job id

    # ------------------------------------------------------------------ admission
    def repeat_of(self, plan: JobPlan) -> Job | None:
        """The held job ``plan`` repeats (its endpoint and ``Idempotency-Key``), None for a
        first call; ``JobError`` 422 when that key came with another body."""
        call = plan.idempotent
        if call is None:
            return None
        job = self.jobs.get(self._keys.get((call.endpoint, call.key), ""))
        if job is None or job.plan.idempotent is None:
            return None
        if job.plan.idempotent.body_digest != call.body_digest:
            raise JobError(
                422,
                f"Idempotency-Key {call.key!r} was sent to {call.endpoint} with another body "
                f"(job {job.id}): a key names one call, give each call its own",
                loc=("header", "Idempotency-Key"),
            )
        return job

    def check(self, plan: JobPlan, kv_room: int) -> None:
        """Raise ``JobError`` unless ``plan`` may be added now (see the module invariants);
        ``kv_room``: the KV tokens of the largest replica.

        A response needs its prompt + max_tokens of KV under every policy; a group need not
        fit: verl runs a whole group on one replica, and a group's ``group_size x max_tokens``
        routinely exceeds a replica's KV (the paper's Qwen2-VL setup: 16 x 40,960); vLLM then
        runs it in waves, as veRL's own engines do."""
        need = max(len(g.prompt) for g in plan.groups) + plan.max_tokens
        if need > kv_room:
            raise JobError(
                422,
                f"a response needs up to {need} KV tokens (prompt + max_tokens) but the "
                f"largest replica holds {kv_room}",
            )
        lim = self.limits
        if plan.requests > lim.max_job_requests:
            raise JobError(
                422,
                f"prompts x group_size = {plan.requests} requests exceeds "
                f"max_job_requests={lim.max_job_requests}",
            )
        if plan.token_budget > lim.max_job_tokens:
            raise JobError(
                422,
                f"requests x max_tokens = {plan.token_budget} exceeds "
                f"max_job_tokens={lim.max_job_tokens}",
            )
        if plan.job_id in self.jobs:
            raise JobError(409, f"job {plan.job_id!r} exists")
        open_jobs = self._open.values()
        totals = (
            ("max_open_jobs", len(self._open) + 1, lim.max_open_jobs),
            (
                "max_open_requests",
                sum(j.plan.requests for j in open_jobs) + plan.requests,
                lim.max_open_requests,
            ),
            (
                "max_open_tokens",
                sum(j.plan.token_budget for j in open_jobs) + plan.token_budget,
                lim.max_open_tokens,
            ),
        )
        for name, value, limit in totals:
            if value > limit:
                raise JobError(
                    429,
                    f"the service is at its limit {name}={limit} (this job would make it "
                    f"{value}); retry later",
                    retry_after_s=lim.retry_after_s,
                )

    def add(self, job: Job) -> None:
        """Hold ``job`` and count it open (``check`` first)."""
        self.jobs[job.id] = job
        self._open[job.id] = job
        if (call := job.plan.idempotent) is not None:
            self._keys[(call.endpoint, call.key)] = job.id

    def closed(self, job: Job) -> None:
        """``job`` ended: no longer open, still held for ``job_ttl_s``."""
        self._open.pop(job.id, None)

    # ------------------------------------------------------------------ lookup
    def get(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobError(
                404, f"no job {job_id!r} (unknown, or expired after job_ttl_s)"
            ) from None

    def open_jobs(self) -> list[Job]:
        """The open jobs, in submission order (a copy: ending them while iterating is fine)."""
        return list(self._open.values())

    @property
    def open_count(self) -> int:
        return len(self._open)

    # ------------------------------------------------------------------ expiry
    def expire(self, now: float) -> list[Job]:
        """Drop the ended jobs past ``job_ttl_s``; return the open ones past
        ``request_timeout_s`` (nothing before the next scan is due)."""
        if now < self._next_scan:
            return []
        self._next_scan = now + self.scan_period_s
        for job in list(self.jobs.values()):
            if (
                job.state.terminal
                and job.finished_at is not None
                and now - job.finished_at > self.job_ttl_s
            ):
                del self.jobs[job.id]
        self._keys = {k: v for k, v in self._keys.items() if v in self.jobs}
        return [j for j in self._open.values() if now - j.created_at > self.request_timeout_s]
