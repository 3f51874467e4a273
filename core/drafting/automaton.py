"""Generalized suffix automaton over the token sequences of one group, with occurrence counts.

Invariant: after any interleaving of ``extend`` calls, the automaton is the minimal DFA of all
substrings of the group's sequences, where a sequence is a path in a trie rooted at the empty
string (every request's sequence starts at the prompt's end state, so the prompt is shared), and
``count(state)`` is the number of (sequence, end position) pairs at which a string of the state
ends, counting a shared trie prefix once per append (the prompt once, each request's own tokens
once per request). ``sources(state)`` is the OR of the ``source`` bits of those appends (which
texts a string of the state ends in: a request's own text, or only siblings'), so it never has a
bit its suffix-link parent lacks. A sequence's current full text is always the *longest* string
of its ``last`` state, so splitting states never invalidates a ``last`` handle held by a caller.

Work per appended token: amortized O(1) transitions for the extension, plus one step per state
on the suffix-link chain of the new end (the suffixes with distinct occurrence sets; a handful
on natural text, longer inside long verbatim repetitions).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

ROOT = 0
# States with more distinct continuations than this (short contexts) serve their top
# ``TOP_CACHED`` continuations from a cache, refreshed once the state's count has grown by
# ``REFRESH_FRACTION``: a draft step then costs O(TOP_CACHED), not O(vocabulary seen).
WIDE_STATE = 8
TOP_CACHED = 16
REFRESH_FRACTION = 0.05


class SuffixAutomaton:
    """States are ints; ``ROOT`` (0) is the empty string. Not thread-safe; callers serialize."""

    __slots__ = ("_next", "_link", "_len", "_cnt", "_src", "_top")

    def __init__(self) -> None:
        self._next: list[dict[int, int]] = [{}]
        self._link: list[int] = [-1]
        self._len: list[int] = [0]
        self._cnt: list[int] = [0]
        self._src: list[int] = [0]  # OR of the source bits of the appends counted in _cnt
        # wide state -> (its count when cached, top (count, token) pairs, total, distinct)
        self._top: dict[int, tuple[int, list[tuple[int, int]], int, int]] = {}

    # ---- building -------------------------------------------------------------------------
    def extend(self, last: int, token: int, source: int = 1) -> int:
        """Append ``token`` to the text that ends at state ``last``; return the new end state.

        ``source``: bit(s) naming the text appended to (a caller's choice, e.g. one bit per
        request), ORed into ``sources`` of every state the new end position is counted in.
        """
        nxt = self._next
        link = self._link
        ln = self._len
        cnt = self._cnt
        src = self._src
        q = nxt[last].get(token)
        if q is not None:
            cur = q if ln[q] == ln[last] + 1 else self._split(last, q, token)
        else:
            cur = len(ln)
            nxt.append({})
            ln.append(ln[last] + 1)
            link.append(ROOT)
            cnt.append(0)
            src.append(0)
            p = last
            while p != -1 and token not in nxt[p]:
                nxt[p][token] = cur
                p = link[p]
            if p != -1:
                q = nxt[p][token]
                link[cur] = q if ln[p] + 1 == ln[q] else self._split(p, q, token)
        v = cur
        # a state with the bit has it on its whole suffix-link chain (the invariant): from
        # there on only the counts change
        while v > ROOT and not src[v] & source:
            cnt[v] += 1
            src[v] |= source
            v = link[v]
        while v > ROOT:
            cnt[v] += 1
            v = link[v]
        cnt[ROOT] += 1
        src[ROOT] |= source
        return cur

    def _split(self, p: int, q: int, token: int) -> int:
        """Clone ``q`` so that the strings of length <= len(p)+1 get their own state."""
        nxt = self._next
        clone = len(self._len)
        nxt.append(dict(nxt[q]))
        self._len.append(self._len[p] + 1)
        self._link.append(self._link[q])
        self._cnt.append(self._cnt[q])
        self._src.append(self._src[q])
        while p != -1 and nxt[p].get(token) == q:
            nxt[p][token] = clone
            p = self._link[p]
        self._link[q] = clone
        return clone

    def extend_all(self, last: int, tokens: Sequence[int], source: int = 1) -> int:
        for t in tokens:
            last = self.extend(last, t, source)
        return last

    # ---- queries --------------------------------------------------------------------------
    def transition(self, state: int, token: int) -> int | None:
        return self._next[state].get(token)

    def children(self, state: int) -> dict[int, int]:
        """token -> next state (read-only view; do not mutate)."""
        return self._next[state]

    def continuations(self, state: int) -> tuple[list[tuple[int, int]], int, int]:
        """(count, token) continuations of ``state``, their total count and distinct tokens.

        Narrow states return every continuation, exact and unordered. Wide states return their
        top ``TOP_CACHED`` best first, with counts up to ``REFRESH_FRACTION`` stale.
        """
        kids = self._next[state]
        cnt = self._cnt
        if len(kids) <= WIDE_STATE:
            pairs = [(cnt[u], t) for t, u in kids.items()]
            total = 0
            for c, _ in pairs:
                total += c
            return pairs, total, len(pairs)
        now = cnt[state]
        hit = self._top.get(state)
        if hit is not None and now <= hit[0] * (1.0 + REFRESH_FRACTION):
            return hit[1], hit[2], hit[3]
        pairs = [(cnt[u], t) for t, u in kids.items()]
        total = 0
        for c, _ in pairs:
            total += c
        pairs.sort(reverse=True)
        entry = (now, pairs[:TOP_CACHED], total, len(pairs))
        self._top[state] = entry
        return entry[1], entry[2], entry[3]

    def link(self, state: int) -> int:
        return self._link[state]

    def length(self, state: int) -> int:
        """Length of the longest string of ``state``."""
        return self._len[state]

    @property
    def transitions(self) -> list[dict[int, int]]:
        """token -> next state of every state, indexed by state (read-only: do not mutate)."""
        return self._next

    @property
    def links(self) -> list[int]:
        """Suffix link of every state, indexed by state (read-only: do not mutate)."""
        return self._link

    @property
    def counts(self) -> list[int]:
        """Occurrence count of every state, indexed by state (read-only: do not mutate)."""
        return self._cnt

    @property
    def sources(self) -> list[int]:
        """Source bits of every state, indexed by state (read-only: do not mutate)."""
        return self._src

    def count(self, state: int) -> int:
        """Number of (sequence, end position) occurrences of the strings of ``state``."""
        return self._cnt[state]

    def find(self, tokens: Sequence[int]) -> int | None:
        """State of the substring ``tokens``, or None when it does not occur."""
        v = ROOT
        for t in tokens:
            u = self._next[v].get(t)
            if u is None:
                return None
            v = u
        return v

    def occurrences(self, tokens: Sequence[int]) -> int:
        v = self.find(tokens)
        return 0 if v is None else self._cnt[v]

    @property
    def num_states(self) -> int:
        return len(self._len)

    @property
    def num_transitions(self) -> int:
        return sum(len(d) for d in self._next)

    def approx_bytes(self) -> int:
        """CPython footprint: the transition dicts as sized by the runtime, five list slots and
        about two boxed ints per state, and the draft cache. O(states): for accounting, not for
        hot paths."""
        dicts = sum(sys.getsizeof(d) for d in self._next)
        cached = len(self._top) * (TOP_CACHED * 72 + 200)
        return dicts + self.num_states * (5 * 8 + 2 * 28) + cached

    def check(self) -> None:
        """Verify the structural invariants; raises AssertionError naming the first bad state."""
        n = len(self._len)
        if self._link[ROOT] != -1 or self._len[ROOT] != 0:
            raise AssertionError("root must have link -1 and length 0")
        children_cnt = [0] * n
        for v in range(1, n):
            lk = self._link[v]
            if not 0 <= lk < n or self._len[lk] >= self._len[v]:
                raise AssertionError(f"state {v}: link {lk} must be a shorter state")
        for v in range(n):
            for t, u in self._next[v].items():
                if self._len[u] < self._len[v] + 1:
                    raise AssertionError(f"transition {v} -{t}-> {u} shortens the string")
        # count(v) = own end positions + sum of counts of suffix-link children; own >= 0
        for v in range(1, n):
            children_cnt[self._link[v]] += self._cnt[v]
        for v in range(1, n):
            if self._src[v] & ~self._src[self._link[v]]:
                raise AssertionError(f"state {v}: a source bit its suffix link lacks")
            if self._cnt[v] < children_cnt[v]:
                raise AssertionError(
                    f"state {v}: count {self._cnt[v]} < sum of link children {children_cnt[v]}"
                )
