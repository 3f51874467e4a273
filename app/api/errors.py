"""Error bodies: what the service answers with a status that is not 2xx.

- ``ErrorBody`` ``{"detail": "..."}``: every error but 422 (documented per route in
  /openapi.json);
- ``ValidationErrorBody`` ``{"detail": [FieldError, ...]}``: a 422, bad input named by field
  (FastAPI's shape, published as its ``HTTPValidationError``; ``input`` is echoed only for an
  error inside the body, never for the whole body);
- ``/update_weights_from_disk`` answers its errors in SGLang's shape
  (``app.api.sglang.DiskWeightsResponse`` with ``success`` false).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """Every error the service answers (but 422: FastAPI's ``HTTPValidationError``)."""

    detail: str = Field(description="what was refused and why, naming the value")


class FieldError(BaseModel):
    """One refused value of a 422: where (``["body", "prompts", 0]``), why, and its kind."""

    loc: list[str | int]
    msg: str
    type: str
    input: Any = None


class ValidationErrorBody(BaseModel):
    """A 422: every refused value of the request."""

    detail: list[FieldError]
