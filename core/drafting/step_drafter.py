"""Grouped drafting for one engine, one decoding step at a time (what a vLLM proposer runs).

Invariant: every row of a step is a chunk of one request of one group; before a row drafts, the
group's index holds the group prompt and, for that request, exactly the tokens of the row's text
after the prompt (a continuation chunk of a request seen earlier adds only what is new; a text
that no longer extends what the index holds, e.g. after an abort dropped tokens, continues under
a fresh alias of the request). A draft proposed for a row at step t is verified at step t+1: the
row's new tokens then are ``accepted + 1`` (the bonus token), so drafted and accepted counts are
exact for every draft that was verified; drafts of rows that left the batch are not counted.
The draft length per row and step comes from ``core.drafting.adaptive`` with this engine's step
time learned online (``StepTimeModel``) and acceptance learned per group (``AcceptanceEstimator``);
a few exploration steps keep both models fed, so a policy that switched speculation off can
switch it back on where it pays (small batches, the tail).
With a ``SyncClient`` (``sync``), every token a row adds is queued for the draft server, and
``sync_step`` adds the siblings' tokens other replicas generated (``core.drafting.shared``):
the group index then holds the union, each request's text still a prefix of the true one.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from core.drafting.acceptance import AcceptanceEstimator
from core.drafting.adaptive import AdaptiveDraftConfig, DraftCandidate, choose_draft_lengths
from core.drafting.draft import Draft
from core.drafting.shared import SyncBatch, SyncClient, SyncReply, apply_update
from core.drafting.speculate import MAX_DRAFT_TOKENS, SpeculationParams
from core.drafting.step_time import StepTimeModel
from core.drafting.store import DEFAULT_PARAMS, DraftStore


@dataclass(frozen=True, slots=True)
class DraftSettings:
    """Operator settings of grouped drafting (live: ``StepDrafter.configure``)."""

    enabled: bool = True
    max_draft: int = 8  # draft tokens per request and step, 1..64 (and <= the engine's K)
    min_token_prob: float = DEFAULT_PARAMS.min_token_prob  # stop a path below this, [0, 1]
    adaptive: bool = True  # choose lengths per step from measured cost and acceptance
    probe_priority: float = 2.0  # weight of a probe request's tokens in the choice, >= 1

    def __post_init__(self) -> None:
        if not 1 <= self.max_draft <= MAX_DRAFT_TOKENS:
            raise ValueError(f"max_draft must be in [1, {MAX_DRAFT_TOKENS}], got {self.max_draft}")
        if not 0.0 <= self.min_token_prob <= 1.0 or math.isnan(self.min_token_prob):
            raise ValueError(f"min_token_prob must be in [0, 1], got {self.min_token_prob}")
        if not self.probe_priority >= 1.0:
            raise ValueError(f"probe_priority must be >= 1, got {self.probe_priority}")


@dataclass(frozen=True, slots=True)
class RowView:
    """One decoding row of a step, as the engine sees it."""

    row_id: str  # the engine's id of this row (one chunk of one request)
    group_id: str
    request_id: str
    prompt_len: int  # the group prompt's tokens at the start of ``text``
    text: Sequence[int]  # prompt + every token generated so far (a view is fine)
    max_draft: int  # most draft tokens this row may take now (budget and context room)
    is_probe: bool = False


@dataclass(frozen=True, slots=True)
class DraftCounts:
    """Verified draft tokens of one row: ``accepted`` of ``drafted`` matched the target."""

    drafted: int = 0
    accepted: int = 0


@dataclass(frozen=True, slots=True)
class DrafterSnapshot:
    """Totals since start, for metrics."""

    steps: int
    steps_with_drafts: int
    drafted: int
    accepted: int
    draft_seconds: float
    step_seconds: float
    groups: int
    rows: int
    step_cost: tuple[float, float, float]  # (base, per request, per draft token) seconds
    shared_pushed: int = 0  # tokens sent to the draft server
    shared_pulled: int = 0  # other replicas' tokens added from it
    sync_failures: int = 0  # exchanges with the draft server that failed


@dataclass(slots=True)
class _Row:
    group_id: str
    key: str  # the request's name inside the group index (an alias after a rewind)
    prompt_len: int
    drafted: int = 0
    accepted: int = 0
    pending: int = 0  # draft tokens proposed last step, verified this step
    pending_match: int = 0
    last_step: int = 0


@dataclass(slots=True)
class StepDrafter:
    """Group indexes, per-row accounting and the adaptive draft length of one engine."""

    max_engine_draft: int  # the engine's fixed K: no row ever gets more
    settings: DraftSettings = field(default_factory=DraftSettings)
    max_groups: int = 4096  # least recently used groups beyond this are released
    group_ttl_s: float = 600.0  # groups untouched this long are released
    max_finished_rows: int = 16384  # counts of rows that left, kept until taken
    clock: Callable[[], float] = time.perf_counter
    store: DraftStore = field(default_factory=DraftStore)
    step_model: StepTimeModel = field(default_factory=StepTimeModel)
    acceptance: AcceptanceEstimator = field(default_factory=AcceptanceEstimator)
    sync: SyncClient | None = None  # shares group texts with other replicas when set
    # names this drafter's aliases of rewound requests apart from other replicas' (shared texts)
    alias_tag: str = field(default_factory=lambda: secrets.token_hex(4))
    _rows: dict[str, _Row] = field(default_factory=dict)
    _finished: OrderedDict[str, DraftCounts] = field(default_factory=OrderedDict)
    _group_used: OrderedDict[str, float] = field(default_factory=OrderedDict)
    _aliases: dict[tuple[str, str], int] = field(default_factory=dict)
    _step: int = 0
    _last_start: float | None = None
    _last_batch: int = 0
    _last_draft_tokens: int = 0
    _steps_with_drafts: int = 0
    _drafted: int = 0
    _accepted: int = 0
    _draft_seconds: float = 0.0
    _step_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_engine_draft <= MAX_DRAFT_TOKENS:
            raise ValueError(
                f"max_engine_draft must be in [1, {MAX_DRAFT_TOKENS}], got {self.max_engine_draft}"
            )
        if self.max_groups < 1:
            raise ValueError(f"max_groups must be >= 1, got {self.max_groups}")
        if not self.group_ttl_s > 0:
            raise ValueError(f"group_ttl_s must be > 0, got {self.group_ttl_s}")

    def configure(self, settings: DraftSettings) -> None:
        self.settings = settings

    # -- one step -----------------------------------------------------------------------------

    def step(self, rows: Sequence[RowView]) -> list[list[int]]:
        """Feed every row's new tokens, account last step's drafts, and draft for this step.

        Returns one draft (token ids, possibly empty) per row, in order."""
        start = self.clock()
        self._step += 1
        fresh = any(row.row_id not in self._rows for row in rows)
        if self._last_start is not None and self._last_batch and not fresh:
            # The interval since the last call was one step that verified what we drafted then
            # (a step with a fresh row also ran its prefill, which would bias the model).
            elapsed = start - self._last_start
            if elapsed > 0:
                self.step_model.observe(self._last_batch, self._last_draft_tokens, elapsed)
                self._step_seconds += elapsed
        states = [self._feed(row, start) for row in rows]
        drafts = self._draft(rows, states)
        total = sum(len(d) for d in drafts)
        self._last_start = start
        self._last_batch = len(rows)
        self._last_draft_tokens = total
        if total:
            self._steps_with_drafts += 1
        self._sweep(rows, start)
        return drafts

    def _feed(self, row: RowView, now: float) -> _Row:
        st = self._rows.get(row.row_id)
        if st is None:
            st = self._start_row(row)
        st.last_step = self._step
        group = self.store.group(st.group_id)
        fed = group.num_tokens(st.key)
        generated = len(row.text) - st.prompt_len
        new = generated - fed
        if st.pending:
            accepted = min(max(new - 1, 0), st.pending)
            st.drafted += st.pending
            st.accepted += accepted
            self._drafted += st.pending
            self._accepted += accepted
            self.acceptance.observe(st.group_id, st.pending_match, st.pending, accepted)
            st.pending = 0
        if new > 0:
            tokens = [int(t) for t in row.text[st.prompt_len + fed :]]
            group.add_tokens(st.key, tokens)
            if self.sync is not None:
                self.sync.push(st.group_id, st.key, fed, tokens)
        self._group_used[st.group_id] = now
        self._group_used.move_to_end(st.group_id)
        return st

    def _start_row(self, row: RowView) -> _Row:
        if not 0 < row.prompt_len <= len(row.text):
            raise ValueError(
                f"row {row.row_id!r}: prompt_len {row.prompt_len} outside [1, {len(row.text)}]"
            )
        gid = row.group_id
        if gid not in self.store:
            self.store.register_group(gid, [int(t) for t in row.text[: row.prompt_len]])
            if self.sync is not None:
                self.sync.watch(gid)
        group = self.store.group(gid)
        key = self._key(gid, row.request_id)
        fed = group.num_tokens(key)
        generated = len(row.text) - row.prompt_len
        if fed > generated:
            # The request's text in the index runs past this row's (an aborted chunk's tokens
            # were dropped): continue under a fresh alias; the old text stays a sibling.
            n = self._aliases.get((gid, row.request_id), 0) + 1
            self._aliases[(gid, row.request_id)] = n
            key = self._key(gid, row.request_id)
        st = _Row(group_id=gid, key=key, prompt_len=row.prompt_len)
        self._rows[row.row_id] = st
        return st

    def _key(self, group_id: str, request_id: str) -> str:
        n = self._aliases.get((group_id, request_id), 0)
        return request_id if n == 0 else f"{request_id}#{self.alias_tag}.{n}"

    def _draft(self, rows: Sequence[RowView], states: Sequence[_Row]) -> list[list[int]]:
        s = self.settings
        out: list[list[int]] = [[] for _ in rows]
        if not s.enabled or not rows:
            return out
        cap = min(s.max_draft, self.max_engine_draft)
        mode = self._mode()
        if mode == "off":
            return out
        t0 = self.clock()
        offered: dict[int, Draft] = {}  # row index -> its non-empty draft
        scoring = SpeculationParams(min_token_prob=s.min_token_prob)  # one path per draft
        for i, (row, st) in enumerate(zip(rows, states, strict=True)):
            k = min(cap, row.max_draft)
            if k <= 0:
                continue
            d = self.store.speculate(st.group_id, st.key, replace(scoring, max_draft=k))
            if d.tokens:
                offered[i] = d
        self._draft_seconds += self.clock() - t0
        if mode == "adaptive" and offered:
            # every row is a candidate: rows without a draft still decode (and cost) one token
            cands = []
            for i, (row, st) in enumerate(zip(rows, states, strict=True)):
                got = offered.get(i)
                cands.append(
                    DraftCandidate(
                        request_id=row.row_id,
                        acceptance=(
                            0.0
                            if got is None
                            else self.acceptance.estimate(st.group_id, got.match_length)
                        ),
                        is_probe=row.is_probe,
                        max_length=0 if got is None else len(got),
                    )
                )
            chosen = choose_draft_lengths(
                cands,
                self.step_model.predict,
                AdaptiveDraftConfig(
                    g_max=cap,
                    probe_priority=s.probe_priority,
                    step_token_budget=cap * len(rows),
                    draft_time_s=0.0,  # drafting is already inside the measured step time
                ),
            )
            lengths = {i: chosen[rows[i].row_id] for i in offered}
        else:
            lengths = {i: len(d) for i, d in offered.items()}
        for i, d in offered.items():
            n = min(lengths[i], len(d))
            if n > 0:
                out[i] = list(d.tokens[:n])
                states[i].pending = n
                states[i].pending_match = d.match_length
        return out

    def _mode(self) -> str:
        """``fixed`` (draft what the index offers), ``adaptive``, ``explore`` or ``off``."""
        if not self.settings.adaptive:
            return "fixed"
        m = self.step_model
        if not m.ready:
            # calibrate: alternate steps with and without drafts
            return "explore" if self._step % 2 == 0 else "off"
        if m.samples_with_drafts < m.min_samples:
            return "explore"
        if m.samples_without_drafts < m.min_samples:
            return "off"
        return "adaptive"

    def _sweep(self, rows: Sequence[RowView], now: float) -> None:
        """Rows that left the batch keep their counts until taken; idle groups are released."""
        if len(self._rows) > len(rows):
            for rid in [r for r, st in self._rows.items() if st.last_step != self._step]:
                st = self._rows.pop(rid)
                self._remember(rid, DraftCounts(st.drafted, st.accepted))
        while self._group_used:
            gid, used = next(iter(self._group_used.items()))
            if len(self._group_used) <= self.max_groups and now - used < self.group_ttl_s:
                break
            self.release_groups([gid])

    def _remember(self, row_id: str, counts: DraftCounts) -> None:
        self._finished[row_id] = counts
        while len(self._finished) > self.max_finished_rows:
            self._finished.popitem(last=False)

    # -- outside the step ---------------------------------------------------------------------

    def take_counts(self, row_ids: Sequence[str]) -> dict[str, DraftCounts]:
        """Verified draft counts of rows (finished or not); each row's counts are taken once."""
        out: dict[str, DraftCounts] = {}
        for rid in row_ids:
            done = self._finished.pop(rid, None)
            if done is not None:
                out[rid] = done
                continue
            st = self._rows.get(rid)
            if st is not None:
                out[rid] = DraftCounts(st.drafted, st.accepted)
                st.drafted = st.accepted = 0
        return out

    def sync_step(self, reply: SyncReply | None) -> SyncBatch | None:
        """Apply the reply to the last batch (None: the exchange failed, its tokens are sent
        again) and return the next batch (None: nothing to share). Call between steps."""
        sync = self.sync
        if sync is None:
            return None
        for update in sync.done(reply):
            sync.stats.pulled_tokens += apply_update(self.store, update)
        return sync.batch()

    def release_groups(self, group_ids: Sequence[str]) -> int:
        """Drop groups' indexes (their rows, if any come back, start a fresh index)."""
        if self.sync is not None:
            self.sync.forget(group_ids)
        n = 0
        for gid in group_ids:
            self._group_used.pop(gid, None)
            if gid in self.store:
                self.store.release_group(gid)
                n += 1
            self.acceptance.forget_group(gid)
            for key in [k for k in self._aliases if k[0] == gid]:
                del self._aliases[key]
        if n:
            gone = set(group_ids)
            for rid in [r for r, st in self._rows.items() if st.group_id in gone]:
                st = self._rows.pop(rid)
                self._remember(rid, DraftCounts(st.drafted, st.accepted))
        return n

    def snapshot(self) -> DrafterSnapshot:
        return DrafterSnapshot(
            steps=self._step,
            steps_with_drafts=self._steps_with_drafts,
            drafted=self._drafted,
            accepted=self._accepted,
            draft_seconds=self._draft_seconds,
            step_seconds=self._step_seconds,
            groups=len(self.store.group_ids()),
            rows=len(self._rows),
            step_cost=self.step_model.coefficients(),
            shared_pushed=0 if self.sync is None else self.sync.stats.pushed_tokens,
            shared_pulled=0 if self.sync is None else self.sync.stats.pulled_tokens,
            sync_failures=0 if self.sync is None else self.sync.stats.failures,
        )
