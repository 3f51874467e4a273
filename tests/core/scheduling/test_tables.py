"""The scheduler's column tables: one entry per slot in every column, in-place compaction."""

from __future__ import annotations

from core.scheduling.estimate import GroupStats
from core.scheduling.tables import GroupTable, RequestTable
from core.scheduling.types import RequestPhase


def _filled() -> tuple[RequestTable, GroupTable]:
    reqs, groups = RequestTable(), GroupTable()
    for g in range(3):
        gi = groups.add(f"g{g}", GroupStats(cap=100), 2)
        for i in range(2):
            r = reqs.add(f"g{g}-{i}", gi, 100, 10 + g, i == 0, 50)
            groups.stats[gi].members.append(r)
    return reqs, groups


def test_add_fills_every_column_with_its_initial_value() -> None:
    reqs, groups = _filled()
    assert {len(c) for c in reqs.columns().values()} == {6} and len(reqs) == 6
    assert {len(c) for c in groups.columns().values()} == {3} and len(groups) == 3
    assert reqs.phase == [RequestPhase.QUEUED] * 6 and reqs.kv_replica == [-1] * 6
    assert reqs.key == [0.0] * 6 and reqs.cancelled == [False] * 6
    assert groups.replica == [-1] * 3 and groups.open == [2] * 3
    assert reqs.index == {f"g{g}-{i}": 2 * g + i for g in range(3) for i in range(2)}
    assert groups.index == {"g0": 0, "g1": 1, "g2": 2}


def test_compact_keeps_order_renumbers_and_rewrites_columns_in_place() -> None:
    reqs, groups = _filled()
    held = reqs.columns()  # the very list objects
    reqs.generated[3] = 7
    keep_g = [0, 2]
    keep_r = [r for gi in keep_g for r in groups.stats[gi].members]
    new_r = {r: k for k, r in enumerate(keep_r)}
    reqs.compact(keep_r, {gi: k for k, gi in enumerate(keep_g)})
    groups.compact(keep_g, new_r)
    assert all(reqs.columns()[name] is col for name, col in held.items())
    assert reqs.request_id == ["g0-0", "g0-1", "g2-0", "g2-1"]
    assert reqs.group == [0, 0, 1, 1] and reqs.prompt == [10, 10, 12, 12]
    assert reqs.generated == [0] * 4  # slot 3 (g1-1) is gone
    assert reqs.index == {rid: k for k, rid in enumerate(reqs.request_id)}
    assert groups.group_id == ["g0", "g2"] and groups.index == {"g0": 0, "g2": 1}
    assert [g.members for g in groups.stats] == [[0, 1], [2, 3]]
    assert {len(c) for c in groups.columns().values()} == {2}
