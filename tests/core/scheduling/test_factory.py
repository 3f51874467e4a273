"""make_scheduler: the one place a config's ``divided`` flag picks the scheduler class."""

from __future__ import annotations

import pytest

from core.scheduling import (
    POLICIES,
    BaseScheduler,
    ReplicaSpec,
    Scheduler,
    SchedulerConfig,
    VerlScheduler,
    get_policy,
    make_scheduler,
)

REPS = [ReplicaSpec("a", 1_000, 2)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_each_policy_gets_the_class_its_config_asks_for(policy: str) -> None:
    config = get_policy(policy).config
    s = make_scheduler(config, REPS)
    assert type(s) is (Scheduler if config.divided else VerlScheduler)
    assert (type(s) is VerlScheduler) == (policy == "verl")


def test_a_class_refuses_the_other_ones_config() -> None:
    with pytest.raises(ValueError, match="make_scheduler"):
        Scheduler(get_policy("verl").config, REPS)
    with pytest.raises(ValueError, match="make_scheduler"):
        VerlScheduler(SchedulerConfig(), REPS)


def test_both_have_exactly_the_public_api_of_the_base() -> None:
    def public(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(Scheduler) == public(VerlScheduler) == public(BaseScheduler)
    assert {"submit", "schedule", "complete", "cancel", "release", "loads"} <= public(Scheduler)
