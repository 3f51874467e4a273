"""The HTTP API's wire models (pydantic): every request and response body of every endpoint,
one module per surface. Importing it loads pydantic and ``core.engine``'s types, never Ray.

- ``app.api.base``: what every request model shares (strictness, prompts, Unicode text);
- ``app.api.native``: the job API (``/v1/rollouts``).

Every name is importable from ``app.api`` itself.
"""

from app.api.base import STRICT, ClientRequest, PromptIds, PromptText, TokenIds, lone_surrogate
from app.api.native import (
    SEED_GUARANTEE_DOC,
    GroupResult,
    JobAccepted,
    JobProgress,
    JobState,
    JobStatus,
    Response,
    RolloutRequest,
    RolloutResponse,
    RolloutStats,
    SeedGuarantee,
)

__all__ = [
    "SEED_GUARANTEE_DOC",
    "STRICT",
    "ClientRequest",
    "GroupResult",
    "JobAccepted",
    "JobProgress",
    "JobState",
    "JobStatus",
    "PromptIds",
    "PromptText",
    "Response",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutStats",
    "SeedGuarantee",
    "TokenIds",
    "lone_surrogate",
]
