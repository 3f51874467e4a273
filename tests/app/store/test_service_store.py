"""The store inside the service: the dispatcher (fake engines) records two iterations of the
same prompts through a real writer, and the second runs ``context-prior`` seeded from the
first; ``ServiceStore`` never lets a database problem reach a rollout."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api import JobState, RolloutRequest
from app.config import SERVICE_POLICIES, ServiceConfig
from app.rollout import JobPlan, expand
from app.serve.scheduler.dispatcher import Dispatcher
from app.store.config import StoreConfig
from app.store.reader import StoreReader
from app.store.service import ServiceStore
from tests.app.serve.fakes import FakeLinks

WAIT = 60.0


def _plan(job: str, iteration: int) -> JobPlan:
    req = RolloutRequest.model_validate(
        {
            "prompts": ["x"] * 3,
            "prompt_ids": ["a", "b", "c"],
            "group_size": 4,
            "max_tokens": 100,
            "iteration": iteration,
        }
    )
    return expand(job, req, [[40 + i, 41, 42, 43] for i in range(3)])


class SpyPrior:
    """Records what the scheduler asked the store's prior and what it answered."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.answers: dict[str, list[int] | None] = {}

    def lengths(self, prompt_key: str) -> list[int] | None:
        got: list[int] | None = self.inner.lengths(prompt_key)
        self.answers[prompt_key] = got
        return got


def test_two_iterations_recorded_and_the_second_uses_the_prior(sqlite_url: str) -> None:
    assert "context-prior" in SERVICE_POLICIES
    config = ServiceConfig.model_validate(
        {
            "chunk_tokens": 16,
            "health_period_s": 0.05,
            "engine": {"backend": "fake", "max_model_len": 512, "max_num_seqs": 64},
            "store": {"enabled": True, "database_url": sqlite_url},
        }
    )

    async def main() -> tuple[dict[str, int], Any]:
        links = FakeLinks()  # the whole EngineLinks protocol, engines without delay
        await links.start()
        store = await ServiceStore.open(config.store)
        assert store is not None
        spy = SpyPrior(store.prior)
        d = Dispatcher(
            links, config, config.resolve_policy("context-prior"), sink=store.writer, prior=spy
        )
        d.start()
        await d.probes.probe_all()
        try:
            lengths: dict[str, int] = {}
            for it in range(2):
                plan = _plan(f"job{it}", it)
                if d.wants_prior:
                    found = await store.prefetch([g.spec.prompt_key or "" for g in plan.groups])
                    assert found == (3 if it else 0)
                job = d.submit(plan)
                done = await asyncio.wait_for(d.wait(job.id), WAIT)
                assert done.state is JobState.DONE
                for run_id, run in plan.runs.items():
                    lengths[run_id] = len(run.tokens)
                await asyncio.to_thread(store.writer.flush, WAIT)
        finally:
            await d.close()
            stats = await store.close()
        assert (stats.pending, stats.dropped, stats.rejected) == (0, 0, 0)
        return lengths, spy

    lengths, spy = asyncio.run(main())
    # The second iteration's scheduler was seeded with the first iteration's lengths.
    for key in ("a", "b", "c"):
        i = "abc".index(key)
        first = sorted(lengths[f"job0-g{i}-r{j}"] for j in range(4))
        assert sorted(spy.answers[key] or []) == first
    r = StoreReader(sqlite_url)
    try:
        counts = r.counts()
        assert counts["jobs"] == 2 and counts["groups"] == 6 and counts["requests"] == 24
        assert counts["chunks"] >= 24 and counts["group_estimates"] == 24
        assert counts["replica_load_samples"] >= 2
        from sqlalchemy import select

        from app.store.tables import GroupRow, JobRow

        with r.engine.connect() as conn:
            jobs = conn.execute(select(JobRow.iteration, JobRow.state, JobRow.policy)).all()
            assert sorted(jobs) == [(0, "done", "context-prior"), (1, "done", "context-prior")]
            finals = conn.execute(select(GroupRow.final_lengths)).scalars().all()
            assert all(f is not None and len(f) == 4 for f in finals)
        both = sorted(lengths[f"job{it}-g0-r{j}"] for it in range(2) for j in range(4))
        assert sorted(r.recent_lengths("a", 100)) == both
    finally:
        r.close()


def test_store_disabled_opens_nothing() -> None:
    assert asyncio.run(ServiceStore.open(StoreConfig())) is None


def test_unreachable_database_means_no_prior_not_an_error() -> None:
    cfg = StoreConfig(
        enabled=True,
        database_url="postgresql://nobody@127.0.0.1:1/none",
        prior_timeout_s=30,
        writer={"connect_timeout_s": 1, "retry_initial_s": 0.01, "retry_max_s": 0.05},
    )

    async def main() -> int:
        store = await ServiceStore.open(cfg)
        assert store is not None
        try:
            store.writer.emit(_event())
            return await store.prefetch(["a", "b"])
        finally:
            stats = await store.close(0.1)
            assert (stats.accepted, stats.written, stats.pending) == (1, 0, 1)

    assert asyncio.run(main()) == 0


def _event() -> Any:
    from core.events import ReplicaLoadSample

    return ReplicaLoadSample("replica-0", 1.0, 0, 0, 0, 0.0, 0)
