"""The workload a ``sim`` engine replays, and the prompt <-> group mapping its clients use.

Invariant: response j of a prompt is a pure function of (``SimConfig``, prompt, j): where it
stops and its token at every position, so a response generated in any number of chunks equals
the same response generated at once. A prompt of the workload (``group_prompt(config, g)``)
stops response j at the workload's true length ``lengths[g][j mod G]`` (EOS last, finish
``stop``); a length at the workload's cap, or a recorded ``length`` sample, never stops by
itself (it ends with ``length`` at the client's max_tokens). Any other prompt takes the
lengths of the workload group its hash picks (same distribution, siblings stay correlated)
and draws its own tokens.

Iterations (``SimConfig.epoch`` = e >= 1): the prompts are those of epoch 0, the lengths those
of ``core.sim.workload.epoch_workload(first, e, seed)`` (each group's latent length kept, fresh
responses drawn around it: what successive RL iterations of the same prompts look like to a
length prior), and the drawn tokens change with e; epoch 0 is exactly the workload above.

Tokens: ids 0..2 are special (EOS = 2, as in SmolLM2), id 3 + b is byte b (the codec), drawn
tokens are printable ASCII bytes, recorded tokens are replayed as they are.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.engines.config import SimConfig
from core.sim.cost import CostModel, with_ranks
from core.sim.workload import Workload, generate, get_cost, get_preset, load_recorded

EOS = 2
BYTE0 = 3  # id of byte 0
_PRINTABLE0 = BYTE0 + 32  # drawn tokens are bytes 32..126
_HEADER = re.compile(r"\[seer-sim (\S+) seed=(\d+) scale=(\S+) group=(\d+)\]")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def encode_text(text: str) -> list[int]:
    """UTF-8 bytes -> ids (reversible)."""
    return [BYTE0 + b for b in text.encode()]


def decode_ids(ids: Sequence[int]) -> str:
    """Ids -> text: bytes decoded as UTF-8, special ids skipped, other ids (recorded tokens of
    a real vocabulary) written as ``<id>``."""
    out: list[str] = []
    run = bytearray()
    for i in ids:
        if BYTE0 <= i < BYTE0 + 256:
            run.append(i - BYTE0)
            continue
        if run:
            out.append(run.decode("utf-8", errors="replace"))
            run.clear()
        if i > BYTE0:
            out.append(f"<{i}>")
    if run:
        out.append(run.decode("utf-8", errors="replace"))
    return "".join(out)


def _key(*parts: object) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True, slots=True)
class Track:
    """One response: ``stop`` = its length including the final EOS (None: it never stops by
    itself), tokens drawn from ``key`` after the ``recorded`` ones."""

    key: int
    stop: int | None
    recorded: tuple[int, ...] = ()

    def tokens(self, start: int, end: int, logprobs: bool = True) -> tuple[list[int], list[float]]:
        """Token ids and logprobs (empty unless ``logprobs``) of positions [start, end)."""
        pos = np.arange(start, end, dtype=np.uint64)
        h = _mix(pos * _GOLDEN + np.uint64(self.key))
        ids = (h % np.uint64(95) + np.uint64(_PRINTABLE0)).astype(np.int64)
        lps: list[float] = []
        if logprobs:
            lps = (
                -((h >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.float64) / 16384.0
            ).tolist()
        n_rec = len(self.recorded)
        if start < n_rec:
            upto = min(end, n_rec)
            ids[: upto - start] = self.recorded[start:upto]
        if self.stop is not None and max(start, n_rec) <= self.stop - 1 < end:
            ids[self.stop - 1 - start] = EOS
        return ids.tolist(), lps


@dataclass(frozen=True, slots=True)
class SimWorkload:
    """The concrete workload of one ``SimConfig`` (``work``: the lengths ``seer simulate``
    draws for the same workload, scale and seed) and its instance cost model."""

    config: SimConfig
    work: Workload
    cost: CostModel
    recorded_prompts: list[list[int]] | None = None
    recorded_outputs: list[list[tuple[int, ...]]] | None = None
    recorded_stopped: list[list[bool]] | None = None
    by_prompt: dict[tuple[int, ...], int] = dataclasses.field(default_factory=dict)
    _prompts: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # drawn, cached

    @property
    def groups(self) -> int:
        return self.work.spec.groups

    @property
    def group_size(self) -> int:
        return self.work.spec.group_size

    @property
    def max_tokens(self) -> int:
        return self.work.spec.max_tokens

    @property
    def max_model_len(self) -> int:
        """Context an engine needs to run every response of the workload to its cap."""
        return max(len(self.prompt(g)) for g in range(self.groups)) + self.max_tokens

    def prompt(self, g: int) -> list[int]:
        """Prompt token ids of group ``g``."""
        if not 0 <= g < self.groups:
            raise ValueError(f"group={g} outside [0, {self.groups - 1}]")
        if self.recorded_prompts is not None:
            return list(self.recorded_prompts[g])
        return list(self._prompt(g))

    def _prompt(self, g: int) -> list[int]:
        cached = self._prompts.get(g)
        if cached is None:
            c = self.config
            head = f"[seer-sim {c.workload} seed={c.seed} scale={c.scale:g} group={g}] "
            ids = encode_text(head)
            fill = max(0, self.work.prompt_tokens[g] - len(ids))
            cached = ids + Track(_key("prompt", c.seed, g), None).tokens(0, fill, False)[0]
            self._prompts[g] = cached
        return cached

    def group_of(self, prompt: Sequence[int]) -> int | None:
        """The workload group whose prompt this is, None for any other prompt."""
        if self.recorded_prompts is not None:
            return self.by_prompt.get(tuple(prompt))
        if len(prompt) < 8 or prompt[0] != BYTE0 + ord("["):
            return None
        head = list(prompt[:96])
        close = BYTE0 + ord("]")
        if close not in head:
            return None
        m = _HEADER.fullmatch(decode_ids(head[: head.index(close) + 1]))
        if m is None:
            return None
        g = int(m.group(4))
        if g >= self.groups or list(prompt) != self._prompt(g):
            return None
        return g

    def track(self, prompt: Sequence[int], response_index: int) -> Track:
        """Stop point and tokens of response ``response_index`` of ``prompt``."""
        G = self.group_size
        seed = self.config.seed
        g = self.group_of(prompt)
        if g is None:
            digest = hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes()).hexdigest()
            row = _key("group", seed, digest) % self.groups
            key = _key("response", seed, digest, response_index, *self._epoch)
            return Track(key, self._stop(row, response_index % G))
        j = response_index % G
        key = _key("response", seed, g, response_index, *self._epoch)
        rec = () if self.recorded_outputs is None else self.recorded_outputs[g][j]
        return Track(key, self._stop(g, j), rec)

    @property
    def _epoch(self) -> tuple[int, ...]:
        """Extra key part of drawn tokens: none in epoch 0 (its tokens stay as they were)."""
        return (self.config.epoch,) if self.config.epoch else ()

    def _stop(self, g: int, j: int) -> int | None:
        length = self.work.lengths[g][j]
        if self.recorded_stopped is not None:
            return length if self.recorded_stopped[g][j] else None
        return length if length < self.max_tokens else None


def _cost(config: SimConfig) -> CostModel:
    """The instance's cost model, its data-parallel ranks pooled: a replica is one engine
    with one KV (``core.sim.cost.with_ranks`` to 1)."""
    preset = config.cost or (
        "qwen2-vl" if config.workload.startswith("replay:") else config.workload
    )
    return with_ranks(get_cost(preset), 1)


def _load_replay(config: SimConfig) -> SimWorkload:
    path = Path(config.workload[len("replay:") :])
    work = load_recorded(path)
    opener = gzip.open if path.suffix == ".gz" else open
    prompts: list[list[int]] = []
    outputs: list[list[tuple[int, ...]]] = []
    stopped: list[list[bool]] = []
    with opener(path, "rt") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            prompts.append([int(x) for x in rec["prompt_token_ids"]])
            outputs.append([tuple(int(x) for x in s["output_token_ids"]) for s in rec["samples"]])
            stopped.append([s.get("finish_reason") == "stop" for s in rec["samples"]])
    top = max(max(max(p) for p in prompts), max(max(o, default=0) for g in outputs for o in g))
    if top >= config.vocab_size:
        raise ValueError(
            f"sim.vocab_size={config.vocab_size} is too small for {path.name}: it has token id "
            f"{top}; set sim.vocab_size > {top}"
        )
    by_prompt: dict[tuple[int, ...], int] = {}
    for g, p in enumerate(prompts):
        by_prompt.setdefault(tuple(p), g)  # a repeated prompt maps to its first group
    return SimWorkload(config, work, _cost(config), prompts, outputs, stopped, by_prompt)


@functools.lru_cache(maxsize=8)
def sim_workload(config: SimConfig) -> SimWorkload:
    """The workload of ``config`` (cached: engines of one process share it). Blocking (reads
    the file or draws the lengths, ~0.1 s): call it from a thread in async code."""
    if config.workload.startswith("replay:"):
        return _load_replay(config)
    from core.sim.workload import epoch_workload

    spec = get_preset(config.workload).spec
    if config.scale != 1.0:
        spec = spec.scaled(config.scale)
    work = epoch_workload(generate(spec, config.seed), config.epoch, config.seed)
    return SimWorkload(config, work, _cost(config))


def group_prompt(config: SimConfig, group: int) -> list[int]:
    """Prompt token ids of workload group ``group`` (send them as token ids, with
    ``group_size`` = the workload's G and ``max_tokens`` = its cap, to replay the workload)."""
    return sim_workload(config).prompt(group)
