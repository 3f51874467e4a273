"""How a prompt is named across RL iterations (light: no SQLAlchemy)."""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence


def prompt_hash(token_ids: Sequence[int]) -> str:
    """``sha256:`` + the first 32 hex digits of SHA-256 over the token ids as signed 64-bit
    little-endian integers (stable across processes, machines and versions: it keys the
    recorded history)."""
    data = array("q", token_ids)
    if sys.byteorder == "big":  # pragma: no cover
        data.byteswap()
    return "sha256:" + hashlib.sha256(data.tobytes()).hexdigest()[:32]


def prompt_key(prompt_id: str | None, token_ids: Sequence[int]) -> str:
    """The prior's key of a prompt: the trainer's prompt id when given, else its hash."""
    return prompt_id if prompt_id else prompt_hash(token_ids)
