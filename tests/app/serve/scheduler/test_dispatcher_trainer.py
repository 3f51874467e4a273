"""Trainer-facing paths of the dispatcher (fake engines): requests of one group arriving in
separate jobs (``group_key``), and policy weight updates between chunks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.api import JobState, ReplicaState
from app.serve.scheduler.dispatcher import Dispatcher
from app.serve.scheduler.jobs import JobError
from app.serve.scheduler.replica_pool import ReplicaUnavailable
from app.weights_digest import checkpoint_digest
from core.engine import ChunkRequest, FinishReason
from core.events import CollectingSink, JobStarted, RequestFinished
from tests.app.serve.fakes import (
    FakeDrafts,
    FakeLinks,
    checkpoint,
    job_plan,
    run_dispatcher,
    service_config,
)


def test_jobs_with_one_group_key_run_as_one_scheduler_group() -> None:
    links = FakeLinks(step_s=0.002)

    async def body(d: Dispatcher) -> None:
        plans = [job_plan(f"j{k}", prompts=1, g=1, group_key="q7") for k in range(3)]
        for p in plans:
            d.submit(p)
        await asyncio.sleep(0.005)  # admitted, first chunks running
        s = d.scheduler
        assert len(s.groups.stats[s.groups.index["key:q7"]].members) == 3  # one group of three
        jobs = [await d.wait(p.job_id) for p in plans]
        assert all(j.state is JobState.DONE for j in jobs), [j.error for j in jobs]
        assert {j.results[0].group_id for j in jobs} == {"key:q7"}
        assert not d._groups and not d._request_job  # released once all three ended

    asyncio.run(run_dispatcher(links, service_config(), "seer", body))


def test_cancelling_one_job_of_a_shared_group_leaves_the_others() -> None:
    links = FakeLinks(step_s=0.01)

    async def body(d: Dispatcher) -> None:
        a = d.submit(job_plan("a", prompts=1, g=2, group_key="k", max_tokens=200))
        b = d.submit(job_plan("b", prompts=1, g=2, group_key="k", max_tokens=200))
        while not d._in_flight:
            await asyncio.sleep(0.005)
        d.cancel(a.id)
        done = await d.wait(b.id)
        assert done.state is JobState.DONE, done.error
        assert a.state is JobState.CANCELLED
        assert [r.index for r in done.results[0].responses] == [0, 1]
        assert not d._groups

    asyncio.run(run_dispatcher(links, service_config(), "context", body))


def test_weight_update_pauses_restarts_cut_requests_and_tags_versions(tmp_path: Path) -> None:
    links = FakeLinks(step_s=0.005)
    sink = CollectingSink()
    drafts = FakeDrafts()
    ckpt = tmp_path / "step-1"
    ckpt.mkdir()

    async def body(d: Dispatcher) -> None:
        job = d.submit(job_plan("w", prompts=2, g=4, max_tokens=300, sampling={"seed": 3}))
        while sum(len(r.tokens) for r in job.plan.runs.values()) < 40:
            await asyncio.sleep(0.005)
        with pytest.raises(JobError, match="must be above") as bad:
            await d.updater.update(str(ckpt), 0)
        assert bad.value.status == 409
        update = await d.updater.update(str(ckpt), None, abort_running=True)
        assert update.version == 1 and update.previous_version == 0
        assert update.restarted_requests > 0 and update.aborted_chunks > 0
        assert sorted(update.replicas) == ["replica-0", "replica-1"]
        assert d.updater.state.version == 1 and d.updater.state.path == str(ckpt)
        assert [e.policy_version for e in links.engines] == [1, 1]
        assert drafts.resets == 1  # the old policy's group texts are dropped there too
        done = await d.wait("w")
        assert done.state is JobState.DONE, done.error
        versions = {r.policy_version for g in done.results for r in g.responses}
        restarted = [r for r in job.plan.runs.values() if r.restarts]
        assert restarted and all(r.policy_version == 1 for r in restarted)
        assert versions <= {0, 1} and 1 in versions
        # no response mixes versions: a restarted one equals a fresh v1 response of its seed
        later = d.submit(job_plan("w2", prompts=2, g=4, max_tokens=300, sampling={"seed": 3}))
        fresh = await d.wait(later.id)
        by_index = {(g.prompt_index, r.index): r for g in fresh.results for r in g.responses}
        for g in done.results:
            for r in g.responses:
                if r.policy_version == 1:
                    assert r.token_ids == by_index[(g.prompt_index, r.index)].token_ids
        # the history store hears the version of every job and finished request
        started = {e.job_id: e.policy_version for e in sink.of(JobStarted)}  # type: ignore[attr-defined]
        assert started == {"w": 0, "w2": 1}
        tagged = {e.request_id: e.policy_version for e in sink.of(RequestFinished)}  # type: ignore[attr-defined]
        for rid, run in job.plan.runs.items():
            assert tagged[rid] == run.policy_version

    asyncio.run(run_dispatcher(links, service_config(), "context", body, sink=sink, drafts=drafts))


def test_a_replica_on_old_weights_leaves_rotation_until_it_loads_them(tmp_path: Path) -> None:
    links = FakeLinks(step_s=0.001)
    ckpt = tmp_path / "v2"
    ckpt.mkdir()

    async def body(d: Dispatcher) -> None:
        links.down.add(1)  # replica 1 misses the update
        d.pool.set_state(1, ReplicaState.DOWN, "test: restarting")
        update = await d.updater.update(str(ckpt), 2)
        assert update.replicas == ["replica-0"]
        links.down.discard(1)
        await d.probes.probe_all()  # reports v0 -> out of rotation, loads v2 in the background
        assert d.pool.replicas[1].state is ReplicaState.STALE  # answers, not on the current weights
        assert d.pool.replicas[1].error == "runs weights v0, not v2"
        assert [h.state for h in d.probes.health()] == [ReplicaState.HEALTHY, ReplicaState.STALE]
        for _ in range(200):
            if d.pool.replicas[1].state is ReplicaState.HEALTHY:
                break
            await asyncio.sleep(0.01)
        assert d.pool.replicas[1].state is ReplicaState.HEALTHY
        assert links.engines[1].policy_version == 2
        with pytest.raises(JobError, match="no replica loaded"):
            await d.updater.update(str(tmp_path / "missing"), 3)
        assert d.updater.state.version == 2 and not d.updater.state.updating

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def test_weights_are_verified_where_they_are_loaded(tmp_path: Path) -> None:
    """The trainer's digest: a replica that reads another checkpoint loads nothing (here all: the
    caller's error, 422 naming the digest each read; weights unchanged); with the right one every
    replica loads and a replica that restarts later is synced against it. Without one, a replica
    that read other bytes than the rest leaves rotation for good."""
    import torch
    from safetensors.torch import save_file

    from app.weights_digest import checkpoint_digest

    links = FakeLinks(n=3, step_s=0.001)
    ckpt = tmp_path / "v1"
    ckpt.mkdir()
    save_file({"w": torch.ones(4)}, ckpt / "model.safetensors")
    good = checkpoint_digest(ckpt)

    async def body(d: Dispatcher) -> None:
        with pytest.raises(JobError, match=f"sha256={'f' * 64} is not the digest") as refused:
            await d.updater.update(str(ckpt), 1, digest="f" * 64)
        assert refused.value.status == 422 and d.updater.state.version == 0
        for rid in ("replica-0", "replica-1", "replica-2"):
            assert f"'{rid}': '{good}'" in refused.value.message
        assert [e.policy_version for e in links.engines] == [0, 0, 0]  # nothing loaded
        update = await d.updater.update(str(ckpt), 1, digest=good)
        assert update.digest == good == d.updater.state.digest and len(update.replicas) == 3
        loaded = {h.load.policy_version for h in d.probes.health() if h.load}
        assert loaded == {1}  # before a probe
        links.engines[2].policy_version = 0  # it restarted: synced, and verified, again
        await d.probes.probe_all()
        assert d.pool.replicas[2].state is ReplicaState.STALE
        for _ in range(200):
            if d.pool.replicas[2].state is ReplicaState.HEALTHY:
                break
            await asyncio.sleep(0.01)
        assert links.weight_loads[-1] == (2, str(ckpt), good)
        links.misreads.add(1)  # replica 1's storage shows it other bytes
        update = await d.updater.update(str(ckpt), 2)
        assert update.digest == good and sorted(update.replicas) == ["replica-0", "replica-2"]
        assert "0000" in update.failed_replicas["replica-1"]
        assert d.pool.replicas[1].state is ReplicaState.FAILED

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def _logged(links: FakeLinks) -> list[tuple[int, str, int, int]]:
    """Every chunk each fake replica ran: (replica, request, tokens before it, the version of
    the weights it ran under), appended as each ends."""
    ran: list[tuple[int, str, int, int]] = []
    original = links.run_chunk

    async def run_chunk(replica: int, chunk: Any) -> Any:
        version = links.engines[replica].policy_version
        result = await original(replica, chunk)
        ran.append((replica, chunk.request_id, len(chunk.generated_token_ids), version))
        return result

    links.run_chunk = run_chunk  # type: ignore[method-assign]
    return ran


def _tokens_by_request(d: Dispatcher, job_id: str) -> dict[str, tuple[int, list[int]]]:
    job = d.book.get(job_id)
    return {rid: (run.policy_version, list(run.tokens)) for rid, run in job.plan.runs.items()}


def test_a_replica_down_when_an_update_begins_never_serves_old_weights_under_the_new(
    tmp_path: Path,
) -> None:
    """Issue 38, defect 2: a replica down when an update began is not among those it loads,
    and a probe during the update rejoined it on its old weights: from the resume its chunks
    went out stamped with the new policy_version. Now it stays out until it synced, and every
    token of every response was sampled by the version it is stamped with (the per-replica
    log of what each ran says so, and the tokens equal those of the same seeded job on
    replicas that all run the new weights: the fake engine's tokens depend on its weights)."""
    links = FakeLinks(n=2, step_s=0.002)
    ran = _logged(links)
    ckpt = checkpoint(tmp_path / "v1")
    loading, release = asyncio.Event(), asyncio.Event()
    load = links.update_weights

    async def slow_load(replica: int, path: str, version: int, digest: str | None) -> str:
        loading.set()
        await release.wait()
        return await load(replica, path, version, digest)

    links.update_weights = slow_load  # type: ignore[method-assign]

    async def body(d: Dispatcher) -> None:
        links.down.add(1)
        await d.probes.probe_all()
        assert d.pool.replicas[1].state is ReplicaState.DOWN
        update = asyncio.ensure_future(d.updater.update(str(ckpt), 1))
        await asyncio.wait_for(loading.wait(), 10)  # loading replica 0 only
        links.down.discard(1)  # replica 1 is back, on v0, while the update runs
        await d.probes.probe_all()
        assert d.pool.replicas[1].state is not ReplicaState.HEALTHY  # stays out meanwhile
        release.set()
        assert (await update).replicas == ["replica-0"]
        d.submit(job_plan("j", prompts=6, g=4, max_tokens=60, sampling={"seed": 5}))
        assert (await d.wait("j")).state is JobState.DONE
        got = _tokens_by_request(d, "j")
        # the same seeded job once both replicas run v1: token for token what v1 samples
        deadline = asyncio.get_running_loop().time() + 10
        while d.pool.replicas[1].state is not ReplicaState.HEALTHY:
            assert asyncio.get_running_loop().time() < deadline, d.pool.replicas[1].error
            await asyncio.sleep(0.01)
        assert links.engines[1].policy_version == 1  # synced by then
        d.submit(job_plan("again", prompts=6, g=4, max_tokens=60, sampling={"seed": 5}))
        assert (await d.wait("again")).state is JobState.DONE
        want = _tokens_by_request(d, "again")
        assert [got[f"j{k[5:]}"] for k in sorted(want)] == [want[k] for k in sorted(want)]

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))
    assert ran and all(version == 1 for _, _, _, version in ran), sorted(set(ran))[:10]


