"""``seer-lab e2e``: the Serve app with ``sim`` replicas, one workload under several policies in one
run (the policy is switched by reconfiguring the scheduler), beside ``seer simulate``'s figures
for the same workload, policies and scheduler settings.

Invariant: both sides run the same lengths (the sim engines serve the workload ``seer simulate``
draws for the same workload, scale and seed), the same instance count and the same scheduler
base config (the service's ``chunk_tokens``, no rebalancing); the e2e side measures wall time on
real Ray Serve, the simulator virtual time. ``time_scale`` converts: an e2e run that follows the
algorithm the simulator predicts has ``e2e throughput x time_scale`` close to the simulator's.

Iterations (``iterations`` = N > 1): every policy submits the same prompts N times (stable
``prompt_ids`` ``p0..``, ``iteration`` 0..N-1) with the history store on a fresh SQLite file of
its own, so ``context-prior`` reads the lengths its earlier iterations recorded. Iteration e runs
the sim engines at ``SimConfig.epoch`` = e: the prompts' latent lengths are kept and responses
redrawn (``core.sim.workload.epoch_workload``), so a prompt's lengths vary across iterations but
stay correlated, as in RL. The simulator side of iteration e runs the same epoch's lengths, with the
prior (for a policy that uses one) set to exactly the lengths the store held when iteration e was
submitted. Iteration e of every policy runs the same lengths, so ratios compare policies within an
iteration. The report's ``policies`` stay iteration 0's figures.
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
# Draft exchanges every 2 virtual seconds: the service default (50 ms wall) at time_scale 0.1
# would be 0.5 virtual s and ~160 Serve calls/s on 8 replicas, wall CPU the simulator lacks.
SYNC_VIRTUAL_S = 2.0


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
class IterationResult:
    """One policy in one iteration; ``recorded_prompts``: prompts with lengths in the store
    when the iteration was submitted; ``prior_found``: prompts the service's length prior found
    with a recorded history (``seer_length_prior_prompts{result="found"}``, 0 for a policy
    without a prior); ``prior_lengths``: recorded lengths per prompt the prior held (mean)."""

    iteration: int
    result: E2EResult
    recorded_prompts: int
    prior_found: int
    prior_lengths: float


@dataclass(frozen=True, slots=True)
class E2EReport:
    workload: str
    scale: float
    replicas: int
    time_scale: float
    requests: int
    results: dict[str, E2EResult]
    iterations: dict[str, list[IterationResult]] = dataclasses.field(default_factory=dict)

    def iterations_json(self) -> list[dict[str, Any]]:
        """Per iteration, per policy: wall and sim makespan, tail, ratios vs verl of the same
        iteration (throughput; every policy of an iteration runs the same lengths), prior use."""
        count = max((len(v) for v in self.iterations.values()), default=0)
        out: list[dict[str, Any]] = []
        for e in range(count):
            rows = {name: its[e] for name, its in self.iterations.items() if len(its) > e}
            base = rows.get("verl")
            pols: dict[str, Any] = {}
            for name, it in rows.items():
                r = it.result
                row: dict[str, Any] = {
                    "makespan_s": r.makespan_s,
                    "tail_s": r.tail_s,
                    "throughput_tok_s": r.throughput_tok_s,
                    "sim_makespan_s": r.sim_makespan_s,
                    "sim_tail_s": r.sim_tail_s,
                    "sim_throughput_tok_s": r.sim_throughput_tok_s,
                    "virtual_makespan_s": r.makespan_s / self.time_scale,
                    "requests": r.requests,
                    "output_tokens": r.output_tokens,
                    "recorded_prompts": it.recorded_prompts,
                    "prior_found": it.prior_found,
                    "prior_lengths": it.prior_lengths,
                }
                if base is not None:
                    b = base.result
                    row["x_verl"] = r.throughput_tok_s / b.throughput_tok_s
                    row["sim_x_verl"] = r.sim_throughput_tok_s / b.sim_throughput_tok_s
                pols[name] = row
            out.append({"iteration": e, "policies": pols})
        return out

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
        data: dict[str, Any] = {
            "workload": self.workload,
            "scale": self.scale,
            "replicas": self.replicas,
            "time_scale": self.time_scale,
            "requests": self.requests,
            "policies": out,
        }
        if self.iterations:
            data["iterations"] = self.iterations_json()
        return data

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
        if self.iterations:
            lines += [
                "",
                "iterations of the same prompts (store on, fresh per policy; sim epoch = "
                "iteration; x verl of the same iteration; prior: prompts found / mean lengths)",
                f"{'policy':<14}{'iter':>5}{'makespan s':>11}{'tail s':>8}{'x verl':>8}"
                f"{'sim makespan':>13}{'sim tail':>9}{'sim x verl':>11}{'prior':>13}",
            ]
            for it in self.iterations_json():
                for name, r in it["policies"].items():
                    xv = f"{r['x_verl']:.3f}" if "x_verl" in r else "-"
                    sx = f"{r['sim_x_verl']:.3f}" if "sim_x_verl" in r else "-"
                    pr = f"{r['prior_found']} / {r['prior_lengths']:.1f}"
                    lines.append(
                        f"{name:<14}{it['iteration']:>5}{r['makespan_s']:>11.1f}"
                        f"{r['tail_s']:>8.1f}{xv:>8}{r['sim_makespan_s']:>13.0f}"
                        f"{r['sim_tail_s']:>9.0f}{sx:>11}{pr:>13}"
                    )
        return "\n".join(lines)


def _prior_found(metrics_text: str) -> int:
    """``seer_length_prior_prompts_total{result="found"}`` of a ``GET /metrics`` page (0 when
    absent)."""
    for line in metrics_text.splitlines():
        if line.startswith('seer_length_prior_prompts_total{result="found"}'):
            return int(float(line.split()[-1]))
    return 0


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
    iterations: int = 1,
    sync_virtual_s: float = SYNC_VIRTUAL_S,
) -> E2EReport:
    """Start Ray + Serve, run each policy on the workload (``iterations`` times over the same
    prompts, see the module docstring), stop; see the module invariant."""
    import tempfile

    from app.config import AppConfig
    from app.engines.config import SimConfig
    from app.engines.sim.workload import sim_workload
    from core.scheduling import DictLengthPrior, get_policy
    from core.sim.simulator import simulate
    from core.sim.workload import epoch_workload
    from core.stats import tail_time
    from lab.bench.service import ServiceBench

    if iterations < 1:
        raise ValueError(f"iterations={iterations} must be >= 1")
    sim = SimConfig(workload=workload, scale=scale, seed=seed, time_scale=time_scale)
    if iterations > 1 and workload.startswith("replay:"):
        raise ValueError(
            "--iterations > 1 needs a preset workload (replay:FILE has no latent lengths)"
        )
    w = sim_workload(sim)
    requests = w.groups * w.group_size
    prompts = [w.prompt(g) for g in range(w.groups)]
    prompt_ids = [f"p{g}" for g in range(w.groups)]  # the simulator's prompt keys
    args: dict[str, Any] = {
        "num_replicas": replicas,
        "replica_num_cpus": 0.1,
        "chunk_tokens": chunk_tokens,
        "request_timeout_s": 86_400,
        "draft_server": {"sync_period_s": max(0.001, sync_virtual_s * time_scale)},
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
    prior_limit = service.store.prior_limit
    # the simulator on the same lengths, instance count and scheduler settings
    work = dataclasses.replace(w.work, spec=dataclasses.replace(w.work.spec, instances=replicas))
    tmp = tempfile.TemporaryDirectory(prefix="seer-e2e-") if iterations > 1 else None
    bench = ServiceBench(port, num_cpus=2, healthy_timeout_s=600, rollout_timeout_s=86_400)
    results: dict[str, E2EResult] = {}
    per_iter: dict[str, list[IterationResult]] = {}
    try:

        def rollout(policy: str, extra: dict[str, Any]) -> tuple[list[float], int, int]:
            run = bench.rollout(
                {
                    "prompts": prompts,
                    "group_size": w.group_size,
                    "max_tokens": w.max_tokens,
                    "logprobs": False,
                    "chat_template": False,
                    **extra,
                }
            )
            return run.ends, run.output_tokens, len(run.ends)

        def result(policy: str, ends: list[float], tokens: int, n: int, s: Any) -> E2EResult:
            makespan = max(ends)
            return E2EResult(
                policy=policy,
                throughput_tok_s=tokens / makespan,
                makespan_s=makespan,
                tail_s=tail_time(ends),
                requests=n,
                output_tokens=tokens,
                sim_throughput_tok_s=s.throughput_tok_s,
                sim_makespan_s=s.makespan_s,
                sim_tail_s=s.tail_s,
            )

        for policy in policies:
            if iterations == 1:
                bench.deploy({**args, "policy": policy}, policy)
                say(f"{policy}: {requests} requests on {replicas} sim replicas ...")
                ends, tokens, n = rollout(policy, {})
                say(f"{policy}: simulating the same workload ...")
                s = simulate(work, w.cost, policy, base=service.scheduler_base())
                results[policy] = result(policy, ends, tokens, n, s)
                continue
            assert tmp is not None
            from sqlalchemy.exc import OperationalError

            from app.store.reader import StoreReader, StoreUnavailable

            db = f"sqlite:///{tmp.name}/{policy}.db"  # fresh per policy: no shared history
            reader = StoreReader(db)
            uses_prior = get_policy(policy).uses_prior
            per_iter[policy] = []
            try:
                for e in range(iterations):
                    app_args = {
                        **args,
                        "policy": policy,
                        "store": {"enabled": True, "database_url": db},
                        "engine": {**args["engine"], "sim": {**args["engine"]["sim"], "epoch": e}},
                    }
                    bench.deploy(app_args, policy)
                    # what the store holds now (iterations 0..e-1; wait for their last writes)
                    want = min(w.group_size * e, prior_limit)
                    deadline = time.monotonic() + 120
                    while True:
                        try:
                            recorded = reader.recent_lengths_many(prompt_ids, prior_limit)
                        except (StoreUnavailable, OperationalError):  # no file / tables yet
                            recorded = {}
                        short = [k for k in prompt_ids if len(recorded.get(k, [])) < want]
                        if not short:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(
                                f"policy {policy}: iteration {e}: the store holds fewer than "
                                f"{want} lengths for {len(short)} prompts"
                            )
                        time.sleep(0.5)
                    found0 = _prior_found(bench.metrics_text())
                    say(f"{policy}: iteration {e}: {requests} requests on {replicas} replicas ...")
                    ends, tokens, n = rollout(policy, {"prompt_ids": prompt_ids, "iteration": e})
                    found = _prior_found(bench.metrics_text()) - found0
                    say(f"{policy}: iteration {e}: simulating the same lengths ...")
                    we = epoch_workload(work, e, seed)
                    prior = DictLengthPrior({k: v for k, v in recorded.items() if v})
                    s = simulate(
                        we,
                        w.cost,
                        policy,
                        base=service.scheduler_base(),
                        prior=prior if uses_prior else None,
                    )
                    res = result(policy, ends, tokens, n, s)
                    mean_len = sum(len(v) for v in recorded.values()) / len(prompt_ids)
                    per_iter[policy].append(
                        IterationResult(
                            e, res, sum(1 for v in recorded.values() if v), found, mean_len
                        )
                    )
                    if e == 0:
                        results[policy] = res
            finally:
                reader.close()
    finally:
        bench.close()
        if tmp is not None:
            tmp.cleanup()
    return E2EReport(workload, scale, replicas, time_scale, requests, results, per_iter)


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
            min=1e-6,
            max=100,
            help="wall seconds per virtual second. The service's own per-chunk cost (Ray calls, "
            "draft exchanges; 2 cores) is wall time the simulator does not have, so a small value "
            "understates chunked policies (0.02: context 0.68-0.89x of its simulated ratio; 0.1: "
            "every policy within 10% at --scale 0.05; the paper's load, --scale 0.5, needs 0.3)",
        ),
    ] = 0.1,
    seed: Annotated[int, typer.Option(min=0, help="seed of the workload's lengths")] = 0,
    chunk_tokens: Annotated[int, typer.Option(min=1, help="divided policies: chunk size")] = 1024,
    port: Annotated[int, typer.Option(help="HTTP port of the app")] = 8011,
    iterations: Annotated[
        int,
        typer.Option(
            min=1,
            max=100,
            help="submit the same prompts this many times per policy (store on, fresh SQLite per "
            "policy; sim lengths redrawn per iteration around each prompt's latent length)",
        ),
    ] = 1,
    sync_virtual_s: Annotated[
        float,
        typer.Option(
            min=0.001,
            max=600,
            help="draft exchanges every this many virtual seconds (sync_period_s = this x "
            "time_scale): the staleness of siblings' progress, small beside a chunk's decode "
            "time (a 1,024-token chunk runs ~40 virtual s on qwen2-vl)",
        ),
    ] = SYNC_VIRTUAL_S,
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
                workload,
                scale,
                replicas,
                names,
                time_scale,
                seed,
                chunk_tokens,
                port,
                say,
                iterations,
                sync_virtual_s,
            )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())


def register(cli: typer.Typer) -> None:
    cli.command("e2e")(e2e)
