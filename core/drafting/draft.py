"""Draft trees: what a speculation returns, and how a verifier scores it against real tokens.

Invariant: nodes are in creation order and ``parents[i] < i`` (-1 = the request's last real
token), so a node's whole path precedes it; ``probs[i]`` is the estimated probability that the
path root..i is accepted, so it never increases along a path. A single-path draft is the tree
with ``parents == (-1, 0, 1, ...)``. Verification accepts the longest root path whose tokens
equal the real continuation; that is what one verification pass over the tree yields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Draft:
    """Draft tokens for one request as a tree (token ids, parent indices, path probabilities)."""

    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()
    probs: tuple[float, ...] = ()
    match_length: int = 0  # length of the context suffix the draft was continued from

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n or len(self.probs) != n:
            raise ValueError(
                f"tokens/parents/probs lengths differ: {n}/{len(self.parents)}/{len(self.probs)}"
            )
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"parents[{i}]={p} must be in [-1, {i})")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def is_path(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    @property
    def depth(self) -> int:
        depths: list[int] = []
        for p in self.parents:
            depths.append(1 if p < 0 else depths[p] + 1)
        return max(depths, default=0)

    def accepted_length(self, actual: Sequence[int]) -> int:
        """Number of draft tokens accepted when the real continuation is ``actual``."""
        if not self.tokens:
            return 0
        toks = self.tokens
        if self.is_path:
            n = 0
            for a, b in zip(toks, actual, strict=False):
                if a != b:
                    break
                n += 1
            return n
        parents = self.parents
        cur = -1
        n = 0
        limit = len(actual)
        start = 0
        while n < limit:
            want = actual[n]
            nxt = -1
            for i in range(start, len(toks)):
                if parents[i] == cur and toks[i] == want:
                    nxt = i
                    break
            if nxt < 0:
                break
            cur = nxt
            start = nxt + 1
            n += 1
        return n


EMPTY_DRAFT = Draft()
