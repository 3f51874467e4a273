"""SGLang's dialect: ``/generate`` (one call, answered when it is done or aborted),
``/abort_request`` and ``/update_weights_from_disk`` (``app.api.sglang`` holds its models and
builds its answers).
"""

from __future__ import annotations

import asyncio

from fastapi import HTTPException
from fastapi.responses import JSONResponse

from app.api import (
    AbortRequest,
    DiskWeightsRequest,
    DiskWeightsResponse,
    GenerateRequest,
    JobState,
    JobStatus,
)
from app.api.sglang import generate_response
from app.serve.ingress.app import api
from app.serve.ingress.auth import AUTHORIZATION, OPERATOR, OPERATOR_OR_OWN, authorize
from app.serve.ingress.errors import (
    BODY_ERRORS,
    as_native,
    documented,
    failed,
    field_messages,
    in_their_fields,
)
from app.serve.ingress.idempotency import IdempotencyKey, idempotent_call
from app.serve.ingress.submit import Submission
from app.serve.ingress.weights import WeightsRoutes


class SGLangRoutes(Submission, WeightsRoutes):
    """The SGLang-compatible routes."""

    @api.post("/generate", responses=documented(409, 429, 503, 504, *BODY_ERRORS))
    async def generate(
        self, req: GenerateRequest, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        """SGLang-style generate (see ``app.api.sglang``): answers when the call is done or
        aborted (``/abort_request``: the tokens so far, finish reason ``abort``); a repeat
        under an ``Idempotency-Key`` gets the same job."""
        call = idempotent_call("/generate", idempotency_key, req)
        job_id, outcome = await in_their_fields(
            req,
            lambda: self._run(as_native(req.to_rollout), req.rid, partial=True, idempotent=call),
        )
        if outcome.status.state not in (JobState.DONE, JobState.CANCELLED):
            raise failed(outcome)
        out = await asyncio.to_thread(
            generate_response, req, outcome.groups, job_id, self.codec.decode
        )
        return JSONResponse(content=out)

    @api.post("/abort_request", responses=documented(401, 403, *BODY_ERRORS), **OPERATOR_OR_OWN)
    async def abort_request(
        self, req: AbortRequest, authorization: str | None = AUTHORIZATION
    ) -> dict[str, list[str]]:
        """Abort one ``/generate`` call by the ``rid`` it was sent with (the caller's own id:
        choose it unguessable), or every open job (``abort_all``: an operator change, it needs
        ``Authorization: Bearer <operator token>``); an unknown or finished rid aborts nothing,
        and so does the id of any other job (a ``/v1/rollouts`` job ends by its cancel token)."""
        if req.abort_all:
            authorize(self._operator_token, authorization)
            ids: list[str] = await self._ask(self.scheduler.cancel_all("aborted by /abort_request"))
            return {"aborted": ids}
        try:
            status: JobStatus = await self._ask(self.scheduler.abort_rid(req.rid))
        except HTTPException:  # no /generate call of that rid (404): nothing to abort
            return {"aborted": []}
        return {"aborted": [req.rid] if status.state is JobState.CANCELLED else []}

    @api.post(
        "/update_weights_from_disk",
        response_model=DiskWeightsResponse,
        # SGLang's shape for its errors too: {"success": false, "message", "num_paused_requests"};
        # what is refused before it runs has the app's (a body that is not JSON or too large, a
        # 422 of the body's validation)
        responses={
            **documented(401, 403, 409, 503, 504, model=DiskWeightsResponse),
            **documented(*BODY_ERRORS),
            422: {
                "description": "the body's validation (HTTPValidationError), or a path that is "
                "not a directory under weights_root (DiskWeightsResponse)",
                "content": {"application/json": {"schema": {"anyOf": [
                    {"$ref": "#/components/schemas/HTTPValidationError"},
                    {"$ref": "#/components/schemas/DiskWeightsResponse"},
                ]}}},
            },
        },
        **OPERATOR,
    )  # fmt: skip
    async def update_weights_from_disk(
        self, req: DiskWeightsRequest, authorization: str | None = AUTHORIZATION
    ) -> JSONResponse:
        """``POST /v1/weights`` in SGLang's shape: ``{"model_path", "weight_version",
        "abort_all_requests"}`` -> ``{"success", "message", "num_paused_requests"}``."""
        try:
            update = await self._update_weights(
                req.model_path,
                req.version(),
                req.abort_all_requests,
                authorization,
                "model_path",
                req.sha256,
            )
        except HTTPException as exc:
            message = field_messages(exc.detail)
            body = {"success": False, "message": message, "num_paused_requests": 0}
            return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)
        return JSONResponse(
            content={
                "success": True,
                "message": f"weights v{update.version} loaded in {update.seconds:.1f} s",
                "num_paused_requests": update.restarted_requests,
                "policy_version": update.version,
            }
        )
