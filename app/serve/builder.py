"""Application builder: ``serve run app.serve.builder:build_app`` or serve_config.yaml."""

from __future__ import annotations

import hashlib
from typing import Any, cast

from pydantic import BaseModel
from ray.serve import Application

from app.config import AppConfig
from app.serve.ingress.deployment import Ingress
from app.serve.replica.draft_server import DraftServer
from app.serve.replica.engine_replica import EngineReplica
from app.serve.replica.placement import control_options, engine_options
from app.serve.scheduler.deployment import SeerScheduler


def replica_ids(config: AppConfig) -> list[str]:
    return [f"replica-{i}" for i in range(config.num_replicas)]


def _versioned(deployment: Any, *parts: object) -> Any:
    """``deployment`` with a version that changes exactly when its constructor arguments
    change, so that ``serve.run`` again with only another ``policy`` reconfigures the scheduler
    instead of restarting every replica (Python-API deploys otherwise get a random version each
    time; config-file deploys hash the import path). ``Deployment.options(version=)`` is gone
    from Ray 2.60, so the attribute Serve reads is set (tests/app/serve/test_service.py checks
    that a policy change restarts nothing)."""
    text = "|".join(p.model_dump_json() if isinstance(p, BaseModel) else repr(p) for p in parts)
    deployment._version = hashlib.sha256(text.encode()).hexdigest()[:16]
    return deployment


def build_app(args: dict[str, Any] | AppConfig | None = None) -> Application:
    """Ingress -> SeerScheduler -> ``num_replicas`` engine replicas, each its own named
    deployment so that the scheduler addresses replicas one by one (its choice always wins),
    and, when the engines draft (``ServiceConfig.shares_drafts``), one draft server they all
    exchange group texts with. The policy is the scheduler's ``user_config``: a new value
    reconfigures it live."""
    config = args if isinstance(args, AppConfig) else AppConfig.model_validate(args or {})
    service = config.service()
    replica = cast(Any, EngineReplica)  # @serve.deployment hides .options/.bind from mypy
    ids = replica_ids(config)
    sharing = config.draft_server
    control = control_options(config)
    drafts = (
        _versioned(cast(Any, DraftServer).options(**control), sharing).bind(sharing)
        if config.shares_drafts()
        else None
    )
    engines = [
        _versioned(
            replica.options(**engine_options(config, f"engine-{i}")),
            config.engine,
            rid,
            sharing if drafts is not None else None,
        ).bind(config.engine, rid, drafts, sharing)
        for i, rid in enumerate(ids)
    ]
    scheduler = _versioned(
        cast(Any, SeerScheduler).options(**control, user_config=config.user_config()), service, ids
    )
    ingress = _versioned(cast(Any, Ingress).options(**control), service)
    return cast(Application, ingress.bind(service, scheduler.bind(service, engines, ids, drafts)))
