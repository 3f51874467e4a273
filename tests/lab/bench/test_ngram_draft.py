from __future__ import annotations

import pytest

from lab.bench.ngram_draft import ngram_draft


def test_longest_n_first_then_earliest_occurrence():
    ctx = [1, 2, 3, 9, 2, 3, 8, 1, 2, 3]
    # n=3 "1 2 3" occurs at 0 -> follows 9 2 3
    assert ngram_draft(ctx, 3).tokens == (9, 2, 3)
    assert ngram_draft(ctx, 3).match_length == 3
    # n=2 only: "2 3" earliest at 1 -> 9 2
    assert ngram_draft([5, 2, 3, 9, 2, 3, 7, 2, 3], 2, min_n=2, max_n=2).tokens == (9, 2)


def test_no_match_and_zero_budget():
    assert len(ngram_draft([1, 2, 3, 4], 4)) == 0
    assert len(ngram_draft([1, 2, 1, 2], 0)) == 0
    assert len(ngram_draft([1], 4)) == 0


def test_validation():
    with pytest.raises(ValueError, match="min_n=3, max_n=2"):
        ngram_draft([1, 2], 2, min_n=3, max_n=2)
    with pytest.raises(ValueError, match="max_tokens must be >= 0, got -1"):
        ngram_draft([1, 2], -1)
