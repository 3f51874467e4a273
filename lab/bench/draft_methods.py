"""Drafting methods the replay benchmark compares, picked by name from a registry.

Invariant: a method sees a group only through ``append(request, token)`` (a token becomes
visible) and ``draft(request, max_tokens)``; it never sees a token before it was appended, so
the replay protocol alone decides what each request may use. ``grouped*`` methods go through
``DraftStore``, the object the service's draft server runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.draft import EMPTY_DRAFT, Draft
from core.drafting.speculate import SpeculationParams, speculate
from core.drafting.store import DraftStore
from lab.bench.ngram_draft import ngram_draft


class ReplayDrafter(Protocol):
    def append(self, request: int, token: int) -> None: ...

    def draft(self, request: int, max_tokens: int) -> Draft: ...


# (prompt, number of requests, scoring template) -> drafter for one group; the template's
# min_token_prob / backoff / smoothing apply to every suffix method, max_tokens is per call;
# own_weight / own_boost / sibling_discount only to grouped ones (suffix-self has no siblings)
DrafterFactory = Callable[[Sequence[int], int, SpeculationParams], ReplayDrafter]


class NoDrafter:
    def __init__(self, prompt: Sequence[int], num_requests: int, _: SpeculationParams) -> None:
        del prompt, num_requests

    def append(self, request: int, token: int) -> None:
        del request, token

    def draft(self, request: int, max_tokens: int) -> Draft:
        del request, max_tokens
        return EMPTY_DRAFT


class NgramDrafter:
    """vLLM-like prompt lookup on the request's own prompt + output, n from 4 down to 2."""

    def __init__(self, prompt: Sequence[int], num_requests: int, _: SpeculationParams) -> None:
        self._ctx = [list(prompt) for _ in range(num_requests)]

    def append(self, request: int, token: int) -> None:
        self._ctx[request].append(token)

    def draft(self, request: int, max_tokens: int) -> Draft:
        return ngram_draft(self._ctx[request], max_tokens, min_n=2, max_n=4)


class SelfSuffixDrafter:
    """Per-request suffix decoding: the same automaton over the request's own text only."""

    def __init__(
        self, prompt: Sequence[int], num_requests: int, template: SpeculationParams
    ) -> None:
        self._sams = [SuffixAutomaton() for _ in range(num_requests)]
        self._ends = [s.extend_all(ROOT, prompt) for s in self._sams]
        self._template = replace(template, width=1, own_weight=0.0)  # its own text only

    def append(self, request: int, token: int) -> None:
        self._ends[request] = self._sams[request].extend(self._ends[request], token)

    def draft(self, request: int, max_tokens: int) -> Draft:
        params = replace(self._template, max_draft=max_tokens)
        return speculate(self._sams[request], self._ends[request], params)


class GroupedDrafter:
    """The service path: one ``DraftStore`` group fed with every sibling's tokens."""

    GROUP = "replay"

    def __init__(
        self, prompt: Sequence[int], num_requests: int, template: SpeculationParams
    ) -> None:
        self.store = DraftStore(own_index=template.own_weight > 0)
        self.store.register_group(self.GROUP, prompt)
        self._ids = [f"r{i}" for i in range(num_requests)]
        self._t = template
        self._index = self.store.group(self.GROUP)

    def append(self, request: int, token: int) -> None:
        self._index.add_token(self._ids[request], token)

    def draft(self, request: int, max_tokens: int) -> Draft:
        params = replace(self._t, max_draft=max_tokens)
        return self.store.speculate(self.GROUP, self._ids[request], params)


def _grouped(width: int) -> DrafterFactory:
    def make(prompt: Sequence[int], n: int, template: SpeculationParams) -> GroupedDrafter:
        return GroupedDrafter(prompt, n, replace(template, width=width))

    return make


# grouped method -> tree width (1 = single path)
GROUPED_WIDTHS: dict[str, int] = {"grouped": 1, "grouped-tree2": 2, "grouped-tree4": 4}

METHODS: dict[str, DrafterFactory] = {
    "none": NoDrafter,
    "ngram": NgramDrafter,
    "suffix-self": SelfSuffixDrafter,
    **{name: _grouped(width) for name, width in GROUPED_WIDTHS.items()},
}


def method_factory(name: str) -> DrafterFactory:
    """Look up a replay method by name; unknown names raise ValueError listing the valid ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown drafting method {name!r}; valid: {sorted(METHODS)}") from None
