"""The ``Idempotency-Key`` header of the submitting routes (``POST /v1/rollouts``,
``/v1/completions``, ``/generate``): a retry after a lost answer must not run the work twice.

Invariant: a call with a key names one job per endpoint while that job is held (until
``job_ttl_s`` after it ended): the same key and the same body (as parsed: the same JSON in
another layout is the same body) get that job again (its id, its results, a 202's cancel
token; a call while it runs waits for it), another body under the key is a 422 naming the
header. The key lives in the scheduler's memory: after a scheduler restart its first use runs
the job once more. The key is as secret as the job it names: make it unguessable (a UUID).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from fastapi import Header
from pydantic import BaseModel

from app.rollout import IdempotentCall

#: the header's value: 1-256 visible ASCII characters
IDEMPOTENCY_KEY = Header(
    alias="Idempotency-Key",
    min_length=1,
    max_length=256,
    pattern=r"^[!-~]+$",
    description="the same key with the same body on this endpoint within job_ttl_s names the "
    "same job (its id, results, cancel token); another body under it is a 422",
)
IdempotencyKey = Annotated[str | None, IDEMPOTENCY_KEY]


def idempotent_call(
    endpoint: str, key: str | None, body: BaseModel, cancel_token: str | None = None
) -> IdempotentCall | None:
    """The call ``body`` to ``endpoint`` makes under ``key`` (None without a key)."""
    if key is None:
        return None
    text = json.dumps(body.model_dump(mode="json", by_alias=True), sort_keys=True)
    digest = hashlib.sha256(f"{endpoint}\n{text}".encode()).hexdigest()
    return IdempotentCall(endpoint, key, digest, cancel_token)
