"""policy_version on jobs and requests (weights version; POST /v1/weights)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 08:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("jobs", "requests"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(
                sa.Column("policy_version", sa.Integer(), server_default="0", nullable=False)
            )


def downgrade() -> None:
    for table in ("jobs", "requests"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("policy_version")
