"""Tables of the history store (SQLAlchemy 2 typed models).

Invariant: every table is an append-only record keyed by a surrogate id; the service's own ids
(job, group, request, replica) are indexed columns, not foreign keys, so a batch never fails on
the order events arrive in and ids may recur across service restarts. Two rows are updated
after insert: a job when it ends, a group when its last request ends. Times are Unix seconds.
The schema is owned by ``migrations/`` (alembic); change a model only with a new revision.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import JSON, Boolean, Float, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: Constraint names fixed by convention, so migrations name them the same on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Id = String(256)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class JobRow(Base):
    """A rollout job: one RL iteration's batch of prompts."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(Id, index=True)
    iteration: Mapped[int | None] = mapped_column(Integer, index=True)
    policy: Mapped[str] = mapped_column(String(64))
    groups: Mapped[int] = mapped_column(Integer)
    max_tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float, index=True)
    finished_at: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))  # running | done | cancelled | failed
    requests_done: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    policy_version: Mapped[int] = mapped_column(Integer, server_default="0")


class GroupRow(Base):
    """A prompt group of a job: G responses of one prompt."""

    __tablename__ = "groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[str] = mapped_column(Id, index=True)
    job_id: Mapped[str] = mapped_column(Id, index=True)
    prompt_key: Mapped[str] = mapped_column(Id, index=True)
    prompt_hash: Mapped[str] = mapped_column(String(80), index=True)
    prompt_id: Mapped[str | None] = mapped_column(Id)
    group_size: Mapped[int] = mapped_column(Integer)
    max_tokens: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    submitted_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    final_lengths: Mapped[list[int] | None] = mapped_column(JSON)


class GroupEstimateRow(Base):
    """The scheduler's estimate of a group's length, each time one of its requests finished."""

    __tablename__ = "group_estimates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[str] = mapped_column(Id, index=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    max_estimate: Mapped[int] = mapped_column(Integer)
    mean_estimate: Mapped[int] = mapped_column(Integer)
    finished: Mapped[int] = mapped_column(Integer)


class RequestRow(Base):
    """One response (request) once it is terminal."""

    __tablename__ = "requests"
    __table_args__ = (Index("ix_requests_prompt_key_finished_at", "prompt_key", "finished_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(Id, index=True)
    group_id: Mapped[str] = mapped_column(Id, index=True)
    prompt_key: Mapped[str] = mapped_column(Id)
    length: Mapped[int] = mapped_column(Integer)
    chunks: Mapped[int] = mapped_column(Integer)
    is_probe: Mapped[bool] = mapped_column(Boolean)
    replicas: Mapped[list[str]] = mapped_column(JSON)
    finish_reason: Mapped[str] = mapped_column(String(16))  # stop | length | cancelled
    queued_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float] = mapped_column(Float, index=True)
    policy_version: Mapped[int] = mapped_column(Integer, server_default="0")


class ChunkRow(Base):
    """One chunk reported back by an engine replica."""

    __tablename__ = "chunks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(Id, index=True)
    group_id: Mapped[str] = mapped_column(Id)
    replica_id: Mapped[str] = mapped_column(Id)
    at: Mapped[float] = mapped_column(Float, index=True)
    new_tokens: Mapped[int] = mapped_column(Integer)
    generated: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str] = mapped_column(String(16))
    is_probe: Mapped[bool] = mapped_column(Boolean)
    started_at: Mapped[float | None] = mapped_column(Float)  # dispatched (null: before 0003)
    drafted: Mapped[int] = mapped_column(Integer, server_default="0")  # draft tokens proposed


class AcceptanceRow(Base):
    """Speculative decoding of a group on a replica within one time bucket (summed)."""

    __tablename__ = "acceptance_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[str] = mapped_column(Id, index=True)
    replica_id: Mapped[str] = mapped_column(Id)
    bucket: Mapped[float] = mapped_column(Float, index=True)  # start of the time bucket
    drafted: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(Integer)
    draft_length: Mapped[float] = mapped_column(Float)  # mean drafted tokens per step


class ReplicaLoadRow(Base):
    """One replica's load from a health probe."""

    __tablename__ = "replica_load_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    replica_id: Mapped[str] = mapped_column(Id, index=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    running: Mapped[int] = mapped_column(Integer)
    waiting: Mapped[int] = mapped_column(Integer)
    chunks_in_flight: Mapped[int] = mapped_column(Integer)
    kv_usage: Mapped[float] = mapped_column(Float)
    reserved_kv_tokens: Mapped[int] = mapped_column(Integer)


class SpeculationConfigRow(Base):
    """A version of the speculation settings: who changed what, when and why."""

    __tablename__ = "speculation_config_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    who: Mapped[str] = mapped_column(String(256))
    old: Mapped[dict[str, Any]] = mapped_column(JSON)
    new: Mapped[dict[str, Any]] = mapped_column(JSON)
    reason: Mapped[str | None] = mapped_column(Text)


#: Every table of the store, in declaration order.
TABLES: list[Table] = [cast(Table, m.__table__) for m in Base.__subclasses__()]