def test_a_chunk_run_on_other_weights_is_discarded_and_runs_again(tmp_path: Path) -> None:
    """A result carries the version it ran under; one that is not its response's is never
    kept: the chunk runs again and its replica leaves rotation until it synced. Here replica 1
    restarted on v0 while its probes still said v1 (until it had run a chunk on v0); the job's
    tokens are still those of the same seeded job on replicas that all run v1."""
    links = FakeLinks(n=2, step_s=0.002)
    ran = _logged(links)
    ckpt = checkpoint(tmp_path / "v1")

    async def body(d: Dispatcher) -> None:
        await d.updater.update(str(ckpt), 1)
        restarted = links.engines[1]
        report = restarted.load

        def stale_report() -> Any:  # says v1 until it ran a chunk on v0
            out = report()
            if not any(r == 1 and v == 0 for r, _, _, v in ran):
                out = out.model_copy(update={"policy_version": 1})
            return out

        restarted.policy_version, restarted._weights = 0, ""  # the restart: its first weights
        restarted.load = stale_report  # type: ignore[method-assign]
        d.submit(job_plan("j", prompts=4, g=4, max_tokens=60, sampling={"seed": 5}))
        assert (await d.wait("j")).state is JobState.DONE
        got = _tokens_by_request(d, "j")
        assert any(r == 1 and v == 0 for r, _, _, v in ran), "no chunk ran on v0"
        deadline = asyncio.get_running_loop().time() + 10
        while d.pool.replicas[1].state is not ReplicaState.HEALTHY:  # back once it synced
            assert asyncio.get_running_loop().time() < deadline, d.pool.replicas[1].error
            await asyncio.sleep(0.01)
        assert restarted.policy_version == 1
        d.submit(job_plan("again", prompts=4, g=4, max_tokens=60, sampling={"seed": 5}))
        assert (await d.wait("again")).state is JobState.DONE
        want = _tokens_by_request(d, "again")
        assert [got[f"j{k[5:]}"] for k in sorted(want)] == [want[k] for k in sorted(want)]

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def test_a_restarted_scheduler_adopts_the_weights_its_replicas_report(tmp_path: Path) -> None:
    """Issue 38, defect 10: after a weight update the scheduler's process died; the one Serve
    started in its place believed v0, put every replica STALE ("runs weights v5, not v0") and
    served nothing until the trainer updated again. Now the newest version the replicas report
    with its checkpoint is the service's: jobs run on it at once, a replica the death left on
    an older version loads it, and the version still only grows."""
    links = FakeLinks(n=2, step_s=0.001)
    v4, v5 = checkpoint(tmp_path / "v4"), checkpoint(tmp_path / "v5")

    async def before(d: Dispatcher) -> None:
        await d.updater.update(str(v4), 4)
        links.down.add(1)  # the update to v5 reaches replica 0 only, then the scheduler dies
        d.pool.set_state(1, ReplicaState.DOWN, "test: restarting")
        assert (await d.updater.update(str(v5), 5)).replicas == ["replica-0"]
        links.down.discard(1)

    asyncio.run(run_dispatcher(links, service_config(), "divided", before))
    ran = _logged(links)

    async def after(d: Dispatcher) -> None:  # the new scheduler, on the same replicas
        w = d.updater.state
        assert (w.version, w.path, w.digest) == (5, str(v5), checkpoint_digest(v5))
        assert d.pool.replicas[0].state is ReplicaState.HEALTHY
        d.submit(job_plan("j", prompts=4, g=4, max_tokens=40))
        assert (await d.wait("j")).state is JobState.DONE
        assert {v for v, _ in _tokens_by_request(d, "j").values()} == {5}
        deadline = asyncio.get_running_loop().time() + 10
        while d.pool.replicas[1].state is not ReplicaState.HEALTHY:  # it loads v5 first
            assert asyncio.get_running_loop().time() < deadline, d.pool.replicas[1].error
            await asyncio.sleep(0.01)
        assert links.engines[1].policy_version == 5
        with pytest.raises(JobError, match="must be above"):
            await d.updater.update(str(v4), 5)

    asyncio.run(run_dispatcher(links, service_config(), "divided", after))
    assert ran and all(version == 5 for _, _, _, version in ran), sorted(set(ran))[:10]


