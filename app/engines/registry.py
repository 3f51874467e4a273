"""Engine backends by name -> import path; the heavy module is imported only when chosen."""

from __future__ import annotations

import importlib

from app.engines.base import ChunkEngine
from app.engines.config import EngineConfig

ENGINE_BACKENDS: dict[str, str] = {
    "vllm": "app.engines.vllm_engine:VllmEngine",
    "fake": "app.engines.fake:FakeEngine",
    "sim": "app.engines.sim:SimEngine",
}


def engine_class(name: str) -> type[ChunkEngine]:
    try:
        path = ENGINE_BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown engine backend {name!r}; valid names: {', '.join(sorted(ENGINE_BACKENDS))}"
        ) from None
    module, _, attr = path.partition(":")
    cls: type[ChunkEngine] = getattr(importlib.import_module(module), attr)
    return cls


def make_engine(config: EngineConfig, replica_id: str = "replica-0") -> ChunkEngine:
    """Build (not start) the engine named by ``config.backend``."""
    return engine_class(config.backend)(config, replica_id)  # type: ignore[call-arg]
