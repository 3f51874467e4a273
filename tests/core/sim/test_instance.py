"""Instance: removing a chunk (abort) from the batch, the waiting queue or the pending pulls."""

from __future__ import annotations

import dataclasses

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
