from __future__ import annotations

import math

import pytest

from core.drafting.adaptive import (
    AdaptiveDraftConfig,
    DraftCandidate,
    choose_draft_lengths,
    expected_time_per_token,
    expected_tokens_per_step,
)


def test_expected_time_per_token_formula():
    # (1-a)(D+T)/(1-a^(g+1)) with a=.5, g=3, D=1ms, T=20ms
    assert expected_time_per_token(0.5, 3, 0.001, 0.02) == pytest.approx(0.5 * 0.021 / (1 - 0.5**4))
    assert expected_time_per_token(0.5, 0, 0.001, 0.02) == 0.02  # no speculation: T
    assert expected_time_per_token(1.0, 3, 0.0, 0.02) == pytest.approx(0.005)  # a=1: (D+T)/(g+1)
    assert expected_time_per_token(0.0, 4, 0.001, 0.02) == pytest.approx(0.021)  # pure overhead
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)
    # continuity at a -> 1
    assert expected_time_per_token(1 - 1e-9, 3, 0.0, 0.02) == pytest.approx(0.005)


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        ((1.5, 1, 0.0, 1.0), "acceptance must be in \\[0, 1\\], got 1.5"),
        ((math.nan, 1, 0.0, 1.0), "acceptance must be in \\[0, 1\\], got nan"),
        ((0.5, -1, 0.0, 1.0), "g must be >= 0, got -1"),
        ((0.5, 1, -1.0, 1.0), "draft_time_s must be >= 0, got -1.0"),
        ((0.5, 1, 0.0, 0.0), "target_time_s must be > 0, got 0.0"),
    ],
)
def test_expected_time_validation(args, msg):
    with pytest.raises(ValueError, match=msg):
        expected_time_per_token(*args)


def test_config_defaults_and_validation():
    c = AdaptiveDraftConfig()
    assert (c.g_max, c.probe_priority) == (8, 2.0)
    for kwargs, msg in [
        ({"g_max": 0}, "g_max must be in \\[1, 64\\], got 0"),
        ({"probe_priority": 0.5}, "probe_priority must be >= 1.0, got 0.5"),
        ({"step_token_budget": -1}, "step_token_budget must be >= 0, got -1"),
        ({"min_gain": 1.0}, "min_gain must be in \\[0, 1\\), got 1.0"),
        ({"draft_time_s": 2.0}, "draft_time_s must be in \\[0, 1\\] s, got 2.0"),
        ({"min_acceptance": -0.1}, "min_acceptance must be in \\[0, 1\\], got -0.1"),
    ]:
        with pytest.raises(ValueError, match=msg):
            AdaptiveDraftConfig(**kwargs)
    with pytest.raises(ValueError, match="acceptance of 'r' must be in \\[0, 1\\], got 2"):
        DraftCandidate("r", 2)
    with pytest.raises(ValueError, match="request_id must be a non-empty string"):
        DraftCandidate("", 0.5)


def memory_bound(batch: int, draft_tokens: int) -> float:
    """Step time nearly flat in tokens: speculation is almost free."""
    return 0.02 + 1e-6 * (batch + draft_tokens)


def compute_bound(batch: int, draft_tokens: int) -> float:
    """Step time proportional to tokens: every draft token costs as much as a real one."""
    return 1e-3 * (batch + draft_tokens)


def test_memory_bound_drafts_long_and_probes_first():
    cands = [
        DraftCandidate("x", 0.3),
        DraftCandidate("p", 0.7, is_probe=True),
        DraftCandidate("y", 0.7),
    ]
    got = choose_draft_lengths(cands, memory_bound)  # default config
    assert list(got) == ["p", "x", "y"]  # probes first
    assert got["p"] == 8 and got["y"] >= got["x"] >= 1
    assert all(0 <= g <= 8 for g in got.values())


def test_compute_bound_turns_speculation_off():
    cands = [DraftCandidate(f"r{i}", 0.3) for i in range(64)]
    assert set(choose_draft_lengths(cands, compute_bound).values()) == {0}


def test_budget_and_priority_split_tokens():
    cands = [DraftCandidate("a", 0.6), DraftCandidate("p", 0.6, is_probe=True)]
    cfg = AdaptiveDraftConfig(step_token_budget=3)
    got = choose_draft_lengths(cands, memory_bound, cfg)
    assert sum(got.values()) == 3
    assert got["p"] > got["a"]  # weight 2 * .6^g beats .6^g until the probe is far ahead
    assert choose_draft_lengths(cands, memory_bound, AdaptiveDraftConfig(step_token_budget=0)) == {
        "p": 0,
        "a": 0,
    }


def test_min_gain_and_min_acceptance():
    cands = [DraftCandidate("a", 0.05)]
    # a tiny expected gain does not clear a 50% bar
    assert choose_draft_lengths(cands, memory_bound, AdaptiveDraftConfig(min_gain=0.5)) == {"a": 0}
    strict = AdaptiveDraftConfig(min_acceptance=0.5)
    assert choose_draft_lengths([DraftCandidate("a", 0.4)], memory_bound, strict) == {"a": 0}
    assert choose_draft_lengths([DraftCandidate("a", 0.0)], memory_bound) == {"a": 0}
    assert choose_draft_lengths([], memory_bound) == {}


def test_choose_rejects_bad_inputs():
    with pytest.raises(ValueError, match="duplicate request ids among candidates: \\['a'\\]"):
        choose_draft_lengths([DraftCandidate("a", 0.5), DraftCandidate("a", 0.5)], memory_bound)
    with pytest.raises(ValueError, match="step_time\\(1, 0\\) must be > 0 s, got 0"):
        choose_draft_lengths([DraftCandidate("a", 0.5)], lambda b, d: 0)
