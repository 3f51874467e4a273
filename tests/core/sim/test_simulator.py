"""The discrete-event simulator driving the real scheduler."""

from __future__ import annotations

import dataclasses

import pytest

from core.engine.types import FinishReason
from core.scheduling import ChunkDecision, Scheduler, SchedulerConfig, get_policy
from core.sim.acceptance import is_reference, paper_model
from core.sim.cost import QWEN2_VL_72B, CostModel
from core.sim.lower_bound import lower_bound
from core.sim.simulator import DraftChooser, simulate
from core.sim.workload import PRESETS, Workload, WorkloadSpec, generate
from core.stats import tail_time

COST = CostModel(QWEN2_VL_72B, gpus=8, bw_eff=0.5, flops_eff=0.5, step_overhead_s=0.02)
POLICIES = ("verl", "divided", "context", "context-max", "seer", "oracle")


def small(instances: int = 2, groups: int = 24, seed: int = 0) -> Workload:
    spec = WorkloadSpec("t", groups=groups, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=instances)  # fmt: skip
    return generate(spec, seed)


def test_one_request_alone_takes_the_cost_model_time() -> None:
    spec = WorkloadSpec("one", 1, 1, mean_tokens=20_000, max_tokens=40_000, instances=1,
                        length_sigma=0, within_sigma=0, outlier_frac=0.0)  # fmt: skip
    w = generate(spec)
    assert w.lengths == [[20_000]]
    for policy in ("verl", "divided", "oracle"):
        r = simulate(w, COST, policy, base=SchedulerConfig(chunk_tokens=100_000))
        assert r.makespan_s == pytest.approx(COST.time_alone(20_000, 1024), rel=0.01)
        assert r.makespan_s >= r.lower_bound_s * 0.99


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_completes_all_tokens(policy: str) -> None:
    w = small()
    r = simulate(w, COST, policy)
    assert r.throughput_tok_s * r.makespan_s == pytest.approx(w.total_tokens, rel=1e-9)
    assert 0 < r.tail_s < r.makespan_s
    if policy != "seer":  # without speculation nothing beats the bound
        assert r.makespan_s >= r.lower_bound_s * 0.99
        assert r.mean_acceptance_length == pytest.approx(1.0)
        assert r.spec_lower_bound_s is None
    else:  # speculation is held to its own bound
        assert r.spec_lower_bound_s is not None
        assert r.spec_lower_bound_s <= r.makespan_s
    if policy != "verl":
        assert r.preemptions == 0
        assert r.chunks >= w.spec.requests


def test_verl_preempts_when_kv_is_short_and_divided_never_does() -> None:
    tight = dataclasses.replace(COST, mem_util=0.32)  # ~55k KV tokens per instance
    w = small(instances=1, groups=12)
    verl = simulate(w, tight, "verl")
    assert verl.preemptions > 0
    # preempted requests keep their tokens: every token is produced exactly once
    assert verl.throughput_tok_s * verl.makespan_s == pytest.approx(w.total_tokens, rel=1e-9)
    divided = simulate(w, tight, "divided")
    assert divided.preemptions == 0
    assert divided.throughput_tok_s * divided.makespan_s == pytest.approx(w.total_tokens)


def test_seer_speculates_and_beats_context() -> None:
    w = small()
    seer = simulate(w, COST, "seer")
    ctx = simulate(w, COST, "context")
    assert seer.mean_acceptance_length > 1.3
    assert seer.makespan_s < 0.8 * ctx.makespan_s


def test_oracle_and_divided_beat_verl_on_imbalanced_load() -> None:
    w = small(instances=4, groups=16)
    verl = simulate(w, COST, "verl")
    assert simulate(w, COST, "oracle").makespan_s < verl.makespan_s
    assert simulate(w, COST, "divided").makespan_s < verl.makespan_s


