"""Offline replay of drafting methods on recorded group rollouts (the ``replay`` benchmark).

Invariant (lockstep protocol, DESIGN.md): all G siblings start together; before any request
drafts at position t, exactly the tokens at positions < t of every sibling (and of itself) have
been appended, none later. A request at position t drafts, accepts the longest draft path equal
to its recorded tokens from t, and advances by accepted + 1 (never past its end): one step.
Acceptance length = output tokens / steps over all requests (1.0 = no speculation).

``references`` protocol (paper's Table 2): request i sees the prompt, its own tokens as they
come, and ``n`` *finished* siblings in full (the first n others in file order).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.drafting.recorded import RecordedGroup
from core.drafting.speculate import SpeculationParams
from lab.bench.draft_methods import ReplayDrafter, method_factory

PROTOCOLS = ("lockstep", "references")
# scoring of every suffix method unless a caller passes its own (max_tokens/width are per method)
DEFAULT_SCORING = SpeculationParams()


@dataclass(slots=True)
class Tally:
    """Token-weighted totals of one (method, k) over any number of requests."""

    tokens: int = 0
    steps: int = 0
    draft_tokens: int = 0

    def add(self, other: Tally) -> None:
        self.tokens += other.tokens
        self.steps += other.steps
        self.draft_tokens += other.draft_tokens

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 1.0

    @property
    def draft_tokens_per_step(self) -> float:
        return self.draft_tokens / self.steps if self.steps else 0.0


@dataclass(slots=True)
class _Runner:
    """One (method, k) on one group: each request's position and its tally."""

    k: int
    positions: list[int]
    tally: Tally = field(default_factory=Tally)


def _step(drafter: ReplayDrafter, runner: _Runner, i: int, out: Sequence[int], t: int) -> None:
    d = drafter.draft(i, runner.k)
    remaining = len(out) - t
    accepted = d.accepted_length(out[t : t + min(len(d), remaining)]) if len(d) else 0
    runner.positions[i] = t + min(accepted + 1, remaining)
    runner.tally.steps += 1
    runner.tally.draft_tokens += len(d)


def replay_lockstep(
    group: RecordedGroup,
    methods: Sequence[str],
    ks: Sequence[int],
    scoring: SpeculationParams = DEFAULT_SCORING,
) -> dict[str, dict[int, Tally]]:
    """Lockstep replay of every (method, k) on one group."""
    outs = group.outputs
    g = len(outs)
    result: dict[str, dict[int, Tally]] = {}
    max_len = max(len(o) for o in outs)
    for name in methods:
        drafter = method_factory(name)(group.prompt, g, scoring)
        runners = [_Runner(k, [0] * g) for k in ks]
        for t in range(max_len):
            for r in runners:
                pos = r.positions
                for i in range(g):
                    if pos[i] == t and t < len(outs[i]):
                        _step(drafter, r, i, outs[i], t)
            for i in range(g):
                if t < len(outs[i]):
                    drafter.append(i, outs[i][t])
        result[name] = {}
        for r in runners:
            r.tally.tokens = sum(len(o) for o in outs)
            result[name][r.k] = r.tally
    return result


def replay_references(
    group: RecordedGroup,
    methods: Sequence[str],
    ks: Sequence[int],
    n_refs: int,
    scoring: SpeculationParams = DEFAULT_SCORING,
) -> dict[str, dict[int, Tally]]:
    """Each request drafts with ``n_refs`` finished siblings (first n others) fed in full."""
    outs = group.outputs
    g = len(outs)
    if not 0 <= n_refs <= g - 1:
        raise ValueError(f"n_refs must be in [0, {g - 1}] for group {group.group_id}, got {n_refs}")
    result: dict[str, dict[int, Tally]] = {name: {k: Tally() for k in ks} for name in methods}
    for name in methods:
        factory = method_factory(name)
        for i in range(g):
            refs = [j for j in range(g) if j != i][:n_refs]
            out = outs[i]
            # drafter slots: 0 = the request itself, 1..n = its finished references
            drafter = factory(group.prompt, 1 + n_refs, scoring)
            for slot, j in enumerate(refs, 1):
                for tok in outs[j]:
                    drafter.append(slot, tok)
            runners = [_Runner(k, [0]) for k in ks]
            for t in range(len(out)):
                for r in runners:
                    if r.positions[0] == t:
                        _step(drafter, r, 0, out, t)
                drafter.append(0, out[t])
            for r in runners:
                r.tally.tokens = len(out)
                result[name][r.k].add(r.tally)
    return result


@dataclass(frozen=True, slots=True)
class SpeedFigures:
    append_us_per_token: float
    speculate_us: float


def measure_speed(
    group: RecordedGroup,
    method: str,
    k: int = 8,
    scoring: SpeculationParams = DEFAULT_SCORING,
    repeats: int = 3,
) -> SpeedFigures:
    """Time ``method`` on ``group``: lockstep appends, and one draft per live request per position.

    Each figure is the best (lowest) per-call mean of ``repeats`` runs, as ``timeit`` advises:
    the machine is shared, and slower runs measure the neighbours, not the code.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    outs = group.outputs
    g = len(outs)
    max_len = max(len(o) for o in outs)
    clock = time.perf_counter
    best_append = best_spec = math.inf
    for _ in range(repeats):
        drafter = method_factory(method)(group.prompt, g, scoring)
        append_s = spec_s = 0.0
        calls = 0
        for t in range(max_len):
            live = [i for i in range(g) if t < len(outs[i])]
            t0 = clock()
            for i in live:
                drafter.draft(i, k)
            t1 = clock()
            for i in live:
                drafter.append(i, outs[i][t])
            t2 = clock()
            spec_s += t1 - t0
            append_s += t2 - t1
            calls += len(live)
        best_append = min(best_append, append_s / calls * 1e6)
        best_spec = min(best_spec, spec_s / calls * 1e6)
    return SpeedFigures(best_append, best_spec)
