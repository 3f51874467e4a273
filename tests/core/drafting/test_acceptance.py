from __future__ import annotations

import pytest

from core.drafting.acceptance import AcceptanceEstimator, match_bucket


def test_buckets():
    assert [match_bucket(n) for n in (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 1000)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
        4,
        4,
        5,
        5,
    ]
    with pytest.raises(ValueError, match="match_length must be >= 0, got -1"):
        match_bucket(-1)


def test_prior_then_learns_per_group_and_bucket():
    est = AcceptanceEstimator(prior=0.3, prior_weight=4.0, decay=1.0)
    assert est.estimate("g", 10) == pytest.approx(0.3)
    for _ in range(50):
        est.observe("g", 10, drafted=4, accepted=4)  # long matches: always accepted
        est.observe("g", 1, drafted=4, accepted=0)  # short matches: never
    assert est.estimate("g", 10) > 0.85
    assert est.estimate("g", 1) < 0.1
    # another group backs off to the global buckets
    assert est.estimate("h", 10) > 0.85 and est.estimate("h", 1) < 0.1
    est.forget_group("g")
    assert est.estimate("g", 10) == est.estimate("h", 10)


def test_trials_count_only_tokens_actually_tried():
    est = AcceptanceEstimator(prior=0.5, prior_weight=1e-9, decay=1.0)
    est.observe("g", 5, drafted=8, accepted=2)  # 2 successes, 1 failure, 5 never tried
    assert est.estimate("g", 5) == pytest.approx(2 / 3)
    est.observe("g", 5, drafted=0, accepted=0)  # nothing drafted: no evidence
    assert est.estimate("g", 5) == pytest.approx(2 / 3)


def test_validation():
    with pytest.raises(ValueError, match="prior must be in \\[0, 1\\], got 2"):
        AcceptanceEstimator(prior=2)
    with pytest.raises(ValueError, match="prior_weight must be > 0, got 0"):
        AcceptanceEstimator(prior_weight=0)
    with pytest.raises(ValueError, match="decay must be in \\(0, 1\\], got 0"):
        AcceptanceEstimator(decay=0)
    with pytest.raises(ValueError, match="accepted=3, drafted=2"):
        AcceptanceEstimator().observe("g", 1, drafted=2, accepted=3)
