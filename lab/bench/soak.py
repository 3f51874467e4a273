"""Soak: jobs of mixed sizes on a local Serve app for minutes, an engine replica SIGKILLed every
``kill_every_s`` (Serve restarts it): every job must complete with every response exactly once.

Prints (``--json``: one object) the jobs done, the responses checked, the lost and duplicated
ones, the kills, the scheduler process's RSS at the start and the end, and the p50/p99 chunk
latency from the service's own ``seer_chunk_seconds`` histogram (``/metrics``; interpolated
within its buckets). Exit 1 when a job did not complete or a response is missing or doubled.

    python -m lab.bench.soak                       # 50 jobs over 10 minutes, a kill a minute
    python -m lab.bench.soak --jobs 4 --minutes 0.5 --kill-every 10   # a short run

Invariant: every wait is bounded (a job by ``--job-timeout``, the deploy by its own bound); the
jobs are sent by ``--concurrency`` threads, each with a 429 retried after its ``Retry-After``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from lab.bench.faults import kill_serve_actor, serve_actors

#: the app: sim engine replicas (the recorded length model: long tails), divided chunks
APP: dict[str, Any] = {
    "num_replicas": 3,
    "replica_num_cpus": 0.25,
    "chunk_tokens": 64,
    "policy": "context",
    "health_period_s": 0.5,
    "replica_call_timeout_s": 2,
    "max_replica_failures": 1000,  # a kill a minute is the test, not a reason to give up
    "limits": {"max_open_jobs": 8, "retry_after_s": 1},
    "store": {"enabled": False},
    "engine": {"backend": "sim", "max_model_len": 4096},
}


@dataclass
class SoakReport:
    jobs: int
    jobs_done: int = 0
    responses: int = 0
    lost: int = 0  # responses missing from a job's answer
    duplicated: int = 0  # responses given twice
    bad: list[str] = field(default_factory=list)  # what went wrong, per job
    kills: int = 0
    seconds: float = 0.0
    scheduler_rss_mib_start: float = 0.0
    scheduler_rss_mib_end: float = 0.0
    chunk_p50_s: float = 0.0
    chunk_p99_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.jobs_done == self.jobs and not self.lost and not self.duplicated


def job_bodies(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` jobs of mixed sizes: 1-8 prompts, groups of 2-8, 64-512 tokens, seeded."""
    rng = random.Random(seed)
    return [
        {
            "prompts": [f"soak {i} prompt {p}" for p in range(rng.randint(1, 8))],
            "group_size": rng.randint(2, 8),
            "max_tokens": rng.choice([64, 128, 256, 512]),
            "sampling": {"seed": rng.randrange(2**31)},
            "wait": True,
        }
        for i in range(n)
    ]


def check(body: dict[str, Any], answer: dict[str, Any]) -> tuple[int, int, int, list[str]]:
    """(responses, lost, duplicated, problems) of one job's answer against its request."""
    want_groups, g = len(body["prompts"]), body["group_size"]
    problems: list[str] = []
    seen = [(grp["prompt_index"], r["index"]) for grp in answer["groups"] for r in grp["responses"]]
    unique = set(seen)
    expected = {(p, j) for p in range(want_groups) for j in range(g)}
    lost = len(expected - unique)
    duplicated = len(seen) - len(unique)
    for grp in answer["groups"]:
        for r in grp["responses"]:
            if r["length"] != len(r["token_ids"]) or r["length"] > body["max_tokens"]:
                problems.append(f"response {grp['prompt_index']}/{r['index']}: bad length")
    return len(unique & expected), lost, duplicated, problems


def _quantile(metrics: str, name: str, q: float) -> float:
    """Quantile ``q`` of the Prometheus histogram ``name`` (its buckets summed over labels),
    linearly interpolated within the bucket it falls in."""
    buckets: dict[float, float] = {}
    for line in metrics.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    if not buckets or buckets[max(buckets)] == 0:
        return 0.0
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    lo_bound, lo_count = 0.0, 0.0
    for b in bounds:
        if buckets[b] >= q * total:
            if b == float("inf"):
                return lo_bound
            share = (q * total - lo_count) / max(buckets[b] - lo_count, 1e-12)
            return lo_bound + share * (b - lo_bound)
        lo_bound, lo_count = b, buckets[b]
    return lo_bound


