"""Where the store tests find PostgreSQL, and what they do without it (CI fails, not skips)."""

from __future__ import annotations

import glob

import pytest

from tests.app.store import conftest


def test_server_binaries_are_found_in_debian_s_versioned_dir_off_the_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not debian:
        pytest.skip("no Debian postgresql here (./test.sh installs it)")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert conftest.pg_bin("initdb") == debian[-1]
    assert conftest.pg_missing() is None  # the Debian package made the postgres user too


def test_missing_postgres_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "pg_missing", lambda: "no initdb")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must test the store on Postgres"):
        conftest._require_pg()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no initdb"):
        conftest._require_pg()
