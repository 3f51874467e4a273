"""Scheduling policies and the rollout schedulers (pure, synchronous): the divided-rollout
``Scheduler`` and the ``VerlScheduler`` baseline, both ``BaseScheduler``s, built from a config by
``make_scheduler``."""

from core.scheduling.base import BaseScheduler
from core.scheduling.config import DEFAULT_CHUNK_TOKENS, SchedulerConfig
from core.scheduling.estimate import DictLengthPrior, LengthPrior
from core.scheduling.factory import make_scheduler
from core.scheduling.policies import POLICIES, PolicyPlan, get_policy
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import (
    ChunkDecision,
    GroupSpec,
    ReplicaLoad,
    ReplicaSpec,
    RequestPhase,
)
from core.scheduling.verl import GroupAssignment, VerlScheduler, verl_assign

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "POLICIES",
    "BaseScheduler",
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
    "VerlScheduler",
    "get_policy",
    "make_scheduler",
    "verl_assign",
]
