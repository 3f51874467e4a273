"""Store settings: default URL resolution, supported backends, password redaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.env import data_dir
from app.store.config import StoreConfig, default_url, redact


def test_default_url_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEER_DATABASE_URL", raising=False)
    monkeypatch.delenv("SEER_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "seer"
    monkeypatch.setenv("SEER_DATA_DIR", str(tmp_path / "d"))
    assert default_url() == f"sqlite:///{tmp_path / 'd' / 'seer.db'}"
    monkeypatch.setenv("SEER_DATABASE_URL", "postgresql://u@h/db")
    assert StoreConfig().url() == "postgresql://u@h/db"
    assert StoreConfig(database_url="sqlite:///x.db").url() == "sqlite:///x.db"


def test_unsupported_backend_is_named() -> None:
    with pytest.raises(ValidationError, match="backend 'mysql' not supported"):
        StoreConfig(database_url="mysql://u:pw@h/db")
    with pytest.raises(ValidationError, match="prior_limit"):
        StoreConfig(prior_limit=0)


def test_redact() -> None:
    assert redact("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_prompt_keys() -> None:
    from app.store.keys import prompt_hash, prompt_key

    h = prompt_hash([1, 2, 3])
    assert h == prompt_hash([1, 2, 3]) != prompt_hash([1, 2, 4])
    assert h.startswith("sha256:") and len(h) == 7 + 32
    # fixed value: the hash must not change between versions (it keys recorded history)
    assert (
        h
        == "sha256:"
        + __import__("hashlib")
        .sha256((1).to_bytes(8, "little") + (2).to_bytes(8, "little") + (3).to_bytes(8, "little"))
        .hexdigest()[:32]
    )
    assert prompt_key("p-7", [1]) == "p-7" and prompt_key(None, [1, 2, 3]) == h
