"""Databases for the store tests: SQLite files in a temp dir, and throwaway PostgreSQL servers
started here on a free loopback port (DESIGN.md: initdb as the ``postgres`` user when root,
``--auth=trust``, socket dir in a temp dir owned by that user) and stopped after. The server
binaries are taken from ``PATH``, else from Debian's ``/usr/lib/postgresql/<version>/bin``
(``./test.sh`` installs Debian's ``postgresql`` where neither has them). Without them the
Postgres tests skip with the reason, except under CI (``CI=true``), where they fail."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, requests_dynamically

PG_BINARIES = ("initdb", "pg_ctl")


def pg_bin(name: str) -> str | None:
    """The path of server binary ``name``: on PATH, else Debian's newest versioned one."""
    found = shutil.which(name)
    if found:
        return found
    debian = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    return debian[-1] if debian else None


def pg_missing() -> str | None:
    """Why no throwaway Postgres can be started here (None: it can)."""
    missing = [b for b in PG_BINARIES if pg_bin(b) is None]
    if missing:
        return (
            f"PostgreSQL server binaries not found on PATH or in /usr/lib/postgresql/*/bin: "
            f"{missing} (Debian package postgresql; ./test.sh installs it)"
        )
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run initdb as"
    return None


def _require_pg() -> None:
    why = pg_missing()
    if why and os.environ.get("CI") == "true":
        pytest.fail(f"CI must test the store on Postgres: {why}")
    if why:
        pytest.skip(why)


class PgServer:
    """A PostgreSQL cluster in a temp dir, listening on 127.0.0.1:``port`` only."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="seer-pg-"))
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.sock.mkdir()
        self.log = self.base / "server.log"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(self.base, "postgres")
            shutil.chown(self.sock, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "--auth=trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        self.running = False

    def _run(self, name: str, *args: str) -> None:
        cmd = (pg_bin(name) or name, *args)
        out = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{name} failed ({out.returncode}): {out.stderr}\n{log[-2000:]}")

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "start",
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        if self.running:
            with contextlib.suppress(RuntimeError):
                self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway server for the session (each test gets its own database)."""
    _require_pg()
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    return pg_server.create_db()


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A server of the test's own (initialized, not started): the test may stop it."""
    _require_pg()
    server = PgServer()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
@requests_dynamically("pg_server")
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using it runs on a SQLite file and on a Postgres database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.create_db()