def test_tail_time_and_lower_bound() -> None:
    assert tail_time([float(i) for i in range(1, 11)]) == pytest.approx(1.0)
    assert tail_time([5.0] * 20) == 0.0
    w = small()
    lb = lower_bound(w, COST)
    assert lb >= COST.time_alone(w.longest, 1024)


def test_trace_records_per_instance_activity() -> None:
    r = simulate(small(), COST, "context", trace=True)
    assert set(r.trace) == {0, 1}
    assert max(b for tr in r.trace.values() for _, b in tr) > 1
    assert all(tr[-1][1] == 0 for tr in r.trace.values())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_verl_calibrated_to_paper_within_15_percent(name: str) -> None:
    # full scale (verl's makespan is a max over instances, so it depends on their number); the
    # joint fit (lab.calibration.joint) is on the mean of the preset's fit seeds, one seed alone
    # varies by up to +-25% (moonlight); the fit trades the veRL time against its other targets
    # (qwen2-vl +10%), and the preemption count, at a quarter weight, most (qwen2-vl -17%)
    from lab.calibration.joint import fit_seeds

    p = PRESETS[name]
    runs = [simulate(generate(p.spec, seed), p.cost, "verl") for seed in fit_seeds(name)]
    assert abs(sum(r.makespan_s for r in runs) / len(runs) / p.paper_verl_s - 1) < 0.15, runs
    tail = sum(r.tail_s for r in runs) / len(runs)
    assert abs(tail / p.paper_verl_tail_s - 1) < 0.15, tail
    if p.paper_verl_preemptions is not None:
        pre = sum(r.preemptions for r in runs) / len(runs)
        assert abs(pre / p.paper_verl_preemptions - 1) < 0.2, pre


def test_context_prior_uses_an_earlier_iteration_of_the_same_prompts() -> None:
    spec = WorkloadSpec("t", groups=48, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=2, within_sigma=0.2, outlier_frac=0.0)  # fmt: skip
    w = generate(spec, seed=5)
    plain = simulate(w, COST, "context")
    seeded = simulate(w, COST, "context-prior")
    assert seeded.makespan_s != plain.makespan_s  # the prior changes decisions
    assert seeded.makespan_s < plain.makespan_s * 1.02
    recorded = dataclasses.replace(w, group_log_means=None)
    with pytest.raises(ValueError, match="no latent group lengths"):
        simulate(recorded, COST, "context-prior")


def test_seer_prior_is_context_prior_with_speculation() -> None:
    plan, twin = get_policy("seer-prior"), get_policy("context-prior")
    assert plan.speculate and plan.uses_prior and plan.config == twin.config
    spec = WorkloadSpec("t", groups=48, group_size=8, mean_tokens=3000, max_tokens=16384,
                        instances=2, within_sigma=0.2, outlier_frac=0.0)  # fmt: skip
    w = generate(spec, seed=5)
    seeded = simulate(w, COST, "seer-prior")
    assert seeded.mean_acceptance_length > 1.1  # it drafts
    assert seeded.makespan_s < simulate(w, COST, "context-prior").makespan_s
    # the prior changes its decisions: a prior of other lengths gives another rollout
    other = simulate(w, COST, "seer-prior", prior_seed=7)
    assert other.makespan_s != seeded.makespan_s


def test_oracle_seer_is_the_oracle_order_with_speculation() -> None:
    plan = get_policy("oracle-seer")
    assert plan.speculate and plan.config.ordering == "oracle"
    w = small()
    spec = simulate(w, COST, "oracle-seer")
    plain = simulate(w, COST, "oracle")
    assert spec.mean_acceptance_length > 1.1 and plain.mean_acceptance_length == 1.0
    assert spec.makespan_s < plain.makespan_s
    assert spec.spec_lower_bound_s is not None and spec.spec_lower_bound_s <= spec.makespan_s


def test_oracle_group_policy_runs() -> None:
    r = simulate(small(), COST, "oracle-group")
    assert r.preemptions == 0 and r.makespan_s > 0


