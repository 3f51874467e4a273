"""``seer e2e``: the Serve app with ``sim`` replicas, one workload under several policies in one
run (the policy is switched by reconfiguring the scheduler), beside ``seer simulate``'s figures
for the same workload, policies and scheduler settings.

Invariant: both sides run the same lengths (the sim engines serve the workload ``seer simulate``
draws for the same workload, scale and seed), the same instance count and the same scheduler
base config (the service's ``chunk_tokens``, no rebalancing); the e2e side measures wall time on
real Ray Serve, the simulator virtual time. ``time_scale`` converts: an e2e run that follows the
algorithm the simulator predicts has ``e2e throughput x time_scale`` close to the simulator's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from typing import Annotated, Any

import typer

DEFAULT_POLICIES = "verl, divided, context, seer"


@dataclass(frozen=True, slots=True)
class E2EResult:
    policy: str
    throughput_tok_s: float  # wall
    makespan_s: float  # wall
    tail_s: float  # wall
    requests: int
    output_tokens: int
    sim_throughput_tok_s: float  # virtual
    sim_makespan_s: float  # virtual
    sim_tail_s: float  # virtual


@dataclass(frozen=True, slots=True)
class E2EReport:
    workload: str
    scale: float
    replicas: int
    time_scale: float
    requests: int
    results: dict[str, E2EResult]

    def to_json(self) -> dict[str, Any]:
        base = self.results.get("verl")
        out: dict[str, Any] = {}
        for name, r in self.results.items():
            row: dict[str, Any] = dataclasses.asdict(r)
            del row["policy"]
            row["virtual_throughput_tok_s"] = r.throughput_tok_s * self.time_scale
            if base is not None:
                row["x_verl"] = r.throughput_tok_s / base.throughput_tok_s
                row["sim_x_verl"] = r.sim_throughput_tok_s / base.sim_throughput_tok_s
                row["agreement"] = row["x_verl"] / row["sim_x_verl"]
            out[name] = row
        return {
            "workload": self.workload,
            "scale": self.scale,
            "replicas": self.replicas,
            "time_scale": self.time_scale,
            "requests": self.requests,
            "policies": out,
        }

    def table(self) -> str:
        data = self.to_json()["policies"]
        lines = [
            f"e2e: {self.workload} x{self.scale:g} ({self.requests} requests) on {self.replicas} "
            f"sim replicas, time_scale {self.time_scale:g} (wall s per virtual s)",
            f"{'policy':<10}{'tok/s wall':>11}{'makespan s':>11}{'tail s':>8}{'x verl':>8}"
            f"{'sim tok/s':>11}{'sim x verl':>11}{'e2e/sim':>9}",
        ]
        for name, r in data.items():
            xv = f"{r['x_verl']:.3f}" if "x_verl" in r else "-"
            sx = f"{r['sim_x_verl']:.3f}" if "sim_x_verl" in r else "-"
            ag = f"{r['agreement']:.3f}" if "agreement" in r else "-"
            lines.append(
                f"{name:<10}{r['throughput_tok_s']:>11.0f}{r['makespan_s']:>11.1f}"
                f"{r['tail_s']:>8.1f}{xv:>8}{r['sim_throughput_tok_s']:>11.0f}{sx:>11}{ag:>9}"
            )
        return "\n".join(lines)


def run_e2e(
    workload: str,
    scale: float,
    replicas: int,
    policies: list[str],
    time_scale: float,
    seed: int,
    chunk_tokens: int,
    port: int,
    say: Any = print,
) -> E2EReport:
    """Start Ray + Serve, run each policy on the workload, stop; see the module invariant."""
    import httpx
    import ray
    from ray import serve

    from app.config import AppConfig
    from app.engines.config import SimConfig
    from app.engines.sim_workload import sim_workload
    from app.serve.builder import build_app
    from core.sim.simulator import simulate, tail_time

    sim = SimConfig(workload=workload, scale=scale, seed=seed, time_scale=time_scale)
    w = sim_workload(sim)
    requests = w.groups * w.group_size
    prompts = [w.prompt(g) for g in range(w.groups)]
    args: dict[str, Any] = {
        "num_replicas": replicas,
        "replica_num_cpus": 0.1,
        "chunk_tokens": chunk_tokens,
        "request_timeout_s": 86_400,
        "limits": {
            "max_job_requests": max(requests, 1),
            "max_open_requests": max(requests, 1),
            "max_job_tokens": 2**40,
            "max_open_tokens": 2**40,
        },
        "engine": {
            "backend": "sim",
            "max_model_len": w.max_model_len,
            "max_num_seqs": w.cost.max_running,
            "sim": sim.model_dump(),
        },
    }
    for p in policies:
        AppConfig.model_validate({**args, "policy": p})  # every name checked before Ray starts
    service = AppConfig.model_validate(args).service()
    # the simulator on the same lengths, instance count and scheduler settings
    work = dataclasses.replace(w.work, spec=dataclasses.replace(w.work.spec, instances=replicas))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    results: dict[str, E2EResult] = {}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, timeout=None)
        for policy in policies:
            serve.run(
                build_app({**args, "policy": policy}), name="seer", route_prefix="/", blocking=False
            )
            deadline = time.monotonic() + 600
            while True:
                try:
                    h = client.get("/healthz", timeout=10)
                    if h.status_code == 200 and (h.json()["policy"], h.json()["status"]) == (
                        policy,
                        "ok",
                    ):
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the app did not become healthy with policy {policy}")
                time.sleep(0.5)
            say(f"{policy}: {requests} requests on {replicas} sim replicas ...")
            r = client.post(
                "/v1/rollouts",
                json={
                    "prompts": prompts,
                    "group_size": w.group_size,
                    "max_tokens": w.max_tokens,
                    "logprobs": False,
                    "chat_template": False,
                    "wait": True,
                },
            )
            if r.status_code != 200:
                raise RuntimeError(f"policy {policy}: HTTP {r.status_code}: {r.text[:1000]}")
            resp = [x for g in r.json()["groups"] for x in g["responses"]]
            ends = [x["finished_after_s"] for x in resp]
            tokens = sum(x["length"] for x in resp)
            makespan = max(ends)
            say(f"{policy}: simulating the same workload ...")
            s = simulate(work, w.cost, policy, base=service.scheduler_base())
            results[policy] = E2EResult(
                policy=policy,
                throughput_tok_s=tokens / makespan,
                makespan_s=makespan,
                tail_s=tail_time(ends),
                requests=len(resp),
                output_tokens=tokens,
                sim_throughput_tok_s=s.throughput_tok_s,
                sim_makespan_s=s.makespan_s,
                sim_tail_s=s.tail_s,
            )
    finally:
        serve.shutdown()
        ray.shutdown()
    return E2EReport(workload, scale, replicas, time_scale, requests, results)


def e2e(
    replicas: Annotated[int, typer.Option(min=1, max=64, help="sim engine replicas")] = 8,
    workload: Annotated[
        str, typer.Option(help="moonlight | qwen2-vl | kimi-k2 (Table 3) or replay:FILE")
    ] = "qwen2-vl",
    scale: Annotated[
        float, typer.Option(min=0.0001, max=100, help="multiply the preset's groups by this")
    ] = 0.05,
    policies: Annotated[
        str, typer.Option(help="comma-separated service policies, run in this order")
    ] = DEFAULT_POLICIES,
    time_scale: Annotated[
        float,
        typer.Option(
            min=1e-6, max=100, help="wall seconds per virtual second (>= 0.01 keeps e2e faithful)"
        ),
    ] = 0.02,
    seed: Annotated[int, typer.Option(min=0, help="seed of the workload's lengths")] = 0,
    chunk_tokens: Annotated[int, typer.Option(min=1, help="divided policies: chunk size")] = 1024,
    port: Annotated[int, typer.Option(help="HTTP port of the app")] = 8011,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Run one workload through the real Serve app (sim replicas) under each policy, in one
    run, and print wall-clock throughput, makespan, tail and ratios vs verl beside the
    simulator's figures for the same workload."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        typer.echo("error: --policies is empty", err=True)
        raise typer.Exit(2)

    def say(msg: str) -> None:
        typer.echo(msg, err=True)

    try:
        # Ray's log threads print to stdout; keep stdout for the report (JSON parsers read it)
        with contextlib.redirect_stdout(sys.stderr):
            report = run_e2e(
                workload, scale, replicas, names, time_scale, seed, chunk_tokens, port, say
            )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())


def register(cli: typer.Typer) -> None:
    cli.command("e2e")(e2e)
