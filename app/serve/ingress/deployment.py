"""HTTP ingress: validate, tokenize with its own tokenizer, submit to the scheduler, stream.

Thin by design: jobs, scheduling and engines live in the ``SeerScheduler`` deployment. The
``Ingress`` is its routes, one class per surface (``rollouts``: the native API; ``openai`` and
``sglang``: the trainer dialects; ``weights``; ``control``: schema, health, metrics, tuning), on
the one FastAPI app of ``app.serve.ingress.app``; errors are shaped in
``app.serve.ingress.errors`` (422 naming the field, the scheduler's refusals with their status).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve
from ray.serve.exceptions import RayServeException

from app.config import ServiceConfig, ServiceLimits
from app.engines.base import TextCodec
from app.engines.registry import make_codec
from app.serve import logs
from app.serve.detached import Background
from app.serve.ingress.app import api
from app.serve.ingress.auth import configured_token
from app.serve.ingress.body_limits import BodyLimits
from app.serve.ingress.control import ControlRoutes
from app.serve.ingress.openai import OpenAIRoutes
from app.serve.ingress.rollouts import RolloutRoutes
from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.ingress.schema import deployment_schema
from app.serve.ingress.sglang import SGLangRoutes
from app.serve.ingress.weights import WeightsRoutes

__all__ = ["Ingress", "api"]

_DEFAULT_LIMITS = ServiceLimits()


def _body_limits() -> tuple[int, float]:
    """(max_body_bytes, body_read_timeout_s) of the Ingress serving this request, read from the
    Serve replica's servable object at each request; the defaults outside a replica. Not a
    module global set by ``__init__``: Serve serves a copy of ``api`` frozen when the class was
    decorated, whose state the instance never sees (seen: the config's limits never applied
    once the routes moved out of this module; tests/app/serve/test_service.py)."""
    try:
        ingress: Any = serve.get_replica_context().servable_object
        limits = ingress.config.limits
    except RayServeException:
        limits = _DEFAULT_LIMITS
    return limits.max_body_bytes, limits.body_read_timeout_s


api.add_middleware(BodyLimits, limits=_body_limits)


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=1000)
@serve.ingress(api)
class Ingress(RolloutRoutes, OpenAIRoutes, SGLangRoutes, WeightsRoutes, ControlRoutes):
    async def __init__(self, config: ServiceConfig, scheduler: Any) -> None:  # type: ignore[misc]
        logs.configure()
        self.config = config
        self.scheduler = SchedulerHandle(scheduler)
        self._background = Background()  # submissions and cancels outliving their caller
        self._started = int(time.time())
        token = config.operator_token
        self._operator_token = configured_token(token.get_secret_value() if token else None)
        # The model's tokenizer, loaded here (not through an engine replica); blocking, so in a
        # thread under the engine's start deadline.
        self.codec: TextCodec = await asyncio.wait_for(
            asyncio.to_thread(make_codec, config.engine), config.engine.start_timeout_s
        )
        # The schema of the app as this module imported it (with every route class): Serve runs
        # a copy of this class and of the app pickled with the globals they use, and FastAPI's
        # schema of that copy says "example": {} for every parameter and body (it tells an unset
        # example by the identity of a marker object, which pickling copies).
        from app.serve.ingress import deployment as module

        self._openapi = deployment_schema(
            module.api.openapi(),
            max_model_len=config.engine.max_model_len,
            vocab_size=self.codec.vocab_size,
            logprobs_mode=config.engine.logprobs_mode,
        )