def test_reusing_draft_lengths_between_policy_runs_is_close_to_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import core.sim.instance as instance

    w = small(groups=32)
    approx = simulate(w, COST, "seer")
    monkeypatch.setattr(instance, "_REDRAFT", 0.0)
    monkeypatch.setattr(instance, "_REDRAFT_EVERY", 0)
    exact = simulate(w, COST, "seer")
    assert approx.makespan_s == pytest.approx(exact.makespan_s, rel=0.03)


def fixed_drafts(g: int) -> DraftChooser:
    """A draft chooser that gives every running request ``g`` draft positions."""

    def choose(alphas: list[float], probes: list[bool], ctx_sum: float, n: int) -> list[int]:
        return [g] * n

    return choose


def test_verification_cost_is_paid_per_speculative_step_and_reported() -> None:
    w = small()
    free = simulate(w, COST, "seer", draft_chooser=fixed_drafts(4))
    dear_cost = dataclasses.replace(COST, verify_step_s=0.03)
    dear = simulate(w, dear_cost, "seer", draft_chooser=fixed_drafts(4))
    # same drafts, same acceptance: same tau, but every step pays 30 ms more
    assert dear.mean_acceptance_length == pytest.approx(free.mean_acceptance_length, rel=0.02)
    assert dear.makespan_s > free.makespan_s * 1.1
    assert dear.spec_step_share == free.spec_step_share == pytest.approx(1.0)
    # every request drafts every step: tau over drafting request-steps is tau
    assert free.drafting_acceptance_length == pytest.approx(free.mean_acceptance_length)
    # a plain step here is 20 ms overhead + <= ~45 ms roofline: 30 ms more is >= 1.45x
    assert dear.spec_step_cost_ratio > free.spec_step_cost_ratio + 0.4
    assert 1.0 < free.spec_step_cost_ratio < 1.2


def test_siblings_with_no_text_yet_are_not_references() -> None:
    # one group, every response dispatched at t=0 in a single chunk: no sibling has a token when
    # any of them starts, so each drafts from nothing (alpha_none), not from 7 references
    spec = WorkloadSpec("one group", 1, 8, mean_tokens=2000, max_tokens=8000, instances=1,
                        length_sigma=0, within_sigma=0.5, outlier_frac=0.0)  # fmt: skip
    w = generate(spec)
    base = SchedulerConfig(chunk_tokens=100_000)
    acc = paper_model()
    alone = dataclasses.replace(acc, alpha_full=acc.alpha_none)
    got = simulate(w, COST, "seer", base=base, acceptance=acc, draft_chooser=fixed_drafts(4))
    want = simulate(w, COST, "seer", base=base, acceptance=alone, draft_chooser=fixed_drafts(4))
    assert got.mean_acceptance_length == pytest.approx(want.mean_acceptance_length, rel=1e-9)
    # in chunks, later chunks of the longer responses find finished siblings and accept more
    chunked = simulate(w, COST, "seer", base=SchedulerConfig(chunk_tokens=256), acceptance=acc,
                       draft_chooser=fixed_drafts(4))  # fmt: skip
    assert chunked.mean_acceptance_length > want.mean_acceptance_length


def test_is_reference_counts_text_past_the_position_or_a_finished_sibling() -> None:
    assert not is_reference(0, 0, finished=False)
    assert not is_reference(100, 100, finished=False)
    assert is_reference(101, 100, finished=False)
    assert is_reference(50, 100, finished=True)


