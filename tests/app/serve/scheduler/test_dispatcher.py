"""The long-lived dispatcher driving one core Scheduler for every job (fake engines: fast).

The same dispatcher runs inside the SeerScheduler deployment; tests/app/serve/test_service.py
drives it over real HTTP with real replicas. The fakes are shared: tests/app/serve/fakes.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray._raylet

from app.api import JobState, ReplicaState
from app.config import SERVICE_POLICIES, ServiceConfig, ServiceLimits
from app.engines.config import EngineConfig
from app.engines.fake import FakeEngine
from app.rollout import JobPlan
from app.serve.scheduler.dispatcher import Dispatcher
from app.serve.scheduler.jobs import JobError
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad
from core.events import CollectingSink, SpeculationConfigChanged
from tests.app.serve.fakes import (
    FakeDrafts,
    FakeLinks,
    job_plan,
    run_dispatcher,
    service_config,
)


def _reference(links: FakeLinks, plan: JobPlan) -> dict[str, list[int]]:
    """Every response generated in one piece by a separate fake engine."""
    ref = FakeEngine(links.engines[0].config)
    ref.step_s = 0.0
    out: dict[str, list[int]] = {}

    async def whole() -> None:
        await ref.start()
        for rid, run in plan.runs.items():
            res = await ref.run_chunk(_whole(rid, run))
            out[rid] = res.token_ids

    asyncio.run(whole())
    return out


def _whole(rid: str, run: Any) -> ChunkRequest:
    return ChunkRequest(
        request_id=rid,
        group_id=run.group_id,
        prompt_token_ids=run.prompt,
        chunk_cap=run.max_tokens,
        max_tokens=run.max_tokens,
        sampling=run.sampling,
    )


@pytest.mark.parametrize("policy", SERVICE_POLICIES)
def test_every_policy_finishes_every_request_like_one_whole_run(policy: str) -> None:
    links = FakeLinks()
    plan = job_plan("job1", sampling={"seed": 5})
    expected = _reference(links, plan)

    async def body(d: Dispatcher) -> None:
        d.submit(plan)
        job = await d.wait("job1")
        assert job.state is JobState.DONE, job.error
        assert sorted(g.prompt_index for g in job.results) == [0, 1, 2]
        for g in job.results:
            assert [r.index for r in g.responses] == [0, 1, 2, 3]
            for r in g.responses:
                rid = f"job1-g{g.prompt_index}-r{r.index}"
                assert r.token_ids == expected[rid]  # chunks continue exactly where they stopped
                assert r.length == len(r.token_ids) and r.chunks == len(r.replicas)
                if policy == "verl":
                    assert r.chunks == 1
                else:
                    assert r.chunks == -(-r.length // 16)
        assert d.scheduler.num_groups == 0  # finished groups were released

    asyncio.run(run_dispatcher(links, service_config(), policy, body))
    if policy != "verl":  # chunks are routed by load: both replicas serve
        assert {r for r, _, _ in links.used} == {0, 1}


def test_concurrent_jobs_share_one_admission_and_never_oversubscribe() -> None:
    links = FakeLinks(step_s=0.0005, max_num_seqs=8)
    cap = 512 * 8  # fake capacity: max_model_len x max_num_seqs

    async def body(d: Dispatcher) -> None:
        for k in range(8):
            d.submit(job_plan(f"j{k}", prompts=2, g=4, max_tokens=200))
        for k in range(8):
            assert (await d.wait(f"j{k}")).state is JobState.DONE

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))
    assert max(links.peak) <= cap
    assert links.peak_running == [8, 8]  # every slot used, never one more (8 jobs x 8 requests)


def test_verl_round_robin_continues_across_jobs() -> None:
    links = FakeLinks()

    async def body(d: Dispatcher) -> None:
        for k in range(4):
            d.submit(job_plan(f"j{k}", prompts=1, g=1, max_tokens=4))
        for k in range(4):
            await d.wait(f"j{k}")

    asyncio.run(run_dispatcher(links, service_config(), "verl", body))
    assert sorted(r for r, _, _ in links.used) == [0, 0, 1, 1]


def test_a_dead_replica_s_chunks_continue_elsewhere_and_finish_exactly_once() -> None:
    links = FakeLinks(step_s=0.0002)
    plan = job_plan("j", prompts=4, g=4, sampling={"seed": 1})
    expected = _reference(links, plan)
    calls = {"n": 0}

    def fail(replica: int, chunk: ChunkRequest) -> bool:
        calls["n"] += 1
        if calls["n"] == 12:
            links.down.add(replica)  # it dies mid-rollout, and stays down for a while
            return True
        return False

    links.fail = fail

    async def body(d: Dispatcher) -> None:
        d.submit(plan)
        while not links.down:
            await asyncio.sleep(0.001)
        dead = next(iter(links.down))
        await asyncio.sleep(0.02)
        assert d.pool.replicas[dead].state is ReplicaState.DOWN
        links.down.clear()  # Serve restarted it: the next probe brings it back
        job = await d.wait("j")
        assert job.state is JobState.DONE, job.error
        got = {
            f"j-g{g.prompt_index}-r{r.index}": r.token_ids for g in job.results for r in g.responses
        }
        assert got == expected  # every request exactly once, continuing from returned tokens
        assert sum(len(g.responses) for g in job.results) == 16
        await d.probes.probe_all()
        assert d.pool.replicas[dead].state is ReplicaState.HEALTHY

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def test_chunks_waiting_on_a_replica_that_became_unreachable_are_reclaimed() -> None:
    """A replica's node dies: calls to it neither answer nor fail (Serve's router holds them
    for a replica that never comes back). Once its bounded probe fails, its chunks still out
    are reclaimed and continue elsewhere: the job finishes, every response exactly once."""
    links = FakeLinks(step_s=0.002)
    plan = job_plan("j", prompts=4, g=4, sampling={"seed": 3})
    expected = _reference(links, plan)

    async def body(d: Dispatcher) -> None:
        d.submit(plan)
        while sum(1 for r, _, _ in links.used if r == 1) < 3:
            await asyncio.sleep(0.001)
        links.gone.add(1)  # chunks running there now, and any sent before the probe, hang
        job = await asyncio.wait_for(d.wait("j"), 10)
        assert job.state is JobState.DONE, job.error
        got = {
            f"j-g{g.prompt_index}-r{r.index}": r.token_ids for g in job.results for r in g.responses
        }
        assert got == expected
        assert d.pool.replicas[1].state is ReplicaState.DOWN
        assert "unreachable" not in (d.pool.replicas[1].error or "")  # the probe's own reason
        assert "health probe failed" in (d.pool.replicas[1].error or "")

    asyncio.run(run_dispatcher(links, service_config(replica_call_timeout_s=0.2), "divided", body))


def test_a_replica_that_keeps_failing_leaves_rotation_for_good() -> None:
    links = FakeLinks()
    links.fail = lambda replica, chunk: replica == 1

    async def body(d: Dispatcher) -> None:
        for k in range(3):  # it answers probes, rejoins, and loses the next job's chunks again
            await d.probes.probe_all()
            assert d.pool.replicas[1].state is ReplicaState.HEALTHY
            d.submit(job_plan(f"j{k}", prompts=6, g=4))
            job = await d.wait(f"j{k}")
            assert job.state is JobState.DONE, job.error
        health = {h.replica_id: h for h in d.probes.health()}
        assert health["replica-1"].state is ReplicaState.FAILED
        assert health["replica-1"].failures == 3 and "died" in (health["replica-1"].error or "")
        assert health["replica-0"].state is ReplicaState.HEALTHY
        await d.probes.probe_all()  # answering probes does not bring a failed replica back
        assert d.pool.replicas[1].state is ReplicaState.FAILED

    asyncio.run(run_dispatcher(links, service_config(max_replica_failures=3), "context", body))


def test_a_probe_answering_after_the_replica_failed_for_good_does_not_revive_it() -> None:
    """A health probe in flight while its replica fails for good must not bring it back when
    the answer arrives (seen in CI: the background probe revived a failed replica)."""
    links = FakeLinks()
    links.fail = lambda replica, chunk: replica == 1

    async def body(d: Dispatcher) -> None:
        gate = asyncio.Event()
        answer = links.load

        async def held(replica: int) -> EngineLoad:
            if replica == 1:
                await gate.wait()
            return await answer(replica)

        links.load = held  # type: ignore[method-assign]
        probe = asyncio.ensure_future(d.probe(1))
        await asyncio.sleep(0.01)
        d.submit(job_plan("j", prompts=6, g=4))
        job = await d.wait("j")
        assert job.state is JobState.DONE, job.error
        assert d.pool.replicas[1].state is ReplicaState.FAILED
        gate.set()
        await probe
        await asyncio.sleep(0.2)  # the background probes answer too
        assert d.pool.replicas[1].state is ReplicaState.FAILED

    asyncio.run(run_dispatcher(links, service_config(max_replica_failures=1), "context", body))


def test_cancel_aborts_running_chunks_and_frees_capacity_for_others() -> None:
    links = FakeLinks(step_s=0.002)

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("big", prompts=4, g=8, max_tokens=400))
        await asyncio.sleep(0.05)
        assert d.scheduler.num_running > 0
        # cancelled while serving a request (Ray names it in this context var): the aborts must
        # be no child of that request, or cancelling it would cancel them too
        ray._raylet.async_task_id.set("the cancel request's task")
        status = d.cancel("big")
        assert status.state is JobState.CANCELLED
        d.submit(job_plan("small", prompts=1, g=2, max_tokens=8))
        assert (await d.wait("small")).state is JobState.DONE
        assert links.aborts  # running chunks were aborted on their replicas
        assert set(links.abort_parents) == {None}
        await asyncio.sleep(0.05)
        assert all(e.load().chunks_in_flight == 0 for e in links.engines)
        assert d.scheduler.num_groups == 0 and d.scheduler.num_running == 0
        assert d.cancel("big").state is JobState.CANCELLED  # idempotent

    asyncio.run(run_dispatcher(links, service_config(), "context", body))


def test_stream_yields_every_group_once_in_completion_order() -> None:
    links = FakeLinks(step_s=0.0002)

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("j", prompts=5, g=2))
        seen = [g.group_id async for g in d.stream("j")]
        assert sorted(seen) == sorted(f"j-g{i}" for i in range(5))
        assert seen == [g.group_id for g in d.book.get("j").results]
        assert d.status("j").progress.groups_done == 5
        late = [g.group_id async for g in d.stream("j")]  # a late reader gets them all too
        assert late == seen

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def test_limits_answer_429_or_422_and_draining_503() -> None:
    links = FakeLinks(step_s=0.01)
    limits = ServiceLimits(max_open_jobs=2, max_job_requests=10, retry_after_s=7)

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("a", prompts=1, g=2))
        d.submit(job_plan("b", prompts=1, g=2))
        with pytest.raises(JobError) as e:
            d.submit(job_plan("c", prompts=1, g=2))
        assert e.value.status == 429 and e.value.retry_after_s == 7
        assert "max_open_jobs=2" in e.value.message
        with pytest.raises(JobError) as e:
            d.submit(job_plan("d", prompts=3, g=4))
        assert e.value.status == 422 and "max_job_requests=10" in e.value.message
        with pytest.raises(JobError) as e:
            d.submit(job_plan("e", prompts=1, g=1, max_tokens=40_000))
        assert e.value.status == 422 and "KV tokens" in e.value.message
        with pytest.raises(JobError) as e:
            d.book.get("nope")
        assert e.value.status == 404
        d.cancel("a")
        d.submit(job_plan("c", prompts=1, g=2))  # room again
        assert await d.drain(0.0) == 2  # b and c cancelled
        with pytest.raises(JobError) as e:
            d.submit(job_plan("f", prompts=1, g=1))
        assert e.value.status == 503

    asyncio.run(run_dispatcher(links, service_config(limits=limits), "divided", body))


def test_policy_switch_waits_for_running_jobs_then_applies() -> None:
    links = FakeLinks(step_s=0.001)

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("a", prompts=2, g=2, max_tokens=40))
        await asyncio.sleep(0.005)
        d.set_policy(d.config.resolve_policy("context"))
        # pending while a runs
        assert d.policies.next.name == "context" and d.policies.running.name == "divided"
        d.submit(job_plan("b", prompts=1, g=2, max_tokens=8))
        assert (await d.wait("a")).policy == "divided"
        assert (await d.wait("b")).policy == "context"
        assert d.policies.running.name == "context"

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


def test_job_past_request_timeout_is_cancelled_and_expires_after_ttl() -> None:
    links = FakeLinks(step_s=0.01)

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("slow", prompts=2, g=2, max_tokens=400))
        job = await d.wait("slow")
        assert job.state is JobState.CANCELLED and "request_timeout_s" in (job.error or "")
        assert d.book.get("slow") is job  # readable for job_ttl_s after it ended
        deadline = time.monotonic() + 30  # then it expires (the loop checks once a second)
        while "slow" in d.book.jobs:
            assert time.monotonic() < deadline, "the job never expired"
            d._wake.set()
            await asyncio.sleep(0.1)
        assert time.time() - (job.finished_at or 0) >= 0.5  # not before its ttl
        with pytest.raises(JobError):
            d.book.get("slow")

    asyncio.run(
        run_dispatcher(links, service_config(request_timeout_s=0.3, job_ttl_s=0.5), "divided", body)
    )


def test_engine_error_fails_only_its_job() -> None:
    links = FakeLinks(step_s=0.0005)
    original = links.run_chunk

    async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
        if chunk.request_id.startswith("bad-"):
            raise ValueError("tokenizer exploded")
        return await original(replica, chunk)

    links.run_chunk = run_chunk  # type: ignore[method-assign]

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("good", prompts=2, g=2))
        d.submit(job_plan("bad", prompts=2, g=2))
        bad = await d.wait("bad")
        assert bad.state is JobState.FAILED and "tokenizer exploded" in (bad.error or "")
        assert (await d.wait("good")).state is JobState.DONE
        assert all(h.state is ReplicaState.HEALTHY for h in d.probes.health())

    asyncio.run(run_dispatcher(links, service_config(), "context", body))


def test_progress_and_metrics() -> None:
    links = FakeLinks()

    async def body(d: Dispatcher) -> None:
        d.submit(job_plan("j", prompts=2, g=2))
        await d.wait("j")
        st = d.status("j")
        assert st.state is JobState.DONE and st.progress.requests_done == 4
        assert st.progress.output_tokens == sum(
            r.length for g in d.book.get("j").results for r in g.responses
        )
        assert st.progress.estimated_remaining_s == 0.0
        text = d.render_metrics().decode()
        for name in (
            'seer_jobs{state="done"} 1.0',
            "seer_requests_finished_total 4.0",
            "seer_dispatch_decisions_total",
            "seer_chunk_seconds_bucket",
            'seer_replica_healthy{replica="replica-0"} 1.0',
            "seer_last_job_tail_seconds",
            "seer_tokens_per_second",
        ):
            assert name in text, name

    asyncio.run(run_dispatcher(links, service_config(), "divided", body))


@pytest.mark.parametrize("policy", ["context", "seer"])
def test_chunks_carry_the_policys_speculation_and_probes(policy: str) -> None:
    """Engines draft only for a speculating policy's chunks; probes are marked for the drafter;
    draft counts of chunks reach the responses and the stats."""
    links = FakeLinks()
    seen: list[ChunkRequest] = []
    inner = links.run_chunk

    async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
        seen.append(chunk)
        res = await inner(replica, chunk)
        n = len(res.token_ids)  # pretend the engine drafted n and kept half
        return res.model_copy(update={"drafted_tokens": n, "accepted_tokens": n // 2})

    links.run_chunk = run_chunk  # type: ignore[method-assign]

    async def body(d: Dispatcher) -> None:
        plan = job_plan("spec")
        d.submit(plan)
        job = await d.wait("spec")
        assert job.state is JobState.DONE
        drafted = sum(r.drafted_tokens for g in job.results for r in g.responses)
        assert drafted == sum(len(r.token_ids) for g in job.results for r in g.responses)

    asyncio.run(run_dispatcher(links, service_config(), policy, body))
    speculate = ServiceConfig().resolve_policy(policy).speculate
    assert speculate is (policy == "seer")
    assert all(c.speculate is speculate for c in seen)
    probes = {c.group_id: c.request_id for c in seen if c.is_probe}
    assert len(probes) == 3 and len(set(probes.values())) == 3  # one probe request per group


def test_speculation_settings_reach_every_replica_live_and_rejoining_ones_later() -> None:
    links = FakeLinks(n=3)
    sink = CollectingSink()
    drafts = FakeDrafts()
    new = DraftSettings(enabled=False, max_draft=4)

    async def main() -> None:
        await links.start()
        cfg = service_config()
        d = Dispatcher(links, cfg, cfg.resolve_policy("seer"), sink=sink, drafts=drafts)
        d.start()
        await d.probes.probe_all()
        try:
            links.down.add(2)
            await d.probes.probe_all()
            assert d.pool.replicas[2].state is ReplicaState.DOWN
            state = await d.speculation.set(new, "alice", "too slow on CPU", d.pool.live())
            assert state.version == 1 and state.settings["max_draft"] == 4
            assert [r.version for r in state.replicas] == [1, 1, -1]
            assert [e.speculation for e in links.engines[:2]] == [new, new]
            assert links.engines[2].speculation == DraftSettings()  # down: not reached yet
            links.down.clear()  # Serve restarted it (with the config's settings)
            await d.probes.probe_all()
            for _ in range(100):  # the re-apply runs as its own bounded task
                if d.speculation.state().replicas[2].version == 1:
                    break
                await asyncio.sleep(0.01)
            assert links.engines[2].speculation == new
            assert [r.version for r in d.speculation.state().replicas] == [1, 1, 1]
            # finished groups are released on the live replicas and the draft server
            d.submit(job_plan("rel", prompts=2, g=2, max_tokens=20))
            await d.wait("rel")
            for _ in range(100):
                if all(len(r) == 2 for r in links.released) and len(drafts.released) == 2:
                    break
                await asyncio.sleep(0.01)
            assert [sorted(r) for r in links.released] == [["rel-g0", "rel-g1"]] * 3
            assert sorted(drafts.released) == ["rel-g0", "rel-g1"]
        finally:
            await d.close()

    asyncio.run(main())
    (event,) = sink.of(SpeculationConfigChanged)
    assert isinstance(event, SpeculationConfigChanged)
    assert event.who == "alice" and event.reason == "too slow on CPU"
    assert '"max_draft": 8' in event.old and '"max_draft": 4' in event.new


def test_two_concurrent_speculation_updates_both_land() -> None:
    """PUT /v1/speculation sends a patch; the merge over the current settings happens under the
    settings' lock, so of two concurrent PUTs changing different fields neither is lost."""
    links = FakeLinks(n=2)

    async def main() -> None:
        await links.start()
        cfg = service_config()
        d = Dispatcher(links, cfg, cfg.resolve_policy("seer"))
        d.start()
        await d.probes.probe_all()
        try:
            a, b = await asyncio.gather(
                d.speculation.update({"max_draft": 4}, "alice", None, d.pool.live()),
                d.speculation.update({"enabled": False}, "bob", None, d.pool.live()),
            )
            assert sorted([a.version, b.version]) == [1, 2]
            want = DraftSettings(enabled=False, max_draft=4)
            assert d.speculation.settings == want
            assert [e.speculation for e in links.engines] == [want, want]
        finally:
            await d.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("engine", "policy", "drafts"),
    [
        ({"backend": "vllm", "speculation": {"method": "grouped"}}, "seer", True),
        ({"backend": "vllm", "speculation": {"method": "grouped"}}, "context", False),
        ({"backend": "vllm", "speculation": {"method": "ngram"}}, "verl", True),
        ({"backend": "vllm", "speculation": {"method": "none"}}, "seer", False),
        ({"backend": "sim"}, "seer", True),
        ({"backend": "sim"}, "divided", False),
        ({"backend": "fake"}, "seer", False),
    ],
)
def test_a_job_s_seed_guarantee_follows_whether_its_chunks_can_draft(
    engine: dict[str, Any], policy: str, drafts: bool
) -> None:
    """identical only where no chunk can carry draft tokens (they consume vLLM's seeded
    generator); ngram drafts whatever the policy; unseeded jobs promise nothing."""
    from app.rollout import seed_guarantee

    cfg = ServiceConfig(engine=EngineConfig(**engine))
    assert cfg.engines_draft(cfg.resolve_policy(policy).speculate) is drafts
    assert seed_guarantee(True, drafts) == ("distribution" if drafts else "identical")
    assert seed_guarantee(False, drafts) == "none"


