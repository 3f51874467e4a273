"""CPU cost of sim engines: ``python -m lab.bench.sim_engine_cpu [--engines 8] [--concurrency 64]``.

N sim engines in one event loop, each kept at ``concurrency`` running requests (a finished
response is replaced at once, its next chunk sent as soon as the previous one returns) for
``seconds`` of wall time (then everything is aborted), with ``time_scale`` chosen so that one
decode step at that batch takes ``step_ms``. Prints the process CPU time per wall second
(1.0 = one core busy; the client's requests included), tokens and chunks per second and the
instance events per second.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from app.engines.config import EngineConfig, SimConfig
from app.engines.sim.engine import SimEngine
from app.engines.sim.workload import sim_workload
from core.engine import ChunkRequest


async def _drive(engine: SimEngine, concurrency: int, chunk: int, tag: str) -> tuple[int, int]:
    work = engine.workload
    cap = work.max_tokens
    tokens = chunks = 0

    async def lane(lane_id: int) -> None:
        nonlocal tokens, chunks
        n = 0
        while engine._inst is not None:  # until shutdown
            g, j = divmod(lane_id * 1009 + n, work.group_size)
            prompt = work.prompt(g % work.groups)
            generated: list[int] = []
            rid = f"{tag}-{lane_id}-{n}"
            while engine._inst is not None:
                req = ChunkRequest(
                    request_id=rid,
                    group_id=f"g{g}",
                    response_index=j,
                    prompt_token_ids=prompt,
                    generated_token_ids=generated,
                    chunk_cap=chunk,
                    max_tokens=cap,
                )
                res = await engine.run_chunk(req)
                generated = generated + res.token_ids
                tokens += len(res.token_ids)
                chunks += 1
                if res.finished or res.finish_reason.value == "abort":
                    break
            n += 1

    await asyncio.gather(*(lane(i) for i in range(concurrency)))
    return tokens, chunks


async def bench(engines: int, concurrency: int, step_ms: float, seconds: float, chunk: int) -> str:
    sim = SimConfig(workload="qwen2-vl", scale=0.1)
    work = await asyncio.to_thread(sim_workload, sim)
    mean_ctx = work.work.spec.prompt_tokens + work.work.spec.mean_tokens / 2
    step_s = work.cost.step_time(concurrency, concurrency * mean_ctx)
    sim = sim.model_copy(update={"time_scale": step_ms / 1000 / step_s})
    cfg = EngineConfig(backend="sim", max_model_len=work.max_model_len, sim=sim)
    es = [SimEngine(cfg, f"e{i}") for i in range(engines)]
    for e in es:
        await e.start()
    c0, t0 = time.process_time(), time.perf_counter()
    lanes = asyncio.gather(*(_drive(e, concurrency, chunk, f"e{i}") for i, e in enumerate(es)))
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    events = sum(e._inst.version for e in es if e._inst is not None)
    for e in es:
        await e.shutdown()  # aborts every chunk: the lanes end
    out = await lanes
    tok = sum(t for t, _ in out)  # incl. the tokens of the aborted chunks
    chk = sum(c for _, c in out)
    return (
        f"{engines} engines x {concurrency} requests, chunk {chunk}, step ~{step_ms:g} ms "
        f"(time_scale {sim.time_scale:.3g}): CPU {cpu / wall:.3f} core over {wall:.1f} s; "
        f"{tok / wall:,.0f} tok/s, {chk / wall:,.0f} chunks/s, {events / wall:,.0f} events/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--chunk", type=int, default=1024, help="new tokens per chunk")
    a = ap.parse_args()
    print(asyncio.run(bench(a.engines, a.concurrency, a.step_ms, a.seconds, a.chunk)))


if __name__ == "__main__":
    main()
