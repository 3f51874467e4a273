"""Group texts shared across engine replicas: the paper's distributed grouped draft server (DGDS).

Invariants:
- The server (``SharedGroups``) holds, per group, each request's text as one token list and an
  append log of runs ``(request, offset, count)``; a group's version is the length of its log.
  A push is a run ``(request, offset, tokens)``: the tokens past what the server holds are
  appended when the run starts at or before the held end and agrees with the held text where
  they overlap; a run that starts past the end (a gap) or disagrees is rejected and counted, never
  applied in part. So applying a push twice is a no-op, and every held text is a text some
  replica generated.
- A replica (``SyncClient``) pushes only tokens it generated itself, pulls each watched group's
  runs since its cursor, and applies a run with the same rule as the server (``apply_update``),
  so its local index is the union of what it generated and what it pulled, each request's text
  a prefix of the true one. A failed exchange puts its pushes back in front of the outbox
  (bounded: the oldest are dropped past ``max_outbox_tokens``); the server's texts only ever
  miss tokens, so drafts get worse, never wrong (and verification keeps outputs exact anyway).
- Memory is bounded: released groups are dropped (pushes that arrive within ``release_grace_s``
  after are late ones and ignored; later ones start the group anew, as a reused group id
  must), groups idle for ``group_ttl_s`` expire, and past ``max_tokens`` the least recently
  pushed groups go first.

Pure and synchronous: the Serve deployment (``app.serve.replica.draft_server``) and the engines wrap
it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from core.drafting.store import DraftStore

#: a finished request's length in ``GroupUpdate.lengths``: past every position
FINISHED = 1 << 62


class TokenPush(BaseModel):
    """Tokens ``[offset, offset + len(token_ids))`` of one request's generated text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1)
    request_id: str = Field(min_length=1)
    offset: int = Field(ge=0)
    token_ids: list[int] = Field(default_factory=list)
    finished: bool = Field(False, description="the request's text ends here")


class GroupCursor(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1)
    version: int = Field(0, ge=0, description="log entries of the group already pulled")


