"""initial schema: jobs, groups, requests, chunks, acceptance, load, speculation config

Revision ID: 0001
Revises:
Create Date: 2026-12-03 03:04:14.858269
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "acceptance_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.String(length=256), nullable=False),
        sa.Column("replica_id", sa.String(length=256), nullable=False),
        sa.Column("bucket", sa.Float(), nullable=False),
        sa.Column("drafted", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("draft_length", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acceptance_samples")),
    )
    with op.batch_alter_table("acceptance_samples", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_acceptance_samples_bucket"), ["bucket"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_acceptance_samples_group_id"), ["group_id"], unique=False
        )

    op.create_table(
        "chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=256), nullable=False),
        sa.Column("group_id", sa.String(length=256), nullable=False),
        sa.Column("replica_id", sa.String(length=256), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("new_tokens", sa.Integer(), nullable=False),
        sa.Column("generated", sa.Integer(), nullable=False),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("is_probe", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
    )
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chunks_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_chunks_request_id"), ["request_id"], unique=False)

    op.create_table(
        "group_estimates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.String(length=256), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("max_estimate", sa.Integer(), nullable=False),
        sa.Column("mean_estimate", sa.Integer(), nullable=False),
        sa.Column("finished", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_group_estimates")),
    )
    with op.batch_alter_table("group_estimates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_group_estimates_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_group_estimates_group_id"), ["group_id"], unique=False)

    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.String(length=256), nullable=False),
        sa.Column("job_id", sa.String(length=256), nullable=False),
        sa.Column("prompt_key", sa.String(length=256), nullable=False),
        sa.Column("prompt_hash", sa.String(length=80), nullable=False),
        sa.Column("prompt_id", sa.String(length=256), nullable=True),
        sa.Column("group_size", sa.Integer(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("final_lengths", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_groups")),
    )
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_groups_group_id"), ["group_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_groups_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_groups_prompt_hash"), ["prompt_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_groups_prompt_key"), ["prompt_key"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=256), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requests_done", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_iteration"), ["iteration"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_started_at"), ["started_at"], unique=False)

    op.create_table(
        "replica_load_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("replica_id", sa.String(length=256), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("chunks_in_flight", sa.Integer(), nullable=False),
        sa.Column("kv_usage", sa.Float(), nullable=False),
        sa.Column("reserved_kv_tokens", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replica_load_samples")),
    )
    with op.batch_alter_table("replica_load_samples", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_replica_load_samples_at"), ["at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_replica_load_samples_replica_id"), ["replica_id"], unique=False
        )

    op.create_table(
        "requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=256), nullable=False),
        sa.Column("group_id", sa.String(length=256), nullable=False),
        sa.Column("prompt_key", sa.String(length=256), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("is_probe", sa.Boolean(), nullable=False),
        sa.Column("replicas", sa.JSON(), nullable=False),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("queued_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_requests")),
    )
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_requests_finished_at"), ["finished_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_requests_group_id"), ["group_id"], unique=False)
        batch_op.create_index(
            "ix_requests_prompt_key_finished_at", ["prompt_key", "finished_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_requests_request_id"), ["request_id"], unique=False)

    op.create_table(
        "speculation_config_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("who", sa.String(length=256), nullable=False),
        sa.Column("old", sa.JSON(), nullable=False),
        sa.Column("new", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_speculation_config_versions")),
    )
    with op.batch_alter_table("speculation_config_versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_speculation_config_versions_at"), ["at"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("speculation_config_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_speculation_config_versions_at"))

    op.drop_table("speculation_config_versions")
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_requests_request_id"))
        batch_op.drop_index("ix_requests_prompt_key_finished_at")
        batch_op.drop_index(batch_op.f("ix_requests_group_id"))
        batch_op.drop_index(batch_op.f("ix_requests_finished_at"))

    op.drop_table("requests")
    with op.batch_alter_table("replica_load_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replica_load_samples_replica_id"))
        batch_op.drop_index(batch_op.f("ix_replica_load_samples_at"))

    op.drop_table("replica_load_samples")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_started_at"))
        batch_op.drop_index(batch_op.f("ix_jobs_job_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_iteration"))

    op.drop_table("jobs")
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_groups_prompt_key"))
        batch_op.drop_index(batch_op.f("ix_groups_prompt_hash"))
        batch_op.drop_index(batch_op.f("ix_groups_job_id"))
        batch_op.drop_index(batch_op.f("ix_groups_group_id"))

    op.drop_table("groups")
    with op.batch_alter_table("group_estimates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_group_estimates_group_id"))
        batch_op.drop_index(batch_op.f("ix_group_estimates_at"))

    op.drop_table("group_estimates")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chunks_request_id"))
        batch_op.drop_index(batch_op.f("ix_chunks_at"))

    op.drop_table("chunks")
    with op.batch_alter_table("acceptance_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_acceptance_samples_group_id"))
        batch_op.drop_index(batch_op.f("ix_acceptance_samples_bucket"))

    op.drop_table("acceptance_samples")
