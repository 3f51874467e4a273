"""Every policy has one kind; the recommended ones are ours, the yardsticks are the clairvoyant
ones (they read true lengths), and the service never runs a yardstick."""

from __future__ import annotations

from app.config import SERVICE_POLICIES
from core.scheduling.policies import KINDS, POLICIES, PolicyKind, get_policy, policies_of


def test_every_policy_has_one_kind_and_the_service_runs_no_yardstick() -> None:
    assert set(KINDS) == set(POLICIES)
    assert policies_of(PolicyKind.RECOMMENDED) == ("context", "seer")
    assert policies_of(PolicyKind.PAPER) == ("context-max", "seer-paper")
    yardsticks = set(policies_of(PolicyKind.YARDSTICK))
    assert yardsticks == {n for n in POLICIES if get_policy(n).config.ordering.startswith("oracle")}
    assert set(SERVICE_POLICIES) == set(POLICIES) - yardsticks
    assert SERVICE_POLICIES[:2] == ("context", "seer")  # listed first, in errors and help
