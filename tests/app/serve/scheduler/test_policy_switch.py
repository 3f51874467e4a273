"""PolicySwitch: a switch waits for an idle scheduler; jobs submitted meanwhile take the new
policy; asking for the running one withdraws a pending switch."""

from __future__ import annotations

from app.serve.scheduler.policy_switch import PolicySwitch
from core.scheduling.policies import get_policy


def test_a_switch_takes_effect_only_when_the_scheduler_is_idle() -> None:
    verl, context = get_policy("verl"), get_policy("context")
    switch = PolicySwitch(verl)
    assert switch.next is verl and switch.due(idle=True) is None  # nothing pending
    assert switch.request(context) and switch.next is context  # new jobs take it
    assert switch.due(idle=False) is None and switch.running is verl
    assert switch.due(idle=True) is context and switch.running is context
    assert switch.pending is None and switch.due(idle=True) is None


def test_asking_for_the_running_policy_withdraws_a_pending_switch() -> None:
    verl, context = get_policy("verl"), get_policy("context")
    switch = PolicySwitch(verl)
    switch.request(context)
    assert not switch.request(verl) and switch.pending is None and switch.next is verl
