"""``seer-lab sim-vs-real``: one real-engine point for the simulator (issue 22, item 5).

1. **Step times**: the config's vLLM engine measured one step at a time on this machine
   (``lab.bench.engine_steps``: batch x context, no drafts (the policies compared here do not
   draft), as many engines at once as the app has replicas, since they share the cores), and a
   cost model fitted to them
   (``lab.calibration.step_fit``, from ``core.sim.cost.VLLM_CPU_FIT_START`` with the engine's
   measured KV capacity and ``max_num_seqs``; ``VLLM_CPU`` holds what it fitted on 2026-12-05).
2. **The real app**: one seeded workload through the Serve app on the config's replicas under
   each policy: the recorded rollouts' prompts (``data/rollouts``, the first ``groups``), G
   responses each, ``max_tokens``, temperature 1, seeded per response.
3. **The simulator**: ``seer simulate`` (``core.sim.report.run_simulation``) on each policy's
   observed lengths and prompts, with the fitted cost model, the app's replica count and chunk
   size. Agreement = simulated / measured makespan, per policy; and each side's speedup over
   ``verl``.

Invariant: the simulator is never fitted to the rollouts it is compared with: its constants come
from the step times alone, measured before the app starts. Each policy is simulated on the lengths
it generated (the same for every policy when no chunk cuts a response, ``chunk_tokens`` >=
``max_tokens``, this command's default; the report says whether they were). Everything is written
to ``--out``: the step measurement, ``cost.json``, ``observed-<policy>.jsonl.gz`` (the recorded
rollout format) and ``report.json``, so that ``seer simulate --workload
replay:OUT/observed-verl.jsonl.gz --cost fit:OUT/cost.json --instances R --chunk-tokens C
--policies verl`` reproduces a row. (``seer simulate`` rebalances requests past 8,192 generated
tokens, the service never does: no response here gets that long, ``max_model_len`` is below.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from lab.bench.engine_steps import Grid

DEFAULT_POLICIES = "verl, divided, context"


@dataclass(frozen=True, slots=True)
class Side:
    """One policy's figures on one side (measured wall time or simulated virtual time)."""

    makespan_s: float
    tail_s: float
    throughput_tok_s: float


@dataclass(frozen=True, slots=True)
class PolicyPoint:
    policy: str
    output_tokens: int
    measured: Side
    simulated: Side

    @property
    def agreement(self) -> float:
        """Simulated over measured makespan (1.0 = the simulator predicted the wall time)."""
        return self.simulated.makespan_s / self.measured.makespan_s


@dataclass(frozen=True, slots=True)
class Report:
    setup: dict[str, Any]
    fit: dict[str, Any]
    same_lengths: bool
    points: dict[str, PolicyPoint]

    def to_json(self) -> dict[str, Any]:
        base = self.points.get("verl")
        out: dict[str, Any] = {
            "setup": self.setup,
            "fit": self.fit,
            "same_lengths": self.same_lengths,
            "policies": {},
        }
        for name, p in self.points.items():
            row: dict[str, Any] = {
                "output_tokens": p.output_tokens,
                "measured": dataclasses.asdict(p.measured),
                "simulated": dataclasses.asdict(p.simulated),
                "agreement": p.agreement,
            }
            if base is not None:
                row["speedup_vs_verl"] = {
                    "measured": base.measured.makespan_s / p.measured.makespan_s,
                    "simulated": base.simulated.makespan_s / p.simulated.makespan_s,
                }
            out["policies"][name] = row
        return out

    def table(self) -> str:
        s = self.setup
        c = self.fit["constants"]
        lines = [
            f"{s['groups']} groups x G={s['group_size']}, max {s['max_tokens']} tokens, T=1, "
            f"seed {s['seed']}; {s['replicas']} {s['backend']} replicas of {s['model']}, "
            f"max_num_seqs {s['max_num_seqs']}, chunk {s['chunk_tokens']}",
            "fitted cost: "
            + ", ".join(f"{k} {v:.4g}" for k, v in c.items())
            + "; rms log error "
            + ", ".join(f"{k} {v:.3f}" for k, v in self.fit["rms_log_error"].items()),
            "same lengths under every policy: " + ("yes" if self.same_lengths else "no"),
            f"{'policy':<10}{'tokens':>8}{'real s':>9}{'sim s':>9}{'sim/real':>10}"
            f"{'real tail':>11}{'sim tail':>10}{'real x verl':>13}{'sim x verl':>12}",
        ]
        doc = self.to_json()["policies"]
        for name, p in self.points.items():
            sp = doc[name].get("speedup_vs_verl")
            xr = f"{sp['measured']:.3f}" if sp else "-"
            xs = f"{sp['simulated']:.3f}" if sp else "-"
            lines.append(
                f"{name:<10}{p.output_tokens:>8}{p.measured.makespan_s:>9.1f}"
                f"{p.simulated.makespan_s:>9.1f}{p.agreement:>10.3f}{p.measured.tail_s:>11.1f}"
                f"{p.simulated.tail_s:>10.1f}{xr:>13}{xs:>12}"
            )
        return "\n".join(lines)