def test_a_new_scheduler_aborts_the_chunks_a_gone_one_left_running() -> None:
    """Issue 38's fault matrix, the scheduler killed mid-job: Serve does not cancel a replica
    call whose caller died, so the dead scheduler's chunks ran on for nobody (holding KV, and
    refusing a weight load: vLLM loads only with no chunk running). Before a replica first
    joins a new scheduler, what it runs is aborted."""
    links = FakeLinks(n=2, step_s=0.01)
    orphans: list[asyncio.Task[Any]] = []

    async def body(d: Dispatcher) -> None:
        assert [await t for t in orphans] and all(
            t.result().finish_reason is FinishReason.ABORT for t in orphans
        )
        assert all(len(t.result().token_ids) < 500 for t in orphans)  # cut, not run out
        d.submit(job_plan("j", prompts=2, g=2, max_tokens=20))
        assert (await d.wait("j")).state is JobState.DONE  # and it serves

    async def main() -> None:
        await links.start()
        for i, engine in enumerate(links.engines):  # the gone scheduler's chunks, one each
            chunk = ChunkRequest(
                request_id=f"old-{i}",
                group_id="old",
                prompt_token_ids=[5],
                chunk_cap=500,
                max_tokens=500,
            )
            orphans.append(asyncio.ensure_future(engine.run_chunk(chunk)))
        await asyncio.sleep(0.05)
        assert all(e._running for e in links.engines)
        await run_dispatcher(links, service_config(), "divided", body)

    asyncio.run(main())


