"""Engine replica deployment: a thin Serve wrapper around one ``ChunkEngine``."""

from __future__ import annotations

from ray import serve

from app.engines.config import EngineConfig
from app.engines.registry import make_engine
from core.engine import ChunkRequest, ChunkResult, EngineLoad


@serve.deployment(
    ray_actor_options={"num_cpus": 0.5},
    max_ongoing_requests=1000,
    health_check_period_s=10,
    health_check_timeout_s=60,
)
class EngineReplica:
    async def __init__(self, config: EngineConfig, replica_id: str) -> None:  # type: ignore[misc]
        self.engine = make_engine(config, replica_id)
        await self.engine.start()

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        return await self.engine.run_chunk(request)

    async def abort(self, request_id: str) -> bool:
        return await self.engine.abort(request_id)

    def load(self) -> EngineLoad:
        return self.engine.load()

    def limits(self) -> tuple[int, int]:
        """(max_model_len, vocab_size)."""
        return self.engine.max_model_len, self.engine.vocab_size

    def encode_batch(self, texts: list[str], chat: bool) -> list[list[int]]:
        return [self.engine.encode(t, chat) for t in texts]

    def decode_batch(self, token_ids: list[list[int]]) -> list[str]:
        return [self.engine.decode(t) for t in token_ids]
