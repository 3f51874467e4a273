"""Events -> rows: one batch of events becomes inserts per table plus the updates (job ended,
group ended, a scheduler started: the jobs still running before it ended), executed in one
transaction in a fixed order (inserts first, so an update finds a row inserted by the same
batch).

Draft statistics are summed per (group, replica, time bucket) within a batch: one row per key
per batch, not one per chunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.store import tables as tb
from core.events import (
    ChunkDone,
    DraftStats,
    GroupEstimate,
    GroupFinished,
    JobFinished,
    JobStarted,
    ReplicaLoadSample,
    RequestFinished,
    SchedulerStarted,
    SpeculationConfigChanged,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection, Table

Row = dict[str, Any]


@dataclass
class WritePlan:
    """What one batch writes. ``rejected``: events of an unknown type (counted, not written)."""

    inserts: dict[str, list[Row]] = field(default_factory=dict)
    job_ends: list[Row] = field(default_factory=list)
    group_ends: list[Row] = field(default_factory=list)
    rejected: list[object] = field(default_factory=list)
    scheduler_starts: list[Row] = field(default_factory=list)

    def add(self, table: str, row: Row) -> None:
        self.inserts.setdefault(table, []).append(row)

    @property
    def rows(self) -> int:
        ends = len(self.job_ends) + len(self.group_ends) + len(self.scheduler_starts)
        return sum(len(v) for v in self.inserts.values()) + ends

    def execute(self, conn: Connection) -> None:
        """Run the plan on ``conn`` (the caller owns the transaction)."""
        from sqlalchemy import bindparam, insert, or_

        tables: dict[str, Table] = {t.name: t for t in tb.TABLES}
        for name in _INSERT_ORDER:
            rows = self.inserts.get(name)
            if rows:
                conn.execute(insert(tables[name]), rows)
        if self.job_ends:
            jobs = tables["jobs"]
            # a job ended for a gone scheduler may still end on its own: during a redeploy the
            # old scheduler drains while the new one starts, and its end is the true one
            open_ = or_(jobs.c.state == "running", jobs.c.error == ORPHANED)
            stmt = (
                jobs.update()
                .where(jobs.c.job_id == bindparam("b_job_id"), open_)
                .values(
                    state=bindparam("b_state"),
                    finished_at=bindparam("b_at"),
                    requests_done=bindparam("b_requests_done"),
                    output_tokens=bindparam("b_output_tokens"),
                    error=bindparam("b_error"),
                )
            )
            conn.execute(stmt, self.job_ends)
        if self.scheduler_starts:
            jobs = tables["jobs"]
            stmt = (
                jobs.update()
                .where(jobs.c.state == "running", jobs.c.started_at < bindparam("b_at"))
                .values(state="failed", finished_at=bindparam("b_at"), error=ORPHANED)
            )
            conn.execute(stmt, self.scheduler_starts)
        if self.group_ends:
            groups = tables["groups"]
            stmt = (
                groups.update()
                .where(groups.c.group_id == bindparam("b_group_id"), groups.c.finished_at.is_(None))
                .values(finished_at=bindparam("b_at"), final_lengths=bindparam("b_lengths"))
            )
            conn.execute(stmt, self.group_ends)


#: the error of a job whose scheduler is gone (a new one started without it)
ORPHANED = "scheduler restarted: the job ended with the scheduler process that ran it"

_INSERT_ORDER = (
    "jobs",
    "groups",
    "group_estimates",
    "chunks",
    "requests",
    "acceptance_samples",
    "replica_load_samples",
    "speculation_config_versions",
)


def plan_batch(events: Iterable[object], bucket_s: float) -> WritePlan:
    """The rows of ``events`` (in order); see the module docstring."""
    plan = WritePlan()
    drafts: dict[tuple[str, str, float], list[int]] = {}
    for ev in events:
        if isinstance(ev, ChunkDone):
            plan.add(
                "chunks",
                {
                    "request_id": ev.request_id,
                    "group_id": ev.group_id,
                    "replica_id": ev.replica_id,
                    "at": ev.at,
                    "new_tokens": ev.new_tokens,
                    "generated": ev.generated,
                    "finish_reason": ev.finish_reason,
                    "is_probe": ev.is_probe,
                    "started_at": ev.started_at,
                    "drafted": ev.drafted,
                },
            )
        elif isinstance(ev, RequestFinished):
            plan.add(
                "requests",
                {
                    "request_id": ev.request_id,
                    "group_id": ev.group_id,
                    "prompt_key": ev.prompt_key,
                    "length": ev.length,
                    "chunks": ev.chunks,
                    "is_probe": ev.is_probe,
                    "replicas": list(ev.replicas),
                    "finish_reason": ev.finish_reason,
                    "queued_at": ev.queued_at,
                    "started_at": ev.started_at,
                    "finished_at": ev.finished_at,
                    "policy_version": ev.policy_version,
                },
            )
        elif isinstance(ev, DraftStats):
            key = (ev.group_id, ev.replica_id, math.floor(ev.at / bucket_s) * bucket_s)
            acc = drafts.setdefault(key, [0, 0, 0])
            acc[0] += ev.drafted
            acc[1] += ev.accepted
            acc[2] += ev.steps
        elif isinstance(ev, GroupEstimate):
            plan.add(
                "group_estimates",
                {
                    "group_id": ev.group_id,
                    "at": ev.at,
                    "max_estimate": ev.max_estimate,
                    "mean_estimate": ev.mean_estimate,
                    "finished": ev.finished,
                },
            )
        elif isinstance(ev, GroupFinished):
            plan.group_ends.append(
                {"b_group_id": ev.group_id, "b_at": ev.at, "b_lengths": list(ev.lengths)}
            )
        elif isinstance(ev, ReplicaLoadSample):
            plan.add(
                "replica_load_samples",
                {
                    "replica_id": ev.replica_id,
                    "at": ev.at,
                    "running": ev.running,
                    "waiting": ev.waiting,
                    "chunks_in_flight": ev.chunks_in_flight,
                    "kv_usage": ev.kv_usage,
                    "reserved_kv_tokens": ev.reserved_kv_tokens,
                },
            )
        elif isinstance(ev, JobStarted):
            _job_started(plan, ev)
        elif isinstance(ev, JobFinished):
            plan.job_ends.append(
                {
                    "b_job_id": ev.job_id,
                    "b_state": ev.state,
                    "b_at": ev.at,
                    "b_requests_done": ev.requests_done,
                    "b_output_tokens": ev.output_tokens,
                    "b_error": ev.error,
                }
            )
        elif isinstance(ev, SchedulerStarted):
            plan.scheduler_starts.append({"b_at": ev.at})
        elif isinstance(ev, SpeculationConfigChanged):
            try:
                _config_changed(plan, ev)
            except ValueError:  # old/new not JSON objects
                plan.rejected.append(ev)
        else:
            plan.rejected.append(ev)
    for (gid, rid, bucket), (drafted, accepted, steps) in drafts.items():
        plan.add(
            "acceptance_samples",
            {
                "group_id": gid,
                "replica_id": rid,
                "bucket": bucket,
                "drafted": drafted,
                "accepted": accepted,
                "steps": steps,
                "draft_length": drafted / steps if steps else 0.0,
            },
        )
    return plan


def _job_started(plan: WritePlan, ev: JobStarted) -> None:
    plan.add(
        "jobs",
        {
            "job_id": ev.job_id,
            "iteration": ev.iteration,
            "policy": ev.policy,
            "groups": len(ev.groups),
            "max_tokens": ev.max_tokens,
            "created_at": ev.created_at,
            "started_at": ev.at,
            "finished_at": None,
            "state": "running",
            "requests_done": None,
            "output_tokens": None,
            "error": None,
            "policy_version": ev.policy_version,
        },
    )
    for g in ev.groups:
        plan.add(
            "groups",
            {
                "group_id": g.group_id,
                "job_id": ev.job_id,
                "prompt_key": g.prompt_key,
                "prompt_hash": g.prompt_hash,
                "prompt_id": g.prompt_id,
                "group_size": g.group_size,
                "max_tokens": g.max_tokens,
                "prompt_tokens": g.prompt_tokens,
                "submitted_at": ev.at,
                "finished_at": None,
                "final_lengths": None,
            },
        )


def _config_changed(plan: WritePlan, ev: SpeculationConfigChanged) -> None:
    import json

    old, new = json.loads(ev.old), json.loads(ev.new)
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise ValueError(f"speculation config change by {ev.who!r}: old/new must be JSON objects")
    plan.add(
        "speculation_config_versions",
        {
            "at": ev.at,
            "who": ev.who,
            "old": old,
            "new": new,
            "reason": ev.reason,
        },
    )
