"""``seer db upgrade | current | downgrade`` on SQLite (URL option, env and default data dir)
and on Postgres; errors name the offending URL and exit non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.store import migrate

runner = CliRunner()


def test_upgrade_current_downgrade(any_url: str) -> None:
    shown = any_url.split("://", 1)[0]
    res = runner.invoke(cli, ["db", "current", "--url", any_url])
    assert res.exit_code == 3 and "(none)" in res.output and "behind" in res.output
    res = runner.invoke(cli, ["db", "upgrade", "--url", any_url])
    assert res.exit_code == 0, res.output
    assert f"at revision {migrate.head()}" in res.output and shown in res.output
    res = runner.invoke(cli, ["db", "current", "--url", any_url])
    assert res.exit_code == 0 and "up to date" in res.output
    res = runner.invoke(cli, ["db", "downgrade", "base", "--url", any_url])
    assert res.exit_code == 0 and "(none)" in res.output
    assert migrate.current(any_url) is None


def test_default_url_is_the_data_dir_and_env_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEER_DATABASE_URL", raising=False)
    monkeypatch.setenv("SEER_DATA_DIR", str(tmp_path / "data"))
    res = runner.invoke(cli, ["db", "upgrade"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "data" / "seer.db").is_file()
    other = tmp_path / "other.db"
    monkeypatch.setenv("SEER_DATABASE_URL", f"sqlite:///{other}")
    res = runner.invoke(cli, ["db", "upgrade"])
    assert res.exit_code == 0 and str(other) in res.output
    assert migrate.current(f"sqlite:///{other}") == migrate.head()


def test_bad_and_unreachable_urls() -> None:
    res = runner.invoke(cli, ["db", "current", "--url", "mysql://x/y"])
    assert res.exit_code == 2 and "'mysql' not supported" in res.output
    res = runner.invoke(
        cli, ["db", "upgrade", "--url", "postgresql://me:secret@127.0.0.1:1/nothing"]
    )
    assert res.exit_code == 1
    assert "upgrade on postgresql://me:***@127.0.0.1:1/nothing failed" in res.output
    assert "secret" not in res.output
