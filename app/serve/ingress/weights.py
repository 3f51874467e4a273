"""New policy weights: ``POST /v1/weights`` (operator token; a checkpoint directory under
``weights_root``, checked before the scheduler is asked) and ``GET /v1/weights``.
"""

from __future__ import annotations

import asyncio
import os

from app.api import WeightsState, WeightsUpdate, WeightsUpdateRequest
from app.serve.ingress.app import api
from app.serve.ingress.auth import AUTHORIZATION, OPERATOR, authorize
from app.serve.ingress.base import IngressBase
from app.serve.ingress.errors import BODY_ERRORS, documented, unprocessable
from app.weights_digest import checkpoint_problem


class WeightsRoutes(IngressBase):
    """The native weight routes (SGLang's ``/update_weights_from_disk`` shares the update)."""

    async def _update_weights(
        self,
        path: str,
        version: int | None,
        abort_running: bool,
        authorization: str | None,
        field: str = "path",
        sha256: str | None = None,
    ) -> WeightsUpdate:
        authorize(self._operator_token, authorization)
        root = self.config.weights_root
        real = await asyncio.to_thread(os.path.realpath, path)
        if root is not None:
            real_root = await asyncio.to_thread(os.path.realpath, root)
            if os.path.commonpath([real, real_root]) != real_root:
                raise unprocessable(
                    [field],
                    f"weights path {path!r} (resolved: {real!r}) is outside weights_root {root!r}",
                )
        if not await asyncio.to_thread(os.path.isdir, real):
            raise unprocessable([field], f"weights path {path!r} is not a directory")
        problem = await asyncio.to_thread(checkpoint_problem, real)
        if problem is not None:  # before any replica loads, whatever its backend
            raise unprocessable([field], problem)
        update: WeightsUpdate = await self._ask(
            self.scheduler.update_weights(real, version, abort_running, sha256)
        )
        return update

    @api.post(
        "/v1/weights",
        response_model=WeightsUpdate,
        responses=documented(401, 403, 409, 503, 504, *BODY_ERRORS),
        **OPERATOR,
    )
    async def update_weights(
        self, req: WeightsUpdateRequest, authorization: str | None = AUTHORIZATION
    ) -> WeightsUpdate:
        """Load new policy weights into every engine replica between chunks (operator bearer
        token): dispatch pauses, running chunks finish (or are aborted), unfinished requests
        restart from their prompt under the new version, dispatch resumes."""
        return await self._update_weights(
            req.path, req.version, req.abort_running, authorization, sha256=req.sha256
        )

    @api.get("/v1/weights", response_model=WeightsState)
    async def weights(self) -> WeightsState:
        """The policy version every new token is sampled with, and where it came from."""
        state: WeightsState = await self._ask(self.scheduler.weights())
        return state
