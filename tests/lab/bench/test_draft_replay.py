from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from app.data import ROLLOUTS
from core.drafting.recorded import RecordedGroup, load_groups
from core.drafting.speculate import SpeculationParams
from lab.bench.draft_acceptance import run_replay
from lab.bench.draft_methods import METHODS, method_factory
from lab.bench.draft_replay import Tally, measure_speed, replay_lockstep, replay_references

# SuffixDecoding scoring (no own-text scoring): what the hand computations below use
COUNTS = SpeculationParams(min_token_prob=0.1, backoff=0, own_boost=0.0, sibling_discount=1.0)

# One request repeating "1 2" after prompt [9]; hand-computed with k=2, min_token_prob 0.1:
#  t=0 ctx [9]: nothing follows "9" yet, back to the root: only "9" seen -> draft [9], 0 accepted
#  t=1 ctx [9 1]: root {9:1, 1:1}, tie -> 9 (p .5) then "9"->1 (p .5): [9 1] vs [2 1]: 0
#  t=2 ctx [9 1 2]: root {9,1,2}: [9 1] vs [1 2]: 0
#  t=3 ctx [9 1 2 1]: "1" seen before, followed by 2, then "1 2" by 1: [2 1] vs [2 1]: 2 -> +3
# 6 tokens in 4 steps = 1.5; draft tokens 1 + 2 + 2 + 2 = 7 -> 1.75 per step.
REPEAT = RecordedGroup("rep", (9,), ((1, 2, 1, 2, 1, 2),))

# Two identical requests [1 2 3 4] after prompt [7]; with the other one as a finished reference
# (the same with PPM blending: every continuation there is certain at the deepest level):
#  k=2: t=0 "7" continues 1 2 (p 1): both accepted, +3; t=3: "7 1 2 3" -> [4]: accepted, end.
#       4 tokens in 2 steps = 2.0 per request; draft tokens 2 + 1 = 3 -> 1.5 per step
#  k=4: t=0 draft [1 2 3 4], all accepted: one step, 4.0
TWINS = RecordedGroup("twins", (7,), ((1, 2, 3, 4), (1, 2, 3, 4)))


def test_lockstep_hand_computed_repeat():
    res = replay_lockstep(REPEAT, ["none", "grouped", "suffix-self"], [2], COUNTS)
    assert (res["none"][2].tokens, res["none"][2].steps) == (6, 6)
    g = res["grouped"][2]
    assert (g.tokens, g.steps, g.draft_tokens) == (6, 4, 7)
    assert g.acceptance_length == 1.5
    assert g.draft_tokens_per_step == 1.75
    # with one request, the group index and the request's own index are the same text
    s = res["suffix-self"][2]
    assert (s.tokens, s.steps, s.draft_tokens) == (6, 4, 7)


def test_references_hand_computed_twins():
    res = replay_references(TWINS, ["grouped", "grouped-tree4"], [2, 4], 1, COUNTS)
    for name in ("grouped", "grouped-tree4"):
        assert (res[name][2].tokens, res[name][2].steps, res[name][2].draft_tokens) == (8, 4, 6)
        assert res[name][4].acceptance_length == 4.0
    alone = replay_references(TWINS, ["grouped"], [4], n_refs=0)
    assert alone["grouped"][4].acceptance_length < 4.0


def test_references_rejects_too_many_refs():
    with pytest.raises(ValueError, match="n_refs must be in \\[0, 1\\].*got 2"):
        replay_references(TWINS, ["grouped"], [2], n_refs=2)


def test_lockstep_siblings_never_see_the_future():
    # identical siblings in lockstep: the other one is never ahead, so nothing can be drafted
    # from it; each request only sees positions < t
    res = replay_lockstep(TWINS, ["grouped"], [4])
    assert res["grouped"][4].acceptance_length == 1.0


def test_every_method_runs_and_none_is_exactly_one():
    res = replay_lockstep(REPEAT, list(METHODS), [1, 8])
    for name in METHODS:
        for k in (1, 8):
            t = res[name][k]
            assert t.tokens == 6 and 1 <= t.steps <= 6
    assert res["none"][8].acceptance_length == 1.0
    assert res["none"][8].draft_tokens_per_step == 0.0


def test_unknown_method_lists_valid_names():
    with pytest.raises(ValueError, match="unknown drafting method 'magic'.*grouped"):
        method_factory("magic")


def test_tally_defaults():
    t = Tally()
    assert t.acceptance_length == 1.0 and t.draft_tokens_per_step == 0.0


def _write(path: Path, groups: list[dict]) -> Path:
    with gzip.open(path, "wt") as fh:
        for g in groups:
            fh.write(json.dumps(g) + "\n")
    return path


def _group(gid: str, prompt: list[int], outs: list[list[int]]) -> dict:
    return {
        "group_id": gid,
        "prompt_token_ids": prompt,
        "samples": [{"output_token_ids": o, "finish_reason": "stop"} for o in outs],
    }


