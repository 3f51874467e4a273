"""Synthetic rollout history as ``core.events`` (for ``lab.bench.dashboard_refresh`` and the tests):
``jobs`` iterations over the same prompts, each prompt with its own typical length, chunks
with draft statistics, replica load samples, and a speculation settings change. Deterministic
for a seed. It is a stand-in for a recorded service run, not a model of one."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Shape:
    jobs: int = 10
    groups: int = 128  # prompts per job (the same prompts every job)
    group_size: int = 4
    max_tokens: int = 1024
    chunk_tokens: int = 64
    replicas: int = 4
    tokens_per_s: float = 40.0  # per request
    last_running: bool = True  # the last job is half done


def history(shape: Shape, t0: float, seed: int = 0) -> list[Event]:
    """Every event of ``shape.jobs`` jobs starting at ``t0``, in emission order."""
    rng = random.Random(seed)
    typical = [
        math.exp(rng.gauss(math.log(shape.max_tokens / 5), 0.6)) for _ in range(shape.groups)
    ]
    out: list[Event] = []
    t = t0
    for j in range(shape.jobs):
        last = j == shape.jobs - 1
        events, t_end = _job(
            shape, j, t, typical, rng, cut=0.5 if last and shape.last_running else 1
        )
        out.extend(events)
        if j == shape.jobs // 2:
            old = {"enabled": True, "max_draft": 8, "adaptive": True}
            out.append(
                SpeculationConfigChanged(
                    t_end, "bench", json.dumps(old), json.dumps({**old, "max_draft": 4}), "test"
                )
            )
        t = t_end + 5.0
    return out


def _job(
    shape: Shape, j: int, t0: float, typical: list[float], rng: random.Random, cut: float
) -> tuple[list[Event], float]:
    job = f"job{j:03d}"
    infos = tuple(
        GroupInfo(
            f"{job}-g{i}",
            f"p{i}",
            f"sha256:{i:032x}",
            f"p{i}",
            shape.group_size,
            shape.max_tokens,
            64,
        )
        for i in range(shape.groups)
    )
    timed: list[tuple[float, Event]] = []
    ends: list[float] = []
    for i, g in enumerate(infos):
        lengths = [
            max(1, min(shape.max_tokens, round(typical[i] * math.exp(rng.gauss(0, 0.4)))))
            for _ in range(g.group_size)
        ]
        done: list[int] = []
        finishes = []
        for k, n in enumerate(lengths):
            rid, start = f"{g.group_id}-r{k}", t0 + rng.uniform(0, 3)
            rate = shape.tokens_per_s * rng.uniform(0.8, 1.2)
            reps, gen, at = [], 0, start
            while gen < n:
                new = min(shape.chunk_tokens, n - gen)
                gen += new
                at += new / rate
                rep = f"replica-{rng.randrange(shape.replicas)}"
                reps.append(rep)
                reason = ("stop" if n < shape.max_tokens else "length") if gen == n else "chunk"
                timed.append((at, ChunkDone(rid, g.group_id, rep, at, new, gen, reason, k == 0)))
                acc = sum(1 for _ in range(new - 1) if rng.random() < 0.45)
                steps = max(1, new - acc)
                timed.append((at, DraftStats(rid, g.group_id, rep, at, 3 * steps, acc, steps)))
            fin = "stop" if n < shape.max_tokens else "length"
            timed.append(
                (
                    at,
                    RequestFinished(
                        rid,
                        g.group_id,
                        g.prompt_key,
                        n,
                        len(reps),
                        k == 0,
                        tuple(reps),
                        fin,
                        t0,
                        start,
                        at,
                    ),
                )
            )
            finishes.append((at, n))
        for at, n in sorted(finishes):
            done.append(n)
            gm = round(math.exp(sum(math.log(x) for x in done) / len(done)))
            timed.append((at, GroupEstimate(g.group_id, at, max(done), gm, len(done))))
        last_at = max(a for a, _ in finishes)
        timed.append((last_at, GroupFinished(g.group_id, last_at, tuple(lengths))))
        ends.append(last_at)
    end = max(ends)
    stop = t0 + (end - t0) * cut
    timed = [(a, e) for a, e in timed if a <= stop]
    s = t0
    while s <= stop:
        for r in range(shape.replicas):
            timed.append(
                (
                    s,
                    ReplicaLoadSample(
                        f"replica-{r}",
                        s,
                        rng.randrange(32),
                        rng.randrange(8),
                        rng.randrange(40),
                        rng.random(),
                        rng.randrange(50_000),
                    ),
                )
            )
        s += 1.0
    timed.sort(key=lambda p: p[0])
    events: list[Event] = [JobStarted(job, t0, t0, "seer", j, shape.max_tokens, infos)]
    events.extend(e for _, e in timed)
    if cut >= 1:
        out_tokens = sum(e.length for _, e in timed if isinstance(e, RequestFinished))
        n_req = sum(1 for _, e in timed if isinstance(e, RequestFinished))
        events.append(JobFinished(job, end, "done", n_req, out_tokens))
    return events, stop
