"""Engine replica deployment: a thin Serve wrapper around one ``ChunkEngine``.

With a draft server, the replica runs one sync loop: while chunks that speculate run it exchanges
group texts every ``sync_period_s`` (``engine.draft_sync``; the period bounds the staleness of
the siblings' text its drafts see), each exchange bounded by ``call_timeout_s``; once none runs
and one more exchange has sent the last one's tokens it sleeps until one starts (at most
``_IDLE_WAKE_S``, then it flushes what the engine queued). Chunks of a policy that does not
speculate never start it: nobody would draft from the exchange. A failed exchange is logged and
counted, its tokens sent again with the next one (retried every period while it has any), and
the engine goes on drafting from its own data.

Aborts name a chunk by its request and offset (tokens generated before it). An abort can reach
the replica before its chunk does (both travel through Serve, on a loaded machine in either
order): the chunk then ends at once as aborted, with no tokens, when it comes. An abort of a
chunk that already ended is a no-op. Both kinds are remembered, bounded (``_MAX_REMEMBERED``,
oldest forgotten first).

Its load report names the checkpoint it last loaded (``EngineLoad.policy_checkpoint``): a
scheduler that restarted after a weight update adopts it rather than asking for the update again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, ConfigDict
from ray import serve

from app.config import DraftServerConfig
from app.engines.config import EngineConfig
from app.engines.registry import make_engine
from app.serve import logs
from app.serve.options import HOT_PATH_LOGGING
from core.drafting.shared import SyncReply
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad, FinishReason, PolicyCheckpoint

log = logging.getLogger("seer.engine_replica")
_MAX_REMEMBERED = 4096  # chunks remembered as ended, and aborts of chunks not here yet
_IDLE_WAKE_S = 60.0  # bound on the idle wait (it ends at once when a chunk starts)


@serve.deployment(
    ray_actor_options={"num_cpus": 0.5},
    max_ongoing_requests=1000,
    health_check_period_s=10,
    health_check_timeout_s=60,
    logging_config=HOT_PATH_LOGGING,
)
class EngineReplica:
    async def __init__(  # type: ignore[misc]
        self,
        config: EngineConfig,
        replica_id: str,
        draft_server: Any = None,
        sharing: DraftServerConfig | None = None,
    ) -> None:
        logs.configure()
        self.engine = make_engine(config, replica_id)
        await asyncio.wait_for(self.engine.start(), config.start_timeout_s)
        self.placement = await asyncio.to_thread(_where, await self.engine.worker_gpu_ids())
        self._speculating = 0  # running chunks that draft
        self._flush = False  # a speculating chunk ended: one more exchange sends its last tokens
        self._active = asyncio.Event()
        self.exchanges = 0
        self.exchange_failures = 0
        self._running: dict[str, int] = {}  # request id -> offset of its chunk running here
        self._ended: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._early_aborts: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._sync_task: asyncio.Task[None] | None = None
        self._checkpoint: PolicyCheckpoint | None = None  # of the weights it loaded last
        if draft_server is not None:
            self._sync_task = asyncio.create_task(
                self._sync_forever(draft_server, sharing or DraftServerConfig())
            )

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        key = (request.request_id, len(request.generated_token_ids))
        if key in self._early_aborts:
            del self._early_aborts[key]
            log.info("chunk %s@%d was aborted before it arrived", *key)
            _remember(self._ended, key)
            return ChunkResult(
                request_id=request.request_id,
                token_ids=[],
                logprobs=[] if request.logprobs else None,
                finish_reason=FinishReason.ABORT,
                policy_version=self.engine.policy_version,
            )
        self._running[request.request_id] = key[1]
        try:
            if not request.speculate:
                return await self.engine.run_chunk(request)
            self._speculating += 1
            self._active.set()
            try:
                return await self.engine.run_chunk(request)
            finally:
                self._speculating -= 1
                self._flush = True
        finally:
            if self._running.get(request.request_id) == key[1]:
                del self._running[request.request_id]
            _remember(self._ended, key)

    async def _sync_forever(self, server: Any, cfg: DraftServerConfig) -> None:
        reply: SyncReply | None = None
        while True:
            self._flush = False
            retry = False
            try:
                batch = await self.engine.draft_sync(reply)
            except Exception as exc:  # noqa: BLE001 - a dead engine fails its health check
                log.warning("draft sync step failed on the engine: %r", exc)
                batch = None
            reply = None
            if batch is not None:
                try:
                    reply = await asyncio.wait_for(
                        server.exchange.remote(batch), cfg.call_timeout_s
                    )
                    self.exchanges += 1
                except Exception as exc:  # noqa: BLE001 - drafts fall back to local data
                    self.exchange_failures += 1
                    retry = bool(batch.pushes)
                    log.debug("draft server exchange failed: %r", exc)
            if self._speculating == 0 and not self._flush and not retry:
                self._active.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._active.wait(), _IDLE_WAKE_S)
            else:
                await asyncio.sleep(cfg.sync_period_s)

    async def abort(self, request_id: str, generated: int) -> bool:
        """Abort the chunk of ``request_id`` that continues at ``generated`` tokens; True when it
        was running here. One that has not arrived yet ends aborted when it does."""
        key = (request_id, generated)
        if self._running.get(request_id) == generated:
            return await self.engine.abort(request_id)
        if key not in self._ended:
            _remember(self._early_aborts, key)
        return False

    async def abort_all(self) -> int:
        """Abort every chunk running here; returns how many were. A scheduler's first call to
        this replica: what runs then was sent by one that is gone, for callers that are gone."""
        aborted = await asyncio.gather(*(self.engine.abort(rid) for rid in list(self._running)))
        return sum(aborted)

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        return await self.engine.configure_speculation(settings)

    async def release_groups(self, group_ids: list[str]) -> int:
        return await self.engine.release_groups(group_ids)

    async def update_weights(self, path: str, version: int, digest: str | None = None) -> str:
        loaded = await self.engine.update_weights(path, version, digest)
        self._checkpoint = PolicyCheckpoint(path=path, digest=loaded, loaded_at=time.time())
        return loaded

    async def check_health(self) -> None:
        """Serve's periodic health check: a dead engine fails it, and Serve restarts us."""
        await self.engine.check_health()

    async def load(self) -> EngineLoad:  # async: on the engine's event loop, not a thread
        await self.engine.check_health()  # a dead engine is not reported as healthy load
        return self.engine.load().model_copy(
            update={
                "draft_exchanges": self.exchanges,
                "draft_exchange_failures": self.exchange_failures,
                "policy_checkpoint": self._checkpoint,
                "node_id": self.placement.node_id,
                "gpu_ids": self.placement.gpu_ids,
            }
        )

    async def where(self) -> ReplicaPlacement:
        """Where this replica runs: node, GPUs, its placement group's bundles and their nodes."""
        return self.placement


