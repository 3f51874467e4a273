"""Typed HTTP client of the rollout service, sync (``SeerClient``) and async (``AsyncSeerClient``).

Needs only httpx and pydantic: importing it loads no Ray, torch, vLLM or transformers, so a
trainer process can use it beside its own framework. Both clients have the same methods and
return the service's own pydantic models (``app.api``), never raw dicts, except where the
service's schema lives with Ray (``health``) or is not published yet (``update_weights``).

Invariants:
- Every call has a timeout: ``timeout`` (constructor) for ordinary calls, ``stream_timeout``
  for the longest silence of a group stream, ``weights_timeout`` for a weight update.
- An answer that is not 2xx raises ``SeerHTTPError`` with the status code and the server's
  ``detail`` (a string, or for 422 the list of ``{"loc", "msg", ...}``); a 429 carries
  ``retry_after_s`` from its ``Retry-After`` header.
- 429 is retried only when ``RetryPolicy.max_retries`` > 0 (default 0: the caller decides),
  sleeping ``Retry-After`` each time and never more than ``max_wait_s`` in all. A 429 means the
  request was refused before it was accepted, so retrying a submit never runs a job twice.
- ``wait`` returns only a job that ended ``done``, with every group in prompt order; a job that
  ended ``failed`` or ``cancelled`` raises ``JobFailedError`` (its status and the groups that
  did finish); a wait past its ``timeout`` raises ``WaitTimeoutError`` and leaves the job
  running. ``rollout`` (submit + wait) cancels its job when the wait does not return.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.api import (
    GroupResult,
    JobAccepted,
    JobState,
    JobStatus,
    RolloutRequest,
    SpeculationState,
    WeightsState,
    WeightsUpdate,
)
from core.engine import SamplingParams

DEFAULT_URL = "http://127.0.0.1:8000"

#: Cancel tokens a client keeps (of its latest jobs; a job's own expires after job_ttl_s).
_MAX_CANCEL_TOKENS = 10_000

#: A prompt: text, or token ids.
Prompt = str | list[int]


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
        #: the server's ``detail``: a message, or the list of field errors of a 422
        self.detail = detail
        #: seconds the server asks to wait before retrying (429 and 503 with ``Retry-After``)
        self.retry_after_s = retry_after_s


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


@dataclass(frozen=True)
class JobResult:
    """A job that ended ``done``: its final status and every group, in prompt order."""

    status: JobStatus
    groups: list[GroupResult]


# ---------------------------------------------------------------------------------- helpers
def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(float(value), 0.0)
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(when.timestamp() - time.time(), 0.0)
    return None


def _http_error(response: httpx.Response) -> SeerHTTPError:
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
        _retry_after(response.headers.get("retry-after")),
    )


#: Request fields that ``submit`` sets itself: its arguments, and ``wait`` (always false: a job).
_ARGUMENTS = frozenset(
    ("prompts", "group_size", "max_tokens", "sampling", "prompt_ids", "iteration", "logprobs",
     "chat_template", "policy", "wait")
)  # fmt: skip


def _rollout_body(
    prompts: Sequence[Prompt],
    group_size: int,
    max_tokens: int,
    sampling: SamplingParams | Mapping[str, Any] | None,
    prompt_ids: Sequence[str] | None,
    iteration: int | None,
    logprobs: bool,
    chat_template: bool,
    policy: str | None,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/rollouts``, validated by the service's own schema first
    (a bad argument raises pydantic's ``ValidationError`` naming it, before any request).
    ``extra``: request fields without an argument of their own (never one that has one)."""
    fields: dict[str, Any] = {
        "prompts": list(prompts),
        "group_size": group_size,
        "max_tokens": max_tokens,
        "logprobs": logprobs,
        "chat_template": chat_template,
    }
    for name, value in (extra or {}).items():
        if name in _ARGUMENTS:
            raise ValueError(f"extra field {name!r} is set by submit itself (an argument or wait)")
        fields[name] = value
    if sampling is not None:
        fields["sampling"] = dict(sampling) if isinstance(sampling, Mapping) else sampling
    if prompt_ids is not None:
        fields["prompt_ids"] = list(prompt_ids)
    if iteration is not None:
        fields["iteration"] = iteration
    if policy is not None:
        fields["policy"] = policy
    request = RolloutRequest.model_validate(fields)
    return request.model_dump(mode="json", exclude_unset=True)


