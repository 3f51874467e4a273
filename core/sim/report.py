"""The ``simulate`` benchmark: build a workload, run policies, report (JSON contract + table).

Invariant: every policy of one report runs on the *same* drawn workload and cost model, so
their figures differ only by policy; the JSON shape is a contract other tools parse:
``{"workload": {...}, "policies": {name: {throughput_tok_s, makespan_s, tail_s,
lower_bound_s, spec_lower_bound_s, preemptions, mean_acceptance_length,
drafting_acceptance_length, spec_step_cost_ratio, spec_step_share}}}``.
``lower_bound_s``: no schedule finishes sooner without speculation; ``spec_lower_bound_s``:
none finishes sooner speculating within the adaptive draft policy's limits at the best
acceptance (null for a policy that does not speculate; both bounds in
``core.sim.lower_bound``); ``mean_acceptance_length``: tau, tokens per request per step, 1.0
without speculation; ``drafting_acceptance_length``: the same over the request-steps that
verified drafts only (1.0 when none did); ``spec_step_cost_ratio``: mean over the steps that
verified drafts of their time over the same step without drafts, 1.0 when none did;
``spec_step_share``: the fraction of steps that did.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.scheduling import POLICIES, SchedulerConfig
from core.sim.acceptance import get_acceptance
from core.sim.cost import CostModel, cost_from_json, with_ranks
from core.sim.simulator import PolicyResult, simulate
from core.sim.workload import Workload, generate, get_cost, get_preset, load_recorded

_SPEC_FIELDS = (
    "groups",
    "group_size",
    "mean_tokens",
    "max_tokens",
    "instances",
    "length_sigma",
    "within_sigma",
    "outlier_frac",
    "runaway_groups",
)


@dataclass(frozen=True, slots=True)
class SimulationRequest:
    """What to simulate. ``workload``: a preset name or ``replay:FILE``; ``overrides``: spec
    fields (``_SPEC_FIELDS``) replacing the preset's; ``scale`` in (0, 100]; ``policies``: names
    in ``core.scheduling.POLICIES`` (distinct, >= 1); ``chunk_tokens``: None = scheduler default;
    ``acceptance``: see ``core.sim.acceptance.get_acceptance``; ``ranks``: data-parallel
    attention ranks per instance (>= 1, dividing its GPUs; 1 pools the instance's KV; None =
    the cost model's own, e.g. kimi-k2's 32), each with its own KV, 1/ranks of the instance's
    ``max_running`` and its own draft budget;
    ``cost``: None = the workload preset's cost model (qwen2-vl's for a replay), else a name of
    ``core.sim.workload.get_cost`` (a preset's, or ``vllm-cpu``) or ``fit:FILE`` (a cost model
    as JSON, ``core.sim.cost.cost_to_json``: what ``seer-lab sim-vs-real`` fits and writes)."""

    workload: str = "qwen2-vl"
    overrides: dict[str, float | int] = field(default_factory=dict)
    scale: float = 1.0
    policies: tuple[str, ...] = ("verl", "divided", "context", "seer", "oracle")
    seed: int = 0
    chunk_tokens: int | None = None
    acceptance: str = "paper-1path"
    trace: bool = False
    ranks: int | None = None
    cost: str | None = None

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("no policies to simulate")
        bad = [p for p in self.policies if p not in POLICIES]
        if bad:
            raise ValueError(f"unknown policies {bad}; valid: {sorted(POLICIES)}")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"duplicate policies in {list(self.policies)}")
        unknown = sorted(set(self.overrides) - set(_SPEC_FIELDS))
        if unknown:
            raise ValueError(f"unknown workload fields {unknown}; valid: {list(_SPEC_FIELDS)}")
        if self.seed < 0:
            raise ValueError(f"seed={self.seed} < 0")
        if self.ranks is not None and self.ranks < 1:
            raise ValueError(f"ranks={self.ranks} < 1")


@dataclass(frozen=True, slots=True)
class SimulationReport:
    workload: Workload
    cost: CostModel
    params: dict[str, object]
    results: dict[str, PolicyResult]

    def to_json(self) -> dict[str, object]:
        return {
            "workload": self.params,
            "policies": {
                name: {
                    "throughput_tok_s": r.throughput_tok_s,
                    "makespan_s": r.makespan_s,
                    "tail_s": r.tail_s,
                    "lower_bound_s": r.lower_bound_s,
                    "spec_lower_bound_s": r.spec_lower_bound_s,
                    "preemptions": r.preemptions,
                    "mean_acceptance_length": r.mean_acceptance_length,
                    "drafting_acceptance_length": r.drafting_acceptance_length,
                    "spec_step_cost_ratio": r.spec_step_cost_ratio,
                    "spec_step_share": r.spec_step_share,
                }
                for name, r in self.results.items()
            },
        }

    def table(self) -> str:
        p = self.params
        head = (
            f"workload {p['name']}: {p['groups']} groups x G={p['group_size']} "
            f"({p['requests']} requests), mean {p['mean_tokens_drawn']:.0f} / max "
            f"{p['max_tokens']} tokens, {p['instances']} instances, sigma {p['length_sigma']} / "
            f"within {p['within_sigma']}, chunk {p['chunk_tokens']}, seed {p['seed']}"
        )
        if p.get("paper_verl_s"):
            head += f"\npaper veRL time at full scale: {p['paper_verl_s']:.0f} s"
        base = self.results.get("verl")
        best = self.results.get("oracle")
        cols = (
            f"{'policy':<12}{'tok/s':>10}{'x verl':>8}{'makespan s':>12}{'x oracle':>10}"
            f"{'tail s':>9}{'tail/verl':>10}{'bound s':>9}{'x bound':>9}{'preempt':>9}{'tau':>6}"
            f"{'spec x':>8}"
        )
        lines = [head, cols]
        for name, r in self.results.items():
            xv = f"{r.throughput_tok_s / base.throughput_tok_s:.2f}" if base else "-"
            xo = f"{r.makespan_s / best.makespan_s:.3f}" if best else "-"
            tv = f"{r.tail_s / base.tail_s:.1%}" if base and base.tail_s > 0 else "-"
            # a speculating policy is held to its own bound
            bound = r.spec_lower_bound_s if r.spec_lower_bound_s is not None else r.lower_bound_s
            lines.append(
                f"{name:<12}{r.throughput_tok_s:>10.0f}{xv:>8}{r.makespan_s:>12.0f}{xo:>10}"
                f"{r.tail_s:>9.0f}{tv:>10}{bound:>9.0f}{r.makespan_s / bound:>9.3f}"
                f"{r.preemptions:>9}"
                f"{r.mean_acceptance_length:>6.2f}{r.spec_step_cost_ratio:>8.2f}"
            )
        return "\n".join(lines)


def build_workload(req: SimulationRequest) -> tuple[Workload, CostModel, float | None]:
    """(workload, cost model, paper veRL seconds or None) for a request."""
    if req.workload.startswith("replay:"):
        inst = int(req.overrides.get("instances", 1))
        work = load_recorded(req.workload[len("replay:") :], instances=inst)
        if set(req.overrides) - {"instances"}:
            raise ValueError("replay workloads take only --instances among the shape flags")
        cost = _cost(req.cost or "qwen2-vl")
        return work, with_ranks(cost, req.ranks), None
    preset = get_preset(req.workload)
    spec = dataclasses.replace(preset.spec, **req.overrides)  # type: ignore[arg-type]
    if req.scale != 1.0:
        spec = spec.scaled(req.scale)
    cost = preset.cost if req.cost is None else _cost(req.cost)
    paper = preset.paper_verl_s if req.cost is None else None
    return generate(spec, req.seed), with_ranks(cost, req.ranks), paper


def _cost(name: str) -> CostModel:
    """A cost preset's name, or ``fit:FILE`` (a cost model as JSON)."""
    if not name.startswith("fit:"):
        return get_cost(name)
    path = Path(name[len("fit:") :])
    try:
        return cost_from_json(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"cost {name!r}: {exc}") from None


