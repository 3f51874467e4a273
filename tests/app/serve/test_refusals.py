"""Expected refusals (404 no job, 409, 429 limits, ...) travel from the scheduler deployment to
the ingress as values: Serve logs every exception a deployment raises at ERROR with its full
traceback, so a 429 under load flooded the logs. One INFO line each now; the HTTP answer is
unchanged (status, message, Retry-After). Over real HTTP: test_service.py's
``test_a_refusal_is_one_info_line_not_an_error_traceback``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from fastapi import HTTPException

from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.scheduler.deployment import refusing
from app.serve.scheduler.jobs import JobError, Refusal
from tests.app.serve.bare_ingress import bare_ingress


def test_a_job_error_comes_back_as_a_refusal_logged_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @refusing
    async def submit(n: int) -> int:
        if n > 3:
            raise JobError(429, "the service is at its limit", retry_after_s=5)
        return n

    with caplog.at_level(logging.INFO, logger="seer.scheduler"):
        assert asyncio.run(submit(2)) == 2
        refused = asyncio.run(submit(9))
    assert refused == Refusal(429, "the service is at its limit", 5)
    (rec,) = [r for r in caplog.records if r.name == "seer.scheduler"]
    assert rec.levelno == logging.INFO and rec.exc_info is None
    assert rec.getMessage() == "refused submit: 429 the service is at its limit"


def test_the_ingress_answers_a_refusal_as_its_http_error() -> None:
    class Method:
        def remote(self, *args: Any) -> Any:
            async def answer() -> Refusal:
                return Refusal(429, "too many", 3)

            return answer()

    class Scheduler:
        status = Method()

    ingress = bare_ingress()
    ingress.scheduler = SchedulerHandle(Scheduler())
    with pytest.raises(HTTPException) as exc:
        asyncio.run(ingress._ask(ingress.scheduler.status("j")))
    assert exc.value.status_code == 429 and exc.value.detail == "too many"
    assert exc.value.headers == {"Retry-After": "3"}
