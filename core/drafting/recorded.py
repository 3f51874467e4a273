"""Recorded group rollouts (gzip JSONL, one group per line) as typed, validated objects.

Invariant: a loaded group has a non-empty prompt and at least one sample, and every token id is
a non-negative int; the file format is the one in data/rollouts/README.md.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RecordedGroup:
    group_id: str
    prompt: tuple[int, ...]
    outputs: tuple[tuple[int, ...], ...]
    prompt_text: str = ""  # the prompt before the chat template, when the file has it

    @property
    def num_tokens(self) -> int:
        """Prompt plus all output tokens."""
        return len(self.prompt) + sum(len(o) for o in self.outputs)


def _tokens(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(t, int) and t >= 0 for t in value):
        raise ValueError(f"{where}: expected a list of non-negative token ids")
    return tuple(value)


def parse_group(obj: object, where: str = "group") -> RecordedGroup:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    gid = obj.get("group_id")
    if not isinstance(gid, str) or not gid:
        raise ValueError(f"{where}: group_id must be a non-empty string, got {gid!r}")
    prompt = _tokens(obj.get("prompt_token_ids"), f"{where} ({gid}) prompt_token_ids")
    if not prompt:
        raise ValueError(f"{where} ({gid}): prompt_token_ids is empty")
    samples = obj.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ValueError(f"{where} ({gid}): samples must be a non-empty list")
    outputs = tuple(
        _tokens(
            s.get("output_token_ids") if isinstance(s, dict) else None,
            f"{where} ({gid}) samples[{i}].output_token_ids",
        )
        for i, s in enumerate(samples)
    )
    text = obj.get("prompt")
    return RecordedGroup(gid, prompt, outputs, text if isinstance(text, str) else "")


def load_groups(path: str | Path) -> list[RecordedGroup]:
    """Read a recorded-rollouts file (``.jsonl.gz`` or plain ``.jsonl``)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"recorded rollouts file not found: {p}")
    opener = gzip.open if p.suffix == ".gz" else open
    groups: list[RecordedGroup] = []
    with opener(p, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{lineno}: not JSON ({exc.msg})") from exc
            groups.append(parse_group(obj, f"{p}:{lineno}"))
    if not groups:
        raise ValueError(f"{p}: no groups")
    ids = [g.group_id for g in groups]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{p}: duplicate group ids")
    return groups
