"""HTTP ingress: validate a rollout, schedule its groups by policy, gather G responses per group.

Invariant: a rollout either returns every group with exactly ``group_size`` finished responses,
or fails as a whole with an HTTP error, after aborting every chunk it still had running. Each
rollout gets its own ``core`` Scheduler (the same class the simulator drives); ``verl`` hands
whole groups round-robin to replicas, the divided policies send chunks routed by load.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from ray import serve

from app.api import GroupResult, Response, RolloutRequest, RolloutResponse, RolloutStats
from app.config import SERVICE_POLICIES, AppConfig
from app.serve.dispatcher import RequestRun, run_scheduled
from core.engine import ChunkRequest, ChunkResult
from core.scheduling.config import SchedulerConfig
from core.scheduling.policies import get_policy
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import GroupSpec, ReplicaSpec

api = FastAPI(title="Seer rollout service", version="0.1.0")


def _unprocessable(field: list[str | int], msg: str) -> HTTPException:
    return HTTPException(status_code=422, detail=[{"loc": ["body", *field], "msg": msg}])


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=100)
@serve.ingress(api)
class Ingress:
    def __init__(self, config: AppConfig, engines: list[Any]) -> None:
        self.config = config
        self.engines = engines
        self._limits: tuple[int, int] | None = None
        self._replica_specs: list[ReplicaSpec] | None = None

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

    async def _scheduler(self, policy: str) -> Scheduler:
        """A fresh scheduler for one rollout, sized from the replicas' engine capacity."""
        if self._replica_specs is None:
            loads = await asyncio.gather(*(e.load.remote() for e in self.engines))
            eng = self.config.engine
            self._replica_specs = [
                ReplicaSpec(
                    replica_id=ld.replica_id,
                    # engines without a KV report (fake) get what their sequences could fill
                    kv_capacity_tokens=ld.kv_capacity_tokens
                    or eng.max_model_len * eng.max_num_seqs,
                    max_running=eng.max_num_seqs,
                )
                for ld in loads
            ]
        # No KV pool between replicas here: moving a long request would recompute its whole
        # context, so the simulator's rebalancing of long requests is off.
        base = SchedulerConfig(chunk_tokens=self.config.chunk_tokens, rebalance_tokens=0)
        plan = get_policy(policy, base)
        return Scheduler(plan.config, self._replica_specs)

    @api.post("/v1/rollouts", response_model=RolloutResponse)
    async def rollouts(self, req: RolloutRequest) -> RolloutResponse:
        t0 = time.perf_counter()
        policy = req.policy or self.config.policy
        if policy not in SERVICE_POLICIES:
            raise _unprocessable(
                ["policy"], f"unknown policy {policy!r}; valid: {', '.join(SERVICE_POLICIES)}"
            )
        prompts = await self._prompt_ids(req)
        rid = uuid.uuid4().hex[:12]
        groups: list[GroupSpec] = []
        runs: dict[str, RequestRun] = {}
        seed = req.sampling.seed
        for gi, prompt in enumerate(prompts):
            gid = f"{rid}-g{gi}"
            ids = tuple(f"{gid}-r{j}" for j in range(req.group_size))
            groups.append(GroupSpec(gid, ids, req.max_tokens, len(prompt)))
            for j, request_id in enumerate(ids):
                sampling = req.sampling
                if seed is not None:  # each response its own seed, reproducibly
                    k = gi * req.group_size + j
                    sampling = sampling.model_copy(update={"seed": seed + 1_000_003 * k})
                runs[request_id] = RequestRun(gid, prompt, req.max_tokens, sampling, req.logprobs)
        scheduler = await self._scheduler(policy)
        await self._run(scheduler, groups, runs)
        ordered = [runs[r] for g in groups for r in g.request_ids]
        texts = await self.engines[0].decode_batch.remote([r.tokens for r in ordered])
        out_groups = []
        for gi, g in enumerate(groups):
            responses = []
            for j, request_id in enumerate(g.request_ids):
                run = runs[request_id]
                assert run.finish is not None  # the scheduler is done: every request finished
                responses.append(
                    Response(
                        index=j,
                        token_ids=run.tokens,
                        text=texts[gi * req.group_size + j],
                        logprobs=run.token_logprobs if req.logprobs else None,
                        finish_reason=run.finish.value,
                        length=len(run.tokens),
                    )
                )
            out_groups.append(
                GroupResult(
                    group_id=g.group_id,
                    prompt_index=gi,
                    prompt_token_ids=prompts[gi],
                    responses=responses,
                )
            )
        elapsed = time.perf_counter() - t0
        out_tokens = sum(len(r.tokens) for r in ordered)
        return RolloutResponse(
            id=rid,
            model=self.config.engine.model,
            policy=policy,
            groups=out_groups,
            stats=RolloutStats(
                elapsed_s=elapsed,
                output_tokens=out_tokens,
                tokens_per_s=out_tokens / max(elapsed, 1e-9),
                requests=len(ordered),
                chunks=sum(r.chunks for r in ordered),
            ),
        )

    async def _run(
        self, scheduler: Scheduler, groups: list[GroupSpec], runs: dict[str, RequestRun]
    ) -> None:
        async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
            return await self.engines[replica].run_chunk.remote(chunk)

        async def abort(replica: int, request_id: str) -> bool:
            return await self.engines[replica].abort.remote(request_id)

        try:
            await asyncio.wait_for(
                run_scheduled(scheduler, groups, runs, run_chunk, abort),
                self.config.request_timeout_s,
            )
        except TimeoutError as exc:
            raise HTTPException(
                status_code=504,
                detail=f"rollout exceeded request_timeout_s={self.config.request_timeout_s}",
            ) from exc
        except Exception as exc:  # an engine replica failed, or the dispatch is stuck
            raise HTTPException(status_code=503, detail=f"rollout failed: {exc!r}") from exc
