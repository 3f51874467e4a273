"""The grouped drafter inside vLLM: a ``custom_class`` proposer plus a worker extension.

vLLM 0.32 builds the proposer from ``speculative_config={"model": PROPOSER, ...}`` inside the
model runner and calls ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` once per
step with one row per batch row but no request ids. ``SeerWorkerExtension.seer_bind`` (one
``collective_rpc`` after start) hands the runner to the proposer, which then reads each row's
request id and the ``extra_args["seer"]`` that ``VllmEngine`` puts into every chunk's sampling
params (chunk id, group id, request id, group prompt length, probe flag). All drafting logic is
``core.drafting.StepDrafter``; this module only translates vLLM's batch into its rows.
Rows without ``extra_args["seer"]`` (warm-up requests) never draft.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.drafting.shared import SyncClient, SyncReply
from core.drafting.step_drafter import DraftSettings, RowView, StepDrafter

#: import path vLLM loads the proposer from (``speculative_config.model``)
PROPOSER = "app.engines.vllm.grouped_proposer.GroupedProposer"
#: ``worker_extension_cls`` that exposes the proposer to ``collective_rpc``
WORKER_EXTENSION = "app.engines.vllm.grouped_proposer.SeerWorkerExtension"
#: key of the per-request settings in ``SamplingParams.extra_args``
EXTRA_KEY = "seer"


def seer_extra_args(
    chunk_id: str, group_id: str, request_id: str, prompt_len: int, is_probe: bool
) -> dict:
    """``extra_args`` of one chunk, read back by ``GroupedProposer`` in the engine process.

    ``chunk_id`` is the id the chunk was submitted under (vLLM appends a random suffix to it
    internally); draft counts are taken back under it."""
    seer = {"c": chunk_id, "g": group_id, "r": request_id, "p": prompt_len, "probe": is_probe}
    return {EXTRA_KEY: seer}


class GroupedProposer:
    """vLLM ``custom_class`` proposer running ``StepDrafter`` over the runner's batch."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.drafter = StepDrafter(max_engine_draft=self.k)
        self.runner: Any = None

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """The CPU runner calls this unconditionally; there is no draft model to load."""

    def bind(self, runner: Any) -> None:
        self.runner = runner

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: Any,
        token_ids_cpu: Any,
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in sampled_token_ids]
        runner = self.runner
        if runner is None:
            return out
        batch = runner.input_batch
        req_ids = batch.req_ids
        requests = runner.requests
        rows: list[RowView] = []
        where: list[int] = []
        for i, sampled in enumerate(sampled_token_ids):
            if not sampled:
                continue  # a partial prefill: nothing decoded this step
            rid = req_ids[i]
            state = requests.get(rid)
            sp = state.sampling_params if state is not None else None
            if sp is None:
                continue  # pooling requests have no sampling params
            extra = (sp.extra_args or {}).get(EXTRA_KEY)
            if not extra:
                continue
            n = int(num_tokens_no_spec[i])
            # room: the request's own max_tokens (vLLM would drop drafts past it) and context
            out_len = n - state.num_prompt_tokens
            room = min(sp.max_tokens - out_len, self.max_model_len - n) - 1
            rows.append(
                RowView(
                    row_id=extra["c"],
                    group_id=extra["g"],
                    request_id=extra["r"],
                    prompt_len=int(extra["p"]),
                    text=token_ids_cpu[i, :n],
                    max_draft=max(0, min(self.k, room)),
                    is_probe=bool(extra.get("probe", False)),
                )
            )
            where.append(i)
        if not rows:
            return out
        for i, draft in zip(where, self.drafter.step(rows), strict=True):
            out[i] = draft
        return out


def _tensors(folder: Path) -> Any:
    """Every tensor of the ``*.safetensors`` files in ``folder``, as (name, tensor) on the CPU:
    the weights iterator of vLLM's ``reload_weights``."""
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt", device="cpu") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, fh.get_tensor(name)


def retie_head(model: Any) -> bool:
    """Point a tied output head at the reloaded embeddings again and redo its load-time
    processing; True when the model ties them. vLLM's ``reload_weights`` re-processes only the
    modules whose weights it loaded, and a tied head has none of its own in the checkpoint: on
    CPU its prepacked GEMM (built from the embeddings at start) kept sampling with the old
    weights while the embeddings were new."""
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    method = getattr(head, "quant_method", None)
    if not tied or head is None or embed is None or method is None:
        return False
    head.weight = embed.weight
    method.process_weights_after_loading(head)
    return True


