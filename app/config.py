"""Configuration of the Serve application (the ``args`` of serve_config.yaml)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.engines.config import EngineConfig

POLICIES = ("verl",)


class AppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_replicas: int = Field(2, ge=1, le=256, description="engine replicas (one engine each)")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    policy: str = Field("verl", description="scheduling policy: verl")
    replica_num_cpus: float = Field(
        0.5, gt=0, le=64, description="Ray CPUs reserved per engine replica (<= 0.5 on 2 cores)"
    )
    request_timeout_s: float = Field(
        3600.0, gt=0, le=86_400, description="a rollout that takes longer fails with 504"
    )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in POLICIES:
            raise ValueError(f"unknown policy {v!r}; valid names: {', '.join(POLICIES)}")
        return v
