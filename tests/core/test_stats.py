"""core.stats: chi-square tail, the two-sample chi-square test and the two-sample KS test."""

from __future__ import annotations

import math
import random

import pytest

from core.stats import _kolmogorov_sf, chi2_sf, two_sample_chi2, two_sample_ks


@pytest.mark.parametrize(
    ("x", "df", "p"),
    [
        (3.841458820694124, 1, 0.05),  # textbook critical values
        (6.634896601021214, 1, 0.01),
        (18.307038053275146, 10, 0.05),
        (124.3421134, 100, 0.05),
        (1.0, 2, math.exp(-0.5)),  # df 2: exp(-x/2) exactly
        (40.0, 2, math.exp(-20.0)),
        (0.5, 30, 1.0 - 2.3e-20),  # deep lower tail: series branch
    ],
)
def test_chi2_sf_matches_known_values(x: float, df: int, p: float) -> None:
    assert chi2_sf(x, df) == pytest.approx(p, rel=1e-7, abs=1e-15)


def test_chi2_sf_edges() -> None:
    assert chi2_sf(0.0, 3) == 1.0
    assert chi2_sf(-1.0, 3) == 1.0
    with pytest.raises(ValueError, match="df"):
        chi2_sf(1.0, 0)
    with pytest.raises(ValueError, match="NaN"):
        chi2_sf(math.nan, 1)


def test_same_distribution_is_not_rejected_different_is() -> None:
    rng = random.Random(0)
    weights = [0.4, 0.3, 0.2, 0.1]
    a = rng.choices("abcd", weights, k=2000)
    b = rng.choices("abcd", weights, k=2000)
    assert two_sample_chi2(a, b).p_value > 0.01
    c = rng.choices("abcd", [0.25, 0.25, 0.25, 0.25], k=2000)
    res = two_sample_chi2(a, c)
    assert res.p_value < 1e-10 and res.df == 3


def test_rare_categories_are_pooled() -> None:
    a = ["x"] * 50 + [f"a{i}" for i in range(50)]  # 50 singletons: pooled into "other"
    b = ["x"] * 50 + [f"b{i}" for i in range(50)]
    res = two_sample_chi2(a, b)
    assert res.categories == 2 and res.p_value == pytest.approx(1.0)
    # a sample that collapses onto repeated values (copied tokens) stands out
    copied = [f"c{i // 10}" for i in range(100)]
    assert two_sample_chi2(copied, b).p_value < 1e-10
    assert two_sample_chi2(["x"] * 5, ["x"] * 7).df == 0
    with pytest.raises(ValueError, match="sizes"):
        two_sample_chi2([], ["x"])


@pytest.mark.parametrize(
    ("x", "p"),
    [(1.2238, 0.10), (1.3581, 0.05), (1.6276, 0.01), (1.9495, 0.001), (0.2, 1.0)],
)
def test_kolmogorov_tail_matches_critical_values(x: float, p: float) -> None:
    assert _kolmogorov_sf(x) == pytest.approx(p, rel=2e-3)


def test_ks_tells_a_shift_from_noise() -> None:
    rng = random.Random(1)
    a = [rng.gauss(0.0, 1.0) for _ in range(400)]
    b = [rng.gauss(0.0, 1.0) for _ in range(400)]
    shifted = [rng.gauss(0.6, 1.0) for _ in range(400)]
    assert two_sample_ks(a, b) > 0.01
    assert two_sample_ks(a, shifted) < 1e-6
    assert two_sample_ks(a, a) == 1.0


def test_ks_counts_ties_once() -> None:
    # both samples put half their mass on 0 and half on 1: the same distribution, D = 0
    assert two_sample_ks([0.0, 1.0] * 50, [0.0] * 30 + [1.0] * 30) == 1.0
    # all of a below all of b: D = 1
    assert two_sample_ks([0.0] * 50, [1.0] * 50) < 1e-20


def test_ks_refuses_empty_or_nan_samples() -> None:
    with pytest.raises(ValueError, match="sizes 0 and 2"):
        two_sample_ks([], [1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        two_sample_ks([math.nan], [1.0])
