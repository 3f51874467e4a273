"""Every call of the service built once: the ``httpx.Request`` from the API's request model and
how its answer is read (``Call``, ``Stream``), with no I/O; ``SeerClient`` and ``AsyncSeerClient``
only send them.

Invariant: a body is built from its request model, so a bad argument raises pydantic's
``ValidationError`` naming it before any request is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from app.api import (
    AbortRequest,
    AbortResponse,
    CompletionRequest,
    CompletionResponse,
    DiskWeightsRequest,
    DiskWeightsResponse,
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
    WeightsState,
    WeightsUpdate,
    WeightsUpdateRequest,
)
from app.client.errors import JobFailedError, JobResult, SeerError, http_error

DEFAULT_URL = "http://127.0.0.1:8000"

#: Cancel tokens a client keeps (of its latest jobs; a job's own expires after job_ttl_s).
MAX_CANCEL_TOKENS = 10_000

#: A prompt: text, or token ids.
Prompt = str | list[int]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


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
    body: dict[str, Any] = request.model_dump(mode="json", exclude_unset=True, by_alias=True)
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
        raise http_error(response) from None


def finished(status: JobStatus, groups: list[GroupResult]) -> JobResult:
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
            raise http_error(response)
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
        while len(self._cancel_tokens) > MAX_CANCEL_TOKENS:  # the oldest jobs have expired
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
