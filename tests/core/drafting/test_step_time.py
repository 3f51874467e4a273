"""StepTimeModel: the online fit of step seconds vs batch and draft tokens."""

from __future__ import annotations

import math

import pytest

from core.drafting.step_time import StepTimeModel


def _feed(m: StepTimeModel, base: float, per_req: float, per_draft: float, n: int = 40) -> None:
    for i in range(n):
        batch = 1 + i % 7
        drafts = 0 if i % 2 else (i % 5) * batch
        m.observe(batch, drafts, base + per_req * batch + per_draft * drafts)


def test_recovers_exact_coefficients() -> None:
    m = StepTimeModel()
    _feed(m, 0.12, 0.014, 0.012)
    base, per_req, per_draft = m.coefficients()
    assert base == pytest.approx(0.12, rel=1e-6)
    assert per_req == pytest.approx(0.014, rel=1e-6)
    assert per_draft == pytest.approx(0.012, rel=1e-6)
    assert m.predict(10, 20) == pytest.approx(0.12 + 0.14 + 0.24, rel=1e-6)
    assert m.draft_token_cost(10) == pytest.approx(0.012 / 0.26, rel=1e-6)


def test_ready_needs_steps_with_and_without_drafts() -> None:
    m = StepTimeModel(min_samples=3)
    for _ in range(10):
        m.observe(4, 0, 0.1)
    assert not m.ready
    assert m.samples_with_drafts == 0
    for _ in range(3):
        m.observe(4, 8, 0.2)
    assert not m.ready  # decayed: 3 observations weigh 2.97 < 3
    m.observe(4, 8, 0.2)
    assert m.ready
    assert m.coefficients()[2] > 0


def test_no_data_and_degenerate_data() -> None:
    m = StepTimeModel()
    assert m.coefficients() == (0.0, 0.0, 0.0)
    assert m.predict(3, 3) == m.floor_s  # clamped, callers may divide by it
    for _ in range(5):  # one batch size, never a draft: slopes not identifiable, no blow-up
        m.observe(2, 0, 0.05)
    assert m.predict(2, 0) == pytest.approx(0.05, rel=1e-3)
    assert all(math.isfinite(c) for c in m.coefficients())


def test_tracks_a_drifting_engine() -> None:
    m = StepTimeModel(decay=0.9)
    _feed(m, 0.10, 0.01, 0.01)
    _feed(m, 0.30, 0.01, 0.01, n=200)  # the engine got slower (longer contexts)
    assert m.coefficients()[0] == pytest.approx(0.30, rel=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"decay": 0.0}, "decay"), ({"min_samples": 0}, "min_samples"), ({"floor_s": 0}, "floor_s")],
)
def test_bad_config(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StepTimeModel(**kwargs)


@pytest.mark.parametrize(
    ("batch", "drafts", "seconds"), [(0, 0, 0.1), (1, -1, 0.1), (1, 0, 0.0), (1, 0, math.inf)]
)
def test_bad_observation(batch: int, drafts: int, seconds: float) -> None:
    with pytest.raises(ValueError):
        StepTimeModel().observe(batch, drafts, seconds)
