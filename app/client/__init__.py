"""Typed HTTP client of the rollout service, sync (``SeerClient``) and async (``AsyncSeerClient``).

Needs only httpx and pydantic: importing it loads no Ray, torch, vLLM or transformers, so a
trainer process can use it beside its own framework. Both clients have the same methods, one
per endpoint, and return the API's own wire models (``app.api``), never raw dicts.

How: ``SeerCalls`` builds every call once (an ``httpx.Request`` and how to read its answer,
``Call`` or ``Stream``; no I/O); ``SeerClient`` sends them over an ``httpx.Client``,
``AsyncSeerClient`` over an ``httpx.AsyncClient``. Request bodies are built from the API's
request models, so a bad argument raises pydantic's ``ValidationError`` naming it before any
request is sent.

Invariants:
- Every call has a timeout: ``timeout`` (constructor) for ordinary calls, ``stream_timeout``
  for the longest silence of a group stream (and for the one-call endpoints, ``/v1/completions``
  and ``/generate``, that answer when the job is done), ``weights_timeout`` for a weight update.
- An answer that is not 2xx raises ``SeerHTTPError`` with the status code and the server's
  ``detail`` (a string, or for 422 the list of ``{"loc", "msg", ...}``: ``field_errors``); a 429
  carries ``retry_after_s`` from its ``Retry-After`` header.
- 429 is retried only when ``RetryPolicy.max_retries`` > 0 (default 0: the caller decides),
  sleeping ``Retry-After`` each time and never more than ``max_wait_s`` in all. A 429 means the
  request was refused before it was accepted, so retrying a submit never runs a job twice.
- ``wait`` returns only a job that ended ``done``, with every group in prompt order; a job that
  ended ``failed`` or ``cancelled`` raises ``JobFailedError`` (its status and the groups that
  did finish); a wait past its ``timeout`` raises ``WaitTimeoutError`` and leaves the job
  running. ``rollout`` (submit + wait) cancels its job when the wait does not return.
"""

from app.client.aio import AsyncSeerClient
from app.client.calls import DEFAULT_URL, Call, Prompt, SeerCalls, Stream
from app.client.errors import (
    JobFailedError,
    JobResult,
    RetryPolicy,
    SeerError,
    SeerHTTPError,
    WaitTimeoutError,
)
from app.client.sync import SeerClient

__all__ = [
    "DEFAULT_URL",
    "AsyncSeerClient",
    "Call",
    "JobFailedError",
    "JobResult",
    "Prompt",
    "RetryPolicy",
    "SeerCalls",
    "SeerClient",
    "SeerError",
    "SeerHTTPError",
    "Stream",
    "WaitTimeoutError",
]