def _weights_version(response: httpx.Response) -> WeightsUpdate:
    return WeightsUpdate.model_validate(response.json())


def _health(response: httpx.Response) -> dict[str, Any]:
    """The health body of a 200, or of the 503 that still reports every replica."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "status" in body and "replicas" in body:
        return body
    raise _http_error(response)


def _finished(status: JobStatus, groups: list[GroupResult]) -> JobResult:
    """``JobResult`` of a job whose group stream has ended, or the error that says why not."""
    ordered = sorted(groups, key=lambda g: g.prompt_index)
    if status.state is JobState.DONE and len(ordered) == status.progress.groups:
        return JobResult(status=status, groups=ordered)
    if status.state in (JobState.FAILED, JobState.CANCELLED):
        raise JobFailedError(status, ordered)
    raise SeerError(
        f"group stream of rollout {status.id} ended with {len(ordered)} of "
        f"{status.progress.groups} groups while the job is {status.state.value}"
    )


def _weights_body(
    path: str, version: int | None, abort_running: bool, sha256: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "version": version}
    if abort_running:
        body["abort_running"] = True
    if sha256 is not None:
        body["sha256"] = sha256
    return body


# ---------------------------------------------------------------------------------- shared
class _Settings:
    """What both clients share: timeouts, operator token, 429 retry policy (see ``SeerClient``)."""

    def __init__(
        self,
        timeout: float,
        stream_timeout: float,
        weights_timeout: float,
        token: str | None,
        retry: RetryPolicy,
    ) -> None:
        for name, value in (
            ("timeout", timeout),
            ("stream_timeout", stream_timeout),
            ("weights_timeout", weights_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name}={value} must be > 0 seconds")
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.weights_timeout = weights_timeout
        self.token = token
        self.retry = retry
        # the cancel token of each job this client submitted (DELETE needs it, or the operator's)
        self._cancel_tokens: dict[str, str] = {}

    def _accepted(self, body: Any) -> JobAccepted:
        job = JobAccepted.model_validate(body)
        self._cancel_tokens[job.id] = job.cancel_token
        while len(self._cancel_tokens) > _MAX_CANCEL_TOKENS:  # the oldest jobs have expired
            del self._cancel_tokens[next(iter(self._cancel_tokens))]
        return job

    def _cancel_headers(self, job_id: str, token: str | None) -> dict[str, str]:
        """Bearer of a cancel: ``token``, else the job's own cancel token if this client
        submitted it, else the client's operator token (none: the service answers 401)."""
        given = token or self._cancel_tokens.get(job_id) or self.token
        return {"Authorization": f"Bearer {given}"} if given else {}

    def _call_timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _silence_timeout(self, stream_timeout: float | None) -> httpx.Timeout:
        """A stream's timeout: connecting as any call, each read up to the longest silence."""
        read = self.stream_timeout if stream_timeout is None else stream_timeout
        return httpx.Timeout(self.timeout, read=read)

    def _operator_headers(self, token: str | None, operator: str | None = None) -> dict[str, str]:
        token = token or self.token
        if not token:
            raise ValueError("an operator call needs a token (token= here or on the client)")
        headers = {"Authorization": f"Bearer {token}"}
        if operator:
            headers["X-Operator"] = operator
        return headers