def run_simulation(
    req: SimulationRequest, progress: Callable[[int, float], None] | None = None
) -> SimulationReport:
    """Run every requested policy on one workload. ``progress(policy_index, fraction)``."""
    work, cost, paper = build_workload(req)
    base = SchedulerConfig()
    if req.chunk_tokens is not None:
        base = dataclasses.replace(base, chunk_tokens=req.chunk_tokens)
    acc = get_acceptance(req.acceptance, work.spec.group_size)
    results: dict[str, PolicyResult] = {}
    for i, name in enumerate(req.policies):
        cb = None
        if progress is not None:
            cb = (lambda idx: lambda f: progress(idx, f))(i)
        results[name] = simulate(
            work, cost, name, base=base, acceptance=acc, trace=req.trace, progress=cb
        )
        if progress is not None:
            progress(i, 1.0)
    s = work.spec
    lens = [x for g in work.lengths for x in g]
    params: dict[str, object] = {
        "name": s.name,
        "groups": s.groups,
        "group_size": s.group_size,
        "requests": s.requests,
        "mean_tokens": s.mean_tokens,
        "max_tokens": s.max_tokens,
        "instances": s.instances,
        "length_sigma": s.length_sigma,
        "within_sigma": s.within_sigma,
        "outlier_frac": s.outlier_frac,
        "runaway_groups": s.runaway_groups,
        "prompt_tokens": s.prompt_tokens,
        "scale": req.scale,
        "seed": req.seed,
        "chunk_tokens": base.chunk_tokens,
        "routing": base.routing,
        "acceptance": acc.source,
        "total_tokens": sum(lens),
        "mean_tokens_drawn": sum(lens) / len(lens),
        "longest_tokens": max(lens),
        "kv_capacity_tokens": cost.kv_capacity_tokens,
        "max_running": cost.max_running,
        "model": cost.model.name,
        "gpus_per_instance": cost.gpus,
        "ranks_per_instance": cost.ranks,
        "paper_verl_s": paper,
    }
    return SimulationReport(workload=work, cost=cost, params=params, results=results)
