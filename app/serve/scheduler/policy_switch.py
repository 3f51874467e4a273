"""The policy the service's scheduler runs, and the one it switches to.

Invariant: a switch takes effect only while no job is in the scheduler and no chunk is in flight
(``due``); until then jobs submitted run under the new policy too, waiting in the queue for it
(``next``), so no job ever mixes two policies.
"""

from __future__ import annotations

from core.scheduling.policies import PolicyPlan


class PolicySwitch:
    """The running plan and a pending one (see the module invariant)."""

    def __init__(self, plan: PolicyPlan) -> None:
        self.running = plan
        self.pending: PolicyPlan | None = None

    @property
    def next(self) -> PolicyPlan:
        """The plan jobs submitted now run under: a pending switch, else the running one."""
        return self.pending or self.running

    def request(self, plan: PolicyPlan) -> bool:
        """Switch to ``plan`` as soon as ``due``; asking for the running plan withdraws a
        pending switch. True when a switch is pending now."""
        self.pending = None if plan == self.running else plan
        return self.pending is not None

    def due(self, idle: bool) -> PolicyPlan | None:
        """The pending plan, now running, when the scheduler is ``idle`` (no job, no chunk in
        flight); None while it is not, or when nothing is pending."""
        if self.pending is None or not idle:
            return None
        self.running, self.pending = self.pending, None
        return self.running
