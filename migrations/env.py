"""Alembic environment of the Seer store (driven by ``app.store.migrate`` / ``seer db``).

Online only: a connection is passed in ``config.attributes["connection"]`` (``seer db``), or
built from ``sqlalchemy.url`` (the ``alembic`` command with a config). SQLite runs in batch
mode so that column changes work there too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from app.store.tables import Base

config = context.config


def _migrate(conn: Connection) -> None:
    context.configure(
        connection=conn,
        target_metadata=Base.metadata,
        render_as_batch=conn.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    if context.is_offline_mode():
        raise SystemExit("offline (--sql) migrations are not supported; give a database URL")
    conn = config.attributes.get("connection")
    if conn is not None:
        _migrate(conn)
        return
    from app.store.engine import make_engine

    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no sqlalchemy.url: use `seer db upgrade --url URL`")
    engine = make_engine(url)
    try:
        with engine.begin() as c:
            _migrate(c)
    finally:
        engine.dispose()


run()
