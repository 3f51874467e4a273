"""Application builder: ``serve run app.serve.builder:build_app`` or serve_config.yaml."""

from __future__ import annotations

from typing import Any, cast

from ray.serve import Application

from app.config import AppConfig
from app.serve.engine_replica import EngineReplica
from app.serve.ingress import Ingress


def build_app(args: dict[str, Any] | AppConfig | None = None) -> Application:
    """Ingress + ``num_replicas`` engine replicas, each its own named deployment so that the
    scheduler can address replicas one by one (a Serve handle would pick one at random)."""
    config = args if isinstance(args, AppConfig) else AppConfig.model_validate(args or {})
    replica = cast(Any, EngineReplica)  # @serve.deployment hides .options/.bind from mypy
    engines = [
        replica.options(
            name=f"engine-{i}", ray_actor_options={"num_cpus": config.replica_num_cpus}
        ).bind(config.engine, f"replica-{i}")
        for i in range(config.num_replicas)
    ]
    return cast(Application, cast(Any, Ingress).bind(config, engines))
