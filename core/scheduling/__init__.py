"""Scheduling policies and the divided-rollout scheduler (pure, synchronous)."""

from core.scheduling.config import DEFAULT_CHUNK_TOKENS, SchedulerConfig
from core.scheduling.estimate import DictLengthPrior, LengthPrior
from core.scheduling.policies import POLICIES, PolicyPlan, get_policy
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import (
    ChunkDecision,
    GroupSpec,
    ReplicaLoad,
    ReplicaSpec,
    RequestPhase,
)
from core.scheduling.verl import GroupAssignment, verl_assign

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "POLICIES",
    "ChunkDecision",
    "DictLengthPrior",
    "GroupAssignment",
    "GroupSpec",
    "LengthPrior",
    "PolicyPlan",
    "ReplicaLoad",
    "ReplicaSpec",
    "RequestPhase",
    "Scheduler",
    "SchedulerConfig",
    "get_policy",
    "verl_assign",
]
