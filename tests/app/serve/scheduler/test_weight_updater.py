"""WeightUpdater on its own (fake engines, a recording stand-in for the dispatch loop): one
update at a time, versions only grow, dispatch always resumes, verification where loaded, and
a replica on other weights is STALE until it loads the current ones."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from app.api import ReplicaState
from app.serve.detached import detached
from app.serve.scheduler.jobs import JobError
from app.serve.scheduler.metrics import ServiceMetrics
from app.serve.scheduler.replica_pool import ReplicaPool
from app.serve.scheduler.speculation import SpeculationControl
from app.serve.scheduler.weight_updater import WeightUpdater
from app.weights_digest import checkpoint_digest
from core.drafting.step_drafter import DraftSettings
from tests.app.serve.fakes import FakeDrafts, FakeLinks, RecordingListener, service_config


class Control:
    """The dispatch loop as an update sees it; ``running`` chunks never drain."""

    def __init__(self, running: int = 0) -> None:
        self.running = running
        self.calls: list[str] = []
        self.probed: list[int] = []
        self.tasks: list[asyncio.Future[None]] = []

    async def quiesce(self, abort_running: bool, timeout_s: float) -> tuple[int, int]:
        self.calls.append(f"quiesce abort={abort_running}")
        return (self.running if abort_running else 0), (0 if abort_running else self.running)

    def restart_partial(self) -> int:
        self.calls.append("restart")
        return 2

    def weights_loaded(self, version: int) -> None:
        self.calls.append(f"loaded v{version}")

    def resume(self) -> None:
        self.calls.append("resume")

    async def probe(self, i: int) -> None:
        self.probed.append(i)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = detached(coro)
        self.tasks.append(task)
        return task


async def _updater(
    n: int = 2, running: int = 0, misreads: set[int] | None = None
) -> tuple[WeightUpdater, Control, FakeLinks, FakeDrafts]:
    links = FakeLinks(n=n)
    links.misreads = misreads or set()
    await links.start()
    config = service_config()
    pool = ReplicaPool(links, config, ServiceMetrics(), RecordingListener())
    for i in range(n):
        pool.set_state(i, ReplicaState.HEALTHY)
    drafts = FakeDrafts()
    spec = SpeculationControl(links, DraftSettings(), 1.0, shared=drafts)
    control = Control(running)
    return WeightUpdater(links, pool, spec, config, control), control, links, drafts


def _ckpt(tmp_path: Path, name: str = "step-1") -> Path:
    ckpt = tmp_path / name
    ckpt.mkdir()
    return ckpt


def test_an_update_drains_loads_everywhere_resumes_and_only_grows(tmp_path: Path) -> None:
    async def body() -> None:
        up, control, links, drafts = await _updater()
        ckpt = _ckpt(tmp_path)
        done = await up.update(str(ckpt), None)
        assert (done.version, done.previous_version, done.restarted_requests) == (1, 0, 2)
        assert sorted(done.replicas) == ["replica-0", "replica-1"] and not done.failed_replicas
        assert done.digest == checkpoint_digest(str(ckpt))
        assert control.calls == ["quiesce abort=False", "restart", "loaded v1", "resume"]
        assert up.state.version == 1 and up.state.path == str(ckpt) and not up.state.updating
        assert [e.policy_version for e in links.engines] == [1, 1] and drafts.resets == 1
        for version in (1, 0):
            with pytest.raises(JobError, match="must be above the current") as e:
                await up.update(str(ckpt), version)
            assert e.value.status == 409
        assert up.version == 1

    asyncio.run(body())


def test_chunks_that_do_not_drain_are_504_weights_unchanged_dispatch_resumed(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        up, control, links, _ = await _updater(running=3)
        with pytest.raises(JobError, match="3 chunks still running") as e:
            await up.update(str(_ckpt(tmp_path)), None)
        assert e.value.status == 504
        assert control.calls == ["quiesce abort=False", "resume"]
        assert up.version == 0 and not up.state.updating and not links.weight_loads
        update = await up.update(str(tmp_path / "step-1"), None, abort_running=True)
        assert update.aborted_chunks == 3 and up.version == 1

    asyncio.run(body())


def test_none_loading_is_503_a_misreading_replica_failed_a_wrong_digest_422(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        up, control, _, _ = await _updater()
        with pytest.raises(JobError, match="no replica loaded") as e:
            await up.update(str(tmp_path / "missing"), None)
        assert e.value.status == 503 and up.version == 0 and control.calls[-1] == "resume"
        assert not up.state.updating
        up, control, _, _ = await _updater(n=3, misreads={2})
        done = await up.update(str(_ckpt(tmp_path)), None)
        assert done.replicas == ["replica-0", "replica-1"]
        assert "not " + done.digest in done.failed_replicas["replica-2"]
        assert up.pool[2].state is ReplicaState.FAILED  # the majority's digest is the agreed one
        bad = "f" * 64
        with pytest.raises(JobError) as e:  # the trainer's digest: nothing else loads
            await up.update(str(_ckpt(tmp_path, "step-2")), None, digest=bad)
        # what no replica read is the caller's error: 422 naming what each live one read
        assert e.value.status == 422 and up.version == 1, e.value
        assert "'replica-0': '" in e.value.message and "'replica-2'" not in e.value.message

    asyncio.run(body())


def test_a_replica_on_other_weights_is_stale_until_it_loads_the_current_ones(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        up, control, links, _ = await _updater()
        assert not up.out_of_date(0, 0)  # the version the service runs
        await up.update(str(_ckpt(tmp_path)), None)
        links.engines[1].policy_version = 0  # it restarted on the model it started with
        assert up.out_of_date(1, 0)
        assert up.pool[1].state is ReplicaState.STALE
        assert up.pool[1].error == "runs weights v0, not v1"
        assert up.out_of_date(1, 0)  # asked again while loading: one load, not two
        assert len(control.tasks) == 1
        await asyncio.wait_for(control.tasks[0], 10)
        assert links.engines[1].policy_version == 1 and control.probed == [1]
        assert links.weight_loads[-1] == (1, str(tmp_path / "step-1"), up.state.digest)

    asyncio.run(body())
