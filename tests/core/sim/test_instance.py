"""Instance: removing a chunk (abort) from the batch, the waiting queue or the pending pulls."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from core.sim.cost import QWEN2_VL_72B, CostModel
from core.sim.instance import Arrival, Instance

COST = CostModel(QWEN2_VL_72B, gpus=8, step_overhead_s=0.02, max_running=2)


def test_remove_from_batch_returns_tokens_produced_and_frees_the_slot() -> None:
    inst = Instance(cost=COST, managed=False)
    inst.add(Arrival(0, 100, 50, 0.0))
    inst.add(Arrival(1, 100, 50, 0.0))
    inst.add(Arrival(2, 100, 50, 0.0))  # no free slot: waits
    inst.admit_waiting()
    inst.plan()
    assert inst.batch == 2 and len(inst.waiting) == 1
    inst.sync(10.5 * inst.step_s)
    produced = inst.remove(0)
    assert produced == pytest.approx(10.5)
    assert inst.batch == 1 and inst.kv_used == pytest.approx(60.5)
    assert inst.remove(2) == 0.0 and not inst.waiting  # from the waiting queue
    assert inst.remove(0) is None and inst.remove(7) is None  # not held
    done: list[tuple[int, int]] = []
    while not done:
        inst.sync(inst.plan())
        done = inst.pop_finished()
    assert done == [(1, 100)]  # the other chunk still runs to its end


def test_remove_a_pending_pull() -> None:
    inst = Instance(cost=dataclasses.replace(COST, max_running=4), managed=True)
    inst.add(Arrival(0, 10, 50, 0.0, delay_s=1.0))
    inst.add(Arrival(1, 10, 50, 0.0, delay_s=2.0))
    assert inst.remove(0) == 0.0
    assert inst.plan() == pytest.approx(2.0)  # only the second pull is left
    inst.sync(2.0)
    inst.activate_ready()
    assert inst.batch == 1 and int(inst.req[inst.active][0]) == 1


def _recording(
    seen: list[list[float]], g: int = 8
) -> Callable[[list[float], list[bool], float, int], list[int]]:
    def choose(alphas: list[float], probes: list[bool], ctx_sum: float, n: int) -> list[int]:
        seen.append(list(alphas))
        return [g] * n

    return choose


def test_draft_policy_sees_the_online_estimate_which_learns_the_true_acceptance() -> None:
    from core.drafting.acceptance import AcceptanceEstimator

    seen: list[list[float]] = []
    est = AcceptanceEstimator()
    inst = Instance(cost=COST, managed=True, choose_drafts=_recording(seen), estimator=est)
    inst.add(Arrival(0, 1_000_000, 1024, 0.0, alpha=0.8, group="g0", refs=3))
    inst.sync(inst.plan())
    assert seen[0] == [pytest.approx(est.prior)]  # nothing verified yet: the prior, not 0.8
    assert inst.rate[inst.active][0] == pytest.approx((1 - 0.8**9) / (1 - 0.8))  # true rate
    for _ in range(20_000):
        inst.sync(inst.plan())
    assert len(seen) > 100  # re-run every 32 plans, each time fed one verified draft
    assert seen[-1][0] == pytest.approx(0.8, abs=0.06)
    assert est.estimate("g0", 3) == pytest.approx(seen[-1][0])
    # another group of the same reference count borrows the global bucket's evidence
    assert est.estimate("g1", 3) == pytest.approx(0.8, abs=0.1)


def test_without_an_estimator_the_policy_is_told_the_true_acceptance() -> None:
    seen: list[list[float]] = []
    inst = Instance(cost=COST, managed=True, choose_drafts=_recording(seen))
    inst.add(Arrival(0, 1000, 1024, 0.0, alpha=0.8, group="g0", refs=3))
    inst.plan()
    assert seen == [[pytest.approx(0.8)]]


def test_a_preempted_request_keeps_its_acceptance_and_group() -> None:
    tight = dataclasses.replace(COST, mem_util=0.29, max_running=4)  # ~25k KV tokens
    inst = Instance(cost=tight, managed=False)
    cap = tight.kv_capacity_tokens
    inst.add(Arrival(0, cap, cap // 2 - 400, 0.0, alpha=0.5, group="g0", refs=1))
    inst.add(Arrival(1, cap, cap // 2 - 400, 0.0, alpha=0.6, probe=True, group="g1", refs=2))
    inst.admit_waiting()
    assert inst.batch == 2
    inst.sync(inst.plan())  # runs until the KV is full
    out = inst.preempt_if_full()
    assert [k for k, _ in out] == [1]
    back = inst.waiting[0]
    assert (back.alpha, back.probe, back.group, back.refs) == (0.6, True, "g1", 2)
