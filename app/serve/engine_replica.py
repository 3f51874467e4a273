"""Engine replica deployment: a thin Serve wrapper around one ``ChunkEngine``."""

from __future__ import annotations

import asyncio

from ray import serve

from app.engines.config import EngineConfig
from app.engines.registry import make_engine
from core.drafting.step_drafter import DraftSettings
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
        await asyncio.wait_for(self.engine.start(), config.start_timeout_s)

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        return await self.engine.run_chunk(request)

    async def abort(self, request_id: str) -> bool:
        return await self.engine.abort(request_id)

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        return await self.engine.configure_speculation(settings)

    async def release_groups(self, group_ids: list[str]) -> int:
        return await self.engine.release_groups(group_ids)

    async def update_weights(self, path: str, version: int) -> int:
        return await self.engine.update_weights(path, version)

    async def check_health(self) -> None:
        """Serve's periodic health check: a dead engine fails it, and Serve restarts us."""
        await self.engine.check_health()

    async def load(self) -> EngineLoad:  # async: on the engine's event loop, not a thread
        await self.engine.check_health()  # a dead engine is not reported as healthy load
        return self.engine.load()
