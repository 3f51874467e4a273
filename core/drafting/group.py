"""One group's draft index: the prompt and every sibling's tokens in one suffix automaton.

Invariant: ``version`` is the number of tokens appended since registration (prompt excluded) and
the append log holds exactly those tokens in order, so replaying ``log[v:]`` onto a copy at
version ``v`` reproduces this index bit for bit (same states, same counts; only the automaton's
wide-state draft cache depends on query history, within its 5% staleness). Every request's text
is prompt + its own appended tokens; its end state is the automaton state of that full text.
Source bits: the prompt is appended as bit 0, request number i (in order of first append, so a
replica replaying the log assigns the same) as bit i + 1; a draft for a request knows which
continuations its own text has shown (``speculate``'s ``own``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.draft import Draft
from core.drafting.mixed import speculate_mixed
from core.drafting.speculate import SpeculationParams, speculate

PROMPT_SOURCE = 1  # source bit of the prompt's appends; requests get 2, 4, 8, ...


class DraftLifecycleError(RuntimeError):
    """A group or request is used out of its lifecycle (unknown, released, duplicated, gap)."""


@dataclass(frozen=True, slots=True)
class GroupMemory:
    """Size of one group's index."""

    group_id: str
    prompt_tokens: int
    appended_tokens: int
    requests: int
    states: int
    transitions: int
    approx_bytes: int