def test_a_replica_killed_during_a_weight_update_comes_back_on_the_new_weights(
    tmp_path: Path,
) -> None:
    """Issue 38's fault matrix: a replica dies while it loads the new weights. The update
    answers (done on the other, the dead one named), the dead one is out of rotation, and
    once Serve restarted it (on the model it started with) it loads the new weights before
    it serves: no chunk ever runs on the old ones."""
    links = FakeLinks(n=2, step_s=0.002)
    ckpt = checkpoint(tmp_path / "v1")
    load = links.update_weights
    died: list[int] = []

    async def dies_loading(replica: int, path: str, version: int, digest: str | None) -> str:
        if replica == 1 and not died:
            died.append(replica)
            links.down.add(1)  # killed mid-load: restarting, then back on its first weights
            raise ReplicaUnavailable("replica-1: the actor died")
        return await load(replica, path, version, digest)

    links.update_weights = dies_loading  # type: ignore[method-assign]

    async def body(d: Dispatcher) -> None:
        update = await d.updater.update(str(ckpt), 1)
        assert update.replicas == ["replica-0"] and "replica-1" in update.failed_replicas
        assert d.pool.replicas[1].state is not ReplicaState.HEALTHY
        ran = _logged(links)
        d.submit(job_plan("j", prompts=4, g=4, max_tokens=40))
        links.down.discard(1)  # Serve restarted it
        assert (await d.wait("j")).state is JobState.DONE
        deadline = asyncio.get_running_loop().time() + 10
        while d.pool.replicas[1].state is not ReplicaState.HEALTHY:
            assert asyncio.get_running_loop().time() < deadline, d.pool.replicas[1].error
            await asyncio.sleep(0.01)
        assert links.engines[1].policy_version == 1
        d.submit(job_plan("k", prompts=4, g=4, max_tokens=40))
        assert (await d.wait("k")).state is JobState.DONE
        assert ran and all(version == 1 for _, _, _, version in ran), sorted(set(ran))[:10]
        assert {v for v, _ in _tokens_by_request(d, "k").values()} == {1}

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))
