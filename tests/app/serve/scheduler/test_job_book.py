"""JobBook: admission limits (422 per job or a response no replica holds, 409 id held, 429 open
totals with Retry-After),
lookup (404), expiry (ended jobs after job_ttl_s, open ones past request_timeout_s returned)."""

from __future__ import annotations

import time

import pytest

from app.api import JobState, RolloutRequest
from app.config import ServiceLimits
from app.rollout import IdempotentCall, JobPlan, expand
from app.serve.scheduler.job_book import JobBook
from app.serve.scheduler.jobs import Job, JobError


def _plan(job_id: str, prompts: int = 1, g: int = 2, max_tokens: int = 10) -> JobPlan:
    req = RolloutRequest(prompts=[[5, 6]] * prompts, group_size=g, max_tokens=max_tokens)
    return expand(job_id, req, [[5, 6]] * prompts)


ROOM = 1000  # KV tokens of the largest replica: every plan here fits


def _book(**limits: int) -> JobBook:
    return JobBook(ServiceLimits(**limits), job_ttl_s=60, request_timeout_s=100)


def _add(book: JobBook, plan: JobPlan, at: float = 0.0) -> Job:
    book.check(plan, ROOM)
    job = Job(plan=plan, policy="context", created_at=at)
    book.add(job)
    return job


def test_a_response_no_replica_can_hold_is_422_under_every_limit() -> None:
    book = _book()
    with pytest.raises(JobError) as e:
        book.check(_plan("a", max_tokens=10), kv_room=11)  # prompt 2 + 10 tokens
    assert e.value.status == 422 and "needs up to 12 KV tokens" in e.value.message
    assert "largest replica holds 11" in e.value.message
    book.check(_plan("a", max_tokens=10), kv_room=12)


def test_per_job_limits_are_422_and_a_held_id_409() -> None:
    book = _book(max_job_requests=4, max_job_tokens=40)
    with pytest.raises(JobError) as e:
        book.check(_plan("a", prompts=3, g=2), ROOM)
    assert e.value.status == 422 and "max_job_requests=4" in e.value.message
    with pytest.raises(JobError) as e:
        book.check(_plan("a", prompts=1, g=4, max_tokens=11), ROOM)
    assert e.value.status == 422 and "max_job_tokens=40" in e.value.message
    _add(book, _plan("a"))
    with pytest.raises(JobError) as e:
        book.check(_plan("a"), ROOM)
    assert e.value.status == 409


@pytest.mark.parametrize(
    ("limits", "name"),
    [
        ({"max_open_jobs": 2}, "max_open_jobs=2"),
        ({"max_open_requests": 5}, "max_open_requests=5"),
        ({"max_open_tokens": 50}, "max_open_tokens=50"),
    ],
)
def test_open_totals_are_429_with_retry_after_until_a_job_closes(
    limits: dict[str, int], name: str
) -> None:
    book = _book(retry_after_s=7, **limits)
    first = _add(book, _plan("a"))  # 2 requests, 20 tokens
    _add(book, _plan("b"))  # 4 requests, 40 tokens open
    with pytest.raises(JobError) as e:
        book.check(_plan("c"), ROOM)
    assert e.value.status == 429 and name in e.value.message and e.value.retry_after_s == 7
    assert book.open_count == 2
    first.finish(JobState.DONE, None)
    book.closed(first)
    book.check(_plan("c"), ROOM)  # room again
    assert [j.id for j in book.open_jobs()] == ["b"] and book.get("a") is first


def test_expiry_drops_ended_jobs_after_the_ttl_and_returns_timed_out_open_ones() -> None:
    book = _book()
    t0 = time.time()
    done = _add(book, _plan("done"), at=t0)
    slow = _add(book, _plan("slow"), at=t0 - 150)
    _add(book, _plan("young"), at=t0)
    done.finish(JobState.DONE, None)  # finished_at: now
    book.closed(done)
    assert done.finished_at is not None
    now = done.finished_at + 61  # past job_ttl_s=60; slow is 211 s old, young 61 s
    assert book.expire(now) == [slow]
    with pytest.raises(JobError) as e:
        book.get("done")
    assert e.value.status == 404 and "expired after job_ttl_s" in e.value.message
    assert book.expire(now + 0.5) == []  # the next scan is not due yet
    assert [j.id for j in book.expire(now + 40)] == ["slow", "young"]  # young: 101 s


def _keyed(job_id: str, key: str, endpoint: str = "/v1/rollouts", body: str = "b") -> JobPlan:
    plan = _plan(job_id)
    plan.idempotent = IdempotentCall(endpoint, key, body, cancel_token="tok")
    return plan


def test_an_idempotency_key_names_one_job_per_endpoint_while_it_is_held() -> None:
    book = _book()
    first = _add(book, _keyed("a", "k1"))
    assert book.repeat_of(_plan("x")) is None  # no key: a new job
    assert book.repeat_of(_keyed("x", "k1")) is first  # same key, same body
    assert book.repeat_of(_keyed("x", "k1", endpoint="/generate")) is None  # keys per endpoint
    assert book.repeat_of(_keyed("x", "k2")) is None
    with pytest.raises(JobError) as e:
        book.repeat_of(_keyed("x", "k1", body="another"))
    assert e.value.status == 422 and e.value.loc == ("header", "Idempotency-Key")
    assert "'k1'" in e.value.message and "job a" in e.value.message
    first.finish(JobState.DONE, None)
    book.closed(first)
    assert book.repeat_of(_keyed("x", "k1")) is first  # ended, still held: the same answer
    assert first.finished_at is not None
    book.expire(first.finished_at + 61)  # past job_ttl_s: the key is free again
    assert book.repeat_of(_keyed("x", "k1")) is None
