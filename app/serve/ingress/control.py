"""The service's own state: the deployment's schema, health, Prometheus metrics, and the live
speculation settings (read by anyone, changed with the operator token).
"""

from __future__ import annotations

import asyncio

from fastapi import Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from app.api import ServiceHealth, SpeculationState, SpeculationUpdate
from app.serve.ingress.app import api
from app.serve.ingress.auth import AUTHORIZATION, OPERATOR, authorize, settings_patch
from app.serve.ingress.base import IngressBase
from app.serve.ingress.errors import BODY_ERRORS, documented
from app.serve.scheduler.metrics import CONTENT_TYPE


class ControlRoutes(IngressBase):
    """Schema, health, metrics and speculation tuning."""

    _openapi: dict

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi(self, request: Request) -> JSONResponse:
        """The schema of this deployment: the app's, with its model's bounds (token ids,
        generated tokens, logprobs mode; ``app.serve.ingress.schema``). Under a root path
        it lists that path as its server, as FastAPI's own route does."""
        root = request.scope.get("root_path", "").rstrip("/")
        if not root:
            return JSONResponse(self._openapi)
        return JSONResponse({**self._openapi, "servers": [{"url": root}]})

    @api.get("/healthz", response_model=ServiceHealth, responses=documented(503))
    async def healthz(self) -> JSONResponse:
        """Every replica's state and load, answered from the scheduler's last probes (at once;
        503 while no replica is in rotation)."""
        try:
            health: ServiceHealth = await asyncio.wait_for(
                self.scheduler.health(), self.config.replica_call_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - the scheduler itself is unreachable
            raise HTTPException(503, f"scheduler unreachable: {exc!r}") from exc
        code = 503 if health.status == "unavailable" else 200
        return JSONResponse(status_code=code, content=health.model_dump(mode="json"))

    @api.get("/v1/speculation", response_model=SpeculationState)
    async def get_speculation(self) -> SpeculationState:
        """Current drafting settings, their version and audit fields, and the version each
        replica runs (-1: it has not confirmed the current one)."""
        state: SpeculationState = await self._ask(self.scheduler.speculation())
        return state

    @api.put(
        "/v1/speculation",
        response_model=SpeculationState,
        responses=documented(401, 403, *BODY_ERRORS),
        **OPERATOR,
    )
    async def put_speculation(
        self,
        update: SpeculationUpdate,
        authorization: str | None = AUTHORIZATION,
        x_operator: str | None = Header(None, max_length=100),
    ) -> SpeculationState:
        """Change drafting settings on every replica, live (fields not given keep their
        value). ``Authorization: Bearer <token>``: missing -> 401, wrong -> 403. ``X-Operator``
        names who changed them in the audit log."""
        authorize(self._operator_token, authorization)
        state: SpeculationState = await self._ask(
            self.scheduler.update_speculation(
                settings_patch(update), x_operator or "operator", update.reason
            )
        )
        return state

    @api.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}},
    )
    async def metrics(self) -> Response:
        """Prometheus text format."""
        body: bytes = await self._ask(self.scheduler.metrics())
        return Response(content=body, media_type=CONTENT_TYPE)
