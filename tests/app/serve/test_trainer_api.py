"""Trainer endpoints over real HTTP against the Serve app with fake engine replicas:
OpenAI ``/v1/completions`` (with the official ``openai`` client), SGLang-style ``/generate`` and
``/abort_request``, requests joining one group by ``group_key``, and policy weight updates
(``/v1/weights``, ``/update_weights_from_disk``, the typed client). The same app config as
tests/app/serve/test_service.py, so Serve reuses its deployments. Weight updates run last: they
change every later sample."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.client import SeerClient
from app.engines.config import EngineConfig
from app.serve.local import LocalService
from app.weights_digest import checkpoint_digest
from tests.app.serve.fakes import FAKE_APP as APP
from tests.app.serve.fakes import checkpoint

pytestmark = pytest.mark.serve
TOKEN = APP["operator_token"]


@pytest.fixture(scope="module")
def url(local_service: LocalService) -> Iterator[str]:
    yield local_service.deploy(APP)
    local_service.delete()


@pytest.fixture(scope="module")
def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120)


def _generate(client: httpx.Client, **body: Any) -> Any:
    r = client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_openai_client_gets_groups_with_token_ids_and_logprobs(url: str) -> None:
    oa = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    [model] = oa.models.list().data  # what OpenAI clients ask first
    assert model.id == EngineConfig.model_validate(APP["engine"]).model and model.created > 0
    out = oa.completions.create(
        model="anything",
        prompt=[[70, 71, 72], [80, 81]],
        n=3,
        max_tokens=20,
        logprobs=1,
        seed=7,
        temperature=1.0,
        extra_body={"return_tokens_as_token_ids": True},
    )
    assert [c.index for c in out.choices] == list(range(6))
    for c in out.choices:
        extra = c.model_extra or {}
        ids = extra["token_ids"]
        assert c.logprobs is not None and 1 <= len(ids) <= 20
        assert c.logprobs.tokens == [f"token_id:{t}" for t in ids]
        assert len(c.logprobs.token_logprobs or []) == len(ids)
        assert extra["prompt_token_ids"] == ([70, 71, 72] if c.index < 3 else [80, 81])
        assert extra["policy_version"] == 0 and c.finish_reason in ("stop", "length")
    assert out.usage is not None and out.usage.prompt_tokens == 5
    assert out.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in out.choices)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        oa.completions.create(model="m", prompt="x", stream=True)
    assert "stream" in str(refused.value.body)


def test_completions_cut_at_a_stop_string_across_chunks(client: httpx.Client) -> None:
    body = {"model": "m", "prompt": [65, 66], "max_tokens": 60, "seed": 11, "n": 1}
    first = client.post("/v1/completions", json=body).json()["choices"][0]
    text = first["text"]
    assert len(text) > 12, text  # chunks are 8 tokens: the stop below lies past chunk 1
    stop = text[10:12]
    cut = client.post("/v1/completions", json={**body, "stop": [stop, "\x00never"]}).json()
    c = cut["choices"][0]
    at = text.index(stop)
    assert c["text"] == text[:at] and c["finish_reason"] == "stop" and c["stop_reason"] == stop
    assert c["token_ids"] == first["token_ids"][: at + len(stop)]  # one char per fake token
    bad = client.post("/v1/completions", json={**body, "prompt": ["a", "b"], "group_key": "k"})
    assert bad.status_code == 422 and "group_key needs exactly one prompt" in bad.text
    assert client.post("/v1/completions", json={**body, "best_of": 2}).status_code == 422
    over = client.post("/v1/completions", json={**body, "prompt": [70, 10**6]})
    assert over.status_code == 422 and over.json()["detail"][0]["loc"] == ["body", "prompt"]
    assert bad.json()["detail"][0]["loc"] == ["body"]  # a rule across fields


def test_requests_sent_one_by_one_join_one_group(client: httpx.Client) -> None:
    jobs = [
        client.post(
            "/v1/rollouts",
            json={"prompts": [[90, 91]], "group_size": 1, "max_tokens": 30, "group_key": "q"},
        ).json()["id"]
        for _ in range(3)
    ]
    groups = []
    for job in jobs:
        with client.stream("GET", f"/v1/rollouts/{job}/groups") as s:
            groups += [httpx.Response(200, content=line).json() for line in s.iter_lines() if line]
    assert [g["group_id"] for g in groups] == ["key:q"] * 3
    sglang = [
        _generate(client, input_ids=[90, 91], group_key="s", sampling_params={"max_new_tokens": 9})
        for _ in range(2)
    ]
    assert all(o["meta_info"]["completion_tokens"] >= 1 for o in sglang)


def test_generate_in_sglang_shape_single_and_batched(client: httpx.Client) -> None:
    one = _generate(
        client,
        input_ids=[70, 71, 72],
        sampling_params={"max_new_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": -1},
        return_logprob=True,
    )
    meta = one["meta_info"]
    assert meta["finish_reason"]["type"] in ("stop", "length")
    lps = meta["output_token_logprobs"]
    assert [t for _, t, _ in lps] == one["output_ids"] and len(lps) == meta["completion_tokens"]
    assert all(isinstance(lp, float) for lp, _, _ in lps) and meta["policy_version"] == 0
    assert meta["prompt_tokens"] == 3 and isinstance(one["text"], str)
    many = _generate(
        client, input_ids=[[70, 71], [72, 73]], sampling_params={"max_new_tokens": 8, "n": 2}
    )
    assert isinstance(many, list) and len(many) == 4
    assert all("output_token_logprobs" not in o["meta_info"] for o in many)
    text = _generate(client, text="hello", sampling_params={"max_new_tokens": 4})
    assert text["meta_info"]["prompt_tokens"] == 5  # raw text: no chat template
    both = client.post("/generate", json={"text": "a", "input_ids": [1]})
    assert both.status_code == 422 and "exactly one of input_ids and text" in both.text
    assert client.post("/generate", json={"input_ids": [1], "rid": "a b"}).status_code == 422
    # a 422 about the job a call became names the call's own fields
    ids = {"input_ids": [[70, 71], [72, 10**6]], "sampling_params": {"max_new_tokens": 8}}
    far = client.post("/generate", json=ids)
    assert far.status_code == 422 and far.json()["detail"][0]["loc"] == ["body", "input_ids", 1]
    cap = {"input_ids": [70], "sampling_params": {"max_new_tokens": 512}}  # the fake's context
    over = client.post("/generate", json=cap)
    assert over.json()["detail"][0]["loc"] == ["body", "sampling_params", "max_new_tokens"]


def test_abort_request_returns_the_partial_sample_as_abort(client: httpx.Client) -> None:
    results: dict[str, Any] = {}

    def call(rid: str) -> None:
        results[rid] = _generate(
            client,
            input_ids=[70],
            rid=rid,
            sampling_params={"max_new_tokens": 400, "n": 8, "sampling_seed": 1},
        )

    threads = [threading.Thread(target=call, args=(rid,)) for rid in ("ab-1", "ab-2")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while (
        client.get("/v1/rollouts/ab-2").status_code != 200
        or not client.get("/v1/rollouts/ab-2").json()["progress"]["output_tokens"]
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    one = client.post("/abort_request", json={"rid": "ab-1"}).json()
    assert one == {"aborted": ["ab-1"]}
    operator = {"Authorization": f"Bearer {TOKEN}"}
    rest = client.post("/abort_request", json={"abort_all": True}, headers=operator).json()
    assert "ab-2" in rest["aborted"]
    for t in threads:
        t.join(60)
    for rid in ("ab-1", "ab-2"):
        out = results[rid]
        assert len(out) == 8
        kinds = {o["meta_info"]["finish_reason"]["type"] for o in out}
        assert "abort" in kinds, kinds
        assert out[0]["meta_info"]["id"] == f"{rid}-0-0"
    assert client.post("/abort_request", json={"rid": "nope"}).json() == {"aborted": []}
    assert client.post("/abort_request", json={}).status_code == 422


def test_a_rid_aborts_only_the_generate_call_sent_with_it(client: httpx.Client) -> None:
    """Issue 38, defect 1: /abort_request {"rid": <a /v1/rollouts job's id>} cancelled that
    job, with neither its cancel token nor the operator's (the id is on the dashboard)."""
    body = {"prompts": [[70]], "group_size": 4, "max_tokens": 400, "sampling": {"seed": 1}}
    job = client.post("/v1/rollouts", json=body).json()
    try:
        assert client.post("/abort_request", json={"rid": job["id"]}).json() == {"aborted": []}
        status = client.get(f"/v1/rollouts/{job['id']}").json()
        assert status["state"] in ("queued", "running", "done"), status
    finally:
        owner = {"Authorization": f"Bearer {job['cancel_token']}"}
        assert client.delete(f"/v1/rollouts/{job['id']}", headers=owner).status_code == 200


def test_weight_update_changes_samples_and_versions(url: str, tmp_path: Path) -> None:
    http = httpx.Client(base_url=url, timeout=120)
    ckpt = checkpoint(tmp_path / "step-1")
    body = {"path": str(ckpt)}
    assert http.post("/v1/weights", json=body).status_code == 401
    wrong = http.post("/v1/weights", json=body, headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 403
    auth = {"Authorization": f"Bearer {TOKEN}"}
    missing = http.post("/v1/weights", json={"path": str(tmp_path / "x")}, headers=auth)
    assert missing.status_code == 422 and "path" in missing.text
    # a directory that holds no checkpoint (with sim engines /etc was once loaded: 200)
    (tmp_path / "empty").mkdir()
    (tmp_path / "config-only").mkdir()
    (tmp_path / "config-only" / "config.json").write_text("{}")
    for folder, lacks in (("empty", "lacks config.json and *.safetensors"),
                          ("config-only", "lacks *.safetensors")):  # fmt: skip
        r = http.post("/v1/weights", json={"path": str(tmp_path / folder)}, headers=auth)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "path"], r.text
        assert "is not a checkpoint" in r.text and lacks in r.text, r.text
    # a sha256 that no replica read: the caller's error (once a 503), each replica's read named
    r = http.post("/v1/weights", json={"path": str(ckpt), "sha256": "0" * 64}, headers=auth)
    assert r.status_code == 422 and "is not the digest" in r.text, r.text
    assert f"'replica-0': '{checkpoint_digest(ckpt)}'" in r.text, r.text
    assert http.get("/v1/weights").json()["version"] == 0  # nothing was loaded
    # weights_root (the temp dir here): nothing loads from outside it, a symlink included
    (tmp_path / "escape").symlink_to("/usr")
    dotdot = os.path.join(tempfile.gettempdir(), "..", "usr")
    for outside in ("/usr", str(tmp_path / "escape"), dotdot):
        r = http.post("/v1/weights", json={"path": outside}, headers=auth)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "path"], r.text
        assert "outside weights_root" in r.text and "'/usr'" in r.text, r.text
    sg_out = http.post("/update_weights_from_disk", json={"model_path": "/usr"}, headers=auth)
    assert sg_out.status_code == 422 and sg_out.json()["success"] is False, sg_out.text
    assert "outside weights_root" in sg_out.json()["message"]
    sample = {"input_ids": [70, 71], "sampling_params": {"max_new_tokens": 24, "sampling_seed": 4}}
    before = _generate(http, **sample)
    assert _generate(http, **sample)["output_ids"] == before["output_ids"]  # seeded: repeatable

    seer = SeerClient(url)
    update = seer.update_weights(str(ckpt), token=TOKEN)
    assert update.version == 1 and update.previous_version == 0
    assert sorted(update.replicas) == ["replica-0", "replica-1"] and not update.failed_replicas
    assert http.get("/v1/weights").json()["version"] == 1
    after = _generate(http, **sample)
    assert after["meta_info"]["policy_version"] == 1
    assert after["output_ids"] != before["output_ids"]  # new weights, new samples
    again = http.post("/v1/weights", json={"path": str(ckpt), "version": 1}, headers=auth)
    assert again.status_code == 409 and "must be above" in again.text

    sg = http.post(
        "/update_weights_from_disk",
        json={"model_path": str(ckpt), "weight_version": "5", "abort_all_requests": True},
        headers=auth,
    ).json()
    assert sg["success"] is True and sg["policy_version"] == 5
    bad = http.post("/update_weights_from_disk", json={"model_path": str(ckpt)})
    assert bad.status_code == 401 and bad.json()["success"] is False
    deadline = time.monotonic() + 30  # /healthz answers from the last probes (0.5 s apart)
    while {r["load"]["policy_version"] for r in http.get("/healthz").json()["replicas"]} != {5}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
