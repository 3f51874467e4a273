"""Scaling benchmark of the simulator: its own run time as the workload grows.

Invariant: every row simulates one policy on a preset scaled by ``scale`` (``scale`` x the
groups and the instances, so the same load per instance and the same events per request), and
reports the time the simulation took next to the work it simulated. A simulator whose cost is
linear in its work shows a constant time per request (and per simulated token) down the rows;
time per request x instance then falls as 1 / instances. Wall time on a shared machine moves
with its load; ``cpu_s`` (this process's CPU time) is the steadier figure.

Run: ``python -m lab.bench.sim_scaling --scales 0.25,0.5,1,2,4 --policies verl,context,seer``
(``--json`` for one JSON list of rows).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.sim.report import SimulationRequest, build_workload, run_simulation

COLUMNS = (
    "scale",
    "requests",
    "instances",
    "policy",
    "chunks",
    "wall_s",
    "cpu_s",
    "us_per_request",
    "us_per_request_instance",
    "ns_per_token",
    "makespan_s",
)


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One policy at one scale; times in seconds of this machine, makespan in virtual ones."""

    workload: str
    scale: float
    policy: str
    requests: int
    instances: int
    chunks: int
    tokens: int  # output tokens simulated
    wall_s: float
    cpu_s: float
    makespan_s: float

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.wall_s / self.requests

    @property
    def us_per_request_instance(self) -> float:
        return 1e6 * self.wall_s / (self.requests * self.instances)

    @property
    def ns_per_token(self) -> float:
        return 1e9 * self.wall_s / self.tokens

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        for name in ("us_per_request", "us_per_request_instance", "ns_per_token"):
            out[name] = getattr(self, name)
        return out


def run_bench(
    scales: Sequence[float],
    policies: Sequence[str],
    workload: str = "qwen2-vl",
    seed: int = 0,
) -> list[BenchRow]:
    """Simulate each policy at each scale; the times are the simulation's own (``simulate``),
    without drawing the workload."""
    if not scales or not policies:
        raise ValueError("need at least one scale and one policy")
    rows: list[BenchRow] = []
    for scale in scales:
        for policy in policies:
            req = SimulationRequest(workload=workload, scale=scale, policies=(policy,), seed=seed)
            report = run_simulation(req)
            r = report.results[policy]
            p = report.params
            rows.append(
                BenchRow(
                    workload=workload,
                    scale=scale,
                    policy=policy,
                    requests=int(p["requests"]),  # type: ignore[call-overload]
                    instances=int(p["instances"]),  # type: ignore[call-overload]
                    chunks=r.chunks,
                    tokens=int(p["total_tokens"]),  # type: ignore[call-overload]
                    wall_s=r.wall_s,
                    cpu_s=r.cpu_s,
                    makespan_s=r.makespan_s,
                )
            )
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """Markdown table, one row per (scale, policy), columns ``COLUMNS``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = (
            f"{r.scale:g}",
            f"{r.requests:,}",
            f"{r.instances}",
            r.policy,
            f"{r.chunks:,}",
            f"{r.wall_s:.2f}",
            f"{r.cpu_s:.2f}",
            f"{r.us_per_request:.0f}",
            f"{r.us_per_request_instance:.2f}",
            f"{r.ns_per_token:.1f}",
            f"{r.makespan_s:,.0f}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workload", default="qwen2-vl", help="preset name")
    ap.add_argument("--scales", type=_floats, default=[0.25, 0.5, 1.0, 2.0], help="e.g. 0.5,1,2")
    ap.add_argument("--policies", default="verl,context,seer", help="comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON list of rows")
    args = ap.parse_args(argv)
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    for s in args.scales:  # refuse a bad preset or scale before any long run
        build_workload(SimulationRequest(workload=args.workload, scale=s, policies=tuple(names)))
    rows = run_bench(args.scales, names, args.workload, args.seed)
    if args.json:
        print(json.dumps([r.to_json() for r in rows]))
    else:
        print(format_table(rows))


if __name__ == "__main__":
    main()