# ---------------------------------------------------------------------------------- sync
class SeerClient(_Settings):
    """Blocking client. Use as a context manager, or call ``close``.

    ``timeout``: seconds for an ordinary call (connect, each read). ``stream_timeout``: the
    longest silence between two groups of a stream (a group can take minutes to generate).
    ``weights_timeout``: a weight update (loads a checkpoint into every replica). ``token``:
    the operator token of ``set_speculation`` / ``update_weights`` (each call may override it).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 3600.0,
        weights_timeout: float = 600.0,
        token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(timeout, stream_timeout, weights_timeout, token, retry)
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SeerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        allow: tuple[int, ...] = (),
    ) -> httpx.Response:
        """Send with the 429 retry policy; raise ``SeerHTTPError`` unless 2xx or in ``allow``."""
        attempt, slept = 0, 0.0
        while True:
            r = self._http.request(
                method, path, json=body, headers=headers, timeout=self._call_timeout(timeout)
            )
            if r.is_success or r.status_code in allow:
                return r
            error = _http_error(r)
            delay = self.retry.delay(error, attempt, slept)
            if delay is None:
                raise error
            time.sleep(delay)
            attempt, slept = attempt + 1, slept + delay

    # ------------------------------------------------------------------ jobs
    def submit(
        self,
        prompts: Sequence[Prompt],
        group_size: int,
        max_tokens: int,
        *,
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        prompt_ids: Sequence[str] | None = None,
        iteration: int | None = None,
        logprobs: bool = True,
        chat_template: bool = True,
        policy: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> JobAccepted:
        """Start a rollout job (``POST /v1/rollouts``): every prompt becomes a group of
        ``group_size`` responses of at most ``max_tokens`` tokens. ``extra``: further request
        fields, validated like the rest."""
        body = _rollout_body(
            prompts, group_size, max_tokens, sampling, prompt_ids, iteration,
            logprobs, chat_template, policy, extra,
        )  # fmt: skip
        return self._accepted(self._request("POST", "/v1/rollouts", body=body).json())

    def status(self, job_id: str) -> JobStatus:
        """State and progress of a job (``GET /v1/rollouts/{id}``)."""
        return JobStatus.model_validate(self._request("GET", f"/v1/rollouts/{job_id}").json())

    def cancel(self, job_id: str, token: str | None = None) -> JobStatus:
        """Cancel a job; its running chunks are aborted (``DELETE /v1/rollouts/{id}``). Allowed
        with the job's cancel token (kept for the jobs this client submitted; ``token`` gives
        another) or the operator token."""
        headers = self._cancel_headers(job_id, token)
        r = self._request("DELETE", f"/v1/rollouts/{job_id}", headers=headers)
        return JobStatus.model_validate(r.json())

    def stream_groups(
        self, job_id: str, *, stream_timeout: float | None = None
    ) -> Iterator[GroupResult]:
        """Every group of the job as it finishes, in completion order, until the job ends
        (NDJSON of ``GET /v1/rollouts/{id}/groups``; then ``status`` tells how it ended)."""
        timeout = self._silence_timeout(stream_timeout)
        with self._http.stream("GET", f"/v1/rollouts/{job_id}/groups", timeout=timeout) as r:
            if not r.is_success:
                r.read()
                raise _http_error(r)
            for line in r.iter_lines():
                if line:
                    yield GroupResult.model_validate(json.loads(line))

    def wait(self, job_id: str, timeout: float | None = None) -> JobResult:
        """Stream the job's groups until it ends, then check its status (see the module's
        invariants for what is raised). ``timeout``: checked after every group and bounding
        every read, so a wait past it raises at the latest ``timeout`` after the last group;
        None: until the job ends (the service cancels a job after its ``request_timeout_s``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        groups: list[GroupResult] = []
        try:
            for group in self.stream_groups(job_id, stream_timeout=timeout):
                groups.append(group)
                if deadline is not None and time.monotonic() > deadline:
                    raise WaitTimeoutError(job_id, timeout, groups)
        except httpx.ReadTimeout as exc:
            if timeout is None:
                raise
            raise WaitTimeoutError(job_id, timeout, groups) from exc
        return _finished(self.status(job_id), groups)

    def rollout(
        self,
        prompts: Sequence[Prompt],
        group_size: int,
        max_tokens: int,
        *,
        timeout: float | None = None,
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        prompt_ids: Sequence[str] | None = None,
        iteration: int | None = None,
        logprobs: bool = True,
        chat_template: bool = True,
        policy: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> JobResult:
        """``submit`` + ``wait``: the arguments of both. The job is cancelled when the wait
        does not return (error, timeout, interrupt), as the service does for ``"wait": true``."""
        job = self.submit(
            prompts, group_size, max_tokens, sampling=sampling, prompt_ids=prompt_ids,
            iteration=iteration, logprobs=logprobs, chat_template=chat_template, policy=policy,
            extra=extra,
        )  # fmt: skip
        try:
            return self.wait(job.id, timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                self.cancel(job.id)
            raise

    # ------------------------------------------------------------------ service
    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``status`` (ok | degraded | unavailable), ``policy``, per replica
        its state and load. Returned also for the 503 of an unavailable service."""
        return _health(self._request("GET", "/healthz", allow=(503,)))

    def weights(self) -> WeightsState:
        """The policy version new tokens are sampled with (``GET /v1/weights``)."""
        return WeightsState.model_validate(self._request("GET", "/v1/weights").json())

    def get_speculation(self) -> SpeculationState:
        """Grouped-drafting settings, their version, and the version each replica runs."""
        return SpeculationState.model_validate(self._request("GET", "/v1/speculation").json())

    def set_speculation(
        self,
        settings: Mapping[str, Any],
        *,
        token: str | None = None,
        reason: str | None = None,
        operator: str | None = None,
    ) -> SpeculationState:
        """Change drafting settings live (``PUT /v1/speculation``); fields not in ``settings``
        keep their value. ``operator`` and ``reason`` go to the audit log."""
        r = self._request(
            "PUT",
            "/v1/speculation",
            body={"settings": dict(settings), "reason": reason},
            headers=self._operator_headers(token, operator),
        )
        return SpeculationState.model_validate(r.json())

    def update_weights(
        self,
        path: str,
        version: int | None = None,
        *,
        token: str | None = None,
        abort_running: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> WeightsUpdate:
        """Load the checkpoint at ``path`` (on the service's machine) into every engine replica
        as policy ``version`` (``POST /v1/weights``); ``abort_running``: abort running chunks
        instead of letting them finish; ``version`` None: the current one + 1. ``sha256``: the
        checkpoint's digest (``app.weights_digest.checkpoint_digest(path)``, computed where the
        trainer wrote it): every replica verifies it before loading. Returns what the update
        did (``WeightsUpdate``)."""
        body = _weights_body(path, version, abort_running, sha256)
        r = self._request(
            "POST",
            "/v1/weights",
            body=body,
            headers=self._operator_headers(token),
            timeout=self.weights_timeout if timeout is None else timeout,
        )
        return _weights_version(r)


# ---------------------------------------------------------------------------------- async
class AsyncSeerClient(_Settings):
    """The same methods as ``SeerClient``, awaitable (``stream_groups`` is an async iterator).

    Unlike the sync client, ``wait``'s ``timeout`` is exact (``asyncio.timeout``).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 3600.0,
        weights_timeout: float = 600.0,
        token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(timeout, stream_timeout, weights_timeout, token, retry)
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSeerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        allow: tuple[int, ...] = (),
    ) -> httpx.Response:
        """Send with the 429 retry policy; raise ``SeerHTTPError`` unless 2xx or in ``allow``."""
        attempt, slept = 0, 0.0
        while True:
            r = await self._http.request(
                method, path, json=body, headers=headers, timeout=self._call_timeout(timeout)
            )
            if r.is_success or r.status_code in allow:
                return r
            error = _http_error(r)
            delay = self.retry.delay(error, attempt, slept)
            if delay is None:
                raise error
            await asyncio.sleep(delay)
            attempt, slept = attempt + 1, slept + delay

    # ------------------------------------------------------------------ jobs
    async def submit(
        self,
        prompts: Sequence[Prompt],
        group_size: int,
        max_tokens: int,
        *,
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        prompt_ids: Sequence[str] | None = None,
        iteration: int | None = None,
        logprobs: bool = True,
        chat_template: bool = True,
        policy: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> JobAccepted:
        """See ``SeerClient.submit``."""
        body = _rollout_body(
            prompts, group_size, max_tokens, sampling, prompt_ids, iteration,
            logprobs, chat_template, policy, extra,
        )  # fmt: skip
        r = await self._request("POST", "/v1/rollouts", body=body)
        return self._accepted(r.json())

    async def status(self, job_id: str) -> JobStatus:
        """See ``SeerClient.status``."""
        r = await self._request("GET", f"/v1/rollouts/{job_id}")
        return JobStatus.model_validate(r.json())

    async def cancel(self, job_id: str, token: str | None = None) -> JobStatus:
        """See ``SeerClient.cancel``."""
        headers = self._cancel_headers(job_id, token)
        r = await self._request("DELETE", f"/v1/rollouts/{job_id}", headers=headers)
        return JobStatus.model_validate(r.json())

    async def stream_groups(
        self, job_id: str, *, stream_timeout: float | None = None
    ) -> AsyncIterator[GroupResult]:
        """See ``SeerClient.stream_groups``."""
        timeout = self._silence_timeout(stream_timeout)
        async with self._http.stream("GET", f"/v1/rollouts/{job_id}/groups", timeout=timeout) as r:
            if not r.is_success:
                await r.aread()
                raise _http_error(r)
            async for line in r.aiter_lines():
                if line:
                    yield GroupResult.model_validate(json.loads(line))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobResult:
        """See ``SeerClient.wait``; here ``timeout`` bounds the whole wait exactly."""
        groups: list[GroupResult] = []
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                async for group in self.stream_groups(job_id):
                    groups.append(group)
                status = await self.status(job_id)
        except TimeoutError as exc:
            if not scope.expired():
                raise
            raise WaitTimeoutError(job_id, timeout, groups) from exc
        return _finished(status, groups)

    async def rollout(
        self,
        prompts: Sequence[Prompt],
        group_size: int,
        max_tokens: int,
        *,
        timeout: float | None = None,
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        prompt_ids: Sequence[str] | None = None,
        iteration: int | None = None,
        logprobs: bool = True,
        chat_template: bool = True,
        policy: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> JobResult:
        """See ``SeerClient.rollout``."""
        job = await self.submit(
            prompts, group_size, max_tokens, sampling=sampling, prompt_ids=prompt_ids,
            iteration=iteration, logprobs=logprobs, chat_template=chat_template, policy=policy,
            extra=extra,
        )  # fmt: skip
        try:
            return await self.wait(job.id, timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.cancel(job.id))
            raise

    # ------------------------------------------------------------------ service
    async def health(self) -> dict[str, Any]:
        """See ``SeerClient.health``."""
        return _health(await self._request("GET", "/healthz", allow=(503,)))

    async def weights(self) -> WeightsState:
        """See ``SeerClient.weights``."""
        r = await self._request("GET", "/v1/weights")
        return WeightsState.model_validate(r.json())

    async def get_speculation(self) -> SpeculationState:
        """See ``SeerClient.get_speculation``."""
        r = await self._request("GET", "/v1/speculation")
        return SpeculationState.model_validate(r.json())

    async def set_speculation(
        self,
        settings: Mapping[str, Any],
        *,
        token: str | None = None,
        reason: str | None = None,
        operator: str | None = None,
    ) -> SpeculationState:
        """See ``SeerClient.set_speculation``."""
        r = await self._request(
            "PUT",
            "/v1/speculation",
            body={"settings": dict(settings), "reason": reason},
            headers=self._operator_headers(token, operator),
        )
        return SpeculationState.model_validate(r.json())

    async def update_weights(
        self,
        path: str,
        version: int | None = None,
        *,
        token: str | None = None,
        abort_running: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> WeightsUpdate:
        """See ``SeerClient.update_weights``."""
        body = _weights_body(path, version, abort_running, sha256)
        r = await self._request(
            "POST",
            "/v1/weights",
            body=body,
            headers=self._operator_headers(token),
            timeout=self.weights_timeout if timeout is None else timeout,
        )
        return _weights_version(r)