def _remember(seen: OrderedDict[tuple[str, int], None], key: tuple[str, int]) -> None:
    seen[key] = None
    seen.move_to_end(key)
    while len(seen) > _MAX_REMEMBERED:
        seen.popitem(last=False)


class ReplicaPlacement(BaseModel):
    """Where one engine replica was placed (``app.serve.replica.placement`` says by which rule)."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    gpu_ids: list[str]  # this process's GPUs, else those of the engine's workers (executor ray)
    cuda_visible_devices: str | None  # as the engine sees it
    bundles: list[dict[str, float]]  # its placement group ([] for a CPU replica)
    bundle_nodes: list[str]  # the node of each bundle


def _where(worker_gpu_ids: list[str]) -> ReplicaPlacement:
    """This replica's placement (blocking: a GCS look-up of its placement group). Outside Ray
    (a replica built in a unit test) no node: Ray's calls below would start a local Ray of
    their own (auto-init), from this thread, beside whatever the process runs."""
    import ray
    from ray.util.placement_group import get_current_placement_group, placement_group_table

    if not ray.is_initialized():
        return ReplicaPlacement(
            node_id="",
            gpu_ids=worker_gpu_ids,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            bundles=[],
            bundle_nodes=[],
        )
    own = [str(g) for g in ray.get_gpu_ids()]
    pg = get_current_placement_group()
    bundles: list[dict[str, float]] = []
    nodes: list[str] = []
    if pg is not None:
        table = placement_group_table(pg)
        bundles = [dict(table["bundles"][i]) for i in sorted(table["bundles"])]
        nodes = [table["bundles_to_node_id"][i] for i in sorted(table["bundles_to_node_id"])]
    return ReplicaPlacement(
        node_id=ray.get_runtime_context().get_node_id(),
        gpu_ids=own or worker_gpu_ids,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        bundles=bundles,
        bundle_nodes=nodes,
    )
