"""A caller that goes away cancels its rollout (``Ingress._run``), in whichever phase it left:
while the job is being submitted (on a loaded machine tokenizing and submitting can take
seconds) or while it runs. A submission that failed cancels nothing: the id may be another
caller's job. The scheduler handle is an in-process stand-in; the Serve path is covered by
``test_serve_app.py::test_client_disconnect_aborts_running_chunks``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import ray._raylet

from app.config import ServiceConfig
from app.serve.detached import Background
from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.scheduler.jobs import JobError
from tests.app.serve.bare_ingress import bare_ingress


class Method:
    def __init__(self, run: Any) -> None:
        self.run = run
        self.parents: list[Any] = []

    def remote(self, *args: Any) -> Any:
        # Ray takes a call's parent (what a recursive cancel follows) from this context var
        # when the call is made
        self.parents.append(ray._raylet.async_task_id.get())
        return self.run(*args)


class Scheduler:
    """``wait`` never answers (the job runs on); ``cancel`` is recorded."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.cancel_seen = asyncio.Event()

        async def wait(job_id: str, partial: bool) -> Any:
            await asyncio.Event().wait()

        async def cancel(job_id: str, digest: str | None) -> None:
            self.cancelled.append(job_id)
            self.cancel_seen.set()

        self.wait = Method(wait)
        self.cancel = Method(cancel)


def _ingress(submit_fails: bool = False) -> tuple[Any, Scheduler, asyncio.Event, asyncio.Event]:
    ingress = bare_ingress()
    ingress.config = ServiceConfig().model_copy(update={"replica_call_timeout_s": 2.0})
    scheduler = Scheduler()
    ingress.scheduler = SchedulerHandle(scheduler)
    ingress._background = Background()
    ingress.submit_parents = []
    started, release = asyncio.Event(), asyncio.Event()

    async def submit(
        req: Any, job_id: str, rid: str | None = None, idempotent: Any = None
    ) -> Any:  # the Submitted answer as far as _run reads it
        ingress.submit_parents.append(ray._raylet.async_task_id.get())
        started.set()
        await release.wait()
        if submit_fails:
            raise JobError(409, f"job {job_id} exists")
        return SimpleNamespace(status=SimpleNamespace(id=job_id))

    ingress._submit = submit
    return ingress, scheduler, started, release


def test_a_caller_gone_while_its_job_is_submitted_cancels_it_once_it_exists() -> None:
    async def main() -> None:
        ingress, scheduler, started, release = _ingress()
        call = asyncio.ensure_future(ingress._run(None, "job-1"))
        await asyncio.wait_for(started.wait(), 5)
        call.cancel()  # the caller went away before the scheduler had the job
        await asyncio.sleep(0.05)
        assert scheduler.cancelled == []  # nothing to cancel yet
        release.set()  # now the job exists: the cancel follows
        await asyncio.wait_for(scheduler.cancel_seen.wait(), 5)
        assert scheduler.cancelled == ["job-1"]

    asyncio.run(main())


def test_a_caller_gone_while_its_job_runs_cancels_it() -> None:
    async def main() -> None:
        ingress, scheduler, _, release = _ingress()
        release.set()
        call = asyncio.ensure_future(ingress._run(None, "job-2"))
        await asyncio.sleep(0.05)  # submitted, waiting
        call.cancel()
        await asyncio.wait_for(scheduler.cancel_seen.wait(), 5)
        assert scheduler.cancelled == ["job-2"]

    asyncio.run(main())


def test_a_failed_submission_cancels_nothing() -> None:
    async def main() -> None:
        ingress, scheduler, started, release = _ingress(submit_fails=True)
        call = asyncio.ensure_future(ingress._run(None, "theirs"))
        await asyncio.wait_for(started.wait(), 5)
        call.cancel()
        release.set()
        await asyncio.sleep(0.1)
        assert not ingress._background and scheduler.cancelled == []

    asyncio.run(main())


def test_the_submission_and_the_cancel_are_no_child_of_the_cancelled_request() -> None:
    """Ray cancels a cancelled request's calls recursively, following the context variable that
    names the calling task. In CI the cancel of a disconnected caller's job was made from the
    request's context and was cancelled with it ("Cancelling request that has already been
    assigned", then no job cancelled in the scheduler): the job ran to its end. Both the
    submission and the cancel now run in no request's context."""

    async def main() -> None:
        ingress, scheduler, started, release = _ingress()
        ray._raylet.async_task_id.set("the HTTP request's task")  # as Ray sets it for a request
        call = asyncio.ensure_future(ingress._run(None, "job-3"))  # copies that context
        await asyncio.wait_for(started.wait(), 5)
        call.cancel()
        release.set()
        await asyncio.wait_for(scheduler.cancel_seen.wait(), 5)
        assert ingress.submit_parents == [None]
        assert scheduler.cancel.parents == [None]

    asyncio.run(main())
