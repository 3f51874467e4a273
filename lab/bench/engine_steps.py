"""Step times of the service's vLLM engine, measured one step at a time: batch x context x drafts.

``python -m lab.bench.engine_steps [--config serve_config.yaml] [--engines N] [--batches 1,2,4,8,16]
[--contexts 64,256,768] [--drafts 0,8] [--steps 16] [--out FILE] [--json]``

Invariant: the engine is built as a replica builds it (``engine_kwargs`` of the config's engine,
on CPU), but with vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so
that each ``LLMEngine.step()`` is timed alone and the requests it ran are read from vLLM's
scheduler around it (``StepSample``: decoding batch, their context tokens, the draft tokens they
verified, the prompt tokens computed). A grid point adds ``batch`` requests of ``context`` prompt
tokens, distinct per request (no prefix-cache hits), that ignore EOS, so each decodes ``steps``
tokens. Drafts > 0 run on a second engine that speculates with vLLM's n-gram proposer
(``num_speculative_tokens`` = drafts) on prompts of a repeated pattern at temperature 0, so that
it finds drafts; a sample records the drafts its step verified, not the grid's number. Points
whose requests would not fit the KV cache, ``max_num_seqs`` or ``max_model_len`` are skipped
(and reported). With ``engines`` = N > 1, N processes measure the same grid at the same time, as
the service's N replicas share the machine's cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.calibration.step_fit import StepKind, StepSample

# One grid point's requests use this share of the KV cache at most (vLLM preempts at 100%).
KV_HEADROOM = 0.9


@dataclass(frozen=True, slots=True)
class Grid:
    """The points to measure; every value >= 1 except drafts (>= 0); ``steps`` >= 2."""

    batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    contexts: tuple[int, ...] = (64, 256, 768)
    drafts: tuple[int, ...] = (0, 8)
    steps: int = 16

    def __post_init__(self) -> None:
        for name in ("batches", "contexts"):
            vals = getattr(self, name)
            if not vals or min(vals) < 1:
                raise ValueError(f"{name}={vals!r}: need values >= 1")
        if not self.drafts or min(self.drafts) < 0 or max(self.drafts) > 16:
            raise ValueError(f"drafts={self.drafts!r}: need values in 0..16")
        if self.steps < 2:
            raise ValueError(f"steps={self.steps} < 2")


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one engine measured: its samples, the KV capacity vLLM gave it (tokens) and the
    grid points it skipped, as ``batch x context x drafts: why``."""

    samples: list[StepSample]
    kv_capacity_tokens: int
    skipped: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "skipped": self.skipped,
            "samples": [dataclasses.asdict(s) for s in self.samples],
        }

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Measurement:
        return Measurement(
            [StepSample(**s) for s in doc["samples"]],
            int(doc["kv_capacity_tokens"]),
            list(doc["skipped"]),
        )


def _build(engine_config: Any) -> tuple[Any, int]:
    """An in-process ``LLMEngine`` built from the replica's engine kwargs; its KV tokens."""
    from app.engines.vllm.engine import engine_kwargs
    from app.env import apply_engine_env
    from app.model_cache import resolve_model

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    apply_engine_env(True, engine_config.kv_cache_gib, engine_config.cpu_threads)
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    path = resolve_model(engine_config.model)
    kwargs = engine_kwargs(engine_config, path, cpu=True)
    kwargs.pop("worker_extension_cls", None)  # the service's RPCs are not stepped here
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    cache = engine.vllm_config.cache_config
    return engine, int(cache.num_gpu_blocks or 0) * int(cache.block_size)


def _scheduler(engine: Any) -> Any:
    return engine.engine_core.engine_core.scheduler


