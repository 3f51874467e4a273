"""Alembic, driven from Python: upgrade / downgrade / current revision of a store database.

The migration scripts live in the top-level ``migrations/`` folder (``env.py`` + ``versions/``);
SQLite runs them in batch mode (``render_as_batch``), since it cannot ALTER most things.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.store.config import check_url

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Engine


def migrations_dir() -> Path:
    """The ``migrations/`` folder next to ``app/`` (source checkout or editable install)."""
    here = Path(__file__).resolve().parents[2] / "migrations"
    if (here / "env.py").is_file():
        return here
    import importlib.util

    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"no alembic migrations folder at {here}")
    return Path(next(iter(spec.submodule_search_locations)))


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation: a literal % in a URL (escaped password) must be doubled.
    cfg.set_main_option("sqlalchemy.url", check_url(url).replace("%", "%%"))
    return cfg


def _run(url: str, engine: Engine | None, action: str, revision: str) -> None:
    from alembic import command

    from app.store.engine import make_engine

    cfg = alembic_config(url)
    own = engine is None
    eng = make_engine(url) if engine is None else engine
    try:
        with eng.begin() as conn:
            cfg.attributes["connection"] = conn
            if action == "upgrade":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
    finally:
        if own:
            eng.dispose()


def upgrade(url: str, revision: str = "head", engine: Engine | None = None) -> None:
    """Apply migrations up to ``revision`` (default: the newest)."""
    _run(url, engine, "upgrade", revision)


def downgrade(url: str, revision: str, engine: Engine | None = None) -> None:
    """Revert migrations down to ``revision`` (``base`` = empty database)."""
    _run(url, engine, "downgrade", revision)


def current(url: str, engine: Engine | None = None) -> str | None:
    """The database's revision (None: no migration applied)."""
    from alembic.runtime.migration import MigrationContext

    from app.store.engine import make_engine

    eng = make_engine(url) if engine is None else engine
    try:
        with eng.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if engine is None:
            eng.dispose()


def head() -> str:
    """The newest revision of the migration scripts."""
    from alembic.script import ScriptDirectory

    rev = ScriptDirectory(str(migrations_dir())).get_current_head()
    if rev is None:
        raise RuntimeError(f"no migration revision in {migrations_dir()}")
    return rev
