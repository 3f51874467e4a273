"""``AsyncSeerClient``: the calls of ``app.client.calls`` sent over an ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
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
        retry: RetryPolicy = NO_RETRY,
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
        retries = Retries(self.retry)
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
                raise http_error(response)
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
        return finished(status, groups)

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
