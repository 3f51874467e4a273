"""The chunk engine protocol every backend implements.

A replica runs many chunks at once (continuous batching inside the engine); ``run_chunk`` is
awaited once per chunk and returns when that chunk ends (stop, length, chunk budget, abort).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from app.engines.config import EngineConfig
from core.drafting.shared import SyncBatch, SyncReply
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad


class EngineDead(RuntimeError):
    """The engine cannot serve any more (its core process died); the replica must restart.
    The scheduler treats it like an unreachable replica: the chunk is re-dispatched."""


class TextCodec(Protocol):
    """Text <-> token ids of a backend's model; the ingress holds its own (no engine call)."""

    vocab_size: int
    #: The most UTF-8 bytes of text one token stands for (an upper bound): a text of n bytes
    #: is at least ceil(n / max_token_bytes) tokens, known without tokenizing it.
    max_token_bytes: int

    def encode(self, text: str, chat: bool) -> list[int]:
        """Tokenize ``text``; with ``chat`` wrap it as one user turn of the chat template."""

    def decode(self, token_ids: list[int]) -> str:
        """Detokenize (special tokens skipped)."""


@runtime_checkable
class ChunkEngine(Protocol):
    config: EngineConfig
    policy_version: int  # of the weights it runs (stamped on every ChunkResult)

    async def start(self) -> None:
        """Load the model; idempotent."""

    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        """Generate one chunk of one request; the result carries the ``policy_version`` the
        engine had when the chunk started."""

    async def abort(self, request_id: str) -> bool:
        """Abort the running chunk of ``request_id``; False when none is running."""

    def load(self) -> EngineLoad:
        """Current load, for replica selection."""

    async def check_health(self) -> None:
        """Raise ``EngineDead`` when the engine cannot serve (Serve then restarts it)."""

    @property
    def max_model_len(self) -> int:
        """Context limit (prompt + generated tokens)."""

    @property
    def vocab_size(self) -> int:
        """Token ids must lie in [0, vocab_size)."""

    def encode(self, text: str, chat: bool) -> list[int]:
        """Tokenize ``text``; with ``chat`` wrap it as one user turn of the chat template."""

    def decode(self, token_ids: list[int]) -> str:
        """Detokenize (special tokens skipped)."""

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        """Apply grouped-drafting settings live (ValueError when the engine cannot draft with
        them); returns what now runs."""

    async def release_groups(self, group_ids: list[str]) -> int:
        """Forget finished groups' drafting state; returns how many were held."""

    async def draft_sync(self, reply: SyncReply | None) -> SyncBatch | None:
        """One exchange of group texts with the draft server (``core.drafting.shared``):
        apply ``reply``, the server's answer to the last batch this returned (None: that
        exchange failed and its tokens are sent again, or there was none), and return the next
        batch (None: nothing to share now). The engine replica's sync loop drives it."""

    async def update_weights(self, path: str, version: int, digest: str | None = None) -> str:
        """Load the policy weights in checkpoint directory ``path`` (``*.safetensors``) as
        ``version`` between steps, dropping what depends on the old ones (prefix cache, group
        drafting state); ValueError naming the path when it holds no usable weights, or when
        ``digest`` is given and the checkpoint's (``app.weights_digest``) is another (then
        nothing is loaded). Returns the digest of what was loaded."""

    async def worker_gpu_ids(self) -> list[str]:
        """GPUs held by the engine's workers outside the replica's process (vLLM's Ray workers
        under ``executor: ray``); [] when the replica holds them itself or runs on CPU."""

    async def shutdown(self) -> None:
        """Free the engine."""
