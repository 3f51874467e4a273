"""The divided-rollout scheduler: a pure state machine shared by the Serve app and the simulator.

Invariant: every request is in exactly one phase (QUEUED, RUNNING, FINISHED); a RUNNING request
has exactly one chunk in flight, on one replica, whose KV reservation (prompt + generated +
chunk budget) is counted on that replica until the chunk is reported back; in divided mode a
chunk is dispatched only where the reservation fits, so the scheduler never causes preemption.
A chunk continues the request where the previous one stopped; the request is re-queued after
each chunk until EOS or its own max_tokens. Dispatch order: probes first (smallest generated
first), then every ``explore_interval``-th slot to the shortest-looking unstarted request, every
``starvation_interval``-th slot to the longest-waiting request, otherwise the ordering policy's
smallest key. Routing: the configured routing policy, except that a request with at least
``rebalance_tokens`` generated is routed as if it held no KV (least-loaded replica that fits).

Long-lived use (one scheduler for every rollout of a service): groups may be submitted at any
time; ``cancel`` ends a group's requests (queued ones at once, running ones when their chunk is
reported); ``release`` drops a group whose requests are all terminal, and the tables (``tables.py``)
are compacted once released slots outnumber live ones, so memory and the cost of a decision
depend on the work in the scheduler, not on what it has served. A replica taken out of
rotation (``set_replica_available``) gets no chunk until it is back; its chunks in flight are
reported by the caller (``ABORT`` keeps the tokens they returned) and re-queued.

Driving it (the caller owns time and engines):
``submit(groups)`` -> ``schedule()`` -> run each ``ChunkDecision`` -> ``complete(...)`` ->
``schedule()`` ... until ``done``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from core.engine.types import FinishReason
from core.events import EventSink, NullSink
from core.scheduling.config import SchedulerConfig
from core.scheduling.estimate import GroupStats, LengthPrior, PopulationStats
from core.scheduling.ordering import ORACLE_ORDERINGS, STATIC_ORDERINGS
from core.scheduling.queues import FifoLine, ReadyQueues
from core.scheduling.routing import ReplicaTable, get_routing
from core.scheduling.tables import GroupTable, RequestTable
from core.scheduling.trace import EventTrace
from core.scheduling.types import (
    ChunkDecision,
    GroupSpec,
    ReplicaLoad,
    ReplicaSpec,
    RequestPhase,
)
from core.scheduling.verl import verl_assign

_QUEUED = RequestPhase.QUEUED
_RUNNING = RequestPhase.RUNNING
_FINISHED = RequestPhase.FINISHED
_CANCELLED = RequestPhase.CANCELLED
_TERMINAL = (_FINISHED, _CANCELLED)
_MAX_SKIPS = 8  # queued requests set aside per schedule() call when no replica fits them


class Scheduler:
    """Divided rollout + context-aware ordering (or the veRL baseline when not divided)."""

    def __init__(
        self,
        config: SchedulerConfig,
        replicas: Sequence[ReplicaSpec],
        prior: LengthPrior | None = None,
        compact_after: int = 4096,
        sink: EventSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``compact_after`` (>= 1): compact the request and group tables once at least this many
        slots (and at least as many as are live) belong to released groups. ``sink`` receives
        ``core.events`` records (chunk done, request finished, group estimate, group finished)
        stamped with ``clock()``; None or a ``NullSink``: no event is built."""
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
        self._route = get_routing(config.routing)
        self._table = ReplicaTable(
            capacity=[r.kv_capacity_tokens for r in replicas],
            max_running=[r.max_running for r in replicas],
            running=[0] * len(replicas),
            reserved=[0] * len(replicas),
        )
        self._free_slots = sum(r.max_running for r in replicas)
        self.requests = RequestTable()
        self.groups = GroupTable()
        self.oracle_lengths: Sequence[int] | None = None
        self._released_slots = 0  # request slots of released groups (until compaction)
        self._n_open = 0  # requests not yet terminal
        self.population = PopulationStats(prior_sigma=config.within_sigma_prior)
        self._queues = ReadyQueues(config, self)
        self._line = FifoLine(self.requests)  # veRL's queue
        self._n_queued = 0
        self._n_finished = 0
        self._since_rekey = 0
        self._dispatches = 0
        self._verl_next = 0
        self._group_keys_depend = config.ordering not in STATIC_ORDERINGS
        self._trace = (
            None if sink is None or isinstance(sink, NullSink) else EventTrace(sink, clock)
        )

    # ------------------------------------------------------------------ inputs
    def submit(
        self, groups: Sequence[GroupSpec], oracle_lengths: Mapping[str, int] | None = None
    ) -> None:
        """Queue new groups. ``oracle_lengths`` (request_id -> true length) is required by the
        ``oracle`` ordering and ignored otherwise."""
        q = self.requests
        need_oracle = self.config.ordering in ORACLE_ORDERINGS and self.config.divided
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
        if need_oracle:
            self.oracle_lengths = q.oracle
        if not self.config.divided:
            ids = [self.groups.group_id[g] for g in new_groups]
            n = len(self.replicas)
            for a, gi in zip(verl_assign(ids, n, self._verl_next % n), new_groups, strict=True):
                self.groups.replica[gi] = a.replica
            self._verl_next += len(new_groups)  # the next submission continues the rotation
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
        before = (g.log_mean(), g.paper_estimate())
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
            self._since_rekey += 1
            if trace is not None:
                trace.estimate(self.groups.group_id[gi], g)
                if self.groups.open[gi] == 0:
                    trace.group_ended(self.groups.group_id[gi])
        else:
            g.observe_progress(gen)
            self._enqueue(r)
        if self._group_keys_depend:
            if self._since_rekey >= self.config.rekey_every:
                self._rekey_all()
            elif (g.log_mean(), g.paper_estimate()) != before:
                self._rekey_group(g, skip=r)
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
            before = (g.log_mean(), g.paper_estimate())
            g.observe_progress(generated)
            if self._group_keys_depend and (g.log_mean(), g.paper_estimate()) != before:
                self._rekey_group(g, skip=-1)

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
        if self.config.ordering in ORACLE_ORDERINGS and self.config.divided:
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
    def schedule(self) -> list[ChunkDecision]:
        """Dispatch as many queued requests as the replicas can admit, best first."""
        q = self.requests
        if not self.config.divided:
            return self._schedule_verl()
        out: list[ChunkDecision] = []
        skipped: list[int] = []
        t = self._table
        chunk = self.config.chunk_tokens
        rebalance = self.config.rebalance_tokens
        while self._free_slots > 0 and self._n_queued > 0:
            r = self._queues.pop(self._dispatches)
            if r < 0:
                break
            self._take(r)
            budget = min(chunk, q.max_tokens[r] - q.generated[r])
            ctx = q.prompt[r] + q.generated[r]
            need = ctx + budget
            kv = q.kv_replica[r]
            if rebalance and q.generated[r] >= rebalance:
                kv = -1
            rep = self._route(t, kv, need, self.config.cache_threshold)
            kv = q.kv_replica[r]
            if rep < 0:
                skipped.append(r)
                if len(skipped) >= _MAX_SKIPS:
                    break
                continue
            out.append(self._dispatch(r, rep, budget, need, kv))
        for r in skipped:  # back in line, keeping their waiting position (and their key)
            self._n_queued += 1
            q.version[r] += 1
            self._queues.put_back(r)
        return out

    def _schedule_verl(self) -> list[ChunkDecision]:
        q = self.requests
        out: list[ChunkDecision] = []
        live = [i for i, ok in enumerate(self._available) if ok]
        if not live:
            return out
        while (r := self._line.pop()) >= 0:
            self._take(r)
            gi = q.group[r]
            rep = self.groups.replica[gi]
            if not self._available[rep]:  # its replica left rotation: the group moves, whole
                rep = live[self._verl_next % len(live)]
                self._verl_next += 1
                self.groups.replica[gi] = rep
            budget = q.max_tokens[r] - q.generated[r]
            need = q.prompt[r] + q.max_tokens[r]
            out.append(self._dispatch(r, rep, budget, need, q.kv_replica[r]))
        return out

    def _dispatch(self, r: int, rep: int, budget: int, need: int, kv: int) -> ChunkDecision:
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
            max_new_tokens=budget,
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
        if self.config.divided:
            self._queues.add(r)
        else:
            self._line.append(r)

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
        self._queues.compact(new_r)
        self._line.compact(new_r)

    def _rekey_group(self, g: GroupStats, skip: int) -> None:
        self._queues.rekey(g.members, skip)

    def _rekey_all(self) -> None:
        """Population statistics drifted: every queued key is recomputed (each live queued
        non-probe request has exactly one live entry in the main heap)."""
        self._since_rekey = 0
        self.population.refresh()
        self._queues.rekey_all(self._n_queued)

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
