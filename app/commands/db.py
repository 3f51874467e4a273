"""``seer db``: migrations of the history store (upgrade, current, downgrade)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.help import SeerTyper

db = SeerTyper(
    name="db",
    help="History store migrations (SQLite by default, Postgres by URL).",
    no_args_is_help=True,
    add_completion=False,
)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="SQLAlchemy URL (default: $SEER_DATABASE_URL, else sqlite:///$SEER_DATA_DIR/seer.db, "
        "~/.local/share/seer/seer.db)",
    ),
]


def _url(url: str | None) -> str:
    from app.store.config import check_url, resolve_url

    try:
        return check_url(resolve_url(url))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _fail(what: str, url: str, exc: Exception) -> typer.Exit:
    from app.store.config import redact

    typer.echo(f"error: {what} on {redact(url)} failed: {exc}", err=True)
    return typer.Exit(1)


@db.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(metavar="REVISION", help="target revision")] = "head",
    url: UrlOption = None,
) -> None:
    """Apply pending migrations up to REVISION (default: the newest)."""
    from app.store import migrate
    from app.store.config import redact

    u = _url(url)
    try:
        migrate.upgrade(u, revision)
        now = migrate.current(u)
    except Exception as exc:
        raise _fail("upgrade", u, exc) from None
    typer.echo(f"{redact(u)}: at revision {now}")


@db.command("current")
def current(url: UrlOption = None) -> None:
    """Print the database's revision and the newest one (exit 3 when behind)."""
    from app.store import migrate
    from app.store.config import redact

    u = _url(url)
    try:
        rev = migrate.current(u)
    except Exception as exc:
        raise _fail("reading the revision", u, exc) from None
    head = migrate.head()
    state = "up to date" if rev == head else "behind: run `seer db upgrade`"
    typer.echo(f"{redact(u)}: revision {rev or '(none)'}, head {head} ({state})")
    if rev != head:
        raise typer.Exit(3)


@db.command("downgrade")
def downgrade(
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="target revision, or 'base' for empty")
    ],
    url: UrlOption = None,
) -> None:
    """Revert migrations down to REVISION ('base' drops every store table)."""
    from app.store import migrate
    from app.store.config import redact

    u = _url(url)
    try:
        migrate.downgrade(u, revision)
        now = migrate.current(u)
    except Exception as exc:
        raise _fail("downgrade", u, exc) from None
    typer.echo(f"{redact(u)}: at revision {now or '(none)'}")


def register(cli: typer.Typer) -> None:
    cli.add_typer(db)
