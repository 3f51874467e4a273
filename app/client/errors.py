"""What the client raises, its 429 retry policy, and a finished job's result.

Invariant: an answer that is not 2xx becomes one ``SeerHTTPError`` (status, method, URL, the
server's ``detail``, ``Retry-After``); 429 is retried only within a ``RetryPolicy``.
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from app.api import (
    FieldError,
    GroupResult,
    JobStatus,
    ValidationErrorBody,
)


# ---------------------------------------------------------------------------------- errors
class SeerError(Exception):
    """Base of every error this client raises on its own (transport errors stay httpx's)."""


class SeerHTTPError(SeerError):
    """The service answered with a status that is not 2xx."""

    def __init__(
        self, method: str, url: str, status_code: int, detail: Any, retry_after_s: float | None
    ) -> None:
        super().__init__(f"{method} {url} -> HTTP {status_code}: {detail}")
        self.method = method
        self.url = url
        self.status_code = status_code
        #: the server's ``detail``: a message, or the list of field errors of a 422 (a body
        #: without ``detail``, e.g. ``/update_weights_from_disk``'s: the whole body)
        self.detail = detail
        #: seconds the server asks to wait before retrying (429 and 503 with ``Retry-After``)
        self.retry_after_s = retry_after_s

    @property
    def field_errors(self) -> list[FieldError]:
        """The refused values of a 422 (``app.api.ValidationErrorBody``); [] for any other."""
        if self.status_code != 422 or not isinstance(self.detail, list):
            return []
        try:
            return ValidationErrorBody.model_validate({"detail": self.detail}).detail
        except ValidationError:
            return []


class JobFailedError(SeerError):
    """The job ended ``failed`` or ``cancelled``; ``status.error`` says why."""

    def __init__(self, status: JobStatus, groups: list[GroupResult]) -> None:
        super().__init__(f"rollout {status.id} {status.state.value}: {status.error}")
        self.status = status
        #: the groups that finished before it ended, in prompt order
        self.groups = groups


class WaitTimeoutError(SeerError, TimeoutError):
    """The job had not ended within the wait's ``timeout``; it is still running."""

    def __init__(self, job_id: str, timeout: float | None, groups: list[GroupResult]) -> None:
        super().__init__(f"rollout {job_id} not finished within {timeout} s")
        self.job_id = job_id
        #: the groups that finished within the timeout, in completion order
        self.groups = groups


# ---------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class RetryPolicy:
    """Automatic retry of 429 (the service's open jobs/requests/tokens are at their limit)."""

    max_retries: int = 0  # retries after the first refusal; 0 = raise the 429 at once (0..100)
    max_wait_s: float = 60.0  # bound on the time slept across the retries of one call (> 0)
    default_delay_s: float = 1.0  # sleep when the 429 has no usable Retry-After (> 0)

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= 100:
            raise ValueError(f"max_retries={self.max_retries} must be in [0, 100]")
        if not self.max_wait_s > 0:
            raise ValueError(f"max_wait_s={self.max_wait_s} must be > 0")
        if not self.default_delay_s > 0:
            raise ValueError(f"default_delay_s={self.default_delay_s} must be > 0")

    def delay(self, error: SeerHTTPError, attempt: int, slept_s: float) -> float | None:
        """Seconds to sleep before retry ``attempt`` (0-based) after ``error``; None: raise."""
        if error.status_code != 429 or attempt >= self.max_retries:
            return None
        delay = error.retry_after_s if error.retry_after_s is not None else self.default_delay_s
        return delay if slept_s + delay <= self.max_wait_s else None


#: The default: a 429 is raised at once (the caller decides).
NO_RETRY = RetryPolicy()


class Retries:
    """The retries of one call under a ``RetryPolicy``."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.attempt = 0
        self.slept = 0.0

    def delay(self, error: SeerHTTPError) -> float:
        """Seconds to sleep before the next try; raises ``error`` when there is none."""
        delay = self.policy.delay(error, self.attempt, self.slept)
        if delay is None:
            raise error
        self.attempt += 1
        self.slept += delay
        return delay


@dataclass(frozen=True)
class JobResult:
    """A job that ended ``done``: its final status and every group, in prompt order."""

    status: JobStatus
    groups: list[GroupResult]


# ---------------------------------------------------------------------------------- helpers
def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(float(value), 0.0)
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(when.timestamp() - time.time(), 0.0)
    return None


def http_error(response: httpx.Response) -> SeerHTTPError:
    """The ``SeerHTTPError`` of a non-2xx response whose body has been read."""
    try:
        body = response.json()
        detail = body["detail"] if isinstance(body, dict) and "detail" in body else body
    except ValueError:
        detail = response.text
    return SeerHTTPError(
        response.request.method,
        str(response.request.url),
        response.status_code,
        detail,
        retry_after(response.headers.get("retry-after")),
    )
