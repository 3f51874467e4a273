"""``SeerScheduler``: the one scheduler deployment of the service (one replica).

A thin Serve wrapper around ``app.serve.scheduler.dispatcher.Dispatcher``: engine replicas are
reached through their deployment handles (one deployment per replica, so the scheduler's choice of
replica always wins); the policy is the deployment's ``user_config`` (``reconfigure``). When
``store.enabled``, the history store (``app.store.service``) is the dispatcher's event sink and
length prior; its writer runs in its own thread (connects and migrates there, never here).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel
from ray import serve

from app.api import (
    GroupResult,
    JobState,
    JobStatus,
    ReplicaState,
    ServiceHealth,
    SpeculationState,
    WeightsState,
    WeightsUpdate,
)
from app.config import DEFAULT_POLICY, SchedulerUserConfig, ServiceConfig
from app.engines.base import EngineDead
from app.rollout import JobPlan
from app.serve import logs
from app.serve.detached import Background
from app.serve.options import SINGLETON
from app.serve.replica.draft_server import DraftServerLink
from app.serve.scheduler.dispatcher import Dispatcher
from app.serve.scheduler.jobs import JobError, Refusal
from app.serve.scheduler.replica_pool import ReplicaUnavailable
from app.store.config import check_shared
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad
from core.events import SchedulerStarted

log = logging.getLogger("seer.scheduler")
P = ParamSpec("P")
T = TypeVar("T")


def refusing(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T | Refusal]]:
    """A scheduler method whose ``JobError`` comes back as a ``Refusal`` (logged at INFO)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | Refusal:
        try:
            return await method(*args, **kwargs)
        except JobError as exc:
            log.info("refused %s: %d %s", method.__name__, exc.status, exc.message)
            return Refusal.of(exc)

    return wrapper


class ServeLinks:
    """``EngineLinks`` over Serve deployment handles; an unreachable replica's error becomes
    ``ReplicaUnavailable``. A call whose waiter is cancelled (a bounded probe timing out, a chunk
    reclaimed from an unreachable replica) cancels its Serve request too: a request queued in
    Serve's router for a replica that died would otherwise stay there until one comes back. An
    abort is the exception: its waiter giving up (``replica_call_timeout_s`` on a loaded
    machine) leaves it on its way, since a withdrawn abort lets its chunk run to its end."""

    def __init__(self, handles: Sequence[Any], replica_ids: Sequence[str]) -> None:
        self.handles = list(handles)
        self.replica_ids = list(replica_ids)
        self._detached = Background()  # aborts outliving their waiter

    @staticmethod
    def _unreachable(exc: BaseException) -> bool:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        dead = ActorDiedError | ActorUnavailableError | RayActorError | EngineDead
        return isinstance(exc, dead)

    async def _call(self, replica: int, method: str, *args: Any) -> Any:
        response = getattr(self.handles[replica], method).remote(*args)
        try:
            return await response
        except asyncio.CancelledError:
            response.cancel()
            raise

    async def run_chunk(self, replica: int, chunk: ChunkRequest) -> ChunkResult:
        try:
            result: ChunkResult = await self._call(replica, "run_chunk", chunk)
        except Exception as exc:
            if self._unreachable(exc):
                raise ReplicaUnavailable(f"{self.replica_ids[replica]}: {exc!r}") from exc
            raise
        return result

    async def abort(self, replica: int, request_id: str, generated: int) -> bool:
        task = self._detached.keep(self.handles[replica].abort.remote(request_id, generated))
        return bool(await asyncio.shield(task))

    async def load(self, replica: int) -> EngineLoad:
        load: EngineLoad = await self._call(replica, "load")
        return load

    async def abort_all(self, replica: int) -> int:
        return int(await self._call(replica, "abort_all"))

    async def configure_speculation(self, replica: int, settings: DraftSettings) -> DraftSettings:
        applied: DraftSettings = await self._call(replica, "configure_speculation", settings)
        return applied

    async def release_groups(self, replica: int, group_ids: list[str]) -> int:
        return int(await self._call(replica, "release_groups", group_ids))

    async def update_weights(
        self, replica: int, path: str, version: int, digest: str | None
    ) -> str:
        return str(await self._call(replica, "update_weights", path, version, digest))


class JobOutcome(BaseModel):
    status: JobStatus
    groups: list[GroupResult]  # in prompt order when DONE


class Submitted(BaseModel):
    """A submission's answer: its job (a held one, for a repeat of an idempotent call)."""

    status: JobStatus
    cancel_token: str | None = None  # an idempotent 202's token, given again to its repeat


def _alive_nodes() -> int:
    """Alive nodes of the Ray cluster (a blocking GCS call)."""
    import ray

    return sum(1 for node in ray.nodes() if node["Alive"])