def write_observed(path: Path, prompts: list[list[int]], token_ids: list[list[int]],
                   group_size: int, max_tokens: int) -> None:  # fmt: skip
    """One rollout in the recorded-rollout format (``core.sim.workload.load_recorded``)."""
    if len(token_ids) != len(prompts) * group_size:
        raise ValueError(f"{len(token_ids)} responses for {len(prompts)} prompts x G={group_size}")
    with gzip.open(path, "wt") as fh:
        for g, prompt in enumerate(prompts):
            rows = token_ids[g * group_size : (g + 1) * group_size]
            rec = {
                "prompt_token_ids": prompt,
                "max_tokens": max_tokens,
                "samples": [{"output_token_ids": t} for t in rows],
            }
            fh.write(json.dumps(rec) + "\n")


def run_sim_vs_real(
    config: Path,
    out: Path,
    policies: list[str],
    groups: int,
    group_size: int,
    max_tokens: int,
    max_num_seqs: int,
    chunk_tokens: int | None,
    seed: int,
    port: int,
    steps: Path | None = None,
    grid: Grid | None = None,
    say: Any = print,
) -> Report:
    """See the module invariant. ``steps``: a measurement of ``lab.bench.engine_steps`` to fit
    instead of measuring (JSON: one engine's object or a list of them)."""
    import yaml

    from app.commands.serve import load_serve_file
    from app.config import AppConfig
    from app.data import SMOLLM2_T1
    from core.drafting.recorded import load_groups
    from core.sim.cost import VLLM_CPU_FIT_START, cost_to_json, memory_for_kv
    from core.sim.report import SimulationRequest, run_simulation
    from core.stats import tail_time
    from lab.bench.engine_steps import Measurement, measure_engines
    from lab.bench.service import ServiceBench
    from lab.calibration.step_fit import fit_step_costs

    chunk = chunk_tokens if chunk_tokens is not None else max_tokens
    loaded = load_serve_file(
        config, {"chunk_tokens": chunk, "engine.max_num_seqs": max_num_seqs}
    ).config
    # every policy and the workload checked before anything starts
    configs = {p: AppConfig.model_validate({**loaded.model_dump(), "policy": p}) for p in policies}
    recorded = load_groups(SMOLLM2_T1)
    if not 1 <= groups <= len(recorded):
        raise ValueError(f"groups={groups}: the recorded rollouts have 1..{len(recorded)} prompts")
    if not 1 <= group_size <= 64:
        raise ValueError(f"group_size={group_size} not in 1..64")
    eng = loaded.engine
    if (eng.model, eng.dtype) != ("smollm2-135m-instruct", "float32"):
        raise ValueError(
            f"engine.model={eng.model!r} in {eng.dtype}: the CPU cost model (core.sim.cost."
            "VLLM_CPU) has the shape of smollm2-135m-instruct in float32 only"
        )
    if steps is None and eng.backend != "vllm":
        raise ValueError(
            f"engine.backend={eng.backend!r}: step times are measured on the vllm backend "
            "(or give --steps)"
        )
    prompts = [list(g.prompt) for g in recorded[:groups]]
    longest = max(len(p) for p in prompts) + max_tokens
    if longest > loaded.engine.max_model_len:
        raise ValueError(
            f"max_tokens={max_tokens}: a prompt of {longest - max_tokens} tokens + max_tokens "
            f"exceeds the engine's max_model_len {loaded.engine.max_model_len}"
        )
    out.mkdir(parents=True, exist_ok=True)
    effective = out / "serve_config.yaml"
    doc = yaml.safe_load(config.read_text())
    doc["applications"][0]["args"] = json.loads(loaded.model_dump_json(exclude={"policy"}))
    effective.write_text(yaml.safe_dump(doc, sort_keys=False))

    # 1. step times and the fitted cost model
    if steps is None:
        # no drafts: the compared policies do not draft (and vLLM's n-gram proposer, the only
        # one that drafts without a draft server, runs numba threads that fight the engines'
        # over 2 cores: steps of 0.6-1.5 s, lab/NOTES.md)
        from lab.bench.engine_steps import Grid

        grid = grid or Grid(batches=tuple(sorted({1, 2, 4, 8, max_num_seqs})), drafts=(0,))
        measured = measure_engines(effective, grid, loaded.num_replicas, say=say)
    else:
        raw = json.loads(steps.read_text())
        measured = [Measurement.from_json(m) for m in (raw if isinstance(raw, list) else [raw])]
    (out / "steps.json").write_text(json.dumps([m.to_json() for m in measured]))
    kv = min(m.kv_capacity_tokens for m in measured)
    # half a token more, so that rounding cannot drop the last KV slot
    mem = memory_for_kv(VLLM_CPU_FIT_START.model, kv + 0.5)
    hw = dataclasses.replace(VLLM_CPU_FIT_START.hardware, mem_bytes=mem)
    start = dataclasses.replace(VLLM_CPU_FIT_START, hardware=hw, max_running=max_num_seqs)
    fitted = fit_step_costs([s for m in measured for s in m.samples], start)
    cost_file = out / "cost.json"
    cost_file.write_text(json.dumps(cost_to_json(fitted.cost), indent=2))
    say("fitted: " + json.dumps(fitted.to_json()["constants"]))

    # 2. the real app, each policy once (after an unmeasured warm-up)
    runs: dict[str, Any] = {}
    bench = ServiceBench(port, healthy_timeout_s=900, rollout_timeout_s=7200)
    try:
        say(f"starting {loaded.num_replicas} {loaded.engine.backend} replica(s)")
        bench.deploy(configs[policies[0]], policies[0])
        body = {
            "prompts": prompts,
            "group_size": group_size,
            "max_tokens": max_tokens,
            "sampling": {"temperature": 1.0, "seed": seed},
            "logprobs": False,
            "chat_template": False,
        }
        bench.rollout({**body, "prompts": prompts[:1], "max_tokens": 16})  # warm-up
        for p in policies:
            bench.deploy(configs[p], p)
            t0 = time.monotonic()
            runs[p] = bench.rollout(body)
            say(f"{p}: {max(runs[p].ends):.1f} s, {runs[p].output_tokens} tokens "
                f"({time.monotonic() - t0:.0f} s wall)")  # fmt: skip
    finally:
        bench.close()

    # 3. the simulator on each policy's observed lengths
    points: dict[str, PolicyPoint] = {}
    for p in policies:
        run = runs[p]
        observed = out / f"observed-{p}.jsonl.gz"
        write_observed(observed, prompts, run.token_ids, group_size, max_tokens)
        sim = run_simulation(
            SimulationRequest(
                workload=f"replay:{observed}",
                overrides={"instances": loaded.num_replicas},
                policies=(p,),
                chunk_tokens=chunk,
                cost=f"fit:{cost_file}",
            )
        ).results[p]
        makespan = max(run.ends)
        points[p] = PolicyPoint(
            p,
            run.output_tokens,
            Side(makespan, tail_time(run.ends), run.output_tokens / makespan),
            Side(sim.makespan_s, sim.tail_s, sim.throughput_tok_s),
        )
    lengths = {tuple(runs[p].lengths) for p in policies}
    setup = {
        "backend": loaded.engine.backend,
        "model": loaded.engine.model,
        "replicas": loaded.num_replicas,
        "max_num_seqs": max_num_seqs,
        "chunk_tokens": chunk,
        "groups": groups,
        "group_size": group_size,
        "max_tokens": max_tokens,
        "seed": seed,
        "kv_capacity_tokens": kv,
        "step_engines": len(measured),
        "reproduce": f"seer simulate --workload replay:{out}/observed-POLICY.jsonl.gz --cost "
        f"fit:{cost_file} --instances {loaded.num_replicas} --chunk-tokens {chunk} "
        "--policies POLICY",
    }
    fit_doc = {**fitted.to_json(), "kv_capacity_tokens": kv}
    report = Report(setup, fit_doc, len(lengths) == 1, points)
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2))
    return report


