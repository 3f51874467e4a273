from __future__ import annotations

import pytest

from core.drafting.draft import EMPTY_DRAFT, Draft


def test_path_accepts_longest_matching_prefix():
    d = Draft((1, 2, 3), (-1, 0, 1), (0.9, 0.5, 0.2), match_length=4)
    assert d.is_path and d.depth == 3 and len(d) == 3
    assert d.accepted_length([1, 2, 9]) == 2
    assert d.accepted_length([1, 2, 3, 4]) == 3
    assert d.accepted_length([1]) == 1  # limited by the real continuation
    assert d.accepted_length([5]) == 0


def test_tree_accepts_longest_matching_path():
    #        root
    #       /    \
    #      1(0)   4(1)
    #     /   \      \
    #   2(2)  5(3)   6(4)
    #   |
    #   3(5)
    d = Draft((1, 4, 2, 5, 6, 3), (-1, -1, 0, 0, 1, 2), (0.5, 0.4, 0.3, 0.2, 0.2, 0.1))
    assert not d.is_path and d.depth == 3
    assert d.accepted_length([1, 2, 3, 7]) == 3
    assert d.accepted_length([1, 5, 3]) == 2
    assert d.accepted_length([4, 6]) == 2
    assert d.accepted_length([4, 2]) == 1
    assert d.accepted_length([9]) == 0
    assert EMPTY_DRAFT.accepted_length([1, 2]) == 0 and EMPTY_DRAFT.depth == 0


def test_draft_validation_names_the_bad_value():
    with pytest.raises(ValueError, match="lengths differ: 2/1/2"):
        Draft((1, 2), (-1,), (1.0, 1.0))
    with pytest.raises(ValueError, match=r"parents\[1\]=1 must be in \[-1, 1\)"):
        Draft((1, 2), (-1, 1), (1.0, 1.0))
