"""``SeerClient``: the calls of ``app.client.calls`` sent over an ``httpx.Client``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from app.api import (
    AbortResponse,
    CompletionRequest,
    CompletionResponse,
    DiskWeightsResponse,
    GenerateAnswer,
    GenerateRequest,
    GroupResult,
    JobAccepted,
    JobStatus,
    ModelList,
    SamplingParams,
    ServiceHealth,
    SpeculationState,
    WeightsState,
    WeightsUpdate,
)
from app.client.calls import DEFAULT_URL, Call, Prompt, SeerCalls, Stream, T, finished
from app.client.errors import (
    NO_RETRY,
    JobResult,
    Retries,
    RetryPolicy,
    SeerHTTPError,
    WaitTimeoutError,
    http_error,
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
        retry: RetryPolicy = NO_RETRY,
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
        retries = Retries(self.retry)
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
                raise http_error(response)
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
        return finished(self.status(job_id), groups)

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