def _prompt(rng: random.Random, context: int, vocab: int, repeat: bool) -> list[int]:
    if not repeat:
        return [rng.randrange(3, vocab) for _ in range(context)]
    pattern = [rng.randrange(3, vocab) for _ in range(4)]
    return (pattern * (context // 4 + 1))[:context]


def _run_point(
    engine: Any, batch: int, context: int, steps: int, drafting: bool, rng: random.Random,
    vocab: int,
) -> list[StepSample]:  # fmt: skip
    """Add the point's requests, step the engine until they finish, one sample per step."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(
        max_tokens=steps,
        ignore_eos=True,
        temperature=0.0 if drafting else 1.0,
        detokenize=False,
        seed=rng.randrange(2**31),
    )
    tag = f"{batch}x{context}x{int(drafting)}-{rng.randrange(2**31)}"
    for i in range(batch):
        prompt = TokensPrompt(prompt_token_ids=_prompt(rng, context, vocab, drafting))
        engine.add_request(f"{tag}-{i}", prompt, params)
    sched = _scheduler(engine)
    out: list[StepSample] = []
    while engine.has_unfinished_requests():
        reqs = list(sched.running) + list(sched.waiting)
        before = {id(r): r.num_computed_tokens for r in reqs}
        decoding = [r for r in sched.running if r.num_computed_tokens >= r.num_prompt_tokens]
        context_tokens = sum(r.num_computed_tokens for r in decoding)
        draft_tokens = sum(len(r.spec_token_ids) for r in decoding)
        t0 = time.perf_counter()
        engine.step()
        seconds = time.perf_counter() - t0
        prefill = sum(
            min(r.num_computed_tokens, r.num_prompt_tokens) - before[id(r)]
            for r in reqs
            if before[id(r)] < r.num_prompt_tokens
        )
        if not decoding and prefill <= 0:
            continue  # nothing ran (a request still waiting for its turn)
        kind: StepKind = "decode" if prefill <= 0 else ("prefill" if not decoding else "mixed")
        out.append(
            StepSample(
                kind, len(decoding), context_tokens, draft_tokens, max(prefill, 0), seconds
            )  # fmt: skip
        )
    return out


def measure(
    engine_config: Any, grid: Grid, seed: int = 0, say: Callable[[str], None] = print
) -> Measurement:
    """Measure ``grid`` on one in-process engine per speculation setting (see the module
    invariant); blocking (minutes)."""
    from app.engines.config import SpeculationConfig

    rng = random.Random(seed)
    samples: list[StepSample] = []
    skipped: list[str] = []
    kv_tokens = 0
    for drafts in grid.drafts:
        spec = (
            SpeculationConfig(method="ngram", num_speculative_tokens=drafts)
            if drafts
            else SpeculationConfig(method="none")
        )
        cfg = engine_config.model_copy(update={"speculation": spec})
        engine, kv = _build(cfg)
        kv_tokens = kv_tokens or kv
        try:
            vocab = int(engine.model_config.get_vocab_size())
            _run_point(engine, 2, 16, 4, drafts > 0, rng, vocab)  # warm-up, not kept
            for batch in grid.batches:
                for context in grid.contexts:
                    name = f"{batch} x {context} x {drafts}"
                    need = context + grid.steps + drafts
                    if batch > cfg.max_num_seqs:
                        skipped.append(f"{name}: batch > max_num_seqs {cfg.max_num_seqs}")
                    elif need > cfg.max_model_len:
                        skipped.append(f"{name}: {need} tokens > max_model_len")
                    elif batch * need > KV_HEADROOM * kv:
                        skipped.append(f"{name}: {batch * need} tokens > {KV_HEADROOM} x KV {kv}")
                    else:
                        say(f"measuring batch x context x drafts = {name}")
                        samples += _run_point(engine, batch, context, grid.steps, drafts > 0,
                                              rng, vocab)  # fmt: skip
        finally:
            del engine
    return Measurement(samples, kv_tokens, skipped)


def measure_engines(
    config_path: Path, grid: Grid, engines: int, say: Callable[[str], None] = print,
    timeout_s: float = 3600,
) -> list[Measurement]:  # fmt: skip
    """``engines`` processes measuring ``grid`` at the same time (each its own engine)."""
    with tempfile.TemporaryDirectory(prefix="seer-steps-") as tmp:
        procs = []
        for i in range(engines):
            out = Path(tmp) / f"engine-{i}.json"
            cmd = [sys.executable, "-m", "lab.bench.engine_steps", "--config", str(config_path),
                   "--engines", "1", "--seed", str(i), "--out", str(out),
                   *_grid_args(grid)]  # fmt: skip
            env = {**os.environ, "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
            procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL), out))
        say(f"{engines} engine(s) measuring {grid} ...")
        deadline = time.monotonic() + timeout_s
        for p, _ in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q, _ in procs:
                    q.kill()
                raise RuntimeError(
                    f"step measurement did not finish within {timeout_s:g} s"
                ) from None
        bad = [p.returncode for p, _ in procs if p.returncode != 0]
        if bad:
            raise RuntimeError(f"step measurement failed (exit codes {bad}; see stderr)")
        return [Measurement.from_json(json.loads(out.read_text())) for _, out in procs]


def _grid_args(grid: Grid) -> list[str]:
    return [
        "--batches", ",".join(map(str, grid.batches)),
        "--contexts", ",".join(map(str, grid.contexts)),
        "--drafts", ",".join(map(str, grid.drafts)),
        "--steps", str(grid.steps),
    ]  # fmt: skip


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: need comma-separated integers") from None


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=Path("serve_config.yaml"))
    ap.add_argument("--engines", type=int, default=1, help="engines measuring at once (>= 1)")
    d = Grid()
    ap.add_argument("--batches", type=_ints, default=d.batches)
    ap.add_argument("--contexts", type=_ints, default=d.contexts)
    ap.add_argument("--drafts", type=_ints, default=d.drafts)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the measurement(s) as JSON here")
    p = ap.parse_args(argv)
    try:
        grid = Grid(p.batches, p.contexts, p.drafts, p.steps)
        if p.engines < 1:
            raise ValueError(f"engines={p.engines} < 1")
    except ValueError as exc:
        ap.error(str(exc))
    from app.commands.serve import load_serve_file

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if p.engines == 1:
        engine = load_serve_file(p.config, {}).config.engine
        doc: Any = measure(engine, grid, p.seed, say).to_json()
    else:
        doc = [m.to_json() for m in measure_engines(p.config, grid, p.engines, say)]
    text = json.dumps(doc)
    if p.out:
        p.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
