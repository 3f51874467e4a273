"""started_at and drafted on chunks (the job page's per-request timeline)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04 22:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("started_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("drafted", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("drafted")
        batch_op.drop_column("started_at")
