"""Text <-> token ids with the model folder's own tokenizer and chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.engines.config import EngineConfig


class Tokenizer:
    """The model's HF tokenizer (blocking to build: call from a thread in async code)."""

    def __init__(self, model_path: Path) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(model_path)
        # The model's embedding rows, as vLLM counts them (may exceed the tokenizer's length).
        config = json.loads((model_path / "config.json").read_text())
        self.vocab_size = int(config.get("vocab_size") or len(self._tok))
        # Each character of a token's piece stands for at most 4 bytes of text: one byte in
        # byte-level BPE (GPT-2 style), up to a UTF-8 character in SentencePiece pieces (its
        # "\u2581" is one space). Added and special tokens are pieces of their own text.
        pieces = self._tok.convert_ids_to_tokens(list(range(len(self._tok))))
        self.max_token_bytes = 4 * max(len(p) for p in pieces if p is not None)

    @classmethod
    def for_engine(cls, config: EngineConfig) -> Tokenizer:
        from app.model_cache import resolve_model

        return cls(resolve_model(config.model))

    def encode(self, text: str, chat: bool) -> list[int]:
        if chat and getattr(self._tok, "chat_template", None):
            text = self._tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        return str(self._tok.decode(token_ids, skip_special_tokens=True))
