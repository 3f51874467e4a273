"""The native rollout API: ``/v1/rollouts`` (submit, or submit and wait), a job's status, its
cancel (its cancel token or the operator's), its groups streamed as NDJSON.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.api import JobAccepted, JobState, JobStatus, RolloutRequest, RolloutResponse
from app.rollout import rollout_stats
from app.serve.ingress.app import api
from app.serve.ingress.auth import (
    AUTHORIZATION,
    OPERATOR_OR_OWN,
    bearer,
    is_operator,
    new_cancel_token,
    token_digest,
)
from app.serve.ingress.errors import BODY_ERRORS, documented, failed, scheduler_lost
from app.serve.ingress.idempotency import IdempotencyKey, idempotent_call
from app.serve.ingress.submit import Submission


class RolloutRoutes(Submission):
    """``/v1/rollouts`` and a job's routes."""

    @api.post(
        "/v1/rollouts",
        status_code=202,
        response_model=JobAccepted | RolloutResponse,
        responses={
            200: {"model": RolloutResponse},
            202: {"model": JobAccepted},
            **documented(409, 429, 503, 504, *BODY_ERRORS),
        },
    )
    async def rollouts(
        self, req: RolloutRequest, request: Request, idempotency_key: IdempotencyKey = None
    ) -> Any:
        """Start a rollout job: 202 with its URLs, or (``"wait": true``) 200 with every group
        when it is done (504 past request_timeout_s, 503 when it failed). With an
        ``Idempotency-Key``, a repeat of the call gets the same job
        (``app.serve.ingress.idempotency``)."""
        if not req.wait:
            token, digest = new_cancel_token()
            call = idempotent_call("/v1/rollouts", idempotency_key, req, token)
            submitted = await self._submit(req, cancel_digest=digest, idempotent=call)
            job_id, token = submitted.status.id, submitted.cancel_token or token
            base = str(request.base_url).rstrip("/")
            accepted = JobAccepted(
                id=job_id,
                status_url=f"{base}/v1/rollouts/{job_id}",
                groups_url=f"{base}/v1/rollouts/{job_id}/groups",
                cancel_token=token,
            )
            return JSONResponse(status_code=202, content=accepted.model_dump())
        call = idempotent_call("/v1/rollouts", idempotency_key, req)
        job_id, outcome = await self._run(req, idempotent=call)
        st = outcome.status
        if st.state is not JobState.DONE:
            raise failed(outcome)
        groups = await self._decode(outcome.groups)
        done = RolloutResponse(
            id=job_id,
            model=self.config.engine.model,
            policy=st.policy,
            seed_guarantee=st.seed_guarantee,
            groups=groups,
            stats=rollout_stats(groups, st.created_at),
        )
        return JSONResponse(status_code=200, content=done.model_dump(mode="json"))

    @api.get("/v1/rollouts/{job_id}", response_model=JobStatus, responses=documented(404))
    async def job_status(self, job_id: str) -> JobStatus:
        """State and progress (groups and requests done, tokens, elapsed, estimated remaining)."""
        status: JobStatus = await self._ask(self.scheduler.status(job_id))
        return status

    @api.delete(
        "/v1/rollouts/{job_id}",
        response_model=JobStatus,
        responses=documented(401, 403, 404),
        **OPERATOR_OR_OWN,
    )
    async def cancel(self, job_id: str, authorization: str | None = AUTHORIZATION) -> JobStatus:
        """Cancel: the job's chunks are aborted on the engines and stop using capacity; the job
        stays readable (state cancelled, or the state it had ended in: cancelling is idempotent)
        until job_ttl_s. Needs ``Authorization: Bearer <token>``: the job's ``cancel_token``
        (from its 202) or the operator token."""
        if is_operator(self._operator_token, authorization):
            status: JobStatus = await self._ask(self.scheduler.cancel(job_id))
            return status
        given = bearer(authorization)
        if given is None:
            raise HTTPException(
                401,
                "cancelling a job needs Authorization: Bearer <token>, the cancel_token its "
                "submission returned (or the operator token)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        status = await self._ask(self.scheduler.cancel(job_id, token_digest(given)))
        return status

    @api.get(
        "/v1/rollouts/{job_id}/groups",
        responses={200: {"content": {"application/x-ndjson": {}}}, **documented(404)},
    )
    async def groups(self, job_id: str) -> StreamingResponse:
        """NDJSON: one GroupResult per line in completion order, ending when the job ends
        (then GET /v1/rollouts/{id} tells whether it is done, failed or cancelled). When the
        scheduler's process dies, the last line is ``{"error": ..., "status": 503}``."""
        await self._ask(self.scheduler.status(job_id))  # 404 before the stream starts
        stream = self.scheduler.stream_groups(job_id)

        async def lines() -> AsyncIterator[bytes]:
            try:
                async for group in stream:
                    [named] = await self._decode([group])
                    yield (json.dumps(named.model_dump(mode="json")) + "\n").encode()
            except Exception as exc:
                lost = scheduler_lost(exc, self.config.limits.retry_after_s)
                if lost is None:
                    raise
                # the 200 is sent: the stream's last line says why it ended
                yield (
                    json.dumps({"error": lost.detail, "status": lost.status_code}) + "\n"
                ).encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")
