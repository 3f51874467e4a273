"""``Tokenizer.max_token_bytes`` (the model's real tokenizer, the tiny model's copy of SmolLM2's):
a text of n bytes is never fewer than ceil(n / max_token_bytes) tokens, so the ingress may refuse
an oversized prompt without tokenizing it. Checked on texts built to need few tokens: each
token's own piece repeated (the longest pieces first), and the recorded rollouts' texts."""

from __future__ import annotations

import math
from pathlib import Path

from app.data import SMOLLM2_T1
from app.engines.tokenizer import Tokenizer
from core.drafting.recorded import load_groups


def test_no_text_has_fewer_tokens_than_the_byte_bound(tiny_model: Path) -> None:
    tok = Tokenizer(tiny_model)
    hf = tok._tok
    ids = sorted(range(len(hf)), key=lambda i: -len(hf.decode([i])))[:200]
    texts = [hf.decode([i]) * 20 for i in ids]
    texts += [
        g.prompt_text + hf.decode(list(o)) for g in load_groups(SMOLLM2_T1) for o in g.outputs[:2]
    ]
    densest = 0.0
    for text in texts:
        n_bytes = len(text.encode())
        n_tokens = len(tok.encode(text, chat=False))
        assert n_tokens >= math.ceil(n_bytes / tok.max_token_bytes), (text[:80], n_tokens)
        densest = max(densest, n_bytes / n_tokens)
    assert densest <= tok.max_token_bytes  # the bound holds, and is not vacuous:
    assert tok.max_token_bytes <= 4 * densest + 4 * 16
