"""A small in-process fake engine for fast unit tests of everything above the engine.

Invariant: the next token is a pure function of (seed, request context) so a request generated
in chunks equals the same request generated at once; each step sleeps ``step_s`` so concurrent
chunks interleave like continuous batching. Text is one character per token (ids are code
points), so encode/decode round-trip. Real engine behaviour is tested on vLLM, not here.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import time

from app.engines.config import EngineConfig
from app.weights_digest import verified_digest
from core.drafting.shared import SyncBatch, SyncReply
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad, FinishReason

EOS = 2
VOCAB = 512


class FakeCodec:
    """One character per token (ids are code points below ``VOCAB``)."""

    vocab_size = VOCAB
    max_token_bytes = 4  # a character

    def __init__(self, config: EngineConfig | None = None) -> None:
        pass

    def encode(self, text: str, chat: bool) -> list[int]:
        return [min(ord(c), VOCAB - 1) for c in (f"<u>{text}<a>" if chat else text)]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids if t != EOS)


class FakeEngine:
    def __init__(self, config: EngineConfig, replica_id: str = "replica-0") -> None:
        self.config = config
        self.step_s = config.fake_step_s
        self.replica_id = replica_id
        self._started = False
        self._aborted: set[str] = set()
        self._running: set[str] = set()
        self.speculation: DraftSettings = config.speculation.settings
        self.policy_version = 0
        self._weights = ""  # mixed into every token's hash: new weights, new samples

    async def start(self) -> None:
        self._started = True

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def vocab_size(self) -> int:
        return VOCAB

    def encode(self, text: str, chat: bool) -> list[int]:
        return FakeCodec().encode(text, chat)

    def decode(self, token_ids: list[int]) -> str:
        return FakeCodec().decode(token_ids)

    def load(self) -> EngineLoad:
        n = len(self._running)
        c = self.config
        return EngineLoad(
            replica_id=self.replica_id,
            running=n,
            chunks_in_flight=n,
            kv_capacity_tokens=c.max_model_len * c.max_num_seqs,
            max_running=c.max_num_seqs,
            policy_version=self.policy_version,
        )

    def _next(self, context: list[int], seed: int) -> tuple[int, float]:
        key = (seed, context[-8:], len(context), self._weights)
        h = hashlib.blake2b(repr(key).encode(), digest_size=4)
        x = int.from_bytes(h.digest(), "little")
        tok = EOS if x % 97 == 0 else 32 + x % 95
        return tok, -math.log(1 + x % 7)

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        if not self._started:
            raise RuntimeError(f"engine {self.replica_id} is not started; call start() first")
        if request.request_id in self._running:
            raise ValueError(f"request {request.request_id} already has a running chunk")
        budget = request.budget_within(self.max_model_len)
        version = self.policy_version
        self._running.add(request.request_id)
        t0 = time.perf_counter()
        context = [*request.prompt_token_ids, *request.generated_token_ids]
        seed = request.sampling.seed or 0
        tokens: list[int] = []
        logprobs: list[float] = []
        finish = FinishReason.CHUNK
        try:
            while len(tokens) < budget:
                await asyncio.sleep(self.step_s)
                if request.request_id in self._aborted:
                    finish = FinishReason.ABORT
                    break
                tok, lp = self._next(context, seed)
                context.append(tok)
                tokens.append(tok)
                logprobs.append(lp)
                if tok == EOS:
                    finish = FinishReason.STOP
                    break
        finally:
            self._running.discard(request.request_id)
            self._aborted.discard(request.request_id)
        if finish is FinishReason.CHUNK:
            finish = request.budget_end(len(tokens), self.max_model_len)
        return ChunkResult(
            request_id=request.request_id,
            token_ids=tokens,
            logprobs=logprobs if request.logprobs else None,
            finish_reason=finish,
            engine_steps=len(tokens),
            elapsed_s=time.perf_counter() - t0,
            policy_version=version,
        )

    async def check_health(self) -> None:
        return None

    async def abort(self, request_id: str) -> bool:
        if request_id not in self._running:
            return False
        self._aborted.add(request_id)
        return True

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        """Held and reported; the fake engine never drafts."""
        self.speculation = settings
        return settings

    async def release_groups(self, group_ids: list[str]) -> int:
        return 0

    async def draft_sync(self, reply: SyncReply | None) -> SyncBatch | None:
        """The fake engine never drafts: nothing to share."""
        return None

    async def update_weights(self, path: str, version: int, digest: str | None = None) -> str:
        """The fake's "weights" are the checkpoint directory's name (it must exist); its
        digest is the real one of the directory's safetensors (of none: the empty digest)."""
        if not await asyncio.to_thread(os.path.isdir, path):
            raise ValueError(f"{self.replica_id}: weights path {path!r} is not a directory")
        loaded = await asyncio.to_thread(verified_digest, path, digest)
        self._weights = os.path.basename(os.path.normpath(path))
        self.policy_version = version
        return loaded

    async def worker_gpu_ids(self) -> list[str]:
        return []  # no workers: the replica's own GPUs are all there are

    async def shutdown(self) -> None:
        self._started = False
