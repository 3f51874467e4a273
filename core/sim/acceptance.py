"""Acceptance model for simulated speculative decoding.

Invariant: a request's per-token acceptance rate depends only on how many siblings already
have text past its position (``refs``, counted by ``is_reference``); it rises monotonically
from ``alpha_none`` (no sibling text: the request's own suffix tree and the prompt) to
``alpha_full`` at ``full_refs`` siblings, in log(1 + refs) (each extra sibling adds less). A
draft of g tokens then yields (1 - a^(g+1)) / (1 - a) tokens per verification step (bonus
token included), and costs ``paths`` x g verified draft tokens: a k-path draft pays for every
path, whichever is accepted.

Calibrations (never numbers beyond their sources):
- ``paper-1path`` (the default: one linear draft chain, what vLLM 0.32 verifies): the paper's
  Table 2 mean acceptance lengths (incl. bonus) 1.70 with no sibling references and 2.53 with 15,
  read as measured at the draft budget g_max = 8; a is solved from (1 - a^9) / (1 - a) = length.
- ``paper``: the same with Table 2's 4-path figure at 15 references (2.85), charged 4 x g draft
  tokens (a tree vLLM 0.32 cannot verify; kept to measure what multi-path would be worth).
- ``replay:FILE``: the same fit from the JSON of ``seer-lab replay --json`` on recorded rollouts
  (its budget counts every token of a tree draft, so a fitted draft of g costs g tokens).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

PAPER_NO_REFS = 1.70
PAPER_15_REFS = 2.53
PAPER_15_REFS_4_PATHS = 2.85
PAPER_DRAFT_BUDGET = 8
PAPER_PATHS = 4


def is_reference(sibling_generated: int, position: int, finished: bool) -> bool:
    """Whether a sibling can supply draft text to a request at ``position``: it has finished, or
    it has generated more than ``position`` tokens (a sibling that has not yet reached the
    request, e.g. one with no token at all for a first chunk, holds nothing to draft from)."""
    return finished or sibling_generated > position


def tokens_per_step(a: float, g: int) -> float:
    """Expected tokens per verification step with acceptance ``a`` and draft length ``g``."""
    if g <= 0:
        return 1.0
    if a >= 1.0:
        return float(g + 1)
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def solve_alpha(length: float, g: int) -> float:
    """Per-token acceptance a with tokens_per_step(a, g) == length (1 <= length < g + 1)."""
    if not 1.0 <= length < g + 1:
        raise ValueError(f"acceptance length {length} outside [1, {g + 1}) for draft length {g}")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if tokens_per_step(mid, g) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class AcceptanceModel:
    """Bounds: 0 <= ``alpha_none`` <= ``alpha_full`` < 1; ``full_refs`` >= 1; ``paths`` in
    1..16 (draft paths verified per request: a draft of g positions costs ``paths`` x g
    tokens)."""

    source: str
    alpha_none: float
    alpha_full: float
    full_refs: int
    paths: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha_none <= self.alpha_full < 1.0:
            raise ValueError(
                f"need 0 <= alpha_none={self.alpha_none} <= alpha_full={self.alpha_full} < 1"
            )
        if self.full_refs < 1:
            raise ValueError(f"full_refs={self.full_refs} < 1")
        if not 1 <= self.paths <= 16:
            raise ValueError(f"paths={self.paths} outside [1, 16]")

    def alpha(self, refs: int) -> float:
        """Per-token acceptance with ``refs`` siblings' text at the request's position."""
        frac = min(1.0, math.log1p(max(refs, 0)) / math.log1p(self.full_refs))
        return self.alpha_none + (self.alpha_full - self.alpha_none) * frac


def paper_model(multi_path: bool = False) -> AcceptanceModel:
    """Fit to Table 2: one path (default), or ``multi_path``: the 4-path figure at 15
    references, charged for its 4 paths."""
    full = PAPER_15_REFS_4_PATHS if multi_path else PAPER_15_REFS
    return AcceptanceModel(
        source="paper" + ("" if multi_path else "-1path"),
        alpha_none=solve_alpha(PAPER_NO_REFS, PAPER_DRAFT_BUDGET),
        alpha_full=solve_alpha(full, PAPER_DRAFT_BUDGET),
        full_refs=15,
        paths=PAPER_PATHS if multi_path else 1,
    )


def replay_model(path: str | Path, group_size: int | None = None) -> AcceptanceModel:
    """Fit from ``seer-lab replay --json`` at draft budget 8 when measured, else the largest.

    With the ``references`` protocol (labels ``method@n=N``): the best grouped method's rows at
    n=0 and at the largest n. With ``lockstep``: ``suffix-self`` (no siblings) and the best
    ``grouped*`` method (all G-1 siblings, multi-path if measured, like the paper's 4 paths).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        methods = data["methods"]
        if not isinstance(methods, dict):
            raise TypeError("'methods' is not an object")
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{p}: not the JSON of `seer-lab replay --json` ({exc})") from exc

    def budget(row: dict[str, dict[str, float]]) -> str:
        ks = sorted(int(k) for k in row)
        return str(8 if 8 in ks else ks[-1])

    def length(row: dict[str, dict[str, float]]) -> float:
        return float(row[budget(row)]["acceptance_length"])

    refs: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    for label, row in methods.items():
        name, sep, n = label.partition("@n=")
        if sep and name.startswith("grouped"):
            refs.setdefault(name, {})[int(n)] = row
    usable = {m: rows for m, rows in refs.items() if 0 in rows and len(rows) >= 2}
    grouped = [m for m in methods if m.startswith("grouped") and "@n=" not in m]
    if usable:
        best = max(usable, key=lambda m: length(usable[m][max(usable[m])]))
        full_refs = max(usable[best])
        none_row, full_row = usable[best][0], usable[best][full_refs]
    elif "suffix-self" in methods and grouped:
        best = max(grouped, key=lambda m: length(methods[m]))
        none_row, full_row = methods["suffix-self"], methods[best]
        full_refs = (group_size or 16) - 1
    else:
        raise ValueError(
            f"{p}: needs rows grouped@n=0 and grouped@n=N, or suffix-self and grouped; "
            f"has {sorted(methods)}"
        )
    k = int(budget(full_row))

    def fit(row: dict[str, dict[str, float]]) -> float:
        return solve_alpha(float(row[str(k)]["acceptance_length"]), k)

    a0, a1 = fit(none_row), fit(full_row)
    return AcceptanceModel(
        source=f"replay:{p.name}:{best}", alpha_none=min(a0, a1), alpha_full=a1,
        full_refs=max(full_refs, 1),
    )  # fmt: skip


def get_acceptance(name: str, group_size: int | None = None) -> AcceptanceModel:
    """``paper-1path`` (one path, the default), ``paper`` (4 paths) or ``replay:FILE``."""
    if name == "paper":
        return paper_model(True)
    if name == "paper-1path":
        return paper_model(False)
    if name.startswith("replay:"):
        return replay_model(name[len("replay:") :], group_size)
    raise ValueError(
        f"unknown acceptance calibration {name!r}; valid: paper, paper-1path, replay:FILE"
    )
