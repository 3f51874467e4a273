"""SQLAlchemy engines for the store: SQLite tuned for one writer + readers, Postgres with
pre-ping (a restarted server's dead connections are replaced, not reused)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from app.store.config import WriterConfig, check_url

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def make_engine(url: str, config: WriterConfig | None = None) -> Engine:
    """An engine for ``url`` (sqlite or postgresql; ValueError otherwise). SQLite: WAL journal
    (readers never block the writer), synchronous=NORMAL, ``busy_timeout_s``; the file's folder
    is created. Postgres: ``connect_timeout_s``; ``postgresql://`` means the psycopg 3 driver."""
    import sqlite3
    from pathlib import Path

    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url

    cfg = config or WriterConfig()
    u = make_url(check_url(url))
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        eng = create_engine(u, connect_args={"timeout": cfg.busy_timeout_s})

        @event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={int(cfg.busy_timeout_s * 1000)}")
            try:  # SQLite built without its math functions: the read API buckets with floor()
                cur.execute("SELECT floor(0.5)")
            except sqlite3.OperationalError:
                dbapi_conn.create_function("floor", 1, _floor, deterministic=True)
            cur.close()

        return eng
    if u.drivername == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    return create_engine(
        u,
        pool_pre_ping=True,
        connect_args={"connect_timeout": max(1, round(cfg.connect_timeout_s))},
    )


def _floor(x: float | None) -> float | None:
    return None if x is None else float(math.floor(x))
