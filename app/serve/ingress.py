"""HTTP ingress: validate a rollout, dispatch its groups by policy, gather G responses per group.

Invariant: a rollout either returns every group with exactly ``group_size`` finished responses,
or fails as a whole with an HTTP error, after aborting every chunk it still had running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from ray import serve

from app.api import GroupResult, Response, RolloutRequest, RolloutResponse, RolloutStats
from app.config import AppConfig
from core.engine import ChunkRequest, ChunkResult
from core.scheduling.verl import verl_assign

api = FastAPI(title="Seer rollout service", version="0.1.0")


def _unprocessable(field: list[str | int], msg: str) -> HTTPException:
    return HTTPException(status_code=422, detail=[{"loc": ["body", *field], "msg": msg}])


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=100)
@serve.ingress(api)
class Ingress:
    def __init__(self, config: AppConfig, engines: list[Any]) -> None:
        self.config = config
        self.engines = engines
        self._next_replica = 0
        self._limits: tuple[int, int] | None = None

    async def _model_limits(self) -> tuple[int, int]:
        if self._limits is None:
            self._limits = await self.engines[0].limits.remote()
        return self._limits

    @api.get("/healthz")
    async def healthz(self) -> dict[str, Any]:
        try:
            loads = await asyncio.wait_for(
                asyncio.gather(*(e.load.remote() for e in self.engines)), timeout=10
            )
        except Exception as exc:  # noqa: BLE001 - any replica failure means unhealthy
            raise HTTPException(
                status_code=503, detail=f"engine replica unhealthy: {exc!r}"
            ) from exc
        return {
            "status": "ok",
            "policy": self.config.policy,
            "replicas": [ld.model_dump() for ld in loads],
        }

    async def _prompt_ids(self, req: RolloutRequest) -> list[list[int]]:
        max_len, vocab = await self._model_limits()
        if req.max_tokens >= max_len:
            raise _unprocessable(
                ["max_tokens"],
                f"max_tokens={req.max_tokens} must be below the model context of {max_len} tokens",
            )
        texts = [(i, p) for i, p in enumerate(req.prompts) if isinstance(p, str)]
        for i, p in enumerate(req.prompts):
            if len(p) == 0:
                raise _unprocessable(["prompts", i], "prompt is empty")
            if isinstance(p, list):
                bad = [t for t in p if not 0 <= t < vocab]
                if bad:
                    raise _unprocessable(
                        ["prompts", i], f"token ids {bad[:5]} outside the vocabulary [0, {vocab})"
                    )
        encoded = (
            await self.engines[0].encode_batch.remote([p for _, p in texts], req.chat_template)
            if texts
            else []
        )
        ids: list[list[int]] = [p if isinstance(p, list) else [] for p in req.prompts]
        for (i, _), e in zip(texts, encoded, strict=True):
            ids[i] = e
        for i, p in enumerate(ids):
            if len(p) + req.max_tokens > max_len:
                raise _unprocessable(
                    ["prompts", i],
                    f"prompt of {len(p)} tokens + max_tokens={req.max_tokens} "
                    f"exceeds the model context of {max_len} tokens",
                )
        return ids

    @api.post("/v1/rollouts", response_model=RolloutResponse)
    async def rollouts(self, req: RolloutRequest) -> RolloutResponse:
        t0 = time.perf_counter()
        prompts = await self._prompt_ids(req)
        rid = uuid.uuid4().hex[:12]
        group_ids = [f"{rid}-g{i}" for i in range(len(prompts))]
        assignments = verl_assign(group_ids, len(self.engines), start=self._next_replica)
        self._next_replica = (self._next_replica + len(group_ids)) % len(self.engines)
        seed = req.sampling.seed
        chunks: list[tuple[int, ChunkRequest]] = []
        for gi, a in enumerate(assignments):
            for j in range(req.group_size):
                sampling = (
                    req.sampling
                    if seed is None
                    else req.sampling.model_copy(
                        update={"seed": seed + 1_000_003 * (gi * req.group_size + j)}
                    )
                )
                chunks.append(
                    (
                        a.replica,
                        ChunkRequest(
                            request_id=f"{a.group_id}-r{j}",
                            group_id=a.group_id,
                            prompt_token_ids=prompts[gi],
                            max_new_tokens=req.max_tokens,
                            max_tokens=req.max_tokens,
                            sampling=sampling,
                            logprobs=req.logprobs,
                        ),
                    )
                )
        results = await self._run_all(chunks)
        texts = await self.engines[0].decode_batch.remote([r.token_ids for r in results])
        groups = []
        for gi, gid in enumerate(group_ids):
            base = gi * req.group_size
            groups.append(
                GroupResult(
                    group_id=gid,
                    prompt_index=gi,
                    prompt_token_ids=prompts[gi],
                    responses=[
                        Response(
                            index=j,
                            token_ids=results[base + j].token_ids,
                            text=texts[base + j],
                            logprobs=results[base + j].logprobs,
                            finish_reason=results[base + j].finish_reason.value,
                            length=len(results[base + j].token_ids),
                        )
                        for j in range(req.group_size)
                    ],
                )
            )
        elapsed = time.perf_counter() - t0
        out_tokens = sum(len(r.token_ids) for r in results)
        return RolloutResponse(
            id=rid,
            model=self.config.engine.model,
            policy=self.config.policy,
            groups=groups,
            stats=RolloutStats(
                elapsed_s=elapsed,
                output_tokens=out_tokens,
                tokens_per_s=out_tokens / max(elapsed, 1e-9),
                requests=len(results),
            ),
        )

    async def _run_all(self, chunks: list[tuple[int, ChunkRequest]]) -> list[ChunkResult]:
        """Run every chunk; on any failure or timeout abort the rest and fail the rollout."""
        tasks = [asyncio.ensure_future(self._run_one(r, c)) for r, c in chunks]
        try:
            return await asyncio.wait_for(asyncio.gather(*tasks), self.config.request_timeout_s)
        except BaseException as exc:  # incl. CancelledError when the client disconnects
            for t in tasks:
                t.cancel()
            await asyncio.shield(
                asyncio.gather(
                    *(self.engines[r].abort.remote(c.request_id) for r, c in chunks),
                    return_exceptions=True,
                )
            )
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, TimeoutError):
                raise HTTPException(
                    status_code=504,
                    detail=(f"rollout exceeded request_timeout_s={self.config.request_timeout_s}"),
                ) from exc
            raise HTTPException(status_code=503, detail=f"engine replica failed: {exc!r}") from exc

    async def _run_one(self, replica: int, chunk: ChunkRequest) -> ChunkResult:
        return await self.engines[replica].run_chunk.remote(chunk)
