"""Retries and restarts on a real Serve app (fake engine replicas, the store on SQLite).

Idempotent submissions (issue 38): a call repeated under its ``Idempotency-Key`` is the same job
(id, results, cancel token), whether the first is running, done, or its caller went away;
another body under the key is a 422 naming the header; keys are per endpoint.

The scheduler's process SIGKILLed under load (issue 38, defects 10 and 11; last in the module).
Before: a waiting ``/v1/rollouts`` caller got HTTP 500; the restarted scheduler believed weights
v0, put every replica STALE and served nothing until the trainer updated again; the lost jobs
stayed ``running`` in the store for good (a ghost on the dashboard's Now page). Now every caller
hears a 503 naming the restart (with Retry-After) within a bound, a ``/groups`` stream ends with
a last line saying so, the new scheduler adopts the weights its replicas report and serves again
by itself, and the store ends the jobs it lost.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.serve.local import LocalService
from app.store.rows import ORPHANED
from app.weights_digest import checkpoint_digest
from lab.bench.faults import kill_the_serve_actor
from tests.app.serve.fakes import FAKE_APP, checkpoint

pytestmark = [pytest.mark.serve, pytest.mark.slow]

_CALLER_S = 60.0  # each caller hears of the death within this (the bound)
_BACK_S = 150.0  # the service serves again by itself within this
OPERATOR = {"Authorization": f"Bearer {FAKE_APP['operator_token']}"}


@pytest.fixture(scope="module")
def app(local_service: LocalService) -> Iterator[tuple[str, Path]]:
    db = Path(tempfile.mkdtemp(prefix="seer-restart-")) / "seer.db"
    args = {**FAKE_APP, "store": {"enabled": True, "database_url": f"sqlite:///{db}"}}
    args["limits"] = {**FAKE_APP["limits"], "max_open_jobs": 8}
    yield local_service.deploy(args), db
    local_service.delete()


def _post(url: str, path: str, body: dict[str, Any], out: list[Any]) -> None:
    t0 = time.monotonic()
    r = httpx.post(f"{url}{path}", json=body, timeout=_BACK_S)
    out.append((r, time.monotonic() - t0))


def _stream(url: str, job_id: str, out: list[Any]) -> None:
    with httpx.stream("GET", f"{url}/v1/rollouts/{job_id}/groups", timeout=_BACK_S) as s:
        out.extend(json.loads(line) for line in s.iter_lines() if line)


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def test_a_202_repeated_under_its_key_is_the_same_job_another_body_a_422(
    app: tuple[str, Path],
) -> None:
    url, _ = app
    body = {"prompts": ["a", "b"], "group_size": 2, "max_tokens": 16}
    first = httpx.post(f"{url}/v1/rollouts", json=body, headers=_key("k-202"), timeout=30)
    again = httpx.post(f"{url}/v1/rollouts", json=body, headers=_key("k-202"), timeout=30)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json() == first.json()  # same id, same URLs, the same cancel token
    other = httpx.post(f"{url}/v1/rollouts", json=body, timeout=30)  # no key: a job of its own
    assert other.json()["id"] != first.json()["id"]
    changed = {**body, "max_tokens": 17}
    r = httpx.post(f"{url}/v1/rollouts", json=changed, headers=_key("k-202"), timeout=30)
    assert r.status_code == 422, r.text
    [err] = r.json()["detail"]
    assert err["loc"] == ["header", "Idempotency-Key"] and first.json()["id"] in err["msg"]
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    completion = {"model": model, "prompt": "a", "max_tokens": 4}  # keys are per endpoint
    r = httpx.post(f"{url}/v1/completions", json=completion, headers=_key("k-202"), timeout=60)
    assert r.status_code == 200, r.text
    for bad in ("", "x" * 257, "tab\there"):
        r = httpx.post(f"{url}/v1/rollouts", json=body, headers=_key(bad), timeout=30)
        assert r.status_code == 422 and "Idempotency-Key" in r.text, (bad, r.text)
    token = {"Authorization": f"Bearer {first.json()['cancel_token']}"}
    r = httpx.delete(f"{url}/v1/rollouts/{first.json()['id']}", headers=token, timeout=30)
    assert r.status_code == 200, r.text  # the repeated token is the job's own


def test_a_retry_after_a_lost_answer_gets_the_whole_answer_of_the_one_job(
    app: tuple[str, Path],
) -> None:
    """The first caller gives up (its answer lost); the job runs on and its retry, with the
    same key, waits for it and gets every group; a third call gets the same answer at once.
    /generate the same way."""
    url, _ = app
    body = {"prompts": ["a", "b"], "group_size": 2, "max_tokens": 200, "wait": True}
    with pytest.raises(httpx.ReadTimeout):  # ~100 tokens at 20 ms a token: seconds of work
        httpx.post(f"{url}/v1/rollouts", json=body, headers=_key("k-wait"), timeout=0.5)
    retry = httpx.post(f"{url}/v1/rollouts", json=body, headers=_key("k-wait"), timeout=120)
    assert retry.status_code == 200, retry.text
    groups = retry.json()["groups"]
    assert len(groups) == 2 and all(len(g["responses"]) == 2 for g in groups)
    assert all(r["finish_reason"] in ("stop", "length") for g in groups for r in g["responses"])
    third = httpx.post(f"{url}/v1/rollouts", json=body, headers=_key("k-wait"), timeout=120)
    assert third.json()["id"] == retry.json()["id"] and third.json()["groups"] == groups
    status = httpx.get(f"{url}/v1/rollouts/{retry.json()['id']}", timeout=30).json()
    assert status["state"] == "done"  # the first caller's leaving cancelled nothing

    gen = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 8}, "rid": "idem-gen"}
    one = httpx.post(f"{url}/generate", json=gen, headers=_key("k-gen"), timeout=120)
    two = httpx.post(f"{url}/generate", json=gen, headers=_key("k-gen"), timeout=120)
    assert one.status_code == two.status_code == 200, (one.text, two.text)
    assert one.json() == two.json()
    r = httpx.post(f"{url}/generate", json=gen, timeout=120)  # the rid again, with no key
    assert r.status_code == 409, r.text


def test_a_killed_scheduler_is_a_503_then_serves_again_on_the_trainer_s_weights(
    app: tuple[str, Path],
) -> None:

    url, db = app
    ckpt = checkpoint(Path(tempfile.mkdtemp(prefix="seer-ckpt-")) / "v5")
    r = httpx.post(f"{url}/v1/weights", json={"path": str(ckpt), "version": 5}, headers=OPERATOR)
    assert r.status_code == 200, r.text

    # three callers mid-job: a waiting rollout, a /generate call, a /groups stream
    long = {"prompts": ["p"] * 8, "group_size": 4, "max_tokens": 400}
    waited: list[Any] = []
    generated: list[Any] = []
    streamed: list[Any] = []
    r = httpx.post(f"{url}/v1/rollouts", json=long, timeout=30)
    assert r.status_code == 202, r.text
    streamed_job = r.json()["id"]
    gen = {"input_ids": [[5, 6]] * 4, "sampling_params": {"max_new_tokens": 400}, "rid": "gen-1"}
    callers = [
        threading.Thread(target=_post, args=(url, "/v1/rollouts", {**long, "wait": True}, waited)),
        threading.Thread(target=_post, args=(url, "/generate", gen, generated)),
        threading.Thread(target=_stream, args=(url, streamed_job, streamed)),
    ]
    for t in callers:
        t.start()
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/healthz", timeout=30).json()["open_jobs"] < 3:
        assert time.monotonic() < deadline, "the three jobs never ran at once"
        time.sleep(0.1)

    t_kill = time.monotonic()
    kill_the_serve_actor("#SeerScheduler#")
    for t in callers:
        t.join(timeout=_BACK_S)
        assert not t.is_alive(), "a caller still waits after the scheduler died"
    for (resp, _), what in ((waited[0], "wait"), (generated[0], "/generate")):
        assert resp.status_code == 503, (what, resp.status_code, resp.text)
        assert "scheduler restarted" in resp.json()["detail"], (what, resp.text)
        assert int(resp.headers["Retry-After"]) >= 1
    heard = time.monotonic() - t_kill
    assert heard < _CALLER_S, f"the callers heard of the death after {heard:.0f} s"
    assert streamed and streamed[-1]["status"] == 503, streamed[-1:]
    assert "scheduler restarted" in streamed[-1]["error"]

    # it serves again by itself, on the weights the trainer loaded before the death
    while True:
        try:
            health = httpx.get(f"{url}/healthz", timeout=30)
            if health.status_code == 200 and health.json()["status"] == "ok":
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() - t_kill < _BACK_S, health.text
        time.sleep(0.5)
    back = time.monotonic() - t_kill
    weights = httpx.get(f"{url}/v1/weights", timeout=30).json()
    assert (weights["version"], weights["path"]) == (5, str(ckpt))
    assert weights["digest"] == checkpoint_digest(ckpt)
    r = httpx.post(
        f"{url}/v1/rollouts",
        json={"prompts": ["q"] * 2, "group_size": 2, "max_tokens": 16, "wait": True},
        timeout=_BACK_S,
    )
    assert r.status_code == 200, r.text
    versions = {x["policy_version"] for g in r.json()["groups"] for x in g["responses"]}
    assert versions == {5}
    print(f"scheduler killed: callers answered in {heard:.1f} s, serving again in {back:.1f} s")

    # the store ends the jobs the dead scheduler held
    from app.store.reader import StoreReader

    reader = StoreReader(f"sqlite:///{db}")
    try:
        deadline = time.monotonic() + 60
        while True:
            jobs = reader.jobs()
            lost = [j for j in jobs if j.error == ORPHANED]
            # the rollout after the restart answered before its end reached the store
            running = [j for j in jobs if j.state == "running"]
            if len(lost) == 3 and not running:
                break
            assert time.monotonic() < deadline, [(j.job_id, j.state, j.error) for j in jobs]
            time.sleep(0.5)
        assert {j.state for j in lost} == {"failed"} and streamed_job in {j.job_id for j in lost}
    finally:
        reader.close()
