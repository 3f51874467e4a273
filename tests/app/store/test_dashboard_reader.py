"""The store's read API for the dashboard: typed results, exact figures on hand-made events,
and ``StoreUnavailable`` instead of SQLAlchemy errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.store.reader import StoreReader, StoreUnavailable
from app.store.writer import StoreWriter
from core.events import (
    ChunkDone,
    DraftStats,
    Event,
    GroupEstimate,
    GroupFinished,
    GroupInfo,
    JobFinished,
    JobStarted,
    ReplicaLoadSample,
    RequestFinished,
    SpeculationConfigChanged,
)
from core.stats import tail_time

T0 = 1_000_000.0


def _write(url: str, events: list[Event]) -> None:
    w = StoreWriter(url, migrate=True).start()
    for e in events:
        w.emit(e)
    assert w.close(timeout=60).written == len(events)


def _job(job: str, at: float, lengths: list[list[int]], state: str | None = "done") -> list[Event]:
    infos = tuple(
        GroupInfo(f"{job}-g{i}", f"p{i}", f"h{i}", None, len(ls), 100, 5)
        for i, ls in enumerate(lengths)
    )
    out: list[Event] = [JobStarted(job, at, at - 1, "seer", 7, 100, infos)]
    t = at
    for g, ls in zip(infos, lengths, strict=True):
        for k, n in enumerate(ls):
            t += 1.0
            rid = f"{g.group_id}-r{k}"
            out.append(
                ChunkDone(rid, g.group_id, "rep0", t, n, n, "stop", k == 0, t - 0.5, 2 * n * k)
            )
            out.append(DraftStats(rid, g.group_id, "rep0", t, 2 * n, n // 2, n))
            out.append(
                RequestFinished(
                    rid, g.group_id, g.prompt_key, n, 1, k == 0, ("rep0",), "stop", at, at, t
                )
            )
            out.append(GroupEstimate(g.group_id, t, max(ls[: k + 1]), 10 + k, k + 1))
        out.append(GroupFinished(g.group_id, t, tuple(ls)))
    if state is not None:
        out.append(JobFinished(job, t + 0.5, state, sum(map(len, lengths)), sum(map(sum, lengths))))
    return out


@pytest.fixture
def url(tmp_path: Path) -> str:
    u = f"sqlite:///{tmp_path / 's.db'}"
    events = _job("a", T0, [[10, 20], [30, 40, 50]])
    events += _job("b", T0 + 100, [[5, 6], [7]], state=None)  # still running
    events += [ReplicaLoadSample("rep0", T0 + 100 + s, s, 1, 2, 0.25, 10) for s in range(0, 30, 5)]
    events.append(
        SpeculationConfigChanged(
            T0 + 50, "ann", json.dumps({"max_draft": 8}), json.dumps({"max_draft": 4}), "too long"
        )
    )
    _write(u, events)
    return u


def test_jobs_and_current_job(url: str) -> None:
    r = StoreReader(url)
    jobs = r.jobs()
    assert [j.job_id for j in jobs] == ["b", "a"]
    b, a = jobs
    assert (a.state, a.requests, a.requests_finished, a.output_tokens) == ("done", 5, 5, 150)
    assert (b.state, b.requests, b.requests_finished, b.iteration) == ("running", 3, 3, 7)
    assert r.current_job() == b
    assert r.jobs(limit=1) == [b]


def test_requests_groups_and_estimates(url: str) -> None:
    r = StoreReader(url)
    reqs = r.job_requests("a")
    assert [q.length for q in reqs] == [10, 20, 30, 40, 50]
    assert [q.finished_at for q in reqs] == sorted(q.finished_at for q in reqs)
    g0, g1 = r.groups(["a"])
    assert g1.final_lengths == (30, 40, 50) and g1.group_size == 3 and g1.job_id == "a"
    assert (g1.first_max_estimate, g1.first_mean_estimate) == (30, 10)
    assert (g1.max_estimate, g1.mean_estimate, g1.estimate_finished) == (50, 12, 3)
    assert len(r.groups(["a", "b"])) == 4 and r.groups([]) == []


def test_job_chunks_are_the_requests_that_ended_last(url: str) -> None:
    r = StoreReader(url)
    spans = r.job_chunks("a")
    assert [c.request_id for c in spans] == sorted(c.request_id for c in spans)
    assert len(spans) == 5 and {c.group_id for c in spans} == {"a-g0", "a-g1"}
    for c in spans:
        assert c.started_at == c.finished_at - 0.5 and c.replica_id == "rep0"
    assert {c.request_id: c.drafted for c in spans}["a-g1-r2"] == 2 * 50 * 2
    last2 = r.job_chunks("a", max_requests=2)  # the two that finished last: a-g1-r1, a-g1-r2
    assert sorted(c.request_id for c in last2) == ["a-g1-r1", "a-g1-r2"]
    assert r.job_chunks("nope") == []


def test_job_timings_match_the_simulator_s_tail(url: str) -> None:
    r = StoreReader(url)
    t = r.job_timings(["a", "b", "nope"])
    assert set(t) == {"a", "b"}
    times = [q.finished_at for q in r.job_requests("a")]
    assert t["a"].n == 5 and t["a"].output_tokens == 150
    assert t["a"].tail_s == pytest.approx(tail_time(times))
    assert (t["a"].first_finish, t["a"].last_finish) == (min(times), max(times))


def test_acceptance_tokens_and_load(url: str) -> None:
    r = StoreReader(url)
    by_group = {d.key: d for d in r.acceptance_by_group("a")}
    assert by_group["a-g1"].drafted == 2 * 120 and by_group["a-g1"].steps == 120
    assert by_group["a-g1"].accepted == 15 + 20 + 25
    assert by_group["a-g1"].acceptance_length == pytest.approx(1 + 60 / 120)
    over = r.acceptance_over_time(1000.0, "a")
    assert len(over) == 1 and over[0].key == math.floor(T0 / 1000) * 1000
    assert over[0].drafted == 300 and over[0].steps == 150
    tokens = r.tokens_over_time(1000.0, "a")
    assert sum(t.tokens for t in tokens) == 150 and sum(t.chunks for t in tokens) == 5
    load = r.replica_load(T0 + 110, T0 + 120)
    assert [s.running for s in load] == [10, 15, 20]
    assert [s.running for s in r.replica_load(T0 + 116)] == [20, 25]


def test_prompt_lengths_and_audit_log(url: str) -> None:
    r = StoreReader(url)
    got = {
        p.prompt_key: [n for _, n in p.samples] for p in r.prompt_lengths(["p0", "p1"], T0 + 100)
    }
    assert got == {"p0": [10, 20], "p1": [30, 40, 50]}
    [v] = r.config_versions()
    assert (v.who, v.reason, v.changes()) == ("ann", "too long", {"max_draft": (8, 4)})


def test_missing_file_and_missing_tables_are_empty_not_errors(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    r = StoreReader(f"sqlite:///{missing}")
    with pytest.raises(StoreUnavailable) as exc:
        r.jobs()
    assert exc.value.empty and not missing.exists()  # the reader does not create it
    import sqlite3

    sqlite3.connect(missing).close()  # a file without tables
    with pytest.raises(StoreUnavailable, match="no Seer tables") as exc:
        r.current_job()
    assert exc.value.empty


def test_an_unreadable_database_is_not_empty(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a SQLite database" * 100)
    with pytest.raises(StoreUnavailable, match="cannot read") as exc:
        StoreReader(f"sqlite:///{bad}").jobs()
    assert not exc.value.empty
