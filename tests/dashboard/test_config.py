"""Dashboard configuration: arguments over environment over defaults, bad values named."""

from __future__ import annotations

import pytest

from app.env import DASHBOARD_REFRESH_ENV, DATABASE_URL_ENV, SERVICE_URL_ENV
from dashboard.config import DEFAULT_SERVICE_URL, parse_config


def test_defaults_resolve_like_the_service(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    monkeypatch.setenv("SEER_DATA_DIR", str(tmp_path))
    cfg = parse_config([], env={})
    assert cfg.database_url == f"sqlite:///{tmp_path / 'seer.db'}"
    assert cfg.service_url == DEFAULT_SERVICE_URL and cfg.refresh_s == 3.0


def test_environment_then_arguments() -> None:
    env = {
        DATABASE_URL_ENV: "sqlite:////tmp/a.db",
        SERVICE_URL_ENV: "http://h:1/",
        DASHBOARD_REFRESH_ENV: "5",
    }
    cfg = parse_config([], env=env)
    assert (cfg.database_url, cfg.service_url, cfg.refresh_s) == (
        "sqlite:////tmp/a.db",
        "http://h:1",
        5,
    )
    cfg = parse_config(
        ["--database-url", "postgresql://u@h/db", "--service-url", "https://s", "--refresh-s", "1"],
        env=env,
    )
    assert (cfg.database_url, cfg.service_url, cfg.refresh_s) == (
        "postgresql://u@h/db",
        "https://s",
        1,
    )


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--refresh-s", "0.1"], {}, "refresh_s"),
        (["--service-url", "localhost:8000"], {}, "localhost:8000"),
        (["--database-url", "mysql://x"], {}, "mysql"),
        (["--refresh-s", "soon"], {}, "refresh-s"),
        (["--what"], {}, "--what"),
        ([], {DASHBOARD_REFRESH_ENV: "often"}, DASHBOARD_REFRESH_ENV),
    ],
)
def test_bad_values_are_named(argv: list[str], env: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_config(argv, env=env)