def test_load_groups_and_errors(tmp_path: Path):
    p = _write(tmp_path / "a.jsonl.gz", [_group("a", [7], [[1, 2, 3, 4], [1, 2, 3, 4]])])
    (g,) = load_groups(p)
    assert g.outputs == TWINS.outputs and g.num_tokens == 9
    assert g.prompt_text == ""  # the file has no prompt text
    q = _write(tmp_path / "t.jsonl.gz", [{**_group("t", [7], [[1]]), "prompt": "2+2?"}])
    assert load_groups(q)[0].prompt_text == "2+2?"
    with pytest.raises(FileNotFoundError, match="missing"):
        load_groups(tmp_path / "missing.jsonl.gz")
    bad = _write(tmp_path / "b.jsonl.gz", [_group("b", [], [[1]])])
    with pytest.raises(ValueError, match="prompt_token_ids is empty"):
        load_groups(bad)
    bad = _write(tmp_path / "c.jsonl.gz", [_group("c", [1], [[1, -3]])])
    with pytest.raises(ValueError, match="samples\\[0\\].output_token_ids"):
        load_groups(bad)
    dup = _write(tmp_path / "d.jsonl.gz", [_group("x", [1], [[1]]), _group("x", [1], [[2]])])
    with pytest.raises(ValueError, match="duplicate group ids"):
        load_groups(dup)
    plain = tmp_path / "e.jsonl"
    plain.write_text("not json\n")
    with pytest.raises(ValueError, match="e.jsonl:1: not JSON"):
        load_groups(plain)


def test_run_replay_lockstep_totals_are_token_weighted():
    report = run_replay([REPEAT, TWINS], ["none", "grouped"], [2])
    g = report.table["grouped"][2]
    # REPEAT: 6 tokens / 4 steps; TWINS in lockstep: 8 tokens / 8 steps
    assert (g.tokens, g.steps) == (14, 12)
    assert report.speed is not None and report.speed.append_us_per_token > 0
    assert report.speed_method == "grouped"
    assert report.largest_group == "twins"


def test_run_replay_references_labels_and_validation():
    report = run_replay([TWINS], ["grouped"], [4], protocol="references")
    assert report.table["grouped@n=0"][4].acceptance_length < 4.0
    assert report.table["grouped@n=1"][4].acceptance_length == 4.0
    with pytest.raises(ValueError, match="unknown protocol 'x'"):
        run_replay([TWINS], ["grouped"], [4], protocol="x")
    with pytest.raises(ValueError, match="ks must be"):
        run_replay([TWINS], ["grouped"], [0])
    with pytest.raises(ValueError, match="duplicate methods"):
        run_replay([TWINS], ["grouped", "grouped"], [2])
    with pytest.raises(ValueError, match="no groups"):
        run_replay([], ["grouped"], [2])
    none_only = run_replay([TWINS], ["none"], [2])
    assert none_only.speed_method == "grouped" and none_only.speed.speculate_us > 0


def test_run_replay_defaults_cover_every_method_and_k():
    report = run_replay([REPEAT])
    assert list(report.table) == list(METHODS)
    assert all(list(row) == [4, 8, 16] for row in report.table.values())
    assert report.protocol == "lockstep" and report.speed_method == "grouped-tree4"
    assert report.scoring.min_token_prob == 0.01 and report.scoring.backoff == 1
    assert report.scoring.own_boost == 2.0 and report.scoring.sibling_discount == 0.6


def test_measure_speed_on_a_group():
    s = measure_speed(TWINS, "grouped-tree4", 8)
    assert s.append_us_per_token > 0 and s.speculate_us > 0
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        measure_speed(TWINS, "grouped", 8, repeats=0)


DATA = ROLLOUTS
T07 = DATA / "smollm2-t07-public.jsonl.gz"


def test_own_text_scoring_floor_on_a_fixed_real_slice():
    # the single path the engine verifies, on the first two T=0.7 groups (lockstep, k=8):
    # own-text scoring accepts more than plain scoring with the same cut, drafting fewer
    # tokens, and more than the previous default (plain, cut 0.05)
    groups = load_groups(T07)[:2]

    def run(scoring: SpeculationParams) -> Tally:
        total = Tally()
        for g in groups:
            total.add(replay_lockstep(g, ["grouped"], [8], scoring)["grouped"][8])
        return total

    new = run(SpeculationParams())
    plain = run(SpeculationParams(own_boost=0.0, sibling_discount=1.0))
    before = run(SpeculationParams(own_boost=0.0, sibling_discount=1.0, min_token_prob=0.05))
    assert new.acceptance_length >= plain.acceptance_length + 0.02
    assert new.draft_tokens_per_step < plain.draft_tokens_per_step
    assert new.acceptance_length >= before.acceptance_length + 0.03
    assert new.acceptance_length >= 1.84  # measured 1.848 when written
