"""Brute-force reference matcher over a group's texts (prompt, and prompt + each output)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest


class BruteGroup:
    def __init__(self, prompt: Sequence[int]) -> None:
        self.prompt = list(prompt)
        self.outs: dict[str, list[int]] = {}

    def add(self, request: str, tokens: Sequence[int]) -> None:
        self.outs.setdefault(request, []).extend(tokens)

    def text(self, request: str) -> list[int]:
        return self.prompt + self.outs.get(request, [])

    def _ends(self) -> list[tuple[list[int], int]]:
        """Every counted (text, end index): prompt positions once, output positions per request."""
        res = [(self.prompt, j) for j in range(len(self.prompt))]
        for r in self.outs:
            t = self.text(r)
            res.extend((t, j) for j in range(len(self.prompt), len(t)))
        return res

    def count(self, w: Sequence[int]) -> int:
        w = list(w)
        n = len(w)
        if n == 0:
            return len(self._ends())
        return sum(1 for t, j in self._ends() if j + 1 >= n and t[j + 1 - n : j + 1] == w)

    def count_in(self, text: Sequence[int], start: int, w: Sequence[int]) -> int:
        """Occurrences of ``w`` in ``text`` ending at a position >= ``start``."""
        n = len(w)
        return sum(
            1
            for j in range(max(start, n - 1), len(text))
            if list(text[j + 1 - n : j + 1]) == list(w)
        )

    def continuations(self, w: Sequence[int]) -> Counter[int]:
        """Counts of ``w + [c]`` for every token c that follows ``w`` somewhere."""
        alphabet = set(self.prompt).union(*self.outs.values())
        c: Counter[int] = Counter()
        for tok in alphabet:
            n = self.count([*w, tok])
            if n:
                c[tok] = n
        return c

    def match_length(self, request: str) -> int:
        """Longest suffix of the request's text that occurs with a continuation somewhere."""
        text = self.text(request)
        for n in range(len(text), 0, -1):
            if self.continuations(text[len(text) - n :]):
                return n
        return 0


@pytest.fixture(scope="session")
def brute() -> type[BruteGroup]:
    """The brute-force reference matcher class (conftest: tests run with importlib mode)."""
    return BruteGroup
