import pytest

from core.scheduling.verl import verl_assign


def test_round_robin_from_start() -> None:
    got = [(a.group_id, a.replica) for a in verl_assign(["a", "b", "c", "d", "e"], 3, start=1)]
    assert got == [("a", 1), ("b", 2), ("c", 0), ("d", 1), ("e", 2)]


def test_every_group_once_and_balanced() -> None:
    groups = [f"g{i}" for i in range(10)]
    out = verl_assign(groups, 4)
    assert [a.group_id for a in out] == groups
    counts = [sum(a.replica == r for a in out) for r in range(4)]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize(
    "groups,n,start,msg",
    [(["a"], 0, 0, "num_replicas"), (["a"], 2, 2, "start"), (["a", "a"], 2, 0, "duplicate")],
)
def test_bad_arguments(groups: list[str], n: int, start: int, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        verl_assign(groups, n, start)
