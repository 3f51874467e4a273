"""Migrations up and down on SQLite and Postgres; the models and the migrations agree."""

from __future__ import annotations

from sqlalchemy import inspect

from app.store import migrate
from app.store.engine import make_engine
from app.store.tables import TABLES

STORE_TABLES = {t.name for t in TABLES}


def _tables(url: str) -> set[str]:
    eng = make_engine(url)
    try:
        return set(inspect(eng).get_table_names())
    finally:
        eng.dispose()


def test_up_down_up(any_url: str) -> None:
    assert migrate.current(any_url) is None
    migrate.upgrade(any_url)
    assert migrate.current(any_url) == migrate.head()
    assert _tables(any_url) == STORE_TABLES | {"alembic_version"}
    migrate.downgrade(any_url, "base")
    assert migrate.current(any_url) is None
    assert _tables(any_url) == {"alembic_version"}
    migrate.upgrade(any_url)
    assert migrate.current(any_url) == migrate.head()
    migrate.upgrade(any_url)  # idempotent at head
    assert migrate.current(any_url) == migrate.head()


def test_models_match_the_migrations(any_url: str) -> None:
    """Autogenerate finds nothing to do at head: the models are what the migrations build."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.store.tables import Base

    migrate.upgrade(any_url)
    eng = make_engine(any_url)
    try:
        with eng.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, Base.metadata)
    finally:
        eng.dispose()
    assert diff == []