class SeerWorkerExtension:
    """Methods vLLM mixes into its worker, reachable through ``engine.collective_rpc``."""

    model_runner: Any

    def _seer_drafter(self) -> StepDrafter | None:
        d = getattr(self.model_runner, "drafter", None)
        return d.drafter if isinstance(d, GroupedProposer) else None

    def seer_bind(self) -> bool:
        """Hand the runner to the proposer; False when the engine runs another proposer."""
        runner = self.model_runner
        d = getattr(runner, "drafter", None)
        if not isinstance(d, GroupedProposer):
            return False
        d.bind(runner)
        return True

    def seer_gpu_ids(self) -> list[str]:
        """The GPUs Ray gave this worker (a Ray actor under executor ray); [] outside Ray."""
        import ray

        return [str(g) for g in ray.get_gpu_ids()] if ray.is_initialized() else []

    def seer_fix_cpu_sampler(self) -> bool:
        """Install the vLLM-cpu rejection-sampler fix in this worker (see cpu_fixes)."""
        from app.engines.vllm.cpu_fixes import fix_expand_kernel

        return fix_expand_kernel()

    def seer_take_counts(self, row_ids: list[str]) -> dict[str, tuple[int, int]]:
        drafter = self._seer_drafter()
        if drafter is None:
            return {}
        return {r: (c.drafted, c.accepted) for r, c in drafter.take_counts(row_ids).items()}

    def seer_configure(self, settings: dict) -> dict:
        drafter = self._seer_drafter()
        if drafter is None:
            return {}
        drafter.configure(DraftSettings(**settings))
        return asdict(drafter.settings)

    def seer_draft_sync(self, replica_id: str, reply: dict | None) -> dict | None:
        """Apply the draft server's reply to the last batch (None: that exchange failed) and
        return the next batch (None: nothing to share); plain dicts cross vLLM's RPC. The
        first call starts sharing (an engine without a draft server never queues tokens)."""
        drafter = self._seer_drafter()
        if drafter is None:
            return None
        if drafter.sync is None:
            drafter.sync = SyncClient(replica_id)
            for gid in drafter.store.group_ids():
                drafter.sync.watch(gid)
        batch = drafter.sync_step(None if reply is None else SyncReply.model_validate(reply))
        return None if batch is None else batch.model_dump()

    def seer_release_groups(self, group_ids: list[str]) -> int:
        drafter = self._seer_drafter()
        return 0 if drafter is None else drafter.release_groups(group_ids)

    def seer_load_weights(self, path: str, expected: str | None = None) -> dict:
        """Load the checkpoint in directory ``path`` into this worker's model in place (vLLM's
        ``reload_weights``) and drop every group's draft index (it holds the old policy's
        tokens); returns ``{"digest", "loaded"}``: the checkpoint's digest
        (``app.weights_digest``) as this worker read it, and whether it loaded it. With
        ``expected``, a checkpoint of another digest is not loaded (the worker keeps the
        weights it has; ``loaded`` false: a plain dict crosses vLLM's RPC, an exception only
        as its text)."""
        import tempfile

        from app.weights_digest import DigestMismatch, verified_copy

        if not sorted(Path(path).glob("*.safetensors")):
            raise ValueError(f"weights path {path!r} holds no *.safetensors file")
        # the digest is of the bytes loaded: a private copy, verified, then read into the model
        with tempfile.TemporaryDirectory(prefix="seer-weights-") as private:
            try:
                digest = verified_copy(path, expected, private)
            except DigestMismatch as exc:
                return {"digest": exc.read, "loaded": False}
            self.reload_weights(weights_iterator=_tensors(Path(private)))  # type: ignore[attr-defined]
        retie_head(self.model_runner.get_model())
        drafter = self._seer_drafter()
        if drafter is not None:
            if drafter.sync is not None:
                drafter.sync.clear()
            drafter.release_groups(list(drafter.store.group_ids()))
        return {"digest": digest, "loaded": True}

    def seer_snapshot(self) -> dict:
        drafter = self._seer_drafter()
        return {} if drafter is None else asdict(drafter.snapshot())
