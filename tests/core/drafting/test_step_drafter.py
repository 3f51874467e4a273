"""StepDrafter: what a vLLM proposer runs each step, driven by a small greedy engine model.

The engine model decodes fixed target texts; a row's draft is verified against its target (the
accepted prefix plus one bonus token are appended, as a lossless verifier does) and the clock
advances by a linear step cost, so acceptance and step time are exact and known to the test."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from core.drafting.step_drafter import DraftCounts, DraftSettings, RowView, StepDrafter

PROMPT = [1, 2, 3, 4]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Row:
    row_id: str
    group_id: str
    request_id: str
    target: list[int]
    text: list[int] = field(default_factory=lambda: list(PROMPT))
    is_probe: bool = False
    verified: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per step

    @property
    def done(self) -> bool:
        return len(self.text) - len(PROMPT) >= len(self.target)


class Engine:
    def __init__(self, drafter: StepDrafter, cost: tuple[float, float, float]) -> None:
        self.drafter = drafter
        self.cost = cost
        self.rows: dict[str, Row] = {}
        self.draft_steps = 0  # steps in which any row drafted

    def add(self, row: Row) -> Row:
        self.rows[row.row_id] = row
        return row

    def step(self, max_draft: int = 64) -> list[list[int]]:
        rows = [r for r in self.rows.values() if not r.done]
        views = [
            RowView(
                row_id=r.row_id,
                group_id=r.group_id,
                request_id=r.request_id,
                prompt_len=len(PROMPT),
                text=r.text,
                max_draft=min(max_draft, len(r.target) - (len(r.text) - len(PROMPT)) - 1),
                is_probe=r.is_probe,
            )
            for r in rows
        ]
        drafts = self.drafter.step(views)
        for r, d in zip(rows, drafts, strict=True):
            pos = len(r.text) - len(PROMPT)
            acc = 0
            while acc < len(d) and d[acc] == r.target[pos + acc]:
                acc += 1
            r.text.extend(r.target[pos : pos + acc + 1])
            r.verified.append((len(d), acc))
        total = sum(len(d) for d in drafts)
        self.draft_steps += total > 0
        base, per_req, per_draft = self.cost
        self.drafter.clock.now += base + per_req * len(rows) + per_draft * total  # type: ignore[attr-defined]
        return drafts


def _drafter(**kw: object) -> StepDrafter:
    return StepDrafter(max_engine_draft=kw.pop("k", 8), clock=Clock(), **kw)  # type: ignore[arg-type]


def _target(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 5000) for _ in range(n)]


FIXED = DraftSettings(adaptive=False, min_token_prob=0.0)  # draft all the index offers


def test_siblings_draft_from_each_other_and_counts_are_exact() -> None:
    d = _drafter(settings=FIXED)
    eng = Engine(d, (0.1, 0.01, 0.001))
    target = _target(60, 0)
    lead = eng.add(Row("lead-c0", "g", "lead", target))
    for _ in range(30):
        eng.step()
    assert sum(a for _, a in lead.verified) == 0  # nothing to copy yet: its own text is random
    follow = eng.add(Row("f-c0", "g", "f", target))
    assert eng.step()[1] == target[0:8]  # the sibling's continuation, K=8 tokens
    assert eng.step()[1] == target[9:17]  # all 8 accepted + the bonus token
    for _ in range(3):
        eng.step()
    counts = d.take_counts(["f-c0", "lead-c0"])
    # every draft verified so far is counted; the last step's drafts are still pending
    exp = follow.verified[:-1]
    assert counts["f-c0"] == DraftCounts(sum(x for x, _ in exp), sum(a for _, a in exp))
    assert counts["f-c0"].accepted >= 24  # three full drafts copied from the sibling
    assert d.take_counts(["f-c0"]) == {"f-c0": DraftCounts(0, 0)}  # taken once
    snap = d.snapshot()
    assert snap.drafted == counts["f-c0"].drafted + counts["lead-c0"].drafted
    assert snap.groups == 1 and snap.rows == 2


def test_rows_that_leave_keep_their_counts_until_taken_once() -> None:
    d = _drafter(settings=FIXED)
    eng = Engine(d, (0.1, 0.01, 0.001))
    target = _target(40, 1)
    eng.add(Row("a-c0", "g", "a", target))
    for _ in range(40):
        eng.step()
    b = eng.add(Row("b-c0", "g", "b", target))
    eng.add(Row("c-c0", "g", "c", _target(200, 2)))  # keeps the batch going
    while not b.done:
        eng.step()
    eng.step()  # b has left the batch
    exp = b.verified[:-1]  # its last step's drafts were never seen verified
    got = d.take_counts(["b-c0"])
    assert got == {"b-c0": DraftCounts(sum(x for x, _ in exp), sum(a for _, a in exp))}
    assert got["b-c0"].drafted > 0
    assert d.take_counts(["b-c0"]) == {}
    assert d.take_counts(["never-seen"]) == {}


def test_a_rewound_request_continues_under_an_alias() -> None:
    d = _drafter(settings=FIXED)
    eng = Engine(d, (0.1, 0.01, 0.001))
    target = _target(50, 3)
    first = eng.add(Row("r-c0", "g", "r", target))
    for _ in range(20):
        eng.step()
    del eng.rows[first.row_id]
    # the chunk was aborted and its last tokens dropped: the next chunk restarts at 5 tokens
    again = eng.add(Row("r-c1", "g", "r", target, text=list(PROMPT) + target[:5]))
    drafts = eng.step()
    assert drafts == [target[5:13]]  # drafted from the old text, now a sibling
    eng.step()
    assert again.verified[0] == (8, 8)
    assert d.take_counts(["r-c1"])["r-c1"] == DraftCounts(8, 8)


def test_settings_caps_and_switch() -> None:
    target = _target(80, 4)
    d = _drafter(k=3, settings=FIXED)
    eng = Engine(d, (0.1, 0.01, 0.001))
    eng.add(Row("a", "g", "a", target))
    for _ in range(60):
        eng.step()
    eng.add(Row("b", "g", "b", target))
    eng.step()
    assert len(eng.step()[1]) == 3  # the engine's K
    d.configure(DraftSettings(adaptive=False, max_draft=2))
    assert len(eng.step()[1]) == 2  # the operator's max_draft, live
    assert len(eng.step(max_draft=1)[1]) == 1  # the row's own room
    d.configure(DraftSettings(enabled=False))
    assert eng.step() == [[], []]
    with pytest.raises(ValueError, match="max_draft"):
        DraftSettings(max_draft=0)
    with pytest.raises(ValueError, match="min_token_prob"):
        DraftSettings(min_token_prob=1.5)
    with pytest.raises(ValueError, match="probe_priority"):
        DraftSettings(probe_priority=0.5)
    with pytest.raises(ValueError, match="max_engine_draft"):
        StepDrafter(max_engine_draft=0)


def _run_followers(cost: tuple[float, float, float], followers: int, steps: int) -> Engine:
    d = _drafter()
    eng = Engine(d, cost)
    target = _target(6000, 5)
    eng.add(Row("lead", "g", "lead", target, text=list(PROMPT) + target[:-1]))  # fed at once
    eng.step()
    for i in range(followers):
        eng.add(Row(f"f{i}", "g", f"f{i}", target))
    for _ in range(steps):
        eng.step()
    return eng


def test_adaptive_turns_speculation_off_where_draft_tokens_cost_more_than_they_yield() -> None:
    # A draft token costs 5x a request's share of a step: never worth it, even fully accepted.
    eng = _run_followers((0.1, 0.01, 0.05), followers=4, steps=60)
    eng.draft_steps = 0
    for _ in range(200):
        eng.step()
    assert eng.draft_steps <= 20  # exploration only (keeps the step model fed)
    assert eng.drafter.snapshot().step_cost[2] == pytest.approx(0.05, rel=1e-3)


def test_adaptive_keeps_speculation_on_where_it_pays() -> None:
    eng = _run_followers((0.1, 0.01, 0.001), followers=4, steps=60)
    eng.draft_steps = 0
    for _ in range(100):
        eng.step()
    assert eng.draft_steps >= 90


def test_adaptive_switches_on_in_the_tail_when_the_batch_shrinks() -> None:
    # per draft token 0.02 s: not worth it at 32 rows (a plain token costs ~0.011 s), worth it
    # for a single row (a plain token costs 0.205 s).
    cost = (0.2, 0.005, 0.02)
    eng = _run_followers(cost, followers=32, steps=60)
    eng.draft_steps = 0
    for _ in range(100):
        eng.step()
    assert eng.draft_steps <= 10
    for i in range(1, 32):
        del eng.rows[f"f{i}"]
    eng.draft_steps = 0
    for _ in range(30):
        eng.step()
    assert eng.draft_steps >= 25


def test_groups_are_released_when_idle_too_many_or_asked() -> None:
    d = _drafter(settings=FIXED, max_groups=2, group_ttl_s=5.0)
    eng = Engine(d, (0.1, 0.01, 0.001))
    for g in ("g1", "g2", "g3"):
        eng.add(Row(f"{g}-a", g, "a", _target(10, 6)))
    eng.step()
    assert sorted(d.store.group_ids()) == ["g2", "g3"]  # least recently used beyond max_groups
    assert d.take_counts(["g1-a"]) == {"g1-a": DraftCounts(0, 0)}
    del eng.rows["g1-a"]
    assert d.release_groups(["g2", "nope"]) == 1
    assert d.store.group_ids() == ["g3"]
    del eng.rows["g2-a"]
    eng.rows["g3-a"].target = eng.rows["g3-a"].target[:2]  # g3's only row finishes
    eng.step()
    eng.drafter.clock.now += 10.0  # type: ignore[attr-defined]
    eng.add(Row("g4-a", "g4", "a", _target(10, 7)))
    eng.step()
    assert d.store.group_ids() == ["g4"]  # g3 idle past the TTL
