"""Rollout policies by name: how the scheduler is configured and whether engines speculate.

Invariant: a policy is a plain function ``(base config) -> (scheduler config, speculate)``; it
changes only the fields that define it (divided or not, ordering, probes), so chunk size,
routing and estimator settings given by the caller apply to every divided policy alike.

Every policy has one ``PolicyKind`` (``KINDS``): what a user runs (``recommended``: ``context``,
``seer``; ``variant``: ours, measured beside them), what they are compared with (``baseline``),
the paper's own rules as published (``paper``), and the clairvoyant ``yardstick`` policies,
which know the true lengths and exist only in the simulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from core.scheduling.config import SchedulerConfig


@dataclass(frozen=True, slots=True)
class PolicyPlan:
    """What a policy asks of the scheduler and of the engines."""

    name: str
    config: SchedulerConfig
    speculate: bool
    uses_prior: bool = False  # seed group estimates with lengths from an earlier iteration


PolicyFn = Callable[[SchedulerConfig], PolicyPlan]


def _plan(
    name: str, base: SchedulerConfig, speculate: bool, divided: bool, ordering: str, probes: bool
) -> PolicyPlan:
    config = dataclasses.replace(base, divided=divided, ordering=ordering, probes=probes)
    return PolicyPlan(name=name, config=config, speculate=speculate)


def verl(base: SchedulerConfig) -> PolicyPlan:
    """veRL: whole groups round-robin up front, no chunking, no speculation."""
    return _plan("verl", base, False, divided=False, ordering="fifo", probes=False)


def divided(base: SchedulerConfig) -> PolicyPlan:
    """Divided rollout alone: chunks routed by load, FIFO order."""
    return _plan("divided", base, False, divided=True, ordering="fifo", probes=False)


def context(base: SchedulerConfig) -> PolicyPlan:
    """Divided + context-aware ordering: probes, then breadth-first with requests the group
    evidence marks as runaways promoted (ordering ``context``)."""
    return _plan("context", base, False, divided=True, ordering="context", probes=True)


def context_hedge(base: SchedulerConfig) -> PolicyPlan:
    """Divided + probes + the hedged remaining-length estimate alone, longest first (ordering
    ``context-hedge``; the ``context`` policy's order without its breadth-first part)."""
    return _plan("context-hedge", base, False, divided=True, ordering="context-hedge", probes=True)


def context_max(base: SchedulerConfig) -> PolicyPlan:
    """Divided + the paper's literal Algorithm 2 estimate (max finished sibling length)."""
    return _plan("context-max", base, False, divided=True, ordering="context-max", probes=True)


def context_prior(base: SchedulerConfig) -> PolicyPlan:
    """Divided + probes + the hedged estimate (ordering ``context-hedge``) seeded with a length
    prior: recorded lengths of the same prompts from an earlier RL iteration seed each group's
    estimate before its probe finishes. (The prior does not change ``context``'s decisions: its
    breadth-first order ignores estimates below ``promote_fraction`` of the cap.)"""
    plan = _plan("context-prior", base, False, divided=True, ordering="context-hedge", probes=True)
    return dataclasses.replace(plan, uses_prior=True)


def seer(base: SchedulerConfig) -> PolicyPlan:
    """All three techniques: ``context`` + adaptive grouped speculative decoding."""
    return _plan("seer", base, True, divided=True, ordering="context", probes=True)


def seer_prior(base: SchedulerConfig) -> PolicyPlan:
    """``context-prior`` + adaptive grouped speculative decoding: the hedged estimate seeded
    with the store's lengths of earlier iterations, longest first, with the engines drafting
    (``seer``'s speculation on ``context-prior``'s order)."""
    return dataclasses.replace(context_prior(base), name="seer-prior", speculate=True)


def seer_paper(base: SchedulerConfig) -> PolicyPlan:
    """The paper's Seer as published, to check the simulator against Table 4: the paper's
    literal Algorithm 2 (ordering ``context-max``) + adaptive grouped speculative decoding
    (the engines' drafter: the marginal-benefit draft-length rule, g_max 8, probes first)."""
    return _plan("seer-paper", base, True, divided=True, ordering="context-max", probes=True)


def oracle(base: SchedulerConfig) -> PolicyPlan:
    """Divided + longest true remaining length first (knows every length; a yardstick)."""
    return _plan("oracle", base, False, divided=True, ordering="oracle", probes=False)


def oracle_seer(base: SchedulerConfig) -> PolicyPlan:
    """``oracle``'s order (longest true remaining first) + ``seer``'s adaptive grouped
    speculation: a yardstick for what speculation adds to a clairvoyant order."""
    return _plan("oracle-seer", base, True, divided=True, ordering="oracle", probes=False)


def oracle_group(base: SchedulerConfig) -> PolicyPlan:
    """Divided + longest true group length first (knows each group's longest response, not
    which sibling it is): the ceiling of any group-level context estimate."""
    return _plan("oracle-group", base, False, divided=True, ordering="oracle-group", probes=False)


def oracle_cap(base: SchedulerConfig) -> PolicyPlan:
    """``context``'s order whose promotion knows which requests reach ``promote_fraction`` of
    the cap (true lengths; a yardstick for how much identifying the long responses is worth)."""
    return _plan("oracle-cap", base, False, divided=True, ordering="oracle-cap", probes=True)


class PolicyKind(Enum):
    """What a policy is for (see the module docstring)."""

    RECOMMENDED = "recommended"
    VARIANT = "variant"
    BASELINE = "baseline"
    PAPER = "paper"
    YARDSTICK = "yardstick"


POLICIES: dict[str, PolicyFn] = {
    "verl": verl,
    "divided": divided,
    "context": context,
    "context-max": context_max,
    "context-hedge": context_hedge,
    "context-prior": context_prior,
    "seer": seer,
    "seer-prior": seer_prior,
    "seer-paper": seer_paper,
    "oracle": oracle,
    "oracle-seer": oracle_seer,
    "oracle-group": oracle_group,
    "oracle-cap": oracle_cap,
}


def get_policy(name: str, base: SchedulerConfig | None = None) -> PolicyPlan:
    """The plan of policy ``name`` on top of ``base`` (default ``SchedulerConfig()``)."""
    try:
        fn = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; valid: {sorted(POLICIES)}") from None
    return fn(base if base is not None else SchedulerConfig())


KINDS: dict[str, PolicyKind] = {
    "verl": PolicyKind.BASELINE,
    "divided": PolicyKind.BASELINE,
    "context": PolicyKind.RECOMMENDED,
    "seer": PolicyKind.RECOMMENDED,
    "context-hedge": PolicyKind.VARIANT,
    "context-prior": PolicyKind.VARIANT,
    "seer-prior": PolicyKind.VARIANT,
    "context-max": PolicyKind.PAPER,
    "seer-paper": PolicyKind.PAPER,
    "oracle": PolicyKind.YARDSTICK,
    "oracle-seer": PolicyKind.YARDSTICK,
    "oracle-group": PolicyKind.YARDSTICK,
    "oracle-cap": PolicyKind.YARDSTICK,
}


def policies_of(kind: PolicyKind) -> tuple[str, ...]:
    """The names of the policies of ``kind``, in ``POLICIES``' order."""
    return tuple(name for name in POLICIES if KINDS[name] is kind)


def listed_by_kind() -> str:
    """Every policy name, grouped by kind (recommended first): for help texts."""
    return "; ".join(f"{kind.value}: {', '.join(policies_of(kind))}" for kind in PolicyKind)
