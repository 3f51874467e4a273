"""The soak's short version (issue 38): a few jobs of mixed sizes on sim replicas with one replica
SIGKILLed while they run; every job completes with every response exactly once. The full soak
(50 jobs over 10 minutes, a kill a minute) is ``python -m lab.bench.soak``; its figures are in
lab/NOTES.md."""

from __future__ import annotations

import pytest

from app.serve.local import LocalService
from lab.bench.soak import _quantile, check, soak

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def test_every_job_completes_once_through_a_replica_kill(local_service: LocalService) -> None:
    r = soak(
        jobs=4,
        minutes=0.15,
        kill_every_s=3,
        concurrency=4,
        job_timeout_s=300,
        port=local_service.port,
        service=local_service,  # the session's Ray: one per process
    )
    assert r.kills >= 1, r  # the jobs ran past the kill
    assert r.ok and r.jobs_done == 4 and not r.bad, r
    assert r.responses > 0 and r.chunk_p99_s >= r.chunk_p50_s > 0
    assert r.scheduler_rss_mib_start > 0 and r.scheduler_rss_mib_end > 0


def test_the_check_counts_lost_and_doubled_responses() -> None:
    body = {"prompts": ["a", "b"], "group_size": 2, "max_tokens": 4}

    def resp(i: int) -> dict[str, object]:
        return {"index": i, "length": 1, "token_ids": [7]}

    whole = {"groups": [{"prompt_index": p, "responses": [resp(0), resp(1)]} for p in (0, 1)]}
    assert check(body, whole) == (4, 0, 0, [])
    doubled = {"groups": [{"prompt_index": 0, "responses": [resp(0), resp(0), resp(1)]}]}
    assert check(body, doubled) == (2, 2, 1, [])  # prompt 1 lost, one response twice


def test_the_chunk_latency_quantile_interpolates_within_a_bucket() -> None:
    text = "\n".join(
        [
            'seer_chunk_seconds_bucket{le="0.1"} 0',
            'seer_chunk_seconds_bucket{le="1.0"} 50',
            'seer_chunk_seconds_bucket{le="2.0"} 100',
            'seer_chunk_seconds_bucket{le="+Inf"} 100',
        ]
    )
    assert _quantile(text, "seer_chunk_seconds", 0.5) == pytest.approx(1.0)
    assert _quantile(text, "seer_chunk_seconds", 0.75) == pytest.approx(1.5)
    assert _quantile("", "seer_chunk_seconds", 0.5) == 0.0
