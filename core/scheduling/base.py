"""What every rollout scheduler shares: requests and groups from submission to release, the KV
bookkeeping of the chunks in flight, validation of what the caller reports, the event trace.

Invariant: every request is in exactly one phase (QUEUED, RUNNING, FINISHED, CANCELLED); a
RUNNING request has exactly one chunk in flight, on one replica, whose KV reservation is counted
on that replica (``loads``) from its dispatch until the chunk is reported back; a QUEUED one is
in the subclass's ready queues. A chunk continues the request where the previous one stopped;
the request is re-queued after each chunk until EOS or its own max_tokens. A subclass decides
only which queued request runs next, where and with what budget (``schedule``), and how its
ready queues hold them: ``core.scheduling.scheduler.Scheduler`` (divided rollout) and
``core.scheduling.verl.VerlScheduler`` (the veRL baseline);
``core.scheduling.factory.make_scheduler`` builds the one a config asks for.

Long-lived use (one scheduler for every rollout of a service): groups may be submitted at any
time; ``cancel`` ends a group's requests (queued ones at once, running ones when their chunk is
reported); ``release`` drops a group whose requests are all terminal, and the tables
(``tables.py``) are compacted once released slots outnumber live ones, so memory and the cost
of a decision depend on the work in the scheduler, not on what it has served. A replica taken
out of rotation (``set_replica_available``) gets no chunk until it is back; its chunks in
flight are reported by the caller (``ABORT`` keeps the tokens they returned) and re-queued.

Driving it (the caller owns time and engines):
``submit(groups)`` -> ``schedule()`` -> run each ``ChunkDecision`` -> ``complete(...)`` ->
``schedule()`` ... until ``done``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from core.engine.types import FinishReason
from core.events import EventSink, NullSink
from core.scheduling.config import SchedulerConfig
from core.scheduling.estimate import GroupStats, LengthPrior, PopulationStats
from core.scheduling.routing import ReplicaTable
from core.scheduling.tables import GroupTable, RequestTable
from core.scheduling.trace import EventTrace
from core.scheduling.types import (
    ChunkDecision,
    GroupSpec,
    ReplicaLoad,
    ReplicaSpec,
    RequestPhase,
)

_QUEUED = RequestPhase.QUEUED
_RUNNING = RequestPhase.RUNNING
_FINISHED = RequestPhase.FINISHED
_CANCELLED = RequestPhase.CANCELLED
_TERMINAL = (_FINISHED, _CANCELLED)
#: Default of ``compact_after``: released request slots that trigger a compaction of the tables.
DEFAULT_COMPACT_AFTER = 4096


class BaseScheduler(ABC):
    """The state and lifecycle every scheduler shares (see the module invariant); a subclass
    implements ``schedule`` and the ready-queue hooks ``_queue`` and ``_compact_queues``."""

    #: ``submit`` needs every request's true length (an oracle ordering; see ``submit``)
    _needs_oracle = False
    #: the ``config.divided`` this class runs (``make_scheduler`` picks the class by it)
    _divided: ClassVar[bool]

    def __init__(
        self,
        config: SchedulerConfig,
        replicas: Sequence[ReplicaSpec],
        prior: LengthPrior | None = None,
        compact_after: int = DEFAULT_COMPACT_AFTER,
        sink: EventSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``compact_after`` (>= 1): compact the request and group tables once at least this many
        slots (and at least as many as are live) belong to released groups. ``sink`` receives
        ``core.events`` records (chunk done, request finished, group estimate, group finished)
        stamped with ``clock()``; None or a ``NullSink``: no event is built."""
        if config.divided is not self._divided:
            raise ValueError(
                f"config.divided is {config.divided}, which {type(self).__name__} does not run: "
                "build the scheduler with make_scheduler"
            )
        if not replicas:
            raise ValueError("need at least one replica")
        ids = [r.replica_id for r in replicas]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate replica ids in {ids}")
        if compact_after < 1:
            raise ValueError(f"compact_after={compact_after} must be >= 1")
        self.config = config
        self.replicas = list(replicas)
        self._compact_after = compact_after
        self._available = [True] * len(replicas)
        self.prior = prior
        self._table = ReplicaTable(
            capacity=[r.kv_capacity_tokens for r in replicas],
            max_running=[r.max_running for r in replicas],
            running=[0] * len(replicas),
            reserved=[0] * len(replicas),
        )
        self._free_slots = sum(r.max_running for r in replicas)
        self.requests = RequestTable()
        self.groups = GroupTable()
        self._released_slots = 0  # request slots of released groups (until compaction)
        self._n_open = 0  # requests not yet terminal
        self.population = PopulationStats(prior_sigma=config.within_sigma_prior)
        self._n_queued = 0
        self._n_finished = 0
        self._dispatches = 0
        self._trace = (
            None if sink is None or isinstance(sink, NullSink) else EventTrace(sink, clock)
        )
        self._start()

    @abstractmethod
    def _start(self) -> None:
        """The subclass's own state (its ready queues, routing), once the shared state exists."""

    # ------------------------------------------------------------------ inputs
    def submit(
        self, groups: Sequence[GroupSpec], oracle_lengths: Mapping[str, int] | None = None
    ) -> None:
        """Queue new groups. ``oracle_lengths`` (request_id -> true length) is required by the
        ``oracle`` ordering and ignored otherwise."""
        q = self.requests
        need_oracle = self._needs_oracle
        seen: set[str] = set()
        seen_r: set[str] = set()
        for spec in groups:
            if spec.group_id in seen or spec.group_id in self.groups.index:
                raise ValueError(f"group {spec.group_id!r} submitted twice")
            seen.add(spec.group_id)
            for rid in spec.request_ids:
                if rid in q.index or rid in seen_r:
                    raise ValueError(f"request {rid!r} submitted twice")
                seen_r.add(rid)
                if need_oracle and (oracle_lengths is None or rid not in oracle_lengths):
                    raise ValueError(
                        f"ordering {self.config.ordering!r} needs the true length of {rid!r}"
                    )
                if need_oracle and oracle_lengths is not None:
                    true = oracle_lengths[rid]
                    if not 1 <= true <= spec.max_tokens:
                        raise ValueError(
                            f"oracle length of {rid!r} is {true}, outside [1, {spec.max_tokens}]"
                        )
        new_groups: list[int] = []
        for spec in groups:
            stats = GroupStats(cap=spec.max_tokens)
            if self.prior is not None:
                recorded = self.prior.lengths(spec.prompt_key or spec.group_id)
                if recorded:
                    stats.seed_prior(
                        [min(x, spec.max_tokens) for x in recorded], self.config.prior_weight
                    )
            gi = self.groups.add(spec.group_id, stats, len(spec.request_ids))
            self._n_open += len(spec.request_ids)
            if self._trace is not None:
                key = spec.prompt_key or spec.group_id
                self._trace.submitted(spec.group_id, key, spec.request_ids)
            new_groups.append(gi)
            for k, rid in enumerate(spec.request_ids):
                oracle = spec.max_tokens
                if need_oracle and oracle_lengths is not None:
                    oracle = oracle_lengths[rid]
                probe = self.config.probes and k == 0
                self._add_request(gi, rid, spec.max_tokens, spec.prompt_tokens, probe, oracle)
        self._placed(new_groups)
        for gi in new_groups:
            for r in self.groups.stats[gi].members:
                self._enqueue(r)

    def complete(
        self, request_id: str, new_tokens: int, finish_reason: FinishReason, drafted: int = 0
    ) -> bool:
        """Record what one in-flight chunk produced; returns True when the request finished.

        ``finish_reason`` STOP/LENGTH finish the request, CHUNK re-queues it (it must then have
        used its whole chunk budget), ABORT re-queues it keeping the tokens it produced.
        ``drafted``: draft tokens the engine proposed in it (recorded in the event trace only)."""
        q = self.requests
        r = self._lookup(request_id)
        if q.phase[r] is not _RUNNING:
            raise ValueError(
                f"request {request_id!r} has no chunk in flight (it is {q.phase[r].value})"
            )
        budget = q.chunk_budget[r]
        if not 0 <= new_tokens <= budget:
            raise ValueError(
                f"request {request_id!r}: new_tokens={new_tokens} outside [0, {budget}] "
                "(the chunk's budget)"
            )
        if finish_reason is FinishReason.CHUNK and new_tokens != budget:
            raise ValueError(
                f"request {request_id!r}: finish 'chunk' after {new_tokens} tokens, budget {budget}"
            )
        gen = q.generated[r] + new_tokens
        finished = finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        finished = finished or gen >= q.max_tokens[r]
        if finished and gen < 1:
            raise ValueError(f"request {request_id!r} finished with 0 generated tokens")
        rep = q.chunk_replica[r]
        t = self._table
        t.add(rep, -1, -q.chunk_reserve[r])
        if t.running[rep] < t.max_running[rep]:
            self._free_slots += 1
        q.chunk_reserve[r] = 0
        q.kv_replica[r] = rep
        q.generated[r] = gen
        gi = q.group[r]
        trace = self._trace
        if trace is not None:
            trace.chunk_done(
                request_id, new_tokens, gen, finish_reason.value, q.is_probe[r], drafted
            )
        if self.groups.cancelled[gi] or q.cancelled[r]:
            self._terminate(r, _CANCELLED)
            if trace is not None and self.groups.open[gi] == 0:
                trace.group_ended(self.groups.group_id[gi])
            return False
        g = self.groups.stats[gi]
        before = self._key_inputs(g)
        if finished:
            stop = finish_reason is FinishReason.STOP and gen < q.max_tokens[r]
            self._terminate(r, _FINISHED, "stop" if stop else "length")
            self.population.observe_finished(g, gen)
            g.set_running_max(
                max(
                    (q.generated[m] for m in g.members if q.phase[m] is not _FINISHED),
                    default=0,
                )
            )
            q.is_probe[r] = False
            self._n_finished += 1
            if trace is not None:
                trace.estimate(self.groups.group_id[gi], g)
                if self.groups.open[gi] == 0:
                    trace.group_ended(self.groups.group_id[gi])
        else:
            g.observe_progress(gen)
            self._enqueue(r)
        self._evidence_changed(g, before, skip=r)
        return finished

    def report_progress(self, request_id: str, generated: int) -> None:
        """Optional streaming update of a running request's progress (a lower bound on its
        group's length); never lowers what is known."""
        q = self.requests
        r = self._lookup(request_id)
        if generated > q.max_tokens[r]:
            raise ValueError(
                f"request {request_id!r}: generated={generated} > max_tokens={q.max_tokens[r]}"
            )
        g = self.groups.stats[q.group[r]]
        if generated > g.running_max:
            before = self._key_inputs(g)
            g.observe_progress(generated)
            self._evidence_changed(g, before, skip=-1)

    def cancel(self, group_ids: Sequence[str]) -> list[str]:
        """Cancel groups: their queued requests end at once (``CANCELLED``); returns the ids of
        their requests with a chunk in flight, which the caller aborts and reports through
        ``complete`` (any finish reason; their tokens are dropped and they end ``CANCELLED``).
        Their KV reservations stay counted until then, so admission never over-commits."""
        q = self.requests
        idx = [self._group_index(gid) for gid in group_ids]
        running: list[str] = []
        for gi in idx:
            if self.groups.cancelled[gi]:
                continue
            self.groups.cancelled[gi] = True
            was_open = self.groups.open[gi] > 0
            for r in self.groups.stats[gi].members:
                if q.phase[r] is _QUEUED:
                    self._n_queued -= 1
                    self._terminate(r, _CANCELLED)
                elif q.phase[r] is _RUNNING:
                    running.append(q.request_id[r])
            if self._trace is not None and was_open and self.groups.open[gi] == 0:
                self._trace.group_ended(self.groups.group_id[gi])
        return running

    def join(self, group_id: str, request_ids: Sequence[str], max_tokens: int) -> None:
        """Add requests to an open group (siblings that arrive separately, e.g. one agent-loop
        sample per call): they share the group's length estimate and ordering from then on.
        The group must be known, not cancelled and not yet done (a done group is released by
        its owner; later siblings start a new group)."""
        q = self.requests
        gi = self._group_index(group_id)
        if self.groups.cancelled[gi] or self.groups.open[gi] == 0:
            state = "cancelled" if self.groups.cancelled[gi] else "done"
            raise ValueError(f"group {group_id!r} is {state}; it cannot take new requests")
        if not request_ids:
            raise ValueError(f"join of group {group_id!r} names no request")
        if max_tokens < 1:
            raise ValueError(f"join of group {group_id!r}: max_tokens={max_tokens} < 1")
        if self._needs_oracle:
            raise ValueError(f"ordering {self.config.ordering!r} cannot take joined requests")
        if len(set(request_ids)) != len(request_ids):
            raise ValueError(f"join of group {group_id!r} has duplicate request_ids")
        for rid in request_ids:
            if rid in q.index:
                raise ValueError(f"request {rid!r} submitted twice")
        stats = self.groups.stats[gi]
        prompt = q.prompt[stats.members[0]]
        self.groups.open[gi] += len(request_ids)
        self._n_open += len(request_ids)
        if self._trace is not None:
            self._trace.joined(group_id, request_ids)
        for rid in request_ids:
            self._enqueue(self._add_request(gi, rid, max_tokens, prompt, False, max_tokens))

    def _add_request(
        self, gi: int, rid: str, max_tokens: int, prompt: int, probe: bool, oracle: int
    ) -> int:
        """Add request ``rid`` of group ``gi`` to the request table (not queued)."""
        r = self.requests.add(rid, gi, max_tokens, prompt, probe, oracle)
        self.groups.stats[gi].members.append(r)
        return r

    def cancel_requests(self, request_ids: Sequence[str]) -> list[str]:
        """Cancel single requests (their group goes on): like ``cancel`` for groups, queued
        ones end at once and the ids of those with a chunk in flight are returned, to be aborted
        and reported through ``complete``. Requests already terminal are skipped."""
        q = self.requests
        running: list[str] = []
        for rid in request_ids:
            r = self._lookup(rid)
            if q.cancelled[r] or q.phase[r] in _TERMINAL:
                continue
            q.cancelled[r] = True
            gi = q.group[r]
            if q.phase[r] is _QUEUED:
                self._n_queued -= 1
                self._terminate(r, _CANCELLED)
                if self._trace is not None and self.groups.open[gi] == 0:
                    self._trace.group_ended(self.groups.group_id[gi])
            else:
                running.append(rid)
        return running

    def restart(self, request_id: str) -> None:
        """Start a queued request over from its prompt, forgetting its generated tokens (its
        group's estimates keep what they learned). For a change of the policy's weights: a
        response never mixes tokens of two versions."""
        q = self.requests
        r = self._lookup(request_id)
        if q.phase[r] is not _QUEUED:
            raise ValueError(
                f"request {request_id!r} is {q.phase[r].value}; only a queued one restarts"
            )
        if q.generated[r] == 0:
            return
        q.generated[r] = 0
        q.kv_replica[r] = -1
        self._n_queued -= 1  # re-enqueued below with a fresh key
        self._enqueue(r)

    def set_policy_version(self, version: int) -> None:
        """Tag the requests that finish from now on (events) with the weights ``version``; the
        caller restarts the requests cut by the change (``restart``)."""
        if self._trace is not None:
            self._trace.policy_version = version

    def group_done(self, group_id: str) -> bool:
        """True when every request of the group is terminal (finished or cancelled)."""
        return self.groups.open[self._group_index(group_id)] == 0

    def release(self, group_id: str) -> None:
        """Drop a group whose requests are all terminal: its ids become unknown and its slots
        are reclaimed by the next compaction (what it taught the estimates is kept)."""
        q = self.requests
        gi = self._group_index(group_id)
        if self.groups.open[gi]:
            raise ValueError(
                f"group {group_id!r} still has {self.groups.open[gi]} unfinished requests"
            )
        self.groups.released[gi] = True
        del self.groups.index[group_id]
        g = self.groups.stats[gi]
        for r in g.members:
            del q.index[q.request_id[r]]
        self._released_slots += len(g.members)
        if self._released_slots >= max(self._compact_after, len(q.request_id) // 2):
            self._compact()

    def set_replica_available(
        self, replica: int, available: bool, spec: ReplicaSpec | None = None
    ) -> None:
        """Take replica index ``replica`` out of rotation (no new chunk goes there; chunks in
        flight on it are still reported by the caller) or put it back, optionally with a new
        capacity (a restarted engine may report another KV size)."""
        if not 0 <= replica < len(self.replicas):
            raise ValueError(f"replica index {replica} outside [0, {len(self.replicas)})")
        if spec is not None:
            if spec.replica_id != self.replicas[replica].replica_id:
                raise ValueError(
                    f"replica {replica} is {self.replicas[replica].replica_id!r}, "
                    f"not {spec.replica_id!r}"
                )
            self.replicas[replica] = spec
        self._available[replica] = available
        t = self._table
        spec = self.replicas[replica]
        t.set_limits(replica, spec.kv_capacity_tokens, spec.max_running if available else 0)
        self._free_slots = sum(max(0, m - n) for m, n in zip(t.max_running, t.running, strict=True))

    # ------------------------------------------------------------------ decisions
    @abstractmethod
    def schedule(self) -> list[ChunkDecision]:
        """Dispatch queued requests, best first: one ``ChunkDecision`` per chunk to run now."""

    def _dispatch(self, r: int, rep: int, budget: int, need: int, kv: int) -> ChunkDecision:
        """Start a chunk of (taken) request ``r`` on replica ``rep``: ``budget`` new tokens at
        most, ``need`` KV tokens reserved there; ``kv``: the replica holding its KV (-1: none),
        its context migrates when that is another one."""
        q = self.requests
        t = self._table
        if t.running[rep] < t.max_running[rep]:
            self._free_slots -= 1
        t.add(rep, 1, need)
        self._dispatches += 1
        q.phase[r] = _RUNNING
        q.version[r] += 1
        q.chunk_replica[r] = rep
        q.chunk_budget[r] = budget
        q.chunk_reserve[r] = need
        gen = q.generated[r]
        migrate = q.prompt[r] + gen if (kv >= 0 and kv != rep) else 0
        probe = q.is_probe[r]
        if self._trace is not None:
            self._trace.dispatched(q.request_id[r], self.replicas[rep].replica_id)
        return ChunkDecision(
            request_id=q.request_id[r],
            group_id=self.groups.group_id[q.group[r]],
            replica=rep,
            generated=gen,
            chunk_cap=budget,
            priority=0 if probe else 1,
            is_probe=probe,
            migrate_tokens=migrate,
        )

    # ------------------------------------------------------------------ queues
    def _enqueue(self, r: int) -> None:
        q = self.requests
        q.phase[r] = _QUEUED
        q.version[r] += 1
        q.stamp[r] += 1
        self._n_queued += 1
        self._queue(r)

    @abstractmethod
    def _queue(self, r: int) -> None:
        """Put request ``r``, just queued (version and stamp bumped), in the ready queues."""

    @abstractmethod
    def _compact_queues(self, new_r: dict[int, int]) -> None:
        """The tables were compacted: renumber the queues' entries by ``new_r`` (old slot ->
        new slot; a slot not in it is gone)."""

    def _placed(self, new_groups: list[int]) -> None:
        """Groups ``new_groups`` (slots) were just added, their requests not yet queued."""
        return None

    def _key_inputs(self, g: GroupStats) -> object:
        """What the queue keys of ``g``'s requests depend on, before a change of its evidence
        (compared by ``_evidence_changed``); None: nothing."""
        return None

    def _evidence_changed(self, g: GroupStats, before: object, skip: int) -> None:
        """Group ``g`` learned something (a request progressed or finished; ``before``: its
        ``_key_inputs`` until then): re-key what depends on it, but request ``skip``."""
        return None

    def _take(self, r: int) -> int:
        self.requests.version[r] += 1  # invalidates its other queue entries
        self._n_queued -= 1
        return r

    def _terminate(self, r: int, phase: RequestPhase, reason: str = "cancelled") -> None:
        q = self.requests
        q.phase[r] = phase
        q.version[r] += 1
        self._n_open -= 1
        self.groups.open[q.group[r]] -= 1
        if self._trace is not None:
            self._trace.request_ended(
                q.request_id[r],
                q.generated[r],
                reason,
                q.is_probe[r],
            )

    def _compact(self) -> None:
        """Drop released groups from both tables, keeping the order of the rest (submission
        order breaks ties), and rebuild the queues from the live entries."""
        q = self.requests
        keep_g = [gi for gi, rel in enumerate(self.groups.released) if not rel]
        keep_r = [r for gi in keep_g for r in self.groups.stats[gi].members]
        keep_r.sort()
        new_r = {r: k for k, r in enumerate(keep_r)}
        new_g = {gi: k for k, gi in enumerate(keep_g)}

        q.compact(keep_r, new_g)
        self.groups.compact(keep_g, new_r)
        self._released_slots = 0
        self._compact_queues(new_r)

    # ------------------------------------------------------------------ views
    def _lookup(self, request_id: str) -> int:
        try:
            return self.requests.index[request_id]
        except KeyError:
            raise ValueError(f"unknown request {request_id!r}") from None

    def _group_index(self, group_id: str) -> int:
        try:
            return self.groups.index[group_id]
        except KeyError:
            raise ValueError(f"unknown group {group_id!r}") from None

    @property
    def num_queued(self) -> int:
        return self._n_queued

    @property
    def num_running(self) -> int:
        return sum(self._table.running)

    @property
    def num_finished(self) -> int:
        return self._n_finished

    @property
    def num_dispatched(self) -> int:
        """Chunk decisions made so far."""
        return self._dispatches

    @property
    def num_open(self) -> int:
        """Requests not yet finished or cancelled."""
        return self._n_open

    @property
    def num_groups(self) -> int:
        """Groups submitted and not yet released."""
        return len(self.groups.index)

    @property
    def num_held(self) -> int:
        """Request slots in the request table (open + terminal until released and compacted)."""
        return len(self.requests.request_id)

    @property
    def done(self) -> bool:
        return self._n_open == 0

    def request_phase(self, request_id: str) -> RequestPhase:
        return self.requests.phase[self._lookup(request_id)]

    def request_generated(self, request_id: str) -> int:
        return self.requests.generated[self._lookup(request_id)]

    def loads(self) -> list[ReplicaLoad]:
        t = self._table
        return [
            ReplicaLoad(
                replica_id=spec.replica_id,
                running=t.running[i],
                reserved_kv_tokens=t.reserved[i],
                kv_capacity_tokens=t.capacity[i],
            )
            for i, spec in enumerate(self.replicas)
        ]
