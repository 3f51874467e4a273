"""The ``sim`` engine: one paper-scale instance of the ``core.sim`` simulator, in wall time.

Invariant: the engine drives one ``core.sim.instance.Instance`` (the simulator's continuous
batching, vLLM-style engine admission: FIFO waiting queue, admitted while a slot and the KV fit,
preempted and recomputed on KV overflow) whose virtual clock is ``(wall - t0) / time_scale``.
It sleeps exactly until the instance's next planned event (one loop timer, rescheduled when a
chunk arrives, ends or is aborted): no polling, and the CPU cost is per event, not per step.
Chunk k of a request gets exactly the tokens and stop point of the same response generated at
once (``app.engines.sim.workload``). Costs as in the simulator: a first chunk pays its prompt's
prefill (blocking the batch); a continuation whose context this engine does not hold waits for
its KV pull from the global pool (``cost.migrate_time``, not blocking the batch).

Speculation (a chunk that asks for it, ``ChunkRequest.speculate``) follows the simulator: the
chunk decodes at the acceptance model's per-token rate for the number of its group's siblings
that already got past its position, with draft lengths from the adaptive policy. A sibling's
progress is known from the chunks this engine ran and, once the replica's sync loop calls
``draft_sync``, from the draft server (``core.drafting.shared``, lengths only): every
speculating chunk's tokens are pushed when it ends and the watched groups' lengths pulled, so a
group spread over many replicas drafts from the whole group, as ``seer simulate`` assumes (one
group index over the cluster), up to the sync period's staleness. Draft lengths are chosen
from the engine's online acceptance estimate (``AcceptanceEstimator``, as the vLLM drafter's),
fed by the drafts the instance verified, never from the acceptance model's true rate
(``core.sim.instance``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from collections import OrderedDict
from enum import Enum

from app.engines.config import EngineConfig, SimConfig
from app.engines.sim.workload import (
    EOS,
    SimWorkload,
    Track,
    decode_ids,
    encode_text,
    sim_workload,
)
from app.weights_digest import verified_digest
from core.drafting.acceptance import AcceptanceEstimator
from core.drafting.shared import FINISHED, SyncBatch, SyncClient, SyncReply
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad, FinishReason
from core.sim.acceptance import AcceptanceModel, is_reference, paper_model
from core.sim.instance import Arrival, Instance
from core.sim.simulator import adaptive_draft_chooser

CHAT = ("<|user|>\n", "\n<|assistant|>\n")
_HELD_MAX = 65_536  # requests whose context this engine remembers holding (LRU)
_MAX_EVENTS = 1_000_000  # events handled in one catch-up: fail loudly rather than hang
_GROUPS_MAX = 65_536  # groups whose responses' progress this engine remembers (LRU)


class _Phase(Enum):
    PULLING = "pulling"  # waiting for its KV to arrive from the pool
    QUEUED = "queued"  # inside the instance (waiting or running)


@dataclasses.dataclass(slots=True)
class _Chunk:
    request: ChunkRequest
    track: Track
    tokens: int  # tokens this chunk produces unless aborted
    stops: bool  # the last of them is the response's EOS
    arrival: Arrival
    future: asyncio.Future[None]
    wall0: float
    phase: _Phase = _Phase.QUEUED
    kept: int = 0  # tokens kept across preemptions (the instance restarts the rest)
    pull: asyncio.TimerHandle | None = None
    produced: int = 0  # when over: tokens it returns
    finish: FinishReason = FinishReason.CHUNK
    policy_version: int = 0  # the engine's weights when the chunk started


class SimCodec:
    """The sim backend's text codec (bytes), for the ingress."""

    max_token_bytes = 1  # a byte

    def __init__(self, config: EngineConfig) -> None:
        self.vocab_size = (config.sim or SimConfig()).vocab_size

    def encode(self, text: str, chat: bool) -> list[int]:
        return encode_text(f"{CHAT[0]}{text}{CHAT[1]}" if chat else text)

    def decode(self, token_ids: list[int]) -> str:
        return decode_ids(token_ids)