def test_adaptive_policy_stops_speculating_when_verification_is_too_dear() -> None:
    w = small()
    ctx = simulate(w, COST, "context")
    dear = dataclasses.replace(COST, verify_step_s=1.0)
    # told the true acceptance, the policy never drafts and makes context's decisions exactly
    never = simulate(w, dear, "seer", known_acceptance=True)
    assert never.mean_acceptance_length == pytest.approx(1.0)
    assert (never.spec_step_share, never.spec_step_cost_ratio) == (0.0, 1.0)
    assert never.makespan_s == pytest.approx(ctx.makespan_s, rel=1e-9)
    # learning it online, it still explores now and then (one interval after 8 runs that
    # drafted nothing, like the drafter's explore mode): a few speculative steps, paid for
    learning = simulate(w, dear, "seer")
    assert 0.0 < learning.spec_step_share < 0.05
    assert 1.0 < learning.mean_acceptance_length < 1.05
    assert learning.makespan_s > ctx.makespan_s
    some = simulate(w, dataclasses.replace(COST, verify_step_s=0.02), "seer")
    assert some.mean_acceptance_length > 1.0
    assert some.makespan_s < ctx.makespan_s


def test_a_k_path_draft_pays_for_its_tokens() -> None:
    # compute-bound enough that draft tokens cost time: 4 paths verify 4x the tokens
    heavy = dataclasses.replace(COST, flops_eff=0.02)
    acc1 = paper_model(multi_path=False)
    acc4 = dataclasses.replace(acc1, paths=4)
    w = small()
    one = simulate(w, heavy, "seer", acceptance=acc1, draft_chooser=fixed_drafts(4))
    four = simulate(w, heavy, "seer", acceptance=acc4, draft_chooser=fixed_drafts(4))
    assert four.mean_acceptance_length == pytest.approx(one.mean_acceptance_length, rel=0.02)
    assert four.spec_step_cost_ratio > one.spec_step_cost_ratio * 1.2
    assert four.makespan_s > one.makespan_s
    # the default acceptance is the one path vLLM 0.32 can verify
    assert paper_model().paths == 1 and paper_model(multi_path=True).paths == 4


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_speculation_calibrated_to_the_papers_step_cost(name: str) -> None:
    # issue 22: verify_step_s was fitted (lab.calibration.calibrate step) so that a speculative step
    # of seer (draft lengths from the online acceptance estimate) costs PAPER_SPEC_STEP_RATIO x a
    # plain one, means of SPEC_SEEDS at SPEC_SCALE; the Table 4 gain is validated, not fitted
    from lab.calibration.calibrate import PAPER_SPEC_STEP_RATIO, SPEC_SCALE, SPEC_SEEDS

    p = PRESETS[name]
    ratios = []
    for seed in SPEC_SEEDS:
        seer = simulate(generate(p.spec.scaled(SPEC_SCALE), seed), p.cost, "seer")
        assert seer.spec_step_share > 0.0
        ratios.append(seer.spec_step_cost_ratio)
    assert sum(ratios) / len(ratios) == pytest.approx(PAPER_SPEC_STEP_RATIO, rel=0.05)


def test_scheduler_is_asked_only_after_events_that_completed_a_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import core.sim.simulator as simulator

    idle_asks = [0]  # schedule() calls with no complete() since the previous call
    state = {"first": True, "changed": False}

    class Counting(Scheduler):  # seer is divided
        def schedule(self) -> list[ChunkDecision]:
            if not (state["first"] or state["changed"]):
                idle_asks[0] += 1
            state["first"] = state["changed"] = False
            return super().schedule()

        def complete(self, request_id: str, new_tokens: int, finish_reason: FinishReason) -> bool:
            state["changed"] = True
            return super().complete(request_id, new_tokens, finish_reason)

    monkeypatch.setattr(simulator, "make_scheduler", Counting)
    w = small()
    r = simulate(w, COST, "seer")
    assert r.throughput_tok_s * r.makespan_s == pytest.approx(w.total_tokens, rel=1e-9)
    assert idle_asks[0] == 0