def _scheduler_rss_mib() -> float:
    """RSS of this machine's SeerScheduler replica process (0 when not found)."""
    import psutil

    for proc in psutil.process_iter(["cmdline", "memory_info"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "SeerScheduler" in cmd and proc.info["memory_info"] is not None:
            return float(proc.info["memory_info"].rss) / 2**20
    return 0.0


def _kill_a_replica(rng: random.Random) -> str:
    name = rng.choice(serve_actors("#engine-"))
    kill_serve_actor(name)
    return name


def _send(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        r = httpx.post(f"{url}/v1/rollouts", json=body, timeout=timeout_s)
        if r.status_code == 429 and time.monotonic() < deadline:
            time.sleep(float(r.headers.get("Retry-After", "1")))
            continue
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        out: dict[str, Any] = r.json()
        return out


def soak(
    jobs: int,
    minutes: float,
    kill_every_s: float,
    concurrency: int,
    job_timeout_s: float,
    port: int,
    seed: int = 0,
    say: Any = None,
    service: Any = None,
) -> SoakReport:
    """Run the soak on a local Ray of its own, or on ``service`` (an ``app.serve.local``
    ``LocalService`` already running: its app is deleted at the end, the service kept)."""
    from app.serve.local import LocalService

    report = SoakReport(jobs=jobs)
    bodies = job_bodies(jobs, seed)
    own = service is None
    if service is None:
        service = LocalService(port, num_cpus=2)
    stop = threading.Event()
    try:
        url = service.deploy(APP, timeout_s=900)
        report.scheduler_rss_mib_start = _scheduler_rss_mib()
        t0 = time.monotonic()
        gap = minutes * 60 / max(jobs, 1)  # jobs are spread over the run

        def killer() -> None:
            rng = random.Random(seed)
            while not stop.wait(kill_every_s):
                name = _kill_a_replica(rng)
                report.kills += 1
                if say:
                    say(f"{time.monotonic() - t0:6.0f} s  killed {name.split('#')[1]}")

        def one(i: int) -> None:
            time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
            try:
                answer = _send(url, bodies[i], job_timeout_s)
            except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
                report.bad.append(f"job {i}: {exc}")
                return
            n, lost, dup, problems = check(bodies[i], answer)
            report.responses += n
            report.lost += lost
            report.duplicated += dup
            report.bad += [f"job {i}: {p}" for p in problems]
            report.jobs_done += not (lost or dup or problems)
            if say:
                say(f"{time.monotonic() - t0:6.0f} s  job {i} done: {n} responses")

        kill_thread = threading.Thread(target=killer, daemon=True)
        kill_thread.start()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(jobs)))
        stop.set()
        kill_thread.join(timeout=30)
        report.seconds = time.monotonic() - t0
        report.scheduler_rss_mib_end = _scheduler_rss_mib()
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        report.chunk_p50_s = _quantile(metrics, "seer_chunk_seconds", 0.5)
        report.chunk_p99_s = _quantile(metrics, "seer_chunk_seconds", 0.99)
    finally:
        stop.set()
        if own:
            service.close()
        else:
            service.delete()
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.soak", description=__doc__)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--minutes", type=float, default=10.0, help="the jobs are spread over this")
    p.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    p.add_argument("--concurrency", type=int, default=4, help="jobs in flight at once")
    p.add_argument("--job-timeout", type=float, default=900.0, help="seconds, per job")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    a = p.parse_args(argv)
    if a.jobs < 1 or a.minutes <= 0 or a.kill_every <= 0 or a.concurrency < 1:
        p.error("--jobs and --concurrency must be >= 1, --minutes and --kill-every > 0")
    say = None if a.json else (lambda s: print(s, file=sys.stderr, flush=True))
    r = soak(a.jobs, a.minutes, a.kill_every, a.concurrency, a.job_timeout, a.port, a.seed, say)
    out = {**asdict(r), "ok": r.ok}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>24}: {v}")
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
