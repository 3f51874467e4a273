"""Length estimates behind the context orderings."""

from __future__ import annotations

import math

import pytest

from core.scheduling.estimate import (
    DictLengthPrior,
    GroupStats,
    PopulationStats,
    context_remaining,
    remaining_quantile,
)


def test_paper_estimate_starts_at_cap_then_only_grows() -> None:
    g = GroupStats(cap=1000)
    assert g.paper_estimate() == 1000
    g.observe_finished(100)
    assert g.paper_estimate() == 100
    g.observe_finished(50)
    assert g.paper_estimate() == 100
    g.observe_progress(300)
    assert g.paper_estimate() == 300
    g.observe_progress(10)
    assert g.paper_estimate() == 300


def test_remaining_quantile_is_capped_and_conditional() -> None:
    mu = math.log(100)
    assert remaining_quantile(mu, 0.5, 1000, 0, 0.5) == pytest.approx(100, rel=1e-6)
    # given it survived to 200 the median total is above 200, never above the cap
    left = remaining_quantile(mu, 0.5, 1000, 200, 0.5)
    assert 0 < left < 800
    assert remaining_quantile(mu, 0.5, 1000, 1000, 0.5) == 0.0
    assert remaining_quantile(math.log(1e6), 0.5, 1000, 10, 0.9) == 990


def test_context_estimate_uses_evidence_and_prior() -> None:
    pop = PopulationStats(prior_sigma=0.5)
    unknown = GroupStats(cap=10_000)
    short = GroupStats(cap=10_000)
    for x in (100, 120, 90):
        short.observe_finished(x)
    seeded = GroupStats(cap=10_000)
    seeded.seed_prior([3000, 4000], weight_each=0.5)
    est = [context_remaining(g, pop, 0, 0.5) for g in (unknown, short, seeded)]
    assert est[0] > est[2] > est[1]
    assert est[1] == pytest.approx(math.exp(sum(map(math.log, (100, 120, 90))) / 3), rel=1e-6)


def test_population_sigma_learns_within_group_spread() -> None:
    pop = PopulationStats(prior_sigma=1.0, prior_dof=1.0)
    for base in (100, 1000, 5000):
        g = GroupStats(cap=100_000)
        for f in (0.9, 1.1) * 20:
            pop.observe_finished(g, int(base * f))
        assert g.n_finished == 40
    assert pop.sigma == 1.0  # until refreshed
    pop.refresh()
    assert pop.sigma < 0.2
    # the running sums equal the within-group sum of squares computed from scratch
    one = math.log(90), math.log(110)
    mean = sum(one) / 2
    assert pop.dof == 3 * 39
    assert pop.ss == pytest.approx(3 * 20 * sum((x - mean) ** 2 for x in one), rel=1e-3)


def test_dict_prior_rejects_bad_lengths() -> None:
    with pytest.raises(ValueError, match=r"'k'.*\[0\]"):
        DictLengthPrior({"k": [0]})
    assert DictLengthPrior({"k": [3]}).lengths("k") == [3]
    assert DictLengthPrior({}).lengths("x") is None