class SimEngine:
    def __init__(self, config: EngineConfig, replica_id: str = "replica-0") -> None:
        self.config = config
        self.sim: SimConfig = config.sim or SimConfig()
        self.replica_id = replica_id
        self._work: SimWorkload | None = None
        self._inst: Instance | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._chunks: dict[int, _Chunk] = {}
        self._by_request: dict[str, int] = {}
        self._held: OrderedDict[str, int] = OrderedDict()
        self._seq = 0
        self._queries = 0
        self._hits = 0
        self._acceptance: AcceptanceModel = paper_model()
        self.speculation: DraftSettings = config.speculation.settings
        # group id -> request id -> tokens it is known to have generated (here or, through the
        # draft server, on another replica)
        self._progress: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._sync: SyncClient | None = None
        self.policy_version = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._inst is not None:
            return
        work = await asyncio.to_thread(sim_workload, self.sim)
        cap = work.cost.kv_capacity_tokens
        if self.config.max_model_len > cap:
            raise ValueError(
                f"engine.max_model_len={self.config.max_model_len} exceeds the KV capacity of "
                f"one {work.cost.model.name} instance ({cap} tokens)"
            )
        self._work = work
        cost = dataclasses.replace(work.cost, max_running=self.config.max_num_seqs)
        acc = self._acceptance
        self._inst = Instance(
            cost=cost,
            managed=False,
            choose_drafts=adaptive_draft_chooser(cost, acc.paths),
            draft_paths=acc.paths,
            estimator=AcceptanceEstimator(),
        )
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()

    async def worker_gpu_ids(self) -> list[str]:
        return []  # no workers: the replica's own GPUs are all there are

    async def shutdown(self) -> None:
        """Abort every chunk (they return the tokens produced so far) and stop the clock."""
        for k in list(self._chunks):
            self._take_out(k)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._inst = None

    @property
    def workload(self) -> SimWorkload:
        if self._work is None:
            raise RuntimeError(f"engine {self.replica_id} is not started; call start() first")
        return self._work

    # ------------------------------------------------------------------ codec
    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def vocab_size(self) -> int:
        return self.sim.vocab_size

    def encode(self, text: str, chat: bool) -> list[int]:
        return SimCodec(self.config).encode(text, chat)

    def decode(self, token_ids: list[int]) -> str:
        return decode_ids(token_ids)

    # ------------------------------------------------------------------ chunks
    async def run_chunk(self, request: ChunkRequest) -> ChunkResult:
        inst = self._inst
        work = self._work
        if inst is None or work is None or self._loop is None:
            raise RuntimeError(f"engine {self.replica_id} is not started; call start() first")
        if request.request_id in self._by_request:
            raise ValueError(f"request {request.request_id} already has a running chunk")
        budget = request.budget_within(self.max_model_len)
        track = work.track(request.prompt_token_ids, request.response_index)
        done = len(request.generated_token_ids)
        n, stops = budget, False
        if track.stop is not None and track.stop - done <= budget:
            n, stops = max(track.stop - done, 1), True
        prompt = len(request.prompt_token_ids)
        context = prompt + done
        held = min(self._held.pop(request.request_id, 0), context)
        self._queries += context
        self._hits += held
        self._seq += 1
        k = self._seq
        stall = work.cost.prefill_time(prompt) if done == 0 else 0.0
        alpha, refs = 0.0, 0
        if request.speculate and self.speculation.enabled:
            refs = self._references(request, done)
            alpha = self._acceptance.alpha(refs)
        chunk = _Chunk(
            request=request,
            track=track,
            tokens=n,
            stops=stops,
            arrival=Arrival(
                k, n, context, stall, alpha, request.is_probe, group=request.group_id, refs=refs
            ),
            future=self._loop.create_future(),
            wall0=time.perf_counter(),
            policy_version=self.policy_version,
        )
        self._chunks[k] = chunk
        self._by_request[request.request_id] = k
        self._advance()
        pull = work.cost.migrate_time(context - held) if done > 0 else 0.0
        if pull > 0:
            chunk.phase = _Phase.PULLING
            chunk.pull = self._loop.call_later(pull * self.sim.time_scale, self._pulled, k)
        else:
            inst.add(chunk.arrival)
            self._replan()
        if request.speculate and self._sync is not None:  # only drafts read what is shared
            self._sync.watch(request.group_id)
        try:
            await chunk.future
        finally:
            if k in self._chunks:  # cancelled by the caller: free the slot at once
                self._take_out(k)
        result = self._result(chunk)
        if request.speculate and self._sync is not None:
            finished = result.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
            self._sync.push(request.group_id, request.request_id, done, result.token_ids, finished)
        return result

    def _references(self, request: ChunkRequest, position: int) -> int:
        """Siblings known to have generated past ``position`` (or finished: ``FINISHED``)."""
        group = self._progress.get(request.group_id)
        if group is None:
            return 0
        me = request.request_id
        return sum(
            1 for r, n in group.items() if r != me and is_reference(n, position, n == FINISHED)
        )

    def _record(self, group_id: str, request_id: str, generated: int) -> None:
        group = self._progress.setdefault(group_id, {})
        self._progress.move_to_end(group_id)
        group[request_id] = max(group.get(request_id, 0), generated)
        while len(self._progress) > _GROUPS_MAX:
            self._progress.popitem(last=False)

    async def draft_sync(self, reply: SyncReply | None) -> SyncBatch | None:
        """Lengths-only exchange with the draft server (see the module docstring); the first
        call starts sharing."""
        if self._sync is None:
            self._sync = SyncClient(self.replica_id, lengths_only=True)
            for gid in self._progress:
                self._sync.watch(gid)
        changed: set[str] = set()
        for update in self._sync.done(reply):
            for rid, n in update.lengths.items():
                self._record(update.group_id, rid, n)
            changed.add(update.group_id)
        if changed:
            self._refresh_alphas(changed)
        return self._sync.batch()

    def _refresh_alphas(self, groups: set[str]) -> None:
        """Speculating chunks of ``groups`` draft from the siblings now known (at their start
        position, as when they arrived), from now on: the vLLM drafter, too, uses what the
        draft server brought at its next step."""
        inst = self._inst
        if inst is None or not self.speculation.enabled:
            return
        raised: list[tuple[int, float, int]] = []
        for k, chunk in self._chunks.items():
            req = chunk.request
            if not req.speculate or req.group_id not in groups:
                continue
            refs = self._references(req, len(req.generated_token_ids))
            alpha = self._acceptance.alpha(refs)
            if alpha > chunk.arrival.alpha:
                raised.append((k, alpha, refs))
        if not raised:
            return
        self._advance()  # the old rates hold up to now (chunks may end here)
        for k, alpha, refs in raised:
            live = self._chunks.get(k)
            if live is None:
                continue
            live.arrival = dataclasses.replace(live.arrival, alpha=alpha, refs=refs)
            inst.set_alpha(k, alpha, refs)  # a chunk still pulling its KV takes it on arrival
        self._replan()

    async def check_health(self) -> None:
        return None

    async def configure_speculation(self, settings: DraftSettings) -> DraftSettings:
        """``enabled`` switches the acceptance model on and off; lengths stay adaptive."""
        self.speculation = settings
        return settings

    async def release_groups(self, group_ids: list[str]) -> int:
        if self._sync is not None:
            self._sync.forget(group_ids)
        return sum(self._progress.pop(g, None) is not None for g in group_ids)

    async def update_weights(self, path: str, version: int, digest: str | None = None) -> str:
        """Simulated weights change no recorded response; the version is reported and what
        drafting knew of the old policy is dropped (the digest is the directory's real one)."""
        if not await asyncio.to_thread(os.path.isdir, path):
            raise ValueError(f"{self.replica_id}: weights path {path!r} is not a directory")
        loaded = await asyncio.to_thread(verified_digest, path, digest)
        self._progress.clear()
        if self._sync is not None:
            self._sync.clear()
        self.policy_version = version
        return loaded

    async def abort(self, request_id: str) -> bool:
        k = self._by_request.get(request_id)
        if k is None:
            return False
        return self._take_out(k)

    def load(self) -> EngineLoad:
        """Load as of the instance's last event (at most ~5% context growth old)."""
        inst = self._inst
        if inst is None:
            return EngineLoad(replica_id=self.replica_id, policy_version=self.policy_version)
        cap = inst.cost.kv_capacity_tokens
        pulling = sum(1 for c in self._chunks.values() if c.phase is _Phase.PULLING)
        return EngineLoad(
            replica_id=self.replica_id,
            running=inst.batch,
            waiting=len(inst.waiting) + pulling,
            chunks_in_flight=len(self._chunks),
            kv_usage=min(1.0, inst.kv_used / cap),
            kv_capacity_tokens=cap,
            prefix_cache_queries=self._queries,
            prefix_cache_hits=self._hits,
            policy_version=self.policy_version,
        )

    # ------------------------------------------------------------------ virtual time
    def _now(self) -> float:
        assert self._loop is not None
        return (self._loop.time() - self._t0) / self.sim.time_scale

    def _advance(self, now: float | None = None) -> None:
        """Bring the instance to ``now`` (default: the wall clock), handling every event due."""
        inst = self._inst
        assert inst is not None
        t = self._now() if now is None else now
        for _ in range(_MAX_EVENTS):
            if inst.next_event > t:
                break
            inst.sync(inst.next_event)
            for k, _ in inst.pop_finished():
                self._end(k)
            for k, produced in inst.preempt_if_full():
                self._chunks[k].kept += produced
            inst.admit_waiting()
            inst.plan()
        else:
            raise RuntimeError(f"sim engine {self.replica_id}: no progress at t={inst.t}")
        inst.sync(t)

    def _replan(self) -> None:
        """The batch changed: admit, freeze a new step time, sleep until the next event."""
        inst = self._inst
        assert inst is not None and self._loop is not None
        inst.admit_waiting()
        inst.plan()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if math.isfinite(inst.next_event):
            wall = self._t0 + inst.next_event * self.sim.time_scale
            self._timer = self._loop.call_at(wall, self._on_event)

    def _on_event(self) -> None:
        self._timer = None
        if self._inst is None:
            return
        self._advance(max(self._now(), self._inst.next_event))
        self._replan()

    def _pulled(self, k: int) -> None:
        chunk = self._chunks.get(k)
        if chunk is None or self._inst is None:
            return
        chunk.pull = None
        chunk.phase = _Phase.QUEUED
        self._advance()
        self._inst.add(chunk.arrival)
        self._replan()

    def _take_out(self, k: int) -> bool:
        """Abort chunk ``k`` (if still running): out of the instance with the whole tokens it
        produced so far. False when it had already ended."""
        inst = self._inst
        if inst is not None:
            self._advance()  # it may have just finished
        chunk = self._chunks.get(k)
        if chunk is None:
            return False
        if chunk.pull is not None:
            chunk.pull.cancel()
        produced = inst.remove(k) if inst is not None else None
        kept = chunk.kept + int(produced or 0.0)
        self._end(k, aborted=True, produced=min(kept, chunk.tokens - 1))
        if inst is not None:
            self._replan()
        return True

    def _end(self, k: int, aborted: bool = False, produced: int | None = None) -> None:
        """Chunk ``k`` is over: remember the context this engine now holds, wake its caller."""
        chunk = self._chunks.pop(k)
        req = chunk.request
        del self._by_request[req.request_id]
        chunk.produced = chunk.tokens if produced is None else produced
        if aborted:
            chunk.finish = FinishReason.ABORT
        elif chunk.stops:
            chunk.finish = FinishReason.STOP
        else:
            chunk.finish = req.budget_end(chunk.produced, self.max_model_len)
        done = len(req.generated_token_ids) + chunk.produced
        finished = chunk.finish in (FinishReason.STOP, FinishReason.LENGTH)
        self._record(req.group_id, req.request_id, FINISHED if finished else done)
        if chunk.finish in (FinishReason.CHUNK, FinishReason.ABORT):
            context = len(req.prompt_token_ids) + len(req.generated_token_ids) + chunk.produced
            self._held[req.request_id] = context
            while len(self._held) > _HELD_MAX:
                self._held.popitem(last=False)
        if not chunk.future.done():
            chunk.future.set_result(None)

    def _result(self, chunk: _Chunk) -> ChunkResult:
        req = chunk.request
        done = len(req.generated_token_ids)
        ids, lps = chunk.track.tokens(done, done + chunk.produced, req.logprobs)
        if chunk.finish is FinishReason.STOP:
            ids[-1] = EOS  # also when the caller's tokens already ran past the stop point
        return ChunkResult(
            request_id=req.request_id,
            token_ids=ids,
            logprobs=lps if req.logprobs else None,
            finish_reason=chunk.finish,
            engine_steps=chunk.produced,
            elapsed_s=time.perf_counter() - chunk.wall0,
            policy_version=chunk.policy_version,
        )
