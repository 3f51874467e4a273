"""Configuration of the Serve application (the ``args`` of serve_config.yaml)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.engines.config import EngineConfig
from core.scheduling.config import DEFAULT_CHUNK_TOKENS, SchedulerConfig
from core.scheduling.policies import POLICIES


def _servable(name: str) -> bool:
    """A policy the service can run today: no engine speculation yet, no true lengths, no store
    for length priors."""
    plan = POLICIES[name](SchedulerConfig())
    return not (plan.speculate or plan.uses_prior or plan.config.ordering.startswith("oracle"))


#: Policies of ``core.scheduling.policies`` the Serve app accepts (derived, never listed by hand).
SERVICE_POLICIES = tuple(name for name in POLICIES if _servable(name))


class AppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_replicas: int = Field(2, ge=1, le=256, description="engine replicas (one engine each)")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    policy: str = Field("verl", description="default scheduling policy (SERVICE_POLICIES)")
    chunk_tokens: int = Field(
        DEFAULT_CHUNK_TOKENS,
        ge=1,
        le=1_048_576,
        description="divided policies: most new tokens per chunk before a request is re-queued",
    )
    replica_num_cpus: float = Field(
        0.5, gt=0, le=64, description="Ray CPUs reserved per engine replica (<= 0.5 on 2 cores)"
    )
    request_timeout_s: float = Field(
        3600.0, gt=0, le=86_400, description="a rollout that takes longer fails with 504"
    )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in SERVICE_POLICIES:
            raise ValueError(f"unknown policy {v!r}; valid names: {', '.join(SERVICE_POLICIES)}")
        return v