class SyncBatch(BaseModel):
    """One replica's exchange: its new tokens, and the groups it wants news of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replica_id: str = Field(min_length=1)
    pushes: list[TokenPush] = Field(default_factory=list)
    cursors: list[GroupCursor] = Field(default_factory=list)
    lengths_only: bool = Field(
        False, description="answer each watched group with its requests' lengths, no runs"
    )


class GroupUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str
    version: int = Field(description="the group's log length on the server: the next cursor")
    runs: list[TokenPush] = Field(default_factory=list)
    lengths: dict[str, int] = Field(
        default_factory=dict, description="lengths_only: tokens per request, FINISHED when done"
    )


class SyncReply(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    updates: list[GroupUpdate] = Field(default_factory=list)
    applied_tokens: int = 0
    rejected_pushes: int = Field(0, description="pushes with a gap or a disagreeing overlap")


class SharedStats(BaseModel):
    groups: int
    tokens: int
    pushes: int
    applied_tokens: int
    rejected_pushes: int
    released_groups: int
    evicted_groups: int
    exchanges: int


def _append(held: list[int], offset: int, tokens: Sequence[int]) -> int | None:
    """Tokens of a run past ``held``'s end, appended; None when the run has a gap or
    disagrees with ``held`` where they overlap (nothing appended then)."""
    end = len(held)
    if offset > end:
        return None
    overlap = min(end - offset, len(tokens))
    if overlap and held[offset : offset + overlap] != list(tokens[:overlap]):
        return None
    new = tokens[overlap:]
    held.extend(new)
    return len(new)


@dataclass(slots=True)
class _Group:
    texts: dict[str, list[int]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    log: list[tuple[str, int, int]] = field(default_factory=list)  # (request, offset, count)
    tokens: int = 0
    used: float = 0.0


@dataclass(slots=True)
class SharedGroups:
    """The server side: every group's request texts and append log."""

    max_groups: int = 65_536
    max_tokens: int = 50_000_000
    group_ttl_s: float = 3600.0
    release_grace_s: float = 30.0  # pushes for a group released this recently are late ones
    clock: Callable[[], float] = time.monotonic
    _groups: OrderedDict[str, _Group] = field(default_factory=OrderedDict)
    _released: OrderedDict[str, float] = field(default_factory=OrderedDict)  # id -> when
    _tokens: int = 0
    _pushes: int = 0
    _applied: int = 0
    _rejected: int = 0
    _released_n: int = 0
    _evicted: int = 0
    _exchanges: int = 0

    def __post_init__(self) -> None:
        if self.max_groups < 1:
            raise ValueError(f"max_groups must be >= 1, got {self.max_groups}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not self.group_ttl_s > 0:
            raise ValueError(f"group_ttl_s must be > 0, got {self.group_ttl_s}")

    def exchange(self, batch: SyncBatch) -> SyncReply:
        """Apply a replica's pushes, then answer its cursors."""
        self._exchanges += 1
        now = self.clock()
        applied, rejected = self.push(batch.pushes, now)
        updates = [self.update(c, batch.lengths_only) for c in batch.cursors]
        self._expire(now)
        return SyncReply(
            updates=[u for u in updates if u is not None],
            applied_tokens=applied,
            rejected_pushes=rejected,
        )

    def push(self, pushes: Iterable[TokenPush], now: float | None = None) -> tuple[int, int]:
        """Apply runs; returns (tokens appended, pushes rejected)."""
        now = self.clock() if now is None else now
        applied = rejected = 0
        for p in pushes:
            self._pushes += 1
            released = self._released.get(p.group_id)
            if released is not None:
                if now - released < self.release_grace_s:
                    continue  # a late push of a finished job's group
                del self._released[p.group_id]  # the id is used again
            g = self._groups.get(p.group_id)
            if g is None:
                g = self._groups[p.group_id] = _Group()
            held = g.texts.setdefault(p.request_id, [])
            n = _append(held, p.offset, p.token_ids)
            if n is None:
                rejected += 1
                continue
            if n:
                g.log.append((p.request_id, len(held) - n, n))
                g.tokens += n
                self._tokens += n
                applied += n
            ends = len(held) == p.offset + len(p.token_ids)
            if p.finished and ends and p.request_id not in g.finished:
                g.finished.add(p.request_id)
                if not n:
                    g.log.append((p.request_id, len(held), 0))  # news for lengths_only pulls
            g.used = now
            self._groups.move_to_end(p.group_id)
        self._applied += applied
        self._rejected += rejected
        return applied, rejected

    def update(self, cursor: GroupCursor, lengths_only: bool = False) -> GroupUpdate | None:
        """What a replica at ``cursor`` lacks; None when that is nothing (or the server does not
        hold the group). A cursor past the log (the server restarted, or reset) gets the whole
        log; ``lengths_only``: the lengths of the requests that changed since the cursor."""
        g = self._groups.get(cursor.group_id)
        if g is None:
            return None
        version = len(g.log)
        if cursor.version == version:
            return None
        start = cursor.version if cursor.version < version else 0
        if lengths_only:
            lengths = {
                r: FINISHED if r in g.finished else len(g.texts[r])
                for r in {rid for rid, _, _ in g.log[start:]}
            }
            return GroupUpdate(group_id=cursor.group_id, version=version, lengths=lengths)
        spans: list[list[int | str]] = []  # [request, start, end], contiguous runs merged
        last: dict[str, int] = {}  # request -> index in spans of its run that ends last
        for rid, offset, n in g.log[start:]:
            i = last.get(rid)
            if i is not None and spans[i][2] == offset:
                spans[i][2] = offset + n
                continue
            last[rid] = len(spans)
            spans.append([rid, offset, offset + n])
        runs = [
            TokenPush(
                group_id=cursor.group_id,
                request_id=str(rid),
                offset=int(a),
                token_ids=g.texts[str(rid)][int(a) : int(b)],
            )
            for rid, a, b in spans
        ]
        return GroupUpdate(group_id=cursor.group_id, version=version, runs=runs)

    def release(self, group_ids: Iterable[str]) -> int:
        """Drop finished groups; pushes that arrive for them later are ignored."""
        n = 0
        now = self.clock()
        for gid in group_ids:
            n += self._drop(gid)
            self._released[gid] = now
            self._released.move_to_end(gid)
        self._released_n += n
        return n

    def reset(self) -> int:
        """Drop every group (the policy's weights changed: old texts would mislead drafts)."""
        n = len(self._groups)
        self._groups.clear()
        self._tokens = 0
        return n

    def _drop(self, gid: str) -> int:
        g = self._groups.pop(gid, None)
        if g is None:
            return 0
        self._tokens -= g.tokens
        return 1

    def _expire(self, now: float) -> None:
        while self._released and now - next(iter(self._released.values())) >= self.release_grace_s:
            self._released.popitem(last=False)
        while self._groups:
            gid, g = next(iter(self._groups.items()))
            over = len(self._groups) > self.max_groups or self._tokens > self.max_tokens
            if not over and now - g.used < self.group_ttl_s:
                break
            self._evicted += self._drop(gid)

    def stats(self) -> SharedStats:
        return SharedStats(
            groups=len(self._groups),
            tokens=self._tokens,
            pushes=self._pushes,
            applied_tokens=self._applied,
            rejected_pushes=self._rejected,
            released_groups=self._released_n,
            evicted_groups=self._evicted,
            exchanges=self._exchanges,
        )


@dataclass(slots=True)
class SyncStats:
    exchanges: int = 0
    failures: int = 0
    pushed_tokens: int = 0
    pulled_tokens: int = 0  # tokens of other replicas added to the local index
    dropped_tokens: int = 0  # outbox overflow while the server was unreachable


@dataclass(slots=True)
class _Run:
    group_id: str
    request_id: str
    offset: int
    token_ids: list[int]
    finished: bool

    def wire(self) -> TokenPush:
        return TokenPush.model_construct(
            group_id=self.group_id,
            request_id=self.request_id,
            offset=self.offset,
            token_ids=self.token_ids,
            finished=self.finished,
        )


@dataclass(slots=True)
class SyncClient:
    """The replica side: an outbox of locally generated tokens and a cursor per group.

    ``batch()`` takes the outbox and the watched groups' cursors as one ``SyncBatch``;
    ``done(reply)`` then advances the cursors (or, with ``None`` for a failed exchange, puts the
    pushes back) and returns the updates for the caller to apply. ``push`` runs on the decode
    path (once per row and step): it only appends to plain lists."""

    replica_id: str
    lengths_only: bool = False
    max_outbox_tokens: int = 1 << 20
    stats: SyncStats = field(default_factory=SyncStats)
    _outbox: list[_Run] = field(default_factory=list)
    _last: dict[tuple[str, str], _Run] = field(default_factory=dict)  # its last queued run
    _outbox_tokens: int = 0
    _inflight: list[_Run] = field(default_factory=list)
    _cursors: dict[str, int] = field(default_factory=dict)
    _waiting: bool = False  # a batch was taken and its reply not given yet

    def push(
        self,
        group_id: str,
        request_id: str,
        offset: int,
        token_ids: Sequence[int],
        finished: bool = False,
    ) -> None:
        """Queue tokens this replica generated (a continuation of the request's last queued
        run is merged into it)."""
        if not token_ids and not finished:
            return
        key = (group_id, request_id)
        prev = self._last.get(key)
        if prev is not None and prev.offset + len(prev.token_ids) == offset and not prev.finished:
            prev.token_ids.extend(token_ids)
            prev.finished = finished
        else:
            run = _Run(group_id, request_id, offset, list(token_ids), finished)
            self._outbox.append(run)
            self._last[key] = run
        self._outbox_tokens += len(token_ids)
        if self._outbox_tokens > self.max_outbox_tokens:
            self._bound()

    def _bound(self) -> None:
        drop = 0
        while self._outbox_tokens > self.max_outbox_tokens and drop < len(self._outbox) - 1:
            n = len(self._outbox[drop].token_ids)
            self._outbox_tokens -= n
            self.stats.dropped_tokens += n
            drop += 1
        del self._outbox[:drop]
        self._reindex()

    def _reindex(self) -> None:
        self._last = {(r.group_id, r.request_id): r for r in self._outbox}
        self._outbox_tokens = sum(len(r.token_ids) for r in self._outbox)

    def watch(self, group_id: str) -> None:
        self._cursors.setdefault(group_id, 0)

    def forget(self, group_ids: Iterable[str]) -> None:
        gone = set(group_ids)
        for gid in gone:
            self._cursors.pop(gid, None)
        self._outbox = [r for r in self._outbox if r.group_id not in gone]
        self._reindex()

    def clear(self) -> None:
        """Forget everything (new weights: what was generated before is another policy's)."""
        self._outbox.clear()
        self._inflight.clear()
        self._cursors.clear()
        self._waiting = False
        self._reindex()

    def batch(self) -> SyncBatch | None:
        """The next exchange; None when there is nothing to push or watch."""
        if not self._outbox and not self._cursors:
            return None
        self._waiting = True
        self._inflight, self._outbox = self._outbox, []
        self._reindex()
        return SyncBatch.model_construct(
            replica_id=self.replica_id,
            pushes=[r.wire() for r in self._inflight],
            cursors=[
                GroupCursor.model_construct(group_id=g, version=v) for g, v in self._cursors.items()
            ],
            lengths_only=self.lengths_only,
        )

    def done(self, reply: SyncReply | None) -> list[GroupUpdate]:
        """The last batch's reply, or None when its exchange failed (a no-op without one)."""
        if not self._waiting:
            return []
        self._waiting = False
        sent, self._inflight = self._inflight, []
        if reply is None:
            self.stats.failures += 1
            self._outbox[:0] = sent
            self._reindex()
            if self._outbox_tokens > self.max_outbox_tokens:
                self._bound()
            return []
        self.stats.exchanges += 1
        self.stats.pushed_tokens += sum(len(r.token_ids) for r in sent)
        out = []
        for u in reply.updates:
            if u.group_id in self._cursors:  # not forgotten while the exchange ran
                self._cursors[u.group_id] = u.version
                out.append(u)
        return out


def apply_update(store: DraftStore, update: GroupUpdate) -> int:
    """Add a pulled group's runs to a local draft store (the server's rule: a run is applied
    past the local end when it starts at or before it; the overlap is assumed equal, since a
    replica's own text and the server's come from the same generation). Returns tokens added;
    a group the store does not hold is skipped (released here meanwhile)."""
    if update.group_id not in store:
        return 0
    g = store.group(update.group_id)
    added = 0
    for run in update.runs:
        have = g.num_tokens(run.request_id)
        end = run.offset + len(run.token_ids)
        if run.offset <= have < end:
            g.add_tokens(run.request_id, run.token_ids[have - run.offset :])
            added += end - have
    return added
