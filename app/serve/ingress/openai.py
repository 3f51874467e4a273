"""OpenAI's dialect: ``/v1/models`` and ``/v1/completions`` (each prompt a group of ``n``
choices; ``app.api.openai`` holds its models and builds its answers).
"""

from __future__ import annotations

import asyncio

from fastapi.responses import JSONResponse

from app.api import CompletionRequest, CompletionResponse, JobState, ModelCard, ModelList
from app.api.openai import completion_response
from app.serve.ingress.app import api
from app.serve.ingress.errors import BODY_ERRORS, as_native, documented, failed, in_their_fields
from app.serve.ingress.idempotency import IdempotencyKey, idempotent_call
from app.serve.ingress.submit import Submission


class OpenAIRoutes(Submission):
    """The OpenAI-compatible routes."""

    @api.get("/v1/models", response_model=ModelList)
    async def models(self) -> ModelList:
        """OpenAI's model list: the model this service runs (clients call it first)."""
        return ModelList(data=[ModelCard(id=self.config.engine.model, created=self._started)])

    @api.post(
        "/v1/completions",
        response_model=CompletionResponse,
        responses=documented(409, 429, 503, 504, *BODY_ERRORS),
    )
    async def completions(
        self, req: CompletionRequest, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        """OpenAI completions (subset): each prompt is a group of ``n`` choices; token ids,
        logprobs and the policy version of every choice (see ``app.api.openai``); a repeat
        under an ``Idempotency-Key`` gets the same job."""
        call = idempotent_call("/v1/completions", idempotency_key, req)
        job_id, outcome = await in_their_fields(
            req, lambda: self._run(as_native(req.to_rollout), idempotent=call)
        )
        if outcome.status.state is not JobState.DONE:
            raise failed(outcome)
        out = await asyncio.to_thread(
            completion_response,
            req,
            outcome.groups,
            job_id,
            self.config.engine.model,
            int(outcome.status.created_at),
            self.codec.decode,
        )
        return JSONResponse(content=out.model_dump(mode="json"))