def sim_vs_real(
    config: Annotated[
        Path, typer.Option(help="Serve config whose app and engine are measured")
    ] = Path("serve_config.yaml"),
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder for the measurement, cost.json, observed rollouts, report "
            "(default: ./sim-vs-real-<time>)"
        ),
    ] = None,  # fmt: skip
    policies: Annotated[str, typer.Option(help="comma-separated policies")] = DEFAULT_POLICIES,
    groups: Annotated[int, typer.Option(help="prompts (the recorded rollouts': 1..16)")] = 16,
    group_size: Annotated[int, typer.Option(help="responses per prompt G (1..64)")] = 8,
    max_tokens: Annotated[int, typer.Option(help="generation cap per response")] = 512,
    max_num_seqs: Annotated[
        int, typer.Option(help="requests one replica runs at once (the engine's max_num_seqs)")
    ] = 16,
    chunk_tokens: Annotated[
        int | None,
        typer.Option(
            help="divided policies' chunk size (default: max_tokens, so that no "
            "chunk cuts a response and every policy generates the same tokens)"
        ),
    ] = None,  # fmt: skip
    seed: Annotated[int, typer.Option(help="sampling seed of the rollout")] = 0,
    steps: Annotated[
        Path | None,
        typer.Option(
            help="fit this step measurement (steps.json of an earlier run, or "
            "`python -m lab.bench.engine_steps --out`) instead of measuring"
        ),
    ] = None,  # fmt: skip
    port: Annotated[int, typer.Option(help="HTTP port of the local Serve app")] = 8011,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """The simulator against the real app on this machine: fit a cost model to measured engine
    step times, run one seeded workload through the Serve app under each policy, simulate each
    on the lengths it generated, print simulated / measured makespan per policy (issue 22)."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names or len(set(names)) != len(names):
        typer.echo(f"error: policies={policies!r}: need distinct names", err=True)
        raise typer.Exit(2)
    folder = out or Path(f"sim-vs-real-{time.strftime('%Y%m%d-%H%M%S')}")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        report = run_sim_vs_real(
            config, folder, names, groups, group_size, max_tokens, max_num_seqs, chunk_tokens,
            seed, port, steps=steps, say=say,
        )  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    with contextlib.suppress(BrokenPipeError):
        typer.echo(json.dumps(report.to_json()) if as_json else report.table())
        if not as_json:
            typer.echo(f"written: {folder}/ (report.json, cost.json, observed-*.jsonl.gz)")


def register(cli: typer.Typer) -> None:
    cli.command("sim-vs-real")(sim_vs_real)
