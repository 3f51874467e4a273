"""The ``verl`` baseline policy: whole groups handed round-robin to replicas up front.

Invariant: every group goes, whole (all G requests, no chunking), to exactly one replica, and
group k (in submission order) goes to replica ``(start + k) % num_replicas``. The replica's own
engine admits everything it is given; nothing is re-balanced later. This is what veRL does and
what every Seer policy is measured against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """Group ``group_id`` runs, whole, on replica index ``replica``."""

    group_id: str
    replica: int


def verl_assign(
    group_ids: Sequence[str], num_replicas: int, start: int = 0
) -> list[GroupAssignment]:
    """Assign groups round-robin, starting at replica ``start`` (0 <= start < num_replicas)."""
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    if not 0 <= start < num_replicas:
        raise ValueError(f"start must be in [0, {num_replicas}), got {start}")
    if len(set(group_ids)) != len(group_ids):
        dup = sorted({g for g in group_ids if list(group_ids).count(g) > 1})
        raise ValueError(f"duplicate group ids: {dup[:5]}")
    return [
        GroupAssignment(group_id=g, replica=(start + k) % num_replicas)
        for k, g in enumerate(group_ids)
    ]
