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

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.api import (
    AbortRequest,
    AbortResponse,
    CompletionRequest,
    CompletionResponse,
    DiskWeightsRequest,
    DiskWeightsResponse,
    FieldError,
    GenerateAnswer,
    GenerateRequest,
    GroupResult,
    JobAccepted,
    JobState,
    JobStatus,
    ModelList,
    RolloutRequest,
    SamplingParams,
    ServiceHealth,
    SpeculationState,
    SpeculationUpdate,
    ValidationErrorBody,
    WeightsState,
    WeightsUpdate,
    WeightsUpdateRequest,
)

DEFAULT_URL = "http://127.0.0.1:8000"

#: Cancel tokens a client keeps (of its latest jobs; a job's own expires after job_ttl_s).
_MAX_CANCEL_TOKENS = 10_000

#: A prompt: text, or token ids.
Prompt = str | list[int]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


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


class _Retries:
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
    return _body(RolloutRequest.model_validate(fields))


def _body(request: BaseModel) -> dict[str, Any]:
    """The JSON body of a request model: the fields it was given."""
    body: dict[str, Any] = request.model_dump(mode="json", exclude_unset=True)
    return body


def _reader(model: type[M]) -> Callable[[httpx.Response], M]:
    """Reads a JSON answer as ``model`` (pydantic's ``ValidationError`` if it is not one)."""
    return lambda response: model.model_validate_json(response.content)


_GENERATE_ANSWER: TypeAdapter[GenerateAnswer] = TypeAdapter(GenerateAnswer)


def _generate_answer(response: httpx.Response) -> GenerateAnswer:
    return _GENERATE_ANSWER.validate_json(response.content)


def _health(response: httpx.Response) -> ServiceHealth:
    """The health of a 200, or of the 503 that still reports every replica (an unreachable
    scheduler's 503 is an error)."""
    try:
        return ServiceHealth.model_validate_json(response.content)
    except ValueError:
        if response.is_success:
            raise
        raise _http_error(response) from None


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


# ---------------------------------------------------------------------------------- calls
@dataclass(frozen=True)
class _Request:
    """What is sent: built once here, for either client's ``httpx`` client."""

    method: str
    path: str
    timeout: float | httpx.Timeout
    body: Any  # JSON (None: no body)
    headers: Mapping[str, str] | None

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The ``httpx.Request``, against ``http``'s base URL."""
        return http.build_request(
            self.method, self.path, json=self.body, headers=self.headers, timeout=self.timeout
        )


@dataclass(frozen=True)
class Call(_Request, Generic[T]):
    """One call of the API: its request, and how its answer is read."""

    read: Callable[[httpx.Response], T]
    allow: tuple[int, ...] = ()  # statuses besides 2xx that ``read`` takes (/healthz's 503)

    def answer(self, response: httpx.Response) -> T:
        """The answer's model; ``SeerHTTPError`` for a status that is not 2xx (or allowed)."""
        if not (response.is_success or response.status_code in self.allow):
            raise _http_error(response)
        return self.read(response)


@dataclass(frozen=True)
class Stream(_Request, Generic[T]):
    """A call answered with NDJSON: one item per line (empty lines skipped), read as it comes."""

    item: Callable[[str], T]