class GroupIndex:
    """Suffix automaton of one group plus each request's end state and the append log."""

    __slots__ = (
        "group_id",
        "prompt",
        "_sam",
        "_prompt_end",
        "_ends",
        "_lengths",
        "_bits",
        "_log_req",
        "_log_tok",
        "own_index",
        "_own",
    )

    def __init__(
        self, group_id: str, prompt_token_ids: Sequence[int], own_index: bool = False
    ) -> None:
        """``own_index``: also keep one automaton per request over its own text (prompt + its
        tokens), which drafts with ``own_weight > 0`` need; costs one more append per token."""
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.group_id = group_id
        self.prompt: tuple[int, ...] = tuple(int(t) for t in prompt_token_ids)
        self._sam = SuffixAutomaton()
        self._prompt_end = self._sam.extend_all(ROOT, self.prompt, PROMPT_SOURCE)
        self._ends: dict[str, int] = {}
        self._lengths: dict[str, int] = {}
        self._bits: dict[str, int] = {}  # request -> its source bit (1 << (i + 1))
        self._log_req: list[str] = []
        self._log_tok: list[int] = []
        self.own_index = own_index
        # request -> (automaton of its own text, end state); "" = the prompt alone
        self._own: dict[str, tuple[SuffixAutomaton, int]] = {}
        if own_index:
            own = SuffixAutomaton()
            self._own[""] = (own, own.extend_all(ROOT, self.prompt))

    @property
    def version(self) -> int:
        return len(self._log_tok)

    @property
    def automaton(self) -> SuffixAutomaton:
        return self._sam

    def request_ids(self) -> list[str]:
        return list(self._ends)

    def num_tokens(self, request_id: str) -> int:
        """Tokens appended for ``request_id`` so far (0 for a request not seen yet)."""
        return self._lengths.get(request_id, 0)

    def add_tokens(self, request_id: str, token_ids: Iterable[int]) -> None:
        """Append a request's newly generated tokens (the first call starts the request).

        All-or-nothing: the tokens are validated before any is appended.
        """
        if not request_id:
            raise ValueError(f"group {self.group_id!r}: request_id must be a non-empty string")
        tokens = list(token_ids)
        for t in tokens:
            if not isinstance(t, int) or t < 0:
                raise ValueError(
                    f"group {self.group_id!r}, request {request_id!r}: token ids must be "
                    f"non-negative ints, got {t!r}"
                )
        if not tokens:
            return  # nothing appended: the request is not started (the log has no trace of it)
        end = self._ends.get(request_id, self._prompt_end)
        bit = self._bit(request_id)
        extend = self._sam.extend
        for t in tokens:
            end = extend(end, t, bit)
        self._log_tok.extend(tokens)
        self._log_req.extend([request_id] * len(tokens))
        self._ends[request_id] = end
        if self.own_index:
            own, own_end = self._own_of(request_id)
            self._own[request_id] = (own, own.extend_all(own_end, tokens))
        self._lengths[request_id] = self._lengths.get(request_id, 0) + len(tokens)

    def add_token(self, request_id: str, token: int) -> None:
        """Fast path of ``add_tokens`` for one token (trusted caller: no token validation)."""
        end = self._ends.get(request_id)
        if end is None:
            if not request_id:
                raise ValueError(f"group {self.group_id!r}: request_id must be non-empty")
            end = self._prompt_end
            self._lengths[request_id] = 0
        bit = self._bits.get(request_id) or self._bit(request_id)
        self._ends[request_id] = self._sam.extend(end, token, bit)
        self._lengths[request_id] += 1
        self._log_tok.append(token)
        self._log_req.append(request_id)
        if self.own_index:
            own, own_end = self._own_of(request_id)
            self._own[request_id] = (own, own.extend(own_end, token))

    def _bit(self, request_id: str) -> int:
        """The request's source bit (the next free one on its first append)."""
        bit = self._bits.get(request_id)
        if bit is None:
            bit = self._bits[request_id] = 1 << (len(self._bits) + 1)
        return bit

    def _own_of(self, request_id: str) -> tuple[SuffixAutomaton, int]:
        """The request's own-text automaton and end state (a fresh prompt-only one if new)."""
        hit = self._own.get(request_id)
        if hit is not None:
            return hit
        own = SuffixAutomaton()
        return own, own.extend_all(ROOT, self.prompt)

    def speculate(self, request_id: str, params: SpeculationParams) -> Draft:
        """Draft for ``request_id`` (a request with no tokens yet drafts from the prompt)."""
        end = self._ends.get(request_id, self._prompt_end)
        if params.own_weight == 0.0:
            # a request with no tokens yet has no own continuation: bit 0 matches none
            return speculate(self._sam, end, params, own=self._bits.get(request_id, 0))
        if not self.own_index:
            raise DraftLifecycleError(
                f"group {self.group_id!r}: own_weight={params.own_weight} needs an index built "
                "with own_index=True"
            )
        own, own_end = self._own.get(request_id) or self._own[""]
        return speculate_mixed(self._sam, end, own, own_end, params)

    def log_since(self, version: int) -> list[tuple[str, list[int]]]:
        """Appends after ``version`` as runs of (request_id, tokens), in append order."""
        if not 0 <= version <= self.version:
            raise DraftLifecycleError(
                f"group {self.group_id!r}: version {version} outside [0, {self.version}]"
            )
        runs: list[tuple[str, list[int]]] = []
        for i in range(version, self.version):
            r = self._log_req[i]
            if runs and runs[-1][0] == r:
                runs[-1][1].append(self._log_tok[i])
            else:
                runs.append((r, [self._log_tok[i]]))
        return runs

    def memory(self) -> GroupMemory:
        sam = self._sam
        log_bytes = 16 * self.version  # two list slots per logged token
        return GroupMemory(
            group_id=self.group_id,
            prompt_tokens=len(self.prompt),
            appended_tokens=self.version,
            requests=len(self._ends),
            states=sam.num_states,
            transitions=sam.num_transitions,
            approx_bytes=sam.approx_bytes()
            + log_bytes
            + sum(own.approx_bytes() for own, _ in self._own.values()),
        )

    def check(self) -> None:
        """Integrity check: automaton invariants, and each request's end state is its text
        (in the group automaton and, with ``own_index``, in its own automaton)."""
        self._sam.check()
        texts: dict[str, list[int]] = {r: list(self.prompt) for r in self._ends}
        for r, t in zip(self._log_req, self._log_tok, strict=True):
            texts[r].append(t)
        for r, text in texts.items():
            state = self._sam.find(text)
            if state != self._ends[r] or self._sam.length(state) != len(text):
                raise AssertionError(
                    f"group {self.group_id!r}: request {r!r} end state {self._ends[r]} is not "
                    f"the state of its {len(text)}-token text ({state})"
                )
            if not self._sam.sources[state] & self._bits[r]:
                raise AssertionError(f"group {self.group_id!r}: request {r!r} source bit missing")
            if self._lengths[r] != len(text) - len(self.prompt):
                raise AssertionError(f"group {self.group_id!r}: request {r!r} length mismatch")
            if self.own_index:
                own, own_end = self._own[r]
                own.check()
                if own.find(text) != own_end or own.count(ROOT) != len(text):
                    raise AssertionError(
                        f"group {self.group_id!r}: request {r!r} own automaton is not its text"
                    )
        if self._sam.count(0) != len(self.prompt) + self.version:
            raise AssertionError(
                f"group {self.group_id!r}: root count {self._sam.count(0)} != tokens "
                f"{len(self.prompt) + self.version}"
            )