@serve.deployment(**SINGLETON)
class SeerScheduler:
    # Every method is ``async def``: Serve runs sync methods in a worker thread, and the
    # dispatcher (asyncio events, tasks) must only be touched from the replica's event loop.

    async def __init__(  # type: ignore[misc]
        self,
        config: ServiceConfig,
        engines: list[Any],
        replica_ids: list[str],
        draft_server: Any = None,
    ) -> None:
        logs.configure()
        import ray

        from app.store.service import ServiceStore

        self.config = config
        self.node_id = ray.get_runtime_context().get_node_id()
        links = ServeLinks(engines, replica_ids)
        if config.store.enabled and await asyncio.to_thread(_alive_nodes) > 1:
            check_shared(config.store)  # a SQLite default on one node's disk is not shared
        self.store = await ServiceStore.open(config.store)
        if self.store is not None:  # it holds no job: those a gone scheduler left are over
            self.store.writer.emit(SchedulerStarted(time.time()))
        self.drafts = (
            None
            if draft_server is None
            else DraftServerLink(draft_server, config.replica_call_timeout_s)
        )
        # The policy arrives through reconfigure (user_config) before any request is served.
        self.dispatcher = Dispatcher(
            links,
            config,
            config.resolve_policy(DEFAULT_POLICY),
            sink=self.store.writer if self.store else None,
            prior=self.store.prior if self.store else None,
            drafts=self.drafts,
        )
        self.dispatcher.start()

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        cfg = SchedulerUserConfig.model_validate(user_config)
        self.dispatcher.set_policy(self.config.resolve_policy(cfg.policy))
        spec = cfg.speculation
        if spec is not None and spec != self.dispatcher.speculation.settings:
            d = self.dispatcher
            await d.speculation.set(spec, "user_config", "deployment config", d.pool.live())

    async def speculation(self) -> SpeculationState:
        return self.dispatcher.speculation.state()

    @refusing
    async def update_speculation(
        self, patch: dict[str, Any], who: str, reason: str | None
    ) -> SpeculationState:
        d = self.dispatcher
        return await d.speculation.update(patch, who, reason, d.pool.live())

    @refusing
    async def update_weights(
        self, path: str, version: int | None, abort_running: bool, digest: str | None = None
    ) -> WeightsUpdate:
        return await self.dispatcher.updater.update(path, version, abort_running, digest)

    async def weights(self) -> WeightsState:
        return self.dispatcher.updater.state

    async def policy(self) -> str:
        return self.dispatcher.policies.next.name

    @refusing
    async def submit(self, plan: JobPlan) -> Submitted:
        if self.store is not None and self.dispatcher.wants_prior:
            keys = [g.spec.prompt_key or g.spec.group_id for g in plan.groups]
            found = await self.store.prefetch(keys)
            self.dispatcher.metrics.prior_prompts.labels("looked_up").inc(len(keys))
            self.dispatcher.metrics.prior_prompts.labels("found").inc(found)
        job = self.dispatcher.submit(plan)
        call = job.plan.idempotent
        token = call.cancel_token if call is not None else None
        return Submitted(status=self.dispatcher.status(job.id), cancel_token=token)

    @refusing
    async def status(self, job_id: str) -> JobStatus:
        return self.dispatcher.status(job_id)

    @refusing
    async def cancel(self, job_id: str, digest: str | None = None) -> JobStatus:
        return self.dispatcher.cancel(job_id, digest=digest)

    @refusing
    async def abort_rid(self, rid: str) -> JobStatus:
        return self.dispatcher.abort_rid(rid)

    async def stream_groups(self, job_id: str) -> AsyncIterator[GroupResult]:
        async for group in self.dispatcher.stream(job_id):
            yield group

    @refusing
    async def wait(self, job_id: str, partial: bool = False) -> JobOutcome:
        """The job's groups in prompt order once it is terminal: all of them when DONE; none
        otherwise, or with ``partial`` those of a CANCELLED job as far as they got, the tokens
        of its aborted chunks included (unfinished responses with finish reason ``abort``)."""
        job = await self.dispatcher.wait(job_id)
        groups: list[GroupResult] = []
        if job.state is JobState.DONE:
            groups = job.groups_so_far()
        elif partial and job.state is JobState.CANCELLED:
            await self.dispatcher.settle(job)  # with the tokens of its aborted chunks
            groups = job.groups_so_far()
        return JobOutcome(status=self.dispatcher.status(job_id), groups=groups)

    async def cancel_all(self, error: str) -> list[str]:
        """Cancel every open job; returns their ids."""
        return self.dispatcher.cancel_all(error)

    async def health(self) -> ServiceHealth:
        d = self.dispatcher
        reps = d.probes.health()
        healthy = sum(r.state is ReplicaState.HEALTHY for r in reps)
        status = "ok" if healthy == len(reps) else "degraded" if healthy else "unavailable"
        return ServiceHealth(
            status=status,
            policy=d.policies.next.name,
            logprobs_mode=self.config.engine.logprobs_mode,
            accepting=d.accepting,
            open_jobs=d.book.open_count,
            scheduler_node_id=self.node_id,
            replicas=reps,
            store=self.store.stats() if self.store else None,
        )

    async def metrics(self) -> bytes:
        if self.store is not None:
            self.dispatcher.metrics.set_store(self.store.stats())
        if self.drafts is not None:
            self.dispatcher.metrics.set_draft_server(await self.drafts.stats())
        return self.dispatcher.render_metrics()

    async def drain(self, grace_s: float | None = None) -> int:
        """Stop accepting, let running jobs finish within the grace period, cancel the rest."""
        return await self.dispatcher.drain(
            self.config.shutdown_grace_s if grace_s is None else grace_s
        )

    async def __del__(self) -> None:
        await self.dispatcher.close()
        if self.store is not None:
            await self.store.close(self.config.shutdown_grace_s)