@pytest.mark.parametrize("policy", ["verl", "context"])
def test_a_response_no_replica_holds_is_422_under_every_policy_a_large_group_is_not(
    policy: str,
) -> None:
    """A response whose prompt + max_tokens exceed every replica's KV can never run: 422 under
    every policy (verl took it before). A group whose group_size x max_tokens exceeds one
    replica's KV runs, also under verl, which puts the whole group on one replica."""
    links = FakeLinks(step_s=0.0)  # replicas of 512 x 64 = 32,768 KV tokens

    async def body(d: Dispatcher) -> None:
        big = d.submit(job_plan("big", prompts=2, g=80, max_tokens=500))  # 80 x 504 = 40,320
        with pytest.raises(JobError) as e:
            d.submit(job_plan("huge", prompts=1, g=1, max_tokens=40_000))
        assert e.value.status == 422 and "40004 KV tokens" in e.value.message
        assert "holds 32768" in e.value.message
        assert (await d.wait(big.id)).state is JobState.DONE

    asyncio.run(run_dispatcher(links, service_config(), policy, body))


@pytest.mark.parametrize("policy", ["verl", "divided"])
def test_a_cancelled_job_s_partial_responses_keep_what_their_aborted_chunks_made(
    policy: str,
) -> None:
    """``/abort_request`` and a cancelled ``wait`` with ``partial`` answer what each response
    made so far. Under verl a response is one chunk, so before the aborted chunks report back
    there is nothing: the partial answer waits for them (bounded) and keeps their tokens, which
    are the first tokens of the same seeded response run whole."""
    links = FakeLinks(step_s=0.01)
    plan = job_plan("p", prompts=2, g=2, max_tokens=400, sampling={"seed": 5})
    reference = _reference(links, plan)

    async def body(d: Dispatcher) -> None:
        job = d.submit(plan)
        while len(d._in_flight) < 4:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # ~20 tokens into each running chunk
        d.cancel(job.id)
        assert job.state is JobState.CANCELLED and job.aborting
        await asyncio.wait_for(d.settle(job), 10)
        assert not job.aborting
        groups = job.groups_so_far()
        responses = [r for g in groups for r in g.responses]
        assert len(responses) == 4 and all(r.length > 0 for r in responses)
        for g in groups:
            for r in g.responses:
                rid = plan.groups[g.prompt_index].spec.request_ids[r.index]
                assert r.token_ids == reference[rid][: r.length]  # a prefix, nothing lost
                assert r.finish_reason == ("stop" if r.length == len(reference[rid]) else "abort")
        assert job.output_tokens == sum(r.length for r in responses)

    asyncio.run(run_dispatcher(links, service_config(), policy, body))
