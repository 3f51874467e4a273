"""Discrete-event simulator of N engine instances driven by the real ``core`` scheduler.

Invariant: virtual time only moves forward, to the earliest pending instance event; at every
event the instance reports its finished chunks to the *same* scheduler class the Serve app runs
(``make_scheduler``), and whatever that scheduler decides is started at that same instant. The
simulator knows each request's true length only to decide when its chunk stops (EOS) and to feed
the ``oracle`` ordering; no other policy sees it. Likewise each request's true draft acceptance
only decides how many tokens it produces per step: the draft-length policy of every instance is
given the estimate of its own ``AcceptanceEstimator`` (the engines' class), fed by the drafts it
verified (``core.sim.instance``); ``known_acceptance=True`` hands it the truth instead (a
yardstick).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.drafting.acceptance import AcceptanceEstimator
from core.engine.types import FinishReason
from core.scheduling import (
    ChunkDecision,
    DictLengthPrior,
    GroupSpec,
    LengthPrior,
    ReplicaSpec,
    SchedulerConfig,
    get_policy,
    make_scheduler,
)
from core.sim.acceptance import AcceptanceModel, is_reference, paper_model
from core.sim.cost import CostModel
from core.sim.instance import Arrival, Instance
from core.sim.lower_bound import draft_config, lower_bound, speculative_lower_bound
from core.sim.workload import Workload, resample_same_prompts
from core.stats import tail_time


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Figures of one simulated policy (times in virtual seconds)."""

    policy: str
    throughput_tok_s: float
    makespan_s: float
    tail_s: float
    lower_bound_s: float
    preemptions: int
    chunks: int
    migrations: int
    mean_acceptance_length: float  # tau: tokens per request per step (1.0 = no speculation)
    wall_s: float  # time this simulation took on this machine (also ``cpu_s``: CPU time)
    spec_step_cost_ratio: float = 1.0  # mean over speculative steps: step time / without drafts
    spec_step_share: float = 0.0  # fraction of steps that verified draft tokens
    trace: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    cpu_s: float = 0.0
    # tau over the request-steps that verified drafts only (1.0 when none did)
    drafting_acceptance_length: float = 1.0
    # the speculating policy's bound (``core.sim.lower_bound``); None for a policy that does not
    # speculate or runs a custom draft chooser (not held to the adaptive policy's limits)
    spec_lower_bound_s: float | None = None


DraftChooser = Callable[[list[float], list[bool], float, int], list[int]]


def adaptive_draft_chooser(cost: CostModel, paths: int = 1) -> DraftChooser:
    """Draft lengths from the drafting issue's marginal-benefit policy (the same code the
    engines run), with this instance's step time as the cost; a draft of g positions is
    charged ``paths`` x g verified tokens."""
    from core.drafting.adaptive import DraftCandidate, choose_draft_lengths

    cfg = draft_config(cost)
    ids = [f"s{i}" for i in range(cost.max_running)]

    def choose(alphas: list[float], probes: list[bool], ctx_sum: float, n: int) -> list[int]:
        cands = [DraftCandidate(ids[i], alphas[i], probes[i]) for i in range(n)]

        def step(b: int, d: int) -> float:
            return cost.step_time(b, ctx_sum, d * paths)

        out = choose_draft_lengths(cands, step, cfg)
        return [out[ids[i]] for i in range(n)]

    return choose


