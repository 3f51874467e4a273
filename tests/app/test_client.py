"""The typed client (app/client/), sync and async, against a real Serve app on 127.0.0.1 with
fake engine replicas: jobs (submit, stream, status, wait, rollout, cancel), typed errors (404,
422, 429 with Retry-After and the opt-in bounded retry), operator calls, and that importing the
client loads no Ray, torch, vLLM or transformers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.api import (
    AbortResponse,
    CompletionResponse,
    FieldError,
    GenerateOutput,
    GenerateRequest,
    GroupResult,
    JobAccepted,
    JobState,
    JobStatus,
    ModelList,
    ServiceHealth,
)
from app.client import (
    AsyncSeerClient,
    JobFailedError,
    RetryPolicy,
    SeerClient,
    SeerHTTPError,
    WaitTimeoutError,
)
from app.serve.local import LocalService

TOKEN = "t0ken"
APP: dict[str, Any] = {
    "num_replicas": 2,
    "replica_num_cpus": 0.25,
    "chunk_tokens": 8,
    "policy": "divided",
    "health_period_s": 0.5,
    "replica_call_timeout_s": 2,
    "limits": {"max_open_jobs": 2, "retry_after_s": 1},
    "operator_token": TOKEN,
    # ~100 tokens per response (EOS with p=1/97 per token) at 20 ms per token
    "engine": {"backend": "fake", "max_model_len": 256, "fake_step_s": 0.02},
}
#: A job that runs for many seconds (cancelled by the tests that start it).
LONG: dict[str, Any] = {
    "prompts": ["x"] * 8,
    "group_size": 4,
    "max_tokens": 200,
    "sampling": {"seed": 1},
}


def test_import_loads_no_ray_torch_vllm_or_transformers() -> None:
    code = (
        "import sys, app.client\n"
        "heavy = [m for m in ('ray', 'torch', 'vllm', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_retry_policy_bounds_and_delays() -> None:
    with pytest.raises(ValueError, match="max_retries=-1"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="max_wait_s=0"):
        RetryPolicy(max_wait_s=0)
    with pytest.raises(ValueError, match="timeout=0"):
        SeerClient(timeout=0)
    busy = SeerHTTPError("POST", "u", 429, "full", retry_after_s=2.0)
    policy = RetryPolicy(max_retries=2, max_wait_s=5)
    assert [policy.delay(busy, attempt, slept) for attempt, slept in [(0, 0), (1, 2), (2, 4)]] == [
        2.0,
        2.0,
        None,  # no third retry
    ]
    assert policy.delay(busy, 1, 3.5) is None  # would sleep past max_wait_s
    no_header = SeerHTTPError("POST", "u", 429, "full", retry_after_s=None)
    assert policy.delay(no_header, 0, 0) == policy.default_delay_s
    assert policy.delay(SeerHTTPError("GET", "u", 503, "down", 2.0), 0, 0) is None
    assert RetryPolicy().delay(busy, 0, 0) is None  # off by default


#: Answers of a mock service (no Ray): path -> (status, JSON body).
_MOCK: dict[str, tuple[int, Any]] = {
    "/v1/models": (200, {"data": [{"id": "m", "created": 1}]}),
    "/v1/completions": (
        200,
        {"id": "c", "created": 1, "model": "m", "choices": [], "policy_version": 0,
         "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}},
    ),
    "/generate": (
        200,
        {"text": "a", "output_ids": [97], "meta_info": {
            "id": "r", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 1,
            "completion_tokens": 1, "policy_version": 0, "logprobs_mode": "raw"}},
    ),
    "/abort_request": (200, {"aborted": ["r"]}),
    "/update_weights_from_disk": (
        409, {"success": False, "message": "version 1 must be above 1", "num_paused_requests": 0}
    ),
    "/healthz": (
        503,
        {"status": "unavailable", "policy": "p", "logprobs_mode": "raw", "accepting": True,
         "open_jobs": 0, "scheduler_node_id": "n", "replicas": []},
    ),
    "/v1/weights": (
        422, {"detail": [{"loc": ["body", "path"], "msg": "no", "type": "value_error"}]}
    ),
}  # fmt: skip


def test_every_call_sends_its_request_model_and_returns_the_answer_s_model() -> None:
    sent: list[tuple[str, str, Any, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        sent.append((request.method, request.url.path, body, request.headers.get("authorization")))
        status, content = _MOCK[request.url.path]
        return httpx.Response(status, json=content)

    def calls(c: Any) -> list[Any]:  # the same calls, sync or awaited
        return [
            c.models(),
            c.completions({"model": "m", "prompt": "a", "n": 2}),
            c.generate(GenerateRequest(text="a", rid="r")),
            c.abort_request("r"),
            c.abort_request(abort_all=True),
            c.health(),
        ]

    with SeerClient("http://mock", token="op", transport=httpx.MockTransport(answer)) as c:
        got = calls(c)
        with pytest.raises(SeerHTTPError) as sglang:
            c.update_weights_from_disk("/ckpt", 1)
        with pytest.raises(SeerHTTPError) as bad:
            c.update_weights("/ckpt")

    async def main() -> list[Any]:
        transport = httpx.MockTransport(answer)
        async with AsyncSeerClient("http://mock", token="op", transport=transport) as ac:
            return [await call for call in calls(ac)]

    assert asyncio.run(main()) == got  # the async client reads the same models
    assert [type(x) for x in got] == [
        ModelList, CompletionResponse, GenerateOutput, AbortResponse, AbortResponse, ServiceHealth
    ]  # fmt: skip
    assert got[-1].status == "unavailable"  # a 503 that still reports the replicas
    assert sent[:6] == [
        ("GET", "/v1/models", None, None),
        ("POST", "/v1/completions", {"model": "m", "prompt": "a", "n": 2}, None),
        ("POST", "/generate", {"text": "a", "rid": "r"}, None),
        ("POST", "/abort_request", {"rid": "r"}, None),
        ("POST", "/abort_request", {"abort_all": True}, "Bearer op"),  # an operator change
        ("GET", "/healthz", None, None),
    ]
    assert sent[6] == (
        "POST", "/update_weights_from_disk", {"model_path": "/ckpt", "weight_version": "1"},
        "Bearer op",
    )  # fmt: skip
    assert sglang.value.status_code == 409 and sglang.value.detail["success"] is False
    [field] = bad.value.field_errors
    assert field == FieldError(loc=["body", "path"], msg="no", type="value_error")
    assert sent[8:] == sent[:6]  # the async client sends the same requests


@pytest.fixture(scope="module")
def url(local_service: LocalService) -> Iterator[str]:
    yield local_service.deploy(APP)
    local_service.delete()


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[SeerClient]:
    with SeerClient(url, timeout=60, token=TOKEN) as c:
        yield c


def _until_open_jobs(client: SeerClient, n: int) -> None:
    """Until the service counts ``n`` open jobs (a cancel is applied within a call)."""
    deadline = time.monotonic() + 10
    while client.health().open_jobs != n:
        assert time.monotonic() < deadline, client.health()
        time.sleep(0.05)


def test_submit_stream_and_status(client: SeerClient) -> None:
    job = client.submit(
        ["a", "b", [70, 71, 72]],
        group_size=2,
        max_tokens=16,
        sampling={"temperature": 1.0, "seed": 7},
        prompt_ids=["p", "q", "r"],
        iteration=0,
    )
    assert isinstance(job, JobAccepted) and job.status_url.endswith(job.id)
    groups = list(client.stream_groups(job.id))
    assert all(isinstance(g, GroupResult) for g in groups)
    assert sorted((g.prompt_index, g.prompt_id) for g in groups) == [(0, "p"), (1, "q"), (2, "r")]
    assert next(g for g in groups if g.prompt_index == 2).prompt_token_ids == [70, 71, 72]
    for g in groups:
        assert [r.index for r in g.responses] == [0, 1]
        assert all(1 <= r.length <= 16 and len(r.logprobs or []) == r.length for r in g.responses)
    status = client.status(job.id)
    assert isinstance(status, JobStatus) and status.state is JobState.DONE
    assert status.progress.groups_done == 3 and status.progress.requests_done == 6


def test_rollout_returns_every_group_in_prompt_order(client: SeerClient) -> None:
    result = client.rollout(["a", "b", "c", [70, 71]], 2, 12, logprobs=False)
    assert result.status.state is JobState.DONE
    assert [g.prompt_index for g in result.groups] == [0, 1, 2, 3]
    assert result.groups[3].prompt_token_ids == [70, 71]
    assert all(r.logprobs is None for g in result.groups for r in g.responses)
    assert result.status.progress.output_tokens == sum(
        r.length for g in result.groups for r in g.responses
    )


def test_wait_on_a_cancelled_job_raises_job_failed(client: SeerClient) -> None:
    job = client.submit(**LONG)
    cancelled = client.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED
    with pytest.raises(JobFailedError) as exc:
        client.wait(job.id, timeout=30)
    assert exc.value.status.state is JobState.CANCELLED and exc.value.status.id == job.id
    assert len(exc.value.groups) < 8


def test_a_client_cancels_its_own_jobs_and_others_only_with_a_token(
    client: SeerClient, url: str
) -> None:
    """The client keeps each job's cancel token from its 202: it cancels what it submitted;
    another client's job needs that job's token (``token=``) or the operator token."""
    with SeerClient(url, timeout=60) as other:
        job = other.submit(**LONG)
        assert other.cancel(job.id).state is JobState.CANCELLED
        foreign = client.submit(**LONG)
        with pytest.raises(SeerHTTPError) as exc:
            other.cancel(foreign.id)
        assert exc.value.status_code == 401
        assert other.cancel(foreign.id, token=foreign.cancel_token).state is JobState.CANCELLED


def test_wait_past_its_timeout_leaves_the_job_and_rollout_cancels_it(client: SeerClient) -> None:
    job = client.submit(**LONG)
    t0 = time.monotonic()
    with pytest.raises(WaitTimeoutError) as exc:
        client.wait(job.id, timeout=0.5)
    # no sooner than its timeout; the upper bound only guards against a hang
    assert 0.5 <= time.monotonic() - t0 < 60 and exc.value.job_id == job.id
    assert not client.status(job.id).state.terminal  # a wait does not own the job
    client.cancel(job.id)
    with pytest.raises(WaitTimeoutError) as exc:
        client.rollout(timeout=0.5, **LONG)
    assert client.status(exc.value.job_id).state is JobState.CANCELLED  # rollout owns its job


def test_errors_carry_status_and_the_server_s_detail(client: SeerClient) -> None:
    with pytest.raises(SeerHTTPError) as exc:
        client.status("nope")
    assert exc.value.status_code == 404 and "nope" in str(exc.value.detail)
    with pytest.raises(SeerHTTPError) as exc:
        list(client.stream_groups("nope"))
    assert exc.value.status_code == 404
    with pytest.raises(SeerHTTPError) as exc:  # only the service knows the model's context
        client.submit(["a"], 1, max_tokens=256)
    assert exc.value.status_code == 422 and exc.value.detail[0]["loc"] == ["body", "max_tokens"]
    with pytest.raises(SeerHTTPError) as exc:
        client.submit(["a"], 1, 4, prompt_ids=["p", "q"])
    assert exc.value.status_code == 422 and "2 prompt_ids for 1 prompts" in str(exc.value)
    with pytest.raises(ValidationError, match="group_size"):  # caught before any request
        client.submit(["a"], 0, 4)
    with pytest.raises(ValidationError, match="sampling.temperature"):
        client.submit(["a"], 1, 4, sampling={"temperature": "hot"})
    with pytest.raises(ValidationError, match="unknown"):  # the service's schema forbids it
        client.submit(["a"], 1, 4, extra={"unknown": 1})
    with pytest.raises(ValueError, match="'group_size' is set by submit"):
        client.submit(["a"], 1, 4, extra={"group_size": 2})


def test_429_carries_retry_after_and_the_opt_in_retry_honours_it(
    client: SeerClient, url: str
) -> None:
    running = [client.submit(**LONG).id for _ in range(2)]  # max_open_jobs = 2
    try:
        with pytest.raises(SeerHTTPError) as exc:
            client.submit(["x"], 1, 4)
        assert exc.value.status_code == 429 and exc.value.retry_after_s == 1.0
        assert "max_open_jobs=2" in str(exc.value.detail)
        with SeerClient(url, retry=RetryPolicy(max_retries=1)) as once:
            t0 = time.monotonic()
            with pytest.raises(SeerHTTPError) as exc:  # still full after one retry
                once.submit(["x"], 1, 4)
            assert exc.value.status_code == 429 and time.monotonic() - t0 >= 1.0
        threading.Timer(0.3, client.cancel, [running.pop()]).start()
        with SeerClient(url, retry=RetryPolicy(max_retries=3, max_wait_s=10)) as patient:
            t0 = time.monotonic()
            job = patient.submit(["x"], 1, 4)  # accepted on the retry after Retry-After
            assert 1.0 <= time.monotonic() - t0 < 60  # after Retry-After; < 60: a hang
            running.append(job.id)
    finally:
        for job_id in running:
            client.cancel(job_id)
    _until_open_jobs(client, 0)


def test_health_and_speculation(client: SeerClient, url: str) -> None:
    health = client.health()
    assert health.status == "ok" and health.policy == "divided"
    before = client.get_speculation()
    with SeerClient(url) as anonymous, pytest.raises(ValueError, match="token"):
        anonymous.set_speculation({"enabled": False})
    with pytest.raises(SeerHTTPError) as exc:
        client.set_speculation({"enabled": False}, token="wrong")
    assert exc.value.status_code == 403
    state = client.set_speculation(
        {"enabled": not before.settings["enabled"]}, operator="tests", reason="client test"
    )
    assert state.version == before.version + 1 and state.updated_by == "tests"
    assert state.settings["enabled"] is not before.settings["enabled"]
    assert client.get_speculation().version == state.version


def test_trainer_endpoints_return_their_models(client: SeerClient) -> None:
    [card] = client.models().data
    out = client.completions({"model": "any", "prompt": [[70, 71]], "n": 2, "max_tokens": 8})
    assert isinstance(out, CompletionResponse) and out.model == card.id and len(out.choices) == 2
    one = client.generate({"input_ids": [70], "sampling_params": {"max_new_tokens": 8}})
    assert isinstance(one, GenerateOutput)
    assert one.meta_info.completion_tokens == len(one.output_ids)
    many = client.generate(GenerateRequest(input_ids=[[70], [71]], return_logprob=True))
    assert isinstance(many, list) and len(many) == 2
    assert all(len(o.meta_info.output_token_logprobs or []) == len(o.output_ids) for o in many)
    assert client.abort_request("nope") == AbortResponse(aborted=[])
    with pytest.raises(ValidationError, match="rid"):  # the request model, before sending
        client.generate({"text": "a", "rid": "has space"})


def test_async_client_has_the_same_methods(client: SeerClient, url: str) -> None:
    async def main() -> None:
        async with AsyncSeerClient(url, timeout=60) as ac:
            assert (await ac.health()).status == "ok"
            assert (await ac.get_speculation()).version == client.get_speculation().version
            result = await ac.rollout(["a", [70, 71]], 2, 12, prompt_ids=["p", "q"])
            assert [g.prompt_id for g in result.groups] == ["p", "q"]
            assert result.status.state is JobState.DONE

            job = await ac.submit(["a", "b"], 3, 12)
            streamed = [g async for g in ac.stream_groups(job.id)]
            assert sorted(g.prompt_index for g in streamed) == [0, 1]
            assert (await ac.status(job.id)).progress.requests_done == 6

            long = await ac.submit(**LONG)
            t0 = time.monotonic()
            with pytest.raises(WaitTimeoutError):
                await ac.wait(long.id, timeout=0.5)
            assert 0.5 <= time.monotonic() - t0 < 60  # its own deadline; < 60: a hang
            assert (await ac.cancel(long.id)).state is JobState.CANCELLED
            with pytest.raises(JobFailedError):
                await ac.wait(long.id, timeout=30)

            with pytest.raises(SeerHTTPError) as exc:
                await ac.status("nope")
            assert exc.value.status_code == 404
            with pytest.raises(SeerHTTPError) as exc:
                await ac.submit(["a"], 1, 4, prompt_ids=["p", "q"])
            assert exc.value.status_code == 422

            running = [(await ac.submit(**LONG)).id for _ in range(2)]
            try:
                with pytest.raises(SeerHTTPError) as exc:
                    await ac.submit(["x"], 1, 4)
                assert exc.value.status_code == 429 and exc.value.retry_after_s == 1.0
                ac.retry = RetryPolicy(max_retries=3, max_wait_s=10)

                async def free_one() -> None:
                    await asyncio.sleep(0.3)
                    await ac.cancel(running.pop())

                freeing = asyncio.create_task(free_one())
                running.append((await ac.submit(["x"], 1, 4)).id)  # accepted on a retry
                await freeing
            finally:
                for job_id in running:
                    await ac.cancel(job_id)

    asyncio.run(main())
    _until_open_jobs(client, 0)
