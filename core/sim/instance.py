"""One simulated engine instance in virtual time (continuous batching, discrete events).

Invariant: between two events of an instance its batch is fixed, so every running request
advances ``rate`` tokens per step and one step takes the frozen time ``step_s`` computed from the
cost model at the interval's start; an interval never spans a chunk completion, a KV overflow or
more than ``_REEVAL`` relative context growth, so freezing the step time is accurate. Blocking
work (prefill, recompute after preemption, KV pulls) is ``stall`` seconds before the next step.

Speculation sees no oracle: the true per-token acceptance of a slot (``alpha``, from the
acceptance model) only decides how many tokens it produces per step; the draft-length policy is
given the estimate of an ``AcceptanceEstimator`` (the class the engines' drafter runs), keyed by
the slot's group and by its reference count at dispatch (the simulator has no text; the count of
siblings with text past the request's position is what its acceptance depends on, as the match
length is in an engine). The estimator is fed with verified drafts: whenever the policy is
re-run, every slot that drafted since draws one verification outcome of its last draft from its
true acceptance (the accepted prefix of g Bernoulli(alpha) trials, from the instance's seeded
generator), the tokens an engine would have seen accepted in one step. Like the engines' drafter
(``StepDrafter``'s explore mode), a policy that stopped drafting keeps learning: after
``_EXPLORE_EVERY`` runs that drafted nothing, one interval drafts ``_EXPLORE_DRAFT`` tokens per
speculating slot (within the draft budget) whatever the estimate says.

Two admission modes: ``managed`` (the scheduler reserved KV; everything dispatched runs at
once and can never overflow) and ``engine`` (the veRL baseline: a FIFO waiting queue, admitted
while the KV fits, and on overflow the most recently admitted request is preempted and later
recomputed, like vLLM).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from core.drafting.acceptance import AcceptanceEstimator
from core.sim.cost import CostModel

_EPS = 1e-6
_REEVAL = 0.05  # re-freeze the step time after the batch's context grows by this fraction
_WATERMARK = 0.01  # vLLM keeps this fraction of KV blocks free when admitting
_REDRAFT = 0.1  # re-run the draft-length policy after the batch or context moved this much
_REDRAFT_EVERY = 32  # ... or after this many plans
_EXPLORE_EVERY = 8  # with an estimator: after this many policy runs that drafted nothing, one
_EXPLORE_DRAFT = 8  # interval drafts this many tokens per speculating slot (g_max), to learn


@dataclass(frozen=True, slots=True)
class _DraftRun:
    """The adaptive policy's last run on an instance: its batch size and context, per probe
    flag the (acceptances, draft lengths) it saw and gave, sorted by acceptance then length,
    and the draft tokens it gave in all."""

    batch: int
    context: float
    plain: tuple[np.ndarray, np.ndarray]
    probes: tuple[np.ndarray, np.ndarray]
    total: float


def _lookup(ref: tuple[np.ndarray, np.ndarray], alphas: np.ndarray) -> np.ndarray:
    """Draft lengths for ``alphas`` from a run's sorted (acceptances, lengths): requests whose
    acceptance the run saw share that acceptance's lengths by rank (the k-th of m tied
    requests takes the length at quantile (k + 0.5) / m of the run's tied ones); any other
    takes the length of the next higher acceptance the run saw (the highest, past its end)."""
    ra, rg = ref
    order = np.argsort(alphas, kind="stable")
    xs = alphas[order]
    lo = np.searchsorted(ra, xs, "left")
    hi = np.searchsorted(ra, xs, "right")
    first = np.searchsorted(xs, xs, "left")
    ties = np.searchsorted(xs, xs, "right") - first
    rank = np.arange(len(xs)) - first
    spread = lo + ((rank + 0.5) / ties * (hi - lo)).astype(np.int64)
    idx = np.where(hi > lo, spread, np.minimum(lo, len(ra) - 1))
    out = np.empty(len(xs))
    out[order] = rg[idx]
    return out


@dataclass(slots=True)
class Arrival:
    """A chunk (or, in engine mode, a whole request) handed to the instance."""

    req: int  # simulator request index
    tokens: int  # tokens this chunk will produce before it stops
    context: int  # prompt + generated tokens at its start
    stall_s: float  # blocking work before it can decode (prefill, recompute)
    alpha: float = 0.0  # per-token draft acceptance (0 = no speculation)
    probe: bool = False
    delay_s: float = 0.0  # asynchronous wait before it joins the batch (KV pull from the pool)
    group: str = ""  # group id (the acceptance estimator's per-group statistics)
    refs: int = 0  # siblings with text past its position at dispatch (the estimator's key)


@dataclass(slots=True)
class Instance:
    """A continuous-batching engine: slots arrays, numpy-vectorized."""

    cost: CostModel
    managed: bool
    choose_drafts: Callable[[list[float], list[bool], float, int], list[int]] | None = None
    trace: list[tuple[float, int]] | None = None
    draft_paths: int = 1  # a draft of g positions verifies draft_paths x g tokens
    # what the draft policy is told of acceptance; None = the true acceptance (a yardstick only)
    estimator: AcceptanceEstimator | None = None
    seed: int = 0  # of the generator that draws the verification outcomes fed to ``estimator``
    t: float = 0.0
    stall: float = 0.0
    step_s: float = 0.0
    next_event: float = float("inf")
    version: int = 0
    preemptions: int = 0
    busy_s: float = 0.0
    tokens_out: float = 0.0  # tokens produced (for the mean acceptance length)
    slot_steps: float = 0.0  # sum over steps of the batch size
    drafting_tokens_out: float = 0.0  # tokens produced by request-steps that verified drafts
    drafting_slot_steps: float = 0.0  # request-steps that verified drafts
    steps: float = 0.0  # decode / verification steps
    spec_steps: float = 0.0  # steps that verified draft tokens
    spec_cost: float = 0.0  # sum over speculative steps of step time / same step without drafts
    _step_ratio: float = 0.0  # of the frozen step; 0.0 = it verifies no drafts
    req: np.ndarray = field(init=False)
    remaining: np.ndarray = field(init=False)
    ctx: np.ndarray = field(init=False)
    rate: np.ndarray = field(init=False)
    drafting: np.ndarray = field(init=False)  # the slot verifies draft tokens this interval
    alpha: np.ndarray = field(init=False)
    probe: np.ndarray = field(init=False)
    produced: np.ndarray = field(init=False)
    target: np.ndarray = field(init=False)
    admitted: np.ndarray = field(init=False)
    active: np.ndarray = field(init=False)
    waiting: deque[Arrival] = field(default_factory=deque)
    _free: list[int] = field(default_factory=list)
    _seq: int = 0
    _last_draft: _DraftRun | None = None  # the adaptive policy's last run
    _plans_since_draft: int = 0
    _idle_runs: int = 0  # policy runs in a row that drafted nothing (exploration counter)
    _pending: list[tuple[float, int, Arrival]] = field(default_factory=list)
    group: np.ndarray = field(init=False)  # per slot: group id (str)
    refs: np.ndarray = field(init=False)  # per slot: reference count at dispatch
    est: np.ndarray = field(init=False)  # per slot: the estimator's acceptance, last refreshed
    glen: np.ndarray = field(init=False)  # per slot: draft length of the current interval
    _rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        n = self.cost.max_running
        self.req = np.full(n, -1, dtype=np.int64)
        self.remaining = np.zeros(n)
        self.ctx = np.zeros(n)
        self.rate = np.ones(n)
        self.drafting = np.zeros(n, dtype=bool)
        self.alpha = np.zeros(n)
        self.probe = np.zeros(n, dtype=bool)
        self.produced = np.zeros(n)
        self.target = np.zeros(n, dtype=np.int64)
        self.admitted = np.zeros(n, dtype=np.int64)
        self.active = np.zeros(n, dtype=bool)
        self._free = list(range(n - 1, -1, -1))
        self.group = np.full(n, "", dtype=object)
        self.refs = np.zeros(n, dtype=np.int64)
        self.est = np.zeros(n)
        self.glen = np.zeros(n)
        self._rng = np.random.default_rng(self.seed)

    @property
    def batch(self) -> int:
        return self.cost.max_running - len(self._free)

    @property
    def load(self) -> int:
        """Requests on this engine, running or waiting (what a DP load balancer compares)."""
        return self.batch + len(self.waiting)

    @property
    def kv_used(self) -> float:
        return float(self.ctx[self.active].sum())

    # ------------------------------------------------------------------ time
    def sync(self, now: float) -> None:
        """Advance to ``now`` (<= next_event) with the frozen step time."""
        dt = now - self.t
        if dt <= 0:
            return
        self.t = now
        if self.batch == 0:
            self.stall = max(0.0, self.stall - dt)
            return
        self.busy_s += dt
        if dt <= self.stall:
            self.stall -= dt
            return
        steps = (dt - self.stall) / self.step_s
        self.stall = 0.0
        # whole arrays: a free slot has nothing remaining, so it advances by exactly 0
        adv = np.minimum(self.rate * steps, self.remaining)
        self.remaining -= adv
        self.ctx += adv
        self.produced += adv
        self.tokens_out += float(adv[self.active].sum())
        self.slot_steps += steps * self.batch
        if self._step_ratio > 0.0:  # some slots verify drafts in this interval
            d = self.active & self.drafting
            self.drafting_tokens_out += float(adv[d].sum())
            self.drafting_slot_steps += steps * float(d.sum())
        self.steps += steps
        if self._step_ratio > 0.0:
            self.spec_steps += steps
            self.spec_cost += steps * self._step_ratio

    def pop_finished(self) -> list[tuple[int, int]]:
        """Remove chunks that produced all their tokens: [(req, tokens produced)]."""
        done = np.nonzero(self.active & (self.remaining <= _EPS))[0]
        out: list[tuple[int, int]] = []
        for s in done.tolist():
            out.append((int(self.req[s]), int(self.target[s])))
            self._release(s)
        return out

    # ------------------------------------------------------------------ admission
    def add(self, arrival: Arrival) -> None:
        """Hand over a chunk at time ``self.t`` (call ``sync`` first)."""
        if self.managed:
            if len(self._free) <= len(self._pending):
                raise RuntimeError("scheduler over-admitted: no free slot (max_running)")
            if arrival.delay_s > 0:
                self._seq += 1
                heapq.heappush(self._pending, (self.t + arrival.delay_s, self._seq, arrival))
            else:
                self._start(arrival)
        else:
            self.waiting.append(arrival)

    def activate_ready(self) -> None:
        """Managed mode: chunks whose KV pull has completed by ``self.t`` join the batch."""
        while self._pending and self._pending[0][0] <= self.t + _EPS:
            self._start(heapq.heappop(self._pending)[2])

    def admit_waiting(self) -> None:
        """Engine mode: admit FIFO while a slot and the KV (minus watermark) are free."""
        cap = self.cost.kv_capacity_tokens * (1.0 - _WATERMARK)
        used = self.kv_used
        while self.waiting and self._free:
            a = self.waiting[0]
            if used + a.context + 1 > cap and self.batch > 0:
                break
            self.waiting.popleft()
            used += a.context
            self._start(a)

    def _start(self, a: Arrival) -> None:
        s = self._free.pop()
        self.req[s] = a.req
        self.remaining[s] = float(a.tokens)
        self.ctx[s] = float(a.context)
        self.alpha[s] = a.alpha
        self.probe[s] = a.probe
        self.produced[s] = 0.0
        self.target[s] = a.tokens
        self.rate[s] = 1.0
        self.drafting[s] = False
        self.glen[s] = 0.0
        self.group[s] = a.group
        self.refs[s] = a.refs
        est = self.estimator
        self.est[s] = est.estimate(a.group, a.refs) if est is not None and a.alpha > 0 else 0.0
        self._seq += 1
        self.admitted[s] = self._seq
        self.active[s] = True
        self.stall += a.stall_s

    def _release(self, s: int) -> None:
        self.active[s] = False
        self.req[s] = -1
        self.remaining[s] = 0.0
        self.ctx[s] = 0.0
        self._free.append(s)

    def remove(self, req: int) -> float | None:
        """Take chunk ``req`` out at ``self.t`` (an abort; call ``sync`` first, ``plan`` after):
        from the batch, the waiting queue or the pending KV pulls. Returns the tokens it
        produced in its current admission (0.0 when it had not started), None when this
        instance does not hold it."""
        hit = np.nonzero(self.active & (self.req == req))[0]
        if len(hit):
            s = int(hit[0])
            produced = float(self.produced[s])
            self._release(s)
            return produced
        for i, a in enumerate(self.waiting):
            if a.req == req:
                del self.waiting[i]
                return 0.0
        for i, (_, _, a) in enumerate(self._pending):
            if a.req == req:
                self._pending.pop(i)
                heapq.heapify(self._pending)
                return 0.0
        return None

    def set_alpha(self, req: int, alpha: float, refs: int | None = None) -> bool:
        """Change chunk ``req``'s draft acceptance (and, when given, its reference count) from
        ``self.t`` on (more siblings became known while it runs; call ``sync`` first, ``plan``
        after). False when this instance does not hold it (a chunk still pulling its KV is not
        here yet)."""
        hit = np.nonzero(self.active & (self.req == req))[0]
        if len(hit):
            s = int(hit[0])
            self.alpha[s] = alpha
            if refs is not None:
                self.refs[s] = refs
                if self.estimator is not None and alpha > 0:
                    self.est[s] = self.estimator.estimate(str(self.group[s]), refs)
            return True
        for i, a in enumerate(self.waiting):
            if a.req == req:
                self.waiting[i] = replace(a, alpha=alpha, refs=a.refs if refs is None else refs)
                return True
        return False

    def preempt_if_full(self) -> list[tuple[int, int]]:
        """Engine mode: on KV overflow preempt the most recently admitted requests (recompute
        later). Returns [(req, tokens produced so far in this admission)] moved to waiting."""
        out: list[tuple[int, int]] = []
        cap = self.cost.kv_capacity_tokens
        while self.batch > 1 and self.kv_used > cap - _EPS:
            a = np.nonzero(self.active)[0]
            s = int(a[np.argmax(self.admitted[a])])
            produced = min(int(self.produced[s]), int(self.target[s]) - 1)
            req = int(self.req[s])
            rem = int(self.target[s]) - produced
            ctx = int(self.ctx[s] - self.produced[s]) + produced
            keep = (float(self.alpha[s]), bool(self.probe[s]), 0.0, str(self.group[s]),
                    int(self.refs[s]))  # fmt: skip
            self._release(s)
            self.preemptions += 1
            stall = self.cost.prefill_time(ctx)
            self.waiting.appendleft(Arrival(req, rem, ctx, stall, *keep))
            out.append((req, produced))
        return out

    # ------------------------------------------------------------------ events
    def _learn(self) -> None:
        """Feed the estimator one verification outcome per slot that drafted in the last
        interval (its draft of ``glen`` tokens, accepted prefix drawn from its true acceptance),
        then refresh every speculating slot's estimate."""
        est = self.estimator
        assert est is not None
        fed = np.nonzero(self.active & self.drafting & (self.glen > 0))[0]
        if len(fed):
            al = np.clip(self.alpha[fed], 1e-12, 1.0 - 1e-12)
            g = self.glen[fed]
            u = self._rng.random(len(fed))
            accepted = np.minimum(np.floor(np.log(u) / np.log(al)), g)  # P(>= k) = alpha^k
            for s, gi, ai in zip(fed.tolist(), g.tolist(), accepted.tolist(), strict=True):
                est.observe(str(self.group[s]), int(self.refs[s]), int(gi), int(ai))
        for s in np.nonzero(self.active & (self.alpha > 0))[0].tolist():
            self.est[s] = est.estimate(str(self.group[s]), int(self.refs[s]))

    def _draft_lengths(self, alphas: np.ndarray, ctx_sum: float, n: int) -> np.ndarray:
        """Draft length per running slot from the adaptive policy. The policy is re-run when
        the batch size or context moved by more than ``_REDRAFT`` since its last run (or every
        ``_REDRAFT_EVERY`` plans); in between, each slot takes the length the last run gave a
        request of its probe flag with the same acceptance (spread by rank over the lengths the
        last run gave that acceptance, so a share of tied requests that drafted stays a share),
        else with the nearest one, and the total never exceeds the last run's (which kept the
        step's draft budget)."""
        assert self.choose_drafts is not None
        probes = self.probe[self.active]
        last = self._last_draft
        stale = (
            last is None
            or abs(n - last.batch) > _REDRAFT * last.batch
            or abs(ctx_sum - last.context) > _REDRAFT * last.context
            or self._plans_since_draft >= _REDRAFT_EVERY
        )
        if self.estimator is not None:  # the policy sees the estimate, never the truth
            if stale:
                self._learn()
            alphas = self.est[self.active]
        if stale:
            gs = self.choose_drafts(alphas.tolist(), probes.tolist(), ctx_sum, n)
            g = np.asarray(gs, dtype=float)
            if self.estimator is not None:
                self._idle_runs = self._idle_runs + 1 if not g.any() else 0
                if self._idle_runs >= _EXPLORE_EVERY:
                    # explore for one interval; not kept as the last run, so the next plan
                    # re-runs the policy with what this interval taught the estimator
                    self._idle_runs = 0
                    self._plans_since_draft = _REDRAFT_EVERY
                    per = min(_EXPLORE_DRAFT, self.cost.draft_budget // max(n, 1))
                    return np.where(alphas > 0, float(per), 0.0)
            order = np.lexsort((g, alphas))  # by acceptance, then draft length
            la, lp, lg = alphas[order], probes[order], g[order]
            refs: list[tuple[np.ndarray, np.ndarray]] = []
            for flag in (False, True):  # the last run's (acceptance, length) per probe flag
                ref = lp == flag
                if not ref.any():
                    ref = np.ones_like(lp)  # no request of this flag ran: take them all
                refs.append((la[ref], lg[ref]))
            self._last_draft = _DraftRun(n, ctx_sum, refs[0], refs[1], float(g.sum()))
            self._plans_since_draft = 0
            return g
        self._plans_since_draft += 1
        assert last is not None
        out = np.empty(n)
        for flag, ref in ((False, last.plain), (True, last.probes)):
            sel = probes == flag
            if sel.any():
                out[sel] = _lookup(ref, alphas[sel])
        excess = int(round(out.sum() - last.total))
        while excess > 0:  # drop the draft tokens of least expected gain (a^g)
            gain = np.where(out > 0, alphas**out, np.inf)
            out[int(np.argmin(gain))] -= 1
            excess -= 1
        return out

    def plan(self) -> float:
        """Freeze the step time and return the time of this instance's next event."""
        self.version += 1
        n = self.batch
        if self.trace is not None:
            self.trace.append((self.t, n))
        ready = self._pending[0][0] if self._pending else float("inf")
        if n == 0:
            self.next_event = ready
            return self.next_event
        a = self.active
        ctx_sum = float(self.ctx[a].sum())
        draft = 0
        drafting = 0
        if self.choose_drafts is not None:
            alphas = self.alpha[a]
            if alphas.any():
                g = self._draft_lengths(alphas, ctx_sum, n)
                al = np.minimum(alphas, 1.0 - 1e-9)
                self.rate[a] = np.where(g > 0, (1.0 - al ** (g + 1.0)) / (1.0 - al), 1.0)
                self.drafting[a] = g > 0
                self.glen[a] = g
                draft = int(g.sum()) * self.draft_paths
                drafting = int((g > 0).sum())
            else:
                self.rate[a] = 1.0
                self.drafting[a] = False
        step = self.cost.step_time(n, ctx_sum, draft) + drafting * self.cost.draft_s_per_request
        self.step_s = step
        self._step_ratio = step / self.cost.step_time(n, ctx_sum, 0) if draft > 0 else 0.0
        rates = self.rate[a]
        steps = float((self.remaining[a] / rates).min())
        growth = float(rates.sum())
        steps = min(steps, max(16.0, _REEVAL * ctx_sum / growth))
        if not self.managed:
            room = self.cost.kv_capacity_tokens - ctx_sum
            steps = min(steps, max(room / growth, 0.0))
        self.next_event = min(self.t + self.stall + steps * step, ready)
        return self.next_event