def simulate(
    work: Workload,
    cost: CostModel,
    policy: str,
    base: SchedulerConfig | None = None,
    acceptance: AcceptanceModel | None = None,
    prior: LengthPrior | None = None,
    trace: bool = False,
    draft_chooser: DraftChooser | None = None,
    progress: Callable[[float], None] | None = None,
    prior_seed: int = 1_000_003,
    known_acceptance: bool = False,
) -> PolicyResult:
    """Run one policy on ``work``; returns its figures. A policy that ``uses_prior`` gets, unless
    ``prior`` is given, the lengths of another iteration of the same prompts (drawn with
    ``prior_seed``; needs a generated workload). A speculating policy's draft lengths are chosen
    from each instance's online acceptance estimate, or from the true acceptance with
    ``known_acceptance`` (an oracle yardstick, not a policy)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    plan = get_policy(policy, base)
    spec = work.spec
    need = max(work.prompt_tokens) + spec.max_tokens
    if need > cost.kv_capacity_tokens:
        raise ValueError(
            f"a request of {max(work.prompt_tokens)} prompt + {spec.max_tokens} max tokens does "
            f"not fit one engine's {cost.kv_capacity_tokens} KV tokens (it would never finish)"
        )
    G = spec.group_size
    # Requests in submission order: group g, response i -> index g * G + i.
    true_len = [x for row in work.lengths for x in row]
    req_ids = [f"g{g}-{i}" for g in range(spec.groups) for i in range(G)]
    index = {rid: k for k, rid in enumerate(req_ids)}
    prompt = [work.prompt_tokens[k // G] for k in range(len(true_len))]
    groups = [
        GroupSpec(
            group_id=f"g{g}",
            request_ids=tuple(req_ids[g * G : (g + 1) * G]),
            max_tokens=spec.max_tokens,
            prompt_tokens=work.prompt_tokens[g],
            prompt_key=f"p{g}",
        )
        for g in range(spec.groups)
    ]
    managed = plan.config.divided
    # One engine per instance, or per data-parallel attention rank (``cost.ranks``). Divided
    # policies route chunks to ranks (each its own KV); verl hands whole groups to instances and
    # the engine's DP load balancer puts each request on the rank with the fewest requests.
    ranks = cost.ranks
    engines = spec.instances * ranks
    if managed or ranks == 1:
        replicas = [
            ReplicaSpec(f"i{i}", cost.kv_capacity_tokens, cost.max_running) for i in range(engines)
        ]
    else:
        replicas = [
            ReplicaSpec(f"i{i}", cost.kv_capacity_tokens * ranks, cost.max_running * ranks)
            for i in range(spec.instances)
        ]
    if plan.uses_prior and prior is None:
        # the previous iteration on the same prompts: same latent group lengths, fresh noise
        earlier = resample_same_prompts(work, seed=prior_seed)
        prior = DictLengthPrior({f"p{g}": row for g, row in enumerate(earlier.lengths)})
    sched = make_scheduler(plan.config, replicas, prior=prior)
    sched.submit(groups, oracle_lengths=dict(zip(req_ids, true_len, strict=True)))
    acc = acceptance or paper_model()
    chooser = None
    if plan.speculate:
        chooser = draft_chooser or adaptive_draft_chooser(cost, acc.paths)
    traces: dict[int, list[tuple[float, int]]] = {}
    insts = []
    for i in range(engines):
        tr: list[tuple[float, int]] | None = [] if trace else None
        if tr is not None:
            traces[i] = tr
        estimator = AcceptanceEstimator() if plan.speculate and not known_acceptance else None
        insts.append(
            Instance(
                cost=cost, managed=managed, choose_drafts=chooser, trace=tr, draft_paths=acc.paths,
                estimator=estimator, seed=i,
            )
        )  # fmt: skip
    generated = [0] * len(true_len)
    finish_at = [0.0] * len(true_len)
    heap: list[tuple[float, int, int]] = []
    chunks = 0
    migrations = 0
    chunk_start = [0] * len(true_len)
    n_req = len(true_len)
    n_done = 0
    tick = max(1, n_req // 100)

    def refs_at(k: int) -> int:
        g0 = (k // G) * G
        pos = generated[k]
        n = 0
        for j in range(g0, g0 + G):
            if j != k and is_reference(generated[j], pos, generated[j] >= true_len[j]):
                n += 1
        return n

    def start(decisions: list[ChunkDecision], now: float) -> set[int]:
        nonlocal chunks, migrations
        touched: set[int] = set()
        for d in decisions:
            k = index[d.request_id]
            e = d.replica
            if not managed and ranks > 1:
                first = d.replica * ranks
                e = min(range(first, first + ranks), key=lambda j: insts[j].load)
            inst = insts[e]
            if e not in touched:
                inst.sync(now)
                touched.add(e)
            produce = min(d.chunk_cap, true_len[k] - d.generated)
            chunk_start[k] = d.generated
            stall = 0.0
            if d.generated == 0:
                stall += cost.prefill_time(prompt[k])
            delay = 0.0
            if d.migrate_tokens > 0:
                delay = cost.migrate_time(d.migrate_tokens)
                migrations += 1
            refs = refs_at(k) if plan.speculate else 0
            alpha = acc.alpha(refs) if plan.speculate else 0.0
            inst.add(
                Arrival(k, produce, prompt[k] + d.generated, stall, alpha, d.is_probe, delay,
                        groups[k // G].group_id, refs)
            )  # fmt: skip
            chunks += 1
        return touched

    def replan(i: int) -> None:
        inst = insts[i]
        if not managed:
            inst.admit_waiting()
        t = inst.plan()
        if t < math.inf:
            heapq.heappush(heap, (t, i, inst.version))

    for i in start(sched.schedule(), 0.0):
        replan(i)
    now = 0.0
    while heap:
        t, i, ver = heapq.heappop(heap)
        inst = insts[i]
        if ver != inst.version:
            continue
        now = t
        inst.sync(now)
        if managed:
            inst.activate_ready()
        finished = inst.pop_finished()
        for k, produced in finished:
            gen = generated[k] + produced
            generated[k] = gen
            rid = req_ids[k]
            if gen >= true_len[k]:
                reason = FinishReason.LENGTH if gen >= spec.max_tokens else FinishReason.STOP
                finish_at[k] = now
            else:
                reason = FinishReason.CHUNK
            if sched.complete(rid, gen - chunk_start[k], reason):
                finish_at[k] = now
                n_done += 1
                if progress is not None and n_done % tick == 0:
                    progress(n_done / n_req)
        if not managed:
            for k, produced in inst.preempt_if_full():
                generated[k] += produced  # tokens kept; recomputed on readmission
        # The scheduler is a pure state machine and only complete() changes its state between
        # events: after an event without one (step time re-frozen, KV pull done, preemption)
        # schedule() would return nothing again, so it is not asked (exact, and most events).
        touched = start(sched.schedule(), now) if finished else set()
        touched.add(i)
        for j in touched:
            replan(j)
    if not sched.done:
        raise RuntimeError(
            f"simulation of {policy!r} stalled with {sched.num_queued} queued, "
            f"{sched.num_running} running requests"
        )
    makespan = max(finish_at)
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    spec_bound = None
    if plan.speculate and draft_chooser is None:
        spec_bound = speculative_lower_bound(work, cost, acc, draft_config(cost))
    total = float(sum(true_len))
    slot_steps = sum(x.slot_steps for x in insts)
    mal = sum(x.tokens_out for x in insts) / slot_steps if slot_steps > 0 else 1.0
    d_steps = sum(x.drafting_slot_steps for x in insts)
    d_tau = sum(x.drafting_tokens_out for x in insts) / d_steps if d_steps > 0 else 1.0
    steps = sum(x.steps for x in insts)
    spec_steps = sum(x.spec_steps for x in insts)
    ratio = sum(x.spec_cost for x in insts) / spec_steps if spec_steps > 0 else 1.0
    return PolicyResult(
        policy=policy,
        throughput_tok_s=total / makespan,
        makespan_s=makespan,
        tail_s=tail_time(finish_at),
        lower_bound_s=lower_bound(work, cost),
        preemptions=sum(x.preemptions for x in insts),
        chunks=chunks,
        migrations=migrations,
        mean_acceptance_length=mal,
        wall_s=wall_s,
        spec_step_cost_ratio=ratio,
        spec_step_share=spec_steps / steps if steps > 0 else 0.0,
        trace=traces,
        cpu_s=cpu_s,
        spec_lower_bound_s=spec_bound,
        drafting_acceptance_length=d_tau,
    )
