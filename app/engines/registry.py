"""Engine backends by name -> import path; the heavy module is imported only when chosen."""

from __future__ import annotations

import importlib
from typing import Any

from app.engines.base import ChunkEngine, TextCodec
from app.engines.config import EngineConfig

ENGINE_BACKENDS: dict[str, str] = {
    "vllm": "app.engines.vllm.engine:VllmEngine",
    "fake": "app.engines.fake:FakeEngine",
    "sim": "app.engines.sim.engine:SimEngine",
}

#: Each backend's text codec: a callable ``(EngineConfig) -> TextCodec`` (may block: model files).
ENGINE_CODECS: dict[str, str] = {
    "vllm": "app.engines.tokenizer:Tokenizer.for_engine",
    "fake": "app.engines.fake:FakeCodec",
    "sim": "app.engines.sim.engine:SimCodec",
}


def _load(path: str) -> Any:
    module, _, attrs = path.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def engine_class(name: str) -> type[ChunkEngine]:
    try:
        path = ENGINE_BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown engine backend {name!r}; valid names: {', '.join(sorted(ENGINE_BACKENDS))}"
        ) from None
    cls: type[ChunkEngine] = _load(path)
    return cls


def make_codec(config: EngineConfig) -> TextCodec:
    """The text codec of ``config.backend``'s model (blocking: call from a thread)."""
    engine_class(config.backend)  # validates the name
    codec: TextCodec = _load(ENGINE_CODECS[config.backend])(config)
    return codec


def make_engine(config: EngineConfig, replica_id: str = "replica-0") -> ChunkEngine:
    """Build (not start) the engine named by ``config.backend``."""
    return engine_class(config.backend)(config, replica_id)  # type: ignore[call-arg]