def test_seer_paper_is_algorithm_2_plus_speculation() -> None:
    plan = get_policy("seer-paper")
    assert (plan.config.ordering, plan.config.probes, plan.speculate) == ("context-max", True, True)
    w = small()
    alg2 = simulate(w, COST, "context-max")
    paper = simulate(w, dataclasses.replace(COST, verify_step_s=0.02), "seer-paper")
    assert paper.mean_acceptance_length > 1.1
    assert paper.makespan_s < alg2.makespan_s
    # with speculation priced out (and the acceptance known: no exploration) it makes exactly
    # Algorithm 2's decisions
    dear = dataclasses.replace(COST, verify_step_s=1.0)
    off = simulate(w, dear, "seer-paper", known_acceptance=True)
    assert off.makespan_s == pytest.approx(alg2.makespan_s, rel=1e-9)


def test_per_rank_kv_makes_verl_preempt_where_the_pooled_kv_does_not() -> None:
    # 4 ranks of 1/4 the KV each: verl's requests land on ranks by the DP load balancer and
    # overflow a rank's KV; divided policies route chunks to ranks and never preempt
    agg = dataclasses.replace(COST, mem_util=0.4, max_running=64)  # 240k KV tokens pooled
    rank = dataclasses.replace(agg, ranks=4, max_running=16)  # 60k per rank
    spec = WorkloadSpec("t", groups=8, group_size=8, mean_tokens=6000, max_tokens=16384,
                        instances=1, outlier_frac=0.0, length_sigma=1.0,
                        within_sigma=0.8)  # fmt: skip
    w = generate(spec, 0)
    pooled = simulate(w, agg, "verl")
    split = simulate(w, rank, "verl")
    assert pooled.preemptions == 0 < split.preemptions
    for r in (split, simulate(w, rank, "divided"), simulate(w, rank, "seer")):
        assert r.throughput_tok_s * r.makespan_s == pytest.approx(w.total_tokens, rel=1e-9)
    assert simulate(w, rank, "divided").preemptions == 0


def test_a_request_that_cannot_fit_one_engine_is_refused() -> None:
    tiny = dataclasses.replace(COST, mem_util=0.3)  # ~44k KV tokens
    spec = WorkloadSpec("t", groups=2, group_size=2, mean_tokens=3000, max_tokens=16384,
                        instances=1)  # fmt: skip
    w = generate(spec, 0)
    simulate(w, tiny, "verl")  # fits
    with pytest.raises(ValueError, match=r"1024 prompt \+ 16384 max tokens.*11\d{3} KV tokens"):
        simulate(w, dataclasses.replace(tiny, ranks=4), "verl")


def test_seer_draft_policy_is_given_estimates_not_the_true_acceptance() -> None:
    # issue 22, item 3: the true acceptance (acceptance model x reference count) only sets the
    # tokens a step yields; the draft chooser sees the AcceptanceEstimator's online estimate
    w = small()
    acc = paper_model()
    truth = {round(acc.alpha(r), 9) for r in range(w.spec.group_size)}

    def recording(seen: set[float]) -> DraftChooser:
        def choose(alphas: list[float], probes: list[bool], ctx_sum: float, n: int) -> list[int]:
            seen.update(round(a, 9) for a in alphas)
            return [4] * n

        return choose

    told: set[float] = set()
    oracle: set[float] = set()
    est = simulate(w, COST, "seer", acceptance=acc, draft_chooser=recording(told))
    known = simulate(w, COST, "seer", acceptance=acc, draft_chooser=recording(oracle),
                     known_acceptance=True)  # fmt: skip
    assert oracle <= truth
    assert len(told - truth) > 10  # estimates: the prior, then learned values
    # the same drafts (fixed lengths) yield the same tokens: only what the policy is told differs
    assert est.mean_acceptance_length == pytest.approx(known.mean_acceptance_length, rel=1e-9)
    # with the adaptive policy the estimate costs little against knowing the truth
    adaptive = simulate(w, COST, "seer", acceptance=acc)
    clairvoyant = simulate(w, COST, "seer", acceptance=acc, known_acceptance=True)
    assert adaptive.makespan_s == pytest.approx(clairvoyant.makespan_s, rel=0.1)
    assert adaptive.spec_lower_bound_s is not None
    assert adaptive.makespan_s >= adaptive.spec_lower_bound_s
