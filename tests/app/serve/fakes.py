"""Shared factories of the serve tests: fake engine links behind ``EngineLinks``, a fake draft
server, a recording ``PoolListener``, service configs and job plans, a running dispatcher, and the
fake-engine Serve app the HTTP tests deploy."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray._raylet

from app.api import ReplicaState, RolloutRequest
from app.config import ServiceConfig
from app.engines.config import EngineConfig
from app.engines.fake import FakeEngine
from app.rollout import JobPlan, expand
from app.serve.scheduler.dispatcher import Dispatcher
from app.serve.scheduler.replica_pool import ReplicaUnavailable
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad, PolicyCheckpoint
from core.events import EventSink

MAX_TOKENS = 120


class FakeLinks:
    """Fake engines behind the EngineLinks protocol; records every chunk and the reserved KV
    of chunks running at once on each replica; ``fail`` decides which calls die."""

    def __init__(self, n: int = 2, step_s: float = 0.0, max_num_seqs: int = 64) -> None:
        cfg = EngineConfig(backend="fake", max_model_len=512, max_num_seqs=max_num_seqs)
        self.engines = [FakeEngine(cfg, f"replica-{i}") for i in range(n)]
        for e in self.engines:
            e.step_s = step_s
        self.replica_ids = [e.replica_id for e in self.engines]
        self.used: list[tuple[int, str, int]] = []  # (replica, request, generated)
        self.context = [0] * n  # prompt + generated + budget of chunks running now
        self.peak = [0] * n
        self.running = [0] * n
        self.peak_running = [0] * n
        self.aborts: list[str] = []
        self.abort_parents: list[object] = []
        self.fail: Callable[[int, ChunkRequest], bool] = lambda i, c: False
        self.down: set[int] = set()
        self.gone: set[int] = set()  # calls wait forever, as in Serve's router for a dead node
        self.released: list[list[str]] = [[] for _ in range(n)]
        self.weight_loads: list[tuple[int, str, str | None]] = []  # (replica, path, digest)
        self.misreads: set[int] = set()  # replicas that load other bytes than the rest
        # what each replica reports it loaded last, as EngineReplica does
        self.checkpoints: list[PolicyCheckpoint | None] = [None] * n

    async def start(self) -> None:
        for e in self.engines:
            await e.start()

    async def run_chunk(self, replica: int, chunk: ChunkRequest) -> ChunkResult:
        self.used.append((replica, chunk.request_id, len(chunk.generated_token_ids)))
        if replica in self.gone:
            await asyncio.Event().wait()
        if replica in self.down or self.fail(replica, chunk):
            await asyncio.sleep(0.001)
            raise ReplicaUnavailable(f"replica-{replica} died")
        need = len(chunk.prompt_token_ids) + len(chunk.generated_token_ids) + chunk.chunk_budget
        self.context[replica] += need
        self.peak[replica] = max(self.peak[replica], self.context[replica])
        self.running[replica] += 1
        self.peak_running[replica] = max(self.peak_running[replica], self.running[replica])
        try:
            return await self.engines[replica].run_chunk(chunk)
        finally:
            self.context[replica] -= need
            self.running[replica] -= 1

    async def abort(self, replica: int, request_id: str, generated: int) -> bool:
        self.aborts.append(request_id)
        self.abort_parents.append(ray._raylet.async_task_id.get())  # see app.serve.detached
        return await self.engines[replica].abort(request_id)

    async def load(self, replica: int) -> EngineLoad:
        if replica in self.gone:
            await asyncio.Event().wait()
        if replica in self.down:
            raise ReplicaUnavailable(f"replica-{replica} is restarting")
        load = self.engines[replica].load()
        return load.model_copy(update={"policy_checkpoint": self.checkpoints[replica]})

    async def abort_all(self, replica: int) -> int:
        if replica in self.down:
            raise ReplicaUnavailable(f"replica-{replica} is restarting")
        engine = self.engines[replica]
        return sum([await engine.abort(rid) for rid in list(engine._running)])

    async def configure_speculation(self, replica: int, settings: DraftSettings) -> DraftSettings:
        if replica in self.down:
            raise ReplicaUnavailable(f"replica-{replica} is restarting")
        return await self.engines[replica].configure_speculation(settings)

    async def release_groups(self, replica: int, group_ids: list[str]) -> int:
        self.released[replica] += group_ids
        return await self.engines[replica].release_groups(group_ids)

    async def update_weights(
        self, replica: int, path: str, version: int, digest: str | None
    ) -> str:
        if replica in self.down:
            raise ReplicaUnavailable(f"replica-{replica} is restarting")
        self.weight_loads.append((replica, path, digest))
        if replica in self.misreads:  # this replica's storage shows it other files
            return "0" * 64
        loaded = await self.engines[replica].update_weights(path, version, digest)
        self.checkpoints[replica] = PolicyCheckpoint(path=path, digest=loaded, loaded_at=1.0)
        return loaded


def service_config(**kw: Any) -> ServiceConfig:
    base: dict[str, Any] = {
        "chunk_tokens": 16,
        "health_period_s": 0.05,
        "engine": {"backend": "fake", "max_model_len": 512, "max_num_seqs": 64},
    }
    base.update(kw)
    return ServiceConfig.model_validate(base)


def job_plan(
    job: str, prompts: int = 3, g: int = 4, max_tokens: int = MAX_TOKENS, **kw: Any
) -> JobPlan:
    req = RolloutRequest.model_validate(
        {"prompts": ["x"] * prompts, "group_size": g, "max_tokens": max_tokens, **kw}
    )
    return expand(job, req, [[40 + i, 41, 42, 43] for i in range(prompts)])


class FakeDrafts:
    """The draft server as the dispatcher sees it: releases and resets, recorded."""

    def __init__(self) -> None:
        self.released: list[str] = []
        self.resets = 0

    async def release(self, group_ids: list[str]) -> int:
        self.released += group_ids
        return len(group_ids)

    async def reset(self) -> int:
        self.resets += 1
        return 0


async def run_dispatcher(
    links: FakeLinks,
    config: ServiceConfig,
    policy: str,
    body: Callable[[Dispatcher], Awaitable[None]],
    sink: EventSink | None = None,
    drafts: FakeDrafts | None = None,
) -> Dispatcher:
    await links.start()
    d = Dispatcher(links, config, config.resolve_policy(policy), sink=sink, drafts=drafts)
    d.start()
    await d.probes.probe_all()  # replicas join before the first job
    try:
        await asyncio.wait_for(body(d), 30)
    finally:
        await d.close()
    return d


class RecordingListener:
    """Records what the pool tells the dispatcher."""

    def __init__(self) -> None:
        self.changes: list[tuple[int, ReplicaState]] = []
        self.unreachable: list[tuple[int, str]] = []

    def replica_changed(self, i: int, state: ReplicaState) -> None:
        self.changes.append((i, state))

    def replica_unreachable(self, i: int, why: str) -> None:
        self.unreachable.append((i, why))


#: The fake-engine Serve app of the HTTP tests (test_service.py, test_trainer_api.py, ...).
FAKE_APP: dict[str, Any] = {
    "num_replicas": 2,
    "replica_num_cpus": 0.25,
    "chunk_tokens": 8,
    "policy": "divided",
    "health_period_s": 0.5,
    "replica_call_timeout_s": 2,
    "limits": {
        "max_open_jobs": 3,
        "max_job_requests": 512,
        "retry_after_s": 3,
        "max_body_bytes": 1_048_576,
        "body_read_timeout_s": 2,
    },
    "operator_token": "t0ken",
    "weights_root": tempfile.gettempdir(),  # the trainer tests' checkpoints are under it
    # ~100 tokens per response (EOS with p=1/97 per token) at 20 ms per token
    "engine": {"backend": "fake", "max_model_len": 512, "fake_step_s": 0.02},
}


def checkpoint(folder: Path, value: float = 1.0) -> Path:
    """A minimal checkpoint in ``folder`` (made if missing): ``config.json`` and one
    ``model.safetensors`` holding one float32 tensor ``w`` = [value], what a weight update
    needs to be accepted; the fake and sim engines load nothing from it."""
    import json
    import struct

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"architectures": ["FakeForCausalLM"]}')
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    data = struct.pack("<Q", len(header)) + header + struct.pack("<f", value)
    (folder / "model.safetensors").write_bytes(data)
    return folder