class SeerCalls:
    """Every call of the API, built (no I/O): the request and how its answer is read. Both
    clients send what it builds; it keeps their settings (timeouts, operator token) and the
    cancel token of each job submitted through it.

    ``timeout``: seconds for an ordinary call (connect, each read). ``stream_timeout``: the
    longest silence between two groups of a stream (a group can take minutes to generate), and
    the longest wait of a one-call job (``completions``, ``generate``). ``weights_timeout``: a
    weight update (loads a checkpoint into every replica). ``token``: the operator token of the
    operator calls (each call may override it).
    """

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 3600.0,
        weights_timeout: float = 600.0,
        token: str | None = None,
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
        # the cancel token of each job submitted (DELETE needs it, or the operator's)
        self._cancel_tokens: dict[str, str] = {}

    # ------------------------------------------------------------------ settings
    def _accepted(self, response: httpx.Response) -> JobAccepted:
        job = JobAccepted.model_validate_json(response.content)
        self._cancel_tokens[job.id] = job.cancel_token
        while len(self._cancel_tokens) > _MAX_CANCEL_TOKENS:  # the oldest jobs have expired
            del self._cancel_tokens[next(iter(self._cancel_tokens))]
        return job

    def _cancel_headers(self, job_id: str, token: str | None) -> dict[str, str]:
        """Bearer of a cancel: ``token``, else the job's own cancel token if it was submitted
        here, else the operator token (none: the service answers 401)."""
        given = token or self._cancel_tokens.get(job_id) or self.token
        return {"Authorization": f"Bearer {given}"} if given else {}

    def _operator_headers(self, token: str | None, operator: str | None = None) -> dict[str, str]:
        token = token or self.token
        if not token:
            raise ValueError("an operator call needs a token (token= here or on the client)")
        headers = {"Authorization": f"Bearer {token}"}
        if operator:
            headers["X-Operator"] = operator
        return headers

    def _silence(self, stream_timeout: float | None) -> httpx.Timeout:
        """Connecting as any call, each read up to the longest silence."""
        read = self.stream_timeout if stream_timeout is None else stream_timeout
        return httpx.Timeout(self.timeout, read=read)

    def _call(
        self,
        method: str,
        path: str,
        read: Callable[[httpx.Response], T],
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        allow: tuple[int, ...] = (),
    ) -> Call[T]:
        timeout = self.timeout if timeout is None else timeout
        return Call(method, path, timeout, body, headers, read=read, allow=allow)

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
    ) -> Call[JobAccepted]:
        """``POST /v1/rollouts`` (see ``SeerClient.submit``)."""
        body = _rollout_body(
            prompts, group_size, max_tokens, sampling, prompt_ids, iteration,
            logprobs, chat_template, policy, extra,
        )  # fmt: skip
        return self._call("POST", "/v1/rollouts", self._accepted, body=body)

    def status(self, job_id: str) -> Call[JobStatus]:
        return self._call("GET", f"/v1/rollouts/{job_id}", _reader(JobStatus))

    def cancel(self, job_id: str, token: str | None = None) -> Call[JobStatus]:
        headers = self._cancel_headers(job_id, token)
        return self._call("DELETE", f"/v1/rollouts/{job_id}", _reader(JobStatus), headers=headers)

    def groups(self, job_id: str, stream_timeout: float | None = None) -> Stream[GroupResult]:
        """``GET /v1/rollouts/{id}/groups``: NDJSON, one ``GroupResult`` per line."""
        timeout = self._silence(stream_timeout)
        path = f"/v1/rollouts/{job_id}/groups"
        return Stream("GET", path, timeout, None, None, item=GroupResult.model_validate_json)

    # ------------------------------------------------------------------ service
    def health(self) -> Call[ServiceHealth]:
        return self._call("GET", "/healthz", _health, allow=(503,))

    def weights(self) -> Call[WeightsState]:
        return self._call("GET", "/v1/weights", _reader(WeightsState))

    def get_speculation(self) -> Call[SpeculationState]:
        return self._call("GET", "/v1/speculation", _reader(SpeculationState))

    def set_speculation(
        self,
        settings: Mapping[str, Any],
        *,
        token: str | None = None,
        reason: str | None = None,
        operator: str | None = None,
    ) -> Call[SpeculationState]:
        body = _body(SpeculationUpdate(settings=dict(settings), reason=reason))
        headers = self._operator_headers(token, operator)
        return self._call(
            "PUT", "/v1/speculation", _reader(SpeculationState), body=body, headers=headers
        )

    def update_weights(
        self,
        path: str,
        version: int | None = None,
        *,
        token: str | None = None,
        abort_running: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> Call[WeightsUpdate]:
        fields: dict[str, Any] = {"path": path, "version": version}
        if abort_running:
            fields["abort_running"] = True
        if sha256 is not None:
            fields["sha256"] = sha256
        return self._call(
            "POST",
            "/v1/weights",
            _reader(WeightsUpdate),
            body=_body(WeightsUpdateRequest.model_validate(fields)),
            headers=self._operator_headers(token),
            timeout=self.weights_timeout if timeout is None else timeout,
        )

    # ------------------------------------------------------------------ trainer endpoints
    def models(self) -> Call[ModelList]:
        return self._call("GET", "/v1/models", _reader(ModelList))

    def completions(
        self, request: CompletionRequest | Mapping[str, Any], timeout: float | None = None
    ) -> Call[CompletionResponse]:
        body = _body(CompletionRequest.model_validate(request))
        return self._call(
            "POST",
            "/v1/completions",
            _reader(CompletionResponse),
            body=body,
            timeout=self._silence(timeout),
        )

    def generate(
        self, request: GenerateRequest | Mapping[str, Any], timeout: float | None = None
    ) -> Call[GenerateAnswer]:
        body = _body(GenerateRequest.model_validate(request))
        return self._call(
            "POST", "/generate", _generate_answer, body=body, timeout=self._silence(timeout)
        )

    def abort_request(
        self, rid: str | None = None, *, abort_all: bool = False, token: str | None = None
    ) -> Call[AbortResponse]:
        fields: dict[str, Any] = {"abort_all": True} if abort_all else {}
        if rid is not None:
            fields["rid"] = rid
        headers = self._operator_headers(token) if abort_all else None
        body = _body(AbortRequest.model_validate(fields))
        return self._call(
            "POST", "/abort_request", _reader(AbortResponse), body=body, headers=headers
        )

    def update_weights_from_disk(
        self,
        model_path: str,
        weight_version: int | str | None = None,
        *,
        token: str | None = None,
        abort_all_requests: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> Call[DiskWeightsResponse]:
        fields: dict[str, Any] = {"model_path": model_path}
        if weight_version is not None:
            fields["weight_version"] = str(weight_version)
        if abort_all_requests:
            fields["abort_all_requests"] = True
        if sha256 is not None:
            fields["sha256"] = sha256
        return self._call(
            "POST",
            "/update_weights_from_disk",
            _reader(DiskWeightsResponse),
            body=_body(DiskWeightsRequest.model_validate(fields)),
            headers=self._operator_headers(token),
            timeout=self.weights_timeout if timeout is None else timeout,
        )


# ---------------------------------------------------------------------------------- sync
class SeerClient:
    """Blocking client. Use as a context manager, or call ``close``. The settings are
    ``SeerCalls``'s (``calls``); ``retry``: the 429 retry policy; ``transport``: httpx's (e.g.
    ``httpx.MockTransport`` in tests)."""

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
        self.calls = SeerCalls(
            timeout=timeout,
            stream_timeout=stream_timeout,
            weights_timeout=weights_timeout,
            token=token,
        )
        self.retry = retry
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SeerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call`` with the 429 retry policy; its answer's model."""
        retries = _Retries(self.retry)
        while True:
            response = self._http.send(call.request(self._http))
            try:
                return call.answer(response)
            except SeerHTTPError as error:
                time.sleep(retries.delay(error))

    def stream(self, call: Stream[T]) -> Iterator[T]:
        """Every item of ``call``'s NDJSON answer as it comes."""
        response = self._http.send(call.request(self._http), stream=True)
        try:
            if not response.is_success:
                response.read()
                raise _http_error(response)
            for line in response.iter_lines():
                if line:
                    yield call.item(line)
        finally:
            response.close()

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
        return self.send(
            self.calls.submit(
                prompts, group_size, max_tokens, sampling=sampling, prompt_ids=prompt_ids,
                iteration=iteration, logprobs=logprobs, chat_template=chat_template,
                policy=policy, extra=extra,
            )
        )  # fmt: skip

    def status(self, job_id: str) -> JobStatus:
        """State and progress of a job (``GET /v1/rollouts/{id}``)."""
        return self.send(self.calls.status(job_id))

    def cancel(self, job_id: str, token: str | None = None) -> JobStatus:
        """Cancel a job; its running chunks are aborted (``DELETE /v1/rollouts/{id}``). Allowed
        with the job's cancel token (kept for the jobs this client submitted; ``token`` gives
        another) or the operator token."""
        return self.send(self.calls.cancel(job_id, token))

    def stream_groups(
        self, job_id: str, *, stream_timeout: float | None = None
    ) -> Iterator[GroupResult]:
        """Every group of the job as it finishes, in completion order, until the job ends
        (NDJSON of ``GET /v1/rollouts/{id}/groups``; then ``status`` tells how it ended)."""
        return self.stream(self.calls.groups(job_id, stream_timeout))

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
    def health(self) -> ServiceHealth:
        """``GET /healthz``: ``status`` (ok | degraded | unavailable), ``policy``, per replica
        its state and load. Returned also for the 503 of an unavailable service."""
        return self.send(self.calls.health())

    def weights(self) -> WeightsState:
        """The policy version new tokens are sampled with (``GET /v1/weights``)."""
        return self.send(self.calls.weights())

    def get_speculation(self) -> SpeculationState:
        """Grouped-drafting settings, their version, and the version each replica runs."""
        return self.send(self.calls.get_speculation())

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
        return self.send(
            self.calls.set_speculation(settings, token=token, reason=reason, operator=operator)
        )

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
        return self.send(
            self.calls.update_weights(
                path, version, token=token, abort_running=abort_running, sha256=sha256,
                timeout=timeout,
            )
        )  # fmt: skip

    # ------------------------------------------------------------------ trainer endpoints
    def models(self) -> ModelList:
        """``GET /v1/models``: the one model served (OpenAI's list)."""
        return self.send(self.calls.models())

    def completions(
        self, request: CompletionRequest | Mapping[str, Any], *, timeout: float | None = None
    ) -> CompletionResponse:
        """``POST /v1/completions`` (OpenAI's subset): answered when the job is done, within
        ``timeout`` (default ``stream_timeout``)."""
        return self.send(self.calls.completions(request, timeout))

    def generate(
        self, request: GenerateRequest | Mapping[str, Any], *, timeout: float | None = None
    ) -> GenerateAnswer:
        """``POST /generate`` (SGLang's shape): one ``GenerateOutput``, or a list of them for a
        batched request; answered when the call is done or aborted, within ``timeout`` (default
        ``stream_timeout``)."""
        return self.send(self.calls.generate(request, timeout))

    def abort_request(
        self, rid: str | None = None, *, abort_all: bool = False, token: str | None = None
    ) -> AbortResponse:
        """``POST /abort_request``: abort the ``/generate`` call ``rid``, or (``abort_all``, the
        operator token) every open job."""
        return self.send(self.calls.abort_request(rid, abort_all=abort_all, token=token))

    def update_weights_from_disk(
        self,
        model_path: str,
        weight_version: int | str | None = None,
        *,
        token: str | None = None,
        abort_all_requests: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> DiskWeightsResponse:
        """``update_weights`` in SGLang's shape (``POST /update_weights_from_disk``)."""
        return self.send(
            self.calls.update_weights_from_disk(
                model_path, weight_version, token=token, abort_all_requests=abort_all_requests,
                sha256=sha256, timeout=timeout,
            )
        )  # fmt: skip


# ---------------------------------------------------------------------------------- async
class AsyncSeerClient:
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
        self.calls = SeerCalls(
            timeout=timeout,
            stream_timeout=stream_timeout,
            weights_timeout=weights_timeout,
            token=token,
        )
        self.retry = retry
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSeerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, call: Call[T]) -> T:
        """See ``SeerClient.send``."""
        retries = _Retries(self.retry)
        while True:
            response = await self._http.send(call.request(self._http))
            try:
                return call.answer(response)
            except SeerHTTPError as error:
                await asyncio.sleep(retries.delay(error))

    async def stream(self, call: Stream[T]) -> AsyncIterator[T]:
        """See ``SeerClient.stream``."""
        response = await self._http.send(call.request(self._http), stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise _http_error(response)
            async for line in response.aiter_lines():
                if line:
                    yield call.item(line)
        finally:
            await response.aclose()

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
        return await self.send(
            self.calls.submit(
                prompts, group_size, max_tokens, sampling=sampling, prompt_ids=prompt_ids,
                iteration=iteration, logprobs=logprobs, chat_template=chat_template,
                policy=policy, extra=extra,
            )
        )  # fmt: skip

    async def status(self, job_id: str) -> JobStatus:
        """See ``SeerClient.status``."""
        return await self.send(self.calls.status(job_id))

    async def cancel(self, job_id: str, token: str | None = None) -> JobStatus:
        """See ``SeerClient.cancel``."""
        return await self.send(self.calls.cancel(job_id, token))

    def stream_groups(
        self, job_id: str, *, stream_timeout: float | None = None
    ) -> AsyncIterator[GroupResult]:
        """See ``SeerClient.stream_groups``."""
        return self.stream(self.calls.groups(job_id, stream_timeout))

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
    async def health(self) -> ServiceHealth:
        """See ``SeerClient.health``."""
        return await self.send(self.calls.health())

    async def weights(self) -> WeightsState:
        """See ``SeerClient.weights``."""
        return await self.send(self.calls.weights())

    async def get_speculation(self) -> SpeculationState:
        """See ``SeerClient.get_speculation``."""
        return await self.send(self.calls.get_speculation())

    async def set_speculation(
        self,
        settings: Mapping[str, Any],
        *,
        token: str | None = None,
        reason: str | None = None,
        operator: str | None = None,
    ) -> SpeculationState:
        """See ``SeerClient.set_speculation``."""
        return await self.send(
            self.calls.set_speculation(settings, token=token, reason=reason, operator=operator)
        )

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
        return await self.send(
            self.calls.update_weights(
                path, version, token=token, abort_running=abort_running, sha256=sha256,
                timeout=timeout,
            )
        )  # fmt: skip

    # ------------------------------------------------------------------ trainer endpoints
    async def models(self) -> ModelList:
        """See ``SeerClient.models``."""
        return await self.send(self.calls.models())

    async def completions(
        self, request: CompletionRequest | Mapping[str, Any], *, timeout: float | None = None
    ) -> CompletionResponse:
        """See ``SeerClient.completions``."""
        return await self.send(self.calls.completions(request, timeout))

    async def generate(
        self, request: GenerateRequest | Mapping[str, Any], *, timeout: float | None = None
    ) -> GenerateAnswer:
        """See ``SeerClient.generate``."""
        return await self.send(self.calls.generate(request, timeout))

    async def abort_request(
        self, rid: str | None = None, *, abort_all: bool = False, token: str | None = None
    ) -> AbortResponse:
        """See ``SeerClient.abort_request``."""
        return await self.send(self.calls.abort_request(rid, abort_all=abort_all, token=token))

    async def update_weights_from_disk(
        self,
        model_path: str,
        weight_version: int | str | None = None,
        *,
        token: str | None = None,
        abort_all_requests: bool = False,
        sha256: str | None = None,
        timeout: float | None = None,
    ) -> DiskWeightsResponse:
        """See ``SeerClient.update_weights_from_disk``."""
        return await self.send(
            self.calls.update_weights_from_disk(
                model_path, weight_version, token=token, abort_all_requests=abort_all_requests,
                sha256=sha256, timeout=timeout,
            )
        )  # fmt: skip
